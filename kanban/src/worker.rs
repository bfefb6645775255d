//! The [`Worker`] actor: runs one claimed task as a [`Session`](troupe_actors::session::Session)
//! whose tools are the profile's plus the kanban tools bound to that task.
//!
//! While it runs it renews its lease; when renewals keep failing (the database is out of reach)
//! it stops hard before the lease can lapse, so another host's run never overlaps it. Past the
//! task's `max_runtime` it is stopped softly, then hard after a grace. The task's
//! `kanban_complete` and `kanban_block` write the board and tell the worker so with a
//! [`TerminalNote`] message; the session's turn ends with such a call, without asking the model
//! again, and `kanban_complete` writes the run's spend with the completion. A fresh session
//! uses its profile's shared view ([`crate::worker_catalog`]), its kanban tools bound to the
//! task through the session. When the session ends it settles the run with the store: a terminal
//! call (complete or block) needs nothing more; ending without one, after reminders, is a protocol
//! violation; a model failure is a crash (or a rate-limited requeue); a timeout or a failed start
//! is recorded as such. Started by the [`Dispatcher`](crate::dispatcher::Dispatcher), to which it
//! reports with [`WorkerFinished`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use troupe_actors::session::{SessionConfig, SessionHandle, SessionParams, TurnStatus};
use troupe_actors::supervisor::Supervisor;
use troupe_actors::trace::TraceSpan;
use troupe_actors::usage::Spend;

use crate::dispatcher_config::DispatcherConfig;
use crate::domain::{BoardSlug, EventKind, Task, TaskId, TaskStatus, WorkerId};
use crate::evidence::EvidenceRecorder;
use crate::hooks::DispatcherHooks;
use crate::profiles::WorkerProfile;
use crate::review::ReviewPolicy;
use crate::review_agent::{AgentReview, ReviewEnd};
use crate::store::{Claim, Failure, FailureKind, Store, StoreError};
use crate::worker_context::{build_worker_context, nudge, system_prompt};
use crate::worker_tools::{TaskBinding, TerminalCall, TerminalNote, task_tools, task_view};

// A worker's reports are named here too, where callers have always found them.
pub use crate::reports::{WorkerOutcome, WorkerReport};

/// A worker ended. Sent by each [`Worker`] to its dispatcher as its last act.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct WorkerFinished(pub WorkerReport);

/// What a worker is given by the dispatcher.
pub struct WorkerParams {
    /// The board store.
    pub store: Arc<dyn Store>,
    /// The board.
    pub board: BoardSlug,
    /// The claim to run.
    pub claim: Claim,
    /// The lease holder.
    pub worker: WorkerId,
    /// The profile running it.
    pub profile: Arc<WorkerProfile>,
    /// Approvals and stops for the session.
    pub supervisor: Addr<Supervisor>,
    /// Hooks.
    pub hooks: DispatcherHooks,
    /// The dispatcher's settings (lease, heartbeat, grace, reminders, failure limit).
    pub config: DispatcherConfig,
    /// Where the final report goes.
    pub report_to: Recipient<WorkerFinished>,
    /// Profiles besides its own the worker may assign children to (the default assignee and
    /// `kanban.worker_assignable_profiles`).
    pub assignable: Vec<String>,
}

/// Why the worker was told to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StopCause {
    /// Past the max runtime.
    TimedOut,
    /// The board ended the run (archived, blocked, reclaimed, ...).
    Ended(EventKind),
    /// A heartbeat found the lease gone.
    LeaseLost(String),
    /// The dispatcher is stopping.
    Release,
}

/// State shared by the actor and its run future. The actor writes it as messages arrive
/// (stops, terminal notes); the run future reads it between turns.
#[derive(Default)]
struct Shared {
    session: Mutex<Option<SessionHandle>>,
    cause: Mutex<Option<StopCause>>,
    /// What the task's terminal tools reported, folded note by note.
    terminal: Mutex<TerminalCall>,
}

