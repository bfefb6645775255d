//! [`SqliteStore`]: the embedded [`Store`], one SQLite file per board under a root directory.
//!
//! Layout: `<root>/boards/<slug>/kanban.db`. Each file runs in WAL mode; every write is one
//! `BEGIN IMMEDIATE` transaction holding the change and its events (see `sqlite_tx.rs`), so
//! several handles or processes on the same root never both claim a task. rusqlite is
//! synchronous, so no call runs on an executor thread: a board's transactions go to that
//! board's own thread (`sqlite_batch.rs`, which commits the jobs waiting in its queue together),
//! everything else to tokio's blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_tools::sync::lock;

use crossbeam::channel::{SendError, Sender};
use dashmap::DashMap;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::domain::{
    Attachment, Board, BoardSlug, BoardStats, Comment, Event, EventId, Lease, Link, NewAttachment,
    NewBoard, NewTask, Run, RunId, Task, TaskFilter, TaskId, TaskLinks, TaskPatch, Timestamp,
    WorkerId,
};
use crate::store::backend::{Backend, run_ready};
use crate::store::board_methods::board_methods;
use crate::store::ops;
use crate::store::schedule_methods::schedule_methods;
use crate::store::sqlite_batch::{BoardJob, MAX_BATCH, Mode, Pending, run_jobs};
use crate::store::sqlite_schema::{self, MigrateOutcome};
use crate::store::sqlite_tx::{Tx, TxResult, db_error};
use crate::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Created, Failure, FailureOutcome, Reclaimed, Store,
    StoreError, StoreFuture, TaskContext, Transitioned,
};

/// File name of a board's database inside its directory.
const DB_FILE: &str = "kanban.db";

/// Most page cache one board connection keeps, in KiB.
const CACHE_KIB: u32 = 16 * 1024;

/// One transaction's work for a board's thread.
type Job = Box<dyn BoardJob>;

/// How a [`SqliteStore`] treats its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long a write waits for another writer's lock before failing with
    /// [`StoreError::Busy`].
    pub busy_timeout: Duration,
    /// `synchronous = FULL` (an fsync per commit: survives power loss) instead of `NORMAL`
    /// (survives any process crash; a power loss may drop the last commits, never corrupt).
    pub fsync_every_commit: bool,
    /// Most jobs waiting in a board's queue that share one commit (see `sqlite_batch.rs`);
    /// `1` gives every call a transaction of its own.
    pub max_batch: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(10),
            fsync_every_commit: false,
            max_batch: MAX_BATCH,
        }
    }
}

/// The embedded board store. Cheap to clone; clones share connections.
///
/// Each handle keeps one connection per board it has used; separate handles (or processes) on
/// the same root coordinate through SQLite's file locks.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("root", &self.inner.root)
            .finish_non_exhaustive()
    }
}

pub(super) struct Inner {
    /// The directory holding `boards/`.
    root: PathBuf,
    /// Lock wait and durability settings.
    opts: SqliteOptions,
    /// One connection per board; the mutex serializes this handle's use of it (SQLite allows
    /// one writer at a time anyway).
    conns: DashMap<BoardSlug, Arc<Mutex<Connection>>>,
    /// The queue of each board's thread. A board's transactions run one at a time anyway (its
    /// connection is one writer); one thread that stays awake while work is queued costs far
    /// less than waking a pool thread per call only to have it wait for the connection.
    threads: DashMap<BoardSlug, Sender<Job>>,
}

impl SqliteStore {
    /// Opens (creating if needed) a store rooted at `root`, with the `default` board.
    pub async fn open(root: impl Into<PathBuf>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(root, SqliteOptions::default()).await
    }

