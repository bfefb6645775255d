//! The PostgreSQL side of schedules: [`ScheduleBackend`] for [`PgTx`]. Hosts sweeping one board
//! at once each lock the due job they fire (`FOR UPDATE SKIP LOCKED`), so they fire different
//! jobs; the (board, job, due time) primary key of a run is the last word if two ever reach
//! the same due time.

use tokio_postgres::Row;

use crate::domain::{TaskId, Timestamp};
use crate::schedule::plan::Outage;
use crate::schedule::{FireKind, Job, JobRun};
use crate::store::StoreError;
use crate::store::backend::Backend;
use crate::store::postgres_tx::{PgTx, TxResult};
use crate::store::schedule_backend::ScheduleBackend;

const RUN_COLS: &str = "job_id, due_at, fired_at, kind, covers, task_id";

impl PgTx<'_, '_> {
    fn corrupt(&self, what: String) -> crate::store::postgres_error::PgTxError {
        StoreError::Corrupt {
            board: self.board.clone(),
            what,
        }
        .into()
    }

    fn decode_job(&self, row: &Row) -> TxResult<Job> {
        let text: &str = row.try_get(0)?;
        serde_json::from_str(text).map_err(|e| self.corrupt(format!("a schedule job: {e}")))
    }

    fn decode_run(&self, r: &Row) -> TxResult<JobRun> {
        let kind: &str = r.try_get(3)?;
        let kind = FireKind::parse(kind)
            .ok_or_else(|| self.corrupt(format!("unknown schedule run kind {kind:?}")))?;
        let task: Option<&str> = r.try_get(5)?;
        let task_id = task
            .map(TaskId::parse)
            .transpose()
            .map_err(|e| self.corrupt(e.to_string()))?;
        let covers: i64 = r.try_get(4)?;
        Ok(JobRun {
            job_id: r.try_get(0)?,
            due_at: Timestamp(r.try_get(1)?),
            fired_at: Timestamp(r.try_get(2)?),
            kind,
            covers: u32::try_from(covers).unwrap_or(u32::MAX),
            task_id,
            outcome: None,
        })
    }
}

fn encode(job: &Job) -> String {
    // A Job is plain data: serializing it cannot fail.
    serde_json::to_string(job).unwrap_or_default()
}

impl ScheduleBackend for PgTx<'_, '_> {
    async fn all_jobs(&self) -> TxResult<Vec<Job>> {
        let rows = self
            .rows(
                "SELECT job FROM kanban_schedule_jobs WHERE board = $1 ORDER BY name",
                &[&self.board.as_str()],
            )
            .await?;
        rows.iter().map(|r| self.decode_job(r)).collect()
    }

    async fn job_row(&self, key: &str) -> TxResult<Option<Job>> {
        let row = self
            .row(
                "SELECT job FROM kanban_schedule_jobs WHERE board = $1 AND (id = $2 OR name = $2) \
                 ORDER BY id = $2 DESC LIMIT 1 FOR UPDATE",
                &[&self.board.as_str(), &key],
            )
            .await?;
        row.map(|r| self.decode_job(&r)).transpose()
    }

    async fn next_due_job(&self) -> TxResult<Option<Job>> {
        let row = self
            .row(
                "SELECT job FROM kanban_schedule_jobs WHERE board = $1 AND fire_at IS NOT NULL \
                 AND fire_at <= $2 ORDER BY fire_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                &[&self.board.as_str(), &self.now().0],
            )
            .await?;
        row.map(|r| self.decode_job(&r)).transpose()
    }

    async fn insert_job(&self, job: &Job) -> TxResult<()> {
        self.exec(
            "INSERT INTO kanban_schedule_jobs (board, id, name, fire_at, job) VALUES ($1, $2, $3, $4, $5)",
            &[&self.board.as_str(), &job.id, &job.name, &job.fire_at().map(|t| t.0), &encode(job)],
        )
        .await?;
        Ok(())
    }

    async fn write_job(&self, job: &Job) -> TxResult<()> {
        self.exec(
            "UPDATE kanban_schedule_jobs SET name = $3, fire_at = $4, job = $5 WHERE board = $1 AND id = $2",
            &[&self.board.as_str(), &job.id, &job.name, &job.fire_at().map(|t| t.0), &encode(job)],
        )
        .await?;
        Ok(())
    }

