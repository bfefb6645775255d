//! Durable sessions: the [`SessionStore`] every session of a troupe writes its steps to (the
//! [`Journal`] of `troupe_actors`), and reads for `troupe chat --resume`, `troupe sessions` and
//! `troupe serve`'s restart.
//!
//! Writes go through one writer in order; a batch of them is one transaction, so a step is
//! stored whole or not at all. Everything written is redacted with the receipts' rules first
//! (message text, event bodies, what a session was opened with), troupe's own keys and the
//! serve token included in every encoding the masking knows: the store never holds them. The
//! backend is SQLite under the troupe home by default ([`SqliteSessions`]), PostgreSQL
//! ([`PostgresSessions`]) when `sessions.store` (else `kanban.store`) names a database.

mod activity;
mod postgres;
mod search_tool;
mod sqlite;
mod worker_runs;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;
use troupe_actors::journal::{
    CallPhase, DelegationState, Durable, Journal, OpenedSession, Restore,
};
use troupe_actors::model::ChatMessage;
use troupe_actors::usage::Spend;

pub use activity::{ACTIVITY_SLICE, Fingerprint, SessionActivity};
pub use postgres::PostgresSessions;
pub use search_tool::{SESSION_SEARCH, session_search_tool};
pub use sqlite::SqliteSessions;
pub use worker_runs::StoredRunHistory;

use crate::settings::{SessionSettings, StoreLocation};

/// Writes committed in one transaction at most.
const MAX_BATCH: usize = 512;

/// The file under the troupe home that holds sessions when `sessions.store` does not say.
pub use crate::settings::SESSIONS_FILE as DEFAULT_FILE;

/// What went wrong reading or writing sessions.
#[derive(Debug, thiserror::Error)]
pub enum SessionStoreError {
    /// The database refused or failed.
    #[error("session store {path}: {message}")]
    Database {
        /// Where the store is.
        path: String,
        /// What failed.
        message: String,
    },
    /// No stored session has this id (or prefix).
    #[error("no stored session matches {0:?}; `troupe sessions list` shows them")]
    NotFound(String),
    /// A prefix too short to name a session.
    #[error("{0:?} is too short to name a session; give at least 4 characters of its id")]
    TooShort(String),
    /// A prefix matches more than one session.
    #[error("{prefix:?} matches {count} sessions; give more of the id")]
    Ambiguous {
        /// What was given.
        prefix: String,
        /// How many matched.
        count: usize,
    },
}

/// One write, in the writer's order.
#[derive(Debug)]
pub(crate) enum Write {
    Opened {
        session: OpenedSession,
        at: i64,
    },
    Step {
        session_id: String,
        first: usize,
        messages: Vec<ChatMessage>,
        spent: Spend,
        at: i64,
        /// Set when this write fails, so the session writes everything again.
        lost: Arc<AtomicBool>,
    },
    Phase {
        session_id: String,
        model_call_id: String,
        phase: CallPhase,
    },
    Event {
        log_id: String,
        seq: u64,
        body: String,
    },
    Delegation {
        session_id: String,
        delegation_id: String,
        state: DelegationState,
    },
    Closed {
        session_id: String,
        at: i64,
    },
    /// Resolves once every write before it is committed.
    Ack(Ack),
}

impl Write {
    /// What to do with a write the writer will never see (it has stopped): the caller must not
    /// wait for it forever.
    fn undeliverable(self) {
        self.failed();
        if let Write::Ack(ack) = self {
            ack.fire();
        }
    }

    /// Tells whoever depends on this write that it failed.
    fn failed(&self) {
        if let Write::Step { lost, .. } = self {
            lost.store(true, Ordering::SeqCst);
        }
    }

    /// Which session (or log) a write is for, for a log line.
    fn describe(&self) -> String {
        match self {
            Write::Opened { session, .. } => format!("open {}", session.id),
            Write::Step { session_id, .. } => format!("step of {session_id}"),
            Write::Phase { session_id, .. } => format!("call of {session_id}"),
            Write::Event { log_id, seq, .. } => format!("event {seq} of {log_id}"),
            Write::Delegation { session_id, .. } => format!("delegation of {session_id}"),
            Write::Closed { session_id, .. } => format!("close of {session_id}"),
            Write::Ack(_) => "ack".to_string(),
        }
    }
}

