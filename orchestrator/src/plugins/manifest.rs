//! `plugin.yaml`: what a plugin says about itself and what it provides. Read as written, then
//! checked into a [`Manifest`]; a problem becomes a [`ManifestError`] naming the file and the
//! field, which disables that plugin alone.
//!
//! ```yaml
//! name: guard
//! version: 1.0.0
//! description: Refuses shell commands that touch /etc.
//! requires_env: [GUARD_MODE]
//! hooks:
//!   pre_tool_call: {command: ./deny.sh, timeout: 5s, tools: [terminal]}
//!   post_tool_call: [{command: python3 log.py}]
//! mcp_server: {command: python3, args: [server.py], env: {LEVEL: "2"}}
//! commands:
//!   hello: {command: ./hello.sh, description: Says hello}
//! ```

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

/// Manifest keys troupe reads; others are kept for forward compatibility and logged.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "version",
    "description",
    "author",
    "requires_env",
    "hooks",
    "mcp_server",
    "commands",
    "license",
    "homepage",
    "tags",
];

/// A manifest that could not be used: which file, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: field `{field}`: {problem}", file.display())]
pub struct ManifestError {
    /// The manifest file.
    pub file: PathBuf,
    /// The field path, like `hooks.pre_tool_call.timeout` (`(file)` for the whole file).
    pub field: String,
    /// What is wrong and what to write instead.
    pub problem: String,
}

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

/// A plugin's MCP server: its tools become the toolset named after the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// The folder it runs in (the plugin's).
    pub dir: PathBuf,
}

/// A checked `plugin.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// The plugin's name (its folder's name).
    pub name: String,
    /// Its version, as written.
    pub version: Option<String>,
    /// One line on what it does.
    pub description: Option<String>,
    /// Environment variables it needs; a missing one is reported as a problem.
    pub requires_env: Vec<String>,
    /// Hook point -> the commands attached to it, in order.
    pub hooks: BTreeMap<String, Vec<CommandSpec>>,
    /// Its MCP server, if it provides a toolset.
    pub mcp_server: Option<McpServerSpec>,
    /// Slash command name -> the command that answers it.
    pub commands: BTreeMap<String, CommandSpec>,
}

impl Manifest {
    /// What the plugin provides, in words for the listing (`hooks: pre_tool_call`, ...).
    pub fn provides(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.hooks.is_empty() {
            let points: Vec<&str> = self.hooks.keys().map(String::as_str).collect();
            out.push(format!("hooks: {}", points.join(", ")));
        }
        if self.mcp_server.is_some() {
            out.push(format!("toolset: {}", self.name));
        }
        if !self.commands.is_empty() {
            let names: Vec<String> = self.commands.keys().map(|c| format!("/{c}")).collect();
            out.push(format!("commands: {}", names.join(", ")));
        }
        out
    }

    /// The environment variables it needs that are not set.
    pub fn missing_env(&self) -> Vec<String> {
        self.requires_env
            .iter()
            .filter(|name| std::env::var_os(name).is_none_or(|v| v.is_empty()))
            .cloned()
            .collect()
    }
}

/// Reads and checks `<dir>/plugin.yaml` (or `plugin.yml`); `folder_name` is the name the
/// plugin must carry.
pub fn load(dir: &Path, folder_name: &str) -> Result<Manifest, ManifestError> {
    let file = manifest_file(dir).unwrap_or_else(|| dir.join("plugin.yaml"));
    let text = std::fs::read_to_string(&file).map_err(|e| ManifestError {
        file: file.clone(),
        field: "(file)".into(),
        problem: format!("cannot be read: {e}"),
    })?;
    parse(&text, &file, dir, folder_name)
}

