//! What a board keeps about what happened: the event log, runs, attachments and the board's
//! counts.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{EventId, RunId, TaskId, TaskStatus, Timestamp, WorkerId};

/// What happened, as recorded in the event log. The token is stored and shown as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "each variant is named by its spec token, shown by as_str"
)]
pub enum EventKind {
    Created,
    Promoted,
    Claimed,
    ClaimRejected,
    ClaimExtended,
    Completed,
    Blocked,
    DependencyWait,
    BlockLoopDetected,
    Unblocked,
    Archived,
    ReviewRequested,
    ChangesRequested,
    Scheduled,
    Specified,
    Assigned,
    Edited,
    Reprioritized,
    Linked,
    Unlinked,
    Commented,
    Attached,
    AttachmentRemoved,
    Heartbeat,
    Reclaimed,
    Crashed,
    TimedOut,
    SpawnFailed,
    ProtocolViolation,
    GaveUp,
    RateLimited,
    BoardCreated,
    BoardArchived,
}

impl EventKind {
    /// Every kind the store writes.
    pub const ALL: [EventKind; 33] = [
        EventKind::Created,
        EventKind::Promoted,
        EventKind::Claimed,
        EventKind::ClaimRejected,
        EventKind::ClaimExtended,
        EventKind::Completed,
        EventKind::Blocked,
        EventKind::DependencyWait,
        EventKind::BlockLoopDetected,
        EventKind::Unblocked,
        EventKind::Archived,
        EventKind::ReviewRequested,
        EventKind::ChangesRequested,
        EventKind::Scheduled,
        EventKind::Specified,
        EventKind::Assigned,
        EventKind::Edited,
        EventKind::Reprioritized,
        EventKind::Linked,
        EventKind::Unlinked,
        EventKind::Commented,
        EventKind::Attached,
        EventKind::AttachmentRemoved,
        EventKind::Heartbeat,
        EventKind::Reclaimed,
        EventKind::Crashed,
        EventKind::TimedOut,
        EventKind::SpawnFailed,
        EventKind::ProtocolViolation,
        EventKind::GaveUp,
        EventKind::RateLimited,
        EventKind::BoardCreated,
        EventKind::BoardArchived,
    ];

    /// The token as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Promoted => "promoted",
            EventKind::Claimed => "claimed",
            EventKind::ClaimRejected => "claim_rejected",
            EventKind::ClaimExtended => "claim_extended",
            EventKind::Completed => "completed",
            EventKind::Blocked => "blocked",
            EventKind::DependencyWait => "dependency_wait",
            EventKind::BlockLoopDetected => "block_loop_detected",
            EventKind::Unblocked => "unblocked",
            EventKind::Archived => "archived",
            EventKind::ReviewRequested => "review_requested",
            EventKind::ChangesRequested => "changes_requested",
            EventKind::Scheduled => "scheduled",
            EventKind::Specified => "specified",
            EventKind::Assigned => "assigned",
            EventKind::Edited => "edited",
            EventKind::Reprioritized => "reprioritized",
            EventKind::Linked => "linked",
            EventKind::Unlinked => "unlinked",
            EventKind::Commented => "commented",
            EventKind::Attached => "attached",
            EventKind::AttachmentRemoved => "attachment_removed",
            EventKind::Heartbeat => "heartbeat",
            EventKind::Reclaimed => "reclaimed",
            EventKind::Crashed => "crashed",
            EventKind::TimedOut => "timed_out",
            EventKind::SpawnFailed => "spawn_failed",
            EventKind::ProtocolViolation => "protocol_violation",
            EventKind::GaveUp => "gave_up",
            EventKind::RateLimited => "rate_limited",
            EventKind::BoardCreated => "board_created",
            EventKind::BoardArchived => "board_archived",
        }
    }

    /// Reads a stored token.
    pub fn parse(token: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == token)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a board's append-only event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Strictly increasing within the board; pass the last one seen to `events_since`.
    pub id: EventId,
    /// The task it is about; `None` for board-level events.
    pub task_id: Option<TaskId>,
    /// The run it is about, when there is one.
    pub run_id: Option<RunId>,
    /// What happened.
    pub kind: EventKind,
    /// Details, as a JSON object.
    pub payload: serde_json::Value,
    /// When it was recorded.
    pub created_at: Timestamp,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunOutcome {
    /// The worker completed the task.
    Completed,
    /// The worker (or an operator) blocked the task.
    Blocked,
    /// The worker process or actor died.
    Crashed,
    /// The run exceeded the task's max runtime.
    TimedOut,
    /// The worker could not be started.
    SpawnFailed,
    /// The worker ended without a terminal board call.
    ProtocolViolation,
    /// The failure limit was reached on this run.
    GaveUp,
    /// The lease lapsed, or the task was archived, and the claim was taken back.
    Reclaimed,
    /// The provider rate-limited the worker; requeued without counting a failure.
    RateLimited,
    /// The worker asked for a review.
    ReviewRequested,
}

