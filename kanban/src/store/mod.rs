//! The [`Store`] trait: everything a board keeps, and every state change a task may go through.
//!
//! Implementations: [`SqliteStore`] (embedded, one file per board) and [`PostgresStore`] (many
//! hosts, one database holding many boards), both held to the same suite (`suite`, behind the
//! `test-suite` feature). The dispatcher, the worker tools, the CLI and the HTTP API use only
//! this trait.
//!
//! The board's rules are decided once, whatever the database: `rules.rs` holds the pure
//! decisions (which statuses allow a transition, where a block sends a task, when failures give
//! up), `ops/` every operation written against `backend.rs`'s `Backend` (the steps a database
//! carries out in one transaction), and `board_methods.rs` the `Store` methods that run one
//! operation. `sqlite_tx.rs` and `postgres_tx.rs` implement `Backend` in their own SQL
//! (`postgres_error.rs` says what PostgreSQL's errors mean); `rows.rs` reads their rows back.

mod backend;
mod board_methods;
mod error;
mod ops;
mod postgres;
mod postgres_claims;
mod postgres_error;
mod postgres_rows;
mod postgres_schedules;
mod postgres_schema;
mod postgres_tx;
mod rows;
mod rules;
mod schedule_backend;
mod schedule_methods;
mod sqlite;
mod sqlite_batch;
mod sqlite_schedules;
mod sqlite_schema;
mod sqlite_sql;
mod sqlite_tx;
#[cfg(feature = "test-suite")]
pub mod suite;
#[cfg(feature = "test-suite")]
pub mod test_cluster;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use error::StoreError;
pub use postgres::{BoardChanged, BoardChanges, PostgresOptions, PostgresStore};
pub use rules::effective_failure_limit;
pub use sqlite::{SqliteOptions, SqliteStore};

use crate::domain::{
    Attachment, Board, BoardSlug, BoardStats, Comment, Event, EventId, Lease, Link, NewAttachment,
    NewBoard, NewTask, Run, RunId, Task, TaskFilter, TaskId, TaskLinks, TaskPatch, Timestamp,
    WorkerId,
};
use crate::schedule::{Job, JobPatch, JobRun, NewJob};

/// The future every [`Store`] method returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The answer to [`Store::create_task`].
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    /// The task: the new one, or the existing one with the same idempotency key.
    pub task: Task,
    /// `false` when an existing task was returned for the idempotency key.
    pub created: bool,
}

/// What a claimer asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSpec {
    /// Who will run the task.
    pub worker: WorkerId,
    /// How long the lease lasts before a heartbeat must extend it.
    pub ttl: Duration,
    /// Only tasks assigned to one of these profiles; `None` takes any task.
    pub assignees: Option<Vec<String>>,
}

impl ClaimSpec {
    /// A claim for `worker` with the default TTL and no assignee filter.
    pub fn new(worker: WorkerId) -> ClaimSpec {
        ClaimSpec {
            worker,
            ttl: crate::domain::DEFAULT_CLAIM_TTL,
            assignees: None,
        }
    }

    /// Sets the lease length.
    pub fn with_ttl(mut self, ttl: Duration) -> ClaimSpec {
        self.ttl = ttl;
        self
    }

    /// Only claim tasks assigned to these profiles.
    pub fn with_assignees(mut self, assignees: Vec<String>) -> ClaimSpec {
        self.assignees = Some(assignees);
        self
    }
}

/// A successful claim: the task (now `running`), its lease and the run it opened.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The task, as it is after the claim.
    pub task: Task,
    /// The lease the worker now holds.
    pub lease: Lease,
    /// The run opened for this attempt.
    pub run: Run,
}

