//! The Rust API for kanban boards: [`Kanban`], a cloneable handle over a board store with the
//! board-selection rules of the CLI (explicit board, then `TROUPE_KANBAN_BOARD`, then the board
//! last switched to, then `default`), task and link operations, [`TaskDetail`] for `show`, and
//! [`EventFeed`], the live event stream from a cursor (woken by `LISTEN/NOTIFY` on PostgreSQL).
//! Used by `troupe kanban`, the demo, the HTTP API and embedding programs
//! ([`crate::Troupe::kanban`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use troupe_kanban::dispatcher::{DispatcherConfig, DispatcherHandle, ListenWake};
use troupe_kanban::domain::{
    Board, BoardSlug, BoardStats, Comment, Event, EventId, NewBoard, NewTask, Run, Task,
    TaskFilter, TaskId, TaskLinks,
};
use troupe_kanban::profiles::Profiles;
use troupe_kanban::store::{
    BlockRequest, BoardChanges, Completion, Created, PostgresStore, SqliteStore, Store, StoreError,
    Transitioned,
};

use crate::api::{Troupe, TroupeError};
use crate::settings::TroupeHome;
use crate::settings::kanban::{KanbanSettings, StoreLocation};

/// The environment variable that picks the board when no `--board` is given.
pub const BOARD_ENV: &str = "TROUPE_KANBAN_BOARD";

/// How often an [`EventFeed`] asks the store for new events when it has caught up and the store
/// cannot announce changes (SQLite).
pub const FEED_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How often an [`EventFeed`] on PostgreSQL re-reads the store when no notice arrived: a safety
/// net for notices lost while the listening connection was down or not yet listening.
pub const FEED_SAFETY_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Events fetched per store call by an [`EventFeed`].
const FEED_BATCH: usize = 500;

/// Everything about one task, for `show`.
#[derive(Debug, Clone, Serialize)]
pub struct TaskDetail {
    /// The task.
    pub task: Task,
    /// Its parents and children.
    pub links: TaskLinks,
    /// Its comments, oldest first.
    pub comments: Vec<Comment>,
    /// Its runs, oldest first.
    pub runs: Vec<Run>,
    /// Its events, oldest first.
    pub events: Vec<Event>,
}

/// A handle on a board store: cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Kanban {
    store: Arc<dyn Store>,
    /// The file holding the board last switched to; `None` means switching is kept in memory
    /// only (a store handed in by a program).
    current_file: Option<PathBuf>,
    settings: KanbanSettings,
    /// The same store when it is PostgreSQL, for `LISTEN/NOTIFY` wake-ups of dispatchers.
    postgres: Option<PostgresStore>,
}

impl std::fmt::Debug for Kanban {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kanban")
            .field("store", &self.settings.store.describe())
            .finish_non_exhaustive()
    }
}

impl Kanban {
    /// A handle over an already opened store, with default settings.
    pub fn new(store: Arc<dyn Store>) -> Kanban {
        Kanban {
            store,
            current_file: None,
            settings: KanbanSettings::defaults(&TroupeHome::from_env()),
            postgres: None,
        }
    }

    /// Opens the store the settings name; board switching is remembered in
    /// [`StoreLocation::current_board_file`].
    pub async fn open(settings: KanbanSettings) -> Result<Kanban, StoreError> {
        let (store, postgres): (Arc<dyn Store>, _) = match &settings.store {
            StoreLocation::Sqlite(dir) => (Arc::new(SqliteStore::open(dir.clone()).await?), None),
            StoreLocation::Postgres(url) => {
                let pg = PostgresStore::connect(url).await?;
                (Arc::new(pg.clone()), Some(pg))
            }
        };
        Ok(Kanban {
            store,
            current_file: Some(settings.store.current_board_file(&TroupeHome::from_env())),
            settings,
            postgres,
        })
    }

    /// Opens a store at `location` with otherwise default settings.
    pub async fn open_at(location: StoreLocation) -> Result<Kanban, StoreError> {
        Kanban::open(KanbanSettings {
            store: location,
            ..KanbanSettings::defaults(&TroupeHome::from_env())
        })
        .await
    }

