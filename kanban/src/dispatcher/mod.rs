//! The [`Dispatcher`] actor: one per process and board. It claims ready tasks and runs each as
//! a [`Worker`] actor; callers hold a [`DispatcherHandle`].
//!
//! A *round* reads the board's new events (stopping workers whose task was archived, blocked or
//! taken back), reclaims lapsed leases, promotes tasks whose parents are done, then claims ready
//! tasks within the budgets and starts a worker per claim. Rounds run one at a time; a round is
//! asked for by the tick, by a [`WakeSource`] (new events), by a worker ending, or by
//! [`DispatcherHandle::dispatch_once`]. Claims go through [`Store::claim_many`] (every free slot
//! in one transaction) so dispatchers on several hosts take different tasks; a round stops at the first sign that the database is out
//! of reach and automatic rounds then back off. Used by the `troupe kanban` CLI, the `Troupe` API
//! and the HTTP API; it works against any [`Store`], in one process or many.
//!
//! What a round does is in `round.rs`, plain async work over the store; `wake.rs` holds the
//! wake sources; this file the actor that decides when rounds run and starts the workers, and
//! its handle. The settings are [`DispatcherConfig`] (in `dispatcher_config.rs`) and what a
//! round reports is [`DispatchReport`] (in `reports.rs`), both below the dispatcher and the
//! worker, which share them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;
use tokio::sync::{broadcast, oneshot};
use troupe_actors::supervisor::Supervisor;

use crate::domain::{BoardSlug, EventId, EventKind, RunId, TaskId, WorkerId};
use crate::hooks::DispatcherHooks;
use crate::profiles::{Profiles, WorkerProfile};
use crate::store::{Claim, Store};
pub use crate::worker::WorkerFinished;
use crate::worker::{TaskEnded, Worker, WorkerParams, WorkerStop};

mod round;
mod stats;
mod wake;

use round::{RoundInput, RoundOutput, ends_a_run, hung_round, run_round};

// The settings and the reports live below the dispatcher and the worker, which both use them;
// they are named here too, where callers have always found them.
pub use crate::dispatcher_config::{
    DEFAULT_DISPATCH_INTERVAL, DEFAULT_MAX_IN_PROGRESS, DEFAULT_POLL_INTERVAL,
    DEFAULT_RATE_LIMIT_COOLDOWN, DEFAULT_STOP_GRACE, DEFAULT_STOP_NUDGES, DispatcherConfig,
};
pub use crate::reports::{ClaimedTask, DispatchReport, WorkerOutcome, WorkerReport};
use stats::Counters;
pub use stats::DispatcherStats;
pub use wake::{ListenWake, PollWake, WakeSource};

/// First pause after a round found the database out of reach; it doubles up to
/// [`OUTAGE_BACKOFF_MAX`] while the outage lasts and resets after a round that got through.
const OUTAGE_BACKOFF_START: Duration = Duration::from_millis(200);
/// Longest pause between two rounds during a database outage.
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a round may take before it is given up as hung: a store call that never answers
/// (a connection that hangs instead of failing) must not keep `in_round` set for good, which
/// would stop every later round. A healthy round takes a small fraction of this.
const ROUND_LIMIT: Duration = Duration::from_secs(60);
/// Events read per page when catching up with the board.
const EVENT_PAGE: usize = 1000;
/// Capacity of the dispatcher's event broadcast; slow subscribers lose the oldest events.
const EVENT_CHANNEL: usize = 4096;

/// What the dispatcher reports to subscribers ([`DispatcherHandle::subscribe`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DispatcherEvent {
    /// A worker started on a claimed task.
    WorkerStarted {
        /// The task.
        task_id: TaskId,
        /// The profile running it.
        assignee: String,
        /// The worker holding the lease.
        worker: WorkerId,
        /// The run.
        run_id: RunId,
    },
    /// A worker ended.
    WorkerFinished(WorkerReport),
    /// A round ended.
    RoundFinished(DispatchReport),
}

/// Why the dispatcher could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The dispatcher has stopped (or its actor system is gone).
    #[error("the dispatcher for board {0:?} is not running; start a new one")]
    Stopped(String),
}

