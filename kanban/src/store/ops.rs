//! Every store operation, written once: what may change, which events are written and what the
//! new state is. A backend ([`Backend`]) only carries the decision out, in its own SQL and
//! inside the transaction its store opened; the pure rules these operations ask come from
//! `rules.rs`.
//!
//! The backend methods are `async` because PostgreSQL's are; SQLite's never wait, and its store
//! drives them with [`run_ready`].

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use serde_json::{Value, json};

use crate::domain::{
    ATTACHMENT_CAP_BYTES, Attachment, Board, BoardSlug, BoardStats, Comment, Event, EventId,
    EventKind, InitialStatus, Lease, Link, ModelError, NewAttachment, NewBoard, NewTask, Run,
    RunId, RunOutcome, Task, TaskFilter, TaskId, TaskLinks, TaskPatch, TaskSort, TaskStatus,
    Timestamp, WorkerId,
};
use crate::store::rules;
use crate::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Created, Failure, FailureOutcome, Reclaimed,
    StoreError, Transitioned,
};

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
    fn of(task: &'a Task, now: Timestamp) -> RunRow<'a> {
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
    fn with(outcome: RunOutcome) -> RunEnd<'static> {
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
    /// The details.
    pub(crate) payload: Value,
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
/// operations below decide which steps run, and in what order.
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
    /// A task of this board, if it exists.
    async fn try_task(&self, id: &TaskId) -> Result<Option<Task>, Self::Error>;
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

fn non_empty(field: &'static str, value: &str, example: &str) -> Result<(), ModelError> {
    if value.trim().is_empty() {
        Err(ModelError::BadField {
            field,
            why: format!("it is empty; send {example}"),
        })
    } else {
        Ok(())
    }
}

// ---- building blocks ----

/// Appends an event.
fn emit<B: Backend>(
    b: &B,
    task: Option<&TaskId>,
    run: Option<RunId>,
    kind: EventKind,
    payload: Value,
) -> Result<(), B::Error> {
    b.event(NewEvent {
        task,
        run,
        kind,
        payload,
    })
}

/// A task of this board; `TaskNotFound` otherwise.
pub(crate) async fn task<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    b.try_task(id).await?.ok_or_else(|| {
        StoreError::TaskNotFound {
            board: b.board().clone(),
            id: id.clone(),
        }
        .into()
    })
}

/// The board row, refused when the board is archived.
async fn ensure_live<B: Backend>(b: &B) -> Result<(), B::Error> {
    if b.board_row().await?.archived_at.is_some() {
        return Err(StoreError::BoardArchived {
            slug: b.board().clone(),
        }
        .into());
    }
    Ok(())
}

/// The compare-and-swap every status change goes through: the row changes only if it is still
/// in the status it was read in.
async fn cas<B: Backend>(
    b: &B,
    task: &Task,
    to: TaskStatus,
    sets: &[Set<'_>],
) -> Result<(), B::Error> {
    if b.swap_status(task, to, sets).await? {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            task: task.id.clone(),
        }
        .into())
    }
}

/// Refuses a worker that does not hold the task's lease.
fn check_holder(task: &Task, worker: Option<&WorkerId>) -> Result<(), StoreError> {
    let Some(worker) = worker else { return Ok(()) };
    let holds = task.status == TaskStatus::Running
        && task.lease.as_ref().is_some_and(|l| &l.worker == worker);
    if holds {
        Ok(())
    } else {
        Err(StoreError::LeaseNotHeld {
            task: task.id.clone(),
            worker: worker.to_string(),
            holder: task.lease.as_ref().map(|l| l.worker.to_string()),
        })
    }
}

/// Ends the task's open run, if any.
async fn close_run<B: Backend>(
    b: &B,
    task: &Task,
    end: RunEnd<'_>,
) -> Result<Option<RunId>, B::Error> {
    let Some(lease) = &task.lease else {
        return Ok(None);
    };
    b.end_run(lease.run_id, end).await?;
    Ok(Some(lease.run_id))
}

/// The status the open run was claimed from (`ready` when there is none).
async fn source_status<B: Backend>(b: &B, task: &Task) -> Result<TaskStatus, B::Error> {
    let Some(lease) = &task.lease else {
        return Ok(TaskStatus::Ready);
    };
    match b.run_source(lease.run_id).await?.as_deref() {
        Some("review") => Ok(TaskStatus::Review),
        _ => Ok(TaskStatus::Ready),
    }
}

