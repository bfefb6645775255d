//! Reading rows back into domain values, once for every backend: the column lists each query
//! selects, and decoders written against [`RowAccess`], which each backend implements for its
//! driver's rows. A value that does not parse means the board holds foreign or damaged data.

use crate::domain::{
    Attachment, Board, BoardSlug, Comment, Event, EventId, EventKind, Lease, Link, Run, RunId,
    RunOutcome, Task, TaskId, TaskStatus, Timestamp, WorkerId, Workspace,
};

// Each column list is a macro as well as a constant, so that a backend can build its fixed
// statements with `concat!` at compile time (SQLite's, in `sqlite_sql.rs`) and not with
// `format!` on every call.

/// The columns [`task`] reads, in order.
macro_rules! task_cols {
    () => {
        "id, title, body, assignee, status, priority, tenant, idempotency_key, created_by, \
         created_at, updated_at, started_at, completed_at, workspace_kind, workspace_path, \
         max_runtime_seconds, max_retries, result, consecutive_failures, protocol_violations, \
         last_failure_error, block_kind, block_reason, block_recurrences, claim_lock, \
         claim_expires, current_run_id, last_heartbeat_at, scheduled_until, budget, traceparent"
    };
}

/// The columns [`run`] reads, in order.
macro_rules! run_cols {
    () => {
        "id, task_id, profile, source_status, claim_lock, claim_expires, max_runtime_seconds, \
         last_heartbeat_at, started_at, ended_at, outcome, summary, metadata, error, usage"
    };
}

/// The columns [`event`] reads, in order.
macro_rules! event_cols {
    () => {
        "id, task_id, run_id, kind, payload, created_at"
    };
}

/// The columns [`attachment`] reads, in order.
macro_rules! attachment_cols {
    () => {
        "id, task_id, filename, content_type, size, uploaded_by, created_at"
    };
}

/// The columns [`comment`] reads, in order.
macro_rules! comment_cols {
    () => {
        "id, task_id, author, body, created_at"
    };
}

/// The columns [`board`] reads, in order.
macro_rules! board_cols {
    () => {
        "slug, name, description, created_at, archived_at"
    };
}

pub(crate) use {attachment_cols, board_cols, comment_cols, event_cols, run_cols, task_cols};

/// The columns [`task`] reads, in order.
pub(crate) const TASK_COLS: &str = task_cols!();

/// The columns [`run`] reads, in order.
pub(crate) const RUN_COLS: &str = run_cols!();

/// The columns [`event`] reads, in order.
pub(crate) const EVENT_COLS: &str = event_cols!();

/// The columns [`attachment`] reads, in order.
pub(crate) const ATTACHMENT_COLS: &str = attachment_cols!();

/// The columns [`comment`] reads, in order.
pub(crate) const COMMENT_COLS: &str = comment_cols!();

/// The columns [`board`] reads, in order.
pub(crate) const BOARD_COLS: &str = board_cols!();

/// One result row, read by column index.
pub(crate) trait RowAccess {
    /// The backend's error for a missing or mistyped column.
    type Error;

    /// An integer column.
    fn int(&self, idx: usize) -> Result<i64, Self::Error>;
    /// An integer column that may be `NULL`.
    fn opt_int(&self, idx: usize) -> Result<Option<i64>, Self::Error>;
    /// A text column.
    fn text(&self, idx: usize) -> Result<&str, Self::Error>;
    /// A text column that may be `NULL`.
    fn opt_text(&self, idx: usize) -> Result<Option<&str>, Self::Error>;
    /// A value that was read but does not parse.
    fn bad<E: std::error::Error + Send + Sync + 'static>(&self, idx: usize, e: E) -> Self::Error;
    /// A value that was read but is out of range, in words.
    fn corrupt(&self, idx: usize, what: String) -> Self::Error;

    /// A time column.
    fn ts(&self, idx: usize) -> Result<Timestamp, Self::Error> {
        Ok(Timestamp(self.int(idx)?))
    }

    /// A time column that may be `NULL`.
    fn opt_ts(&self, idx: usize) -> Result<Option<Timestamp>, Self::Error> {
        Ok(self.opt_int(idx)?.map(Timestamp))
    }

    /// A counter.
    fn count(&self, idx: usize) -> Result<u32, Self::Error> {
        let v = self.int(idx)?;
        u32::try_from(v).map_err(|_| self.corrupt(idx, format!("counter {v} out of range")))
    }

    /// A non-negative integer that may be `NULL`.
    fn opt_u64(&self, idx: usize) -> Result<Option<u64>, Self::Error> {
        self.opt_int(idx)?
            .map(|v| u64::try_from(v).map_err(|_| self.corrupt(idx, format!("negative value {v}"))))
            .transpose()
    }

    /// A small non-negative integer that may be `NULL`.
    fn opt_u32(&self, idx: usize) -> Result<Option<u32>, Self::Error> {
        self.opt_int(idx)?
            .map(|v| {
                u32::try_from(v).map_err(|_| self.corrupt(idx, format!("value {v} out of range")))
            })
            .transpose()
    }

    /// A text column that may be `NULL`, owned.
    fn opt_string(&self, idx: usize) -> Result<Option<String>, Self::Error> {
        Ok(self.opt_text(idx)?.map(str::to_string))
    }

    /// A task id.
    fn task_id(&self, idx: usize) -> Result<TaskId, Self::Error> {
        TaskId::parse(self.text(idx)?).map_err(|e| self.bad(idx, e))
    }

    /// A task status.
    fn status(&self, idx: usize) -> Result<TaskStatus, Self::Error> {
        self.text(idx)?.parse().map_err(|e| self.bad(idx, e))
    }

