//! Session routes of the HTTP API over the [`Troupe`](crate::Troupe) API: create, list, show
//! and close a session, send it a message, stream its events over SSE or read its transcript,
//! list and answer pending approvals, stop it (soft or hard). Each session opened here keeps a
//! log of its events (numbered from 1, the SSE `id`; written to the session store when there is
//! one), so a client that connects late or reconnects with `Last-Event-ID` misses nothing, and
//! `troupe serve` reopens the sessions a previous run left open ([`reopen_stored`]).
//!
//! This file holds the [`SessionTable`] (one router task for every session's events, and the
//! idle sweep) and each session's turn state; `routes.rs` opens, lists, messages and closes,
//! `events.rs` holds the [`EventLog`] and its SSE and transcript routes, `approvals.rs` the
//! approvals and `/stop`, `stored.rs` the list of every stored session (dashboard scope).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_tools::sync::lock;

use serde_json::{Value, json};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::session::SessionHandle;

use super::HttpState;
use super::errors::ApiError;

mod approvals;
mod events;
mod routes;
pub mod stored;
#[cfg(test)]
mod tests;

pub use crate::settings::serve::{DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE};
pub use approvals::{AnswerRequest, StopRequest, all_approvals, answer, session_approvals, stop};
pub(crate) use approvals::{answer_pending, list_pending};
pub use events::{EventLog, EventsQuery, Logged, TranscriptQuery, events, transcript};
pub use routes::{
    CreateSession, SendMessage, close, create, list, reopen_stored, send_message, show,
};

/// Events kept per session; older ones are dropped (a reconnect that far behind starts at the
/// oldest kept event, and is told so by the gap in ids).
pub const SESSION_LOG_CAP: usize = 10_000;

/// Events of sessions not (yet) registered with the router, kept so a session registered just
/// after it opened still gets its first events.
const UNROUTED_BACKLOG: usize = 4_096;

/// The sessions opened over HTTP.
#[derive(Debug)]
pub struct SessionTable {
    entries: Mutex<HashMap<String, Arc<SessionEntry>>>,
    /// Which log each session's events go to; fed by one router task.
    routes: Arc<Mutex<Routes>>,
    /// Whether the router task runs.
    routing: std::sync::OnceLock<()>,
    /// (max sessions, idle timeout).
    limits: Mutex<(usize, Duration)>,
}

impl Default for SessionTable {
    fn default() -> Self {
        SessionTable {
            entries: Mutex::new(HashMap::new()),
            routes: Arc::new(Mutex::new(Routes::default())),
            routing: std::sync::OnceLock::new(),
            limits: Mutex::new((DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE)),
        }
    }
}

/// The router's table: the logs each session's events go to (its own, and those of the HTTP
/// sessions it descends from), and recent events of sessions it does not know yet.
#[derive(Debug, Default)]
struct Routes {
    /// Session id -> the logs its events are written to.
    logs: HashMap<String, Vec<Arc<EventLog>>>,
    /// Session id -> its own log (sessions opened over HTTP).
    own: HashMap<String, Arc<EventLog>>,
    unrouted: std::collections::VecDeque<SessionEvent>,
}

impl Routes {
    /// Writes one event to the logs it belongs to, or keeps it for a session not known yet.
    fn deliver(&mut self, event: SessionEvent) {
        // A subagent (at any depth) reports under its own id: it joins the logs of every HTTP
        // session on its agent path.
        if let EventKind::SessionStarted { agent_path, .. } = &event.kind {
            let mut joined: Vec<Arc<EventLog>> = vec![];
            for ancestor in agent_path.iter().filter(|a| **a != event.session_id) {
                for log in self.logs.get(ancestor).into_iter().flatten() {
                    if !joined.iter().any(|l| Arc::ptr_eq(l, log)) {
                        joined.push(Arc::clone(log));
                    }
                }
            }
            if !joined.is_empty() {
                let list = self.logs.entry(event.session_id.clone()).or_default();
                for log in joined {
                    if !list.iter().any(|l| Arc::ptr_eq(l, &log)) {
                        list.push(log);
                    }
                }
            }
        }
        let Some(logs) = self.logs.get(&event.session_id).cloned() else {
            self.unrouted.push_back(event);
            if self.unrouted.len() > UNROUTED_BACKLOG {
                self.unrouted.pop_front();
            }
            return;
        };
        let ends = matches!(event.kind, EventKind::SessionEnded { .. });
        let own = self.own.get(&event.session_id).cloned();
        for log in &logs {
            log.push(event.clone());
        }
        if ends && let Some(own) = own {
            // The session's own end completes its log; it and its family leave the table.
            own.end();
            let id = event.session_id.clone();
            self.own.remove(&id);
            self.logs.retain(|sid, list| {
                list.retain(|l| !Arc::ptr_eq(l, &own));
                sid != &id && !list.is_empty()
            });
        }
    }