/// Where a task goes when it may run again: `preferred`, or `todo` while a parent is open.
async fn runnable<B: Backend>(
    b: &B,
    id: &TaskId,
    preferred: TaskStatus,
) -> Result<TaskStatus, B::Error> {
    let open = !b.open_parents(id).await?.is_empty();
    Ok(rules::runnable_status(open, preferred))
}

/// Makes every `todo` child of `parent` whose parents are now all finished `ready`.
async fn promote_children<B: Backend>(b: &B, parent: &TaskId) -> Result<(), B::Error> {
    for child in b.linked(parent, Side::Children).await? {
        let task = task(b, &child).await?;
        if task.status == TaskStatus::Todo && b.open_parents(&child).await?.is_empty() {
            cas(b, &task, TaskStatus::Ready, &[]).await?;
            emit(
                b,
                Some(&child),
                None,
                EventKind::Promoted,
                json!({"from": "todo", "to": "ready", "by": parent.as_str()}),
            )?;
        }
    }
    Ok(())
}

// ---- boards ----

/// Writes the board row; `BoardExists` when one is already there.
pub(crate) async fn create_board<B: Backend>(b: &B, new: &NewBoard) -> Result<Board, B::Error> {
    let name = new
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(new.slug.as_str());
    if !b.insert_board(name, &new.description).await? {
        return Err(StoreError::BoardExists {
            slug: b.board().clone(),
        }
        .into());
    }
    emit(
        b,
        None,
        None,
        EventKind::BoardCreated,
        json!({"slug": b.board().as_str()}),
    )?;
    b.board_row().await
}

/// Marks the board archived (idempotent).
pub(crate) async fn archive_board<B: Backend>(b: &B) -> Result<Board, B::Error> {
    let board = b.board_row().await?;
    if board.archived_at.is_none() {
        b.mark_board_archived().await?;
        emit(
            b,
            None,
            None,
            EventKind::BoardArchived,
            json!({"slug": b.board().as_str()}),
        )?;
    }
    b.board_row().await
}

// ---- tasks ----

pub(crate) async fn create_task<B: Backend>(b: &B, new: &NewTask) -> Result<Created, B::Error> {
    ensure_live(b).await?;
    non_empty("title", &new.title, "a one-line title")?;
    if let Some(a) = &new.assignee {
        non_empty("assignee", a, "a profile name, or no assignee at all")?;
    }
    if let Some(key) = &new.idempotency_key {
        non_empty("idempotency_key", key, "a non-empty key, or none")?;
        if let Some(task) = b.task_by_key(key).await? {
            return Ok(Created {
                task,
                created: false,
            });
        }
    }
    let mut parents: Vec<TaskId> = Vec::new();
    for p in &new.parents {
        if !parents.contains(p) {
            parents.push(p.clone());
        }
    }
    let mut tenant = new.tenant.clone();
    let mut any_open = false;
    for p in &parents {
        let parent = task(b, p).await?;
        if tenant.is_none() {
            tenant = parent.tenant.clone();
        }
        any_open |= rules::is_open(parent.status);
    }
    let status = match new.initial {
        InitialStatus::Triage => TaskStatus::Triage,
        InitialStatus::Blocked => TaskStatus::Blocked,
        InitialStatus::Auto => rules::runnable_status(any_open, TaskStatus::Ready),
    };
    let id = fresh_id(b).await?;
    let now = b.now();
    let row = Task {
        id: id.clone(),
        title: new.title.trim().to_string(),
        body: new.body.clone(),
        assignee: new.assignee.as_deref().map(|a| a.trim().to_string()),
        status,
        priority: new.priority,
        tenant,
        idempotency_key: new.idempotency_key.clone(),
        created_by: new.created_by.clone(),
        created_at: now,
        updated_at: now,
        started_at: None,
        completed_at: None,
        workspace: new.workspace.clone(),
        max_runtime_seconds: new.max_runtime_seconds,
        max_retries: new.max_retries,
        result: None,
        consecutive_failures: 0,
        protocol_violations: 0,
        last_failure_error: None,
        block_kind: None,
        block_reason: None,
        block_recurrences: 0,
        lease: None,
        last_heartbeat_at: None,
        scheduled_until: None,
        budget: new.budget.filter(|budget| budget.is_limited()),
        traceparent: super::kept_traceparent(new.traceparent.as_deref()),
    };
    b.insert_task(&row).await?;
    for p in &parents {
        b.insert_link(p, &id).await?;
    }
    let parent_ids: Vec<&str> = parents.iter().map(TaskId::as_str).collect();
    emit(
        b,
        Some(&id),
        None,
        EventKind::Created,
        json!({"status": status.as_str(), "parents": parent_ids, "assignee": new.assignee}),
    )?;
    Ok(Created {
        task: task(b, &id).await?,
        created: true,
    })
}

