//! What the board runtime reports, to hooks and to subscribers: how a worker's run ended
//! ([`WorkerReport`]) and what a dispatch round did ([`DispatchReport`]). The worker and the
//! dispatcher make them; [`hooks`](crate::hooks) hands them to observers.

use serde::Serialize;

use crate::domain::{RunId, TaskId, WorkerId};
use crate::store::Claim;

/// How a worker's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerOutcome {
    /// The worker completed its task.
    Completed,
    /// The worker blocked its task.
    Blocked,
    /// The session ended without a terminal board call, reminders included.
    ProtocolViolation,
    /// The model or the session failed.
    Crashed,
    /// The run passed its max runtime and was stopped.
    TimedOut,
    /// The session could not be started.
    SpawnFailed,
    /// The model said it was rate limited; the task was requeued without counting a failure.
    RateLimited,
    /// The task was archived, blocked or taken back by someone else; the worker was stopped.
    Stopped,
    /// The lease was handed back without running the task: the dispatcher stopped, or the
    /// database was out of reach while the worker read its task.
    Released,
}

impl WorkerOutcome {
    /// The outcome as a word.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerOutcome::Completed => "completed",
            WorkerOutcome::Blocked => "blocked",
            WorkerOutcome::ProtocolViolation => "protocol_violation",
            WorkerOutcome::Crashed => "crashed",
            WorkerOutcome::TimedOut => "timed_out",
            WorkerOutcome::SpawnFailed => "spawn_failed",
            WorkerOutcome::RateLimited => "rate_limited",
            WorkerOutcome::Stopped => "stopped",
            WorkerOutcome::Released => "released",
        }
    }
}

/// What a worker reports when it ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerReport {
    /// The task.
    pub task_id: TaskId,
    /// The worker's identity (the lease holder).
    pub worker: WorkerId,
    /// The profile that ran it.
    pub assignee: String,
    /// The run.
    pub run_id: RunId,
    /// How it ended.
    pub outcome: WorkerOutcome,
    /// The error or the reason, when there is one.
    pub detail: Option<String>,
    /// Whether the failure limit was reached and the task blocked.
    pub gave_up: bool,
}

/// One task a round claimed (or, in a dry run, would claim).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimedTask {
    /// The task.
    pub task_id: TaskId,
    /// Its title.
    pub title: String,
    /// The profile that runs it.
    pub assignee: String,
    /// The run the claim opened; `None` in a dry run.
    pub run_id: Option<RunId>,
    /// The worker that holds the lease; `None` in a dry run.
    pub worker: Option<WorkerId>,
}

impl ClaimedTask {
    /// A claim this round made for `assignee`'s worker.
    pub(crate) fn made(claim: &Claim, assignee: &str, worker: &WorkerId) -> ClaimedTask {
        ClaimedTask {
            task_id: claim.task.id.clone(),
            title: claim.task.title.clone(),
            assignee: assignee.to_string(),
            run_id: Some(claim.run.id),
            worker: Some(worker.clone()),
        }
    }
}

/// What one round did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DispatchReport {
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Tasks whose lapsed lease was taken back.
    pub reclaimed: Vec<TaskId>,
    /// Tasks that became ready.
    pub promoted: Vec<TaskId>,
    /// Tasks claimed, each now run by a worker.
    pub claimed: Vec<ClaimedTask>,
    /// Ready tasks with no assignee and no usable `kanban.default_assignee`.
    pub skipped_unassigned: Vec<TaskId>,
    /// Ready tasks whose assignee is not a profile this dispatcher may run, with the name.
    pub skipped_nonspawnable: Vec<(TaskId, String)>,
    /// Ready tasks left for a later round because every slot (overall or the profile's) is
    /// taken or `max` was reached.
    pub skipped_capacity: usize,
    /// Ready tasks left alone because their last run was rate limited a short while ago.
    pub skipped_cooldown: Vec<TaskId>,
    /// Store errors met along the way (the round went on past them).
    pub errors: Vec<String>,
    /// Tasks made by scheduled jobs this round fired.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scheduled: Vec<TaskId>,
}
