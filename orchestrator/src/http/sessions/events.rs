//! Each session's event log, and the routes that read it: the SSE stream and the transcript.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_tools::sync::lock;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_actors::events::SessionEvent;

use super::super::HttpState;
use super::{SESSION_LOG_CAP, TurnState};

use super::super::errors::{ApiError, ApiPath, ApiQuery};

/// A session's events, numbered from 1, with a watch that ticks on each new one. With a session
/// store, each event is written there too, and readers see it only once it is durable: a client
/// that saw event `n` finds the same `n` after a restart, never a new event under that number.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<LogInner>,
    /// Ticks with each new event; routes subscribe to it to follow the log.
    pub(super) tick: Arc<tokio::sync::watch::Sender<u64>>,
    /// Events up to this number are stored (all of them when there is no store).
    durable: Arc<std::sync::atomic::AtomicU64>,
    /// Where the log is written: the store and the log's id (its session's).
    store: Option<(crate::sessions::SessionStore, String)>,
    /// The session whose own `final` events settle its turn state, and that state.
    turns: std::sync::OnceLock<(String, Arc<TurnState>)>,
}

/// One logged event, as the stream sends it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// The session that emitted it.
    session_id: String,
    /// Its `type`.
    pub(super) kind: String,
    /// The event as JSON text.
    data: String,
}

impl Logged {
    fn of(event: &SessionEvent) -> Logged {
        let data = serde_json::to_value(event).unwrap_or_else(|e| json!({"error": e.to_string()}));
        Logged::from_value(&data)
    }

    fn from_value(data: &Value) -> Logged {
        Logged {
            session_id: data["session_id"].as_str().unwrap_or_default().to_string(),
            kind: data["type"].as_str().unwrap_or("event").to_string(),
            data: data.to_string(),
        }
    }
}

#[derive(Debug, Default)]
struct LogInner {
    /// Number of the first event still kept.
    first: u64,
    events: std::collections::VecDeque<Logged>,
    ended: bool,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            inner: Mutex::new(LogInner {
                first: 1,
                ..LogInner::default()
            }),
            tick: Arc::new(tokio::sync::watch::channel(0).0),
            durable: Arc::default(),
            store: None,
            turns: std::sync::OnceLock::new(),
        }
    }
}

impl EventLog {
    /// A log written to `store` under `log_id`, going on from the events stored there.
    pub fn stored(
        store: crate::sessions::SessionStore,
        log_id: &str,
        earlier: Vec<(u64, Value)>,
    ) -> EventLog {
        let log = EventLog {
            store: Some((store, log_id.to_string())),
            ..EventLog::default()
        };
        {
            let mut inner = lock(&log.inner);
            if let Some((first, _)) = earlier.first() {
                inner.first = *first;
            }
            let mut last = inner.first.saturating_sub(1);
            for (number, data) in earlier {
                // A hole (never expected) keeps the numbers: later events go after the last.
                while last + 1 < number {
                    last += 1;
                    inner.events.push_back(Logged {
                        session_id: String::new(),
                        kind: "missing".into(),
                        data: json!({"type": "missing"}).to_string(),
                    });
                }
                inner.events.push_back(Logged::from_value(&data));
                last = number;
            }
            log.durable.store(last, Ordering::SeqCst);
        }
        log
    }

    /// Has the `final` events of session `session_id` (not its subagents') settle `turns`.
    pub fn watch_turns(&self, session_id: &str, turns: Arc<TurnState>) {
        let _ = self.turns.set((session_id.to_string(), turns));
    }

    /// Appends an event; returns its number.
    pub fn push(&self, event: SessionEvent) -> u64 {
        // The log is complete only when its writer says so (`end`): a subagent's
        // `session_ended` passes through it too.
        let logged = Logged::of(&event);
        if logged.kind == "final"
            && let Some((own, turns)) = self.turns.get()
            && logged.session_id == *own
            && let Ok(data) = serde_json::from_str::<Value>(&logged.data)
        {
            // Settled before any client can read the event.
            turns.settle(&data);
        }
        let mut inner = lock(&self.inner);
        inner.events.push_back(logged.clone());
        if inner.events.len() > SESSION_LOG_CAP {
            inner.events.pop_front();
            inner.first += 1;
        }
        let last = inner.first + inner.events.len() as u64 - 1;
        match &self.store {
            Some((store, log_id)) => {
                // Queued in order while the lock is held, so the store's order is the log's.
                let (durable, tick) = (Arc::clone(&self.durable), Arc::clone(&self.tick));
                store.log_event(log_id, last, logged.data, move || {
                    durable.fetch_max(last, Ordering::SeqCst);
                    tick.send_replace(last);
                });
                drop(inner);
            }
            None => {
                self.durable.fetch_max(last, Ordering::SeqCst);
                drop(inner);
                self.tick.send_replace(last);
            }
        }
        last
    }

    /// Marks the log complete (the session's event source ended).
    pub fn end(&self) {
        lock(&self.inner).ended = true;
        self.tick.send_modify(|_| {});
    }

