//! The board's rules as pure decisions: which statuses allow which transition, where a block
//! sends a task, when failures give a task up. Every store implementation asks these, so the
//! rules (and their error texts) are the same whatever the database.

use crate::domain::{
    BLOCK_RECURRENCE_LIMIT, COMPLETED_SUMMARY_CHARS, DEFAULT_FAILURE_LIMIT, EventKind, ModelError,
    PROTOCOL_VIOLATION_LIMIT, Task, TaskStatus,
};
use crate::store::{BlockRequest, FailureKind, StoreError};

use TaskStatus::{Archived, Blocked, Done, Ready, Review, Running, Scheduled, Todo, Triage};

/// A transition's name and the statuses it may start from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gate {
    /// The transition as a past participle, for messages.
    pub(crate) action: &'static str,
    /// Statuses that allow it.
    pub(crate) from: &'static [TaskStatus],
    /// The same statuses as prose.
    pub(crate) allowed: &'static str,
}

impl Gate {
    /// Refuses the transition unless `task` is in one of the gate's statuses.
    pub(crate) fn check(&self, task: &Task) -> Result<(), StoreError> {
        if self.from.contains(&task.status) {
            Ok(())
        } else {
            Err(StoreError::InvalidTransition {
                task: task.id.clone(),
                status: task.status,
                action: self.action,
                allowed: self.allowed,
            })
        }
    }
}

pub(crate) const CLAIM: Gate = Gate {
    action: "claimed",
    from: &[Ready, Review],
    allowed: "ready or review",
};
pub(crate) const COMPLETE: Gate = Gate {
    action: "completed",
    from: &[Running, Ready, Blocked, Review],
    allowed: "running, ready, blocked or review",
};
pub(crate) const BLOCK: Gate = Gate {
    action: "blocked",
    from: &[Running, Ready],
    allowed: "running or ready",
};
pub(crate) const UNBLOCK: Gate = Gate {
    action: "unblocked",
    from: &[Blocked, Scheduled],
    allowed: "blocked or scheduled",
};
pub(crate) const ARCHIVE: Gate = Gate {
    action: "archived",
    from: &[
        Triage, Todo, Scheduled, Ready, Running, Blocked, Review, Done,
    ],
    allowed: "not yet archived",
};
pub(crate) const SCHEDULE: Gate = Gate {
    action: "scheduled",
    from: &[Todo, Ready, Blocked, Triage],
    allowed: "todo, ready, blocked or triage",
};
pub(crate) const SPECIFY: Gate = Gate {
    action: "specified",
    from: &[Triage],
    allowed: "triage",
};
pub(crate) const REQUEST_REVIEW: Gate = Gate {
    action: "sent to review",
    from: &[Running, Ready],
    allowed: "running or ready",
};
pub(crate) const REQUEST_CHANGES: Gate = Gate {
    action: "sent back from review",
    from: &[Review],
    allowed: "review",
};
pub(crate) const APPROVE_REVIEW: Gate = Gate {
    action: "approved",
    from: &[Review],
    allowed: "review",
};
pub(crate) const HEARTBEAT: Gate = Gate {
    action: "kept alive by a heartbeat",
    from: &[Running],
    allowed: "running",
};
pub(crate) const RELEASE: Gate = Gate {
    action: "released by its worker",
    from: &[Running],
    allowed: "running",
};
pub(crate) const FAIL: Gate = Gate {
    action: "recorded as failed",
    from: &[Running],
    allowed: "running",
};
pub(crate) const RATE_LIMIT: Gate = Gate {
    action: "requeued after a rate limit",
    from: &[Running],
    allowed: "running",
};

/// The failure limit that applies to a task, and where it came from: the task's own
/// `max_retries`, else the configured `kanban.failure_limit`, else 2.
pub fn effective_failure_limit(
    task_limit: Option<u32>,
    configured: Option<u32>,
) -> (u32, &'static str) {
    match (task_limit, configured) {
        (Some(n), _) => (n, "task"),
        (None, Some(n)) => (n, "config"),
        (None, None) => (DEFAULT_FAILURE_LIMIT, "default"),
    }
}

