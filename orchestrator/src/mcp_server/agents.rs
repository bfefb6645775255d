//! Agents on request (`troupe mcp serve --agent PROFILE`): a tool `run_<profile>(prompt,
//! session?)` per profile, running one whole troupe turn of a session of that profile (its
//! model, tools, subagents and budgets) and answering with the turn's text. While the turn runs
//! the client gets progress (each tool call and subagent as it starts); a cancelled request
//! stops the turn hard. `session` continues a conversation this server opened for the same
//! profile; its flagged calls are asked of the client's person as the bridge's are.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// The sessions this server opened for agent tools, by id, with their profile.
#[derive(Default)]
pub(super) struct AgentSessions {
    open: Mutex<HashMap<String, String>>,
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
        let handle = match session {
            Some(id) => {
                let opened_for = lock(&self.agents.open).get(&id).cloned();
                if opened_for.as_deref() != Some(profile) {
                    return fail(format!(
                        "there is no open {profile} session {id:?} here; leave `session` out to start one"
                    ));
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
                    lock(&self.agents.open).insert(handle.id().to_string(), profile.to_string());
                    handle
                }
                Err(e) => return fail(format!("the {profile} agent could not start: {e}")),
            },
        };
        // Its flagged calls go to the same person as the connection's own.
        if let Some(peer) = self.askers.peer(connection) {
            self.askers.add(handle.id(), peer);
        }
        let outcome = run_turn(&handle, prompt, cancel, progress).await;
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
    loop {
        let note = tokio::select! {
            outcome = &mut turn => return outcome,
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
            if let Err(error) = progress.peer.notify_progress(param).await {
                tracing::debug!(%error, "mcp serve: could not send progress; the turn goes on");
            }
        }
    }
}
