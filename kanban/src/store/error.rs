//! [`StoreError`]: every way a store operation can fail, shared by all implementations.
//!
//! Messages name the board, the task and the transition, and say what would have been allowed,
//! because they travel as-is to the CLI, the HTTP API and the models that drive workers.

use crate::domain::{BoardSlug, ModelError, TaskId, TaskStatus};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A value from the caller broke the model's rules.
    #[error(transparent)]
    Invalid(#[from] ModelError),

    /// No board has that slug.
    #[error("there is no board {slug}; list boards with `troupe kanban boards list`")]
    BoardNotFound {
        /// The slug asked for.
        slug: BoardSlug,
    },

    /// A board with that slug already exists.
    #[error("board {slug} already exists; pick another slug or use the existing board")]
    BoardExists {
        /// The slug asked for.
        slug: BoardSlug,
    },

    /// The board is archived and takes no new work.
    #[error("board {slug} is archived; it accepts no new tasks or claims")]
    BoardArchived {
        /// The archived board.
        slug: BoardSlug,
    },

    /// The `default` board cannot be archived or removed.
    #[error("the default board cannot be {action}; it always exists")]
    DefaultBoardProtected {
        /// What was attempted ("archived", "deleted").
        action: &'static str,
    },

    /// A board must be archived before it is deleted.
    #[error("board {slug} is not archived; archive it before deleting it")]
    BoardNotArchived {
        /// The board.
        slug: BoardSlug,
    },

    /// No task has that id on the board.
    #[error("there is no task {id} on board {board}")]
    TaskNotFound {
        /// The board searched.
        board: BoardSlug,
        /// The id asked for.
        id: TaskId,
    },

    /// No run has that id on the board.
    #[error("there is no run {id} on board {board}")]
    RunNotFound {
        /// The board searched.
        board: BoardSlug,
        /// The run id asked for.
        id: i64,
    },

    /// No attachment has that id on the board.
    #[error("there is no attachment {id} on board {board}")]
    AttachmentNotFound {
        /// The board searched.
        board: BoardSlug,
        /// The attachment id asked for.
        id: i64,
    },

    /// The task's status does not allow the transition.
    #[error("{task} is {status}; only {allowed} tasks can be {action}")]
    InvalidTransition {
        /// The task.
        task: TaskId,
        /// Its current status.
        status: TaskStatus,
        /// The transition, as a past participle ("completed", "claimed").
        action: &'static str,
        /// The statuses that allow it, as prose ("running, ready, blocked or review").
        allowed: &'static str,
    },

    /// The task still waits for parents that are neither done nor archived.
    #[error(
        "{task} cannot be {action} while its parents {} are not done; complete or archive them \
         first, or unlink them",
        join_ids(open_parents)
    )]
    ParentsOpen {
        /// The task.
        task: TaskId,
        /// The transition attempted.
        action: &'static str,
        /// Parents not yet done or archived.
        open_parents: Vec<TaskId>,
    },

    /// The caller acted as a worker that does not hold the task's lease.
    #[error(
        "{task} is not leased to worker {worker} (holder: {}); only the worker holding the \
         current lease may do this, and a lapsed lease must be claimed again",
        holder.as_deref().unwrap_or("nobody")
    )]
    LeaseNotHeld {
        /// The task.
        task: TaskId,
        /// Who asked.
        worker: String,
        /// Who holds the lease, if anyone.
        holder: Option<String>,
    },

    /// A task cannot depend on itself.
    #[error("{task} cannot be linked to itself; a link needs two different tasks")]
    SelfLink {
        /// The task.
        task: TaskId,
    },

    /// The link would close a dependency cycle.
    #[error(
        "linking {parent} -> {child} would make a cycle: {child} is already an ancestor of \
         {parent}; link them the other way round or not at all"
    )]
    Cycle {
        /// The proposed parent.
        parent: TaskId,
        /// The proposed child.
        child: TaskId,
    },

    /// The other task lives on another board.
    #[error(
        "{task} is on board {other_board}, not {board}; links and parents stay within one \
         board"
    )]
    CrossBoardLink {
        /// The board the operation ran on.
        board: BoardSlug,
        /// The foreign task.
        task: TaskId,
        /// Where that task lives.
        other_board: BoardSlug,
    },

    /// The link to remove does not exist.
    #[error("{child} does not depend on {parent}; nothing to unlink")]
    LinkNotFound {
        /// The parent named.
        parent: TaskId,
        /// The child named.
        child: TaskId,
    },

    /// The attachment is bigger than the cap.
    #[error("attachment {filename:?} is {size} bytes; the limit is {cap} bytes")]
    AttachmentTooLarge {
        /// Its name.
        filename: String,
        /// Its size.
        size: u64,
        /// The cap.
        cap: u64,
    },

    /// The task changed between reading and writing it (a lost compare-and-swap).
    #[error("{task} was changed by someone else at the same moment; read it again and retry")]
    Conflict {
        /// The task.
        task: TaskId,
    },

    /// The storage stayed locked by another writer for longer than the store waits.
    #[error("board {board} stayed locked by another writer; try again shortly")]
    Busy {
        /// The board.
        board: BoardSlug,
    },

    /// Stored data could not be read back (a damaged or foreign database).
    #[error("board {board} holds data this version cannot read: {what}")]
    Corrupt {
        /// The board.
        board: BoardSlug,
        /// What was wrong.
        what: String,
    },

    /// The storage was written by a newer troupe.
    #[error(
        "board {board} uses schema version {found}, newer than this troupe's {supported}; \
         upgrade troupe to open it"
    )]
    SchemaTooNew {
        /// The board.
        board: BoardSlug,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },

    /// The database itself failed.
    #[error("board {board}: the database failed: {source}")]
    Backend {
        /// The board.
        board: BoardSlug,
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A file or directory of the store could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },

    /// The database could not be reached, or the connection broke mid-call (transient: the
    /// pool reconnects on a later call).
    #[error("board {board}: the database is unreachable right now ({reason}); retry shortly")]
    Unavailable {
        /// The board the call was for.
        board: BoardSlug,
        /// What the driver reported.
        reason: String,
    },

    /// A scheduled job's definition was refused.
    #[error(transparent)]
    Schedule(#[from] crate::schedule::ScheduleError),

    /// No scheduled job has that id or name on the board.
    #[error(
        "there is no scheduled job {key:?} on board {board}; list them with `troupe cron list`"
    )]
    JobNotFound {
        /// The board searched.
        board: BoardSlug,
        /// The id or name asked for.
        key: String,
    },

    /// Another job on the board has that name.
    #[error(
        "board {board} already has a scheduled job named {name:?}; pick another name or update that job"
    )]
    JobNameTaken {
        /// The board.
        board: BoardSlug,
        /// The name.
        name: String,
    },

    /// Another transaction recorded this due time of the job first (it fired there).
    #[error("job {job} already fired for due time {}; nothing was made twice", due_at.0)]
    JobAlreadyFired {
        /// The job.
        job: String,
        /// The due time.
        due_at: crate::domain::Timestamp,
    },

    /// The thread running a blocking database call stopped before answering.
    #[error("the store's database thread stopped before answering: {0}")]
    WorkerGone(String),
}

