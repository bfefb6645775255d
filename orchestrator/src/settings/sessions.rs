//! The `sessions:` section: whether sessions are kept, where, and for how long.

use serde_json::Value;
use troupe_tools::home::TroupeHome;

use super::kanban::StoreLocation;
use super::keys::{ConfigError, invalid};

/// The session store's file in troupe's home when nothing names another.
pub const SESSIONS_FILE: &str = "sessions.db";

/// The `sessions:` section of troupe.yaml.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSettings {
    /// Whether sessions are written at all (`sessions.persist`, on by default).
    pub persist: bool,
    /// Where (`sessions.store`): a SQLite file, or a PostgreSQL URL; else `kanban.store` when
    /// that is PostgreSQL, else [`SESSIONS_FILE`] in troupe's home.
    pub store: StoreLocation,
    /// Top-level sessions not written to for this many days go at `troupe sessions prune`
    /// (`sessions.keep_days`); kept forever when not given.
    pub keep_days: Option<u32>,
}

impl SessionSettings {
    /// Reads `sessions:` beside the board store `boards`; a wrong key or value is an error
    /// naming it.
    pub fn from_section(
        section: &Value,
        boards: &StoreLocation,
        home: &TroupeHome,
    ) -> Result<SessionSettings, ConfigError> {
        let invalid = |key: &str, problem: String| invalid(&format!("sessions.{key}"), problem);
        let mut settings = SessionSettings {
            persist: true,
            store: match boards {
                StoreLocation::Postgres(url) => StoreLocation::Postgres(url.clone()),
                StoreLocation::Sqlite(_) => StoreLocation::Sqlite(home.path().join(SESSIONS_FILE)),
            },
            keep_days: None,
        };
        let section = match section {
            Value::Null => return Ok(settings),
            Value::Object(map) => map,
            other => {
                return Err(ConfigError::Invalid {
                    key: "sessions".into(),
                    problem: format!(
                        "expected a mapping (persist, store, keep_days), found {}",
                        troupe_tools::text::yaml_kind(other)
                    ),
                });
            }
        };
        for (key, value) in section {
            match (key.as_str(), value) {
                ("persist", Value::Bool(on)) => settings.persist = *on,
                ("store", Value::String(raw)) => {
                    settings.store = StoreLocation::parse(raw).map_err(|problem| {
                        invalid(
                            key,
                            problem.replace("a directory for a SQLite store", "a SQLite file path"),
                        )
                    })?;
                }
                ("keep_days", Value::Number(n)) if n.as_u64().is_some_and(|d| d >= 1) => {
                    settings.keep_days = n.as_u64().and_then(|d| u32::try_from(d).ok());
                }
                ("persist" | "store" | "keep_days", other) => {
                    return Err(invalid(
                        key,
                        format!(
                            "this value ({}) is not valid; send {}",
                            troupe_tools::text::yaml_kind(other),
                            match key.as_str() {
                                "persist" => "true or false",
                                "store" => "a SQLite file path or a postgres:// URL",
                                _ => "a whole number of days, 1 or more",
                            }
                        ),
                    ));
                }
                (other, _) => {
                    return Err(invalid(
                        other,
                        "unknown key; sessions takes persist, store and keep_days".into(),
                    ));
                }
            }
        }
        Ok(settings)
    }
}