impl RunOutcome {
    /// The token as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Completed => "completed",
            RunOutcome::Blocked => "blocked",
            RunOutcome::Crashed => "crashed",
            RunOutcome::TimedOut => "timed_out",
            RunOutcome::SpawnFailed => "spawn_failed",
            RunOutcome::ProtocolViolation => "protocol_violation",
            RunOutcome::GaveUp => "gave_up",
            RunOutcome::Reclaimed => "reclaimed",
            RunOutcome::RateLimited => "rate_limited",
            RunOutcome::ReviewRequested => "review_requested",
        }
    }

    /// Reads a stored token.
    pub fn parse(token: &str) -> Option<RunOutcome> {
        [
            RunOutcome::Completed,
            RunOutcome::Blocked,
            RunOutcome::Crashed,
            RunOutcome::TimedOut,
            RunOutcome::SpawnFailed,
            RunOutcome::ProtocolViolation,
            RunOutcome::GaveUp,
            RunOutcome::Reclaimed,
            RunOutcome::RateLimited,
            RunOutcome::ReviewRequested,
        ]
        .into_iter()
        .find(|o| o.as_str() == token)
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt at a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Its id.
    pub id: RunId,
    /// The task attempted.
    pub task_id: TaskId,
    /// The assignee profile at claim time.
    pub profile: Option<String>,
    /// The status the task was claimed from (`ready` or `review`); a reclaim returns there.
    pub source_status: TaskStatus,
    /// Who held the lease; `None` for a run synthesized at completion of an unclaimed task.
    pub worker: Option<WorkerId>,
    /// When the lease lapses (last value while open).
    pub lease_expires_at: Option<Timestamp>,
    /// The task's max runtime when the run began.
    pub max_runtime_seconds: Option<u64>,
    /// Latest heartbeat.
    pub last_heartbeat_at: Option<Timestamp>,
    /// When it began.
    pub started_at: Timestamp,
    /// When it ended; `None` while open.
    pub ended_at: Option<Timestamp>,
    /// How it ended; `None` while open.
    pub outcome: Option<RunOutcome>,
    /// Short summary given at the end.
    pub summary: Option<String>,
    /// Structured details given at the end.
    pub metadata: Option<serde_json::Value>,
    /// The error, for failed runs.
    pub error: Option<String>,
    /// What the run's model requests used and cost (tokens, dollars, working seconds), as
    /// the worker recorded it when the run ended; `None` for runs no worker drove.
    #[serde(default)]
    pub usage: Option<serde_json::Value>,
}

/// A file kept with a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Increasing within a board.
    pub id: i64,
    /// The task it belongs to.
    pub task_id: TaskId,
    /// Its name (no directories).
    pub filename: String,
    /// Its MIME type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Who uploaded it.
    pub uploaded_by: Option<String>,
    /// When.
    pub created_at: Timestamp,
}

/// A file to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAttachment {
    /// Its name; directories are refused.
    pub filename: String,
    /// Its MIME type.
    pub content_type: String,
    /// The bytes, at most [`ATTACHMENT_CAP_BYTES`](super::ATTACHMENT_CAP_BYTES).
    pub content: Vec<u8>,
    /// Who uploads it.
    pub uploaded_by: Option<String>,
}

/// Counts of a board's tasks per status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardStats {
    /// `(status, count)` for every status, in lifecycle order.
    pub by_status: Vec<(TaskStatus, u64)>,
    /// Open runs.
    pub open_runs: u64,
    /// The newest event id (the cursor a live feed would start after).
    pub last_event_id: EventId,
}

impl BoardStats {
    /// The count for one status.
    pub fn count(&self, status: TaskStatus) -> u64 {
        self.by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    }
}