/// A random id not yet used on this board.
async fn fresh_id<B: Backend>(b: &B) -> Result<TaskId, B::Error> {
    for _ in 0..16 {
        let id = TaskId::generate();
        if b.try_task(&id).await?.is_none() {
            return Ok(id);
        }
    }
    // 16 collisions in a row in a 32-bit space means the board is nearly full.
    Err(StoreError::Corrupt {
        board: b.board().clone(),
        what: "no free task id found after 16 tries".to_string(),
    }
    .into())
}

pub(crate) async fn list_tasks<B: Backend>(b: &B, f: &TaskFilter) -> Result<Vec<Task>, B::Error> {
    b.select_tasks(f).await
}

pub(crate) async fn patch_task<B: Backend>(
    b: &B,
    id: &TaskId,
    p: &TaskPatch,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    if p.is_empty() {
        return Ok(task);
    }
    if let Some(title) = &p.title {
        non_empty("title", title, "a one-line title")?;
    }
    let mut fields: Vec<&str> = Vec::new();
    let mut set = |name: &'static str, changed: bool| {
        if changed {
            fields.push(name);
        }
    };
    set("title", p.title.is_some());
    set("body", p.body.is_some());
    set("priority", p.priority.is_some());
    set("tenant", p.tenant.is_some());
    set("max_runtime_seconds", p.max_runtime_seconds.is_some());
    set("max_retries", p.max_retries.is_some());
    set("workspace", p.workspace.is_some());
    set("result", p.result.is_some());
    let mut patched = task.clone();
    if let Some(title) = &p.title {
        patched.title = title.trim().to_string();
    }
    if let Some(body) = &p.body {
        patched.body.clone_from(body);
    }
    patched.priority = p.priority.unwrap_or(task.priority);
    if let Some(tenant) = &p.tenant {
        patched.tenant.clone_from(tenant);
    }
    patched.max_runtime_seconds = p.max_runtime_seconds.unwrap_or(task.max_runtime_seconds);
    patched.max_retries = p.max_retries.unwrap_or(task.max_retries);
    if let Some(ws) = &p.workspace {
        patched.workspace = ws.clone();
    }
    if p.result.is_some() {
        patched.result.clone_from(&p.result);
    }
    b.write_fields(&patched).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Edited,
        json!({"fields": fields}),
    )?;
    if let Some(pr) = p.priority.filter(|pr| *pr != task.priority) {
        emit(
            b,
            Some(id),
            None,
            EventKind::Reprioritized,
            json!({"from": task.priority, "to": pr}),
        )?;
    }
    self::task(b, id).await
}