impl Shared {
    fn terminal(&self) -> TerminalCall {
        self.terminal
            .lock()
            .map(|t| t.clone())
            .unwrap_or(TerminalCall::None)
    }

    /// Whether a terminal call was made or is being made: a board event ending the run is then
    /// the worker's own doing, and a lost lease no reason to stop.
    fn has_terminal(&self) -> bool {
        self.terminal().is_made()
    }

    fn note_terminal(&self, note: TerminalNote) {
        if let Ok(mut slot) = self.terminal.lock() {
            *slot = std::mem::take(&mut *slot).after(note);
        }
    }

    fn session(&self) -> Option<SessionHandle> {
        self.session.lock().ok().and_then(|s| s.clone())
    }

    fn cause(&self) -> Option<StopCause> {
        self.cause.lock().ok().and_then(|c| c.clone())
    }

    /// Records the first stop cause; later ones do not replace it.
    fn set_cause(&self, cause: StopCause) -> bool {
        match self.cause.lock() {
            Ok(mut slot) if slot.is_none() => {
                *slot = Some(cause);
                true
            }
            _ => false,
        }
    }
}

/// Runs one claimed task; see the module doc.
pub struct Worker {
    /// Everything the dispatcher handed over.
    params: Arc<WorkerParams>,
    /// The session, the stop cause and the terminal call, shared with the run future.
    shared: Arc<Shared>,
    /// When the lease runs out unless renewed (local clock): set from the claim, moved on by
    /// every successful heartbeat. Past it the worker must stop, as another host may reclaim.
    lease_until: std::time::Instant,
}

impl Worker {
    /// A worker for `params` (start it with `Actor::start`, on an arbiter).
    pub fn new(params: WorkerParams) -> Worker {
        // The store's clock set the expiry; read it as time left from now, never more than the
        // TTL, so a skewed clock cannot stretch it.
        let left_ms = params
            .claim
            .lease
            .expires_at
            .millis()
            .saturating_sub(crate::domain::Timestamp::now().millis());
        let left =
            Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)).min(params.config.lease_ttl);
        Worker {
            params: Arc::new(params),
            shared: Arc::new(Shared::default()),
            lease_until: std::time::Instant::now() + left,
        }
    }

    /// Stops the run hard when the lease is about to run out without a successful renewal (the
    /// store could not be reached): another host may soon take the task back.
    fn check_lease(&self, why: &str) {
        // Stop while the lease still holds, one heartbeat short of its end: the next tick would
        // come too late, and another host may reclaim the moment it lapses.
        let config = &self.params.config;
        let margin = config.heartbeat_every().min(config.lease_ttl / 3);
        if std::time::Instant::now() + margin < self.lease_until || self.shared.has_terminal() {
            return;
        }
        self.stop_for(
            StopCause::LeaseLost(format!(
                "the lease could not be renewed and was about to run out ({why}); the run was stopped so it cannot overlap another host's"
            )),
            true,
        );
    }

    /// Stops the session: soft cancels the running turn; hard also stops its subtree and
    /// closes it, so the run ends even if a tool ignores the cancel.
    fn stop_session(&self, hard: bool) {
        let Some(session) = self.shared.session() else {
            return;
        };
        actix::spawn(async move {
            let _ = session.stop(hard).await;
            if hard {
                let _ = session.close().await;
            }
        });
    }

    fn stop_for(&self, cause: StopCause, hard: bool) {
        if self.shared.set_cause(cause.clone()) {
            tracing::info!(task = %self.task(), ?cause, hard, "stopping worker");
        }
        self.stop_session(hard);
    }
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let params = Arc::clone(&self.params);
        // Renew the lease while the run lasts; a refused renewal means the task is gone.
        ctx.run_interval(params.config.heartbeat_every(), |this, ctx| {
            // A heartbeat may hang in an outage rather than fail: look at the clock first.
            this.check_lease("no heartbeat got through");
            let p = Arc::clone(&this.params);
            let sent = std::time::Instant::now();
            let beat = async move {
                p.store
                    .heartbeat(&p.board, &p.claim.task.id, &p.worker, p.config.lease_ttl)
                    .await
            };
            ctx.spawn(
                beat.into_actor(this)
                    .map(move |result, this, _ctx| match result {
                        // Counted from when the renewal was sent: the store's expiry is no
                        // earlier than that.
                        Ok(_) => this.lease_until = sent + this.params.config.lease_ttl,
                        Err(
                            error @ (StoreError::LeaseNotHeld { .. }
                            | StoreError::InvalidTransition { .. }
                            | StoreError::TaskNotFound { .. }),
                        ) => {
                            if !this.shared.has_terminal() {
                                this.stop_for(StopCause::LeaseLost(error.to_string()), true);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "heartbeat failed; will retry until the lease runs out");
                            this.check_lease(&error.to_string());
                        }
                    }),
            );
        });
        if let Some(seconds) = params.claim.task.max_runtime_seconds {
            let limit = Duration::from_secs(seconds);
            let grace = params.config.stop_grace;
            ctx.run_later(limit, move |this, ctx| {
                this.stop_for(StopCause::TimedOut, false);
                ctx.run_later(grace, |this, _ctx| this.stop_session(true));
            });
        }
        // The task's tools report terminal calls to this actor, in its mailbox's order.
        let binding = TaskBinding::new(
            Arc::clone(&params.store),
            params.board.clone(),
            params.claim.task.id.clone(),
            params.worker.clone(),
            params.profile.name.clone(),
            params.config.lease_ttl,
            ctx.address().recipient(),
        )
        .with_assignable(params.assignable.clone())
        .with_review(params.profile.review.is_some());
        let run = run_task(
            Arc::clone(&params),
            Arc::new(binding),
            Arc::clone(&self.shared),
        );
        ctx.spawn(run.into_actor(self).map(|report, this, ctx| {
            this.params.report_to.do_send(WorkerFinished(report));
            ctx.stop();
        }));
    }
}

