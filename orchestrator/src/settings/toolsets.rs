//! The `toolsets:` section: which toolsets sessions get, composites, and single tools taken
//! away.

use serde_json::{Map, Value};
use troupe_tools::text::yaml_kind;

use super::keys::{ConfigError, names};

/// The `toolsets` section: which toolsets sessions get.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolsetsSection {
    /// Toolsets to enable (all when absent).
    pub enabled: Option<Vec<String>>,
    /// Toolsets to take away.
    pub disabled: Vec<String>,
    /// Composite toolsets: name -> the toolsets it includes.
    pub composites: Vec<(String, Vec<String>)>,
    /// Tools taken away whatever their toolset (`blocked_tools: [terminal]`), for a small
    /// local model that reads every tool's schema slowly.
    pub blocked_tools: Vec<String>,
}

pub(super) fn toolsets_section(root: &Map<String, Value>) -> Result<ToolsetsSection, ConfigError> {
    match root.get("toolsets") {
        None | Some(Value::Null) => Ok(ToolsetsSection::default()),
        // `toolsets: [a, b]` is the short form of `toolsets: {enabled: [a, b]}`.
        Some(v @ (Value::Array(_) | Value::String(_))) => Ok(ToolsetsSection {
            enabled: Some(names("toolsets", v)?),
            ..ToolsetsSection::default()
        }),
        Some(Value::Object(map)) => {
            let enabled = match map.get("enabled") {
                None | Some(Value::Null) => None,
                Some(v) => Some(names("toolsets.enabled", v)?),
            };
            let disabled = match map.get("disabled") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => names("toolsets.disabled", v)?,
            };
            let blocked_tools = match map.get("blocked_tools") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => names("toolsets.blocked_tools", v)?,
            };
            let mut composites = Vec::new();
            if let Some(defs) = map.get("define") {
                let Value::Object(defs) = defs else {
                    return Err(ConfigError::Invalid {
                        key: "toolsets.define".into(),
                        problem: "expected a mapping of composite name to the toolsets it includes"
                            .into(),
                    });
                };
                for (name, includes) in defs {
                    composites.push((
                        name.clone(),
                        names(&format!("toolsets.define.{name}"), includes)?,
                    ));
                }
            }
            Ok(ToolsetsSection {
                enabled,
                disabled,
                composites,
                blocked_tools,
            })
        }
        Some(other) => Err(ConfigError::Invalid {
            key: "toolsets".into(),
            problem: format!(
                "expected a list of toolset names or a mapping with enabled/disabled, found {}",
                yaml_kind(other)
            ),
        }),
    }
}
