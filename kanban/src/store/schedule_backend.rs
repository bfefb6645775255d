//! The steps a backend carries out for schedules inside one open transaction, like `Backend`
//! for tasks: statements only, no decisions (those are in `ops/schedules.rs` and
//! `schedule::plan`).
//!
//! A job is stored as its JSON with the columns queries need beside it (`id`, `name`, and
//! `fire_at`: the next due time while active, `NULL` while paused or ended). Runs are stored
//! with the primary key (job, due time), which is what makes a due time fire once: a second
//! transaction trying the same due time fails to insert it and rolls back with the task it
//! made. A single row per board holds the time of the last sweep and the last outage.

use crate::schedule::plan::Outage;
use crate::schedule::{Job, JobRun};
use crate::store::backend::Backend;

/// Schedule steps of a backend.
pub(crate) trait ScheduleBackend: Backend {
    /// Every job of the board, by name.
    async fn all_jobs(&self) -> Result<Vec<Job>, Self::Error>;
    /// The job with this id or, failing that, this name; locked for the rest of the
    /// transaction where the database locks rows.
    async fn job_row(&self, key: &str) -> Result<Option<Job>, Self::Error>;
    /// The active job due earliest at or before now, locked; one another transaction holds is
    /// passed over, so hosts sweeping at once fire different jobs.
    async fn next_due_job(&self) -> Result<Option<Job>, Self::Error>;
    /// Writes a new job.
    async fn insert_job(&self, job: &Job) -> Result<(), Self::Error>;
    /// Writes a job's new state.
    async fn write_job(&self, job: &Job) -> Result<(), Self::Error>;
    /// Removes a job and its runs.
    async fn delete_job_row(&self, id: &str) -> Result<(), Self::Error>;
    /// Records a run; `false` when its (job, due time) is already recorded.
    async fn insert_job_run(&self, run: &JobRun) -> Result<bool, Self::Error>;
    /// A job's runs, newest first.
    async fn job_runs(&self, id: &str, limit: i64) -> Result<Vec<JobRun>, Self::Error>;
    /// Removes all but the newest `keep` runs of a job.
    async fn prune_job_runs(&self, id: &str, keep: i64) -> Result<(), Self::Error>;
    /// The latest outage recorded on the board.
    async fn outage(&self) -> Result<Outage, Self::Error>;
    /// Notes a sweep now: a sweep more than `gap_ms` after the last one records the stretch
    /// in between as the board's latest outage. Writes at most once every `min_write_ms`.
    async fn note_sweep(&self, gap_ms: i64, min_write_ms: i64) -> Result<(), Self::Error>;
}
