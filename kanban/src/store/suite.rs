//! The behaviour suite every [`Store`] implementation must pass (feature `test-suite`).
//!
//! An implementation's test file provides a [`SuiteBackend`] (fresh, empty storage that can be
//! opened several times) and stamps out one test per case with [`store_suite!`](crate::store_suite).
//! [`assert_consistent`] checks the invariants that crash tests rely on. Cases panic on failure,
//! as tests do.

#![allow(
    clippy::unwrap_used,
    reason = "this module is test code: a failed step must fail the test with its error"
)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::domain::{
    ATTACHMENT_CAP_BYTES, BoardSlug, EventId, EventKind, InitialStatus, Link, NewAttachment,
    NewBoard, NewTask, RunId, RunOutcome, TaskFilter, TaskId, TaskPatch, TaskSort, TaskStatus,
    Timestamp, WorkerId,
};
use crate::store::{
    BlockRequest, ClaimSpec, Completion, Failure, FailureKind, Store, StoreError, StoreFuture,
};

/// What the suite needs from an implementation: storage that starts empty (apart from the
/// `default` board) and can be opened more than once.
pub trait SuiteBackend: Send + Sync + 'static {
    /// Opens a new handle, with its own connections, on this backend's storage.
    fn open(&self) -> StoreFuture<'_, Arc<dyn Store>>;
}

/// Stamps out one `#[tokio::test]` per suite case. `$fresh` is an expression evaluating to an
/// async closure-like value: `$fresh().await` must give a fresh [`SuiteBackend`].
///
/// `store_suite!(fresh, run_if = ready)` makes each case first call `ready()` (a `fn() -> bool`)
/// and return at once when it says no: for backends that need an external server, whose
/// `ready` reports the skip loudly (or fails when the server is required).
#[macro_export]
macro_rules! store_suite {
    ($fresh:expr) => {
        $crate::store_suite!($fresh, run_if = $crate::store::suite::always_run);
    };
    ($fresh:expr, run_if = $ready:expr) => {
        $crate::store_suite!(@cases $ready, $fresh;
            boards_follow_slug_rules_and_archive,
            creation_picks_ready_todo_triage_or_blocked,
            idempotency_keys_return_the_live_task,
            completing_parents_promotes_children,
            links_refuse_self_cycles_and_other_boards,
            claims_open_a_lease_and_a_run,
            batched_claims_take_the_best_tasks_in_order,
            task_context_is_what_its_parts_say,
            heartbeats_extend_only_the_holders_lease,
            blocks_go_to_blocked_todo_or_triage,
            archiving_ends_the_run_and_frees_children,
            scheduled_tasks_wait_for_their_time,
            review_round_trip,
            lapsed_leases_are_reclaimed,
            a_worker_releases_only_its_own_lease,
            failures_count_to_the_effective_limit,
            rate_limits_requeue_without_counting,
            events_are_monotonic_and_complete,
            comments_and_attachments,
            patches_assignments_and_filters,
            concurrent_claims_are_exclusive,
            concurrent_idempotent_creates_make_one_task,
            cancelled_operations_leave_no_half_change,
            reopening_sees_every_commit
        );
    };
    (@cases $ready:expr, $fresh:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                if !($ready)() {
                    return;
                }
                let backend = ($fresh)().await;
                $crate::store::suite::$case(&backend).await;
            }
        )*
    };
}

/// The `run_if` of a backend that is always available.
pub fn always_run() -> bool {
    true
}

fn default_board() -> BoardSlug {
    BoardSlug::default_board()
}

async fn new_task(s: &dyn Store, title: &str) -> TaskId {
    s.create_task(&default_board(), &NewTask::new(title))
        .await
        .unwrap()
        .task
        .id
}

async fn status(s: &dyn Store, id: &TaskId) -> TaskStatus {
    s.task(&default_board(), id).await.unwrap().status
}

