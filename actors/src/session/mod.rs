//! The [`Session`] actor: one conversation with one model. It owns the conversation, its
//! [`ToolsetView`] (refreshed at each request when the registry changed) and the agent loop:
//! model request → tool-call turn (planned, approved, run) → results → next request, up to
//! `max_iterations`, then a final answer. The model sees exactly the tool list the tool-search
//! assembly gives; the bridge tools are handled here (lookups in process, `tool_call` unwrapped
//! so the underlying tool goes through the same planner, supervisor and hooks as a direct call).
//!
//! Model requests and tool batches run on the tokio pool and come back as messages; the actor
//! never waits on them. Outside this crate, callers hold a [`SessionHandle`].
//!
//! # Layout
//! - `config`: [`SessionConfig`] and its defaults; `outcome`: [`TurnOutcome`], [`SessionError`].
//! - `turn`: the state of a running turn (its model request, what a budget extension goes on
//!   with); `lifecycle`: opening and ending turns; `budget`: running out of budget and asking
//!   for more.
//! - `request`: asking the model and reading its answer.
//! - `routing`: how each of the model's calls is routed, resolved once (`tool_call` unwrapped,
//!   lookups, `delegate_task`); `batch`: planning, running and answering a batch of calls.
//! - `control`: the actor's messages from outside (send, drain, steer, resume, ...).
//! - `handle`: [`SessionHandle`], opening and reopening sessions.

mod batch;
mod budget;
mod config;
mod control;
mod handle;
mod lifecycle;
mod outcome;
mod prompt;
mod request;
mod routing;
mod turn;

pub use config::{DEFAULT_MAX_ITERATIONS, DEFAULT_SYSTEM_PROMPT, SessionConfig};
pub use control::{
    BackgroundNotice, CloseSession, Drain, GetConversation, LoadConversation, ResumeTurn,
    SendMessage, Steer,
};
pub use handle::SessionHandle;
pub use outcome::{SessionError, TurnOutcome, TurnStatus};
pub use prompt::{LEAN_SYSTEM_PROMPT, ModelPrompt, model_prompt};

use std::sync::Arc;

use actix::WeakAddr;
use actix::prelude::*;
use actix_rt::ArbiterHandle;
use tokio_util::sync::CancellationToken;
use troupe_tools::ToolsetView;

use crate::batch_planner::Planners;
use crate::delegate::SubagentTracker;
use crate::events::EventSink;
use crate::hooks::HookRegistry;
use crate::journal::Durable;
use crate::model::{ChatMessage, ModelProvider, SessionModelState, ToolCallRequest};
use crate::supervisor::{Supervisor, WatchDelegations};
use crate::tool_runner::ToolRunner;
use crate::trace::TraceSpan;
use crate::usage::Meter;
use turn::Turn;

/// One conversation with one model. See the module doc.
pub struct Session {
    /// The session's id (uuid v7).
    id: String,
    /// Session ids from the root down to this one.
    path: Vec<String>,
    /// The model.
    provider: Arc<dyn ModelProvider>,
    /// What the session may see and call; refreshed when the registry changes.
    view: ToolsetView,
    /// Settings.
    config: SessionConfig,
    /// Hooks run around tool and model calls.
    hooks: HookRegistry,
    /// Approvals and stops.
    supervisor: Addr<Supervisor>,
    /// Where events go.
    events: EventSink,
    /// The conversation, without the system prompt (rebuilt per request).
    conversation: Vec<ChatMessage>,
    /// The running turn, if any.
    turn: Option<Turn>,
    /// Plans tool batches.
    planner: Planners,
    /// Runs tool batches.
    runner: ToolRunner,
    /// Fires when the session closes; parent of every turn token.
    lifetime: CancellationToken,
    /// The running subagents of this session's tree (shared with its parent and children).
    subagents: Arc<SubagentTracker>,
    /// The arbiter the session runs on, where its subagents are started.
    arbiter: Option<ArbiterHandle>,
    /// The session's own address, for background results; weak so it does not keep it alive.
    me: Option<WeakAddr<Session>>,
    /// Notes from the parent (`steer`), read before the next model request.
    steers: Vec<String>,
    /// Background-process notices that came during a turn, read before its next request.
    notices: Vec<String>,
    /// Background delegation results that arrived during a turn, read at the next one.
    inbox: Vec<String>,
    /// Fires on close or a hard stop; background children stop with it. Renewed at the next
    /// user message after a hard stop.
    delegations: CancellationToken,
    /// Background results that must wait for the user's next message (they arrived after a
    /// hard stop, so reading them must not start a turn).
    held: Vec<String>,
    /// Slots for this session's subagents: at most `delegation.max_concurrent_children` run
    /// at once, background and foreground together.
    slots: Arc<tokio::sync::Semaphore>,
    /// What the provider remembers about this session (retry budget, text tool calls).
    model_state: Arc<SessionModelState>,
    /// What the session and its subagents spent, against its budget and its ancestors'.
    meter: Arc<Meter>,
    /// The session's span, ended when the session stops.
    trace: TraceSpan,
    /// How many messages of `conversation` the journal has.
    persisted: usize,
    /// The latest step's write, awaited before the calls it names run.
    written: Option<Durable>,
    /// A reopened session that stopped inside a turn: the calls to ask approval for again.
    resume: Option<Vec<ToolCallRequest>>,
    /// Background delegations whose results are in `inbox` or `held`, not yet read.
    undelivered: Vec<String>,
    /// Set by the journal when a step could not be written: the next one writes everything.
    lost: Arc<std::sync::atomic::AtomicBool>,
    /// The span the next turn goes under instead of the session's (the message's sender's).
    next_turn_parent: Option<TraceSpan>,
    /// The memory stores as they were when the session opened, kept in the system prompt
    /// unchanged so its prefix stays cacheable (top-level sessions with the `memory` tool).
    memory_snapshot: Option<String>,
    /// The `todo` list, shared with the calls that change it.
    todos: Arc<std::sync::Mutex<troupe_tools::todo::TodoList>>,
}