/// What a caller waits on, or is told through, once its write is committed.
pub(crate) enum Ack {
    Channel(oneshot::Sender<()>),
    Call(Box<dyn FnOnce() + Send + Sync>),
}

impl std::fmt::Debug for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ack")
    }
}

impl Ack {
    fn fire(self) {
        match self {
            Ack::Channel(tx) => {
                let _ = tx.send(());
            }
            Ack::Call(call) => call(),
        }
    }
}

/// A stored session, as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    /// Its id.
    pub id: String,
    /// Its parent's id, for a subagent.
    pub parent_id: Option<String>,
    /// The top of its tree.
    pub root_id: String,
    /// 0 for a top-level session.
    pub depth: u32,
    /// `chat`, `http`, `worker`, `subagent` or `api`.
    pub origin: String,
    /// Its model.
    pub model: String,
    /// Its first user message, cut short.
    pub title: String,
    /// `open` or `closed`.
    pub status: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    /// When its latest step was written.
    pub updated_at: i64,
    /// Messages stored.
    pub messages: u64,
    /// What it spent, its subagents included.
    pub usage: Spend,
}

/// A stored session, whole.
#[derive(Debug, Clone)]
pub struct StoredSession {
    /// Its row.
    pub summary: SessionSummary,
    /// Session ids from the root down to it.
    pub agent_path: Vec<String>,
    /// What reopening it needs (see `troupe_actors::journal::Origin`).
    pub options: Value,
    /// Its messages, in order.
    pub messages: Vec<ChatMessage>,
    /// How far its calls without a result got, by the provider's call id.
    pub phases: HashMap<String, CallPhase>,
    /// Background delegations at work when it was last written.
    pub delegations_running: Vec<String>,
    /// Background results that arrived and were not read: `(delegation id, text)`.
    pub delegations_arrived: Vec<(String, String)>,
}

impl StoredSession {
    /// The session as JSON: its row, its place in the tree and its messages.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "session": self.summary,
            "agent_path": self.agent_path,
            "messages": self.messages,
        })
    }

    /// What the session reopens from; `ask_again`: calls that waited for approval are asked
    /// again (by `troupe serve`) rather than noted as not run.
    pub fn restore(&self, ask_again: bool) -> Restore {
        Restore {
            id: self.summary.id.clone(),
            conversation: self.messages.clone(),
            spent: self.summary.usage,
            awaiting_approval: self
                .phases
                .iter()
                .filter(|(_, p)| **p == CallPhase::AwaitingApproval)
                .map(|(id, _)| id.clone())
                .collect(),
            never_started: self
                .phases
                .iter()
                .filter(|(_, p)| **p == CallPhase::AwaitingMasked)
                .map(|(id, _)| id.clone())
                .collect(),
            delegations_running: self.delegations_running.clone(),
            delegations_arrived: self.delegations_arrived.clone(),
            ask_again,
        }
    }
}

/// Which sessions to list.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Subagents too (top-level sessions only by default).
    pub all: bool,
    /// Only these origins.
    pub origin: Option<String>,
    /// Only open ones.
    pub open_only: bool,
    /// At most this many, newest first.
    pub limit: Option<usize>,
    /// Only sessions after this one in the newest-first order: a page's last row, so the next
    /// page goes on from it (keyset paging, no offset to scan past).
    pub before: Option<ListCursor>,
    /// Only the board workers' sessions of this task (its runs'), as their options name it.
    pub task: Option<String>,
}

/// A place in the newest-first order of stored sessions: a session's `updated_at` and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    /// The row's `updated_at`, in milliseconds.
    pub updated_at: i64,
    /// The row's id (breaks ties between rows updated in the same millisecond).
    pub id: String,
}

