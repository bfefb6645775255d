//! The behaviour suite every [`Store`] implementation must pass (feature `test-suite`).
//!
//! The cases live in `tasks.rs` (a board's shape), `leases.rs` (claims and how runs end) and
//! `integrity.rs` (races and crashes); this file holds what they share.
//!
//! An implementation's test file provides a [`SuiteBackend`] (fresh, empty storage that can be
//! opened several times) and stamps out one test per case with [`store_suite!`](crate::store_suite).
//! [`assert_consistent`] checks the invariants that crash tests rely on. Cases panic on failure,
//! as tests do.

#![allow(
    clippy::unwrap_used,
    reason = "this module is test code: a failed step must fail the test with its error"
)]

mod integrity;
mod leases;
mod schedules;
mod tasks;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::{
    BoardSlug, EventId, EventKind, NewTask, TaskFilter, TaskId, TaskStatus, WorkerId,
};
use crate::store::{ClaimSpec, Failure, FailureKind, Store, StoreFuture};

// The cases, by what they are about; `store_suite!` names each.
pub use integrity::{
    cancelled_operations_leave_no_half_change, concurrent_claims_are_exclusive,
    concurrent_idempotent_creates_make_one_task, events_are_monotonic_and_complete,
    reopening_sees_every_commit,
};
pub use leases::{
    a_claim_answers_what_is_stored, a_comment_answers_a_question_block,
    a_completion_in_review_keeps_its_result, a_worker_releases_only_its_own_lease,
    archiving_ends_the_run_and_frees_children, batched_claims_take_the_best_tasks_in_order,
    blocks_go_to_blocked_todo_or_triage, claims_open_a_lease_and_a_run,
    failures_count_to_the_effective_limit, heartbeats_extend_only_the_holders_lease,
    lapsed_leases_are_reclaimed, rate_limits_requeue_without_counting, review_round_trip,
    scheduled_tasks_wait_for_their_time,
};
pub use schedules::{
    due_jobs_fire_once_across_handles, missed_runs_catch_up_once_or_skip,
    schedule_jobs_round_trip_and_refuse_bad_definitions,
};
pub use tasks::{
    boards_follow_slug_rules_and_archive, comments_and_attachments,
    completing_parents_promotes_children, creation_picks_ready_todo_triage_or_blocked,
    idempotency_keys_return_the_live_task, links_refuse_self_cycles_and_other_boards,
    patches_assignments_and_filters, task_context_is_what_its_parts_say,
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
            a_claim_answers_what_is_stored,
            batched_claims_take_the_best_tasks_in_order,
            task_context_is_what_its_parts_say,
            heartbeats_extend_only_the_holders_lease,
            blocks_go_to_blocked_todo_or_triage,
            a_comment_answers_a_question_block,
            archiving_ends_the_run_and_frees_children,
            scheduled_tasks_wait_for_their_time,
            review_round_trip,
            a_completion_in_review_keeps_its_result,
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
            reopening_sees_every_commit,
            schedule_jobs_round_trip_and_refuse_bad_definitions,
            due_jobs_fire_once_across_handles,
            missed_runs_catch_up_once_or_skip
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

pub(crate) fn default_board() -> BoardSlug {
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

/// A failure of `kind` reported by no particular worker.
fn failure(kind: FailureKind, error: &str, configured: Option<u32>) -> Failure {
    Failure {
        kind,
        error: error.to_string(),
        worker: None,
        configured_limit: configured,
    }
}
