//! The `kanban:` and `profiles:` sections of `troupe.yaml`, checked into [`KanbanSettings`]
//! (the board store's [`StoreLocation`], the dispatcher's limits, each profile's
//! [`ProfileSettings`] with its model, toolsets and own `terminal:`), and [`open_location`],
//! which opens the board store a location names (a SQLite directory or a
//! `postgres://` URL). Read by `troupe kanban`, `troupe serve`, the runtime and
//! [`crate::kanban_api`].
//! Durations are written as `90`, `90s`, `30m`, `2h` or `1d` ([`super::parse_duration`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_actors::session::SessionConfig;
use troupe_actors::usage::Budget;
use troupe_kanban::dispatcher::{DEFAULT_MAX_IN_PROGRESS, DispatcherConfig};
use troupe_kanban::domain::{DEFAULT_CLAIM_TTL, DEFAULT_FAILURE_LIMIT};
use troupe_kanban::store::{PostgresStore, SqliteStore, Store, StoreError};
use troupe_tools::home::TroupeHome;
use troupe_tools::text::yaml_kind;

use super::keys::{ConfigError, count, duration, invalid, keyed_error, names, redact_url, string};
use super::terminal::BackendChoice;

/// How often a dispatcher looks for work when nothing wakes it: a round a minute, the pace the
/// reference's gateway keeps.
pub const DEFAULT_DISPATCH_INTERVAL: Duration = Duration::from_secs(60);

/// Where a board store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An embedded SQLite store: a directory holding one database file per board.
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by many hosts (`postgres://...`).
    Postgres(String),
}

impl StoreLocation {
    /// Reads a `--store` value or `kanban.store` setting: a `postgres://` or `postgresql://` URL,
    /// else a directory path (`~/` is expanded).
    pub fn parse(raw: &str) -> Result<StoreLocation, String> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(
                "the store is empty; give a directory for a SQLite store or a postgres://user@host/db URL"
                    .into(),
            );
        }
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(raw.to_string()));
        }
        if let Some((scheme, _)) = raw.split_once("://") {
            return Err(format!(
                "{scheme}:// stores are not supported; give a directory for a SQLite store or a postgres:// URL"
            ));
        }
        let path = match raw.strip_prefix("~/") {
            Some(rest) => match std::env::var_os("HOME") {
                Some(home) => PathBuf::from(home).join(rest),
                None => {
                    return Err(format!(
                        "{raw} starts with ~/ but HOME is not set; give an absolute directory"
                    ));
                }
            },
            None => PathBuf::from(raw),
        };
        Ok(StoreLocation::Sqlite(path))
    }

    /// The location for people to read: the directory, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            StoreLocation::Sqlite(path) => format!("SQLite store at {}", path.display()),
            StoreLocation::Postgres(url) => format!("PostgreSQL store at {}", redact_url(url)),
        }
    }

    /// The file that remembers the board `troupe kanban boards switch` chose: `current` in a
    /// SQLite store's directory (the file [`SqliteStore`] itself reads), or
    /// `<troupe home>/kanban/postgres-current-<hash of the URL>` for PostgreSQL.
    pub fn current_board_file(&self, home: &TroupeHome) -> PathBuf {
        match self {
            StoreLocation::Sqlite(dir) => dir.join("current"),
            StoreLocation::Postgres(url) => {
                // One file per database, named by a hash of its URL (which may hold a password).
                let hash = url.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                home.path()
                    .join("kanban")
                    .join(format!("postgres-current-{hash:016x}"))
            }
        }
    }
}

