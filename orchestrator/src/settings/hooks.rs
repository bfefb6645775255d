//! Hook commands: the `hooks:` section of troupe.yaml, and the command entries a plugin's
//! `plugin.yaml` uses for its hooks and slash commands (one shape for both): a point maps to one
//! command or a list, each `./x.sh` or `{command, timeout, tools, description, env_passthrough}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_tools::text::yaml_kind;

/// The hook points a command may be attached to: the tool, model and session points, the
/// subagent start and end, and a board task's claim, completion and block.
pub const HOOK_POINTS: &[&str] = &[
    "pre_tool_call",
    "post_tool_call",
    "pre_llm_call",
    "post_llm_call",
    "on_session_start",
    "on_session_end",
    "on_subagent_start",
    "on_subagent_end",
    "on_task_claimed",
    "on_task_completed",
    "on_task_blocked",
];

/// How long a hook command may run when its entry gives no `timeout`.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `timeout` a hook may ask for.
pub const MAX_HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// One command a plugin runs (a hook, a slash command, or its MCP server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The command line, run by `/bin/sh -c` in [`CommandSpec::dir`] (so `./deny.sh` and
    /// `python3 hook.py` both work).
    pub command: String,
    /// The folder it runs in: the plugin's folder, or the config file's for `hooks:`.
    pub dir: PathBuf,
    /// How long it may run before it is killed.
    pub timeout: Duration,
    /// For tool hooks: only these tools (the underlying tool's name); empty means all.
    pub tools: Vec<String>,
    /// What it does, for `/help` and listings.
    pub description: Option<String>,
    /// Variables of troupe's environment it gets besides the basics (`PATH`, `HOME`, `LANG`,
    /// ...): the entry's `env_passthrough`, and a plugin's `requires_env`.
    pub env_passthrough: Vec<String>,
    /// troupe's keys, which it never gets whatever `env_passthrough` says (set by the loader
    /// from the runtime's config; empty as parsed).
    pub secrets: troupe_tools::builtin::sandbox_env::ChildSecrets,
}

/// Reads a `hooks:` table (a manifest's or troupe.yaml's): point -> one command or a list.
/// Errors are (field path, problem).
pub fn hook_table(
    value: &Value,
    prefix: &str,
    dir: &Path,
) -> Result<BTreeMap<String, Vec<CommandSpec>>, (String, String)> {
    let Value::Object(map) = value else {
        return Err((
            prefix.to_string(),
            format!(
                "must map hook points to commands, found {}; write `{prefix}: {{pre_tool_call: {{command: ./check.sh}}}}`",
                yaml_kind(value)
            ),
        ));
    };
    let mut out = BTreeMap::new();
    for (point, entry) in map {
        let field = format!("{prefix}.{point}");
        if !HOOK_POINTS.contains(&point.as_str()) {
            return Err((
                field,
                format!(
                    "'{point}' is not a hook point; use one of {}",
                    HOOK_POINTS.join(", ")
                ),
            ));
        }
        let specs = match entry {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| command_spec(item, &format!("{field}[{i}]"), dir))
                .collect::<Result<Vec<_>, _>>()?,
            other => vec![command_spec(other, &field, dir)?],
        };
        out.insert(point.clone(), specs);
    }
    Ok(out)
}

/// One command entry: `./x.sh` or `{command, timeout, tools, description}`.
pub(crate) fn command_spec(
    value: &Value,
    field: &str,
    dir: &Path,
) -> Result<CommandSpec, (String, String)> {
    let fail = |sub: &str, problem: String| {
        let path = if sub.is_empty() {
            field.to_string()
        } else {
            format!("{field}.{sub}")
        };
        Err((path, problem))
    };
    let map = match value {
        Value::String(command) => {
            let mut map = Map::new();
            map.insert("command".into(), Value::String(command.clone()));
            map
        }
        Value::Object(map) => map.clone(),
        other => {
            return fail(
                "",
                format!(
                    "must be a command or a mapping with `command`, found {}; write `{{command: ./hook.sh, timeout: 5s}}`",
                    yaml_kind(other)
                ),
            );
        }
    };
    let command = match map.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.trim().to_string(),
        Some(Value::String(_)) => {
            return fail("command", "is empty; name the program to run".into());
        }
        None => {
            return fail(
                "command",
                "is missing; every hook and command entry needs `command: <program>`".into(),
            );
        }
        Some(other) => {
            return fail(
                "command",
                format!("must be a command line as text, found {}", yaml_kind(other)),
            );
        }
    };
    let timeout = match map.get("timeout") {
        None | Some(Value::Null) => DEFAULT_HOOK_TIMEOUT,
        Some(value) => match parse_timeout(value) {
            Ok(t) => t,
            Err(problem) => return fail("timeout", problem),
        },
    };
    let tools = match map.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(one)) => vec![one.clone()],
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => names.push(s.clone()),
                    _ => return fail("tools", "must be a list of tool names".into()),
                }
            }
            names
        }
        Some(other) => {
            return fail(
                "tools",
                format!("must be a list of tool names, found {}", yaml_kind(other)),
            );
        }
    };
    let description = match optional_text(&map, "description") {
        Ok(d) => d,
        Err(problem) => return fail("description", problem),
    };
    let env_passthrough = match map.get("env_passthrough") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(name) if is_env_name(name) => names.push(name.clone()),
                    _ => {
                        return fail(
                            &format!("env_passthrough[{i}]"),
                            "must be an environment variable name like `GITHUB_TOKEN`".into(),
                        );
                    }
                }
            }
            names
        }
        Some(other) => {
            return fail(
                "env_passthrough",
                format!(
                    "must be a list of variable names, found {}; write `env_passthrough: [GITHUB_TOKEN]`",
                    yaml_kind(other)
                ),
            );
        }
    };
    Ok(CommandSpec {
        command,
        dir: dir.to_path_buf(),
        timeout,
        tools,
        description,
        env_passthrough,
        secrets: Default::default(),
    })
}

/// Reads a hook timeout: seconds as a number (`2`, `0.5`), or text with `ms`, `s` or `m`.
pub fn parse_timeout(value: &Value) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{value} is not a timeout; write seconds (5), or text like 500ms, 5s or 2m (at most {} s)",
            MAX_HOOK_TIMEOUT.as_secs()
        )
    };
    let secs = match value {
        Value::Number(n) => n.as_f64().ok_or_else(bad)?,
        Value::String(text) => {
            let text = text.trim();
            let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
                (n, 0.001)
            } else if let Some(n) = text.strip_suffix('s') {
                (n, 1.0)
            } else if let Some(n) = text.strip_suffix('m') {
                (n, 60.0)
            } else {
                (text, 1.0)
            };
            number.trim().parse::<f64>().map_err(|_| bad())? * scale
        }
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_HOOK_TIMEOUT.as_secs_f64() {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

pub(crate) fn optional_text(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("must be text, found {}", yaml_kind(other))),
    }
}

pub(crate) fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
