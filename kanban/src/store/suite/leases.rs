//! Suite cases on claims and how runs end: leases, heartbeats, blocks, archiving, schedules,
//! review, lapsed and released leases, failures and rate limits.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::{
    BoardSlug, EventKind, InitialStatus, NewBoard, NewTask, RunId, RunOutcome, TaskFilter, TaskId,
    TaskStatus, Timestamp, WorkerId,
};
use crate::store::{BlockRequest, ClaimSpec, Completion, Failure, FailureKind, Store, StoreError};

use super::{
    SuiteBackend, assert_consistent, default_board, failure, kinds, long_ttl, new_task, status,
};

/// Three ready tasks: "low" (priority 0), "high" (5) and "for-coder" (-1, assigned to coder).
async fn low_high_and_for_coder(s: &dyn Store) -> (TaskId, TaskId, TaskId) {
    let board = default_board();
    let low = new_task(s, "low").await;
    let high = s
        .create_task(&board, &NewTask::new("high").with_priority(5))
        .await
        .unwrap()
        .task
        .id;
    let mine = s
        .create_task(
            &board,
            &NewTask::new("for-coder")
                .with_assignee("coder")
                .with_priority(-1),
        )
        .await
        .unwrap()
        .task
        .id;
    (low, high, mine)
}

/// What a claim answers is what the board then holds: the task and its run read back equal the
/// claim's, for a first claim and for one after a release (which keeps the first start time),
/// one by one and in a batch.
pub async fn a_claim_answers_what_is_stored(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let limited = NewTask::new("limited")
        .with_assignee("coder")
        .with_max_runtime(Duration::from_secs(90));
    let first = s.create_task(&board, &limited).await.unwrap().task.id;
    new_task(&*s, "plain").await;
    new_task(&*s, "another").await;
    let stored = |claim: crate::store::Claim| {
        let s = Arc::clone(&s);
        async move {
            let board = default_board();
            assert_eq!(claim.task, s.task(&board, &claim.task.id).await.unwrap());
            assert_eq!(claim.run, s.run(&board, claim.run.id).await.unwrap());
            assert_eq!(claim.task.lease.as_ref(), Some(&claim.lease));
            claim
        }
    };
    let coder = long_ttl().with_assignees(vec!["coder".into()]);
    let claim = stored(s.claim_next(&board, &coder).await.unwrap().unwrap()).await;
    assert_eq!(claim.task.id, first);
    assert_eq!(claim.run.max_runtime_seconds, Some(90));
    let started = claim.task.started_at;
    s.release(&board, &first, &claim.lease.worker)
        .await
        .unwrap();
    let again = stored(s.claim_task(&board, &first, &long_ttl()).await.unwrap()).await;
    assert_eq!(
        again.task.started_at, started,
        "a second claim keeps the first start"
    );
    for claim in s
        .claim_many(&board, &[long_ttl(), long_ttl()])
        .await
        .unwrap()
    {
        stored(claim).await;
    }
}