    /// A JSON column that may be `NULL`.
    fn opt_json<T: serde::de::DeserializeOwned>(
        &self,
        idx: usize,
    ) -> Result<Option<T>, Self::Error> {
        self.opt_text(idx)?
            .map(|v| serde_json::from_str(v).map_err(|e| self.bad(idx, e)))
            .transpose()
    }
}

/// A task row ([`TASK_COLS`]).
pub(crate) fn task<R: RowAccess>(r: &R) -> Result<Task, R::Error> {
    let claim_lock = r.opt_text(24)?;
    let claim_expires = r.opt_ts(25)?;
    let current_run = r.opt_int(26)?;
    let lease = match (claim_lock, claim_expires, current_run) {
        (Some(lock), Some(expires_at), Some(run)) => Some(Lease {
            worker: WorkerId::parse(lock).map_err(|e| r.bad(24, e))?,
            expires_at,
            run_id: RunId(run),
        }),
        _ => None,
    };
    Ok(Task {
        id: r.task_id(0)?,
        title: r.text(1)?.to_string(),
        body: r.text(2)?.to_string(),
        assignee: r.opt_string(3)?,
        status: r.status(4)?,
        priority: r.int(5)?,
        tenant: r.opt_string(6)?,
        idempotency_key: r.opt_string(7)?,
        created_by: r.opt_string(8)?,
        created_at: r.ts(9)?,
        updated_at: r.ts(10)?,
        started_at: r.opt_ts(11)?,
        completed_at: r.opt_ts(12)?,
        workspace: Workspace::from_parts(r.text(13)?, r.opt_string(14)?)
            .map_err(|e| r.bad(13, e))?,
        max_runtime_seconds: r.opt_u64(15)?,
        max_retries: r.opt_u32(16)?,
        result: r.opt_string(17)?,
        consecutive_failures: r.count(18)?,
        protocol_violations: r.count(19)?,
        last_failure_error: r.opt_string(20)?,
        block_kind: r.opt_string(21)?,
        block_reason: r.opt_string(22)?,
        block_recurrences: r.count(23)?,
        lease,
        last_heartbeat_at: r.opt_ts(27)?,
        scheduled_until: r.opt_ts(28)?,
        budget: r.opt_json(29)?,
        traceparent: r.opt_string(30)?,
    })
}

/// A run row ([`RUN_COLS`]).
pub(crate) fn run<R: RowAccess>(r: &R) -> Result<Run, R::Error> {
    let worker = r
        .opt_text(4)?
        .map(|w| WorkerId::parse(w).map_err(|e| r.bad(4, e)))
        .transpose()?;
    let outcome = r
        .opt_text(10)?
        .map(|o| RunOutcome::parse(o).ok_or_else(|| r.corrupt(10, format!("run outcome {o:?}"))))
        .transpose()?;
    Ok(Run {
        id: RunId(r.int(0)?),
        task_id: r.task_id(1)?,
        profile: r.opt_string(2)?,
        source_status: r.status(3)?,
        worker,
        lease_expires_at: r.opt_ts(5)?,
        max_runtime_seconds: r.opt_u64(6)?,
        last_heartbeat_at: r.opt_ts(7)?,
        started_at: r.ts(8)?,
        ended_at: r.opt_ts(9)?,
        outcome,
        summary: r.opt_string(11)?,
        metadata: r.opt_json(12)?,
        error: r.opt_string(13)?,
        usage: r.opt_json(14)?,
    })
}

/// An event row ([`EVENT_COLS`]).
pub(crate) fn event<R: RowAccess>(r: &R) -> Result<Event, R::Error> {
    let kind = r.text(3)?;
    Ok(Event {
        id: EventId(r.int(0)?),
        task_id: r
            .opt_text(1)?
            .map(|t| TaskId::parse(t).map_err(|e| r.bad(1, e)))
            .transpose()?,
        run_id: r.opt_int(2)?.map(RunId),
        kind: EventKind::parse(kind).ok_or_else(|| r.corrupt(3, format!("event kind {kind:?}")))?,
        payload: serde_json::from_str(r.text(4)?).map_err(|e| r.bad(4, e))?,
        created_at: r.ts(5)?,
    })
}

/// An attachment row ([`ATTACHMENT_COLS`]).
pub(crate) fn attachment<R: RowAccess>(r: &R) -> Result<Attachment, R::Error> {
    let size = r.int(4)?;
    Ok(Attachment {
        id: r.int(0)?,
        task_id: r.task_id(1)?,
        filename: r.text(2)?.to_string(),
        content_type: r.text(3)?.to_string(),
        size: u64::try_from(size).map_err(|_| r.corrupt(4, format!("size {size}")))?,
        uploaded_by: r.opt_string(5)?,
        created_at: r.ts(6)?,
    })
}

/// A comment row ([`COMMENT_COLS`]).
pub(crate) fn comment<R: RowAccess>(r: &R) -> Result<Comment, R::Error> {
    Ok(Comment {
        id: r.int(0)?,
        task_id: r.task_id(1)?,
        author: r.text(2)?.to_string(),
        body: r.text(3)?.to_string(),
        created_at: r.ts(4)?,
    })
}

/// A board row ([`BOARD_COLS`]).
pub(crate) fn board<R: RowAccess>(r: &R) -> Result<Board, R::Error> {
    Ok(Board {
        slug: BoardSlug::parse(r.text(0)?).map_err(|e| r.bad(0, e))?,
        name: r.text(1)?.to_string(),
        description: r.text(2)?.to_string(),
        created_at: r.ts(3)?,
        archived_at: r.opt_ts(4)?,
    })
}

/// A link row (parent, child).
pub(crate) fn link<R: RowAccess>(r: &R) -> Result<Link, R::Error> {
    Ok(Link {
        parent: r.task_id(0)?,
        child: r.task_id(1)?,
    })
}