async fn kinds(s: &dyn Store, id: &TaskId) -> Vec<EventKind> {
    s.task_events(&default_board(), id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

fn long_ttl() -> ClaimSpec {
    ClaimSpec::new(WorkerId::local()).with_ttl(Duration::from_secs(3600))
}

/// Checks the invariants a crash or a race must never break, on every task of `board`:
/// a task is `running` exactly when it has a lease and exactly one open run (the lease's);
/// every run with a worker has exactly one `claimed` event; event ids strictly increase.
pub async fn assert_consistent(s: &dyn Store, board: &BoardSlug) {
    let filter = TaskFilter {
        include_archived: true,
        ..TaskFilter::default()
    };
    let tasks = s.list_tasks(board, &filter).await.unwrap();
    let events = all_events(s, board).await;
    let mut claimed: HashMap<TaskId, usize> = HashMap::new();
    for e in &events {
        if e.kind == EventKind::Claimed {
            *claimed.entry(e.task_id.clone().unwrap()).or_default() += 1;
        }
    }
    for t in &tasks {
        let runs = s.runs(board, &t.id).await.unwrap();
        let open: Vec<_> = runs.iter().filter(|r| r.ended_at.is_none()).collect();
        if t.status == TaskStatus::Running {
            let lease = t
                .lease
                .as_ref()
                .unwrap_or_else(|| panic!("{} running without a lease", t.id));
            assert_eq!(
                open.len(),
                1,
                "{} running with {} open runs",
                t.id,
                open.len()
            );
            assert_eq!(open[0].id, lease.run_id, "{} lease names another run", t.id);
        } else {
            assert!(
                t.lease.is_none(),
                "{} is {} but holds a lease",
                t.id,
                t.status
            );
            assert!(open.is_empty(), "{} is {} with an open run", t.id, t.status);
        }
        let worker_runs = runs.iter().filter(|r| r.worker.is_some()).count();
        assert_eq!(
            claimed.get(&t.id).copied().unwrap_or(0),
            worker_runs,
            "{}: claimed events and claimed runs differ",
            t.id
        );
        assert!(
            events
                .iter()
                .any(|e| e.task_id.as_ref() == Some(&t.id) && e.kind == EventKind::Created),
            "{} has no created event",
            t.id
        );
    }
}

async fn all_events(s: &dyn Store, board: &BoardSlug) -> Vec<crate::domain::Event> {
    let mut out = Vec::new();
    let mut cursor = EventId::START;
    loop {
        let page = s.events_since(board, cursor, 500).await.unwrap();
        let Some(last) = page.last() else { break };
        cursor = last.id;
        out.extend(page);
    }
    for pair in out.windows(2) {
        assert!(pair[0].id < pair[1].id, "event ids must strictly increase");
    }
    out
}

/// Slugs are checked and lowercased; `default` is protected; archived boards take no work.
pub async fn boards_follow_slug_rules_and_archive(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let boards = s.list_boards(false).await.unwrap();
    assert_eq!(
        boards.iter().map(|b| b.slug.as_str()).collect::<Vec<_>>(),
        ["default"]
    );

    let slug = BoardSlug::parse("Research-2").unwrap();
    assert_eq!(slug.as_str(), "research-2");
    let made = s
        .create_board(&NewBoard::new(slug.clone()).with_name("Research"))
        .await
        .unwrap();
    assert_eq!((made.name.as_str(), made.archived_at), ("Research", None));
    assert!(matches!(
        s.create_board(&NewBoard::new(slug.clone())).await,
        Err(StoreError::BoardExists { .. })
    ));
    assert!(BoardSlug::parse("no spaces").is_err());

    for action in [
        s.archive_board(&default_board()).await.err(),
        s.delete_board(&default_board()).await.err(),
    ] {
        assert!(
            matches!(action, Some(StoreError::DefaultBoardProtected { .. })),
            "{action:?}"
        );
    }
    assert!(matches!(
        s.delete_board(&slug).await,
        Err(StoreError::BoardNotArchived { .. })
    ));
    s.create_task(&slug, &NewTask::new("before archive"))
        .await
        .unwrap();
    let archived = s.archive_board(&slug).await.unwrap();
    assert!(archived.archived_at.is_some());
    assert_eq!(s.list_boards(false).await.unwrap().len(), 1);
    assert_eq!(s.list_boards(true).await.unwrap().len(), 2);
    assert!(matches!(
        s.create_task(&slug, &NewTask::new("after")).await,
        Err(StoreError::BoardArchived { .. })
    ));
    assert!(matches!(
        s.claim_next(&slug, &long_ttl()).await,
        Err(StoreError::BoardArchived { .. })
    ));
    s.delete_board(&slug).await.unwrap();
    assert!(matches!(
        s.board(&slug).await,
        Err(StoreError::BoardNotFound { .. })
    ));
    let ghost = BoardSlug::parse("never-made").unwrap();
    assert!(matches!(
        s.create_task(&ghost, &NewTask::new("x")).await,
        Err(StoreError::BoardNotFound { .. })
    ));
}

/// A new task is `ready` only when every parent is finished; `triage` and `blocked` on request;
/// the tenant comes from the first parent that has one.
pub async fn creation_picks_ready_todo_triage_or_blocked(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let root = s
        .create_task(
            &board,
            &NewTask::new("root")
                .with_tenant("acme")
                .with_created_by("tester"),
        )
        .await
        .unwrap();
    assert!(root.created);
    let root = root.task;
    assert!(TaskId::parse(root.id.as_str()).is_ok());
    assert_eq!(root.status, TaskStatus::Ready);
    assert_eq!(root.created_by.as_deref(), Some("tester"));

    let child = s
        .create_task(&board, &NewTask::new("child").with_parent(root.id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(child.status, TaskStatus::Todo);
    assert_eq!(child.tenant.as_deref(), Some("acme"));
    assert_eq!(
        s.links(&board, &child.id).await.unwrap().parents,
        vec![root.id.clone()]
    );

    s.complete(&board, &root.id, &Completion::default())
        .await
        .unwrap();
    let late = s
        .create_task(&board, &NewTask::new("late").with_parent(root.id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(late.status, TaskStatus::Ready);

    let triage = s
        .create_task(
            &board,
            &NewTask::new("vague").with_initial(InitialStatus::Triage),
        )
        .await
        .unwrap()
        .task;
    assert_eq!(triage.status, TaskStatus::Triage);
    let parked = s
        .create_task(
            &board,
            &NewTask::new("parked").with_initial(InitialStatus::Blocked),
        )
        .await
        .unwrap()
        .task;
    assert_eq!(parked.status, TaskStatus::Blocked);

    let err = s
        .create_task(&board, &NewTask::new("   "))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("title"), "{err}");
    let missing = TaskId::parse("t_00000000").unwrap();
    assert!(matches!(
        s.create_task(&board, &NewTask::new("orphan").with_parent(missing))
            .await,
        Err(StoreError::TaskNotFound { .. })
    ));
    assert_eq!(kinds(&*s, &child.id).await[0], EventKind::Created);
}

/// The same idempotency key returns the live task; after archiving it a new one is made.
pub async fn idempotency_keys_return_the_live_task(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let first = s
        .create_task(&board, &NewTask::new("a").with_idempotency_key("k1"))
        .await
        .unwrap();
    let again = s
        .create_task(&board, &NewTask::new("b").with_idempotency_key("k1"))
        .await
        .unwrap();
    assert!(first.created && !again.created);
    assert_eq!(first.task.id, again.task.id);
    assert_eq!(again.task.title, "a");
    s.archive(&board, &first.task.id).await.unwrap();
    let fresh = s
        .create_task(&board, &NewTask::new("c").with_idempotency_key("k1"))
        .await
        .unwrap();
    assert!(fresh.created);
    assert_ne!(fresh.task.id, first.task.id);
    let other = BoardSlug::parse("other").unwrap();
    s.create_board(&NewBoard::new(other.clone())).await.unwrap();
    assert!(
        s.create_task(&other, &NewTask::new("d").with_idempotency_key("k1"))
            .await
            .unwrap()
            .created
    );
}

/// Fan-in: the child becomes `ready` when its last parent completes, never before; a task cannot complete before its parents.
pub async fn completing_parents_promotes_children(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let a = new_task(&*s, "a").await;
    let p = new_task(&*s, "p").await;
    let c = s
        .create_task(
            &board,
            &NewTask::new("c")
                .with_parent(a.clone())
                .with_parent(p.clone()),
        )
        .await
        .unwrap()
        .task
        .id;
    let err = s
        .complete(&board, &c, &Completion::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    s.block(&board, &c, &BlockRequest::new("x", "y"))
        .await
        .unwrap_err();

    s.complete(
        &board,
        &a,
        &Completion {
            result: Some("A".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(status(&*s, &c).await, TaskStatus::Todo);
    assert!(s.promote(&board).await.unwrap().is_empty());
    s.complete(&board, &p, &Completion::default())
        .await
        .unwrap();
    assert_eq!(
        status(&*s, &c).await,
        TaskStatus::Ready,
        "the last parent's completion promotes"
    );
    assert!(kinds(&*s, &c).await.contains(&EventKind::Promoted));

    let err = s
        .complete(&board, &a, &Completion::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{a} is done; only running, ready, blocked or review tasks can be completed")
    );
    let done = s.task(&board, &a).await.unwrap();
    assert_eq!(done.result.as_deref(), Some("A"));
    assert!(done.completed_at.is_some());
    // Never claimed, still one run: a zero-length one synthesized at completion.
    let runs = s.runs(&board, &a).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, Some(RunOutcome::Completed));

    // A parent that is not finished holds completion back, and a due task keeps waiting.
    let q = new_task(&*s, "q").await;
    let parked = NewTask::new("parked")
        .with_parent(q.clone())
        .with_initial(InitialStatus::Blocked);
    let parked = s.create_task(&board, &parked).await.unwrap().task.id;
    let err = s
        .complete(&board, &parked, &Completion::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ParentsOpen { .. }), "{err}");
    assert!(err.to_string().contains(q.as_str()), "{err}");
    let d = s
        .create_task(&board, &NewTask::new("d").with_parent(q.clone()))
        .await
        .unwrap()
        .task
        .id;
    assert_eq!(
        s.schedule(&board, &d, Timestamp(0)).await.unwrap().status,
        TaskStatus::Scheduled
    );
    s.promote(&board).await.unwrap();
    assert_eq!(
        status(&*s, &d).await,
        TaskStatus::Todo,
        "a due task with an open parent waits"
    );
    let err = s.claim_task(&board, &d, &long_ttl()).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_eq!(
        s.unblock(&board, &parked).await.unwrap().status,
        TaskStatus::Todo
    );
}

/// Links: no self-links, no cycles, no other board's tasks; an open parent sends a ready
/// child back to `todo`, and unlinking it brings the child back.
pub async fn links_refuse_self_cycles_and_other_boards(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let a = new_task(&*s, "a").await;
    let bb = new_task(&*s, "b").await;
    let c = new_task(&*s, "c").await;
    assert!(matches!(
        s.link(&board, &a, &a).await,
        Err(StoreError::SelfLink { .. })
    ));
    s.link(&board, &a, &bb).await.unwrap();
    s.link(&board, &bb, &c).await.unwrap();
    s.link(&board, &a, &bb).await.unwrap(); // linking twice changes nothing
    let err = s.link(&board, &c, &a).await.unwrap_err();
    assert!(matches!(err, StoreError::Cycle { .. }), "{err}");
    assert!(err.to_string().contains("cycle"));
    assert_eq!(status(&*s, &bb).await, TaskStatus::Todo);
    assert_eq!(status(&*s, &c).await, TaskStatus::Todo);
    assert_eq!(
        s.links(&board, &bb).await.unwrap().children,
        vec![c.clone()]
    );
    let mut expected = vec![
        Link {
            parent: a.clone(),
            child: bb.clone(),
        },
        Link {
            parent: bb.clone(),
            child: c.clone(),
        },
    ];
    expected.sort_by(|x, y| (&x.parent, &x.child).cmp(&(&y.parent, &y.child)));
    assert_eq!(s.board_links(&board).await.unwrap(), expected);

    s.unlink(&board, &a, &bb).await.unwrap();
    assert_eq!(status(&*s, &bb).await, TaskStatus::Ready);
    assert!(matches!(
        s.unlink(&board, &a, &bb).await,
        Err(StoreError::LinkNotFound { .. })
    ));

    let other = BoardSlug::parse("elsewhere").unwrap();
    s.create_board(&NewBoard::new(other.clone())).await.unwrap();
    let foreign = s
        .create_task(&other, &NewTask::new("foreign"))
        .await
        .unwrap()
        .task
        .id;
    let err = s.link(&board, &foreign, &a).await.unwrap_err();
    assert!(matches!(err, StoreError::CrossBoardLink { .. }), "{err}");
    let err = s
        .create_task(&board, &NewTask::new("x").with_parent(foreign.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::CrossBoardLink { .. }), "{err}");
    assert!(s.links(&board, &a).await.unwrap().children.is_empty());
}

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
                ..Completion::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotHeld { .. }), "{err}");
    let done = s
        .complete(
            &board,
            &high,
            &Completion {
                result: Some("ok".into()),
                summary: Some("first line\nsecond".into()),
                metadata: Some(serde_json::json!({"files": 2})),
                worker: Some(spec.worker.clone()),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Done);
    assert!(done.lease.is_none());
    let run = s.run(&board, claim.run.id).await.unwrap();
    assert_eq!(run.outcome, Some(RunOutcome::Completed));
    assert_eq!(run.metadata, Some(serde_json::json!({"files": 2})));
    assert_eq!(run.usage, None);
    // What the run spent is written after it ended, and read back as written.
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

/// `task_context` gives what `links`, `task`, `runs`, `attachments` and `comments` give one by
/// one; a task that does not exist is `TaskNotFound`.
pub async fn task_context_is_what_its_parts_say(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let parent = new_task(&*s, "parent").await;
    let claim = s.claim_next(&board, &long_ttl()).await.unwrap().unwrap();
    s.complete(
        &board,
        &parent,
        &Completion {
            summary: Some("parent done".into()),
            worker: Some(claim.lease.worker.clone()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    let child = s
        .create_task(&board, &NewTask::new("child").with_parent(parent.clone()))
        .await
        .unwrap()
        .task
        .id;
    s.add_comment(&board, &child, "alice", "mind the edge cases")
        .await
        .unwrap();
    let file = NewAttachment {
        filename: "notes.txt".into(),
        content_type: "text/plain".into(),
        content: b"notes".to_vec(),
        uploaded_by: None,
    };
    s.attach(&board, &child, &file).await.unwrap();
    let claim = s.claim_next(&board, &long_ttl()).await.unwrap().unwrap();
    assert_eq!(claim.task.id, child);

    let context = s.task_context(&board, &child).await.unwrap();
    assert_eq!(context.links, s.links(&board, &child).await.unwrap());
    assert_eq!(context.links.parents, vec![parent.clone()]);
    assert_eq!(
        context.parents,
        vec![(
            s.task(&board, &parent).await.unwrap(),
            s.runs(&board, &parent).await.unwrap()
        )]
    );
    assert_eq!(
        context.attachments,
        s.attachments(&board, &child).await.unwrap()
    );
    assert_eq!(context.attachments.len(), 1);
    assert_eq!(context.runs, s.runs(&board, &child).await.unwrap());
    assert_eq!(context.runs.len(), 1);
    assert_eq!(context.comments, s.comments(&board, &child).await.unwrap());
    assert_eq!(context.comments.len(), 1);
    let ghost = TaskId::parse("t_00000000").unwrap();
    assert!(matches!(
        s.task_context(&board, &ghost).await,
        Err(StoreError::TaskNotFound { .. })
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

fn failure(kind: FailureKind, error: &str, configured: Option<u32>) -> Failure {
    Failure {
        kind,
        error: error.to_string(),
        worker: None,
        configured_limit: configured,
    }
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

/// Event ids strictly increase; paging with a cursor sees every event once; each state change
/// left its event.
pub async fn events_are_monotonic_and_complete(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let start = s.stats(&board).await.unwrap().last_event_id;
    let a = new_task(&*s, "a").await;
    let c = s
        .create_task(&board, &NewTask::new("c").with_parent(a.clone()))
        .await
        .unwrap()
        .task
        .id;
    let spec = long_ttl();
    s.claim_task(&board, &a, &spec).await.unwrap();
    s.add_comment(&board, &a, "coder", "halfway").await.unwrap();
    s.complete(&board, &a, &Completion::default())
        .await
        .unwrap();
    s.archive(&board, &c).await.unwrap();

    let mut paged = Vec::new();
    let mut cursor = start;
    loop {
        let page = s.events_since(&board, cursor, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        cursor = last.id;
        paged.extend(page);
    }
    let whole = s.events_since(&board, start, 10_000).await.unwrap();
    assert_eq!(paged, whole);
    assert!(whole.windows(2).all(|w| w[0].id < w[1].id));
    let seen: Vec<(String, EventKind)> = whole
        .iter()
        .map(|e| (e.task_id.clone().unwrap().to_string(), e.kind))
        .collect();
    let expect = [
        (a.to_string(), EventKind::Created),
        (c.to_string(), EventKind::Created),
        (a.to_string(), EventKind::Claimed),
        (a.to_string(), EventKind::Commented),
        (a.to_string(), EventKind::Completed),
        (c.to_string(), EventKind::Promoted),
        (c.to_string(), EventKind::Archived),
    ];
    assert_eq!(seen, expect);
    assert_eq!(
        s.stats(&board).await.unwrap().last_event_id,
        whole.last().unwrap().id
    );
    assert!(s.events_since(&board, cursor, 10).await.unwrap().is_empty());
}

/// Comments keep their order; attachments keep their bytes, within the size cap.
pub async fn comments_and_attachments(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "notes").await;
    s.add_comment(&board, &id, "alice", "first").await.unwrap();
    s.add_comment(&board, &id, "bob", "second").await.unwrap();
    let comments = s.comments(&board, &id).await.unwrap();
    assert_eq!(
        comments.iter().map(|c| c.body.as_str()).collect::<Vec<_>>(),
        ["first", "second"]
    );
    assert!(matches!(
        s.add_comment(&board, &id, "alice", " ").await,
        Err(StoreError::Invalid(_))
    ));

    let file = NewAttachment {
        filename: "report.txt".into(),
        content_type: "text/plain".into(),
        content: b"hello".to_vec(),
        uploaded_by: Some("alice".into()),
    };
    let att = s.attach(&board, &id, &file).await.unwrap();
    assert_eq!((att.size, att.filename.as_str()), (5, "report.txt"));
    assert_eq!(
        s.attachment_content(&board, att.id).await.unwrap(),
        b"hello"
    );
    assert_eq!(s.attachments(&board, &id).await.unwrap(), vec![att.clone()]);
    let big = NewAttachment {
        content: vec![0; ATTACHMENT_CAP_BYTES as usize + 1],
        ..file.clone()
    };
    assert!(matches!(
        s.attach(&board, &id, &big).await,
        Err(StoreError::AttachmentTooLarge { .. })
    ));
    let sneaky = NewAttachment {
        filename: "../etc/passwd".into(),
        ..file
    };
    assert!(matches!(
        s.attach(&board, &id, &sneaky).await,
        Err(StoreError::Invalid(_))
    ));
    s.remove_attachment(&board, att.id).await.unwrap();
    assert!(s.attachments(&board, &id).await.unwrap().is_empty());
    assert!(matches!(
        s.attachment_content(&board, att.id).await,
        Err(StoreError::AttachmentNotFound { .. })
    ));
    let k = kinds(&*s, &id).await;
    assert!(k.contains(&EventKind::Attached) && k.contains(&EventKind::AttachmentRemoved));
}

/// Field edits, assignment (a new assignee clears the failure count) and list filters.
pub async fn patches_assignments_and_filters(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "draft").await;
    let patch = TaskPatch {
        title: Some("final".into()),
        priority: Some(9),
        ..TaskPatch::default()
    };
    let t = s.patch_task(&board, &id, &patch).await.unwrap();
    assert_eq!(
        (t.title.as_str(), t.priority, t.status),
        ("final", 9, TaskStatus::Ready)
    );
    let k = kinds(&*s, &id).await;
    assert!(k.contains(&EventKind::Edited) && k.contains(&EventKind::Reprioritized));
    let blank = TaskPatch {
        title: Some("".into()),
        ..TaskPatch::default()
    };
    assert!(matches!(
        s.patch_task(&board, &id, &blank).await,
        Err(StoreError::Invalid(_))
    ));

    s.claim_task(&board, &id, &long_ttl()).await.unwrap();
    s.record_failure(&board, &id, &failure(FailureKind::Crashed, "x", Some(5)))
        .await
        .unwrap();
    let t = s.assign_task(&board, &id, Some("writer")).await.unwrap();
    assert_eq!(
        (t.assignee.as_deref(), t.consecutive_failures),
        (Some("writer"), 0)
    );
    assert!(kinds(&*s, &id).await.contains(&EventKind::Assigned));

    s.create_task(
        &board,
        &NewTask::new("t1").with_tenant("acme").with_priority(1),
    )
    .await
    .unwrap();
    s.create_task(
        &board,
        &NewTask::new("t2").with_tenant("acme").with_priority(3),
    )
    .await
    .unwrap();
    let acme = TaskFilter {
        tenant: Some("acme".into()),
        sort: TaskSort::Priority,
        ..TaskFilter::default()
    };
    let got: Vec<_> = s
        .list_tasks(&board, &acme)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.title)
        .collect();
    assert_eq!(got, ["t2", "t1"]);
    let writer = TaskFilter {
        assignee: Some("writer".into()),
        ..TaskFilter::default()
    };
    assert_eq!(s.list_tasks(&board, &writer).await.unwrap().len(), 1);
    let ready = TaskFilter {
        statuses: vec![TaskStatus::Ready],
        limit: Some(1),
        ..TaskFilter::default()
    };
    assert_eq!(s.list_tasks(&board, &ready).await.unwrap().len(), 1);
    let stats = s.stats(&board).await.unwrap();
    assert_eq!(stats.count(TaskStatus::Ready), 3);
}

/// Two handles (separate connections) and four claimers race for the same ready tasks: every
/// task is claimed exactly once.
pub async fn concurrent_claims_are_exclusive(b: &dyn SuiteBackend) {
    const TASKS: usize = 120;
    let first = b.open().await.unwrap();
    let second = b.open().await.unwrap();
    let board = default_board();
    for i in 0..TASKS {
        first
            .create_task(&board, &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
    }
    let mut claimers = tokio::task::JoinSet::new();
    for n in 0..4 {
        let store = if n % 2 == 0 {
            Arc::clone(&first)
        } else {
            Arc::clone(&second)
        };
        let board = board.clone();
        claimers.spawn(async move {
            let spec = long_ttl();
            let mut mine = Vec::new();
            loop {
                match store.claim_next(&board, &spec).await {
                    Ok(Some(claim)) => mine.push(claim.task.id),
                    Ok(None) => return mine,
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("claim failed: {e}"),
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
    assert_eq!(
        first
            .stats(&board)
            .await
            .unwrap()
            .count(TaskStatus::Running),
        TASKS as u64
    );
    assert_consistent(&*second, &board).await;
}

/// Two handles create with the same idempotency key at once: one task results.
pub async fn concurrent_idempotent_creates_make_one_task(b: &dyn SuiteBackend) {
    let first = b.open().await.unwrap();
    let second = b.open().await.unwrap();
    let board = default_board();
    let mut set = tokio::task::JoinSet::new();
    for n in 0..8 {
        let store = if n % 2 == 0 {
            Arc::clone(&first)
        } else {
            Arc::clone(&second)
        };
        let board = board.clone();
        set.spawn(async move {
            loop {
                let new = NewTask::new(format!("attempt {n}")).with_idempotency_key("once");
                match store.create_task(&board, &new).await {
                    Ok(c) => return c,
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("create failed: {e}"),
                }
            }
        });
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    while let Some(c) = set.join_next().await {
        let c = c.unwrap();
        created += usize::from(c.created);
        ids.insert(c.task.id);
    }
    assert_eq!((ids.len(), created), (1, 1));
}

/// Operations abandoned mid-flight (their futures dropped) leave each change whole or absent.
pub async fn cancelled_operations_leave_no_half_change(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    for i in 0..40 {
        s.create_task(&board, &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
    }
    let mut handles = Vec::new();
    for _ in 0..40 {
        let store = Arc::clone(&s);
        let board = board.clone();
        handles.push(tokio::spawn(async move {
            let _ = store.claim_next(&board, &long_ttl()).await;
        }));
    }
    for (i, h) in handles.iter().enumerate() {
        if i % 2 == 0 {
            h.abort();
        }
    }
    for h in handles {
        let _ = h.await;
    }
    assert_consistent(&*s, &board).await;
    // The abandoned ones are either claimed whole or still ready; the board keeps working.
    let again = b.open().await.unwrap();
    while again
        .claim_next(&board, &long_ttl())
        .await
        .unwrap()
        .is_some()
    {}
    assert_eq!(
        again
            .stats(&board)
            .await
            .unwrap()
            .count(TaskStatus::Running),
        40
    );
    assert_consistent(&*again, &board).await;
}

/// A new handle sees everything committed through an old one, which is then dropped.
pub async fn reopening_sees_every_commit(b: &dyn SuiteBackend) {
    let board = default_board();
    let (id, run) = {
        let s = b.open().await.unwrap();
        let id = new_task(&*s, "survives").await;
        let claim = s.claim_task(&board, &id, &long_ttl()).await.unwrap();
        s.add_comment(&board, &id, "me", "still here")
            .await
            .unwrap();
        (id, claim.run.id)
    };
    let s = b.open().await.unwrap();
    let t = s.task(&board, &id).await.unwrap();
    assert_eq!(t.status, TaskStatus::Running);
    assert_eq!(t.lease.map(|l| l.run_id), Some(run));
    assert_eq!(s.comments(&board, &id).await.unwrap().len(), 1);
    assert_consistent(&*s, &board).await;
}
