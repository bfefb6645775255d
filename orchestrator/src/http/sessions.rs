//! Session routes of the HTTP API over the [`Troupe`](crate::Troupe) API: create a session,
//! send it a message, stream its events over SSE, list and answer pending approvals, stop it
//! (soft or hard) and close it. Each session opened here keeps an in-memory log of its events
//! (numbered from 1, the SSE `id`), so a client that connects late or reconnects with
//! `Last-Event-ID` misses nothing.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_tools::sync::lock;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::model::{Script, ScriptedProvider};
use troupe_actors::session::{SessionConfig, SessionHandle, TurnOutcome};
use troupe_actors::supervisor::{ApprovalChoice, PendingApproval};
use troupe_tools::ViewSpec;

use super::HttpState;
use super::errors::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::api::SessionOptions;

/// Events kept per session; older ones are dropped (a reconnect that far behind starts at the
/// oldest kept event, and is told so by the gap in ids).
pub const SESSION_LOG_CAP: usize = 10_000;

/// Sessions open at once over HTTP when `serve.max_sessions` does not say.
pub const DEFAULT_MAX_SESSIONS: usize = 1_000;
/// A session nobody used for this long is closed when `serve.session_idle_timeout_ms` does not
/// say otherwise.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(3_600);
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

/// A session's events, numbered from 1, with a watch that ticks on each new one. With a session
/// store, each event is written there too, and readers see it only once it is durable: a client
/// that saw event `n` finds the same `n` after a restart, never a new event under that number.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<LogInner>,
    tick: Arc<tokio::sync::watch::Sender<u64>>,
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
    kind: String,
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

/// `POST /api/sessions`: what a new session is made from (kept with the session, so a
/// restarted server reopens it the same way).
#[derive(Debug, Default, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// A scripted model (the format of `troupe chat --script`, as JSON); the server's
    /// configured model when absent.
    #[serde(default)]
    pub script: Option<Value>,
    /// Toolsets the session may use; the profile's, else all of the server's, when absent.
    #[serde(default)]
    pub toolsets: Option<Vec<String>>,
    /// A profile under `profiles:` of the server's troupe.yaml: its model, toolsets and system
    /// prompt (the other fields override them).
    #[serde(default)]
    pub profile: Option<String>,
    /// A system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Tool rounds allowed per turn.
    #[serde(default)]
    pub max_iterations: Option<u32>,
}

/// Handler of `POST /api/sessions`.
pub async fn create(
    State(state): State<HttpState>,
    headers: axum::http::HeaderMap,
    ApiJson(request): ApiJson<CreateSession>,
) -> Result<Response, ApiError> {
    // The caller's trace: the session's span goes under it.
    let trace_parent = super::traceparent(&headers);
    let options = session_options(&state, &request, trace_parent)?;
    let max_sessions = lock(&state.sessions.limits).0;
    if state.sessions.len() >= max_sessions {
        return Err(ApiError::too_many(
            "too_many_sessions",
            format!(
                "{max_sessions} sessions are open, as many as serve.max_sessions allows; close one with DELETE /api/sessions/{{id}} (idle ones close on their own)"
            ),
        ));
    }
    let entry = open_entry(&state, options).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"session_id": entry.handle.id(), "agent_path": entry.handle.agent_path()})),
    )
        .into_response())
}

