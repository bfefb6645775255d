//! `troupe chat`: a session with the built-in tools, against an OpenAI-compatible server
//! (flags, `troupe.yaml`, or the environment) or a scripted model (`--script`).
//!
//! With `-q` it answers one question and exits (`--json`: one JSON object per line). Without
//! it, a terminal gets a conversation (`conversation`: line editing, live tool lines,
//! approvals inline, slash commands), and piped input is read one message per line. Approvals
//! are asked on the terminal; with no terminal they follow `approvals.unattended` (deny by
//! default).

mod commands;
mod conversation;
pub(crate) mod display;
mod input;
mod quiet_status;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::status_line::{AnswerClock, SharedStatus, StatusLine, while_starting};
use super::visible::visible_line;
use clap::Args;
use serde_json::{Value, json};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::model::{ModelProvider, Script, ScriptedProvider};
use troupe_actors::session::TurnStatus;
use troupe_actors::supervisor::{ApprovalChoice, ApprovalKind, PendingApproval};

use super::error::{CliError, EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_DONE, EXIT_INTERRUPTED, report};
use crate::api::SessionOptions;
use crate::plugins::Plugins;
use crate::runtime::{Runtime, RuntimeOptions};
use crate::settings::Settings;

/// `troupe chat`: a conversation, or one question with `-q`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// The question or task: answer it and exit. Without it, a terminal gets a conversation
    /// and piped input is one message per line.
    #[arg(short = 'q', long = "query")]
    pub(crate) query: Option<String>,
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Base URL of an OpenAI-compatible API (overrides the config and TROUPE_BASE_URL).
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Model name (overrides the config and TROUPE_MODEL).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Toolsets the session gets, comma-separated (default: the profile's, else the config's,
    /// else all).
    #[arg(long, value_delimiter = ',')]
    pub(crate) toolsets: Option<Vec<String>>,
    /// A profile under `profiles:` in troupe.yaml: its model, toolsets and system prompt.
    #[arg(long, value_name = "NAME")]
    pub(crate) profile: Option<String>,
    /// Print one JSON object per line (events, then the final answer).
    #[arg(long)]
    pub(crate) json: bool,
    /// Answer from a script of assistant turns instead of a server (offline runs).
    #[arg(long)]
    pub(crate) script: Option<PathBuf>,
    /// Tool rounds allowed before the model must answer.
    #[arg(long)]
    pub(crate) max_iterations: Option<u32>,
    /// A script given as text rather than a file (the demo's bundled model).
    #[arg(skip)]
    pub(crate) script_text: Option<String>,
    /// Go on with a stored session (its id, or the start of it; `troupe sessions list`).
    #[arg(long, value_name = "ID", conflicts_with = "continue_latest")]
    pub(crate) resume: Option<String>,
    /// Go on with the latest chat session.
    #[arg(long = "continue")]
    pub(crate) continue_latest: bool,
}

/// Runs `troupe chat`; returns the exit code.
pub(crate) async fn run(args: ChatArgs) -> i32 {
    report("chat", run_inner(args).await)
}

async fn run_inner(args: ChatArgs) -> Result<i32, CliError> {
    let mut config = Settings::load_or_default(args.config.as_deref())?;
    // Flags win over the config's model section.
    if let Some(base_url) = &args.base_url {
        config.model.base_url = Some(base_url.clone());
    }
    if let Some(model) = &args.model {
        config.model.model = Some(model.clone());
    }
    // Before anything of the config runs (a plugin's slash command included).
    let interactive = args.query.is_none() && std::io::stdin().is_terminal();
    accept_config_changes(&config, interactive)?;
    let secrets = crate::settings::secrets::child_secrets(&config);
    crate::settings::secrets::mask_in_outputs(&secrets);
    let plugins = Plugins::from_config(&config, &secrets)?;
    let Some(query) = args.query.clone() else {
        if args.json {
            return Err(CliError::usage(
                "--json needs -q QUESTION: a conversation is for a person; pass -q for one JSON answer",
            ));
        }
        let script = script_provider(&args).map_err(CliError::usage)?;
        let options = RuntimeOptions::default()
            .with_background_delegation(false)
            .with_plugins(plugins);
        let runtime = while_starting(Runtime::start(config, options)).await?;
        runtime.report_notices("troupe chat");
        let result = conversation::run(&args, &runtime, script).await;
        runtime.close().await;
        return result;
    };
    // `/<command>` goes to the plugin that registered it, never to the model.
    if let Some(reply) = plugins.commands().dispatch(&query, None).await {
        for warning in plugins.catalog().warnings() {
            eprintln!("troupe chat: {warning}");
        }
        if args.json {
            out(
                json!({"type": "command", "command": reply.command, "plugin": reply.owner, "ok": reply.ok, "text": reply.text}),
            );
        } else if reply.ok {
            out(&reply.text);
        } else {
            eprintln!("{}", reply.text);
        }
        return Ok(if reply.ok { EXIT_DONE } else { EXIT_BAD_INPUT });
    }
    let script = script_provider(&args).map_err(CliError::usage)?;
    // A one-shot run cannot take a later message: delegations wait for their results.
    let runtime = while_starting(Runtime::start(
        config,
        RuntimeOptions::default()
            .with_background_delegation(false)
            .with_plugins(plugins),
    ))
    .await?;
    runtime.report_notices("troupe chat");
    let result = converse(&args, &query, &runtime, script).await;
    runtime.close().await;
    result
}

