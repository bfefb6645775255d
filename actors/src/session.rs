//! The [`Session`] actor: one conversation with one model. It owns the conversation, its
//! [`ToolsetView`] (refreshed at each request when the registry changed) and the agent loop:
//! model request → tool-call turn (planned, approved, run) → results → next request, up to
//! `max_iterations`, then a final answer. The model sees exactly the tool list the tool-search
//! assembly gives; the bridge tools are handled here (lookups in process, `tool_call` unwrapped
//! so the underlying tool goes through the same planner, supervisor and hooks as a direct call).
//!
//! Model requests and tool batches run on the tokio pool and come back as messages; the actor
//! never waits on them. Outside this crate, callers hold a [`SessionHandle`].

use std::path::PathBuf;
use std::sync::Arc;

use actix::WeakAddr;
use actix::prelude::*;
use actix_rt::ArbiterHandle;
use opentelemetry::KeyValue;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use troupe_tools::search::assemble;
use troupe_tools::text::json_kind;
use troupe_tools::{ToolResult, ToolSearchConfig, ToolsetView, bridge};

use crate::batch_planner::Planners;
use crate::call::{CallEntry, CallOutcome, CallTarget, new_id};
use crate::delegate::{
    DELEGATE_TASK, DelegateContext, DelegationConfig, DelegationFinished, SubagentTracker,
    run_delegate_task,
};
use crate::events::{EventKind, EventSink};
use crate::hooks::HookRegistry;
use crate::journal::{Durable, OpenedSession, Persist, Restore};
use crate::model::{
    ChatMessage, ModelError, ModelNotice, ModelProvider, ModelRequest, ModelResponse,
    SessionModelState, StreamDelta, ToolCallRequest,
};
use crate::repeats::{CallKey, Decision, REPEAT_NOTE, RepeatGuard, is_pure_read};
use crate::supervisor::{
    BeginTurn, EndTurn, RegisterSession, RequestExtension, Stop, Supervisor, SupervisorError,
    Ticket, UnregisterSession, Verdict, WatchDelegations, WithdrawApproval,
};
use crate::tool_runner::{BatchContext, RunnerLimits, ToolRunner};
use crate::trace::TraceSpan;
use crate::usage::{Budget, Exhausted, Meter, PriceTable, Spend};

/// Default tool rounds per user message.
pub const DEFAULT_MAX_ITERATIONS: u32 = 90;

/// The system prompt used when the config gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a careful assistant that gets things done with the tools you are given. Use a tool when it helps; call several at once when they do not depend on each other. When you have what you need, answer plainly.";

/// A session's settings.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The system prompt; [`DEFAULT_SYSTEM_PROMPT`] when `None`.
    pub system_prompt: Option<String>,
    /// Tool rounds per user message before the model must answer.
    pub max_iterations: u32,
    /// The tool-search settings (which tools hide behind the bridge, listing budget).
    pub tool_search: ToolSearchConfig,
    /// The model's context window in tokens, when known (sizes the listing).
    pub context_length: Option<i64>,
    /// Overrides the provider's model name.
    pub model: Option<String>,
    /// Upper bound on generated tokens per request.
    pub max_tokens: Option<u32>,
    /// The tool runner's limits.
    pub runner: RunnerLimits,
    /// The directory relative paths in tool arguments resolve against, for planning.
    pub cwd: PathBuf,
    /// The operator's limits for `delegate_task` (used only when the view holds it).
    pub delegation: DelegationConfig,
    /// Whether `delegate_task` may run in the background: the call returns a handle at once and
    /// the results arrive as a later message. Only for top-level sessions that can take one;
    /// off (wait for the results) by default, for one-shot runs and workers.
    pub background_delegation: bool,
    /// Emit the answer's text as it arrives (`TextDelta` events), for displays that show it
    /// live. Off by default: once text went out, a broken stream cannot be retried unseen.
    pub stream_text: bool,
    /// What the session, with its subagents, may spend; a subagent also stays within what
    /// each ancestor has left.
    pub budget: Budget,
    /// Prices by model name, for costs and `budget.max_cost_usd`.
    pub prices: Arc<PriceTable>,
    /// The span the session's own span goes under: the `delegate_task` call of a subagent, a
    /// board task's creator, an HTTP request's `traceparent`; a new trace when empty.
    pub trace_parent: TraceSpan,
    /// Where the session's steps are written, so it survives its process; `None` keeps it in
    /// memory only. Subagents write to their parent's journal.
    pub persist: Option<Persist>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            system_prompt: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            tool_search: ToolSearchConfig::default(),
            context_length: None,
            model: None,
            max_tokens: None,
            runner: RunnerLimits::default(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            delegation: DelegationConfig::default(),
            background_delegation: false,
            stream_text: false,
            budget: Budget::default(),
            prices: Arc::new(PriceTable::default()),
            trace_parent: TraceSpan::default(),
            persist: None,
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The model gave its final answer.
    Completed,
    /// A stop ended the turn.
    Interrupted,
    /// The tool-round budget ran out; the answer is the model's summary.
    MaxIterations,
    /// The model could not be reached or failed.
    Failed,
    /// A budget ran out; the answer is what the turn had so far.
    BudgetExceeded,
}

impl TurnStatus {
    /// The word used in events and `--json` output.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Completed => "completed",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::MaxIterations => "max_iterations",
            TurnStatus::Failed => "failed",
            TurnStatus::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// The result of one user message.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The turn's id.
    pub turn_id: String,
    /// The answer, or what went wrong.
    pub text: String,
    /// How the turn ended.
    pub status: TurnStatus,
    /// How many model requests the turn made.
    pub model_requests: u32,
    /// Every tool call of the turn, in order.
    pub calls: Vec<CallOutcome>,
    /// The model error, for a failed turn; for a turn stopped by its budget, which one ran out.
    pub error: Option<String>,
    /// What the turn spent, its subagents' requests included.
    pub spend: Spend,
}

/// Why a session could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A turn is already running; send again when it ends (or stop it).
    #[error("session {0} is busy with another message; wait for its answer or stop it first")]
    Busy(String),
    /// The session has closed.
    #[error("session {0} is closed")]
    Closed(String),
    /// The supervisor refused the registration.
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
    /// The actor system is gone (shut down).
    #[error("the actor system is not running: {0}")]
    Mailbox(String),
}

impl From<MailboxError> for SessionError {
    fn from(error: MailboxError) -> Self {
        SessionError::Mailbox(error.to_string())
    }
}