/// A claim moves the best ready task to `running` with a lease, a run and a `claimed` event;
/// nobody can claim it again; the holder completes it.
pub async fn claims_open_a_lease_and_a_run(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let (low, high, mine) = low_high_and_for_coder(&*s).await;
    let spec = long_ttl();
    let claim = s.claim_next(&board, &spec).await.unwrap().unwrap();
    assert_eq!(claim.task.id, high);
    assert_eq!(claim.task.status, TaskStatus::Running);
    assert_eq!(claim.task.lease.as_ref(), Some(&claim.lease));
    assert_eq!(claim.lease.worker, spec.worker);
    assert_eq!(claim.run.worker.as_ref(), Some(&spec.worker));
    assert!(claim.run.ended_at.is_none());
    assert!(claim.task.started_at.is_some());
    let events = s.task_events(&board, &high).await.unwrap();
    let claimed = events
        .iter()
        .find(|e| e.kind == EventKind::Claimed)
        .unwrap();
    assert_eq!(claimed.run_id, Some(claim.run.id));

    let err = s.claim_task(&board, &high, &long_ttl()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{high} is running; only ready or review tasks can be claimed")
    );

    let coder = long_ttl().with_assignees(vec!["coder".into()]);
    assert_eq!(
        s.claim_next(&board, &coder).await.unwrap().unwrap().task.id,
        mine
    );
    assert!(s.claim_next(&board, &coder).await.unwrap().is_none());

    let stranger = WorkerId::local();
    let err = s
        .complete(
            &board,
            &high,
            &Completion {
                worker: Some(stranger),
                usage: Some(serde_json::json!({"requests": 99})),
                ..Completion::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    // A refused completion writes nothing, its spend neither.
    assert_eq!(s.run(&board, claim.run.id).await.unwrap().usage, None);
    let done = s
        .complete(
            &board,
            &high,
            &Completion {
                result: Some("ok".into()),
                summary: Some("first line\nsecond".into()),
                metadata: Some(serde_json::json!({"files": 2})),
                worker: Some(spec.worker.clone()),
                usage: Some(serde_json::json!({"requests": 1, "output_tokens": 7})),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Done);
    assert!(done.lease.is_none());
    let run = s.run(&board, claim.run.id).await.unwrap();
    assert_eq!(run.outcome, Some(RunOutcome::Completed));
    assert_eq!(run.metadata, Some(serde_json::json!({"files": 2})));
    // The spend given with the completion is on the run it closed.
    assert_eq!(
        run.usage,
        Some(serde_json::json!({"requests": 1, "output_tokens": 7}))
    );
    // What the run spent may also be written after it ended, and is read back as written.
    let usage = serde_json::json!({"requests": 2, "input_tokens": 30, "cost_usd": 0.25});
    s.record_run_usage(&board, claim.run.id, &usage)
        .await
        .unwrap();
    assert_eq!(
        s.run(&board, claim.run.id).await.unwrap().usage,
        Some(usage.clone())
    );
    let err = s
        .record_run_usage(&board, RunId(i64::MAX), &usage)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::RunNotFound { .. }), "{err}");
    // A task's budget is kept as written.
    let budget = troupe_actors::usage::Budget {
        max_tokens: Some(5_000),
        max_cost_usd: Some(0.25),
        max_wall_seconds: None,
    };
    // In triage, so it stays out of the claims below.
    let mut budgeted = NewTask::new("budgeted").with_initial(InitialStatus::Triage);
    budgeted.budget = Some(budget);
    let created = s.create_task(&board, &budgeted).await.unwrap().task;
    assert_eq!(created.budget, Some(budget));
    assert_eq!(
        s.task(&board, &created.id).await.unwrap().budget,
        Some(budget)
    );
    let completed = s
        .task_events(&board, &high)
        .await
        .unwrap()
        .into_iter()
        .last()
        .unwrap();
    assert_eq!(completed.kind, EventKind::Completed);
    assert_eq!(completed.payload["summary"], "first line");

    assert_eq!(
        s.claim_next(&board, &spec).await.unwrap().unwrap().task.id,
        low
    );
    assert!(s.claim_next(&board, &spec).await.unwrap().is_none());
    assert_consistent(&*s, &board).await;
}

/// `claim_many` takes one task per spec, best first, each exactly as `claim_next` would (its
/// own worker, lease, run and `claimed` event); it stops when nothing is left, honours the
/// assignee filter, takes nothing for no specs, and is refused on an archived board. Batches
/// racing on two handles never take a task twice.
pub async fn batched_claims_take_the_best_tasks_in_order(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let (low, high, mine) = low_high_and_for_coder(&*s).await;
    s.create_task(
        &board,
        &NewTask::new("triaged").with_initial(InitialStatus::Triage),
    )
    .await
    .unwrap();
    let last = s
        .create_task(&board, &NewTask::new("last").with_priority(-2))
        .await
        .unwrap()
        .task
        .id;
    assert!(s.claim_many(&board, &[]).await.unwrap().is_empty());

    let coder = [
        long_ttl().with_assignees(vec!["coder".into()]),
        long_ttl().with_assignees(vec!["coder".into()]),
    ];
    let claims = s.claim_many(&board, &coder).await.unwrap();
    assert_eq!(
        claims.len(),
        1,
        "one coder task, then nothing for the second spec"
    );
    assert_eq!(claims[0].task.id, mine);
    assert_eq!(claims[0].lease.worker, coder[0].worker);

    let specs = [long_ttl(), long_ttl(), long_ttl(), long_ttl()];
    let claims = s.claim_many(&board, &specs).await.unwrap();
    let ids: Vec<&TaskId> = claims.iter().map(|c| &c.task.id).collect();
    assert_eq!(ids.len(), 3, "three ready tasks were left: {ids:?}");
    // Best first, by priority.
    assert_eq!(ids[0], &high);
    assert_eq!(ids[1], &low);
    assert_eq!(ids[2], &last);
    let runs: HashSet<RunId> = claims.iter().map(|c| c.run.id).collect();
    assert_eq!(runs.len(), 3, "each claim opens its own run");
    for (claim, spec) in claims.iter().zip(&specs) {
        assert_eq!(claim.task.status, TaskStatus::Running);
        assert_eq!(claim.lease.worker, spec.worker);
        assert_eq!(claim.task.lease.as_ref(), Some(&claim.lease));
        assert_eq!(claim.run.worker.as_ref(), Some(&spec.worker));
        let claimed: Vec<_> = s
            .task_events(&board, &claim.task.id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == EventKind::Claimed)
            .collect();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].run_id, Some(claim.run.id));
    }
    assert!(s.claim_many(&board, &specs).await.unwrap().is_empty());
    assert_eq!(
        s.stats(&board).await.unwrap().count(TaskStatus::Triage),
        1,
        "a task in triage is never claimed"
    );
    assert_consistent(&*s, &board).await;

    // Batches racing from two handles.
    const TASKS: usize = 90;
    let other = BoardSlug::parse("batches").unwrap();
    s.create_board(&NewBoard::new(other.clone())).await.unwrap();
    for i in 0..TASKS {
        s.create_task(&other, &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
    }
    let second = b.open().await.unwrap();
    let mut claimers = tokio::task::JoinSet::new();
    for n in 0..4 {
        let store = if n % 2 == 0 {
            Arc::clone(&s)
        } else {
            Arc::clone(&second)
        };
        let board = other.clone();
        claimers.spawn(async move {
            let mut mine = Vec::new();
            loop {
                let specs: Vec<ClaimSpec> = (0..7).map(|_| long_ttl()).collect();
                match store.claim_many(&board, &specs).await {
                    Ok(claims) if claims.is_empty() => return mine,
                    Ok(claims) => mine.extend(claims.into_iter().map(|c| c.task.id)),
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("batch claim failed: {e}"),
                }
            }
        });
    }
    let mut claimed = Vec::new();
    while let Some(part) = claimers.join_next().await {
        claimed.extend(part.unwrap());
    }
    let unique: HashSet<_> = claimed.iter().cloned().collect();
    assert_eq!(claimed.len(), TASKS, "every task claimed once, none twice");
    assert_eq!(unique.len(), TASKS);
    assert_consistent(&*second, &other).await;

    s.archive_board(&other).await.unwrap();
    assert!(matches!(
        s.claim_many(&other, &[long_ttl()]).await,
        Err(StoreError::BoardArchived { .. })
    ));
}

