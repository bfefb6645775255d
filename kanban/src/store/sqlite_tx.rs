//! Every SQLite store operation as synchronous code over one open transaction ([`Tx`]).
//!
//! `sqlite.rs` opens the transaction (`BEGIN IMMEDIATE` for writes), hands it here, and commits
//! only if the operation returned `Ok`; so a state change and its events land together or not at
//! all. Each status change is also written as a compare-and-swap on the status it was read in.

use std::collections::HashSet;

use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde_json::{Value, json};

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
pub(crate) enum TxError {
    /// Already a store error.
    Store(StoreError),
    /// From SQLite.
    Db(rusqlite::Error),
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        TxError::Db(e)
    }
}

impl From<ModelError> for TxError {
    fn from(e: ModelError) -> Self {
        TxError::Store(StoreError::Invalid(e))
    }
}

impl TxError {
    /// The store error, with database failures attributed to `board`.
    pub(crate) fn into_store(self, board: &BoardSlug) -> StoreError {
        match self {
            TxError::Store(e) => e,
            TxError::Db(e) => db_error(board, e),
        }
    }
}

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

/// What every operation in this file returns.
pub(crate) type TxResult<T> = Result<T, TxError>;

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

/// A value read back from the database that does not parse.
fn bad_value(idx: usize, e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e))
}

fn corrupt(idx: usize, what: String) -> rusqlite::Error {
    bad_value(
        idx,
        ModelError::BadField {
            field: "stored value",
            why: what,
        },
    )
}

fn ts(r: &Row<'_>, idx: usize) -> rusqlite::Result<Timestamp> {
    Ok(Timestamp(r.get(idx)?))
}

fn opt_ts(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Timestamp>> {
    Ok(r.get::<_, Option<i64>>(idx)?.map(Timestamp))
}

fn count(r: &Row<'_>, idx: usize) -> rusqlite::Result<u32> {
    let v: i64 = r.get(idx)?;
    u32::try_from(v).map_err(|_| corrupt(idx, format!("counter {v} out of range")))
}

fn opt_u64(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    r.get::<_, Option<i64>>(idx)?
        .map(|v| u64::try_from(v).map_err(|_| corrupt(idx, format!("negative value {v}"))))
        .transpose()
}

fn opt_u32(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u32>> {
    r.get::<_, Option<i64>>(idx)?
        .map(|v| u32::try_from(v).map_err(|_| corrupt(idx, format!("value {v} out of range"))))
        .transpose()
}

fn task_id(r: &Row<'_>, idx: usize) -> rusqlite::Result<TaskId> {
    TaskId::parse(&r.get::<_, String>(idx)?).map_err(|e| bad_value(idx, e))
}

fn status(r: &Row<'_>, idx: usize) -> rusqlite::Result<TaskStatus> {
    r.get::<_, String>(idx)?
        .parse()
        .map_err(|e| bad_value(idx, e))
}

fn task_from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    let claim_lock: Option<String> = r.get(24)?;
    let claim_expires = opt_ts(r, 25)?;
    let current_run: Option<i64> = r.get(26)?;
    let lease = match (claim_lock, claim_expires, current_run) {
        (Some(lock), Some(expires_at), Some(run)) => Some(Lease {
            worker: WorkerId::parse(&lock).map_err(|e| bad_value(24, e))?,
            expires_at,
            run_id: RunId(run),
        }),
        _ => None,
    };
    Ok(Task {
        id: task_id(r, 0)?,
        title: r.get(1)?,
        body: r.get(2)?,
        assignee: r.get(3)?,
        status: status(r, 4)?,
        priority: r.get(5)?,
        tenant: r.get(6)?,
        idempotency_key: r.get(7)?,
        created_by: r.get(8)?,
        created_at: ts(r, 9)?,
        updated_at: ts(r, 10)?,
        started_at: opt_ts(r, 11)?,
        completed_at: opt_ts(r, 12)?,
        workspace: Workspace::from_parts(&r.get::<_, String>(13)?, r.get(14)?)
            .map_err(|e| bad_value(13, e))?,
        max_runtime_seconds: opt_u64(r, 15)?,
        max_retries: opt_u32(r, 16)?,
        result: r.get(17)?,
        consecutive_failures: count(r, 18)?,
        protocol_violations: count(r, 19)?,
        last_failure_error: r.get(20)?,
        block_kind: r.get(21)?,
        block_reason: r.get(22)?,
        block_recurrences: count(r, 23)?,
        lease,
        last_heartbeat_at: opt_ts(r, 27)?,
        scheduled_until: opt_ts(r, 28)?,
        budget: r
            .get::<_, Option<String>>(29)?
            .map(|b| serde_json::from_str(&b).map_err(|e| bad_value(29, e)))
            .transpose()?,
        traceparent: r.get(30)?,
    })
}

fn run_from_row(r: &Row<'_>) -> rusqlite::Result<Run> {
    let worker = r
        .get::<_, Option<String>>(4)?
        .map(|w| WorkerId::parse(&w).map_err(|e| bad_value(4, e)))
        .transpose()?;
    let outcome = r
        .get::<_, Option<String>>(10)?
        .map(|o| RunOutcome::parse(&o).ok_or_else(|| corrupt(10, format!("run outcome {o:?}"))))
        .transpose()?;
    let metadata = r
        .get::<_, Option<String>>(12)?
        .map(|m| serde_json::from_str(&m).map_err(|e| bad_value(12, e)))
        .transpose()?;
    let usage = r
        .get::<_, Option<String>>(14)?
        .map(|u| serde_json::from_str(&u).map_err(|e| bad_value(14, e)))
        .transpose()?;
    Ok(Run {
        id: RunId(r.get(0)?),
        task_id: task_id(r, 1)?,
        profile: r.get(2)?,
        source_status: status(r, 3)?,
        worker,
        lease_expires_at: opt_ts(r, 5)?,
        max_runtime_seconds: opt_u64(r, 6)?,
        last_heartbeat_at: opt_ts(r, 7)?,
        started_at: ts(r, 8)?,
        ended_at: opt_ts(r, 9)?,
        outcome,
        summary: r.get(11)?,
        metadata,
        error: r.get(13)?,
        usage,
    })
}

fn event_from_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    let kind: String = r.get(3)?;
    let payload: String = r.get(4)?;
    Ok(Event {
        id: EventId(r.get(0)?),
        task_id: r
            .get::<_, Option<String>>(1)?
            .map(|t| TaskId::parse(&t).map_err(|e| bad_value(1, e)))
            .transpose()?,
        run_id: r.get::<_, Option<i64>>(2)?.map(RunId),
        kind: EventKind::parse(&kind).ok_or_else(|| corrupt(3, format!("event kind {kind:?}")))?,
        payload: serde_json::from_str(&payload).map_err(|e| bad_value(4, e))?,
        created_at: ts(r, 5)?,
    })
}

