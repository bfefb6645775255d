//! [`Backend`]: the steps a store's database carries out inside one transaction on one board,
//! and the values that pass through them (the columns a status change writes, a run or an
//! attachment to store, an event, which ids a sweep picks). `sqlite_tx.rs` and
//! `postgres_tx.rs` implement it; `ops/` decides, against it, what each operation does.
//!
//! The methods are `async` because PostgreSQL's are; SQLite's never wait, and its store drives
//! them with [`run_ready`].

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use serde_json::Value;

use crate::domain::{
    Attachment, Board, BoardSlug, Comment, Event, EventId, EventKind, Link, ModelError, Run, RunId,
    RunOutcome, Task, TaskFilter, TaskId, TaskSort, TaskStatus, Timestamp,
};
use crate::store::{Claim, ClaimSpec, StoreError};

/// One column a status change writes besides `status` and `updated_at`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Set<'a> {
    /// `col = NULL`.
    Null(&'static str),
    /// `col = 0`.
    Zero(&'static str),
    /// `col = value`.
    Int(&'static str, i64),
    /// `col = value` (text or `NULL`).
    Text(&'static str, Option<&'a str>),
    /// `col = COALESCE(value, col)`: only a given value replaces the old one.
    TextIfGiven(&'static str, Option<&'a str>),
    /// `col = COALESCE(col, value)`: only an unset column takes the value.
    IntIfUnset(&'static str, i64),
    /// The lease columns cleared: the task no longer has a worker.
    EndLease,
}

/// A bound value of a [`Set`], for the backend to pass in its own parameter type.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SetValue<'s, 'a> {
    /// An integer.
    Int(&'s i64),
    /// Text or `NULL`.
    Text(&'s Option<&'a str>),
}

impl<'a> Set<'a> {
    /// The value this column binds, if it binds one.
    pub(crate) fn value(&self) -> Option<SetValue<'_, 'a>> {
        match self {
            Set::Int(_, v) | Set::IntIfUnset(_, v) => Some(SetValue::Int(v)),
            Set::Text(_, v) | Set::TextIfGiven(_, v) => Some(SetValue::Text(v)),
            Set::Null(_) | Set::Zero(_) | Set::EndLease => None,
        }
    }
}

/// The compare-and-swap statement of [`Backend::swap_status`]: `head` (an `UPDATE … SET` of
/// the status and `updated_at`), then `sets` as `, col = <mark>n, …` with parameters numbered
/// from `first` in the order [`Set::value`] gives them, then `filter` (the row, and the status
/// it was read in). `mark` is the backend's placeholder prefix (`?` or `$`).
pub(crate) fn swap_statement(
    (head, filter): (&str, &str),
    sets: &[Set<'_>],
    first: usize,
    mark: char,
) -> String {
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(head.len() + filter.len() + 40 * sets.len());
    sql.push_str(head);
    let mut n = first;
    for set in sets {
        // Writing to a String cannot fail.
        let _ = match set {
            Set::Null(col) => write!(sql, ", {col} = NULL"),
            Set::Zero(col) => write!(sql, ", {col} = 0"),
            Set::Int(col, _) | Set::Text(col, _) => write!(sql, ", {col} = {mark}{n}"),
            Set::TextIfGiven(col, _) => write!(sql, ", {col} = COALESCE({mark}{n}, {col})"),
            Set::IntIfUnset(col, _) => write!(sql, ", {col} = COALESCE({col}, {mark}{n})"),
            Set::EndLease => write!(
                sql,
                ", claim_lock = NULL, claim_expires = NULL, current_run_id = NULL"
            ),
        };
        if set.value().is_some() {
            n += 1;
        }
    }
    sql.push_str(filter);
    sql
}

/// A run to write: the task's assignee and status are its profile and source; a claim's run
/// holds the lease, a completion without a claim gets a run that ended as it began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunRow<'a> {
    /// The task.
    pub(crate) task: &'a TaskId,
    /// The profile that runs it.
    pub(crate) profile: Option<&'a str>,
    /// The status it was claimed from.
    pub(crate) source: TaskStatus,
    /// The worker's lock, for a claim.
    pub(crate) lock: Option<&'a str>,
    /// When the lease lapses, for a claim.
    pub(crate) expires: Option<i64>,
    /// The task's runtime limit, for a claim.
    pub(crate) max_runtime_seconds: Option<i64>,
    /// The last heartbeat (the claim itself).
    pub(crate) heartbeat: Option<i64>,
    /// When it started.
    pub(crate) started: i64,
    /// When it ended, if it already has.
    pub(crate) ended: Option<i64>,
    /// How it ended, if it already has.
    pub(crate) outcome: Option<&'static str>,
    /// The run's summary.
    pub(crate) summary: Option<&'a str>,
    /// The run's metadata, as JSON text.
    pub(crate) metadata: Option<&'a str>,
}

impl<'a> RunRow<'a> {
    /// A run for `task` with nothing but who and from where.
    pub(crate) fn of(task: &'a Task, now: Timestamp) -> RunRow<'a> {
        RunRow {
            task: &task.id,
            profile: task.assignee.as_deref(),
            source: task.status,
            lock: None,
            expires: None,
            max_runtime_seconds: None,
            heartbeat: None,
            started: now.0,
            ended: None,
            outcome: None,
            summary: None,
            metadata: None,
        }
    }
}

/// How a run ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunEnd<'a> {
    /// The outcome.
    pub(crate) outcome: RunOutcome,
    /// A summary kept on the run.
    pub(crate) summary: Option<&'a str>,
    /// Structured details kept on the run.
    pub(crate) metadata: Option<&'a Value>,
    /// The error kept on the run.
    pub(crate) error: Option<&'a str>,
}

impl RunEnd<'_> {
    pub(crate) fn with(outcome: RunOutcome) -> RunEnd<'static> {
        RunEnd {
            outcome,
            summary: None,
            metadata: None,
            error: None,
        }
    }
}

/// An attachment to store, already checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileRow<'a> {
    /// The task it belongs to.
    pub(crate) task: &'a TaskId,
    /// The plain file name.
    pub(crate) filename: &'a str,
    /// The media type.
    pub(crate) content_type: &'a str,
    /// The bytes.
    pub(crate) content: &'a [u8],
    /// Who uploaded it.
    pub(crate) uploaded_by: Option<&'a str>,
}

