//! The `mcp_servers` section of `troupe.yaml`, read from the raw JSON value the config loader
//! hands over and checked into typed [`McpServerConfig`]s. Each server is checked on its own:
//! a broken entry becomes an [`McpConfigError`] naming the server and key, and the others load.
//! Used by [`McpManager`](super::McpManager) and the `troupe mcp` commands.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::text::yaml_kind;

/// Per-call timeout when `timeout` is not set (Hermes's default).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Start-up timeout when `connect_timeout` is not set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Keys troupe reads in a server entry.
const KNOWN_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "env_passthrough",
    "cwd",
    "url",
    "headers",
    "transport",
    "enabled",
    "timeout",
    "connect_timeout",
    "supports_parallel_tool_calls",
    "tools",
];

/// Hermes keys troupe accepts but does not act on yet; they give a warning, not an error.
const IGNORED_HERMES_KEYS: &[&str] = &[
    "ssl_verify",
    "client_cert",
    "client_key",
    "protocol",
    "skip_preflight",
    "keepalive_interval",
    "idle_timeout_seconds",
    "max_lifetime_seconds",
    "auth",
    "sampling",
    "elicitation",
    "trust",
];

/// Headers the HTTP transport sets itself; a config may not override them.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "mcp-session-id",
    "last-event-id",
    "mcp-protocol-version",
];

/// How troupe reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program to run.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the environment troupe passes on.
        env: BTreeMap<String, String>,
        /// Its working directory; troupe's own when `None`.
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Extra headers sent with every request (`Authorization`, ...).
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// `"stdio"` or `"http"`, as status lines print it.
    pub fn kind(&self) -> &'static str {
        match self {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }
}

/// Which of a server's tools troupe registers. `include`, when given, wins over `exclude`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// Only these tools (exact names or globs with `*` and `?`).
    pub include: Option<Vec<String>>,
    /// Every tool but these (exact names or globs).
    pub exclude: Vec<String>,
}

impl ToolFilter {
    /// Whether the server's tool `name` passes the filter.
    pub fn admits(&self, name: &str) -> bool {
        match &self.include {
            Some(include) => include.iter().any(|p| glob_match(p, name)),
            None => !self.exclude.iter().any(|p| glob_match(p, name)),
        }
    }
}

/// One checked server entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The key under `mcp_servers`; the toolset is `mcp-<name>`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// `false` keeps the entry but never starts it.
    pub enabled: bool,
    /// How long one tool call may take before it is cancelled.
    pub timeout: Duration,
    /// How long start-up (spawn or connect, then `initialize`) may take.
    pub connect_timeout: Duration,
    /// The server's tools may run in parallel with other parallel-safe calls.
    pub supports_parallel_tool_calls: bool,
    /// Which tools to register.
    pub tools: ToolFilter,
    /// The toolset its tools go in when not `mcp-<name>`: a plugin's server uses the plugin's
    /// name (its tools then count as the plugin's in listings and views).
    pub toolset_name: Option<String>,
    /// Variables of troupe's environment a stdio server gets besides the basics (`PATH`,
    /// `HOME`, `LANG`, ...); never troupe's own keys.
    pub env_passthrough: Vec<String>,
}

