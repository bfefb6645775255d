//! Operations that move tasks through their statuses: promotion, claims, heartbeats, the
//! terminal calls, archiving, scheduling, review, reclaiming and releasing leases, failures
//! and rate limits.

use serde_json::Value;

use super::payload::{Payload, Shown, payload};
use super::{
    cas, check_holder, close_run, emit, ensure_live, held_lease, non_empty, promote_children,
    runnable, source_status, task,
};
use crate::domain::{
    EventKind, Lease, Run, RunOutcome, Task, TaskId, TaskStatus, Timestamp, WorkerId,
};
use crate::store::backend::{Backend, Pick, RunEnd, RunRow, Set, sql_int};
use crate::store::rules;
use crate::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Failure, FailureOutcome, Reclaimed, StoreError,
    Transitioned,
};

// ---- lifecycle ----

pub(crate) async fn promote<B: Backend>(b: &B) -> Result<Vec<TaskId>, B::Error> {
    let mut promoted = Vec::new();
    for id in b.pick(Pick::Due).await? {
        let task = task(b, &id).await?;
        let to = runnable(b, &id, TaskStatus::Ready).await?;
        cas(b, &task, to, &[Set::Null("scheduled_until")]).await?;
        emit(
            b,
            Some(&id),
            None,
            EventKind::Promoted,
            payload! {"from": "scheduled", "to": to.as_str()},
        )?;
        if to == TaskStatus::Ready {
            promoted.push(id);
        }
    }
    for id in b.pick(Pick::Unblocked).await? {
        let task = task(b, &id).await?;
        cas(b, &task, TaskStatus::Ready, &[]).await?;
        emit(
            b,
            Some(&id),
            None,
            EventKind::Promoted,
            payload! {"from": "todo", "to": "ready"},
        )?;
        promoted.push(id);
    }
    Ok(promoted)
}

/// Claims the best ready task; tasks found with an open parent go back to `todo`.
pub(crate) async fn claim_next<B: Backend>(
    b: &B,
    spec: &ClaimSpec,
) -> Result<Option<Claim>, B::Error> {
    ensure_live(b).await?;
    next_ready(b, spec).await
}

/// Claims the best ready task for each spec in turn, all in this one transaction; stops at the
/// first spec that finds nothing. One commit for many claims is what makes a dispatcher with
/// many free slots fast; each claim is decided exactly as [`claim_next`] decides it.
pub(crate) async fn claim_many<B: Backend>(
    b: &B,
    specs: &[ClaimSpec],
) -> Result<Vec<Claim>, B::Error> {
    ensure_live(b).await?;
    // A backend that can claims the plain cases in one step; what is left (tasks found with
    // an open parent, specs naming different profiles) goes one by one, as `claim_next` would.
    let same_profiles = specs.windows(2).all(|w| w[0].assignees == w[1].assignees);
    let mut claims = if same_profiles
        && specs
            .first()
            .is_some_and(|s| s.assignees.as_ref().is_none_or(|a| !a.is_empty()))
    {
        b.claim_batch(specs).await?
    } else {
        Vec::new()
    };
    for claim in &claims {
        emit(
            b,
            Some(&claim.task.id),
            Some(claim.run.id),
            EventKind::Claimed,
            payload! {"lock": Shown(&claim.lease.worker), "expires": claim.lease.expires_at.0,
            "run_id": claim.run.id.0, "from": TaskStatus::Ready.as_str()},
        )?;
    }
    for spec in specs.iter().skip(claims.len()) {
        match next_ready(b, spec).await? {
            Some(claim) => claims.push(claim),
            None => break,
        }
    }
    Ok(claims)
}

/// [`claim_next`] on a board already known to be live.
async fn next_ready<B: Backend>(b: &B, spec: &ClaimSpec) -> Result<Option<Claim>, B::Error> {
    if spec.assignees.as_ref().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    loop {
        let next = b.pick(Pick::NextReady(spec.assignees.as_deref())).await?;
        let Some(id) = next.into_iter().next() else {
            return Ok(None);
        };
        let task = task(b, &id).await?;
        // Each pass either claims or moves one task out of `ready`, so this ends.
        if let Some(claim) = try_claim(b, &task, spec).await? {
            return Ok(Some(claim));
        }
    }
}