/// An event to append.
#[derive(Debug, Clone)]
pub(crate) struct NewEvent<'a> {
    /// The task it is about, if any.
    pub(crate) task: Option<&'a TaskId>,
    /// The run it is about, if any.
    pub(crate) run: Option<RunId>,
    /// What happened.
    pub(crate) kind: EventKind,
    /// The details, as JSON text (written straight to text, see `ops/payload.rs`).
    pub(crate) payload: String,
}

/// Which task ids a lifecycle sweep or a claim looks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pick<'a> {
    /// `running` tasks whose lease has lapsed, oldest lapse first.
    Lapsed,
    /// `scheduled` tasks whose time has come.
    Due,
    /// `todo` tasks with no open parent, best first.
    Unblocked,
    /// The best `ready` task, among these assignees when given (never an empty list).
    NextReady(Option<&'a [String]>),
}

/// Which side of a task's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The tasks it waits for.
    Parents,
    /// The tasks waiting for it.
    Children,
}

/// The raw counts behind [`BoardStats`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    /// Tasks per status present on the board.
    pub(crate) by_status: Vec<(TaskStatus, i64)>,
    /// Runs not yet ended.
    pub(crate) open_runs: i64,
    /// The newest event id, if any.
    pub(crate) last_event: Option<i64>,
}

/// What a backend does inside one open transaction on one board: each method is one small step
/// (a statement or two, or a buffered event) in the backend's own SQL, deciding nothing; the
/// operations of `ops/` decide which steps run, and in what order.
pub(crate) trait Backend {
    /// The backend's error inside a transaction.
    type Error: From<StoreError> + From<ModelError>;

    /// The board worked on.
    fn board(&self) -> &BoardSlug;
    /// The store clock's reading for the whole operation.
    fn now(&self) -> Timestamp;

    // ---- reads ----

