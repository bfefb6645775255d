//! The SQLite session store: one file, WAL, one writer thread that commits whatever is queued
//! as one transaction, and a read connection for lists, loads and searches (FTS5).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crossbeam::channel::{Receiver, SendError, Sender};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, params};
use troupe_actors::journal::CallPhase;
use troupe_actors::model::ChatMessage;
use troupe_tools::sync::lock;

use super::{
    ListQuery, MAX_BATCH, SearchHit, SearchScope, SessionStoreError, SessionSummary, StoredSession,
    Write,
};

/// The schema's version, in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    root_id TEXT NOT NULL,
    depth INTEGER NOT NULL,
    agent_path TEXT NOT NULL,
    origin TEXT NOT NULL,
    options TEXT NOT NULL,
    model TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    messages INTEGER NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS sessions_newest ON sessions(depth, updated_at, id);
CREATE INDEX IF NOT EXISTS sessions_by_root ON sessions(root_id);
CREATE TABLE IF NOT EXISTS session_messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_calls (
    session_id TEXT NOT NULL,
    model_call_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    PRIMARY KEY (session_id, model_call_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_events (
    log_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (log_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_delegations (
    session_id TEXT NOT NULL,
    delegation_id TEXT NOT NULL,
    state TEXT NOT NULL,
    text TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (session_id, delegation_id)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS session_text USING fts5(
    text, session_id UNINDEXED, root_id UNINDEXED, seq UNINDEXED, role UNINDEXED,
    tokenize = 'porter unicode61'
);
";

/// The SQLite backend of [`super::SessionStore`].
#[derive(Debug)]
pub struct SqliteSessions {
    path: PathBuf,
    /// To the writer thread; every session actor sends its steps here without a lock.
    writer: Sender<Write>,
    reader: Mutex<Connection>,
}

impl SqliteSessions {
    /// Opens the file (creating it and its directory), migrates it and starts the writer.
    pub fn open(path: &Path) -> Result<SqliteSessions, SessionStoreError> {
        let error = |e: &dyn std::fmt::Display| SessionStoreError::Database {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| error(&e))?;
        }
        let mut conn = connect(path).map_err(|e| error(&e))?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| error(&e))?;
        if version > SCHEMA_VERSION {
            return Err(error(&format!(
                "its schema version {version} is newer than this troupe's ({SCHEMA_VERSION}); upgrade troupe"
            )));
        }
        // Immediate: another process creating the file at the same moment waits its turn.
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| error(&e))?;
        tx.execute_batch(SCHEMA).map_err(|e| error(&e))?;
        tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
            .map_err(|e| error(&e))?;
        tx.commit().map_err(|e| error(&e))?;
        let writer = connect(path).map_err(|e| error(&e))?;
        let (tx, rx) = crossbeam::channel::unbounded();
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("troupe-sessions".into())
            .spawn(move || write_loop(writer, rx, &shown))
            .map_err(|e| error(&e))?;
        Ok(SqliteSessions {
            path: path.to_path_buf(),
            writer: tx,
            reader: Mutex::new(conn),
        })
    }

    pub(super) fn describe(&self) -> String {
        format!("SQLite session store at {}", self.path.display())
    }

    pub(super) fn write(&self, write: Write) {
        if let Err(SendError(write)) = self.writer.send(write) {
            tracing::error!(store = %self.path.display(), "the session writer has stopped; this step is not stored");
            write.undeliverable();
        }
    }

    fn error(&self, e: impl std::fmt::Display) -> SessionStoreError {
        SessionStoreError::Database {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    pub(super) fn list(&self, query: &ListQuery) -> Result<Vec<SessionSummary>, SessionStoreError> {
        let conn = lock(&self.reader);
        let mut sql = format!("SELECT {SUMMARY} FROM sessions WHERE 1 = 1");
        let mut params: Vec<rusqlite::types::Value> = Vec::new();
        if !query.all {
            sql.push_str(" AND depth = 0");
        }
        if query.open_only {
            sql.push_str(" AND status = 'open'");
        }
        if let Some(origin) = &query.origin {
            params.push(origin.clone().into());
            sql.push_str(&format!(" AND origin = ?{}", params.len()));
        }
        if let Some(task) = &query.task {
            params.push(task.clone().into());
            sql.push_str(&format!(
                " AND origin = 'worker' AND json_valid(options) AND json_extract(options, '$.task') = ?{}",
                params.len()
            ));
        }
        if let Some(cursor) = &query.before {
            params.push(cursor.updated_at.into());
            params.push(cursor.id.clone().into());
            let (at, id) = (params.len() - 1, params.len());
            sql.push_str(&format!(
                " AND (updated_at < ?{at} OR (updated_at = ?{at} AND id < ?{id}))"
            ));
        }
        sql.push_str(" ORDER BY updated_at DESC, id DESC");
        if let Some(limit) = query.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        let mut statement = conn.prepare_cached(&sql).map_err(|e| self.error(e))?;
        let rows = statement
            .query_map(rusqlite::params_from_iter(params), summary_row)
            .map_err(|e| self.error(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))
    }

    /// Every session's id and fingerprint, oldest first.
    pub(super) fn fingerprints(
        &self,
    ) -> Result<Vec<(String, super::Fingerprint)>, SessionStoreError> {
        let conn = lock(&self.reader);
        let mut statement = conn
            .prepare_cached(
                "SELECT id, created_at, updated_at FROM sessions ORDER BY created_at, id",
            )
            .map_err(|e| self.error(e))?;
        let rows = statement
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    super::Fingerprint {
                        started: r.get(1)?,
                        last_active: r.get(2)?,
                    },
                ))
            })
            .map_err(|e| self.error(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))
    }

    /// The activity of the sessions `ids`: rows, tool counts and approvals, each one query
    /// over the id list (passed as one JSON array).
    pub(super) fn activity(
        &self,
        ids: &[String],
    ) -> Result<Vec<super::SessionActivity>, SessionStoreError> {
        let list = serde_json::to_string(ids).map_err(|e| self.error(e))?;
        let conn = lock(&self.reader);
        let summaries = conn
            .prepare_cached(&format!(
                "SELECT {SUMMARY} FROM sessions WHERE id IN (SELECT value FROM json_each(?1))"
            ))
            .and_then(|mut s| {
                s.query_map([&list], summary_row)?
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| self.error(e))?;
        let tools = conn
            .prepare_cached(
                "SELECT session_id, COALESCE(json_extract(body, '$.name'), ''), COUNT(*) FROM session_messages
                 WHERE role = 'tool' AND session_id IN (SELECT value FROM json_each(?1)) GROUP BY 1, 2",
            )
            .and_then(|mut s| {
                s.query_map([&list], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0)))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| self.error(e))?;
        let approvals = conn
            .prepare_cached(
                "SELECT log_id, COUNT(*) FROM session_events
                 WHERE log_id IN (SELECT value FROM json_each(?1)) AND body LIKE ?2 GROUP BY 1",
            )
            .and_then(|mut s| {
                s.query_map(params![&list, super::activity::APPROVAL_EVENT], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| self.error(e))?;
        Ok(super::activity::assemble(summaries, tools, approvals))
    }

    /// The id `given` names: itself, or the one stored id it begins.
    fn resolve(&self, conn: &Connection, given: &str) -> Result<String, SessionStoreError> {
        let pattern = super::prefix_pattern(given)?;
        let mut statement = conn
            .prepare_cached(
                "SELECT id FROM sessions WHERE id = ?1 OR id LIKE ?2 ESCAPE '\\' LIMIT 3",
            )
            .map_err(|e| self.error(e))?;
        let ids: Vec<String> = statement
            .query_map(params![given, pattern], |r| r.get(0))
            .map_err(|e| self.error(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))?;
        if ids.iter().any(|id| id == given) {
            return Ok(given.to_string());
        }
        match ids.len() {
            0 => Err(SessionStoreError::NotFound(given.to_string())),
            1 => Ok(ids.into_iter().next().unwrap_or_default()),
            count => Err(SessionStoreError::Ambiguous {
                prefix: given.to_string(),
                count,
            }),
        }
    }

    pub(super) fn load(&self, given: &str) -> Result<StoredSession, SessionStoreError> {
        let conn = lock(&self.reader);
        let id = self.resolve(&conn, given)?;
        let (summary, agent_path, options): (SessionSummary, String, String) = conn
            .query_row(
                &format!("SELECT {SUMMARY}, agent_path, options FROM sessions WHERE id = ?1"),
                [&id],
                |r| Ok((summary_row(r)?, r.get(12)?, r.get(13)?)),
            )
            .map_err(|e| self.error(e))?;
        let mut statement = conn
            .prepare_cached("SELECT body FROM session_messages WHERE session_id = ?1 ORDER BY seq")
            .map_err(|e| self.error(e))?;
        let bodies: Vec<String> = statement
            .query_map([&id], |r| r.get(0))
            .map_err(|e| self.error(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))?;
        let mut messages = Vec::with_capacity(bodies.len());
        for body in bodies {
            let message: ChatMessage = serde_json::from_str(&body)
                .map_err(|e| self.error(format!("a stored message of {id} is unreadable: {e}")))?;
            messages.push(message);
        }
        let mut statement = conn
            .prepare_cached("SELECT model_call_id, phase FROM session_calls WHERE session_id = ?1")
            .map_err(|e| self.error(e))?;
        let phases: HashMap<String, CallPhase> = statement
            .query_map([&id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.error(e))?
            .filter_map(Result::ok)
            .filter_map(|(call, phase)| CallPhase::parse(&phase).map(|p| (call, p)))
            .collect();
        let mut statement = conn
            .prepare_cached(
                "SELECT delegation_id, state, text FROM session_delegations WHERE session_id = ?1 AND state <> 'delivered'",
            )
            .map_err(|e| self.error(e))?;
        let delegations: Vec<(String, String, String)> = statement
            .query_map([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| self.error(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))?;
        let (running, arrived) = super::split_delegations(delegations);
        Ok(StoredSession {
            summary,
            agent_path: serde_json::from_str(&agent_path).unwrap_or_default(),
            options: serde_json::from_str(&options).unwrap_or(serde_json::Value::Null),
            messages,
            phases,
            delegations_running: running,
            delegations_arrived: arrived,
        })
    }

    pub(super) fn tree(&self, given: &str) -> Result<Vec<SessionSummary>, SessionStoreError> {
        let conn = lock(&self.reader);
        self.tree_in(&conn, given)
    }

    fn tree_in(
        &self,
        conn: &Connection,
        given: &str,
    ) -> Result<Vec<SessionSummary>, SessionStoreError> {
        let id = self.resolve(conn, given)?;
        let mut statement = conn
            .prepare_cached(&format!(
                "SELECT {SUMMARY} FROM sessions WHERE root_id = (SELECT root_id FROM sessions WHERE id = ?1) ORDER BY depth, created_at"
            ))
            .map_err(|e| self.error(e))?;
        let all: Vec<SessionSummary> = statement
            .query_map([&id], summary_row)
            .map_err(|e| self.error(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))?;
        Ok(super::below(all, &id))
    }

    pub(super) fn events(
        &self,
        log_id: &str,
        limit: usize,
    ) -> Result<Vec<(u64, serde_json::Value)>, SessionStoreError> {
        let conn = lock(&self.reader);
        let mut statement = conn
            .prepare_cached(
                "SELECT seq, body FROM (SELECT seq, body FROM session_events WHERE log_id = ?1 ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
            )
            .map_err(|e| self.error(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(i64, String)> = statement
            .query_map(params![log_id, limit], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.error(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))?;
        Ok(rows
            .into_iter()
            .filter_map(|(seq, body)| {
                Some((u64::try_from(seq).ok()?, serde_json::from_str(&body).ok()?))
            })
            .collect())
    }

    pub(super) fn delete(&self, given: &str) -> Result<usize, SessionStoreError> {
        let mut conn = lock(&self.reader);
        let ids: Vec<String> = self
            .tree_in(&conn, given)?
            .into_iter()
            .map(|s| s.id)
            .collect();
        let tx = conn.transaction().map_err(|e| self.error(e))?;
        delete_sessions(&tx, &ids).map_err(|e| self.error(e))?;
        tx.commit().map_err(|e| self.error(e))?;
        Ok(ids.len())
    }

    pub(super) fn prune(&self, cutoff: i64) -> Result<usize, SessionStoreError> {
        let mut conn = lock(&self.reader);
        let tx = conn.transaction().map_err(|e| self.error(e))?;
        let ids: Vec<String> = {
            let mut statement = tx
                .prepare(
                    "SELECT id FROM sessions WHERE root_id IN (SELECT id FROM sessions WHERE depth = 0 AND updated_at < ?1)",
                )
                .map_err(|e| self.error(e))?;
            statement
                .query_map([cutoff], |r| r.get(0))
                .map_err(|e| self.error(e))?
                .collect::<Result<_, _>>()
                .map_err(|e| self.error(e))?
        };
        delete_sessions(&tx, &ids).map_err(|e| self.error(e))?;
        tx.commit().map_err(|e| self.error(e))?;
        Ok(ids.len())
    }

    pub(super) fn search(
        &self,
        query: &str,
        scope: Option<&SearchScope>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, SessionStoreError> {
        let Some(expression) = fts_expression(query) else {
            return Ok(Vec::new());
        };
        let conn = lock(&self.reader);
        let mut statement = conn
            .prepare_cached(
                "SELECT session_text.session_id, session_text.root_id, session_text.seq, session_text.role,
                        snippet(session_text, 0, '[', ']', '…', 16)
                 FROM session_text JOIN sessions r ON r.id = session_text.root_id
                 WHERE session_text MATCH ?1
                   AND (?2 IS NULL OR session_text.root_id = ?2 OR (r.depth = 0 AND r.origin = ?3))
                 ORDER BY session_text.rowid DESC LIMIT ?4",
            )
            .map_err(|e| self.error(e))?;
        let root = scope.map(|s| s.root.as_str());
        let origin = scope.and_then(|s| s.origin.as_deref());
        let hits = statement
            .query_map(
                params![
                    expression,
                    root,
                    origin,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok(SearchHit {
                        session_id: r.get(0)?,
                        root_id: r.get(1)?,
                        seq: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                        role: r.get(3)?,
                        snippet: r.get(4)?,
                    })
                },
            )
            .map_err(|e| self.error(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        Ok(hits)
    }
}

/// The columns of a [`SessionSummary`], in [`summary_row`]'s order.
const SUMMARY: &str = "id, parent_id, root_id, depth, origin, model, title, status, created_at, updated_at, messages, usage";

fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionSummary> {
    let usage: String = r.get(11)?;
    Ok(SessionSummary {
        id: r.get(0)?,
        parent_id: r.get(1)?,
        root_id: r.get(2)?,
        depth: r.get(3)?,
        origin: r.get(4)?,
        model: r.get(5)?,
        title: r.get(6)?,
        status: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
        messages: u64::try_from(r.get::<_, i64>(10)?).unwrap_or(0),
        usage: serde_json::from_str(&usage).unwrap_or_default(),
    })
}

/// Words as an FTS5 expression: each a quoted term, all required; `None` when there are none.
fn fts_expression(query: &str) -> Option<String> {
    let terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{w}\""))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" AND "))
}

fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // Switching a new file to WAL needs a moment alone with it; openers at the same instant
    // may be told it is locked (the busy timeout does not cover this), so they try again.
    let mut tries = 0;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => break,
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 50 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(other) => return Err(other),
        }
    }
    // A killed process loses nothing committed; only a power cut could lose the last commits.
    conn.execute_batch("PRAGMA synchronous = NORMAL")?;
    Ok(conn)
}

/// The writer thread: takes what is queued, commits it as one transaction, then tells those
/// waiting. Ends when the store is dropped.
fn write_loop(mut conn: Connection, rx: Receiver<Write>, shown: &str) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        let (writes, acks): (Vec<Write>, Vec<Write>) =
            batch.into_iter().partition(|w| !matches!(w, Write::Ack(_)));
        if let Err(error) = commit(&mut conn, &writes) {
            // One bad write must not take the others with it: each goes alone.
            tracing::warn!(store = shown, %error, "a batch of session steps failed; writing them one by one");
            for write in &writes {
                if let Err(error) = commit(&mut conn, std::slice::from_ref(write)) {
                    tracing::error!(store = shown, %error, write = write.describe(), "could not store a session step");
                    write.failed();
                }
            }
        }
        for ack in acks {
            if let Write::Ack(ack) = ack {
                ack.fire();
            }
        }
    }
}

