//! The reference of every troupe.yaml key, the one table docs/config.md's key tables are
//! generated from (`troupe config reference`): each key's type, its default and one line of
//! meaning, section by section. Defaults are read from the settings' own `Default` impls and
//! constants wherever a value exists, so the page cannot drift from the code; a text default
//! is used only where the default is a rule (an environment variable, "the project folder").
//!
//! Adding a key: add it to its section's key list (the strict check, `known_keys.rs`), add its
//! [`Row`] to that section in [`SECTIONS`] below, then run
//! `cargo run -p troupe -- config reference --update docs/config.md`. Tests fail until all
//! three agree, naming what is missing.

use std::time::Duration;

use troupe_actors::delegate::DelegationConfig;
use troupe_actors::model::ProviderSettings;
use troupe_actors::supervisor::ApprovalConfig;
use troupe_tools::builtin::{CodeConfig, TerminalConfig};

use super::serve::{ServeConfig, ServerLimits};

/// One key as the reference shows it.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Its path: `serve.port`, `profiles.<name>.model`.
    pub key: &'static str,
    /// What it takes.
    pub ty: &'static str,
    /// Its value when the file does not set it.
    pub default: DefaultValue,
    /// What it does, in one line.
    pub meaning: &'static str,
}

/// Where a key's default comes from.
#[derive(Debug, Clone, Copy)]
pub enum DefaultValue {
    /// Nothing (shown as `none`): the feature is off, or the key only matters when written.
    Unset,
    /// A rule rather than a value (an environment variable, a folder).
    Rule(&'static str),
    /// A value read from the settings' code.
    Code(fn() -> String),
}

impl DefaultValue {
    fn render(&self) -> String {
        match self {
            DefaultValue::Unset => "none".to_string(),
            DefaultValue::Rule(text) => (*text).to_string(),
            DefaultValue::Code(value) => value(),
        }
    }
}

/// One section of troupe.yaml: its name (the generated block's) and its keys.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// Its name, as in the markers of docs/config.md.
    pub name: &'static str,
    /// Its keys.
    pub rows: &'static [Row],
    /// Other top-level names that take the same keys (`execute_code` for `code_execution`).
    pub aliases: &'static [&'static str],
}

const fn row(
    key: &'static str,
    ty: &'static str,
    default: DefaultValue,
    meaning: &'static str,
) -> Row {
    Row {
        key,
        ty,
        default,
        meaning,
    }
}

use DefaultValue::{Code, Rule, Unset};

fn secs(d: Duration) -> String {
    format!("{}", d.as_secs())
}

/// A unit variant as the file writes it: `Manual` is `manual`.
fn word(value: impl std::fmt::Debug) -> String {
    format!("`{}`", format!("{value:?}").to_lowercase())
}

fn ms(d: Duration) -> String {
    format!("{}", d.as_millis())
}

fn terminal() -> TerminalConfig {
    TerminalConfig::default()
}

fn code() -> CodeConfig {
    CodeConfig::default()
}

fn limits() -> ServerLimits {
    ServerLimits::default()
}

fn delegation() -> DelegationConfig {
    DelegationConfig::default()
}