/// A named agent configuration that tasks are assigned to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileSettings {
    /// The profile's name (what `--assignee` names).
    pub name: String,
    /// Base URL of its OpenAI-compatible API; the `model` section's when absent.
    pub base_url: Option<String>,
    /// Model name; the `model` section's when absent.
    pub model: Option<String>,
    /// Its API key itself (prefer `api_key_env`); masked in every output like any of troupe's
    /// keys.
    pub api_key: Option<String>,
    /// The environment variable holding its API key.
    pub api_key_env: Option<String>,
    /// Toolsets its workers get, besides the kanban tools (none when empty).
    pub toolsets: Vec<String>,
    /// Single tools taken away from those toolsets (`blocked_tools: [clarify]`): a profile
    /// keeps `core` but leaves out `todo`, `clarify` or `memory`, say.
    pub blocked_tools: Vec<String>,
    /// Text added to its workers' system prompt.
    pub system_prompt: Option<String>,
    /// A scripted model file to answer instead of a server (offline runs and tests).
    pub script: Option<PathBuf>,
    /// Tool rounds a worker may take before it must finish.
    pub max_iterations: Option<u32>,
    /// Provider settings it writes (`tool_calls`, ...), over the `model:` section's.
    pub provider: troupe_actors::model::ProviderOverrides,
    /// What one run of a task may spend; each limit it sets replaces the top-level
    /// `budget:`'s. A run that spends it blocks its task with kind `budget`.
    pub budget: Budget,
    /// Where its workers' commands run, when not where `terminal:` says (`terminal:` under
    /// the profile, with the same keys), and whether they still ask before dangerous ones.
    pub terminal: Option<(BackendChoice, bool)>,
    /// Whether its completions wait for review, and who reviews them (`review:`).
    pub review: Option<super::review::ReviewSetting>,
}

impl ProfileSettings {
    /// `base` with this profile's system prompt, tool rounds, model name and budget.
    pub fn session_config(&self, base: &SessionConfig) -> SessionConfig {
        let mut config = base.clone();
        config.system_prompt = self.system_prompt.clone();
        if let Some(max) = self.max_iterations {
            config.max_iterations = max;
        }
        if let Some(model) = &self.model {
            config.model = Some(model.clone());
        }
        let own = self.budget;
        config.budget = Budget {
            max_tokens: own.max_tokens.or(base.budget.max_tokens),
            max_cost_usd: own.max_cost_usd.or(base.budget.max_cost_usd),
            max_wall_seconds: own.max_wall_seconds.or(base.budget.max_wall_seconds),
        };
        config
    }
}

/// The checked `kanban:` section with its `profiles:`.
#[derive(Debug, Clone, PartialEq)]
pub struct KanbanSettings {
    /// Where the boards live.
    pub store: StoreLocation,
    /// The profile that runs tasks with no assignee; they are reported unassigned when `None`.
    pub default_assignee: Option<String>,
    /// Failures before a task is given up and blocked, when the task sets no `max_retries`.
    pub failure_limit: u32,
    /// Tasks running at once in one dispatcher; no limit when `None`.
    pub max_in_progress: Option<usize>,
    /// Per-profile caps on running tasks.
    pub max_in_progress_per_assignee: BTreeMap<String, usize>,
    /// How often the dispatcher sweeps when no event wakes it.
    pub dispatch_interval: Duration,
    /// How long a claim lasts before a heartbeat must extend it.
    pub lease_ttl: Duration,
    /// Only these profiles are dispatched (`dispatch_profiles`); any when `None`.
    pub dispatch_profiles: Option<Vec<String>>,
    /// Profiles a worker may assign its children to besides its own and the default
    /// (`worker_assignable_profiles`).
    pub worker_assignable_profiles: Vec<String>,
    /// The named agent configurations, by name.
    pub profiles: BTreeMap<String, ProfileSettings>,
}

impl KanbanSettings {
    /// The settings with nothing written: the boards in troupe's home.
    pub fn defaults(home: &TroupeHome) -> Self {
        KanbanSettings {
            store: StoreLocation::Sqlite(default_store_dir(home)),
            default_assignee: None,
            failure_limit: DEFAULT_FAILURE_LIMIT,
            max_in_progress: None,
            max_in_progress_per_assignee: BTreeMap::new(),
            dispatch_interval: DEFAULT_DISPATCH_INTERVAL,
            lease_ttl: DEFAULT_CLAIM_TTL,
            dispatch_profiles: None,
            worker_assignable_profiles: Vec::new(),
            profiles: BTreeMap::new(),
        }
    }
}

