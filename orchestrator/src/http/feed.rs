//! The WebSocket event feed of a board: `GET /api/plugins/kanban/events?since=<event id>`.
//! It sends every event with an id above the cursor, oldest first, one JSON text message each,
//! then follows new ones as they commit. Since the store makes an event visible only once every
//! smaller id is, a client that reconnects with `since=` the last id it saw misses nothing and
//! sees nothing twice. A PostgreSQL store wakes the feed with `LISTEN/NOTIFY`; others are polled.
//!
//! However many clients follow a board, one watcher per board does the looking ([`BoardHeads`]):
//! it learns the board's newest event id and publishes it; each client sleeps until the id
//! moves past its cursor and only then reads its events. The watcher ends with its last client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use troupe_tools::sync::lock;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde::Deserialize;
use troupe_kanban::store::PostgresStore;
use troupe_kanban::{BoardSlug, EventId};

use super::HttpState;
use super::errors::{ApiError, ApiQuery};

/// Events read from the store per query; a longer backlog is sent in several reads.
pub const FEED_BATCH: usize = 500;
/// How often a PostgreSQL-woken feed also looks on its own, in case a notice was lost.
pub const LISTEN_FALLBACK_POLL: Duration = Duration::from_secs(2);

/// How the feed learns that a board has new events.
#[derive(Clone)]
pub enum FeedWake {
    /// Look every so often (the SQLite store, or any store that cannot notify).
    Poll(Duration),
    /// Wait for the database's notices (PostgreSQL `LISTEN/NOTIFY`), polling rarely as a
    /// safety net.
    Postgres(Arc<PostgresStore>),
}

impl std::fmt::Debug for FeedWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeedWake::Poll(every) => f.debug_tuple("Poll").field(every).finish(),
            FeedWake::Postgres(_) => f.write_str("Postgres"),
        }
    }
}

/// The newest event id of each followed board, kept by one watcher task per board.
#[derive(Debug, Default)]
pub struct BoardHeads {
    boards: Mutex<HashMap<BoardSlug, Weak<Head>>>,
}

/// One board's newest event id, as its watcher last saw it.
#[derive(Debug)]
struct Head {
    newest: tokio::sync::watch::Sender<EventId>,
}

impl BoardHeads {
    /// A receiver of `board`'s newest event id, starting its watcher if none runs. The watcher
    /// stops once every receiver (and the returned handle) is gone.
    fn follow(
        &self,
        state: &HttpState,
        board: &BoardSlug,
        from: EventId,
    ) -> (Arc<Head>, tokio::sync::watch::Receiver<EventId>) {
        let mut boards = lock(&self.boards);
        if let Some(head) = boards.get(board).and_then(Weak::upgrade) {
            let rx = head.newest.subscribe();
            return (head, rx);
        }
        let (newest, rx) = tokio::sync::watch::channel(from);
        let head = Arc::new(Head { newest });
        boards.retain(|_, h| h.strong_count() > 0);
        boards.insert(board.clone(), Arc::downgrade(&head));
        tokio::spawn(watch_board(
            state.clone(),
            board.clone(),
            Arc::downgrade(&head),
            from,
        ));
        (head, rx)
    }

    /// Boards with a watcher running now.
    pub fn watched(&self) -> usize {
        lock(&self.boards)
            .values()
            .filter(|h| h.strong_count() > 0)
            .count()
    }
}

/// The watcher of one board: finds its newest event id (polling, or woken by PostgreSQL) and
/// publishes it while anyone follows.
async fn watch_board(state: HttpState, board: BoardSlug, head: Weak<Head>, mut newest: EventId) {
    let (mut changes, poll) = match &state.wake {
        FeedWake::Poll(every) => (None, *every),
        FeedWake::Postgres(store) => (Some(store.subscribe(&board)), LISTEN_FALLBACK_POLL),
    };
    let mut closing = state.closing.clone();
    loop {
        // Read ahead from the newest id known until the board has nothing newer.
        loop {
            match state.store.events_since(&board, newest, FEED_BATCH).await {
                Ok(events) => {
                    let full = events.len() == FEED_BATCH;
                    if let Some(last) = events.last() {
                        newest = last.id;
                    }
                    if !full {
                        break;
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, %board, "feed watcher read failed; retrying");
                    break;
                }
            }
        }
        {
            let Some(head) = head.upgrade() else { return };
            head.newest.send_if_modified(|old| {
                let moved = *old != newest;
                *old = newest;
                moved
            });
            if head.newest.receiver_count() == 0 {
                // Nobody follows: leave, unless someone subscribed meanwhile (subscribing
                // happens under this lock, so the check cannot miss them).
                let mut boards = lock(&state.heads.boards);
                if head.newest.receiver_count() == 0 {
                    if boards
                        .get(&board)
                        .is_some_and(|w| w.ptr_eq(&Arc::downgrade(&head)))
                    {
                        boards.remove(&board);
                    }
                    return;
                }
            }
        }
        if *closing.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            notice = async {
                match changes.as_mut() {
                    Some(changes) => changes.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if notice.is_none() {
                    // The listener stopped for good: fall back to polling.
                    changes = None;
                }
            }
            _ = closing.changed() => {}
        }
    }
}

