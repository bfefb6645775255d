//! The SQLite side of schedules: [`ScheduleBackend`] for [`Tx`]. A write transaction here is
//! `BEGIN IMMEDIATE`, so it alone writes the board file until it commits: a job it read as due
//! cannot fire in another process at the same time.

use rusqlite::types::Type;
use rusqlite::{OptionalExtension, Row, params};

use crate::domain::{TaskId, Timestamp};
use crate::schedule::plan::Outage;
use crate::schedule::{FireKind, Job, JobRun};
use crate::store::schedule_backend::ScheduleBackend;
use crate::store::sqlite_tx::{Tx, TxResult};

fn decode_job(r: &Row<'_>) -> rusqlite::Result<Job> {
    let text: String = r.get(0)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, Type::Text, Box::new(e)))
}

fn decode_run(r: &Row<'_>) -> rusqlite::Result<JobRun> {
    let kind: String = r.get(3)?;
    let kind = FireKind::parse(&kind).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            3,
            Type::Text,
            format!("unknown run kind {kind:?}").into(),
        )
    })?;
    let task: Option<String> = r.get(5)?;
    let task_id = task
        .map(|t| TaskId::parse(&t))
        .transpose()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(5, Type::Text, Box::new(e)))?;
    let covers: i64 = r.get(4)?;
    Ok(JobRun {
        job_id: r.get(0)?,
        due_at: Timestamp(r.get(1)?),
        fired_at: Timestamp(r.get(2)?),
        kind,
        covers: u32::try_from(covers).unwrap_or(u32::MAX),
        task_id,
        outcome: None,
    })
}

fn encode(job: &Job) -> String {
    // A Job is plain data: serializing it cannot fail.
    serde_json::to_string(job).unwrap_or_default()
}

const RUN_COLS: &str = "job_id, due_at, fired_at, kind, covers, task_id";

impl ScheduleBackend for Tx<'_> {
    async fn all_jobs(&self) -> TxResult<Vec<Job>> {
        let mut stmt = self
            .c
            .prepare_cached("SELECT job FROM schedule_jobs ORDER BY name")?;
        let rows = stmt.query_map([], decode_job)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    async fn job_row(&self, key: &str) -> TxResult<Option<Job>> {
        Ok(self
            .c
            .prepare_cached(
                "SELECT job FROM schedule_jobs WHERE id = ?1 OR name = ?1 \
                 ORDER BY id = ?1 DESC LIMIT 1",
            )?
            .query_row([key], decode_job)
            .optional()?)
    }

    async fn next_due_job(&self) -> TxResult<Option<Job>> {
        Ok(self
            .c
            .prepare_cached(
                "SELECT job FROM schedule_jobs WHERE fire_at IS NOT NULL AND fire_at <= ?1 \
                 ORDER BY fire_at, id LIMIT 1",
            )?
            .query_row([self.now.0], decode_job)
            .optional()?)
    }

    async fn insert_job(&self, job: &Job) -> TxResult<()> {
        self.c
            .prepare_cached(
                "INSERT INTO schedule_jobs (id, name, fire_at, job) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                job.id,
                job.name,
                job.fire_at().map(|t| t.0),
                encode(job)
            ])?;
        Ok(())
    }

    async fn write_job(&self, job: &Job) -> TxResult<()> {
        self.c
            .prepare_cached(
                "UPDATE schedule_jobs SET name = ?2, fire_at = ?3, job = ?4 WHERE id = ?1",
            )?
            .execute(params![
                job.id,
                job.name,
                job.fire_at().map(|t| t.0),
                encode(job)
            ])?;
        Ok(())
    }

    async fn delete_job_row(&self, id: &str) -> TxResult<()> {
        self.c
            .prepare_cached("DELETE FROM schedule_runs WHERE job_id = ?1")?
            .execute([id])?;
        self.c
            .prepare_cached("DELETE FROM schedule_jobs WHERE id = ?1")?
            .execute([id])?;
        Ok(())
    }

    async fn insert_job_run(&self, run: &JobRun) -> TxResult<bool> {
        let n = self
            .c
            .prepare_cached(&format!(
                "INSERT INTO schedule_runs ({RUN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (job_id, due_at) DO NOTHING"
            ))?
            .execute(params![
                run.job_id,
                run.due_at.0,
                run.fired_at.0,
                run.kind.as_str(),
                i64::from(run.covers),
                run.task_id.as_ref().map(TaskId::as_str),
            ])?;
        Ok(n == 1)
    }

    async fn job_runs(&self, id: &str, limit: i64) -> TxResult<Vec<JobRun>> {
        let mut stmt = self.c.prepare_cached(&format!(
            "SELECT {RUN_COLS} FROM schedule_runs WHERE job_id = ?1 ORDER BY due_at DESC, fired_at DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![id, limit], decode_run)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    async fn prune_job_runs(&self, id: &str, keep: i64) -> TxResult<()> {
        self.c
            .prepare_cached(
                "DELETE FROM schedule_runs WHERE job_id = ?1 AND due_at < ( \
                   SELECT due_at FROM schedule_runs WHERE job_id = ?1 \
                   ORDER BY due_at DESC LIMIT 1 OFFSET ?2)",
            )?
            .execute(params![id, keep - 1])?;
        Ok(())
    }

    async fn outage(&self) -> TxResult<Outage> {
        let row: Option<(Option<i64>, Option<i64>)> = self
            .c
            .prepare_cached("SELECT outage_from, outage_to FROM schedule_clock WHERE id = 1")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(match row {
            Some((Some(from), Some(to))) => Some((Timestamp(from), Timestamp(to))),
            _ => None,
        })
    }

    async fn note_sweep(&self, gap_ms: i64, min_write_ms: i64) -> TxResult<()> {
        let now = self.now.0;
        let last: Option<i64> = self
            .c
            .prepare_cached("SELECT swept_at FROM schedule_clock WHERE id = 1")?
            .query_row([], |r| r.get(0))
            .optional()?;
        match last {
            None => {
                self.c
                    .prepare_cached("INSERT INTO schedule_clock (id, swept_at) VALUES (1, ?1)")?
                    .execute([now])?;
            }
            Some(last) if now - last > gap_ms => {
                self.c
                    .prepare_cached(
                        "UPDATE schedule_clock SET swept_at = ?1, outage_from = ?2, outage_to = ?1 WHERE id = 1",
                    )?
                    .execute([now, last])?;
            }
            Some(last) if now - last >= min_write_ms => {
                self.c
                    .prepare_cached("UPDATE schedule_clock SET swept_at = ?1 WHERE id = 1")?
                    .execute([now])?;
            }
            Some(_) => {}
        }
        Ok(())
    }
}