/// A cloneable handle on a running [`Dispatcher`], usable from any thread once started.
///
/// ```no_run
/// # async fn demo(
/// #     store: std::sync::Arc<dyn troupe_kanban::Store>,
/// #     profiles: troupe_kanban::profiles::Profiles,
/// #     supervisor: actix::Addr<troupe_actors::supervisor::Supervisor>,
/// # ) -> Result<(), troupe_kanban::dispatcher::DispatchError> {
/// use troupe_kanban::dispatcher::{DispatcherConfig, DispatcherHandle};
/// use troupe_kanban::hooks::DispatcherHooks;
/// use troupe_kanban::BoardSlug;
///
/// // On an actix arbiter (inside a running `System`):
/// let dispatcher = DispatcherHandle::start(
///     store,
///     BoardSlug::default_board(),
///     profiles,
///     supervisor,
///     DispatcherHooks::new(),
///     DispatcherConfig::default(),
/// );
/// let report = dispatcher.dispatch_once(None, false).await?; // one round now
/// dispatcher.wait_idle().await?; // until nothing is ready or running
/// dispatcher.stop().await;
/// # let _ = report;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct DispatcherHandle {
    addr: Addr<Dispatcher>,
    board: BoardSlug,
    counters: Arc<Counters>,
    events: broadcast::Sender<DispatcherEvent>,
}

impl std::fmt::Debug for DispatcherHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatcherHandle")
            .field("board", &self.board)
            .field("stats", &self.counters.snapshot())
            .finish()
    }
}

impl DispatcherHandle {
    /// Starts a dispatcher for `board` that polls the event log every
    /// `config.poll_interval` ([`PollWake`]). Must be called on an actix arbiter (inside a
    /// running `System`); the handle then works from anywhere.
    pub fn start(
        store: Arc<dyn Store>,
        board: BoardSlug,
        profiles: Profiles,
        supervisor: Addr<Supervisor>,
        hooks: DispatcherHooks,
        config: DispatcherConfig,
    ) -> DispatcherHandle {
        let wake = Box::new(PollWake::new(config.poll_interval));
        DispatcherHandle::start_with_wake(store, board, profiles, supervisor, hooks, config, wake)
    }

    /// [`DispatcherHandle::start`] with another wake source, such as [`ListenWake`] for a
    /// PostgreSQL store.
    pub fn start_with_wake(
        store: Arc<dyn Store>,
        board: BoardSlug,
        profiles: Profiles,
        supervisor: Addr<Supervisor>,
        hooks: DispatcherHooks,
        config: DispatcherConfig,
        wake: Box<dyn WakeSource>,
    ) -> DispatcherHandle {
        let counters = Arc::new(Counters::default());
        let (events, _) = broadcast::channel(EVENT_CHANNEL);
        let dispatcher = Dispatcher {
            store,
            board: board.clone(),
            profiles: Arc::new(profiles),
            supervisor,
            hooks,
            config,
            running: HashMap::new(),
            releasing: 0,
            cursor: None,
            in_round: false,
            wanted: None,
            manual: VecDeque::new(),
            idle_waiters: Vec::new(),
            stopping: false,
            stop_waiters: Vec::new(),
            cooldowns: HashMap::new(),
            counters: Arc::clone(&counters),
            events: events.clone(),
            wake: Some(wake),
            wake_task: None,
            sweep_task: None,
            deferred: Vec::new(),
            backoff: Duration::ZERO,
            paused_until: None,
            arbiters: Vec::new(),
            next_arbiter: 0,
            last_sweep: None,
        };
        let addr = dispatcher.start();
        DispatcherHandle {
            addr,
            board,
            counters,
            events,
        }
    }

    /// The board this dispatcher serves.
    pub fn board(&self) -> &BoardSlug {
        &self.board
    }

    /// Runs one round now (after any round in progress): reclaim, promote, claim up to `max`
    /// tasks (within the budgets) and start their workers. With `dry_run`, nothing changes and
    /// the report lists what would be claimed.
    pub async fn dispatch_once(
        &self,
        max: Option<usize>,
        dry_run: bool,
    ) -> Result<DispatchReport, DispatchError> {
        let (reply, answer) = oneshot::channel();
        self.addr
            .send(DispatchOnce {
                max,
                dry_run,
                reply,
            })
            .await
            .map_err(|_| self.stopped())?;
        answer.await.map_err(|_| self.stopped())
    }

