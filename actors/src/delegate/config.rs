//! [`DelegationConfig`]: the operator's limits for `delegate_task`, read from the `delegation:`
//! section of `troupe.yaml` with [`DelegationConfig::from_value`]. The session reads it to build
//! the tool's description and to check every spawn; the orchestrator hands it to each session.
//! The model never chooses these values: the tool schema offers none of them.

use std::time::Duration;

use serde_json::{Map, Value};

/// Default number of tasks one `delegate_task` call may run at once.
pub const DEFAULT_MAX_CONCURRENT_CHILDREN: usize = 10;
/// Default spawn depth: children of a top-level session cannot delegate further.
pub const DEFAULT_MAX_SPAWN_DEPTH: u32 = 1;
/// Default tool rounds a child gets for its task.
pub const DEFAULT_CHILD_MAX_ITERATIONS: u32 = 250;
/// The shortest inactivity timeout a config file may set; smaller positive values are raised.
pub const MIN_CHILD_TIMEOUT: Duration = Duration::from_secs(30);

/// The `delegation:` settings, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationConfig {
    /// Most tasks in one call (and so most children running at once for it). At least 1.
    pub max_concurrent_children: usize,
    /// Sessions at depth `0..max_spawn_depth` may delegate; at least 1.
    pub max_spawn_depth: u32,
    /// Whether children above the leaf level may delegate at all (a kill switch for trees).
    pub orchestrator_enabled: bool,
    /// Tool rounds each child gets.
    pub max_iterations: u32,
    /// How long a child may go without any sign of progress (a model answer, a tool call
    /// starting or ending) before it is stopped and reported as `timeout`. `None`: no limit.
    pub child_timeout: Option<Duration>,
    /// The toolsets children may have at most, intersected with the parent's; `None` keeps the
    /// parent's toolsets. It narrows and never widens.
    pub default_toolsets: Option<Vec<String>>,
    /// Whether a narrowed child keeps the parent's MCP toolsets.
    pub inherit_mcp_toolsets: bool,
    /// What each child may spend at most (`delegation.budget`); whatever it says, a child
    /// stops when its parent's budget is spent.
    pub budget: crate::usage::Budget,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig {
            max_concurrent_children: DEFAULT_MAX_CONCURRENT_CHILDREN,
            max_spawn_depth: DEFAULT_MAX_SPAWN_DEPTH,
            orchestrator_enabled: true,
            max_iterations: DEFAULT_CHILD_MAX_ITERATIONS,
            child_timeout: None,
            default_toolsets: None,
            inherit_mcp_toolsets: true,
            budget: crate::usage::Budget::default(),
        }
    }
}

impl DelegationConfig {
    /// Reads the `delegation` section: `max_concurrent_children`, `max_spawn_depth`,
    /// `orchestrator_enabled`, `max_iterations`, `child_timeout_seconds`, `default_toolsets`
    /// and `inherit_mcp_toolsets`. Absent keys keep their defaults; a wrong value is an error
    /// naming the key and what to write. Unknown keys are logged and ignored, so a file written
    /// for Hermes (which has more knobs) still loads.
    pub fn from_value(raw: &Value) -> Result<DelegationConfig, String> {
        let mut config = DelegationConfig::default();
        let map = match raw {
            Value::Null => return Ok(config),
            Value::Object(map) => map,
            other => {
                return Err(format!(
                    "delegation: expected a mapping of settings such as {{max_concurrent_children: 10, max_spawn_depth: 1}}, found {other}"
                ));
            }
        };
        if let Some(n) = whole(map, "max_concurrent_children")? {
            if n < 1 {
                return Err(format!(
                    "delegation.max_concurrent_children: expected 1 or more, found {n}"
                ));
            }
            config.max_concurrent_children = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = whole(map, "max_spawn_depth")? {
            if n < 1 {
                return Err(format!(
                    "delegation.max_spawn_depth: expected 1 or more (1 means children cannot delegate), found {n}"
                ));
            }
            config.max_spawn_depth = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(n) = whole(map, "max_iterations")? {
            if n < 1 {
                return Err(format!(
                    "delegation.max_iterations: expected 1 or more tool rounds, found {n}"
                ));
            }
            config.max_iterations = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(value) = map.get("child_timeout_seconds").filter(|v| !v.is_null()) {
            let seconds = value
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "delegation.child_timeout_seconds: expected 0 (no limit) or a number of seconds such as 600, found {value}"
                    )
                })?;
            config.child_timeout = (seconds > 0.0)
                .then(|| Duration::from_secs_f64(seconds.min(31_536_000.0)).max(MIN_CHILD_TIMEOUT));
        }
        config.budget = crate::usage::Budget::from_value(
            "delegation.budget",
            map.get("budget").unwrap_or(&Value::Null),
        )?;
        config.orchestrator_enabled = flag(map, "orchestrator_enabled", true)?;
        config.inherit_mcp_toolsets = flag(map, "inherit_mcp_toolsets", true)?;
        match map.get("default_toolsets") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                let mut names = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str().map(str::trim).filter(|s| !s.is_empty()) {
                        Some(name) => names.push(name.to_string()),
                        None => {
                            return Err(format!(
                                "delegation.default_toolsets: expected a list of toolset names such as [file, web], found the item {item}"
                            ));
                        }
                    }
                }
                config.default_toolsets = Some(names);
            }
            Some(other) => {
                return Err(format!(
                    "delegation.default_toolsets: expected a list of toolset names such as [file, web], found {other}"
                ));
            }
        }
        for key in map.keys() {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                tracing::warn!(key = %key, "delegation: this setting is not used by troupe; ignoring it");
            }
        }
        Ok(config)
    }

    /// Whether a session at `depth` (0 for a top-level one) may spawn children.
    pub fn may_spawn_at(&self, depth: u32) -> bool {
        depth < self.max_spawn_depth
    }

    /// Whether a child at `depth` keeps `delegate_task` (it is an orchestrator, not a leaf).
    pub fn child_may_delegate(&self, child_depth: u32) -> bool {
        self.orchestrator_enabled && child_depth < self.max_spawn_depth
    }
}

