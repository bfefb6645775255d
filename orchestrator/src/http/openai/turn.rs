//! A `/v1` request's turn: finding or opening its session ([`start`]), then following the turn
//! and telling the route what happens in it ([`Signal`]): text as it arrives, a call waiting for
//! approval, calls to the client's tools (the request's answer then ends, the turn waits for
//! their results), and the outcome. A client that goes away before the answer stops the turn.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use troupe_actors::events::EventKind;
use troupe_actors::model::{ChatMessage, ToolCallRequest};
use troupe_actors::session::{SessionConfig, TurnOutcome};
use troupe_actors::usage::Spend;
use troupe_tools::ViewSpec;
use troupe_tools::sync::lock;

use super::super::HttpState;
use super::super::sessions::{self, CreateSession, TableSession};
use super::client_tools::{ClientCall, ClientTool, ClientTools};
use super::continuation::{Input, Turn};
use super::errors::OpenAiError;

/// How long after a client tool's call the turn waits for the model's other calls of the same
/// answer to arrive, so they are reported together.
const GATHER_CALLS: std::time::Duration = std::time::Duration::from_millis(50);

/// A turn's result as it is kept for a later request to read.
pub type TurnResult = Result<TurnOutcome, String>;

/// What the `/v1` routes keep about a session they drive.
#[derive(Debug, Default)]
pub struct V1Session {
    /// The client's tools, when it declared some.
    tools: Option<Arc<ClientTools>>,
    /// The turn running now: its result once it has one.
    running: Mutex<Option<watch::Receiver<Option<TurnResult>>>>,
    /// What the session had spent when the running turn began, and what of the turn the
    /// answers given so far reported as `usage`.
    counted: Mutex<(Spend, Spend)>,
}

impl V1Session {
    /// Whether a turn it began is still running.
    pub fn is_running(&self) -> bool {
        lock(&self.running)
            .as_ref()
            .is_some_and(|r| r.borrow().is_none())
    }

    /// The tokens spent since the last answer of this turn reported them, as OpenAI's `usage`;
    /// the next answer counts from here.
    pub fn take_usage(&self, handle: &troupe_actors::session::SessionHandle) -> Value {
        let now = handle.spent();
        let mut counted = lock(&self.counted);
        let (base, reported) = *counted;
        let input = now
            .input_tokens
            .saturating_sub(base.input_tokens + reported.input_tokens);
        let output = now
            .output_tokens
            .saturating_sub(base.output_tokens + reported.output_tokens);
        let cached = now
            .cached_tokens
            .saturating_sub(base.cached_tokens + reported.cached_tokens);
        counted.1 = Spend {
            input_tokens: now.input_tokens.saturating_sub(base.input_tokens),
            output_tokens: now.output_tokens.saturating_sub(base.output_tokens),
            cached_tokens: now.cached_tokens.saturating_sub(base.cached_tokens),
            ..Spend::default()
        };
        serde_json::json!({
            "prompt_tokens": input,
            "completion_tokens": output,
            "total_tokens": input + output,
            "prompt_tokens_details": {"cached_tokens": cached},
        })
    }
}

/// What happens in a turn, as the route hears it.
#[derive(Debug)]
pub enum Signal {
    /// Answer text as it arrives.
    Text(String),
    /// A call waits for a person's approval (the request stays open).
    Waiting {
        /// The approval request's id (answer it with `POST /api/approvals/{id}`).
        request_id: String,
        /// The tool.
        tool: String,
    },
    /// The model called the client's tools: the answer ends here, the turn waits.
    ToolCalls(Vec<ClientCall>),
    /// The turn ended.
    Done(TurnOutcome),
    /// The turn could not run.
    Failed(String),
}

/// Everything a `/v1` request brings to its turn.
#[derive(Debug)]
pub struct TurnRequest {
    /// The profile (`None`: the server's model).
    pub profile: Option<String>,
    /// The history the client sent before its new input.
    pub history: Vec<Turn>,
    /// The new input.
    pub input: Input,
    /// The client's tools.
    pub tools: Vec<ClientTool>,
    /// The session the client named (`X-Troupe-Session`, or the responses API's
    /// `previous_response_id`).
    pub named_session: Option<String>,
    /// The request's `traceparent`.
    pub trace_parent: Option<String>,
}