/// The running turn.
struct Turn {
    id: String,
    token: CancellationToken,
    /// Model requests made so far.
    requests: u32,
    reply: Option<oneshot::Sender<TurnOutcome>>,
    calls: Vec<CallOutcome>,
    /// Whether an empty reply already got this turn's one nudge.
    nudged: bool,
    /// Calls the model makes again with nothing changed.
    repeats: RepeatGuard,
    /// The keys of the batch running now, for `repeats` when it ends.
    running: Vec<CallKey>,
    /// Whether the model repeated itself enough that the turn asks for its answer.
    wrap_up: bool,
    /// Fires on a drain: the running batch finishes (its unstarted calls never start), then
    /// the turn ends.
    drain: CancellationToken,
    /// The session's spending when the turn began.
    spent_before: Spend,
    /// The budget that ran out while the turn worked (the time budget), if one did.
    out_of_budget: Option<Exhausted>,
    /// Where the turn's model request stands.
    request: Request,
    /// Whether somebody drained the turn (as opposed to its time budget draining it).
    drain_asked: bool,
    /// The turn's span.
    trace: TraceSpan,
}

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
    fn system_prompt(&self, deferred: Option<usize>) -> String {
        let mut prompt = self
            .config
            .system_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string());
        if let Some(count) = deferred {
            prompt.push_str(&format!(
                "\n\n{count} more tools are available but not listed directly. Find them with tool_search (its description lists them), read one's parameters with tool_describe, and run it with tool_call."
            ));
        }
        prompt
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

    /// Sends the next request of the running turn to the model, on the pool.
    fn request_model(&mut self, ctx: &mut Context<Self>, final_round: bool) {
        self.refresh_view();
        for note in std::mem::take(&mut self.steers) {
            self.conversation.push(ChatMessage::User {
                content: format!("[Note from the agent that gave you this task] {note}"),
            });
        }
        self.persist();
        let (turn_id, requests, token) = match self.turn.as_mut() {
            Some(turn) => {
                turn.requests += 1;
                turn.request = Request::Out;
                (turn.id.clone(), turn.requests, turn.token.clone())
            }
            None => return,
        };
        let (tools, deferred) = if final_round {
            (Vec::new(), None)
        } else {
            let assembly = assemble(
                &self.view,
                self.config.context_length,
                &self.config.tool_search,
            );
            let deferred = assembly.activated.then_some(assembly.deferred_count);
            (assembly.tools, deferred)
        };
        let mut messages = Vec::with_capacity(self.conversation.len() + 2);
        messages.push(ChatMessage::System {
            content: self.system_prompt(deferred),
        });
        messages.extend(self.conversation.iter().cloned());
        if final_round {
            let wrap_up = self.turn.as_ref().is_some_and(|t| t.wrap_up);
            messages.push(ChatMessage::User {
                content: if wrap_up {
                    "You are repeating calls whose results you already have. Do not call any tool and do not write JSON: answer now from the results above, in plain sentences.".to_string()
                } else {
                    format!(
                        "You have used all {} tool rounds allowed for this message. Do not call tools; answer now with what you have, and say what is left undone.",
                        self.config.max_iterations
                    )
                },
            });
        }
        let (notices, mut noticed) = tokio::sync::mpsc::unbounded_channel();
        let (stream, mut streamed) = if self.config.stream_text {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            (Some(sender), Some(receiver))
        } else {
            (None, None)
        };
        let mut request = ModelRequest {
            messages,
            tools,
            model: self.config.model.clone(),
            max_tokens: self.config.max_tokens,
            stream,
            notices: Some(notices),
            state: Some(Arc::clone(&self.model_state)),
        };
        self.hooks.pre_llm_call(&self.id, &mut request);
        // The span's name needs the model's; worked out only when spans are made.
        let model_name = if crate::trace::enabled() {
            request
                .model
                .clone()
                .or_else(|| self.provider.model())
                .unwrap_or_default()
        } else {
            String::new()
        };
        let model_span = TraceSpan::start(
            format!("chat {model_name}"),
            self.turn.as_ref().map_or(&self.trace, |t| &t.trace),
            opentelemetry::trace::SpanKind::Client,
            || {
                vec![
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.request.model", model_name.clone()),
                    KeyValue::new("troupe.iteration", i64::from(requests)),
                    KeyValue::new("troupe.tools_offered", request.tools.len() as i64),
                ]
            },
        );
        self.events.send(
            &self.id,
            EventKind::ModelRequest {
                turn_id: turn_id.clone(),
                iteration: requests,
                messages: request.messages.len(),
                tools: request.tools.len(),
            },
        );
        let provider = Arc::clone(&self.provider);
        let addr = ctx.address();
        let (events, session_id) = (self.events.clone(), self.id.clone());
        let span = tracing::info_span!("model_request", session_id = %self.id, turn_id = %turn_id, iteration = requests);
        tokio::spawn(
            async move {
                let answer = provider.complete(request, token.child_token());
                tokio::pin!(answer);
                // Retries and fallbacks become events while the request runs, all of them
                // before the answer is handled.
                let show = |notice| events.send(&session_id, notice_event(&turn_id, notice));
                let text = |delta| {
                    if let StreamDelta::Text(text) = delta {
                        let turn_id = turn_id.clone();
                        events.send(&session_id, EventKind::TextDelta { turn_id, text });
                    }
                };
                let result = loop {
                    tokio::select! {
                        result = &mut answer => break result,
                        Some(notice) = noticed.recv() => show(notice),
                        Some(delta) = next_delta(&mut streamed) => text(delta),
                        _ = token.cancelled() => break Err(ModelError::Cancelled),
                    }
                };
                while let Ok(notice) = noticed.try_recv() {
                    show(notice);
                }
                if let Some(streamed) = &mut streamed {
                    while let Ok(delta) = streamed.try_recv() {
                        text(delta);
                    }
                }
                if let Err(error) = &result {
                    tracing::warn!(%error, "model request failed");
                }
                addr.do_send(ModelAnswered {
                    turn_id,
                    final_round,
                    result,
                    span: model_span,
                });
            }
            .instrument(span),
        );
    }

    /// Turns the model's tool calls into call entries: arguments parsed, `tool_call` unwrapped,
    /// bridge lookups bound to the view.
    fn entries(&self, calls: &[ToolCallRequest]) -> Vec<CallEntry> {
        calls
            .iter()
            .enumerate()
            .map(|(index, call)| CallEntry {
                index,
                call_id: new_id(),
                model_call_id: call.id.clone(),
                tool: call.name.clone(),
                target: self.target(call),
            })
            .collect()
    }

    fn target(&self, call: &ToolCallRequest) -> CallTarget {
        match self.plain_target(call) {
            CallTarget::Tool { name, arguments } if name == DELEGATE_TASK => {
                self.delegate_target(name, arguments)
            }
            target => target,
        }
    }

    /// `delegate_task` (direct or through `tool_call`) runs here, with the session's state;
    /// a view without it (a leaf subagent) leaves the call to fail as an unknown tool.
    fn delegate_target(&self, name: String, arguments: Map<String, Value>) -> CallTarget {
        let Some(arbiter) = self.arbiter.clone().filter(|_| self.view.contains(&name)) else {
            return CallTarget::Tool { name, arguments };
        };
        let background = if self.delegates_in_background() {
            self.me
                .as_ref()
                .and_then(WeakAddr::upgrade)
                .map(Addr::recipient)
        } else {
            None
        };
        let context = DelegateContext {
            parent_id: self.id.clone(),
            parent_path: self.path.clone(),
            provider: Arc::clone(&self.provider),
            view: self.view.clone(),
            config: self.config.clone(),
            hooks: self.hooks.clone(),
            supervisor: self.supervisor.clone(),
            events: self.events.clone(),
            tracker: Arc::clone(&self.subagents),
            arbiter,
            lifetime: self.delegations.clone(),
            slots: Arc::clone(&self.slots),
            background,
            meter: Arc::clone(&self.meter),
        };
        CallTarget::Task {
            name,
            arguments,
            run: Box::new(move |arguments, cancel| {
                Box::pin(run_delegate_task(context, arguments, cancel))
            }),
        }
    }

    fn plain_target(&self, call: &ToolCallRequest) -> CallTarget {
        let arguments = match parse_arguments(&call.arguments) {
            Ok(arguments) => arguments,
            Err(result) => {
                return CallTarget::Invalid {
                    name: call.name.clone(),
                    result,
                };
            }
        };
        match call.name.as_str() {
            "tool_call" => match bridge::resolve(
                &self.view,
                &self.config.tool_search,
                &Value::Object(arguments.clone()),
            ) {
                Ok(resolved) => CallTarget::Tool {
                    name: resolved.name,
                    arguments: resolved.arguments,
                },
                Err(error) => CallTarget::Invalid {
                    // Name the tool the model meant, when the entry says, so hooks and events
                    // see it; otherwise the bridge itself.
                    name: bridge::tool_call::normalize_entries(&Value::Object(arguments.clone()))
                        .ok()
                        .and_then(|entries| entries.into_iter().next())
                        .map(|entry| entry.name)
                        .filter(|name| !name.is_empty())
                        .unwrap_or_else(|| "tool_call".to_string()),
                    result: ToolResult::error_json(error),
                },
            },
            "tool_search" | "tool_describe" => {
                let view = self.view.clone();
                let config = self.config.tool_search.clone();
                let name = call.name.clone();
                CallTarget::Lookup {
                    name: call.name.clone(),
                    arguments,
                    run: Box::new(move |arguments| bridge_lookup(&name, &view, &config, arguments)),
                }
            }
            name if !self.view.contains(name) => CallTarget::Invalid {
                name: call.name.clone(),
                result: ToolResult::error(crate::model::unknown_tool_message(
                    name,
                    &self.view,
                    &self.config.tool_search,
                )),
            },
            _ => CallTarget::Tool {
                name: call.name.clone(),
                arguments,
            },
        }
    }

    fn run_batch(&mut self, ctx: &mut Context<Self>, calls: Vec<ToolCallRequest>) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        if needs_starting_sources(&calls, &self.view, &self.config.tool_search) {
            // A search, or a tool the view lacks, while MCP servers are still starting: wait
            // for them (a stop ends the wait), then plan on the tools they brought.
            let view = self.view.clone();
            let token = turn.token.clone();
            let turn_id = turn.id.clone();
            let addr = ctx.address();
            tokio::spawn(async move {
                tokio::select! {
                    _ = view.wait_sources_settled(STARTING_SOURCES_WAIT) => {}
                    () = token.cancelled() => {}
                }
                addr.do_send(SourcesSettled { turn_id, calls });
            });
            return;
        }
        self.plan_and_run(ctx, calls);
    }

    /// How the repeat guard sees `call`: what it names, with what, and whether the tool that
    /// would run only reads.
    fn call_key(&self, call: &ToolCallRequest) -> CallKey {
        let target = self.plain_target(call);
        let tool = target.name();
        let annotated = self.view.get(tool).is_some_and(|d| d.hints.read_only);
        let read = !matches!(target, CallTarget::Invalid { .. }) && is_pure_read(tool, annotated);
        CallKey::new(&call.name, &call.arguments, read)
    }

    /// Answers a repeated batch with a note per call instead of running it, then asks the model
    /// again: for its answer, with no tools, when `wrap_up`.
    fn answer_repeats(
        &mut self,
        ctx: &mut Context<Self>,
        turn_id: &str,
        calls: &[ToolCallRequest],
        wrap_up: bool,
    ) {
        self.events.send(
            &self.id,
            EventKind::RepeatedCalls {
                turn_id: turn_id.to_string(),
                tools: calls.iter().map(|c| c.name.clone()).collect(),
                wrap_up,
            },
        );
        for call in calls {
            self.conversation.push(ChatMessage::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: ToolResult::error_json(json!({
                    "error": "repeated_call",
                    "message": REPEAT_NOTE,
                }))
                .to_model_text(),
            });
        }
        let final_round = wrap_up
            || self
                .turn
                .as_ref()
                .is_some_and(|t| t.requests >= self.config.max_iterations);
        self.request_model(ctx, final_round);
    }

    /// Plans the batch on the current view and runs it on the pool.
    fn plan_and_run(&mut self, ctx: &mut Context<Self>, calls: Vec<ToolCallRequest>) {
        if self.turn.is_none() {
            return;
        }
        // The model's message naming these calls is durable before any of them runs.
        self.persist();
        let written = self.written.take();
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let entries = self.entries(&calls);
        let batch = BatchContext {
            session_id: self.id.clone(),
            agent_path: self.path.clone(),
            turn_id: turn.id.clone(),
            view: self.view.clone(),
            hooks: self.hooks.clone(),
            supervisor: self.supervisor.clone(),
            events: self.events.clone(),
            token: turn.token.clone(),
            drain: turn.drain.clone(),
            trace: turn.trace.clone(),
            journal: self.config.persist.as_ref().map(|p| Arc::clone(&p.journal)),
        };
        let planner = self.planner.clone();
        let runner = self.runner;
        let addr = ctx.address();
        let span =
            tracing::info_span!("batch", session_id = %batch.session_id, turn_id = %batch.turn_id);
        tokio::spawn(
            async move {
                if let Some(written) = written {
                    written.await;
                }
                let plan = planner.plan(&entries, &batch.view).await;
                tracing::debug!(?plan, "batch planned");
                let outcomes = runner.run_batch(&batch, entries, &plan).await;
                addr.do_send(BatchFinished {
                    turn_id: batch.turn_id,
                    outcomes,
                });
            }
            .instrument(span),
        );
    }

    /// Ends the running turn with `text` and `status`, and answers the sender.
    fn finish_turn(&mut self, text: String, status: TurnStatus, error: Option<String>) {
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        self.meter.stop_work();
        self.written = None;
        self.persist();
        let spend = self.meter.spent().since(&turn.spent_before);
        turn.trace.set(|| {
            vec![
                KeyValue::new("troupe.turn.status", status.as_str()),
                KeyValue::new("troupe.model_requests", i64::from(turn.requests)),
                KeyValue::new("gen_ai.usage.input_tokens", spend.input_tokens as i64),
                KeyValue::new("gen_ai.usage.output_tokens", spend.output_tokens as i64),
                KeyValue::new("troupe.cost_usd", spend.cost_usd),
            ]
        });
        if status == TurnStatus::Failed {
            turn.trace
                .fail(error.clone().unwrap_or_else(|| text.clone()));
        }
        turn.trace.end();
        self.supervisor.do_send(EndTurn {
            session_id: self.id.clone(),
            turn_id: turn.id.clone(),
        });
        self.events.send(
            &self.id,
            EventKind::Final {
                turn_id: turn.id.clone(),
                text: text.clone(),
                status: status.as_str().to_string(),
                usage: spend,
            },
        );
        if let Some(reply) = turn.reply.take() {
            let outcome = TurnOutcome {
                turn_id: turn.id,
                text,
                status,
                model_requests: turn.requests,
                calls: turn.calls,
                error,
                spend,
            };
            match self.written.take() {
                // The caller hears the outcome once it is stored: an answer it was given is
                // never lost to a crash.
                Some(written) => {
                    tokio::spawn(async move {
                        written.await;
                        let _ = reply.send(outcome);
                    });
                }
                None => {
                    let _ = reply.send(outcome);
                }
            }
        }
        if self.delegations.is_cancelled() {
            // A hard stop ended this turn: what arrived waits for the user.
            self.held.append(&mut self.inbox);
        }
        if !self.inbox.is_empty()
            && let Some(me) = self.me.as_ref().and_then(WeakAddr::upgrade)
        {
            me.do_send(ReadInbox);
        }
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

    /// Starts a turn on `text`; `reply` receives the outcome (none for a turn the session
    /// starts itself to read background results).
    fn begin_turn(
        &mut self,
        ctx: &mut Context<Self>,
        text: String,
        reply: Option<oneshot::Sender<TurnOutcome>>,
    ) {
        // Calls a reopened session could have asked again: a new message goes first.
        if let Some(calls) = self.resume.take() {
            self.note_not_run(calls);
        }
        let waiting: Vec<String> = self.held.drain(..).chain(self.inbox.drain(..)).collect();
        for waiting in waiting {
            self.conversation
                .push(ChatMessage::User { content: waiting });
        }
        self.conversation.push(ChatMessage::User { content: text });
        if !self.undelivered.is_empty()
            && let Some(persist) = self.config.persist.clone()
        {
            // Read results are marked so only once the messages holding them are queued.
            self.persist();
            for id in self.undelivered.drain(..) {
                persist.journal.delegation(
                    &self.id,
                    &id,
                    crate::journal::DelegationState::Delivered,
                );
            }
        }
        if self.open_turn(ctx, reply) {
            self.request_model(ctx, self.config.max_iterations == 0);
        }
    }

    /// Opens a turn on the conversation as it is; false when its budget is already spent (the
    /// turn then ended at once).
    fn open_turn(
        &mut self,
        ctx: &mut Context<Self>,
        reply: Option<oneshot::Sender<TurnOutcome>>,
    ) -> bool {
        let turn_id = new_id();
        let token = self.lifetime.child_token();
        self.supervisor.do_send(BeginTurn {
            session_id: self.id.clone(),
            turn_id: turn_id.clone(),
            token: token.clone(),
        });
        self.events.send(
            &self.id,
            EventKind::TurnStarted {
                turn_id: turn_id.clone(),
            },
        );
        self.meter.start_work();
        let parent = self.next_turn_parent.take();
        let trace = TraceSpan::start(
            "turn",
            parent.as_ref().unwrap_or(&self.trace),
            opentelemetry::trace::SpanKind::Internal,
            || vec![KeyValue::new("troupe.turn.id", turn_id.clone())],
        );
        self.turn = Some(Turn {
            id: turn_id,
            token,
            requests: 0,
            reply,
            calls: Vec::new(),
            nudged: false,
            repeats: RepeatGuard::default(),
            running: Vec::new(),
            wrap_up: false,
            drain: CancellationToken::new(),
            spent_before: self.meter.spent(),
            out_of_budget: None,
            request: Request::Idle,
            drain_asked: false,
            trace,
        });
        self.model_state.begin_turn();
        if let Some(spent) = self.meter.exhausted() {
            let text = format!("Nothing was done: {spent}. Raise the budget to go on.");
            self.finish_turn(text, TurnStatus::BudgetExceeded, Some(spent.to_string()));
            return false;
        }
        if let Some(left) = self.meter.wall_left() {
            let turn_id = self.turn.as_ref().map(|t| t.id.clone()).unwrap_or_default();
            ctx.run_later(left, move |session, ctx| session.out_of_time(ctx, &turn_id));
        }
        true
    }

    /// The time budget ran out during the turn `turn_id`: it ends gently, as on a drain (the
    /// running calls finish, nothing new starts), with status `budget_exceeded`. While a model
    /// request is out, a person may be asked for more time first; the request goes on meanwhile.
    fn out_of_time(&mut self, ctx: &mut Context<Self>, turn_id: &str) {
        if !self.is_current(turn_id) {
            return;
        }
        let Some(spent) = self.meter.exhausted() else {
            return;
        };
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if matches!(turn.request, Request::AskingForTime(_)) {
            // Another timer for the same deadline: the person is being asked already.
            return;
        }
        tracing::info!(session_id = %self.id, %spent, "budget spent; the turn ends");
        turn.out_of_budget = Some(spent.clone());
        if !turn.running.is_empty() {
            turn.drain.cancel();
        } else if matches!(turn.request, Request::Out) && !turn.token.is_cancelled() {
            turn.request = Request::AskingForTime(None);
            self.ask_for_budget(ctx, spent, AfterExtension::Request);
        } else {
            turn.token.cancel();
        }
    }

    /// Ends the turn because `spent` ran out, answering with what the turn has: the model's
    /// latest text of this turn, if it wrote any.
    fn finish_over_budget(&mut self, spent: Exhausted) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let got = turn.calls.len();
        let said = self
            .conversation
            .iter()
            .rev()
            .take_while(|m| !matches!(m, ChatMessage::User { .. }))
            .find_map(|m| match m {
                ChatMessage::Assistant {
                    content: Some(text),
                    ..
                } if !text.trim().is_empty() => Some(text.trim().to_string()),
                _ => None,
            });
        let note = format!(
            "Stopped: {spent}. {got} tool call(s) of this turn got a result; nothing further was started."
        );
        let text = match said {
            Some(said) => format!("{said}\n\n{note}"),
            None => note,
        };
        self.finish_turn(text, TurnStatus::BudgetExceeded, Some(spent.to_string()));
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

/// A finish reason as the GenAI conventions write it.
fn finish_reason_name(reason: &crate::model::FinishReason) -> opentelemetry::StringValue {
    use crate::model::FinishReason;
    match reason {
        FinishReason::Stop => "stop".into(),
        FinishReason::ToolCalls => "tool_calls".into(),
        FinishReason::Length => "length".into(),
        FinishReason::Other(other) => other.clone().into(),
    }
}

/// The event for a provider's notice.
fn notice_event(turn_id: &str, notice: ModelNotice) -> EventKind {
    match notice {
        ModelNotice::Retrying {
            attempt,
            reason,
            error,
            wait,
        } => EventKind::ModelRetry {
            turn_id: turn_id.to_string(),
            attempt,
            reason: reason.as_str().to_string(),
            error,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        },
        ModelNotice::ToolCallsSwitched { to, reason } => EventKind::ToolCallsSwitched {
            turn_id: turn_id.to_string(),
            mode: to.as_str().to_string(),
            reason,
        },
    }
}

/// Parses a model's raw argument text: empty means `{}`; anything but a JSON object is refused.
fn parse_arguments(raw: &str) -> Result<Map<String, Value>, ToolResult> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ToolResult::error_json(json!({
            "error": "Invalid tool arguments",
            "message": format!("The arguments must be a JSON object, but this was {}. The tool was not run; send an object such as {{\"path\": \"README.md\"}}.", json_kind(&other)),
        }))),
        Err(error) => Err(ToolResult::error_json(json!({
            "error": "Invalid tool arguments",
            "message": format!("The arguments are not valid JSON ({error}). The tool was not run; send one JSON object."),
        }))),
    }
}