/// What a session is opened with, from the request that creates it.
fn session_options(
    state: &HttpState,
    request: &CreateSession,
    trace_parent: Option<String>,
) -> Result<SessionOptions, ApiError> {
    let request = request.clone();
    let origin = troupe_actors::journal::Origin {
        kind: "http".into(),
        options: serde_json::to_value(&request).unwrap_or(Value::Null),
    };
    let profile = match request.profile.as_deref().map(str::trim) {
        None => None,
        Some(name) => Some(state.troupe.profile(name).ok_or_else(|| {
            let known = state.troupe.profile_names();
            ApiError::bad_request(
                "unknown_profile",
                format!(
                    "there is no profile {name:?} on this server; send one of: {}",
                    if known.is_empty() {
                        "(none: the server's troupe.yaml has no profiles: section)".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?),
    };
    let mut options = SessionOptions::configured().with_origin(origin);
    if let Some(name) = request.profile.as_deref().map(str::trim) {
        options = options.with_profile(name);
    }
    match (&request.script, &state.provider) {
        (Some(script), _) => {
            let script: Script = serde_json::from_value(script.clone()).map_err(|e| {
                ApiError::bad_request(
                    "bad_script",
                    format!(
                        "`script` is not a valid script ({e}); send {{\"turns\": [{{\"text\": \"...\"}}]}}"
                    ),
                )
            })?;
            options = options.with_provider(Arc::new(ScriptedProvider::new(script)));
        }
        (None, _) if profile.is_some() => {}
        (None, Some(provider)) => options = options.with_provider(Arc::clone(provider)),
        (None, None) => {
            return Err(ApiError::bad_request(
                "no_model",
                "this server has no model configured; send a `script` or a `profile`, or start \
                 troupe serve with model.base_url set in troupe.yaml",
            ));
        }
    }
    if let Some(toolsets) = request.toolsets {
        let registry = state.troupe.registry();
        let known = registry.toolsets();
        let expanded = registry
            .expand_toolsets(&toolsets)
            .map_err(|e| ApiError::bad_request("bad_toolsets", e.to_string()))?;
        let mut unknown: Vec<&String> = toolsets
            .iter()
            .chain(expanded.iter())
            .filter(|t| !known.contains(*t))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if !unknown.is_empty() {
            return Err(ApiError::bad_request(
                "bad_toolsets",
                format!(
                    "no tools are provided as {}; send toolsets from: {}",
                    unknown
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let view = registry
            .view(ViewSpec::toolsets(toolsets))
            .map_err(|e| ApiError::bad_request("bad_toolsets", e.to_string()))?;
        options = options.with_view(view);
    }
    if request.system_prompt.is_some() || request.max_iterations.is_some() || trace_parent.is_some()
    {
        let mut config: SessionConfig = match profile {
            Some(profile) => profile.session.clone(),
            None => state.troupe.session_defaults(),
        };
        if let Some(header) = &trace_parent {
            config.trace_parent = troupe_actors::trace::TraceSpan::from_traceparent(header);
        }
        if let Some(prompt) = request.system_prompt {
            config.system_prompt = Some(prompt);
        }
        if let Some(max) = request.max_iterations {
            if max == 0 {
                return Err(ApiError::bad_request(
                    "bad_max_iterations",
                    "max_iterations must be at least 1",
                ));
            }
            config.max_iterations = max;
        }
        options = options.with_config(config);
    }
    Ok(options)
}

/// Opens a session with a log of its events and adds it to the table. The router subscribes
/// to the troupe-wide stream before the first session opens and keeps events of sessions it
/// does not know yet, so the session's opening events are logged too. A reopened session's log
/// goes on from its stored events.
async fn open_entry(
    state: &HttpState,
    options: SessionOptions,
) -> Result<Arc<SessionEntry>, ApiError> {
    state.sessions.start_router(state);
    let reopened = options.restore.as_ref().map(|r| r.id.clone());
    let handle = state.troupe.open_session(options).await?;
    let log = match state.troupe.session_store() {
        Some(store) => {
            let earlier = match &reopened {
                Some(id) => store
                    .events(id, SESSION_LOG_CAP)
                    .await
                    .map_err(|e| ApiError::internal(e.to_string()))?,
                None => Vec::new(),
            };
            EventLog::stored(store.clone(), handle.id(), earlier)
        }
        None => EventLog::default(),
    };
    let turns = Arc::new(TurnState::default());
    log.watch_turns(handle.id(), Arc::clone(&turns));
    let log = Arc::new(log);
    lock(&state.sessions.routes).register(handle.id(), &log);
    let entry = Arc::new(SessionEntry {
        handle: handle.clone(),
        log,
        turns,
        last_used: Mutex::new(std::time::Instant::now()),
    });
    lock(&state.sessions.entries).insert(handle.id().to_string(), Arc::clone(&entry));
    Ok(entry)
}

/// Reopens the sessions this server's store holds open (created over HTTP, not closed by their
/// user), with their ids and event numbering; a turn one stopped inside goes on: calls that were
/// waiting for approval are asked again, the others are marked interrupted. Returns how many
/// were reopened; one that cannot be is logged and left stored.
pub async fn reopen_stored(state: &HttpState) -> usize {
    let Some(store) = state.troupe.session_store().cloned() else {
        return 0;
    };
    let query = crate::sessions::ListQuery {
        origin: Some("http".into()),
        open_only: true,
        ..Default::default()
    };
    let stored = match store.list(query).await {
        Ok(stored) => stored,
        Err(error) => {
            tracing::error!(%error, "could not read the stored sessions to reopen them");
            return 0;
        }
    };
    let mut reopened = 0;
    for summary in stored {
        let result = async {
            let session = store
                .load(&summary.id)
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let request: CreateSession =
                serde_json::from_value(session.options.clone()).map_err(|e| {
                    ApiError::internal(format!("its creation request is unreadable: {e}"))
                })?;
            let options = session_options(state, &request, None)?.resuming(session.restore(true));
            open_entry(state, options).await
        }
        .await;
        match result {
            Ok(entry) => {
                reopened += 1;
                // Busy before the first request can arrive: a message must not overtake it.
                if let Some(token) = entry.turns.begin() {
                    tokio::spawn(resume_turn(entry, token));
                }
            }
            Err(error) => {
                tracing::warn!(session = %summary.id, error = %error.message, "a stored session could not be reopened")
            }
        }
    }
    reopened
}

/// Goes on with the turn a reopened session stopped inside, as a message sent without `wait`
/// (the message `token` of its turn state).
async fn resume_turn(entry: Arc<SessionEntry>, token: u64) {
    match entry.handle.resume_turn().await {
        Ok(outcome) => entry
            .turns
            .finish(token, outcome.as_ref().map(outcome_json)),
        Err(error) => {
            record_failure(&entry, &error.to_string());
            entry.turns.finish(token, None);
        }
    }
}

fn describe(entry: &SessionEntry) -> Value {
    json!({
        "session_id": entry.handle.id(),
        "agent_path": entry.handle.agent_path(),
        "busy": entry.turns.is_busy(),
        "events": entry.log.len(),
        "last_outcome": entry.turns.last_outcome(),
        "usage": entry.handle.spent(),
        "budget": entry.handle.budget(),
    })
}

/// Handler of `GET /api/sessions`.
pub async fn list(State(state): State<HttpState>) -> Json<Value> {
    let mut sessions: Vec<Value> = lock(&state.sessions.entries)
        .values()
        .map(|e| describe(e))
        .collect();
    sessions.sort_by(|a, b| a["session_id"].as_str().cmp(&b["session_id"].as_str()));
    Json(json!({ "sessions": sessions }))
}

/// Handler of `GET /api/sessions/{id}`.
pub async fn show(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let entry = state.sessions.get(&id)?;
    Ok(Json(describe(&entry)))
}

/// Handler of `DELETE /api/sessions/{id}`.
pub async fn close(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    state.sessions.get(&id)?;
    state.troupe.close_session(&id).await?;
    lock(&state.sessions.entries).remove(&id);
    Ok(Json(json!({"session_id": id, "closed": true})))
}

/// `POST /api/sessions/{id}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The user's message.
    pub text: String,
    /// Wait for the turn to end and answer with its outcome (default: answer 202 at once and
    /// let the outcome arrive on the event stream as `final`).
    #[serde(default)]
    pub wait: bool,
}

/// Handler of `POST /api/sessions/{id}/messages`.
pub async fn send_message(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(message): ApiJson<SendMessage>,
) -> Result<Response, ApiError> {
    // The caller's trace: the turn's span goes under it.
    let trace_parent = super::traceparent(&headers)
        .map(|header| troupe_actors::trace::TraceSpan::from_traceparent(&header));
    if message.text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_message",
            "`text` is empty; send the user's message",
        ));
    }
    let entry = state.sessions.get(&id)?;
    // `/<command>` goes to the plugin that registered it (or `/help`), not to the model.
    if let Some(reply) = state.commands.dispatch(&message.text, Some(&id)).await {
        return Ok(Json(json!({
            "session_id": id,
            "command": reply.command,
            "plugin": reply.owner,
            "ok": reply.ok,
            "text": reply.text,
        }))
        .into_response());
    }
    let Some(token) = entry.turns.begin() else {
        return Err(ApiError::conflict(
            "session_busy",
            format!(
                "session {id} is still working on a message; wait for its `final` event or stop it"
            ),
        ));
    };
    // Events already logged: a `turn_started` after these is the turn this message began.
    let seen = entry.log.len();
    let mut ticks = entry.log.tick.subscribe();
    let mut turn = {
        let entry = Arc::clone(&entry);
        tokio::spawn(async move {
            let result = match trace_parent {
                Some(parent) => entry.handle.send_in_trace(message.text, parent).await,
                None => entry.handle.send(message.text).await,
            };
            entry
                .turns
                .finish(token, result.as_ref().ok().map(outcome_json));
            result
        })
    };
    if !message.wait {
        // Answer 202 only once the message is known to have started a turn: a session busy
        // with something this table did not start (a background delegation's results, say)
        // refuses the message, and that refusal must reach the client, not vanish.
        let finished = loop {
            ticks.borrow_and_update();
            if entry.log.turn_started_after(entry.handle.id(), seen) {
                break None;
            }
            tokio::select! {
                result = &mut turn => break Some(result),
                changed = ticks.changed() => if changed.is_err() {
                    break Some((&mut turn).await);
                },
            }
        };
        match finished {
            Some(Ok(Err(error))) => return Err(crate::api::TroupeError::from(error).into()),
            Some(Err(error)) => {
                return Err(ApiError::internal(format!(
                    "the turn's task failed: {error}"
                )));
            }
            Some(Ok(Ok(_))) => {}
            // Answered 202 while the turn runs: an error it ends with is kept for the client.
            None => {
                let entry = Arc::clone(&entry);
                tokio::spawn(async move {
                    match turn.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => record_failure(&entry, &error.to_string()),
                        Err(error) => {
                            record_failure(&entry, &format!("the turn's task failed: {error}"))
                        }
                    }
                });
            }
        }
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({
                "session_id": id,
                "accepted": true,
                "events": format!("/api/sessions/{id}/events"),
            })),
        )
            .into_response());
    }
    match turn.await {
        Ok(Ok(outcome)) => Ok(Json(outcome_json(&outcome)).into_response()),
        Ok(Err(error)) => Err(crate::api::TroupeError::from(error).into()),
        Err(error) => Err(ApiError::internal(format!(
            "the turn's task failed: {error}"
        ))),
    }
}

/// Keeps a message the session refused or lost: as the session's last outcome, and as a
/// `final` event with status `failed` on its stream, so a client that was answered 202 learns
/// of it.
fn record_failure(entry: &SessionEntry, error: &str) {
    entry.turns.record(json!({
        "turn_id": null,
        "text": "",
        "status": "failed",
        "error": error,
    }));
    entry.log.push(SessionEvent {
        session_id: entry.handle.id().to_string(),
        kind: EventKind::Final {
            turn_id: String::new(),
            text: format!("the message was not handled: {error}"),
            status: "failed".into(),
            usage: Default::default(),
        },
    });
}

fn outcome_json(outcome: &TurnOutcome) -> Value {
    json!({
        "turn_id": outcome.turn_id,
        "text": outcome.text,
        "status": outcome.status.as_str(),
        "model_requests": outcome.model_requests,
        "error": outcome.error,
        "usage": outcome.spend,
        "calls": outcome.calls.iter().map(|call| json!({
            "call_id": call.call_id,
            "tool": call.tool,
            "underlying_tool": call.underlying_tool,
            "status": call.status,
            "duration_ms": u64::try_from(call.duration.as_millis()).unwrap_or(u64::MAX),
        })).collect::<Vec<_>>(),
    })
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
/// subagents' when `tree`), whether or not it is still open. Only sessions opened over HTTP and
/// their subagents, by their whole id: a client never reads a chat's or a board worker's
/// conversation through the server.
pub async fn transcript(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<TranscriptQuery>,
) -> Result<Json<Value>, ApiError> {
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
                "no session {id} was opened over HTTP on this server's store; give a whole session id"
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
    if first.summary.id != id || root.origin != "http" {
        return Err(not_found());
    }
    let sessions: Vec<Value> = sessions.iter().map(|s| s.to_json()).collect();
    Ok(Json(json!({ "sessions": sessions })))
}

/// Handler of `GET /api/approvals`: every pending request, oldest first.
pub async fn all_approvals(State(state): State<HttpState>) -> Result<Json<Value>, ApiError> {
    let pending = state.troupe.pending_approvals().await?;
    Ok(Json(json!({ "approvals": pending })))
}

/// Handler of `GET /api/sessions/{id}/approvals`: the session's pending requests (its
/// subagents' included), oldest first.
pub async fn session_approvals(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    state.sessions.get(&id)?;
    let pending: Vec<PendingApproval> = state
        .troupe
        .pending_approvals()
        .await?
        .into_iter()
        .filter(|p| p.session_id == id || p.agent_path.iter().any(|s| s == &id))
        .collect();
    Ok(Json(json!({ "approvals": pending })))
}

/// `POST /api/approvals/{request_id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// `once`, `session`, `always` or `deny`.
    pub choice: String,
    /// With `deny`: why, for the model.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Handler of `POST /api/approvals/{request_id}`.
pub async fn answer(
    State(state): State<HttpState>,
    ApiPath(request_id): ApiPath<String>,
    ApiJson(body): ApiJson<AnswerRequest>,
) -> Result<Json<Value>, ApiError> {
    let choice = match body.choice.trim().to_ascii_lowercase().as_str() {
        "once" => ApprovalChoice::Once,
        "session" => ApprovalChoice::Session,
        "always" => ApprovalChoice::Always,
        "deny" => ApprovalChoice::Deny {
            reason: body.reason.clone(),
        },
        other => {
            return Err(ApiError::bad_request(
                "bad_choice",
                format!("choice {other:?} is not one of once, session, always, deny"),
            ));
        }
    };
    if body.reason.is_some() && !matches!(choice, ApprovalChoice::Deny { .. }) {
        return Err(ApiError::bad_request(
            "bad_choice",
            "`reason` goes only with choice `deny`",
        ));
    }
    if !state.troupe.answer(&request_id, choice).await? {
        return Err(ApiError::not_found(
            "approval_not_pending",
            format!(
                "approval request {request_id} is not pending (already answered, timed out, or \
                 never asked); GET /api/approvals lists the pending ones"
            ),
        ));
    }
    Ok(Json(
        json!({"request_id": request_id, "answered": body.choice.trim().to_ascii_lowercase()}),
    ))
}

/// `POST /api/sessions/{id}/stop` body (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// `soft` (the default: the running turn ends at the next safe point) or `hard` (the turn
    /// and every descendant's end now).
    #[serde(default)]
    pub mode: Option<String>,
}

/// Handler of `POST /api/sessions/{id}/stop`. The body may be empty (a soft stop).
pub async fn stop(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: StopRequest = if body.iter().all(u8::is_ascii_whitespace) {
        StopRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(
                "bad_json",
                format!("the body is not a stop request ({e}); send {{\"mode\": \"soft\"}} or {{\"mode\": \"hard\"}}"),
            )
        })?
    };
    let hard = match request.mode.as_deref().map(str::trim) {
        None | Some("soft") => false,
        Some("hard") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_stop_mode",
                format!("stop mode {other:?} is neither soft nor hard"),
            ));
        }
    };
    state.sessions.get(&id)?;
    let stopped = state.troupe.stop(&id, hard).await?;
    Ok(Json(json!({
        "session_id": id,
        "mode": if hard { "hard" } else { "soft" },
        "turns_stopped": stopped,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u32) -> SessionEvent {
        SessionEvent {
            session_id: "s".into(),
            kind: EventKind::TurnStarted {
                turn_id: format!("t{n}"),
            },
        }
    }

    #[test]
    fn the_log_numbers_from_one_and_replays_after_a_cursor() {
        let log = EventLog::default();
        assert!(log.is_empty());
        assert_eq!(log.push(event(1)), 1);
        assert_eq!(log.push(event(2)), 2);
        assert_eq!(log.push(event(3)), 3);
        let (events, ended) = log.after(1);
        assert_eq!(
            events.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert!(!ended);
        assert!(log.after(3).0.is_empty());
        log.end();
        assert!(log.after(3).1);
    }

    #[test]
    fn a_cursor_past_the_end_yields_nothing_and_never_overflows() {
        let log = EventLog::default();
        assert!(log.after(u64::MAX).0.is_empty());
        log.push(event(1));
        assert!(log.after(u64::MAX).0.is_empty());
        assert!(log.after(1).0.is_empty());
        assert_eq!(log.after(0).0.len(), 1);
        assert!(log.turn_started_after("s", 0));
        assert!(!log.turn_started_after("s", 1));
        assert!(!log.turn_started_after("other", 0));
    }

    #[tokio::test]
    async fn a_stored_log_goes_on_from_its_stored_events() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sessions::SessionStore::open_sqlite(&dir.path().join("s.db")).unwrap();
        let log = EventLog::stored(store.clone(), "s", Vec::new());
        assert_eq!(log.push(event(1)), 1);
        assert_eq!(log.push(event(2)), 2);
        store.flush().await;
        assert_eq!(log.after(0).0.len(), 2, "both are shown once stored");
        // A restart: the log is rebuilt from the store and numbers on.
        let earlier = store.events("s", SESSION_LOG_CAP).await.unwrap();
        let reopened = EventLog::stored(store.clone(), "s", earlier);
        assert_eq!(reopened.len(), 2);
        assert_eq!(reopened.push(event(3)), 3);
        store.flush().await;
        let (events, _) = reopened.after(1);
        let numbers: Vec<u64> = events.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [2, 3]);
        assert_eq!(events[0].1.kind, "turn_started");
        assert!(reopened.turn_started_after("s", 2));
    }

    #[test]
    fn a_turn_is_settled_by_its_final_event_and_its_answer_in_either_order() {
        let turns = TurnState::default();
        let token = turns.begin().unwrap();
        assert!(turns.begin().is_none(), "one message at a time");
        // The event first: idle at once, the event's fields stand until the answer.
        turns.settle(&json!({"turn_id": "t1", "text": "done", "status": "completed"}));
        assert!(!turns.is_busy());
        assert!(turns.last_outcome().unwrap().get("calls").is_none());
        turns.finish(
            token,
            Some(json!({"turn_id": "t1", "status": "completed", "calls": []})),
        );
        assert!(turns.last_outcome().unwrap().get("calls").is_some());
        // The answer first: the later event does not replace it.
        let token = turns.begin().unwrap();
        turns.finish(
            token,
            Some(json!({"turn_id": "t2", "status": "completed", "calls": []})),
        );
        turns.settle(&json!({"turn_id": "t2", "status": "completed"}));
        assert!(turns.last_outcome().unwrap().get("calls").is_some());
        // An older turn's answer never replaces a newer turn's outcome, nor frees a new message.
        let old = turns.begin().unwrap();
        turns.settle(&json!({"turn_id": "t3", "status": "completed"}));
        let new = turns.begin().unwrap();
        turns.finish(old, Some(json!({"turn_id": "t3", "calls": []})));
        assert!(turns.is_busy(), "the new message is still being worked on");
        turns.finish(new, None);
        assert!(!turns.is_busy());
    }

    #[test]
    fn the_log_drops_its_oldest_past_the_cap() {
        let log = EventLog::default();
        for n in 0..(SESSION_LOG_CAP as u32 + 5) {
            log.push(event(n));
        }
        let (events, _) = log.after(0);
        assert_eq!(events.len(), SESSION_LOG_CAP);
        assert_eq!(events[0].0, 6);
        assert_eq!(log.len(), SESSION_LOG_CAP as u64 + 5);
    }
}
