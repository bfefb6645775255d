//! Agents on request (`troupe mcp serve --agent PROFILE`): a tool `run_<profile>(prompt,
//! session?)` per profile, running one whole troupe turn of a session of that profile (its
//! model, tools, subagents and budgets) and answering with the turn's text. While the turn runs
//! the client gets progress (each tool call and subagent as it starts); a cancelled request, a
//! client that can no longer be sent progress, or a turn past [`TURN_CAP`] stops the turn hard.
//! `session` continues a conversation opened by the same client connection for the same
//! profile; another connection cannot continue it. Sessions close when their connection ends
//! or after [`IDLE_TTL`] unused. A turn's flagged calls are asked of the person at the
//! connection running it, as the bridge's are. The agent's own tool calls pass hooks,
//! approvals and traces inside its session; the `run_<profile>` call itself is not a runner
//! call (no pre_tool_call hook sees it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use troupe_actors::events::EventKind;
use troupe_actors::session::{SessionHandle, TurnStatus};
use troupe_tools::sync::lock;

use super::Shared;
use super::calls::{PROGRESS_EVERY, Progress};
use crate::api::{SessionOptions, Troupe};

/// The prefix of an agent tool's name.
pub(super) const PREFIX: &str = "run_";

/// How long an agent session may sit unused before the server closes it.
const IDLE_TTL: Duration = Duration::from_secs(30 * 60);

/// The longest one `run_<profile>` turn may run; past it the turn is stopped hard.
const TURN_CAP: Duration = Duration::from_secs(30 * 60);

/// One session an agent tool opened: whose it is and when it was last used.
struct Opened {
    profile: String,
    /// The client connection that opened it; only that one may continue it.
    connection: String,
    /// A turn of it is running (it is never closed as idle then).
    busy: bool,
    used: Instant,
}

/// The sessions this server opened for agent tools, by id.
#[derive(Default)]
pub(super) struct AgentSessions {
    open: Mutex<HashMap<String, Opened>>,
}

impl AgentSessions {
    /// Forgets the sessions idle past [`IDLE_TTL`]; returns their ids, to be closed.
    fn take_idle(&self) -> Vec<String> {
        let mut open = lock(&self.open);
        let idle: Vec<String> = open
            .iter()
            .filter(|(_, o)| !o.busy && o.used.elapsed() > IDLE_TTL)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idle {
            open.remove(id);
        }
        idle
    }

    /// Forgets the sessions `connection` opened (it is gone); returns their ids, to be closed.
    pub(super) fn take_of(&self, connection: &str) -> Vec<String> {
        let mut open = lock(&self.open);
        let mine: Vec<String> = open
            .iter()
            .filter(|(_, o)| o.connection == connection)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &mine {
            open.remove(id);
        }
        mine
    }

    fn set_busy(&self, id: &str, busy: bool) {
        if let Some(opened) = lock(&self.open).get_mut(id) {
            opened.busy = busy;
            opened.used = Instant::now();
        }
    }
}

/// Closes the sessions `ids` of `troupe` in the background.
pub(super) fn close_sessions(troupe: &Troupe, ids: Vec<String>) {
    if ids.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let troupe = troupe.clone();
    runtime.spawn(async move {
        for id in ids {
            if let Err(error) = troupe.close_session(&id).await {
                tracing::debug!(%error, session = %id, "mcp serve: an agent session could not be closed");
            }
        }
    });
}