    /// Registers the log of session `id` and hands it what arrived before.
    fn register(&mut self, id: &str, log: &Arc<EventLog>) {
        self.own.insert(id.to_string(), Arc::clone(log));
        self.logs
            .entry(id.to_string())
            .or_default()
            .push(Arc::clone(log));
        let earlier: Vec<SessionEvent> = std::mem::take(&mut self.unrouted).into();
        for event in earlier {
            self.deliver(event);
        }
    }
}

impl SessionTable {
    fn get(&self, id: &str) -> Result<Arc<SessionEntry>, ApiError> {
        let entry = lock(&self.entries).get(id).cloned().ok_or_else(|| {
            ApiError::not_found(
                "session_not_found",
                format!("there is no open session {id}; create one with POST /api/sessions"),
            )
        })?;
        *lock(&entry.last_used) = std::time::Instant::now();
        Ok(entry)
    }

    /// Sets the cap on open sessions and the idle time after which one is closed.
    pub fn set_limits(&self, max_sessions: usize, idle: Duration) {
        *lock(&self.limits) = (max_sessions.max(1), idle);
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts the router (once): one subscription to the troupe's events for all sessions,
    /// each event written only to the logs of its own session and the sessions it descends
    /// from; the same task closes sessions left idle.
    fn start_router(&self, state: &HttpState) {
        self.routing.get_or_init(|| {
            let mut all = state.troupe.events();
            let routes = Arc::clone(&self.routes);
            let sessions = Arc::clone(&state.sessions);
            let troupe = state.troupe.clone();
            tokio::spawn(async move {
                let mut sweep = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        event = all.next() => match event {
                            Some(event) => lock(&routes).deliver(event),
                            None => break,
                        },
                        _ = sweep.tick() => {
                            for id in sessions.idle_sessions() {
                                tracing::debug!(session = %id, "closing an idle HTTP session");
                                let _ = troupe.close_session(&id).await;
                                lock(&sessions.entries).remove(&id);
                            }
                        }
                    }
                }
            });
        });
    }

    /// Sessions unused for longer than the idle timeout: no turn running, nobody reading
    /// their events.
    fn idle_sessions(&self) -> Vec<String> {
        let idle = lock(&self.limits).1;
        lock(&self.entries)
            .iter()
            .filter(|(_, e)| {
                !e.turns.is_busy()
                    && e.log.tick.receiver_count() == 0
                    && lock(&e.last_used).elapsed() >= idle
            })
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// One session opened over HTTP.
#[derive(Debug)]
struct SessionEntry {
    handle: SessionHandle,
    log: Arc<EventLog>,
    /// Whether a message is being worked on, and the latest outcome (shared with the log).
    turns: Arc<TurnState>,
    /// When a request last named this session.
    last_used: Mutex<std::time::Instant>,
}

/// Whether a session works on a message sent through this table, and its latest outcome. Shared
/// with the session's event log, which settles both when the session's own `final` event is
/// logged, before any client can read that event: a client that saw `final` and sends the next
/// message at once is never told the session is busy.
#[derive(Debug, Default)]
pub struct TurnState {
    /// 0 when idle, else the number of the message being worked on.
    busy: AtomicU64,
    /// Numbers messages.
    next: AtomicU64,
    /// The latest turn's outcome, and whether it is the whole one (from the turn's answer)
    /// rather than what its `final` event said.
    last_outcome: Mutex<Option<(Value, bool)>>,
}

/// Turn ids are time-ordered (uuid v7), so the greater is the later turn.
fn turn_of(outcome: &Value) -> &str {
    outcome["turn_id"].as_str().unwrap_or("")
}

impl TurnState {
    /// Marks a message as being worked on; `None` when one already is.
    fn begin(&self) -> Option<u64> {
        let token = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        self.busy
            .compare_exchange(0, token, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| token)
    }

    /// The message `token` is answered: its whole outcome is kept (unless a later turn's is
    /// there already), and the session is idle unless another message began since.
    fn finish(&self, token: u64, outcome: Option<Value>) {
        if let Some(outcome) = outcome {
            let mut last = lock(&self.last_outcome);
            if last
                .as_ref()
                .is_none_or(|(l, _)| turn_of(l) <= turn_of(&outcome))
            {
                *last = Some((outcome, true));
            }
        }
        let _ = self
            .busy
            .compare_exchange(token, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The session's own `final` event was logged: the turn is over, and what the event says
    /// stands as its outcome until the whole one arrives.
    fn settle(&self, data: &Value) {
        let mut last = lock(&self.last_outcome);
        let keep = last.as_ref().is_some_and(|(l, whole)| {
            turn_of(l) > turn_of(data) || (*whole && turn_of(l) == turn_of(data))
        });
        if !keep {
            *last = Some((
                json!({
                    "turn_id": data["turn_id"],
                    "text": data["text"],
                    "status": data["status"],
                    "usage": data["usage"],
                }),
                false,
            ));
        }
        drop(last);
        self.busy.store(0, Ordering::SeqCst);
    }

    /// Sets the outcome (a message the session refused or lost).
    fn record(&self, outcome: Value) {
        *lock(&self.last_outcome) = Some((outcome, true));
    }

    fn last_outcome(&self) -> Option<Value> {
        lock(&self.last_outcome).as_ref().map(|(o, _)| o.clone())
    }

    fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst) != 0
    }
}

/// A session of the table as the OpenAI-compatible routes ([`super::openai`]) drive it: the
/// same entry, turn state and event log as a session opened with `POST /api/sessions`.
#[derive(Debug, Clone)]
pub(crate) struct TableSession(Arc<SessionEntry>);

impl TableSession {
    /// The session.
    pub(crate) fn handle(&self) -> &SessionHandle {
        &self.0.handle
    }

    /// Marks a turn as begun; `None` when the session works on one already.
    pub(crate) fn begin_turn(&self) -> Option<u64> {
        self.0.turns.begin()
    }

    /// The turn `token` ended (with its outcome when it had one).
    pub(crate) fn finish_turn(
        &self,
        token: u64,
        outcome: Option<&troupe_actors::session::TurnOutcome>,
    ) {
        self.0
            .turns
            .finish(token, outcome.map(routes::outcome_json));
    }
}

impl SessionTable {
    /// The open session `id`, marked as used now.
    pub(crate) fn session(&self, id: &str) -> Option<TableSession> {
        self.get(id).ok().map(TableSession)
    }

    /// The cap on open sessions, when it is reached.
    pub(crate) fn full(&self) -> Option<usize> {
        let max = lock(&self.limits).0;
        (self.len() >= max).then_some(max)
    }
}

/// What a session opened with `request` is given (as `POST /api/sessions` builds it).
pub(crate) fn options_for(
    state: &HttpState,
    request: &CreateSession,
    trace_parent: Option<String>,
) -> Result<crate::api::SessionOptions, ApiError> {
    routes::session_options(state, request, trace_parent)
}

/// Opens a session with `options` and adds it to the table, with its event log.
pub(crate) async fn open_in_table(
    state: &HttpState,
    options: crate::api::SessionOptions,
) -> Result<TableSession, ApiError> {
    routes::open_entry(state, options).await.map(TableSession)
}