impl McpServerConfig {
    /// A stdio server running `command` with `args`, every other setting at its default.
    pub fn stdio<S: Into<String>>(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        McpServerConfig::with_transport(
            name,
            McpTransport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A streamable-HTTP server at `url`, every other setting at its default.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig::with_transport(
            name,
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }

    fn with_transport(name: impl Into<String>, transport: McpTransport) -> Self {
        McpServerConfig {
            name: name.into(),
            transport,
            enabled: true,
            timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            supports_parallel_tool_calls: false,
            tools: ToolFilter::default(),
            toolset_name: None,
            env_passthrough: Vec::new(),
        }
    }

    /// Sets an environment variable for a stdio server (ignored for HTTP).
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Passes the variables `names` of troupe's environment on to a stdio server.
    pub fn with_env_passthrough<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        self.env_passthrough = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the per-call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the start-up timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Marks the server's tools safe to run in parallel.
    pub fn with_parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.supports_parallel_tool_calls = parallel;
        self
    }

    /// Sets which tools are registered.
    pub fn with_tool_filter(mut self, tools: ToolFilter) -> Self {
        self.tools = tools;
        self
    }

    /// Switches the entry on or off.
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Puts its tools in `toolset` instead of `mcp-<name>`.
    pub fn with_toolset_name(mut self, toolset: impl Into<String>) -> Self {
        self.toolset_name = Some(toolset.into());
        self
    }

    /// The toolset its tools go in.
    pub fn toolset(&self) -> String {
        match &self.toolset_name {
            Some(name) => name.clone(),
            None => format!("mcp-{}", self.name),
        }
    }
}

/// A problem with one server entry. The entry is skipped when it is an error; the rest load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mcp_servers.{server}{}: {message}", key_suffix(.key))]
pub struct McpConfigError {
    /// The server's key under `mcp_servers` (empty for the section itself).
    pub server: String,
    /// The key path inside the entry, like `tools.include[2]`; empty for the entry itself.
    pub key: String,
    /// What was wrong and what to write instead.
    pub message: String,
}

fn key_suffix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!(".{key}")
    }
}

/// The `mcp_servers` section after checking: the usable entries, the broken ones, and notes about
/// keys troupe accepted but ignores.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpServers {
    /// Entries that checked out, in the order written.
    pub servers: Vec<McpServerConfig>,
    /// Entries that did not; each names the server and key.
    pub errors: Vec<McpConfigError>,
    /// Keys accepted but not acted on (Hermes settings troupe does not implement yet).
    pub warnings: Vec<McpConfigError>,
}

impl McpServers {
    /// Checks the raw `mcp_servers` value. Relative `cwd` values and relative command paths
    /// (`./bin/server`) are taken from `base_dir`, the config file's folder, when given.
    pub fn parse(raw: &Value, base_dir: Option<&Path>) -> McpServers {
        let mut out = McpServers::default();
        let entries = match raw {
            Value::Null => return out,
            Value::Object(map) => map,
            other => {
                out.errors.push(McpConfigError {
                    server: String::new(),
                    key: String::new(),
                    message: format!(
                        "expected a mapping from server names to server settings, found {}; write for example `mcp_servers: {{github: {{command: npx, args: [...]}}}}`",
                        yaml_kind(other)
                    ),
                });
                return out;
            }
        };
        for (name, entry) in entries {
            let mut ctx = EntryCtx {
                server: name,
                warnings: &mut out.warnings,
            };
            match parse_entry(&mut ctx, entry, base_dir) {
                Ok(config) => out.servers.push(config),
                Err(error) => out.errors.push(error),
            }
        }
        out
    }

    /// The entry called `name`, if it checked out.
    pub fn get(&self, name: &str) -> Option<&McpServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

struct EntryCtx<'a> {
    server: &'a str,
    warnings: &'a mut Vec<McpConfigError>,
}

impl EntryCtx<'_> {
    fn error(&self, key: impl Into<String>, message: impl Into<String>) -> McpConfigError {
        McpConfigError {
            server: self.server.to_string(),
            key: key.into(),
            message: message.into(),
        }
    }
}