/// Claims one named task.
pub(crate) async fn claim_task<B: Backend>(
    b: &B,
    id: &TaskId,
    spec: &ClaimSpec,
) -> Result<Claim, B::Error> {
    ensure_live(b).await?;
    let task = task(b, id).await?;
    rules::CLAIM.check(&task)?;
    match try_claim(b, &task, spec).await? {
        Some(claim) => Ok(claim),
        None => Err(StoreError::ParentsOpen {
            task: id.clone(),
            action: "claimed",
            open_parents: b.open_parents(id).await?,
        }
        .into()),
    }
}

/// The claim itself: `None` (and the task back in `todo`) when a parent is still open.
async fn try_claim<B: Backend>(
    b: &B,
    task: &Task,
    spec: &ClaimSpec,
) -> Result<Option<Claim>, B::Error> {
    let open = b.open_parents(&task.id).await?;
    if !open.is_empty() && task.status == TaskStatus::Ready {
        cas(b, task, TaskStatus::Todo, &[]).await?;
        let ids: Vec<&str> = open.iter().map(TaskId::as_str).collect();
        emit(
            b,
            Some(&task.id),
            None,
            EventKind::ClaimRejected,
            payload! {"open_parents": ids},
        )?;
        return Ok(None);
    }
    let now = b.now();
    let expires = now.plus(spec.ttl);
    let lock = spec.worker.to_string();
    let run = RunRow {
        lock: Some(&lock),
        expires: Some(expires.0),
        max_runtime_seconds: task.max_runtime_seconds.map(sql_int),
        heartbeat: Some(now.0),
        ..RunRow::of(task, now)
    };
    let run_id = b.insert_run(&run).await?;
    cas(
        b,
        task,
        TaskStatus::Running,
        &[
            Set::Text("claim_lock", Some(&lock)),
            Set::Int("claim_expires", expires.0),
            Set::Int("current_run_id", run_id.0),
            Set::Int("last_heartbeat_at", now.0),
            Set::IntIfUnset("started_at", now.0),
        ],
    )
    .await?;
    emit(
        b,
        Some(&task.id),
        Some(run_id),
        EventKind::Claimed,
        payload! {"lock": lock, "expires": expires.0, "run_id": run_id.0, "from": task.status.as_str()},
    )?;
    let lease = Lease {
        worker: spec.worker.clone(),
        expires_at: expires,
        run_id,
    };
    // The task and run as just written, without reading them back (two statements and two
    // row decodes less per claim). Only a worker id that would not read back the same (no
    // host, say) takes the long way, so the answer is always what a read would give.
    if WorkerId::parse(&lock).ok().as_ref() != Some(&spec.worker) {
        return Ok(Some(Claim {
            task: super::task(b, &task.id).await?,
            lease,
            run: super::run(b, run_id).await?,
        }));
    }
    Ok(Some(Claim {
        task: claimed(task, &lease, now),
        run: Run {
            id: run_id,
            task_id: task.id.clone(),
            profile: task.assignee.clone(),
            source_status: task.status,
            worker: Some(spec.worker.clone()),
            lease_expires_at: Some(expires),
            max_runtime_seconds: run.max_runtime_seconds.and_then(|s| u64::try_from(s).ok()),
            last_heartbeat_at: Some(now),
            started_at: now,
            ended_at: None,
            outcome: None,
            summary: None,
            metadata: None,
            error: None,
            usage: None,
        },
        lease,
    }))
}

/// `task` as the claim's status change leaves it (see the columns [`try_claim`] writes).
fn claimed(task: &Task, lease: &Lease, now: Timestamp) -> Task {
    Task {
        status: TaskStatus::Running,
        updated_at: now,
        started_at: task.started_at.or(Some(now)),
        lease: Some(lease.clone()),
        last_heartbeat_at: Some(now),
        ..task.clone()
    }
}

