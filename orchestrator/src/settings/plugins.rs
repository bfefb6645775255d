//! The `plugins:` section: which plugins troupe.yaml switches on and off (the plugins
//! themselves are found on disk by the plugin layer).

use serde_json::Value;
use troupe_tools::text::yaml_kind;

use super::keys::ConfigError;

/// The keys of `plugins:`.
pub(super) const KEYS: &[&str] = &["enabled", "disabled"];

/// Which plugins the config switches on and off. `disabled` wins over `enabled`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enablement {
    /// `plugins.enabled`.
    pub enabled: Vec<String>,
    /// `plugins.disabled`.
    pub disabled: Vec<String>,
}

impl Enablement {
    /// Reads the `plugins` section (`null` when absent).
    pub fn from_section(section: &Value) -> Result<Enablement, ConfigError> {
        let map = match section {
            Value::Null => return Ok(Enablement::default()),
            Value::Object(map) => map,
            other => {
                return Err(ConfigError::Invalid {
                    key: "plugins".into(),
                    problem: format!(
                        "expected a mapping like `plugins: {{enabled: [disk-cleanup]}}`, found {}",
                        yaml_kind(other)
                    ),
                });
            }
        };
        let list = |key: &str| -> Result<Vec<String>, ConfigError> {
            let invalid = |problem: String| ConfigError::Invalid {
                key: format!("plugins.{key}"),
                problem,
            };
            match map.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        Value::String(s) => Ok(s.trim().to_string()),
                        other => Err(invalid(format!(
                            "every entry must be a plugin name, found {}",
                            yaml_kind(other)
                        ))),
                    })
                    .collect(),
                Some(other) => Err(invalid(format!(
                    "expected a list of plugin names, found {}",
                    yaml_kind(other)
                ))),
            }
        };
        Ok(Enablement {
            enabled: list("enabled")?,
            disabled: list("disabled")?,
        })
    }

    /// Whether `name` is switched on.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.enabled.iter().any(|n| n == name) && !self.disabled.iter().any(|n| n == name)
    }
}
