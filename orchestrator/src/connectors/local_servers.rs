//! The local MCP servers `manage_connections` may switch on: those troupe.yaml declares with
//! `enabled: false`. Switching one on edits only its `enabled` key in the file (the same
//! line-level, verified edit as `troupe plugins enable`) and starts it in the running process,
//! so its tools are in the registry, and searchable, on the next call.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use troupe_tools::Registry;
use troupe_tools::connectors::manage::LocalServers;
use troupe_tools::mcp::{McpManager, McpOptions, McpServerConfig, McpServers};

use crate::plugins::enabled::{
    indent_of, is_blank_or_comment, parse, replace_file, unquote, value_after_colon,
};

/// How long switching a server on waits for it to list its tools.
const START_WAIT: Duration = Duration::from_secs(30);

/// The declared-but-off servers of one config file, and the managers of those switched on.
pub struct ConfigServers {
    config_path: Option<PathBuf>,
    registry: Arc<Registry>,
    options: McpOptions,
    shared: Arc<Shared>,
}

/// What the start of a server changes once it is under way.
struct Shared {
    off: Mutex<Vec<McpServerConfig>>,
    /// Servers switched on while running, kept (and their processes with them) for the
    /// process's life.
    started: Mutex<Vec<McpManager>>,
}

impl ConfigServers {
    /// The servers of `servers` declared `enabled: false`, to be started into `registry`.
    pub fn new(
        config_path: Option<PathBuf>,
        servers: &McpServers,
        registry: Arc<Registry>,
        options: McpOptions,
    ) -> ConfigServers {
        ConfigServers {
            config_path,
            registry,
            options,
            shared: Arc::new(Shared {
                off: Mutex::new(
                    servers
                        .servers
                        .iter()
                        .filter(|s| !s.enabled)
                        .cloned()
                        .collect(),
                ),
                started: Mutex::new(Vec::new()),
            }),
        }
    }
}