    /// Resolves once this dispatcher runs no worker, a round found nothing it could claim and
    /// the board has no `running` task. Rounds keep starting on their own meanwhile (even with
    /// `auto_dispatch` off, so a one-shot `dispatch` can drain a board with this).
    pub async fn wait_idle(&self) -> Result<(), DispatchError> {
        let (reply, answer) = oneshot::channel();
        self.addr
            .send(WaitIdle { reply })
            .await
            .map_err(|_| self.stopped())?;
        answer.await.map_err(|_| self.stopped())
    }

    /// Stops the dispatcher: no new claims; every running worker is stopped hard and its lease
    /// handed back so another dispatcher can take the task at once, and a round in flight ends
    /// by handing back what it claimed instead of starting workers. Resolves when all workers
    /// have ended and those claims are back. Calling it again is harmless.
    pub async fn stop(&self) {
        let (reply, answer) = oneshot::channel();
        if self.addr.send(StopDispatcher { reply }).await.is_ok() {
            let _ = answer.await;
        }
    }

    /// A receiver of the dispatcher's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<DispatcherEvent> {
        self.events.subscribe()
    }

    /// The counters so far.
    pub fn stats(&self) -> DispatcherStats {
        self.counters.snapshot()
    }

    /// The tasks this dispatcher's workers are running now.
    pub async fn running(&self) -> Result<Vec<TaskId>, DispatchError> {
        self.addr
            .send(ListRunning)
            .await
            .map_err(|_| self.stopped())
    }

    /// Whether the dispatcher's actor is still alive.
    pub fn is_running(&self) -> bool {
        self.addr.connected()
    }

    fn stopped(&self) -> DispatchError {
        DispatchError::Stopped(self.board.as_str().to_string())
    }
}

/// A worker this dispatcher runs.
struct Running {
    addr: Addr<Worker>,
    task_id: TaskId,
    run_id: RunId,
    assignee: String,
}

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoundKind {
    /// New events may be there: look, and go on only if there are.
    Wake,
    /// Reclaim, promote and claim whatever the events say.
    Full,
}

/// A round asked for through the handle.
struct ManualRound {
    max: Option<usize>,
    dry_run: bool,
    reply: oneshot::Sender<DispatchReport>,
}

/// The dispatcher actor; see the module doc. Start it with [`DispatcherHandle::start`].
pub struct Dispatcher {
    /// The board store.
    store: Arc<dyn Store>,
    /// The board served.
    board: BoardSlug,
    /// Who can run tasks.
    profiles: Arc<Profiles>,
    /// Handed to every worker session (approvals, stops).
    supervisor: Addr<Supervisor>,
    /// Observers.
    hooks: DispatcherHooks,
    /// Settings.
    config: DispatcherConfig,
    /// Workers running now, by lease holder. A task is never claimed again while a worker of
    /// it is here (even one whose lease was taken back and is being stopped), so two runs of
    /// one task never overlap in this process.
    running: HashMap<WorkerId, Running>,
    /// Claims being handed back because the dispatcher stopped during the round that made
    /// them; the actor ends only once they are all back.
    releasing: usize,
    /// The last board event seen; `None` until the first round reads where the log stands.
    cursor: Option<EventId>,
    /// A round is in flight: rounds never overlap, so two never claim for the same slot.
    in_round: bool,
    /// An automatic round asked for while another ran.
    wanted: Option<RoundKind>,
    /// Rounds asked for through the handle, served first.
    manual: VecDeque<ManualRound>,
    /// Callers of `wait_idle`.
    idle_waiters: Vec<oneshot::Sender<()>>,
    /// `stop` was called: no more rounds; the actor ends when the last worker does.
    stopping: bool,
    /// Callers of `stop`.
    stop_waiters: Vec<oneshot::Sender<()>>,
    /// Tasks not to claim before the given time (their run was rate limited).
    cooldowns: HashMap<TaskId, std::time::Instant>,
    /// Shared with the handles.
    counters: Arc<Counters>,
    /// Shared with the handles.
    events: broadcast::Sender<DispatcherEvent>,
    /// The wake source, until `started` moves it into its task.
    wake: Option<Box<dyn WakeSource>>,
    /// The task forwarding wake-ups; aborted on stop.
    wake_task: Option<tokio::task::JoinHandle<()>>,
    /// The task sweeping the board's scheduled jobs; aborted on stop.
    sweep_task: Option<tokio::task::JoinHandle<()>>,
    /// Claims whose task an older worker here has not finished with yet; each starts when
    /// that worker ends, so two runs of one task never overlap in this process.
    deferred: Vec<(Claim, Arc<WorkerProfile>, WorkerId)>,
    /// The pause after the last round that found the database out of reach; zero while it
    /// is reachable.
    backoff: Duration,
    /// No automatic round starts before this (the database was out of reach).
    paused_until: Option<std::time::Instant>,
    /// The threads workers run on (`config.worker_threads`), started with the dispatcher and
    /// stopped with it; empty runs them on the dispatcher's own arbiter.
    arbiters: Vec<actix::Arbiter>,
    /// The arbiter the next worker starts on.
    next_arbiter: usize,
    /// When a round last fired due scheduled jobs.
    last_sweep: Option<std::time::Instant>,
}