/// A turn begun or joined.
#[derive(Debug)]
pub struct Started {
    /// Its session.
    pub session_id: String,
    /// What happens in it.
    pub signals: mpsc::Receiver<Signal>,
    /// The session.
    pub handle: troupe_actors::session::SessionHandle,
    /// What the `/v1` routes keep about it.
    pub v1: Arc<V1Session>,
}

/// Finds the session `request` continues (or opens one), then starts its turn or, for tool
/// results, goes on with the turn that waits for them.
pub async fn start(state: &HttpState, request: TurnRequest) -> Result<Started, OpenAiError> {
    let found = match &request.named_session {
        Some(id) => Some(state.sessions.session(id).ok_or_else(|| {
            OpenAiError::not_found(
                "session",
                "session_not_found",
                format!(
                    "there is no open session {id} on this server; leave X-Troupe-Session out to start one"
                ),
            )
        })?),
        None if request.history.iter().any(|t| t.role != "system") => state
            .openai
            .conversations
            .find(&request.history)
            .and_then(|id| state.sessions.session(&id)),
        None => None,
    };
    match (found, request.input.clone()) {
        (Some(session), Input::ToolResults(results)) => resume(state, session, results).await,
        (None, Input::ToolResults(_)) => Err(OpenAiError::invalid_param(
            "messages",
            "unknown_tool_calls",
            "these tool results answer calls troupe did not ask this conversation for; send the \
             conversation back as troupe answered it, or name its session with X-Troupe-Session",
        )),
        (Some(session), Input::Message(text)) => {
            let v1 = state.openai.session(session.handle().id());
            match (&v1.tools, request.tools.is_empty()) {
                (Some(hub), _) => hub.declare(&request.tools),
                (None, false) => tracing::warn!(
                    session = session.handle().id(),
                    "tools declared after the session's first request are not offered"
                ),
                (None, true) => {}
            }
            begin(session, v1, text, request.trace_parent)
        }
        (None, Input::Message(text)) => {
            let (session, v1) = open(state, &request).await?;
            begin(session, v1, text, request.trace_parent)
        }
    }
}

/// Opens a session for a request that continues none, seeded with the history it sent.
async fn open(
    state: &HttpState,
    request: &TurnRequest,
) -> Result<(TableSession, Arc<V1Session>), OpenAiError> {
    if let Some(max) = state.sessions.full() {
        return Err(OpenAiError::overloaded(format!(
            "{max} sessions are open, as many as serve.max_sessions allows; retry once one closes \
             (idle ones close on their own) or continue an open one with X-Troupe-Session"
        )));
    }
    let system: Vec<&str> = request
        .history
        .iter()
        .filter(|t| t.role == "system" && !t.content.is_empty())
        .map(|t| t.content.as_str())
        .collect();
    let profile = request
        .profile
        .as_deref()
        .and_then(|p| state.troupe.profile(p));
    let mut config: SessionConfig = match profile {
        Some(profile) => profile.session.clone(),
        None => state.troupe.session_defaults(),
    };
    // The client's instructions go after troupe's own, which describe its tools.
    let system_prompt = (!system.is_empty()).then(|| {
        let base = config
            .system_prompt
            .clone()
            .unwrap_or_else(|| troupe_actors::session::DEFAULT_SYSTEM_PROMPT.to_string());
        format!("{base}\n\n{}", system.join("\n\n"))
    });
    let create = CreateSession {
        profile: request.profile.clone(),
        system_prompt: system_prompt.clone(),
        ..CreateSession::default()
    };
    let mut options = sessions::options_for(state, &create, request.trace_parent.clone())?;
    if let Some(prompt) = system_prompt {
        config.system_prompt = Some(prompt);
    }
    if let Some(header) = &request.trace_parent {
        config.trace_parent = troupe_actors::trace::TraceSpan::from_traceparent(header);
    }
    config.stream_text = true;
    let tools = if request.tools.is_empty() {
        None
    } else {
        let base = match (&options.view, profile) {
            (Some(view), _) => view.clone(),
            (None, Some(profile)) => profile.view.clone(),
            (None, None) => state
                .troupe
                .registry()
                .view(ViewSpec::all().without_toolsets([crate::sessions::SESSION_SEARCH]))
                .unwrap_or_else(|_| state.troupe.registry().view_all()),
        };
        let hub = ClientTools::new(&base, &request.tools)?;
        options = options.with_view(hub.view());
        Some(hub)
    };
    options = options.with_config(config);
    let session = sessions::open_in_table(state, options).await?;
    let seed = seed_messages(&request.history);
    if !seed.is_empty() {
        let loaded = session
            .handle()
            .load_conversation(seed)
            .await
            .map_err(|e| OpenAiError::internal(e.to_string()))?;
        if !loaded {
            return Err(OpenAiError::internal(
                "the new session was busy before its first turn",
            ));
        }
    }
    let v1 = Arc::new(V1Session {
        tools,
        ..V1Session::default()
    });
    state.openai.insert(session.handle().id(), Arc::clone(&v1));
    Ok((session, v1))
}