/// How long a call that may need a tool from a still-starting MCP server waits for it. Servers
/// that are not ready by then are left out of that batch; the bridge names them.
const STARTING_SOURCES_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a batch may need tools that a still-starting source brings: a search or describe,
/// a `tool_call` whose target the view cannot resolve, or a direct call to a tool it lacks.
fn needs_starting_sources(
    calls: &[ToolCallRequest],
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> bool {
    if view.sources_starting().is_empty() {
        return false;
    }
    calls.iter().any(|call| match call.name.as_str() {
        "tool_search" | "tool_describe" => true,
        "tool_call" => parse_arguments(&call.arguments).is_ok_and(|arguments| {
            bridge::resolve(view, config, &Value::Object(arguments)).is_err()
        }),
        name => !view.contains(name),
    })
}

/// Answers `tool_search` or `tool_describe` from the view.
fn bridge_lookup(
    name: &str,
    view: &ToolsetView,
    config: &ToolSearchConfig,
    arguments: Map<String, Value>,
) -> ToolResult {
    let args = Value::Object(arguments);
    let value = match name {
        "tool_describe" => bridge::tool_describe(view, config, &args),
        _ => bridge::tool_search(view, config, &args),
    };
    if value.get("error").is_some() {
        ToolResult::error_json(value)
    } else {
        ToolResult::json(value)
    }
}

impl Actor for Session {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.arbiter = actix_rt::Arbiter::try_current();
        self.me = Some(ctx.address().downgrade());
        if self.resume.is_none() && !self.inbox.is_empty() {
            // A reopened session with background results waiting reads them now.
            ctx.notify(ReadInbox);
        }
        self.watch_delegations();
        if let Some(persist) = &self.config.persist {
            persist.journal.opened(OpenedSession {
                id: self.id.clone(),
                agent_path: self.path.clone(),
                model: self
                    .config
                    .model
                    .clone()
                    .or_else(|| self.provider.model())
                    .unwrap_or_default(),
                origin: persist.origin.clone(),
            });
        }
        self.hooks.on_session_start(&self.id, &self.path);
        self.events.send(
            &self.id,
            EventKind::SessionStarted {
                agent_path: self.path.clone(),
                provider: self.provider.describe(),
            },
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.lifetime.cancel();
        if self.turn.is_some() {
            self.finish_turn(
                "The session closed before the turn ended.".into(),
                TurnStatus::Interrupted,
                None,
            );
        }
        self.supervisor.do_send(UnregisterSession {
            session_id: self.id.clone(),
        });
        self.hooks.on_session_end(&self.id, &self.path, "closed");
        self.trace.end();
        self.events.send(
            &self.id,
            EventKind::SessionEnded {
                reason: "closed".into(),
            },
        );
    }
}

/// A user message. Sent through [`SessionHandle::send`]; replies when the turn ends.
#[derive(Debug, Message)]
#[rtype(result = "Result<TurnOutcome, SessionError>")]
pub struct SendMessage {
    /// What the user said.
    pub text: String,
    /// The span the turn goes under (an HTTP request's `traceparent`); the session's when
    /// `None`.
    pub trace: Option<TraceSpan>,
}

impl Handler<SendMessage> for Session {
    type Result = ResponseFuture<Result<TurnOutcome, SessionError>>;

    fn handle(&mut self, msg: SendMessage, ctx: &mut Self::Context) -> Self::Result {
        if self.turn.is_some() {
            let id = self.id.clone();
            return Box::pin(async move { Err(SessionError::Busy(id)) });
        }
        if self.delegations.is_cancelled() && !self.lifetime.is_cancelled() {
            // The user is back after a hard stop: new delegations get a fresh token.
            self.delegations = self.lifetime.child_token();
            self.watch_delegations();
        }
        let (reply, answer) = oneshot::channel();
        self.next_turn_parent = msg.trace;
        self.begin_turn(ctx, msg.text, Some(reply));
        let id = self.id.clone();
        Box::pin(async move { answer.await.map_err(|_| SessionError::Closed(id)) })
    }
}

/// The next streamed delta, or never when the session does not stream.
async fn next_delta(
    streamed: &mut Option<tokio::sync::mpsc::UnboundedReceiver<StreamDelta>>,
) -> Option<StreamDelta> {
    match streamed {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The model answered (or failed). Sent by the session's own request task.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ModelAnswered {
    turn_id: String,
    final_round: bool,
    result: Result<ModelResponse, ModelError>,
    /// The request's span, ended here with what came back.
    span: TraceSpan,
}

impl Handler<ModelAnswered> for Session {
    type Result = ();

    fn handle(&mut self, msg: ModelAnswered, ctx: &mut Self::Context) {
        // What was spent counts even when the turn has moved on (stopped, superseded).
        let cost_usd = match &msg.result {
            Ok(response) => {
                let cost = self.cost_of(response.usage);
                self.meter.record(response.usage, cost);
                msg.span.set(|| {
                    vec![
                        KeyValue::new(
                            "gen_ai.usage.input_tokens",
                            response.usage.prompt_tokens as i64,
                        ),
                        KeyValue::new(
                            "gen_ai.usage.output_tokens",
                            response.usage.completion_tokens as i64,
                        ),
                        KeyValue::new(
                            "gen_ai.usage.cache_read.input_tokens",
                            response.usage.cached_tokens as i64,
                        ),
                        KeyValue::new(
                            "gen_ai.response.finish_reasons",
                            opentelemetry::Value::Array(
                                vec![finish_reason_name(&response.finish_reason)].into(),
                            ),
                        ),
                        KeyValue::new("troupe.tool_calls", response.tool_calls.len() as i64),
                        KeyValue::new("troupe.cost_usd", cost.unwrap_or(0.0)),
                    ]
                });
                cost
            }
            Err(error) => {
                msg.span.fail(error.to_string());
                None
            }
        };
        msg.span.end();
        if !self.is_current(&msg.turn_id) {
            return;
        }
        let answer = Answer {
            turn_id: msg.turn_id,
            final_round: msg.final_round,
            result: msg.result,
            cost_usd,
        };
        if let Some(turn) = self.turn.as_mut() {
            match &mut turn.request {
                Request::AskingForTime(held) => {
                    // Its fate is the person's verdict on the time budget.
                    *held = Some(answer);
                    return;
                }
                request => *request = Request::Idle,
            }
        }
        self.answered(ctx, answer);
    }
}

/// Where a turn's model request stands.
#[derive(Debug)]
enum Request {
    /// None is out.
    Idle,
    /// One is out.
    Out,
    /// The time budget ran out while one was out, and a person is asked for more time; the
    /// model's answer waits here if it comes back first.
    AskingForTime(Option<Answer>),
}

impl Turn {
    /// The person has answered about the time budget: the model's answer if it came back
    /// meanwhile, else `None` (the request is still out).
    fn time_question_settled(&mut self) -> Option<Answer> {
        match std::mem::replace(&mut self.request, Request::Out) {
            Request::AskingForTime(Some(answer)) => {
                self.request = Request::Idle;
                Some(answer)
            }
            Request::AskingForTime(None) => None,
            other => {
                self.request = other;
                None
            }
        }
    }
}

/// A model answer for the running turn, its usage already counted.
#[derive(Debug)]
struct Answer {
    turn_id: String,
    final_round: bool,
    result: Result<ModelResponse, ModelError>,
    cost_usd: Option<f64>,
}

impl Session {
    /// Goes on with the model's answer: ends the turn, or runs the calls it asks for.
    fn answered(&mut self, ctx: &mut Context<Self>, msg: Answer) {
        let cost_usd = msg.cost_usd;
        if let Some(spent) = self.turn.as_mut().and_then(|t| t.out_of_budget.take()) {
            self.finish_over_budget(spent);
            return;
        }
        if self.turn_stopped() {
            self.finish_turn(
                "The turn was stopped before the model answered.".into(),
                TurnStatus::Interrupted,
                None,
            );
            return;
        }
        let response = match msg.result {
            Ok(response) => response,
            Err(error) => {
                let text = format!("The model request failed: {error}");
                self.finish_turn(text, TurnStatus::Failed, Some(error.to_string()));
                return;
            }
        };
        self.hooks.post_llm_call(&self.id, &response);
        self.events.send(
            &self.id,
            EventKind::ModelUsage {
                turn_id: msg.turn_id.clone(),
                input_tokens: response.usage.prompt_tokens,
                output_tokens: response.usage.completion_tokens,
                cached_tokens: response.usage.cached_tokens,
                cost_usd,
            },
        );
        let empty = response.tool_calls.is_empty()
            && response
                .content
                .as_deref()
                .is_none_or(|t| t.trim().is_empty());
        if empty && !msg.final_round {
            // Nothing to show and nothing to run: ask once more, with a nudge.
            let Some(turn) = self.turn.as_mut() else {
                return;
            };
            if !turn.nudged {
                turn.nudged = true;
                self.conversation.push(ChatMessage::Assistant {
                    content: Some(String::new()),
                    tool_calls: Vec::new(),
                });
                self.conversation.push(ChatMessage::User {
                    content: crate::model::EMPTY_REPLY_NUDGE.to_string(),
                });
                self.events.send(
                    &self.id,
                    EventKind::ModelRetry {
                        turn_id: msg.turn_id,
                        attempt: turn.requests,
                        reason: crate::model::RetryReason::EmptyReply.as_str().to_string(),
                        error: "the model answered with no text and no tool call".to_string(),
                        wait_ms: 0,
                    },
                );
                self.request_model(ctx, false);
                return;
            }
            let text = "The model answered with nothing twice (no text, no tool call), even after a nudge; try again, or use a stronger model.".to_string();
            self.finish_turn(text.clone(), TurnStatus::Failed, Some(text));
            return;
        }
        let requests = self.turn.as_ref().map(|t| t.requests).unwrap_or(0);
        if response.tool_calls.is_empty() || msg.final_round {
            let text = response.content.unwrap_or_default();
            self.conversation.push(ChatMessage::Assistant {
                content: Some(text.clone()),
                tool_calls: Vec::new(),
            });
            let wrapped_up = self.turn.as_ref().is_some_and(|t| t.wrap_up);
            let status = if msg.final_round && self.config.max_iterations > 0 && !wrapped_up {
                TurnStatus::MaxIterations
            } else {
                TurnStatus::Completed
            };
            self.finish_turn(text, status, None);
            return;
        }
        tracing::debug!(requests, calls = response.tool_calls.len(), "tool round");
        if let Some(spent) = self.meter.exhausted() {
            // More work was asked for and there is no budget for it: a person may extend it,
            // or the calls are not run.
            self.ask_for_budget(ctx, spent, AfterExtension::Calls(response));
            return;
        }
        self.run_calls(ctx, response);
    }
}

/// What a turn that ran out of budget does once a person extends it.
#[derive(Debug)]
enum AfterExtension {
    /// Runs the calls of this response.
    Calls(ModelResponse),
    /// The model request that is out goes on (and its answer, if it came meanwhile, is used).
    Request,
    /// Goes on after a batch (asks the model again, unless the turn was stopped).
    Continue {
        /// The time budget drained the batch; an extension undoes that drain.
        drained_by_budget: bool,
    },
}

impl Session {
    /// Runs the calls the model asked for in `response` (or answers repeats without running).
    fn run_calls(&mut self, ctx: &mut Context<Self>, response: ModelResponse) {
        self.conversation.push(ChatMessage::Assistant {
            content: response.content.clone(),
            tool_calls: response.tool_calls.clone(),
        });
        let keys: Vec<CallKey> = response
            .tool_calls
            .iter()
            .map(|call| self.call_key(call))
            .collect();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let turn_id = turn.id.clone();
        match turn.repeats.check(&keys) {
            Decision::Run => {
                turn.running = keys;
                self.run_batch(ctx, response.tool_calls);
            }
            Decision::Repeat { wrap_up } => {
                turn.wrap_up = wrap_up;
                self.answer_repeats(ctx, &turn_id, &response.tool_calls, wrap_up);
            }
        }
    }

    /// The turn has more to do and `spent` ran out: the supervisor may ask a person to extend
    /// it (approvals on and somebody to answer). Extended, the turn goes on with `then`;
    /// otherwise it ends softly with status `budget_exceeded`.
    fn ask_for_budget(&mut self, ctx: &mut Context<Self>, spent: Exhausted, then: AfterExtension) {
        let (Some(turn), Some(extend_to)) = (self.turn.as_ref(), self.meter.extension_of(&spent))
        else {
            self.refuse_extension(spent, then);
            return;
        };
        let turn_id = turn.id.clone();
        let stopped = turn.token.clone();
        let supervisor = self.supervisor.clone();
        let ask = self.supervisor.send(RequestExtension {
            session_id: self.id.clone(),
            turn_id: turn_id.clone(),
            spent: spent.clone(),
            extend_to,
        });
        // A stop or a drain of the turn ends the wait at once and takes the question back (a
        // drain alone would leave it waiting for an answer nobody needs).
        let verdict = async move {
            match ask.await {
                Ok(Ticket::Settled(verdict)) => verdict,
                Ok(Ticket::Pending {
                    request_id,
                    mut verdict,
                }) => {
                    let answered = tokio::select! {
                        answer = &mut verdict => Some(answer.unwrap_or(Verdict::Interrupted)),
                        () = stopped.cancelled() => None,
                    };
                    answered.unwrap_or_else(|| {
                        // Dropped first: the supervisor withdraws a question nobody waits on.
                        drop(verdict);
                        supervisor.do_send(WithdrawApproval { request_id });
                        Verdict::Interrupted
                    })
                }
                Err(_) => Verdict::Interrupted,
            }
        };
        ctx.spawn(verdict.into_actor(self).map(move |verdict, session, ctx| {
            if !session.is_current(&turn_id) {
                return;
            }
            if verdict != Verdict::Approved || session.turn_stopped() {
                session.refuse_extension(spent, then);
                return;
            }
            session.meter.extend(&spent, extend_to);
            tracing::info!(session_id = %session.id, %spent, extend_to, "budget extended by a person");
            if let Some(more) = session.meter.exhausted() {
                // Another limit (or an ancestor's) is spent too: that is a question of its own.
                session.ask_for_budget(ctx, more, then);
                return;
            }
            if let Some(left) = session.meter.wall_left() {
                let turn_id = turn_id.clone();
                ctx.run_later(left, move |session, ctx| session.out_of_time(ctx, &turn_id));
            }
            match then {
                AfterExtension::Calls(response) => session.run_calls(ctx, response),
                AfterExtension::Request => {
                    let Some(turn) = session.turn.as_mut() else {
                        return;
                    };
                    turn.out_of_budget = None;
                    if let Some(answer) = turn.time_question_settled() {
                        session.answered(ctx, answer);
                    }
                }
                AfterExtension::Continue { drained_by_budget } => {
                    session.undo_budget_drain(drained_by_budget);
                    session.after_batch(ctx);
                }
            }
        }));
    }

    /// No more budget: the turn ends with what it has.
    fn refuse_extension(&mut self, spent: Exhausted, then: AfterExtension) {
        let response = match then {
            AfterExtension::Calls(response) => Some(response),
            AfterExtension::Request => {
                let Some(turn) = self.turn.as_mut() else {
                    return;
                };
                match turn.time_question_settled() {
                    Some(answer) => answer.result.ok(),
                    None => {
                        // The request is called off; its (cancelled) answer ends the turn.
                        turn.token.cancel();
                        return;
                    }
                }
            }
            AfterExtension::Continue { .. } => None,
        };
        if let Some(response) = response {
            // Its calls are not run, and the conversation keeps only the text (a call with
            // no result would be refused by the server at the next request).
            self.conversation.push(ChatMessage::Assistant {
                content: response.content,
                tool_calls: Vec::new(),
            });
        }
        self.finish_over_budget(spent);
    }
}

/// The MCP servers a batch waited for are ready (or the wait ended): plan and run it now.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct SourcesSettled {
    turn_id: String,
    calls: Vec<ToolCallRequest>,
}

impl Handler<SourcesSettled> for Session {
    type Result = ();

    fn handle(&mut self, msg: SourcesSettled, ctx: &mut Self::Context) {
        if !self.is_current(&msg.turn_id) {
            return;
        }
        // Whatever is still starting after the wait, the batch runs on what there is; the
        // bridge says which servers are not ready.
        self.refresh_view();
        self.plan_and_run(ctx, msg.calls);
    }
}

/// A tool batch finished; one outcome per call, in order. Sent by the session's batch task.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct BatchFinished {
    turn_id: String,
    outcomes: Vec<CallOutcome>,
}

