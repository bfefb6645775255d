//! troupe.yaml, read once: the document is parsed (YAML or JSON), then each section is checked
//! into a typed value with its defaults applied ([`Settings`]), before anything starts. Errors
//! name the key path and say what to write instead ([`ConfigError`], one shape for every section).
//! Only `mcp_servers` is kept as written ([`Settings::raw`]) for the MCP layer, where a bad
//! server is a warning and the rest start.
//!
//! One file per section: `model.rs` (and the one model/provider resolution), `toolsets.rs`,
//! `tool_search.rs` (the part of `tools.tool_search` that needs the file's folder: phrasings),
//! [`kanban`] (with `profiles:`), [`terminal`] (with `code_execution:`; the backend choice in
//! `backend.rs`), `sessions.rs`, [`hooks`] (the shape of a hook command, shared with
//! `plugin.yaml`), [`plugins`], [`serve`], [`observability`]; [`secrets`] says which values are
//! troupe's keys, and `keys.rs` holds [`ConfigError`] and the key readers every section uses.
//!
//! troupe's home directory is resolved once, in `troupe-tools` ([`TroupeHome`]), and passed down
//! from here as a value.

mod backend;
pub mod connectors;
pub mod hooks;
pub mod kanban;
pub(crate) mod keys;
pub mod known_keys;
mod model;
pub mod observability;
pub mod plugins;
pub mod reference;
pub mod review;
pub mod secrets;
pub mod serve;
mod sessions;
pub mod terminal;
pub(crate) mod tool_search;
mod toolsets;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};
use troupe_actors::delegate::DelegationConfig;
use troupe_actors::supervisor::ApprovalConfig;
use troupe_actors::usage::{Budget, PriceTable};
use troupe_tools::ToolSearchConfig;
use troupe_tools::builtin::BuiltinConfig;
use troupe_tools::text::yaml_kind;

pub use kanban::{KanbanSettings, ProfileSettings, StoreLocation};
pub use keys::{ConfigError, parse_duration, redact_url};
pub use model::{MODE_MEMORY_FILE, ModelSection};
pub use sessions::{SESSIONS_FILE, SessionSettings};
pub use terminal::BackendChoice;
pub use toolsets::ToolsetsSection;
pub use troupe_tools::home::TroupeHome;

use keys::{invalid, keyed_error, mapping};

/// Top-level keys troupe reads. Others are kept (a Hermes config may carry more) but warned of
/// (`known_keys`).
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

/// A checked troupe.yaml.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where it was read from, if from a file.
    pub path: Option<PathBuf>,
    /// troupe's home directory (`TROUPE_HOME`, else `~/.troupe`).
    pub home: TroupeHome,
    /// The `model` section.
    pub model: ModelSection,
    /// The `toolsets` section.
    pub toolsets: ToolsetsSection,
    /// `tools.tool_search`, parsed leniently.
    pub tool_search: ToolSearchConfig,
    /// `tools.connectors`: the connector gateway, `None` when absent or disabled.
    pub connectors: Option<connectors::ConnectorsSettings>,
    /// `mcp_servers`, as written: the MCP layer parses it (one bad server never stops the rest).
    pub mcp_servers: Value,
    /// `budget`: what each session (with its subagents) may spend; no limit by default.
    pub budget: Budget,
    /// List prices with `pricing` laid over them.
    pub prices: Arc<PriceTable>,
    /// `approvals`: who answers, and which tools always ask.
    pub approvals: ApprovalConfig,
    /// `delegation`: the limits of subagent trees.
    pub delegation: DelegationConfig,
    /// `kanban` with `profiles`: the board store, the dispatcher and the named agents.
    pub kanban: KanbanSettings,
    /// `terminal` and `code_execution`: the built-in tools' settings.
    pub builtins: BuiltinConfig,
    /// `terminal.backend`: where commands run.
    pub backend: BackendChoice,
    /// `sessions`: whether and where sessions are kept.
    pub sessions: SessionSettings,
    /// `observability`: where traces go.
    pub observability: observability::ObservabilitySettings,
    /// `hooks`: the commands troupe.yaml attaches to hook points, by point (each runs in the
    /// config file's folder).
    pub hooks: BTreeMap<String, Vec<hooks::CommandSpec>>,
    /// `plugins`: which plugins are switched on and off.
    pub plugins: plugins::Enablement,
    /// `serve`: where `troupe serve` listens, and its limits.
    pub serve: serve::ServeConfig,
    /// The whole document as written, for the sections handed on (see the module doc).
    pub raw: Value,
    /// What is likely a mistake but stops nothing: keys troupe does not read (with the
    /// closest known one), an `api_key_env` naming an unset variable. Logged when a file is
    /// loaded; `troupe config check` lists them.
    pub warnings: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        // The defaults check cleanly by construction: an empty document has no bad key.
        match Settings::check(Value::Null, None) {
            Ok(settings) => settings,
            Err(e) => unreachable!("the empty troupe.yaml is valid: {e}"),
        }
    }
}

