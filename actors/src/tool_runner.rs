//! The [`ToolRunner`]: executes a planned batch of call entries on the tokio pool. Each entry
//! goes hooks → supervisor approval → run, with its own cancellation token (a child of the
//! turn's). At most 8 calls run at once; a deadline per parallel segment (per call in
//! sequential ones, default 420 s) that does not count time spent waiting on a person; results
//! in the model's order; exactly one result per call, whatever happened.
//!
//! It is not an actix actor: tool futures are `Send` and belong on the pool, and the session
//! only needs the finished batch back, which it receives as a message.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_tools::sync::lock;

use actix::Addr;
use futures::future::join_all;
use opentelemetry::KeyValue;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::SpanKind;
use serde_json::{Map, Value};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use troupe_tools::bridge::validate::check_arguments;
use troupe_tools::{
    CallContext, Content, Dispatch, ToolHints, ToolKind, ToolResult, ToolSearchConfig, ToolsetView,
};

use crate::batch_planner::{Plan, SegmentKind};
use crate::call::{CallEntry, CallOutcome, CallStatus, CallTarget, LookupFn, TaskFn};
use crate::events::{EventKind, EventSink};
use crate::hooks::{HookRegistry, ToolCallInfo};
use crate::journal::CallPhase;
use crate::script_calls::{SCRIPT_SOURCES_WAIT, ScriptRoute, batch_answer, route_script_call};
use crate::supervisor::{
    AskSecret, RecordWait, RequestApproval, Supervisor, Ticket, Verdict, WithdrawApproval,
    WithdrawSecret,
};
use crate::trace::TraceSpan;

/// Most calls that run at once in a parallel segment.
pub const MAX_PARALLEL_CALLS: usize = 8;

/// Default deadline of a parallel segment (and of each sequential call).
pub const DEFAULT_BATCH_DEADLINE: Duration = Duration::from_secs(420);

/// How long a cancelled call may take to wind down before it is abandoned.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(3);

/// The runner's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerLimits {
    /// Most calls at once (clamped to 1..=8).
    pub max_parallel: usize,
    /// Deadline of a parallel segment and of each sequential call; `None` disables it.
    pub batch_deadline: Option<Duration>,
    /// Wind-down time of a cancelled call before it is abandoned.
    pub stop_grace: Duration,
}

impl Default for RunnerLimits {
    fn default() -> Self {
        RunnerLimits {
            max_parallel: MAX_PARALLEL_CALLS,
            batch_deadline: Some(DEFAULT_BATCH_DEADLINE),
            stop_grace: DEFAULT_STOP_GRACE,
        }
    }
}

/// Everything a batch's calls share.
#[derive(Clone)]
pub struct BatchContext {
    /// The session making the calls.
    pub session_id: String,
    /// Session ids from the root down to this session, for hooks.
    pub agent_path: Vec<String>,
    /// The turn they belong to.
    pub turn_id: String,
    /// The session's view: the only way to reach a tool.
    pub view: ToolsetView,
    /// How the session's bridge searches and resolves (a script's `tool_call` and
    /// `tool_search` are resolved with it, as the model's are).
    pub search: ToolSearchConfig,
    /// The session's hooks.
    pub hooks: HookRegistry,
    /// Where approvals are asked.
    pub supervisor: Addr<Supervisor>,
    /// Where events go.
    pub events: EventSink,
    /// The turn's token: a stop cancels it, and with it every call's token.
    pub token: CancellationToken,
    /// Fires on a drain: calls that have not started never do; running ones go on.
    pub drain: CancellationToken,
    /// The span the calls' spans go under (the turn's, or a script's call).
    pub trace: TraceSpan,
    /// The session's journal: a call waiting for a person, and an approved one before it runs,
    /// are recorded there first.
    pub journal: Option<Arc<dyn crate::journal::Journal>>,
}

