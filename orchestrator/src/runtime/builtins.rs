//! The `terminal:` and `code_execution:` (also spelled `execute_code:`) sections of
//! `troupe.yaml`, checked into the [`BuiltinConfig`] the built-in tools start with. Keys left
//! out keep the built-in defaults; a bad value is an error naming the key and what to write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_tools::builtin::confine::ConfineMode;
use troupe_tools::builtin::{BuiltinConfig, CodeMode};

use super::backends::{BACKEND_KEYS, BackendChoice};
use crate::config::{Config, ConfigError};
use troupe_tools::text::yaml_kind;

const TERMINAL_KEYS: &[&str] = &[
    "backend",
    "cwd",
    "allowed_roots",
    "timeout",
    "max_foreground_timeout",
    "max_output_chars",
    "kill_grace",
    "env_passthrough",
    "confine",
    "network",
    "writable",
];

const CODE_KEYS: &[&str] = &[
    "timeout",
    "max_tool_calls",
    "mode",
    "python",
    "kill_grace",
    "max_stdout_bytes",
    "max_stderr_bytes",
    "env_passthrough",
];

/// The built-in tools' settings from a checked config: the defaults with what `terminal:` and
/// `code_execution:` say applied. Relative paths follow the config file's folder.
pub fn builtin_config(config: &Config) -> Result<BuiltinConfig, ConfigError> {
    let mut out = BuiltinConfig::default();
    let base = config
        .path
        .as_deref()
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let terminal = mapping(config.section("terminal"), "terminal")?;
    let known: Vec<&str> = TERMINAL_KEYS.iter().chain(BACKEND_KEYS).copied().collect();
    warn_unknown(&terminal, "terminal", &known);
    let backend = super::backends::configured_backend(config)?;
    out.terminal.dangerous_command_approval = !matches!(
        terminal.get("dangerous_command_approval"),
        Some(Value::Bool(false))
    );
    if let BackendChoice::Ssh(ssh) = &backend {
        // Paths are the remote host's: nothing to check here. Commands start in the remote
        // user's home unless told otherwise.
        out.default_cwd = match string(&terminal, "terminal", "cwd")? {
            Some(cwd) if cwd.starts_with('/') => PathBuf::from(cwd),
            Some(cwd) => {
                return Err(invalid(
                    "terminal.cwd",
                    format!(
                        "{cwd:?} is relative; on the ssh backend give an absolute path on the remote host"
                    ),
                ));
            }
            None => match ssh.user.as_deref() {
                Some("root") => PathBuf::from("/root"),
                Some(user) => PathBuf::from("/home").join(user),
                // ssh logs in as the local user.
                None => match std::env::var("USER") {
                    Ok(user) if !user.is_empty() && user != "root" => {
                        PathBuf::from("/home").join(user)
                    }
                    _ => PathBuf::from("/root"),
                },
            },
        };
    } else if let Some(cwd) = string(&terminal, "terminal", "cwd")? {
        let dir = absolute(&cwd, base.as_deref());
        if !dir.is_dir() {
            return Err(invalid(
                "terminal.cwd",
                format!(
                    "{} is not a directory; give an existing directory for sessions to start in",
                    dir.display()
                ),
            ));
        }
        out.default_cwd = dir;
    }
    if let Some(roots) = terminal.get("allowed_roots").filter(|v| !v.is_null()) {
        out.allowed_roots = strings(roots, "terminal.allowed_roots")?
            .iter()
            .map(|r| absolute(r, base.as_deref()))
            .collect();
    }
    if let Some(secs) = seconds(&terminal, "terminal", "timeout")? {
        out.terminal.default_timeout_secs = secs;
    }
    if let Some(secs) = seconds(&terminal, "terminal", "max_foreground_timeout")? {
        out.terminal.max_foreground_timeout_secs = secs;
    }
    if let Some(n) = whole(&terminal, "terminal", "max_output_chars")? {
        out.terminal.max_output_chars = n as usize;
    }
    if let Some(secs) = seconds(&terminal, "terminal", "kill_grace")? {
        out.terminal.kill_grace = Duration::from_secs(secs);
    }
    if let Some(v) = terminal.get("env_passthrough").filter(|v| !v.is_null()) {
        out.terminal.env_passthrough = strings(v, "terminal.env_passthrough")?;
    }
    match terminal.get("confine") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(on)) => {
            out.terminal.confine = if *on {
                ConfineMode::On
            } else {
                ConfineMode::Off
            }
        }
        Some(Value::String(text)) => {
            out.terminal.confine = ConfineMode::parse(text).ok_or_else(|| {
                invalid(
                    "terminal.confine",
                    format!("{text:?} is not a setting; write auto (confine where the kernel can), on (refuse to start without it) or off"),
                )
            })?;
        }
        Some(other) => {
            return Err(invalid(
                "terminal.confine",
                format!("expected auto, on or off, found {}", yaml_kind(other)),
            ));
        }
    }
    match terminal.get("network") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(on)) => out.terminal.network = *on,
        Some(other) => {
            return Err(invalid(
                "terminal.network",
                format!("expected true or false, found {}", yaml_kind(other)),
            ));
        }
    }
    if let Some(v) = terminal.get("writable").filter(|v| !v.is_null()) {
        for raw in strings(v, "terminal.writable")? {
            let path = absolute(&raw, base.as_deref());
            if !path.exists() {
                return Err(invalid(
                    "terminal.writable",
                    format!(
                        "{} does not exist; create it first, or remove it from the list",
                        path.display()
                    ),
                ));
            }
            out.terminal.writable.push(path);
        }
    }

    let (name, code) = match config.section("code_execution") {
        Value::Null => ("execute_code", config.section("execute_code")),
        section => ("code_execution", section),
    };
    let code = mapping(code, name)?;
    warn_unknown(&code, name, CODE_KEYS);
    if let Some(secs) = seconds(&code, name, "timeout")? {
        out.code.timeout = Duration::from_secs(secs);
    }
    if let Some(n) = whole(&code, name, "max_tool_calls")? {
        out.code.max_tool_calls = n as usize;
    }
    if let Some(mode) = string(&code, name, "mode")? {
        out.code.mode = CodeMode::parse(&mode).ok_or_else(|| {
            invalid(
                &format!("{name}.mode"),
                format!("{mode:?} is not a mode; write `project` (scripts run in the session's directory) or `strict` (in a scratch directory)"),
            )
        })?;
    }
    if let Some(python) = string(&code, name, "python")? {
        out.code.python = PathBuf::from(python);
    }
    if let Some(secs) = seconds(&code, name, "kill_grace")? {
        out.code.kill_grace = Duration::from_secs(secs);
    }
    if let Some(n) = whole(&code, name, "max_stdout_bytes")? {
        out.code.max_stdout_bytes = n as usize;
    }
    if let Some(n) = whole(&code, name, "max_stderr_bytes")? {
        out.code.max_stderr_bytes = n as usize;
    }
    if let Some(v) = code.get("env_passthrough").filter(|v| !v.is_null()) {
        out.code.env_passthrough = strings(v, &format!("{name}.env_passthrough"))?;
    }
    Ok(out)
}