impl Handler<BatchFinished> for Session {
    type Result = ();

    fn handle(&mut self, msg: BatchFinished, ctx: &mut Self::Context) {
        if !self.is_current(&msg.turn_id) {
            return;
        }
        for outcome in &msg.outcomes {
            self.conversation.push(ChatMessage::Tool {
                tool_call_id: outcome.model_call_id.clone(),
                name: outcome.tool.clone(),
                content: outcome.result.to_model_text(),
            });
        }
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let ok: Vec<bool> = msg
            .outcomes
            .iter()
            .map(|o| o.status == crate::call::CallStatus::Ok)
            .collect();
        let running = std::mem::take(&mut turn.running);
        turn.repeats.ran(&running, &ok);
        turn.calls.extend(msg.outcomes);
        let drained_by_budget = turn.out_of_budget.take().is_some();
        // Read again rather than kept from when time ran out: a person may have raised the
        // budget meanwhile (answering a subagent's question about it).
        if let Some(spent) = self.meter.exhausted() {
            if !self.turn_stopped() {
                self.ask_for_budget(ctx, spent, AfterExtension::Continue { drained_by_budget });
                return;
            }
            self.finish_over_budget(spent);
            return;
        }
        self.undo_budget_drain(drained_by_budget);
        self.after_batch(ctx);
    }
}

