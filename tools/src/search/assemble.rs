//! Assembling the tool list a model sees. With deferred tools (or hosted connectors) in scope,
//! the deferred tools are replaced by the three bridge tools and the `tool_search` description
//! lists them in the richest form that fits the budget (tier 1 when every name is visible, tier
//! 2 otherwise); with none it passes the list through (tier 0). Called by sessions per turn.

use std::sync::Arc;

use serde_json::Value;

use super::bridge_schemas::{bridge_schemas, bridge_schemas_while_starting};
use super::catalog::Catalog;
use super::listing::{Listing, ListingForm};
use crate::config::{Switch, ToolSearchConfig};
use crate::deferral::{MANAGE_CONNECTIONS, is_bridge_name, is_deferrable};
use crate::tool::ToolDef;
use crate::view::ToolsetView;

/// The tool list for one model request and how it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembly {
    /// Whether the bridge tools replaced the deferred ones.
    pub activated: bool,
    /// 0: passthrough; 1: every deferred name is listed; 2: sources only, or no listing.
    pub tier: u8,
    /// The listing's form.
    pub listing_form: ListingForm,
    /// How many tools are deferred.
    pub deferred_count: usize,
    /// Estimated tokens of the deferred tools' schemas (what the bridge saves).
    pub deferred_tokens: i64,
    /// The listing budget when activated; with tool search off, the percentage of the context
    /// alone (not capped); 0 when nothing is deferrable.
    pub threshold_tokens: i64,
    /// min(threshold_pct % of the context, listing_max_tokens), computed whatever happens.
    pub listing_budget: i64,
    /// The OpenAI-style definitions the model sees: visible tools in order, then the bridges.
    /// Shared, as one view's assembly serves many requests.
    pub tools: Arc<[Value]>,
    /// The listing text inside the `tool_search` description, if any.
    pub listing: Option<String>,
}

impl Assembly {
    /// The names of [`Assembly::tools`], in order.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect()
    }

    /// The `tool_search` description, when the bridge is active.
    pub fn tool_search_description(&self) -> Option<&str> {
        self.tools
            .iter()
            .find(|t| t["function"]["name"] == "tool_search")
            .and_then(|t| t["function"]["description"].as_str())
    }
}

/// Assembles the tool list of `view` for a model with `context_length` tokens of context
/// (unknown when `None` or not positive). The deferred catalog comes from the view's cache.
pub fn assemble(
    view: &ToolsetView,
    context_length: Option<i64>,
    config: &ToolSearchConfig,
) -> Assembly {
    let catalog = view.catalog(&config.defer);
    if catalog.is_empty() && config.enabled != Switch::Off {
        let starting = view.sources_starting();
        if !starting.is_empty() {
            return assemble_while_starting(view.tools(), &starting, context_length, config);
        }
    }
    let assembly = view.assembled(context_length, config, || {
        assemble_with(view.tools(), &catalog, context_length, config)
    });
    if assembly.activated && config.ranking == crate::config::Ranking::Hybrid {
        // The model can search from now on: start the tool embeddings (from the cache under the
        // troupe home, or computed) in the background, so they are likely ready by its first
        // `tool_search` call. This returns at once.
        catalog.semantic(config);
    }
    assembly
}

/// No deferred tool yet, but servers still starting will bring some: the bridge is offered
/// from the first request, so a model never learns that searching is pointless.
fn assemble_while_starting(
    defs: &[Arc<ToolDef>],
    starting: &[String],
    context_length: Option<i64>,
    config: &ToolSearchConfig,
) -> Assembly {
    let mut tools: Vec<Value> = defs
        .iter()
        .filter(|d| !is_bridge_name(&d.name))
        .map(|d| d.to_openai())
        .collect();
    tools.extend(bridge_schemas_while_starting(starting, config));
    bridge_without_catalog(tools, config.listing_budget(context_length))
}

/// The bridge offered with an empty catalog (servers still starting, or only hosted
/// connectors behind it): `tools` holds the direct tools and the bridge schemas.
fn bridge_without_catalog(tools: Vec<Value>, listing_budget: i64) -> Assembly {
    Assembly {
        activated: true,
        tier: 2,
        listing_form: ListingForm::None,
        deferred_count: 0,
        deferred_tokens: 0,
        threshold_tokens: listing_budget,
        listing_budget,
        tools: tools.into(),
        listing: None,
    }
}

/// [`assemble`] over a plain list of definitions, indexing their deferred tools afresh.
pub fn assemble_defs(
    defs: &[Arc<ToolDef>],
    context_length: Option<i64>,
    config: &ToolSearchConfig,
) -> Assembly {
    let catalog = Catalog::build(
        defs.iter()
            .filter(|d| is_deferrable(d, Some(&config.defer)))
            .cloned()
            .collect(),
    );
    assemble_with(defs, &catalog, context_length, config)
}