/// Everything a worker's first message says about its task besides the task itself, read in one
/// go by [`Store::task_context`].
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContext {
    /// The task's parents and children.
    pub links: TaskLinks,
    /// Each parent, in the order of `links.parents`, with its runs, oldest first.
    pub parents: Vec<(Task, Vec<Run>)>,
    /// The task's attachments (without their bytes).
    pub attachments: Vec<Attachment>,
    /// The task's runs, oldest first.
    pub runs: Vec<Run>,
    /// The task's comments, oldest first.
    pub comments: Vec<Comment>,
}

/// How a task is completed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// The result text kept on the task.
    pub result: Option<String>,
    /// A short summary kept on the run (its first line, up to 400 characters, goes in the event).
    pub summary: Option<String>,
    /// Structured details kept on the run.
    pub metadata: Option<serde_json::Value>,
    /// When a worker completes, its identity: it must hold the current lease.
    pub worker: Option<WorkerId>,
    /// What the run spent (its model requests' tokens and cost), written on the run in the
    /// completion's own transaction, as [`Store::record_run_usage`] would.
    pub usage: Option<serde_json::Value>,
}

/// How a task is blocked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRequest {
    /// The kind of block; `dependency` sends the task back to `todo`.
    pub kind: String,
    /// Why, in words.
    pub reason: String,
    /// When a worker blocks, its identity: it must hold the current lease.
    pub worker: Option<WorkerId>,
}

impl BlockRequest {
    /// The kind that waits for other tasks instead of a human.
    pub const DEPENDENCY: &'static str = "dependency";
    /// The kind a worker's `clarify` parks its task with: the next comment on the task is the
    /// answer and puts it back in the queue, where the asking session resumes.
    pub const QUESTION: &'static str = "question";

    /// A block of `kind` for `reason`, made by an operator.
    pub fn new(kind: impl Into<String>, reason: impl Into<String>) -> BlockRequest {
        BlockRequest {
            kind: kind.into(),
            reason: reason.into(),
            worker: None,
        }
    }

    /// Made by the worker holding the lease.
    pub fn by_worker(mut self, worker: WorkerId) -> BlockRequest {
        self.worker = Some(worker);
        self
    }
}

/// What went wrong with a run, as reported by the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The worker died.
    Crashed,
    /// The run passed the task's max runtime and was stopped.
    TimedOut,
    /// The worker could not be started.
    SpawnFailed,
    /// The worker ended cleanly without a terminal board call; counted apart, limit 3.
    ProtocolViolation,
}

/// A failed run to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// The error text kept on the run and the task.
    pub error: String,
    /// When known, the worker whose run failed: the failure is refused if it no longer holds
    /// the lease, so a stale report cannot touch a newer run.
    pub worker: Option<WorkerId>,
    /// `kanban.failure_limit` from the configuration, used when the task sets no `max_retries`.
    pub configured_limit: Option<u32>,
}

/// The answer to [`Store::record_failure`].
#[derive(Debug, Clone, PartialEq)]
pub struct FailureOutcome {
    /// The task after the failure (`ready`, or `blocked` when given up).
    pub task: Task,
    /// The failure count after this one.
    pub failures: u32,
    /// The limit that applied.
    pub limit: u32,
    /// Where the limit came from: `task`, `config` or `default` (or `protocol` for violations).
    pub limit_source: &'static str,
    /// Whether the limit was reached and the task blocked.
    pub gave_up: bool,
}

/// The answer to a transition that may end a live lease ([`Store::block`], [`Store::archive`],
/// [`Store::release`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Transitioned {
    /// The task after the change.
    pub task: Task,
    /// The lease that was live before, whose worker should now be stopped.
    pub ended_lease: Option<Lease>,
}

/// One claim taken back by [`Store::reclaim_expired`].
#[derive(Debug, Clone, PartialEq)]
pub struct Reclaimed {
    /// The task, back in its source status.
    pub task: Task,
    /// The lease that lapsed.
    pub lapsed: Lease,
}