impl Session {
    /// The budget that drained the running batch has room again: the turn goes on, unless
    /// somebody drained it too.
    fn undo_budget_drain(&mut self, drained_by_budget: bool) {
        if let Some(turn) = self.turn.as_mut()
            && drained_by_budget
            && !turn.drain_asked
        {
            turn.drain = CancellationToken::new();
        }
    }

    /// A batch's results are in: the turn ends if it was stopped or drained, else the model
    /// is asked again.
    fn after_batch(&mut self, ctx: &mut Context<Self>) {
        let stopped = self.turn_stopped();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let drained = turn.drain.is_cancelled() && !stopped;
        if drained {
            let text = format!(
                "Stopped after the running calls finished ({} tool call(s) of this turn got a result); nothing new was started.",
                turn.calls.len()
            );
            self.finish_turn(text, TurnStatus::Interrupted, None);
            return;
        }
        if stopped {
            let text = format!(
                "Stopped. {} tool call(s) of this turn got a result; the rest were cancelled.",
                turn.calls
                    .iter()
                    .filter(|c| c.status != crate::call::CallStatus::Interrupted)
                    .count()
            );
            self.finish_turn(text, TurnStatus::Interrupted, None);
            return;
        }
        let final_round = turn.requests >= self.config.max_iterations;
        self.request_model(ctx, final_round);
    }
}