impl BatchContext {
    /// Whether a call that has not started yet may still start.
    fn may_start(&self) -> bool {
        !self.token.is_cancelled() && !self.drain.is_cancelled()
    }
}

/// Runs batches. Cheap to copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolRunner {
    limits: RunnerLimits,
}

/// Identity of a call entry, kept for its result slot.
#[derive(Debug, Clone)]
struct Meta {
    index: usize,
    call_id: String,
    model_call_id: String,
    tool: String,
    underlying: String,
    arguments: Map<String, Value>,
    /// Notes hooks asked to add to the result.
    notes: Vec<String>,
    started: Instant,
    /// Time spent waiting for a person's approval: not part of the call's run time.
    approval_wait: Duration,
    /// The call's span, named after the underlying tool.
    span: TraceSpan,
}

/// What runs once approval is settled.
enum Runnable {
    Tool { name: String },
    Lookup { run: LookupFn },
    Task { run: TaskFn },
}

/// A call after hooks and the approval request, before it runs.
enum Prepared {
    /// Already decided (bad arguments, blocked by a hook or a rule).
    Done(Meta, CallStatus, ToolResult),
    /// Waiting for its ticket, then runs.
    Ready(Meta, Runnable, Ticket),
}

impl ToolRunner {
    /// A runner with `limits`.
    pub fn new(limits: RunnerLimits) -> Self {
        ToolRunner {
            limits: RunnerLimits {
                max_parallel: limits.max_parallel.clamp(1, MAX_PARALLEL_CALLS),
                ..limits
            },
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> RunnerLimits {
        self.limits
    }

    /// Runs `entries` as `plan` says and returns one outcome per entry, in entry order.
    pub async fn run_batch(
        &self,
        ctx: &BatchContext,
        entries: Vec<CallEntry>,
        plan: &Plan,
    ) -> Vec<CallOutcome> {
        let count = entries.len();
        let mut pending: Vec<Option<CallEntry>> = entries.into_iter().map(Some).collect();
        let mut slots: Vec<Option<CallOutcome>> = vec![None; count];
        for segment in &plan.segments {
            let mut segment_entries = Vec::new();
            for &index in &segment.calls {
                if let Some(entry) = pending.get_mut(index).and_then(Option::take) {
                    segment_entries.push(entry);
                }
            }
            let outcomes = match segment.kind {
                SegmentKind::Sequential => self.run_sequential(ctx, segment_entries).await,
                SegmentKind::Parallel => self.run_parallel(ctx, segment_entries).await,
            };
            for outcome in outcomes {
                let index = outcome.index;
                if let Some(slot) = slots.get_mut(index) {
                    *slot = Some(outcome);
                }
            }
        }
        // A plan that missed a call still yields a slot for it, run one at a time.
        let leftovers: Vec<CallEntry> = pending.into_iter().flatten().collect();
        if !leftovers.is_empty() {
            tracing::warn!(
                count = leftovers.len(),
                "plan left calls out; running them in order"
            );
            for outcome in self.run_sequential(ctx, leftovers).await {
                let index = outcome.index;
                if let Some(slot) = slots.get_mut(index) {
                    *slot = Some(outcome);
                }
            }
        }
        slots.into_iter().flatten().collect()
    }

    async fn run_sequential(
        &self,
        ctx: &BatchContext,
        entries: Vec<CallEntry>,
    ) -> Vec<CallOutcome> {
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            if !ctx.may_start() {
                out.push(self.never_started(ctx, entry));
                continue;
            }
            let deadline = Deadline::new(self.limits.batch_deadline);
            let prepared = self.prepare(ctx, entry).await;
            out.push(self.execute(ctx, prepared, &deadline, None).await);
        }
        out
    }

    async fn run_parallel(&self, ctx: &BatchContext, entries: Vec<CallEntry>) -> Vec<CallOutcome> {
        let deadline = Deadline::new(self.limits.batch_deadline);
        let semaphore = Semaphore::new(self.limits.max_parallel);
        // Hooks and approval requests go out in call order, so prompts appear in that order.
        let mut prepared = Vec::with_capacity(entries.len());
        let mut out = Vec::new();
        for entry in entries {
            if !ctx.may_start() {
                out.push(self.never_started(ctx, entry));
            } else {
                prepared.push(self.prepare(ctx, entry).await);
            }
        }
        let runs = prepared
            .into_iter()
            .map(|p| self.execute(ctx, p, &deadline, Some(&semaphore)));
        out.extend(join_all(runs).await);
        out.sort_by_key(|o| o.index);
        out
    }

    /// A call the stop reached before it began: it still gets its slot and its hooks.
    fn never_started(&self, ctx: &BatchContext, entry: CallEntry) -> CallOutcome {
        let meta = start(ctx, &entry);
        let text = format!(
            "[Cancelled: {} was not started because the turn was stopped.]",
            meta.underlying
        );
        finish(ctx, meta, CallStatus::Interrupted, ToolResult::error(text))
    }

    async fn prepare(&self, ctx: &BatchContext, entry: CallEntry) -> Prepared {
        let mut meta = start(ctx, &entry);
        let (runnable, arguments) = match entry.target {
            CallTarget::Invalid { result, .. } => {
                return Prepared::Done(meta, CallStatus::Error, result);
            }
            CallTarget::Tool { name, arguments } => (Runnable::Tool { name }, arguments),
            CallTarget::Lookup { run, arguments, .. } => (Runnable::Lookup { run }, arguments),
            CallTarget::Task { run, arguments, .. } => (Runnable::Task { run }, arguments),
        };
        meta.arguments = arguments;
        let decided = {
            let info = ToolCallInfo {
                session_id: &ctx.session_id,
                agent_path: &ctx.agent_path,
                call_id: &meta.call_id,
                tool: &meta.tool,
                underlying_tool: &meta.underlying,
                arguments: &meta.arguments,
            };
            ctx.hooks.pre_tool_call(&info).await
        };
        let rewritten_by = match decided {
            Ok(outcome) => {
                meta.notes = outcome.notes;
                if let Some(rewritten) = outcome.arguments {
                    meta.arguments = rewritten;
                }
                outcome.rewritten_by
            }
            Err(reason) => {
                return Prepared::Done(meta, CallStatus::Denied, ToolResult::error(reason));
            }
        };
        let ticket = match &runnable {
            // Session-answered work asks nothing itself: each child's own calls are checked.
            Runnable::Lookup { .. } | Runnable::Task { .. } => Ticket::Settled(Verdict::Allowed),
            Runnable::Tool { name } => {
                let Some(def) = ctx.view.runnable(name) else {
                    let text = format!(
                        "There is no tool called '{name}' in this session. Use one of the tools you were given, or tool_search to find a deferred one."
                    );
                    return Prepared::Done(meta, CallStatus::Error, ToolResult::error(text));
                };
                // Rewritten arguments are checked again: a hook must not hand a tool what the
                // model could not have sent.
                if !rewritten_by.is_empty() {
                    let check = check_arguments(name, def.parameters(), &meta.arguments);
                    if let Some(error) = check.error {
                        let text = format!(
                            "The hook(s) {} rewrote the arguments of '{name}' into ones its schema refuses, so the call was not run: {}",
                            rewritten_by.join(", "),
                            error
                                .get("error")
                                .and_then(Value::as_str)
                                .map_or_else(|| error.to_string(), str::to_string)
                        );
                        return Prepared::Done(meta, CallStatus::Denied, ToolResult::error(text));
                    }
                    meta.arguments = check.arguments;
                }
                let (kind, hints): (ToolKind, ToolHints) = (def.kind, def.hints.clone());
                let request = RequestApproval {
                    session_id: ctx.session_id.clone(),
                    call_id: meta.call_id.clone(),
                    tool: name.clone(),
                    kind: Some(kind),
                    hints,
                    arguments: meta.arguments.clone(),
                    record: ctx.journal.as_ref().map(|journal| {
                        let journal = Arc::clone(journal);
                        let (session, call) = (ctx.session_id.clone(), meta.model_call_id.clone());
                        Box::new(move |arguments: &Map<String, Value>| {
                            // Arguments with secrets are stored masked, so such a call cannot
                            // be asked for again as it was after a restart.
                            let raw = Value::Object(arguments.clone()).to_string();
                            let phase = if troupe_tools::builtin::redact::redact(&raw) == raw {
                                CallPhase::AwaitingApproval
                            } else {
                                CallPhase::AwaitingMasked
                            };
                            journal.call_phase(&session, &call, phase)
                        }) as RecordWait
                    }),
                };
                match ctx.supervisor.send(request).await {
                    Ok(ticket) => ticket,
                    Err(error) => {
                        tracing::error!(%error, "supervisor unreachable; refusing the call");
                        let text = "The approval service is not running, so this call was not run. Try again later.";
                        return Prepared::Done(meta, CallStatus::Denied, ToolResult::error(text));
                    }
                }
            }
        };
        Prepared::Ready(meta, runnable, ticket)
    }

    async fn execute(
        &self,
        ctx: &BatchContext,
        prepared: Prepared,
        deadline: &Deadline,
        semaphore: Option<&Semaphore>,
    ) -> CallOutcome {
        let (mut meta, runnable, ticket) = match prepared {
            Prepared::Done(meta, status, result) => return finish(ctx, meta, status, result),
            Prepared::Ready(meta, runnable, ticket) => (meta, runnable, ticket),
        };
        let asked_person = matches!(ticket, Ticket::Pending { .. });
        let verdict = match ticket {
            Ticket::Settled(verdict) => verdict,
            Ticket::Pending {
                request_id,
                verdict,
            } => {
                let _waiting = deadline.human_wait();
                let asked = Instant::now();
                let wait =
                    TraceSpan::start("approval_wait", &meta.span, SpanKind::Internal, || {
                        vec![KeyValue::new(
                            "troupe.approval.request_id",
                            request_id.clone(),
                        )]
                    });
                let answer = tokio::select! {
                    answer = verdict => answer.unwrap_or(Verdict::Interrupted),
                    _ = ctx.token.cancelled() => {
                        ctx.supervisor.do_send(WithdrawApproval { request_id });
                        Verdict::Interrupted
                    }
                };
                meta.approval_wait = asked.elapsed();
                wait.set(|| {
                    vec![KeyValue::new(
                        "troupe.approval.verdict",
                        verdict_name(&answer),
                    )]
                });
                wait.end();
                answer
            }
        };
        if asked_person
            && matches!(verdict, Verdict::Approved)
            && let Some(journal) = &ctx.journal
        {
            // Durable before it runs: reopened after a crash, it is never asked for again.
            journal
                .call_phase(&ctx.session_id, &meta.model_call_id, CallPhase::Approved)
                .await;
        }
        let approved = match verdict {
            Verdict::Allowed => false,
            Verdict::Approved => true,
            // Only questions are answered in words; a call never is, so it does not run.
            Verdict::Denied(text) | Verdict::Answered(text) => {
                return finish(ctx, meta, CallStatus::Denied, ToolResult::error(text));
            }
            Verdict::TimedOut(text) => {
                return finish(ctx, meta, CallStatus::Timeout, ToolResult::error(text));
            }
            Verdict::Interrupted => {
                let text = format!(
                    "[Cancelled: {} was not started because the turn was stopped while it waited for approval.]",
                    meta.underlying
                );
                return finish(ctx, meta, CallStatus::Interrupted, ToolResult::error(text));
            }
        };
        let _permit = match semaphore {
            None => None,
            Some(semaphore) => tokio::select! {
                permit = semaphore.acquire() => permit.ok(),
                _ = ctx.token.cancelled() => return self.cancelled_before_start(ctx, meta),
                _ = ctx.drain.cancelled() => return self.cancelled_before_start(ctx, meta),
                _ = deadline.expired() => return self.timed_out_before_start(ctx, meta, deadline),
            },
        };
        if !ctx.may_start() {
            return self.cancelled_before_start(ctx, meta);
        }
        let call_token = ctx.token.child_token();
        let call_ctx = CallContext::new(
            ctx.session_id.clone(),
            meta.call_id.clone(),
            call_token.clone(),
        )
        .with_approval(approved)
        .with_person_approval(approved && asked_person)
        // Only a root session may ask its person for a secret; subagents never prompt.
        .with_secrets((ctx.agent_path.len() <= 1).then(|| {
            Arc::new(SupervisorSecrets {
                supervisor: ctx.supervisor.clone(),
                session_id: ctx.session_id.clone(),
            }) as Arc<dyn troupe_tools::AskSecret>
        }))
        // A tool that calls tools (execute_code's scripts) goes through this same runner: the
        // session's view, hooks and approvals, never around them.
        .with_dispatch(RunnerDispatch::new(
            *self,
            BatchContext {
                trace: meta.span.clone(),
                ..ctx.clone()
            },
        ));
        let arguments = meta.arguments.clone();
        // Subagents have their own inactivity limit; the batch deadline would cut healthy ones.
        let bounded = !matches!(runnable, Runnable::Task { .. });
        let mut handle = match runnable {
            Runnable::Tool { name } => {
                let view = ctx.view.clone();
                let span = tracing::info_span!("call", call_id = %meta.call_id, tool = %name);
                spawn_under(
                    &meta.span,
                    async move { view.call(&name, arguments, call_ctx).await }.instrument(span),
                )
            }
            Runnable::Lookup { run } => {
                let span =
                    tracing::info_span!("call", call_id = %meta.call_id, tool = %meta.underlying);
                tokio::spawn(run(arguments).instrument(span))
            }
            Runnable::Task { run } => {
                let span =
                    tracing::info_span!("call", call_id = %meta.call_id, tool = %meta.underlying);
                spawn_under(
                    &meta.span,
                    run(arguments, call_token.clone()).instrument(span),
                )
            }
        };
        let stopped = tokio::select! {
            joined = &mut handle => {
                let result = joined.unwrap_or_else(|error| {
                    ToolResult::error(format!("The tool '{}' crashed while running ({error}); it gave no result.", meta.underlying))
                });
                if !ctx.token.is_cancelled() {
                    let status = if result.is_error { CallStatus::Error } else { CallStatus::Ok };
                    return finish(ctx, meta, status, result);
                }
                // It returned because the stop reached it through its own token.
                let mut text = format!("[Cancelled: {} was stopped by the user while it ran.]", meta.underlying);
                append_late(&mut text, Some(result.to_model_text()));
                return finish(ctx, meta, CallStatus::Interrupted, ToolResult::error(text));
            }
            _ = ctx.token.cancelled() => CallStatus::Interrupted,
            _ = deadline.expired(), if bounded => CallStatus::Timeout,
        };
        // Stop the call and give it a moment to wind down (kill its processes, cancel its MCP
        // request); past the grace it is abandoned, never left running.
        call_token.cancel();
        let late = match tokio::time::timeout(self.limits.stop_grace, &mut handle).await {
            Ok(Ok(result)) => Some(result.to_model_text()),
            _ => {
                handle.abort();
                None
            }
        };
        let mut text = match stopped {
            CallStatus::Timeout => format!(
                "Error running '{}': it did not finish within {:.1} s and was stopped.",
                meta.underlying,
                deadline.budget_secs()
            ),
            _ => format!(
                "[Cancelled: {} was stopped by the user while it ran.]",
                meta.underlying
            ),
        };
        append_late(&mut text, late);
        finish(ctx, meta, stopped, ToolResult::error(text))
    }

    fn cancelled_before_start(&self, ctx: &BatchContext, meta: Meta) -> CallOutcome {
        let text = format!(
            "[Cancelled: {} was not started because the turn was stopped.]",
            meta.underlying
        );
        finish(ctx, meta, CallStatus::Interrupted, ToolResult::error(text))
    }

    fn timed_out_before_start(
        &self,
        ctx: &BatchContext,
        meta: Meta,
        deadline: &Deadline,
    ) -> CallOutcome {
        let text = format!(
            "Error running '{}': the batch ran out of time ({:.1} s) before this call could start.",
            meta.underlying,
            deadline.budget_secs()
        );
        finish(ctx, meta, CallStatus::Timeout, ToolResult::error(text))
    }
}

/// Adds what a stopped tool said as it wound down, if anything.
fn append_late(text: &mut String, late: Option<String>) {
    if let Some(late) = late.filter(|t| !t.trim().is_empty()) {
        text.push_str("\nWhat it reported as it stopped:\n");
        text.push_str(&late);
    }
}

/// Emits the start event and opens the call's slot.
fn start(ctx: &BatchContext, entry: &CallEntry) -> Meta {
    let meta = Meta {
        index: entry.index,
        call_id: entry.call_id.clone(),
        model_call_id: entry.model_call_id.clone(),
        tool: entry.tool.clone(),
        underlying: entry.underlying().to_string(),
        arguments: Map::new(),
        notes: Vec::new(),
        started: Instant::now(),
        approval_wait: Duration::ZERO,
        span: TraceSpan::start(
            format!("execute_tool {}", entry.underlying()),
            &ctx.trace,
            SpanKind::Internal,
            || {
                vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", entry.underlying().to_string()),
                    KeyValue::new("gen_ai.tool.call.id", entry.model_call_id.clone()),
                    KeyValue::new("troupe.call.id", entry.call_id.clone()),
                    KeyValue::new("troupe.call.tool", entry.tool.clone()),
                ]
            },
        ),
    };
    ctx.events.send(
        &ctx.session_id,
        EventKind::ToolCallStarted {
            turn_id: ctx.turn_id.clone(),
            call_id: meta.call_id.clone(),
            model_call_id: meta.model_call_id.clone(),
            tool: meta.tool.clone(),
            underlying_tool: meta.underlying.clone(),
            brief: entry
                .arguments()
                .map(crate::events::brief_arguments)
                .unwrap_or_default(),
        },
    );
    meta
}

