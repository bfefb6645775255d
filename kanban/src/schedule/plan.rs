//! The pure decisions about a job: its next due time under its end conditions, and what firing
//! it now does (a run on time, one catch-up run, or a recorded skip). The store carries them
//! out; keeping them here lets them be tested without a database.

use super::{FireKind, Job, LATE_LIMIT_MS, Missed, Timing};
use crate::domain::Timestamp;

/// Most missed due times counted one by one for a single catch-up or skip; past this the job
/// jumps straight to the first due time after now.
const MISSED_COUNT_CAP: u32 = 10_000;

/// The first due time strictly after `after`, or `None` when the job has ended: its run limit
/// is reached, its schedule has no further time, or that time is past its `until`.
pub fn due_after(job: &Job, timing: &Timing, after: Timestamp) -> Option<Timestamp> {
    if job.max_runs.is_some_and(|max| job.runs >= max) {
        return None;
    }
    let next = timing.next_after(after, job.anchor)?;
    match job.until {
        Some(until) if next > until => None,
        _ => Some(next),
    }
}

/// The first due time of a job made (or re-anchored) at `now`: an `every` job first falls due
/// one period after its anchor, a one-time job at its instant even if that has just passed.
pub fn first_due(job: &Job, timing: &Timing, now: Timestamp) -> Option<Timestamp> {
    match timing {
        Timing::Once(at) => {
            let probe = Timestamp(at.0.min(now.0) - 1);
            due_after(job, timing, probe)
        }
        _ => due_after(job, timing, now),
    }
}

/// What firing a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireDecision {
    /// The due time recorded (the last one covered, for a catch-up or a skip).
    pub due_at: Timestamp,
    /// How the run comes about.
    pub kind: FireKind,
    /// How many due times it stands for.
    pub covers: u32,
    /// The job's next due time afterwards.
    pub next_due: Option<Timestamp>,
    /// The job's run count afterwards.
    pub runs: u32,
}

impl FireDecision {
    /// Whether this fire makes a task.
    pub fn makes_task(&self) -> bool {
        self.kind != FireKind::Skipped
    }
}

/// The outage a board recorded last: due times in `(from, to]` fell while no dispatcher swept.
pub type Outage = Option<(Timestamp, Timestamp)>;

/// What a fire of `job` at `now` does, or `None` when it is not due (paused, ended, or later).
pub fn decide(job: &Job, timing: &Timing, now: Timestamp, outage: Outage) -> Option<FireDecision> {
    let due = job.next_due?;
    if job.paused || due > now {
        return None;
    }
    let missed = |t: Timestamp| {
        outage.is_some_and(|(from, to)| t > from && t <= to) || now.0 - t.0 > LATE_LIMIT_MS
    };
    if !missed(due) {
        let mut after = job.clone();
        after.runs = job.runs.saturating_add(1);
        return Some(FireDecision {
            due_at: due,
            kind: FireKind::OnTime,
            covers: 1,
            next_due: due_after(&after, timing, due),
            runs: after.runs,
        });
    }
    // Gather the stretch of missed due times that starts here.
    let mut last = due;
    let mut covers = 1u32;
    let mut capped = false;
    while let Some(next) = due_after(job, timing, last) {
        if next > now || !missed(next) {
            break;
        }
        if covers >= MISSED_COUNT_CAP {
            capped = true;
            break;
        }
        last = next;
        covers += 1;
    }
    let (kind, runs) = match job.missed {
        Missed::Skip => (FireKind::Skipped, job.runs),
        Missed::RunOnce => (FireKind::CatchUp, job.runs.saturating_add(1)),
    };
    let mut after = job.clone();
    after.runs = runs;
    // A stretch too long to count goes on from now, where nothing is missed any more.
    let from = if capped { now.max(last) } else { last };
    Some(FireDecision {
        due_at: last,
        kind,
        covers,
        next_due: due_after(&after, timing, from),
        runs,
    })
}