/// Where a block sends a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockDecision {
    /// The normalized kind.
    pub(crate) kind: String,
    /// The new status.
    pub(crate) target: TaskStatus,
    /// The recurrence count after this block.
    pub(crate) recurrences: u32,
    /// The event to record.
    pub(crate) event: EventKind,
}

/// Decides a block: the same kind as the previous block counts up, and reaching
/// [`BLOCK_RECURRENCE_LIMIT`] sends the task to `triage`; otherwise `dependency` waits in `todo`
/// and every other kind stops in `blocked`.
pub(crate) fn decide_block(task: &Task, req: &BlockRequest) -> Result<BlockDecision, StoreError> {
    let kind = normalize_kind(&req.kind)?;
    if req.reason.trim().is_empty() {
        return Err(ModelError::BadField {
            field: "reason",
            why: "a block needs a reason; say what the task is waiting for".to_string(),
        }
        .into());
    }
    // A worker's question is answered by a person before the task runs again, so a second
    // question after an answer is no loop: questions never count toward triage.
    let recurrences = if kind == BlockRequest::QUESTION {
        1
    } else if task.block_kind.as_deref() == Some(kind.as_str()) {
        task.block_recurrences.saturating_add(1)
    } else {
        1
    };
    let (target, event) = if recurrences >= BLOCK_RECURRENCE_LIMIT {
        (Triage, EventKind::BlockLoopDetected)
    } else if kind == BlockRequest::DEPENDENCY {
        (Todo, EventKind::DependencyWait)
    } else {
        (Blocked, EventKind::Blocked)
    };
    Ok(BlockDecision {
        kind,
        target,
        recurrences,
        event,
    })
}

fn normalize_kind(raw: &str) -> Result<String, StoreError> {
    let kind = raw.trim().to_ascii_lowercase();
    let ok = !kind.is_empty()
        && kind.len() <= 64
        && kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(kind)
    } else {
        Err(ModelError::BadField {
            field: "kind",
            why: format!(
                "block kind {raw:?} must be 1-64 letters, digits, '-' or '_' (for example \
                 \"dependency\", \"needs_input\", \"error\")"
            ),
        }
        .into())
    }
}

/// What a failure does to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailureDecision {
    /// The counter's value after this failure.
    pub(crate) failures: u32,
    /// The limit that applies.
    pub(crate) limit: u32,
    /// Where the limit came from.
    pub(crate) limit_source: &'static str,
    /// Whether the task is given up.
    pub(crate) gave_up: bool,
    /// The event for the failure itself.
    pub(crate) event: EventKind,
    /// How the run ends.
    pub(crate) outcome: crate::domain::RunOutcome,
}

/// Counts a failure. Protocol violations have their own counter and limit; crashes, timeouts
/// and spawn failures share `consecutive_failures` and the effective failure limit.
pub(crate) fn decide_failure(
    task: &Task,
    kind: FailureKind,
    configured: Option<u32>,
) -> FailureDecision {
    use crate::domain::RunOutcome;
    let (failures, (limit, limit_source), event, outcome) = match kind {
        FailureKind::ProtocolViolation => (
            task.protocol_violations.saturating_add(1),
            (PROTOCOL_VIOLATION_LIMIT, "protocol"),
            EventKind::ProtocolViolation,
            RunOutcome::ProtocolViolation,
        ),
        other => {
            let (event, outcome) = match other {
                FailureKind::TimedOut => (EventKind::TimedOut, RunOutcome::TimedOut),
                FailureKind::SpawnFailed => (EventKind::SpawnFailed, RunOutcome::SpawnFailed),
                _ => (EventKind::Crashed, RunOutcome::Crashed),
            };
            (
                task.consecutive_failures.saturating_add(1),
                effective_failure_limit(task.max_retries, configured),
                event,
                outcome,
            )
        }
    };
    let gave_up = failures >= limit;
    let outcome = if gave_up { RunOutcome::GaveUp } else { outcome };
    FailureDecision {
        failures,
        limit,
        limit_source,
        gave_up,
        event,
        outcome,
    }
}