/// Applies `writes` in one transaction.
fn commit(conn: &mut Connection, writes: &[Write]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for write in writes {
        apply(&tx, write)?;
    }
    tx.commit()
}

fn apply(tx: &Transaction<'_>, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Opened { session, at } => {
            let depth = session.agent_path.len().saturating_sub(1);
            let root = session
                .agent_path
                .first()
                .cloned()
                .unwrap_or_else(|| session.id.clone());
            let parent = (depth > 0)
                .then(|| session.agent_path.get(depth - 1).cloned())
                .flatten();
            tx.prepare_cached(
                "INSERT INTO sessions (id, parent_id, root_id, depth, agent_path, origin, options, model, status, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'open', ?9, ?9)
                 ON CONFLICT (id) DO UPDATE SET status = 'open', updated_at = excluded.updated_at, model = excluded.model",
            )?
            .execute(params![
                session.id,
                parent,
                root,
                i64::try_from(depth).unwrap_or(i64::MAX),
                serde_json::to_string(&session.agent_path).unwrap_or_default(),
                session.origin.kind,
                session.origin.options.to_string(),
                session.model,
                at
            ])?;
        }
        Write::Step {
            session_id,
            first,
            messages,
            spent,
            at,
            ..
        } => {
            let first = i64::try_from(*first).unwrap_or(i64::MAX);
            let row: Option<(String, i64)> = tx
                .prepare_cached("SELECT root_id, messages FROM sessions WHERE id = ?1")?
                .query_row([session_id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let (root, stored) = row.unwrap_or_else(|| (session_id.clone(), 0));
            if first < stored {
                // A conversation replaced from `first` on (rare: a chat that loads one).
                tx.prepare_cached(
                    "DELETE FROM session_messages WHERE session_id = ?1 AND seq >= ?2",
                )?
                .execute(params![session_id, first])?;
                tx.prepare_cached("DELETE FROM session_text WHERE session_id = ?1 AND seq >= ?2")?
                    .execute(params![session_id, first])?;
            }
            let (rows, title) = super::message_rows(first, messages);
            for row in &rows {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO session_messages (session_id, seq, role, body) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![session_id, row.seq, row.role, row.body])?;
                tx.prepare_cached(
                    "INSERT INTO session_text (text, session_id, root_id, seq, role) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![row.text, session_id, root, row.seq, row.role])?;
                if let Some(call) = &row.answers {
                    // Answered: how far it got no longer matters (and its id may come again).
                    tx.prepare_cached(
                        "DELETE FROM session_calls WHERE session_id = ?1 AND model_call_id = ?2",
                    )?
                    .execute(params![session_id, call])?;
                }
            }
            let count = first + messages.len() as i64;
            tx.prepare_cached(
                "UPDATE sessions SET messages = ?2, usage = ?3, updated_at = ?4,
                 title = CASE WHEN title = '' THEN COALESCE(?5, '') ELSE title END WHERE id = ?1",
            )?
            .execute(params![
                session_id,
                count,
                serde_json::to_string(spent).unwrap_or_default(),
                at,
                title
            ])?;
        }
        Write::Phase {
            session_id,
            model_call_id,
            phase,
        } => {
            tx.prepare_cached(
                "INSERT INTO session_calls (session_id, model_call_id, phase) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_id, model_call_id) DO UPDATE SET phase = excluded.phase",
            )?
            .execute(params![session_id, model_call_id, phase.as_str()])?;
        }
        Write::Event { log_id, seq, body } => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO session_events (log_id, seq, body) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![
                log_id,
                i64::try_from(*seq).unwrap_or(i64::MAX),
                body
            ])?;
        }
        Write::Delegation {
            session_id,
            delegation_id,
            state,
        } => {
            let (word, text) = super::delegation_row(state);
            tx.prepare_cached(
                "INSERT INTO session_delegations (session_id, delegation_id, state, text) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session_id, delegation_id) DO UPDATE SET state = excluded.state, text = excluded.text",
            )?
            .execute(params![session_id, delegation_id, word, text])?;
        }
        Write::Closed { session_id, at } => {
            tx.prepare_cached(
                "UPDATE sessions SET status = 'closed', updated_at = ?2 WHERE id = ?1",
            )?
            .execute(params![session_id, at])?;
        }
        Write::Ack(_) => {}
    }
    Ok(())
}

fn delete_sessions(tx: &Transaction<'_>, ids: &[String]) -> rusqlite::Result<()> {
    for id in ids {
        tx.execute("DELETE FROM session_messages WHERE session_id = ?1", [id])?;
        tx.execute("DELETE FROM session_text WHERE session_id = ?1", [id])?;
        tx.execute("DELETE FROM session_calls WHERE session_id = ?1", [id])?;
        tx.execute(
            "DELETE FROM session_delegations WHERE session_id = ?1",
            [id],
        )?;
        tx.execute("DELETE FROM session_events WHERE log_id = ?1", [id])?;
        tx.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
    }
    Ok(())
}