impl Actor for Dispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.config.worker_threads > 1 {
            self.arbiters = (0..self.config.worker_threads)
                .map(|_| actix::Arbiter::new())
                .collect();
        }
        let addr = ctx.address();
        if let Some(mut wake) = self.wake.take() {
            self.wake_task = Some(actix::spawn(async move {
                while wake.changed().await.is_some() {
                    if addr.send(Kick(RoundKind::Wake)).await.is_err() {
                        break;
                    }
                }
            }));
        }
        ctx.run_interval(self.config.interval, |this, ctx| {
            if this.config.auto_dispatch || !this.idle_waiters.is_empty() {
                this.want(ctx, RoundKind::Full);
            }
        });
        if self.config.auto_dispatch {
            self.want(ctx, RoundKind::Full);
            self.sweep_task = Some(actix::spawn(crate::schedule::sweep::sweep_every_interval(
                Arc::clone(&self.store),
                self.board.clone(),
            )));
        }
        tracing::info!(board = %self.board, "dispatcher started");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let Some(task) = self.wake_task.take() {
            task.abort();
        }
        if let Some(task) = self.sweep_task.take() {
            task.abort();
        }
        // Every worker has ended by now (the actor stops only after the last one).
        for arbiter in self.arbiters.drain(..) {
            arbiter.stop();
        }
        for waiter in self.stop_waiters.drain(..) {
            let _ = waiter.send(());
        }
        tracing::info!(board = %self.board, "dispatcher stopped");
    }
}

impl Dispatcher {
    /// Asks for a round; it starts now or after the one in flight.
    fn want(&mut self, ctx: &mut Context<Self>, kind: RoundKind) {
        if self.stopping {
            return;
        }
        self.wanted = match (self.wanted, kind) {
            (Some(RoundKind::Full), _) | (_, RoundKind::Full) => Some(RoundKind::Full),
            _ => Some(RoundKind::Wake),
        };
        self.next_round(ctx);
    }

    /// Starts the next round if none is in flight.
    fn next_round(&mut self, ctx: &mut Context<Self>) {
        if self.in_round || self.stopping {
            return;
        }
        let paused = self
            .paused_until
            .is_some_and(|until| std::time::Instant::now() < until);
        if paused && self.manual.is_empty() {
            // The wanted round stays asked for; the end of the pause starts it.
            return;
        }
        let (kind, manual) = match self.manual.pop_front() {
            Some(manual) => (RoundKind::Full, Some(manual)),
            None => match self.wanted.take() {
                Some(kind) => (kind, None),
                None => return,
            },
        };
        let claiming =
            manual.is_some() || self.config.auto_dispatch || !self.idle_waiters.is_empty();
        let mut per_assignee: HashMap<String, usize> = HashMap::new();
        for running in self.running.values() {
            *per_assignee.entry(running.assignee.clone()).or_default() += 1;
        }
        for (_, profile, _) in &self.deferred {
            *per_assignee.entry(profile.name.clone()).or_default() += 1;
        }
        let now = std::time::Instant::now();
        self.cooldowns.retain(|_, until| *until > now);
        // A busy board runs a round per ending worker; sweeping scheduled jobs in each would
        // cost two write transactions a round for nothing, while the dispatcher's own sweep
        // runs every second anyway. Rounds asked for by hand, or without that sweep, do it.
        let sweep = manual.is_some()
            || !self.config.auto_dispatch
            || self
                .last_sweep
                .is_none_or(|at| now.duration_since(at) >= crate::schedule::sweep::SWEEP_INTERVAL);
        if sweep && kind == RoundKind::Full {
            self.last_sweep = Some(now);
        }
        let input = RoundInput {
            store: Arc::clone(&self.store),
            board: self.board.clone(),
            profiles: Arc::clone(&self.profiles),
            config: self.config.clone(),
            cursor: self.cursor,
            kind,
            claiming,
            budget: self
                .config
                .max_in_progress
                .saturating_sub(self.running.len() + self.deferred.len()),
            per_assignee,
            cooling: self.cooldowns.keys().cloned().collect(),
            busy: self.running.values().map(|r| r.task_id.clone()).collect(),
            max: manual.as_ref().and_then(|m| m.max),
            dry_run: manual.as_ref().is_some_and(|m| m.dry_run),
            check_idle: !self.idle_waiters.is_empty(),
            sweep,
        };
        self.in_round = true;
        let limit = ROUND_LIMIT;
        let cursor = self.cursor;
        let round = async move {
            match tokio::time::timeout(limit, run_round(input)).await {
                Ok(output) => output,
                Err(_) => hung_round(cursor, limit),
            }
        };
        let round = round.into_actor(self).map(move |output, this, ctx| {
            this.in_round = false;
            this.finish_round(ctx, output, manual);
            this.next_round(ctx);
        });
        ctx.spawn(round);
    }

