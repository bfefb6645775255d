//! `troupe chat -q "..."`: one question to a real session with the built-in tools, against an
//! OpenAI-compatible server (flags, `troupe.yaml`, or the environment) or a scripted model
//! (`--script`). Approvals are asked on the terminal; with no terminal they follow
//! `approvals.unattended` (deny by default). `--json` prints one JSON object per line.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::model::{
    DEFAULT_MODEL, ModelProvider, OpenAiConfig, OpenAiProvider, Script, ScriptedProvider,
};
use troupe_actors::session::{SessionConfig, TurnStatus};
use troupe_actors::supervisor::{ApprovalChoice, ApprovalConfig, DefaultRules, PendingApproval};
use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};
use troupe_tools::{Registry, ViewSpec};

use crate::api::{SessionOptions, Troupe, TroupeConfig};
use crate::config::Config;

/// Exit code when the model could not be reached or failed.
const EXIT_MODEL_FAILED: i32 = 1;
/// Exit code for bad flags or config.
const EXIT_USAGE: i32 = 2;
/// Exit code when the turn was stopped (Ctrl-C).
const EXIT_INTERRUPTED: i32 = 130;

/// `troupe chat`: ask one question and print the answer.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The question or task.
    #[arg(short = 'q', long = "query")]
    pub query: String,
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Base URL of an OpenAI-compatible API (overrides the config and TROUPE_BASE_URL).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name (overrides the config and TROUPE_MODEL).
    #[arg(long)]
    pub model: Option<String>,
    /// Toolsets the session gets, comma-separated (default: the config's, else all).
    #[arg(long, value_delimiter = ',')]
    pub toolsets: Option<Vec<String>>,
    /// Print one JSON object per line (events, then the final answer).
    #[arg(long)]
    pub json: bool,
    /// Answer from a script of assistant turns instead of a server (offline runs).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Tool rounds allowed before the model must answer.
    #[arg(long)]
    pub max_iterations: Option<u32>,
    /// A script given as text rather than a file (the demo's bundled model).
    #[arg(skip)]
    pub script_text: Option<String>,
}

