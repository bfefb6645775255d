//! The SQLite side of every store operation: [`Tx`], one open transaction on one board's file,
//! carrying out what `ops/` decides in SQLite's SQL.
//!
//! `sqlite.rs` opens the transaction (`BEGIN IMMEDIATE` for writes), hands it to an operation,
//! and commits only if the operation returned `Ok`; so a state change and its events land
//! together or not at all. Each status change is also written as a compare-and-swap on the
//! status it was read in.

use rusqlite::types::{ToSql, Type};
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde_json::Value;

use crate::domain::{
    Attachment, Board, BoardSlug, Comment, Event, EventId, Link, ModelError, Run, RunId, Task,
    TaskFilter, TaskId, TaskStatus, Timestamp,
};
use crate::store::StoreError;
use crate::store::backend::{self, Backend, Pick, Set, Side, sql_int};
use crate::store::error::{self, DbError};
use crate::store::rows::{self, RowAccess};
use crate::store::rows::{
    ATTACHMENT_COLS, BOARD_COLS, COMMENT_COLS, EVENT_COLS, RUN_COLS, TASK_COLS,
};

/// Classifies a SQLite error: locked means busy, unreadable values mean a corrupt board.
pub(crate) fn db_error(board: &BoardSlug, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    match e {
        rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, DatabaseBusy | DatabaseLocked) => {
            StoreError::Busy {
                board: board.clone(),
            }
        }
        rusqlite::Error::FromSqlConversionFailure(_, _, inner) => StoreError::Corrupt {
            board: board.clone(),
            what: inner.to_string(),
        },
        other => StoreError::Backend {
            board: board.clone(),
            source: Box::new(other),
        },
    }
}

impl DbError for rusqlite::Error {
    fn into_store(self, board: &BoardSlug) -> StoreError {
        db_error(board, self)
    }
}

/// An error inside a SQLite transaction.
pub(crate) type TxError = error::TxError<rusqlite::Error>;

/// What every operation in this file returns.
pub(crate) type TxResult<T> = Result<T, TxError>;

/// A value read back that does not parse becomes a conversion failure, which [`db_error`]
/// reports as a corrupt board.
impl RowAccess for Row<'_> {
    type Error = rusqlite::Error;

    fn int(&self, idx: usize) -> rusqlite::Result<i64> {
        self.get(idx)
    }

    fn opt_int(&self, idx: usize) -> rusqlite::Result<Option<i64>> {
        self.get(idx)
    }

    fn text(&self, idx: usize) -> rusqlite::Result<&str> {
        self.get_ref(idx)?
            .as_str()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
    }

    fn opt_text(&self, idx: usize) -> rusqlite::Result<Option<&str>> {
        self.get_ref(idx)?
            .as_str_or_null()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
    }

    fn bad<E: std::error::Error + Send + Sync + 'static>(
        &self,
        idx: usize,
        e: E,
    ) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e))
    }

    fn corrupt(&self, idx: usize, what: String) -> rusqlite::Error {
        self.bad(
            idx,
            ModelError::BadField {
                field: "stored value",
                why: what,
            },
        )
    }
}

/// Every status change: the task's new status and time (?1, ?2) where it is still in the status
/// it was read in (?3 the id, ?4 that status); the other columns written go between.
const SWAP_STATUS: (&str, &str) = (
    "UPDATE tasks SET status = ?1, updated_at = ?2",
    " WHERE id = ?3 AND status = ?4",
);

/// A column value of a status change, as rusqlite binds it.
fn bound<'s>(value: backend::SetValue<'s, '_>) -> &'s dyn ToSql {
    match value {
        backend::SetValue::Int(i) => i,
        backend::SetValue::Text(t) => t,
    }
}

/// One operation's view of a board inside an open transaction.
pub(crate) struct Tx<'a> {
    /// The transaction (derefs to the connection).
    pub(crate) c: &'a Connection,
    /// The board this file holds.
    pub(crate) board: &'a BoardSlug,
    /// The store clock's reading for the whole operation.
    pub(crate) now: Timestamp,
}