pub(crate) async fn heartbeat<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: &WorkerId,
    ttl: std::time::Duration,
) -> Result<Lease, B::Error> {
    let task = task(b, id).await?;
    rules::HEARTBEAT.check(&task)?;
    let lease = held_lease(&task, worker)?;
    let now = b.now();
    let expires = now.plus(ttl);
    cas(
        b,
        &task,
        TaskStatus::Running,
        &[
            Set::Int("claim_expires", expires.0),
            Set::Int("last_heartbeat_at", now.0),
        ],
    )
    .await?;
    b.extend_run(lease.run_id, expires).await?;
    emit(
        b,
        Some(id),
        Some(lease.run_id),
        EventKind::Heartbeat,
        payload! {"expires": expires.0},
    )?;
    Ok(Lease {
        worker: worker.clone(),
        expires_at: expires,
        run_id: lease.run_id,
    })
}

pub(crate) async fn complete<B: Backend>(
    b: &B,
    id: &TaskId,
    done: &Completion,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::COMPLETE.check(&task)?;
    check_holder(&task, done.worker.as_ref())?;
    let open = b.open_parents(id).await?;
    if !open.is_empty() {
        return Err(StoreError::ParentsOpen {
            task: id.clone(),
            action: "completed",
            open_parents: open,
        }
        .into());
    }
    let summary = done.summary.as_deref();
    let end = RunEnd {
        summary,
        metadata: done.metadata.as_ref(),
        ..RunEnd::with(RunOutcome::Completed)
    };
    let run_id = match close_run(b, &task, end).await? {
        Some(run) => run,
        None => {
            // Never claimed: record a zero-length run so every completion has one.
            let metadata = done.metadata.as_ref().map(Value::to_string);
            let now = b.now();
            let run = RunRow {
                ended: Some(now.0),
                outcome: Some(RunOutcome::Completed.as_str()),
                summary,
                metadata: metadata.as_deref(),
                ..RunRow::of(&task, now)
            };
            b.insert_run(&run).await?
        }
    };
    // The run's spend goes with its completion: one transaction, no separate write after.
    if let Some(usage) = &done.usage {
        b.write_run_usage(run_id, usage).await?;
    }
    cas(
        b,
        &task,
        TaskStatus::Done,
        &[
            Set::TextIfGiven("result", done.result.as_deref()),
            Set::Int("completed_at", b.now().0),
            Set::Zero("consecutive_failures"),
            Set::Zero("protocol_violations"),
            Set::Null("last_failure_error"),
            Set::Null("block_kind"),
            Set::Null("block_reason"),
            Set::Zero("block_recurrences"),
            Set::EndLease,
            Set::Null("scheduled_until"),
        ],
    )
    .await?;
    let result_len = done.result.as_ref().map_or(0, |r| r.chars().count());
    emit(
        b,
        Some(id),
        Some(run_id),
        EventKind::Completed,
        payload! {"result_len": result_len, "summary": summary.map(rules::summary_line)},
    )?;
    promote_children(b, id).await?;
    super::task(b, id).await
}

pub(crate) async fn block<B: Backend>(
    b: &B,
    id: &TaskId,
    req: &BlockRequest,
) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::BLOCK.check(&task)?;
    check_holder(&task, req.worker.as_ref())?;
    let d = rules::decide_block(&task, req)?;
    let end = RunEnd {
        summary: Some(&req.reason),
        ..RunEnd::with(RunOutcome::Blocked)
    };
    let run = close_run(b, &task, end).await?;
    cas(
        b,
        &task,
        d.target,
        &[
            Set::Text("block_kind", Some(&d.kind)),
            Set::Text("block_reason", Some(&req.reason)),
            Set::Int("block_recurrences", i64::from(d.recurrences)),
            Set::EndLease,
        ],
    )
    .await?;
    let mut payload = Payload::new();
    payload
        .field("reason", &req.reason)
        .field("kind", &d.kind)
        .field("recurrences", &d.recurrences)
        .field("to", d.target.as_str());
    if d.event == EventKind::BlockLoopDetected {
        payload.field("limit", &crate::domain::BLOCK_RECURRENCE_LIMIT);
    }
    emit(b, Some(id), run, d.event, payload.finish())?;
    Ok(Transitioned {
        task: super::task(b, id).await?,
        ended_lease: task.lease,
    })
}

pub(crate) async fn unblock<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::UNBLOCK.check(&task)?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    // An explicit unblock is a fresh chance: failure counters start again. The block kind
    // stays, so the same block coming straight back is still caught as a loop.
    let sets = [
        Set::Null("scheduled_until"),
        Set::Zero("consecutive_failures"),
        Set::Zero("protocol_violations"),
    ];
    cas(b, &task, to, &sets).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Unblocked,
        payload! {"from": task.status.as_str(), "to": to.as_str()},
    )?;
    super::task(b, id).await
}

