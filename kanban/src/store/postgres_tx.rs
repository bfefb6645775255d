//! The PostgreSQL side of every store operation: [`PgTx`], one open transaction on one board,
//! carrying out what `ops/` decides in PostgreSQL's SQL.
//!
//! `postgres.rs` opens the transaction, hands it to an operation, and commits only if the
//! operation returned `Ok`. Events are buffered during the operation and written by
//! [`PgTx::finish`] just before commit, under the board row's lock, so event ids follow commit
//! order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use deadpool_postgres::Transaction;
use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::domain::{
    Attachment, Board, BoardSlug, Comment, Event, EventId, Link, Run, RunId, Task, TaskFilter,
    TaskId, TaskStatus, Timestamp,
};
use crate::store::backend::{self, Backend, Pick, Set, Side, sql_int};
use crate::store::postgres_error::PgTxError;
use crate::store::postgres_rows::Reader;
use crate::store::rows::{
    self, ATTACHMENT_COLS, BOARD_COLS, COMMENT_COLS, EVENT_COLS, RUN_COLS, RowAccess, TASK_COLS,
};
use crate::store::{Claim, ClaimSpec, StoreError};

/// The database clock in milliseconds, as a column.
pub(crate) const CLOCK: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// What every operation in this file returns.
pub(crate) type TxResult<T> = Result<T, PgTxError>;

/// A query parameter.
pub(crate) type Param<'p> = &'p (dyn ToSql + Sync);

/// Every status change: the task's new status and time ($1, $2) where it is still in the status
/// it was read in ($3 the id, $4 that status, $5 the board); the other columns written go
/// between.
const SWAP_STATUS: (&str, &str) = (
    "UPDATE kanban_tasks SET status = $1, updated_at = $2",
    " WHERE board = $5 AND id = $3 AND status = $4",
);