fn attachment_from_row(r: &Row<'_>) -> rusqlite::Result<Attachment> {
    let size: i64 = r.get(4)?;
    Ok(Attachment {
        id: r.get(0)?,
        task_id: task_id(r, 1)?,
        filename: r.get(2)?,
        content_type: r.get(3)?,
        size: u64::try_from(size).map_err(|_| corrupt(4, format!("size {size}")))?,
        uploaded_by: r.get(5)?,
        created_at: ts(r, 6)?,
    })
}

fn board_from_row(r: &Row<'_>) -> rusqlite::Result<Board> {
    let slug: String = r.get(0)?;
    Ok(Board {
        slug: BoardSlug::parse(&slug).map_err(|e| bad_value(0, e))?,
        name: r.get(1)?,
        description: r.get(2)?,
        created_at: ts(r, 3)?,
        archived_at: opt_ts(r, 4)?,
    })
}

/// Clamps an integer into SQLite's signed range.
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
    // ---- boards ----

    /// The board row; a file without one is a board whose creation never finished.
    pub(crate) fn board_row(&self) -> TxResult<Board> {
        self.c
            .query_row(
                "SELECT slug, name, description, created_at, archived_at FROM board WHERE id = 1",
                [],
                board_from_row,
            )
            .optional()?
            .ok_or_else(|| {
                StoreError::BoardNotFound {
                    slug: self.board.clone(),
                }
                .into()
            })
    }

    /// Fails unless the board is live.
    fn ensure_live(&self) -> TxResult<()> {
        if self.board_row()?.archived_at.is_some() {
            return Err(StoreError::BoardArchived {
                slug: self.board.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// Writes the board row; `BoardExists` when one is already there.
    pub(crate) fn create_board(&self, name: &str, description: &str) -> TxResult<Board> {
        let exists: bool = self.c.query_row(
            "SELECT EXISTS (SELECT 1 FROM board WHERE id = 1)",
            [],
            |r| r.get(0),
        )?;
        if exists {
            return Err(StoreError::BoardExists {
                slug: self.board.clone(),
            }
            .into());
        }
        self.c.execute(
            "INSERT INTO board (id, slug, name, description, created_at) VALUES (1, ?1, ?2, ?3, ?4)",
            params![self.board.as_str(), name, description, self.now.0],
        )?;
        self.event(
            None,
            None,
            EventKind::BoardCreated,
            json!({"slug": self.board.as_str()}),
        )?;
        self.board_row()
    }

    /// Marks the board archived (idempotent).
    pub(crate) fn archive_board(&self) -> TxResult<Board> {
        let board = self.board_row()?;
        if board.archived_at.is_none() {
            self.c.execute(
                "UPDATE board SET archived_at = ?1 WHERE id = 1",
                [self.now.0],
            )?;
            self.event(
                None,
                None,
                EventKind::BoardArchived,
                json!({"slug": self.board.as_str()}),
            )?;
        }
        self.board_row()
    }

    // ---- building blocks ----

    /// Appends an event and returns its id.
    fn event(
        &self,
        task: Option<&TaskId>,
        run: Option<RunId>,
        kind: EventKind,
        payload: Value,
    ) -> TxResult<EventId> {
        self.c.execute(
            "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                task.map(TaskId::as_str),
                run.map(|r| r.0),
                kind.as_str(),
                payload.to_string(),
                self.now.0
            ],
        )?;
        Ok(EventId(self.c.last_insert_rowid()))
    }

    fn try_task(&self, id: &TaskId) -> TxResult<Option<Task>> {
        Ok(self
            .c
            .query_row(
                &format!("SELECT {TASK_COLS} FROM tasks WHERE id = ?1"),
                [id.as_str()],
                task_from_row,
            )
            .optional()?)
    }

    /// A task of this board; `TaskNotFound` otherwise.
    pub(crate) fn task(&self, id: &TaskId) -> TxResult<Task> {
        self.try_task(id)?.ok_or_else(|| {
            StoreError::TaskNotFound {
                board: self.board.clone(),
                id: id.clone(),
            }
            .into()
        })
    }

    fn ids(&self, sql: &str, arg: &str) -> TxResult<Vec<TaskId>> {
        let mut stmt = self.c.prepare_cached(sql)?;
        let rows = stmt.query_map([arg], |r| task_id(r, 0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn parents(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT parent_id FROM task_links WHERE child_id = ?1 ORDER BY created_at, parent_id",
            id.as_str(),
        )
    }

    fn children(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT child_id FROM task_links WHERE parent_id = ?1 ORDER BY created_at, child_id",
            id.as_str(),
        )
    }

    /// Parents of `id` that are neither done nor archived.
    fn open_parents(&self, id: &TaskId) -> TxResult<Vec<TaskId>> {
        self.ids(
            "SELECT l.parent_id FROM task_links l JOIN tasks p ON p.id = l.parent_id \
             WHERE l.child_id = ?1 AND p.status NOT IN ('done', 'archived') ORDER BY l.parent_id",
            id.as_str(),
        )
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
    /// still in the status it was read in. `sets` are extra `col = ?` clauses numbered from ?5.
    fn cas(
        &self,
        task: &Task,
        to: TaskStatus,
        sets: &str,
        extra: &[&dyn rusqlite::ToSql],
    ) -> TxResult<()> {
        let sql = format!(
            "UPDATE tasks SET status = ?1, updated_at = ?2{}{sets} WHERE id = ?3 AND status = ?4",
            if sets.is_empty() { "" } else { ", " }
        );
        let to_s = to.as_str();
        let id_s = task.id.as_str();
        let from_s = task.status.as_str();
        let mut args: Vec<&dyn rusqlite::ToSql> = vec![&to_s, &self.now.0, &id_s, &from_s];
        args.extend_from_slice(extra);
        let changed = self.c.execute(&sql, params_from_iter(args))?;
        if changed != 1 {
            return Err(StoreError::Conflict {
                task: task.id.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// Ends the task's open run, if any, with `outcome`.
    fn close_run(
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
        self.c.execute(
            "UPDATE task_runs SET ended_at = ?1, outcome = ?2, summary = ?3, metadata = ?4, \
             error = ?5 WHERE id = ?6 AND ended_at IS NULL",
            params![
                self.now.0,
                outcome.as_str(),
                summary,
                metadata.map(Value::to_string),
                error,
                lease.run_id.0
            ],
        )?;
        Ok(Some(lease.run_id))
    }

    /// The status the open run was claimed from (`ready` when there is none).
    fn source_status(&self, task: &Task) -> TxResult<TaskStatus> {
        let Some(lease) = &task.lease else {
            return Ok(TaskStatus::Ready);
        };
        let src: Option<String> = self
            .c
            .query_row(
                "SELECT source_status FROM task_runs WHERE id = ?1",
                [lease.run_id.0],
                |r| r.get(0),
            )
            .optional()?;
        match src.as_deref() {
            Some("review") => Ok(TaskStatus::Review),
            _ => Ok(TaskStatus::Ready),
        }
    }

    /// Makes every `todo` child of `parent` whose parents are now all finished `ready`.
    fn promote_children(&self, parent: &TaskId) -> TxResult<Vec<TaskId>> {
        let mut promoted = Vec::new();
        for child in self.children(parent)? {
            let task = self.task(&child)?;
            if task.status == TaskStatus::Todo && self.open_parents(&child)?.is_empty() {
                self.cas(&task, TaskStatus::Ready, "", &[])?;
                self.event(
                    Some(&child),
                    None,
                    EventKind::Promoted,
                    json!({"from": "todo", "to": "ready", "by": parent.as_str()}),
                )?;
                promoted.push(child);
            }
        }
        Ok(promoted)
    }

    // ---- tasks ----

    pub(crate) fn create_task(&self, new: &NewTask) -> TxResult<Created> {
        self.ensure_live()?;
        non_empty("title", &new.title, "a one-line title")?;
        if let Some(a) = &new.assignee {
            non_empty("assignee", a, "a profile name, or no assignee at all")?;
        }
        if let Some(key) = &new.idempotency_key {
            non_empty("idempotency_key", key, "a non-empty key, or none")?;
            let existing = self
                .c
                .query_row(
                    &format!(
                        "SELECT {TASK_COLS} FROM tasks WHERE idempotency_key = ?1 \
                         AND status <> 'archived' ORDER BY created_at DESC LIMIT 1"
                    ),
                    [key],
                    task_from_row,
                )
                .optional()?;
            if let Some(task) = existing {
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
            let parent = self.task(p)?;
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
        let id = self.fresh_id()?;
        self.c.execute(
            "INSERT INTO tasks (id, title, body, assignee, status, priority, tenant, \
             idempotency_key, created_by, created_at, updated_at, workspace_kind, workspace_path, \
             max_runtime_seconds, max_retries, budget, traceparent) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            params![
                id.as_str(),
                new.title.trim(),
                new.body,
                new.assignee.as_deref().map(str::trim),
                status.as_str(),
                new.priority,
                tenant,
                new.idempotency_key,
                new.created_by,
                self.now.0,
                new.workspace.kind(),
                new.workspace.path(),
                new.max_runtime_seconds.map(sql_int),
                new.max_retries,
                super::budget_text(new.budget.as_ref()),
                super::kept_traceparent(new.traceparent.as_deref()),
            ],
        )?;
        for p in &parents {
            self.c.execute(
                "INSERT INTO task_links (parent_id, child_id, created_at) VALUES (?1, ?2, ?3)",
                params![p.as_str(), id.as_str(), self.now.0],
            )?;
        }
        let parent_ids: Vec<&str> = parents.iter().map(TaskId::as_str).collect();
        self.event(
            Some(&id),
            None,
            EventKind::Created,
            json!({"status": status.as_str(), "parents": parent_ids, "assignee": new.assignee}),
        )?;
        Ok(Created {
            task: self.task(&id)?,
            created: true,
        })
    }

    /// A random id not yet used on this board.
    fn fresh_id(&self) -> TxResult<TaskId> {
        for _ in 0..16 {
            let id = TaskId::generate();
            if self.try_task(&id)?.is_none() {
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

    pub(crate) fn list_tasks(&self, f: &TaskFilter) -> TxResult<Vec<Task>> {
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
        sql.push_str(match f.sort {
            TaskSort::Created => " ORDER BY created_at, id",
            TaskSort::CreatedDesc => " ORDER BY created_at DESC, id DESC",
            TaskSort::Priority => " ORDER BY priority DESC, created_at, id",
            TaskSort::Updated => " ORDER BY updated_at DESC, id",
        });
        if let Some(limit) = f.limit {
            sql.push_str(&format!(" LIMIT {}", sql_int(limit as u64)));
        }
        let mut stmt = self.c.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(args), task_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn patch_task(&self, id: &TaskId, p: &TaskPatch) -> TxResult<Task> {
        let task = self.task(id)?;
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
        self.c.execute(
            "UPDATE tasks SET title = ?1, body = ?2, priority = ?3, tenant = ?4, \
             max_runtime_seconds = ?5, max_retries = ?6, workspace_kind = ?7, \
             workspace_path = ?8, result = ?9, updated_at = ?10 WHERE id = ?11",
            params![
                p.title.as_deref().map(str::trim).unwrap_or(&task.title),
                p.body.as_deref().unwrap_or(&task.body),
                p.priority.unwrap_or(task.priority),
                p.tenant.clone().unwrap_or(task.tenant.clone()),
                p.max_runtime_seconds
                    .unwrap_or(task.max_runtime_seconds)
                    .map(sql_int),
                p.max_retries.unwrap_or(task.max_retries),
                ws.kind(),
                ws.path(),
                p.result.as_deref().or(task.result.as_deref()),
                self.now.0,
                id.as_str()
            ],
        )?;
        self.event(Some(id), None, EventKind::Edited, json!({"fields": fields}))?;
        if let Some(pr) = p.priority.filter(|pr| *pr != task.priority) {
            self.event(
                Some(id),
                None,
                EventKind::Reprioritized,
                json!({"from": task.priority, "to": pr}),
            )?;
        }
        self.task(id)
    }

    pub(crate) fn assign_task(&self, id: &TaskId, assignee: Option<&str>) -> TxResult<Task> {
        let task = self.task(id)?;
        let assignee = assignee.map(str::trim);
        if let Some(a) = assignee {
            non_empty("assignee", a, "a profile name, or none to unassign")?;
        }
        if task.assignee.as_deref() == assignee {
            return Ok(task);
        }
        // A different profile deserves its own attempts.
        self.c.execute(
            "UPDATE tasks SET assignee = ?1, consecutive_failures = 0, protocol_violations = 0, \
             updated_at = ?2 WHERE id = ?3",
            params![assignee, self.now.0, id.as_str()],
        )?;
        self.event(
            Some(id),
            None,
            EventKind::Assigned,
            json!({"from": task.assignee, "to": assignee}),
        )?;
        self.task(id)
    }

    pub(crate) fn stats(&self) -> TxResult<BoardStats> {
        let mut stmt = self
            .c
            .prepare("SELECT status, COUNT(*) FROM tasks GROUP BY status")?;
        let counted = stmt
            .query_map([], |r| Ok((status(r, 0)?, r.get::<_, i64>(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let by_status = TaskStatus::ALL
            .into_iter()
            .map(|s| {
                let n = counted.iter().find(|(c, _)| *c == s).map_or(0, |(_, n)| *n);
                (s, u64::try_from(n).unwrap_or(0))
            })
            .collect();
        let open_runs: i64 = self.c.query_row(
            "SELECT COUNT(*) FROM task_runs WHERE ended_at IS NULL",
            [],
            |r| r.get(0),
        )?;
        let last: Option<i64> = self
            .c
            .query_row("SELECT MAX(id) FROM task_events", [], |r| r.get(0))?;
        Ok(BoardStats {
            by_status,
            open_runs: u64::try_from(open_runs).unwrap_or(0),
            last_event_id: EventId(last.unwrap_or(0)),
        })
    }

    // ---- links ----

    pub(crate) fn link(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        if parent == child {
            return Err(StoreError::SelfLink {
                task: parent.clone(),
            }
            .into());
        }
        let parent_task = self.task(parent)?;
        let child_task = self.task(child)?;
        let exists: bool = self.c.query_row(
            "SELECT EXISTS (SELECT 1 FROM task_links WHERE parent_id = ?1 AND child_id = ?2)",
            params![parent.as_str(), child.as_str()],
            |r| r.get(0),
        )?;
        if exists {
            return Ok(());
        }
        if self.is_descendant(child, parent)? {
            return Err(StoreError::Cycle {
                parent: parent.clone(),
                child: child.clone(),
            }
            .into());
        }
        self.c.execute(
            "INSERT INTO task_links (parent_id, child_id, created_at) VALUES (?1, ?2, ?3)",
            params![parent.as_str(), child.as_str(), self.now.0],
        )?;
        // A ready child must wait again for an unfinished new parent.
        let demote = child_task.status == TaskStatus::Ready && rules::is_open(parent_task.status);
        if demote {
            self.cas(&child_task, TaskStatus::Todo, "", &[])?;
        }
        self.event(
            Some(child),
            None,
            EventKind::Linked,
            json!({"parent": parent.as_str(), "child": child.as_str(),
                   "child_status": if demote { "todo" } else { child_task.status.as_str() }}),
        )?;
        Ok(())
    }

    /// Depth-first search down the child links from `from`, looking for `target`.
    fn is_descendant(&self, from: &TaskId, target: &TaskId) -> TxResult<bool> {
        let mut stack = vec![from.clone()];
        let mut seen: HashSet<TaskId> = HashSet::new();
        while let Some(node) = stack.pop() {
            if &node == target {
                return Ok(true);
            }
            if seen.insert(node.clone()) {
                stack.extend(self.children(&node)?);
            }
        }
        Ok(false)
    }

    pub(crate) fn unlink(&self, parent: &TaskId, child: &TaskId) -> TxResult<()> {
        let removed = self.c.execute(
            "DELETE FROM task_links WHERE parent_id = ?1 AND child_id = ?2",
            params![parent.as_str(), child.as_str()],
        )?;
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
        )?;
        let task = self.task(child)?;
        if task.status == TaskStatus::Todo && self.open_parents(child)?.is_empty() {
            self.cas(&task, TaskStatus::Ready, "", &[])?;
            self.event(
                Some(child),
                None,
                EventKind::Promoted,
                json!({"from": "todo", "to": "ready"}),
            )?;
        }
        Ok(())
    }

    pub(crate) fn board_links(&self) -> TxResult<Vec<Link>> {
        let mut stmt = self.c.prepare_cached(
            "SELECT parent_id, child_id FROM task_links ORDER BY parent_id, child_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Link {
                parent: task_id(r, 0)?,
                child: task_id(r, 1)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn links(&self, id: &TaskId) -> TxResult<TaskLinks> {
        self.task(id)?;
        Ok(TaskLinks {
            parents: self.parents(id)?,
            children: self.children(id)?,
        })
    }

    // ---- comments, events, runs, attachments ----

    pub(crate) fn add_comment(&self, id: &TaskId, author: &str, body: &str) -> TxResult<Comment> {
        self.task(id)?;
        non_empty("author", author, "who is writing (a profile or user name)")?;
        non_empty("body", body, "the comment's text")?;
        self.c.execute(
            "INSERT INTO task_comments (task_id, author, body, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![id.as_str(), author, body, self.now.0],
        )?;
        let cid = self.c.last_insert_rowid();
        self.event(
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
            created_at: self.now,
        })
    }

    pub(crate) fn comments(&self, id: &TaskId) -> TxResult<Vec<Comment>> {
        self.task(id)?;
        let mut stmt = self.c.prepare_cached(
            "SELECT id, task_id, author, body, created_at FROM task_comments \
             WHERE task_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([id.as_str()], |r| {
            Ok(Comment {
                id: r.get(0)?,
                task_id: task_id(r, 1)?,
                author: r.get(2)?,
                body: r.get(3)?,
                created_at: ts(r, 4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn events_since(&self, cursor: EventId, limit: usize) -> TxResult<Vec<Event>> {
        let mut stmt = self.c.prepare_cached(&format!(
            "SELECT {EVENT_COLS} FROM task_events WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![cursor.0, sql_int(limit as u64)], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn task_events(&self, id: &TaskId) -> TxResult<Vec<Event>> {
        self.task(id)?;
        let mut stmt = self.c.prepare_cached(&format!(
            "SELECT {EVENT_COLS} FROM task_events WHERE task_id = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([id.as_str()], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn runs(&self, id: &TaskId) -> TxResult<Vec<Run>> {
        self.task(id)?;
        let mut stmt = self.c.prepare_cached(&format!(
            "SELECT {RUN_COLS} FROM task_runs WHERE task_id = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([id.as_str()], run_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn run(&self, id: RunId) -> TxResult<Run> {
        self.c
            .query_row(
                &format!("SELECT {RUN_COLS} FROM task_runs WHERE id = ?1"),
                [id.0],
                run_from_row,
            )
            .optional()?
            .ok_or_else(|| {
                StoreError::RunNotFound {
                    board: self.board.clone(),
                    id: id.0,
                }
                .into()
            })
    }

    pub(crate) fn record_run_usage(&self, id: RunId, usage: &Value) -> TxResult<()> {
        let changed = self.c.execute(
            "UPDATE task_runs SET usage = ?1 WHERE id = ?2",
            params![usage.to_string(), id.0],
        )?;
        if changed == 0 {
            return Err(StoreError::RunNotFound {
                board: self.board.clone(),
                id: id.0,
            }
            .into());
        }
        Ok(())
    }

    pub(crate) fn attach(&self, id: &TaskId, file: &NewAttachment) -> TxResult<Attachment> {
        self.task(id)?;
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
        self.c.execute(
            "INSERT INTO task_attachments (task_id, filename, content_type, size, content, \
             uploaded_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                id.as_str(),
                name,
                content_type,
                sql_int(size),
                file.content,
                file.uploaded_by,
                self.now.0
            ],
        )?;
        let aid = self.c.last_insert_rowid();
        self.event(
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
            created_at: self.now,
        })
    }

    pub(crate) fn attachments(&self, id: &TaskId) -> TxResult<Vec<Attachment>> {
        self.task(id)?;
        let mut stmt = self.c.prepare_cached(&format!(
            "SELECT {ATTACHMENT_COLS} FROM task_attachments WHERE task_id = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([id.as_str()], attachment_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn attachment_content(&self, attachment: i64) -> TxResult<Vec<u8>> {
        self.c
            .query_row(
                "SELECT content FROM task_attachments WHERE id = ?1",
                [attachment],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| {
                StoreError::AttachmentNotFound {
                    board: self.board.clone(),
                    id: attachment,
                }
                .into()
            })
    }

    pub(crate) fn remove_attachment(&self, attachment: i64) -> TxResult<()> {
        let found = self
            .c
            .query_row(
                &format!("SELECT {ATTACHMENT_COLS} FROM task_attachments WHERE id = ?1"),
                [attachment],
                attachment_from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::AttachmentNotFound {
                board: self.board.clone(),
                id: attachment,
            })?;
        self.c
            .execute("DELETE FROM task_attachments WHERE id = ?1", [attachment])?;
        self.event(
            Some(&found.task_id),
            None,
            EventKind::AttachmentRemoved,
            json!({"attachment_id": attachment, "filename": found.filename}),
        )?;
        Ok(())
    }

    // ---- lifecycle ----

    pub(crate) fn promote(&self) -> TxResult<Vec<TaskId>> {
        let mut promoted = Vec::new();
        let due = {
            let mut stmt = self.c.prepare_cached(
                "SELECT id FROM tasks WHERE status = 'scheduled' AND scheduled_until <= ?1 ORDER BY id",
            )?;
            stmt.query_map([self.now.0], |r| task_id(r, 0))?
                .collect::<rusqlite::Result<Vec<_>>>()?
        };
        for id in due {
            let task = self.task(&id)?;
            let to = rules::runnable_status(!self.open_parents(&id)?.is_empty(), TaskStatus::Ready);
            self.cas(&task, to, "scheduled_until = NULL", &[])?;
            self.event(
                Some(&id),
                None,
                EventKind::Promoted,
                json!({"from": "scheduled", "to": to.as_str()}),
            )?;
            if to == TaskStatus::Ready {
                promoted.push(id);
            }
        }
        let waiting = {
            let mut stmt = self.c.prepare_cached(
                "SELECT t.id FROM tasks t WHERE t.status = 'todo' AND NOT EXISTS ( \
                   SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id \
                   WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived')) \
                 ORDER BY t.priority DESC, t.created_at, t.id",
            )?;
            stmt.query_map([], |r| task_id(r, 0))?
                .collect::<rusqlite::Result<Vec<_>>>()?
        };
        for id in waiting {
            let task = self.task(&id)?;
            self.cas(&task, TaskStatus::Ready, "", &[])?;
            self.event(
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
    pub(crate) fn claim_next(&self, spec: &ClaimSpec) -> TxResult<Option<Claim>> {
        self.ensure_live()?;
        let mut sql = "SELECT id FROM tasks WHERE status = 'ready'".to_string();
        let mut args: Vec<String> = Vec::new();
        if let Some(list) = &spec.assignees {
            if list.is_empty() {
                return Ok(None);
            }
            sql.push_str(&format!(
                " AND assignee IN ({})",
                vec!["?"; list.len()].join(", ")
            ));
            args.extend(list.iter().cloned());
        }
        sql.push_str(" ORDER BY priority DESC, created_at, id LIMIT 1");
        loop {
            let next = self
                .c
                .prepare_cached(&sql)?
                .query_row(params_from_iter(args.iter()), |r| task_id(r, 0))
                .optional()?;
            let Some(id) = next else { return Ok(None) };
            let task = self.task(&id)?;
            // Each pass either claims or moves one task out of `ready`, so this ends.
            if let Some(claim) = self.try_claim(&task, spec)? {
                return Ok(Some(claim));
            }
        }
    }

    /// Claims one named task.
    pub(crate) fn claim_task(&self, id: &TaskId, spec: &ClaimSpec) -> TxResult<Claim> {
        self.ensure_live()?;
        let task = self.task(id)?;
        rules::CLAIM.check(&task)?;
        match self.try_claim(&task, spec)? {
            Some(claim) => Ok(claim),
            None => Err(StoreError::ParentsOpen {
                task: id.clone(),
                action: "claimed",
                open_parents: self.open_parents(id)?,
            }
            .into()),
        }
    }

    /// The claim itself: `None` (and the task back in `todo`) when a parent is still open.
    fn try_claim(&self, task: &Task, spec: &ClaimSpec) -> TxResult<Option<Claim>> {
        let open = self.open_parents(&task.id)?;
        if !open.is_empty() && task.status == TaskStatus::Ready {
            self.cas(task, TaskStatus::Todo, "", &[])?;
            let ids: Vec<&str> = open.iter().map(TaskId::as_str).collect();
            self.event(
                Some(&task.id),
                None,
                EventKind::ClaimRejected,
                json!({"open_parents": ids}),
            )?;
            return Ok(None);
        }
        let expires = self.now.plus(spec.ttl);
        let lock = spec.worker.to_string();
        self.c.execute(
            "INSERT INTO task_runs (task_id, profile, source_status, claim_lock, claim_expires, \
             max_runtime_seconds, last_heartbeat_at, started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            params![
                task.id.as_str(),
                task.assignee,
                task.status.as_str(),
                lock,
                expires.0,
                task.max_runtime_seconds.map(sql_int),
                self.now.0
            ],
        )?;
        let run_id = RunId(self.c.last_insert_rowid());
        self.cas(
            task,
            TaskStatus::Running,
            "claim_lock = ?5, claim_expires = ?6, current_run_id = ?7, last_heartbeat_at = ?8, \
             started_at = COALESCE(started_at, ?8)",
            &[&lock, &expires.0, &run_id.0, &self.now.0],
        )?;
        self.event(
            Some(&task.id),
            Some(run_id),
            EventKind::Claimed,
            json!({"lock": lock, "expires": expires.0, "run_id": run_id.0, "from": task.status.as_str()}),
        )?;
        Ok(Some(Claim {
            task: self.task(&task.id)?,
            lease: Lease {
                worker: spec.worker.clone(),
                expires_at: expires,
                run_id,
            },
            run: self.run(run_id)?,
        }))
    }

    pub(crate) fn heartbeat(
        &self,
        id: &TaskId,
        worker: &WorkerId,
        ttl: std::time::Duration,
    ) -> TxResult<Lease> {
        let task = self.task(id)?;
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
            "claim_expires = ?5, last_heartbeat_at = ?6",
            &[&expires.0, &self.now.0],
        )?;
        self.c.execute(
            "UPDATE task_runs SET claim_expires = ?1, last_heartbeat_at = ?2 WHERE id = ?3",
            params![expires.0, self.now.0, lease.run_id.0],
        )?;
        self.event(
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

    pub(crate) fn complete(&self, id: &TaskId, done: &Completion) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::COMPLETE.check(&task)?;
        self.check_holder(&task, done.worker.as_ref())?;
        let open = self.open_parents(id)?;
        if !open.is_empty() {
            return Err(StoreError::ParentsOpen {
                task: id.clone(),
                action: "completed",
                open_parents: open,
            }
            .into());
        }
        let summary = done.summary.as_deref();
        let run_id = match self.close_run(
            &task,
            RunOutcome::Completed,
            summary,
            done.metadata.as_ref(),
            None,
        )? {
            Some(run) => run,
            None => {
                // Never claimed: record a zero-length run so every completion has one.
                self.c.execute(
                    "INSERT INTO task_runs (task_id, profile, source_status, started_at, ended_at, \
                     outcome, summary, metadata) VALUES (?1, ?2, ?3, ?4, ?4, 'completed', ?5, ?6)",
                    params![
                        id.as_str(),
                        task.assignee,
                        task.status.as_str(),
                        self.now.0,
                        summary,
                        done.metadata.as_ref().map(Value::to_string)
                    ],
                )?;
                RunId(self.c.last_insert_rowid())
            }
        };
        self.cas(
            &task,
            TaskStatus::Done,
            "result = COALESCE(?5, result), completed_at = ?6, consecutive_failures = 0, \
             protocol_violations = 0, last_failure_error = NULL, block_kind = NULL, \
             block_reason = NULL, block_recurrences = 0, claim_lock = NULL, claim_expires = NULL, \
             current_run_id = NULL, scheduled_until = NULL",
            &[&done.result, &self.now.0],
        )?;
        let result_len = done.result.as_ref().map_or(0, |r| r.chars().count());
        self.event(
            Some(id),
            Some(run_id),
            EventKind::Completed,
            json!({"result_len": result_len, "summary": summary.map(rules::summary_line)}),
        )?;
        self.promote_children(id)?;
        self.task(id)
    }

    pub(crate) fn block(&self, id: &TaskId, req: &BlockRequest) -> TxResult<Transitioned> {
        let task = self.task(id)?;
        rules::BLOCK.check(&task)?;
        self.check_holder(&task, req.worker.as_ref())?;
        let d = rules::decide_block(&task, req)?;
        let run = self.close_run(&task, RunOutcome::Blocked, Some(&req.reason), None, None)?;
        self.cas(
            &task,
            d.target,
            "block_kind = ?5, block_reason = ?6, block_recurrences = ?7, claim_lock = NULL, \
             claim_expires = NULL, current_run_id = NULL",
            &[&d.kind, &req.reason, &d.recurrences],
        )?;
        let mut payload = json!({"reason": req.reason, "kind": d.kind, "recurrences": d.recurrences,
                                 "to": d.target.as_str()});
        if d.event == EventKind::BlockLoopDetected {
            payload["limit"] = json!(crate::domain::BLOCK_RECURRENCE_LIMIT);
        }
        self.event(Some(id), run, d.event, payload)?;
        Ok(Transitioned {
            task: self.task(id)?,
            ended_lease: task.lease,
        })
    }

    pub(crate) fn unblock(&self, id: &TaskId) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::UNBLOCK.check(&task)?;
        let to = rules::runnable_status(!self.open_parents(id)?.is_empty(), TaskStatus::Ready);
        // An explicit unblock is a fresh chance: failure counters start again. The block kind
        // stays, so the same block coming straight back is still caught as a loop.
        self.cas(
            &task,
            to,
            "scheduled_until = NULL, consecutive_failures = 0, protocol_violations = 0",
            &[],
        )?;
        self.event(
            Some(id),
            None,
            EventKind::Unblocked,
            json!({"from": task.status.as_str(), "to": to.as_str()}),
        )?;
        self.task(id)
    }

    pub(crate) fn archive(&self, id: &TaskId) -> TxResult<Transitioned> {
        let task = self.task(id)?;
        rules::ARCHIVE.check(&task)?;
        let run = self.close_run(
            &task,
            RunOutcome::Reclaimed,
            None,
            None,
            Some("task archived"),
        )?;
        self.cas(
            &task,
            TaskStatus::Archived,
            "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL, scheduled_until = NULL",
            &[],
        )?;
        self.event(
            Some(id),
            run,
            EventKind::Archived,
            json!({"from": task.status.as_str()}),
        )?;
        self.promote_children(id)?;
        Ok(Transitioned {
            task: self.task(id)?,
            ended_lease: task.lease,
        })
    }

    pub(crate) fn schedule(&self, id: &TaskId, until: Timestamp) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::SCHEDULE.check(&task)?;
        self.cas(
            &task,
            TaskStatus::Scheduled,
            "scheduled_until = ?5",
            &[&until.0],
        )?;
        self.event(
            Some(id),
            None,
            EventKind::Scheduled,
            json!({"from": task.status.as_str(), "until": until.0}),
        )?;
        self.task(id)
    }

    pub(crate) fn specify(&self, id: &TaskId) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::SPECIFY.check(&task)?;
        let to = rules::runnable_status(!self.open_parents(id)?.is_empty(), TaskStatus::Ready);
        self.cas(&task, to, "", &[])?;
        self.event(
            Some(id),
            None,
            EventKind::Specified,
            json!({"to": to.as_str()}),
        )?;
        self.task(id)
    }

    pub(crate) fn request_review(
        &self,
        id: &TaskId,
        summary: Option<&str>,
        worker: Option<&WorkerId>,
    ) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::REQUEST_REVIEW.check(&task)?;
        self.check_holder(&task, worker)?;
        let run = self.close_run(&task, RunOutcome::ReviewRequested, summary, None, None)?;
        self.cas(
            &task,
            TaskStatus::Review,
            "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL",
            &[],
        )?;
        self.event(
            Some(id),
            run,
            EventKind::ReviewRequested,
            json!({"summary": summary.map(rules::summary_line)}),
        )?;
        self.task(id)
    }

    pub(crate) fn request_changes(&self, id: &TaskId, reason: &str) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::REQUEST_CHANGES.check(&task)?;
        non_empty("reason", reason, "what should change")?;
        let to = rules::runnable_status(!self.open_parents(id)?.is_empty(), TaskStatus::Ready);
        self.cas(&task, to, "", &[])?;
        self.event(
            Some(id),
            None,
            EventKind::ChangesRequested,
            json!({"reason": reason, "to": to.as_str()}),
        )?;
        self.task(id)
    }

    pub(crate) fn reclaim_expired(&self) -> TxResult<Vec<Reclaimed>> {
        let lapsed = {
            let mut stmt = self.c.prepare_cached(
                "SELECT id FROM tasks WHERE status = 'running' AND claim_expires <= ?1 ORDER BY claim_expires, id",
            )?;
            stmt.query_map([self.now.0], |r| task_id(r, 0))?
                .collect::<rusqlite::Result<Vec<_>>>()?
        };
        let mut out = Vec::new();
        for id in lapsed {
            let task = self.task(&id)?;
            let Some(lease) = task.lease.clone() else {
                continue;
            };
            let source = self.source_status(&task)?;
            let to = rules::runnable_status(!self.open_parents(&id)?.is_empty(), source);
            self.close_run(
                &task,
                RunOutcome::Reclaimed,
                None,
                None,
                Some("lease lapsed"),
            )?;
            self.cas(
                &task,
                to,
                "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL",
                &[],
            )?;
            self.event(
                Some(&id),
                Some(lease.run_id),
                EventKind::Reclaimed,
                json!({"lock": lease.worker.to_string(), "claim_expires": lease.expires_at.0,
                       "last_heartbeat_at": task.last_heartbeat_at.map(|t| t.0), "to": to.as_str()}),
            )?;
            out.push(Reclaimed {
                task: self.task(&id)?,
                lapsed: lease,
            });
        }
        Ok(out)
    }

    pub(crate) fn record_failure(&self, id: &TaskId, f: &Failure) -> TxResult<FailureOutcome> {
        let task = self.task(id)?;
        rules::FAIL.check(&task)?;
        self.check_holder(&task, f.worker.as_ref())?;
        let d = rules::decide_failure(&task, f.kind, f.configured_limit);
        let source = self.source_status(&task)?;
        let run = self.close_run(&task, d.outcome, None, None, Some(&f.error))?;
        let counter = if d.event == EventKind::ProtocolViolation {
            "protocol_violations"
        } else {
            "consecutive_failures"
        };
        let to = if d.gave_up {
            TaskStatus::Blocked
        } else {
            rules::runnable_status(!self.open_parents(id)?.is_empty(), source)
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
                "{counter} = ?5, last_failure_error = ?6, block_reason = ?7, claim_lock = NULL, \
                 claim_expires = NULL, current_run_id = NULL"
            ),
            &[&d.failures, &f.error, &block_reason],
        )?;
        self.event(
            Some(id),
            run,
            d.event,
            json!({"error": f.error, "failures": d.failures, "limit": d.limit, "to": to.as_str()}),
        )?;
        if d.gave_up {
            self.event(
                Some(id),
                run,
                EventKind::GaveUp,
                json!({"failures": d.failures, "effective_limit": d.limit,
                       "limit_source": d.limit_source, "error": f.error}),
            )?;
        }
        Ok(FailureOutcome {
            task: self.task(id)?,
            failures: d.failures,
            limit: d.limit,
            limit_source: d.limit_source,
            gave_up: d.gave_up,
        })
    }

    pub(crate) fn requeue_rate_limited(
        &self,
        id: &TaskId,
        worker: Option<&WorkerId>,
        error: &str,
    ) -> TxResult<Task> {
        let task = self.task(id)?;
        rules::RATE_LIMIT.check(&task)?;
        self.check_holder(&task, worker)?;
        let source = self.source_status(&task)?;
        let to = rules::runnable_status(!self.open_parents(id)?.is_empty(), source);
        let run = self.close_run(&task, RunOutcome::RateLimited, None, None, Some(error))?;
        self.cas(
            &task,
            to,
            "claim_lock = NULL, claim_expires = NULL, current_run_id = NULL",
            &[],
        )?;
        self.event(
            Some(id),
            run,
            EventKind::RateLimited,
            json!({"error": error, "to": to.as_str()}),
        )?;
        self.task(id)
    }
}
