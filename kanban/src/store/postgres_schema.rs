//! The PostgreSQL board schema and its versioned migrations, tracked in `kanban_schema_version`.
//!
//! One database holds many boards: every table is keyed by the board slug. [`migrate`] runs in
//! one transaction under a transaction-scoped advisory lock, so it is idempotent and safe when
//! several processes connect at once. Used by `postgres.rs` when a store connects.

use tokio_postgres::Client;

/// Each entry moves the schema from version `index` to `index + 1`. Append; never edit.
const MIGRATIONS: &[&str] = &[
    // 1: boards, tasks, links, comments, events, runs, attachments.
    r#"
    CREATE TABLE kanban_boards (
        slug TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        archived_at BIGINT,
        -- The newest event id handed out on this board; bumped under the row lock at commit
        -- time, so ids are assigned in commit order.
        last_event_id BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE kanban_tasks (
        board TEXT NOT NULL,
        id TEXT NOT NULL,
        title TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        assignee TEXT,
        status TEXT NOT NULL,
        priority BIGINT NOT NULL DEFAULT 0,
        tenant TEXT,
        idempotency_key TEXT,
        created_by TEXT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        started_at BIGINT,
        completed_at BIGINT,
        workspace_kind TEXT NOT NULL DEFAULT 'scratch',
        workspace_path TEXT,
        max_runtime_seconds BIGINT,
        max_retries BIGINT,
        result TEXT,
        consecutive_failures BIGINT NOT NULL DEFAULT 0,
        protocol_violations BIGINT NOT NULL DEFAULT 0,
        last_failure_error TEXT,
        block_kind TEXT,
        block_reason TEXT,
        block_recurrences BIGINT NOT NULL DEFAULT 0,
        claim_lock TEXT,
        claim_expires BIGINT,
        current_run_id BIGINT,
        last_heartbeat_at BIGINT,
        scheduled_until BIGINT,
        PRIMARY KEY (board, id)
    );
    CREATE INDEX kanban_tasks_status ON kanban_tasks(board, status, priority DESC, created_at, id);
    CREATE INDEX kanban_tasks_assignee_status ON kanban_tasks(board, assignee, status);
    CREATE INDEX kanban_tasks_tenant ON kanban_tasks(board, tenant);
    CREATE INDEX kanban_tasks_claim_expires ON kanban_tasks(board, claim_expires)
        WHERE claim_expires IS NOT NULL;
    CREATE INDEX kanban_tasks_id ON kanban_tasks(id);
    CREATE UNIQUE INDEX kanban_tasks_live_idempotency_key ON kanban_tasks(board, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND status <> 'archived';
    CREATE TABLE kanban_task_links (
        board TEXT NOT NULL,
        parent_id TEXT NOT NULL,
        child_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (board, parent_id, child_id)
    );
    CREATE INDEX kanban_task_links_child ON kanban_task_links(board, child_id);
    CREATE TABLE kanban_task_comments (
        id BIGSERIAL PRIMARY KEY,
        board TEXT NOT NULL,
        task_id TEXT NOT NULL,
        author TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX kanban_task_comments_task ON kanban_task_comments(board, task_id);
    CREATE TABLE kanban_task_events (
        board TEXT NOT NULL,
        id BIGINT NOT NULL,
        task_id TEXT,
        run_id BIGINT,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (board, id)
    );
    CREATE INDEX kanban_task_events_task ON kanban_task_events(board, task_id);
    CREATE TABLE kanban_task_runs (
        id BIGSERIAL PRIMARY KEY,
        board TEXT NOT NULL,
        task_id TEXT NOT NULL,
        profile TEXT,
        source_status TEXT NOT NULL,
        claim_lock TEXT,
        claim_expires BIGINT,
        max_runtime_seconds BIGINT,
        last_heartbeat_at BIGINT,
        started_at BIGINT NOT NULL,
        ended_at BIGINT,
        outcome TEXT,
        summary TEXT,
        metadata TEXT,
        error TEXT
    );
    CREATE INDEX kanban_task_runs_task ON kanban_task_runs(board, task_id);
    CREATE INDEX kanban_task_runs_open ON kanban_task_runs(board) WHERE ended_at IS NULL;
    CREATE TABLE kanban_task_attachments (
        id BIGSERIAL PRIMARY KEY,
        board TEXT NOT NULL,
        task_id TEXT NOT NULL,
        filename TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size BIGINT NOT NULL,
        content BYTEA NOT NULL,
        uploaded_by TEXT,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX kanban_task_attachments_task ON kanban_task_attachments(board, task_id);
    "#,
    // 2: what each run spent.
    "ALTER TABLE kanban_task_runs ADD COLUMN usage TEXT;",
    // 3: what a task's runs may spend, and the trace they continue.
    "ALTER TABLE kanban_tasks ADD COLUMN budget TEXT; \
     ALTER TABLE kanban_tasks ADD COLUMN traceparent TEXT;",
    // 4: scheduled jobs, their runs (one row per job and due time), and the sweep clock.
    r#"
    CREATE TABLE kanban_schedule_jobs (
        board TEXT NOT NULL,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        fire_at BIGINT,
        job TEXT NOT NULL,
        PRIMARY KEY (board, id),
        UNIQUE (board, name)
    );
    CREATE INDEX kanban_schedule_jobs_fire_at ON kanban_schedule_jobs(board, fire_at, id)
        WHERE fire_at IS NOT NULL;
    CREATE TABLE kanban_schedule_runs (
        board TEXT NOT NULL,
        job_id TEXT NOT NULL,
        due_at BIGINT NOT NULL,
        fired_at BIGINT NOT NULL,
        kind TEXT NOT NULL,
        covers BIGINT NOT NULL,
        task_id TEXT,
        PRIMARY KEY (board, job_id, due_at)
    );
    CREATE TABLE kanban_schedule_clock (
        board TEXT PRIMARY KEY,
        swept_at BIGINT NOT NULL,
        outage_from BIGINT,
        outage_to BIGINT
    );
    "#,
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Key of the advisory lock that serializes migrations across processes ("troupe" in ASCII).
const MIGRATION_LOCK: i64 = 0x74_72_6f_75_70_65;

/// What [`migrate`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MigrateOutcome {
    /// The schema is at [`SCHEMA_VERSION`] (possibly after applying migrations).
    Current,
    /// The database was written by a newer build.
    TooNew(i64),
}

/// Brings the schema up to date in one transaction.
pub(crate) async fn migrate(client: &mut Client) -> Result<MigrateOutcome, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS kanban_schema_version (
             id INTEGER PRIMARY KEY CHECK (id = 1),
             version BIGINT NOT NULL
         );
         INSERT INTO kanban_schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;",
    )
    .await?;
    let found: i64 = tx
        .query_one(
            "SELECT version FROM kanban_schema_version WHERE id = 1",
            &[],
        )
        .await?
        .try_get(0)?;
    if found > SCHEMA_VERSION {
        return Ok(MigrateOutcome::TooNew(found));
    }
    let start = usize::try_from(found).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tx.batch_execute(sql).await?;
        let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
        tx.execute(
            "UPDATE kanban_schema_version SET version = $1 WHERE id = 1",
            &[&version],
        )
        .await?;
        tracing::debug!(version, "kanban PostgreSQL schema migrated");
    }
    tx.commit().await?;
    Ok(MigrateOutcome::Current)
}
