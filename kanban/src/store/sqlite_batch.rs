//! A board's thread on a [`SqliteStore`](super::SqliteStore): it runs the board's transactions
//! in the order they came, and commits the ones waiting in its queue together (group commit).
//!
//! A commit is most of what a small SQLite transaction costs (the WAL frames, the lock, the
//! wake-up of whoever waits), and under load the queue holds many small transactions. So the
//! thread takes every job waiting (up to [`MAX_BATCH`]) into one transaction; each writing job
//! runs inside its own `SAVEPOINT`, so a job that fails rolls back only its own changes and the
//! others still commit. A caller gets its answer only once the shared commit succeeded; if the
//! commit fails, every job of the batch that had succeeded gets that failure instead (nothing of
//! it was kept). A job alone in the queue runs as a transaction of its own, as before.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crossbeam::channel::Receiver;
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;
use troupe_tools::sync::lock;

use crate::domain::{BoardSlug, Timestamp};
use crate::store::StoreError;
use crate::store::backend::{Backend, run_ready};
use crate::store::sqlite::Inner;
use crate::store::sqlite_tx::{Tx, TxResult, db_error};

/// Most jobs one transaction takes by default: enough to share a commit among every worker of a busy
/// dispatcher, few enough that the first caller of a batch does not wait long for the last.
pub(super) const MAX_BATCH: usize = 64;

/// How a job uses the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Reads only: needs no savepoint and, in a batch of reads, no write lock.
    Read,
    /// Writes.
    Write,
    /// Writes naming other tasks: one missing here but present on another board is reported
    /// as a cross-board link.
    Link,
}