fn parse_entry(
    ctx: &mut EntryCtx<'_>,
    entry: &Value,
    base_dir: Option<&Path>,
) -> Result<McpServerConfig, McpConfigError> {
    if ctx.server.trim().is_empty()
        || ctx
            .server
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(ctx.error(
            "",
            "a server name must be non-empty and hold no spaces or control characters; rename the key, e.g. `my-server`",
        ));
    }
    let map = match entry {
        Value::Object(map) => map,
        other => {
            return Err(ctx.error(
                "",
                format!(
                    "expected the server's settings as a mapping, found {}; write `command:` (stdio) or `url:` (HTTP) under it",
                    yaml_kind(other)
                ),
            ));
        }
    };
    for key in map.keys() {
        if KNOWN_KEYS.contains(&key.as_str()) {
            continue;
        }
        if IGNORED_HERMES_KEYS.contains(&key.as_str()) {
            let warning = ctx.error(
                key.as_str(),
                "troupe does not act on this setting yet; it is ignored",
            );
            ctx.warnings.push(warning);
            continue;
        }
        let hint = match closest(key, KNOWN_KEYS) {
            Some(near) => format!("did you mean `{near}`?"),
            None => format!("the keys troupe reads are {}", KNOWN_KEYS.join(", ")),
        };
        return Err(ctx.error(key.as_str(), format!("unknown key; {hint}")));
    }

    let enabled = opt_bool(ctx, map, "enabled")?.unwrap_or(true);
    let timeout = opt_seconds(ctx, map, "timeout")?.unwrap_or(DEFAULT_CALL_TIMEOUT);
    let connect_timeout =
        opt_seconds(ctx, map, "connect_timeout")?.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let supports_parallel_tool_calls =
        opt_bool(ctx, map, "supports_parallel_tool_calls")?.unwrap_or(false);
    let tools = parse_tool_filter(ctx, map.get("tools"))?;
    let transport = parse_transport(ctx, map, base_dir)?;
    let env_passthrough = parse_env_passthrough(ctx, map.get("env_passthrough"))?;

    Ok(McpServerConfig {
        name: ctx.server.to_string(),
        transport,
        enabled,
        timeout,
        connect_timeout,
        supports_parallel_tool_calls,
        tools,
        toolset_name: None,
        env_passthrough,
    })
}

/// `env_passthrough: [NAME, ...]`: names of variables a stdio server gets from troupe's
/// environment.
fn parse_env_passthrough(
    ctx: &EntryCtx<'_>,
    value: Option<&Value>,
) -> Result<Vec<String>, McpConfigError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ctx.error(
                "env_passthrough",
                format!(
                    "expected a list of variable names, found {}; write `env_passthrough: [GITHUB_TOKEN]`",
                    yaml_kind(other)
                ),
            ));
        }
    };
    let mut names = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = format!("env_passthrough[{i}]");
        match item {
            Value::String(name)
                if !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                names.push(name.clone());
            }
            other => {
                return Err(ctx.error(
                    key.as_str(),
                    format!(
                        "expected a variable name (letters, digits and `_`), found {}; write for example `GITHUB_TOKEN`",
                        match other {
                            Value::String(s) => format!("{s:?}"),
                            v => yaml_kind(v).to_string(),
                        }
                    ),
                ));
            }
        }
    }
    Ok(names)
}