pub(crate) async fn archive<B: Backend>(b: &B, id: &TaskId) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::ARCHIVE.check(&task)?;
    let end = RunEnd {
        error: Some("task archived"),
        ..RunEnd::with(RunOutcome::Reclaimed)
    };
    let run = close_run(b, &task, end).await?;
    let sets = [Set::EndLease, Set::Null("scheduled_until")];
    cas(b, &task, TaskStatus::Archived, &sets).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::Archived,
        payload! {"from": task.status.as_str()},
    )?;
    promote_children(b, id).await?;
    Ok(Transitioned {
        task: super::task(b, id).await?,
        ended_lease: task.lease,
    })
}

pub(crate) async fn schedule<B: Backend>(
    b: &B,
    id: &TaskId,
    until: Timestamp,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::SCHEDULE.check(&task)?;
    let sets = [Set::Int("scheduled_until", until.0)];
    cas(b, &task, TaskStatus::Scheduled, &sets).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Scheduled,
        payload! {"from": task.status.as_str(), "until": until.0},
    )?;
    super::task(b, id).await
}

pub(crate) async fn specify<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::SPECIFY.check(&task)?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    cas(b, &task, to, &[]).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Specified,
        payload! {"to": to.as_str()},
    )?;
    super::task(b, id).await
}

pub(crate) async fn request_review<B: Backend>(
    b: &B,
    id: &TaskId,
    summary: Option<&str>,
    worker: Option<&WorkerId>,
) -> Result<Task, B::Error> {
    let done = Completion {
        result: None,
        summary: summary.map(str::to_string),
        metadata: None,
        worker: worker.cloned(),
        usage: None,
    };
    submit_for_review(b, id, &done).await
}

/// A worker's completion that waits for a reviewer: the run ends as `review_requested` with
/// the summary and metadata, the result is kept on the task, and the task goes to `review`.
pub(crate) async fn submit_for_review<B: Backend>(
    b: &B,
    id: &TaskId,
    done: &Completion,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::REQUEST_REVIEW.check(&task)?;
    check_holder(&task, done.worker.as_ref())?;
    let summary = done.summary.as_deref();
    let end = RunEnd {
        summary,
        metadata: done.metadata.as_ref(),
        ..RunEnd::with(RunOutcome::ReviewRequested)
    };
    let run = close_run(b, &task, end).await?;
    if let (Some(run), Some(usage)) = (run, &done.usage) {
        b.write_run_usage(run, usage).await?;
    }
    cas(
        b,
        &task,
        TaskStatus::Review,
        &[
            Set::TextIfGiven("result", done.result.as_deref()),
            Set::EndLease,
        ],
    )
    .await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::ReviewRequested,
        payload! {"summary": summary.map(rules::summary_line)},
    )?;
    super::task(b, id).await
}

pub(crate) async fn request_changes<B: Backend>(
    b: &B,
    id: &TaskId,
    reason: &str,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::REQUEST_CHANGES.check(&task)?;
    non_empty("reason", reason, "what should change")?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    cas(b, &task, to, &[]).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::ChangesRequested,
        payload! {"reason": reason, "to": to.as_str()},
    )?;
    super::task(b, id).await
}

/// Completes a task that waits in `review` (a reviewer's yes), and only such a task: one sent
/// back or completed meanwhile is refused.
pub(crate) async fn approve_review<B: Backend>(
    b: &B,
    id: &TaskId,
    done: &Completion,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::APPROVE_REVIEW.check(&task)?;
    complete(b, id, done).await
}