/// Every section, in the order of docs/config.md.
#[rustfmt::skip]
pub const SECTIONS: &[Section] = &[
    Section {
        name: "model",
        aliases: &[],
        rows: &[
            row("model.base_url", "URL", Rule("`TROUPE_BASE_URL`, else `OPENAI_BASE_URL`"), "an OpenAI-compatible API, usually ending in `/v1`"),
            row("model.model", "string", Rule("`TROUPE_MODEL`, else the only model the server's `/models` lists"), "the model name; several or none listed is an error saying what to set"),
            row("model.default", "string", Unset, "another spelling of `model.model`"),
            row("model.api_key", "string", Unset, "the key itself (prefer `api_key_env`)"),
            row("model.api_key_env", "string", Rule("`TROUPE_API_KEY`, else `OPENAI_API_KEY`"), "the variable holding the key; a warning when it is not set"),
            row("model.context_length", "integer", Rule("unknown"), "tokens in the model's context window; sizes the tool listing"),
            row("model.prompt_style", "`auto`, `full` or `lean`", Code(|| format!("`auto` (lean when `context_length` is at most {})", troupe_tools::lean::LEAN_CONTEXT_MAX)), "the lean prompt keeps every tool's name and parameters with shorter descriptions and tells the model to search before saying a tool is missing (docs/local-models.md)"),
            row("model.tool_calls", "`auto`, `native` or `text`", Code(|| format!("`{}`", ProviderSettings::default().tool_calls.as_str())), "how tool calls travel; `auto` switches to text after the server fails to parse calls twice"),
            row("model.retry_budget", "integer", Code(|| ProviderSettings::default().retry_budget.to_string()), "retries per turn, over all its requests"),
            row("model.request_fields", "mapping", Unset, "extra request fields (`stop`, `cache_prompt`, ...)"),
            row("model.request_timeout", "seconds", Rule("the provider's (600)"), "how long one request may take"),
        ],
    },
    Section {
        name: "toolsets",
        aliases: &[],
        rows: &[
            row("toolsets.enabled", "list of toolsets", Rule("all"), "the toolsets sessions get"),
            row("toolsets.disabled", "list of toolsets", Unset, "toolsets taken away"),
            row("toolsets.blocked_tools", "list of tools", Unset, "single tools taken away"),
            row("toolsets.define", "mapping: name to toolsets", Unset, "composite toolsets"),
        ],
    },
    Section {
        name: "tools",
        aliases: &[],
        rows: &[
            row("tools.tool_search", "mapping", Rule("`enabled: auto`"), "tool search and its listing (`enabled`, `listing`, `max_search_limit`, `ranking`, `phrasings`, ...), read by the tool search; docs/tool-search.md"),
            row("tools.connectors", "mapping", Unset, "the hosted connector gateway; absent or `enabled: false` turns it off"),
            row("tools.connectors.enabled", "bool", Rule("true when the section is there"), "whether the gateway is used"),
            row("tools.connectors.url", "URL", Unset, "the gateway's URL (required)"),
            row("tools.connectors.token_env", "string", Code(|| format!("`{}`", super::connectors::DEFAULT_TOKEN_ENV)), "the variable holding the gateway's token"),
            row("tools.connectors.timeout_s", "seconds", Code(|| secs(super::connectors::DEFAULT_TIMEOUT)), "longest wait for one gateway request"),
        ],
    },
    Section {
        name: "approvals",
        aliases: &[],
        rows: &[
            row("approvals.mode", "`manual` or `off`", Code(|| word(ApprovalConfig::default().mode)), "whether risky calls wait for a person"),
            row("approvals.timeout", "seconds", Code(|| secs(ApprovalConfig::default().timeout)), "how long a request waits for an answer"),
            row("approvals.unattended", "`deny` or `approve`", Code(|| word(ApprovalConfig::default().unattended)), "the answer when nobody can give one"),
            row("approvals.require_approval", "list of tools", Unset, "tools that always ask"),
            row("approvals.allowlist", "list of grant keys", Unset, "grants that never ask"),
        ],
    },
    Section {
        name: "delegation",
        aliases: &[],
        rows: &[
            row("delegation.max_concurrent_children", "integer", Code(|| delegation().max_concurrent_children.to_string()), "most subagents one call starts at once"),
            row("delegation.max_spawn_depth", "integer", Code(|| delegation().max_spawn_depth.to_string()), "how deep subagent trees go"),
            row("delegation.orchestrator_enabled", "bool", Code(|| delegation().orchestrator_enabled.to_string()), "whether subagents above the leaves may delegate"),
            row("delegation.max_iterations", "integer", Code(|| delegation().max_iterations.to_string()), "tool rounds each subagent gets"),
            row("delegation.child_timeout_seconds", "seconds", Rule("no limit"), "a subagent silent this long is stopped"),
            row("delegation.default_toolsets", "list of toolsets", Rule("the parent's"), "the most a subagent may have (never more than its parent)"),
            row("delegation.inherit_mcp_toolsets", "bool", Code(|| delegation().inherit_mcp_toolsets.to_string()), "whether a narrowed subagent keeps the parent's MCP toolsets"),
            row("delegation.budget", "mapping (as `budget`)", Rule("no limit"), "what each subagent may spend"),
        ],
    },
    Section {
        name: "kanban",
        aliases: &[],
        rows: &[
            row("kanban.store", "directory or `postgres://` URL", Rule("`kanban/` under troupe's home"), "where the boards live"),
            row("kanban.default_assignee", "profile name", Unset, "the profile for tasks that name none"),
            row("kanban.failure_limit", "integer", Code(|| troupe_kanban::domain::DEFAULT_FAILURE_LIMIT.to_string()), "failures before a task is blocked"),
            row("kanban.max_in_progress", "integer", Code(|| troupe_kanban::dispatcher_config::DEFAULT_MAX_IN_PROGRESS.to_string()), "running tasks at once"),
            row("kanban.max_in_progress_per_assignee", "mapping: profile to integer", Unset, "running tasks at once per assignee"),
            row("kanban.max_in_progress_per_profile", "mapping: profile to integer", Unset, "another name of `max_in_progress_per_assignee`"),
            row("kanban.dispatch_interval", "duration (`30s`, `2m`)", Code(|| format!("{} s", secs(super::kanban::DEFAULT_DISPATCH_INTERVAL))), "how often the dispatcher looks without a wake-up"),
            row("kanban.dispatch_interval_seconds", "seconds", Unset, "`dispatch_interval` in seconds"),
            row("kanban.lease_ttl", "duration", Code(|| format!("{} s", secs(troupe_kanban::domain::DEFAULT_CLAIM_TTL))), "how long a run's lease lasts without a heartbeat"),
            row("kanban.claim_ttl", "duration", Unset, "another name of `lease_ttl`"),
            row("kanban.claim_ttl_seconds", "seconds", Unset, "`lease_ttl` in seconds"),
            row("kanban.dispatch_profiles", "list of profiles", Rule("all"), "the profiles the dispatcher runs"),
            row("kanban.worker_assignable_profiles", "list of profiles", Unset, "profiles a worker may give its child tasks to, besides its own and the default"),
            row("kanban.dispatch_in_gateway", "bool", Unset, "accepted from the reference agent's configs and not read: `troupe serve` always dispatches"),
        ],
    },
    Section {
        name: "profiles",
        aliases: &[],
        rows: &[
            row("profiles.<name>.base_url", "URL", Rule("`model.base_url`"), "the profile's server"),
            row("profiles.<name>.model", "string", Rule("`model.model`"), "its model"),
            row("profiles.<name>.api_key", "string", Unset, "its key"),
            row("profiles.<name>.api_key_env", "string", Rule("`model.api_key_env`"), "the variable holding its key (a warning when unset)"),
            row("profiles.<name>.toolsets", "list of toolsets", Rule("`toolsets.enabled`"), "its toolsets"),
            row("profiles.<name>.blocked_tools", "list of tools", Unset, "single tools taken away"),
            row("profiles.<name>.max_iterations", "integer", Code(|| troupe_actors::session::DEFAULT_MAX_ITERATIONS.to_string()), "tool rounds per message"),
            row("profiles.<name>.system_prompt", "string", Rule("troupe's"), "its system prompt"),
            row("profiles.<name>.script", "file", Unset, "a scripted model instead of a server"),
            row("profiles.<name>.budget", "mapping (as `budget`)", Rule("`budget`"), "its own spending limits"),
            row("profiles.<name>.terminal", "mapping (the backend keys of `terminal`)", Rule("`terminal`"), "where its commands run"),
            row("profiles.<name>.review", "`person`, `agent` or a mapping", Unset, "completions wait in `review` for a person or a reviewer profile (docs/kanban-review.md)"),
            row("profiles.<name>.review.by", "`person` or `agent`", Unset, "who reviews"),
            row("profiles.<name>.review.profile", "profile name", Code(|| format!("`{}`", super::review::DEFAULT_REVIEWER)), "the reviewer profile, with `by: agent`"),
            row("profiles.<name>.review.max_rounds", "integer", Code(|| troupe_kanban::review::DEFAULT_MAX_ROUNDS.to_string()), "reviews of one task by the reviewer profile before a person decides"),
            row("profiles.<name>.tool_calls", "as `model.tool_calls`", Rule("`model.tool_calls`"), "how its tool calls travel"),
            row("profiles.<name>.retry_budget", "integer", Rule("`model.retry_budget`"), "retries per turn"),
            row("profiles.<name>.request_fields", "mapping", Rule("`model.request_fields`"), "extra request fields"),
            row("profiles.<name>.request_timeout", "seconds", Rule("`model.request_timeout`"), "how long one request may take"),
        ],
    },
    Section {
        name: "terminal",
        aliases: &[],
        rows: &[
            row("terminal.backend", "`local`, `docker`, `ssh` or `sandbox`", Rule("`local`"), "where commands run"),
            row("terminal.cwd", "directory", Rule("the project folder"), "where commands start"),
            row("terminal.allowed_roots", "list of directories", Rule("the project folder"), "folders commands may work in without asking"),
            row("terminal.timeout", "seconds", Code(|| terminal().default_timeout_secs.to_string()), "how long a command may run when the call says nothing"),
            row("terminal.max_foreground_timeout", "seconds", Code(|| terminal().max_foreground_timeout_secs.to_string()), "the longest timeout a call may ask for"),
            row("terminal.max_output_chars", "integer", Code(|| terminal().max_output_chars.to_string()), "output kept per call (head and tail)"),
            row("terminal.kill_grace", "seconds", Code(|| secs(terminal().kill_grace)), "between SIGTERM and SIGKILL"),
            row("terminal.env_passthrough", "list of variables", Unset, "variables commands inherit (never troupe's own keys)"),
            row("terminal.confine", "`auto`, `on` or `off`", Code(|| word(terminal().confine)), "Landlock confinement of commands"),
            row("terminal.network", "bool", Code(|| terminal().network.to_string()), "whether confined commands reach the network"),
            row("terminal.writable", "list of directories", Unset, "extra folders confined commands may write"),
            row("terminal.docker_image", "string", Unset, "the image of the `docker` backend"),
            row("terminal.container_persistent", "bool", Rule("false"), "keep the container between sessions"),
            row("terminal.container_cpu", "number of cores", Unset, "CPU limit of the container (e.g. `1.5`)"),
            row("terminal.container_memory", "MB or with a unit (`2g`)", Unset, "memory limit of the container"),
            row("terminal.container_disk", "MB", Unset, "disk limit: the root (where the storage driver allows it) and the writable `/tmp`"),
            row("terminal.docker_forward_env", "list of variables", Unset, "variables passed into each `docker exec` (troupe's own keys never are)"),
            row("terminal.docker_memory", "as `container_memory`", Unset, "older name of `container_memory` (both at once is an error)"),
            row("terminal.docker_cpus", "as `container_cpu`", Unset, "older name of `container_cpu` (both at once is an error)"),
            row("terminal.docker_pids", "integer", Unset, "process limit of the container"),
            row("terminal.docker_network", "string", Unset, "the container's network"),
            row("terminal.ssh", "mapping", Unset, "host, user, key and known hosts of the `ssh` backend"),
            row("terminal.sandbox_network", "bool", Unset, "whether the `sandbox` backend keeps the network"),
            row("terminal.dangerous_command_approval", "bool", Code(|| terminal().dangerous_command_approval.to_string()), "ask before dangerous commands (off only on an isolated backend)"),
        ],
    },
    Section {
        name: "code_execution",
        aliases: &["execute_code"],
        rows: &[
            row("code_execution.timeout", "seconds", Code(|| secs(code().timeout)), "how long a script may run"),
            row("code_execution.max_tool_calls", "integer", Code(|| code().max_tool_calls.to_string()), "tool calls a script may make"),
            row("code_execution.mode", "`project` or `strict`", Code(|| word(code().mode)), "where scripts run and with which interpreter"),
            row("code_execution.python", "path", Code(|| format!("`{}`", code().python.display())), "the Python interpreter"),
            row("code_execution.kill_grace", "seconds", Code(|| secs(code().kill_grace)), "between SIGTERM and SIGKILL"),
            row("code_execution.max_stdout_bytes", "integer", Code(|| code().max_stdout_bytes.to_string()), "stdout kept (head and tail)"),
            row("code_execution.max_stderr_bytes", "integer", Code(|| code().max_stderr_bytes.to_string()), "stderr kept (head and tail)"),
            row("code_execution.env_passthrough", "list of variables", Unset, "variables scripts inherit"),
        ],
    },
    Section {
        name: "serve",
        aliases: &[],
        rows: &[
            row("serve.bind", "IP address", Code(|| ServeConfig::default().bind.to_string()), "the address to listen on"),
            row("serve.port", "port", Code(|| ServeConfig::default().port.to_string()), "the port (0 picks a free one)"),
            row("serve.token", "string (16+ characters)", Rule("`TROUPE_SERVE_TOKEN`, else generated"), "the API token, shared with `/v1` clients (prefer the environment)"),
            row("serve.dashboard_token", "string (16+ characters)", Rule("`TROUPE_DASHBOARD_TOKEN`, else generated"), "the people's token: the API's rights but `/v1`, and every stored session's transcript; must differ from the API token"),
            row("serve.cors_origins", "list of origins", Unset, "browser origins allowed to call the API"),
            row("serve.allowed_hosts", "list of host names", Unset, "`Host` names accepted besides the listen address"),
            row("serve.feed_poll_ms", "milliseconds", Code(|| ms(ServeConfig::default().feed_poll)), "how often the event feed polls a store that cannot wake it"),
            row("serve.header_read_timeout_ms", "milliseconds", Code(|| ms(limits().header_read_timeout)), "time to read a request's headers"),
            row("serve.idle_timeout_ms", "milliseconds", Code(|| ms(limits().idle_timeout)), "an idle connection is closed after"),
            row("serve.max_connections", "integer", Code(|| limits().max_connections.to_string()), "connections at once"),
            row("serve.max_connections_per_client", "integer", Code(|| limits().max_connections_per_client.to_string()), "connections at once per client address"),
            row("serve.max_requests_per_client", "integer", Code(|| limits().max_requests_per_client.to_string()), "requests in flight per client address"),
            row("serve.max_sessions", "integer", Code(|| limits().max_sessions.to_string()), "sessions open at once over HTTP"),
            row("serve.session_idle_timeout_ms", "milliseconds", Code(|| ms(limits().session_idle_timeout)), "an idle HTTP session is closed after"),
        ],
    },
    Section {
        name: "plugins",
        aliases: &[],
        rows: &[
            row("plugins.enabled", "list of plugins", Unset, "plugins switched on"),
            row("plugins.disabled", "list of plugins", Unset, "plugins switched off (wins over `enabled`)"),
        ],
    },
    Section {
        name: "budget",
        aliases: &[],
        rows: &[
            row("budget.max_cost_usd", "number", Rule("no limit"), "dollars a session (with its subagents) may spend"),
            row("budget.max_tokens", "integer", Rule("no limit"), "tokens it may spend"),
            row("budget.max_wall_seconds", "seconds", Rule("no limit"), "how long it may run"),
            row("pricing.<name>.input", "number", Rule("list prices"), "dollars per million input tokens of model NAME"),
            row("pricing.<name>.output", "number", Rule("list prices"), "per million output tokens"),
            row("pricing.<name>.cached_input", "number", Rule("list prices"), "per million cached input tokens"),
        ],
    },
    Section {
        name: "observability",
        aliases: &[],
        rows: &[
            row("observability.enabled", "bool", Rule("true when `otlp_endpoint` is set"), "whether spans are sent"),
            row("observability.otlp_endpoint", "URL", Unset, "the collector's base URL (`/v1/traces` is added)"),
            row("observability.headers", "mapping", Unset, "headers sent to the collector"),
            row("observability.service_name", "string", Rule("`troupe`"), "the spans' `service.name`"),
            row("observability.sample_rate", "number from 0 to 1", Rule("1"), "share of traces kept"),
            row("observability.max_chars", "integer", Code(|| troupe_actors::trace::DEFAULT_MAX_CHARS.to_string()), "longest argument or result text on a span"),
            row("sessions.persist", "bool", Rule("true"), "whether conversations are kept (for `troupe sessions`, `--continue`, `/resume`)"),
            row("sessions.store", "file or `postgres://` URL", Rule("beside the board store"), "where they are kept"),
            row("sessions.keep_days", "integer", Rule("forever"), "stored sessions older than this are removed at `troupe serve` start"),
        ],
    },
];

