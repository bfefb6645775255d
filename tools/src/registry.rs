//! The [`Registry`]: every tool the process knows, and the toolsets that group them. Views
//! ([`ToolsetView`]) are cut from it; nothing calls a tool through the registry directly.

use crate::sync::lock;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::ToolsError;
use crate::search::Catalog;
use crate::tool::ToolDef;
use crate::view::{ToolsetView, ViewSpec};

/// Catalog indexes kept for reuse, keyed by catalog fingerprint. Small: a process rarely has
/// more than a handful of distinct scopes alive at once.
const INDEX_CACHE_CAPACITY: usize = 32;

/// A registered tool with the hash of its definition, computed once at registration.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) def: Arc<ToolDef>,
    pub(crate) hash: u64,
}

#[derive(Default)]
struct State {
    /// Tools in registration order: that order is the catalog order, which breaks score ties.
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
    /// Composite toolsets: name -> the toolsets (plain or composite) it includes.
    composites: HashMap<String, Vec<String>>,
}

/// Every tool the process knows, grouped in toolsets. Cheap to share (`Arc<Registry>`); changes
/// (an MCP server's tool list changing) bump its version, and views built before the change keep
/// their snapshot until they are refreshed.
pub struct Registry {
    state: RwLock<State>,
    version: AtomicU64,
    /// Tool sources (MCP servers) still starting, whose tools are not registered yet.
    starting: Mutex<BTreeSet<String>>,
    /// Woken whenever a source stops starting (it is ready, or it failed).
    source_settled: tokio::sync::Notify,
    /// Built catalogs, shared by every view with the same deferred tools.
    indexes: Mutex<HashMap<u64, Arc<Catalog>>>,
    /// The tool gateway of hosted connectors, when configured; views holding
    /// `manage_connections` reach it.
    connectors: RwLock<Option<Arc<crate::connectors::Gateway>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("version", &self.version())
            .field("tools", &self.len())
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            state: RwLock::new(State::default()),
            version: AtomicU64::new(0),
            starting: Mutex::new(BTreeSet::new()),
            source_settled: tokio::sync::Notify::new(),
            indexes: Mutex::new(HashMap::new()),
            connectors: RwLock::new(None),
        }
    }
}

impl Registry {
    /// Marks a tool source (an MCP server) as starting, or no longer starting: the bridge
    /// tells the model which sources may still bring tools.
    pub fn set_starting(&self, source: &str, starting: bool) {
        let mut set = lock(&self.starting);
        if starting {
            set.insert(source.to_string());
        } else if set.remove(source) {
            drop(set);
            self.source_settled.notify_waiters();
        }
    }

