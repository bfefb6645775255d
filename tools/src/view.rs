//! [`ToolsetView`]: the scoped, immutable window through which a session, subagent or worker sees
//! and calls tools. A tool outside the view does not exist for its holder: it is never found,
//! described or called.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::config::{DeferSet, ToolSearchConfig};
use crate::deferral::is_deferrable;
use crate::error::ToolsError;
use crate::registry::{Entry, Registry};
use crate::search::{Assembly, Catalog};
use crate::tool::{CallContext, ToolDef, ToolResult};

/// Which tools a view grants: the enabled toolsets (all when `None`), minus the disabled ones,
/// minus single blocked tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewSpec {
    /// Toolsets (plain or composite) to grant; `None` grants every tool, unassigned ones too.
    pub enabled: Option<Vec<String>>,
    /// Toolsets (plain or composite) to take away again.
    pub disabled: Vec<String>,
    /// Tool names to take away whatever their toolset.
    pub blocked: Vec<String>,
}

impl ViewSpec {
    /// Grants everything.
    pub fn all() -> Self {
        ViewSpec::default()
    }

    /// Grants only these toolsets.
    pub fn toolsets<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        ViewSpec {
            enabled: Some(names.into_iter().map(Into::into).collect()),
            ..ViewSpec::default()
        }
    }

    /// Also takes these toolsets away.
    pub fn without_toolsets<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.disabled.extend(names.into_iter().map(Into::into));
        self
    }

    /// Also takes these tools away.
    pub fn blocking<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.blocked.extend(names.into_iter().map(Into::into));
        self
    }
}

/// How many tool lists a view keeps, one per context length and settings it was asked for.
const ASSEMBLIES_KEPT: usize = 4;

/// An immutable, cheap-to-clone scoped view of a [`Registry`].
///
/// A view narrowed from another ([`ToolsetView::narrow`]) applies its parent's specs first, so it
/// can only ever hold fewer tools, never more.
#[derive(Clone)]
pub struct ToolsetView {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Arc<Registry>,
    /// The specs applied in order: the root's first, then each narrowing.
    specs: Vec<ViewSpec>,
    /// The registry version this snapshot was cut from.
    version: u64,
    tools: Vec<Arc<ToolDef>>,
    by_name: HashMap<String, usize>,
    /// Hash of the tool definitions in the view, in order: the catalog version.
    fingerprint: u64,
    /// The tool lists assembled from this view, with the context length and settings each was
    /// made for, newest last (see [`ToolsetView::assembled`]).
    assembled: Mutex<Vec<(Option<i64>, ToolSearchConfig, Assembly)>>,
}

impl std::fmt::Debug for ToolsetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsetView")
            .field("tools", &self.inner.tools.len())
            .field("specs", &self.inner.specs)
            .field("fingerprint", &self.inner.fingerprint)
            .finish()
    }
}

impl ToolsetView {
    pub(crate) fn build(registry: Arc<Registry>, spec: ViewSpec) -> Result<Self, ToolsError> {
        Self::from_specs(registry, vec![spec])
    }

    pub(crate) fn empty(registry: Arc<Registry>) -> Self {
        Self::from_entries(registry, Vec::new(), 0, Vec::new())
    }

    fn from_specs(registry: Arc<Registry>, specs: Vec<ViewSpec>) -> Result<Self, ToolsError> {
        let (version, mut entries) = registry.snapshot();
        for spec in &specs {
            entries = apply_spec(&registry, spec, entries)?;
        }
        Ok(Self::from_entries(registry, specs, version, entries))
    }

