//! The SQLite board schema and its versioned migrations, tracked in `PRAGMA user_version`.
//!
//! [`migrate`] runs inside one `BEGIN IMMEDIATE` transaction, so it is idempotent and safe when
//! several connections or processes open the same board at once. Used by `sqlite.rs` on every
//! connection it opens.

use rusqlite::{Connection, TransactionBehavior};

/// Each entry moves the schema from version `index` to `index + 1`. Append; never edit.
const MIGRATIONS: &[&str] = &[
    // 1: the board, tasks, links, comments, events, runs, attachments.
    r#"
    CREATE TABLE board (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        slug TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_at INTEGER NOT NULL,
        archived_at INTEGER
    );
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        assignee TEXT,
        status TEXT NOT NULL,
        priority INTEGER NOT NULL DEFAULT 0,
        tenant TEXT,
        idempotency_key TEXT,
        created_by TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        started_at INTEGER,
        completed_at INTEGER,
        workspace_kind TEXT NOT NULL DEFAULT 'scratch',
        workspace_path TEXT,
        max_runtime_seconds INTEGER,
        max_retries INTEGER,
        result TEXT,
        consecutive_failures INTEGER NOT NULL DEFAULT 0,
        protocol_violations INTEGER NOT NULL DEFAULT 0,
        last_failure_error TEXT,
        block_kind TEXT,
        block_reason TEXT,
        block_recurrences INTEGER NOT NULL DEFAULT 0,
        claim_lock TEXT,
        claim_expires INTEGER,
        current_run_id INTEGER,
        last_heartbeat_at INTEGER,
        scheduled_until INTEGER
    );
    CREATE INDEX tasks_status ON tasks(status, priority DESC, created_at);
    CREATE INDEX tasks_assignee_status ON tasks(assignee, status);
    CREATE INDEX tasks_tenant ON tasks(tenant);
    CREATE INDEX tasks_claim_expires ON tasks(claim_expires) WHERE claim_expires IS NOT NULL;
    CREATE UNIQUE INDEX tasks_live_idempotency_key ON tasks(idempotency_key)
        WHERE idempotency_key IS NOT NULL AND status <> 'archived';
    CREATE TABLE task_links (
        parent_id TEXT NOT NULL,
        child_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (parent_id, child_id)
    );
    CREATE INDEX task_links_child ON task_links(child_id);
    CREATE TABLE task_comments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL,
        author TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX task_comments_task ON task_comments(task_id);
    CREATE TABLE task_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT,
        run_id INTEGER,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX task_events_task ON task_events(task_id);
    CREATE TABLE task_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL,
        profile TEXT,
        source_status TEXT NOT NULL,
        claim_lock TEXT,
        claim_expires INTEGER,
        max_runtime_seconds INTEGER,
        last_heartbeat_at INTEGER,
        started_at INTEGER NOT NULL,
        ended_at INTEGER,
        outcome TEXT,
        summary TEXT,
        metadata TEXT,
        error TEXT
    );
    CREATE INDEX task_runs_task ON task_runs(task_id);
    CREATE TABLE task_attachments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL,
        filename TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        content BLOB NOT NULL,
        uploaded_by TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX task_attachments_task ON task_attachments(task_id);
    "#,
    // 2: what each run spent.
    "ALTER TABLE task_runs ADD COLUMN usage TEXT;",
    // 3: what a task's runs may spend, and the trace they continue.
    "ALTER TABLE tasks ADD COLUMN budget TEXT; ALTER TABLE tasks ADD COLUMN traceparent TEXT;",
    // 4: scheduled jobs, their runs (one row per job and due time), and the sweep clock.
    r#"
    CREATE TABLE schedule_jobs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        fire_at INTEGER,
        job TEXT NOT NULL
    );
    CREATE INDEX schedule_jobs_fire_at ON schedule_jobs(fire_at, id) WHERE fire_at IS NOT NULL;
    CREATE TABLE schedule_runs (
        job_id TEXT NOT NULL,
        due_at INTEGER NOT NULL,
        fired_at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        covers INTEGER NOT NULL,
        task_id TEXT,
        PRIMARY KEY (job_id, due_at)
    );
    CREATE TABLE schedule_clock (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        swept_at INTEGER NOT NULL,
        outage_from INTEGER,
        outage_to INTEGER
    );
    "#,
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What [`migrate`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MigrateOutcome {
    /// The schema is at [`SCHEMA_VERSION`] (possibly after applying migrations).
    Current,
    /// The file was written by a newer build.
    TooNew(i64),
}

/// Brings the schema up to date in one immediate transaction.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<MigrateOutcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Ok(MigrateOutcome::TooNew(found));
    }
    let start = usize::try_from(found).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tx.execute_batch(sql)?;
        // PRAGMA takes no bound parameters; the value is our own integer.
        tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))?;
        tracing::debug!(version = i + 1, "kanban schema migrated");
    }
    tx.commit()?;
    Ok(MigrateOutcome::Current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_twice_changes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MigrateOutcome::Current);
        assert_eq!(migrate(&mut conn).unwrap(), MigrateOutcome::Current);
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[test]
    fn a_first_version_board_keeps_its_rows_through_the_upgrade() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch("PRAGMA user_version = 1").unwrap();
        conn.execute_batch(
            "INSERT INTO task_runs (task_id, source_status, started_at) VALUES ('t_1', 'ready', 5);",
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MigrateOutcome::Current);
        let (task, usage): (String, Option<String>) = conn
            .query_row("SELECT task_id, usage FROM task_runs", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((task.as_str(), usage), ("t_1", None));
        // The new column is there (no task has one yet).
        let budgets: i64 = conn
            .query_row("SELECT COUNT(budget) FROM tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(budgets, 0);
    }

    #[test]
    fn a_newer_schema_is_reported() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA user_version = 999").unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MigrateOutcome::TooNew(999));
    }
}
