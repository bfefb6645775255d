//! `tools.tool_search` settings: parsed leniently from whatever the config file holds, with the
//! reference's defaults, aliases, fallbacks and clamps, so a typo never disables tool search.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::home::TroupeHome;
use crate::lenient::{py_float, py_int, py_str};
use crate::search::phrasings::Phrasings;

/// Default share of the context window the listing may take, in percent.
pub const DEFAULT_THRESHOLD_PCT: f64 = 5.0;
/// Default number of matches per query.
pub const DEFAULT_SEARCH_LIMIT: i64 = 5;
/// Default ceiling for `limit`.
pub const DEFAULT_MAX_SEARCH_LIMIT: i64 = 25;
/// Highest `max_search_limit` accepted.
pub const MAX_SEARCH_LIMIT_CEILING: i64 = 50;
/// Default ceiling of the listing, in tokens.
pub const DEFAULT_LISTING_MAX_TOKENS: i64 = 4000;
/// Range of `listing_max_tokens`.
pub const LISTING_MAX_TOKENS_RANGE: (i64, i64) = (200, 60_000);

/// Tools deferred by default even though they are not MCP or plugin tools: rarely needed
/// built-ins whose schemas are not worth their context.
pub const DEFAULT_DEFER: &[&str] = &[
    "computer_use",
    "session_search",
    "image_generate",
    "todo_list",
    "process_manage",
    "cronjob_manage",
    "drive_preview",
    "gui_tour",
    "desktop_preview",
    "annotate_preview",
    "show_tip",
    "setup_mcp",
    "desktop_project",
    "close_terminal",
    "apply_layout",
    "read_terminal",
    "read_window_below",
    "focus_pane",
];

/// A three-way switch (`enabled`, `listing`): `auto` behaves as `on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Decide automatically (today: same as on).
    Auto,
    /// Always on.
    On,
    /// Off.
    Off,
}

impl Switch {
    /// The word used in config files and outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            Switch::Auto => "auto",
            Switch::On => "on",
            Switch::Off => "off",
        }
    }

    fn parse(value: &Value) -> Switch {
        match py_str(value).trim().to_lowercase().as_str() {
            "on" | "true" | "1" | "yes" => Switch::On,
            "off" | "false" | "0" | "no" => Switch::Off,
            _ => Switch::Auto,
        }
    }
}

/// How `tool_search` ranks tools (`tools.tool_search.ranking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ranking {
    /// Lexical legs (split names, weighted fields, domain vocabulary) fused with sentence
    /// embeddings (feature `semantic`, on by default), and a "nothing fits" decision. The
    /// default.
    #[default]
    Hybrid,
    /// The reference ranking exactly: BM25 behind the rarest-token gate and the relevance floor,
    /// for reproducing the reference's answers (its conformance cases, or a catalog tuned for it).
    Reference,
}

impl Ranking {
    /// The word used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Ranking::Hybrid => "hybrid",
            Ranking::Reference => "reference",
        }
    }

    /// Reads `hybrid` or `reference` (any case, spaces ignored); anything else is the default,
    /// with a warning naming the two values.
    fn parse(value: &Value) -> Ranking {
        match py_str(value).trim().to_lowercase().as_str() {
            "hybrid" => Ranking::Hybrid,
            "reference" => Ranking::Reference,
            _ => {
                if !value.is_null() {
                    tracing::warn!(value = %value, "tools.tool_search.ranking must be `hybrid` or `reference`; using hybrid");
                }
                Ranking::Hybrid
            }
        }
    }
}

/// The tool names deferred on top of MCP and plugin tools.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeferSet {
    names: BTreeSet<String>,
    /// True when the config gave its own list (which replaces the default entirely).
    explicit: bool,
}

impl Default for DeferSet {
    fn default() -> Self {
        DeferSet {
            names: DEFAULT_DEFER.iter().map(|s| s.to_string()).collect(),
            explicit: false,
        }
    }
}

impl DeferSet {
    /// An explicit list.
    pub fn explicit<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        DeferSet {
            names: names.into_iter().map(Into::into).collect(),
            explicit: true,
        }
    }

    /// Whether `name` is in the set.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// Whether the config gave the list (rather than the default).
    pub fn is_explicit(&self) -> bool {
        self.explicit
    }
}

/// The tool-search settings, after defaults and clamps.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSearchConfig {
    /// Whether the bridge replaces deferrable tools.
    pub enabled: Switch,
    /// Share of the context window the listing may take, 0..=100.
    pub threshold_pct: f64,
    /// Matches per query when the model gives no `limit`, 1..=max_search_limit.
    pub search_default_limit: i64,
    /// Highest `limit` a model may ask for, 1..=50.
    pub max_search_limit: i64,
    /// Whether the deferred tools are listed in the `tool_search` description.
    pub listing: Switch,
    /// Ceiling of the listing in tokens, 200..=60000.
    pub listing_max_tokens: i64,
    /// Extra deferred names.
    pub defer: DeferSet,
    /// How `tool_search` ranks.
    pub ranking: Ranking,
    /// troupe's home, where the hybrid ranking caches tool embeddings (`cache/tool-embeddings`).
    /// Not a key of the file: [`TroupeHome::from_env`] unless the caller hands its own down.
    pub home: TroupeHome,
    /// Requests people might type for each tool, from the file `phrasings` names (read by the
    /// caller, which knows the folder a relative path follows: [`Phrasings::read`]).
    pub phrasings: Option<Arc<Phrasings>>,
}

