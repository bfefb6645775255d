//! [`PostgresStore`]: the [`Store`] for many hosts, on one PostgreSQL database holding many boards.
//!
//! Every operation is one transaction on a pooled connection (deadpool-postgres): the state
//! change, its events and a `NOTIFY` on the board's channel commit together (see
//! `postgres_tx.rs`). Claims lock their row with `FOR UPDATE SKIP LOCKED`; time comes from the
//! database clock, read again with every task row so a run never starts before the one it
//! follows ended. [`PostgresStore::subscribe`] wakes idle dispatchers through `LISTEN`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::domain::{
    Attachment, Board, BoardSlug, BoardStats, Comment, Event, EventId, Lease, Link, ModelError,
    NewAttachment, NewBoard, NewTask, Run, RunId, Task, TaskFilter, TaskId, TaskLinks, TaskPatch,
    Timestamp, WorkerId,
};
use crate::store::backend::Backend;
use crate::store::board_methods::board_methods;
use crate::store::ops;
use crate::store::postgres_error::{PgTxError, pg_error};
use crate::store::postgres_rows::board_from_row;
use crate::store::postgres_schema::{self, MigrateOutcome};
use crate::store::postgres_tx::{PgTx, TxResult, channel_name};
use crate::store::schedule_methods::schedule_methods;
use crate::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Created, Failure, FailureOutcome, Reclaimed, Store,
    StoreError, StoreFuture, TaskContext, Transitioned,
};

/// How a [`PostgresStore`] uses the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// Most connections this handle keeps open at once.
    pub max_connections: usize,
    /// How long a call waits for a free pooled connection, or for a new one to open, before
    /// failing with [`StoreError::Unavailable`].
    pub connection_wait: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            max_connections: 16,
            connection_wait: Duration::from_secs(30),
        }
    }
}

/// The PostgreSQL board store. Cheap to clone; clones share the pool and the listening
/// connections.
///
/// A connection that breaks is dropped from the pool and replaced on the next call; the call
/// that saw it break fails with [`StoreError::Unavailable`], which is transient.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    config: tokio_postgres::Config,
    listeners: Listeners,
}

/// Per board, the sender of the one listening connection every subscriber shares. A sender
/// with no receiver left belongs to a listener that has stopped, or is stopping.
type Listeners = Arc<Mutex<HashMap<BoardSlug, broadcast::Sender<BoardChanged>>>>;

/// Notices a listener holds for a subscriber that has not read them; one further behind is
/// told to re-read the board.
const NOTICE_QUEUE: usize = 64;

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .finish_non_exhaustive()
    }
}

/// A notice that something on a board changed: a transaction that wrote events committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardChanged {
    /// The board.
    pub board: BoardSlug,
    /// The newest event id the change wrote; `None` after the listening connection was
    /// re-established, when notices may have been missed and the board should be re-read.
    pub last_event_id: Option<EventId>,
}

/// "Board changed" notices for one board, from [`PostgresStore::subscribe`]. Every
/// subscription to a board from one store (and its clones) shares one listening connection;
/// dropping the last of them stops it.
#[derive(Debug)]
pub struct BoardChanges {
    rx: broadcast::Receiver<BoardChanged>,
    board: BoardSlug,
}