/// The manifest file of a plugin folder, when it has one.
pub fn manifest_file(dir: &Path) -> Option<PathBuf> {
    ["plugin.yaml", "plugin.yml"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

/// Checks manifest text; `file` is named in errors, `dir` is where its commands run.
pub fn parse(
    text: &str,
    file: &Path,
    dir: &Path,
    folder_name: &str,
) -> Result<Manifest, ManifestError> {
    let err = |field: &str, problem: String| ManifestError {
        file: file.to_path_buf(),
        field: field.to_string(),
        problem,
    };
    troupe_tools::input_limits::check_config_text(text, &file.display().to_string()).map_err(
        |e| ManifestError {
            file: file.to_path_buf(),
            field: "(file)".to_string(),
            problem: e.to_string(),
        },
    )?;
    let raw: Value = serde_norway::from_str(text).map_err(|e| {
        err(
            "(file)",
            format!("is not valid YAML ({e}); write a mapping such as `name: {folder_name}`"),
        )
    })?;
    let Value::Object(root) = raw else {
        return Err(err(
            "(file)",
            format!(
                "must be a mapping of fields (name, version, hooks, ...), found {}",
                yaml_kind(&raw)
            ),
        ));
    };
    for key in root.keys() {
        if !KNOWN_KEYS.contains(&key.as_str()) {
            tracing::debug!(file = %file.display(), key = %key, "plugin.yaml: troupe does not read this field");
        }
    }
    let name = match root.get("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_string(),
        None => folder_name.to_string(),
        Some(Value::String(_)) => {
            return Err(err(
                "name",
                format!("is empty; write `name: {folder_name}`"),
            ));
        }
        Some(other) => {
            return Err(err(
                "name",
                format!(
                    "must be the plugin's name as text, found {}; write `name: {folder_name}`",
                    yaml_kind(other)
                ),
            ));
        }
    };
    if name != folder_name {
        return Err(err(
            "name",
            format!(
                "is '{name}' but the folder is '{folder_name}'; a plugin is known by its folder's name, so rename one to match"
            ),
        ));
    }
    let version = match root.get("version") {
        None | Some(Value::Null) => None,
        Some(Value::String(v)) => Some(v.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => {
            return Err(err(
                "version",
                format!("must be text like `1.0.0`, found {}", yaml_kind(other)),
            ));
        }
    };
    let description = optional_text(&root, "description").map_err(|p| err("description", p))?;
    let requires_env = match root.get("requires_env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) if is_env_name(s) => names.push(s.clone()),
                    // Hermes also allows `{name: X, description: ...}`.
                    Value::Object(map) => match map.get("name") {
                        Some(Value::String(s)) if is_env_name(s) => names.push(s.clone()),
                        _ => {
                            return Err(err(
                                &format!("requires_env[{i}].name"),
                                "must be an environment variable name like `API_KEY`".into(),
                            ));
                        }
                    },
                    _ => {
                        return Err(err(
                            &format!("requires_env[{i}]"),
                            "must be an environment variable name like `API_KEY`".into(),
                        ));
                    }
                }
            }
            names
        }
        Some(other) => {
            return Err(err(
                "requires_env",
                format!(
                    "must be a list of variable names, found {}; write `requires_env: [API_KEY]`",
                    yaml_kind(other)
                ),
            ));
        }
    };
    let hooks = match root.get("hooks") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(value) => hook_table(value, "hooks", dir).map_err(|(f, p)| err(&f, p))?,
    };
    let mcp_server = match root.get("mcp_server") {
        None | Some(Value::Null) => None,
        Some(value) => Some(mcp_server(value, dir).map_err(|(f, p)| err(&f, p))?),
    };
    let commands = match root.get("commands") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => {
            let mut out = BTreeMap::new();
            for (raw_name, value) in map {
                let field = format!("commands.{raw_name}");
                let name = normalize_command_name(raw_name).map_err(|p| err(&field, p))?;
                let spec = command_spec(value, &field, dir).map_err(|(f, p)| err(&f, p))?;
                out.insert(name, spec);
            }
            out
        }
        Some(other) => {
            return Err(err(
                "commands",
                format!(
                    "must map command names to commands, found {}; write `commands: {{hello: {{command: ./hello.sh}}}}`",
                    yaml_kind(other)
                ),
            ));
        }
    };
    Ok(Manifest {
        name,
        version,
        description,
        requires_env,
        hooks,
        mcp_server,
        commands,
    })
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
fn command_spec(value: &Value, field: &str, dir: &Path) -> Result<CommandSpec, (String, String)> {
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

fn mcp_server(value: &Value, dir: &Path) -> Result<McpServerSpec, (String, String)> {
    let Value::Object(map) = value else {
        return Err((
            "mcp_server".into(),
            format!(
                "must be a mapping, found {}; write `mcp_server: {{command: python3, args: [server.py]}}`",
                yaml_kind(value)
            ),
        ));
    };
    let command = match map.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            return Err((
                "mcp_server.command".into(),
                "is missing or not text; name the program that serves MCP over stdio".into(),
            ));
        }
    };
    let args = match map.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    Value::Number(n) => out.push(n.to_string()),
                    other => {
                        return Err((
                            format!("mcp_server.args[{i}]"),
                            format!("must be text, found {}", yaml_kind(other)),
                        ));
                    }
                }
            }
            out
        }
        Some(other) => {
            return Err((
                "mcp_server.args".into(),
                format!("must be a list, found {}", yaml_kind(other)),
            ));
        }
    };
    let env = match map.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(vars)) => {
            let mut out = BTreeMap::new();
            for (k, v) in vars {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => {
                        return Err((
                            format!("mcp_server.env.{k}"),
                            format!("must be text, found {}", yaml_kind(other)),
                        ));
                    }
                };
                out.insert(k.clone(), text);
            }
            out
        }
        Some(other) => {
            return Err((
                "mcp_server.env".into(),
                format!("must be a mapping of variables, found {}", yaml_kind(other)),
            ));
        }
    };
    Ok(McpServerSpec {
        command,
        args,
        env,
        dir: dir.to_path_buf(),
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

/// A slash command's name as registered: lower case, no leading `/`, spaces as `-`.
pub fn normalize_command_name(raw: &str) -> Result<String, String> {
    let name = raw
        .trim()
        .trim_start_matches('/')
        .to_lowercase()
        .replace(' ', "-");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "'{raw}' is not a command name; use letters, digits, `-` and `_`"
        ));
    }
    if name == "help" {
        return Err("`help` is troupe's own command and cannot be taken by a plugin".into());
    }
    Ok(name)
}