    /// Replaces the settings (budgets, profiles) without reopening the store.
    pub fn with_settings(mut self, settings: KanbanSettings) -> Kanban {
        self.settings = settings;
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The settings in use.
    pub fn settings(&self) -> &KanbanSettings {
        &self.settings
    }

    // ---- boards ----

    /// The board to use: `explicit` when given, else `TROUPE_KANBAN_BOARD`, else the board last
    /// switched to (if it still exists and is not archived), else `default`.
    pub async fn resolve_board(&self, explicit: Option<&str>) -> Result<BoardSlug, StoreError> {
        if let Some(raw) = explicit {
            return Ok(BoardSlug::parse(raw)?);
        }
        if let Some(raw) = std::env::var(BOARD_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            return Ok(BoardSlug::parse(raw.trim())?);
        }
        self.current_board().await
    }

    /// The board last switched to, if it still exists and is not archived; else `default`.
    pub async fn current_board(&self) -> Result<BoardSlug, StoreError> {
        let Some(path) = &self.current_file else {
            return Ok(BoardSlug::default_board());
        };
        let named = match std::fs::read_to_string(path) {
            Ok(text) => BoardSlug::parse(text.trim()).ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the current board");
                None
            }
        };
        if let Some(slug) = named {
            match self.store.board(&slug).await {
                Ok(board) if board.archived_at.is_none() => return Ok(slug),
                Ok(_) | Err(StoreError::BoardNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(BoardSlug::default_board())
    }

    /// Makes `slug` the board later commands use; it must exist and not be archived. Returns
    /// the file that remembers it, when there is one.
    pub async fn switch_board(&self, slug: &BoardSlug) -> Result<Option<PathBuf>, SwitchError> {
        let board = self.store.board(slug).await?;
        if board.archived_at.is_some() {
            return Err(StoreError::BoardArchived { slug: slug.clone() }.into());
        }
        let Some(path) = &self.current_file else {
            return Ok(None);
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| SwitchError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        // Write then rename, so a reader never sees half a name.
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, slug.as_str())
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| SwitchError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Some(path.clone()))
    }

    /// Every board; archived ones only when asked.
    pub async fn boards(&self, include_archived: bool) -> Result<Vec<Board>, StoreError> {
        self.store.list_boards(include_archived).await
    }

    /// Creates a board.
    pub async fn create_board(&self, board: &NewBoard) -> Result<Board, StoreError> {
        self.store.create_board(board).await
    }

    /// Removes a board: archives it, and with `delete` also deletes it with everything on it.
    pub async fn remove_board(&self, slug: &BoardSlug, delete: bool) -> Result<(), StoreError> {
        let board = self.store.board(slug).await?;
        if board.archived_at.is_none() {
            self.store.archive_board(slug).await?;
        }
        if delete {
            self.store.delete_board(slug).await?;
        }
        Ok(())
    }

    // ---- tasks ----

    /// Creates a task (or returns the live one with the same idempotency key).
    pub async fn create_task(
        &self,
        board: &BoardSlug,
        task: &NewTask,
    ) -> Result<Created, StoreError> {
        self.store.create_task(board, task).await
    }

    /// One task.
    pub async fn task(&self, board: &BoardSlug, id: &TaskId) -> Result<Task, StoreError> {
        self.store.task(board, id).await
    }

    /// Tasks matching a filter.
    pub async fn list(
        &self,
        board: &BoardSlug,
        filter: &TaskFilter,
    ) -> Result<Vec<Task>, StoreError> {
        self.store.list_tasks(board, filter).await
    }

    /// A task with its links, comments, runs and events.
    pub async fn detail(&self, board: &BoardSlug, id: &TaskId) -> Result<TaskDetail, StoreError> {
        let task = self.store.task(board, id).await?;
        let (links, comments, runs, events) = futures::try_join!(
            self.store.links(board, id),
            self.store.comments(board, id),
            self.store.runs(board, id),
            self.store.task_events(board, id),
        )?;
        Ok(TaskDetail {
            task,
            links,
            comments,
            runs,
            events,
        })
    }

    /// Sets or clears the assignee.
    pub async fn assign(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        assignee: Option<&str>,
    ) -> Result<Task, StoreError> {
        self.store.assign_task(board, id, assignee).await
    }

    /// Makes `child` wait for `parent`.
    pub async fn link(
        &self,
        board: &BoardSlug,
        parent: &TaskId,
        child: &TaskId,
    ) -> Result<(), StoreError> {
        self.store.link(board, parent, child).await
    }

    /// Removes a link.
    pub async fn unlink(
        &self,
        board: &BoardSlug,
        parent: &TaskId,
        child: &TaskId,
    ) -> Result<(), StoreError> {
        self.store.unlink(board, parent, child).await
    }

    /// Adds a comment.
    pub async fn comment(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        author: &str,
        body: &str,
    ) -> Result<Comment, StoreError> {
        self.store.add_comment(board, id, author, body).await
    }

    /// Completes a task as an operator.
    pub async fn complete(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        result: Option<String>,
        summary: Option<String>,
    ) -> Result<Task, StoreError> {
        let done = Completion {
            result,
            summary,
            ..Completion::default()
        };
        self.store.complete(board, id, &done).await
    }

    /// Blocks a task as an operator; a running worker's lease ends.
    pub async fn block(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        kind: &str,
        reason: &str,
    ) -> Result<Transitioned, StoreError> {
        self.store
            .block(board, id, &BlockRequest::new(kind, reason))
            .await
    }

    /// Unblocks a task.
    pub async fn unblock(&self, board: &BoardSlug, id: &TaskId) -> Result<Task, StoreError> {
        self.store.unblock(board, id).await
    }

    /// Unblocks a task with an answer, kept as a comment by `author`: a task parked by a
    /// worker's question goes back to the queue with that comment (the asking session resumes
    /// with it), and any other blocked task is unblocked after it.
    pub async fn unblock_with_answer(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        author: &str,
        answer: &str,
    ) -> Result<Task, StoreError> {
        self.store.add_comment(board, id, author, answer).await?;
        let task = self.store.task(board, id).await?;
        match task.status {
            troupe_kanban::domain::TaskStatus::Blocked
            | troupe_kanban::domain::TaskStatus::Scheduled => self.store.unblock(board, id).await,
            _ => Ok(task),
        }
    }

    /// Archives a task; a running worker's lease ends.
    pub async fn archive(
        &self,
        board: &BoardSlug,
        id: &TaskId,
    ) -> Result<Transitioned, StoreError> {
        let archived = self.store.archive(board, id).await?;
        archive_workspace(self.store.as_ref(), board, &archived.task).await;
        Ok(archived)
    }

    /// A task's runs.
    pub async fn runs(&self, board: &BoardSlug, id: &TaskId) -> Result<Vec<Run>, StoreError> {
        self.store.runs(board, id).await
    }

    /// Counts per status, open runs, the newest event id.
    pub async fn stats(&self, board: &BoardSlug) -> Result<BoardStats, StoreError> {
        self.store.stats(board).await
    }

    /// Up to `limit` events after `cursor`.
    pub async fn events_since(
        &self,
        board: &BoardSlug,
        cursor: EventId,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.store.events_since(board, cursor, limit).await
    }

    /// A live feed of the board's events after `cursor` (use [`EventId::START`] for all).
    pub fn watch(&self, board: BoardSlug, cursor: EventId) -> EventFeed {
        EventFeed {
            store: Arc::clone(&self.store),
            board,
            cursor,
            pending: std::collections::VecDeque::new(),
            poll: FEED_POLL_INTERVAL,
            wake: match &self.postgres {
                Some(pg) => Wake::Listen(Box::new(Listener {
                    store: pg.clone(),
                    changes: None,
                    safety_poll: FEED_SAFETY_POLL_INTERVAL,
                })),
                None => Wake::Poll,
            },
        }
    }
}

impl Kanban {
    /// Starts a dispatcher for `board` on the troupe's actor system: it claims ready tasks
    /// within `config`'s budgets and runs each as a worker session of its assignee's profile,
    /// with approvals going through the troupe's supervisor. On PostgreSQL it wakes on
    /// `LISTEN/NOTIFY`; on SQLite it polls the event log.
    pub async fn start_dispatcher(
        &self,
        troupe: &Troupe,
        board: BoardSlug,
        profiles: Profiles,
        config: DispatcherConfig,
    ) -> Result<DispatcherHandle, TroupeError> {
        let store = Arc::clone(&self.store);
        let postgres = self.postgres.clone();
        let hooks = troupe.dispatcher_hooks();
        troupe
            .on_actor_thread(move |supervisor| match postgres {
                Some(pg) => {
                    let wake = Box::new(ListenWake::new(&pg, &board));
                    DispatcherHandle::start_with_wake(
                        store, board, profiles, supervisor, hooks, config, wake,
                    )
                }
                None => DispatcherHandle::start(store, board, profiles, supervisor, hooks, config),
            })
            .await
    }
}

/// Why a board switch failed.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// The store refused (no such board, archived).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The file that remembers the board could not be written.
    #[error("cannot remember the current board in {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A live stream of a board's events from a cursor: every event exactly once, in id order,
/// however long the caller pauses between reads. Resume elsewhere from [`EventFeed::cursor`].
/// Once caught up it waits for the store's `NOTIFY` on PostgreSQL (with a slow re-read as a
/// safety net) and polls on SQLite; every read starts from the cursor, whatever woke it.
pub struct EventFeed {
    store: Arc<dyn Store>,
    board: BoardSlug,
    cursor: EventId,
    pending: std::collections::VecDeque<Event>,
    poll: Duration,
    wake: Wake,
}

/// What an [`EventFeed`] waits on once it has caught up.
enum Wake {
    /// Sleep `poll`, then read again (SQLite, or a store handed in without its PostgreSQL type).
    Poll,
    /// Wait for a `NOTIFY` on the board's channel (boxed: the store's connection settings are
    /// large).
    Listen(Box<Listener>),
}

/// An [`EventFeed`]'s wait on `LISTEN/NOTIFY`, re-reading every `safety_poll` regardless. The
/// subscription starts on the first wait, inside the caller's runtime.
struct Listener {
    store: PostgresStore,
    changes: Option<BoardChanges>,
    safety_poll: Duration,
}

impl std::fmt::Debug for EventFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFeed")
            .field("board", &self.board)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl EventFeed {
    /// Changes how long the feed waits between store reads once caught up, on a store that
    /// cannot announce changes (SQLite).
    pub fn with_poll_interval(mut self, poll: Duration) -> EventFeed {
        self.poll = poll;
        self
    }

    /// Changes how often a feed on PostgreSQL re-reads the store when no notice arrived (the
    /// safety net behind `LISTEN/NOTIFY`); no effect on other stores.
    pub fn with_safety_poll_interval(mut self, every: Duration) -> EventFeed {
        if let Wake::Listen(listener) = &mut self.wake {
            listener.safety_poll = every;
        }
        self
    }

    /// Whether the feed wakes on the store's change notices rather than by polling.
    pub fn wakes_on_notices(&self) -> bool {
        matches!(self.wake, Wake::Listen(_))
    }

    /// The id of the last event handed out.
    pub fn cursor(&self) -> EventId {
        self.cursor
    }

    /// The next event, waiting for one to be written if need be.
    pub async fn next(&mut self) -> Result<Event, StoreError> {
        // Listen before the first read, so a change committed between that read and the wait
        // still leaves a notice behind.
        if let Wake::Listen(listener) = &mut self.wake
            && listener.changes.is_none()
        {
            listener.changes = Some(listener.store.subscribe(&self.board));
        }
        loop {
            if let Some(event) = self.try_next().await? {
                return Ok(event);
            }
            self.wait_for_change().await;
        }
    }

    /// Waits until new events may be stored: a notice or the safety poll on PostgreSQL, the
    /// poll interval elsewhere. Whatever wakes it, the next read starts from the cursor, so an
    /// early or spurious wake-up costs one read and nothing is skipped or repeated.
    async fn wait_for_change(&mut self) {
        let Wake::Listen(listener) = &mut self.wake else {
            tokio::time::sleep(self.poll).await;
            return;
        };
        let Listener {
            store,
            changes,
            safety_poll,
        } = listener.as_mut();
        let changes = changes.get_or_insert_with(|| store.subscribe(&self.board));
        let notice = tokio::select! {
            notice = changes.recv() => Some(notice),
            () = tokio::time::sleep(*safety_poll) => None,
        };
        match notice {
            // Several commits may have notified; one read covers them all.
            Some(Some(_)) => while changes.try_recv().is_some() {},
            Some(None) => {
                tracing::warn!(board = %self.board, "the event feed's PostgreSQL listener stopped; polling instead");
                self.wake = Wake::Poll;
            }
            None => {}
        }
    }

    /// The next event if one is already stored; `None` when caught up.
    pub async fn try_next(&mut self) -> Result<Option<Event>, StoreError> {
        if self.pending.is_empty() {
            let batch = self
                .store
                .events_since(&self.board, self.cursor, FEED_BATCH)
                .await?;
            self.pending.extend(batch);
        }
        Ok(self.pending.pop_front().inspect(|event| {
            self.cursor = event.id;
        }))
    }
}

impl Troupe {
    /// A kanban handle over `store` for this troupe's programs (boards, tasks, links, comments,
    /// events). Settings start at their defaults; see [`Kanban::with_settings`].
    pub fn kanban(&self, store: Arc<dyn Store>) -> Kanban {
        Kanban::new(store)
    }
}

/// Cleans up an archived task's workspace (scratch directory, clean worktree); what is kept is
/// said in a comment on the task.
pub(crate) async fn archive_workspace(
    store: &dyn troupe_kanban::Store,
    board: &BoardSlug,
    task: &troupe_kanban::Task,
) {
    let home = TroupeHome::from_env();
    if let Some(note) =
        crate::runtime::workspaces::cleanup_workspace(home.path(), board, task).await
        && let Err(error) = store.add_comment(board, &task.id, "troupe", &note).await
    {
        tracing::warn!(task = %task.id, %error, "could not note a kept workspace");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_kanban::store::SqliteStore;

    #[tokio::test]
    async fn switching_persists_and_feed_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let kanban = Kanban::open_at(StoreLocation::Sqlite(dir.path().to_path_buf()))
            .await
            .unwrap();
        let slug = BoardSlug::parse("ops").unwrap();
        kanban
            .create_board(&NewBoard::new(slug.clone()))
            .await
            .unwrap();
        kanban.switch_board(&slug).await.unwrap();
        // A second handle (another process, in real use) sees the switch.
        let again = Kanban::open_at(StoreLocation::Sqlite(dir.path().to_path_buf()))
            .await
            .unwrap();
        assert_eq!(again.current_board().await.unwrap(), slug);
        // The store itself reads the same file.
        let raw = SqliteStore::open(dir.path()).await.unwrap();
        assert_eq!(raw.current_board().await.unwrap(), slug);

        let a = kanban
            .create_task(&slug, &NewTask::new("a"))
            .await
            .unwrap()
            .task;
        let mut feed = kanban.watch(slug.clone(), EventId::START);
        let board_created = feed.next().await.unwrap();
        assert!(board_created.task_id.is_none());
        let first = feed.next().await.unwrap();
        assert_eq!(first.task_id.as_ref(), Some(&a.id));
        assert!(first.id > board_created.id);
        assert!(feed.try_next().await.unwrap().is_none(), "caught up");
        let cursor = feed.cursor();
        kanban.comment(&slug, &a.id, "me", "hello").await.unwrap();
        let mut resumed = kanban.watch(slug.clone(), cursor);
        let next = resumed.next().await.unwrap();
        assert!(next.id > cursor);
        assert_eq!(feed.next().await.unwrap().id, next.id);
    }
}
