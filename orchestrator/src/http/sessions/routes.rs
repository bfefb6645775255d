//! Opening, listing, showing, messaging and closing sessions, and reopening the stored ones a
//! previous `troupe serve` left open.

use std::sync::{Arc, Mutex};
use troupe_tools::sync::lock;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::model::{Script, ScriptedProvider};
use troupe_actors::session::{SessionConfig, TurnOutcome};
use troupe_tools::ViewSpec;

use super::super::HttpState;
use super::{EventLog, SESSION_LOG_CAP, SessionEntry, TurnState};

use super::super::errors::{ApiError, ApiJson, ApiPath};
use crate::api::SessionOptions;

/// `POST /api/sessions`: what a new session is made from (kept with the session, so a
/// restarted server reopens it the same way).
#[derive(Debug, Default, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// A scripted model (the format of `troupe chat --script`, as JSON); the server's
    /// configured model when absent.
    #[serde(default)]
    pub script: Option<Value>,
    /// Toolsets the session may use; the profile's, else all of the server's, when absent.
    #[serde(default)]
    pub toolsets: Option<Vec<String>>,
    /// A profile under `profiles:` of the server's troupe.yaml: its model, toolsets and system
    /// prompt (the other fields override them).
    #[serde(default)]
    pub profile: Option<String>,
    /// A system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Tool rounds allowed per turn.
    #[serde(default)]
    pub max_iterations: Option<u32>,
}

/// Handler of `POST /api/sessions`.
pub async fn create(
    State(state): State<HttpState>,
    headers: axum::http::HeaderMap,
    ApiJson(request): ApiJson<CreateSession>,
) -> Result<Response, ApiError> {
    // The caller's trace: the session's span goes under it.
    let trace_parent = super::super::traceparent(&headers);
    let options = session_options(&state, &request, trace_parent)?;
    let max_sessions = lock(&state.sessions.limits).0;
    if state.sessions.len() >= max_sessions {
        return Err(ApiError::too_many(
            "too_many_sessions",
            format!(
                "{max_sessions} sessions are open, as many as serve.max_sessions allows; close one with DELETE /api/sessions/{{id}} (idle ones close on their own)"
            ),
        ));
    }
    let entry = open_entry(&state, options).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"session_id": entry.handle.id(), "agent_path": entry.handle.agent_path()})),
    )
        .into_response())
}

