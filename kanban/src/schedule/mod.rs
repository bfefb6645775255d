//! Schedules: jobs kept on a board that make work by themselves, each due time exactly once.
//!
//! A [`Job`] has a schedule ([`Timing`]: a cron expression in a time zone, `every <n><unit>`,
//! or one instant), what it makes when it fires ([`JobAction`]: a board task from a template,
//! or a prompt for a profile, run as a task assigned to that profile), a policy for due times
//! missed while no dispatcher ran ([`Missed`]), an optional end (`until`, `max_runs`) and an
//! owner. Jobs live in the board's store beside its tasks; every dispatcher of the board sweeps
//! them (see [`sweep`]), and the store fires each due time in one transaction that takes a
//! unique (job, due time) row and creates the task, so dispatchers on many hosts fire it once.
//!
//! # Missed runs
//! Each sweep notes its time on the board. A sweep that comes more than [`OUTAGE_GAP_MS`]
//! after the previous one records the stretch in between as an outage; a due time inside the
//! latest outage, or more than [`LATE_LIMIT_MS`] late, counts as missed. Missed due times of a
//! job are handled together: `skip` records them without making anything, `run_once` makes
//! one catch-up run for all of them. Either way the job then goes on from the next due time
//! after now. Due times that were merely late fire one by one.
//!
//! Layout: [`cron`] parses cron expressions and matches them in a zone (with the DST rules);
//! [`timing`] parses a schedule's text; [`plan`] the pure decisions (next due time, end
//! conditions, what a fire does); [`sweep`] the dispatcher's periodic pass.

pub mod cron;
pub mod plan;
pub mod sweep;
pub mod timing;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::domain::{TaskId, Timestamp};

pub use plan::{FireDecision, due_after, first_due};
pub use timing::{MIN_INTERVAL_MS, Timing, parse_zone};

/// A gap between two sweeps of a board longer than this is an outage.
pub const OUTAGE_GAP_MS: i64 = 5_000;
/// A due time fired later than this counts as missed even without a recorded outage.
pub const LATE_LIMIT_MS: i64 = 60_000;
/// Runs of a job kept in its history; older ones are removed as new ones are recorded.
pub const HISTORY_KEEP: i64 = 200;
/// The zone of a schedule that names none.
pub const DEFAULT_ZONE: &str = "UTC";

/// Why a job's definition was refused. Messages say what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("schedule {expr:?} is not a valid cron expression: {why}")]
    BadCron {
        /// What was sent.
        expr: String,
        /// What is wrong with it.
        why: String,
    },
    /// An `every` schedule does not parse.
    #[error(
        "schedule {schedule:?} is not a valid interval ({why}); write `every <n><unit>` with \
         unit s, m, h or d, for example \"every 10m\""
    )]
    BadInterval {
        /// What was sent.
        schedule: String,
        /// What is wrong with it.
        why: String,
    },
    /// An `every` schedule below the minimum.
    #[error(
        "schedule {schedule:?} is shorter than the minimum interval of 1 s; use \"every 1s\" or longer"
    )]
    IntervalTooShort {
        /// What was sent.
        schedule: String,
    },
    /// An instant that does not parse.
    #[error(
        "schedule {schedule:?} is not a valid ISO-8601 instant; write it like \
         \"2027-01-31T09:00:00Z\", \"2027-01-31T09:00:00+01:00\", or without an offset to read \
         it in the job's time zone"
    )]
    BadInstant {
        /// What was sent.
        schedule: String,
    },
    /// A one-time job whose instant has passed.
    #[error("schedule {schedule:?} is in the past; send a future instant")]
    InstantPassed {
        /// What was sent.
        schedule: String,
    },
    /// The text is none of the three forms.
    #[error(
        "schedule {schedule:?} cannot be read ({why}); send a cron expression (\"0 9 * * 1-5\"), \
         an interval (\"every 10m\") or an ISO-8601 instant (\"2027-01-31T09:00:00Z\")"
    )]
    Unreadable {
        /// What was sent.
        schedule: String,
        /// What is wrong with it.
        why: String,
    },
    /// The time zone is not an IANA name.
    #[error(
        "unknown time zone {zone:?}; send an IANA time zone name such as \"UTC\", \
         \"Europe/Paris\" or \"America/New_York\""
    )]
    UnknownZone {
        /// What was sent.
        zone: String,
    },
    /// The schedule never falls due (`0 0 31 2 *`, or an end before the first due time).
    #[error("job {name:?} would never run: {why}")]
    NeverDue {
        /// The job.
        name: String,
        /// Why.
        why: String,
    },
    /// Any other field out of its rules.
    #[error("{field} is not valid: {why}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What is wrong and what to send.
        why: String,
    },
}

/// What to do with due times missed while no dispatcher ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Record them, make nothing, go on with the next due time.
    #[default]
    Skip,
    /// Make one catch-up run for all of them.
    RunOnce,
}

impl Missed {
    /// The policy's name, as written in requests.
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::RunOnce => "run_once",
        }
    }

    /// Reads `skip` or `run_once`.
    pub fn parse(text: &str) -> Result<Missed, ScheduleError> {
        match text.trim() {
            "skip" => Ok(Missed::Skip),
            "run_once" | "run-once" => Ok(Missed::RunOnce),
            other => Err(ScheduleError::BadField {
                field: "missed",
                why: format!("{other:?} is not a policy; send \"skip\" or \"run_once\""),
            }),
        }
    }
}