/// The client's earlier messages as a session's conversation (system messages are in its
/// prompt instead).
fn seed_messages(history: &[Turn]) -> Vec<ChatMessage> {
    let mut names = std::collections::HashMap::new();
    let mut out = Vec::new();
    for turn in history {
        match turn.role.as_str() {
            "user" => out.push(ChatMessage::User {
                content: turn.content.clone(),
            }),
            "assistant" => {
                for (id, name, _) in &turn.tool_calls {
                    names.insert(id.clone(), name.clone());
                }
                out.push(ChatMessage::Assistant {
                    content: (!turn.content.is_empty()).then(|| turn.content.clone()),
                    tool_calls: turn
                        .tool_calls
                        .iter()
                        .map(|(id, name, arguments)| ToolCallRequest {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: arguments.clone(),
                        })
                        .collect(),
                });
            }
            "tool" => {
                let id = turn.tool_call_id.clone().unwrap_or_default();
                out.push(ChatMessage::Tool {
                    name: names.get(&id).cloned().unwrap_or_default(),
                    tool_call_id: id,
                    content: turn.content.clone(),
                });
            }
            _ => {}
        }
    }
    out
}

/// Starts a turn on `session` with the user's `text`.
fn begin(
    session: TableSession,
    v1: Arc<V1Session>,
    text: String,
    trace_parent: Option<String>,
) -> Result<Started, OpenAiError> {
    let id = session.handle().id().to_string();
    let Some(token) = session.begin_turn() else {
        let awaiting = v1
            .tools
            .as_ref()
            .map(|hub| hub.awaiting())
            .unwrap_or_default();
        if !awaiting.is_empty() {
            return Err(OpenAiError::busy(format!(
                "session {id} waits for the results of your tool calls {}; send them as `tool` \
                 messages after the answer that asked for them (or stop the session with \
                 POST /api/sessions/{id}/stop)",
                awaiting.join(", ")
            )));
        }
        return Err(OpenAiError::busy(format!(
            "session {id} is still working on an earlier request; wait for its answer (or stop it \
             with POST /api/sessions/{id}/stop)"
        )));
    };
    let events = session.handle().events();
    let calls = v1.tools.as_ref().map(|hub| hub.calls_made());
    *lock(&v1.counted) = (session.handle().spent(), Spend::default());
    let (result_tx, result_rx) = watch::channel(None);
    *lock(&v1.running) = Some(result_rx.clone());
    let runner = session.clone();
    tokio::spawn(async move {
        let handle = runner.handle();
        let result = match trace_parent {
            Some(header) => {
                let parent = troupe_actors::trace::TraceSpan::from_traceparent(&header);
                handle.send_in_trace(text, parent).await
            }
            None => handle.send(text).await,
        };
        runner.finish_turn(token, result.as_ref().ok());
        let _ = result_tx.send(Some(result.map_err(|e| e.to_string())));
    });
    Ok(follow(session, v1, events, calls, result_rx))
}

/// Hands the client's tool results to the calls that wait for them and goes on following the
/// turn.
async fn resume(
    state: &HttpState,
    session: TableSession,
    results: Vec<(String, String)>,
) -> Result<Started, OpenAiError> {
    let v1 = state.openai.session(session.handle().id());
    let (Some(hub), Some(running)) = (v1.tools.clone(), lock(&v1.running).clone()) else {
        return Err(OpenAiError::invalid_param(
            "messages",
            "unknown_tool_calls",
            "no call of this session waits for a tool result; send a user message instead",
        ));
    };
    let awaiting = hub.awaiting();
    if let Some((id, _)) = results.iter().find(|(id, _)| !awaiting.contains(id)) {
        return Err(OpenAiError::invalid_param(
            "messages",
            "unknown_tool_call_id",
            format!(
                "no call {id} waits for a result; the calls waiting are: {}",
                awaiting.join(", ")
            ),
        ));
    }
    if let Some(missing) = awaiting
        .iter()
        .find(|id| !results.iter().any(|(r, _)| r == *id))
    {
        return Err(OpenAiError::invalid_param(
            "messages",
            "missing_tool_result",
            format!("the call {missing} has no result; send one `tool` message for each call"),
        ));
    }
    let events = session.handle().events();
    let calls = Some(hub.calls_made());
    for (id, content) in results {
        hub.deliver(&id, content);
    }
    Ok(follow(session, v1, events, calls, running))
}