/// The config file a command reads when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "troupe.yaml";

impl Settings {
    /// Reads and checks a config file (YAML or JSON, by content). Relative paths in it follow
    /// the file's folder.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        troupe_tools::input_limits::check_config_text(&text, &path.display().to_string())
            .map_err(ConfigError::TooLarge)?;
        let raw = parse_document(&text).map_err(|e| match e {
            ConfigError::Syntax { reason, .. } => ConfigError::Syntax {
                path: path.to_path_buf(),
                reason,
            },
            other => other,
        })?;
        let settings = Self::check(raw, Some(path))?;
        // Said once, when a command reads its file (`troupe config check` lists them itself).
        for warning in &settings.warnings {
            tracing::warn!("{}: {warning}", path.display());
        }
        Ok(settings)
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
        Self::check(raw, None)
    }

    /// The second step: every section checked into its typed value. `path` is the file the
    /// document came from.
    pub(crate) fn check(raw: Value, path: Option<&Path>) -> Result<Self, ConfigError> {
        let root = match &raw {
            Value::Object(map) => map.clone(),
            Value::Null => Map::new(),
            other => {
                return Err(invalid(
                    "(top level)",
                    format!(
                        "expected a mapping of sections (model, toolsets, tools, mcp_servers, ...), found {}",
                        yaml_kind(other)
                    ),
                ));
            }
        };
        let mut warnings: Vec<String> = known_keys::unknown_keys(&raw, &known_keys::TOP)
            .iter()
            .map(ToString::to_string)
            .collect();
        let section = |name: &str| root.get(name).unwrap_or(&Value::Null);
        let home = TroupeHome::from_env();
        let tools = mapping(section("tools"), "tools")?;
        let base = path
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty());
        let tool_search = tool_search::tool_search_section(
            tools.get("tool_search").unwrap_or(&Value::Null),
            &config_dir(base),
            &home,
            &mut warnings,
        )?;
        let terminal = terminal::TerminalSettings::from_sections(
            section("terminal"),
            section("code_execution"),
            section("execute_code"),
            base,
            &home,
        )?;
        let kanban = KanbanSettings::from_sections(section("kanban"), section("profiles"), &home)?;
        let sessions = SessionSettings::from_section(section("sessions"), &kanban.store, &home)?;
        let model = model::model_section(&root)?;
        warnings.extend(unset_key_variables(&model, &kanban));
        Ok(Settings {
            path: path.map(Path::to_path_buf),
            model,
            toolsets: toolsets::toolsets_section(&root)?,
            tool_search,
            connectors: connectors::ConnectorsSettings::from_section(
                tools.get("connectors").unwrap_or(&Value::Null),
            )?,
            mcp_servers: section("mcp_servers").clone(),
            budget: Budget::from_value("budget", section("budget"))
                .map_err(|m| keyed_error("budget", m))?,
            prices: Arc::new(
                PriceTable::from_value(section("pricing"))
                    .map_err(|m| keyed_error("pricing", m))?,
            ),
            approvals: ApprovalConfig::from_value(section("approvals"))
                .map_err(|problem| keyed_error("approvals", problem))?,
            // The actors crate says `delegation.key: problem`; the key is kept apart.
            delegation: DelegationConfig::from_value(section("delegation"))
                .map_err(|message| keyed_error("delegation", message))?,
            kanban,
            builtins: terminal.builtins,
            backend: terminal.backend,
            sessions,
            hooks: match section("hooks") {
                Value::Null => BTreeMap::new(),
                value => hooks::hook_table(value, "hooks", &config_dir(base))
                    .map_err(|(key, problem)| invalid(&key, problem))?,
            },
            plugins: plugins::Enablement::from_section(section("plugins"))?,
            serve: serve::ServeConfig::from_value(section("serve"))?,
            observability: observability::ObservabilitySettings::from_section(section(
                "observability",
            ))?,
            home,
            raw,
            warnings,
        })
    }

    /// A top-level section as written (`null` when absent).
    pub fn section(&self, name: &str) -> &Value {
        self.raw.get(name).unwrap_or(&Value::Null)
    }

    /// The folder relative paths in the file follow: the file's own; `None` for a document
    /// that came from no file.
    pub fn base_dir(&self) -> Option<&Path> {
        self.path
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
    }

    /// The phrasings file `tools.tool_search.phrasings` names, resolved against the file's
    /// folder; `None` when it names none.
    pub fn phrasings_path(&self) -> Result<Option<PathBuf>, ConfigError> {
        let section = self
            .section("tools")
            .get("tool_search")
            .unwrap_or(&Value::Null);
        tool_search::phrasings_path(section, &config_dir(self.base_dir()))
    }

    /// The MCP servers `mcp_servers` names, with relative paths resolved against the file's
    /// folder. A bad entry is a warning on that server, never an error for the rest.
    pub fn mcp_server_list(&self) -> troupe_tools::mcp::McpServers {
        let servers = troupe_tools::mcp::McpServers::parse(&self.mcp_servers, self.base_dir());
        for warning in &servers.warnings {
            tracing::warn!("{warning}");
        }
        servers
    }
}