/// What it takes to open a session.
pub struct SessionParams {
    /// The model.
    pub provider: Arc<dyn ModelProvider>,
    /// The tools it may see and call.
    pub view: ToolsetView,
    /// Settings.
    pub config: SessionConfig,
    /// Hooks.
    pub hooks: HookRegistry,
    /// The troupe's supervisor.
    pub supervisor: Addr<Supervisor>,
    /// The parent session, for a subagent.
    pub parent: Option<String>,
    /// Where the session's events also go (the troupe-wide stream).
    pub upstream_events: Option<EventSink>,
}

impl Session {
    fn system_prompt(&self, deferred: Option<usize>, lean: bool) -> String {
        let mut prompt = prompt::base_system_prompt(&self.config, lean);
        if let Some(memory) = &self.memory_snapshot {
            prompt.push_str("\n\n");
            prompt.push_str(memory);
        }
        // The plan must never drop out of sight: when the conversation no longer holds the
        // result that states the current list (it was shortened or replaced), the prompt does.
        let todos = troupe_tools::sync::lock(&self.todos).clone();
        if !todos.is_empty() && !self.todos_in_conversation(&todos) {
            prompt.push_str(&format!(
                "\n\n## Your todo list\nThe conversation was shortened; this is your plan as it stands (update it with the todo tool):\n{}",
                todos.render()
            ));
        }
        if let Some(count) = deferred {
            prompt.push_str(&prompt::deferred_note(count, lean));
        }
        prompt
    }

    /// Whether a `todo` result in the conversation states `todos` as they are.
    fn todos_in_conversation(&self, todos: &troupe_tools::todo::TodoList) -> bool {
        self.conversation.iter().rev().any(|message| match message {
            ChatMessage::Tool { content, .. } => troupe_tools::todo::TodoList::from_result(content)
                .is_some_and(|stated| &stated == todos),
            _ => false,
        })
    }

    /// Takes in tools registered since the view was cut (an MCP server that became ready).
    fn refresh_view(&mut self) {
        if self.view.is_stale() {
            match self.view.refreshed() {
                Ok(view) => self.view = view,
                Err(error) => {
                    tracing::warn!(%error, "could not refresh the tool view; keeping the old one")
                }
            }
        }
    }

    /// Hands the journal the messages added since the last step, with the spending so far.
    fn persist(&mut self) {
        let Some(persist) = &self.config.persist else {
            return;
        };
        let mut first = self.persisted.min(self.conversation.len());
        if self.lost.swap(false, std::sync::atomic::Ordering::SeqCst) {
            first = 0;
        } else if first == self.conversation.len() && self.written.is_some() {
            return;
        }
        let written = persist.journal.step(
            &self.id,
            first,
            self.conversation[first..].to_vec(),
            self.meter.spent(),
            &self.lost,
        );
        self.persisted = self.conversation.len();
        self.written = Some(written);
    }

    /// Whether background delegation is possible here (top-level, configured for it).
    fn delegates_in_background(&self) -> bool {
        self.config.background_delegation && self.path.len() == 1
    }

    /// Hands the supervisor the current background-delegation token.
    fn watch_delegations(&self) {
        if self.delegates_in_background() {
            self.supervisor.do_send(WatchDelegations {
                session_id: self.id.clone(),
                token: self.delegations.clone(),
            });
        }
    }

    /// The dollars of a request's usage by the price table; `None` when its model has none.
    fn cost_of(&self, usage: crate::model::Usage) -> Option<f64> {
        let price = match self.config.model.as_deref() {
            Some(model) => self.config.prices.lookup(model),
            None => self
                .provider
                .model()
                .and_then(|model| self.config.prices.lookup(&model)),
        };
        price.map(|price| price.cost(usage))
    }

    fn is_current(&self, turn_id: &str) -> bool {
        self.turn.as_ref().is_some_and(|t| t.id == turn_id)
    }

    fn turn_stopped(&self) -> bool {
        self.turn.as_ref().is_some_and(|t| t.token.is_cancelled())
    }
}