/// A heartbeat moves the expiry forward for the holder only.
pub async fn heartbeats_extend_only_the_holders_lease(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "long job").await;
    let spec = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::from_secs(60));
    let claim = s.claim_task(&board, &id, &spec).await.unwrap();
    let lease = s
        .heartbeat(&board, &id, &spec.worker, Duration::from_secs(7200))
        .await
        .unwrap();
    assert!(lease.expires_at > claim.lease.expires_at);
    assert_eq!(lease.run_id, claim.run.id);
    assert_eq!(
        s.task(&board, &id).await.unwrap().lease,
        Some(lease.clone())
    );
    let err = s
        .heartbeat(&board, &id, &WorkerId::local(), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    assert!(err.to_string().contains(&spec.worker.to_string()));
    assert!(kinds(&*s, &id).await.contains(&EventKind::Heartbeat));
    let idle = new_task(&*s, "idle").await;
    let err = s
        .heartbeat(&board, &idle, &spec.worker, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
}

/// A comment on a task blocked by a worker's question puts it back in `ready` (in the same
/// write), and a later question is no block loop; a comment on a task blocked otherwise
/// leaves it blocked.
pub async fn a_comment_answers_a_question_block(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "asks").await;
    let spec = long_ttl();
    for round in 0..3 {
        s.claim_task(&board, &id, &spec).await.unwrap();
        let question =
            BlockRequest::new(BlockRequest::QUESTION, "which port?").by_worker(spec.worker.clone());
        let blocked = s.block(&board, &id, &question).await.unwrap();
        assert_eq!(blocked.task.status, TaskStatus::Blocked, "round {round}");
        s.add_comment(&board, &id, "ada", "8080").await.unwrap();
        assert_eq!(
            s.task(&board, &id).await.unwrap().status,
            TaskStatus::Ready,
            "round {round}"
        );
    }
    assert!(kinds(&*s, &id).await.contains(&EventKind::Unblocked));
    let other = new_task(&*s, "waits for a human").await;
    s.block(&board, &other, &BlockRequest::new("needs_input", "access"))
        .await
        .unwrap();
    s.add_comment(&board, &other, "ada", "looking")
        .await
        .unwrap();
    assert_eq!(
        s.task(&board, &other).await.unwrap().status,
        TaskStatus::Blocked
    );
}