impl BoardChanges {
    /// The next notice; `None` only once the listener has stopped for good.
    pub async fn recv(&mut self) -> Option<BoardChanged> {
        match self.rx.recv().await {
            Ok(notice) => Some(notice),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(self.reread()),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// A notice already waiting, without waiting for one.
    pub fn try_recv(&mut self) -> Option<BoardChanged> {
        match self.rx.try_recv() {
            Ok(notice) => Some(notice),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(self.reread()),
            Err(_) => None,
        }
    }

    /// Notices were missed while this subscriber lagged: it must re-read the board.
    fn reread(&self) -> BoardChanged {
        BoardChanged {
            board: self.board.clone(),
            last_event_id: None,
        }
    }
}

const URL_HINT: &str = "send a URL like postgres://user:password@host:5432/dbname";

/// Server-side limits set on each connection unless the URL gives its own `options`.
const SESSION_GUARDS: &str = "-c idle_in_transaction_session_timeout=60s -c lock_timeout=30s";

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/dbname`),
    /// creates or migrates the schema, and makes sure the `default` board exists.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| ModelError::BadField {
                    field: "store URL",
                    why: format!("it does not parse ({e}); {URL_HINT}"),
                })?;
        PostgresStore::connect_with(config, PostgresOptions::default()).await
    }

    /// [`PostgresStore::connect`] with a parsed configuration and explicit options.
    pub async fn connect_with(
        mut config: tokio_postgres::Config,
        opts: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("troupe-kanban");
        }
        if config.get_options().is_none() {
            // Every board commit takes the board row's lock. A client that stalls inside a
            // transaction (a starved task, a half-open socket) would hold it and freeze every
            // host on the board; the server ends such a session instead, and a lock wait that
            // long comes back as `Busy`, which callers retry.
            config.options(SESSION_GUARDS);
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // A closed connection is noticed and replaced without a round trip.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(opts.max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(opts.connection_wait))
            .create_timeout(Some(opts.connection_wait))
            .build()
            .map_err(|e| StoreError::Backend {
                board: BoardSlug::default_board(),
                source: Box::new(e),
            })?;
        let store = PostgresStore {
            pool,
            config,
            listeners: Listeners::default(),
        };
        let default = BoardSlug::default_board();
        {
            let mut client = store.client(&default).await?;
            let outcome = postgres_schema::migrate(&mut client)
                .await
                .map_err(|e| pg_error(&default, e))?;
            if let MigrateOutcome::TooNew(found) = outcome {
                return Err(StoreError::SchemaTooNew {
                    board: default,
                    found,
                    supported: postgres_schema::SCHEMA_VERSION,
                });
            }
        }
        match store.create_board(&NewBoard::new(default.clone())).await {
            Ok(_) | Err(StoreError::BoardExists { .. }) => {}
            // Another process created it at the same moment.
            Err(StoreError::Busy { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(store)
    }

    /// A pooled connection; failures to get one are transient.
    async fn client(&self, board: &BoardSlug) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => pg_error(board, e),
            other => StoreError::Unavailable {
                board: board.clone(),
                reason: format!("no database connection available: {other}"),
            },
        })
    }

    /// Listens for changes on `board`: a notice arrives each time a transaction that wrote
    /// events on it commits, from any host. The listening connection reconnects with backoff
    /// on its own; after a reconnect a notice with no event id says "re-read the board".
    ///
    /// Subscriptions to one board share one listening connection, started by the first: a
    /// process with many feeds and dispatchers on a board holds one, not one each.
    pub fn subscribe(&self, board: &BoardSlug) -> BoardChanges {
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Receivers are only made under this lock, so a sender with none left stays without:
        // its listener is stopping and a new one takes its place.
        let rx = match listeners.get(board) {
            Some(tx) if tx.receiver_count() > 0 => tx.subscribe(),
            _ => {
                let (tx, rx) = broadcast::channel(NOTICE_QUEUE);
                tokio::spawn(listen(self.config.clone(), board.clone(), tx.clone()));
                listeners.insert(board.clone(), tx);
                rx
            }
        };
        BoardChanges {
            rx,
            board: board.clone(),
        }
    }
}

/// Keeps one connection LISTENing on the board's channel and forwards its notices.
async fn listen(
    config: tokio_postgres::Config,
    board: BoardSlug,
    out: broadcast::Sender<BoardChanged>,
) {
    let channel = channel_name(&board);
    let mut backoff = Duration::from_millis(100);
    let mut reconnecting = false;
    loop {
        if out.receiver_count() == 0 {
            return;
        }
        let (client, mut conn) = match config.connect(NoTls).await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(board = %board, error = %e, retry_in = ?backoff,
                    "kanban listener could not connect to PostgreSQL");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        // The channel name is built from a validated slug, so quoting it is enough.
        let sql = format!("LISTEN \"{channel}\"");
        let listen_cmd = client.batch_execute(&sql);
        tokio::pin!(listen_cmd);
        let mut listening = false;
        loop {
            tokio::select! {
                r = &mut listen_cmd, if !listening => match r {
                    Ok(()) => {
                        listening = true;
                        backoff = Duration::from_millis(100);
                        if reconnecting {
                            let _ = out.send(BoardChanged { board: board.clone(), last_event_id: None });
                        }
                        tracing::debug!(board = %board, "kanban listener is listening");
                    }
                    Err(e) => {
                        tracing::warn!(board = %board, error = %e, "LISTEN failed");
                        break;
                    }
                },
                m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if let Some(notice) = parse_notice(n.payload(), &board) {
                            // A subscriber too far behind is told to re-read instead.
                            let _ = out.send(notice);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(board = %board, error = %e, "kanban listener lost its connection");
                        break;
                    }
                    None => break,
                },
                _ = out.closed() => return,
            }
        }
        reconnecting = true;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Reads a `slug:last_event_id` payload; notices for other boards sharing the channel are
/// ignored.
fn parse_notice(payload: &str, board: &BoardSlug) -> Option<BoardChanged> {
    let (slug, id) = payload.rsplit_once(':')?;
    if slug != board.as_str() {
        return None;
    }
    Some(BoardChanged {
        board: board.clone(),
        last_event_id: id.parse().ok().map(EventId),
    })
}

/// Runs `$body` (an expression using the transaction view `$t`, a `&PgTx`) in one transaction
/// on `$board`, appends its events and commits if it succeeded (see [`board_methods`]). In
/// `link` mode, a task missing here but present on another board is reported as a
/// cross-board link.
macro_rules! in_tx {
    ($self:ident, $board:expr, link, |$t:ident| $body:expr) => {
        in_tx!(@run $self, $board, true, |$t| $body)
    };
    ($self:ident, $board:expr, $mode:ident, |$t:ident| $body:expr) => {
        in_tx!(@run $self, $board, false, |$t| $body)
    };
    (@run $self:ident, $board:expr, $linking:expr, |$t:ident| $body:expr) => {{
        let board: BoardSlug = $board.clone();
        let linking: bool = $linking;
        Box::pin(async move {
            let mut client = $self.client(&board).await?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| pg_error(&board, e))?;
            let view = PgTx::open(&tx, &board)
                .await
                .map_err(|e| e.into_store(&board))?;
            let $t = &view;
            let out: TxResult<_> = async {
                $t.board_row().await?;
                let v = match $body.await {
                    Err(PgTxError::Store(StoreError::TaskNotFound { board, id })) if linking => {
                        return Err(match $t.other_board_of(&id).await? {
                            Some(other_board) => StoreError::CrossBoardLink {
                                board,
                                task: id,
                                other_board,
                            },
                            None => StoreError::TaskNotFound { board, id },
                        }
                        .into());
                    }
                    other => other?,
                };
                $t.finish().await?;
                Ok(v)
            }
            .await;
            drop(view);
            // On error the transaction rolls back when dropped.
            let v = out.map_err(|e| e.into_store(&board))?;
            tx.commit().await.map_err(|e| pg_error(&board, e))?;
            Ok::<_, StoreError>(v)
        })
    }};
}

impl Store for PostgresStore {
    fn list_boards(&self, include_archived: bool) -> StoreFuture<'_, Vec<Board>> {
        Box::pin(async move {
            let any = BoardSlug::default_board();
            let client = self.client(&any).await?;
            let rows = client
                .query(
                    "SELECT slug, name, description, created_at, archived_at FROM kanban_boards \
                     WHERE $1 OR archived_at IS NULL ORDER BY slug",
                    &[&include_archived],
                )
                .await
                .map_err(|e| pg_error(&any, e))?;
            rows.iter().map(|r| board_from_row(r, &any)).collect()
        })
    }

    fn create_board(&self, board: &NewBoard) -> StoreFuture<'_, Board> {
        let new = board.clone();
        Box::pin(async move {
            let slug = &new.slug;
            let mut client = self.client(slug).await?;
            let tx = client.transaction().await.map_err(|e| pg_error(slug, e))?;
            let t = PgTx::open(&tx, slug)
                .await
                .map_err(|e| e.into_store(slug))?;
            let out: TxResult<Board> = async {
                let b = ops::create_board(&t, &new).await?;
                t.finish().await?;
                Ok(b)
            }
            .await;
            drop(t);
            let b = out.map_err(|e| e.into_store(slug))?;
            tx.commit().await.map_err(|e| pg_error(slug, e))?;
            Ok(b)
        })
    }

    fn delete_board(&self, slug: &BoardSlug) -> StoreFuture<'_, ()> {
        if slug.is_default() {
            return Box::pin(async {
                Err(StoreError::DefaultBoardProtected { action: "deleted" })
            });
        }
        let logged = slug.clone();
        let fut: StoreFuture<'_, ()> = in_tx!(self, slug, write, |t| t.delete_board());
        Box::pin(async move {
            fut.await?;
            tracing::info!(board = %logged, "board deleted");
            Ok(())
        })
    }

    board_methods!(in_tx);
    schedule_methods!(in_tx);
}

#[cfg(all(test, feature = "test-suite"))]
mod tests {
    use super::*;
    use crate::store::test_cluster;

    /// A claim whose transaction began before the task came back to `ready` (it finds the task
    /// in a later statement) starts its run no earlier than the last run ended; a claim that
    /// used the time its transaction began would start the new run before the old one ended.
    #[tokio::test]
    async fn a_claim_begun_before_its_task_came_back_starts_after_the_last_run_ended() {
        let Some(url) = test_cluster::cluster_url("PostgreSQL claim clock test") else {
            return;
        };
        let db = test_cluster::fresh_database(&url, "kanban_clock").await;
        let store = PostgresStore::connect_with(db.config.clone(), PostgresOptions::default())
            .await
            .unwrap();
        let board = BoardSlug::default_board();
        let id = store
            .create_task(&board, &NewTask::new("comes back"))
            .await
            .unwrap()
            .task
            .id;
        let brief = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::from_millis(1));
        store.claim_next(&board, &brief).await.unwrap().unwrap();

        // The second claimer's transaction begins (and reads the clock) now...
        let mut client = store.client(&board).await.unwrap();
        let tx = client.transaction().await.unwrap();
        let view = PgTx::open(&tx, &board).await.unwrap();
        // ...the lease lapses and the task is put back while that transaction is open...
        tokio::time::sleep(Duration::from_millis(30)).await;
        let reclaimed = store.reclaim_expired(&board).await.unwrap();
        assert_eq!(reclaimed.len(), 1, "the lapsed lease is reclaimed");
        // ...and only then does it look for a ready task.
        let claim = ops::claim_next(&view, &ClaimSpec::new(WorkerId::local()))
            .await
            .unwrap()
            .expect("the task is ready again");
        view.finish().await.unwrap();
        drop(view);
        tx.commit().await.unwrap();

        let runs = store.runs(&board, &id).await.unwrap();
        assert_eq!(runs.len(), 2, "{runs:?}");
        let first_ended = runs[0].ended_at.expect("the reclaimed run ended");
        assert_eq!(runs[1].id, claim.lease.run_id);
        assert!(
            runs[1].started_at >= first_ended,
            "run {} started at {:?}, before run {} ended at {first_ended:?}",
            runs[1].id.0,
            runs[1].started_at,
            runs[0].id.0
        );
    }
}