/// A config file a session changed is used only with a person's yes: asked here on a terminal,
/// refused (with how to accept it) everywhere else.
fn accept_config_changes(config: &Settings, interactive: bool) -> Result<(), CliError> {
    let home = crate::settings::TroupeHome::from_env().path().to_path_buf();
    let files = crate::config_seal::watched_files(config);
    loop {
        let pending = crate::config_seal::pending_change(&home, &files).map_err(|e| {
            CliError::usage(format!(
                "cannot read troupe's record of config changes under {}: {e}",
                home.display()
            ))
        })?;
        let Some(change) = pending else {
            return Ok(());
        };
        if !interactive {
            return Err(CliError::usage(change.to_string()));
        }
        eprint!(
            "troupe chat: {} was changed while a troupe session could write it. Read it first. Use it as it is now? [y/N] ",
            change.path.display()
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| CliError::usage(format!("cannot read the answer: {e}")))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(CliError::usage(change.to_string()));
        }
        crate::config_seal::trust(&home, &change.path).map_err(|e| {
            CliError::usage(format!(
                "cannot record the answer under {}: {e}",
                home.display()
            ))
        })?;
    }
}

/// What to change from the command line and config when a session opens.
#[derive(Debug, Default, Clone)]
pub(crate) struct SessionChoice {
    /// Toolsets narrowed to in the conversation (`/toolsets`), else `--toolsets`.
    pub(crate) toolsets: Option<Vec<String>>,
    /// A model name chosen in the conversation (`/model`).
    pub(crate) model: Option<String>,
    /// Stream the answer's text as it arrives.
    pub(crate) stream_text: bool,
    /// Report the tokens received while the model thinks (for a status line).
    pub(crate) progress: bool,
}