/// Runs `troupe chat`; returns the exit code.
pub async fn run(args: ChatArgs) -> anyhow::Result<i32> {
    let config = match Config::load_or_default(args.config.as_deref()) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("troupe chat: {message}");
            return Ok(EXIT_USAGE);
        }
    };
    let provider = match provider(&args, &config) {
        Ok(provider) => provider,
        Err(message) => {
            eprintln!("troupe chat: {message}");
            return Ok(EXIT_USAGE);
        }
    };
    let approvals = match ApprovalConfig::from_value(config.section("approvals")) {
        Ok(approvals) => approvals,
        Err(message) => {
            eprintln!("troupe chat: {message}");
            return Ok(EXIT_USAGE);
        }
    };
    let delegation = match crate::delegation::delegation_config(&config) {
        Ok(delegation) => delegation,
        Err(error) => {
            eprintln!("troupe chat: {error}");
            return Ok(EXIT_USAGE);
        }
    };
    let builtins = Builtins::start(BuiltinConfig::default())?;
    let registry = Registry::with_tools(core_tools(&builtins));
    // MCP servers from troupe.yaml join the registry before the view is cut; their tools are
    // deferred behind the tool-search bridge.
    let mcp = if config.mcp_servers.is_null() {
        None
    } else {
        let (manager, statuses) =
            super::mcp::start_configured(&config, Arc::clone(&registry)).await;
        for status in &statuses {
            if let Some(error) = &status.last_error {
                eprintln!(
                    "troupe chat: MCP server '{}' is not available: {error}",
                    status.name
                );
            }
        }
        Some(manager)
    };
    for (name, includes) in &config.toolsets.composites {
        registry.define_toolset(name.clone(), includes.clone());
    }
    let spec = match &args.toolsets {
        Some(names) => ViewSpec::toolsets(
            names
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty()),
        ),
        None => ViewSpec {
            enabled: config.toolsets.enabled.clone(),
            disabled: config.toolsets.disabled.clone(),
            blocked: Vec::new(),
        },
    };
    let view = match registry.view(spec) {
        Ok(view) => view,
        Err(error) => {
            eprintln!("troupe chat: {error}");
            shut_down_mcp(mcp).await;
            return Ok(EXIT_USAGE);
        }
    };
    let rules = DefaultRules::new(approvals.require_approval.iter().cloned())
        .with_builtins(Arc::clone(&builtins));
    let mut session_config = SessionConfig {
        tool_search: config.tool_search.clone(),
        context_length: config.model.context_length,
        cwd: builtins.config().default_cwd.clone(),
        ..SessionConfig::default()
    };
    if let Some(max) = args.max_iterations {
        session_config.max_iterations = max;
    }
    // A one-shot run cannot take a later message: delegations wait for their results.
    crate::delegation::enable_delegation(&registry, &mut session_config, delegation, false);
    let troupe = Troupe::start(
        TroupeConfig::new(Arc::clone(&registry))
            .with_approvals(approvals)
            .with_rules(Arc::new(rules))
            .with_session(session_config),
    )?;
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if interactive {
        let mut approvals = troupe.approvals().await?;
        let answerer = troupe.clone();
        tokio::spawn(async move {
            while let Some(request) = approvals.next().await {
                let choice = tokio::task::spawn_blocking(move || {
                    ask_on_terminal(&request).map(|c| (request.request_id, c))
                })
                .await
                .ok()
                .flatten();
                if let Some((request_id, choice)) = choice {
                    let _ = answerer.answer(&request_id, choice).await;
                }
            }
        });
    }
    let mut events = troupe.events();
    let session = troupe
        .open_session(SessionOptions::new(provider).with_view(view))
        .await?;
    let turn = {
        let session = session.clone();
        let query = args.query.clone();
        tokio::spawn(async move { session.send(query).await })
    };
    tokio::pin!(turn);
    let outcome = loop {
        tokio::select! {
            joined = &mut turn => break joined,
            Some(event) = events.next() => show_event(&event, args.json),
            _ = tokio::signal::ctrl_c() => {
                let _ = troupe.stop(session.id(), true).await;
            }
        }
    };
    // Events emitted before the answer are already queued: show them before the final line.
    while let Ok(Some(event)) = tokio::time::timeout(std::time::Duration::ZERO, events.next()).await
    {
        show_event(&event, args.json);
    }
    let outcome = match outcome {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(error)) => {
            eprintln!("troupe chat: {error}");
            troupe.close().await;
            shut_down_mcp(mcp).await;
            return Ok(EXIT_MODEL_FAILED);
        }
        Err(error) => {
            eprintln!("troupe chat: the session task failed: {error}");
            troupe.close().await;
            shut_down_mcp(mcp).await;
            return Ok(EXIT_MODEL_FAILED);
        }
    };
    if args.json {
        println!(
            "{}",
            json!({"type": "final", "text": outcome.text, "status": outcome.status.as_str()})
        );
    } else if outcome.status != TurnStatus::Failed {
        println!("{}", outcome.text);
    }
    let _ = std::io::stdout().flush();
    troupe.close().await;
    builtins.end_session(session.id()).await;
    shut_down_mcp(mcp).await;
    Ok(match outcome.status {
        TurnStatus::Completed | TurnStatus::MaxIterations => 0,
        TurnStatus::Interrupted => EXIT_INTERRUPTED,
        TurnStatus::Failed => {
            eprintln!(
                "troupe chat: {}",
                outcome
                    .error
                    .as_deref()
                    .unwrap_or("the model request failed")
            );
            EXIT_MODEL_FAILED
        }
    })
}

/// Ends the MCP servers' processes and connections, when any were started.
async fn shut_down_mcp(mcp: Option<troupe_tools::mcp::McpManager>) {
    if let Some(manager) = mcp {
        manager.shutdown().await;
    }
}