/// `dependency` waits in `todo`, other kinds stop in `blocked`, and the same kind twice in a
/// row goes to `triage`; blocking a running task ends its run and hands back the lease.
pub async fn blocks_go_to_blocked_todo_or_triage(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "needs a human").await;
    let spec = long_ttl();
    let claim = s.claim_task(&board, &id, &spec).await.unwrap();
    let blocked = s
        .block(
            &board,
            &id,
            &BlockRequest::new("needs_input", "which database?").by_worker(spec.worker.clone()),
        )
        .await
        .unwrap();
    assert_eq!(blocked.task.status, TaskStatus::Blocked);
    assert_eq!(
        blocked.ended_lease.as_ref().map(|l| l.run_id),
        Some(claim.run.id)
    );
    assert_eq!(
        blocked.task.block_reason.as_deref(),
        Some("which database?")
    );
    assert_eq!(
        s.run(&board, claim.run.id).await.unwrap().outcome,
        Some(RunOutcome::Blocked)
    );
    assert!(
        s.claim_next(&board, &spec).await.unwrap().is_none(),
        "blocked is not claimable"
    );
    let err = s
        .block(&board, &id, &BlockRequest::new("needs_input", "again"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{id} is blocked; only running or ready tasks can be blocked")
    );

    assert_eq!(
        s.unblock(&board, &id).await.unwrap().status,
        TaskStatus::Ready
    );
    let looped = s
        .block(&board, &id, &BlockRequest::new("needs_input", "still?"))
        .await
        .unwrap();
    assert_eq!(looped.task.status, TaskStatus::Triage);
    assert!(looped.ended_lease.is_none());
    assert!(
        kinds(&*s, &id)
            .await
            .contains(&EventKind::BlockLoopDetected)
    );
    let err = s.unblock(&board, &id).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_eq!(
        s.specify(&board, &id).await.unwrap().status,
        TaskStatus::Ready
    );

    let dep = s
        .block(
            &board,
            &id,
            &BlockRequest::new(BlockRequest::DEPENDENCY, "waits on a report"),
        )
        .await
        .unwrap();
    assert_eq!(dep.task.status, TaskStatus::Todo);
    assert!(kinds(&*s, &id).await.contains(&EventKind::DependencyWait));
    assert_eq!(s.promote(&board).await.unwrap(), vec![id.clone()]);
    assert!(matches!(
        s.block(&board, &id, &BlockRequest::new("bad kind!", "x"))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert_consistent(&*s, &board).await;
}

/// Archiving works from any status, ends a live run as `reclaimed`, and frees children.
pub async fn archiving_ends_the_run_and_frees_children(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let parent = new_task(&*s, "parent").await;
    let child = s
        .create_task(&board, &NewTask::new("child").with_parent(parent.clone()))
        .await
        .unwrap()
        .task
        .id;
    let claim = s.claim_task(&board, &parent, &long_ttl()).await.unwrap();
    let archived = s.archive(&board, &parent).await.unwrap();
    assert_eq!(archived.task.status, TaskStatus::Archived);
    assert_eq!(
        archived.ended_lease.map(|l| l.worker),
        Some(claim.lease.worker)
    );
    assert_eq!(
        s.run(&board, claim.run.id).await.unwrap().outcome,
        Some(RunOutcome::Reclaimed)
    );
    assert_eq!(status(&*s, &child).await, TaskStatus::Ready);
    let err = s.archive(&board, &parent).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    let listed = s.list_tasks(&board, &TaskFilter::default()).await.unwrap();
    assert!(
        listed.iter().all(|t| t.id != parent),
        "archived tasks are hidden by default"
    );
    let all = s
        .list_tasks(
            &board,
            &TaskFilter {
                include_archived: true,
                ..TaskFilter::default()
            },
        )
        .await
        .unwrap();
    assert!(all.iter().any(|t| t.id == parent));
    assert_consistent(&*s, &board).await;
}

/// A scheduled task is not claimable until its time, then `promote` releases it.
pub async fn scheduled_tasks_wait_for_their_time(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let later = new_task(&*s, "later").await;
    let due = new_task(&*s, "due").await;
    let far = Timestamp::now().plus(Duration::from_secs(86_400 * 365));
    let parked = s.schedule(&board, &later, far).await.unwrap();
    assert_eq!(
        (parked.status, parked.scheduled_until),
        (TaskStatus::Scheduled, Some(far))
    );
    s.schedule(&board, &due, Timestamp(1)).await.unwrap();
    assert!(s.claim_next(&board, &long_ttl()).await.unwrap().is_none());
    assert_eq!(s.promote(&board).await.unwrap(), vec![due.clone()]);
    assert_eq!(status(&*s, &later).await, TaskStatus::Scheduled);
    assert_eq!(
        s.claim_next(&board, &long_ttl())
            .await
            .unwrap()
            .unwrap()
            .task
            .id,
        due
    );
    let err = s.schedule(&board, &due, far).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    let freed = s.unblock(&board, &later).await.unwrap();
    assert_eq!(
        (freed.status, freed.scheduled_until),
        (TaskStatus::Ready, None)
    );
}

/// Review: a worker asks for review, a reviewer claims it, a lapsed reviewer lease goes back to
/// `review`, and requested changes send it back to `ready`.
pub async fn review_round_trip(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "reviewed").await;
    let coder = long_ttl();
    s.claim_task(&board, &id, &coder).await.unwrap();
    let t = s
        .request_review(&board, &id, Some("please look"), Some(&coder.worker))
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Review);
    assert!(
        s.claim_next(&board, &coder).await.unwrap().is_none(),
        "review is claimed by name"
    );
    let reviewer = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::ZERO);
    let claim = s.claim_task(&board, &id, &reviewer).await.unwrap();
    assert_eq!(claim.run.source_status, TaskStatus::Review);
    let back = s.reclaim_expired(&board).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].task.status, TaskStatus::Review);
    let t = s
        .request_changes(&board, &id, "tests are missing")
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Ready);
    assert!(kinds(&*s, &id).await.contains(&EventKind::ChangesRequested));
    assert_consistent(&*s, &board).await;
}