impl Worker {
    /// The task this worker runs.
    pub fn task(&self) -> &TaskId {
        &self.params.claim.task.id
    }
}

/// The board ended the task's run. Sent by the dispatcher when it reads such an event.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TaskEnded {
    /// The event that ended it.
    pub kind: EventKind,
}

impl Handler<TaskEnded> for Worker {
    type Result = ();

    fn handle(&mut self, msg: TaskEnded, _ctx: &mut Self::Context) {
        // The worker's own terminal call shows up as an event too; that one is not a stop. Its
        // tool said `Begun` before writing the board, so that note is already in.
        if self.shared.has_terminal() {
            return;
        }
        self.stop_for(StopCause::Ended(msg.kind), true);
    }
}

impl Handler<TerminalNote> for Worker {
    type Result = ();

    /// The run is settled by what the tools report: a completion or a block ends it (once the
    /// turn ends), a refused call does not.
    fn handle(&mut self, note: TerminalNote, _ctx: &mut Self::Context) {
        self.shared.note_terminal(note);
    }
}

/// A stop ordered by the dispatcher.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum WorkerStop {
    /// The dispatcher is stopping: stop hard and hand the lease back.
    Release,
}

impl Handler<WorkerStop> for Worker {
    type Result = ();

    fn handle(&mut self, msg: WorkerStop, _ctx: &mut Self::Context) {
        match msg {
            WorkerStop::Release => self.stop_for(StopCause::Release, true),
        }
    }
}

/// Whether a failed turn's error says the model is rate limited.
fn is_rate_limited(error: &str) -> bool {
    let lower = error.to_ascii_lowercase();
    lower.contains("answered 429") || lower.contains("rate limit") || lower.contains("rate-limit")
}