/// Checks that every name in `agents` is a profile of `troupe`.
pub(super) fn check(troupe: &Troupe, agents: &[String]) -> Result<(), String> {
    for name in agents {
        if troupe.profile(name).is_none() {
            let known = troupe.profile_names();
            return Err(format!(
                "--agent {name:?}: troupe.yaml has no such profile; the profiles are: {}",
                if known.is_empty() {
                    "(none; add one under `profiles:`)".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// The tool of each agent profile.
pub(super) fn agent_tools(troupe: &Troupe, agents: &[String]) -> Vec<Tool> {
    agents
        .iter()
        .map(|name| {
            let prompt = troupe
                .profile(name)
                .and_then(|p| p.session.system_prompt.clone())
                .map(|p| {
                    let first: String = p.lines().next().unwrap_or_default().chars().take(200).collect();
                    format!(" Its brief: {first}")
                })
                .unwrap_or_default();
            let description = format!(
                "Hand a task to troupe's `{name}` agent: it works on `prompt` with its own model, \
                 tools and subagents, then answers. Progress is reported while it works. To \
                 follow up, send the `session` its answer gave.{prompt}"
            );
            let schema = json!({"type": "object", "properties": {
                "prompt": {"type": "string", "description": "What the agent is to do or answer."},
                "session": {"type": "string", "description": "Continue this conversation (from an earlier answer)."}
            }, "required": ["prompt"]});
            let schema = match schema {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            Tool::new(format!("{PREFIX}{name}"), description, Arc::new(schema)).with_annotations(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .open_world(true),
            )
        })
        .collect()
}

impl Shared {
    /// Runs one turn of `profile` for the connection `connection` (see the module doc).
    pub(super) async fn run_agent(
        &self,
        connection: &str,
        profile: &str,
        arguments: Map<String, Value>,
        cancel: CancellationToken,
        progress: Option<Progress>,
    ) -> CallToolResult {
        let fail = |message: String| {
            CallToolResult::error(vec![ContentBlock::text(
                json!({"error": message}).to_string(),
            )])
        };
        let prompt = match arguments.get("prompt") {
            Some(Value::String(p)) if !p.trim().is_empty() => p.clone(),
            _ => {
                return fail(
                    "`prompt` is missing or empty: send the task for the agent as a string".into(),
                );
            }
        };
        let troupe = self.runtime.troupe();
        let session = match arguments.get("session") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.trim().is_empty() => Some(id.trim().to_string()),
            Some(_) => {
                return fail("`session` must be the session id an earlier answer gave".into());
            }
        };
        close_sessions(troupe, self.agents.take_idle());
        let handle = match session {
            Some(id) => {
                let refusal = match lock(&self.agents.open).get_mut(&id) {
                    None => Some(format!(
                        "there is no open {profile} session {id:?} here (sessions idle for {} \
                         minutes are closed); leave `session` out to start one",
                        IDLE_TTL.as_secs() / 60
                    )),
                    Some(o) if o.connection != connection => Some(format!(
                        "session {id:?} belongs to another client connection and only that one \
                         may continue it; leave `session` out to start one of your own"
                    )),
                    Some(o) if o.profile != profile => Some(format!(
                        "session {id:?} is a {} session, not a {profile} one; call run_{} to \
                         continue it, or leave `session` out to start a {profile} one",
                        o.profile, o.profile
                    )),
                    Some(o) if o.busy => Some(format!(
                        "session {id:?} is still answering an earlier call; wait for that answer, \
                         then continue it"
                    )),
                    Some(o) => {
                        o.busy = true;
                        None
                    }
                };
                if let Some(refusal) = refusal {
                    return fail(refusal);
                }
                match troupe.session(&id) {
                    Ok(handle) => handle,
                    Err(e) => {
                        lock(&self.agents.open).remove(&id);
                        return fail(format!("{e}; leave `session` out to start a new one"));
                    }
                }
            }
            None => match troupe
                .open_session(SessionOptions::from_profile(profile))
                .await
            {
                Ok(handle) => {
                    lock(&self.agents.open).insert(
                        handle.id().to_string(),
                        Opened {
                            profile: profile.to_string(),
                            connection: connection.to_string(),
                            busy: true,
                            used: Instant::now(),
                        },
                    );
                    handle
                }
                Err(e) => return fail(format!("the {profile} agent could not start: {e}")),
            },
        };
        // Its flagged calls go to the person of the connection running this turn, for this
        // turn only.
        if let Some(peer) = self.askers.peer(connection) {
            self.askers.add(handle.id(), peer);
        }
        let outcome = run_turn(&handle, prompt, cancel, progress).await;
        self.askers.remove(handle.id());
        self.agents.set_busy(handle.id(), false);
        match outcome {
            Err(e) => fail(format!("the {profile} agent's turn failed: {e}")),
            Ok(outcome) => {
                let session = handle.id().to_string();
                let failed =
                    matches!(outcome.status, TurnStatus::Failed) || outcome.error.is_some();
                let structured = json!({
                    "session": session,
                    "status": outcome.status.as_str(),
                    "answer": outcome.text,
                    "error": outcome.error,
                    "tool_calls": outcome.calls.len(),
                    "model_requests": outcome.model_requests,
                });
                let mut content = vec![ContentBlock::text(outcome.text.clone())];
                if let Some(error) = &outcome.error {
                    content.push(ContentBlock::text(format!("error: {error}")));
                }
                content.push(ContentBlock::text(format!(
                    "[session {session}: send it as `session` to continue; the turn ended {}]",
                    outcome.status.as_str()
                )));
                let mut result = if failed {
                    CallToolResult::error(content)
                } else {
                    CallToolResult::success(content)
                };
                result.structured_content = Some(structured);
                result
            }
        }
    }
}

/// Sends `prompt` and waits for the turn, reporting its steps as progress and stopping it hard
/// when `cancel` fires.
async fn run_turn(
    handle: &SessionHandle,
    prompt: String,
    cancel: CancellationToken,
    progress: Option<Progress>,
) -> Result<troupe_actors::session::TurnOutcome, troupe_actors::session::SessionError> {
    let mut events = handle.events();
    let turn = handle.send(prompt);
    tokio::pin!(turn);
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut step = 0.0_f64;
    let mut stopped = false;
    let mut listening = true;
    let cap = tokio::time::sleep(TURN_CAP);
    tokio::pin!(cap);
    loop {
        let note = tokio::select! {
            outcome = &mut turn => return outcome,
            _ = &mut cap, if !stopped => {
                tracing::warn!("mcp serve: an agent's turn ran past {} s; stopping it", TURN_CAP.as_secs());
                cancel.cancel();
                continue;
            }
            _ = cancel.cancelled(), if !stopped => {
                stopped = true;
                if let Err(error) = handle.stop(true).await {
                    tracing::debug!(%error, "mcp serve: the agent's turn could not be stopped");
                }
                continue;
            }
            event = events.recv(), if listening => match event.map(|e| e.kind) {
                None => {
                    listening = false;
                    None
                }
                Some(EventKind::ToolCallStarted { underlying_tool, brief, .. }) => {
                    let brief: String = brief.chars().take(120).collect();
                    Some(format!("calling {underlying_tool}: {brief}"))
                }
                Some(EventKind::SubagentSpawned { goal, .. }) => {
                    let goal: String = goal.chars().take(120).collect();
                    Some(format!("delegating: {goal}"))
                }
                Some(EventKind::ModelRequest { .. }) => Some("thinking".to_string()),
                Some(_) => None,
            },
            _ = ticks.tick() => Some(format!("working for {:.0} s", started.elapsed().as_secs_f64())),
        };
        if let (Some(note), Some(progress)) = (note, &progress) {
            step += 1.0;
            let param =
                ProgressNotificationParam::new(progress.token.clone(), step).with_message(note);
            // The client is gone: nobody will read the answer, so the turn stops.
            if let Err(error) = progress.peer.notify_progress(param).await {
                tracing::debug!(%error, "mcp serve: could not send progress; stopping the turn");
                cancel.cancel();
            }
        }
    }
}
