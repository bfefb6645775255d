//! Claims in one statement on PostgreSQL: what `claim_many` asks first (see
//! `ops::claim_many`).
//!
//! Claimed one by one, each task costs seven round trips (pick, read, its open parents, the
//! run, the swap, and reading the task and run back); a claimer taking eight at once waited
//! for 56 answers. Here one statement locks the best ready tasks that have no open parent
//! (`FOR UPDATE SKIP LOCKED`, so claimers on other hosts take other rows), opens a run for
//! each and moves each to `running`, returning both rows. A ready task whose parent is still
//! open is left to the one-by-one path, which sends it back to `todo`.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use tokio_postgres::types::ToSql;

use crate::domain::{Lease, Task, TaskStatus};
use crate::store::postgres_rows::Reader;
use crate::store::postgres_tx::{CLOCK, PgTx, TxResult};
use crate::store::rows::{self, RUN_COLS, RowAccess, TASK_COLS};
use crate::store::{Claim, ClaimSpec};

/// The statement: $1 the board, $2 the assignees (or `NULL` for any), $3 how many, $4 the
/// lease holders and $5 the lease lengths in milliseconds (one per claim, in order), $6 the
/// operation's clock so far (time never goes back within it). Each row is the task's columns
/// ([`TASK_COLS`]) then the run's ([`RUN_COLS`]), best task first.
static CLAIM_BATCH: LazyLock<String> = LazyLock::new(|| {
    let task_cols: Vec<String> = TASK_COLS
        .split(',')
        .map(|c| format!("t.{}", c.trim()))
        .collect();
    let task_cols = task_cols.join(", ");
    format!(
        "WITH picked AS ( \
           SELECT t.id, t.assignee, t.max_runtime_seconds, t.priority, t.created_at \
           FROM kanban_tasks t WHERE t.board = $1 AND t.status = 'ready' \
           AND ($2::text[] IS NULL OR t.assignee = ANY($2)) \
           AND NOT EXISTS ( \
             SELECT 1 FROM kanban_task_links l \
             JOIN kanban_tasks p ON p.board = l.board AND p.id = l.parent_id \
             WHERE l.board = t.board AND l.child_id = t.id \
             AND p.status NOT IN ('done', 'archived')) \
           ORDER BY t.priority DESC, t.created_at, t.id LIMIT $3 \
           FOR UPDATE OF t SKIP LOCKED), \
         numbered AS ( \
           SELECT p.*, row_number() OVER (ORDER BY p.priority DESC, p.created_at, p.id) AS n \
           FROM picked p), \
         clock AS (SELECT GREATEST($6::bigint, {CLOCK}) AS now), \
         spec AS ( \
           SELECT * FROM unnest($4::text[], $5::bigint[]) WITH ORDINALITY AS s(lock, ttl, n)), \
         runs AS ( \
           INSERT INTO kanban_task_runs (board, task_id, profile, source_status, claim_lock, \
             claim_expires, max_runtime_seconds, last_heartbeat_at, started_at) \
           SELECT $1, numbered.id, numbered.assignee, 'ready', spec.lock, \
             clock.now + spec.ttl, numbered.max_runtime_seconds, clock.now, clock.now \
           FROM numbered JOIN spec ON spec.n = numbered.n CROSS JOIN clock \
           RETURNING {RUN_COLS}), \
         claimed AS ( \
           UPDATE kanban_tasks t SET status = 'running', updated_at = r.started_at, \
             claim_lock = r.claim_lock, claim_expires = r.claim_expires, \
             current_run_id = r.id, last_heartbeat_at = r.started_at, \
             started_at = COALESCE(t.started_at, r.started_at) \
           FROM runs r WHERE t.board = $1 AND t.id = r.task_id AND t.status = 'ready' \
           RETURNING {task_cols}) \
         SELECT c.*, r.* FROM claimed c JOIN runs r ON r.task_id = c.id \
         ORDER BY c.priority DESC, c.created_at, c.id"
    )
});

/// Columns of a task row, where the run's begin.
const TASK_WIDTH: usize = 31;

/// Reads a row's columns from `by` on, as if they were the first.
struct Shifted<'r> {
    reader: Reader<'r>,
    by: usize,
}

impl RowAccess for Shifted<'_> {
    type Error = crate::store::postgres_error::PgTxError;

    fn int(&self, idx: usize) -> TxResult<i64> {
        self.reader.int(idx + self.by)
    }

    fn opt_int(&self, idx: usize) -> TxResult<Option<i64>> {
        self.reader.opt_int(idx + self.by)
    }

    fn text(&self, idx: usize) -> TxResult<&str> {
        self.reader.text(idx + self.by)
    }

    fn opt_text(&self, idx: usize) -> TxResult<Option<&str>> {
        self.reader.opt_text(idx + self.by)
    }

    fn bad<E: std::error::Error + Send + Sync + 'static>(&self, idx: usize, e: E) -> Self::Error {
        self.reader.bad(idx + self.by, e)
    }

    fn corrupt(&self, idx: usize, what: String) -> Self::Error {
        self.reader.corrupt(idx + self.by, what)
    }
}

/// Claims up to one ready task per spec in one statement, best first; `specs` must all name
/// the same assignees (the caller claims one by one otherwise). Events are left to the caller.
pub(crate) async fn claim_batch(t: &PgTx<'_, '_>, specs: &[ClaimSpec]) -> TxResult<Vec<Claim>> {
    let Some(first) = specs.first() else {
        return Ok(Vec::new());
    };
    let locks: Vec<String> = specs.iter().map(|s| s.worker.to_string()).collect();
    let ttls: Vec<i64> = specs
        .iter()
        .map(|s| i64::try_from(s.ttl.as_millis()).unwrap_or(i64::MAX))
        .collect();
    let limit = i64::try_from(specs.len()).unwrap_or(i64::MAX);
    let board = t.board.as_str();
    let clock = t.now.load(Ordering::Relaxed);
    let params: [&(dyn ToSql + Sync); 6] =
        [&board, &first.assignees, &limit, &locks, &ttls, &clock];
    let found = t.rows(&CLAIM_BATCH, &params).await?;
    let mut claims = Vec::with_capacity(found.len());
    for row in &found {
        let reader = Reader {
            row,
            board: t.board,
        };
        let task: Task = rows::task(&reader)?;
        let run = rows::run(&Shifted {
            reader: Reader {
                row,
                board: t.board,
            },
            by: TASK_WIDTH,
        })?;
        t.now.fetch_max(run.started_at.0, Ordering::Relaxed);
        let Some(lease) = task.lease.clone() else {
            return Err(crate::store::StoreError::Corrupt {
                board: t.board.clone(),
                what: format!("task {} was claimed without a lease", task.id),
            }
            .into());
        };
        debug_assert_eq!(task.status, TaskStatus::Running);
        claims.push(Claim {
            task,
            lease: Lease {
                worker: lease.worker,
                expires_at: lease.expires_at,
                run_id: run.id,
            },
            run,
        });
    }
    Ok(claims)
}