impl ListCursor {
    /// The cursor just past `summary`.
    pub fn after(summary: &SessionSummary) -> ListCursor {
        ListCursor {
            updated_at: summary.updated_at,
            id: summary.id.clone(),
        }
    }

    /// As text for a URL: `<updated_at>.<id>`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.updated_at, self.id)
    }

    /// Reads [`ListCursor::encode`]'s text; `None` when it is not one.
    pub fn decode(text: &str) -> Option<ListCursor> {
        let (at, id) = text.split_once('.')?;
        let updated_at = at.parse().ok()?;
        (!id.is_empty() && id.len() <= 200).then(|| ListCursor {
            updated_at,
            id: id.to_string(),
        })
    }
}

/// One match of a search over stored messages.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The session.
    pub session_id: String,
    /// Its top-level session.
    pub root_id: String,
    /// The message's position.
    pub seq: u64,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// The matching text around the words found.
    pub snippet: String,
}

/// Which sessions a search may show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchScope {
    /// The caller's own tree.
    pub root: String,
    /// Trees whose top-level session has this origin, too (`chat`: the local user's history).
    pub origin: Option<String>,
}

/// The sessions of a troupe, durable. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SessionStore {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    Sqlite(Arc<SqliteSessions>),
    Postgres(Arc<PostgresSessions>),
}

impl SessionStore {
    /// Opens (creating when missing) the SQLite store at `path`.
    pub fn open_sqlite(path: &Path) -> Result<SessionStore, SessionStoreError> {
        Ok(SessionStore {
            backend: Backend::Sqlite(Arc::new(SqliteSessions::open(path)?)),
        })
    }

    /// Connects to the PostgreSQL store at `url`, creating its tables when missing. Its writer
    /// runs on the current tokio runtime.
    pub async fn connect_postgres(url: &str) -> Result<SessionStore, SessionStoreError> {
        let shown = StoreLocation::Postgres(url.to_string())
            .describe()
            .trim_start_matches("PostgreSQL store at ")
            .to_string();
        Ok(SessionStore {
            backend: Backend::Postgres(Arc::new(PostgresSessions::connect(url, shown).await?)),
        })
    }

    /// Opens the store at `location`.
    pub async fn open(location: &StoreLocation) -> Result<SessionStore, SessionStoreError> {
        match location {
            StoreLocation::Sqlite(path) => SessionStore::open_sqlite(path),
            StoreLocation::Postgres(url) => SessionStore::connect_postgres(url).await,
        }
    }