/// The first line of a generated block in docs/config.md.
fn begin(section: &str) -> String {
    format!(
        "<!-- generated from orchestrator/src/settings/reference.rs by `troupe config reference`: {section} -->"
    )
}

/// The last line of a generated block.
const END: &str = "<!-- end of generated table -->";

/// The generated block of one section: its markers and its table.
pub fn block(section: &Section) -> String {
    let mut out = begin(section.name);
    out.push_str("\n| key | type | default | meaning |\n|---|---|---|---|\n");
    for row in section.rows {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            row.key,
            row.ty,
            row.default.render(),
            row.meaning
        ));
    }
    for alias in section.aliases {
        let keys: Vec<String> = section
            .rows
            .iter()
            .filter_map(|r| r.key.split_once('.'))
            .map(|(_, rest)| format!("`{alias}.{rest}`"))
            .collect();
        out.push_str(&format!(
            "\nThe same keys under `{alias}`: {}.\n",
            keys.join(", ")
        ));
    }
    out.push_str(END);
    out
}

/// Every section's block, one after another (what `troupe config reference` prints).
pub fn markdown() -> String {
    SECTIONS
        .iter()
        .map(|s| format!("## `{}`\n\n{}\n", s.name, block(s)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `doc` with each generated block replaced by its current text, the prose around them kept.
/// An error names a section whose block `doc` lacks, or a block left open.
pub fn update(doc: &str) -> Result<String, String> {
    let mut out = doc.to_string();
    for section in SECTIONS {
        let start_marker = begin(section.name);
        let Some(start) = out.find(&start_marker) else {
            return Err(format!(
                "the page has no generated block for `{}`: add the two lines\n{start_marker}\n{END}\nwhere its table goes",
                section.name
            ));
        };
        let Some(len) = out[start..].find(END) else {
            return Err(format!(
                "the generated block of `{}` has no end line `{END}`",
                section.name
            ));
        };
        out.replace_range(start..start + len + END.len(), &block(section));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    /// A document holding `path` (`<name>` read as a name the user picked).
    fn document_with(path: &str) -> Value {
        let mut value = Value::from(1);
        for part in path.rsplit('.') {
            let mut map = Map::new();
            map.insert(part.replace("<name>", "picked"), value);
            value = Value::Object(map);
        }
        value
    }

    #[test]
    fn every_known_key_has_a_row_and_every_row_is_a_known_key() {
        let rows: Vec<&str> = SECTIONS
            .iter()
            .flat_map(|s| s.rows.iter().map(|r| r.key))
            .collect();
        let aliased = |path: &str| {
            SECTIONS.iter().any(|s| {
                s.aliases.iter().any(|alias| {
                    path == *alias
                        || path
                            .strip_prefix(alias)
                            .and_then(|rest| rest.strip_prefix('.'))
                            .is_some_and(|rest| {
                                rows.contains(&format!("{}.{rest}", s.name).as_str())
                            })
                })
            })
        };
        let missing: Vec<String> =
            super::super::known_keys::key_paths(&super::super::known_keys::TOP)
                .into_iter()
                // Top-level names with keys of their own are documented by those keys.
                .filter(|p| {
                    p.contains('.') || !rows.iter().any(|r| r.starts_with(&format!("{p}.")))
                })
                .filter(|p| !rows.contains(&p.as_str()) && !aliased(p))
                .filter(|p| {
                    !["mcp_servers", "hooks", "agent", "profiles", "pricing"].contains(&p.as_str())
                })
                .collect();
        assert!(
            missing.is_empty(),
            "keys troupe.yaml takes with no row in orchestrator/src/settings/reference.rs: {missing:?}"
        );
        let mut seen = std::collections::HashSet::new();
        for key in &rows {
            assert!(seen.insert(*key), "{key} has two rows");
            let unknown = super::super::known_keys::unknown_keys(
                &document_with(key),
                &super::super::known_keys::TOP,
            );
            assert!(
                unknown.is_empty(),
                "reference.rs has a row for {key}, which troupe does not read: {unknown:?}"
            );
        }
    }

    #[test]
    fn docs_config_md_holds_the_generated_tables() {
        let doc = include_str!("../../../docs/config.md");
        let updated = update(doc).unwrap_or_else(|e| panic!("docs/config.md: {e}"));
        assert!(
            updated == doc,
            "docs/config.md's key tables differ from orchestrator/src/settings/reference.rs; \
             regenerate them with `cargo run -p troupe -- config reference --update docs/config.md`"
        );
    }

    #[test]
    fn defaults_come_from_the_code() {
        let serve = SECTIONS.iter().find(|s| s.name == "serve").unwrap();
        let port = serve.rows.iter().find(|r| r.key == "serve.port").unwrap();
        assert_eq!(
            port.default.render(),
            super::super::serve::DEFAULT_PORT.to_string()
        );
        let block = block(serve);
        assert!(
            block.contains("| `serve.max_sessions` | integer | 1000 |"),
            "{block}"
        );
        // A block is replaced in place, the prose around it kept.
        let doc = format!("intro\n{}\nstale\n{END}\noutro\n", begin("serve"));
        let mut all = doc.clone();
        for s in SECTIONS.iter().filter(|s| s.name != "serve") {
            all.push_str(&format!("{}\n{END}\n", begin(s.name)));
        }
        let updated = update(&all).unwrap();
        assert!(updated.starts_with("intro\n"));
        assert!(updated.contains("\noutro\n"));
        assert!(!updated.contains("stale"));
        assert!(update("no blocks").unwrap_err().contains("`model`"));
    }
}