pub(crate) async fn assign_task<B: Backend>(
    b: &B,
    id: &TaskId,
    assignee: Option<&str>,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    let assignee = assignee.map(str::trim);
    if let Some(a) = assignee {
        non_empty("assignee", a, "a profile name, or none to unassign")?;
    }
    if task.assignee.as_deref() == assignee {
        return Ok(task);
    }
    // A different profile deserves its own attempts.
    b.write_assignee(id, assignee).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Assigned,
        json!({"from": task.assignee, "to": assignee}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn stats<B: Backend>(b: &B) -> Result<BoardStats, B::Error> {
    let counts = b.counts().await?;
    let by_status = TaskStatus::ALL
        .into_iter()
        .map(|s| {
            let n = counts
                .by_status
                .iter()
                .find(|(c, _)| *c == s)
                .map_or(0, |(_, n)| *n);
            (s, u64::try_from(n).unwrap_or(0))
        })
        .collect();
    Ok(BoardStats {
        by_status,
        open_runs: u64::try_from(counts.open_runs).unwrap_or(0),
        last_event_id: EventId(counts.last_event.unwrap_or(0)),
    })
}

// ---- links ----

pub(crate) async fn link<B: Backend>(
    b: &B,
    parent: &TaskId,
    child: &TaskId,
) -> Result<(), B::Error> {
    if parent == child {
        return Err(StoreError::SelfLink {
            task: parent.clone(),
        }
        .into());
    }
    let parent_task = task(b, parent).await?;
    let child_task = task(b, child).await?;
    if b.has_link(parent, child).await? {
        return Ok(());
    }
    if is_descendant(b, child, parent).await? {
        return Err(StoreError::Cycle {
            parent: parent.clone(),
            child: child.clone(),
        }
        .into());
    }
    b.insert_link(parent, child).await?;
    // A ready child must wait again for an unfinished new parent.
    let demote = child_task.status == TaskStatus::Ready && rules::is_open(parent_task.status);
    if demote {
        cas(b, &child_task, TaskStatus::Todo, &[]).await?;
    }
    emit(
        b,
        Some(child),
        None,
        EventKind::Linked,
        json!({"parent": parent.as_str(), "child": child.as_str(),
               "child_status": if demote { "todo" } else { child_task.status.as_str() }}),
    )
}

/// Depth-first search down the child links from `from`, looking for `target`.
async fn is_descendant<B: Backend>(
    b: &B,
    from: &TaskId,
    target: &TaskId,
) -> Result<bool, B::Error> {
    let mut stack = vec![from.clone()];
    let mut seen: HashSet<TaskId> = HashSet::new();
    while let Some(node) = stack.pop() {
        if &node == target {
            return Ok(true);
        }
        if seen.insert(node.clone()) {
            stack.extend(b.linked(&node, Side::Children).await?);
        }
    }
    Ok(false)
}

pub(crate) async fn unlink<B: Backend>(
    b: &B,
    parent: &TaskId,
    child: &TaskId,
) -> Result<(), B::Error> {
    if !b.delete_link(parent, child).await? {
        return Err(StoreError::LinkNotFound {
            parent: parent.clone(),
            child: child.clone(),
        }
        .into());
    }
    emit(
        b,
        Some(child),
        None,
        EventKind::Unlinked,
        json!({"parent": parent.as_str(), "child": child.as_str()}),
    )?;
    let task = task(b, child).await?;
    if task.status == TaskStatus::Todo && b.open_parents(child).await?.is_empty() {
        cas(b, &task, TaskStatus::Ready, &[]).await?;
        emit(
            b,
            Some(child),
            None,
            EventKind::Promoted,
            json!({"from": "todo", "to": "ready"}),
        )?;
    }
    Ok(())
}

pub(crate) async fn board_links<B: Backend>(b: &B) -> Result<Vec<Link>, B::Error> {
    b.all_links().await
}

pub(crate) async fn links<B: Backend>(b: &B, id: &TaskId) -> Result<TaskLinks, B::Error> {
    task(b, id).await?;
    Ok(TaskLinks {
        parents: b.linked(id, Side::Parents).await?,
        children: b.linked(id, Side::Children).await?,
    })
}

// ---- comments, events, runs, attachments ----

pub(crate) async fn add_comment<B: Backend>(
    b: &B,
    id: &TaskId,
    author: &str,
    body: &str,
) -> Result<Comment, B::Error> {
    task(b, id).await?;
    non_empty("author", author, "who is writing (a profile or user name)")?;
    non_empty("body", body, "the comment's text")?;
    let cid = b.insert_comment(id, author, body).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Commented,
        json!({"comment_id": cid, "author": author}),
    )?;
    Ok(Comment {
        id: cid,
        task_id: id.clone(),
        author: author.to_string(),
        body: body.to_string(),
        created_at: b.now(),
    })
}

pub(crate) async fn comments<B: Backend>(b: &B, id: &TaskId) -> Result<Vec<Comment>, B::Error> {
    task(b, id).await?;
    b.task_comments(id).await
}

pub(crate) async fn events_since<B: Backend>(
    b: &B,
    cursor: EventId,
    limit: usize,
) -> Result<Vec<Event>, B::Error> {
    b.events_after(cursor, limit).await
}

pub(crate) async fn task_events<B: Backend>(b: &B, id: &TaskId) -> Result<Vec<Event>, B::Error> {
    task(b, id).await?;
    b.events_of(id).await
}

pub(crate) async fn runs<B: Backend>(b: &B, id: &TaskId) -> Result<Vec<Run>, B::Error> {
    task(b, id).await?;
    b.task_runs(id).await
}

pub(crate) async fn run<B: Backend>(b: &B, id: RunId) -> Result<Run, B::Error> {
    b.try_run(id).await?.ok_or_else(|| {
        StoreError::RunNotFound {
            board: b.board().clone(),
            id: id.0,
        }
        .into()
    })
}

pub(crate) async fn record_run_usage<B: Backend>(
    b: &B,
    id: RunId,
    usage: &Value,
) -> Result<(), B::Error> {
    if !b.write_run_usage(id, usage).await? {
        return Err(StoreError::RunNotFound {
            board: b.board().clone(),
            id: id.0,
        }
        .into());
    }
    Ok(())
}

pub(crate) async fn attach<B: Backend>(
    b: &B,
    id: &TaskId,
    file: &NewAttachment,
) -> Result<Attachment, B::Error> {
    task(b, id).await?;
    let name = file.filename.trim();
    let plain = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0']);
    if !plain {
        return Err(ModelError::BadField {
            field: "filename",
            why: format!(
                "{:?} is not a plain file name; send a name of 1-255 characters without \
                 '/' or '\\'",
                file.filename
            ),
        }
        .into());
    }
    let size = file.content.len() as u64;
    if size > ATTACHMENT_CAP_BYTES {
        return Err(StoreError::AttachmentTooLarge {
            filename: name.to_string(),
            size,
            cap: ATTACHMENT_CAP_BYTES,
        }
        .into());
    }
    let content_type = if file.content_type.trim().is_empty() {
        "application/octet-stream"
    } else {
        file.content_type.trim()
    };
    let row = FileRow {
        task: id,
        filename: name,
        content_type,
        content: &file.content,
        uploaded_by: file.uploaded_by.as_deref(),
    };
    let aid = b.insert_attachment(&row).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Attached,
        json!({"attachment_id": aid, "filename": name, "size": size}),
    )?;
    Ok(Attachment {
        id: aid,
        task_id: id.clone(),
        filename: name.to_string(),
        content_type: content_type.to_string(),
        size,
        uploaded_by: file.uploaded_by.clone(),
        created_at: b.now(),
    })
}