/// Closes a call's slot: the post hook (exactly once), the finish event, the outcome.
fn finish(
    ctx: &BatchContext,
    meta: Meta,
    status: CallStatus,
    mut result: ToolResult,
) -> CallOutcome {
    // troupe's own keys reach neither the model nor a hook, a trace or the store, whichever
    // tool printed them (a file read, an MCP server's answer).
    troupe_tools::builtin::redact::mask_own_secrets_in(&mut result);
    for note in &meta.notes {
        result
            .content
            .push(Content::Text(format!("[Note from a hook: {note}]")));
    }
    let info = ToolCallInfo {
        session_id: &ctx.session_id,
        agent_path: &ctx.agent_path,
        call_id: &meta.call_id,
        tool: &meta.tool,
        underlying_tool: &meta.underlying,
        arguments: &meta.arguments,
    };
    ctx.hooks.post_tool_call(&info, status, &result);
    // A call's time is its own: the wait for a person's answer is reported apart.
    let duration = meta.started.elapsed().saturating_sub(meta.approval_wait);
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    meta.span.set(|| {
        use crate::trace::{CallText, call_text};
        // Written straight from the map (no copy of it); masking is left to `call_text`.
        let arguments = serde_json::to_string(&meta.arguments).unwrap_or_default();
        vec![
            KeyValue::new("troupe.call.status", status.as_str()),
            KeyValue::new("troupe.call.run_ms", millis(duration) as i64),
            KeyValue::new(
                "troupe.call.approval_wait_ms",
                millis(meta.approval_wait) as i64,
            ),
            call_text(CallText::Arguments, arguments, &meta.underlying),
            call_text(CallText::Result, result.to_model_text(), &meta.underlying),
        ]
    });
    if status != CallStatus::Ok {
        meta.span.fail(status.as_str());
    }
    meta.span.end();
    ctx.events.send(
        &ctx.session_id,
        EventKind::ToolCallFinished {
            turn_id: ctx.turn_id.clone(),
            call_id: meta.call_id.clone(),
            model_call_id: meta.model_call_id.clone(),
            tool: meta.tool.clone(),
            underlying_tool: meta.underlying.clone(),
            status,
            duration_ms: millis(duration),
            approval_wait_ms: millis(meta.approval_wait),
        },
    );
    CallOutcome {
        index: meta.index,
        call_id: meta.call_id,
        model_call_id: meta.model_call_id,
        tool: meta.tool,
        underlying_tool: meta.underlying,
        status,
        result,
        duration,
        approval_wait: meta.approval_wait,
    }
}

