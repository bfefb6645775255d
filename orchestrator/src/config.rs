//! `troupe.yaml`: read as written (YAML or JSON), then checked into a typed [`Config`] with
//! defaults applied. Errors name the key path and say what to write instead. Sections that other
//! layers own (`mcp_servers`, `tools.tool_search`) are handed to those layers' own parsers.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use serde_json::{Map, Value};
use troupe_actors::usage::{Budget, PriceTable};
use troupe_tools::ToolSearchConfig;
use troupe_tools::text::yaml_kind;

/// Top-level keys troupe reads. Others are kept (a Hermes config may carry more) but logged.
const KNOWN_TOP_LEVEL: &[&str] = &[
    "model",
    "toolsets",
    "tools",
    "mcp_servers",
    "approvals",
    "delegation",
    "kanban",
    "profiles",
    "agent",
    "execute_code",
    "terminal",
    "serve",
    "plugins",
    "hooks",
    "code_execution",
    "budget",
    "pricing",
    "observability",
    "sessions",
];

/// What went wrong reading a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger or nested deeper than troupe reads as configuration (checked before
    /// parsing, which would take minutes on a deeply nested file).
    #[error("{0}")]
    TooLarge(troupe_tools::input_limits::InputTooLarge),
    /// The file is neither valid YAML nor valid JSON.
    #[error("config file {path} is not valid YAML or JSON: {reason}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// A key holds a value of the wrong kind.
    #[error("config key `{key}`: {problem}")]
    Invalid {
        /// The key path, like `model.base_url`.
        key: String,
        /// What is wrong and what to write instead.
        problem: String,
    },
}

/// The `model` section: which OpenAI-compatible endpoint to talk to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSection {
    /// Base URL of the chat-completions API (`https://host/v1`).
    pub base_url: Option<String>,
    /// The API key itself (prefer `api_key_env`).
    pub api_key: Option<String>,
    /// Name of the environment variable that holds the API key.
    pub api_key_env: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Context window in tokens, when known; sizes the tool listing.
    pub context_length: Option<i64>,
    /// `tool_calls`, `retry_budget`, `request_fields`, `request_timeout` (see `ProviderSettings`).
    pub provider: troupe_actors::model::ProviderSettings,
}

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

/// A checked `troupe.yaml`.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where it was read from, if from a file.
    pub path: Option<PathBuf>,
    /// The `model` section.
    pub model: ModelSection,
    /// The `toolsets` section.
    pub toolsets: ToolsetsSection,
    /// `tools.tool_search`, parsed leniently.
    pub tool_search: ToolSearchConfig,
    /// `mcp_servers`, as written: the MCP layer parses it (one bad server never stops the rest).
    pub mcp_servers: Value,
    /// `budget`: what each session (with its subagents) may spend; no limit by default.
    pub budget: Budget,
    /// List prices with `pricing` laid over them.
    pub prices: Arc<PriceTable>,
    /// The whole document as written, for sections other layers read.
    pub raw: Value,
}

/// The config file a command reads when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "troupe.yaml";