fn join_ids(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl StoreError {
    /// Whether retrying the same call later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Busy { .. }
                | StoreError::Conflict { .. }
                | StoreError::Unavailable { .. }
                | StoreError::JobAlreadyFired { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_show_slugs_and_ids_as_typed() {
        let ops = BoardSlug::parse("ops").unwrap();
        let id = TaskId::parse("t_0123abcd").unwrap();
        let texts = [
            StoreError::BoardNotFound { slug: ops.clone() }.to_string(),
            StoreError::TaskNotFound {
                board: ops.clone(),
                id: id.clone(),
            }
            .to_string(),
            StoreError::CrossBoardLink {
                board: BoardSlug::default_board(),
                task: id,
                other_board: ops,
            }
            .to_string(),
        ];
        assert!(
            texts[0].starts_with("there is no board ops;"),
            "{}",
            texts[0]
        );
        assert_eq!(texts[1], "there is no task t_0123abcd on board ops");
        assert!(
            texts[2].starts_with("t_0123abcd is on board ops, not default;"),
            "{}",
            texts[2]
        );
        assert!(texts.iter().all(|t| !t.contains("BoardSlug")), "{texts:?}");
    }
}

/// An error inside a backend's transaction: a store error, or a database error `D` not yet
/// tied to a board.
#[derive(Debug)]
pub(crate) enum TxError<D> {
    /// Already a store error.
    Store(StoreError),
    /// From the database driver.
    Db(D),
}

impl<D> From<StoreError> for TxError<D> {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

impl<D> From<ModelError> for TxError<D> {
    fn from(e: ModelError) -> Self {
        TxError::Store(StoreError::Invalid(e))
    }
}

/// A database driver's error, which only becomes a [`StoreError`] once its board is known.
pub(crate) trait DbError {
    /// The store error, attributed to `board`.
    fn into_store(self, board: &BoardSlug) -> StoreError;
}

impl<D: DbError> From<D> for TxError<D> {
    fn from(e: D) -> Self {
        TxError::Db(e)
    }
}

impl<D: DbError> TxError<D> {
    /// The store error, with database failures attributed to `board`.
    pub(crate) fn into_store(self, board: &BoardSlug) -> StoreError {
        match self {
            TxError::Store(e) => e,
            TxError::Db(e) => e.into_store(board),
        }
    }
}