pub(crate) async fn attachments<B: Backend>(
    b: &B,
    id: &TaskId,
) -> Result<Vec<Attachment>, B::Error> {
    task(b, id).await?;
    b.task_attachments(id).await
}

pub(crate) async fn attachment_content<B: Backend>(
    b: &B,
    attachment: i64,
) -> Result<Vec<u8>, B::Error> {
    b.attachment_bytes(attachment).await?.ok_or_else(|| {
        StoreError::AttachmentNotFound {
            board: b.board().clone(),
            id: attachment,
        }
        .into()
    })
}

pub(crate) async fn remove_attachment<B: Backend>(b: &B, attachment: i64) -> Result<(), B::Error> {
    let found =
        b.delete_attachment(attachment)
            .await?
            .ok_or_else(|| StoreError::AttachmentNotFound {
                board: b.board().clone(),
                id: attachment,
            })?;
    emit(
        b,
        Some(&found.task_id),
        None,
        EventKind::AttachmentRemoved,
        json!({"attachment_id": attachment, "filename": found.filename}),
    )
}

// ---- lifecycle ----

pub(crate) async fn promote<B: Backend>(b: &B) -> Result<Vec<TaskId>, B::Error> {
    let mut promoted = Vec::new();
    for id in b.pick(Pick::Due).await? {
        let task = task(b, &id).await?;
        let to = runnable(b, &id, TaskStatus::Ready).await?;
        cas(b, &task, to, &[Set::Null("scheduled_until")]).await?;
        emit(
            b,
            Some(&id),
            None,
            EventKind::Promoted,
            json!({"from": "scheduled", "to": to.as_str()}),
        )?;
        if to == TaskStatus::Ready {
            promoted.push(id);
        }
    }
    for id in b.pick(Pick::Unblocked).await? {
        let task = task(b, &id).await?;
        cas(b, &task, TaskStatus::Ready, &[]).await?;
        emit(
            b,
            Some(&id),
            None,
            EventKind::Promoted,
            json!({"from": "todo", "to": "ready"}),
        )?;
        promoted.push(id);
    }
    Ok(promoted)
}

/// Claims the best ready task; tasks found with an open parent go back to `todo`.
pub(crate) async fn claim_next<B: Backend>(
    b: &B,
    spec: &ClaimSpec,
) -> Result<Option<Claim>, B::Error> {
    ensure_live(b).await?;
    if spec.assignees.as_ref().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    loop {
        let next = b.pick(Pick::NextReady(spec.assignees.as_deref())).await?;
        let Some(id) = next.into_iter().next() else {
            return Ok(None);
        };
        let task = task(b, &id).await?;
        // Each pass either claims or moves one task out of `ready`, so this ends.
        if let Some(claim) = try_claim(b, &task, spec).await? {
            return Ok(Some(claim));
        }
    }
}