/// A deadline that stands still while any call of its segment waits on a person.
struct Deadline {
    budget: Option<Duration>,
    start: Instant,
    waits: Mutex<HumanWaits>,
    changed: Notify,
}

#[derive(Default)]
struct HumanWaits {
    active: usize,
    since: Option<Instant>,
    total: Duration,
}

/// Marks a person-wait in progress; ends it on drop.
struct HumanWaitGuard<'a>(&'a Deadline);

impl Drop for HumanWaitGuard<'_> {
    fn drop(&mut self) {
        let mut waits = lock(&self.0.waits);
        waits.active = waits.active.saturating_sub(1);
        if waits.active == 0
            && let Some(since) = waits.since.take()
        {
            waits.total += since.elapsed();
        }
        drop(waits);
        self.0.changed.notify_waiters();
    }
}

impl Deadline {
    fn new(budget: Option<Duration>) -> Self {
        Deadline {
            budget: budget.filter(|b| !b.is_zero()),
            start: Instant::now(),
            waits: Mutex::new(HumanWaits::default()),
            changed: Notify::new(),
        }
    }

    fn budget_secs(&self) -> f64 {
        self.budget.map(|b| b.as_secs_f64()).unwrap_or(0.0)
    }

    fn human_wait(&self) -> HumanWaitGuard<'_> {
        let mut waits = lock(&self.waits);
        if waits.active == 0 {
            waits.since = Some(Instant::now());
        }
        waits.active += 1;
        drop(waits);
        self.changed.notify_waiters();
        HumanWaitGuard(self)
    }

    /// Resolves once the budget is spent, not counting person-waits; never without a budget.
    async fn expired(&self) {
        let Some(budget) = self.budget else {
            return std::future::pending().await;
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (active, excluded) = {
                let waits = lock(&self.waits);
                let current = waits.since.map(|s| s.elapsed()).unwrap_or_default();
                (waits.active, waits.total + current)
            };
            if active > 0 {
                changed.await;
                continue;
            }
            let used = self.start.elapsed().saturating_sub(excluded);
            if used >= budget {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(budget - used) => {}
                _ = changed => {}
            }
        }
    }
}