impl Config {
    /// Reads and checks a config file (YAML or JSON, by content).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        troupe_tools::input_limits::check_config_text(&text, &path.display().to_string())
            .map_err(ConfigError::TooLarge)?;
        let mut config = Self::parse(&text).map_err(|e| match e {
            ConfigError::Syntax { reason, .. } => ConfigError::Syntax {
                path: path.to_path_buf(),
                reason,
            },
            other => other,
        })?;
        config.path = Some(path.to_path_buf());
        Ok(config)
    }

    /// The file the user named; else `troupe.yaml` in the working directory when there is one;
    /// else the defaults. Every command that takes `--config` resolves it this way.
    pub fn load_or_default(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            Some(path) => Self::load(path),
            None => {
                let default = Path::new(DEFAULT_CONFIG_FILE);
                if default.is_file() {
                    Self::load(default)
                } else {
                    Ok(Self::default())
                }
            }
        }
    }

    /// Reads and checks config text (YAML, of which JSON is a subset).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let raw = parse_document(text)?;
        Self::from_value(raw)
    }

    /// Checks an already-parsed document.
    pub fn from_value(raw: Value) -> Result<Self, ConfigError> {
        let root = match &raw {
            Value::Object(map) => map.clone(),
            Value::Null => Map::new(),
            other => {
                return Err(ConfigError::Invalid {
                    key: "(top level)".into(),
                    problem: format!(
                        "expected a mapping of sections (model, toolsets, tools, mcp_servers, ...), found {}",
                        yaml_kind(other)
                    ),
                });
            }
        };
        for key in root.keys() {
            if !KNOWN_TOP_LEVEL.contains(&key.as_str()) {
                tracing::warn!(key = %key, "troupe.yaml: troupe does not read this top-level key");
            }
        }
        let tools = section(&root, "tools")?;
        let tool_search =
            ToolSearchConfig::from_raw(tools.get("tool_search").unwrap_or(&Value::Null));
        Ok(Config {
            path: None,
            model: model_section(&root)?,
            toolsets: toolsets_section(&root)?,
            tool_search,
            mcp_servers: root.get("mcp_servers").cloned().unwrap_or(Value::Null),
            budget: Budget::from_value("budget", root.get("budget").unwrap_or(&Value::Null))
                .map_err(|m| keyed_error("budget", m))?,
            prices: Arc::new(
                PriceTable::from_value(root.get("pricing").unwrap_or(&Value::Null))
                    .map_err(|m| keyed_error("pricing", m))?,
            ),
            raw,
        })
    }

    /// A top-level section as written (`null` when absent).
    pub fn section(&self, name: &str) -> &Value {
        self.raw.get(name).unwrap_or(&Value::Null)
    }
}

/// Parses YAML (or JSON) text into a JSON value.
fn parse_document(text: &str) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    troupe_tools::input_limits::check_config_text(text, "the configuration")
        .map_err(ConfigError::TooLarge)?;
    serde_norway::from_str::<Value>(text).map_err(|e| ConfigError::Syntax {
        path: PathBuf::new(),
        reason: e.to_string(),
    })
}

/// A config error from another layer's parser, whose message starts with the key path
/// (`budget.max_tokens: ...`); `section` when it does not.
pub(crate) fn keyed_error(section: &str, message: String) -> ConfigError {
    match message.split_once(": ") {
        Some((key, problem)) if key.starts_with(section) => ConfigError::Invalid {
            key: key.to_string(),
            problem: problem.to_string(),
        },
        _ => ConfigError::Invalid {
            key: section.to_string(),
            problem: message,
        },
    }
}

fn section(root: &Map<String, Value>, name: &str) -> Result<Map<String, Value>, ConfigError> {
    match root.get(name) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(other) => Err(ConfigError::Invalid {
            key: name.to_string(),
            problem: format!("expected a mapping, found {}", yaml_kind(other)),
        }),
    }
}

fn model_section(root: &Map<String, Value>) -> Result<ModelSection, ConfigError> {
    let map = section(root, "model")?;
    let string = |key: &str| -> Result<Option<String>, ConfigError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Some(Value::String(_)) => Ok(None),
            Some(other) => Err(ConfigError::Invalid {
                key: format!("model.{key}"),
                problem: format!("expected a string, found {}", yaml_kind(other)),
            }),
        }
    };
    let context_length = match map.get("context_length") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_i64().is_some_and(|v| v > 0) => n.as_i64(),
        Some(other) => {
            return Err(ConfigError::Invalid {
                key: "model.context_length".into(),
                problem: format!(
                    "expected a positive number of tokens such as 128000, found {other}"
                ),
            });
        }
    };
    Ok(ModelSection {
        base_url: string("base_url")?,
        api_key: string("api_key")?,
        api_key_env: string("api_key_env")?,
        model: string("model")?.or(string("default")?),
        context_length,
        provider: troupe_actors::model::ProviderSettings::default()
            .overlay(&map, "model")
            .map_err(|problem| ConfigError::Invalid {
                key: "model".into(),
                problem,
            })?,
    })
}

