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
use crate::store::sqlite_sql as sql;

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
    /// Runs a statement from the connection's cache: the board's statements (all of fixed text,
    /// see `sqlite_sql.rs`) are prepared once per connection, not once per call.
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
        self.row(sql::BOARD_ROW, [], |r| rows::board(r))
            .optional()?
            .ok_or_else(|| {
                StoreError::BoardNotFound {
                    slug: self.board.clone(),
                }
                .into()
            })
    }

    async fn board_archived(&self) -> TxResult<bool> {
        self.row(sql::BOARD_ARCHIVED, [], |r| r.get(0))
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
            .row(sql::TASK_BY_ID, [id.as_str()], |r| rows::task(r))
            .optional()?)
    }

    async fn task_exists(&self, id: &TaskId) -> TxResult<bool> {
        Ok(self.row(sql::TASK_EXISTS, [id.as_str()], |r| r.get(0))?)
    }

    async fn task_by_key(&self, key: &str) -> TxResult<Option<Task>> {
        Ok(self
            .row(sql::TASK_BY_KEY, [key], |r| rows::task(r))
            .optional()?)
    }

    async fn select_tasks(&self, f: &TaskFilter) -> TxResult<Vec<Task>> {
        let statuses: Option<String> = match sql::StatusWhere::of(f) {
            sql::StatusWhere::Live | sql::StatusWhere::All => None,
            sql::StatusWhere::One => f.statuses.first().map(|s| s.as_str().to_string()),
            sql::StatusWhere::Many => Some(json_list(f.statuses.iter().map(|s| s.as_str()))),
        };
        let limit = f.limit.map_or(-1, |n| sql_int(n as u64));
        self.all(
            sql::list_tasks(f),
            params![statuses, f.assignee, f.tenant, limit],
            |r| rows::task(r),
        )
    }

    async fn pick(&self, pick: Pick<'_>) -> TxResult<Vec<TaskId>> {
        match pick {
            Pick::Lapsed => self.ids(sql::PICK_LAPSED, [self.now.0]),
            Pick::Due => self.ids(sql::PICK_DUE, [self.now.0]),
            Pick::Unblocked => self.ids(sql::PICK_UNBLOCKED, []),
            Pick::NextReady(None) => self.ids(sql::NEXT_READY, []),
            Pick::NextReady(Some([one])) => self.ids(sql::NEXT_READY_OF, [one]),
            Pick::NextReady(Some(many)) => self.ids(
                sql::NEXT_READY_AMONG,
                [json_list(many.iter().map(String::as_str))],
            ),
        }
    }

    async fn linked(&self, id: &TaskId, side: Side) -> TxResult<Vec<TaskId>> {
        let sql = match side {
            Side::Parents => sql::PARENTS,
            Side::Children => sql::CHILDREN,
        };
        self.ids(sql, [id.as_str()])
    }

    async fn open_parents(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(sql::OPEN_PARENTS, [id.as_str()])
    }

    async fn has_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<bool> {
        Ok(self.row(
            sql::HAS_LINK,
            params![parent.as_str(), child.as_str()],
            |r| r.get(0),
        )?)
    }

    async fn all_links(&self) -> TxResult<Vec<Link>> {
        self.all(sql::ALL_LINKS, [], |r| rows::link(r))
    }

    async fn counts(&self) -> TxResult<backend::Counts> {
        let by_status = self.all(sql::COUNT_BY_STATUS, [], |r| Ok((r.status(0)?, r.int(1)?)))?;
        let (open_runs, last_event) =
            self.row(sql::COUNT_OPEN, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(backend::Counts {
            by_status,
            open_runs,
            last_event,
        })
    }

    async fn run_source(&self, run: RunId) -> TxResult<Option<String>> {
        Ok(self
            .row(sql::RUN_SOURCE, [run.0], |r| r.get(0))
            .optional()?)
    }

    async fn try_run(&self, run: RunId) -> TxResult<Option<Run>> {
        Ok(self
            .row(sql::RUN_BY_ID, [run.0], |r| rows::run(r))
            .optional()?)
    }

    async fn task_runs(&self, id: &TaskId) -> TxResult<Vec<Run>> {
        self.all(sql::TASK_RUNS, [id.as_str()], |r| rows::run(r))
    }

    async fn task_comments(&self, id: &TaskId) -> TxResult<Vec<Comment>> {
        self.all(sql::TASK_COMMENTS, [id.as_str()], |r| rows::comment(r))
    }

    async fn events_after(&self, cursor: EventId, limit: usize) -> TxResult<Vec<Event>> {
        self.all(
            sql::EVENTS_AFTER,
            params![cursor.0, sql_int(limit as u64)],
            |r| rows::event(r),
        )
    }

    async fn events_of(&self, id: &TaskId) -> TxResult<Vec<Event>> {
        self.all(sql::EVENTS_OF, [id.as_str()], |r| rows::event(r))
    }

    async fn task_attachments(&self, id: &TaskId) -> TxResult<Vec<Attachment>> {
        self.all(sql::TASK_ATTACHMENTS, [id.as_str()], |r| {
            rows::attachment(r)
        })
    }

    async fn attachment_bytes(&self, attachment: i64) -> TxResult<Option<Vec<u8>>> {
        Ok(self
            .row(sql::ATTACHMENT_BYTES, [attachment], |r| r.get(0))
            .optional()?)
    }

    // ---- writes ----

    async fn insert_board(&self, name: &str, description: &str) -> TxResult<bool> {
        let exists: bool = self.row(sql::BOARD_EXISTS, [], |r| r.get(0))?;
        if exists {
            return Ok(false);
        }
        self.exec(
            sql::INSERT_BOARD,
            params![self.board.as_str(), name, description, self.now.0],
        )?;
        Ok(true)
    }

    async fn mark_board_archived(&self) -> TxResult<()> {
        self.exec(sql::ARCHIVE_BOARD, [self.now.0])?;
        Ok(())
    }

    async fn insert_task(&self, t: &Task) -> TxResult<()> {
        self.exec(
            sql::INSERT_TASK,
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
            sql::WRITE_FIELDS,
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
            sql::WRITE_ASSIGNEE,
            params![assignee, self.now.0, id.as_str()],
        )?;
        Ok(())
    }

    async fn swap_status(&self, task: &Task, to: TaskStatus, sets: &[Set<'_>]) -> TxResult<bool> {
        let (to_s, id_s, from_s) = (to.as_str(), task.id.as_str(), task.status.as_str());
        let head: [&dyn ToSql; 4] = [&to_s, &self.now.0, &id_s, &from_s];
        let args = head
            .into_iter()
            .chain(sets.iter().filter_map(Set::value).map(bound));
        Ok(self.exec(&sql::swap(sets), params_from_iter(args))? == 1)
    }

    async fn insert_run(&self, run: &backend::RunRow<'_>) -> TxResult<RunId> {
        self.exec(
            sql::INSERT_RUN,
            params![
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
            ],
        )?;
        Ok(RunId(self.c.last_insert_rowid()))
    }

    async fn end_run(&self, run: RunId, end: backend::RunEnd<'_>) -> TxResult<()> {
        self.exec(
            sql::END_RUN,
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
        self.exec(sql::EXTEND_RUN, params![expires.0, self.now.0, run.0])?;
        Ok(())
    }

    async fn write_run_usage(&self, run: RunId, usage: &Value) -> TxResult<bool> {
        let changed = self.exec(sql::WRITE_USAGE, params![usage.to_string(), run.0])?;
        Ok(changed > 0)
    }

    async fn insert_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        self.exec(
            sql::INSERT_LINK,
            params![parent.as_str(), child.as_str(), self.now.0],
        )?;
        Ok(())
    }

    async fn delete_link(&self, parent: &TaskId, child: &TaskId) -> TxResult<bool> {
        let removed = self.exec(sql::DELETE_LINK, params![parent.as_str(), child.as_str()])?;
        Ok(removed > 0)
    }

    async fn insert_comment(&self, id: &TaskId, author: &str, body: &str) -> TxResult<i64> {
        self.exec(
            sql::INSERT_COMMENT,
            params![id.as_str(), author, body, self.now.0],
        )?;
        Ok(self.c.last_insert_rowid())
    }

    async fn insert_attachment(&self, file: &backend::FileRow<'_>) -> TxResult<i64> {
        self.exec(
            sql::INSERT_ATTACHMENT,
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
            .row(sql::ATTACHMENT_BY_ID, [attachment], |r| rows::attachment(r))
            .optional()?;
        if found.is_some() {
            self.exec(sql::DELETE_ATTACHMENT, [attachment])?;
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
        self.exec(
            sql::INSERT_EVENT,
            params![
                e.task.map(TaskId::as_str),
                e.run.map(|r| r.0),
                e.kind.as_str(),
                e.payload,
                self.now.0
            ],
        )?;
        Ok(())
    }
}

/// A JSON array of names, for a statement that reads a list with `json_each`.
fn json_list<'n>(names: impl Iterator<Item = &'n str>) -> String {
    let names: Vec<&str> = names.collect();
    // A list of strings always serializes.
    serde_json::to_string(&names).unwrap_or_else(|_| "[]".to_string())
}