/// The first line of a summary, cut to [`COMPLETED_SUMMARY_CHARS`] characters.
pub(crate) fn summary_line(summary: &str) -> String {
    summary
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(COMPLETED_SUMMARY_CHARS)
        .collect()
}

/// The status a task returns to when it may run again: `todo` while a parent is open.
pub(crate) fn runnable_status(parents_open: bool, preferred: TaskStatus) -> TaskStatus {
    if parents_open { Todo } else { preferred }
}

/// Whether a status still counts as unfinished for the task's children.
pub(crate) fn is_open(status: TaskStatus) -> bool {
    !matches!(status, Done | Archived)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{NewTask, TaskId, Timestamp};

    fn task(status: TaskStatus) -> Task {
        let id = TaskId::parse("t_0000abcd").unwrap();
        crate::store::ops::new_task_row(id, &NewTask::new("t"), status, None, Timestamp(0))
    }

    #[test]
    fn gate_messages_say_what_is_allowed() {
        let err = COMPLETE.check(&task(Done)).unwrap_err().to_string();
        assert_eq!(
            err,
            "t_0000abcd is done; only running, ready, blocked or review tasks can be completed"
        );
        assert!(COMPLETE.check(&task(Running)).is_ok());
    }

    #[test]
    fn limits_fall_back_task_then_config_then_two() {
        assert_eq!(effective_failure_limit(Some(5), Some(3)), (5, "task"));
        assert_eq!(effective_failure_limit(None, Some(3)), (3, "config"));
        assert_eq!(effective_failure_limit(None, None), (2, "default"));
    }

    #[test]
    fn same_kind_twice_goes_to_triage() {
        let mut t = task(Running);
        let first = decide_block(&t, &BlockRequest::new("needs_input", "why")).unwrap();
        assert_eq!((first.target, first.recurrences), (Blocked, 1));
        t.block_kind = Some(first.kind);
        t.block_recurrences = first.recurrences;
        let second = decide_block(&t, &BlockRequest::new("Needs_Input", "again")).unwrap();
        assert_eq!(
            (second.target, second.event),
            (Triage, EventKind::BlockLoopDetected)
        );
        let other = decide_block(&t, &BlockRequest::new("dependency", "wait")).unwrap();
        assert_eq!((other.target, other.recurrences), (Todo, 1));
        assert!(decide_block(&t, &BlockRequest::new("bad kind!", "x")).is_err());
        assert!(decide_block(&t, &BlockRequest::new("ok", "  ")).is_err());
    }

    #[test]
    fn answered_questions_never_go_to_triage() {
        let mut t = task(Running);
        t.block_kind = Some(BlockRequest::QUESTION.to_string());
        t.block_recurrences = 1;
        let again = decide_block(&t, &BlockRequest::new("question", "and the port?")).unwrap();
        assert_eq!((again.target, again.recurrences), (Blocked, 1));
    }

    #[test]
    fn failures_give_up_at_the_limit() {
        let mut t = task(Running);
        let d = decide_failure(&t, FailureKind::Crashed, None);
        assert_eq!((d.failures, d.limit, d.gave_up), (1, 2, false));
        t.consecutive_failures = 1;
        let d = decide_failure(&t, FailureKind::TimedOut, None);
        assert!(d.gave_up);
        assert_eq!(d.outcome, crate::domain::RunOutcome::GaveUp);
        let d = decide_failure(&t, FailureKind::ProtocolViolation, None);
        assert_eq!((d.failures, d.limit, d.gave_up), (1, 3, false));
    }

    #[test]
    fn summary_keeps_first_line_and_cap() {
        assert_eq!(summary_line("one\ntwo"), "one");
        assert_eq!(summary_line(&"x".repeat(1000)).len(), 400);
    }
}