    /// The board row; `BoardNotFound` when there is none.
    async fn board_row(&self) -> Result<Board, Self::Error>;
    /// Whether the board is archived; `BoardNotFound` when it has no row (a backend that can
    /// answers without reading the whole row).
    async fn board_archived(&self) -> Result<bool, Self::Error> {
        Ok(self.board_row().await?.archived_at.is_some())
    }
    /// A task of this board, if it exists.
    async fn try_task(&self, id: &TaskId) -> Result<Option<Task>, Self::Error>;
    /// Whether a task of this id exists (a backend that can answers without reading the row).
    async fn task_exists(&self, id: &TaskId) -> Result<bool, Self::Error> {
        Ok(self.try_task(id).await?.is_some())
    }
    /// The newest live task holding an idempotency key.
    async fn task_by_key(&self, key: &str) -> Result<Option<Task>, Self::Error>;
    /// Tasks matching a filter.
    async fn select_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, Self::Error>;
    /// The ids a sweep or a claim works through.
    async fn pick(&self, pick: Pick<'_>) -> Result<Vec<TaskId>, Self::Error>;
    /// One side of a task's links, oldest link first.
    async fn linked(&self, id: &TaskId, side: Side) -> Result<Vec<TaskId>, Self::Error>;
    /// Parents of `id` that are neither done nor archived.
    async fn open_parents(&self, id: &TaskId) -> Result<Vec<TaskId>, Self::Error>;
    /// Whether the link exists.
    async fn has_link(&self, parent: &TaskId, child: &TaskId) -> Result<bool, Self::Error>;
    /// Every link of the board, by parent then child.
    async fn all_links(&self) -> Result<Vec<Link>, Self::Error>;
    /// Counts behind the board's stats.
    async fn counts(&self) -> Result<Counts, Self::Error>;
    /// The status a run was claimed from, as stored.
    async fn run_source(&self, run: RunId) -> Result<Option<String>, Self::Error>;
    /// One run, if it exists.
    async fn try_run(&self, run: RunId) -> Result<Option<Run>, Self::Error>;
    /// A task's runs, oldest first.
    async fn task_runs(&self, id: &TaskId) -> Result<Vec<Run>, Self::Error>;
    /// A task's comments, oldest first.
    async fn task_comments(&self, id: &TaskId) -> Result<Vec<Comment>, Self::Error>;
    /// Up to `limit` events after `cursor`, oldest first.
    async fn events_after(&self, cursor: EventId, limit: usize) -> Result<Vec<Event>, Self::Error>;
    /// Every event of one task, oldest first.
    async fn events_of(&self, id: &TaskId) -> Result<Vec<Event>, Self::Error>;
    /// A task's attachments, without their bytes.
    async fn task_attachments(&self, id: &TaskId) -> Result<Vec<Attachment>, Self::Error>;
    /// An attachment's bytes, if it exists.
    async fn attachment_bytes(&self, attachment: i64) -> Result<Option<Vec<u8>>, Self::Error>;

    // ---- writes ----

    /// Writes the board row; `false` when one is already there.
    async fn insert_board(&self, name: &str, description: &str) -> Result<bool, Self::Error>;
    /// Stamps the board archived now.
    async fn mark_board_archived(&self) -> Result<(), Self::Error>;
    /// Writes a new task row (its id, fields, status and creation time).
    async fn insert_task(&self, task: &Task) -> Result<(), Self::Error>;
    /// Writes a task's editable fields (title through result), not its status.
    async fn write_fields(&self, task: &Task) -> Result<(), Self::Error>;
    /// Sets the assignee and clears the failure counters.
    async fn write_assignee(&self, id: &TaskId, assignee: Option<&str>) -> Result<(), Self::Error>;
    /// Moves `task` to `to`, writing `sets` too, only if it is still in the status it was read
    /// in; `false` when it is not.
    async fn swap_status(
        &self,
        task: &Task,
        to: TaskStatus,
        sets: &[Set<'_>],
    ) -> Result<bool, Self::Error>;
    /// Writes a run and returns its id.
    async fn insert_run(&self, run: &RunRow<'_>) -> Result<RunId, Self::Error>;
    /// Ends an open run; a run already ended is left alone.
    async fn end_run(&self, run: RunId, end: RunEnd<'_>) -> Result<(), Self::Error>;
    /// Extends a run's lease to `expires`, heartbeat now.
    async fn extend_run(&self, run: RunId, expires: Timestamp) -> Result<(), Self::Error>;
    /// Records a run's usage; `false` when there is no such run.
    async fn write_run_usage(&self, run: RunId, usage: &Value) -> Result<bool, Self::Error>;
    /// Writes a link.
    async fn insert_link(&self, parent: &TaskId, child: &TaskId) -> Result<(), Self::Error>;
    /// Removes a link; `false` when there was none.
    async fn delete_link(&self, parent: &TaskId, child: &TaskId) -> Result<bool, Self::Error>;
    /// Writes a comment and returns its id.
    async fn insert_comment(
        &self,
        id: &TaskId,
        author: &str,
        body: &str,
    ) -> Result<i64, Self::Error>;
    /// Stores an attachment (already checked) and returns its id.
    async fn insert_attachment(&self, file: &FileRow<'_>) -> Result<i64, Self::Error>;
    /// Removes an attachment and returns what it was, if it existed.
    async fn delete_attachment(&self, attachment: i64) -> Result<Option<Attachment>, Self::Error>;
    /// Claims, in one step, the best ready tasks that have no open parent, one per spec (all
    /// of which name the same assignees), best first, writing no events. A backend without
    /// such a step claims none here, and `claim_many` claims one by one.
    async fn claim_batch(&self, specs: &[ClaimSpec]) -> Result<Vec<Claim>, Self::Error> {
        let _ = specs;
        Ok(Vec::new())
    }
    /// Appends an event (it may get its id only at commit).
    fn event(&self, event: NewEvent<'_>) -> Result<(), Self::Error>;
}

/// Drives a future on `board` that never waits (SQLite's operations) to its end. A future that
/// does wait is a bug in the backend; it is reported, not hung on.
pub(crate) fn run_ready<T, E: From<StoreError>>(
    board: &BoardSlug,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => Err(StoreError::Backend {
            board: board.clone(),
            source: "a SQLite store operation waited instead of finishing at once (a bug in \
                     the store)"
                .into(),
        }
        .into()),
    }
}

/// Clamps an unsigned integer into the databases' signed 64-bit range.
pub(crate) fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The `ORDER BY` of a task listing, the same on every backend.
pub(crate) fn task_order(sort: TaskSort) -> &'static str {
    match sort {
        TaskSort::Created => " ORDER BY created_at, id",
        TaskSort::CreatedDesc => " ORDER BY created_at DESC, id DESC",
        TaskSort::Priority => " ORDER BY priority DESC, created_at, id",
        TaskSort::Updated => " ORDER BY updated_at DESC, id",
    }
}