    /// Where the store is, for messages.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(db) => db.describe(),
            Backend::Postgres(db) => db.describe(),
        }
    }

    fn write(&self, write: Write) {
        match &self.backend {
            Backend::Sqlite(db) => db.write(write),
            Backend::Postgres(db) => db.write(write),
        }
    }

    fn write_durable(&self, write: Write) -> Durable {
        let (tx, rx) = oneshot::channel();
        self.write(write);
        self.write(Write::Ack(Ack::Channel(tx)));
        Box::pin(async move {
            // A writer that died has logged why; the session goes on in memory.
            let _ = rx.await;
        })
    }

    /// Appends event `seq` of the event log `log_id` (an HTTP session's stream); `done` runs
    /// once it is durable.
    pub fn log_event(
        &self,
        log_id: &str,
        seq: u64,
        body: String,
        done: impl FnOnce() + Send + Sync + 'static,
    ) {
        self.write(Write::Event {
            log_id: log_id.to_string(),
            seq,
            body: redacted_json_text(&body),
        });
        self.write(Write::Ack(Ack::Call(Box::new(done))));
    }

    /// Marks a session closed by its user (it can still be read and resumed; `troupe serve`
    /// does not reopen it by itself).
    pub fn mark_closed(&self, session_id: &str) {
        self.write(Write::Closed {
            session_id: session_id.to_string(),
            at: now_ms(),
        });
    }

    /// Waits until every write queued so far is committed.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        self.write(Write::Ack(Ack::Channel(tx)));
        let _ = rx.await;
    }

    /// Stored sessions, newest first.
    pub async fn list(&self, query: ListQuery) -> Result<Vec<SessionSummary>, SessionStoreError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let db = Arc::clone(db);
                blocking(move || db.list(&query)).await
            }
            Backend::Postgres(db) => db.list(&query).await,
        }
    }

    /// The session whose id is `id` or starts with it.
    pub async fn load(&self, id: &str) -> Result<StoredSession, SessionStoreError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let (db, id) = (Arc::clone(db), id.to_string());
                blocking(move || db.load(&id)).await
            }
            Backend::Postgres(db) => db.load(id).await,
        }
    }

    /// The session `id` and the sessions below it, parents before children.
    pub async fn tree(&self, id: &str) -> Result<Vec<SessionSummary>, SessionStoreError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let (db, id) = (Arc::clone(db), id.to_string());
                blocking(move || db.tree(&id)).await
            }
            Backend::Postgres(db) => db.tree(id).await,
        }
    }

    /// The session `id` (or the one it begins) with, when `tree`, every session below it,
    /// parents first: what `troupe sessions show` and the HTTP transcript show.
    pub async fn transcript(
        &self,
        id: &str,
        tree: bool,
    ) -> Result<Vec<StoredSession>, SessionStoreError> {
        self.flush().await;
        let root = self.load(id).await?;
        if !tree {
            return Ok(vec![root]);
        }
        let members = self.tree(&root.summary.id).await?;
        let mut sessions = Vec::with_capacity(members.len());
        for member in members {
            if member.id == root.summary.id {
                sessions.push(root.clone());
            } else {
                sessions.push(self.load(&member.id).await?);
            }
        }
        Ok(sessions)
    }

    /// The newest `limit` events of the log `log_id`, oldest first, with their numbers.
    pub async fn events(
        &self,
        log_id: &str,
        limit: usize,
    ) -> Result<Vec<(u64, Value)>, SessionStoreError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let (db, id) = (Arc::clone(db), log_id.to_string());
                blocking(move || db.events(&id, limit)).await
            }
            Backend::Postgres(db) => db.events(log_id, limit).await,
        }
    }

    /// Deletes a session with its subagents, messages and events; how many sessions went.
    pub async fn delete(&self, id: &str) -> Result<usize, SessionStoreError> {
        self.flush().await;
        match &self.backend {
            Backend::Sqlite(db) => {
                let (db, id) = (Arc::clone(db), id.to_string());
                blocking(move || db.delete(&id)).await
            }
            Backend::Postgres(db) => db.delete(id).await,
        }
    }

    /// Deletes top-level sessions (with their trees) not written to for `keep_days` days.
    pub async fn prune(&self, keep_days: u32) -> Result<usize, SessionStoreError> {
        self.flush().await;
        let cutoff = now_ms() - i64::from(keep_days) * 86_400_000;
        match &self.backend {
            Backend::Sqlite(db) => {
                let db = Arc::clone(db);
                blocking(move || db.prune(cutoff)).await
            }
            Backend::Postgres(db) => db.prune(cutoff).await,
        }
    }

    /// Messages matching `query` (words, all of them, stemmed), newest first; only those
    /// `scope` lets one see when given.
    pub async fn search(
        &self,
        query: &str,
        scope: Option<SearchScope>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, SessionStoreError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let (db, query) = (Arc::clone(db), query.to_string());
                blocking(move || db.search(&query, scope.as_ref(), limit)).await
            }
            Backend::Postgres(db) => db.search(query, scope.as_ref(), limit).await,
        }
    }

    /// What session `session_id` may see in a search: its own tree, and for a tree a person
    /// started with `troupe chat`, the other chat trees (see [`session_search_tool`]).
    pub async fn scope_of(&self, session_id: &str) -> Result<SearchScope, SessionStoreError> {
        self.flush().await;
        let own = match self.load_summary(session_id).await {
            Ok(summary) => summary,
            // Not stored (yet): it sees its own tree, which is nothing.
            Err(SessionStoreError::NotFound(_)) => {
                return Ok(SearchScope {
                    root: session_id.to_string(),
                    origin: None,
                });
            }
            Err(other) => return Err(other),
        };
        let root = if own.root_id == own.id {
            own
        } else {
            self.load_summary(&own.root_id).await?
        };
        Ok(SearchScope {
            origin: (root.origin == "chat").then(|| "chat".to_string()),
            root: root.id,
        })
    }

    /// One session's row, by its exact id.
    async fn load_summary(&self, id: &str) -> Result<SessionSummary, SessionStoreError> {
        let found = self.tree(id).await?;
        found
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| SessionStoreError::NotFound(id.to_string()))
    }
}

