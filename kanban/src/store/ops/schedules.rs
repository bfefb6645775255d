//! Schedule operations, written once for every backend: making, changing and removing jobs,
//! firing the next due one, running one by hand, reading history.

use crate::domain::{NewTask, TaskId, Timestamp};
use crate::schedule::plan::{self, FireDecision};
use crate::schedule::{
    DEFAULT_ZONE, FireKind, HISTORY_KEEP, Job, JobAction, JobPatch, JobRun, NewJob, OUTAGE_GAP_MS,
    ScheduleError, Timing,
};
use crate::store::StoreError;
use crate::store::schedule_backend::ScheduleBackend;

use super::{ensure_live, task};

/// Longest job name.
const NAME_MAX: usize = 100;

fn invalid(field: &'static str, why: impl Into<String>) -> StoreError {
    StoreError::Schedule(ScheduleError::BadField {
        field,
        why: why.into(),
    })
}

/// Checks a job's free-text fields and the tasks it names.
async fn check_fields<B: ScheduleBackend>(b: &B, job: &Job) -> Result<(), B::Error> {
    let name = job.name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX {
        return Err(invalid(
            "name",
            "send a name of 1 to 100 characters, such as \"nightly-report\"",
        )
        .into());
    }
    if job.owner.trim().is_empty() {
        return Err(invalid("owner", "send who makes the job (a profile or a person)").into());
    }
    match &job.action {
        JobAction::Task {
            title,
            assignee,
            parents,
            ..
        } => {
            if title.trim().is_empty() {
                return Err(invalid(
                    "task.title",
                    "send a one-line title for the tasks the job makes",
                )
                .into());
            }
            if assignee.as_deref().is_some_and(|a| a.trim().is_empty()) {
                return Err(invalid("task.assignee", "send a profile name, or no assignee").into());
            }
            for p in parents {
                task(b, p).await?;
            }
        }
        JobAction::Prompt { prompt, profile } => {
            if prompt.trim().is_empty() {
                return Err(invalid("prompt", "send what the session should be asked").into());
            }
            if profile.trim().is_empty() {
                return Err(invalid("profile", "send the profile that answers the prompt").into());
            }
        }
    }
    if job.max_runs == Some(0) {
        return Err(invalid("max_runs", "send at least 1, or no limit").into());
    }
    // The name is unique on the board (ids and names share one lookup).
    if let Some(other) = b.job_row(name).await?
        && other.id != job.id
    {
        return Err(StoreError::JobNameTaken {
            board: b.board().clone(),
            name: name.to_string(),
        }
        .into());
    }
    Ok(())
}

/// Sets `next_due` for a job whose schedule starts counting at `now`; a job that would never
/// run is refused.
fn start(job: &mut Job, now: Timestamp) -> Result<(), StoreError> {
    let timing = job.timing()?;
    if let Timing::Once(at) = timing
        && at <= now
        && job.runs == 0
    {
        return Err(ScheduleError::InstantPassed {
            schedule: job.schedule.clone(),
        }
        .into());
    }
    job.anchor = now;
    job.next_due = plan::first_due(job, &timing, now);
    if job.next_due.is_none() && job.runs == 0 {
        let why = match (job.until, &timing) {
            (Some(_), _) => {
                "its first due time is after its `until`; move `until` later".to_string()
            }
            _ => "the schedule has no future time; check the day and month fields".to_string(),
        };
        return Err(ScheduleError::NeverDue {
            name: job.name.clone(),
            why,
        }
        .into());
    }
    Ok(())
}

fn fresh_job_id() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    format!(
        "j_{:02x}{:02x}{:02x}{:02x}",
        bytes[0], bytes[1], bytes[2], bytes[3]
    )
}

pub(crate) async fn create_job<B: ScheduleBackend>(b: &B, new: &NewJob) -> Result<Job, B::Error> {
    ensure_live(b).await?;
    let now = b.now();
    let zone = new
        .timezone
        .as_deref()
        .map(str::trim)
        .filter(|z| !z.is_empty());
    let mut job = Job {
        id: fresh_job_id(),
        name: new.name.trim().to_string(),
        owner: new.owner.trim().to_string(),
        schedule: new.schedule.trim().to_string(),
        timezone: zone.unwrap_or(DEFAULT_ZONE).to_string(),
        anchor: now,
        action: new.action.clone(),
        missed: new.missed,
        until: new.until,
        max_runs: new.max_runs,
        paused: new.paused,
        next_due: None,
        runs: 0,
        last: None,
        created_at: now,
        updated_at: now,
    };
    check_fields(b, &job).await?;
    start(&mut job, now)?;
    b.insert_job(&job).await?;
    tracing::info!(board = %b.board(), job = %job.id, name = %job.name, "schedule job created");
    Ok(job)
}