const KNOWN_KEYS: &[&str] = &[
    "max_concurrent_children",
    "max_spawn_depth",
    "orchestrator_enabled",
    "max_iterations",
    "child_timeout_seconds",
    "default_toolsets",
    "inherit_mcp_toolsets",
    "budget",
];

/// A whole number under `key`, if present.
fn whole(map: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_i64() {
            Some(n) => Ok(Some(n)),
            None => Err(format!(
                "delegation.{key}: expected a whole number, found {value}"
            )),
        },
    }
}

/// A true/false flag under `key`, `default` when absent.
fn flag(map: &Map<String, Value>, key: &str, default: bool) -> Result<bool, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!(
            "delegation.{key}: expected true or false, found {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_follow_the_spec() {
        let config = DelegationConfig::from_value(&Value::Null).unwrap();
        assert_eq!(config.max_concurrent_children, 10);
        assert_eq!(config.max_spawn_depth, 1);
        assert_eq!(config.max_iterations, 250);
        assert_eq!(config.child_timeout, None);
        assert!(config.orchestrator_enabled && config.inherit_mcp_toolsets);
        assert!(config.may_spawn_at(0) && !config.may_spawn_at(1));
        assert!(!config.child_may_delegate(1));
    }

    #[test]
    fn values_are_read_and_small_timeouts_raised() {
        let config = DelegationConfig::from_value(&json!({
            "max_concurrent_children": 3, "max_spawn_depth": 3, "max_iterations": 20,
            "child_timeout_seconds": 5, "default_toolsets": ["file", "web"],
            "inherit_mcp_toolsets": false, "subagent_auto_approve": false
        }))
        .unwrap();
        assert_eq!(config.max_concurrent_children, 3);
        assert_eq!(config.max_spawn_depth, 3);
        assert_eq!(config.max_iterations, 20);
        assert_eq!(config.child_timeout, Some(MIN_CHILD_TIMEOUT));
        assert_eq!(
            config.default_toolsets,
            Some(vec!["file".into(), "web".into()])
        );
        assert!(!config.inherit_mcp_toolsets);
        assert!(config.child_may_delegate(2) && !config.child_may_delegate(3));
        let off = DelegationConfig::from_value(&json!({"child_timeout_seconds": 0})).unwrap();
        assert_eq!(off.child_timeout, None);
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        for (raw, key) in [
            (
                json!({"max_concurrent_children": 0}),
                "max_concurrent_children",
            ),
            (json!({"max_spawn_depth": "deep"}), "max_spawn_depth"),
            (
                json!({"child_timeout_seconds": -3}),
                "child_timeout_seconds",
            ),
            (json!({"default_toolsets": "file"}), "default_toolsets"),
            (json!({"default_toolsets": [1]}), "default_toolsets"),
            (
                json!({"orchestrator_enabled": "yes"}),
                "orchestrator_enabled",
            ),
        ] {
            let error = DelegationConfig::from_value(&raw).unwrap_err();
            assert!(error.contains(&format!("delegation.{key}")), "{error}");
            assert!(error.contains("expected"), "{error}");
        }
        assert!(DelegationConfig::from_value(&json!([1])).is_err());
    }
}