    async fn delete_job_row(&self, id: &str) -> TxResult<()> {
        let board = self.board.as_str();
        self.exec(
            "DELETE FROM kanban_schedule_runs WHERE board = $1 AND job_id = $2",
            &[&board, &id],
        )
        .await?;
        self.exec(
            "DELETE FROM kanban_schedule_jobs WHERE board = $1 AND id = $2",
            &[&board, &id],
        )
        .await?;
        Ok(())
    }

    async fn insert_job_run(&self, run: &JobRun) -> TxResult<bool> {
        let n = self
            .exec(
                &format!(
                    "INSERT INTO kanban_schedule_runs (board, {RUN_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (board, job_id, due_at) DO NOTHING"
                ),
                &[
                    &self.board.as_str(),
                    &run.job_id,
                    &run.due_at.0,
                    &run.fired_at.0,
                    &run.kind.as_str(),
                    &i64::from(run.covers),
                    &run.task_id.as_ref().map(TaskId::as_str),
                ],
            )
            .await?;
        Ok(n == 1)
    }

    async fn job_runs(&self, id: &str, limit: i64) -> TxResult<Vec<JobRun>> {
        let rows = self
            .rows(
                &format!(
                    "SELECT {RUN_COLS} FROM kanban_schedule_runs WHERE board = $1 AND job_id = $2 \
                     ORDER BY due_at DESC, fired_at DESC LIMIT $3"
                ),
                &[&self.board.as_str(), &id, &limit],
            )
            .await?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn prune_job_runs(&self, id: &str, keep: i64) -> TxResult<()> {
        self.exec(
            "DELETE FROM kanban_schedule_runs WHERE board = $1 AND job_id = $2 AND due_at < ( \
               SELECT due_at FROM kanban_schedule_runs WHERE board = $1 AND job_id = $2 \
               ORDER BY due_at DESC LIMIT 1 OFFSET $3)",
            &[&self.board.as_str(), &id, &(keep - 1)],
        )
        .await?;
        Ok(())
    }

    async fn outage(&self) -> TxResult<Outage> {
        let row = self
            .row(
                "SELECT outage_from, outage_to FROM kanban_schedule_clock WHERE board = $1",
                &[&self.board.as_str()],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let (from, to): (Option<i64>, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
        Ok(from.zip(to).map(|(f, t)| (Timestamp(f), Timestamp(t))))
    }

    async fn note_sweep(&self, gap_ms: i64, min_write_ms: i64) -> TxResult<()> {
        let board = self.board.as_str();
        let now = self.now().0;
        // The common case reads and writes nothing more: another sweep was just here.
        let quick = self
            .row(
                "SELECT swept_at FROM kanban_schedule_clock WHERE board = $1",
                &[&board],
            )
            .await?;
        if let Some(row) = &quick {
            let last: i64 = row.try_get(0)?;
            if now - last < min_write_ms {
                return Ok(());
            }
        } else {
            self.exec(
                "INSERT INTO kanban_schedule_clock (board, swept_at) VALUES ($1, $2) \
                 ON CONFLICT (board) DO NOTHING",
                &[&board, &now],
            )
            .await?;
            return Ok(());
        }
        // Hosts sweeping at once take turns here; the second sees the first one's time.
        let row = self
            .row(
                "SELECT swept_at FROM kanban_schedule_clock WHERE board = $1 FOR UPDATE",
                &[&board],
            )
            .await?;
        let Some(row) = row else { return Ok(()) };
        let last: i64 = row.try_get(0)?;
        if now - last > gap_ms {
            self.exec(
                "UPDATE kanban_schedule_clock SET swept_at = $2, outage_from = $3, outage_to = $2 WHERE board = $1",
                &[&board, &now, &last],
            )
            .await?;
        } else if now - last >= min_write_ms {
            self.exec(
                "UPDATE kanban_schedule_clock SET swept_at = $2 WHERE board = $1",
                &[&board, &now],
            )
            .await?;
        }
        Ok(())
    }
}