/// What the session loop ended with, before the store is told.
enum Ending {
    Terminal(TerminalCall),
    Violation,
    Crash(String),
    RateLimited(String),
    Cause(StopCause),
    SpawnFailed(String),
    /// The database was out of reach (or busy) before the model was asked anything: not the
    /// task's fault.
    Unavailable(String),
    /// Something a person must settle (a workspace that could not be made ready, a budget
    /// that ran out): the task is blocked with this kind and reason.
    MustBlock(&'static str, String),
}

/// Runs the session to its end and settles the run with the store.
async fn run_task(
    params: Arc<WorkerParams>,
    binding: Arc<TaskBinding>,
    shared: Arc<Shared>,
) -> WorkerReport {
    let task = &params.claim.task;
    let creator = TraceSpan::from_traceparent(task.traceparent.as_deref().unwrap_or_default());
    let trace = TraceSpan::start("kanban task run", &creator, SpanKind::Consumer, || {
        vec![
            KeyValue::new("troupe.task.id", task.id.to_string()),
            KeyValue::new("troupe.board", params.board.to_string()),
            KeyValue::new("troupe.run.id", params.claim.run.id.0),
            KeyValue::new("troupe.worker", params.worker.to_string()),
            KeyValue::new("troupe.profile", params.profile.name.clone()),
        ]
    });
    let (ending, spent) = drive_session(&params, &binding, &shared, &trace).await;
    let ending = match (ending, shared.terminal()) {
        // A terminal call made before a stop still counts as the end.
        (_, terminal @ (TerminalCall::Completed(_) | TerminalCall::Blocked(..))) => {
            Ending::Terminal(terminal)
        }
        (ending, _) => ending,
    };
    let mut report = WorkerReport {
        task_id: task.id.clone(),
        worker: params.worker.clone(),
        assignee: params.profile.name.clone(),
        run_id: params.claim.run.id,
        outcome: WorkerOutcome::Completed,
        detail: None,
        gave_up: false,
    };
    let fail = |kind, error: String| Failure {
        kind,
        error,
        worker: Some(params.worker.clone()),
        configured_limit: params.config.failure_limit,
    };
    let store = params.store.as_ref();
    let board = &params.board;
    let recorded = match ending {
        Ending::Terminal(TerminalCall::Completed(done)) if done.status == TaskStatus::Review => {
            report.detail = Some(review_after_completion(&params, &shared, &done).await);
            None
        }
        Ending::Terminal(TerminalCall::Completed(done)) => {
            params.hooks.each(|h| h.task_completed(board, &done));
            report.detail = done.result.clone();
            None
        }
        Ending::Terminal(TerminalCall::Blocked(blocked, reason)) => {
            params
                .hooks
                .each(|h| h.task_blocked(board, &blocked, &reason));
            report.outcome = WorkerOutcome::Blocked;
            report.detail = Some(reason);
            None
        }
        Ending::Terminal(_) | Ending::Violation => {
            report.outcome = WorkerOutcome::ProtocolViolation;
            let text = format!(
                "the worker ended its session without calling kanban_complete or kanban_block ({} reminder(s) given)",
                params.config.stop_nudges
            );
            Some(fail(FailureKind::ProtocolViolation, text))
        }
        Ending::Crash(error) => {
            report.outcome = WorkerOutcome::Crashed;
            Some(fail(FailureKind::Crashed, error))
        }
        Ending::SpawnFailed(error) => {
            report.outcome = WorkerOutcome::SpawnFailed;
            Some(fail(FailureKind::SpawnFailed, error))
        }
        Ending::RateLimited(error) => {
            report.outcome = WorkerOutcome::RateLimited;
            if let Err(e) = store
                .requeue_rate_limited(board, &task.id, Some(&params.worker), &error)
                .await
            {
                tracing::warn!(task = %task.id, error = %e, "could not requeue a rate-limited run");
            }
            report.detail = Some(error);
            None
        }
        Ending::Cause(StopCause::TimedOut) => {
            report.outcome = WorkerOutcome::TimedOut;
            let limit = task.max_runtime_seconds.unwrap_or(0);
            Some(fail(
                FailureKind::TimedOut,
                format!("the run passed its max runtime of {limit} s and was stopped"),
            ))
        }
        Ending::Cause(StopCause::Ended(kind)) => {
            report.outcome = WorkerOutcome::Stopped;
            report.detail = Some(format!("the task was {}", kind.as_str()));
            None
        }
        Ending::Cause(StopCause::LeaseLost(why)) => {
            report.outcome = WorkerOutcome::Stopped;
            report.detail = Some(why);
            None
        }
        Ending::Unavailable(why) => {
            // Handed back like a dispatcher stop: an outage is no failure of the task. When the
            // release cannot get through either, the lease lapses and is taken back later.
            report.outcome = WorkerOutcome::Released;
            release(store, board, &task.id, &params.worker).await;
            report.detail = Some(why);
            None
        }
        Ending::MustBlock(kind, reason) => {
            // Something a person must fix (a missing directory, a spent budget): blocked with
            // the reason, and no failure of the worker.
            let request = crate::store::BlockRequest::new(kind, reason.clone())
                .by_worker(params.worker.clone());
            match store.block(board, &task.id, &request).await {
                Ok(done) => {
                    params
                        .hooks
                        .each(|h| h.task_blocked(board, &done.task, &reason));
                    report.outcome = WorkerOutcome::Blocked;
                }
                Err(error) => {
                    tracing::warn!(task = %task.id, %error, kind, "could not block the task");
                    report.outcome = WorkerOutcome::Released;
                    release(store, board, &task.id, &params.worker).await;
                }
            }
            report.detail = Some(reason);
            None
        }
        Ending::Cause(StopCause::Release) => {
            report.outcome = WorkerOutcome::Released;
            release(store, board, &task.id, &params.worker).await;
            None
        }
    };
    // A completion wrote the run's spend in its own transaction; it is written again only
    // when the session spent more after it (a subagent of the same batch). Any other ending
    // writes it now, on the run it closed.
    if let Some(spent) = spent
        && binding
            .written_spend()
            .is_none_or(|w| spent_more(&spent, &w))
    {
        let usage = serde_json::to_value(spent).unwrap_or_default();
        if let Err(error) = store
            .record_run_usage(board, params.claim.run.id, &usage)
            .await
        {
            tracing::warn!(task = %task.id, %error, "could not record what the run spent");
        }
    }
    if let Some(failure) = recorded {
        report.detail = Some(failure.error.clone());
        match store.record_failure(board, &task.id, &failure).await {
            Ok(outcome) => report.gave_up = outcome.gave_up,
            Err(error) => {
                tracing::warn!(task = %task.id, %error, "could not record the failed run")
            }
        }
    }
    trace.set(|| vec![KeyValue::new("troupe.run.outcome", report.outcome.as_str())]);
    // A run that failed is an error; one that blocked, was stopped or handed back is not.
    if matches!(
        report.outcome,
        WorkerOutcome::ProtocolViolation
            | WorkerOutcome::Crashed
            | WorkerOutcome::TimedOut
            | WorkerOutcome::SpawnFailed
    ) {
        trace.fail(report.outcome.as_str());
    }
    trace.end();
    tracing::debug!(task = %task.id, outcome = report.outcome.as_str(), "worker finished");
    report
}

/// Whether `now` holds model work that `written` does not (the working time, which goes on
/// for the few moments the session takes to end after the completion, is not counted).
fn spent_more(now: &Spend, written: &Spend) -> bool {
    now.requests > written.requests
        || now.input_tokens > written.input_tokens
        || now.output_tokens > written.output_tokens
        || now.cost_usd > written.cost_usd
        || now.unpriced_requests > written.unpriced_requests
}

/// A completion the profile's review holds in `review`: a reviewer profile reviews it now;
/// a person's review is left waiting. What happened, for the worker's report.
async fn review_after_completion(params: &WorkerParams, shared: &Shared, task: &Task) -> String {
    let Some(ReviewPolicy::Agent {
        reviewer,
        max_rounds,
    }) = &params.profile.review
    else {
        return "sent to review; a person approves or sends it back".into();
    };
    let review = AgentReview {
        store: Arc::clone(&params.store),
        board: params.board.clone(),
        reviewer: Arc::clone(reviewer),
        max_rounds: *max_rounds,
        supervisor: params.supervisor.clone(),
        hooks: params.hooks.session.clone(),
    };
    // The reviewer's session takes the worker's place, so a stop reaches it.
    match review.run(task, &shared.session).await {
        ReviewEnd::Approved(done) => {
            params
                .hooks
                .each(|h| h.task_completed(&params.board, &done));
            format!("approved by the reviewer profile {}", reviewer.name)
        }
        ReviewEnd::SentBack(reason) => {
            format!(
                "sent back by the reviewer profile {}: {reason}",
                reviewer.name
            )
        }
        ReviewEnd::ForAPerson(why) => format!("waits in review for a person: {why}"),
    }
}

/// Hands a lease back at once ([`Store::release`]), so the task is `ready` for the next
/// claimer instead of waiting out its TTL. Also used by the dispatcher for claims it makes
/// while stopping. A lease already gone is nothing to do; one that cannot be handed back now
/// (the database is out of reach) lapses and is taken back later.
pub(crate) async fn release(
    store: &dyn Store,
    board: &BoardSlug,
    task: &TaskId,
    worker: &WorkerId,
) {
    match store.release(board, task, worker).await {
        Ok(_) => {}
        Err(
            error @ (StoreError::LeaseNotHeld { .. }
            | StoreError::InvalidTransition { .. }
            | StoreError::TaskNotFound { .. }),
        ) => tracing::debug!(%task, %error, "lease already gone at release"),
        Err(error) => {
            tracing::warn!(%task, %error, "could not hand the lease back; it lapses and is taken back later")
        }
    }
}

/// How long a worker waits for MCP servers its profile names that are still starting: the
/// task's view is a copy of the profile's tools, so tools arriving later would never reach it.
const SOURCES_WAIT: Duration = Duration::from_secs(30);

/// The profile's view once the servers it names are ready (or [`SOURCES_WAIT`] passed, or the
/// worker was told to stop).
async fn ready_profile_view(
    view: &troupe_tools::ToolsetView,
    shared: &Shared,
) -> troupe_tools::ToolsetView {
    let deadline = tokio::time::Instant::now() + SOURCES_WAIT;
    while !view.sources_starting().is_empty() && shared.cause().is_none() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        // In short slices, so a stop during the wait is seen.
        view.wait_sources_settled(left.min(Duration::from_millis(250)))
            .await;
    }
    view.refreshed().unwrap_or_else(|_| view.clone())
}