/// Runs calls that a tool makes on the session's behalf (`execute_code`'s stubs) through the
/// same hooks, approvals and view as the model's own calls.
pub struct RunnerDispatch {
    runner: ToolRunner,
    ctx: BatchContext,
}

impl RunnerDispatch {
    /// A dispatcher for calls of `ctx`'s session.
    pub fn new(runner: ToolRunner, ctx: BatchContext) -> Arc<Self> {
        Arc::new(RunnerDispatch { runner, ctx })
    }
}

impl Dispatch for RunnerDispatch {
    fn dispatch(
        &self,
        tool: String,
        arguments: Map<String, Value>,
        call: CallContext,
    ) -> futures::future::BoxFuture<'static, ToolResult> {
        let runner = self.runner;
        let mut ctx = BatchContext {
            token: call.cancel.clone(),
            ..self.ctx.clone()
        };
        Box::pin(async move {
            // As for the model's own calls: a search, or a tool the view lacks, waits for MCP
            // servers still starting, then sees the tools they brought.
            let bridged = matches!(tool.as_str(), "tool_search" | "tool_describe" | "tool_call");
            if (bridged || !ctx.view.contains(&tool)) && !ctx.view.sources_starting().is_empty() {
                tokio::select! {
                    _ = ctx.view.wait_sources_settled(SCRIPT_SOURCES_WAIT) => {}
                    () = ctx.token.cancelled() => {}
                }
            }
            if ctx.view.is_stale()
                && let Ok(view) = ctx.view.refreshed()
            {
                ctx.view = view;
            }
            let routed = route_script_call(tool.clone(), arguments, &ctx.view, &ctx.search);
            let batch = matches!(routed, Ok(ScriptRoute::Batch(_)));
            let targets = match routed {
                Ok(ScriptRoute::One(target)) => vec![target],
                Ok(ScriptRoute::Batch(targets)) => targets,
                Err(result) => return result,
            };
            let mut results = Vec::with_capacity(targets.len());
            for target in targets {
                let name = target.name().to_string();
                let entry = CallEntry {
                    index: 0,
                    call_id: crate::call::new_id(),
                    model_call_id: call.call_id.clone(),
                    tool: tool.clone(),
                    target,
                };
                let deadline = Deadline::new(runner.limits.batch_deadline);
                let prepared = runner.prepare(&ctx, entry).await;
                results.push((
                    name,
                    runner.execute(&ctx, prepared, &deadline, None).await.result,
                ));
            }
            match (batch, results.pop()) {
                (false, Some((_, result))) => result,
                (_, last) => batch_answer(results.into_iter().chain(last).collect()),
            }
        })
    }
}