    /// Applies a round's outcome on the actor: stop workers, start workers, answer waiters.
    fn finish_round(
        &mut self,
        ctx: &mut Context<Self>,
        output: RoundOutput,
        manual: Option<ManualRound>,
    ) {
        // A round cut short by an outage read nothing new: keep the cursor (or its absence).
        if !(output.unavailable && output.events.is_empty()) {
            self.cursor = Some(output.cursor);
        }
        self.note_outage(ctx, &output);
        for event in &output.events {
            let Some(task_id) = &event.task_id else {
                continue;
            };
            if !ends_a_run(event.kind) {
                continue;
            }
            // Only the worker of the run the event ended: a newer run of the same task goes on.
            for running in self.running.values() {
                let same_run = event.run_id.is_none_or(|run| run == running.run_id);
                if running.task_id == *task_id && same_run {
                    running.addr.do_send(TaskEnded { kind: event.kind });
                }
            }
        }
        for lapsed in &output.lapsed {
            if let Some(running) = self.running.get(lapsed) {
                running.addr.do_send(TaskEnded {
                    kind: EventKind::Reclaimed,
                });
            }
        }
        if self.stopping {
            // Stopped during this round: its claims get no worker and go straight back.
            self.hand_back(
                ctx,
                output
                    .claims
                    .iter()
                    .map(|(c, _, w)| (c.task.id.clone(), w.clone())),
            );
        } else {
            for (claim, profile, worker) in output.claims {
                if self.running.values().any(|r| r.task_id == claim.task.id) {
                    self.deferred.push((claim, profile, worker));
                } else {
                    self.start_worker(ctx, claim, profile, worker);
                }
            }
        }
        if output.ran {
            Counters::bump(&self.counters.rounds);
            self.hooks
                .each(|h| h.dispatch_round(&self.board, &output.report));
            let _ = self
                .events
                .send(DispatcherEvent::RoundFinished(output.report.clone()));
        }
        if output.idle && self.running.is_empty() {
            for waiter in self.idle_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
        if let Some(manual) = manual {
            let _ = manual.reply.send(output.report);
        }
        if output.more_ready && !self.stopping {
            // A full page of ready tasks was seen: look again rather than wait for the tick.
            self.wanted = Some(RoundKind::Full);
        }
        self.stop_if_done(ctx);
    }

    /// Backs off while the database is out of reach: a round that met an outage pauses
    /// automatic rounds (ticks, wake-ups, ending workers) for a while that doubles each time,
    /// and the first round that gets through resets it. Logged once per outage.
    fn note_outage(&mut self, ctx: &mut Context<Self>, output: &RoundOutput) {
        if !output.unavailable {
            if output.ran && !self.backoff.is_zero() {
                tracing::info!(board = %self.board, "the board's database is reachable again; dispatching resumes");
                self.backoff = Duration::ZERO;
                self.paused_until = None;
            }
            if !output.report.errors.is_empty() {
                tracing::warn!(board = %self.board, errors = ?output.report.errors, "dispatch round met errors");
            }
            return;
        }
        if self.backoff.is_zero() {
            tracing::warn!(
                board = %self.board,
                errors = ?output.report.errors,
                "the board's database is out of reach; dispatch rounds pause and retry with a growing delay until it answers"
            );
            self.backoff = OUTAGE_BACKOFF_START;
        } else {
            tracing::debug!(board = %self.board, errors = ?output.report.errors, "the board's database is still out of reach");
            self.backoff = (self.backoff * 2).min(OUTAGE_BACKOFF_MAX);
        }
        let pause = self.backoff;
        self.paused_until = Some(std::time::Instant::now() + pause);
        ctx.run_later(pause, |this, ctx| {
            let due = this
                .paused_until
                .is_some_and(|until| std::time::Instant::now() >= until);
            if !due {
                return;
            }
            this.paused_until = None;
            if this.config.auto_dispatch || !this.idle_waiters.is_empty() {
                this.want(ctx, RoundKind::Full);
            } else {
                this.next_round(ctx);
            }
        });
    }

    /// Hands leases back without running them (the dispatcher is stopping).
    fn hand_back(
        &mut self,
        ctx: &mut Context<Self>,
        claims: impl Iterator<Item = (TaskId, WorkerId)>,
    ) {
        let claims: Vec<(TaskId, WorkerId)> = claims.collect();
        if claims.is_empty() {
            return;
        }
        self.releasing += 1;
        let store = Arc::clone(&self.store);
        let board = self.board.clone();
        let work = async move {
            for (task, worker) in &claims {
                crate::worker::release(store.as_ref(), &board, task, worker).await;
            }
        };
        ctx.spawn(work.into_actor(self).map(|(), this, ctx| {
            this.releasing -= 1;
            this.stop_if_done(ctx);
        }));
    }

    /// Ends the actor once a stop was asked for and nothing is left in flight.
    fn stop_if_done(&mut self, ctx: &mut Context<Self>) {
        if self.stopping && !self.in_round && self.releasing == 0 && self.running.is_empty() {
            ctx.stop();
        }
    }

    fn start_worker(
        &mut self,
        ctx: &mut Context<Self>,
        claim: Claim,
        profile: Arc<WorkerProfile>,
        worker: WorkerId,
    ) {
        let task_id = claim.task.id.clone();
        let run_id = claim.run.id;
        self.hooks
            .each(|h| h.task_claimed(&self.board, &claim.task, &claim.run));
        let params = WorkerParams {
            store: Arc::clone(&self.store),
            board: self.board.clone(),
            claim,
            worker: worker.clone(),
            profile: Arc::clone(&profile),
            supervisor: self.supervisor.clone(),
            hooks: self.hooks.clone(),
            config: self.config.clone(),
            report_to: ctx.address().recipient(),
            assignable: self
                .profiles
                .default_assignee()
                .map(str::to_string)
                .into_iter()
                .chain(self.config.worker_assignable_profiles.iter().cloned())
                .collect(),
        };
        let worker_actor = Worker::new(params);
        let addr = match self
            .arbiters
            .get(self.next_arbiter % self.arbiters.len().max(1))
        {
            Some(arbiter) => {
                self.next_arbiter = self.next_arbiter.wrapping_add(1);
                Worker::start_in_arbiter(&arbiter.handle(), move |_| worker_actor)
            }
            None => worker_actor.start(),
        };
        self.running.insert(
            worker.clone(),
            Running {
                addr,
                task_id: task_id.clone(),
                run_id,
                assignee: profile.name.clone(),
            },
        );
        Counters::bump(&self.counters.claimed);
        self.counters
            .running
            .store(self.running.len() as u64, Ordering::Relaxed);
        self.hooks
            .each(|h| h.worker_started(&self.board, &task_id, &worker));
        let _ = self.events.send(DispatcherEvent::WorkerStarted {
            task_id,
            assignee: profile.name.clone(),
            worker,
            run_id,
        });
    }
}

/// Asks for a round. Sent by the wake task and by the tick.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Kick(RoundKind);

impl Handler<Kick> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: Kick, ctx: &mut Self::Context) {
        self.want(ctx, msg.0);
    }
}