/// Opens the session and talks to it until the run ends one way or another; with what the
/// session spent, when one was opened.
async fn drive_session(
    params: &WorkerParams,
    binding: &Arc<TaskBinding>,
    shared: &Shared,
    trace: &TraceSpan,
) -> (Ending, Option<Spend>) {
    let profile_view = ready_profile_view(&params.profile.view, shared).await;
    let profile_config = &params.profile.session;
    let mut config = SessionConfig {
        system_prompt: Some(system_prompt(profile_config.system_prompt.as_deref())),
        // A task's own budget narrows the profile's and never widens it: whoever wrote the
        // task (a model, through kanban_create) cannot raise what a run may spend.
        budget: profile_config
            .budget
            .tighter(params.claim.task.budget.unwrap_or_default()),
        trace_parent: trace.clone(),
        // A completion or a block ends the session's work: the model is not asked again, so
        // the spend kanban_complete writes with the completion is the run's whole spend.
        end_turn_after: vec!["kanban_complete".into(), "kanban_block".into()],
        ..profile_config.clone()
    };
    // The session is kept with its board, task and run, so a later run can read what this one
    // left cut off if its worker dies.
    if let Some(persist) = &mut config.persist {
        persist.origin.options = crate::run_history::origin_options(
            &persist.origin.options,
            &params.board,
            &params.claim.task.id,
            params.claim.run.id,
        );
    }
    // The session's own record of the calls that ran: what kanban_complete rests on.
    let mut hooks = params
        .hooks
        .session
        .with(Arc::new(EvidenceRecorder::new(Arc::clone(
            binding.evidence(),
        ))));
    if let Some(workspaces) = &params.hooks.workspaces {
        match workspaces.prepare(&params.board, &params.claim.task).await {
            Ok(dir) => {
                hooks = hooks.with(workspaces.session_hook(&dir, &params.profile.name));
                config.cwd = dir;
            }
            Err(reason) => {
                let ending = Ending::MustBlock(
                    crate::workspace::WORKSPACE_BLOCK_KIND,
                    format!("the task's workspace could not be made ready: {reason}"),
                );
                return (ending, None);
            }
        }
    }
    let resumed = answered_question(params).await;
    // A fresh session gets the profile's shared view, its kanban tools bound to this task
    // through the session once it is open (before its first turn). A reopened session may
    // go on with calls it left unanswered as soon as it opens, so it gets tools bound to the
    // task from the start, in a view of its own.
    let view = match &resumed {
        None => params.profile.catalog.view_for(&profile_view),
        Some(_) => task_view(&profile_view, task_tools(binding)),
    };
    let journal = config.persist.as_ref().map(|p| Arc::clone(&p.journal));
    let session_params = SessionParams {
        provider: Arc::clone(&params.profile.provider),
        view,
        config,
        hooks,
        supervisor: params.supervisor.clone(),
        parent: None,
        upstream_events: None,
    };
    let (opened, first) = match resumed {
        Some((restore, message)) => {
            tracing::info!(task = %params.claim.task.id, session = %restore.id, "resuming the session that asked the question");
            (
                SessionHandle::reopen(session_params, restore).await,
                Some(message),
            )
        }
        None => (SessionHandle::open(session_params).await, None),
    };
    let session = match opened {
        Ok(session) => session,
        Err(error) => {
            let ending = Ending::SpawnFailed(format!("the session could not start: {error}"));
            return (ending, None);
        }
    };
    if let Ok(mut slot) = shared.session.lock() {
        *slot = Some(session.clone());
    }
    let _bound = params
        .profile
        .catalog
        .bind(session.id(), Arc::clone(binding));
    binding.spends_of(session.clone());
    let ending = converse(params, shared, &session, first).await;
    let _ = session.close().await;
    // The run is over: the store lists the session as closed, not as open forever. A run that
    // ends on a question reopens it (status open again) when the answer comes.
    if let Some(journal) = journal {
        journal.closed(session.id());
    }
    (ending, Some(session.spent()))
}