fn parse_transport(
    ctx: &mut EntryCtx<'_>,
    map: &Map<String, Value>,
    base_dir: Option<&Path>,
) -> Result<McpTransport, McpConfigError> {
    let declared = match map.get("transport") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "stdio" => Some("stdio"),
            "http" | "streamable_http" | "streamable-http" | "streamablehttp" => Some("http"),
            "sse" => {
                return Err(ctx.error(
                    "transport",
                    "troupe speaks streamable HTTP, not the older SSE transport; remove `transport: sse` and point `url` at the server's streamable-HTTP endpoint (often `/mcp`)",
                ));
            }
            _ => {
                return Err(ctx.error(
                    "transport",
                    format!("unknown transport `{s}`; write `stdio` or `http`, or leave it out"),
                ));
            }
        },
        Some(other) => {
            return Err(ctx.error(
                "transport",
                format!(
                    "expected a string (`stdio` or `http`), found {}",
                    yaml_kind(other)
                ),
            ));
        }
    };
    let has_command = map.get("command").is_some_and(|v| !v.is_null());
    let has_url = map.get("url").is_some_and(|v| !v.is_null());
    match (has_command, has_url) {
        (true, true) => Err(ctx.error(
            "",
            "both `command` and `url` are set; keep `command` for a local (stdio) server or `url` for an HTTP one",
        )),
        (false, false) => Err(ctx.error(
            "",
            "neither `command` nor `url` is set; write `command:` (and `args:`) to run a local server, or `url: http://host:port/mcp` for an HTTP one",
        )),
        (true, false) => {
            if declared == Some("http") {
                return Err(ctx.error("transport", "`transport: http` needs `url`, but this entry has `command`"));
            }
            for key in ["headers"] {
                if map.contains_key(key) {
                    return Err(ctx.error(key, "`headers` applies to HTTP servers only; remove it or use `url`"));
                }
            }
            let command = interpolate(ctx, "command", &string(ctx, map, "command")?)?;
            if command.trim().is_empty() {
                return Err(ctx.error("command", "is empty; write the program to run, e.g. `npx` or `/usr/local/bin/my-server`"));
            }
            let command = match base_dir {
                Some(base) if command.contains('/') && Path::new(&command).is_relative() => {
                    base.join(&command).to_string_lossy().into_owned()
                }
                _ => command,
            };
            let args = match map.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => {
                    let mut args = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        let key = format!("args[{i}]");
                        let text = scalar_text(item).ok_or_else(|| {
                            ctx.error(key.as_str(), format!("expected a string, found {}; quote it", yaml_kind(item)))
                        })?;
                        args.push(interpolate(ctx, &key, &text)?);
                    }
                    args
                }
                Some(other) => {
                    return Err(ctx.error(
                        "args",
                        format!("expected a list of strings, found {}; write `args: [\"--flag\", \"value\"]`", yaml_kind(other)),
                    ));
                }
            };
            let env = string_map(ctx, map, "env")?;
            let cwd = match map.get("cwd") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => {
                    let path = PathBuf::from(interpolate(ctx, "cwd", s)?);
                    Some(match base_dir {
                        Some(base) if path.is_relative() => base.join(path),
                        _ => path,
                    })
                }
                Some(other) => {
                    return Err(ctx.error("cwd", format!("expected a directory path as a string, found {}", yaml_kind(other))));
                }
            };
            Ok(McpTransport::Stdio { command, args, env, cwd })
        }
        (false, true) => {
            if declared == Some("stdio") {
                return Err(ctx.error("transport", "`transport: stdio` needs `command`, but this entry has `url`"));
            }
            for key in ["args", "env", "env_passthrough", "cwd"] {
                if map.contains_key(key) {
                    return Err(ctx.error(
                        key,
                        format!("`{key}` applies to local (stdio) servers only; remove it, or use `command` instead of `url`"),
                    ));
                }
            }
            let url = interpolate(ctx, "url", &string(ctx, map, "url")?)?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ctx.error(
                    "url",
                    format!("`{url}` is not an http:// or https:// address; write e.g. `http://127.0.0.1:8000/mcp`"),
                ));
            }
            let headers = string_map(ctx, map, "headers")?;
            for name in headers.keys() {
                if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    return Err(ctx.error(
                        format!("headers.{name}"),
                        "troupe sets this header itself; remove it",
                    ));
                }
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
                    return Err(ctx.error(
                        format!("headers.{name}"),
                        "is not a valid HTTP header name; use letters, digits and dashes, e.g. `X-Api-Key`",
                    ));
                }
            }
            for (name, value) in &headers {
                if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                    return Err(ctx.error(format!("headers.{name}"), "the value holds a line break or NUL; remove it"));
                }
            }
            Ok(McpTransport::Http { url, headers })
        }
    }
}

fn parse_tool_filter(
    ctx: &mut EntryCtx<'_>,
    raw: Option<&Value>,
) -> Result<ToolFilter, McpConfigError> {
    let map = match raw {
        None | Some(Value::Null) => return Ok(ToolFilter::default()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(ctx.error(
                "tools",
                format!("expected a mapping with `include` or `exclude`, found {}; write `tools: {{include: [name, ...]}}`", yaml_kind(other)),
            ));
        }
    };
    for key in map.keys() {
        match key.as_str() {
            "include" | "exclude" => {}
            "resources" | "prompts" => {
                let warning = ctx.error(
                    format!("tools.{key}"),
                    "troupe does not expose MCP resources or prompts as tools yet; ignored",
                );
                ctx.warnings.push(warning);
            }
            _ => {
                return Err(ctx.error(
                    format!("tools.{key}"),
                    "unknown key; write `include` or `exclude`",
                ));
            }
        }
    }
    let list = |ctx: &EntryCtx<'_>, key: &str| -> Result<Option<Vec<String>>, McpConfigError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(ctx.error(
                        format!("tools.{key}[{i}]"),
                        format!(
                            "expected a tool name or glob as a string, found {}",
                            yaml_kind(other)
                        ),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
            Some(other) => Err(ctx.error(
                format!("tools.{key}"),
                format!(
                    "expected a list of tool names, found {}; write `{key}: [name, other_*]`",
                    yaml_kind(other)
                ),
            )),
        }
    };
    let include = list(ctx, "include")?;
    let exclude = list(ctx, "exclude")?.unwrap_or_default();
    if include.is_some() && !exclude.is_empty() {
        let warning = ctx.error(
            "tools.exclude",
            "`include` is also set and wins; `exclude` is ignored",
        );
        ctx.warnings.push(warning);
    }
    Ok(ToolFilter { include, exclude })
}