/// What a job makes when it fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobAction {
    /// A board task from this template.
    Task {
        /// The task's title.
        title: String,
        /// The task's body.
        #[serde(default)]
        body: String,
        /// The profile it is assigned to.
        #[serde(default)]
        assignee: Option<String>,
        /// Tasks the new task waits for.
        #[serde(default)]
        parents: Vec<TaskId>,
    },
    /// A session turn: a task titled with the job's name, whose body is the prompt, assigned
    /// to the profile, so a worker of the board runs the prompt as that profile.
    Prompt {
        /// What the session is asked.
        prompt: String,
        /// The profile that answers.
        profile: String,
    },
}

impl JobAction {
    /// The profile the made task is assigned to, if any.
    pub fn profile(&self) -> Option<&str> {
        match self {
            JobAction::Task { assignee, .. } => assignee.as_deref(),
            JobAction::Prompt { profile, .. } => Some(profile),
        }
    }
}

/// How one run of a job came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FireKind {
    /// A due time fired when it came.
    OnTime,
    /// One run standing for due times missed during an outage (`run_once`).
    CatchUp,
    /// Missed due times recorded without a run (`skip`).
    Skipped,
    /// Asked for by hand (`troupe cron run`); the schedule is not moved.
    Manual,
}

impl FireKind {
    /// The kind's name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            FireKind::OnTime => "on_time",
            FireKind::CatchUp => "catch_up",
            FireKind::Skipped => "skipped",
            FireKind::Manual => "manual",
        }
    }

    /// Reads a stored kind.
    pub fn parse(text: &str) -> Option<FireKind> {
        Some(match text {
            "on_time" => FireKind::OnTime,
            "catch_up" => FireKind::CatchUp,
            "skipped" => FireKind::Skipped,
            "manual" => FireKind::Manual,
            _ => return None,
        })
    }
}

/// One recorded run of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    /// The job.
    pub job_id: String,
    /// The due time it stands for (the last of them for a catch-up or a skip).
    pub due_at: Timestamp,
    /// When it was recorded.
    pub fired_at: Timestamp,
    /// How it came about.
    pub kind: FireKind,
    /// Due times it stands for (more than one for a catch-up or a skip).
    pub covers: u32,
    /// The task it made, if any.
    pub task_id: Option<TaskId>,
    /// The made task's status when read (`done`, `running`, …); `removed` once the task is
    /// gone, `skipped` for a skip.
    #[serde(default)]
    pub outcome: Option<String>,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// `j_` and 8 hex digits.
    pub id: String,
    /// A name, unique on the board.
    pub name: String,
    /// Who made it: a profile for a job an agent made, else the person or tool that did.
    pub owner: String,
    /// The schedule as written.
    pub schedule: String,
    /// The IANA time zone cron expressions and offset-less instants are read in.
    pub timezone: String,
    /// Where `every` schedules count from (creation, or the last change of schedule or resume).
    pub anchor: Timestamp,
    /// What a run makes.
    pub action: JobAction,
    /// What happens to missed due times.
    pub missed: Missed,
    /// No due time after this.
    pub until: Option<Timestamp>,
    /// At most this many scheduled runs (manual runs not counted).
    pub max_runs: Option<u32>,
    /// Paused jobs do not fire.
    pub paused: bool,
    /// The next due time; `None` once the job has ended.
    pub next_due: Option<Timestamp>,
    /// Scheduled runs made so far (catch-ups included, skips not).
    pub runs: u32,
    /// The latest run.
    pub last: Option<JobRun>,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl Job {
    /// The parsed schedule.
    pub fn timing(&self) -> Result<Timing, ScheduleError> {
        Timing::parse(&self.schedule, &self.timezone)
    }

    /// `active`, `paused` or `ended`.
    pub fn state(&self) -> &'static str {
        if self.next_due.is_none() {
            "ended"
        } else if self.paused {
            "paused"
        } else {
            "active"
        }
    }

    /// When the store should next look at it: nothing while paused or ended.
    pub fn fire_at(&self) -> Option<Timestamp> {
        if self.paused { None } else { self.next_due }
    }
}

/// A job to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// A name, unique on the board.
    pub name: String,
    /// Who makes it.
    pub owner: String,
    /// The schedule text.
    pub schedule: String,
    /// The zone; [`DEFAULT_ZONE`] when `None`.
    #[serde(default)]
    pub timezone: Option<String>,
    /// What a run makes.
    pub action: JobAction,
    /// What happens to missed due times.
    #[serde(default)]
    pub missed: Missed,
    /// No due time after this.
    #[serde(default)]
    pub until: Option<Timestamp>,
    /// At most this many scheduled runs.
    #[serde(default)]
    pub max_runs: Option<u32>,
    /// Made paused.
    #[serde(default)]
    pub paused: bool,
}

/// A change to a job; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPatch {
    /// A new name.
    #[serde(default)]
    pub name: Option<String>,
    /// A new schedule (re-anchors `every` schedules at the change).
    #[serde(default)]
    pub schedule: Option<String>,
    /// A new zone.
    #[serde(default)]
    pub timezone: Option<String>,
    /// A new action.
    #[serde(default)]
    pub action: Option<JobAction>,
    /// A new missed-run policy.
    #[serde(default)]
    pub missed: Option<Missed>,
    /// A new end date (`Some(None)` removes it).
    #[serde(default)]
    pub until: Option<Option<Timestamp>>,
    /// A new run limit (`Some(None)` removes it).
    #[serde(default)]
    pub max_runs: Option<Option<u32>>,
    /// Pause (`true`) or resume (`false`).
    #[serde(default)]
    pub paused: Option<bool>,
}

/// The most runs one sweep records on a board before it yields to the next sweep.
pub const SWEEP_LIMIT: usize = 20_000;