/// What the task's latest earlier run left cut off, as a section of the first message (empty
/// when nothing was, or no history is kept).
async fn cut_off_in_last_run(params: &WorkerParams) -> String {
    let Some(history) = &params.hooks.history else {
        return String::new();
    };
    let task = &params.claim.task;
    let runs = match params.store.runs(&params.board, &task.id).await {
        Ok(runs) => runs,
        Err(error) => {
            tracing::warn!(task = %task.id, %error, "could not read the task's runs to find calls an earlier run left cut off");
            return String::new();
        }
    };
    let Some(last) = runs
        .iter()
        .filter(|r| r.id != params.claim.run.id)
        .max_by_key(|r| r.id.0)
    else {
        return String::new();
    };
    // Only a run whose worker vanished (its lease lapsed and was taken back) or crashed can
    // have left calls without results; the others are not looked up.
    if !matches!(
        last.outcome,
        Some(crate::domain::RunOutcome::Reclaimed) | Some(crate::domain::RunOutcome::Crashed)
    ) {
        return String::new();
    }
    let calls = history
        .cut_off_calls(&params.board, &task.id, last.id)
        .await;
    crate::worker_context::cut_off_section(last.id, &calls)
}

/// The block kind of a task whose run spent its budget.
pub const BUDGET_BLOCK_KIND: &str = "budget";

