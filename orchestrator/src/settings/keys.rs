//! The one error shape of troupe.yaml ([`ConfigError`]) and the key readers every section uses:
//! each names the full key path (`kanban.lease_ttl`) and says what to write instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_tools::text::yaml_kind;

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

/// The error for `key`.
pub(crate) fn invalid(key: &str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        problem,
    }
}

/// A config error from another crate's parser, whose message starts with the key path
/// (`budget.max_tokens: ...`); `section` when it does not.
pub(crate) fn keyed_error(section: &str, message: String) -> ConfigError {
    match message.split_once(": ") {
        Some((key, problem)) if key.starts_with(section) => invalid(key, problem.to_string()),
        _ => invalid(section, message),
    }
}

/// A mapping as written (empty when absent or null).
pub(crate) fn mapping(value: &Value, key: &str) -> Result<Map<String, Value>, ConfigError> {
    match value {
        Value::Null => Ok(Map::new()),
        Value::Object(map) => Ok(map.clone()),
        other => Err(invalid(
            key,
            format!("expected a mapping, found {}", yaml_kind(other)),
        )),
    }
}

/// `section.key` as a string; blank counts as absent.
pub(crate) fn string(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<String>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(other) => Err(invalid(
            &format!("{section}.{key}"),
            format!("expected a string, found {}", yaml_kind(other)),
        )),
    }
}

/// `section.key` as a whole number of at least 1.
pub(crate) fn whole(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<u64>, ConfigError> {
    number_from(map, section, key, 1)
}

/// `section.key` as a whole number, 0 allowed.
pub(crate) fn count(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<u64>, ConfigError> {
    number_from(map, section, key, 0)
}

fn number_from(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
    least: u64,
) -> Result<Option<u64>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= least) => Ok(n.as_u64()),
        Some(other) => Err(invalid(
            &format!("{section}.{key}"),
            format!("expected a whole number of at least {least}, such as 4, found {other}"),
        )),
    }
}

/// `section.key` as true or false.
pub(crate) fn flag(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<bool>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(invalid(
            &format!("{section}.{key}"),
            format!("expected true or false, found {}", yaml_kind(other)),
        )),
    }
}

/// `section.key` as a duration: whole seconds (`90`) or a number with a unit (`90s`, `5m`).
pub(crate) fn duration(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<Duration>, ConfigError> {
    let problem = |found: String| {
        invalid(
            &format!("{section}.{key}"),
            format!(
                "expected a duration in whole seconds (60) or with a unit (30s, 15m, 1h), found {found}"
            ),
        )
    };
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(secs) if secs > 0 => Ok(Some(Duration::from_secs(secs))),
            _ => Err(problem(n.to_string())),
        },
        Some(Value::String(s)) => parse_duration(s)
            .map(Some)
            .map_err(|_| problem(format!("{s:?}"))),
        Some(other) => Err(problem(yaml_kind(other).to_string())),
    }
}

/// Whole seconds (`90`) or a duration with a unit (`90s`, `5m`).
pub(crate) fn seconds(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<u64>, ConfigError> {
    match map.get(key) {
        Some(Value::String(s)) => parse_duration(s)
            .map(|d| Some(d.as_secs()))
            .map_err(|problem| invalid(&format!("{section}.{key}"), problem)),
        _ => whole(map, section, key).map_err(|_| {
            invalid(
                &format!("{section}.{key}"),
                "expected seconds (180) or a duration such as 3m".into(),
            )
        }),
    }
}

/// A list of names, written `[a, b]` or `a, b`.
pub(crate) fn names(key: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
    match value {
        Value::String(s) => Ok(s
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                other => Err(invalid(
                    key,
                    format!("expected a list of names, found {other} in it"),
                )),
            })
            .collect(),
        other => Err(invalid(
            key,
            format!(
                "expected a list of names ([a, b] or a, b), found {}",
                yaml_kind(other)
            ),
        )),
    }
}

/// A path from the config: `~/` is the home folder; a relative one follows `base` (the config
/// file's folder), else the working directory.
pub(crate) fn absolute(raw: &str, base: Option<&Path>) -> PathBuf {
    let path = match raw.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(raw),
        },
        None => PathBuf::from(raw),
    };
    if path.is_absolute() {
        return path;
    }
    let base = base
        .map(Path::to_path_buf)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let joined = base.join(path);
    joined.canonicalize().unwrap_or(joined)
}

/// Reads a duration: whole seconds (`90`), or a number with `s`, `m`, `h` or `d`.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let text = raw.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit.trim() {
        "s" | "sec" | "secs" => 1,
        "m" | "min" | "mins" => 60,
        "h" | "hr" | "hrs" => 3600,
        "d" | "day" | "days" => 86_400,
        _ => 0,
    };
    match digits.parse::<u64>() {
        Ok(n) if scale > 0 && n > 0 => n
            .checked_mul(scale)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{text:?} is too long a duration")),
        _ => Err(format!(
            "{text:?} is not a duration; write whole seconds (90) or a number with s, m, h or d (30m, 2h, 1d)"
        )),
    }
}

/// Hides the password of a URL (`postgres://user:secret@host` → `postgres://user:***@host`).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5w").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("postgres://troupe:secret@db:5432/boards"),
            "postgres://troupe:***@db:5432/boards"
        );
        assert_eq!(redact_url("postgres://db/boards"), "postgres://db/boards");
    }

    #[test]
    fn keyed_errors_keep_the_key_path() {
        let e = keyed_error("budget", "budget.max_tokens: must be positive".into());
        assert_eq!(
            e.to_string(),
            "config key `budget.max_tokens`: must be positive"
        );
        let e = keyed_error("budget", "not a mapping".into());
        assert_eq!(e.to_string(), "config key `budget`: not a mapping");
    }
}