    /// Events numbered above `after` that are durable, with their numbers, and whether the log
    /// is complete (every event of it read).
    pub fn after(&self, after: u64) -> (Vec<(u64, Logged)>, bool) {
        let durable = self.durable.load(Ordering::SeqCst);
        let inner = lock(&self.inner);
        // A cursor past the end (even u64::MAX) yields nothing rather than overflowing.
        let start = after.max(inner.first.saturating_sub(1));
        let skip = usize::try_from(start.saturating_sub(inner.first.saturating_sub(1)))
            .unwrap_or(usize::MAX);
        let events: Vec<(u64, Logged)> = inner
            .events
            .iter()
            .skip(skip)
            .enumerate()
            .map(|(i, e)| (start.saturating_add(1 + i as u64), e.clone()))
            .take_while(|(number, _)| *number <= durable)
            .collect();
        let last = inner.first + inner.events.len() as u64 - 1;
        (events, inner.ended && durable >= last)
    }

    /// Whether session `session_id` logged a `turn_started` after event number `after`.
    pub fn turn_started_after(&self, session_id: &str, after: u64) -> bool {
        let inner = lock(&self.inner);
        let skip = usize::try_from(after.saturating_sub(inner.first.saturating_sub(1)))
            .unwrap_or(usize::MAX);
        inner
            .events
            .iter()
            .skip(skip)
            .any(|e| e.session_id == session_id && e.kind == "turn_started")
    }

    /// How many events were ever logged.
    pub fn len(&self) -> u64 {
        let inner = lock(&self.inner);
        inner.first + inner.events.len() as u64 - 1
    }

    /// Whether nothing was logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `GET /api/sessions/{id}/events` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Start after this event number (as `Last-Event-ID` does); from the first when absent.
    #[serde(default)]
    pub after: Option<u64>,
}

/// Handler of `GET /api/sessions/{id}/events`: the session's events as SSE, each with its
/// number as `id` and its type as `event`; ends after `session_ended`.
pub async fn events(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let entry = state.sessions.get(&id)?;
    let header_cursor = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "bad_last_event_id",
                        "Last-Event-ID must be the number of an event this stream sent",
                    )
                })?,
        ),
    };
    let cursor = header_cursor.or(query.after).unwrap_or(0);
    let last = entry.log.len();
    if cursor > last {
        return Err(ApiError::bad_request(
            "bad_cursor",
            format!(
                "event {cursor} does not exist yet: this session has logged {last} events; \
                 send `after` or Last-Event-ID from 0 to {last}"
            ),
        ));
    }
    let log = Arc::clone(&entry.log);
    let ticks = log.tick.subscribe();
    let closing = state.closing.clone();
    let stream = futures::stream::unfold(
        (
            log,
            cursor,
            ticks,
            closing,
            std::collections::VecDeque::new(),
            false,
        ),
        |(log, mut cursor, mut ticks, mut closing, mut pending, mut done)| async move {
            loop {
                if let Some((number, event)) = pending.pop_front() {
                    cursor = number;
                    let sse = to_sse(number, &event);
                    return Some((Ok(sse), (log, cursor, ticks, closing, pending, done)));
                }
                if done || *closing.borrow() {
                    return None;
                }
                // Mark the tick seen before reading, so an event logged after the read wakes us.
                ticks.borrow_and_update();
                let (events, ended) = log.after(cursor);
                if !events.is_empty() {
                    pending.extend(events);
                    continue;
                }
                if ended {
                    done = true;
                    continue;
                }
                tokio::select! {
                    changed = ticks.changed() => if changed.is_err() { done = true },
                    _ = closing.changed() => {}
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

fn to_sse(number: u64, event: &Logged) -> SseEvent {
    SseEvent::default()
        .id(number.to_string())
        .event(event.kind.clone())
        .data(event.data.clone())
}

/// `GET /api/sessions/{id}/transcript` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptQuery {
    /// The subagents' conversations too.
    #[serde(default)]
    pub tree: bool,
}

/// Handler of `GET /api/sessions/{id}/transcript`: a stored session's messages (with its
/// subagents' when `tree`), whether or not it is still open, by its whole id. With the API
/// token, only sessions opened over HTTP and their subagents: a `/v1` client, which holds that
/// token too, never reads a chat's or a board worker's conversation. With the dashboard token,
/// any stored session.
pub async fn transcript(
    State(state): State<HttpState>,
    scope: Option<axum::Extension<super::super::auth::Scope>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<TranscriptQuery>,
) -> Result<Json<Value>, ApiError> {
    let every_session = scope.is_some_and(|s| s.0 == super::super::auth::Scope::Dashboard);
    let Some(store) = state.troupe.session_store() else {
        return Err(ApiError::not_found(
            "sessions_not_kept",
            "this server keeps no sessions (sessions.persist is false in its troupe.yaml)",
        ));
    };
    let not_found = || {
        ApiError::not_found(
            "session_not_found",
            format!(
                "no session {id} was opened over HTTP on this server's store; give a whole session id (the dashboard token reads every stored session)"
            ),
        )
    };
    let stored_error = |e: crate::sessions::SessionStoreError| match e {
        crate::sessions::SessionStoreError::Database { .. } => ApiError::internal(e.to_string()),
        _ => not_found(),
    };
    let sessions = store
        .transcript(&id, query.tree)
        .await
        .map_err(stored_error)?;
    let Some(first) = sessions.first() else {
        return Err(not_found());
    };
    let root = match first.summary.root_id == first.summary.id {
        true => first.summary.clone(),
        false => {
            store
                .load(&first.summary.root_id)
                .await
                .map_err(stored_error)?
                .summary
        }
    };
    if first.summary.id != id || (root.origin != "http" && !every_session) {
        return Err(not_found());
    }
    let sessions: Vec<Value> = sessions.iter().map(|s| s.to_json()).collect();
    Ok(Json(json!({ "sessions": sessions })))
}