/// Of a tree's sessions (parents before children), `id` and those below it.
pub(crate) fn below(tree: Vec<SessionSummary>, id: &str) -> Vec<SessionSummary> {
    let mut kept: Vec<SessionSummary> = Vec::new();
    for session in tree {
        let under = session.id == id
            || session
                .parent_id
                .as_ref()
                .is_some_and(|p| kept.iter().any(|k| &k.id == p));
        if under {
            kept.push(session);
        }
    }
    kept
}

impl Journal for SessionStore {
    fn opened(&self, mut session: OpenedSession) {
        // What the session was opened with (a script, a system prompt) is stored masked too.
        redact_json(&mut session.origin.options);
        self.write(Write::Opened {
            session,
            at: now_ms(),
        });
    }

    fn step(
        &self,
        session_id: &str,
        first: usize,
        messages: Vec<ChatMessage>,
        spent: Spend,
        lost: &Arc<AtomicBool>,
    ) -> Durable {
        self.write_durable(Write::Step {
            session_id: session_id.to_string(),
            first,
            messages,
            spent,
            at: now_ms(),
            lost: Arc::clone(lost),
        })
    }

    fn call_phase(&self, session_id: &str, model_call_id: &str, phase: CallPhase) -> Durable {
        self.write_durable(Write::Phase {
            session_id: session_id.to_string(),
            model_call_id: model_call_id.to_string(),
            phase,
        })
    }

    fn delegation(&self, session_id: &str, delegation_id: &str, state: DelegationState) {
        self.write(Write::Delegation {
            session_id: session_id.to_string(),
            delegation_id: delegation_id.to_string(),
            state,
        });
    }

    fn closed(&self, session_id: &str) {
        self.mark_closed(session_id);
    }
}

/// Runs a read on the blocking pool.
async fn blocking<T: Send + 'static>(
    read: impl FnOnce() -> Result<T, SessionStoreError> + Send + 'static,
) -> Result<T, SessionStoreError> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| SessionStoreError::Database {
            path: String::new(),
            message: format!("the read task failed: {e}"),
        })?
}

/// The LIKE pattern for ids beginning with `given`, its wildcards escaped (`\`); a prefix
/// shorter than four characters is refused, as it would name too much.
pub(crate) fn prefix_pattern(given: &str) -> Result<String, SessionStoreError> {
    if given.chars().count() < 4 {
        return Err(SessionStoreError::TooShort(given.to_string()));
    }
    let mut pattern = String::with_capacity(given.len() + 1);
    for c in given.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    Ok(pattern)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One message as both backends store it.
pub(crate) struct MessageRow {
    /// Its position in the conversation.
    pub seq: i64,
    /// `user`, `assistant`, `tool` or `system`.
    pub role: &'static str,
    /// The message as JSON, secrets masked.
    pub body: String,
    /// The words it is found by.
    pub text: String,
    /// For a tool result: the call it answers (whose recorded phase no longer matters).
    pub answers: Option<String>,
}

/// The rows of a step's `messages` from position `first` on, and the session's title when one
/// of them is a user message (the first such).
pub(crate) fn message_rows(
    first: i64,
    messages: &[ChatMessage],
) -> (Vec<MessageRow>, Option<String>) {
    let mut title = None;
    let rows = messages
        .iter()
        .enumerate()
        .map(|(offset, message)| {
            let stored = redacted(message);
            let (role, text) = searchable(&stored);
            let answers = match &stored {
                ChatMessage::User { content } => {
                    title.get_or_insert_with(|| title_of(content));
                    None
                }
                ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id.clone()),
                _ => None,
            };
            MessageRow {
                seq: first + offset as i64,
                role,
                body: serde_json::to_string(&stored).unwrap_or_default(),
                text,
                answers,
            }
        })
        .collect();
    (rows, title)
}