pub(crate) async fn jobs<B: ScheduleBackend>(b: &B) -> Result<Vec<Job>, B::Error> {
    b.all_jobs().await
}

pub(crate) async fn job<B: ScheduleBackend>(b: &B, key: &str) -> Result<Job, B::Error> {
    b.job_row(key.trim()).await?.ok_or_else(|| {
        StoreError::JobNotFound {
            board: b.board().clone(),
            key: key.to_string(),
        }
        .into()
    })
}

pub(crate) async fn update_job<B: ScheduleBackend>(
    b: &B,
    key: &str,
    patch: &JobPatch,
) -> Result<Job, B::Error> {
    let mut job = job(b, key).await?;
    let now = b.now();
    let mut restart = false;
    if let Some(name) = &patch.name {
        job.name = name.trim().to_string();
    }
    if let Some(schedule) = &patch.schedule {
        job.schedule = schedule.trim().to_string();
        restart = true;
    }
    if let Some(zone) = &patch.timezone {
        job.timezone = zone.trim().to_string();
        restart = true;
    }
    if let Some(action) = &patch.action {
        job.action = action.clone();
    }
    if let Some(missed) = patch.missed {
        job.missed = missed;
    }
    if let Some(until) = patch.until {
        job.until = until;
        restart = true;
    }
    if let Some(max_runs) = patch.max_runs {
        job.max_runs = max_runs;
        restart = true;
    }
    match patch.paused {
        Some(true) => job.paused = true,
        // Resuming counts again from now: nothing piled up while paused.
        Some(false) if job.paused => {
            job.paused = false;
            restart = true;
        }
        _ => {}
    }
    check_fields(b, &job).await?;
    if restart {
        let timing = job.timing().map_err(StoreError::from)?;
        match timing {
            // A one-time job keeps its instant; one already past fires as missed.
            Timing::Once(at) if job.runs == 0 => job.next_due = Some(at),
            Timing::Once(_) => job.next_due = None,
            _ => {
                job.anchor = now;
                job.next_due = plan::first_due(&job, &timing, now);
            }
        }
        if let Some(until) = job.until
            && job.next_due.is_some_and(|d| d > until)
        {
            job.next_due = None;
        }
    }
    job.updated_at = now;
    b.write_job(&job).await?;
    Ok(job)
}

pub(crate) async fn delete_job<B: ScheduleBackend>(b: &B, key: &str) -> Result<Job, B::Error> {
    let job = job(b, key).await?;
    b.delete_job_row(&job.id).await?;
    tracing::info!(board = %b.board(), job = %job.id, "schedule job removed");
    Ok(job)
}

/// The task a run of `job` for `due` makes; its idempotency key names the job and due time.
fn task_for(job: &Job, due: Timestamp, kind: FireKind) -> NewTask {
    let (title, body, assignee, parents) = match &job.action {
        JobAction::Task {
            title,
            body,
            assignee,
            parents,
        } => (
            title.clone(),
            body.clone(),
            assignee.clone(),
            parents.clone(),
        ),
        JobAction::Prompt { prompt, profile } => (
            job.name.clone(),
            prompt.clone(),
            Some(profile.clone()),
            Vec::new(),
        ),
    };
    let mut new = NewTask::new(title);
    new.body = body;
    new.assignee = assignee;
    new.parents = parents;
    new.created_by = Some(format!("schedule:{}", job.id));
    new.idempotency_key = Some(format!("schedule:{}:{}:{}", job.id, due.0, kind.as_str()));
    new
}