impl Default for ToolSearchConfig {
    fn default() -> Self {
        ToolSearchConfig {
            enabled: Switch::Auto,
            threshold_pct: DEFAULT_THRESHOLD_PCT,
            search_default_limit: DEFAULT_SEARCH_LIMIT,
            max_search_limit: DEFAULT_MAX_SEARCH_LIMIT,
            listing: Switch::Auto,
            listing_max_tokens: DEFAULT_LISTING_MAX_TOKENS,
            defer: DeferSet::default(),
            ranking: Ranking::Hybrid,
            home: TroupeHome::from_env(),
            phrasings: None,
        }
    }
}

impl ToolSearchConfig {
    /// Reads the `tools.tool_search` value of a config file. Never fails: `false` turns tool
    /// search off, any other non-mapping gives the defaults, and each bad field falls back to its
    /// default (with a warning in the log for the ones a person would want to know about).
    pub fn from_raw(raw: &Value) -> Self {
        let Value::Object(map) = raw else {
            return ToolSearchConfig {
                enabled: if *raw == Value::Bool(false) {
                    Switch::Off
                } else {
                    Switch::Auto
                },
                ..ToolSearchConfig::default()
            };
        };
        let int_field = |key: &str, default: i64, lo: i64, hi: i64| -> i64 {
            let parsed = map.get(key).and_then(|v| {
                let n = py_int(v);
                if n.is_none() {
                    tracing::warn!(key, value = %v, "tools.tool_search: not an integer; using the default");
                }
                n
            });
            parsed.unwrap_or(default).clamp(lo, hi)
        };
        let max_search_limit = int_field(
            "max_search_limit",
            DEFAULT_MAX_SEARCH_LIMIT,
            1,
            MAX_SEARCH_LIMIT_CEILING,
        );
        let search_default_limit = int_field(
            "search_default_limit",
            DEFAULT_SEARCH_LIMIT,
            1,
            max_search_limit,
        );
        let listing_max_tokens = int_field(
            "listing_max_tokens",
            DEFAULT_LISTING_MAX_TOKENS,
            LISTING_MAX_TOKENS_RANGE.0,
            LISTING_MAX_TOKENS_RANGE.1,
        );
        let threshold_pct = map
            .get("threshold_pct")
            .and_then(py_float)
            .filter(|f| !f.is_nan())
            .unwrap_or(DEFAULT_THRESHOLD_PCT)
            .clamp(0.0, 100.0);
        let defer = match map.get("defer") {
            None | Some(Value::Null) => DeferSet::default(),
            Some(Value::Array(items)) => DeferSet::explicit(
                items
                    .iter()
                    .map(|v| py_str(v).trim().to_string())
                    .filter(|s| !s.is_empty()),
            ),
            Some(other) => {
                tracing::warn!(value = %other, "tools.tool_search.defer must be a list of tool names; using the default list");
                DeferSet::default()
            }
        };
        ToolSearchConfig {
            enabled: map
                .get("enabled")
                .map(Switch::parse)
                .unwrap_or(Switch::Auto),
            threshold_pct,
            search_default_limit,
            max_search_limit,
            listing: map
                .get("listing")
                .map(Switch::parse)
                .unwrap_or(Switch::Auto),
            listing_max_tokens,
            defer,
            ranking: map
                .get("ranking")
                .filter(|v| !v.is_null())
                .map(Ranking::parse)
                .unwrap_or_default(),
            home: TroupeHome::from_env(),
            phrasings: None,
        }
    }

    /// These settings with `phrasings` for the hybrid ranking.
    pub fn with_phrasings(mut self, phrasings: Option<Arc<Phrasings>>) -> Self {
        self.phrasings = phrasings;
        self
    }

    /// These settings with the embedding cache in `home`.
    pub fn with_home(mut self, home: TroupeHome) -> Self {
        self.home = home;
        self
    }

    /// The listing budget in tokens for a context window of `context_length` tokens (unknown
    /// when `None` or not positive): min(threshold_pct % of it, listing_max_tokens).
    pub fn listing_budget(&self, context_length: Option<i64>) -> i64 {
        let pct_leg = match context_length {
            Some(ctx) if ctx > 0 => (ctx as f64 * self.threshold_pct / 100.0) as i64,
            _ => 10_000,
        };
        pct_leg.min(self.listing_max_tokens).max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_mappings() {
        assert_eq!(
            ToolSearchConfig::from_raw(&json!(false)).enabled,
            Switch::Off
        );
        assert_eq!(
            ToolSearchConfig::from_raw(&json!("garbage")),
            ToolSearchConfig::default()
        );
        assert_eq!(
            ToolSearchConfig::from_raw(&Value::Null),
            ToolSearchConfig::default()
        );
    }

    #[test]
    fn limits_resolve_max_first() {
        let c = ToolSearchConfig::from_raw(
            &json!({"max_search_limit": 10, "search_default_limit": 12}),
        );
        assert_eq!((c.search_default_limit, c.max_search_limit), (10, 10));
    }

    #[test]
    fn ranking_is_hybrid_unless_reference_is_asked_for() {
        assert_eq!(ToolSearchConfig::default().ranking, Ranking::Hybrid);
        let read = |v: Value| ToolSearchConfig::from_raw(&json!({ "ranking": v })).ranking;
        assert_eq!(read(json!(" Reference ")), Ranking::Reference);
        assert_eq!(read(json!("hybrid")), Ranking::Hybrid);
        assert_eq!(read(json!("bm25")), Ranking::Hybrid);
        assert_eq!(read(json!(null)), Ranking::Hybrid);
        assert_eq!(Ranking::Reference.as_str(), "reference");
    }

    #[test]
    fn budget_examples() {
        let c = ToolSearchConfig::default();
        assert_eq!(c.listing_budget(Some(200_000)), 4000);
        assert_eq!(c.listing_budget(Some(40_000)), 2000);
        assert_eq!(c.listing_budget(None), 4000);
        assert_eq!(c.listing_budget(Some(1000)), 50);
    }
}
