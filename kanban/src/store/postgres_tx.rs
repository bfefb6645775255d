//! Every PostgreSQL store operation as async code over one open transaction ([`PgTx`]).
//!
//! `postgres.rs` opens the transaction, hands it here, and commits only if the operation
//! returned `Ok`. Events are buffered during the operation and written by [`PgTx::finish`] just
//! before commit, under the board row's lock, so event ids follow commit order. The transition
//! rules come from `rules.rs`, shared with the SQLite store.

use std::collections::HashSet;
use std::sync::Mutex;

use deadpool_postgres::Transaction;
use serde_json::{Value, json};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::domain::{
    ATTACHMENT_CAP_BYTES, Attachment, Board, BoardSlug, BoardStats, Comment, Event, EventId,
    EventKind, InitialStatus, Lease, Link, ModelError, NewAttachment, NewTask, Run, RunId,
    RunOutcome, Task, TaskFilter, TaskId, TaskLinks, TaskPatch, TaskSort, TaskStatus, Timestamp,
    WorkerId, Workspace,
};
use crate::store::rules;
use crate::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Created, Failure, FailureOutcome, Reclaimed,
    StoreError, Transitioned,
};

/// An error inside a transaction: a store error, or a database error not yet tied to a board.
#[derive(Debug)]
pub(crate) enum PgTxError {
    /// Already a store error.
    Store(StoreError),
    /// From PostgreSQL.
    Db(tokio_postgres::Error),
}

impl From<StoreError> for PgTxError {
    fn from(e: StoreError) -> Self {
        PgTxError::Store(e)
    }
}

impl From<tokio_postgres::Error> for PgTxError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgTxError::Db(e)
    }
}

impl From<ModelError> for PgTxError {
    fn from(e: ModelError) -> Self {
        PgTxError::Store(StoreError::Invalid(e))
    }
}

impl PgTxError {
    /// The store error, with database failures attributed to `board`.
    pub(crate) fn into_store(self, board: &BoardSlug) -> StoreError {
        match self {
            PgTxError::Store(e) => e,
            PgTxError::Db(e) => pg_error(board, e),
        }
    }
}

/// Classifies a PostgreSQL error: lock and serialization losses are `Busy` (retry), a lost or
/// refused connection is `Unavailable` (retry once the pool reconnects), the rest `Backend`.
pub(crate) fn pg_error(board: &BoardSlug, e: tokio_postgres::Error) -> StoreError {
    let board = board.clone();
    if let Some(code) = e.code() {
        let busy = [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::UNIQUE_VIOLATION,
            SqlState::LOCK_NOT_AVAILABLE,
        ];
        if busy.contains(code) {
            return StoreError::Busy { board };
        }
        let gone = [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ];
        if gone.contains(code) || code.code().starts_with("08") {
            return StoreError::Unavailable {
                board,
                reason: describe_pg(&e),
            };
        }
        return StoreError::Backend {
            board,
            source: describe_pg(&e).into(),
        };
    }
    // No SQLSTATE: the connection broke, closed, or never opened.
    if e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) {
        return StoreError::Unavailable {
            board,
            reason: e.to_string(),
        };
    }
    StoreError::Backend {
        board,
        source: Box::new(e),
    }
}

/// The server's own words for an error: the driver's `Display` says only "db error" when the
/// server answered, and the message, detail and SQLSTATE live in the `DbError` behind it.
fn describe_pg(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(": ");
                text.push_str(detail);
            }
            text
        }
        None => e.to_string(),
    }
}

/// What every operation in this file returns.
pub(crate) type TxResult<T> = Result<T, PgTxError>;

/// A query parameter.
type Param<'p> = &'p (dyn ToSql + Sync);

const TASK_COLS: &str = "id, title, body, assignee, status, priority, tenant, idempotency_key, \
    created_by, created_at, updated_at, started_at, completed_at, workspace_kind, workspace_path, \
    max_runtime_seconds, max_retries, result, consecutive_failures, protocol_violations, \
    last_failure_error, block_kind, block_reason, block_recurrences, claim_lock, claim_expires, \
    current_run_id, last_heartbeat_at, scheduled_until, budget, traceparent";

const RUN_COLS: &str = "id, task_id, profile, source_status, claim_lock, claim_expires, \
    max_runtime_seconds, last_heartbeat_at, started_at, ended_at, outcome, summary, metadata, error, \
    usage";

const EVENT_COLS: &str = "id, task_id, run_id, kind, payload, created_at";

const ATTACHMENT_COLS: &str = "id, task_id, filename, content_type, size, uploaded_by, created_at";

/// Reading rows back: a value that does not parse means the board holds foreign data.
struct Reader<'r> {
    row: &'r Row,
    board: &'r BoardSlug,
}

impl<'r> Reader<'r> {
    fn corrupt(&self, idx: usize, what: impl std::fmt::Display) -> PgTxError {
        let column = self.row.columns().get(idx).map_or("?", |c| c.name());
        StoreError::Corrupt {
            board: self.board.clone(),
            what: format!("column {column}: {what}"),
        }
        .into()
    }

