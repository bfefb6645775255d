//! Every store operation, written once: what may change, which events are written and what the
//! new state is. A [`Backend`] only carries the decision out, in its own SQL and inside the
//! transaction its store opened; the pure rules these operations ask come from `rules.rs`.
//!
//! This file holds the building blocks every operation uses (the compare-and-swap, events, the
//! lease holder's checks); `board.rs` the operations on a board's contents, `lifecycle.rs` those
//! that move tasks through their statuses.

use crate::domain::{EventKind, Lease, ModelError, RunId, Task, TaskId, TaskStatus, WorkerId};
use crate::store::StoreError;
use crate::store::backend::{Backend, NewEvent, RunEnd, Set, Side};
use crate::store::rules;

mod board;
mod lifecycle;
pub(crate) mod payload;
mod schedules;

use payload::payload;

// A task row as `create_task` builds it, for the rules' tests.
#[cfg(test)]
pub(crate) use board::new_task_row;

pub(crate) use board::{
    add_comment, archive_board, assign_task, attach, attachment_content, attachments, board_links,
    comments, create_board, create_task, events_since, link, links, list_tasks, patch_task,
    record_run_usage, remove_attachment, run, runs, stats, task_context, task_events, unlink,
};
pub(crate) use lifecycle::{approve_review, submit_for_review};
pub(crate) use lifecycle::{
    archive, block, claim_many, claim_next, claim_task, complete, heartbeat, promote,
    reclaim_expired, record_failure, release, request_changes, request_review,
    requeue_rate_limited, schedule, specify, unblock,
};
pub(crate) use schedules::{
    create_job, delete_job, fire_next_job, job, job_history, jobs, note_sweep, run_job_now,
    update_job,
};

fn non_empty(field: &'static str, value: &str, example: &str) -> Result<(), ModelError> {
    if value.trim().is_empty() {
        Err(ModelError::BadField {
            field,
            why: format!("it is empty; send {example}"),
        })
    } else {
        Ok(())
    }
}

// ---- building blocks ----

/// Appends an event; `payload` is JSON text (see [`payload!`]).
fn emit<B: Backend>(
    b: &B,
    task: Option<&TaskId>,
    run: Option<RunId>,
    kind: EventKind,
    payload: String,
) -> Result<(), B::Error> {
    b.event(NewEvent {
        task,
        run,
        kind,
        payload,
    })
}

/// A task of this board; `TaskNotFound` otherwise.
pub(crate) async fn task<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    b.try_task(id).await?.ok_or_else(|| {
        StoreError::TaskNotFound {
            board: b.board().clone(),
            id: id.clone(),
        }
        .into()
    })
}

/// The board row, refused when the board is archived.
async fn ensure_live<B: Backend>(b: &B) -> Result<(), B::Error> {
    if b.board_archived().await? {
        return Err(StoreError::BoardArchived {
            slug: b.board().clone(),
        }
        .into());
    }
    Ok(())
}

/// The compare-and-swap every status change goes through: the row changes only if it is still
/// in the status it was read in.
async fn cas<B: Backend>(
    b: &B,
    task: &Task,
    to: TaskStatus,
    sets: &[Set<'_>],
) -> Result<(), B::Error> {
    if b.swap_status(task, to, sets).await? {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            task: task.id.clone(),
        }
        .into())
    }
}

/// Refuses a worker that does not hold the task's lease.
fn check_holder(task: &Task, worker: Option<&WorkerId>) -> Result<(), StoreError> {
    let Some(worker) = worker else { return Ok(()) };
    let holds = task.status == TaskStatus::Running
        && task.lease.as_ref().is_some_and(|l| &l.worker == worker);
    if holds {
        Ok(())
    } else {
        Err(StoreError::LeaseNotHeld {
            task: task.id.clone(),
            worker: worker.to_string(),
            holder: task.lease.as_ref().map(|l| l.worker.to_string()),
        })
    }
}

/// The lease `worker` holds on `task`; `LeaseNotHeld` when it holds none.
fn held_lease(task: &Task, worker: &WorkerId) -> Result<Lease, StoreError> {
    check_holder(task, Some(worker))?;
    task.lease.clone().ok_or_else(|| StoreError::LeaseNotHeld {
        task: task.id.clone(),
        worker: worker.to_string(),
        holder: None,
    })
}

/// Ends the task's open run, if any.
async fn close_run<B: Backend>(
    b: &B,
    task: &Task,
    end: RunEnd<'_>,
) -> Result<Option<RunId>, B::Error> {
    let Some(lease) = &task.lease else {
        return Ok(None);
    };
    b.end_run(lease.run_id, end).await?;
    Ok(Some(lease.run_id))
}

/// The status the open run was claimed from (`ready` when there is none).
async fn source_status<B: Backend>(b: &B, task: &Task) -> Result<TaskStatus, B::Error> {
    let Some(lease) = &task.lease else {
        return Ok(TaskStatus::Ready);
    };
    match b.run_source(lease.run_id).await?.as_deref() {
        Some("review") => Ok(TaskStatus::Review),
        _ => Ok(TaskStatus::Ready),
    }
}

/// Where a task goes when it may run again: `preferred`, or `todo` while a parent is open.
async fn runnable<B: Backend>(
    b: &B,
    id: &TaskId,
    preferred: TaskStatus,
) -> Result<TaskStatus, B::Error> {
    let open = !b.open_parents(id).await?.is_empty();
    Ok(rules::runnable_status(open, preferred))
}

/// Makes every `todo` child of `parent` whose parents are now all finished `ready`.
async fn promote_children<B: Backend>(b: &B, parent: &TaskId) -> Result<(), B::Error> {
    for child in b.linked(parent, Side::Children).await? {
        let task = task(b, &child).await?;
        if task.status == TaskStatus::Todo && b.open_parents(&child).await?.is_empty() {
            cas(b, &task, TaskStatus::Ready, &[]).await?;
            emit(
                b,
                Some(&child),
                None,
                EventKind::Promoted,
                payload! {"from": "todo", "to": "ready", "by": parent.as_str()},
            )?;
        }
    }
    Ok(())
}