impl KanbanSettings {
    /// Reads a `kanban` section and a `profiles` section as written.
    pub fn from_sections(
        kanban: &Value,
        profiles: &Value,
        home: &TroupeHome,
    ) -> Result<KanbanSettings, ConfigError> {
        let empty = Map::new();
        let map = match kanban {
            Value::Null => &empty,
            Value::Object(map) => map,
            other => {
                return Err(invalid(
                    "kanban",
                    format!("expected a mapping, found {}", yaml_kind(other)),
                ));
            }
        };
        let mut settings = KanbanSettings::defaults(home);
        if let Some(raw) = string(map, "kanban", "store")? {
            settings.store =
                StoreLocation::parse(&raw).map_err(|problem| invalid("kanban.store", problem))?;
        }
        settings.default_assignee = string(map, "kanban", "default_assignee")?;
        if let Some(n) = count(map, "kanban", "failure_limit")? {
            if n == 0 {
                return Err(invalid(
                    "kanban.failure_limit",
                    "must be at least 1 (the number of failed runs before a task is given up)"
                        .into(),
                ));
            }
            settings.failure_limit = u32::try_from(n)
                .map_err(|_| invalid("kanban.failure_limit", format!("{n} is too large")))?;
        }
        settings.max_in_progress = match count(map, "kanban", "max_in_progress")? {
            Some(0) => {
                return Err(invalid(
                    "kanban.max_in_progress",
                    "must be at least 1; leave it out for no limit".into(),
                ));
            }
            other => other.map(|n| n as usize),
        };
        for key in [
            "max_in_progress_per_assignee",
            "max_in_progress_per_profile",
        ] {
            match map.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(caps)) => {
                    for (profile, cap) in caps {
                        let cap = cap.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                            invalid(
                                &format!("kanban.{key}.{profile}"),
                                format!(
                                    "expected a whole number of tasks of at least 1, found {cap}"
                                ),
                            )
                        })?;
                        settings
                            .max_in_progress_per_assignee
                            .insert(profile.clone(), cap as usize);
                    }
                }
                Some(other) => {
                    return Err(invalid(
                        &format!("kanban.{key}"),
                        format!(
                            "expected a mapping of profile name to a cap such as {{coder: 2}}, found {}",
                            yaml_kind(other)
                        ),
                    ));
                }
            }
        }
        for key in ["dispatch_interval", "dispatch_interval_seconds"] {
            if let Some(d) = duration(map, "kanban", key)? {
                settings.dispatch_interval = d;
            }
        }
        for key in ["lease_ttl", "claim_ttl", "claim_ttl_seconds"] {
            if let Some(d) = duration(map, "kanban", key)? {
                settings.lease_ttl = d;
            }
        }
        if let Some(v) = map.get("dispatch_profiles").filter(|v| !v.is_null()) {
            settings.dispatch_profiles = Some(names("kanban.dispatch_profiles", v)?);
        }
        if let Some(v) = map
            .get("worker_assignable_profiles")
            .filter(|v| !v.is_null())
        {
            settings.worker_assignable_profiles = names("kanban.worker_assignable_profiles", v)?;
        }
        settings.profiles = profiles_section(profiles)?;
        super::review::check_reviewers(&settings.profiles)?;
        if let Some(name) = &settings.default_assignee
            && !settings.profiles.is_empty()
            && !settings.profiles.contains_key(name)
        {
            return Err(invalid(
                "kanban.default_assignee",
                format!(
                    "names the profile {name:?}, which is not under profiles: (known: {})",
                    known(&settings.profiles)
                ),
            ));
        }
        Ok(settings)
    }
}

impl KanbanSettings {
    /// The dispatcher settings these give: budgets, caps, lease, tick, failure limit.
    pub fn dispatcher_config(&self) -> DispatcherConfig {
        let mut config = DispatcherConfig::default()
            .with_interval(self.dispatch_interval)
            .with_lease_ttl(self.lease_ttl)
            .with_max_in_progress(self.max_in_progress.unwrap_or(DEFAULT_MAX_IN_PROGRESS))
            .with_failure_limit(self.failure_limit);
        for (profile, cap) in &self.max_in_progress_per_assignee {
            config = config.with_assignee_cap(profile.clone(), *cap);
        }
        if let Some(allow) = &self.dispatch_profiles {
            config = config.with_dispatch_profiles(allow.clone());
        }
        config.with_worker_assignable_profiles(self.worker_assignable_profiles.clone())
    }
}