/// Ends the running turn gently: calls already running finish and their results are kept,
/// nothing new starts (no further model request or batch). With no batch running (the model is
/// being asked), the request is cancelled at once. Replies false when no turn is running.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Drain;

impl Handler<Drain> for Session {
    type Result = bool;

    fn handle(&mut self, _msg: Drain, _ctx: &mut Self::Context) -> bool {
        let Some(turn) = self.turn.as_mut() else {
            return false;
        };
        let turn_id = turn.id.clone();
        turn.drain_asked = true;
        if turn.running.is_empty() {
            turn.token.cancel();
        } else {
            turn.drain.cancel();
        }
        // Subagents at work under a running `delegate_task` drain too, each passing it down.
        let depth = self.path.len() + 1;
        for record in self.subagents.records_below(&self.id) {
            if record.session.agent_path().len() == depth {
                tokio::spawn(async move {
                    let _ = record.session.drain().await;
                });
            }
        }
        self.events.send(
            &self.id,
            EventKind::Stop {
                kind: "drain".into(),
                turn_id: Some(turn_id),
            },
        );
        true
    }
}

/// Closes the session: its running turn is cancelled and ends as interrupted.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CloseSession;

impl Handler<CloseSession> for Session {
    type Result = ();

    fn handle(&mut self, _msg: CloseSession, ctx: &mut Self::Context) {
        self.lifetime.cancel();
        ctx.stop();
    }
}