impl Tx<'_> {
    /// Runs a statement from the connection's cache: the board's statements are prepared once
    /// per connection, not once per call.
    fn exec<P: rusqlite::Params>(&self, sql: &str, args: P) -> rusqlite::Result<usize> {
        self.c.prepare_cached(sql)?.execute(args)
    }

    /// The one row a cached statement selects, decoded by `decode`.
    fn row<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        args: P,
        decode: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.c.prepare_cached(sql)?.query_row(args, decode)
    }

    /// The task ids a query selects (in its first column).
    fn ids<P: rusqlite::Params>(&self, sql: &str, args: P) -> TxResult<Vec<TaskId>> {
        let mut stmt = self.c.prepare_cached(sql)?;
        let rows = stmt.query_map(args, |r| r.task_id(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Rows of a query decoded by `decode`.
    fn all<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        args: P,
        decode: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> TxResult<Vec<T>> {
        let mut stmt = self.c.prepare_cached(sql)?;
        let rows = stmt.query_map(args, decode)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}

/// SQLite carries out the decisions of `ops/` synchronously: no method here ever waits.
impl Backend for Tx<'_> {
    type Error = TxError;

    // ---- reads ----

    /// The board row; a file without one is a board whose creation never finished.
    async fn board_row(&self) -> TxResult<Board> {
        self.row(
            &format!("SELECT {BOARD_COLS} FROM board WHERE id = 1"),
            [],
            |r| rows::board(r),
        )
        .optional()?
        .ok_or_else(|| {
            StoreError::BoardNotFound {
                slug: self.board.clone(),
            }
            .into()
        })
    }

    async fn try_task(&self, id: &TaskId) -> TxResult<Option<Task>> {
        Ok(self
            .c
            .prepare_cached(&format!("SELECT {TASK_COLS} FROM tasks WHERE id = ?1"))?
            .query_row([id.as_str()], |r| rows::task(r))
            .optional()?)
    }

    async fn task_by_key(&self, key: &str) -> TxResult<Option<Task>> {
        Ok(self
            .row(
                &format!(
                    "SELECT {TASK_COLS} FROM tasks WHERE idempotency_key = ?1 \
                     AND status <> 'archived' ORDER BY created_at DESC LIMIT 1"
                ),
                [key],
                |r| rows::task(r),
            )
            .optional()?)
    }

    async fn select_tasks(&self, f: &TaskFilter) -> TxResult<Vec<Task>> {
        let mut sql = format!("SELECT {TASK_COLS} FROM tasks WHERE 1 = 1");
        let mut args: Vec<String> = Vec::new();
        if f.statuses.is_empty() {
            if !f.include_archived {
                sql.push_str(" AND status <> 'archived'");
            }
        } else {
            let marks = vec!["?"; f.statuses.len()].join(", ");
            sql.push_str(&format!(" AND status IN ({marks})"));
            args.extend(f.statuses.iter().map(|s| s.as_str().to_string()));
        }
        if let Some(a) = &f.assignee {
            sql.push_str(" AND assignee = ?");
            args.push(a.clone());
        }
        if let Some(t) = &f.tenant {
            sql.push_str(" AND tenant = ?");
            args.push(t.clone());
        }
        sql.push_str(backend::task_order(f.sort));
        if let Some(limit) = f.limit {
            sql.push_str(&format!(" LIMIT {}", sql_int(limit as u64)));
        }
        let mut stmt = self.c.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(args), |r| rows::task(r))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    async fn pick(&self, pick: Pick<'_>) -> TxResult<Vec<TaskId>> {
        match pick {
            Pick::Lapsed => self.ids(
                "SELECT id FROM tasks WHERE status = 'running' AND claim_expires <= ?1 \
                 ORDER BY claim_expires, id",
                [self.now.0],
            ),
            Pick::Due => self.ids(
                "SELECT id FROM tasks WHERE status = 'scheduled' AND scheduled_until <= ?1 \
                 ORDER BY id",
                [self.now.0],
            ),
            Pick::Unblocked => self.ids(
                "SELECT t.id FROM tasks t WHERE t.status = 'todo' AND NOT EXISTS ( \
                   SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id \
                   WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived')) \
                 ORDER BY t.priority DESC, t.created_at, t.id",
                [],
            ),
            Pick::NextReady(assignees) => {
                let mut sql = "SELECT id FROM tasks WHERE status = 'ready'".to_string();
                let list = assignees.unwrap_or_default();
                if assignees.is_some() {
                    let marks = vec!["?"; list.len()].join(", ");
                    sql.push_str(&format!(" AND assignee IN ({marks})"));
                }
                sql.push_str(" ORDER BY priority DESC, created_at, id LIMIT 1");
                self.ids(&sql, params_from_iter(list))
            }
        }
    }

    async fn linked(&self, id: &TaskId, side: Side) -> TxResult<Vec<TaskId>> {
        let sql = match side {
            Side::Parents => {
                "SELECT parent_id FROM task_links WHERE child_id = ?1 \
                 ORDER BY created_at, parent_id"
            }
            Side::Children => {
                "SELECT child_id FROM task_links WHERE parent_id = ?1 \
                 ORDER BY created_at, child_id"
            }
        };
        self.ids(sql, [id.as_str()])
    }

    async fn open_parents(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT l.parent_id FROM task_links l JOIN tasks p ON p.id = l.parent_id \
             WHERE l.child_id = ?1 AND p.status NOT IN ('done', 'archived') ORDER BY l.parent_id",
            [id.as_str()],
        )
    }

    async fn has_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<bool> {
        Ok(self.row(
            "SELECT EXISTS (SELECT 1 FROM task_links WHERE parent_id = ?1 AND child_id = ?2)",
            params![parent.as_str(), child.as_str()],
            |r| r.get(0),
        )?)
    }

    async fn all_links(&self) -> TxResult<Vec<Link>> {
        self.all(
            "SELECT parent_id, child_id FROM task_links ORDER BY parent_id, child_id",
            [],
            |r| rows::link(r),
        )
    }

    async fn counts(&self) -> TxResult<backend::Counts> {
        let by_status = self.all(
            "SELECT status, COUNT(*) FROM tasks GROUP BY status",
            [],
            |r| Ok((r.status(0)?, r.int(1)?)),
        )?;
        let (open_runs, last_event) = self.row(
            "SELECT (SELECT COUNT(*) FROM task_runs WHERE ended_at IS NULL), \
             (SELECT MAX(id) FROM task_events)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(backend::Counts {
            by_status,
            open_runs,
            last_event,
        })
    }

    async fn run_source(&self, run: RunId) -> TxResult<Option<String>> {
        Ok(self
            .row(
                "SELECT source_status FROM task_runs WHERE id = ?1",
                [run.0],
                |r| r.get(0),
            )
            .optional()?)
    }

    async fn try_run(&self, run: RunId) -> TxResult<Option<Run>> {
        Ok(self
            .c
            .prepare_cached(&format!("SELECT {RUN_COLS} FROM task_runs WHERE id = ?1"))?
            .query_row([run.0], |r| rows::run(r))
            .optional()?)
    }

    async fn task_runs(&self, id: &TaskId) -> TxResult<Vec<Run>> {
        self.all(
            &format!("SELECT {RUN_COLS} FROM task_runs WHERE task_id = ?1 ORDER BY id"),
            [id.as_str()],
            |r| rows::run(r),
        )
    }

    async fn task_comments(&self, id: &TaskId) -> TxResult<Vec<Comment>> {
        self.all(
            &format!("SELECT {COMMENT_COLS} FROM task_comments WHERE task_id = ?1 ORDER BY id"),
            [id.as_str()],
            |r| rows::comment(r),
        )
    }

    async fn events_after(&self, cursor: EventId, limit: usize) -> TxResult<Vec<Event>> {
        self.all(
            &format!("SELECT {EVENT_COLS} FROM task_events WHERE id > ?1 ORDER BY id LIMIT ?2"),
            params![cursor.0, sql_int(limit as u64)],
            |r| rows::event(r),
        )
    }

    async fn events_of(&self, id: &TaskId) -> TxResult<Vec<Event>> {
        self.all(
            &format!("SELECT {EVENT_COLS} FROM task_events WHERE task_id = ?1 ORDER BY id"),
            [id.as_str()],
            |r| rows::event(r),
        )
    }

    async fn task_attachments(&self, id: &TaskId) -> TxResult<Vec<Attachment>> {
        self.all(
            &format!(
                "SELECT {ATTACHMENT_COLS} FROM task_attachments WHERE task_id = ?1 ORDER BY id"
            ),
            [id.as_str()],
            |r| rows::attachment(r),
        )
    }

    async fn attachment_bytes(&self, attachment: i64) -> TxResult<Option<Vec<u8>>> {
        Ok(self
            .row(
                "SELECT content FROM task_attachments WHERE id = ?1",
                [attachment],
                |r| r.get(0),
            )
            .optional()?)
    }

    // ---- writes ----

    async fn insert_board(&self, name: &str, description: &str) -> TxResult<bool> {
        let exists: bool = self.row(
            "SELECT EXISTS (SELECT 1 FROM board WHERE id = 1)",
            [],
            |r| r.get(0),
        )?;
        if exists {
            return Ok(false);
        }
        self.exec(
            "INSERT INTO board (id, slug, name, description, created_at) VALUES (1, ?1, ?2, ?3, ?4)",
            params![self.board.as_str(), name, description, self.now.0],
        )?;
        Ok(true)
    }

    async fn mark_board_archived(&self) -> TxResult<()> {
        self.exec(
            "UPDATE board SET archived_at = ?1 WHERE id = 1",
            [self.now.0],
        )?;
        Ok(())
    }

    async fn insert_task(&self, t: &Task) -> TxResult<()> {
        self.exec(
            "INSERT INTO tasks (id, title, body, assignee, status, priority, tenant, \
             idempotency_key, created_by, created_at, updated_at, workspace_kind, workspace_path, \
             max_runtime_seconds, max_retries, budget, traceparent) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            params![
                t.id.as_str(),
                t.title,
                t.body,
                t.assignee,
                t.status.as_str(),
                t.priority,
                t.tenant,
                t.idempotency_key,
                t.created_by,
                t.created_at.0,
                t.workspace.kind(),
                t.workspace.path(),
                t.max_runtime_seconds.map(sql_int),
                t.max_retries,
                super::budget_text(t.budget.as_ref()),
                t.traceparent,
            ],
        )?;
        Ok(())
    }

    async fn write_fields(&self, t: &Task) -> TxResult<()> {
        self.exec(
            "UPDATE tasks SET title = ?1, body = ?2, priority = ?3, tenant = ?4, \
             max_runtime_seconds = ?5, max_retries = ?6, workspace_kind = ?7, \
             workspace_path = ?8, result = ?9, updated_at = ?10 WHERE id = ?11",
            params![
                t.title,
                t.body,
                t.priority,
                t.tenant,
                t.max_runtime_seconds.map(sql_int),
                t.max_retries,
                t.workspace.kind(),
                t.workspace.path(),
                t.result,
                self.now.0,
                t.id.as_str()
            ],
        )?;
        Ok(())
    }

    async fn write_assignee(&self, id: &TaskId, assignee: Option<&str>) -> TxResult<()> {
        self.exec(
            "UPDATE tasks SET assignee = ?1, consecutive_failures = 0, protocol_violations = 0, \
             updated_at = ?2 WHERE id = ?3",
            params![assignee, self.now.0, id.as_str()],
        )?;
        Ok(())
    }

    async fn swap_status(&self, task: &Task, to: TaskStatus, sets: &[Set<'_>]) -> TxResult<bool> {
        let sql = backend::swap_statement(SWAP_STATUS, sets, 5, '?');
        let (to_s, id_s, from_s) = (to.as_str(), task.id.as_str(), task.status.as_str());
        let mut args: Vec<&dyn ToSql> = vec![&to_s, &self.now.0, &id_s, &from_s];
        args.extend(sets.iter().filter_map(Set::value).map(bound));
        Ok(self
            .c
            .prepare_cached(&sql)?
            .execute(params_from_iter(args))?
            == 1)
    }

    async fn insert_run(&self, run: &backend::RunRow<'_>) -> TxResult<RunId> {
        self.c
            .prepare_cached(
                "INSERT INTO task_runs (task_id, profile, source_status, claim_lock, \
                 claim_expires, max_runtime_seconds, last_heartbeat_at, started_at, ended_at, \
                 outcome, summary, metadata) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                run.task.as_str(),
                run.profile,
                run.source.as_str(),
                run.lock,
                run.expires,
                run.max_runtime_seconds,
                run.heartbeat,
                run.started,
                run.ended,
                run.outcome,
                run.summary,
                run.metadata
            ])?;
        Ok(RunId(self.c.last_insert_rowid()))
    }

    async fn end_run(&self, run: RunId, end: backend::RunEnd<'_>) -> TxResult<()> {
        self.exec(
            "UPDATE task_runs SET ended_at = ?1, outcome = ?2, summary = ?3, metadata = ?4, \
             error = ?5 WHERE id = ?6 AND ended_at IS NULL",
            params![
                self.now.0,
                end.outcome.as_str(),
                end.summary,
                end.metadata.map(Value::to_string),
                end.error,
                run.0
            ],
        )?;
        Ok(())
    }

    async fn extend_run(&self, run: RunId, expires: Timestamp) -> TxResult<()> {
        self.exec(
            "UPDATE task_runs SET claim_expires = ?1, last_heartbeat_at = ?2 WHERE id = ?3",
            params![expires.0, self.now.0, run.0],
        )?;
        Ok(())
    }

    async fn write_run_usage(&self, run: RunId, usage: &Value) -> TxResult<bool> {
        let changed = self.exec(
            "UPDATE task_runs SET usage = ?1 WHERE id = ?2",
            params![usage.to_string(), run.0],
        )?;
        Ok(changed > 0)
    }

    async fn insert_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        self.exec(
            "INSERT INTO task_links (parent_id, child_id, created_at) VALUES (?1, ?2, ?3)",
            params![parent.as_str(), child.as_str(), self.now.0],
        )?;
        Ok(())
    }

    async fn delete_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<bool> {
        let removed = self.exec(
            "DELETE FROM task_links WHERE parent_id = ?1 AND child_id = ?2",
            params![parent.as_str(), child.as_str()],
        )?;
        Ok(removed > 0)
    }

    async fn insert_comment(&self, id: &TaskId, author: &str, body: &str) -> TxResult<i64> {
        self.exec(
            "INSERT INTO task_comments (task_id, author, body, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![id.as_str(), author, body, self.now.0],
        )?;
        Ok(self.c.last_insert_rowid())
    }

    async fn insert_attachment(&self, file: &backend::FileRow<'_>) -> TxResult<i64> {
        self.exec(
            "INSERT INTO task_attachments (task_id, filename, content_type, size, content, \
             uploaded_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                file.task.as_str(),
                file.filename,
                file.content_type,
                sql_int(file.content.len() as u64),
                file.content,
                file.uploaded_by,
                self.now.0
            ],
        )?;
        Ok(self.c.last_insert_rowid())
    }

    async fn delete_attachment(&self, attachment: i64) -> TxResult<Option<Attachment>> {
        let found = self
            .row(
                &format!("SELECT {ATTACHMENT_COLS} FROM task_attachments WHERE id = ?1"),
                [attachment],
                |r| rows::attachment(r),
            )
            .optional()?;
        if found.is_some() {
            self.exec("DELETE FROM task_attachments WHERE id = ?1", [attachment])?;
        }
        Ok(found)
    }

    fn board(&self) -> &BoardSlug {
        self.board
    }

    fn now(&self) -> Timestamp {
        self.now
    }

    fn event(&self, e: backend::NewEvent<'_>) -> TxResult<()> {
        self.c
            .prepare_cached(
                "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                e.task.map(TaskId::as_str),
                e.run.map(|r| r.0),
                e.kind.as_str(),
                e.payload.to_string(),
                self.now.0
            ])?;
        Ok(())
    }
}