/// Asks a root session's person for a secret through the supervisor (see
/// `supervisor/secret.rs`); nothing is asked when no answerer can take one.
struct SupervisorSecrets {
    supervisor: Addr<Supervisor>,
    session_id: String,
}

impl troupe_tools::AskSecret for SupervisorSecrets {
    fn ask_secret(
        &self,
        prompt: String,
        cancel: CancellationToken,
    ) -> futures::future::BoxFuture<'static, Option<String>> {
        let supervisor = self.supervisor.clone();
        let session_id = self.session_id.clone();
        Box::pin(async move {
            let (request_id, answer) = supervisor
                .send(AskSecret { session_id, prompt })
                .await
                .ok()
                .flatten()?;
            tokio::select! {
                answer = answer => answer.ok().flatten(),
                () = cancel.cancelled() => {
                    supervisor.do_send(WithdrawSecret { request_id });
                    None
                }
            }
        })
    }
}

/// Runs a call's work on the pool with the call's span as its current span, so what the work
/// starts (a subagent's session, a board task) goes under the call.
fn spawn_under<F>(span: &TraceSpan, work: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match span.context() {
        Some(cx) => tokio::spawn(work.with_context(cx.clone())),
        None => tokio::spawn(work),
    }
}

/// The word for an approval's answer on its span.
fn verdict_name(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Allowed => "allowed",
        Verdict::Approved => "approved",
        Verdict::Denied(_) => "denied",
        Verdict::TimedOut(_) => "timeout",
        Verdict::Interrupted => "interrupted",
        Verdict::Answered(_) => "answered",
    }
}