/// One round now. Sent by [`DispatcherHandle::dispatch_once`].
#[derive(Message)]
#[rtype(result = "()")]
struct DispatchOnce {
    max: Option<usize>,
    dry_run: bool,
    reply: oneshot::Sender<DispatchReport>,
}

impl Handler<DispatchOnce> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: DispatchOnce, ctx: &mut Self::Context) {
        if self.stopping {
            // Dropping the reply tells the caller the dispatcher is stopping.
            return;
        }
        self.manual.push_back(ManualRound {
            max: msg.max,
            dry_run: msg.dry_run,
            reply: msg.reply,
        });
        self.next_round(ctx);
    }
}

/// Resolve when idle. Sent by [`DispatcherHandle::wait_idle`].
#[derive(Message)]
#[rtype(result = "()")]
struct WaitIdle {
    reply: oneshot::Sender<()>,
}

impl Handler<WaitIdle> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: WaitIdle, ctx: &mut Self::Context) {
        self.idle_waiters.push(msg.reply);
        self.want(ctx, RoundKind::Full);
    }
}

/// Stop everything. Sent by [`DispatcherHandle::stop`].
#[derive(Message)]
#[rtype(result = "()")]
struct StopDispatcher {
    reply: oneshot::Sender<()>,
}

impl Handler<StopDispatcher> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: StopDispatcher, ctx: &mut Self::Context) {
        self.stop_waiters.push(msg.reply);
        self.stopping = true;
        self.wanted = None;
        for manual in self.manual.drain(..) {
            drop(manual.reply);
        }
        if let Some(task) = self.wake_task.take() {
            task.abort();
        }
        for running in self.running.values() {
            running.addr.do_send(WorkerStop::Release);
        }
        let deferred: Vec<(TaskId, WorkerId)> = self
            .deferred
            .drain(..)
            .map(|(c, _, w)| (c.task.id.clone(), w))
            .collect();
        self.hand_back(ctx, deferred.into_iter());
        // A round in flight is left to finish: dropping it could lose claims it already made.
        // Its end hands them back and then ends the actor.
        self.stop_if_done(ctx);
    }
}