/// The profile names, for an error that names an unknown one.
pub fn known(profiles: &BTreeMap<String, ProfileSettings>) -> String {
    if profiles.is_empty() {
        "none".into()
    } else {
        profiles.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

pub(super) const KNOWN_KANBAN_KEYS: &[&str] = &[
    "store",
    "default_assignee",
    "failure_limit",
    "max_in_progress",
    "max_in_progress_per_assignee",
    "max_in_progress_per_profile",
    "dispatch_interval",
    "dispatch_interval_seconds",
    "lease_ttl",
    "claim_ttl",
    "claim_ttl_seconds",
    "dispatch_profiles",
    "worker_assignable_profiles",
    "dispatch_in_gateway",
];

/// `profiles:`: a mapping of name to settings.
fn profiles_section(value: &Value) -> Result<BTreeMap<String, ProfileSettings>, ConfigError> {
    let map = match value {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(map) => map,
        other => {
            return Err(invalid(
                "profiles",
                format!(
                    "expected a mapping of profile name to its settings (model, base_url, toolsets, system_prompt), found {}",
                    yaml_kind(other)
                ),
            ));
        }
    };
    let mut out = BTreeMap::new();
    for (name, body) in map {
        let prefix = format!("profiles.{name}");
        if name.trim().is_empty() || name.chars().any(char::is_whitespace) {
            return Err(invalid(
                &prefix,
                "a profile name must be one word without spaces, such as coder".into(),
            ));
        }
        let empty = Map::new();
        let fields = match body {
            Value::Null => &empty,
            Value::Object(fields) => fields,
            other => {
                return Err(invalid(
                    &prefix,
                    format!("expected a mapping of settings, found {}", yaml_kind(other)),
                ));
            }
        };
        let field = |key: &str| string(fields, &prefix, key);
        let toolsets = match fields.get("toolsets") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => names(&format!("{prefix}.toolsets"), v)?,
        };
        let blocked_tools = match fields.get("blocked_tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => names(&format!("{prefix}.blocked_tools"), v)?,
        };
        let max_iterations =
            count(fields, &prefix, "max_iterations")?.map(|n| n.min(u64::from(u32::MAX)) as u32);
        out.insert(
            name.clone(),
            ProfileSettings {
                name: name.clone(),
                base_url: field("base_url")?,
                model: field("model")?,
                api_key: field("api_key")?,
                api_key_env: field("api_key_env")?,
                toolsets,
                blocked_tools,
                system_prompt: field("system_prompt")?,
                script: field("script")?.map(PathBuf::from),
                max_iterations,
                provider: troupe_actors::model::ProviderOverrides::from_fields(fields, &prefix)
                    .map_err(|problem| invalid(&prefix, problem))?,
                budget: Budget::from_value(
                    &format!("{prefix}.budget"),
                    fields.get("budget").unwrap_or(&Value::Null),
                )
                .map_err(|m| keyed_error(&prefix, m))?,
                terminal: profile_terminal(fields, &prefix)?,
                review: super::review::read(fields.get("review"), &prefix)?,
            },
        );
    }
    Ok(out)
}

/// A profile's own `terminal:` backend, checked like the top-level one.
fn profile_terminal(
    fields: &Map<String, Value>,
    prefix: &str,
) -> Result<Option<(BackendChoice, bool)>, ConfigError> {
    let section = format!("{prefix}.terminal");
    let terminal = match fields.get("terminal") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(invalid(
                &section,
                format!(
                    "expected a mapping such as {{backend: docker, docker_image: ...}}, found {}",
                    yaml_kind(other)
                ),
            ));
        }
    };
    for key in terminal.keys() {
        if !super::terminal::BACKEND_KEYS.contains(&key.as_str()) {
            return Err(invalid(
                &format!("{section}.{key}"),
                format!(
                    "a profile's terminal: sets only where its commands run ({}); put other terminal settings under the top-level terminal:",
                    super::terminal::BACKEND_KEYS.join(", ")
                ),
            ));
        }
    }
    let choice =
        super::terminal::backend_choice(terminal, &section, &|var| std::env::var(var).ok())?;
    let ask = !matches!(
        terminal.get("dangerous_command_approval"),
        Some(Value::Bool(false))
    );
    Ok(Some((choice, ask)))
}

/// Opens the store at a location: the SQLite directory (created when missing) or the
/// PostgreSQL database (schema created or migrated).
pub async fn open_location(location: &StoreLocation) -> Result<Arc<dyn Store>, StoreError> {
    match location {
        StoreLocation::Sqlite(dir) => Ok(Arc::new(SqliteStore::open(dir.clone()).await?)),
        StoreLocation::Postgres(url) => Ok(Arc::new(PostgresStore::connect(url).await?)),
    }
}