/// A note for a running subagent, read before its next model request. Sent by the parent's
/// `delegate_task` (`action=steer`); replies false when no turn is running (too late).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Steer {
    /// The note.
    pub text: String,
}

impl Handler<Steer> for Session {
    type Result = bool;

    fn handle(&mut self, msg: Steer, _ctx: &mut Self::Context) -> bool {
        if self.turn.is_none() {
            return false;
        }
        self.steers.push(msg.text);
        true
    }
}

impl Handler<DelegationFinished> for Session {
    type Result = ();

    fn handle(&mut self, msg: DelegationFinished, ctx: &mut Self::Context) {
        // Results of a stopped delegation, or any that come after a hard stop, wait for the
        // user's next message: a stopped agent must not start working again by itself.
        let hold = msg.stopped || self.delegations.is_cancelled();
        let start = !hold && self.turn.is_none();
        if let Some(persist) = &self.config.persist {
            persist.journal.delegation(
                &self.id,
                &msg.delegation_id,
                crate::journal::DelegationState::Arrived(msg.text.clone()),
            );
            self.undelivered.push(msg.delegation_id.clone());
        }
        self.events.send(
            &self.id,
            EventKind::DelegationDelivered {
                delegation_id: msg.delegation_id,
                started_turn: start,
            },
        );
        if start {
            self.begin_turn(ctx, msg.text, None);
        } else if hold {
            self.held.push(msg.text);
        } else {
            self.inbox.push(msg.text);
        }
    }
}