/// The tasks being run. Sent by [`DispatcherHandle::running`].
#[derive(Message)]
#[rtype(result = "Vec<TaskId>")]
struct ListRunning;

impl Handler<ListRunning> for Dispatcher {
    type Result = MessageResult<ListRunning>;

    fn handle(&mut self, _msg: ListRunning, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.running.values().map(|r| r.task_id.clone()).collect())
    }
}

impl Handler<WorkerFinished> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: WorkerFinished, ctx: &mut Self::Context) {
        let report = msg.0;
        let task_id = report.task_id.clone();
        self.running.remove(&report.worker);
        if report.outcome == WorkerOutcome::RateLimited
            && !self.config.rate_limit_cooldown.is_zero()
        {
            let until = std::time::Instant::now() + self.config.rate_limit_cooldown;
            self.cooldowns.insert(report.task_id.clone(), until);
        }
        self.counters
            .running
            .store(self.running.len() as u64, Ordering::Relaxed);
        let counter = match report.outcome {
            WorkerOutcome::Completed => &self.counters.completed,
            WorkerOutcome::Blocked => &self.counters.blocked,
            WorkerOutcome::Crashed | WorkerOutcome::TimedOut | WorkerOutcome::SpawnFailed => {
                &self.counters.failed
            }
            WorkerOutcome::ProtocolViolation => &self.counters.protocol_violations,
            WorkerOutcome::RateLimited => &self.counters.rate_limited,
            WorkerOutcome::Stopped | WorkerOutcome::Released => &self.counters.stopped,
        };
        Counters::bump(counter);
        self.hooks.each(|h| h.worker_finished(&self.board, &report));
        let _ = self.events.send(DispatcherEvent::WorkerFinished(report));
        if self.stopping {
            self.stop_if_done(ctx);
            return;
        }
        if !self.running.values().any(|r| r.task_id == task_id) {
            let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
                .into_iter()
                .partition(|(claim, _, _)| claim.task.id == task_id);
            self.deferred = waiting;
            for (claim, profile, worker) in ready {
                self.start_worker(ctx, claim, profile, worker);
            }
        }
        if self.config.auto_dispatch || !self.idle_waiters.is_empty() {
            self.want(ctx, RoundKind::Full);
        }
    }
}