    fn get<T: tokio_postgres::types::FromSql<'r>>(&self, idx: usize) -> TxResult<T> {
        self.row.try_get(idx).map_err(|e| self.corrupt(idx, e))
    }

    fn ts(&self, idx: usize) -> TxResult<Timestamp> {
        Ok(Timestamp(self.get(idx)?))
    }

    fn opt_ts(&self, idx: usize) -> TxResult<Option<Timestamp>> {
        Ok(self.get::<Option<i64>>(idx)?.map(Timestamp))
    }

    fn count(&self, idx: usize) -> TxResult<u32> {
        let v: i64 = self.get(idx)?;
        u32::try_from(v).map_err(|_| self.corrupt(idx, format!("counter {v} out of range")))
    }

    fn opt_u64(&self, idx: usize) -> TxResult<Option<u64>> {
        self.get::<Option<i64>>(idx)?
            .map(|v| u64::try_from(v).map_err(|_| self.corrupt(idx, format!("negative value {v}"))))
            .transpose()
    }

    fn opt_u32(&self, idx: usize) -> TxResult<Option<u32>> {
        self.get::<Option<i64>>(idx)?
            .map(|v| {
                u32::try_from(v).map_err(|_| self.corrupt(idx, format!("value {v} out of range")))
            })
            .transpose()
    }

    fn task_id(&self, idx: usize) -> TxResult<TaskId> {
        TaskId::parse(self.get::<&str>(idx)?).map_err(|e| self.corrupt(idx, e))
    }

    fn status(&self, idx: usize) -> TxResult<TaskStatus> {
        self.get::<&str>(idx)?
            .parse()
            .map_err(|e: ModelError| self.corrupt(idx, e))
    }

    fn task(&self) -> TxResult<Task> {
        let claim_lock: Option<&str> = self.get(24)?;
        let claim_expires = self.opt_ts(25)?;
        let current_run: Option<i64> = self.get(26)?;
        let lease = match (claim_lock, claim_expires, current_run) {
            (Some(lock), Some(expires_at), Some(run)) => Some(Lease {
                worker: WorkerId::parse(lock).map_err(|e| self.corrupt(24, e))?,
                expires_at,
                run_id: RunId(run),
            }),
            _ => None,
        };
        Ok(Task {
            id: self.task_id(0)?,
            title: self.get(1)?,
            body: self.get(2)?,
            assignee: self.get(3)?,
            status: self.status(4)?,
            priority: self.get(5)?,
            tenant: self.get(6)?,
            idempotency_key: self.get(7)?,
            created_by: self.get(8)?,
            created_at: self.ts(9)?,
            updated_at: self.ts(10)?,
            started_at: self.opt_ts(11)?,
            completed_at: self.opt_ts(12)?,
            workspace: Workspace::from_parts(self.get::<&str>(13)?, self.get(14)?)
                .map_err(|e| self.corrupt(13, e))?,
            max_runtime_seconds: self.opt_u64(15)?,
            max_retries: self.opt_u32(16)?,
            result: self.get(17)?,
            consecutive_failures: self.count(18)?,
            protocol_violations: self.count(19)?,
            last_failure_error: self.get(20)?,
            block_kind: self.get(21)?,
            block_reason: self.get(22)?,
            block_recurrences: self.count(23)?,
            lease,
            last_heartbeat_at: self.opt_ts(27)?,
            scheduled_until: self.opt_ts(28)?,
            budget: self
                .get::<Option<&str>>(29)?
                .map(|b| serde_json::from_str(b).map_err(|e| self.corrupt(29, e)))
                .transpose()?,
            traceparent: self.get(30)?,
        })
    }

    fn run(&self) -> TxResult<Run> {
        let worker = self
            .get::<Option<&str>>(4)?
            .map(|w| WorkerId::parse(w).map_err(|e| self.corrupt(4, e)))
            .transpose()?;
        let outcome = self
            .get::<Option<&str>>(10)?
            .map(|o| {
                RunOutcome::parse(o).ok_or_else(|| self.corrupt(10, format!("run outcome {o:?}")))
            })
            .transpose()?;
        let metadata = self
            .get::<Option<&str>>(12)?
            .map(|m| serde_json::from_str(m).map_err(|e| self.corrupt(12, e)))
            .transpose()?;
        let usage = self
            .get::<Option<&str>>(14)?
            .map(|u| serde_json::from_str(u).map_err(|e| self.corrupt(14, e)))
            .transpose()?;
        Ok(Run {
            id: RunId(self.get(0)?),
            task_id: self.task_id(1)?,
            profile: self.get(2)?,
            source_status: self.status(3)?,
            worker,
            lease_expires_at: self.opt_ts(5)?,
            max_runtime_seconds: self.opt_u64(6)?,
            last_heartbeat_at: self.opt_ts(7)?,
            started_at: self.ts(8)?,
            ended_at: self.opt_ts(9)?,
            outcome,
            summary: self.get(11)?,
            metadata,
            error: self.get(13)?,
            usage,
        })
    }

    fn event(&self) -> TxResult<Event> {
        let kind: &str = self.get(3)?;
        let payload: &str = self.get(4)?;
        Ok(Event {
            id: EventId(self.get(0)?),
            task_id: self
                .get::<Option<&str>>(1)?
                .map(|t| TaskId::parse(t).map_err(|e| self.corrupt(1, e)))
                .transpose()?,
            run_id: self.get::<Option<i64>>(2)?.map(RunId),
            kind: EventKind::parse(kind)
                .ok_or_else(|| self.corrupt(3, format!("event kind {kind:?}")))?,
            payload: serde_json::from_str(payload).map_err(|e| self.corrupt(4, e))?,
            created_at: self.ts(5)?,
        })
    }

    fn attachment(&self) -> TxResult<Attachment> {
        let size: i64 = self.get(4)?;
        Ok(Attachment {
            id: self.get(0)?,
            task_id: self.task_id(1)?,
            filename: self.get(2)?,
            content_type: self.get(3)?,
            size: u64::try_from(size).map_err(|_| self.corrupt(4, format!("size {size}")))?,
            uploaded_by: self.get(5)?,
            created_at: self.ts(6)?,
        })
    }

    fn board(&self) -> TxResult<Board> {
        Ok(Board {
            slug: BoardSlug::parse(self.get::<&str>(0)?).map_err(|e| self.corrupt(0, e))?,
            name: self.get(1)?,
            description: self.get(2)?,
            created_at: self.ts(3)?,
            archived_at: self.opt_ts(4)?,
        })
    }
}

/// Reads a board row (slug, name, description, created_at, archived_at).
pub(crate) fn board_from_row(row: &Row, board: &BoardSlug) -> Result<Board, StoreError> {
    Reader { row, board }
        .board()
        .map_err(|e| e.into_store(board))
}

/// Clamps an integer into PostgreSQL's signed range.
fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
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

/// The LISTEN/NOTIFY channel for a board: one per board (a long slug is cut to fit the 63-byte
/// identifier limit; the notice's payload names the board, so a shared channel only costs a
/// spurious wake-up).
pub(crate) fn channel_name(board: &BoardSlug) -> String {
    let slug = board.as_str();
    let cut = slug.get(..slug.len().min(48)).unwrap_or(slug);
    format!("troupe_kanban_{cut}")
}

/// An event waiting for its id until the transaction commits.
struct PendingEvent {
    task: Option<String>,
    run: Option<i64>,
    kind: &'static str,
    payload: String,
}

/// One operation's view of a board inside an open transaction.
pub(crate) struct PgTx<'a, 'b> {
    /// The transaction.
    tx: &'a Transaction<'b>,
    /// The board worked on.
    pub(crate) board: &'a BoardSlug,
    /// The database clock's reading for the whole operation (shared by every host).
    pub(crate) now: Timestamp,
    /// Events appended so far; numbered and written by [`PgTx::finish`].
    events: Mutex<Vec<PendingEvent>>,
}

impl<'a, 'b> PgTx<'a, 'b> {
    /// Starts an operation: reads the database clock.
    pub(crate) async fn open(tx: &'a Transaction<'b>, board: &'a BoardSlug) -> TxResult<Self> {
        let row = tx
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .await?;
        let now = Timestamp(row.try_get(0)?);
        Ok(PgTx {
            tx,
            board,
            now,
            events: Mutex::new(Vec::new()),
        })
    }
}

impl PgTx<'_, '_> {
    // ---- plumbing ----