/// `GET /events` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
    /// Send events after this id; live events only (from the newest now) when absent.
    #[serde(default)]
    pub since: Option<i64>,
    /// The bearer token, for browsers that cannot set headers on a WebSocket (checked by the
    /// auth middleware, read here only so the query parses).
    #[serde(default)]
    pub token: Option<String>,
}

/// Handler of `GET /events`: checks the board and cursor, then upgrades to a WebSocket.
pub async fn upgrade(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<FeedQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let board = match query
        .board
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        None => state.default_board.clone(),
        Some(raw) => {
            BoardSlug::parse(raw).map_err(|e| ApiError::bad_request("bad_board", e.to_string()))?
        }
    };
    let since = match query.since {
        Some(id) if id < 0 => {
            return Err(ApiError::bad_request(
                "bad_since",
                format!(
                    "since={id} is negative; send the id of the last event you saw, or 0 for all"
                ),
            ));
        }
        Some(id) => EventId(id),
        None => state.store.stats(&board).await?.last_event_id,
    };
    // Unknown boards are refused before the upgrade, with a status the client can read.
    state.store.board(&board).await?;
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::bad_request(
            "not_a_websocket",
            format!(
                "this route is a WebSocket feed ({}); connect with a WebSocket client",
                rejection.body_text()
            ),
        )
    })?;
    Ok(upgrade.on_upgrade(move |socket| follow(socket, state, board, since)))
}

/// Sends events after `cursor` until the client leaves or the server shuts down.
async fn follow(mut socket: WebSocket, state: HttpState, board: BoardSlug, mut cursor: EventId) {
    let mut closing = state.closing.clone();
    let (_head, mut newest) = state.heads.follow(&state, &board, cursor);
    // The first pass reads whatever is after the cursor; later ones only when the board moved.
    let mut look = true;
    loop {
        if *closing.borrow() {
            let _ = socket
                .send(Message::Close(Some(CloseFrame {
                    code: axum::extract::ws::close_code::AWAY,
                    reason: "the server is shutting down; reconnect with since=<last id>".into(),
                })))
                .await;
            return;
        }
        if look {
            match state.store.events_since(&board, cursor, FEED_BATCH).await {
                Ok(events) => {
                    let full = events.len() == FEED_BATCH;
                    for event in events {
                        let text = match serde_json::to_string(&event) {
                            Ok(text) => text,
                            Err(error) => {
                                tracing::error!(%error, id = event.id.0, "event could not be encoded");
                                return;
                            }
                        };
                        if socket.send(Message::Text(text.into())).await.is_err() {
                            return;
                        }
                        cursor = event.id;
                    }
                    if full {
                        continue;
                    }
                }
                Err(error) if error.is_transient() => {
                    tracing::debug!(%error, "feed read failed; retrying");
                }
                Err(error) => {
                    let body = ApiError::from(error).body().to_string();
                    let _ = socket.send(Message::Text(body.into())).await;
                    let _ = socket
                        .send(Message::Close(Some(CloseFrame {
                            code: axum::extract::ws::close_code::ERROR,
                            reason: "the board could not be read".into(),
                        })))
                        .await;
                    return;
                }
            }
        }
        // Wait for news: the board's head moving past the cursor, the client, or shutdown.
        tokio::select! {
            changed = newest.changed() => {
                if changed.is_err() {
                    // Cannot happen while `_head` holds the sender; stop rather than spin.
                    return;
                }
                look = *newest.borrow_and_update() > cursor;
            }
            incoming = socket.recv() => {
                look = false;
                match incoming {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    // Pings are answered by the socket itself; anything else the client sends
                    // is ignored, since the feed is one-way.
                    Some(Ok(_)) => {}
                }
            }
            _ = closing.changed() => {}
        }
    }
}