/// Each `api_key_env` (of `model` and of the profiles) that names a variable the environment
/// does not set: the key would silently be missing from every request.
fn unset_key_variables(model: &ModelSection, kanban: &KanbanSettings) -> Vec<String> {
    let unset = |name: &str| std::env::var(name).map_or(true, |v| v.trim().is_empty());
    let mut out = Vec::new();
    let mut check = |key: String, name: &Option<String>| {
        if let Some(name) = name
            && unset(name)
        {
            out.push(format!(
                "`{key}` names the environment variable {name}, which is not set: requests go without an API key. Export {name}=<your key> before running troupe, or name another variable"
            ));
        }
    };
    check("model.api_key_env".into(), &model.api_key_env);
    for (name, profile) in &kanban.profiles {
        check(format!("profiles.{name}.api_key_env"), &profile.api_key_env);
    }
    out
}

/// The folder troupe.yaml's relative paths (and hook commands) follow: the file's, else the
/// working directory.
fn config_dir(base: Option<&Path>) -> PathBuf {
    base.map(Path::to_path_buf)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Parses YAML (or JSON) text into a JSON value.
pub(crate) fn parse_document(text: &str) -> Result<Value, ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_yaml_sections() {
        let config = Settings::parse(
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
        let config = Settings::parse(r#"{"tools": {"tool_search": {"listing": "off"}}}"#).unwrap();
        assert_eq!(config.tool_search.listing, troupe_tools::Switch::Off);
    }

    #[test]
    fn errors_name_the_key() {
        let err = Settings::parse("model:\n  base_url: 5\n").unwrap_err();
        assert!(err.to_string().contains("model.base_url"), "{err}");
        let err = Settings::parse("tools: [1]\n").unwrap_err();
        assert!(err.to_string().contains("`tools`"), "{err}");
        let err = Settings::parse("model: {\n").unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
        let err = Settings::parse("toolsets: {blocked_tools: {terminal: true}}\n").unwrap_err();
        assert!(err.to_string().contains("toolsets.blocked_tools"), "{err}");
    }

    #[test]
    fn single_tools_can_be_blocked() {
        let config =
            Settings::parse("toolsets:\n  enabled: [core]\n  blocked_tools: [terminal, patch]\n")
                .unwrap();
        assert_eq!(config.toolsets.enabled, Some(vec!["core".to_string()]));
        assert_eq!(config.toolsets.blocked_tools, vec!["terminal", "patch"]);
    }
}