impl LocalServers for ConfigServers {
    fn disabled(&self) -> Vec<String> {
        lock(&self.shared.off)
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    fn enable(&self, name: &str) -> BoxFuture<'static, Result<String, String>> {
        let found = lock(&self.shared.off)
            .iter()
            .find(|s| s.name == name)
            .cloned();
        let Some(server) = found else {
            let known = self.disabled();
            return Box::pin(futures::future::ready(Err(format!(
                "'{name}' is not a local MCP server that is switched off. Servers that can be switched on: {}.",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))));
        };
        if let Some(path) = &self.config_path {
            let edited = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
                .and_then(|text| enable_server_key(&text, name))
                .and_then(|edited| replace_file(path, &edited));
            if let Err(problem) = edited {
                return Box::pin(futures::future::ready(Err(problem)));
            }
        }
        let registry = Arc::clone(&self.registry);
        let options = self.options.clone();
        let name = name.to_string();
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let servers = McpServers {
                servers: vec![server.with_enabled(true)],
                errors: Vec::new(),
                warnings: Vec::new(),
            };
            let manager = McpManager::start_in_background(&servers, registry, options);
            manager.wait_started(START_WAIT).await;
            let tools = manager.tools(&name).map(|t| t.len());
            let status = manager.status(&name).and_then(|s| s.last_error);
            lock(&shared.off).retain(|s| s.name != name);
            lock(&shared.started).push(manager);
            match (tools, status) {
                (Ok(n), _) if n > 0 => Ok(format!(
                    "'{name}' is switched on (troupe.yaml updated) with {n} tools; search for them with tool_search."
                )),
                (_, Some(error)) => Err(format!(
                    "'{name}' is switched on in troupe.yaml but did not start: {error}"
                )),
                _ => Ok(format!(
                    "'{name}' is switched on (troupe.yaml updated) and still starting; its tools become searchable once it is ready."
                )),
            }
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `text` with `mcp_servers.<name>.enabled` set to `true`, every other byte kept. Refused
/// (to be edited by hand) unless the result parses to the same document with only that key
/// changed.
pub fn enable_server_key(text: &str, name: &str) -> Result<String, String> {
    let before = parse(text)?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let by_hand = || {
        format!("could not switch mcp_servers.{name}.enabled on in place; set it to true by hand")
    };
    let top = lines
        .iter()
        .position(|l| l.starts_with("mcp_servers:"))
        .ok_or_else(by_hand)?;
    let mut end = top + 1;
    while end < lines.len() && (is_blank_or_comment(lines[end]) || indent_of(lines[end]) > 0) {
        end += 1;
    }
    // The server's key line: `<name>:` (plain or quoted) at the section's child indent.
    let child = lines[top + 1..end]
        .iter()
        .find(|l| !is_blank_or_comment(l))
        .map(|l| indent_of(l))
        .ok_or_else(by_hand)?;
    let at = (top + 1..end)
        .find(|&i| {
            indent_of(lines[i]) == child
                && lines[i]
                    .trim_start()
                    .split_once(':')
                    .is_some_and(|(key, _)| unquote(key) == name)
        })
        .ok_or_else(by_hand)?;
    let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let flow = value_after_colon(lines[at]);
    if flow.starts_with('{') {
        edited[at] = replace_false(lines[at]).ok_or_else(by_hand)?;
    } else {
        let mut server_end = at + 1;
        while server_end < end
            && (is_blank_or_comment(lines[server_end]) || indent_of(lines[server_end]) > child)
        {
            server_end += 1;
        }
        let key = (at + 1..server_end)
            .find(|&i| {
                lines[i]
                    .trim_start()
                    .split_once(':')
                    .is_some_and(|(key, _)| key.trim() == "enabled")
                    && !is_blank_or_comment(lines[i])
            })
            .ok_or_else(by_hand)?;
        edited[key] = replace_false(lines[key]).ok_or_else(by_hand)?;
    }
    let edited = edited.concat();
    let after = parse(&edited)?;
    let mut expected = before;
    if let Some(server) = expected
        .get_mut("mcp_servers")
        .and_then(|s| s.get_mut(name))
        .and_then(Value::as_object_mut)
    {
        server.insert("enabled".into(), Value::Bool(true));
    }
    if after != expected {
        return Err(by_hand());
    }
    Ok(edited)
}

/// The line with its `enabled: false` (or `no`, `off`) made `enabled: true`.
fn replace_false(line: &str) -> Option<String> {
    let at = line.find("enabled")?;
    let (head, rest) = line.split_at(at + "enabled".len());
    let rest_trim = rest.trim_start();
    let colon_gap = rest.len() - rest_trim.len();
    let after_colon = rest_trim.strip_prefix(':')?;
    let value_start = after_colon.len() - after_colon.trim_start().len();
    let value = &after_colon[value_start..];
    let word_len = value
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(value.len());
    if !matches!(
        &value[..word_len],
        "false" | "False" | "FALSE" | "no" | "off"
    ) {
        return None;
    }
    Some(format!(
        "{head}{}:{}true{}",
        &rest[..colon_gap],
        &after_colon[..value_start],
        &value[word_len..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_enabled_key_changes() {
        let text = "# mine\nmodel: {model: x}\nmcp_servers:\n  a:\n    command: a\n    enabled: false   # later\n  b:\n    command: b\n    enabled: false\nplugins: {enabled: [x]}\n";
        let out = enable_server_key(text, "a").unwrap();
        assert_eq!(
            out,
            text.replacen("enabled: false   # later", "enabled: true   # later", 1)
        );
        let flow = "mcp_servers:\n  \"c\": {command: c, enabled: false}\n";
        assert_eq!(
            enable_server_key(flow, "c").unwrap(),
            "mcp_servers:\n  \"c\": {command: c, enabled: true}\n"
        );
        assert!(enable_server_key(text, "zzz").is_err());
        assert!(enable_server_key("mcp_servers: {a: {enabled: false}}\n", "a").is_err());
    }
}