/// The model: a script when asked, else an OpenAI-compatible server from flags, config and
/// environment (in that order).
fn provider(args: &ChatArgs, config: &Config) -> Result<Arc<dyn ModelProvider>, String> {
    if let Some(text) = &args.script_text {
        return Script::from_yaml_str(text)
            .map(|script| Arc::new(ScriptedProvider::new(script)) as Arc<dyn ModelProvider>)
            .map_err(|e| e.to_string());
    }
    if let Some(script) = &args.script {
        return ScriptedProvider::from_file(script)
            .map(|p| Arc::new(p) as Arc<dyn ModelProvider>)
            .map_err(|e| e.to_string());
    }
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let base_url = args
        .base_url
        .clone()
        .or_else(|| config.model.base_url.clone())
        .or_else(|| env("TROUPE_BASE_URL"))
        .or_else(|| env("OPENAI_BASE_URL"))
        .ok_or_else(|| {
            "no model to talk to: pass --base-url URL (an OpenAI-compatible API such as http://127.0.0.1:8080/v1), set model.base_url in troupe.yaml or TROUPE_BASE_URL, or pass --script FILE for a scripted model".to_string()
        })?;
    let model = args
        .model
        .clone()
        .or_else(|| config.model.model.clone())
        .or_else(|| env("TROUPE_MODEL"))
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    let key = config
        .model
        .api_key
        .clone()
        .or_else(|| config.model.api_key_env.as_deref().and_then(env))
        .or_else(|| env("TROUPE_API_KEY"))
        .or_else(|| env("OPENAI_API_KEY"));
    let mut openai = OpenAiConfig::new(base_url, model);
    openai.settings = config.model.provider.clone();
    openai.api_key = key;
    OpenAiProvider::new(openai)
        .map(|p| Arc::new(p) as Arc<dyn ModelProvider>)
        .map_err(|e| e.to_string())
}

/// Prints one event: a JSON line with `--json`, a short line on stderr otherwise.
fn show_event(event: &SessionEvent, json_mode: bool) {
    if matches!(event.kind, EventKind::Final { .. }) {
        // The final line is printed once the turn's outcome is known.
        return;
    }
    if json_mode {
        match serde_json::to_value(event) {
            Ok(value) => println!("{value}"),
            Err(error) => tracing::warn!(%error, "could not serialise an event"),
        }
        return;
    }
    match &event.kind {
        EventKind::ToolCallStarted {
            tool,
            underlying_tool,
            ..
        } => {
            if tool == underlying_tool {
                eprintln!("· {tool} …");
            } else {
                eprintln!("· {tool} → {underlying_tool} …");
            }
        }
        EventKind::ToolCallFinished {
            underlying_tool,
            status,
            duration_ms,
            ..
        } => eprintln!("· {underlying_tool}: {status} ({duration_ms} ms)"),
        EventKind::Stop { kind, .. } => eprintln!("· stop ({kind})"),
        _ => {}
    }
}

/// Asks on the terminal; `None` when stdin is gone (the request then times out, closed).
fn ask_on_terminal(request: &PendingApproval) -> Option<ApprovalChoice> {
    let shown = summarise(&request.arguments);
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "\n⚠ {} wants to run: {shown}", request.tool);
    let _ = writeln!(stderr, "  why approval is needed: {}", request.reason);
    let _ = write!(
        stderr,
        "  allow? [o]nce / [s]ession / [a]lways / [d]eny (default deny): "
    );
    let _ = stderr.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            Some(ApprovalChoice::parse(&line).unwrap_or(ApprovalChoice::Deny { reason: None }))
        }
    }
}

/// The command for terminal calls, else the arguments as compact JSON (cut to 300 chars).
fn summarise(arguments: &serde_json::Map<String, Value>) -> String {
    let text = match arguments.get("command").and_then(Value::as_str) {
        Some(command) => command.to_string(),
        None => Value::Object(arguments.clone()).to_string(),
    };
    if text.chars().count() > 300 {
        let cut: String = text.chars().take(300).collect();
        format!("{cut}…")
    } else {
        text
    }
}