/// Reads waiting background results in a new turn, if the session is idle. Sent by the
/// session to itself when a turn ends with results waiting.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ReadInbox;

impl Handler<ReadInbox> for Session {
    type Result = ();

    fn handle(&mut self, _msg: ReadInbox, ctx: &mut Self::Context) {
        if self.turn.is_none() && !self.inbox.is_empty() && !self.delegations.is_cancelled() {
            let mut waiting = std::mem::take(&mut self.inbox);
            let last = waiting.pop().unwrap_or_default();
            self.inbox = waiting;
            self.begin_turn(ctx, last, None);
        }
    }
}

/// A copy of the conversation so far (without the system prompt).
#[derive(Debug, Message)]
#[rtype(result = "Vec<ChatMessage>")]
pub struct GetConversation;

impl Handler<GetConversation> for Session {
    type Result = MessageResult<GetConversation>;

    fn handle(&mut self, _msg: GetConversation, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.conversation.clone())
    }
}

/// Replaces the conversation of an idle session (a chat that changes its model or tools goes on
/// in a new session with the old messages); replies false while a turn runs.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct LoadConversation(pub Vec<ChatMessage>);

impl Handler<LoadConversation> for Session {
    type Result = bool;

    fn handle(&mut self, msg: LoadConversation, _ctx: &mut Self::Context) -> bool {
        if self.turn.is_some() {
            return false;
        }
        self.conversation = msg.0;
        self.persisted = 0;
        self.written = None;
        self.persist();
        true
    }
}

/// Goes on with the turn a reopened session stopped inside: the calls that were waiting for
/// approval are asked again and the turn continues as if it never stopped; with none, the
/// turn ends as interrupted. Replies `None` when there is no such turn.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<TurnOutcome>, SessionError>")]
pub struct ResumeTurn;

impl Handler<ResumeTurn> for Session {
    type Result = ResponseFuture<Result<Option<TurnOutcome>, SessionError>>;

    fn handle(&mut self, _msg: ResumeTurn, ctx: &mut Self::Context) -> Self::Result {
        if self.turn.is_some() {
            let id = self.id.clone();
            return Box::pin(async move { Err(SessionError::Busy(id)) });
        }
        let Some(calls) = self.resume.take() else {
            return Box::pin(async { Ok(None) });
        };
        let (reply, answer) = oneshot::channel();
        if self.meter.exhausted().is_none() {
            return self.resume_with(ctx, calls, reply, answer);
        }
        // No budget left to run them: they are noted as not run, and the turn ends at once.
        self.note_not_run(calls);
        self.open_turn(ctx, Some(reply));
        let id = self.id.clone();
        Box::pin(async move { answer.await.map(Some).map_err(|_| SessionError::Closed(id)) })
    }
}

impl Session {
    /// Gives each call a result saying it never ran (a reopened session's calls that were
    /// waiting for approval and will not be asked again).
    fn note_not_run(&mut self, calls: Vec<ToolCallRequest>) {
        for call in calls {
            self.conversation.push(ChatMessage::Tool {
                content: crate::journal::not_run_note(&call.name),
                tool_call_id: call.id,
                name: call.name,
            });
        }
    }

    /// [`ResumeTurn`] with budget left: asks for `calls` again, or ends the turn when none.
    fn resume_with(
        &mut self,
        ctx: &mut Context<Self>,
        calls: Vec<ToolCallRequest>,
        reply: oneshot::Sender<TurnOutcome>,
        answer: oneshot::Receiver<TurnOutcome>,
    ) -> ResponseFuture<Result<Option<TurnOutcome>, SessionError>> {
        if self.open_turn(ctx, Some(reply)) {
            if calls.is_empty() {
                self.finish_turn(
                    "troupe stopped while this turn was working, and it did not finish. Send the message again to go on.".into(),
                    TurnStatus::Interrupted,
                    None,
                );
            } else {
                let keys: Vec<CallKey> = calls.iter().map(|call| self.call_key(call)).collect();
                if let Some(turn) = self.turn.as_mut() {
                    turn.running = keys;
                }
                self.run_batch(ctx, calls);
            }
        }
        let id = self.id.clone();
        Box::pin(async move { answer.await.map(Some).map_err(|_| SessionError::Closed(id)) })
    }
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
        };
        let addr = session.start();
        Ok(SessionHandle {
            id,
            path,
            addr,
            supervisor: params.supervisor,
            events,
            subagents,
            meter,
        })
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