/// When the task's last run parked it with a question that has been answered since: the
/// session that asked, to reopen, and the message telling it the answer.
async fn answered_question(
    params: &WorkerParams,
) -> Option<(troupe_actors::journal::Restore, String)> {
    let history = params.hooks.history.as_ref()?;
    let task = &params.claim.task;
    let runs = params.store.runs(&params.board, &task.id).await.ok()?;
    if !crate::worker_question::answered_question(task, &runs, params.claim.run.id) {
        return None;
    }
    let comments = match params.store.comments(&params.board, &task.id).await {
        Ok(comments) => comments,
        Err(error) => {
            tracing::warn!(task = %task.id, %error, "could not read the answer to the worker's question; starting afresh");
            return None;
        }
    };
    let message = crate::worker_question::resume_message(task, &comments)?;
    let restore = history.latest_session(&params.board, &task.id).await?;
    Some((restore, message))
}

/// Talks to the session until the run ends. `first`: the message to start with instead of the
/// task's context (a resumed session's answer).
async fn converse(
    params: &WorkerParams,
    shared: &Shared,
    session: &SessionHandle,
    first: Option<String>,
) -> Ending {
    let task = &params.claim.task;
    if let Some(cause) = shared.cause() {
        return Ending::Cause(cause);
    }
    if let Some(first) = first {
        return talk(params, shared, session, first).await;
    }
    let mut message = match build_worker_context(params.store.as_ref(), &params.board, task).await {
        Ok(text) => text,
        // Out of reach or busy for a moment: temporary, so not the task's failure.
        Err(error) if error.is_transient() => {
            return Ending::Unavailable(format!(
                "the task could not be read from the board, so it was handed back: {error}"
            ));
        }
        Err(error) => {
            return Ending::Crash(format!("could not read the task from the board: {error}"));
        }
    };
    message.push_str(&cut_off_in_last_run(params).await);
    talk(params, shared, session, message).await
}