/// The options of a chat session: the profile, toolsets, model and limits the flags ask for.
pub(crate) fn session_options(
    args: &ChatArgs,
    runtime: &Runtime,
    script: Option<Arc<dyn ModelProvider>>,
    choice: &SessionChoice,
) -> Result<SessionOptions, CliError> {
    let troupe = runtime.troupe();
    let mut options = SessionOptions::configured();
    let mut session_config = troupe.session_defaults();
    if let Some(name) = &args.profile {
        let Some(profile) = troupe.profile(name) else {
            let known = troupe.profile_names();
            return Err(CliError::usage(format!(
                "--profile: there is no profile {name:?} under profiles: in troupe.yaml (known: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        options = options.with_profile(name.clone());
        session_config = profile.session.clone();
    }
    if let Some(names) = choice.toolsets.as_ref().or(args.toolsets.as_ref()) {
        options = options.with_view(runtime.view(Some(names.as_slice()))?);
    } else if args.profile.is_none() {
        options = options.with_view(runtime.view(None)?);
    }
    match script {
        Some(provider) => options = options.with_provider(provider),
        None if args.profile.is_none() && troupe.default_provider().is_none() => {
            return Err(CliError::usage(
                "no model to talk to: pass --base-url URL (an OpenAI-compatible API such as http://127.0.0.1:8080/v1), set model.base_url in troupe.yaml or TROUPE_BASE_URL, or pass --script FILE for a scripted model",
            ));
        }
        None => {}
    }
    if let Some(max) = args.max_iterations {
        session_config.max_iterations = max;
    }
    if let Some(model) = &choice.model {
        session_config.model = Some(model.clone());
    }
    session_config.stream_text = choice.stream_text;
    session_config.report_progress = choice.progress;
    let origin = troupe_actors::journal::Origin {
        kind: "chat".into(),
        options: json!({"profile": args.profile, "toolsets": args.toolsets}),
    };
    Ok(options.with_config(session_config).with_origin(origin))
}

/// With `--resume` or `--continue`, the stored session to go on with: its messages, with a note
/// on each call that was running when its process stopped (none is run again).
pub(crate) async fn resumed(
    args: &ChatArgs,
    runtime: &Runtime,
    options: SessionOptions,
) -> Result<SessionOptions, CliError> {
    if args.resume.is_none() && !args.continue_latest {
        return Ok(options);
    }
    let Some(store) = runtime.troupe().session_store() else {
        return Err(CliError::usage(
            "sessions are not kept (sessions.persist is false in troupe.yaml), so there is none to resume",
        ));
    };
    let id = match &args.resume {
        Some(id) => id.trim().to_string(),
        None => {
            let query = crate::sessions::ListQuery {
                origin: Some("chat".into()),
                limit: Some(1),
                ..Default::default()
            };
            let latest = store
                .list(query)
                .await
                .map_err(|e| CliError::failed(e.to_string()))?;
            match latest.into_iter().next() {
                Some(latest) => latest.id,
                None => {
                    return Err(CliError::usage(
                        "--continue: no chat session is stored yet; start one with troupe chat",
                    ));
                }
            }
        }
    };
    let stored = store.load(&id).await.map_err(|e| match e {
        crate::sessions::SessionStoreError::Database { .. } => CliError::failed(e.to_string()),
        other => CliError::usage(format!("--resume: {other}")),
    })?;
    eprintln!(
        "troupe chat: going on with session {} ({} messages)",
        stored.summary.id, stored.summary.messages
    );
    Ok(options.resuming(stored.restore(false)))
}

/// Opens the session, asks, prints; the runtime is closed by the caller.
async fn converse(
    args: &ChatArgs,
    query: &str,
    runtime: &Runtime,
    script: Option<Arc<dyn ModelProvider>>,
) -> Result<i32, CliError> {
    let troupe = runtime.troupe();
    // On a terminal, a line says what the turn waits for (never with --json: that is for a
    // program, and its events share the screen).
    let line = if args.json {
        StatusLine::detect_off()
    } else {
        StatusLine::detect()
    };
    let choice = SessionChoice {
        progress: line.enabled(),
        ..SessionChoice::default()
    };
    let status: SharedStatus = Arc::new(Mutex::new(line));
    let mut waiting = quiet_status::QuietStatus::new(Arc::clone(&status));
    let options = session_options(args, runtime, script, &choice)?;
    let options = resumed(args, runtime, options).await?;
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if interactive {
        let mut approvals = troupe.approvals().await?;
        let answerer = troupe.clone();
        let status = Arc::clone(&status);
        tokio::spawn(async move {
            while let Some(request) = approvals.next().await {
                let status = Arc::clone(&status);
                let choice = tokio::task::spawn_blocking(move || {
                    ask_on_terminal(&request, &status).map(|c| (request.request_id, c))
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
    let session = troupe.open_session(options).await?;
    let turn = {
        let session = session.clone();
        let query = query.to_string();
        tokio::spawn(async move { session.send(query).await })
    };
    tokio::pin!(turn);
    let mut ticker = tokio::time::interval(super::status_line::REDRAW_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let drawing = troupe_tools::sync::lock(&status).enabled();
    let outcome = loop {
        tokio::select! {
            joined = &mut turn => break joined,
            Some(event) = events.next() => {
                waiting.event(&event);
                if shows_a_line(&event, args.json) {
                    waiting.clear();
                }
                show_event(&event, args.json);
                waiting.tick();
            }
            _ = ticker.tick(), if drawing => waiting.tick(),
            _ = tokio::signal::ctrl_c() => {
                let _ = troupe.stop(session.id(), true).await;
            }
        }
    };
    waiting.clear();
    // Events emitted before the answer are already queued: show them before the final line.
    while let Ok(Some(event)) = tokio::time::timeout(std::time::Duration::ZERO, events.next()).await
    {
        show_event(&event, args.json);
    }
    drop(waiting);
    troupe_tools::sync::lock(&status).pause();
    // The session ends with the command: its processes stop and the store marks it closed
    // (a one-shot session is not left "open" for ever).
    runtime.builtins().end_session(session.id()).await;
    let _ = troupe.close_session(session.id()).await;
    let outcome = match outcome {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(error)) => return Err(CliError::failed(error.to_string())),
        Err(error) => {
            return Err(CliError::failed(format!(
                "the session task failed: {error}"
            )));
        }
    };
    if args.json {
        out(
            json!({"type": "final", "text": outcome.text, "status": outcome.status.as_str(), "usage": outcome.spend, "session_usage": session.spent()}),
        );
    } else if outcome.status != TurnStatus::Failed {
        out(super::visible::visible(&outcome.text));
    }
    let _ = std::io::stdout().flush();
    match outcome.status {
        TurnStatus::Completed | TurnStatus::MaxIterations => Ok(EXIT_DONE),
        // The answer is what the turn had; the exit code says it is not a whole one.
        TurnStatus::BudgetExceeded => Ok(EXIT_BUDGET),
        TurnStatus::Interrupted => Ok(EXIT_INTERRUPTED),
        TurnStatus::Failed => Err(CliError::failed(
            outcome
                .error
                .as_deref()
                .unwrap_or("the model request failed"),
        )),
    }
}

/// The scripted model, when asked for (`--script` or the demo's bundled script).
fn script_provider(args: &ChatArgs) -> Result<Option<Arc<dyn ModelProvider>>, String> {
    if let Some(text) = &args.script_text {
        return Script::from_yaml_str(text)
            .map(|script| Some(Arc::new(ScriptedProvider::new(script)) as Arc<dyn ModelProvider>))
            .map_err(|e| e.to_string());
    }
    if let Some(script) = &args.script {
        return ScriptedProvider::from_file(script)
            .map(|p| Some(Arc::new(p) as Arc<dyn ModelProvider>))
            .map_err(|e| e.to_string());
    }
    Ok(None)
}

/// Prints a line of the answer on stdout. A reader that left (`| head -1`, `| true`) is not an
/// error: the turn still ends and its session is closed and stored.
fn out(line: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Prints one event: a JSON line with `--json`, a short line on stderr otherwise.
fn show_event(event: &SessionEvent, json_mode: bool) {
    if matches!(event.kind, EventKind::Final { .. }) {
        // The final line is printed once the turn's outcome is known.
        return;
    }
    if json_mode {
        match serde_json::to_value(event) {
            Ok(value) => out(value),
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
            let (tool, underlying_tool) = (visible_line(tool), visible_line(underlying_tool));
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
            approval_wait_ms,
            ..
        } => {
            // The call's own time; the wait for the person's answer is said apart.
            let waited = if *approval_wait_ms > 0 {
                format!(
                    "; waited {} for your approval",
                    super::status_line::elapsed(std::time::Duration::from_millis(
                        *approval_wait_ms
                    ))
                )
            } else {
                String::new()
            };
            eprintln!(
                "· {}: {status} ({duration_ms} ms{waited})",
                visible_line(underlying_tool)
            )
        }
        EventKind::Stop { kind, .. } => eprintln!("· stop ({kind})"),
        EventKind::ProcessNotice { summary, .. } => eprintln!("· {}", visible_line(summary)),
        EventKind::TodoUpdated { todos, summary } => {
            eprintln!(
                "· plan: {}/{} done",
                summary.completed + summary.cancelled,
                summary.total
            );
            for item in todos {
                eprintln!("  {} {}", item.status.mark(), visible_line(&item.content));
            }
        }
        _ => {}
    }
}

/// Whether `show_event` writes a line for `event` (the status line is erased first).
fn shows_a_line(event: &SessionEvent, json_mode: bool) -> bool {
    match &event.kind {
        EventKind::Final { .. } => false,
        _ if json_mode => true,
        EventKind::ToolCallStarted { .. }
        | EventKind::ToolCallFinished { .. }
        | EventKind::Stop { .. }
        | EventKind::ProcessNotice { .. }
        | EventKind::TodoUpdated { .. } => true,
        _ => false,
    }
}

/// The question of an approval on the terminal.
const ALLOW_PROMPT: &str = "  allow? [o]nce / [s]ession / [a]lways / [d]eny (default deny): ";

/// Asks on the terminal, the status line put away meanwhile; `None` when stdin is gone (the
/// request then times out, closed).
fn ask_on_terminal(request: &PendingApproval, status: &SharedStatus) -> Option<ApprovalChoice> {
    troupe_tools::sync::lock(status).pause();
    let choice = ask_with_clock(request);
    troupe_tools::sync::lock(status).resume();
    choice
}

fn ask_with_clock(request: &PendingApproval) -> Option<ApprovalChoice> {
    // What the model wrote is shown with its control characters visible, so an escape
    // sequence cannot hide the real command from the person approving it.
    let shown = visible_line(&summarise(&request.arguments));
    let mut stderr = std::io::stderr();
    let _ = match request.kind {
        ApprovalKind::Call => writeln!(
            stderr,
            "\n⚠ {} wants to run: {shown}",
            visible_line(&request.tool)
        ),
        ApprovalKind::BudgetExtension => writeln!(stderr, "\n⚠ the session wants more budget"),
        ApprovalKind::Question => return ask_question_on_terminal(request),
    };
    let _ = writeln!(
        stderr,
        "  why approval is needed: {}",
        visible_line(&request.reason)
    );
    let _ = stderr.flush();
    let clock = AnswerClock::start(ALLOW_PROMPT);
    let _ = write!(stderr, "{ALLOW_PROMPT}");
    let _ = stderr.flush();
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if let Some(clock) = clock {
        // At the end of input the cursor did not move to a new row: nothing to rewrite.
        if matches!(read, Ok(n) if n > 0 && line.ends_with('\n')) {
            clock.finish(ALLOW_PROMPT, &line);
        }
    }
    match read {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            Some(ApprovalChoice::parse(&line).unwrap_or(ApprovalChoice::Deny { reason: None }))
        }
    }
}

/// Asks a `clarify` question on the terminal (`-q` with a terminal): a choice's number or the
/// person's own words; an empty line or a closed stdin declines.
fn ask_question_on_terminal(request: &PendingApproval) -> Option<ApprovalChoice> {
    let question = troupe_tools::clarify::Question::parse(&request.arguments).ok()?;
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "\n? {}", visible_line(&question.question));
    for (i, choice) in question.choices.iter().enumerate() {
        let _ = writeln!(stderr, "  {}. {}", i + 1, visible_line(choice));
    }
    let _ = write!(stderr, "  your answer (empty to decline): ");
    let _ = stderr.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(match question.read_answer(&line) {
            Some(text) => ApprovalChoice::Answer { text },
            None => ApprovalChoice::Deny { reason: None },
        }),
    }
}

/// Arguments that say where a call acts, shown right after the command.
const WHERE_KEYS: [&str; 6] = ["path", "workdir", "cwd", "file", "url", "target"];

/// Longest argument summary in an approval question, in characters.
const SUMMARY_CHARS: usize = 300;

/// A call's arguments for an approval question: the command first when there is one, then
/// every other argument as `key=value` (the working directory of a command matters as much as
/// the command). Never cut silently: a cut says how much is left and how to see it.
fn summarise(arguments: &serde_json::Map<String, Value>) -> String {
    let mut parts = Vec::new();
    if let Some(command) = arguments.get("command").and_then(Value::as_str) {
        parts.push(command.to_string());
    }
    // Where a call acts comes before what it carries, so a long payload cannot push it out.
    let mut keys: Vec<&String> = arguments.keys().collect();
    keys.sort_by_key(|k| !WHERE_KEYS.contains(&k.as_str()));
    for key in keys {
        let value = &arguments[key.as_str()];
        if key == "command" && value.is_string() {
            continue;
        }
        let value = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        parts.push(format!("{key}={value}"));
    }
    let text = parts.join("  ");
    let total = text.chars().count();
    if total <= SUMMARY_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SUMMARY_CHARS).collect();
    format!(
        "{cut}… ({} more characters; ? shows all)",
        total - SUMMARY_CHARS
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_summary_shows_every_argument_and_says_when_it_is_cut() {
        let args = json!({"content": "x", "command": "rm -rf build", "workdir": "/srv"});
        let shown = summarise(args.as_object().unwrap());
        assert_eq!(shown, "rm -rf build  workdir=/srv  content=x");
        let long = json!({"content": "a".repeat(400), "path": "/etc/passwd"});
        let shown = summarise(long.as_object().unwrap());
        assert!(
            shown.starts_with("path=/etc/passwd  content=aaa"),
            "{shown}"
        );
        assert!(shown.ends_with("more characters; ? shows all)"), "{shown}");
    }
}