/// A worker's completion sent to review keeps its result on the task and its summary and
/// metadata on the run, ended `review_requested`; only the lease holder may send it; a
/// reviewer's yes completes only a task in `review`.
pub async fn a_completion_in_review_keeps_its_result(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "counted").await;
    let coder = long_ttl();
    let claim = s.claim_task(&board, &id, &coder).await.unwrap();
    let done = Completion {
        result: Some("152".into()),
        summary: Some("counted the lines".into()),
        metadata: Some(serde_json::json!({"evidence": []})),
        worker: Some(WorkerId::local()),
        usage: Some(serde_json::json!({"requests": 3})),
    };
    let err = s.submit_for_review(&board, &id, &done).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    let done = Completion {
        worker: Some(coder.worker.clone()),
        ..done
    };
    let t = s.submit_for_review(&board, &id, &done).await.unwrap();
    assert_eq!(t.status, TaskStatus::Review);
    assert_eq!(t.result.as_deref(), Some("152"));
    assert!(t.lease.is_none());
    let run = s.run(&board, claim.run.id).await.unwrap();
    assert_eq!(run.outcome, Some(RunOutcome::ReviewRequested));
    assert_eq!(run.summary.as_deref(), Some("counted the lines"));
    assert_eq!(run.metadata, Some(serde_json::json!({"evidence": []})));
    assert_eq!(run.usage, Some(serde_json::json!({"requests": 3})));
    assert!(kinds(&*s, &id).await.contains(&EventKind::ReviewRequested));
    let yes = Completion {
        summary: Some("approved".into()),
        ..Completion::default()
    };
    let t = s.approve_review(&board, &id, &yes).await.unwrap();
    assert_eq!(t.status, TaskStatus::Done);
    assert_eq!(
        t.result.as_deref(),
        Some("152"),
        "the reviewed result stays"
    );
    let err = s.approve_review(&board, &id, &yes).await.unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidTransition { .. }),
        "a done task is not approved again: {err}"
    );
    let other = new_task(&*s, "never reviewed").await;
    let err = s.approve_review(&board, &other, &yes).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_eq!(status(&*s, &other).await, TaskStatus::Ready);
    assert_consistent(&*s, &board).await;
}

