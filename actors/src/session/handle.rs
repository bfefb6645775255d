//! [`SessionHandle`]: how callers outside the actor system open, reopen, talk to and close a
//! session.

use std::sync::Arc;

use troupe_tools::memory::MEMORY_TOOL;
use troupe_tools::todo::{TODO_TOOL, TodoList};

use actix::prelude::*;
use opentelemetry::KeyValue;
use tokio_util::sync::CancellationToken;

use super::control::{
    CloseSession, Drain, GetConversation, LoadConversation, ResumeTurn, SendMessage, Steer,
};
use super::outcome::{SessionError, TurnOutcome};
use super::{Session, SessionParams};
use crate::batch_planner::Planners;
use crate::call::new_id;
use crate::delegate::SubagentTracker;
use crate::events::EventSink;
use crate::journal::Restore;
use crate::model::{ChatMessage, SessionModelState, ToolCallRequest};
use crate::supervisor::{RegisterSession, Stop, Supervisor};
use crate::tool_runner::ToolRunner;
use crate::trace::TraceSpan;
use crate::usage::{Budget, Meter, Spend};

/// A reopened conversation's calls with no result: each gets its note, except those to ask
/// approval for again, which are returned (with `Some` whenever the conversation stopped inside
/// a turn).
fn settle_unanswered(
    mut conversation: Vec<ChatMessage>,
    restore: &Restore,
) -> (Vec<ChatMessage>, Option<Vec<ToolCallRequest>>) {
    let inside = crate::journal::ends_inside_turn(&conversation);
    let mut again = Vec::new();
    for call in crate::journal::unanswered_calls(&conversation) {
        let waiting = restore.awaiting_approval.contains(&call.id);
        if waiting && restore.ask_again {
            again.push(call);
            continue;
        }
        let content = if waiting || restore.never_started.contains(&call.id) {
            crate::journal::not_run_note(&call.name)
        } else {
            crate::journal::interrupted_note(&call.name)
        };
        conversation.push(ChatMessage::Tool {
            tool_call_id: call.id,
            name: call.name,
            content,
        });
    }
    (conversation, inside.then_some(again))
}

/// A cloneable handle on a session, usable from any thread or runtime.
#[derive(Clone)]
pub struct SessionHandle {
    id: String,
    path: Vec<String>,
    addr: Addr<Session>,
    supervisor: Addr<Supervisor>,
    events: EventSink,
    /// The running subagents of the session's tree, for steering them from outside.
    subagents: Arc<SubagentTracker>,
    /// The session's spending.
    meter: Arc<Meter>,
    /// The session's `todo` list (the session changes it; readers take a copy).
    todos: Arc<std::sync::Mutex<TodoList>>,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish()
    }
}

impl SessionHandle {
    /// Registers and starts a session. Must run on an actix arbiter (inside a `System`).
    pub async fn open(params: SessionParams) -> Result<SessionHandle, SessionError> {
        Self::open_in_tree(params, SubagentTracker::new(), None, None).await
    }

    /// Reopens a stored session with its id, conversation and spending. A call it had asked for
    /// and that has no result gets a note instead (its effect is unknown, or it never ran), except
    /// calls waiting for approval when `restore.ask_again`: [`SessionHandle::resume_turn`] asks
    /// for those again and goes on with the turn.
    pub async fn reopen(
        params: SessionParams,
        restore: Restore,
    ) -> Result<SessionHandle, SessionError> {
        Self::open_in_tree(params, SubagentTracker::new(), None, Some(restore)).await
    }