/// Claims one named task.
pub(crate) async fn claim_task<B: Backend>(
    b: &B,
    id: &TaskId,
    spec: &ClaimSpec,
) -> Result<Claim, B::Error> {
    ensure_live(b).await?;
    let task = task(b, id).await?;
    rules::CLAIM.check(&task)?;
    match try_claim(b, &task, spec).await? {
        Some(claim) => Ok(claim),
        None => Err(StoreError::ParentsOpen {
            task: id.clone(),
            action: "claimed",
            open_parents: b.open_parents(id).await?,
        }
        .into()),
    }
}

/// The claim itself: `None` (and the task back in `todo`) when a parent is still open.
async fn try_claim<B: Backend>(
    b: &B,
    task: &Task,
    spec: &ClaimSpec,
) -> Result<Option<Claim>, B::Error> {
    let open = b.open_parents(&task.id).await?;
    if !open.is_empty() && task.status == TaskStatus::Ready {
        cas(b, task, TaskStatus::Todo, &[]).await?;
        let ids: Vec<&str> = open.iter().map(TaskId::as_str).collect();
        emit(
            b,
            Some(&task.id),
            None,
            EventKind::ClaimRejected,
            json!({"open_parents": ids}),
        )?;
        return Ok(None);
    }
    let now = b.now();
    let expires = now.plus(spec.ttl);
    let lock = spec.worker.to_string();
    let run = RunRow {
        lock: Some(&lock),
        expires: Some(expires.0),
        max_runtime_seconds: task.max_runtime_seconds.map(sql_int),
        heartbeat: Some(now.0),
        ..RunRow::of(task, now)
    };
    let run_id = b.insert_run(&run).await?;
    cas(
        b,
        task,
        TaskStatus::Running,
        &[
            Set::Text("claim_lock", Some(&lock)),
            Set::Int("claim_expires", expires.0),
            Set::Int("current_run_id", run_id.0),
            Set::Int("last_heartbeat_at", now.0),
            Set::IntIfUnset("started_at", now.0),
        ],
    )
    .await?;
    emit(
        b,
        Some(&task.id),
        Some(run_id),
        EventKind::Claimed,
        json!({"lock": lock, "expires": expires.0, "run_id": run_id.0, "from": task.status.as_str()}),
    )?;
    Ok(Some(Claim {
        task: self::task(b, &task.id).await?,
        lease: Lease {
            worker: spec.worker.clone(),
            expires_at: expires,
            run_id,
        },
        run: self::run(b, run_id).await?,
    }))
}

pub(crate) async fn heartbeat<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: &WorkerId,
    ttl: std::time::Duration,
) -> Result<Lease, B::Error> {
    let task = task(b, id).await?;
    rules::HEARTBEAT.check(&task)?;
    check_holder(&task, Some(worker))?;
    let Some(lease) = task.lease.clone() else {
        return Err(StoreError::LeaseNotHeld {
            task: id.clone(),
            worker: worker.to_string(),
            holder: None,
        }
        .into());
    };
    let now = b.now();
    let expires = now.plus(ttl);
    cas(
        b,
        &task,
        TaskStatus::Running,
        &[
            Set::Int("claim_expires", expires.0),
            Set::Int("last_heartbeat_at", now.0),
        ],
    )
    .await?;
    b.extend_run(lease.run_id, expires).await?;
    emit(
        b,
        Some(id),
        Some(lease.run_id),
        EventKind::Heartbeat,
        json!({"expires": expires.0}),
    )?;
    Ok(Lease {
        worker: worker.clone(),
        expires_at: expires,
        run_id: lease.run_id,
    })
}