    async fn rows(&self, sql: &str, params: &[Param<'_>]) -> TxResult<Vec<Row>> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query(&stmt, params).await?)
    }

    async fn row(&self, sql: &str, params: &[Param<'_>]) -> TxResult<Option<Row>> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query_opt(&stmt, params).await?)
    }

    async fn exec(&self, sql: &str, params: &[Param<'_>]) -> TxResult<u64> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.execute(&stmt, params).await?)
    }

    fn reader<'r>(&'r self, row: &'r Row) -> Reader<'r> {
        Reader {
            row,
            board: self.board,
        }
    }

    async fn ids(&self, sql: &str, params: &[Param<'_>]) -> TxResult<Vec<TaskId>> {
        let rows = self.rows(sql, params).await?;
        rows.iter().map(|r| self.reader(r).task_id(0)).collect()
    }

    async fn tasks(&self, sql: &str, params: &[Param<'_>]) -> TxResult<Vec<Task>> {
        let rows = self.rows(sql, params).await?;
        rows.iter().map(|r| self.reader(r).task()).collect()
    }

    fn lock_events(&self) -> std::sync::MutexGuard<'_, Vec<PendingEvent>> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Numbers and writes the buffered events, and queues the board's change notice. Called
    /// last, just before commit: the board row stays locked from here until commit, so a
    /// transaction that gets smaller ids always commits first.
    pub(crate) async fn finish(&self) -> TxResult<()> {
        let pending = std::mem::take(&mut *self.lock_events());
        if pending.is_empty() {
            return Ok(());
        }
        let n = i64::try_from(pending.len()).unwrap_or(i64::MAX);
        let row = self
            .row(
                "UPDATE kanban_boards SET last_event_id = last_event_id + $2 WHERE slug = $1 \
                 RETURNING last_event_id",
                &[&self.board.as_str(), &n],
            )
            .await?
            .ok_or_else(|| StoreError::BoardNotFound {
                slug: self.board.clone(),
            })?;
        let last: i64 = self.reader(&row).get(0)?;
        let first = last - n + 1;
        let mut ids = Vec::with_capacity(pending.len());
        let mut tasks = Vec::with_capacity(pending.len());
        let mut runs = Vec::with_capacity(pending.len());
        let mut kinds = Vec::with_capacity(pending.len());
        let mut payloads = Vec::with_capacity(pending.len());
        for (i, e) in pending.into_iter().enumerate() {
            ids.push(first + i64::try_from(i).unwrap_or(0));
            tasks.push(e.task);
            runs.push(e.run);
            kinds.push(e.kind);
            payloads.push(e.payload);
        }
        // One round trip for every event of the operation.
        self.exec(
            "INSERT INTO kanban_task_events (board, id, task_id, run_id, kind, payload, created_at) \
             SELECT $1, * , $7 FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[], \
             $6::text[])",
            &[
                &self.board.as_str(),
                &ids,
                &tasks,
                &runs,
                &kinds,
                &payloads,
                &self.now.0,
            ],
        )
        .await?;
        // Delivered to listeners only if and when the transaction commits.
        let notice = format!("{}:{last}", self.board.as_str());
        self.exec(
            "SELECT pg_notify($1, $2)",
            &[&channel_name(self.board), &notice],
        )
        .await?;
        Ok(())
    }

    // ---- boards ----

    /// The board row; `BoardNotFound` when there is none.
    pub(crate) async fn board_row(&self) -> TxResult<Board> {
        let row = self
            .row(
                "SELECT slug, name, description, created_at, archived_at FROM kanban_boards \
                 WHERE slug = $1",
                &[&self.board.as_str()],
            )
            .await?
            .ok_or_else(|| StoreError::BoardNotFound {
                slug: self.board.clone(),
            })?;
        self.reader(&row).board()
    }

    /// Fails unless the board is live.
    async fn ensure_live(&self) -> TxResult<()> {
        if self.board_row().await?.archived_at.is_some() {
            return Err(StoreError::BoardArchived {
                slug: self.board.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// Writes the board row; `BoardExists` when one is already there.
    pub(crate) async fn create_board(&self, name: &str, description: &str) -> TxResult<Board> {
        let inserted = self
            .exec(
                "INSERT INTO kanban_boards (slug, name, description, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (slug) DO NOTHING",
                &[&self.board.as_str(), &name, &description, &self.now.0],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::BoardExists {
                slug: self.board.clone(),
            }
            .into());
        }
        self.event(
            None,
            None,
            EventKind::BoardCreated,
            json!({"slug": self.board.as_str()}),
        );
        self.board_row().await
    }

    /// Marks the board archived (idempotent).
    pub(crate) async fn archive_board(&self) -> TxResult<Board> {
        let board = self.board_row().await?;
        if board.archived_at.is_none() {
            self.exec(
                "UPDATE kanban_boards SET archived_at = $2 WHERE slug = $1",
                &[&self.board.as_str(), &self.now.0],
            )
            .await?;
            self.event(
                None,
                None,
                EventKind::BoardArchived,
                json!({"slug": self.board.as_str()}),
            );
        }
        self.board_row().await
    }

    /// Removes the board and everything on it; it must be archived.
    pub(crate) async fn delete_board(&self) -> TxResult<()> {
        let board = self.board_row().await?;
        if board.archived_at.is_none() {
            return Err(StoreError::BoardNotArchived {
                slug: self.board.clone(),
            }
            .into());
        }
        let slug = self.board.as_str();
        for table in [
            "kanban_task_attachments",
            "kanban_task_runs",
            "kanban_task_events",
            "kanban_task_comments",
            "kanban_task_links",
            "kanban_tasks",
        ] {
            self.exec(&format!("DELETE FROM {table} WHERE board = $1"), &[&slug])
                .await?;
        }
        self.exec("DELETE FROM kanban_boards WHERE slug = $1", &[&slug])
            .await?;
        Ok(())
    }

    /// The board other than this one holding task `id`, if any.
    pub(crate) async fn other_board_of(&self, id: &TaskId) -> TxResult<Option<BoardSlug>> {
        let row = self
            .row(
                "SELECT board FROM kanban_tasks WHERE id = $1 AND board <> $2 ORDER BY board LIMIT 1",
                &[&id.as_str(), &self.board.as_str()],
            )
            .await?;
        match row {
            None => Ok(None),
            Some(r) => {
                let slug: &str = self.reader(&r).get(0)?;
                Ok(BoardSlug::parse(slug).ok())
            }
        }
    }

    // ---- building blocks ----

    /// Appends an event; it gets its id when the operation finishes.
    fn event(&self, task: Option<&TaskId>, run: Option<RunId>, kind: EventKind, payload: Value) {
        self.lock_events().push(PendingEvent {
            task: task.map(|t| t.as_str().to_string()),
            run: run.map(|r| r.0),
            kind: kind.as_str(),
            payload: payload.to_string(),
        });
    }

    async fn try_task(&self, id: &TaskId) -> TxResult<Option<Task>> {
        let row = self
            .row(
                &format!("SELECT {TASK_COLS} FROM kanban_tasks WHERE board = $1 AND id = $2"),
                &[&self.board.as_str(), &id.as_str()],
            )
            .await?;
        row.map(|r| self.reader(&r).task()).transpose()
    }

    /// A task of this board; `TaskNotFound` otherwise.
    pub(crate) async fn task(&self, id: &TaskId) -> TxResult<Task> {
        self.try_task(id).await?.ok_or_else(|| {
            StoreError::TaskNotFound {
                board: self.board.clone(),
                id: id.clone(),
            }
            .into()
        })
    }

    async fn parents(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT parent_id FROM kanban_task_links WHERE board = $1 AND child_id = $2 \
             ORDER BY created_at, parent_id",
            &[&self.board.as_str(), &id.as_str()],
        )
        .await
    }

    async fn children(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT child_id FROM kanban_task_links WHERE board = $1 AND parent_id = $2 \
             ORDER BY created_at, child_id",
            &[&self.board.as_str(), &id.as_str()],
        )
        .await
    }

    /// Parents of `id` that are neither done nor archived.
    async fn open_parents(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT l.parent_id FROM kanban_task_links l \
             JOIN kanban_tasks p ON p.board = l.board AND p.id = l.parent_id \
             WHERE l.board = $1 AND l.child_id = $2 AND p.status NOT IN ('done', 'archived') \
             ORDER BY l.parent_id",
            &[&self.board.as_str(), &id.as_str()],
        )
        .await
    }

    /// Refuses a worker that does not hold the task's lease.
    fn check_holder(&self, task: &Task, worker: Option<&WorkerId>) -> TxResult<()> {
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
            }
            .into())
        }
    }

    /// The compare-and-swap every status change goes through: the row changes only if it is
    /// still in the status it was read in. `sets` are extra `col = $n` clauses numbered from $6.
    async fn cas(
        &self,
        task: &Task,
        to: TaskStatus,
        sets: &str,
        extra: &[Param<'_>],
    ) -> TxResult<()> {
        let sql = format!(
            "UPDATE kanban_tasks SET status = $1, updated_at = $2{}{sets} \
             WHERE board = $5 AND id = $3 AND status = $4",
            if sets.is_empty() { "" } else { ", " }
        );
        let to_s = to.as_str();
        let id_s = task.id.as_str();
        let from_s = task.status.as_str();
        let board_s = self.board.as_str();
        let mut args: Vec<Param<'_>> = vec![&to_s, &self.now.0, &id_s, &from_s, &board_s];
        args.extend_from_slice(extra);
        let changed = self.exec(&sql, &args).await?;
        if changed != 1 {
            return Err(StoreError::Conflict {
                task: task.id.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// Ends the task's open run, if any, with `outcome`.
    async fn close_run(
        &self,
        task: &Task,
        outcome: RunOutcome,
        summary: Option<&str>,
        metadata: Option<&Value>,
        error: Option<&str>,
    ) -> TxResult<Option<RunId>> {
        let Some(lease) = &task.lease else {
            return Ok(None);
        };
        self.exec(
            "UPDATE kanban_task_runs SET ended_at = $1, outcome = $2, summary = $3, metadata = $4, \
             error = $5 WHERE id = $6 AND board = $7 AND ended_at IS NULL",
            &[
                &self.now.0,
                &outcome.as_str(),
                &summary,
                &metadata.map(Value::to_string),
                &error,
                &lease.run_id.0,
                &self.board.as_str(),
            ],
        )
        .await?;
        Ok(Some(lease.run_id))
    }

    /// The status the open run was claimed from (`ready` when there is none).
    async fn source_status(&self, task: &Task) -> TxResult<TaskStatus> {
        let Some(lease) = &task.lease else {
            return Ok(TaskStatus::Ready);
        };
        let row = self
            .row(
                "SELECT source_status FROM kanban_task_runs WHERE id = $1 AND board = $2",
                &[&lease.run_id.0, &self.board.as_str()],
            )
            .await?;
        let src: Option<String> = row.map(|r| self.reader(&r).get(0)).transpose()?;
        match src.as_deref() {
            Some("review") => Ok(TaskStatus::Review),
            _ => Ok(TaskStatus::Ready),
        }
    }

    /// Makes every `todo` child of `parent` whose parents are now all finished `ready`.
    async fn promote_children(&self, parent: &TaskId) -> TxResult<Vec<TaskId>> {
        let mut promoted = Vec::new();
        for child in self.children(parent).await? {
            let task = self.task(&child).await?;
            if task.status == TaskStatus::Todo && self.open_parents(&child).await?.is_empty() {
                self.cas(&task, TaskStatus::Ready, "", &[]).await?;
                self.event(
                    Some(&child),
                    None,
                    EventKind::Promoted,
                    json!({"from": "todo", "to": "ready", "by": parent.as_str()}),
                );
                promoted.push(child);
            }
        }
        Ok(promoted)
    }

    async fn insert_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        self.exec(
            "INSERT INTO kanban_task_links (board, parent_id, child_id, created_at) \
             VALUES ($1, $2, $3, $4)",
            &[
                &self.board.as_str(),
                &parent.as_str(),
                &child.as_str(),
                &self.now.0,
            ],
        )
        .await?;
        Ok(())
    }

    // ---- tasks ----

    pub(crate) async fn create_task(&self, new: &NewTask) -> TxResult<Created> {
        self.ensure_live().await?;
        non_empty("title", &new.title, "a one-line title")?;
        if let Some(a) = &new.assignee {
            non_empty("assignee", a, "a profile name, or no assignee at all")?;
        }
        if let Some(key) = &new.idempotency_key {
            non_empty("idempotency_key", key, "a non-empty key, or none")?;
            let existing = self
                .tasks(
                    &format!(
                        "SELECT {TASK_COLS} FROM kanban_tasks WHERE board = $1 \
                         AND idempotency_key = $2 AND status <> 'archived' \
                         ORDER BY created_at DESC LIMIT 1"
                    ),
                    &[&self.board.as_str(), key],
                )
                .await?;
            if let Some(task) = existing.into_iter().next() {
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
            let parent = self.task(p).await?;
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
        let id = self.fresh_id().await?;
        self.exec(
            "INSERT INTO kanban_tasks (board, id, title, body, assignee, status, priority, tenant, \
             idempotency_key, created_by, created_at, updated_at, workspace_kind, workspace_path, \
             max_runtime_seconds, max_retries, budget, traceparent) \
             VALUES ($15, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13, $14, $16, $17)",
            &[
                &id.as_str(),
                &new.title.trim(),
                &new.body,
                &new.assignee.as_deref().map(str::trim),
                &status.as_str(),
                &new.priority,
                &tenant,
                &new.idempotency_key,
                &new.created_by,
                &self.now.0,
                &new.workspace.kind(),
                &new.workspace.path(),
                &new.max_runtime_seconds.map(sql_int),
                &new.max_retries.map(i64::from),
                &self.board.as_str(),
                &super::budget_text(new.budget.as_ref()),
                &super::kept_traceparent(new.traceparent.as_deref()),
            ],
        )
        .await?;
        for p in &parents {
            self.insert_link(p, &id).await?;
        }
        let parent_ids: Vec<&str> = parents.iter().map(TaskId::as_str).collect();
        self.event(
            Some(&id),
            None,
            EventKind::Created,
            json!({"status": status.as_str(), "parents": parent_ids, "assignee": new.assignee}),
        );
        Ok(Created {
            task: self.task(&id).await?,
            created: true,
        })
    }

    /// A random id not yet used on this board.
    async fn fresh_id(&self) -> TxResult<TaskId> {
        for _ in 0..16 {
            let id = TaskId::generate();
            if self.try_task(&id).await?.is_none() {
                return Ok(id);
            }
        }
        // 16 collisions in a row in a 32-bit space means the board is nearly full.
        Err(StoreError::Corrupt {
            board: self.board.clone(),
            what: "no free task id found after 16 tries".to_string(),
        }
        .into())
    }

    pub(crate) async fn list_tasks(&self, f: &TaskFilter) -> TxResult<Vec<Task>> {
        let mut sql = format!("SELECT {TASK_COLS} FROM kanban_tasks WHERE board = $1");
        let board_s = self.board.as_str();
        let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
        let limit = f.limit.map(|l| sql_int(l as u64));
        let mut args: Vec<Param<'_>> = vec![&board_s];
        if statuses.is_empty() {
            if !f.include_archived {
                sql.push_str(" AND status <> 'archived'");
            }
        } else {
            args.push(&statuses);
            sql.push_str(&format!(" AND status = ANY(${})", args.len()));
        }
        if let Some(a) = &f.assignee {
            args.push(a);
            sql.push_str(&format!(" AND assignee = ${}", args.len()));
        }
        if let Some(t) = &f.tenant {
            args.push(t);
            sql.push_str(&format!(" AND tenant = ${}", args.len()));
        }
        sql.push_str(match f.sort {
            TaskSort::Created => " ORDER BY created_at, id",
            TaskSort::CreatedDesc => " ORDER BY created_at DESC, id DESC",
            TaskSort::Priority => " ORDER BY priority DESC, created_at, id",
            TaskSort::Updated => " ORDER BY updated_at DESC, id",
        });
        if let Some(limit) = &limit {
            args.push(limit);
            sql.push_str(&format!(" LIMIT ${}", args.len()));
        }
        self.tasks(&sql, &args).await
    }

    pub(crate) async fn patch_task(&self, id: &TaskId, p: &TaskPatch) -> TxResult<Task> {
        let task = self.task(id).await?;
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
        let ws = p.workspace.as_ref().unwrap_or(&task.workspace);
        self.exec(
            "UPDATE kanban_tasks SET title = $1, body = $2, priority = $3, tenant = $4, \
             max_runtime_seconds = $5, max_retries = $6, workspace_kind = $7, \
             workspace_path = $8, result = $9, updated_at = $10 WHERE board = $12 AND id = $11",
            &[
                &p.title.as_deref().map(str::trim).unwrap_or(&task.title),
                &p.body.as_deref().unwrap_or(&task.body),
                &p.priority.unwrap_or(task.priority),
                &p.tenant.clone().unwrap_or(task.tenant.clone()),
                &p.max_runtime_seconds
                    .unwrap_or(task.max_runtime_seconds)
                    .map(sql_int),
                &p.max_retries.unwrap_or(task.max_retries).map(i64::from),
                &ws.kind(),
                &ws.path(),
                &p.result.as_deref().or(task.result.as_deref()),
                &self.now.0,
                &id.as_str(),
                &self.board.as_str(),
            ],
        )
        .await?;
        self.event(Some(id), None, EventKind::Edited, json!({"fields": fields}));
        if let Some(pr) = p.priority.filter(|pr| *pr != task.priority) {
            self.event(
                Some(id),
                None,
                EventKind::Reprioritized,
                json!({"from": task.priority, "to": pr}),
            );
        }
        self.task(id).await
    }

    pub(crate) async fn assign_task(&self, id: &TaskId, assignee: Option<&str>) -> TxResult<Task> {
        let task = self.task(id).await?;
        let assignee = assignee.map(str::trim);
        if let Some(a) = assignee {
            non_empty("assignee", a, "a profile name, or none to unassign")?;
        }
        if task.assignee.as_deref() == assignee {
            return Ok(task);
        }
        // A different profile deserves its own attempts.
        self.exec(
            "UPDATE kanban_tasks SET assignee = $1, consecutive_failures = 0, \
             protocol_violations = 0, updated_at = $2 WHERE board = $4 AND id = $3",
            &[&assignee, &self.now.0, &id.as_str(), &self.board.as_str()],
        )
        .await?;
        self.event(
            Some(id),
            None,
            EventKind::Assigned,
            json!({"from": task.assignee, "to": assignee}),
        );
        self.task(id).await
    }

    pub(crate) async fn stats(&self) -> TxResult<BoardStats> {
        let board_s = self.board.as_str();
        let rows = self
            .rows(
                "SELECT status, COUNT(*) FROM kanban_tasks WHERE board = $1 GROUP BY status",
                &[&board_s],
            )
            .await?;
        let mut counted = Vec::new();
        for r in &rows {
            let rd = self.reader(r);
            counted.push((rd.status(0)?, rd.get::<i64>(1)?));
        }
        let by_status = TaskStatus::ALL
            .into_iter()
            .map(|s| {
                let n = counted.iter().find(|(c, _)| *c == s).map_or(0, |(_, n)| *n);
                (s, u64::try_from(n).unwrap_or(0))
            })
            .collect();
        let row = self
            .row(
                "SELECT (SELECT COUNT(*) FROM kanban_task_runs WHERE board = $1 AND ended_at IS NULL), \
                 (SELECT MAX(id) FROM kanban_task_events WHERE board = $1)",
                &[&board_s],
            )
            .await?;
        let (open_runs, last) = match row {
            Some(r) => {
                let rd = self.reader(&r);
                (rd.get::<i64>(0)?, rd.get::<Option<i64>>(1)?)
            }
            None => (0, None),
        };
        Ok(BoardStats {
            by_status,
            open_runs: u64::try_from(open_runs).unwrap_or(0),
            last_event_id: EventId(last.unwrap_or(0)),
        })
    }

    // ---- links ----

    pub(crate) async fn link(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        if parent == child {
            return Err(StoreError::SelfLink {
                task: parent.clone(),
            }
            .into());
        }
        let parent_task = self.task(parent).await?;
        let child_task = self.task(child).await?;
        let exists = self
            .row(
                "SELECT 1 FROM kanban_task_links WHERE board = $1 AND parent_id = $2 \
                 AND child_id = $3",
                &[&self.board.as_str(), &parent.as_str(), &child.as_str()],
            )
            .await?
            .is_some();
        if exists {
            return Ok(());
        }
        if self.is_descendant(child, parent).await? {
            return Err(StoreError::Cycle {
                parent: parent.clone(),
                child: child.clone(),
            }
            .into());
        }
        self.insert_link(parent, child).await?;
        // A ready child must wait again for an unfinished new parent.
        let demote = child_task.status == TaskStatus::Ready && rules::is_open(parent_task.status);
        if demote {
            self.cas(&child_task, TaskStatus::Todo, "", &[]).await?;
        }
        self.event(
            Some(child),
            None,
            EventKind::Linked,
            json!({"parent": parent.as_str(), "child": child.as_str(),
                   "child_status": if demote { "todo" } else { child_task.status.as_str() }}),
        );
        Ok(())
    }

    /// Depth-first search down the child links from `from`, looking for `target`.
    async fn is_descendant(&self, from: &TaskId, target: &TaskId) -> TxResult<bool> {
        let mut stack = vec![from.clone()];
        let mut seen: HashSet<TaskId> = HashSet::new();
        while let Some(node) = stack.pop() {
            if &node == target {
                return Ok(true);
            }
            if seen.insert(node.clone()) {
                stack.extend(self.children(&node).await?);
            }
        }
        Ok(false)
    }

    pub(crate) async fn unlink(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        let removed = self
            .exec(
                "DELETE FROM kanban_task_links WHERE board = $1 AND parent_id = $2 AND child_id = $3",
                &[&self.board.as_str(), &parent.as_str(), &child.as_str()],
            )
            .await?;
        if removed == 0 {
            return Err(StoreError::LinkNotFound {
                parent: parent.clone(),
                child: child.clone(),
            }
            .into());
        }
        self.event(
            Some(child),
            None,
            EventKind::Unlinked,
            json!({"parent": parent.as_str(), "child": child.as_str()}),
        );
        let task = self.task(child).await?;
        if task.status == TaskStatus::Todo && self.open_parents(child).await?.is_empty() {
            self.cas(&task, TaskStatus::Ready, "", &[]).await?;
            self.event(
                Some(child),
                None,
                EventKind::Promoted,
                json!({"from": "todo", "to": "ready"}),
            );
        }
        Ok(())
    }

    pub(crate) async fn board_links(&self) -> TxResult<Vec<Link>> {
        let rows = self
            .rows(
                "SELECT parent_id, child_id FROM kanban_task_links WHERE board = $1 \
                 ORDER BY parent_id, child_id",
                &[&self.board.as_str()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let row = self.reader(r);
                Ok(Link {
                    parent: row.task_id(0)?,
                    child: row.task_id(1)?,
                })
            })
            .collect()
    }

    pub(crate) async fn links(&self, id: &TaskId) -> TxResult<TaskLinks> {
        self.task(id).await?;
        Ok(TaskLinks {
            parents: self.parents(id).await?,
            children: self.children(id).await?,
        })
    }

    // ---- comments, events, runs, attachments ----

    pub(crate) async fn add_comment(
        &self,
        id: &TaskId,
        author: &str,
        body: &str,
    ) -> TxResult<Comment> {
        self.task(id).await?;
        non_empty("author", author, "who is writing (a profile or user name)")?;
        non_empty("body", body, "the comment's text")?;
        let row = self
            .row(
                "INSERT INTO kanban_task_comments (board, task_id, author, body, created_at) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
                &[
                    &self.board.as_str(),
                    &id.as_str(),
                    &author,
                    &body,
                    &self.now.0,
                ],
            )
            .await?;
        let cid: i64 = match &row {
            Some(r) => self.reader(r).get(0)?,
            None => 0,
        };
        self.event(
            Some(id),
            None,
            EventKind::Commented,
            json!({"comment_id": cid, "author": author}),
        );
        Ok(Comment {
            id: cid,
            task_id: id.clone(),
            author: author.to_string(),
            body: body.to_string(),
            created_at: self.now,
        })
    }

    pub(crate) async fn comments(&self, id: &TaskId) -> TxResult<Vec<Comment>> {
        self.task(id).await?;
        let rows = self
            .rows(
                "SELECT id, task_id, author, body, created_at FROM kanban_task_comments \
                 WHERE board = $1 AND task_id = $2 ORDER BY id",
                &[&self.board.as_str(), &id.as_str()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let rd = self.reader(r);
                Ok(Comment {
                    id: rd.get(0)?,
                    task_id: rd.task_id(1)?,
                    author: rd.get(2)?,
                    body: rd.get(3)?,
                    created_at: rd.ts(4)?,
                })
            })
            .collect()
    }

    pub(crate) async fn events_since(&self, cursor: EventId, limit: usize) -> TxResult<Vec<Event>> {
        let rows = self
            .rows(
                &format!(
                    "SELECT {EVENT_COLS} FROM kanban_task_events WHERE board = $1 AND id > $2 \
                     ORDER BY id LIMIT $3"
                ),
                &[&self.board.as_str(), &cursor.0, &sql_int(limit as u64)],
            )
            .await?;
        rows.iter().map(|r| self.reader(r).event()).collect()
    }

    pub(crate) async fn task_events(&self, id: &TaskId) -> TxResult<Vec<Event>> {
        self.task(id).await?;
        let rows = self
            .rows(
                &format!(
                    "SELECT {EVENT_COLS} FROM kanban_task_events WHERE board = $1 AND task_id = $2 \
                     ORDER BY id"
                ),
                &[&self.board.as_str(), &id.as_str()],
            )
            .await?;
        rows.iter().map(|r| self.reader(r).event()).collect()
    }

    pub(crate) async fn runs(&self, id: &TaskId) -> TxResult<Vec<Run>> {
        self.task(id).await?;
        let rows = self
            .rows(
                &format!(
                    "SELECT {RUN_COLS} FROM kanban_task_runs WHERE board = $1 AND task_id = $2 \
                     ORDER BY id"
                ),
                &[&self.board.as_str(), &id.as_str()],
            )
            .await?;
        rows.iter().map(|r| self.reader(r).run()).collect()
    }

    pub(crate) async fn run(&self, id: RunId) -> TxResult<Run> {
        let row = self
            .row(
                &format!("SELECT {RUN_COLS} FROM kanban_task_runs WHERE board = $1 AND id = $2"),
                &[&self.board.as_str(), &id.0],
            )
            .await?
            .ok_or_else(|| StoreError::RunNotFound {
                board: self.board.clone(),
                id: id.0,
            })?;
        self.reader(&row).run()
    }

    pub(crate) async fn record_run_usage(&self, id: RunId, usage: &Value) -> TxResult<()> {
        let changed = self
            .exec(
                "UPDATE kanban_task_runs SET usage = $1 WHERE board = $2 AND id = $3",
                &[&usage.to_string(), &self.board.as_str(), &id.0],
            )
            .await?;
        if changed == 0 {
            return Err(StoreError::RunNotFound {
                board: self.board.clone(),
                id: id.0,
            }
            .into());
        }
        Ok(())
    }

    pub(crate) async fn attach(&self, id: &TaskId, file: &NewAttachment) -> TxResult<Attachment> {
        self.task(id).await?;
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
        let row = self
            .row(
                "INSERT INTO kanban_task_attachments (board, task_id, filename, content_type, \
                 size, content, uploaded_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 RETURNING id",
                &[
                    &self.board.as_str(),
                    &id.as_str(),
                    &name,
                    &content_type,
                    &sql_int(size),
                    &file.content,
                    &file.uploaded_by,
                    &self.now.0,
                ],
            )
            .await?;
        let aid: i64 = match &row {
            Some(r) => self.reader(r).get(0)?,
            None => 0,
        };
        self.event(
            Some(id),
            None,
            EventKind::Attached,
            json!({"attachment_id": aid, "filename": name, "size": size}),
        );
        Ok(Attachment {
            id: aid,
            task_id: id.clone(),
            filename: name.to_string(),
            content_type: content_type.to_string(),
            size,
            uploaded_by: file.uploaded_by.clone(),
            created_at: self.now,
        })
    }

    pub(crate) async fn attachments(&self, id: &TaskId) -> TxResult<Vec<Attachment>> {
        self.task(id).await?;
        let rows = self
            .rows(
                &format!(
                    "SELECT {ATTACHMENT_COLS} FROM kanban_task_attachments \
                     WHERE board = $1 AND task_id = $2 ORDER BY id"
                ),
                &[&self.board.as_str(), &id.as_str()],
            )
            .await?;
        rows.iter().map(|r| self.reader(r).attachment()).collect()
    }

    pub(crate) async fn attachment_content(&self, attachment: i64) -> TxResult<Vec<u8>> {
        let row = self
            .row(
                "SELECT content FROM kanban_task_attachments WHERE board = $1 AND id = $2",
                &[&self.board.as_str(), &attachment],
            )
            .await?
            .ok_or_else(|| StoreError::AttachmentNotFound {
                board: self.board.clone(),
                id: attachment,
            })?;
        self.reader(&row).get(0)
    }

    pub(crate) async fn remove_attachment(&self, attachment: i64) -> TxResult<()> {
        let row = self
            .row(
                &format!(
                    "DELETE FROM kanban_task_attachments WHERE board = $1 AND id = $2 \
                     RETURNING {ATTACHMENT_COLS}"
                ),
                &[&self.board.as_str(), &attachment],
            )
            .await?
            .ok_or_else(|| StoreError::AttachmentNotFound {
                board: self.board.clone(),
                id: attachment,
            })?;
        let found = self.reader(&row).attachment()?;
        self.event(
            Some(&found.task_id),
            None,
            EventKind::AttachmentRemoved,
            json!({"attachment_id": attachment, "filename": found.filename}),
        );
        Ok(())
    }

    // ---- lifecycle ----

    pub(crate) async fn promote(&self) -> TxResult<Vec<TaskId>> {
        let mut promoted = Vec::new();
        // Rows another promoter holds are its to move: skip them rather than wait.
        let due = self
            .ids(
                "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'scheduled' \
                 AND scheduled_until <= $2 ORDER BY id FOR UPDATE SKIP LOCKED",
                &[&self.board.as_str(), &self.now.0],
            )
            .await?;
        for id in due {
            let task = self.task(&id).await?;
            let to = rules::runnable_status(
                !self.open_parents(&id).await?.is_empty(),
                TaskStatus::Ready,
            );
            self.cas(&task, to, "scheduled_until = NULL", &[]).await?;
            self.event(
                Some(&id),
                None,
                EventKind::Promoted,
                json!({"from": "scheduled", "to": to.as_str()}),
            );
            if to == TaskStatus::Ready {
                promoted.push(id);
            }
        }
        let waiting = self
            .ids(
                "SELECT t.id FROM kanban_tasks t WHERE t.board = $1 AND t.status = 'todo' \
                 AND NOT EXISTS ( \
                   SELECT 1 FROM kanban_task_links l \
                   JOIN kanban_tasks p ON p.board = l.board AND p.id = l.parent_id \
                   WHERE l.board = t.board AND l.child_id = t.id \
                   AND p.status NOT IN ('done', 'archived')) \
                 ORDER BY t.priority DESC, t.created_at, t.id FOR UPDATE OF t SKIP LOCKED",
                &[&self.board.as_str()],
            )
            .await?;
        for id in waiting {
            let task = self.task(&id).await?;
            self.cas(&task, TaskStatus::Ready, "", &[]).await?;
            self.event(
                Some(&id),
                None,
                EventKind::Promoted,
                json!({"from": "todo", "to": "ready"}),
            );
            promoted.push(id);
        }
        Ok(promoted)
    }

    /// Claims the best ready task; tasks found with an open parent go back to `todo`. The
    /// candidate row is locked with `SKIP LOCKED`, so concurrent claimers take different tasks
    /// instead of queueing behind one another.
    pub(crate) async fn claim_next(&self, spec: &ClaimSpec) -> TxResult<Option<Claim>> {
        self.ensure_live().await?;
        let board_s = self.board.as_str();
        let mut args: Vec<Param<'_>> = vec![&board_s];
        let mut sql =
            "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'ready'".to_string();
        if let Some(list) = &spec.assignees {
            if list.is_empty() {
                return Ok(None);
            }
            args.push(list);
            sql.push_str(" AND assignee = ANY($2)");
        }
        sql.push_str(" ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED");
        loop {
            let next = self.ids(&sql, &args).await?;
            let Some(id) = next.into_iter().next() else {
                return Ok(None);
            };
            let task = self.task(&id).await?;
            // Each pass either claims or moves one task out of `ready`, so this ends.
            if let Some(claim) = self.try_claim(&task, spec).await? {
                return Ok(Some(claim));
            }
        }
    }

    /// Claims one named task.
    pub(crate) async fn claim_task(&self, id: &TaskId, spec: &ClaimSpec) -> TxResult<Claim> {
        self.ensure_live().await?;
        let task = self.task(id).await?;
        rules::CLAIM.check(&task)?;
        match self.try_claim(&task, spec).await? {
            Some(claim) => Ok(claim),
            None => Err(StoreError::ParentsOpen {
                task: id.clone(),
                action: "claimed",
                open_parents: self.open_parents(id).await?,
            }
            .into()),
        }
    }

    /// The claim itself: `None` (and the task back in `todo`) when a parent is still open.
    async fn try_claim(&self, task: &Task, spec: &ClaimSpec) -> TxResult<Option<Claim>> {
        let open = self.open_parents(&task.id).await?;
        if !open.is_empty() && task.status == TaskStatus::Ready {
            self.cas(task, TaskStatus::Todo, "", &[]).await?;
            let ids: Vec<&str> = open.iter().map(TaskId::as_str).collect();
            self.event(
                Some(&task.id),
                None,
                EventKind::ClaimRejected,
                json!({"open_parents": ids}),
            );
            return Ok(None);
        }
        let expires = self.now.plus(spec.ttl);
        let lock = spec.worker.to_string();
        let row = self
            .row(
                "INSERT INTO kanban_task_runs (board, task_id, profile, source_status, claim_lock, \
                 claim_expires, max_runtime_seconds, last_heartbeat_at, started_at) \
                 VALUES ($8, $1, $2, $3, $4, $5, $6, $7, $7) RETURNING id",
                &[
                    &task.id.as_str(),
                    &task.assignee,
                    &task.status.as_str(),
                    &lock,
                    &expires.0,
                    &task.max_runtime_seconds.map(sql_int),
                    &self.now.0,
                    &self.board.as_str(),
                ],
            )
            .await?;
        let run_id = match &row {
            Some(r) => RunId(self.reader(r).get(0)?),
            None => {
                return Err(StoreError::Corrupt {
                    board: self.board.clone(),
                    what: "a new run got no id".to_string(),
                }
                .into());
            }
        };
        self.cas(
            task,
            TaskStatus::Running,
            "claim_lock = $6, claim_expires = $7, current_run_id = $8, last_heartbeat_at = $9, \
             started_at = COALESCE(started_at, $9)",
            &[&lock, &expires.0, &run_id.0, &self.now.0],
        )
        .await?;
        self.event(
            Some(&task.id),
            Some(run_id),
            EventKind::Claimed,
            json!({"lock": lock, "expires": expires.0, "run_id": run_id.0, "from": task.status.as_str()}),
        );
        Ok(Some(Claim {
            task: self.task(&task.id).await?,
            lease: Lease {
                worker: spec.worker.clone(),
                expires_at: expires,
                run_id,
            },
            run: self.run(run_id).await?,
        }))
    }

    pub(crate) async fn heartbeat(
        &self,
        id: &TaskId,
        worker: &WorkerId,
        ttl: std::time::Duration,
    ) -> TxResult<Lease> {
        let task = self.task(id).await?;
        rules::HEARTBEAT.check(&task)?;
        self.check_holder(&task, Some(worker))?;
        let Some(lease) = task.lease.clone() else {
            return Err(StoreError::LeaseNotHeld {
                task: id.clone(),
                worker: worker.to_string(),
                holder: None,
            }
            .into());
        };
        let expires = self.now.plus(ttl);
        self.cas(
            &task,
            TaskStatus::Running,
            "claim_expires = $6, last_heartbeat_at = $7",
            &[&expires.0, &self.now.0],
        )
        .await?;
        self.exec(
            "UPDATE kanban_task_runs SET claim_expires = $1, last_heartbeat_at = $2 \
             WHERE id = $3 AND board = $4",
            &[
                &expires.0,
                &self.now.0,
                &lease.run_id.0,
                &self.board.as_str(),
            ],
        )
        .await?;
        self.event(
            Some(id),
            Some(lease.run_id),
            EventKind::Heartbeat,
            json!({"expires": expires.0}),
        );
        Ok(Lease {
            worker: worker.clone(),
            expires_at: expires,
            run_id: lease.run_id,
        })
    }

    pub(crate) async fn complete(&self, id: &TaskId, done: &Completion) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::COMPLETE.check(&task)?;
        self.check_holder(&task, done.worker.as_ref())?;
        let open = self.open_parents(id).await?;
        if !open.is_empty() {
            return Err(StoreError::ParentsOpen {
                task: id.clone(),
                action: "completed",
                open_parents: open,
            }
            .into());
        }
        let summary = done.summary.as_deref();
        let closed = self
            .close_run(
                &task,
                RunOutcome::Completed,
                summary,
                done.metadata.as_ref(),
                None,
            )
            .await?;
        let run_id = match closed {
            Some(run) => run,
            None => {
                // Never claimed: record a zero-length run so every completion has one.
                let row = self
                    .row(
                        "INSERT INTO kanban_task_runs (board, task_id, profile, source_status, \
                         started_at, ended_at, outcome, summary, metadata) \
                         VALUES ($7, $1, $2, $3, $4, $4, 'completed', $5, $6) RETURNING id",
                        &[
                            &id.as_str(),
                            &task.assignee,
                            &task.status.as_str(),
                            &self.now.0,
                            &summary,
                            &done.metadata.as_ref().map(Value::to_string),
                            &self.board.as_str(),
                        ],
                    )
                    .await?;
                match &row {
                    Some(r) => RunId(self.reader(r).get(0)?),
                    None => RunId(0),
                }
            }
        };
        self.cas(
            &task,
            TaskStatus::Done,
            "result = COALESCE($6, result), completed_at = $7, consecutive_failures = 0, \
             protocol_violations = 0, last_failure_error = NULL, block_kind = NULL, \
             block_reason = NULL, block_recurrences = 0, claim_lock = NULL, claim_expires = NULL, \
             current_run_id = NULL, scheduled_until = NULL",
            &[&done.result, &self.now.0],
        )
        .await?;
        let result_len = done.result.as_ref().map_or(0, |r| r.chars().count());
        self.event(
            Some(id),
            Some(run_id),
            EventKind::Completed,
            json!({"result_len": result_len, "summary": summary.map(rules::summary_line)}),
        );
        self.promote_children(id).await?;
        self.task(id).await
    }

    pub(crate) async fn block(&self, id: &TaskId, req: &BlockRequest) -> TxResult<Transitioned> {
        let task = self.task(id).await?;
        rules::BLOCK.check(&task)?;
        self.check_holder(&task, req.worker.as_ref())?;
        let d = rules::decide_block(&task, req)?;
        let run = self
            .close_run(&task, RunOutcome::Blocked, Some(&req.reason), None, None)
            .await?;
        self.cas(
            &task,
            d.target,
            "block_kind = $6, block_reason = $7, block_recurrences = $8, claim_lock = NULL, \
             claim_expires = NULL, current_run_id = NULL",
            &[&d.kind, &req.reason, &i64::from(d.recurrences)],
        )
        .await?;
        let mut payload = json!({"reason": req.reason, "kind": d.kind, "recurrences": d.recurrences,
                                 "to": d.target.as_str()});
        if d.event == EventKind::BlockLoopDetected {
            payload["limit"] = json!(crate::domain::BLOCK_RECURRENCE_LIMIT);
        }
        self.event(Some(id), run, d.event, payload);
        Ok(Transitioned {
            task: self.task(id).await?,
            ended_lease: task.lease,
        })
    }

    pub(crate) async fn unblock(&self, id: &TaskId) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::UNBLOCK.check(&task)?;
        let to =
            rules::runnable_status(!self.open_parents(id).await?.is_empty(), TaskStatus::Ready);
        // An explicit unblock is a fresh chance: failure counters start again. The block kind
        // stays, so the same block coming straight back is still caught as a loop.
        self.cas(
            &task,
            to,
            "scheduled_until = NULL, consecutive_failures = 0, protocol_violations = 0",
            &[],
        )
        .await?;
        self.event(
            Some(id),
            None,
            EventKind::Unblocked,
            json!({"from": task.status.as_str(), "to": to.as_str()}),
        );
        self.task(id).await
    }

    pub(crate) async fn archive(&self, id: &TaskId) -> TxResult<Transitioned> {
        let task = self.task(id).await?;
        rules::ARCHIVE.check(&task)?;
        let run = self
            .close_run(
                &task,
                RunOutcome::Reclaimed,
                None,
                None,
                Some("task archived"),
            )
            .await?;
        self.cas(
            &task,
            TaskStatus::Archived,
            "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL, scheduled_until = NULL",
            &[],
        )
        .await?;
        self.event(
            Some(id),
            run,
            EventKind::Archived,
            json!({"from": task.status.as_str()}),
        );
        self.promote_children(id).await?;
        Ok(Transitioned {
            task: self.task(id).await?,
            ended_lease: task.lease,
        })
    }

    pub(crate) async fn schedule(&self, id: &TaskId, until: Timestamp) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::SCHEDULE.check(&task)?;
        self.cas(
            &task,
            TaskStatus::Scheduled,
            "scheduled_until = $6",
            &[&until.0],
        )
        .await?;
        self.event(
            Some(id),
            None,
            EventKind::Scheduled,
            json!({"from": task.status.as_str(), "until": until.0}),
        );
        self.task(id).await
    }

    pub(crate) async fn specify(&self, id: &TaskId) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::SPECIFY.check(&task)?;
        let to =
            rules::runnable_status(!self.open_parents(id).await?.is_empty(), TaskStatus::Ready);
        self.cas(&task, to, "", &[]).await?;
        self.event(
            Some(id),
            None,
            EventKind::Specified,
            json!({"to": to.as_str()}),
        );
        self.task(id).await
    }

    pub(crate) async fn request_review(
        &self,
        id: &TaskId,
        summary: Option<&str>,
        worker: Option<&WorkerId>,
    ) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::REQUEST_REVIEW.check(&task)?;
        self.check_holder(&task, worker)?;
        let run = self
            .close_run(&task, RunOutcome::ReviewRequested, summary, None, None)
            .await?;
        self.cas(
            &task,
            TaskStatus::Review,
            "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL",
            &[],
        )
        .await?;
        self.event(
            Some(id),
            run,
            EventKind::ReviewRequested,
            json!({"summary": summary.map(rules::summary_line)}),
        );
        self.task(id).await
    }

    pub(crate) async fn request_changes(&self, id: &TaskId, reason: &str) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::REQUEST_CHANGES.check(&task)?;
        non_empty("reason", reason, "what should change")?;
        let to =
            rules::runnable_status(!self.open_parents(id).await?.is_empty(), TaskStatus::Ready);
        self.cas(&task, to, "", &[]).await?;
        self.event(
            Some(id),
            None,
            EventKind::ChangesRequested,
            json!({"reason": reason, "to": to.as_str()}),
        );
        self.task(id).await
    }

    /// Takes back lapsed leases. Rows another reclaimer has locked are skipped: whichever
    /// caller sees a lapsed lease first takes it back, the others move on.
    pub(crate) async fn reclaim_expired(&self) -> TxResult<Vec<Reclaimed>> {
        let lapsed = self
            .ids(
                "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'running' \
                 AND claim_expires <= $2 ORDER BY claim_expires, id FOR UPDATE SKIP LOCKED",
                &[&self.board.as_str(), &self.now.0],
            )
            .await?;
        let mut out = Vec::new();
        for id in lapsed {
            let task = self.task(&id).await?;
            let Some(lease) = task.lease.clone() else {
                continue;
            };
            let source = self.source_status(&task).await?;
            let to = rules::runnable_status(!self.open_parents(&id).await?.is_empty(), source);
            self.close_run(
                &task,
                RunOutcome::Reclaimed,
                None,
                None,
                Some("lease lapsed"),
            )
            .await?;
            self.cas(
                &task,
                to,
                "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL",
                &[],
            )
            .await?;
            self.event(
                Some(&id),
                Some(lease.run_id),
                EventKind::Reclaimed,
                json!({"lock": lease.worker.to_string(), "claim_expires": lease.expires_at.0,
                       "last_heartbeat_at": task.last_heartbeat_at.map(|t| t.0), "to": to.as_str()}),
            );
            out.push(Reclaimed {
                task: self.task(&id).await?,
                lapsed: lease,
            });
        }
        Ok(out)
    }

    pub(crate) async fn record_failure(
        &self,
        id: &TaskId,
        f: &Failure,
    ) -> TxResult<FailureOutcome> {
        let task = self.task(id).await?;
        rules::FAIL.check(&task)?;
        self.check_holder(&task, f.worker.as_ref())?;
        let d = rules::decide_failure(&task, f.kind, f.configured_limit);
        let source = self.source_status(&task).await?;
        let run = self
            .close_run(&task, d.outcome, None, None, Some(&f.error))
            .await?;
        let counter = if d.event == EventKind::ProtocolViolation {
            "protocol_violations"
        } else {
            "consecutive_failures"
        };
        let to = if d.gave_up {
            TaskStatus::Blocked
        } else {
            rules::runnable_status(!self.open_parents(id).await?.is_empty(), source)
        };
        let block_reason = if d.gave_up {
            Some(f.error.as_str())
        } else {
            task.block_reason.as_deref()
        };
        self.cas(
            &task,
            to,
            &format!(
                "{counter} = $6, last_failure_error = $7, block_reason = $8, claim_lock = NULL, \
                 claim_expires = NULL, current_run_id = NULL"
            ),
            &[&i64::from(d.failures), &f.error, &block_reason],
        )
        .await?;
        self.event(
            Some(id),
            run,
            d.event,
            json!({"error": f.error, "failures": d.failures, "limit": d.limit, "to": to.as_str()}),
        );
        if d.gave_up {
            self.event(
                Some(id),
                run,
                EventKind::GaveUp,
                json!({"failures": d.failures, "effective_limit": d.limit,
                       "limit_source": d.limit_source, "error": f.error}),
            );
        }
        Ok(FailureOutcome {
            task: self.task(id).await?,
            failures: d.failures,
            limit: d.limit,
            limit_source: d.limit_source,
            gave_up: d.gave_up,
        })
    }

    pub(crate) async fn requeue_rate_limited(
        &self,
        id: &TaskId,
        worker: Option<&WorkerId>,
        error: &str,
    ) -> TxResult<Task> {
        let task = self.task(id).await?;
        rules::RATE_LIMIT.check(&task)?;
        self.check_holder(&task, worker)?;
        let source = self.source_status(&task).await?;
        let to = rules::runnable_status(!self.open_parents(id).await?.is_empty(), source);
        let run = self
            .close_run(&task, RunOutcome::RateLimited, None, None, Some(error))
            .await?;
        self.cas(
            &task,
            to,
            "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL",
            &[],
        )
        .await?;
        self.event(
            Some(id),
            run,
            EventKind::RateLimited,
            json!({"error": error, "to": to.as_str()}),
        );
        self.task(id).await
    }
}