/// One transaction's work, queued for a board's thread.
pub(super) trait BoardJob: Send {
    /// The store it belongs to (kept alive until the job is answered).
    fn inner(&self) -> &Arc<Inner>;
    /// How it uses the board.
    fn mode(&self) -> Mode;
    /// Runs the operation inside the open transaction; `true` when it succeeded.
    fn run(&mut self, t: &Tx<'_>) -> bool;
    /// Answers the caller once the batch is settled: its own error, or its value if the batch
    /// committed, or why the batch did not. Called with no board lock held.
    fn answer(self: Box<Self>, inner: &Inner, batch: Option<&StoreError>);
}

/// A job of an operation `F` answering `T`.
pub(super) struct Pending<T, F> {
    inner: Arc<Inner>,
    mode: Mode,
    op: Option<F>,
    out: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Pending<T, F> {
    pub(super) fn new(
        inner: Arc<Inner>,
        mode: Mode,
        op: F,
        reply: oneshot::Sender<Result<T, StoreError>>,
    ) -> Pending<T, F> {
        Pending {
            inner,
            mode,
            op: Some(op),
            out: None,
            reply,
        }
    }
}

impl<T, F> BoardJob for Pending<T, F>
where
    T: Send,
    F: FnOnce(&Tx<'_>) -> TxResult<T> + Send,
{
    fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn run(&mut self, t: &Tx<'_>) -> bool {
        let Some(op) = self.op.take() else {
            return false;
        };
        let out = op(t).map_err(|e| e.into_store(t.board));
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn answer(self: Box<Self>, inner: &Inner, batch: Option<&StoreError>) {
        let out = match (self.out, batch) {
            (Some(Err(e)), _) if self.mode == Mode::Link => Err(inner.relink(e)),
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(value)), None) => Ok(value),
            (_, Some(e)) => Err(replicate(e)),
            // It ran and panicked: dropping the reply tells the caller so.
            (None, None) => return,
        };
        let _ = self.reply.send(out);
    }
}

/// A board thread's loop: jobs in the order they came, those waiting taken together, until the
/// board is deleted or every handle of the store is gone (and what was queued has run).
pub(super) fn run_jobs(board: &BoardSlug, jobs: &Receiver<Box<dyn BoardJob>>, most: usize) {
    let mut batch: Vec<Box<dyn BoardJob>> = Vec::with_capacity(most);
    while let Ok(first) = jobs.recv() {
        batch.push(first);
        while batch.len() < most {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let inner = Arc::clone(batch[0].inner());
        let settled = run_batch(&inner, board, &mut batch);
        for job in batch.drain(..) {
            job.answer(&inner, settled.as_ref().err());
        }
    }
}

/// Runs `jobs` in one transaction and commits it. `Err` when the batch as a whole failed (the
/// board could not be opened, the transaction not begun or not committed): nothing of it kept.
fn run_batch(
    inner: &Inner,
    board: &BoardSlug,
    jobs: &mut [Box<dyn BoardJob>],
) -> Result<(), StoreError> {
    let conn = inner.conn(board, false)?;
    let mut c = lock(&conn);
    let writes = jobs.iter().any(|j| j.mode() != Mode::Read);
    let behavior = if writes {
        TransactionBehavior::Immediate
    } else {
        TransactionBehavior::Deferred
    };
    let tx = c
        .transaction_with_behavior(behavior)
        .map_err(|e| db_error(board, e))?;
    let open = Tx {
        c: &tx,
        board,
        now: Timestamp::now(),
    };
    // A board file whose creation never finished has no board row: not a board yet.
    run_ready(board, open.board_archived()).map_err(|e| e.into_store(board))?;
    if let [job] = jobs {
        // Alone: the transaction is the job's own, and a failure rolls all of it back.
        if run_caught(job.as_mut(), &open) {
            tx.commit().map_err(|e| db_error(board, e))?;
        }
        return Ok(());
    }
    for job in jobs.iter_mut() {
        let t = Tx {
            c: &tx,
            board,
            now: Timestamp::now(),
        };
        if job.mode() == Mode::Read {
            // A read changes nothing, so it has nothing to roll back.
            run_caught(job.as_mut(), &t);
            continue;
        }
        step(&tx, board, "SAVEPOINT job")?;
        if !run_caught(job.as_mut(), &t) {
            // Fails when SQLite already rolled the whole transaction back (a full disk, an I/O
            // error): then the batch fails as a whole, which is the truth.
            step(&tx, board, "ROLLBACK TO job")?;
        }
        step(&tx, board, "RELEASE job")?;
    }
    tx.commit().map_err(|e| db_error(board, e))
}

/// Runs one job; a job that panics counts as failed (its caller sees the thread's answer gone).
fn run_caught(job: &mut dyn BoardJob, t: &Tx<'_>) -> bool {
    std::panic::catch_unwind(AssertUnwindSafe(|| job.run(t))).unwrap_or(false)
}

/// One cached statement without parameters or rows.
fn step(c: &Connection, board: &BoardSlug, sql: &str) -> Result<(), StoreError> {
    c.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(drop)
        .map_err(|e| db_error(board, e))
}

/// The batch's failure, for one more of its callers (a [`StoreError`] is not `Clone`: its
/// driver errors are kept as their messages).
fn replicate(e: &StoreError) -> StoreError {
    match e {
        StoreError::Busy { board } => StoreError::Busy {
            board: board.clone(),
        },
        StoreError::BoardNotFound { slug } => StoreError::BoardNotFound { slug: slug.clone() },
        StoreError::SchemaTooNew {
            board,
            found,
            supported,
        } => StoreError::SchemaTooNew {
            board: board.clone(),
            found: *found,
            supported: *supported,
        },
        StoreError::Corrupt { board, what } => StoreError::Corrupt {
            board: board.clone(),
            what: what.clone(),
        },
        StoreError::Backend { board, source } => StoreError::Backend {
            board: board.clone(),
            source: source.to_string().into(),
        },
        StoreError::Io { path, source } => StoreError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        other => StoreError::WorkerGone(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;
    use crate::domain::{EventId, EventKind, NewTask, TaskFilter};
    use crate::store::{SqliteStore, Store, ops};

    /// Jobs queued together share one commit, and the one that fails after writing takes back
    /// only its own rows and events: the others' are kept, and each caller gets its own answer.
    #[tokio::test]
    async fn a_failing_job_in_a_shared_commit_rolls_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).await.unwrap();
        let board = BoardSlug::default_board();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let make = |title: &'static str, fail: bool| {
            store.submit(&board, Mode::Write, move |t| {
                run_ready(t.board, ops::create_task(t, &NewTask::new(title)))?;
                if fail {
                    return Err(StoreError::BoardArchived {
                        slug: t.board.clone(),
                    }
                    .into());
                }
                Ok(())
            })
        };
        // The first job holds the board's thread until the next three wait behind it, so they
        // are taken together.
        let mut hold = pin!(store.submit(&board, Mode::Write, move |_| {
            let _ = held.recv();
            Ok(())
        }));
        let mut kept = pin!(make("kept one", false));
        let mut failed = pin!(make("taken back", true));
        let mut also_kept = pin!(make("kept two", false));
        assert!(futures::poll!(hold.as_mut()).is_pending());
        assert!(futures::poll!(kept.as_mut()).is_pending());
        assert!(futures::poll!(failed.as_mut()).is_pending());
        assert!(futures::poll!(also_kept.as_mut()).is_pending());
        release.send(()).unwrap();
        hold.await.unwrap();
        kept.await.unwrap();
        assert!(matches!(
            failed.await,
            Err(StoreError::BoardArchived { .. })
        ));
        also_kept.await.unwrap();

        let mut titles: Vec<String> = store
            .list_tasks(&board, &TaskFilter::default())
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.title)
            .collect();
        titles.sort();
        assert_eq!(titles, ["kept one", "kept two"]);
        let created = store
            .events_since(&board, EventId::START, 100)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == EventKind::Created)
            .count();
        assert_eq!(created, 2, "the failed job's event went with it");
    }
}