pub(super) fn absolute(raw: &str, base: Option<&Path>) -> PathBuf {
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

pub(super) fn invalid(key: &str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        problem,
    }
}

pub(super) fn mapping(value: &Value, key: &str) -> Result<Map<String, Value>, ConfigError> {
    match value {
        Value::Null => Ok(Map::new()),
        Value::Object(map) => Ok(map.clone()),
        other => Err(invalid(
            key,
            format!("expected a mapping, found {}", yaml_kind(other)),
        )),
    }
}

fn warn_unknown(map: &Map<String, Value>, section: &str, known: &[&str]) {
    for key in map.keys() {
        if !known.contains(&key.as_str()) {
            tracing::warn!("troupe.yaml: troupe does not read {section}.{key}");
        }
    }
}

pub(super) fn string(
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

pub(super) fn whole(
    map: &Map<String, Value>,
    section: &str,
    key: &str,
) -> Result<Option<u64>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => Ok(n.as_u64()),
        Some(other) => Err(invalid(
            &format!("{section}.{key}"),
            format!("expected a whole number of at least 1, found {other}"),
        )),
    }
}

/// Whole seconds (`90`) or a duration with a unit (`90s`, `5m`).
fn seconds(map: &Map<String, Value>, section: &str, key: &str) -> Result<Option<u64>, ConfigError> {
    match map.get(key) {
        Some(Value::String(s)) => crate::kanban_config::parse_duration(s)
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

fn strings(value: &Value, key: &str) -> Result<Vec<String>, ConfigError> {
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
                other => Err(invalid(key, format!("expected strings, found {other}"))),
            })
            .collect(),
        other => Err(invalid(
            key,
            format!("expected a list of strings, found {}", yaml_kind(other)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "terminal:\n  cwd: {}\n  timeout: 3m\n  env_passthrough: [MY_TOKEN]\ncode_execution:\n  timeout: 20\n  max_tool_calls: 7\n  mode: strict\n",
            dir.path().display()
        );
        let config = Config::parse(&yaml).unwrap();
        let b = builtin_config(&config).unwrap();
        assert_eq!(b.default_cwd, dir.path());
        assert_eq!(b.terminal.default_timeout_secs, 180);
        assert_eq!(b.terminal.env_passthrough, vec!["MY_TOKEN"]);
        assert_eq!(b.code.timeout, Duration::from_secs(20));
        assert_eq!(b.code.max_tool_calls, 7);
        assert_eq!(b.code.mode, CodeMode::Strict);
        assert_eq!(b.terminal.confine, ConfineMode::Auto);
        let yaml = format!(
            "terminal:\n  confine: off\n  network: false\n  writable: ['{}']\n",
            dir.path().display()
        );
        let b = builtin_config(&Config::parse(&yaml).unwrap()).unwrap();
        assert_eq!(b.terminal.confine, ConfineMode::Off);
        assert!(!b.terminal.network);
        assert_eq!(b.terminal.writable, vec![dir.path().to_path_buf()]);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (yaml, key) in [
            ("terminal: {backend: vm}", "terminal.backend"),
            ("terminal: {backend: docker}", "terminal.docker_image"),
            ("terminal: {cwd: /no/such/dir/anywhere}", "terminal.cwd"),
            ("terminal: {timeout: soon}", "terminal.timeout"),
            (
                "code_execution: {max_tool_calls: 0}",
                "code_execution.max_tool_calls",
            ),
            ("execute_code: {mode: loose}", "execute_code.mode"),
            ("terminal: [1]", "terminal"),
            ("terminal: {confine: sometimes}", "terminal.confine"),
            ("terminal: {network: maybe}", "terminal.network"),
            (
                "terminal: {writable: [/no/such/dir/anywhere]}",
                "terminal.writable",
            ),
        ] {
            let err = builtin_config(&Config::parse(yaml).unwrap())
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
