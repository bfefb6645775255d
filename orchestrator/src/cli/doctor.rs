//! `troupe doctor`: whether what troupe.yaml names works on this machine, each part checked for
//! real: the config (every problem of `troupe config check`), the model server (reachable, the
//! models it lists, a one-token answer, whether tool calls were switched to text for it), each
//! MCP server (started, its tools counted), the board and session stores (opened), the terminal
//! backend, Landlock and bubblewrap, and the free disk under troupe's home. `--json` prints the
//! same as one object. Exit code 0 when nothing failed (warnings allowed), 1 when something did.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{CliError, EXIT_DONE, EXIT_FAILED, report};
use crate::settings::{BackendChoice, MODE_MEMORY_FILE, Settings, StoreLocation};

/// How long the model server gets for each request of the check.
const MODEL_TIMEOUT: Duration = Duration::from_secs(60);
/// Free space under troupe's home below which the check warns, in bytes.
const LOW_DISK: u64 = 1 << 30;

/// `troupe doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Print one JSON object: {ok, checks: [{name, status, detail}]}.
    #[arg(long)]
    pub(crate) json: bool,
    /// Skip the one-token request to the model (a slow local model takes a while to answer).
    #[arg(long)]
    pub(crate) no_model_request: bool,
}

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
struct Check {
    name: String,
    status: Status,
    detail: String,
}

fn check(name: &str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name: name.to_string(),
        status,
        detail: detail.into(),
    }
}

/// Runs `troupe doctor`; returns the exit code.
pub(crate) async fn run(args: DoctorArgs) -> i32 {
    report("doctor", run_inner(args).await)
}

async fn run_inner(args: DoctorArgs) -> Result<i32, CliError> {
    let mut checks = Vec::new();
    let config = match Settings::load_or_default(args.config.as_deref()) {
        Ok(config) => {
            let detail = match (&config.path, config.warnings.len()) {
                (None, _) => "no troupe.yaml here: troupe runs on its defaults".to_string(),
                (Some(path), 0) => format!("{} reads cleanly", path.display()),
                (Some(path), n) => format!(
                    "{}: {n} warning{}: {}",
                    path.display(),
                    if n == 1 { "" } else { "s" },
                    config.warnings.join("; ")
                ),
            };
            let status = if config.warnings.is_empty() {
                Status::Ok
            } else {
                Status::Warn
            };
            checks.push(check("config", status, detail));
            config
        }
        Err(error) => {
            checks.push(check(
                "config",
                Status::Fail,
                format!("{error} (troupe config check lists every problem)"),
            ));
            return Ok(finish(&checks, args.json));
        }
    };
    checks.push(model(&config, !args.no_model_request).await);
    checks.extend(mcp(&config).await);
    checks.push(board_store(&config).await);
    checks.push(session_store(&config).await);
    checks.push(backend(&config));
    checks.push(landlock());
    checks.push(bubblewrap(&config));
    checks.push(disk(config.home.path()));
    Ok(finish(&checks, args.json))
}

fn finish(checks: &[Check], json_out: bool) -> i32 {
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if json_out {
        println!("{}", json!({"ok": !failed, "checks": checks}));
    } else {
        for c in checks {
            let mark = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!(
                "{mark}  {:<14} {}",
                c.name,
                super::visible::visible_line(&c.detail)
            );
        }
    }
    if failed { EXIT_FAILED } else { EXIT_DONE }
}