/// A board store: boards, tasks, links, comments, events, runs, attachments and every
/// transition between statuses.
///
/// # Transitions
///
/// | from | to | method |
/// |---|---|---|
/// | (new) | `ready` / `todo` / `triage` / `blocked` | [`Store::create_task`] (`ready` only when every parent is done or archived) |
/// | `todo` | `ready` | [`Store::promote`], and at once when a parent completes or is archived or unlinked |
/// | `scheduled` | `ready` / `todo` | [`Store::promote`] once the time has come |
/// | `ready`, `review` | `running` | [`Store::claim_next`], [`Store::claim_many`], [`Store::claim_task`] (a `ready` task with an open parent is sent back to `todo` with `claim_rejected`) |
/// | `running`, `ready`, `blocked`, `review` | `done` | [`Store::complete`] (parents must be done; promotes children) |
/// | `running`, `ready` | `todo` / `blocked` / `triage` | [`Store::block`]: kind `dependency` goes to `todo`; the same kind twice in a row goes to `triage` |
/// | `blocked`, `scheduled` | `ready` / `review` / `todo` | [`Store::unblock`] (`todo` while a parent is open) |
/// | `running`, `ready` | `review` | [`Store::request_review`], [`Store::submit_for_review`] |
/// | `review` | `done` | [`Store::approve_review`] (as [`Store::complete`]) |
/// | `review` | `ready` / `todo` | [`Store::request_changes`] |
/// | `triage` | `ready` / `todo` | [`Store::specify`] |
/// | `todo`, `ready`, `blocked`, `triage` | `scheduled` | [`Store::schedule`] |
/// | any but `archived` | `archived` | [`Store::archive`] (closes an open run as `reclaimed`; promotes children) |
/// | `running` (lease lapsed) | the run's source status | [`Store::reclaim_expired`] |
/// | `running` (this worker's lease) | the run's source status | [`Store::release`] |
/// | `running` | `ready` / `blocked` | [`Store::record_failure`] (`blocked` with `gave_up` at the limit) |
/// | `running` | `ready` | [`Store::requeue_rate_limited`] (not counted as a failure) |
///
/// Every change is one atomic compare-and-swap together with its events: two dispatchers never
/// both claim a task, and a crash never leaves half a change.
///
/// # Design
///
/// The trait is object-safe (`Arc<dyn Store>`), because the store is chosen at run time from
/// configuration; its methods return boxed futures that borrow only `&self`, so arguments may be
/// temporaries. Time comes from the store's clock: a lease lapses at claim time plus its TTL, and
/// a zero TTL gives a lease that has already lapsed, which is how tests reach expiry without
/// sleeping. A store shared by many hosts should read that clock from its database, so host
/// clock skew cannot lapse a lease early.
///
/// Every method names the board it works on; a board is a separate queue with its own event
/// log. Event ids are strictly increasing per board and an event is visible to
/// [`Store::events_since`] only once every event with a smaller id is, so a cursor never skips
/// or repeats an event.
pub trait Store: Send + Sync + 'static {
    // ---- boards ----

    /// Every board, sorted by slug; archived ones only when asked.
    fn list_boards(&self, include_archived: bool) -> StoreFuture<'_, Vec<Board>>;
    /// Creates a board; fails with [`StoreError::BoardExists`] when the slug is taken.
    fn create_board(&self, board: &NewBoard) -> StoreFuture<'_, Board>;
    /// One board.
    fn board(&self, slug: &BoardSlug) -> StoreFuture<'_, Board>;
    /// Archives a board; it keeps its data but takes no new tasks or claims.
    fn archive_board(&self, slug: &BoardSlug) -> StoreFuture<'_, Board>;
    /// Deletes an archived board and everything on it.
    fn delete_board(&self, slug: &BoardSlug) -> StoreFuture<'_, ()>;

    // ---- tasks ----

    /// Creates a task with its parents (all on this board), or returns the live task holding
    /// the same idempotency key.
    fn create_task(&self, board: &BoardSlug, task: &NewTask) -> StoreFuture<'_, Created>;
    /// One task.
    fn task(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task>;
    /// Tasks matching a filter.
    fn list_tasks(&self, board: &BoardSlug, filter: &TaskFilter) -> StoreFuture<'_, Vec<Task>>;
    /// Edits fields (not the status); records `edited` and, for priority, `reprioritized`.
    fn patch_task(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        patch: &TaskPatch,
    ) -> StoreFuture<'_, Task>;
    /// Sets or clears the assignee; a new assignee starts with a clean failure count.
    fn assign_task(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        assignee: Option<&str>,
    ) -> StoreFuture<'_, Task>;
    /// Counts per status, open runs and the newest event id.
    fn stats(&self, board: &BoardSlug) -> StoreFuture<'_, BoardStats>;

    // ---- links ----

    /// Makes `child` wait for `parent`; refuses self-links, cycles and other boards' tasks. A
    /// `ready` child of an open parent goes back to `todo`.
    fn link(&self, board: &BoardSlug, parent: &TaskId, child: &TaskId) -> StoreFuture<'_, ()>;
    /// Removes a link; the child becomes `ready` if that was its last open parent.
    fn unlink(&self, board: &BoardSlug, parent: &TaskId, child: &TaskId) -> StoreFuture<'_, ()>;
    /// A task's parents and children.
    fn links(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, TaskLinks>;
    /// Every link of the board (archived tasks' too), by parent then child: what a dashboard
    /// needs to show each fan-out's progress without asking task by task. The default walks
    /// the tasks; the built-in stores answer with one query.
    fn board_links(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Link>> {
        let board = board.clone();
        Box::pin(async move {
            let filter = TaskFilter {
                include_archived: true,
                ..TaskFilter::default()
            };
            let mut links = Vec::new();
            for task in self.list_tasks(&board, &filter).await? {
                for child in self.links(&board, &task.id).await?.children {
                    links.push(Link {
                        parent: task.id.clone(),
                        child,
                    });
                }
            }
            links.sort_by(|a, b| (&a.parent, &a.child).cmp(&(&b.parent, &b.child)));
            Ok(links)
        })
    }

    // ---- comments, events, runs, attachments ----

    /// A task's links, its parents with their runs, its attachments, runs and comments: what
    /// a worker is first told. The built-in stores read it all in one transaction (one
    /// consistent view, one trip to the database); this default asks for each part in turn.
    fn task_context<'a>(
        &'a self,
        board: &'a BoardSlug,
        id: &'a TaskId,
    ) -> StoreFuture<'a, TaskContext> {
        Box::pin(async move {
            let links = self.links(board, id).await?;
            let mut parents = Vec::with_capacity(links.parents.len());
            for parent in &links.parents {
                parents.push((
                    self.task(board, parent).await?,
                    self.runs(board, parent).await?,
                ));
            }
            Ok(TaskContext {
                parents,
                attachments: self.attachments(board, id).await?,
                runs: self.runs(board, id).await?,
                comments: self.comments(board, id).await?,
                links,
            })
        })
    }
    /// Adds a comment.
    fn add_comment(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        author: &str,
        body: &str,
    ) -> StoreFuture<'_, Comment>;
    /// A task's comments, oldest first.
    fn comments(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Comment>>;
    /// Up to `limit` events with an id greater than `cursor`, oldest first.
    fn events_since(
        &self,
        board: &BoardSlug,
        cursor: EventId,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Event>>;
    /// Every event of one task, oldest first.
    fn task_events(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Event>>;
    /// A task's runs, oldest first.
    fn runs(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Run>>;
    /// One run.
    fn run(&self, board: &BoardSlug, id: RunId) -> StoreFuture<'_, Run>;
    /// Records what a run spent (its model requests' tokens and cost), open or ended.
    fn record_run_usage(
        &self,
        board: &BoardSlug,
        id: RunId,
        usage: &serde_json::Value,
    ) -> StoreFuture<'_, ()>;
    /// Stores a file with a task, up to [`ATTACHMENT_CAP_BYTES`](crate::domain::ATTACHMENT_CAP_BYTES).
    fn attach(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        file: &NewAttachment,
    ) -> StoreFuture<'_, Attachment>;
    /// A task's attachments (without their bytes).
    fn attachments(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Attachment>>;
    /// An attachment's bytes.
    fn attachment_content(&self, board: &BoardSlug, attachment: i64) -> StoreFuture<'_, Vec<u8>>;
    /// Removes an attachment.
    fn remove_attachment(&self, board: &BoardSlug, attachment: i64) -> StoreFuture<'_, ()>;

    // ---- lifecycle ----

    /// Moves `todo` tasks whose parents are all done or archived to `ready`, and `scheduled`
    /// tasks whose time has come to `ready` (or `todo`). Returns the tasks that became `ready`.
    fn promote(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<TaskId>>;
    /// Claims the best `ready` task (highest priority, then oldest) for `spec.worker`: the task
    /// becomes `running`, a lease and a run are opened and `claimed` is recorded. `None` when
    /// nothing is ready.
    fn claim_next(&self, board: &BoardSlug, spec: &ClaimSpec) -> StoreFuture<'_, Option<Claim>>;
    /// Claims up to one `ready` task per spec, in order, as [`Store::claim_next`] would one by
    /// one; stops at the first spec that finds nothing. A dispatcher with several free slots
    /// fills them this way. The built-in stores take them all in one transaction; this default
    /// calls `claim_next` per spec, and reports an error only when it claimed nothing (claims
    /// made before it are returned, so their tasks get a worker).
    fn claim_many<'a>(
        &'a self,
        board: &'a BoardSlug,
        specs: &'a [ClaimSpec],
    ) -> StoreFuture<'a, Vec<Claim>> {
        Box::pin(async move {
            let mut claims = Vec::with_capacity(specs.len());
            for spec in specs {
                match self.claim_next(board, spec).await {
                    Ok(Some(claim)) => claims.push(claim),
                    Ok(None) => break,
                    Err(error) if claims.is_empty() => return Err(error),
                    Err(error) => {
                        tracing::warn!(%board, %error, "a claim after others failed; keeping those made");
                        break;
                    }
                }
            }
            Ok(claims)
        })
    }
    /// Claims one named task that is `ready` (or `review`, for a reviewer).
    fn claim_task(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        spec: &ClaimSpec,
    ) -> StoreFuture<'_, Claim>;
    /// Extends the lease to now + `ttl`; only the worker holding it may.
    fn heartbeat(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        worker: &WorkerId,
        ttl: Duration,
    ) -> StoreFuture<'_, Lease>;
    /// Completes a task and promotes the children it was the last open parent of.
    fn complete(&self, board: &BoardSlug, id: &TaskId, done: &Completion) -> StoreFuture<'_, Task>;
    /// Blocks a task (see the transitions table for where it goes).
    fn block(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        block: &BlockRequest,
    ) -> StoreFuture<'_, Transitioned>;
    /// Unblocks a `blocked` or `scheduled` task, with a clean failure count.
    fn unblock(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task>;
    /// Archives a task from any status, ending its run; its children no longer wait for it.
    fn archive(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Transitioned>;
    /// Parks a task until `until`.
    fn schedule(&self, board: &BoardSlug, id: &TaskId, until: Timestamp) -> StoreFuture<'_, Task>;
    /// Takes a task out of `triage`.
    fn specify(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task>;
    /// Sends a task to `review`, ending its run as `review_requested`.
    fn request_review(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        summary: Option<&str>,
        worker: Option<&WorkerId>,
    ) -> StoreFuture<'_, Task>;
    /// A worker's completion that waits for review: like [`Store::complete`] (the worker must
    /// hold the lease; the result is kept on the task, the summary and metadata on the run)
    /// but the task goes to `review` and its run ends as `review_requested`.
    fn submit_for_review(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        done: &Completion,
    ) -> StoreFuture<'_, Task>;
    /// A reviewer's yes: completes a task that is in `review`, as [`Store::complete`] does;
    /// a task in any other status is refused.
    fn approve_review(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        done: &Completion,
    ) -> StoreFuture<'_, Task>;
    /// Sends a task in `review` back to work.
    fn request_changes(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        reason: &str,
    ) -> StoreFuture<'_, Task>;
    /// Takes back every lapsed lease: the run ends as `reclaimed`, the task returns to the
    /// status it was claimed from. Not counted as a failure.
    fn reclaim_expired(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Reclaimed>>;
    /// Hands `worker`'s lease back at once: the run ends as `reclaimed`, the task returns to
    /// the status it was claimed from, and `reclaimed` is recorded with `released: true`. Not
    /// counted as a failure. Only that worker's lease on that task is touched, in one
    /// transaction: a task that is not `running` is refused with
    /// [`StoreError::InvalidTransition`], one another worker holds with
    /// [`StoreError::LeaseNotHeld`], and neither is changed.
    fn release(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        worker: &WorkerId,
    ) -> StoreFuture<'_, Transitioned>;
    /// Records a failed run; at the effective limit the task is blocked with `gave_up`.
    fn record_failure(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        failure: &Failure,
    ) -> StoreFuture<'_, FailureOutcome>;
    /// Ends a rate-limited run and puts the task back to `ready` without counting a failure.
    fn requeue_rate_limited(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        worker: Option<&WorkerId>,
        error: &str,
    ) -> StoreFuture<'_, Task>;

    // ---- schedules (see `crate::schedule`) ----

    /// Makes a scheduled job; its definition is checked (schedule, zone, name unique on the
    /// board, parents present) and its first due time computed.
    fn create_job(&self, board: &BoardSlug, job: &NewJob) -> StoreFuture<'_, Job>;
    /// Every job of the board, by name.
    fn jobs(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Job>>;
    /// One job, by id or name; [`StoreError::JobNotFound`] when there is none.
    fn job(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, Job>;
    /// Changes a job (pausing and resuming included); a new schedule, zone or end starts
    /// counting again from now.
    fn update_job(&self, board: &BoardSlug, key: &str, patch: &JobPatch) -> StoreFuture<'_, Job>;
    /// Removes a job and its history; the tasks it made stay.
    fn delete_job(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, Job>;
    /// A job's recorded runs, newest first, each with its task's status.
    fn job_history(
        &self,
        board: &BoardSlug,
        key: &str,
        limit: usize,
    ) -> StoreFuture<'_, Vec<JobRun>>;
    /// Runs a job now by hand (its task is made at once); the schedule is not moved.
    fn run_job_now(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, JobRun>;
    /// Notes that a dispatcher swept the board's jobs now (a long gap since the last sweep is
    /// recorded as an outage; due times inside it count as missed).
    fn note_sweep(&self, board: &BoardSlug) -> StoreFuture<'_, ()>;
    /// Fires the job due earliest, if any: in one transaction, takes its (job, due time) row,
    /// makes its task and moves it to its next due time. `None` when nothing is due.
    fn fire_next_job(&self, board: &BoardSlug) -> StoreFuture<'_, Option<JobRun>>;
}

/// A task's budget as stored: JSON, or `NULL` for none (or one that limits nothing).
pub(crate) fn budget_text(budget: Option<&troupe_actors::usage::Budget>) -> Option<String> {
    budget
        .filter(|b| b.is_limited())
        .and_then(|b| serde_json::to_string(b).ok())
}

/// A creator's `traceparent` as stored: only a well-formed one (it comes from clients and
/// models, and is handed to every run).
pub(crate) fn kept_traceparent(traceparent: Option<&str>) -> Option<String> {
    traceparent
        .map(str::trim)
        .filter(|t| troupe_actors::trace::is_traceparent(t))
        .map(str::to_string)
}