/// `catalog` must hold exactly the deferrable tools of `defs`, in order.
fn assemble_with(
    defs: &[Arc<ToolDef>],
    catalog: &Catalog,
    context_length: Option<i64>,
    config: &ToolSearchConfig,
) -> Assembly {
    // Bridge names in the input are dropped, so assembling twice changes nothing.
    let incoming: Vec<&Arc<ToolDef>> = defs.iter().filter(|d| !is_bridge_name(&d.name)).collect();
    let connections = incoming.iter().any(|d| d.name == MANAGE_CONNECTIONS);
    let listing_budget = config.listing_budget(context_length);
    let all_defs = || incoming.iter().map(|d| d.to_openai()).collect::<Vec<_>>();
    let passthrough = |deferred_tokens, threshold_tokens, tools: Vec<Value>| Assembly {
        activated: false,
        tier: 0,
        listing_form: ListingForm::None,
        deferred_count: 0,
        deferred_tokens,
        threshold_tokens,
        listing_budget,
        tools: tools.into(),
        listing: None,
    };

    if catalog.is_empty() {
        if config.enabled != Switch::Off && connections {
            // Only hosted connectors sit behind the bridge.
            let mut tools = all_defs();
            tools.extend(bridge_schemas(0, true, &Listing::none(), config));
            return bridge_without_catalog(tools, listing_budget);
        }
        return passthrough(0, 0, all_defs());
    }

    let deferred_tokens = catalog.deferred_tokens();
    if config.enabled == Switch::Off {
        let pct_leg = match context_length {
            Some(ctx) if ctx > 0 => (ctx as f64 * config.threshold_pct / 100.0) as i64,
            _ => 0,
        };
        let mut assembly = passthrough(deferred_tokens, pct_leg, all_defs());
        assembly.deferred_count = catalog.len();
        return assembly;
    }

    let listing = if config.listing == Switch::Off {
        Listing::none()
    } else {
        catalog.listing(listing_budget)
    };
    // The catalog holds the deferrable tools in input order, so one walk splits the input
    // without asking each tool again whether it is deferrable.
    let deferred = catalog.defs();
    let mut next = 0;
    let mut tools: Vec<Value> = Vec::new();
    for def in &incoming {
        if deferred.get(next).is_some_and(|d| d.name == def.name) {
            next += 1;
        } else {
            tools.push(def.to_openai());
        }
    }
    tools.extend(bridge_schemas(catalog.len(), connections, &listing, config));
    Assembly {
        activated: true,
        tier: listing.form.tier(),
        listing_form: listing.form,
        deferred_count: catalog.len(),
        deferred_tokens,
        threshold_tokens: listing_budget,
        listing_budget,
        tools: tools.into(),
        listing: listing.text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Registry;
    use crate::view::ToolsetView;

    fn defs() -> Vec<Arc<ToolDef>> {
        vec![
            Arc::new(ToolDef::new("terminal", "Run a command.", json!({})).with_toolset("core")),
            Arc::new(
                ToolDef::new("gh_issue", "Open an issue.", json!({})).with_toolset("mcp-github"),
            ),
            Arc::new(ToolDef::new("tool_search", "stale bridge", json!({})).with_toolset("core")),
            Arc::new(ToolDef::new("read_file", "Read a file.", json!({})).with_toolset("core")),
            Arc::new(ToolDef::new("board_add", "Add a card.", json!({})).with_toolset("kanban")),
        ]
    }

    #[test]
    fn activates_with_deferred_tools() {
        let a = assemble_defs(&defs(), Some(200_000), &ToolSearchConfig::default());
        assert!(a.activated);
        assert_eq!(
            (a.tier, a.listing_form, a.deferred_count),
            (1, ListingForm::Full, 2)
        );
        assert_eq!(
            a.tool_names(),
            [
                "terminal",
                "read_file",
                "tool_search",
                "tool_describe",
                "tool_call"
            ]
        );
        let description = a.tool_search_description().unwrap();
        assert!(description.contains("- gh_issue: Open an issue."));
        assert_eq!(
            a.listing.as_deref().map(|l| description.ends_with(l)),
            Some(true)
        );
    }

    #[test]
    fn off_and_listing_off() {
        let off = ToolSearchConfig::from_raw(&json!({"enabled": "off"}));
        let a = assemble_defs(&defs(), Some(200_000), &off);
        assert!(!a.activated);
        assert_eq!((a.tier, a.threshold_tokens), (0, 10_000));
        assert_eq!(
            a.tool_names(),
            ["terminal", "gh_issue", "read_file", "board_add"]
        );
        let quiet = ToolSearchConfig::from_raw(&json!({"listing": "off"}));
        let a = assemble_defs(&defs(), Some(200_000), &quiet);
        assert_eq!(
            (a.activated, a.tier, a.listing_form),
            (true, 2, ListingForm::None)
        );
        assert!(a.listing.is_none());
    }

    #[test]
    fn connections_only_is_tier_two() {
        let registry = Registry::with_tools([
            ToolDef::new("terminal", "Run.", json!({})).with_toolset("core"),
            ToolDef::new(MANAGE_CONNECTIONS, "Connect apps.", json!({})).with_toolset("core"),
        ]);
        let a = assemble(&registry.view_all(), None, &ToolSearchConfig::default());
        assert_eq!((a.activated, a.tier, a.deferred_count), (true, 2, 0));
        assert_eq!(
            a.tool_names()[2..],
            ["tool_search", "tool_describe", "tool_call"]
        );
        assert!(
            a.tool_search_description()
                .unwrap()
                .contains("manage_connections")
        );
    }

    #[test]
    fn servers_still_starting_get_the_bridge_before_their_tools() {
        let registry =
            Registry::with_tools(
                [ToolDef::new("terminal", "Run.", json!({})).with_toolset("core")],
            );
        registry.set_starting("github", true);
        let a = assemble(&registry.view_all(), None, &ToolSearchConfig::default());
        assert_eq!((a.activated, a.deferred_count), (true, 0));
        assert_eq!(
            a.tool_names(),
            ["terminal", "tool_search", "tool_describe", "tool_call"]
        );
        assert!(a.tool_search_description().unwrap().contains("(github)"));
        // Switched off, nothing is offered; settled, a view with nothing deferrable passes through.
        let off = ToolSearchConfig {
            enabled: Switch::Off,
            ..ToolSearchConfig::default()
        };
        assert!(!assemble(&registry.view_all(), None, &off).activated);
        registry.set_starting("github", false);
        assert!(!assemble(&registry.view_all(), None, &ToolSearchConfig::default()).activated);
    }

    #[test]
    fn nothing_deferrable_passes_through() {
        let a = assemble_defs(&defs()[..1], Some(200_000), &ToolSearchConfig::default());
        assert_eq!(
            (a.activated, a.tier, a.threshold_tokens, a.listing_budget),
            (false, 0, 0, 4000)
        );
        assert_eq!(a.tool_names(), ["terminal"]);
    }

    /// The 3,309-tool catalog: one huge server and three small ones.
    fn big_view() -> ToolsetView {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tool_search/data/cloudflare_3300.json"
        );
        let json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Registry::with_tools(crate::catalog_file::parse_catalog(&json).unwrap()).view_all()
    }

    #[test]
    fn huge_catalog_forms() {
        let view = big_view();
        let c = ToolSearchConfig::default();
        let a = assemble(&view, Some(200_000), &c);
        assert_eq!(
            (a.tier, a.listing_form, a.deferred_count),
            (1, ListingForm::Mixed, 3309)
        );
        let listing = a.listing.unwrap();
        assert!(listing.contains("cloudflare (3300 tools, names left out"));
        for small in [
            "github tools (4):",
            "linear tools (3):",
            "sentry tools (2):",
        ] {
            assert!(listing.contains(small), "{small}");
        }
        assert_eq!(
            assemble(&view, Some(32_000), &c).listing_form,
            ListingForm::Mixed
        );
        let roomy =
            ToolSearchConfig::from_raw(&json!({"listing_max_tokens": 60000, "threshold_pct": 100}));
        assert_eq!(
            assemble(&view, Some(1_000_000), &roomy).listing_form,
            ListingForm::Names
        );
    }

    #[test]
    fn cached_assembly_equals_a_fresh_one() {
        let view = big_view();
        let c = ToolSearchConfig::default();
        let first = assemble(&view, Some(200_000), &c);
        let again = assemble(&view, Some(200_000), &c);
        let fresh = assemble_defs(view.tools(), Some(200_000), &c);
        assert_eq!(first, again);
        assert_eq!(first, fresh);
    }

    #[test]
    fn a_view_shares_its_tool_list_until_the_inputs_change() {
        let view = big_view();
        let c = ToolSearchConfig::default();
        let first = assemble(&view, Some(200_000), &c);
        let again = assemble(&view.clone(), Some(200_000), &c);
        assert!(Arc::ptr_eq(&first.tools, &again.tools));
        // Another context length or other settings: assembled afresh, for those inputs.
        let small = assemble(&view, Some(8_000), &c);
        assert!(!Arc::ptr_eq(&first.tools, &small.tools));
        assert_eq!(small, assemble_defs(view.tools(), Some(8_000), &c));
        let off = ToolSearchConfig::from_raw(&json!({"enabled": "off"}));
        let passthrough = assemble(&view, Some(8_000), &off);
        assert!(!passthrough.activated);
        assert_eq!(passthrough, assemble_defs(view.tools(), Some(8_000), &off));
        // Both kept: asking again for either gives the list made for it.
        assert!(Arc::ptr_eq(
            &assemble(&view, Some(200_000), &c).tools,
            &first.tools
        ));
        assert!(Arc::ptr_eq(
            &assemble(&view, Some(8_000), &c).tools,
            &small.tools
        ));
    }
}