/// The model server: its listing, a one-token answer, the remembered tool-call mode.
async fn model(config: &Settings, ask: bool) -> Check {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let Some(base) = config
        .model
        .base_url
        .clone()
        .or_else(|| env("TROUPE_BASE_URL"))
        .or_else(|| env("OPENAI_BASE_URL"))
    else {
        return check(
            "model",
            Status::Warn,
            "no model server configured: set model.base_url in troupe.yaml (an OpenAI-compatible API such as http://127.0.0.1:8080/v1) or TROUPE_BASE_URL",
        );
    };
    let base = base.trim().trim_end_matches('/').to_string();
    let key = config
        .model
        .api_key
        .clone()
        .or_else(|| config.model.api_key_env.as_deref().and_then(env))
        .or_else(|| env("TROUPE_API_KEY"))
        .or_else(|| env("OPENAI_API_KEY"));
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(MODEL_TIMEOUT)
        .build()
    {
        Ok(http) => http,
        Err(error) => return check("model", Status::Fail, format!("no HTTP client: {error}")),
    };
    let authed = |request: reqwest::RequestBuilder| match &key {
        Some(key) => request.bearer_auth(key),
        None => request,
    };
    let listed: Option<Vec<String>> = match authed(http.get(format!("{base}/models"))).send().await
    {
        Ok(response) if response.status().is_success() => response
            .json::<Value>()
            .await
            .ok()
            .map(|body| listed_ids(&body)),
        Ok(_) => None,
        Err(error) => {
            return check(
                "model",
                Status::Fail,
                format!(
                    "cannot reach {base}: {error}; is the server running, and is model.base_url right (it usually ends in /v1)?"
                ),
            );
        }
    };
    let named = config.model.model.clone().or_else(|| env("TROUPE_MODEL"));
    let mut notes = vec![format!("{base} answers")];
    let model = match (&named, &listed) {
        (Some(name), Some(ids)) if !ids.is_empty() && !ids.contains(name) => {
            notes.push(format!(
                "model {name} is not among the {} it lists ({})",
                ids.len(),
                ids.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            ));
            name.clone()
        }
        (Some(name), _) => {
            notes.push(format!("model {name}"));
            name.clone()
        }
        (None, Some(ids)) if ids.len() == 1 => {
            notes.push(format!(
                "model {} (the only one it lists; none is named)",
                ids[0]
            ));
            ids[0].clone()
        }
        (None, Some(ids)) if !ids.is_empty() => {
            return check(
                "model",
                Status::Fail,
                format!(
                    "{base} serves {} models and troupe.yaml names none; set model.model to one of: {}",
                    ids.len(),
                    ids.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        (None, _) => {
            return check(
                "model",
                Status::Fail,
                format!(
                    "{base} lists no models and troupe.yaml names none; set model.model to the model it serves"
                ),
            );
        }
    };
    let mut status = if notes.iter().any(|n| n.contains("is not among")) {
        Status::Warn
    } else {
        Status::Ok
    };
    if ask {
        let started = Instant::now();
        let body = json!({"model": model, "max_tokens": 1, "stream": false,
            "messages": [{"role": "user", "content": "Say OK."}]});
        match authed(http.post(format!("{base}/chat/completions")).json(&body))
            .send()
            .await
        {
            Ok(response) if response.status().is_success() => notes.push(format!(
                "a one-token answer in {} ms",
                started.elapsed().as_millis()
            )),
            Ok(response) => {
                let status_code = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                status = Status::Fail;
                notes.push(format!(
                    "a one-token request was refused ({status_code}): {}",
                    troupe_tools::text::clip_bytes(&text, 200)
                ));
            }
            Err(error) => {
                status = Status::Fail;
                notes.push(format!("a one-token request failed: {error}"));
            }
        }
    }
    let memory = config.home.path().join(MODE_MEMORY_FILE);
    let remembered = std::fs::read_to_string(&memory)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    if remembered
        .keys()
        .any(|k| k.starts_with(&format!("{base}/chat/completions ")))
    {
        notes.push(format!(
            "tool calls: text (the server could not parse native calls before; delete {} to try native again)",
            memory.display()
        ));
    } else {
        notes.push(format!(
            "tool calls: {}",
            config.model.provider.tool_calls.as_str()
        ));
    }
    check("model", status, notes.join("; "))
}

/// The ids of a `/models` listing.
fn listed_ids(body: &Value) -> Vec<String> {
    body.get("data")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Each MCP server, started and its tools counted, then stopped.
async fn mcp(config: &Settings) -> Vec<Check> {
    let servers = config.mcp_server_list();
    if servers.servers.is_empty() && servers.errors.is_empty() {
        return vec![check("mcp", Status::Ok, "no MCP servers configured")];
    }
    let (manager, statuses) =
        super::mcp::start_configured(config, troupe_tools::Registry::new()).await;
    manager.shutdown().await;
    statuses
        .iter()
        .map(|s| {
            let name = format!("mcp {}", s.name);
            match &s.last_error {
                None => check(
                    &name,
                    Status::Ok,
                    format!(
                        "{} ({}), {} tools",
                        s.state.as_str(),
                        s.transport,
                        s.tool_count
                    ),
                ),
                Some(error) => check(
                    &name,
                    Status::Fail,
                    format!("{}: {error}", s.state.as_str()),
                ),
            }
        })
        .collect()
}

async fn board_store(config: &Settings) -> Check {
    match &config.kanban.store {
        StoreLocation::Sqlite(dir) if !dir.exists() => check(
            "board store",
            Status::Ok,
            format!(
                "{} does not exist yet; troupe kanban init creates it",
                dir.display()
            ),
        ),
        location => match crate::kanban_api::Kanban::open(config.kanban.clone()).await {
            Ok(_) => check(
                "board store",
                Status::Ok,
                format!("{} opens", describe(location)),
            ),
            Err(error) => check(
                "board store",
                Status::Fail,
                format!("{} does not open: {error}", describe(location)),
            ),
        },
    }
}

async fn session_store(config: &Settings) -> Check {
    if !config.sessions.persist {
        return check("session store", Status::Ok, "off (sessions.persist: false)");
    }
    match &config.sessions.store {
        StoreLocation::Sqlite(file) if !file.exists() => check(
            "session store",
            Status::Ok,
            format!("{} is created by the first session", file.display()),
        ),
        location => match crate::sessions::SessionStore::open(location).await {
            Ok(store) => check(
                "session store",
                Status::Ok,
                format!("{} opens", store.describe()),
            ),
            Err(error) => check(
                "session store",
                Status::Fail,
                format!("{} does not open: {error}", describe(location)),
            ),
        },
    }
}

fn describe(location: &StoreLocation) -> String {
    match location {
        StoreLocation::Sqlite(path) => path.display().to_string(),
        StoreLocation::Postgres(url) => crate::settings::redact_url(url),
    }
}

/// The terminal backend troupe.yaml chose, and whether what it needs is here.
fn backend(config: &Settings) -> Check {
    let name = config.backend.name();
    match &config.backend {
        BackendChoice::Local => check("backend", Status::Ok, "local: commands run on this machine"),
        BackendChoice::Docker(_) => program_check(
            "backend",
            name,
            "docker",
            &["version", "--format", "{{.Server.Version}}"],
        ),
        BackendChoice::Ssh(_) => program_check("backend", name, "ssh", &["-V"]),
        BackendChoice::Sandbox { .. } => program_check("backend", name, "bwrap", &["--version"]),
    }
}

/// Whether `program ARGS` runs and exits 0.
fn program_check(check_name: &str, backend: &str, program: &str, args: &[&str]) -> Check {
    match std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            let said = String::from_utf8_lossy(&out.stdout);
            let said = if said.trim().is_empty() {
                String::from_utf8_lossy(&out.stderr).into_owned()
            } else {
                said.into_owned()
            };
            check(
                check_name,
                Status::Ok,
                format!(
                    "{backend}: {program} works ({})",
                    said.lines().next().unwrap_or("").trim()
                ),
            )
        }
        Ok(out) => check(
            check_name,
            Status::Fail,
            format!(
                "{backend}: {program} failed: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
            ),
        ),
        Err(error) => check(
            check_name,
            Status::Fail,
            format!(
                "{backend}: cannot run {program} ({error}); install it or choose another terminal.backend"
            ),
        ),
    }
}

fn landlock() -> Check {
    match troupe_tools::builtin::confine::probe() {
        troupe_tools::builtin::confine::Support::Available { abi } => check(
            "landlock",
            Status::Ok,
            format!("available (ABI {abi}): local commands are confined to the project"),
        ),
        troupe_tools::builtin::confine::Support::Unavailable { why } => check(
            "landlock",
            Status::Warn,
            format!("{why}; local commands are not confined (terminal.confine)"),
        ),
    }
}

fn bubblewrap(config: &Settings) -> Check {
    let needed = matches!(config.backend, BackendChoice::Sandbox { .. });
    match std::process::Command::new("bwrap")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => check(
            "bubblewrap",
            Status::Ok,
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ),
        _ if needed => check(
            "bubblewrap",
            Status::Fail,
            "bwrap is not installed, and terminal.backend is sandbox; install bubblewrap",
        ),
        _ => check(
            "bubblewrap",
            Status::Ok,
            "not installed (only terminal.backend: sandbox needs it)",
        ),
    }
}

/// Free space on the file system of troupe's home (or its nearest existing parent).
fn disk(home: &Path) -> Check {
    let mut at = home.to_path_buf();
    while !at.exists() {
        match at.parent() {
            Some(parent) => at = parent.to_path_buf(),
            None => break,
        }
    }
    match nix::sys::statvfs::statvfs(&at) {
        Ok(stat) => {
            let free = stat.blocks_available().saturating_mul(stat.fragment_size());
            let shown = format!("{:.1} GB free under {}", free as f64 / 1e9, at.display());
            if free < LOW_DISK {
                check(
                    "disk",
                    Status::Warn,
                    format!("{shown}: little room for stores and logs"),
                )
            } else {
                check("disk", Status::Ok, shown)
            }
        }
        Err(error) => check(
            "disk",
            Status::Warn,
            format!("cannot read free space of {}: {error}", at.display()),
        ),
    }
}
