//! The PostgreSQL session store: the same tables as SQLite (prefixed, beside the boards' in one
//! database), one writer task that commits whatever is queued as one transaction, pooled reads,
//! and full-text search on a generated `tsvector`.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::mpsc;
use tokio_postgres::{NoTls, Row};
use troupe_actors::journal::CallPhase;
use troupe_actors::model::ChatMessage;

use super::{
    ListQuery, MAX_BATCH, SearchHit, SearchScope, SessionStoreError, SessionSummary, StoredSession,
    Write,
};

/// The schema, created when missing. One advisory lock serialises hosts creating it at once.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS troupe_sessions (
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
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    messages BIGINT NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS troupe_sessions_newest ON troupe_sessions (depth, updated_at, id);
CREATE INDEX IF NOT EXISTS troupe_sessions_by_root ON troupe_sessions (root_id);
CREATE TABLE IF NOT EXISTS troupe_session_messages (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    root_id TEXT NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    text TEXT NOT NULL,
    search tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS troupe_session_messages_search ON troupe_session_messages USING GIN (search);
CREATE TABLE IF NOT EXISTS troupe_session_calls (
    session_id TEXT NOT NULL,
    model_call_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    PRIMARY KEY (session_id, model_call_id)
);
CREATE TABLE IF NOT EXISTS troupe_session_delegations (
    session_id TEXT NOT NULL,
    delegation_id TEXT NOT NULL,
    state TEXT NOT NULL,
    text TEXT NOT NULL DEFAULT '',
    at BIGSERIAL,
    PRIMARY KEY (session_id, delegation_id)
);
CREATE TABLE IF NOT EXISTS troupe_session_events (
    log_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (log_id, seq)
);
";

/// The PostgreSQL backend of [`super::SessionStore`].
#[derive(Debug)]
pub struct PostgresSessions {
    shown: String,
    pool: Pool,
    writer: mpsc::UnboundedSender<Write>,
}

impl PostgresSessions {
    /// Connects, creates the tables when missing and starts the writer (on the current tokio
    /// runtime).
    pub async fn connect(url: &str, shown: String) -> Result<PostgresSessions, SessionStoreError> {
        let error = |message: String| SessionStoreError::Database {
            path: shown.clone(),
            message,
        };
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            error(format!(
                "the URL does not parse ({e}); send postgres://user:password@host:5432/dbname"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("troupe-sessions");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(4)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(10)))
            .build()
            .map_err(|e| error(explain(&e)))?;
        // Hosts starting together race for the first connections and the schema; what the
        // server calls transient (a deadlock, too many clients, starting up) is tried again.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match create_schema(&pool).await {
                Ok(()) => break,
                Err(e) if attempt < SCHEMA_ATTEMPTS && transient(e.as_ref()) => {
                    tracing::warn!(store = %shown, error = %explain(e.as_ref()), attempt, "creating the session tables failed; trying again");
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
                Err(e) => return Err(error(explain(e.as_ref()))),
            }
        }
        let (writer, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(pool.clone(), rx, shown.clone()));
        Ok(PostgresSessions {
            shown,
            pool,
            writer,
        })
    }

    pub(super) fn describe(&self) -> String {
        format!("PostgreSQL session store at {}", self.shown)
    }

    pub(super) fn write(&self, write: Write) {
        if let Err(mpsc::error::SendError(write)) = self.writer.send(write) {
            tracing::error!(store = %self.shown, "the session writer has stopped; this step is not stored");
            write.undeliverable();
        }
    }

    fn error(&self, e: impl std::error::Error) -> SessionStoreError {
        self.message(explain(&e))
    }

    fn message(&self, message: String) -> SessionStoreError {
        SessionStoreError::Database {
            path: self.shown.clone(),
            message,
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, SessionStoreError> {
        self.pool.get().await.map_err(|e| self.error(e))
    }

    pub(super) async fn list(
        &self,
        query: &ListQuery,
    ) -> Result<Vec<SessionSummary>, SessionStoreError> {
        let client = self.client().await?;
        let limit = query
            .limit
            .and_then(|l| i64::try_from(l).ok())
            .unwrap_or(i64::MAX);
        // Conditions written out rather than switched by parameters, so the planner can walk
        // the (depth, updated_at) index for the usual "newest top-level sessions".
        let mut sql = format!("SELECT {SUMMARY} FROM troupe_sessions WHERE TRUE");
        if !query.all {
            sql.push_str(" AND depth = 0");
        }
        if query.open_only {
            sql.push_str(" AND status = 'open'");
        }
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = Vec::new();
        if let Some(origin) = &query.origin {
            params.push(origin);
            sql.push_str(&format!(" AND origin = ${}", params.len()));
        }
        if let Some(task) = &query.task {
            params.push(task);
            // Options are always written as JSON text, so the cast cannot fail on a row.
            sql.push_str(&format!(
                " AND origin = 'worker' AND (options::jsonb)->>'task' = ${}",
                params.len()
            ));
        }
        if let Some(cursor) = &query.before {
            params.push(&cursor.updated_at);
            params.push(&cursor.id);
            let (at, id) = (params.len() - 1, params.len());
            sql.push_str(&format!(
                " AND (updated_at < ${at} OR (updated_at = ${at} AND id < ${id}))"
            ));
        }
        params.push(&limit);
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, id DESC LIMIT ${}",
            params.len()
        ));
        let rows = client
            .query(&sql, &params)
            .await
            .map_err(|e| self.error(e))?;
        rows.iter()
            .map(|r| summary_row(r).map_err(|e| self.error(e)))
            .collect()
    }

    pub(super) async fn fingerprints(
        &self,
    ) -> Result<Vec<(String, super::Fingerprint)>, SessionStoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, created_at, updated_at FROM troupe_sessions ORDER BY created_at, id",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<_, String>(0)?,
                    super::Fingerprint {
                        started: r.try_get(1)?,
                        last_active: r.try_get(2)?,
                    },
                ))
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(|e| self.error(e))
    }

    pub(super) async fn activity(
        &self,
        ids: &[String],
    ) -> Result<Vec<super::SessionActivity>, SessionStoreError> {
        let client = self.client().await?;
        let ids = ids.to_vec();
        let summaries = client
            .query(
                &format!("SELECT {SUMMARY} FROM troupe_sessions WHERE id = ANY($1)"),
                &[&ids],
            )
            .await
            .map_err(|e| self.error(e))?
            .iter()
            .map(summary_row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        let tools = client
            .query(
                "SELECT session_id, COALESCE(body::jsonb ->> 'name', ''), COUNT(*) FROM troupe_session_messages
                 WHERE role = 'tool' AND session_id = ANY($1) GROUP BY 1, 2",
                &[&ids],
            )
            .await
            .map_err(|e| self.error(e))?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<_, String>(0)?,
                    r.try_get::<_, String>(1)?,
                    u64::try_from(r.try_get::<_, i64>(2)?).unwrap_or(0),
                ))
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(|e| self.error(e))?;
        let approvals = client
            .query(
                "SELECT log_id, COUNT(*) FROM troupe_session_events
                 WHERE log_id = ANY($1) AND body LIKE $2 GROUP BY 1",
                &[&ids, &super::activity::APPROVAL_EVENT],
            )
            .await
            .map_err(|e| self.error(e))?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<_, String>(0)?,
                    u64::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0),
                ))
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(|e| self.error(e))?;
        Ok(super::activity::assemble(summaries, tools, approvals))
    }

    async fn resolve(
        &self,
        client: &deadpool_postgres::Object,
        given: &str,
    ) -> Result<String, SessionStoreError> {
        let pattern = super::prefix_pattern(given)?;
        let rows = client
            .query(
                "SELECT id FROM troupe_sessions WHERE id = $1 OR id LIKE $2 ESCAPE '\\' LIMIT 3",
                &[&given, &pattern],
            )
            .await
            .map_err(|e| self.error(e))?;
        let ids: Vec<String> = rows
            .iter()
            .map(|r| r.try_get(0))
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

    pub(super) async fn load(&self, given: &str) -> Result<StoredSession, SessionStoreError> {
        let client = self.client().await?;
        let id = self.resolve(&client, given).await?;
        let row = client
            .query_one(
                &format!(
                    "SELECT {SUMMARY}, agent_path, options FROM troupe_sessions WHERE id = $1"
                ),
                &[&id],
            )
            .await
            .map_err(|e| self.error(e))?;
        let summary = summary_row(&row).map_err(|e| self.error(e))?;
        let (agent_path, options): (String, String) = (
            row.try_get(12).map_err(|e| self.error(e))?,
            row.try_get(13).map_err(|e| self.error(e))?,
        );
        let rows = client
            .query(
                "SELECT body FROM troupe_session_messages WHERE session_id = $1 ORDER BY seq",
                &[&id],
            )
            .await
            .map_err(|e| self.error(e))?;
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let body: String = row.try_get(0).map_err(|e| self.error(e))?;
            let message: ChatMessage = serde_json::from_str(&body).map_err(|e| {
                self.message(format!("a stored message of {id} is unreadable: {e}"))
            })?;
            messages.push(message);
        }
        let rows = client
            .query(
                "SELECT model_call_id, phase FROM troupe_session_calls WHERE session_id = $1",
                &[&id],
            )
            .await
            .map_err(|e| self.error(e))?;
        let phases: HashMap<String, CallPhase> = rows
            .iter()
            .filter_map(|r| {
                let phase: String = r.try_get(1).ok()?;
                Some((r.try_get::<_, String>(0).ok()?, CallPhase::parse(&phase)?))
            })
            .collect();
        let rows = client
            .query(
                "SELECT delegation_id, state, text FROM troupe_session_delegations WHERE session_id = $1 AND state <> 'delivered' ORDER BY at",
                &[&id],
            )
            .await
            .map_err(|e| self.error(e))?;
        let (running, arrived) = super::split_delegations(
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                .collect::<Result<_, tokio_postgres::Error>>()
                .map_err(|e| self.error(e))?,
        );
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

    pub(super) async fn tree(&self, given: &str) -> Result<Vec<SessionSummary>, SessionStoreError> {
        let client = self.client().await?;
        let id = self.resolve(&client, given).await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {SUMMARY} FROM troupe_sessions WHERE root_id = (SELECT root_id FROM troupe_sessions WHERE id = $1) ORDER BY depth, created_at"
                ),
                &[&id],
            )
            .await
            .map_err(|e| self.error(e))?;
        let all = rows
            .iter()
            .map(summary_row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        Ok(super::below(all, &id))
    }

    pub(super) async fn events(
        &self,
        log_id: &str,
        limit: usize,
    ) -> Result<Vec<(u64, serde_json::Value)>, SessionStoreError> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT seq, body FROM (SELECT seq, body FROM troupe_session_events WHERE log_id = $1 ORDER BY seq DESC LIMIT $2) newest ORDER BY seq",
                &[&log_id, &limit],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (seq, body): (i64, String) = (r.try_get(0).ok()?, r.try_get(1).ok()?);
                Some((u64::try_from(seq).ok()?, serde_json::from_str(&body).ok()?))
            })
            .collect())
    }

    pub(super) async fn delete(&self, given: &str) -> Result<usize, SessionStoreError> {
        let ids: Vec<String> = self.tree(given).await?.into_iter().map(|s| s.id).collect();
        self.delete_ids(&ids).await
    }

    pub(super) async fn prune(&self, cutoff: i64) -> Result<usize, SessionStoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id FROM troupe_sessions WHERE root_id IN (SELECT id FROM troupe_sessions WHERE depth = 0 AND updated_at < $1)",
                &[&cutoff],
            )
            .await
            .map_err(|e| self.error(e))?;
        let ids: Vec<String> = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))?;
        drop(client);
        self.delete_ids(&ids).await
    }

    async fn delete_ids(&self, ids: &[String]) -> Result<usize, SessionStoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.error(e))?;
        for statement in [
            "DELETE FROM troupe_session_messages WHERE session_id = ANY($1)",
            "DELETE FROM troupe_session_calls WHERE session_id = ANY($1)",
            "DELETE FROM troupe_session_delegations WHERE session_id = ANY($1)",
            "DELETE FROM troupe_session_events WHERE log_id = ANY($1)",
            "DELETE FROM troupe_sessions WHERE id = ANY($1)",
        ] {
            tx.execute(statement, &[&ids])
                .await
                .map_err(|e| self.error(e))?;
        }
        tx.commit().await.map_err(|e| self.error(e))?;
        Ok(ids.len())
    }

    pub(super) async fn search(
        &self,
        query: &str,
        scope: Option<&SearchScope>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, SessionStoreError> {
        if !query.chars().any(char::is_alphanumeric) {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let root = scope.map(|s| s.root.clone());
        let origin = scope.and_then(|s| s.origin.clone());
        let rows = client
            .query(
                "SELECT m.session_id, m.root_id, m.seq, m.role,
                        ts_headline('english', m.text, plainto_tsquery('english', $1),
                                    'StartSel=[, StopSel=], MaxWords=16, MinWords=6')
                 FROM troupe_session_messages m JOIN troupe_sessions r ON r.id = m.root_id
                 WHERE m.search @@ plainto_tsquery('english', $1)
                   AND ($2::TEXT IS NULL OR m.root_id = $2 OR (r.depth = 0 AND r.origin = $3))
                 ORDER BY r.updated_at DESC, m.seq DESC LIMIT $4",
                &[&query, &root, &origin, &limit],
            )
            .await
            .map_err(|e| self.error(e))?;
        rows.iter()
            .map(|r| {
                Ok(SearchHit {
                    session_id: r.try_get(0)?,
                    root_id: r.try_get(1)?,
                    seq: u64::try_from(r.try_get::<_, i64>(2)?).unwrap_or(0),
                    role: r.try_get(3)?,
                    snippet: r.try_get(4)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(|e| self.error(e))
    }
}

/// The columns of a [`SessionSummary`], in [`summary_row`]'s order.
const SUMMARY: &str = "id, parent_id, root_id, depth, origin, model, title, status, created_at, updated_at, messages, usage";

fn summary_row(r: &Row) -> Result<SessionSummary, tokio_postgres::Error> {
    let usage: String = r.try_get(11)?;
    Ok(SessionSummary {
        id: r.try_get(0)?,
        parent_id: r.try_get(1)?,
        root_id: r.try_get(2)?,
        depth: u32::try_from(r.try_get::<_, i32>(3)?).unwrap_or(0),
        origin: r.try_get(4)?,
        model: r.try_get(5)?,
        title: r.try_get(6)?,
        status: r.try_get(7)?,
        created_at: r.try_get(8)?,
        updated_at: r.try_get(9)?,
        messages: u64::try_from(r.try_get::<_, i64>(10)?).unwrap_or(0),
        usage: serde_json::from_str(&usage).unwrap_or_default(),
    })
}

/// The writer task: takes what is queued, commits it as one transaction, then tells those
/// waiting. A failed batch is logged (and its waiters released): the session goes on.
async fn write_loop(pool: Pool, mut rx: mpsc::UnboundedReceiver<Write>, shown: String) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        let (writes, acks): (Vec<Write>, Vec<Write>) =
            batch.into_iter().partition(|w| !matches!(w, Write::Ack(_)));
        if let Err(error) = commit(&pool, &writes).await {
            // One bad write must not take the others with it: each goes alone.
            tracing::warn!(store = %shown, %error, "a batch of session steps failed; writing them one by one");
            for write in &writes {
                if let Err(error) = commit(&pool, std::slice::from_ref(write)).await {
                    tracing::error!(store = %shown, %error, write = write.describe(), "could not store a session step");
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

/// How often the schema is tried at connect before the error is reported.
const SCHEMA_ATTEMPTS: u64 = 5;

/// Creates the tables when missing, under the advisory lock that serialises hosts.
async fn create_schema(pool: &Pool) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock(7242650198110311)", &[])
        .await?;
    tx.batch_execute(SCHEMA).await?;
    tx.commit().await?;
    Ok(())
}

/// Whether the server said to try again: a rolled-back transaction (deadlock, serialisation),
/// too few resources (too many clients), an object created under our feet, or a server that
/// is starting or stopping.
fn transient(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(cause) = source {
        if let Some(db) = cause.downcast_ref::<tokio_postgres::error::DbError>() {
            let code = db.code().code();
            return code.starts_with("40")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "23505"
                || code == "42P07";
        }
        // No answer from the server at all (refused, reset) is worth another try as well.
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// An error with its causes: the driver's own text is only "db error", the server's message is
/// in the source chain.
fn explain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Applies `writes` in one transaction.
async fn commit(pool: &Pool, writes: &[Write]) -> Result<(), String> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut client = pool.get().await.map_err(|e| explain(&e))?;
    let tx = client.transaction().await.map_err(|e| explain(&e))?;
    for write in writes {
        apply(&tx, write).await.map_err(|e| explain(&e))?;
    }
    tx.commit().await.map_err(|e| explain(&e))
}

async fn apply(
    tx: &deadpool_postgres::Transaction<'_>,
    write: &Write,
) -> Result<(), tokio_postgres::Error> {
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
            let depth = i32::try_from(depth).unwrap_or(i32::MAX);
            tx.execute(
                &tx.prepare_cached("INSERT INTO troupe_sessions (id, parent_id, root_id, depth, agent_path, origin, options, model, status, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9, $9)
                 ON CONFLICT (id) DO UPDATE SET status = 'open', updated_at = excluded.updated_at, model = excluded.model").await?,
                &[
                    &session.id,
                    &parent,
                    &root,
                    &depth,
                    &serde_json::to_string(&session.agent_path).unwrap_or_default(),
                    &session.origin.kind,
                    &session.origin.options.to_string(),
                    &session.model,
                    &at,
                ],
            )
            .await?;
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
            let row = tx
                .query_opt(
                    &tx.prepare_cached(
                        "SELECT root_id, messages FROM troupe_sessions WHERE id = $1",
                    )
                    .await?,
                    &[&session_id],
                )
                .await?;
            let (root, stored): (String, i64) = match row {
                Some(row) => (row.try_get(0)?, row.try_get(1)?),
                None => (session_id.to_string(), 0),
            };
            if first < stored {
                tx.execute(
                    &tx.prepare_cached(
                        "DELETE FROM troupe_session_messages WHERE session_id = $1 AND seq >= $2",
                    )
                    .await?,
                    &[&session_id, &first],
                )
                .await?;
            }
            let (rows, title) = super::message_rows(first, messages);
            for row in &rows {
                let (seq, role, body) = (row.seq, row.role, &row.body);
                tx.execute(
                    &tx.prepare_cached("INSERT INTO troupe_session_messages (session_id, seq, root_id, role, body, text) VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (session_id, seq) DO UPDATE SET role = excluded.role, body = excluded.body, text = excluded.text").await?,
                    &[&session_id, &seq, &root, &role, body, &row.text.replace('\0', "")],
                )
                .await?;
                if let Some(tool_call_id) = &row.answers {
                    // Answered: how far it got no longer matters (and its id may come again).
                    tx.execute(
                        &tx.prepare_cached(
                            "DELETE FROM troupe_session_calls WHERE session_id = $1 AND model_call_id = $2",
                        )
                        .await?,
                        &[session_id, tool_call_id],
                    )
                    .await?;
                }
            }
            let count = first + messages.len() as i64;
            tx.execute(
                &tx.prepare_cached(
                    "UPDATE troupe_sessions SET messages = $2, usage = $3, updated_at = $4,
                 title = CASE WHEN title = '' THEN COALESCE($5, '') ELSE title END WHERE id = $1",
                )
                .await?,
                &[
                    &session_id,
                    &count,
                    &serde_json::to_string(spent).unwrap_or_default(),
                    &at,
                    &title,
                ],
            )
            .await?;
        }
        Write::Phase {
            session_id,
            model_call_id,
            phase,
        } => {
            tx.execute(
                &tx.prepare_cached("INSERT INTO troupe_session_calls (session_id, model_call_id, phase) VALUES ($1, $2, $3)
                 ON CONFLICT (session_id, model_call_id) DO UPDATE SET phase = excluded.phase").await?,
                &[&session_id, &model_call_id, &phase.as_str()],
            )
            .await?;
        }
        Write::Event { log_id, seq, body } => {
            let seq = i64::try_from(*seq).unwrap_or(i64::MAX);
            tx.execute(
                &tx.prepare_cached(
                    "INSERT INTO troupe_session_events (log_id, seq, body) VALUES ($1, $2, $3)
                 ON CONFLICT (log_id, seq) DO UPDATE SET body = excluded.body",
                )
                .await?,
                &[&log_id, &seq, &body],
            )
            .await?;
        }
        Write::Delegation {
            session_id,
            delegation_id,
            state,
        } => {
            let (word, text) = super::delegation_row(state);
            tx.execute(
                &tx.prepare_cached("INSERT INTO troupe_session_delegations (session_id, delegation_id, state, text) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session_id, delegation_id) DO UPDATE SET state = excluded.state, text = excluded.text").await?,
                &[&session_id, &delegation_id, &word, &text.replace('\0', "")],
            )
            .await?;
        }
        Write::Closed { session_id, at } => {
            tx.execute(
                &tx.prepare_cached(
                    "UPDATE troupe_sessions SET status = 'closed', updated_at = $2 WHERE id = $1",
                )
                .await?,
                &[&session_id, &at],
            )
            .await?;
        }
        Write::Ack(_) => {}
    }
    Ok(())
}