/// Follows a running turn in a task of its own until it ends or asks the client for its tools'
/// results; stops the turn if the route lets go of the signals first (the client went away).
fn follow(
    session: TableSession,
    v1: Arc<V1Session>,
    mut events: mpsc::UnboundedReceiver<troupe_actors::events::SessionEvent>,
    mut calls: Option<watch::Receiver<u64>>,
    mut result: watch::Receiver<Option<TurnResult>>,
) -> Started {
    let id = session.handle().id().to_string();
    let handle = session.handle().clone();
    let kept = Arc::clone(&v1);
    let (tx, rx) = mpsc::channel(256);
    let own = id.clone();
    tokio::spawn(async move {
        let mut open = true;
        loop {
            let settled = result.borrow_and_update().clone();
            if let Some(done) = settled {
                // What the session said before its answer came is sent first.
                while let Ok(event) = events.try_recv() {
                    if let Some(signal) = signal_of(&own, event) {
                        let _ = tx.send(signal).await;
                    }
                }
                let _ = match done {
                    Ok(outcome) => tx.send(Signal::Done(outcome)).await,
                    Err(error) => tx.send(Signal::Failed(error)).await,
                };
                return;
            }
            tokio::select! {
                biased;
                _ = tx.closed() => {
                    tracing::debug!(session = %own, "the /v1 client went away; stopping its turn");
                    // A stop that finds no turn yet (the message is still on its way to the
                    // session) is sent again until it stops one or the turn has ended.
                    for _ in 0..100 {
                        let stopped = session.handle().stop(true).await.unwrap_or(0);
                        if stopped > 0 || result.borrow().is_some() {
                            break;
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    return;
                }
                event = events.recv(), if open => match event {
                    Some(event) => if let Some(signal) = signal_of(&own, event) {
                        let _ = tx.send(signal).await;
                    },
                    // The session is gone; its result settles the turn.
                    None => open = false,
                },
                changed = result.changed() => if changed.is_err() {
                    let _ = tx.send(Signal::Failed("the turn's task ended without a result".into())).await;
                    return;
                },
                made = wait_calls(&mut calls) => if made {
                    tokio::time::sleep(GATHER_CALLS).await;
                    let reported = v1.tools.as_ref().map(|hub| hub.take_unreported()).unwrap_or_default();
                    if !reported.is_empty() {
                        let _ = tx.send(Signal::ToolCalls(reported)).await;
                        return;
                    }
                },
            }
        }
    });
    Started {
        session_id: id,
        signals: rx,
        handle,
        v1: kept,
    }
}

/// What the route hears of one of the session's events (its subagents' are not told).
fn signal_of(own: &str, event: troupe_actors::events::SessionEvent) -> Option<Signal> {
    if event.session_id != own {
        return None;
    }
    match event.kind {
        EventKind::TextDelta { text, .. } => Some(Signal::Text(text)),
        EventKind::ApprovalRequested {
            request_id, tool, ..
        } => Some(Signal::Waiting { request_id, tool }),
        _ => None,
    }
}

/// Waits for a client tool call; never when the session has no client tools.
async fn wait_calls(calls: &mut Option<watch::Receiver<u64>>) -> bool {
    match calls {
        Some(calls) => calls.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// OpenAI's `finish_reason` for a turn's outcome.
pub fn finish_reason(outcome: &TurnOutcome) -> &'static str {
    use troupe_actors::session::TurnStatus;
    match outcome.status {
        TurnStatus::Completed | TurnStatus::Interrupted | TurnStatus::Failed => "stop",
        TurnStatus::MaxIterations | TurnStatus::BudgetExceeded => "length",
    }
}