pub(crate) async fn complete<B: Backend>(
    b: &B,
    id: &TaskId,
    done: &Completion,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::COMPLETE.check(&task)?;
    check_holder(&task, done.worker.as_ref())?;
    let open = b.open_parents(id).await?;
    if !open.is_empty() {
        return Err(StoreError::ParentsOpen {
            task: id.clone(),
            action: "completed",
            open_parents: open,
        }
        .into());
    }
    let summary = done.summary.as_deref();
    let end = RunEnd {
        summary,
        metadata: done.metadata.as_ref(),
        ..RunEnd::with(RunOutcome::Completed)
    };
    let run_id = match close_run(b, &task, end).await? {
        Some(run) => run,
        None => {
            // Never claimed: record a zero-length run so every completion has one.
            let metadata = done.metadata.as_ref().map(Value::to_string);
            let now = b.now();
            let run = RunRow {
                ended: Some(now.0),
                outcome: Some(RunOutcome::Completed.as_str()),
                summary,
                metadata: metadata.as_deref(),
                ..RunRow::of(&task, now)
            };
            b.insert_run(&run).await?
        }
    };
    cas(
        b,
        &task,
        TaskStatus::Done,
        &[
            Set::TextIfGiven("result", done.result.as_deref()),
            Set::Int("completed_at", b.now().0),
            Set::Zero("consecutive_failures"),
            Set::Zero("protocol_violations"),
            Set::Null("last_failure_error"),
            Set::Null("block_kind"),
            Set::Null("block_reason"),
            Set::Zero("block_recurrences"),
            Set::EndLease,
            Set::Null("scheduled_until"),
        ],
    )
    .await?;
    let result_len = done.result.as_ref().map_or(0, |r| r.chars().count());
    emit(
        b,
        Some(id),
        Some(run_id),
        EventKind::Completed,
        json!({"result_len": result_len, "summary": summary.map(rules::summary_line)}),
    )?;
    promote_children(b, id).await?;
    self::task(b, id).await
}

pub(crate) async fn block<B: Backend>(
    b: &B,
    id: &TaskId,
    req: &BlockRequest,
) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::BLOCK.check(&task)?;
    check_holder(&task, req.worker.as_ref())?;
    let d = rules::decide_block(&task, req)?;
    let end = RunEnd {
        summary: Some(&req.reason),
        ..RunEnd::with(RunOutcome::Blocked)
    };
    let run = close_run(b, &task, end).await?;
    cas(
        b,
        &task,
        d.target,
        &[
            Set::Text("block_kind", Some(&d.kind)),
            Set::Text("block_reason", Some(&req.reason)),
            Set::Int("block_recurrences", i64::from(d.recurrences)),
            Set::EndLease,
        ],
    )
    .await?;
    let mut payload = json!({"reason": req.reason, "kind": d.kind, "recurrences": d.recurrences,
                             "to": d.target.as_str()});
    if d.event == EventKind::BlockLoopDetected {
        payload["limit"] = json!(crate::domain::BLOCK_RECURRENCE_LIMIT);
    }
    emit(b, Some(id), run, d.event, payload)?;
    Ok(Transitioned {
        task: self::task(b, id).await?,
        ended_lease: task.lease,
    })
}

pub(crate) async fn unblock<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::UNBLOCK.check(&task)?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    // An explicit unblock is a fresh chance: failure counters start again. The block kind
    // stays, so the same block coming straight back is still caught as a loop.
    let sets = [
        Set::Null("scheduled_until"),
        Set::Zero("consecutive_failures"),
        Set::Zero("protocol_violations"),
    ];
    cas(b, &task, to, &sets).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Unblocked,
        json!({"from": task.status.as_str(), "to": to.as_str()}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn archive<B: Backend>(b: &B, id: &TaskId) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::ARCHIVE.check(&task)?;
    let end = RunEnd {
        error: Some("task archived"),
        ..RunEnd::with(RunOutcome::Reclaimed)
    };
    let run = close_run(b, &task, end).await?;
    let sets = [Set::EndLease, Set::Null("scheduled_until")];
    cas(b, &task, TaskStatus::Archived, &sets).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::Archived,
        json!({"from": task.status.as_str()}),
    )?;
    promote_children(b, id).await?;
    Ok(Transitioned {
        task: self::task(b, id).await?,
        ended_lease: task.lease,
    })
}