/// Records `decision` for `job`: makes the task, takes the (job, due time) row, moves the job
/// on. All in the caller's transaction, so a crash anywhere here leaves no trace.
async fn carry_out<B: ScheduleBackend>(
    b: &B,
    job: &mut Job,
    decision: FireDecision,
) -> Result<JobRun, B::Error> {
    let now = b.now();
    let task_id: Option<TaskId> = if decision.makes_task() {
        let new = task_for(job, decision.due_at, decision.kind);
        Some(super::create_task(b, &new).await?.task.id)
    } else {
        None
    };
    let run = JobRun {
        job_id: job.id.clone(),
        due_at: decision.due_at,
        fired_at: now,
        kind: decision.kind,
        covers: decision.covers,
        task_id,
        outcome: None,
    };
    if !b.insert_job_run(&run).await? {
        // Another transaction recorded this due time first: this one rolls back whole.
        return Err(StoreError::JobAlreadyFired {
            job: job.id.clone(),
            due_at: decision.due_at,
        }
        .into());
    }
    if decision.kind != FireKind::Manual {
        job.next_due = decision.next_due;
        job.runs = decision.runs;
    }
    job.last = Some(run.clone());
    job.updated_at = now;
    b.write_job(job).await?;
    b.prune_job_runs(&job.id, HISTORY_KEEP).await?;
    Ok(run)
}

/// The first parent task `job`'s template names that the board no longer holds.
async fn missing_parent<B: ScheduleBackend>(b: &B, job: &Job) -> Result<Option<TaskId>, B::Error> {
    if let JobAction::Task { parents, .. } = &job.action {
        for parent in parents {
            if b.try_task(parent).await?.is_none() {
                return Ok(Some(parent.clone()));
            }
        }
    }
    Ok(None)
}

/// Fires the active job due earliest, if one is due; `None` when none is.
pub(crate) async fn fire_next_job<B: ScheduleBackend>(b: &B) -> Result<Option<JobRun>, B::Error> {
    ensure_live(b).await?;
    let Some(mut job) = b.next_due_job().await? else {
        return Ok(None);
    };
    let timing = match job.timing() {
        Ok(t) => t,
        Err(e) => {
            // A stored schedule that no longer reads (a zone dropped from the database): the
            // job ends rather than being retried every sweep.
            tracing::warn!(board = %b.board(), job = %job.id, error = %e, "schedule job ended: its schedule no longer reads");
            job.next_due = None;
            job.updated_at = b.now();
            b.write_job(&job).await?;
            return Ok(None);
        }
    };
    let outage = b.outage().await?;
    let Some(mut decision) = plan::decide(&job, &timing, b.now(), outage) else {
        return Ok(None);
    };
    if decision.makes_task()
        && let Some(gone) = missing_parent(b, &job).await?
    {
        // The task could never be made: the job is paused (a person fixes or removes it) and
        // this due time recorded as skipped, so the sweep goes on to the other jobs.
        tracing::warn!(board = %b.board(), job = %job.id, parent = %gone, "schedule job paused: its template links to a task that is gone");
        job.paused = true;
        decision.kind = FireKind::Skipped;
        decision.runs = job.runs;
    }
    let run = carry_out(b, &mut job, decision).await?;
    tracing::debug!(board = %b.board(), job = %job.id, due = run.due_at.0, kind = run.kind.as_str(), "schedule job fired");
    Ok(Some(run))
}

/// Runs a job now by hand, leaving its schedule as it is.
pub(crate) async fn run_job_now<B: ScheduleBackend>(b: &B, key: &str) -> Result<JobRun, B::Error> {
    ensure_live(b).await?;
    let mut job = job(b, key).await?;
    let decision = FireDecision {
        due_at: b.now(),
        kind: FireKind::Manual,
        covers: 1,
        next_due: job.next_due,
        runs: job.runs,
    };
    carry_out(b, &mut job, decision).await
}

/// A job's runs, newest first, each with its task's status as its outcome.
pub(crate) async fn job_history<B: ScheduleBackend>(
    b: &B,
    key: &str,
    limit: usize,
) -> Result<Vec<JobRun>, B::Error> {
    let job = job(b, key).await?;
    let limit = i64::try_from(limit.clamp(1, 10_000)).unwrap_or(10_000);
    let mut runs = b.job_runs(&job.id, limit).await?;
    for run in &mut runs {
        run.outcome = Some(match &run.task_id {
            None => "skipped".to_string(),
            Some(id) => match b.try_task(id).await? {
                Some(t) => t.status.as_str().to_string(),
                None => "removed".to_string(),
            },
        });
    }
    Ok(runs)
}

/// Notes a sweep of the board now (see `schedule` for what an outage is).
pub(crate) async fn note_sweep<B: ScheduleBackend>(b: &B) -> Result<(), B::Error> {
    b.note_sweep(OUTAGE_GAP_MS, 1_000).await
}