fn toolsets_section(root: &Map<String, Value>) -> Result<ToolsetsSection, ConfigError> {
    let list = |key: &str, value: &Value| -> Result<Vec<String>, ConfigError> {
        match value {
            Value::String(s) => Ok(s
                .split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect()),
            Value::Array(items) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.trim().to_string()),
                    other => Err(ConfigError::Invalid {
                        key: key.to_string(),
                        problem: format!("expected toolset names, found {}", yaml_kind(other)),
                    }),
                })
                .collect(),
            other => Err(ConfigError::Invalid {
                key: key.to_string(),
                problem: format!(
                    "expected a list of toolset names, found {}",
                    yaml_kind(other)
                ),
            }),
        }
    };
    match root.get("toolsets") {
        None | Some(Value::Null) => Ok(ToolsetsSection::default()),
        // `toolsets: [a, b]` is the short form of `toolsets: {enabled: [a, b]}`.
        Some(v @ (Value::Array(_) | Value::String(_))) => Ok(ToolsetsSection {
            enabled: Some(list("toolsets", v)?),
            ..ToolsetsSection::default()
        }),
        Some(Value::Object(map)) => {
            let enabled = match map.get("enabled") {
                None | Some(Value::Null) => None,
                Some(v) => Some(list("toolsets.enabled", v)?),
            };
            let disabled = match map.get("disabled") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => list("toolsets.disabled", v)?,
            };
            let blocked_tools = match map.get("blocked_tools") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => list("toolsets.blocked_tools", v)?,
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
                        list(&format!("toolsets.define.{name}"), includes)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_yaml_sections() {
        let config = Config::parse(
            "model:\n  base_url: http://127.0.0.1:8080/v1\n  model: qwen\ntoolsets: [core, mcp-github]\ntools:\n  tool_search:\n    enabled: off\n    max_search_limit: 10\n",
        )
        .unwrap();
        assert_eq!(
            config.model.base_url.as_deref(),
            Some("http://127.0.0.1:8080/v1")
        );
        assert_eq!(
            config.toolsets.enabled,
            Some(vec!["core".to_string(), "mcp-github".to_string()])
        );
        assert_eq!(config.tool_search.enabled, troupe_tools::Switch::Off);
        assert_eq!(config.tool_search.max_search_limit, 10);
    }

    #[test]
    fn json_is_accepted() {
        let config = Config::parse(r#"{"tools": {"tool_search": {"listing": "off"}}}"#).unwrap();
        assert_eq!(config.tool_search.listing, troupe_tools::Switch::Off);
    }

    #[test]
    fn errors_name_the_key() {
        let err = Config::parse("model:\n  base_url: 5\n").unwrap_err();
        assert!(err.to_string().contains("model.base_url"), "{err}");
        let err = Config::parse("tools: [1]\n").unwrap_err();
        assert!(err.to_string().contains("`tools`"), "{err}");
        let err = Config::parse("model: {\n").unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
        let err = Config::parse("toolsets: {blocked_tools: {terminal: true}}\n").unwrap_err();
        assert!(err.to_string().contains("toolsets.blocked_tools"), "{err}");
    }

    #[test]
    fn single_tools_can_be_blocked() {
        let config =
            Config::parse("toolsets:\n  enabled: [core]\n  blocked_tools: [terminal, patch]\n")
                .unwrap();
        assert_eq!(config.toolsets.enabled, Some(vec!["core".to_string()]));
        assert_eq!(config.toolsets.blocked_tools, vec!["terminal", "patch"]);
    }
}