pub(crate) async fn schedule<B: Backend>(
    b: &B,
    id: &TaskId,
    until: Timestamp,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::SCHEDULE.check(&task)?;
    let sets = [Set::Int("scheduled_until", until.0)];
    cas(b, &task, TaskStatus::Scheduled, &sets).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Scheduled,
        json!({"from": task.status.as_str(), "until": until.0}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn specify<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::SPECIFY.check(&task)?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    cas(b, &task, to, &[]).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Specified,
        json!({"to": to.as_str()}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn request_review<B: Backend>(
    b: &B,
    id: &TaskId,
    summary: Option<&str>,
    worker: Option<&WorkerId>,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::REQUEST_REVIEW.check(&task)?;
    check_holder(&task, worker)?;
    let end = RunEnd {
        summary,
        ..RunEnd::with(RunOutcome::ReviewRequested)
    };
    let run = close_run(b, &task, end).await?;
    cas(b, &task, TaskStatus::Review, &[Set::EndLease]).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::ReviewRequested,
        json!({"summary": summary.map(rules::summary_line)}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn request_changes<B: Backend>(
    b: &B,
    id: &TaskId,
    reason: &str,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::REQUEST_CHANGES.check(&task)?;
    non_empty("reason", reason, "what should change")?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    cas(b, &task, to, &[]).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::ChangesRequested,
        json!({"reason": reason, "to": to.as_str()}),
    )?;
    self::task(b, id).await
}

/// Takes back lapsed leases (a backend that can skips rows another reclaimer holds).
pub(crate) async fn reclaim_expired<B: Backend>(b: &B) -> Result<Vec<Reclaimed>, B::Error> {
    let mut out = Vec::new();
    for id in b.pick(Pick::Lapsed).await? {
        let task = task(b, &id).await?;
        let Some(lease) = task.lease.clone() else {
            continue;
        };
        let source = source_status(b, &task).await?;
        let to = runnable(b, &id, source).await?;
        let end = RunEnd {
            error: Some("lease lapsed"),
            ..RunEnd::with(RunOutcome::Reclaimed)
        };
        close_run(b, &task, end).await?;
        cas(b, &task, to, &[Set::EndLease]).await?;
        emit(
            b,
            Some(&id),
            Some(lease.run_id),
            EventKind::Reclaimed,
            json!({"lock": lease.worker.to_string(), "claim_expires": lease.expires_at.0,
                   "last_heartbeat_at": task.last_heartbeat_at.map(|t| t.0), "to": to.as_str()}),
        )?;
        out.push(Reclaimed {
            task: self::task(b, &id).await?,
            lapsed: lease,
        });
    }
    Ok(out)
}

pub(crate) async fn record_failure<B: Backend>(
    b: &B,
    id: &TaskId,
    f: &Failure,
) -> Result<FailureOutcome, B::Error> {
    let task = task(b, id).await?;
    rules::FAIL.check(&task)?;
    check_holder(&task, f.worker.as_ref())?;
    let d = rules::decide_failure(&task, f.kind, f.configured_limit);
    let source = source_status(b, &task).await?;
    let end = RunEnd {
        error: Some(&f.error),
        ..RunEnd::with(d.outcome)
    };
    let run = close_run(b, &task, end).await?;
    let counter = if d.event == EventKind::ProtocolViolation {
        "protocol_violations"
    } else {
        "consecutive_failures"
    };
    let to = if d.gave_up {
        TaskStatus::Blocked
    } else {
        runnable(b, id, source).await?
    };
    let block_reason = if d.gave_up {
        Some(f.error.as_str())
    } else {
        task.block_reason.as_deref()
    };
    let sets = [
        Set::Int(counter, i64::from(d.failures)),
        Set::Text("last_failure_error", Some(&f.error)),
        Set::Text("block_reason", block_reason),
        Set::EndLease,
    ];
    cas(b, &task, to, &sets).await?;
    emit(
        b,
        Some(id),
        run,
        d.event,
        json!({"error": f.error, "failures": d.failures, "limit": d.limit, "to": to.as_str()}),
    )?;
    if d.gave_up {
        emit(
            b,
            Some(id),
            run,
            EventKind::GaveUp,
            json!({"failures": d.failures, "effective_limit": d.limit,
                   "limit_source": d.limit_source, "error": f.error}),
        )?;
    }
    Ok(FailureOutcome {
        task: self::task(b, id).await?,
        failures: d.failures,
        limit: d.limit,
        limit_source: d.limit_source,
        gave_up: d.gave_up,
    })
}

pub(crate) async fn requeue_rate_limited<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: Option<&WorkerId>,
    error: &str,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::RATE_LIMIT.check(&task)?;
    check_holder(&task, worker)?;
    let source = source_status(b, &task).await?;
    let to = runnable(b, id, source).await?;
    let end = RunEnd {
        error: Some(error),
        ..RunEnd::with(RunOutcome::RateLimited)
    };
    let run = close_run(b, &task, end).await?;
    cas(b, &task, to, &[Set::EndLease]).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::RateLimited,
        json!({"error": error, "to": to.as_str()}),
    )?;
    self::task(b, id).await
}