/// What a session is opened with, from the request that creates it.
pub(super) fn session_options(
    state: &HttpState,
    request: &CreateSession,
    trace_parent: Option<String>,
) -> Result<SessionOptions, ApiError> {
    let request = request.clone();
    let origin = troupe_actors::journal::Origin {
        kind: "http".into(),
        options: serde_json::to_value(&request).unwrap_or(Value::Null),
    };
    let profile = match request.profile.as_deref().map(str::trim) {
        None => None,
        Some(name) => Some(state.troupe.profile(name).ok_or_else(|| {
            let known = state.troupe.profile_names();
            ApiError::bad_request(
                "unknown_profile",
                format!(
                    "there is no profile {name:?} on this server; send one of: {}",
                    if known.is_empty() {
                        "(none: the server's troupe.yaml has no profiles: section)".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?),
    };
    let mut options = SessionOptions::configured().with_origin(origin);
    if let Some(name) = request.profile.as_deref().map(str::trim) {
        options = options.with_profile(name);
    }
    match (&request.script, &state.provider) {
        (Some(script), _) => {
            let script: Script = serde_json::from_value(script.clone()).map_err(|e| {
                ApiError::bad_request(
                    "bad_script",
                    format!(
                        "`script` is not a valid script ({e}); send {{\"turns\": [{{\"text\": \"...\"}}]}}"
                    ),
                )
            })?;
            options = options.with_provider(Arc::new(ScriptedProvider::new(script)));
        }
        (None, _) if profile.is_some() => {}
        (None, Some(provider)) => options = options.with_provider(Arc::clone(provider)),
        (None, None) => {
            return Err(ApiError::bad_request(
                "no_model",
                "this server has no model configured; send a `script` or a `profile`, or start \
                 troupe serve with model.base_url set in troupe.yaml",
            ));
        }
    }
    if let Some(toolsets) = request.toolsets {
        let registry = state.troupe.registry();
        let known = registry.toolsets();
        let expanded = registry
            .expand_toolsets(&toolsets)
            .map_err(|e| ApiError::bad_request("bad_toolsets", e.to_string()))?;
        let mut unknown: Vec<&String> = toolsets
            .iter()
            .chain(expanded.iter())
            .filter(|t| !known.contains(*t))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if !unknown.is_empty() {
            return Err(ApiError::bad_request(
                "bad_toolsets",
                format!(
                    "no tools are provided as {}; send toolsets from: {}",
                    unknown
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let view = registry
            .view(ViewSpec::toolsets(toolsets))
            .map_err(|e| ApiError::bad_request("bad_toolsets", e.to_string()))?;
        options = options.with_view(view);
    }
    if request.system_prompt.is_some() || request.max_iterations.is_some() || trace_parent.is_some()
    {
        let mut config: SessionConfig = match profile {
            Some(profile) => profile.session.clone(),
            None => state.troupe.session_defaults(),
        };
        if let Some(header) = &trace_parent {
            config.trace_parent = troupe_actors::trace::TraceSpan::from_traceparent(header);
        }
        if let Some(prompt) = request.system_prompt {
            config.system_prompt = Some(prompt);
        }
        if let Some(max) = request.max_iterations {
            if max == 0 {
                return Err(ApiError::bad_request(
                    "bad_max_iterations",
                    "max_iterations must be at least 1",
                ));
            }
            config.max_iterations = max;
        }
        options = options.with_config(config);
    }
    Ok(options)
}

/// Opens a session with a log of its events and adds it to the table. The router subscribes
/// to the troupe-wide stream before the first session opens and keeps events of sessions it
/// does not know yet, so the session's opening events are logged too. A reopened session's log
/// goes on from its stored events.
pub(super) async fn open_entry(
    state: &HttpState,
    options: SessionOptions,
) -> Result<Arc<SessionEntry>, ApiError> {
    state.sessions.start_router(state);
    let reopened = options.restore.as_ref().map(|r| r.id.clone());
    let handle = state.troupe.open_session(options).await?;
    let log = match state.troupe.session_store() {
        Some(store) => {
            let earlier = match &reopened {
                Some(id) => store
                    .events(id, SESSION_LOG_CAP)
                    .await
                    .map_err(|e| ApiError::internal(e.to_string()))?,
                None => Vec::new(),
            };
            EventLog::stored(store.clone(), handle.id(), earlier)
        }
        None => EventLog::default(),
    };
    let turns = Arc::new(TurnState::default());
    log.watch_turns(handle.id(), Arc::clone(&turns));
    let log = Arc::new(log);
    lock(&state.sessions.routes).register(handle.id(), &log);
    let entry = Arc::new(SessionEntry {
        handle: handle.clone(),
        log,
        turns,
        last_used: Mutex::new(std::time::Instant::now()),
    });
    lock(&state.sessions.entries).insert(handle.id().to_string(), Arc::clone(&entry));
    Ok(entry)
}

/// Reopens the sessions this server's store holds open (created over HTTP, not closed by their
/// user), with their ids and event numbering; a turn one stopped inside goes on: calls that were
/// waiting for approval are asked again, the others are marked interrupted. Returns how many
/// were reopened; one that cannot be is logged and left stored.
pub async fn reopen_stored(state: &HttpState) -> usize {
    let Some(store) = state.troupe.session_store().cloned() else {
        return 0;
    };
    let query = crate::sessions::ListQuery {
        origin: Some("http".into()),
        open_only: true,
        ..Default::default()
    };
    let stored = match store.list(query).await {
        Ok(stored) => stored,
        Err(error) => {
            tracing::error!(%error, "could not read the stored sessions to reopen them");
            return 0;
        }
    };
    let mut reopened = 0;
    for summary in stored {
        let result = async {
            let session = store
                .load(&summary.id)
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let request: CreateSession =
                serde_json::from_value(session.options.clone()).map_err(|e| {
                    ApiError::internal(format!("its creation request is unreadable: {e}"))
                })?;
            let options = session_options(state, &request, None)?.resuming(session.restore(true));
            open_entry(state, options).await
        }
        .await;
        match result {
            Ok(entry) => {
                reopened += 1;
                // Busy before the first request can arrive: a message must not overtake it.
                if let Some(token) = entry.turns.begin() {
                    tokio::spawn(resume_turn(entry, token));
                }
            }
            Err(error) => {
                tracing::warn!(session = %summary.id, error = %error.message, "a stored session could not be reopened")
            }
        }
    }
    reopened
}

/// Goes on with the turn a reopened session stopped inside, as a message sent without `wait`
/// (the message `token` of its turn state).
async fn resume_turn(entry: Arc<SessionEntry>, token: u64) {
    match entry.handle.resume_turn().await {
        Ok(outcome) => entry
            .turns
            .finish(token, outcome.as_ref().map(outcome_json)),
        Err(error) => {
            record_failure(&entry, &error.to_string());
            entry.turns.finish(token, None);
        }
    }
}

fn describe(entry: &SessionEntry) -> Value {
    json!({
        "session_id": entry.handle.id(),
        "agent_path": entry.handle.agent_path(),
        "busy": entry.turns.is_busy(),
        "events": entry.log.len(),
        "last_outcome": entry.turns.last_outcome(),
        "usage": entry.handle.spent(),
        "budget": entry.handle.budget(),
        "todos": entry.handle.todos().to_result(),
    })
}

/// Handler of `GET /api/sessions`.
pub async fn list(State(state): State<HttpState>) -> Json<Value> {
    let mut sessions: Vec<Value> = lock(&state.sessions.entries)
        .values()
        .map(|e| describe(e))
        .collect();
    sessions.sort_by(|a, b| a["session_id"].as_str().cmp(&b["session_id"].as_str()));
    Json(json!({ "sessions": sessions }))
}

/// Handler of `GET /api/sessions/{id}`.
pub async fn show(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let entry = state.sessions.get(&id)?;
    Ok(Json(describe(&entry)))
}

/// Handler of `DELETE /api/sessions/{id}`.
pub async fn close(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    state.sessions.get(&id)?;
    state.troupe.close_session(&id).await?;
    lock(&state.sessions.entries).remove(&id);
    Ok(Json(json!({"session_id": id, "closed": true})))
}

/// `POST /api/sessions/{id}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The user's message.
    pub text: String,
    /// Wait for the turn to end and answer with its outcome (default: answer 202 at once and
    /// let the outcome arrive on the event stream as `final`).
    #[serde(default)]
    pub wait: bool,
}

/// Handler of `POST /api/sessions/{id}/messages`.
pub async fn send_message(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(message): ApiJson<SendMessage>,
) -> Result<Response, ApiError> {
    // The caller's trace: the turn's span goes under it.
    let trace_parent = super::super::traceparent(&headers)
        .map(|header| troupe_actors::trace::TraceSpan::from_traceparent(&header));
    if message.text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_message",
            "`text` is empty; send the user's message",
        ));
    }
    let entry = state.sessions.get(&id)?;
    // `/<command>` goes to the plugin that registered it (or `/help`), not to the model.
    if let Some(reply) = state.commands.dispatch(&message.text, Some(&id)).await {
        return Ok(Json(json!({
            "session_id": id,
            "command": reply.command,
            "plugin": reply.owner,
            "ok": reply.ok,
            "text": reply.text,
        }))
        .into_response());
    }
    let Some(token) = entry.turns.begin() else {
        return Err(ApiError::conflict(
            "session_busy",
            format!(
                "session {id} is still working on a message; wait for its `final` event or stop it"
            ),
        ));
    };
    // Events already logged: a `turn_started` after these is the turn this message began.
    let seen = entry.log.len();
    let mut ticks = entry.log.tick.subscribe();
    let mut turn = {
        let entry = Arc::clone(&entry);
        tokio::spawn(async move {
            let result = match trace_parent {
                Some(parent) => entry.handle.send_in_trace(message.text, parent).await,
                None => entry.handle.send(message.text).await,
            };
            entry
                .turns
                .finish(token, result.as_ref().ok().map(outcome_json));
            result
        })
    };
    if !message.wait {
        // Answer 202 only once the message is known to have started a turn: a session busy
        // with something this table did not start (a background delegation's results, say)
        // refuses the message, and that refusal must reach the client, not vanish.
        let finished = loop {
            ticks.borrow_and_update();
            if entry.log.turn_started_after(entry.handle.id(), seen) {
                break None;
            }
            tokio::select! {
                result = &mut turn => break Some(result),
                changed = ticks.changed() => if changed.is_err() {
                    break Some((&mut turn).await);
                },
            }
        };
        match finished {
            Some(Ok(Err(error))) => return Err(crate::api::TroupeError::from(error).into()),
            Some(Err(error)) => {
                return Err(ApiError::internal(format!(
                    "the turn's task failed: {error}"
                )));
            }
            Some(Ok(Ok(_))) => {}
            // Answered 202 while the turn runs: an error it ends with is kept for the client.
            None => {
                let entry = Arc::clone(&entry);
                tokio::spawn(async move {
                    match turn.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => record_failure(&entry, &error.to_string()),
                        Err(error) => {
                            record_failure(&entry, &format!("the turn's task failed: {error}"))
                        }
                    }
                });
            }
        }
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({
                "session_id": id,
                "accepted": true,
                "events": format!("/api/sessions/{id}/events"),
            })),
        )
            .into_response());
    }
    match turn.await {
        Ok(Ok(outcome)) => Ok(Json(outcome_json(&outcome)).into_response()),
        Ok(Err(error)) => Err(crate::api::TroupeError::from(error).into()),
        Err(error) => Err(ApiError::internal(format!(
            "the turn's task failed: {error}"
        ))),
    }
}

/// Keeps a message the session refused or lost: as the session's last outcome, and as a
/// `final` event with status `failed` on its stream, so a client that was answered 202 learns
/// of it.
fn record_failure(entry: &SessionEntry, error: &str) {
    entry.turns.record(json!({
        "turn_id": null,
        "text": "",
        "status": "failed",
        "error": error,
    }));
    entry.log.push(SessionEvent {
        session_id: entry.handle.id().to_string(),
        kind: EventKind::Final {
            turn_id: String::new(),
            text: format!("the message was not handled: {error}"),
            status: "failed".into(),
            usage: Default::default(),
        },
    });
}

pub(super) fn outcome_json(outcome: &TurnOutcome) -> Value {
    json!({
        "turn_id": outcome.turn_id,
        "text": outcome.text,
        "status": outcome.status.as_str(),
        "model_requests": outcome.model_requests,
        "error": outcome.error,
        "usage": outcome.spend,
        "calls": outcome.calls.iter().map(|call| json!({
            "call_id": call.call_id,
            "tool": call.tool,
            "underlying_tool": call.underlying_tool,
            "status": call.status,
            "duration_ms": u64::try_from(call.duration.as_millis()).unwrap_or(u64::MAX),
            "approval_wait_ms": u64::try_from(call.approval_wait.as_millis()).unwrap_or(u64::MAX),
        })).collect::<Vec<_>>(),
    })
}
