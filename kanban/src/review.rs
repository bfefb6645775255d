//! Review of a worker's completion, when its profile asks for it (`review:` in troupe.yaml).
//!
//! With a [`ReviewPolicy`] a worker's `kanban_complete` sends the task to `review` (its result
//! kept, its evidence on the run; see [`crate::evidence`]) instead of `done`. Then either a
//! person decides ([`approve`] → `done`, [`send_back`] → `ready`, the reason left as a comment
//! the next worker reads), or a reviewer profile does ([`crate::review_agent`]), at most
//! `max_rounds` times per task: past that the task stays in `review` for a person.

use std::sync::Arc;

use serde_json::json;

use crate::domain::{BoardSlug, ModelError, RunOutcome, Task, TaskId, TaskStatus};
use crate::profiles::WorkerProfile;
use crate::store::{Completion, Store, StoreError};

/// Reviews a reviewer profile may make of one task before a person must decide.
pub const DEFAULT_MAX_ROUNDS: u32 = 2;

/// Who reviews a profile's completions.
#[derive(Clone)]
pub enum ReviewPolicy {
    /// A person, from `troupe kanban review`, the HTTP API or the dashboard.
    Person,
    /// A reviewer profile, then a person once `max_rounds` reviews sent it back.
    Agent {
        /// The profile that reviews.
        reviewer: Arc<WorkerProfile>,
        /// Reviews of one task by the reviewer before a person must decide.
        max_rounds: u32,
    },
}

impl std::fmt::Debug for ReviewPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReviewPolicy::Person => f.write_str("Person"),
            ReviewPolicy::Agent {
                reviewer,
                max_rounds,
            } => f
                .debug_struct("Agent")
                .field("reviewer", &reviewer.name)
                .field("max_rounds", max_rounds)
                .finish(),
        }
    }
}

/// How many times the task's workers sent it to review (this time included).
pub async fn review_rounds(
    store: &dyn Store,
    board: &BoardSlug,
    id: &TaskId,
) -> Result<u32, StoreError> {
    let runs = store.runs(board, id).await?;
    let n = runs
        .iter()
        .filter(|r| r.outcome == Some(RunOutcome::ReviewRequested))
        .count();
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

fn not_in_review(task: &Task, action: &'static str) -> StoreError {
    StoreError::InvalidTransition {
        task: task.id.clone(),
        status: task.status,
        action,
        allowed: "review",
    }
}

/// A reviewer's yes: the task in `review` is done, with its result as the worker left it.
/// `by` names the reviewer (a person's name or `profile NAME`); `comment`, when given, is kept
/// on the task.
pub async fn approve(
    store: &dyn Store,
    board: &BoardSlug,
    id: &TaskId,
    by: &str,
    comment: Option<&str>,
) -> Result<Task, StoreError> {
    let comment = comment.map(str::trim).filter(|c| !c.is_empty());
    let summary = match comment {
        Some(c) => format!("approved by {by}: {c}"),
        None => format!("approved by {by}"),
    };
    let done = Completion {
        result: None,
        summary: Some(summary),
        metadata: Some(json!({"review": {"by": by, "verdict": "approved"}})),
        worker: None,
        usage: None,
    };
    let task = store.approve_review(board, id, &done).await?;
    if let Some(comment) = comment {
        store
            .add_comment(board, id, by, &format!("Approved: {comment}"))
            .await?;
    }
    Ok(task)
}

/// A reviewer's no: the task in `review` goes back to work (`ready`, or `todo` while a parent
/// is open) and `reason` is left as a comment, which the next worker reads with its task.
pub async fn send_back(
    store: &dyn Store,
    board: &BoardSlug,
    id: &TaskId,
    by: &str,
    reason: &str,
) -> Result<Task, StoreError> {
    let reason = reason.trim();
    let task = store.task(board, id).await?;
    if task.status != TaskStatus::Review {
        return Err(not_in_review(&task, "sent back from review"));
    }
    if reason.is_empty() {
        return Err(StoreError::Invalid(ModelError::BadField {
            field: "reason",
            why: "it is empty; send what should change".into(),
        }));
    }
    // The comment goes first, so the worker that claims the task next finds it.
    store
        .add_comment(
            board,
            id,
            by,
            &format!("Changes requested in review: {reason}"),
        )
        .await?;
    store.request_changes(board, id, reason).await
}