/// Where the boards live when nothing says otherwise: `<troupe home>/kanban`.
pub fn default_store_dir(home: &TroupeHome) -> PathBuf {
    home.path().join("kanban")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<KanbanSettings, ConfigError> {
        crate::settings::Settings::parse(yaml).map(|s| s.kanban)
    }

    #[test]
    fn reads_every_setting() {
        let s = settings(
            "kanban:\n  store: /tmp/boards\n  default_assignee: coder\n  failure_limit: 3\n  max_in_progress: 8\n  max_in_progress_per_assignee: {coder: 2}\n  dispatch_interval: 5s\n  lease_ttl: 10m\nprofiles:\n  coder:\n    model: qwen\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: CODER_KEY\n    toolsets: [terminal, file]\n    system_prompt: You write code.\n",
        )
        .unwrap();
        assert_eq!(s.store, StoreLocation::Sqlite(PathBuf::from("/tmp/boards")));
        assert_eq!(s.default_assignee.as_deref(), Some("coder"));
        assert_eq!(s.failure_limit, 3);
        assert_eq!(s.max_in_progress, Some(8));
        assert_eq!(s.max_in_progress_per_assignee.get("coder"), Some(&2));
        assert_eq!(s.dispatch_interval, Duration::from_secs(5));
        assert_eq!(s.lease_ttl, Duration::from_secs(600));
        let coder = &s.profiles["coder"];
        assert_eq!(coder.model.as_deref(), Some("qwen"));
        assert_eq!(coder.toolsets, vec!["terminal", "file"]);
        assert_eq!(coder.system_prompt.as_deref(), Some("You write code."));
    }

    #[test]
    fn a_profile_blocks_single_tools() {
        let s = settings(
            "profiles:\n  coder:\n    toolsets: [core]\n    blocked_tools: [clarify, memory]\n",
        )
        .unwrap();
        assert_eq!(s.profiles["coder"].blocked_tools, vec!["clarify", "memory"]);
        let err =
            settings("profiles:\n  coder:\n    blocked_tools: {clarify: true}\n").unwrap_err();
        assert!(
            err.to_string().contains("profiles.coder.blocked_tools"),
            "{err}"
        );
    }

    #[test]
    fn defaults_apply() {
        let s = settings("").unwrap();
        assert_eq!(s.failure_limit, DEFAULT_FAILURE_LIMIT);
        assert_eq!(s.lease_ttl, DEFAULT_CLAIM_TTL);
        assert_eq!(s.dispatch_interval, DEFAULT_DISPATCH_INTERVAL);
        assert!(matches!(s.store, StoreLocation::Sqlite(_)));
    }

    #[test]
    fn postgres_urls_are_recognised_and_redacted() {
        let s = settings("kanban: {store: 'postgres://me:secret@db/boards'}").unwrap();
        assert_eq!(
            s.store,
            StoreLocation::Postgres("postgres://me:secret@db/boards".into())
        );
        assert!(!s.store.describe().contains("secret"));
    }

    #[test]
    fn bad_values_name_the_key() {
        for (yaml, key) in [
            ("kanban: {failure_limit: 0}", "kanban.failure_limit"),
            ("kanban: {failure_limit: two}", "kanban.failure_limit"),
            ("kanban: {max_in_progress: -1}", "kanban.max_in_progress"),
            ("kanban: {lease_ttl: soon}", "kanban.lease_ttl"),
            ("kanban: {store: 'mysql://x'}", "kanban.store"),
            (
                "kanban: {max_in_progress_per_assignee: {coder: 0}}",
                "kanban.max_in_progress_per_assignee.coder",
            ),
            ("kanban: [1]", "kanban"),
            ("profiles: [a]", "profiles"),
            (
                "profiles: {coder: {toolsets: 3}}",
                "profiles.coder.toolsets",
            ),
            ("profiles: {coder: {model: 3}}", "profiles.coder"),
            (
                "kanban: {default_assignee: ghost}\nprofiles: {coder: {}}",
                "kanban.default_assignee",
            ),
        ] {
            let err = settings(yaml).unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