    /// [`SqliteStore::open`] with explicit options.
    pub async fn open_with(
        root: impl Into<PathBuf>,
        opts: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let store = SqliteStore {
            inner: Arc::new(Inner {
                root: root.into(),
                opts,
                conns: DashMap::new(),
                threads: DashMap::new(),
            }),
        };
        store
            .blocking(|inner| {
                let dir = inner.root.join("boards");
                std::fs::create_dir_all(&dir).map_err(|source| io_error(&dir, source))?;
                match inner.create_board(&NewBoard::new(BoardSlug::default_board())) {
                    Ok(_) | Err(StoreError::BoardExists { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(store)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The board commands use when none is named: the one last switched to, if it still exists
    /// and is not archived, else `default`.
    pub async fn current_board(&self) -> Result<BoardSlug, StoreError> {
        let path = self.inner.root.join("current");
        let named = match std::fs::read_to_string(&path) {
            Ok(text) => BoardSlug::parse(text.trim()).ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(io_error(&path, source)),
        };
        if let Some(slug) = named {
            match self.board(&slug).await {
                Ok(board) if board.archived_at.is_none() => return Ok(slug),
                Ok(_) | Err(StoreError::BoardNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(BoardSlug::default_board())
    }

    /// Makes `slug` the current board; it must exist and not be archived.
    pub async fn switch_board(&self, slug: &BoardSlug) -> Result<(), StoreError> {
        let board = self.board(slug).await?;
        if board.archived_at.is_some() {
            return Err(StoreError::BoardArchived { slug: slug.clone() });
        }
        let root = self.inner.root.clone();
        let slug = slug.clone();
        self.blocking(move |_| {
            // Write then rename, so a reader never sees a half-written name.
            let tmp = root.join(format!("current.{}.tmp", std::process::id()));
            let path = root.join("current");
            std::fs::write(&tmp, slug.as_str()).map_err(|source| io_error(&tmp, source))?;
            std::fs::rename(&tmp, &path).map_err(|source| io_error(&path, source))
        })
        .await
    }

    /// Runs `f` on the blocking pool (inline when there is no tokio runtime, which is then not
    /// an executor thread either). Dropping the returned future does not stop `f`: the
    /// transaction inside commits or rolls back whole.
    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(move || f(&inner))
                .await
                .map_err(|e| StoreError::WorkerGone(e.to_string()))?,
            Err(_) => f(&inner),
        }
    }

    /// Runs `f` in a transaction on `board`'s thread, where it may share a commit with the
    /// jobs queued with it (inline, in a transaction of its own, when there is no tokio
    /// runtime, like [`SqliteStore::blocking`]). Dropping the returned future does not stop `f`:
    /// it commits or rolls back whole.
    pub(super) fn submit<T, F>(&self, board: &BoardSlug, mode: Mode, f: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>) -> TxResult<T> + Send + 'static,
    {
        let board = board.clone();
        Box::pin(async move {
            if tokio::runtime::Handle::try_current().is_err() {
                let behavior = match mode {
                    Mode::Read => TransactionBehavior::Deferred,
                    Mode::Write | Mode::Link => TransactionBehavior::Immediate,
                };
                return match self.inner.transact(&board, behavior, f) {
                    Err(e) if mode == Mode::Link => Err(self.inner.relink(e)),
                    other => other,
                };
            }
            let (reply, answered) = tokio::sync::oneshot::channel();
            let mut job: Job = Box::new(Pending::new(Arc::clone(&self.inner), mode, f, reply));
            // A queue whose thread is gone (it cannot be, short of an abort) gets a new thread.
            for _ in 0..2 {
                let queue = self.inner.board_thread(&board)?;
                match queue.send(job) {
                    Ok(()) => {
                        return answered.await.map_err(|_| {
                            StoreError::WorkerGone(format!(
                                "a transaction on board {board} ended without an answer (it panicked; see the log)"
                            ))
                        })?;
                    }
                    Err(SendError(back)) => {
                        self.inner
                            .threads
                            .remove_if(&board, |_, q| q.same_channel(&queue));
                        job = back;
                    }
                }
            }
            Err(StoreError::WorkerGone(format!(
                "no thread would take work for board {board}"
            )))
        })
    }

    /// A write on `board`, as one immediate transaction (or part of one).
    fn write<T, F>(&self, board: &BoardSlug, f: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>) -> TxResult<T> + Send + 'static,
    {
        self.submit(board, Mode::Write, f)
    }

    /// A read on `board`, in one snapshot.
    fn read<T, F>(&self, board: &BoardSlug, f: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>) -> TxResult<T> + Send + 'static,
    {
        self.submit(board, Mode::Read, f)
    }

    /// A write that names other tasks (links, parents): a task missing here but present on
    /// another board is reported as a cross-board link.
    fn write_linking<T, F>(&self, board: &BoardSlug, f: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>) -> TxResult<T> + Send + 'static,
    {
        self.submit(board, Mode::Link, f)
    }

    /// Starts a claim, then stops before committing and sleeps forever with the write lock
    /// held, after creating `flag`. Only for crash tests: a test kills the process here.
    #[cfg(feature = "test-suite")]
    #[doc(hidden)]
    pub fn stall_inside_claim(
        &self,
        board: &BoardSlug,
        worker: WorkerId,
        flag: &Path,
    ) -> Result<(), StoreError> {
        let conn = self.inner.conn(board, false)?;
        let mut c = lock(&conn);
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(board, e))?;
        let t = Tx {
            c: &tx,
            board,
            now: Timestamp::now(),
        };
        let claimed = run_ready(board, ops::claim_next(&t, &ClaimSpec::new(worker)))
            .map_err(|e| e.into_store(board))?;
        if claimed.is_none() {
            return Ok(());
        }
        std::fs::write(flag, b"stalled").map_err(|source| io_error(flag, source))?;
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

fn io_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Sets a board connection up the way the store runs it; returns the journal mode SQLite took
/// (WAL, unless the file system refuses it).
pub(super) fn tune(conn: &Connection, fsync_every_commit: bool) -> rusqlite::Result<String> {
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    let sync = if fsync_every_commit { "FULL" } else { "NORMAL" };
    // A page cache that holds a large board's hot pages (SQLite's default is 2 MiB): past
    // it every read becomes a system call. It grows only as pages are used. Not larger:
    // a commit that split a b-tree page walks the whole cache (SQLite parks a page under
    // a page number past the file's end while it reorders a split, and the clean-up at
    // commit then visits every slot), so a 64 MiB cache full of a 100,000-task board cost
    // more per commit than the reads it saved, once task ids made the hot pages few.
    //
    // `temp_store = MEMORY` keeps the journal of a savepoint (each job of a shared commit
    // runs in one, see `sqlite_batch.rs`) in memory: otherwise it spills to a temporary
    // file, which costs an open, writes and a close per commit. It holds the pages one job
    // changed, so it stays small.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync}; PRAGMA cache_size = -{CACHE_KIB}; \
         PRAGMA temp_store = MEMORY"
    ))?;
    // Plans that do not depend on bound values. Without this, SQLite marks a statement to be
    // planned again whenever a value bound to it changes, if that value might change the plan
    // (it guesses so for an equality it filters by, when the value could be 0 or 1, and for a
    // bound LIMIT); and rusqlite's cache clears the bindings of every statement it takes back,
    // which counts as such a change. So half the board's statements were parsed and planned
    // again on every use. The store's plans come from its indexes, not from values.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // Room for every statement the board runs (all of fixed text, see `sqlite_sql.rs`): an
    // evicted statement is parsed and planned again on its next use.
    conn.set_prepared_statement_cache_capacity(256);
    Ok(mode)
}

impl Inner {
    fn board_dir(&self, slug: &BoardSlug) -> PathBuf {
        self.root.join("boards").join(slug.as_str())
    }

    /// This handle's connection to `slug`, opened (and migrated) on first use. Without
    /// `create`, a board whose file does not exist is `BoardNotFound`.
    pub(super) fn conn(
        &self,
        slug: &BoardSlug,
        create: bool,
    ) -> Result<Arc<Mutex<Connection>>, StoreError> {
        let path = self.board_dir(slug).join(DB_FILE);
        // The common case takes one shard of the map for reading, briefly.
        let cached = self.conns.get(slug).map(|c| Arc::clone(c.value()));
        if let Some(c) = cached {
            // A board deleted through another handle must not live on in this one's cache.
            if path.exists() {
                return Ok(c);
            }
            self.conns.remove(slug);
        }
        // First use: the entry holds its shard while the file is opened, so two callers do not
        // both open (and migrate) the same board.
        let entry = match self.conns.entry(slug.clone()) {
            dashmap::Entry::Occupied(found) => return Ok(Arc::clone(found.get())),
            dashmap::Entry::Vacant(vacant) => vacant,
        };
        if !create && !path.exists() {
            return Err(StoreError::BoardNotFound { slug: slug.clone() });
        }
        if create {
            let dir = self.board_dir(slug);
            std::fs::create_dir_all(&dir).map_err(|source| io_error(&dir, source))?;
        }
        let conn = self
            .open_conn(slug, &path, create)
            .map_err(|e| db_error(slug, e))?;
        let conn = match conn {
            Ok(c) => c,
            Err(found) => {
                return Err(StoreError::SchemaTooNew {
                    board: slug.clone(),
                    found,
                    supported: sqlite_schema::SCHEMA_VERSION,
                });
            }
        };
        Ok(Arc::clone(entry.insert(Arc::new(Mutex::new(conn))).value()))
    }

    /// The queue of `board`'s thread, started on first use.
    fn board_thread(&self, board: &BoardSlug) -> Result<Sender<Job>, StoreError> {
        if let Some(queue) = self.threads.get(board) {
            return Ok(queue.value().clone());
        }
        match self.threads.entry(board.clone()) {
            dashmap::Entry::Occupied(found) => Ok(found.get().clone()),
            dashmap::Entry::Vacant(vacant) => {
                let (queue, jobs) = crossbeam::channel::unbounded();
                let slug = board.clone();
                let most = self.opts.max_batch.max(1);
                std::thread::Builder::new()
                    .name("troupe-board".into())
                    .spawn(move || run_jobs(&slug, &jobs, most))
                    .map_err(|e| {
                        StoreError::WorkerGone(format!(
                            "could not start a thread for board {board}: {e}"
                        ))
                    })?;
                vacant.insert(queue.clone());
                Ok(queue)
            }
        }
    }

    /// Opens and prepares one connection; the inner `Err` is a too-new schema version.
    fn open_conn(
        &self,
        slug: &BoardSlug,
        path: &Path,
        create: bool,
    ) -> rusqlite::Result<Result<Connection, i64>> {
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(self.opts.busy_timeout)?;
        let mode = tune(&conn, self.opts.fsync_every_commit)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(board = %slug, mode, "SQLite refused WAL mode; continuing in this mode");
        }
        match sqlite_schema::migrate(&mut conn)? {
            MigrateOutcome::Current => Ok(Ok(conn)),
            MigrateOutcome::TooNew(v) => Ok(Err(v)),
        }
    }

    /// Runs `f` in one transaction on `board` and commits only if it succeeded.
    fn transact<T>(
        &self,
        board: &BoardSlug,
        behavior: TransactionBehavior,
        f: impl FnOnce(&Tx<'_>) -> TxResult<T>,
    ) -> Result<T, StoreError> {
        let conn = self.conn(board, false)?;
        let mut c = lock(&conn);
        let tx = c
            .transaction_with_behavior(behavior)
            .map_err(|e| db_error(board, e))?;
        let out = {
            let t = Tx {
                c: &tx,
                board,
                now: Timestamp::now(),
            };
            // A board file whose creation never finished has no board row: not a board yet.
            run_ready(t.board, t.board_archived())
                .and_then(|_| f(&t))
                .map_err(|e| e.into_store(board))?
        };
        tx.commit().map_err(|e| db_error(board, e))?;
        Ok(out)
    }

    fn create_board(&self, new: &NewBoard) -> Result<Board, StoreError> {
        let slug = &new.slug;
        let conn = self.conn(slug, true)?;
        let mut c = lock(&conn);
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(slug, e))?;
        let board = {
            let t = Tx {
                c: &tx,
                board: slug,
                now: Timestamp::now(),
            };
            run_ready(slug, ops::create_board(&t, new)).map_err(|e| e.into_store(slug))?
        };
        tx.commit().map_err(|e| db_error(slug, e))?;
        Ok(board)
    }

    /// Slugs of every board directory holding a database.
    fn board_slugs(&self) -> Result<Vec<BoardSlug>, StoreError> {
        let dir = self.root.join("boards");
        let entries = std::fs::read_dir(&dir).map_err(|source| io_error(&dir, source))?;
        let mut slugs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io_error(&dir, source))?;
            let name = entry.file_name();
            // Directories that are not valid slugs are not boards (and not ours to judge).
            let Some(slug) = name.to_str().and_then(|n| BoardSlug::parse(n).ok()) else {
                continue;
            };
            if slug.as_str() == name.to_string_lossy() && entry.path().join(DB_FILE).exists() {
                slugs.push(slug);
            }
        }
        slugs.sort();
        Ok(slugs)
    }

    /// `TaskNotFound` from a write naming other tasks, told as a cross-board link when the
    /// task is on another board. Called with no board's connection held.
    pub(super) fn relink(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::TaskNotFound { board, id } => match self.find_task_board(&id, &board) {
                Some(other_board) => StoreError::CrossBoardLink {
                    board,
                    task: id,
                    other_board,
                },
                None => StoreError::TaskNotFound { board, id },
            },
            other => other,
        }
    }

    /// The board other than `except` that holds task `id`, if any.
    fn find_task_board(&self, id: &TaskId, except: &BoardSlug) -> Option<BoardSlug> {
        let slugs = self.board_slugs().ok()?;
        slugs.into_iter().filter(|s| s != except).find(|slug| {
            let id = id.clone();
            self.transact(slug, TransactionBehavior::Deferred, move |t| {
                run_ready(t.board, ops::task(t, &id)).map(|_| ())
            })
            .is_ok()
        })
    }
}

/// Runs one operation of `ops/` in a transaction on a board's file (see
/// [`board_methods`]); SQLite's operations never wait, so [`run_ready`] drives them.
macro_rules! on_board_file {
    ($self:ident, $board:expr, read, |$t:ident| $op:expr) => {
        $self.read($board, move |$t| run_ready($t.board, $op))
    };
    ($self:ident, $board:expr, write, |$t:ident| $op:expr) => {
        $self.write($board, move |$t| run_ready($t.board, $op))
    };
    ($self:ident, $board:expr, link, |$t:ident| $op:expr) => {
        $self.write_linking($board, move |$t| run_ready($t.board, $op))
    };
}

impl Store for SqliteStore {
    fn list_boards(&self, include_archived: bool) -> StoreFuture<'_, Vec<Board>> {
        Box::pin(self.blocking(move |inner| {
            let mut boards = Vec::new();
            for slug in inner.board_slugs()? {
                match inner.transact(&slug, TransactionBehavior::Deferred, |t| {
                    run_ready(t.board, t.board_row())
                }) {
                    Ok(b) if include_archived || b.archived_at.is_none() => boards.push(b),
                    Ok(_) | Err(StoreError::BoardNotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(boards)
        }))
    }

    fn create_board(&self, board: &NewBoard) -> StoreFuture<'_, Board> {
        let board = board.clone();
        Box::pin(self.blocking(move |inner| inner.create_board(&board)))
    }

    fn delete_board(&self, slug: &BoardSlug) -> StoreFuture<'_, ()> {
        let slug = slug.clone();
        Box::pin(self.blocking(move |inner| {
            if slug.is_default() {
                return Err(StoreError::DefaultBoardProtected { action: "deleted" });
            }
            let board = inner.transact(&slug, TransactionBehavior::Immediate, |t| {
                run_ready(t.board, t.board_row())
            })?;
            if board.archived_at.is_none() {
                return Err(StoreError::BoardNotArchived { slug });
            }
            inner.conns.remove(&slug);
            inner.threads.remove(&slug);
            let dir = inner.board_dir(&slug);
            std::fs::remove_dir_all(&dir).map_err(|source| io_error(&dir, source))?;
            tracing::info!(board = %slug, "board deleted");
            Ok(())
        }))
    }

    board_methods!(on_board_file);
    schedule_methods!(on_board_file);
}