fn string(
    ctx: &EntryCtx<'_>,
    map: &Map<String, Value>,
    key: &str,
) -> Result<String, McpConfigError> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(ctx.error(
            key,
            format!("expected a string, found {}", yaml_kind(other)),
        )),
        None => Err(ctx.error(key, "is missing")),
    }
}

fn string_map(
    ctx: &EntryCtx<'_>,
    map: &Map<String, Value>,
    key: &str,
) -> Result<BTreeMap<String, String>, McpConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(entries)) => {
            let mut out = BTreeMap::new();
            for (name, value) in entries {
                let path = format!("{key}.{name}");
                let text = scalar_text(value).ok_or_else(|| {
                    ctx.error(
                        path.as_str(),
                        format!(
                            "expected a string, number or boolean, found {}",
                            yaml_kind(value)
                        ),
                    )
                })?;
                out.insert(name.clone(), interpolate(ctx, &path, &text)?);
            }
            Ok(out)
        }
        Some(other) => Err(ctx.error(
            key,
            format!(
                "expected a mapping of names to values, found {}; write `{key}: {{NAME: value}}`",
                yaml_kind(other)
            ),
        )),
    }
}

fn opt_bool(
    ctx: &EntryCtx<'_>,
    map: &Map<String, Value>,
    key: &str,
) -> Result<Option<bool>, McpConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s))
            if matches!(s.to_ascii_lowercase().as_str(), "true" | "yes" | "on") =>
        {
            Ok(Some(true))
        }
        Some(Value::String(s))
            if matches!(s.to_ascii_lowercase().as_str(), "false" | "no" | "off") =>
        {
            Ok(Some(false))
        }
        Some(other) => Err(ctx.error(
            key,
            format!("expected true or false, found {}", describe(other)),
        )),
    }
}

fn opt_seconds(
    ctx: &EntryCtx<'_>,
    map: &Map<String, Value>,
    key: &str,
) -> Result<Option<Duration>, McpConfigError> {
    let secs = match map.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().trim_end_matches('s').trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match secs {
        Some(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => Ok(Some(Duration::from_secs_f64(secs))),
        _ => Err(ctx.error(
            key,
            format!(
                "expected a number of seconds above 0 and at most 86400, found {}; write e.g. `{key}: 30`",
                describe(map.get(key).unwrap_or(&Value::Null))
            ),
        )),
    }
}

/// Replaces `${VAR}` and `${env:VAR}` with the variable's value; a missing variable is an error.
fn interpolate(ctx: &EntryCtx<'_>, key: &str, text: &str) -> Result<String, McpConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(ctx.error(key, "has `${` without a closing `}`; write `${VAR}`"));
        };
        let name = after[..end].trim();
        let name = name.strip_prefix("env:").unwrap_or(name);
        match std::env::var(name) {
            Ok(value) => out.push_str(&value),
            Err(_) => {
                return Err(ctx.error(
                    key,
                    format!("refers to the environment variable `{name}`, which is not set; set it or write the value directly"),
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("the string \"{s}\""),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        other => yaml_kind(other).to_string(),
    }
}

/// The known key nearest to `key` by edit distance, when it is close enough to be a typo.
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Glob matching with `*` (any run) and `?` (one character); anything else matches itself.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests;
