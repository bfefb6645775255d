//! The `terminal:` and `code_execution:` (also spelled `execute_code:`) sections of
//! `troupe.yaml`, checked into the [`BuiltinConfig`] the built-in tools start with and the
//! [`BackendChoice`] of `terminal.backend` ([`TerminalSettings`]). Keys left out keep the
//! built-in defaults; a bad value is an error naming the key and what to write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_tools::builtin::confine::ConfineMode;
use troupe_tools::builtin::{BuiltinConfig, CodeMode};
use troupe_tools::home::TroupeHome;
use troupe_tools::text::yaml_kind;

pub use super::backend::{BACKEND_KEYS, BackendChoice, backend_choice};
use super::keys::{
    ConfigError, absolute, invalid, mapping, names as strings, seconds, string, whole,
};

pub(super) const TERMINAL_KEYS: &[&str] = &[
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

pub(super) const CODE_KEYS: &[&str] = &[
    "timeout",
    "max_tool_calls",
    "mode",
    "python",
    "kill_grace",
    "max_stdout_bytes",
    "max_stderr_bytes",
    "env_passthrough",
];

/// What `terminal:` and `code_execution:` say, checked.
#[derive(Debug, Clone)]
pub struct TerminalSettings {
    /// The built-in tools' settings: the defaults with the sections applied.
    pub builtins: BuiltinConfig,
    /// Where commands run.
    pub backend: BackendChoice,
}

impl TerminalSettings {
    /// Reads the sections as written (`code_execution` wins over its other spelling
    /// `execute_code`). Relative paths follow `base`, the config file's folder.
    pub fn from_sections(
        terminal: &Value,
        code_execution: &Value,
        execute_code: &Value,
        base: Option<&Path>,
        home: &TroupeHome,
    ) -> Result<TerminalSettings, ConfigError> {
        let terminal = mapping(terminal, "terminal")?;
        let backend = backend_choice(&terminal, "terminal", &|var| std::env::var(var).ok())?;
        let (name, code) = match code_execution {
            Value::Null => ("execute_code", execute_code),
            section => ("code_execution", section),
        };
        let builtins =
            builtin_config(&terminal, &backend, name, &mapping(code, name)?, base, home)?;
        Ok(TerminalSettings { builtins, backend })
    }
}

/// The built-in tools' settings: the defaults with what the sections say applied.
fn builtin_config(
    terminal: &Map<String, Value>,
    backend: &BackendChoice,
    name: &str,
    code: &Map<String, Value>,
    base: Option<&Path>,
    home: &TroupeHome,
) -> Result<BuiltinConfig, ConfigError> {
    let mut out = BuiltinConfig::in_home(home);
    out.terminal.sudo_password =
        super::secrets::sudo_password(home.path()).map(troupe_tools::builtin::SudoPassword);
    out.terminal.dangerous_command_approval = !matches!(
        terminal.get("dangerous_command_approval"),
        Some(Value::Bool(false))
    );
    if let BackendChoice::Ssh(ssh) = backend {
        // Paths are the remote host's: nothing to check here. Commands start in the remote
        // user's home unless told otherwise.
        out.default_cwd = match string(terminal, "terminal", "cwd")? {
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
    } else if let Some(cwd) = string(terminal, "terminal", "cwd")? {
        let dir = absolute(&cwd, base);
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
        out.allowed_roots = strings("terminal.allowed_roots", roots)?
            .iter()
            .map(|r| absolute(r, base))
            .collect();
    }
    if let Some(secs) = seconds(terminal, "terminal", "timeout")? {
        out.terminal.default_timeout_secs = secs;
    }
    if let Some(secs) = seconds(terminal, "terminal", "max_foreground_timeout")? {
        out.terminal.max_foreground_timeout_secs = secs;
    }
    if let Some(n) = whole(terminal, "terminal", "max_output_chars")? {
        out.terminal.max_output_chars = n as usize;
    }
    if let Some(secs) = seconds(terminal, "terminal", "kill_grace")? {
        out.terminal.kill_grace = Duration::from_secs(secs);
    }
    if let Some(v) = terminal.get("env_passthrough").filter(|v| !v.is_null()) {
        out.terminal.env_passthrough = strings("terminal.env_passthrough", v)?;
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
        for raw in strings("terminal.writable", v)? {
            let path = absolute(&raw, base);
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

    if let Some(secs) = seconds(code, name, "timeout")? {
        out.code.timeout = Duration::from_secs(secs);
    }
    if let Some(n) = whole(code, name, "max_tool_calls")? {
        out.code.max_tool_calls = n as usize;
    }
    if let Some(mode) = string(code, name, "mode")? {
        out.code.mode = CodeMode::parse(&mode).ok_or_else(|| {
            invalid(
                &format!("{name}.mode"),
                format!("{mode:?} is not a mode; write `project` (scripts run in the session's directory) or `strict` (in a scratch directory)"),
            )
        })?;
    }
    if let Some(python) = string(code, name, "python")? {
        out.code.python = PathBuf::from(python);
    }
    if let Some(secs) = seconds(code, name, "kill_grace")? {
        out.code.kill_grace = Duration::from_secs(secs);
    }
    if let Some(n) = whole(code, name, "max_stdout_bytes")? {
        out.code.max_stdout_bytes = n as usize;
    }
    if let Some(n) = whole(code, name, "max_stderr_bytes")? {
        out.code.max_stderr_bytes = n as usize;
    }
    if let Some(v) = code.get("env_passthrough").filter(|v| !v.is_null()) {
        out.code.env_passthrough = strings(&format!("{name}.env_passthrough"), v)?;
    }
    Ok(out)
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
        let b = crate::settings::Settings::parse(&yaml).unwrap().builtins;
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
        let b = crate::settings::Settings::parse(&yaml).unwrap().builtins;
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
            let err = crate::settings::Settings::parse(yaml)
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
