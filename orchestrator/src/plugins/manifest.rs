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

use serde_json::Value;
use troupe_tools::text::yaml_kind;

// A hook command's shape is troupe.yaml's too (`hooks:`), so it is read in the settings.
pub use crate::settings::hooks::{
    CommandSpec, DEFAULT_HOOK_TIMEOUT, HOOK_POINTS, MAX_HOOK_TIMEOUT, hook_table, parse_timeout,
};
use crate::settings::hooks::{command_spec, is_env_name, optional_text};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