/// A column value of a status change, as tokio-postgres binds it.
fn param<'s>(value: backend::SetValue<'s, '_>) -> Param<'s> {
    match value {
        backend::SetValue::Int(i) => i,
        backend::SetValue::Text(t) => t,
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
    /// The database clock (shared by every host), in milliseconds: read when the operation
    /// starts and again with every task row it reads (see [`PgTx::clock`]).
    pub(crate) now: AtomicI64,
    /// Events appended so far; numbered and written by [`PgTx::finish`].
    events: Mutex<Vec<PendingEvent>>,
    /// The board row as read in this transaction, until a step writes it: every operation
    /// asks for it at least twice (the board must exist, and be live), and each ask would be
    /// a round trip.
    board_row: Mutex<Option<Board>>,
}

impl<'a, 'b> PgTx<'a, 'b> {
    /// Starts an operation: reads the database clock, and the board row with it (one round
    /// trip for both).
    pub(crate) async fn open(tx: &'a Transaction<'b>, board: &'a BoardSlug) -> TxResult<Self> {
        let stmt = tx
            .prepare_cached(&format!(
                "SELECT {BOARD_COLS}, {CLOCK} FROM (SELECT 1 AS one) AS clock \
                 LEFT JOIN kanban_boards ON slug = $1"
            ))
            .await?;
        let row = tx.query_one(&stmt, &[&board.as_str()]).await?;
        let now = row.try_get(5)?;
        let found: Option<&str> = row.try_get(0)?;
        let board_row = match found {
            Some(_) => Some(rows::board(&Reader { row: &row, board })?),
            None => None,
        };
        Ok(PgTx {
            tx,
            board,
            now: AtomicI64::new(now),
            events: Mutex::new(Vec::new()),
            board_row: Mutex::new(board_row),
        })
    }
}

impl PgTx<'_, '_> {
    // ---- plumbing ----

    /// The time this operation writes. A transaction here sees each statement's own snapshot
    /// (read committed), so a task row can show a change committed after the operation began:
    /// a claim that finds a task put back in `ready` a moment ago must not start its run before
    /// the last run ended. Every task row is therefore read with the clock, and the clock only
    /// moves forward.
    fn clock(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::Relaxed))
    }

    /// Moves the clock to the reading in `row`'s last column, if that is later.
    fn clock_read_with(&self, row: &Row) -> TxResult<()> {
        let last = row.len().saturating_sub(1);
        let read: i64 = self.reader(row).get(last)?;
        self.now.fetch_max(read, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) async fn rows(&self, sql: &str, params: &[Param<'_>]) -> TxResult<Vec<Row>> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query(&stmt, params).await?)
    }

    pub(crate) async fn row(&self, sql: &str, params: &[Param<'_>]) -> TxResult<Option<Row>> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query_opt(&stmt, params).await?)
    }

    pub(crate) async fn exec(&self, sql: &str, params: &[Param<'_>]) -> TxResult<u64> {
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

    /// Every row of a query, decoded.
    async fn all<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        decode: impl Fn(&Reader<'_>) -> TxResult<T>,
    ) -> TxResult<Vec<T>> {
        let rows = self.rows(sql, params).await?;
        rows.iter().map(|r| decode(&self.reader(r))).collect()
    }

    fn cached_board(&self) -> std::sync::MutexGuard<'_, Option<Board>> {
        self.board_row
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let mut tasks = Vec::with_capacity(pending.len());
        let mut runs = Vec::with_capacity(pending.len());
        let mut kinds = Vec::with_capacity(pending.len());
        let mut payloads = Vec::with_capacity(pending.len());
        for e in pending {
            tasks.push(e.task);
            runs.push(e.run);
            kinds.push(e.kind);
            payloads.push(e.payload);
        }
        // One round trip for the whole step: take the ids from the board row (locking it until
        // commit), write every event numbered in order, and queue the notice, which listeners
        // get only if and when the transaction commits.
        self.row(
            "WITH ids AS (UPDATE kanban_boards SET last_event_id = last_event_id + $2 \
             WHERE slug = $1 RETURNING last_event_id), \
             written AS (INSERT INTO kanban_task_events \
             (board, id, task_id, run_id, kind, payload, created_at) \
             SELECT $1, ids.last_event_id - $2 + e.n, e.task_id, e.run_id, e.kind, e.payload, $7 \
             FROM ids, unnest($3::text[], $4::bigint[], $5::text[], $6::text[]) \
             WITH ORDINALITY AS e(task_id, run_id, kind, payload, n)) \
             SELECT last_event_id, pg_notify($8, $1 || ':' || last_event_id) FROM ids",
            &[
                &self.board.as_str(),
                &n,
                &tasks,
                &runs,
                &kinds,
                &payloads,
                &self.clock().0,
                &channel_name(self.board),
            ],
        )
        .await?
        .ok_or_else(|| StoreError::BoardNotFound {
            slug: self.board.clone(),
        })?;
        Ok(())
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
        self.cached_board().take();
        let slug = self.board.as_str();
        for table in [
            "kanban_task_attachments",
            "kanban_task_runs",
            "kanban_task_events",
            "kanban_task_comments",
            "kanban_task_links",
            "kanban_tasks",
            "kanban_schedule_runs",
            "kanban_schedule_jobs",
            "kanban_schedule_clock",
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
}

/// PostgreSQL carries out the decisions of `ops/`: each step is a statement or two (events are
/// buffered until [`PgTx::finish`]), every query naming the board, since one database holds
/// many.
impl Backend for PgTx<'_, '_> {
    type Error = PgTxError;

    fn board(&self) -> &BoardSlug {
        self.board
    }

    async fn claim_batch(&self, specs: &[ClaimSpec]) -> TxResult<Vec<Claim>> {
        crate::store::postgres_claims::claim_batch(self, specs).await
    }

    fn now(&self) -> Timestamp {
        self.clock()
    }

    // ---- reads ----

    async fn board_row(&self) -> TxResult<Board> {
        if let Some(board) = self.cached_board().clone() {
            return Ok(board);
        }
        let row = self
            .row(
                &format!("SELECT {BOARD_COLS} FROM kanban_boards WHERE slug = $1"),
                &[&self.board.as_str()],
            )
            .await?
            .ok_or_else(|| StoreError::BoardNotFound {
                slug: self.board.clone(),
            })?;
        let board = rows::board(&self.reader(&row))?;
        *self.cached_board() = Some(board.clone());
        Ok(board)
    }

    async fn try_task(&self, id: &TaskId) -> TxResult<Option<Task>> {
        let row = self
            .row(
                &format!(
                    "SELECT {TASK_COLS}, {CLOCK} FROM kanban_tasks WHERE board = $1 AND id = $2"
                ),
                &[&self.board.as_str(), &id.as_str()],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        self.clock_read_with(&row)?;
        rows::task(&self.reader(&row)).map(Some)
    }

    async fn task_by_key(&self, key: &str) -> TxResult<Option<Task>> {
        let found = self
            .all(
                &format!(
                    "SELECT {TASK_COLS} FROM kanban_tasks WHERE board = $1 \
                     AND idempotency_key = $2 AND status <> 'archived' \
                     ORDER BY created_at DESC LIMIT 1"
                ),
                &[&self.board.as_str(), &key],
                |r| rows::task(r),
            )
            .await?;
        Ok(found.into_iter().next())
    }

    async fn select_tasks(&self, f: &TaskFilter) -> TxResult<Vec<Task>> {
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
        sql.push_str(backend::task_order(f.sort));
        if let Some(limit) = &limit {
            args.push(limit);
            sql.push_str(&format!(" LIMIT ${}", args.len()));
        }
        self.all(&sql, &args, |r| rows::task(r)).await
    }

    /// Rows another claimer, reclaimer or promoter has locked are skipped rather than waited
    /// for: whichever caller locked a row first moves it, the others move on.
    async fn pick(&self, pick: Pick<'_>) -> TxResult<Vec<TaskId>> {
        let board_s = self.board.as_str();
        match pick {
            Pick::Lapsed => {
                self.ids(
                    "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'running' \
                     AND claim_expires <= $2 ORDER BY claim_expires, id FOR UPDATE SKIP LOCKED",
                    &[&board_s, &self.clock().0],
                )
                .await
            }
            Pick::Due => {
                self.ids(
                    "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'scheduled' \
                     AND scheduled_until <= $2 ORDER BY id FOR UPDATE SKIP LOCKED",
                    &[&board_s, &self.clock().0],
                )
                .await
            }
            Pick::Unblocked => {
                self.ids(
                    "SELECT t.id FROM kanban_tasks t WHERE t.board = $1 AND t.status = 'todo' \
                     AND NOT EXISTS ( \
                       SELECT 1 FROM kanban_task_links l \
                       JOIN kanban_tasks p ON p.board = l.board AND p.id = l.parent_id \
                       WHERE l.board = t.board AND l.child_id = t.id \
                       AND p.status NOT IN ('done', 'archived')) \
                     ORDER BY t.priority DESC, t.created_at, t.id FOR UPDATE OF t SKIP LOCKED",
                    &[&board_s],
                )
                .await
            }
            Pick::NextReady(None) => {
                self.ids(
                    "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'ready' \
                     ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                    &[&board_s],
                )
                .await
            }
            Pick::NextReady(Some(list)) => {
                self.ids(
                    "SELECT id FROM kanban_tasks WHERE board = $1 AND status = 'ready' \
                     AND assignee = ANY($2) \
                     ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                    &[&board_s, &list],
                )
                .await
            }
        }
    }

    async fn linked(&self, id: &TaskId, side: Side) -> TxResult<Vec<TaskId>> {
        let sql = match side {
            Side::Parents => {
                "SELECT parent_id FROM kanban_task_links WHERE board = $1 AND child_id = $2 \
                 ORDER BY created_at, parent_id"
            }
            Side::Children => {
                "SELECT child_id FROM kanban_task_links WHERE board = $1 AND parent_id = $2 \
                 ORDER BY created_at, child_id"
            }
        };
        self.ids(sql, &[&self.board.as_str(), &id.as_str()]).await
    }

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

    async fn has_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<bool> {
        let row = self
            .row(
                "SELECT 1 FROM kanban_task_links WHERE board = $1 AND parent_id = $2 \
                 AND child_id = $3",
                &[&self.board.as_str(), &parent.as_str(), &child.as_str()],
            )
            .await?;
        Ok(row.is_some())
    }

    async fn all_links(&self) -> TxResult<Vec<Link>> {
        self.all(
            "SELECT parent_id, child_id FROM kanban_task_links WHERE board = $1 \
             ORDER BY parent_id, child_id",
            &[&self.board.as_str()],
            |r| rows::link(r),
        )
        .await
    }

    async fn counts(&self) -> TxResult<backend::Counts> {
        let board_s = self.board.as_str();
        let by_status = self
            .all(
                "SELECT status, COUNT(*) FROM kanban_tasks WHERE board = $1 GROUP BY status",
                &[&board_s],
                |r| Ok((r.status(0)?, r.int(1)?)),
            )
            .await?;
        let mut counts = backend::Counts {
            by_status,
            ..backend::Counts::default()
        };
        let row = self
            .row(
                "SELECT (SELECT COUNT(*) FROM kanban_task_runs WHERE board = $1 AND ended_at IS NULL), \
                 (SELECT MAX(id) FROM kanban_task_events WHERE board = $1)",
                &[&board_s],
            )
            .await?;
        if let Some(r) = row {
            let rd = self.reader(&r);
            counts.open_runs = rd.get(0)?;
            counts.last_event = rd.get(1)?;
        }
        Ok(counts)
    }

    async fn run_source(&self, run: RunId) -> TxResult<Option<String>> {
        let row = self
            .row(
                "SELECT source_status FROM kanban_task_runs WHERE id = $1 AND board = $2",
                &[&run.0, &self.board.as_str()],
            )
            .await?;
        row.map(|r| self.reader(&r).get(0)).transpose()
    }

    async fn try_run(&self, run: RunId) -> TxResult<Option<Run>> {
        let row = self
            .row(
                &format!("SELECT {RUN_COLS} FROM kanban_task_runs WHERE board = $1 AND id = $2"),
                &[&self.board.as_str(), &run.0],
            )
            .await?;
        row.map(|r| rows::run(&self.reader(&r))).transpose()
    }

    async fn task_runs(&self, id: &TaskId) -> TxResult<Vec<Run>> {
        self.all(
            &format!(
                "SELECT {RUN_COLS} FROM kanban_task_runs WHERE board = $1 AND task_id = $2 \
                 ORDER BY id"
            ),
            &[&self.board.as_str(), &id.as_str()],
            |r| rows::run(r),
        )
        .await
    }

    async fn task_comments(&self, id: &TaskId) -> TxResult<Vec<Comment>> {
        self.all(
            &format!(
                "SELECT {COMMENT_COLS} FROM kanban_task_comments \
                     WHERE board = $1 AND task_id = $2 ORDER BY id"
            ),
            &[&self.board.as_str(), &id.as_str()],
            |r| rows::comment(r),
        )
        .await
    }

    async fn events_after(&self, cursor: EventId, limit: usize) -> TxResult<Vec<Event>> {
        self.all(
            &format!(
                "SELECT {EVENT_COLS} FROM kanban_task_events WHERE board = $1 AND id > $2 \
                     ORDER BY id LIMIT $3"
            ),
            &[&self.board.as_str(), &cursor.0, &sql_int(limit as u64)],
            |r| rows::event(r),
        )
        .await
    }

    async fn events_of(&self, id: &TaskId) -> TxResult<Vec<Event>> {
        self.all(
            &format!(
                "SELECT {EVENT_COLS} FROM kanban_task_events \
                     WHERE board = $1 AND task_id = $2 ORDER BY id"
            ),
            &[&self.board.as_str(), &id.as_str()],
            |r| rows::event(r),
        )
        .await
    }

    async fn task_attachments(&self, id: &TaskId) -> TxResult<Vec<Attachment>> {
        self.all(
            &format!(
                "SELECT {ATTACHMENT_COLS} FROM kanban_task_attachments \
                     WHERE board = $1 AND task_id = $2 ORDER BY id"
            ),
            &[&self.board.as_str(), &id.as_str()],
            |r| rows::attachment(r),
        )
        .await
    }

    async fn attachment_bytes(&self, attachment: i64) -> TxResult<Option<Vec<u8>>> {
        let row = self
            .row(
                "SELECT content FROM kanban_task_attachments WHERE board = $1 AND id = $2",
                &[&self.board.as_str(), &attachment],
            )
            .await?;
        row.map(|r| self.reader(&r).get(0)).transpose()
    }

    // ---- writes ----

    async fn insert_board(&self, name: &str, description: &str) -> TxResult<bool> {
        self.cached_board().take();
        let inserted = self
            .exec(
                "INSERT INTO kanban_boards (slug, name, description, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (slug) DO NOTHING",
                &[&self.board.as_str(), &name, &description, &self.clock().0],
            )
            .await?;
        Ok(inserted > 0)
    }

    async fn mark_board_archived(&self) -> TxResult<()> {
        self.cached_board().take();
        self.exec(
            "UPDATE kanban_boards SET archived_at = $2 WHERE slug = $1",
            &[&self.board.as_str(), &self.clock().0],
        )
        .await?;
        Ok(())
    }

    async fn insert_task(&self, t: &Task) -> TxResult<()> {
        self.exec(
            "INSERT INTO kanban_tasks (board, id, title, body, assignee, status, priority, tenant, \
             idempotency_key, created_by, created_at, updated_at, workspace_kind, workspace_path, \
             max_runtime_seconds, max_retries, budget, traceparent) \
             VALUES ($15, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13, $14, $16, $17)",
            &[
                &t.id.as_str(),
                &t.title,
                &t.body,
                &t.assignee,
                &t.status.as_str(),
                &t.priority,
                &t.tenant,
                &t.idempotency_key,
                &t.created_by,
                &t.created_at.0,
                &t.workspace.kind(),
                &t.workspace.path(),
                &t.max_runtime_seconds.map(sql_int),
                &t.max_retries.map(i64::from),
                &self.board.as_str(),
                &super::budget_text(t.budget.as_ref()),
                &t.traceparent,
            ],
        )
        .await?;
        Ok(())
    }

    async fn write_fields(&self, t: &Task) -> TxResult<()> {
        self.exec(
            "UPDATE kanban_tasks SET title = $1, body = $2, priority = $3, tenant = $4, \
             max_runtime_seconds = $5, max_retries = $6, workspace_kind = $7, \
             workspace_path = $8, result = $9, updated_at = $10 WHERE board = $12 AND id = $11",
            &[
                &t.title,
                &t.body,
                &t.priority,
                &t.tenant,
                &t.max_runtime_seconds.map(sql_int),
                &t.max_retries.map(i64::from),
                &t.workspace.kind(),
                &t.workspace.path(),
                &t.result,
                &self.clock().0,
                &t.id.as_str(),
                &self.board.as_str(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn write_assignee(&self, id: &TaskId, assignee: Option<&str>) -> TxResult<()> {
        self.exec(
            "UPDATE kanban_tasks SET assignee = $1, consecutive_failures = 0, \
             protocol_violations = 0, updated_at = $2 WHERE board = $4 AND id = $3",
            &[
                &assignee,
                &self.clock().0,
                &id.as_str(),
                &self.board.as_str(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn swap_status(&self, task: &Task, to: TaskStatus, sets: &[Set<'_>]) -> TxResult<bool> {
        let sql = backend::swap_statement(SWAP_STATUS, sets, 6, '$');
        let board_s = self.board.as_str();
        let (to_s, id_s, from_s) = (to.as_str(), task.id.as_str(), task.status.as_str());
        let now = self.clock().0;
        let mut args: Vec<Param<'_>> = vec![&to_s, &now, &id_s, &from_s, &board_s];
        args.extend(sets.iter().filter_map(Set::value).map(param));
        Ok(self.exec(&sql, &args).await? == 1)
    }

    async fn insert_run(&self, run: &backend::RunRow<'_>) -> TxResult<RunId> {
        let row = self
            .row(
                "INSERT INTO kanban_task_runs (board, task_id, profile, source_status, claim_lock, \
                 claim_expires, max_runtime_seconds, last_heartbeat_at, started_at, ended_at, \
                 outcome, summary, metadata) \
                 VALUES ($13, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
                &[
                    &run.task.as_str(),
                    &run.profile,
                    &run.source.as_str(),
                    &run.lock,
                    &run.expires,
                    &run.max_runtime_seconds,
                    &run.heartbeat,
                    &run.started,
                    &run.ended,
                    &run.outcome,
                    &run.summary,
                    &run.metadata,
                    &self.board.as_str(),
                ],
            )
            .await?;
        match &row {
            Some(r) => Ok(RunId(self.reader(r).get(0)?)),
            None => Err(StoreError::Corrupt {
                board: self.board.clone(),
                what: "a new run got no id".to_string(),
            }
            .into()),
        }
    }

    async fn end_run(&self, run: RunId, end: backend::RunEnd<'_>) -> TxResult<()> {
        self.exec(
            "UPDATE kanban_task_runs SET ended_at = $1, outcome = $2, summary = $3, metadata = $4, \
             error = $5 WHERE id = $6 AND board = $7 AND ended_at IS NULL",
            &[
                &self.clock().0,
                &end.outcome.as_str(),
                &end.summary,
                &end.metadata.map(Value::to_string),
                &end.error,
                &run.0,
                &self.board.as_str(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn extend_run(&self, run: RunId, expires: Timestamp) -> TxResult<()> {
        self.exec(
            "UPDATE kanban_task_runs SET claim_expires = $1, last_heartbeat_at = $2 \
             WHERE id = $3 AND board = $4",
            &[&expires.0, &self.clock().0, &run.0, &self.board.as_str()],
        )
        .await?;
        Ok(())
    }

    async fn write_run_usage(&self, run: RunId, usage: &Value) -> TxResult<bool> {
        let changed = self
            .exec(
                "UPDATE kanban_task_runs SET usage = $1 WHERE board = $2 AND id = $3",
                &[&usage.to_string(), &self.board.as_str(), &run.0],
            )
            .await?;
        Ok(changed > 0)
    }

    async fn insert_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        self.exec(
            "INSERT INTO kanban_task_links (board, parent_id, child_id, created_at) \
             VALUES ($1, $2, $3, $4)",
            &[
                &self.board.as_str(),
                &parent.as_str(),
                &child.as_str(),
                &self.clock().0,
            ],
        )
        .await?;
        Ok(())
    }

    async fn delete_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<bool> {
        let removed = self
            .exec(
                "DELETE FROM kanban_task_links WHERE board = $1 AND parent_id = $2 AND child_id = $3",
                &[&self.board.as_str(), &parent.as_str(), &child.as_str()],
            )
            .await?;
        Ok(removed > 0)
    }

    async fn insert_comment(&self, id: &TaskId, author: &str, body: &str) -> TxResult<i64> {
        let row = self
            .row(
                "INSERT INTO kanban_task_comments (board, task_id, author, body, created_at) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
                &[
                    &self.board.as_str(),
                    &id.as_str(),
                    &author,
                    &body,
                    &self.clock().0,
                ],
            )
            .await?;
        row.map_or(Ok(0), |r| self.reader(&r).get(0))
    }

    async fn insert_attachment(&self, file: &backend::FileRow<'_>) -> TxResult<i64> {
        let row = self
            .row(
                "INSERT INTO kanban_task_attachments (board, task_id, filename, content_type, \
                 size, content, uploaded_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 RETURNING id",
                &[
                    &self.board.as_str(),
                    &file.task.as_str(),
                    &file.filename,
                    &file.content_type,
                    &sql_int(file.content.len() as u64),
                    &file.content,
                    &file.uploaded_by,
                    &self.clock().0,
                ],
            )
            .await?;
        row.map_or(Ok(0), |r| self.reader(&r).get(0))
    }

    async fn delete_attachment(&self, attachment: i64) -> TxResult<Option<Attachment>> {
        let row = self
            .row(
                &format!(
                    "DELETE FROM kanban_task_attachments WHERE board = $1 AND id = $2 \
                     RETURNING {ATTACHMENT_COLS}"
                ),
                &[&self.board.as_str(), &attachment],
            )
            .await?;
        row.map(|r| rows::attachment(&self.reader(&r))).transpose()
    }

    /// Buffered; numbered and written by [`PgTx::finish`].
    fn event(&self, e: backend::NewEvent<'_>) -> TxResult<()> {
        self.lock_events().push(PendingEvent {
            task: e.task.map(|t| t.as_str().to_string()),
            run: e.run.map(|r| r.0),
            kind: e.kind.as_str(),
            payload: e.payload,
        });
        Ok(())
    }
}