fn optional_text(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("must be text, found {}", yaml_kind(other))),
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Manifest, ManifestError> {
        parse(
            text,
            Path::new("/p/guard/plugin.yaml"),
            Path::new("/p/guard"),
            "guard",
        )
    }

    #[test]
    fn a_full_manifest_is_read() {
        let m = check(
            "name: guard\nversion: 1.2.0\nrequires_env: [GUARD_X]\nhooks:\n  pre_tool_call: {command: ./deny.sh, timeout: 500ms, tools: [terminal]}\n  post_tool_call: [./a.sh, {command: ./b.sh}]\nmcp_server: {command: python3, args: [s.py]}\ncommands:\n  Say Hi: {command: ./hi.sh, description: greets}\n",
        )
        .unwrap();
        assert_eq!(m.version.as_deref(), Some("1.2.0"));
        let pre = &m.hooks["pre_tool_call"][0];
        assert_eq!(pre.timeout, Duration::from_millis(500));
        assert_eq!(pre.tools, vec!["terminal".to_string()]);
        assert_eq!(m.hooks["post_tool_call"].len(), 2);
        assert!(m.commands.contains_key("say-hi"));
        assert_eq!(m.mcp_server.unwrap().args, vec!["s.py".to_string()]);
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let e =
            check("hooks:\n  pre_tool_call: {command: ./x.sh, timeout: forever}\n").unwrap_err();
        assert_eq!(e.field, "hooks.pre_tool_call.timeout");
        assert!(
            e.to_string()
                .starts_with("/p/guard/plugin.yaml: field `hooks.pre_tool_call.timeout`")
        );
        let e = check("hooks:\n  before_everything: ./x.sh\n").unwrap_err();
        assert_eq!(e.field, "hooks.before_everything");
        let e = check("name: other\n").unwrap_err();
        assert_eq!(e.field, "name");
        let e = check("commands:\n  help: ./h.sh\n").unwrap_err();
        assert_eq!(e.field, "commands.help");
        let e = check("- just\n- a list\n").unwrap_err();
        assert_eq!(e.field, "(file)");
        let e = check("mcp_server: {args: [x]}\n").unwrap_err();
        assert_eq!(e.field, "mcp_server.command");
    }
}