    /// Waits until `settled()` holds, looking again whenever a tool source stops starting, or
    /// until `limit` passed; returns `settled()`. A call that needs a tool a starting server
    /// may bring waits here instead of failing.
    pub async fn wait_until(&self, limit: std::time::Duration, settled: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the check, so a source settling in between still wakes us.
            let next = self.source_settled.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            if settled() {
                return true;
            }
            if tokio::time::timeout_at(deadline, next).await.is_err() {
                return settled();
            }
        }
    }

    /// Attaches (or, with `None`, detaches) the connector gateway.
    pub fn set_connectors(&self, gateway: Option<Arc<crate::connectors::Gateway>>) {
        *self.connectors.write().unwrap_or_else(|e| e.into_inner()) = gateway;
    }

    /// The connector gateway, when one is attached. Views use
    /// [`ToolsetView::connectors`], which applies the scope.
    pub(crate) fn connectors(&self) -> Option<Arc<crate::connectors::Gateway>> {
        self.connectors
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The tool sources still starting, by name.
    pub fn starting(&self) -> Vec<String> {
        lock(&self.starting).iter().cloned().collect()
    }

    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Registry::default())
    }

    /// A registry holding `defs`, in order.
    pub fn with_tools(defs: impl IntoIterator<Item = ToolDef>) -> Arc<Self> {
        let registry = Registry::new();
        for def in defs {
            registry.register(def);
        }
        registry
    }

    /// Adds a tool, or replaces the one with the same name (keeping its place in the order).
    pub fn register(&self, def: ToolDef) {
        let entry = Arc::new(Entry {
            hash: def_hash(&def),
            def: Arc::new(def),
        });
        let mut state = write(&self.state);
        match state.by_name.get(&entry.def.name) {
            Some(&i) => state.entries[i] = entry,
            None => {
                let i = state.entries.len();
                state.by_name.insert(entry.def.name.clone(), i);
                state.entries.push(entry);
            }
        }
        drop(state);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Replaces every tool of `toolset` with `defs` (an MCP server's refreshed list). Tools keep
    /// their order; new ones go to the end.
    pub fn replace_toolset(&self, toolset: &str, defs: Vec<ToolDef>) {
        let mut state = write(&self.state);
        let keep: Vec<Arc<Entry>> = state
            .entries
            .iter()
            .filter(|e| e.def.toolset.as_deref() != Some(toolset))
            .cloned()
            .collect();
        let mut old_order: HashMap<String, usize> = HashMap::new();
        for (i, e) in state.entries.iter().enumerate() {
            if e.def.toolset.as_deref() == Some(toolset) {
                old_order.insert(e.def.name.clone(), i);
            }
        }
        let mut positioned: Vec<(usize, Arc<Entry>)> = keep
            .into_iter()
            .map(|e| (state.by_name[&e.def.name], e))
            .collect();
        let tail = state.entries.len();
        for (n, def) in defs.into_iter().enumerate() {
            let pos = old_order.get(&def.name).copied().unwrap_or(tail + n);
            positioned.push((
                pos,
                Arc::new(Entry {
                    hash: def_hash(&def),
                    def: Arc::new(def),
                }),
            ));
        }
        positioned.sort_by_key(|(pos, _)| *pos);
        state.entries = positioned.into_iter().map(|(_, e)| e).collect();
        state.by_name = state
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.def.name.clone(), i))
            .collect();
        drop(state);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Removes a tool; returns whether it was there.
    pub fn unregister(&self, name: &str) -> bool {
        let mut state = write(&self.state);
        let Some(i) = state.by_name.remove(name) else {
            return false;
        };
        state.entries.remove(i);
        state.by_name = state
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.def.name.clone(), i))
            .collect();
        drop(state);
        self.version.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Defines a composite toolset that stands for the union of `includes` (toolsets or other
    /// composites). A cycle is refused when the composite is expanded, not here.
    pub fn define_toolset(&self, name: impl Into<String>, includes: Vec<String>) {
        write(&self.state).composites.insert(name.into(), includes);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Bumped by every change; views compare it to know when they are stale.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        read(&self.state).entries.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The definition of `name`, whatever view it is in.
    pub fn get(&self, name: &str) -> Option<Arc<ToolDef>> {
        let state = read(&self.state);
        state
            .by_name
            .get(name)
            .map(|&i| Arc::clone(&state.entries[i].def))
    }

    /// Every registered name, in order.
    pub fn names(&self) -> Vec<String> {
        read(&self.state)
            .entries
            .iter()
            .map(|e| e.def.name.clone())
            .collect()
    }

    /// Every toolset name in use (plain and composite), sorted.
    pub fn toolsets(&self) -> BTreeSet<String> {
        let state = read(&self.state);
        let mut out: BTreeSet<String> = state
            .entries
            .iter()
            .filter_map(|e| e.def.toolset.clone())
            .collect();
        out.extend(state.composites.keys().cloned());
        out
    }

    /// Expands toolset names (composites included) to the plain toolsets they stand for.
    pub fn expand_toolsets(&self, names: &[String]) -> Result<HashSet<String>, ToolsError> {
        let state = read(&self.state);
        let mut out = HashSet::new();
        for name in names {
            expand_into(&state.composites, name, &mut Vec::new(), &mut out)?;
        }
        Ok(out)
    }

    /// A view of the tools `spec` grants.
    pub fn view(self: &Arc<Self>, spec: ViewSpec) -> Result<ToolsetView, ToolsError> {
        ToolsetView::build(Arc::clone(self), spec)
    }

    /// A view of every registered tool.
    pub fn view_all(self: &Arc<Self>) -> ToolsetView {
        // An empty spec cannot fail: there is nothing to expand.
        ToolsetView::build(Arc::clone(self), ViewSpec::all())
            .unwrap_or_else(|_| ToolsetView::empty(Arc::clone(self)))
    }

    pub(crate) fn snapshot(&self) -> (u64, Vec<Arc<Entry>>) {
        let state = read(&self.state);
        (self.version(), state.entries.clone())
    }

    /// The catalog for `key`, building it with `build` the first time.
    pub(crate) fn cached_catalog(&self, key: u64, build: impl FnOnce() -> Catalog) -> Arc<Catalog> {
        if let Some(found) = lock(&self.indexes).get(&key) {
            return Arc::clone(found);
        }
        // Built outside the lock: two racing builders make equal catalogs; one wins the slot.
        let built = Arc::new(build());
        let mut indexes = lock(&self.indexes);
        if indexes.len() >= INDEX_CACHE_CAPACITY {
            indexes.clear();
        }
        Arc::clone(indexes.entry(key).or_insert(built))
    }
}

fn expand_into(
    composites: &HashMap<String, Vec<String>>,
    name: &str,
    stack: &mut Vec<String>,
    out: &mut HashSet<String>,
) -> Result<(), ToolsError> {
    match composites.get(name) {
        None => {
            out.insert(name.to_string());
            Ok(())
        }
        Some(includes) => {
            if stack.iter().any(|s| s == name) {
                stack.push(name.to_string());
                return Err(ToolsError::ToolsetCycle {
                    path: stack.join(" -> "),
                });
            }
            stack.push(name.to_string());
            for inner in includes {
                expand_into(composites, inner, stack, out)?;
            }
            stack.pop();
            Ok(())
        }
    }
}

/// A stable hash of everything about a definition that search, describe and listing read.
fn def_hash(def: &ToolDef) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    def.name.hash(&mut h);
    def.description.hash(&mut h);
    def.parameters.as_ref().map(|p| p.to_string()).hash(&mut h);
    def.toolset.hash(&mut h);
    def.source_name.hash(&mut h);
    def.kind.hash(&mut h);
    h.finish()
}

// A poisoned lock only means another thread panicked mid-update of plain data; the data is still
// the last complete write, so carry on with it.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn waiting_ends_when_the_last_source_settles() {
        let registry = Registry::new();
        let none_starting = |r: &Registry| r.starting().is_empty();
        assert!(
            registry
                .wait_until(Duration::ZERO, || none_starting(&registry))
                .await
        );
        registry.set_starting("slow", true);
        registry.set_starting("slower", true);
        assert!(
            !registry
                .wait_until(Duration::from_millis(20), || none_starting(&registry))
                .await
        );
        let waiter = {
            let registry = Arc::clone(&registry);
            tokio::spawn(async move {
                registry
                    .wait_until(Duration::from_secs(30), || none_starting(&registry))
                    .await
            })
        };
        registry.set_starting("slow", false);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one source is still starting");
        registry.set_starting("slower", false);
        assert!(waiter.await.unwrap());
    }
}