/// Takes a running task's lease back: its run ends as `reclaimed` with `why`, the task returns
/// to the status the run was claimed from (or `todo` while a parent is open), and `reclaimed`
/// is recorded (marked `released` when its own worker handed it back). Not a failure.
async fn take_back<B: Backend>(
    b: &B,
    task: &Task,
    lease: &Lease,
    why: &str,
    released: bool,
) -> Result<Task, B::Error> {
    let id = &task.id;
    let source = source_status(b, task).await?;
    let to = runnable(b, id, source).await?;
    let end = RunEnd {
        error: Some(why),
        ..RunEnd::with(RunOutcome::Reclaimed)
    };
    close_run(b, task, end).await?;
    cas(b, task, to, &[Set::EndLease]).await?;
    let mut payload = Payload::new();
    payload
        .field("lock", &Shown(&lease.worker))
        .field("claim_expires", &lease.expires_at.0)
        .field("last_heartbeat_at", &task.last_heartbeat_at.map(|t| t.0))
        .field("to", to.as_str());
    if released {
        payload.field("released", &true);
    }
    emit(
        b,
        Some(id),
        Some(lease.run_id),
        EventKind::Reclaimed,
        payload.finish(),
    )?;
    super::task(b, id).await
}

/// Takes back lapsed leases (a backend that can skips rows another reclaimer holds).
pub(crate) async fn reclaim_expired<B: Backend>(b: &B) -> Result<Vec<Reclaimed>, B::Error> {
    let mut out = Vec::new();
    for id in b.pick(Pick::Lapsed).await? {
        let task = task(b, &id).await?;
        let Some(lease) = task.lease.clone() else {
            continue;
        };
        out.push(Reclaimed {
            task: take_back(b, &task, &lease, "lease lapsed", false).await?,
            lapsed: lease,
        });
    }
    Ok(out)
}

/// Hands `worker`'s lease on a task back at once, as a lapse would but without waiting for it:
/// refused (and nothing changed) when the task is not running or another worker holds it.
pub(crate) async fn release<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: &WorkerId,
) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::RELEASE.check(&task)?;
    let lease = held_lease(&task, worker)?;
    let task = take_back(b, &task, &lease, "the worker handed its lease back", true).await?;
    Ok(Transitioned {
        task,
        ended_lease: Some(lease),
    })
}

pub(crate) async fn record_failure<B: Backend>(
    b: &B,
    id: &TaskId,
    f: &Failure,
) -> Result<FailureOutcome, B::Error> {
    let task = task(b, id).await?;
    rules::FAIL.check(&task)?;
    check_holder(&task, f.worker.as_ref())?;
    let d = rules::decide_failure(&task, f.kind, f.configured_limit);
    let source = source_status(b, &task).await?;
    let end = RunEnd {
        error: Some(&f.error),
        ..RunEnd::with(d.outcome)
    };
    let run = close_run(b, &task, end).await?;
    let counter = if d.event == EventKind::ProtocolViolation {
        "protocol_violations"
    } else {
        "consecutive_failures"
    };
    let to = if d.gave_up {
        TaskStatus::Blocked
    } else {
        runnable(b, id, source).await?
    };
    let block_reason = if d.gave_up {
        Some(f.error.as_str())
    } else {
        task.block_reason.as_deref()
    };
    let sets = [
        Set::Int(counter, i64::from(d.failures)),
        Set::Text("last_failure_error", Some(&f.error)),
        Set::Text("block_reason", block_reason),
        Set::EndLease,
    ];
    cas(b, &task, to, &sets).await?;
    emit(
        b,
        Some(id),
        run,
        d.event,
        payload! {"error": f.error, "failures": d.failures, "limit": d.limit, "to": to.as_str()},
    )?;
    if d.gave_up {
        emit(
            b,
            Some(id),
            run,
            EventKind::GaveUp,
            payload! {"failures": d.failures, "effective_limit": d.limit,
            "limit_source": d.limit_source, "error": f.error},
        )?;
    }
    Ok(FailureOutcome {
        task: super::task(b, id).await?,
        failures: d.failures,
        limit: d.limit,
        limit_source: d.limit_source,
        gave_up: d.gave_up,
    })
}

pub(crate) async fn requeue_rate_limited<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: Option<&WorkerId>,
    error: &str,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::RATE_LIMIT.check(&task)?;
    check_holder(&task, worker)?;
    let source = source_status(b, &task).await?;
    let to = runnable(b, id, source).await?;
    let end = RunEnd {
        error: Some(error),
        ..RunEnd::with(RunOutcome::RateLimited)
    };
    let run = close_run(b, &task, end).await?;
    cas(b, &task, to, &[Set::EndLease]).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::RateLimited,
        payload! {"error": error, "to": to.as_str()},
    )?;
    super::task(b, id).await
}