/// A lapsed lease is taken back (run `reclaimed`, task `ready`, no failure counted); its old
/// holder can no longer act; a live lease is left alone.
pub async fn lapsed_leases_are_reclaimed(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let hung = new_task(&*s, "hangs").await;
    let alive = new_task(&*s, "alive").await;
    let old = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::ZERO);
    let lapsed = s.claim_task(&board, &hung, &old).await.unwrap();
    s.claim_task(&board, &alive, &long_ttl()).await.unwrap();
    let back = s.reclaim_expired(&board).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].task.id, hung);
    assert_eq!(back[0].task.status, TaskStatus::Ready);
    assert_eq!(back[0].task.consecutive_failures, 0);
    assert_eq!(back[0].lapsed, lapsed.lease);
    assert_eq!(
        s.run(&board, lapsed.run.id).await.unwrap().outcome,
        Some(RunOutcome::Reclaimed)
    );
    assert!(kinds(&*s, &hung).await.contains(&EventKind::Reclaimed));
    assert!(s.reclaim_expired(&board).await.unwrap().is_empty());
    assert_eq!(status(&*s, &alive).await, TaskStatus::Running);

    let err = s
        .heartbeat(&board, &hung, &old.worker, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    let next = long_ttl();
    s.claim_task(&board, &hung, &next).await.unwrap();
    let err = s
        .complete(
            &board,
            &hung,
            &Completion {
                worker: Some(old.worker.clone()),
                ..Completion::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    let err = s
        .record_failure(
            &board,
            &hung,
            &Failure {
                kind: FailureKind::Crashed,
                error: "x".into(),
                worker: Some(old.worker),
                configured_limit: None,
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    assert_eq!(s.runs(&board, &hung).await.unwrap().len(), 2);
    assert_consistent(&*s, &board).await;
}

/// A worker hands its own lease back at once: the run ends as `reclaimed`, the task is ready
/// for the next claim, and nothing counts as a failure. Another worker's lease, and a task
/// that is no longer running, are refused and left as they were.
pub async fn a_worker_releases_only_its_own_lease(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "handed back").await;
    let spec = long_ttl();
    let claim = s.claim_task(&board, &id, &spec).await.unwrap();

    let stranger = WorkerId::local();
    let err = s.release(&board, &id, &stranger).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    assert!(err.to_string().contains(&spec.worker.to_string()), "{err}");
    let task = s.task(&board, &id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Running);
    assert_eq!(task.lease, Some(claim.lease.clone()));
    assert!(!kinds(&*s, &id).await.contains(&EventKind::Reclaimed));

    let released = s.release(&board, &id, &spec.worker).await.unwrap();
    assert_eq!(released.task.status, TaskStatus::Ready);
    assert_eq!(released.task.lease, None);
    assert_eq!(released.task.consecutive_failures, 0);
    assert_eq!(released.ended_lease, Some(claim.lease.clone()));
    let run = s.run(&board, claim.run.id).await.unwrap();
    assert_eq!(run.outcome, Some(RunOutcome::Reclaimed));
    assert!(run.ended_at.is_some());
    let events = s.task_events(&board, &id).await.unwrap();
    let back: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Reclaimed)
        .collect();
    assert_eq!(back.len(), 1, "{events:?}");
    assert_eq!(back[0].payload["released"], serde_json::json!(true));
    assert_eq!(back[0].run_id, Some(claim.run.id));
    // Handing back again finds nothing to hand back, and changes nothing.
    let err = s.release(&board, &id, &spec.worker).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_eq!(status(&*s, &id).await, TaskStatus::Ready);

    // Another lease that has lapsed is no business of a release: it waits for the reclaimer.
    let other = new_task(&*s, "lapses").await;
    let lapsing = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::ZERO);
    s.claim_task(&board, &other, &lapsing).await.unwrap();

    // The task is claimable again at once; a settled task cannot be released.
    let again = s.claim_task(&board, &id, &long_ttl()).await.unwrap();
    assert_ne!(again.run.id, claim.run.id);
    let done = Completion {
        worker: Some(again.lease.worker.clone()),
        result: Some("done".into()),
        ..Completion::default()
    };
    s.complete(&board, &id, &done).await.unwrap();
    let err = s
        .release(&board, &id, &again.lease.worker)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_eq!(status(&*s, &id).await, TaskStatus::Done);
    assert_eq!(status(&*s, &other).await, TaskStatus::Running);
    assert_eq!(s.reclaim_expired(&board).await.unwrap().len(), 1);
    assert_consistent(&*s, &board).await;
}

/// Crashes, timeouts and spawn failures count toward the task's `max_retries`, else the
/// configured limit, else 2; at the limit the task is blocked with `gave_up` and the last error.
pub async fn failures_count_to_the_effective_limit(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let spec = long_ttl();

    let id = new_task(&*s, "flaky").await;
    s.claim_task(&board, &id, &spec).await.unwrap();
    let out = s
        .record_failure(
            &board,
            &id,
            &failure(FailureKind::Crashed, "segfault", None),
        )
        .await
        .unwrap();
    assert_eq!(
        (out.failures, out.limit, out.limit_source, out.gave_up),
        (1, 2, "default", false)
    );
    assert_eq!(out.task.status, TaskStatus::Ready);
    s.claim_task(&board, &id, &spec).await.unwrap();
    let out = s
        .record_failure(&board, &id, &failure(FailureKind::TimedOut, "ran 2h", None))
        .await
        .unwrap();
    assert!(out.gave_up);
    assert_eq!(out.task.status, TaskStatus::Blocked);
    assert_eq!(out.task.last_failure_error.as_deref(), Some("ran 2h"));
    let events = s.task_events(&board, &id).await.unwrap();
    let gave_up = events.iter().find(|e| e.kind == EventKind::GaveUp).unwrap();
    assert_eq!(gave_up.payload["effective_limit"], 2);
    assert_eq!(gave_up.payload["error"], "ran 2h");
    let runs = s.runs(&board, &id).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        [Some(RunOutcome::Crashed), Some(RunOutcome::GaveUp)]
    );
    // An explicit unblock gives fresh attempts.
    assert_eq!(
        s.unblock(&board, &id).await.unwrap().consecutive_failures,
        0
    );

    let own = s
        .create_task(&board, &NewTask::new("own limit").with_max_retries(3))
        .await
        .unwrap()
        .task
        .id;
    for n in 1..=3u32 {
        s.claim_task(&board, &own, &spec).await.unwrap();
        let out = s
            .record_failure(
                &board,
                &own,
                &failure(FailureKind::SpawnFailed, "no binary", Some(1)),
            )
            .await
            .unwrap();
        assert_eq!(
            (out.failures, out.limit, out.limit_source, out.gave_up),
            (n, 3, "task", n == 3)
        );
    }

    let cfg = new_task(&*s, "configured").await;
    s.claim_task(&board, &cfg, &spec).await.unwrap();
    let out = s
        .record_failure(
            &board,
            &cfg,
            &failure(FailureKind::Crashed, "boom", Some(1)),
        )
        .await
        .unwrap();
    assert_eq!((out.limit_source, out.gave_up), ("config", true));

    let quiet = new_task(&*s, "forgets to report").await;
    for n in 1..=3u32 {
        s.claim_task(&board, &quiet, &spec).await.unwrap();
        let out = s
            .record_failure(
                &board,
                &quiet,
                &failure(FailureKind::ProtocolViolation, "no terminal call", None),
            )
            .await
            .unwrap();
        assert_eq!((out.failures, out.limit, out.gave_up), (n, 3, n == 3));
        assert_eq!(out.task.consecutive_failures, 0);
    }

    let heals = new_task(&*s, "recovers").await;
    s.claim_task(&board, &heals, &spec).await.unwrap();
    s.record_failure(&board, &heals, &failure(FailureKind::Crashed, "once", None))
        .await
        .unwrap();
    s.claim_task(&board, &heals, &spec).await.unwrap();
    let done = s
        .complete(&board, &heals, &Completion::default())
        .await
        .unwrap();
    assert_eq!(
        (done.consecutive_failures, done.last_failure_error),
        (0, None)
    );

    let err = s
        .record_failure(&board, &heals, &failure(FailureKind::Crashed, "late", None))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_consistent(&*s, &board).await;
}

/// Rate-limited runs go back to `ready` without counting a failure, however often.
pub async fn rate_limits_requeue_without_counting(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "busy provider").await;
    let spec = long_ttl();
    for _ in 0..6 {
        s.claim_task(&board, &id, &spec).await.unwrap();
        let t = s
            .requeue_rate_limited(&board, &id, Some(&spec.worker), "429 from provider")
            .await
            .unwrap();
        assert_eq!((t.status, t.consecutive_failures), (TaskStatus::Ready, 0));
    }
    let runs = s.runs(&board, &id).await.unwrap();
    assert_eq!(runs.len(), 6);
    assert!(
        runs.iter()
            .all(|r| r.outcome == Some(RunOutcome::RateLimited))
    );
    assert_eq!(
        kinds(&*s, &id)
            .await
            .iter()
            .filter(|k| **k == EventKind::RateLimited)
            .count(),
        6
    );
}