    fn from_entries(
        registry: Arc<Registry>,
        specs: Vec<ViewSpec>,
        version: u64,
        entries: Vec<Arc<Entry>>,
    ) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        entries.len().hash(&mut h);
        for e in &entries {
            e.hash.hash(&mut h);
        }
        let tools: Vec<Arc<ToolDef>> = entries.iter().map(|e| Arc::clone(&e.def)).collect();
        let by_name = tools
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), i))
            .collect();
        ToolsetView {
            inner: Arc::new(Inner {
                registry,
                specs,
                version,
                tools,
                by_name,
                fingerprint: h.finish(),
                assembled: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A narrower view: this view's tools filtered by `spec`. Never wider than `self`.
    pub fn narrow(&self, spec: ViewSpec) -> Result<Self, ToolsError> {
        let mut specs = self.inner.specs.clone();
        specs.push(spec);
        Self::from_specs(Arc::clone(&self.inner.registry), specs)
    }

    /// The same scope over the registry as it is now, or `self` when nothing changed.
    pub fn refreshed(&self) -> Result<Self, ToolsError> {
        if self.inner.registry.version() == self.inner.version {
            return Ok(self.clone());
        }
        Self::from_specs(Arc::clone(&self.inner.registry), self.inner.specs.clone())
    }

    /// Tool sources (MCP servers, named by their toolset) still starting whose tools this view
    /// would grant: their tools are not in it yet.
    pub fn sources_starting(&self) -> Vec<String> {
        let registry = &self.inner.registry;
        let mut starting = registry.starting();
        starting.retain(|source| {
            self.inner
                .specs
                .iter()
                .all(|spec| spec_grants(registry, spec, source))
        });
        starting
    }

    /// Waits (at most `limit`) until none of [`Self::sources_starting`] is left; true when
    /// none is. Refresh the view afterwards to see the tools they brought.
    pub async fn wait_sources_settled(&self, limit: std::time::Duration) -> bool {
        self.inner
            .registry
            .wait_until(limit, || self.sources_starting().is_empty())
            .await
    }

    /// Whether the registry changed since this view was cut.
    pub fn is_stale(&self) -> bool {
        self.inner.registry.version() != self.inner.version
    }

    /// Every tool in the view, in registry order.
    pub fn tools(&self) -> &[Arc<ToolDef>] {
        &self.inner.tools
    }

    /// The tool called `name`, if the view holds it.
    pub fn get(&self, name: &str) -> Option<&Arc<ToolDef>> {
        self.inner.by_name.get(name).map(|&i| &self.inner.tools[i])
    }

    /// Whether the view holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.inner.by_name.contains_key(name)
    }

    /// How many tools the view holds.
    pub fn len(&self) -> usize {
        self.inner.tools.len()
    }

    /// Whether the view holds no tool.
    pub fn is_empty(&self) -> bool {
        self.inner.tools.is_empty()
    }

    /// The catalog version: a hash of the definitions in the view.
    pub fn fingerprint(&self) -> u64 {
        self.inner.fingerprint
    }

    /// The registry the view was cut from, for callers that must tell "not in your view" from
    /// "does not exist" in a message. Never use it to reach a tool outside the view.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// The connector gateway, when one is attached and this view grants connectors (it holds
    /// `manage_connections`).
    pub fn connectors(&self) -> Option<Arc<crate::connectors::Gateway>> {
        if !self.contains(crate::deferral::MANAGE_CONNECTIONS) {
            return None;
        }
        self.inner.registry.connectors()
    }

    /// The tool `name` runs as: the view's own, or, for a `connectors__` name in a view that
    /// grants connectors, a definition that runs it on the gateway.
    pub fn runnable(&self, name: &str) -> Option<Arc<ToolDef>> {
        if let Some(def) = self.get(name) {
            return Some(Arc::clone(def));
        }
        if !crate::connectors::is_connector_name(name) {
            return None;
        }
        let gateway = self.connectors()?;
        Some(Arc::new(crate::connectors::executable_def(&gateway, name)))
    }

    /// Whether `name` is deferred behind the bridge in this view under `defer`.
    pub fn is_deferred(&self, name: &str, defer: &DeferSet) -> bool {
        self.get(name)
            .is_some_and(|d| is_deferrable(d, Some(defer)))
    }

    /// The searchable catalog of this view's deferrable tools, built once per catalog version
    /// and `defer` set, then shared.
    pub fn catalog(&self, defer: &DeferSet) -> Arc<Catalog> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.fingerprint.hash(&mut h);
        defer.hash(&mut h);
        let key = h.finish();
        self.inner.registry.cached_catalog(key, || {
            Catalog::build(
                self.inner
                    .tools
                    .iter()
                    .filter(|d| is_deferrable(d, Some(defer)))
                    .cloned()
                    .collect(),
            )
        })
    }

    /// The assembly `build` makes for `context_length` and `config`, made once per view and
    /// those inputs: the sessions over one view (a board profile's workers, a chat's turns)
    /// share its tool list instead of writing every definition out again for each request.
    /// The view's tools never change, so only those inputs decide. A few input sets are kept,
    /// for profiles that share a view but not their model's context length or settings.
    pub(crate) fn assembled(
        &self,
        context_length: Option<i64>,
        config: &ToolSearchConfig,
        build: impl FnOnce() -> Assembly,
    ) -> Assembly {
        let found = crate::sync::lock(&self.inner.assembled)
            .iter()
            .find(|(length, settings, _)| *length == context_length && settings == config)
            .map(|(_, _, assembly)| assembly.clone());
        if let Some(assembly) = found {
            return assembly;
        }
        let built = build();
        let mut kept = crate::sync::lock(&self.inner.assembled);
        if kept.len() >= ASSEMBLIES_KEPT {
            kept.remove(0);
        }
        kept.push((context_length, config.clone(), built.clone()));
        built
    }

    /// Runs `name` with `arguments`. A name outside the view, or a catalog-only definition,
    /// gives an error result rather than a panic.
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> ToolResult {
        let Some(def) = self.runnable(name) else {
            return ToolResult::error(format!(
                "There is no tool called '{name}' in this session. Check the name against the tools you were given, or use tool_search to find a deferred one."
            ));
        };
        match &def.handler {
            Some(handler) => handler.call(arguments, ctx).await,
            None => ToolResult::error(format!(
                "The tool '{name}' is listed in the catalog but nothing in this process can run it."
            )),
        }
    }
}

/// Whether `spec` grants the tools of `toolset` (a toolset name it cannot expand counts as
/// granted, so a wait errs on the side of waiting).
fn spec_grants(registry: &Registry, spec: &ViewSpec, toolset: &str) -> bool {
    let enabled = match &spec.enabled {
        Some(names) => registry
            .expand_toolsets(names)
            .map_or(true, |set| set.contains(toolset)),
        None => true,
    };
    let disabled = registry
        .expand_toolsets(&spec.disabled)
        .is_ok_and(|set| set.contains(toolset));
    enabled && !disabled
}

fn apply_spec(
    registry: &Registry,
    spec: &ViewSpec,
    entries: Vec<Arc<Entry>>,
) -> Result<Vec<Arc<Entry>>, ToolsError> {
    let enabled = match &spec.enabled {
        Some(names) => Some(registry.expand_toolsets(names)?),
        None => None,
    };
    let disabled = registry.expand_toolsets(&spec.disabled)?;
    let blocked: HashSet<&str> = spec.blocked.iter().map(String::as_str).collect();
    Ok(entries
        .into_iter()
        .filter(|e| {
            let toolset = e.def.toolset.as_deref();
            let granted = match (&enabled, toolset) {
                (None, _) => true,
                (Some(set), Some(ts)) => set.contains(ts),
                (Some(_), None) => false,
            };
            granted
                && !toolset.is_some_and(|ts| disabled.contains(ts))
                && !blocked.contains(e.def.name.as_str())
        })
        .collect())
}