/// Sends `message`, then reminders, until a terminal call, a stop or a failure ends the run.
async fn talk(
    params: &WorkerParams,
    shared: &Shared,
    session: &SessionHandle,
    mut message: String,
) -> Ending {
    let task = &params.claim.task;
    let mut nudges_left = params.config.stop_nudges;
    loop {
        let result = session.send(message).await;
        // The tools' notes were sent before their results went back to the session, so they
        // are in by the time the turn has ended.
        let terminal = shared.terminal();
        if terminal.is_made() {
            return Ending::Terminal(terminal);
        }
        if let Some(cause) = shared.cause() {
            return Ending::Cause(cause);
        }
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => return Ending::Crash(format!("the session failed: {error}")),
        };
        match outcome.status {
            TurnStatus::Failed => {
                let error = outcome.error.unwrap_or(outcome.text);
                return if is_rate_limited(&error) {
                    Ending::RateLimited(error)
                } else {
                    Ending::Crash(format!("the model failed: {error}"))
                };
            }
            TurnStatus::Interrupted => {
                return Ending::Crash("the run was interrupted by a stop".to_string());
            }
            TurnStatus::BudgetExceeded => {
                let why = outcome.error.unwrap_or(outcome.text);
                return Ending::MustBlock(
                    BUDGET_BLOCK_KIND,
                    format!(
                        "the run's budget ran out ({why}); raise the profile's budget or split the task, then unblock it"
                    ),
                );
            }
            TurnStatus::Completed | TurnStatus::MaxIterations => {
                if nudges_left == 0 {
                    return Ending::Violation;
                }
                nudges_left -= 1;
                message = nudge(task, nudges_left);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_errors_are_recognised() {
        assert!(is_rate_limited("the model server answered 429: slow down"));
        assert!(is_rate_limited("Rate limit reached for requests"));
        assert!(!is_rate_limited("the model server answered 500: boom"));
    }
}