/// A message's text as stored: secrets masked by the receipts' rules.
fn redacted(message: &ChatMessage) -> ChatMessage {
    use troupe_tools::builtin::redact::redact;
    match message {
        ChatMessage::System { content } => ChatMessage::System {
            content: redact(content),
        },
        ChatMessage::User { content } => ChatMessage::User {
            content: redact(content),
        },
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => ChatMessage::Assistant {
            content: content.as_deref().map(redact),
            tool_calls: tool_calls
                .iter()
                .map(|c| troupe_actors::model::ToolCallRequest {
                    arguments: redact(&c.arguments),
                    ..c.clone()
                })
                .collect(),
        },
        ChatMessage::Tool {
            tool_call_id,
            name,
            content,
        } => ChatMessage::Tool {
            tool_call_id: tool_call_id.clone(),
            name: name.clone(),
            content: redact(content),
        },
    }
}

/// `value` with every string in it (keys aside) masked by the receipts' rules.
pub(crate) fn redact_json(value: &mut Value) {
    use troupe_tools::builtin::redact::redact;
    match value {
        Value::String(text) => {
            let masked = redact(text);
            if masked != *text {
                *text = masked;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => map.values_mut().for_each(redact_json),
        _ => {}
    }
}

/// A JSON text with its strings masked (so the masking cannot break its syntax); text that is
/// not JSON is masked as it is.
pub(crate) fn redacted_json_text(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(mut value) => {
            redact_json(&mut value);
            value.to_string()
        }
        Err(_) => troupe_tools::builtin::redact::redact(text),
    }
}

/// The words a message is found by: its text, a call's tool and arguments.
fn searchable(message: &ChatMessage) -> (&'static str, String) {
    match message {
        ChatMessage::System { content } => ("system", content.clone()),
        ChatMessage::User { content } => ("user", content.clone()),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut text = content.clone().unwrap_or_default();
            for call in tool_calls {
                text.push('\n');
                text.push_str(&call.name);
                text.push(' ');
                text.push_str(&call.arguments);
            }
            ("assistant", text)
        }
        ChatMessage::Tool { content, .. } => ("tool", content.clone()),
    }
}

/// Stored delegation rows `(id, state, text)` as running ids and arrived results.
pub(crate) fn split_delegations(
    rows: Vec<(String, String, String)>,
) -> (Vec<String>, Vec<(String, String)>) {
    let mut running = Vec::new();
    let mut arrived = Vec::new();
    for (id, state, text) in rows {
        match state.as_str() {
            "running" => running.push(id),
            "arrived" => arrived.push((id, text)),
            _ => {}
        }
    }
    (running, arrived)
}

/// A delegation state as stored: its word and the text of arrived results.
pub(crate) fn delegation_row(state: &DelegationState) -> (&'static str, String) {
    match state {
        DelegationState::Running => ("running", String::new()),
        DelegationState::Arrived(text) => ("arrived", troupe_tools::builtin::redact::redact(text)),
        DelegationState::Delivered => ("delivered", String::new()),
    }
}

/// A title from a first user message: its first line, at most 80 characters.
fn title_of(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        title.push('…');
    }
    title
}

/// Opens the store `settings` name; `None` when persistence is off.
pub async fn open_configured(
    settings: &SessionSettings,
) -> Result<Option<SessionStore>, SessionStoreError> {
    if !settings.persist {
        return Ok(None);
    }
    SessionStore::open(&settings.store).await.map(Some)
}

#[cfg(test)]
mod tests;