    /// Opens a subagent sharing its tree's record of running subagents; its spending counts
    /// against `parent_meter` (and that meter's ancestors) too.
    pub(crate) async fn open_in_tree(
        params: SessionParams,
        subagents: Arc<SubagentTracker>,
        parent_meter: Option<Arc<Meter>>,
        mut restore: Option<Restore>,
    ) -> Result<SessionHandle, SessionError> {
        let (id, conversation, persisted, resume, spent) = match &mut restore {
            Some(restore) => {
                let stored = restore.conversation.len();
                let conversation = std::mem::take(&mut restore.conversation);
                let (conversation, resume) = settle_unanswered(conversation, restore);
                (
                    restore.id.clone(),
                    conversation,
                    stored,
                    resume,
                    restore.spent,
                )
            }
            None => (new_id(), Vec::new(), 0, None, Spend::default()),
        };
        // Background results that had not been read: read at once by a live server, with the
        // user's next message otherwise; interrupted delegations are reported the same way.
        let mut waiting = Vec::new();
        let mut undelivered = Vec::new();
        if let Some(restore) = &restore {
            for delegation in &restore.delegations_running {
                waiting.push(crate::journal::delegation_interrupted_note(delegation, &id));
                undelivered.push(delegation.clone());
            }
            for (delegation, text) in &restore.delegations_arrived {
                waiting.push(text.clone());
                undelivered.push(delegation.clone());
            }
        }
        let (inbox, held) = match &restore {
            Some(restore) if restore.ask_again => (waiting, Vec::new()),
            _ => (Vec::new(), waiting),
        };
        let events = match params.upstream_events {
            Some(upstream) => EventSink::forwarding_to(upstream),
            None => EventSink::new(),
        };
        let parent = params.parent.clone();
        let path = params
            .supervisor
            .send(RegisterSession {
                session_id: id.clone(),
                parent: params.parent,
                events: events.clone(),
            })
            .await??;
        let planner = Planners::of_system(params.config.cwd.clone()).await;
        let lifetime = CancellationToken::new();
        let delegations = lifetime.child_token();
        let slots = Arc::new(tokio::sync::Semaphore::new(
            params
                .config
                .delegation
                .max_concurrent_children
                .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
        ));
        let runner = ToolRunner::new(params.config.runner);
        let meter = match &parent_meter {
            Some(parent) => Meter::child(parent, params.config.budget),
            None => Meter::root(params.config.budget),
        };
        meter.restore(&spent);
        let trace = TraceSpan::start(
            "session",
            &params.config.trace_parent,
            opentelemetry::trace::SpanKind::Internal,
            || {
                vec![
                    KeyValue::new("session.id", path.first().cloned().unwrap_or_default()),
                    KeyValue::new("troupe.session.id", id.clone()),
                    KeyValue::new("troupe.agent.depth", path.len() as i64 - 1),
                ]
            },
        );
        // Read once, at the start: writes during the session take effect at the next one.
        let memory_snapshot = match &params.config.memory {
            Some(store) if path.len() == 1 && params.view.contains(MEMORY_TOOL) => {
                let store = Arc::clone(store);
                tokio::task::spawn_blocking(move || store.snapshot())
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        // A reopened session's plan is the one its last `todo` result stated.
        let todos = conversation
            .iter()
            .rev()
            .find_map(|message| match message {
                crate::model::ChatMessage::Tool { name, content, .. } if name == TODO_TOOL => {
                    TodoList::from_result(content)
                }
                _ => None,
            })
            .unwrap_or_default();
        let todos = Arc::new(std::sync::Mutex::new(todos));
        let session = Session {
            id: id.clone(),
            path: path.clone(),
            provider: params.provider,
            view: params.view,
            config: params.config,
            hooks: params.hooks,
            supervisor: params.supervisor.clone(),
            events: events.clone(),
            conversation,
            turn: None,
            planner,
            runner,
            lifetime,
            subagents: Arc::clone(&subagents),
            arbiter: None,
            me: None,
            steers: Vec::new(),
            notices: Vec::new(),
            inbox,
            delegations,
            held,
            slots,
            model_state: Arc::new(SessionModelState::new()),
            meter: Arc::clone(&meter),
            trace,
            persisted,
            written: None,
            resume,
            undelivered,
            lost: Arc::default(),
            next_turn_parent: None,
            memory_snapshot,
            todos: Arc::clone(&todos),
        };
        let processes = session.config.processes.clone();
        let lifetime = session.lifetime.clone();
        let addr = session.start();
        if let Some(processes) = processes {
            super::control::forward_notices(
                processes.listen(&id, parent.as_deref()),
                addr.downgrade(),
                lifetime,
            );
        }
        Ok(SessionHandle {
            id,
            path,
            addr,
            supervisor: params.supervisor,
            events,
            subagents,
            meter,
            todos,
        })
    }

    /// The session's `todo` list as it stands.
    pub fn todos(&self) -> TodoList {
        troupe_tools::sync::lock(&self.todos).clone()
    }

    /// The subagents running below this session, oldest first: `(subagent id, goal)`.
    pub fn running_subagents(&self) -> Vec<(String, String)> {
        self.subagents
            .records_below(&self.id)
            .into_iter()
            .map(|r| (r.subagent_id, r.goal))
            .collect()
    }

    /// Gives a running subagent below this session a note it reads before its next model
    /// request; false when no such subagent is running (it finished, or the id is wrong).
    pub async fn steer_subagent(
        &self,
        subagent_id: &str,
        text: impl Into<String>,
    ) -> Result<bool, SessionError> {
        match self.subagents.find_below(&self.id, subagent_id) {
            Some(record) => record.session.steer(text).await,
            None => Ok(false),
        }
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Session ids from the root down to this one.
    pub fn agent_path(&self) -> &[String] {
        &self.path
    }

    /// What the session and its subagents have spent so far.
    pub fn spent(&self) -> Spend {
        self.meter.spent()
    }

    /// The session's own budget.
    pub fn budget(&self) -> Budget {
        self.meter.budget()
    }

    /// Sends a user message and waits for the turn's outcome.
    pub async fn send(&self, text: impl Into<String>) -> Result<TurnOutcome, SessionError> {
        self.addr
            .send(SendMessage {
                text: text.into(),
                trace: None,
            })
            .await?
    }

    /// [`SessionHandle::send`] with the turn's span under `parent` (the sender's trace).
    pub async fn send_in_trace(
        &self,
        text: impl Into<String>,
        parent: TraceSpan,
    ) -> Result<TurnOutcome, SessionError> {
        self.addr
            .send(SendMessage {
                text: text.into(),
                trace: Some(parent),
            })
            .await?
    }

    /// A receiver of this session's events from now on.
    pub fn events(&self) -> tokio::sync::mpsc::UnboundedReceiver<crate::events::SessionEvent> {
        self.events.subscribe()
    }

    /// Stops the running turn (`hard`: and every descendant's, and the background subagents,
    /// whose results then wait for the next message). Returns how many turns stopped.
    pub async fn stop(&self, hard: bool) -> Result<usize, SessionError> {
        Ok(self
            .supervisor
            .send(Stop {
                session_id: self.id.clone(),
                hard,
            })
            .await?)
    }

    /// Goes on with the turn a reopened session stopped inside (see [`ResumeTurn`]); `None`
    /// when it stopped between turns.
    pub async fn resume_turn(&self) -> Result<Option<TurnOutcome>, SessionError> {
        self.addr.send(ResumeTurn).await?
    }

    /// Ends the running turn gently (see [`Drain`]); false when no turn is running.
    pub async fn drain(&self) -> Result<bool, SessionError> {
        Ok(self.addr.send(Drain).await?)
    }

    /// Sends a note the session reads before its next model request; false when it has no
    /// running turn (the note was not delivered).
    pub async fn steer(&self, text: impl Into<String>) -> Result<bool, SessionError> {
        Ok(self.addr.send(Steer { text: text.into() }).await?)
    }

    /// The conversation so far.
    pub async fn conversation(&self) -> Result<Vec<ChatMessage>, SessionError> {
        Ok(self.addr.send(GetConversation).await?)
    }

    /// Replaces the conversation while no turn runs (false when one does).
    pub async fn load_conversation(
        &self,
        messages: Vec<ChatMessage>,
    ) -> Result<bool, SessionError> {
        Ok(self.addr.send(LoadConversation(messages)).await?)
    }

    /// Closes the session.
    pub async fn close(&self) -> Result<(), SessionError> {
        Ok(self.addr.send(CloseSession).await?)
    }

    /// The actor's address, for callers inside the actor system.
    pub fn addr(&self) -> &Addr<Session> {
        &self.addr
    }
}
