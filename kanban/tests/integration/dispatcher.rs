//! The dispatcher and its workers on a real SQLite board with scripted models: a fan-out of 50
//! children and a final task, dependencies, the failure limit, protocol violations, lease
//! expiry of a hung worker, archive stopping a worker, a stop handing leases back, and one run
//! through the mock OpenAI-compatible server over HTTP. The task-bound tools alone are in
//! `worker_tools.rs`; the models scripted here in `models.rs`.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix::{Actor, Addr};
use serde_json::json;
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{
    ModelProvider, OpenAiConfig, OpenAiProvider, Script, ScriptTurn, ScriptedProvider,
};
use troupe_actors::supervisor::{ApprovalConfig, ApprovalMode, DefaultRules, Supervisor};
use troupe_kanban::dispatcher::{DispatcherConfig, DispatcherEvent, DispatcherHandle};
use troupe_kanban::domain::{
    BoardSlug, EventKind, NewTask, RunOutcome, Task, TaskId, TaskStatus, WorkerId,
};
use troupe_kanban::hooks::DispatcherHooks;
use troupe_kanban::profiles::Profiles;
use troupe_kanban::store::{ClaimSpec, SqliteStore, Store};
use troupe_kanban::worker::WorkerOutcome;

use crate::models::{FanOutPlanner, HangsFirst, InFlight, LimitedFirst};
use crate::support::{PATIENCE, completes, fast, profile, supervisor};

struct Board {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    slug: BoardSlug,
    supervisor: Addr<Supervisor>,
}

async fn board() -> Board {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    Board {
        _dir: dir,
        store,
        slug: BoardSlug::default_board(),
        supervisor: supervisor(),
    }
}

fn scripted(script: Script) -> Arc<dyn ModelProvider> {
    Arc::new(ScriptedProvider::new(script))
}

fn start(b: &Board, profiles: Profiles, config: DispatcherConfig) -> DispatcherHandle {
    DispatcherHandle::start(
        Arc::clone(&b.store),
        b.slug.clone(),
        profiles,
        b.supervisor.clone(),
        DispatcherHooks::new(),
        config,
    )
}

async fn idle(d: &DispatcherHandle) {
    tokio::time::timeout(PATIENCE, d.wait_idle())
        .await
        .expect("the board never went idle")
        .unwrap();
}

async fn create(b: &Board, task: NewTask) -> Task {
    b.store.create_task(&b.slug, &task).await.unwrap().task
}

/// Every task's runs are one after another, never two open at once.
async fn assert_no_overlapping_runs(b: &Board, tasks: &[TaskId]) {
    for id in tasks {
        let runs = b.store.runs(&b.slug, id).await.unwrap();
        for pair in runs.windows(2) {
            let ended = pair[0].ended_at.expect("an earlier run is closed");
            assert!(
                ended <= pair[1].started_at,
                "{id}: run {} started before run {} ended",
                pair[1].id.0,
                pair[0].id.0
            );
        }
    }
}

#[actix_rt::test]
async fn fan_out_of_fifty_children_runs_them_in_parallel_and_the_final_task_last() {
    let b = board().await;
    let profiles = Profiles::new()
        .with_profile(profile("orchestrator", Arc::new(FanOutPlanner { n: 50 })))
        .with_profile(profile("coder", scripted(completes())));
    let root = create(&b, NewTask::new("build it").with_assignee("orchestrator")).await;
    let config = fast()
        .with_max_in_progress(8)
        .with_worker_assignable_profiles(vec!["coder".into()]);
    let d = start(&b, profiles, config);
    let mut events = d.subscribe();
    idle(&d).await;

    let links = b.store.links(&b.slug, &root.id).await.unwrap();
    assert_eq!(links.children.len(), 51, "50 parts and the final task");
    let mut final_task = None;
    let mut parts = Vec::new();
    for id in &links.children {
        let task = b.store.task(&b.slug, id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Done, "{id} ran to completion");
        if task.title == "put it together" {
            final_task = Some(task);
        } else {
            parts.push(task);
        }
    }
    let final_task = final_task.expect("the final task exists");
    let final_parents = b
        .store
        .links(&b.slug, &final_task.id)
        .await
        .unwrap()
        .parents;
    assert_eq!(final_parents.len(), 51, "the root and every part");

    // The final task started only after every part had ended.
    let final_start = b.store.runs(&b.slug, &final_task.id).await.unwrap()[0].started_at;
    for part in &parts {
        let runs = b.store.runs(&b.slug, &part.id).await.unwrap();
        assert_eq!(runs.len(), 1, "{} ran once", part.id);
        assert!(runs[0].ended_at.unwrap() <= final_start);
    }
    // The parts were claimed several at a time: a round started more than one worker.
    let mut widest_round = 0;
    while let Ok(event) = events.try_recv() {
        if let DispatcherEvent::RoundFinished(report) = event {
            widest_round = widest_round.max(report.claimed.len());
        }
    }
    assert!(
        widest_round > 1,
        "parts ran in parallel (widest round {widest_round})"
    );
    assert!(widest_round <= 8, "never more than max_in_progress at once");
    let mut all = links.children.clone();
    all.push(root.id.clone());
    assert_no_overlapping_runs(&b, &all).await;
    assert_eq!(d.stats().completed, 52);
    d.stop().await;
}

#[actix_rt::test]
async fn a_chain_runs_in_dependency_order_and_unassigned_tasks_use_the_default() {
    let b = board().await;
    let profiles = Profiles::new()
        .with_profile(profile("coder", scripted(completes())))
        .with_default_assignee("coder");
    let first = create(&b, NewTask::new("first")).await;
    let second = create(&b, NewTask::new("second").with_parent(first.id.clone())).await;
    let third = create(&b, NewTask::new("third").with_parent(second.id.clone())).await;
    assert_eq!(third.status, TaskStatus::Todo);
    let d = start(&b, profiles, fast());
    idle(&d).await;
    let mut last_end = None;
    for id in [&first.id, &second.id, &third.id] {
        let task = b.store.task(&b.slug, id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Done);
        assert_eq!(task.assignee.as_deref(), Some("coder"));
        let run = &b.store.runs(&b.slug, id).await.unwrap()[0];
        if let Some(end) = last_end {
            assert!(
                run.started_at >= end,
                "{id} started before its parent ended"
            );
        }
        last_end = run.ended_at;
    }
    d.stop().await;
}

#[actix_rt::test]
async fn dry_run_reports_without_claiming_and_skips_unknown_assignees() {
    let b = board().await;
    let profiles = Profiles::new().with_profile(profile("coder", scripted(completes())));
    let a = create(&b, NewTask::new("a").with_assignee("coder")).await;
    let ghost = create(&b, NewTask::new("b").with_assignee("ghost")).await;
    let orphan = create(&b, NewTask::new("c")).await;
    let d = start(&b, profiles, fast().with_auto_dispatch(false));
    let report = d.dispatch_once(None, true).await.unwrap();
    assert!(report.dry_run);
    assert_eq!(report.claimed.len(), 1);
    assert_eq!(report.claimed[0].task_id, a.id);
    assert_eq!(
        report.skipped_nonspawnable,
        vec![(ghost.id.clone(), "ghost".into())]
    );
    assert_eq!(report.skipped_unassigned, vec![orphan.id.clone()]);
    assert_eq!(
        b.store.task(&b.slug, &a.id).await.unwrap().status,
        TaskStatus::Ready
    );
    let report = d.dispatch_once(Some(1), false).await.unwrap();
    assert_eq!(report.claimed.len(), 1);
    idle(&d).await;
    assert_eq!(
        b.store.task(&b.slug, &a.id).await.unwrap().status,
        TaskStatus::Done
    );
    assert_eq!(
        b.store.task(&b.slug, &ghost.id).await.unwrap().status,
        TaskStatus::Ready
    );
    d.stop().await;
}

#[actix_rt::test]
async fn crashes_count_toward_the_failure_limit_then_the_task_is_blocked() {
    let b = board().await;
    // An empty script with no final text: every model request fails.
    let profiles = Profiles::new().with_profile(profile("broken", scripted(Script::new())));
    let default_limit = create(&b, NewTask::new("a").with_assignee("broken")).await;
    let own_limit = create(
        &b,
        NewTask::new("b")
            .with_assignee("broken")
            .with_max_retries(3),
    )
    .await;
    let d = start(&b, profiles, fast());
    idle(&d).await;
    for (id, limit) in [(&default_limit.id, 2), (&own_limit.id, 3)] {
        let task = b.store.task(&b.slug, id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Blocked, "{id} given up");
        assert!(task.last_failure_error.unwrap().contains("model failed"));
        let runs = b.store.runs(&b.slug, id).await.unwrap();
        assert_eq!(runs.len(), limit, "{id} ran {limit} times");
        let (last, earlier) = runs.split_last().unwrap();
        assert!(
            earlier
                .iter()
                .all(|r| r.outcome == Some(RunOutcome::Crashed))
        );
        assert!(
            matches!(last.outcome, Some(RunOutcome::Crashed | RunOutcome::GaveUp)),
            "{:?}",
            last.outcome
        );
    }
    assert_eq!(d.stats().failed, 5);
    d.stop().await;
}

#[actix_rt::test]
async fn configured_failure_limit_applies_when_the_task_sets_none() {
    let b = board().await;
    let profiles = Profiles::new().with_profile(profile("broken", scripted(Script::new())));
    let task = create(&b, NewTask::new("a").with_assignee("broken")).await;
    let d = start(&b, profiles, fast().with_failure_limit(1));
    idle(&d).await;
    assert_eq!(b.store.runs(&b.slug, &task.id).await.unwrap().len(), 1);
    assert_eq!(
        b.store.task(&b.slug, &task.id).await.unwrap().status,
        TaskStatus::Blocked
    );
    d.stop().await;
}

#[actix_rt::test]
async fn ending_without_a_terminal_call_is_retried_three_times_then_given_up() {
    let b = board().await;
    // The model only ever talks; reminders get the same.
    let chatty = Script::new()
        .turn(ScriptTurn::text("I think it is fine."))
        .when_exhausted("Still fine.");
    let profiles = Profiles::new().with_profile(profile("chatty", scripted(chatty)));
    let task = create(&b, NewTask::new("a").with_assignee("chatty")).await;
    let d = start(&b, profiles, fast());
    let mut events = d.subscribe();
    idle(&d).await;
    let task = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Blocked);
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert_eq!(runs.len(), 3);
    let mut violations = 0;
    while let Ok(event) = events.try_recv() {
        if let DispatcherEvent::WorkerFinished(report) = event {
            assert_eq!(report.outcome, WorkerOutcome::ProtocolViolation);
            violations += 1;
        }
    }
    assert_eq!(violations, 3);
    d.stop().await;
}

#[actix_rt::test]
async fn a_reminder_gets_a_forgetful_worker_to_finish() {
    let b = board().await;
    let forgetful = Script::new()
        .turn(ScriptTurn::text("All done, I believe."))
        .turn(
            ScriptTurn::tool_call("kanban_complete", json!({"summary": "finished after all"}))
                .when_input_contains("still open"),
        )
        .turn(ScriptTurn::text("ok"));
    let profiles = Profiles::new().with_profile(profile("forgetful", scripted(forgetful)));
    let task = create(&b, NewTask::new("a").with_assignee("forgetful")).await;
    let d = start(&b, profiles, fast());
    idle(&d).await;
    assert_eq!(
        b.store.task(&b.slug, &task.id).await.unwrap().status,
        TaskStatus::Done
    );
    assert_eq!(b.store.runs(&b.slug, &task.id).await.unwrap().len(), 1);
    d.stop().await;
}

#[actix_rt::test]
async fn a_hung_worker_loses_its_lapsed_lease_and_the_task_runs_again_once() {
    let b = board().await;
    let most = Arc::new(AtomicUsize::new(0));
    let provider = Arc::new(InFlight {
        inner: Arc::new(HangsFirst {
            calls: AtomicUsize::new(0),
            then: ScriptedProvider::new(completes()),
        }),
        now: Arc::new(AtomicUsize::new(0)),
        most: Arc::clone(&most),
    });
    let profiles = Profiles::new().with_profile(profile("slow", provider));
    let task = create(&b, NewTask::new("a").with_assignee("slow")).await;
    // A short lease that is never renewed in time: the first worker hangs past it.
    let config = fast()
        .with_lease_ttl(Duration::from_millis(300))
        .with_heartbeat_interval(Duration::from_secs(3600));
    let d = start(&b, profiles, config);
    let mut events = d.subscribe();
    idle(&d).await;
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert!(runs.len() >= 2, "reclaimed, then run again");
    assert_eq!(runs[0].outcome, Some(RunOutcome::Reclaimed));
    assert_eq!(runs.last().unwrap().outcome, Some(RunOutcome::Completed));
    assert_no_overlapping_runs(&b, std::slice::from_ref(&task.id)).await;
    // The old worker must have ended before the new one started: never two workers (nor two
    // model calls) for the task at once.
    let mut outcomes = Vec::new();
    let (mut workers, mut most_workers) = (0usize, 0usize);
    while let Ok(event) = events.try_recv() {
        match event {
            DispatcherEvent::WorkerStarted { .. } => {
                workers += 1;
                most_workers = most_workers.max(workers);
            }
            DispatcherEvent::WorkerFinished(report) => {
                workers -= 1;
                outcomes.push(report.outcome);
            }
            DispatcherEvent::RoundFinished(_) => {}
        }
    }
    assert_eq!(most_workers, 1, "two workers ran the task at once");
    assert_eq!(most.load(Ordering::SeqCst), 1, "two model calls overlapped");
    assert_eq!(
        outcomes.first(),
        Some(&WorkerOutcome::Stopped),
        "{outcomes:?}"
    );
    d.stop().await;
}

#[actix_rt::test]
async fn archiving_a_running_task_stops_its_worker() {
    let b = board().await;
    let provider = Arc::new(HangsFirst {
        calls: AtomicUsize::new(0),
        then: ScriptedProvider::new(completes()),
    });
    let profiles = Profiles::new().with_profile(profile("slow", provider));
    let task = create(&b, NewTask::new("a").with_assignee("slow")).await;
    let d = start(&b, profiles, fast());
    let mut events = d.subscribe();
    loop {
        match tokio::time::timeout(PATIENCE, events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            DispatcherEvent::WorkerStarted { task_id, .. } if task_id == task.id => break,
            _ => {}
        }
    }
    b.store.archive(&b.slug, &task.id).await.unwrap();
    let report = loop {
        if let DispatcherEvent::WorkerFinished(report) =
            tokio::time::timeout(PATIENCE, events.recv())
                .await
                .unwrap()
                .unwrap()
        {
            break report;
        }
    };
    assert_eq!(report.outcome, WorkerOutcome::Stopped);
    assert_eq!(report.task_id, task.id);
    assert_eq!(
        b.store.task(&b.slug, &task.id).await.unwrap().status,
        TaskStatus::Archived
    );
    assert!(d.running().await.unwrap().is_empty());
    d.stop().await;
}

#[actix_rt::test]
async fn stopping_the_dispatcher_hands_running_tasks_back() {
    let b = board().await;
    let provider = Arc::new(HangsFirst {
        calls: AtomicUsize::new(0),
        then: ScriptedProvider::new(completes()),
    });
    let profiles = Profiles::new().with_profile(profile("slow", provider));
    let task = create(&b, NewTask::new("a").with_assignee("slow")).await;
    let d = start(&b, profiles, fast());
    let mut events = d.subscribe();
    loop {
        if let DispatcherEvent::WorkerStarted { .. } = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            break;
        }
    }
    d.stop().await;
    assert!(!d.is_running() || d.running().await.is_err());
    let task = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Ready, "the lease was handed back");
    assert_eq!(task.consecutive_failures, 0);
    // Handed back by its worker in one store call, not made to lapse and swept up.
    let events = b.store.task_events(&b.slug, &task.id).await.unwrap();
    let back: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Reclaimed)
        .collect();
    assert_eq!(back.len(), 1, "{events:?}");
    assert_eq!(back[0].payload["released"], json!(true), "{events:?}");
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, Some(RunOutcome::Reclaimed));
}

#[actix_rt::test]
async fn end_to_end_through_the_mock_openai_server() {
    let b = board().await;
    let server = MockServer::start(completes()).await.unwrap();
    let provider = OpenAiProvider::new(OpenAiConfig::new(server.url(), "mock-model")).unwrap();
    let profiles = Profiles::new().with_profile(profile("remote", Arc::new(provider)));
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            create(&b, NewTask::new(format!("job {i}")).with_assignee("remote"))
                .await
                .id,
        );
    }
    let d = start(&b, profiles, fast());
    idle(&d).await;
    for id in &ids {
        let task = b.store.task(&b.slug, id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Done);
        assert_eq!(task.result.as_deref(), Some("the output"));
    }
    let requests = server.requests();
    // One request per task: the session ends at kanban_complete, the model is not asked to
    // sign off after it.
    assert_eq!(requests.len(), 3, "one request per task");
    let tools = requests[0].tool_names();
    for name in [
        "kanban_show",
        "kanban_complete",
        "kanban_block",
        "kanban_create",
    ] {
        assert!(tools.iter().any(|t| t == name), "{name} offered: {tools:?}");
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for id in &ids {
        let runs = b.store.runs(&b.slug, id).await.unwrap();
        // The run's spend was written with its completion: the one request.
        let usage = runs[0].usage.clone().unwrap_or_default();
        assert_eq!(usage["requests"], json!(1), "{usage}");
        *seen.entry(id.to_string()).or_default() += runs.len();
    }
    assert!(seen.values().all(|&n| n == 1));
    d.stop().await;
}

#[actix_rt::test]
async fn a_run_past_its_max_runtime_is_stopped_and_counted_as_a_timeout() {
    let b = board().await;
    let provider = Arc::new(HangsFirst {
        calls: AtomicUsize::new(0),
        then: ScriptedProvider::new(completes()),
    });
    let profiles = Profiles::new().with_profile(profile("slow", provider));
    let task = create(
        &b,
        NewTask::new("a")
            .with_assignee("slow")
            .with_max_runtime(Duration::from_secs(1)),
    )
    .await;
    let d = start(&b, profiles, fast());
    idle(&d).await;
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].outcome, Some(RunOutcome::TimedOut));
    assert!(runs[0].error.as_deref().unwrap().contains("max runtime"));
    assert_eq!(runs[1].outcome, Some(RunOutcome::Completed));
    assert_eq!(d.stats().failed, 1);
    d.stop().await;
}

#[actix_rt::test]
async fn a_rate_limited_run_is_requeued_without_counting_a_failure() {
    let b = board().await;
    let provider = Arc::new(LimitedFirst {
        calls: AtomicUsize::new(0),
        then: ScriptedProvider::new(completes()),
    });
    let profiles = Profiles::new().with_profile(profile("busy", provider));
    let task = create(
        &b,
        NewTask::new("a").with_assignee("busy").with_max_retries(1),
    )
    .await;
    let d = start(
        &b,
        profiles,
        fast().with_rate_limit_cooldown(Duration::ZERO),
    );
    idle(&d).await;
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert_eq!(
        runs.len(),
        2,
        "a failure limit of 1 did not stop the second run"
    );
    assert_eq!(runs[0].outcome, Some(RunOutcome::RateLimited));
    assert_eq!(runs[1].outcome, Some(RunOutcome::Completed));
    assert_eq!(d.stats().rate_limited, 1);
    d.stop().await;
}

/// Counts what the board hooks saw.
#[derive(Default)]
struct CountingHook {
    claimed: AtomicUsize,
    started: AtomicUsize,
    finished: AtomicUsize,
    completed: AtomicUsize,
    rounds: AtomicUsize,
}

impl troupe_kanban::hooks::KanbanHook for CountingHook {
    fn task_claimed(&self, _: &BoardSlug, task: &Task, _: &troupe_kanban::domain::Run) {
        assert_eq!(
            task.status,
            TaskStatus::Running,
            "hooks run after the commit"
        );
        self.claimed.fetch_add(1, Ordering::SeqCst);
    }
    fn worker_started(&self, _: &BoardSlug, _: &TaskId, _: &WorkerId) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }
    fn worker_finished(&self, _: &BoardSlug, _: &troupe_kanban::worker::WorkerReport) {
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
    fn task_completed(&self, _: &BoardSlug, task: &Task) {
        assert_eq!(task.status, TaskStatus::Done);
        self.completed.fetch_add(1, Ordering::SeqCst);
    }
    fn dispatch_round(&self, _: &BoardSlug, _: &troupe_kanban::DispatchReport) {
        self.rounds.fetch_add(1, Ordering::SeqCst);
    }
}

#[actix_rt::test]
async fn per_assignee_caps_and_max_in_progress_hold_and_hooks_see_every_step() {
    let b = board().await;
    let profiles = Profiles::new()
        .with_profile(profile("coder", scripted(completes())))
        .with_profile(profile("writer", scripted(completes())));
    for i in 0..12 {
        let who = if i % 2 == 0 { "coder" } else { "writer" };
        create(&b, NewTask::new(format!("t{i}")).with_assignee(who)).await;
    }
    let hook = Arc::new(CountingHook::default());
    let hooks = DispatcherHooks::new().with_kanban_hook(hook.clone());
    let config = fast().with_max_in_progress(3).with_assignee_cap("coder", 1);
    let d = DispatcherHandle::start(
        Arc::clone(&b.store),
        b.slug.clone(),
        profiles,
        b.supervisor.clone(),
        hooks,
        config,
    );
    let mut events = d.subscribe();
    idle(&d).await;
    // Replay the event stream (it is in the actor's order) and count who ran at once.
    let mut running: HashMap<String, usize> = HashMap::new();
    let mut by_task: HashMap<TaskId, String> = HashMap::new();
    let (mut widest, mut widest_coder) = (0, 0);
    while let Ok(event) = events.try_recv() {
        match event {
            DispatcherEvent::WorkerStarted {
                task_id, assignee, ..
            } => {
                *running.entry(assignee.clone()).or_default() += 1;
                by_task.insert(task_id, assignee);
            }
            DispatcherEvent::WorkerFinished(report) => {
                *running.get_mut(&by_task[&report.task_id]).unwrap() -= 1;
            }
            DispatcherEvent::RoundFinished(_) => {}
        }
        widest = widest.max(running.values().sum::<usize>());
        widest_coder = widest_coder.max(running.get("coder").copied().unwrap_or(0));
    }
    assert!(
        widest <= 3,
        "at most max_in_progress at once (saw {widest})"
    );
    assert_eq!(widest_coder, 1, "the coder cap of 1 held");
    assert_eq!(by_task.len(), 12);
    for counter in [
        &hook.claimed,
        &hook.started,
        &hook.finished,
        &hook.completed,
    ] {
        assert_eq!(counter.load(Ordering::SeqCst), 12);
    }
    assert!(hook.rounds.load(Ordering::SeqCst) >= 1);
    d.stop().await;
}

#[actix_rt::test]
async fn a_worker_that_cannot_start_counts_as_a_spawn_failure() {
    let b = board().await;
    // A supervisor whose arbiter is gone: every session registration fails.
    let arbiter = actix::Arbiter::new();
    let config = ApprovalConfig {
        mode: ApprovalMode::Off,
        ..ApprovalConfig::default()
    };
    let dead = Supervisor::start_in_arbiter(&arbiter.handle(), move |_| {
        Supervisor::new(config, Arc::new(DefaultRules::new(Vec::new())))
    });
    arbiter.stop();
    while dead.connected() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let profiles = Profiles::new().with_profile(profile("coder", scripted(completes())));
    let task = create(&b, NewTask::new("a").with_assignee("coder")).await;
    let d = DispatcherHandle::start(
        Arc::clone(&b.store),
        b.slug.clone(),
        profiles,
        dead,
        DispatcherHooks::new(),
        fast(),
    );
    idle(&d).await;
    let task = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(
        task.status,
        TaskStatus::Blocked,
        "given up after the default limit"
    );
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("could not start")
    );
    d.stop().await;
}

#[actix_rt::test]
async fn the_worker_context_holds_parents_results_comments_and_attempts_within_caps() {
    use troupe_kanban::store::{Completion, Failure, FailureKind};
    use troupe_kanban::worker_context::{BODY_CAP, MAX_COMMENTS, build_worker_context};
    let b = board().await;
    let parent = create(&b, NewTask::new("research")).await;
    let claim = b
        .store
        .claim_task(&b.slug, &parent.id, &ClaimSpec::new(WorkerId::local()))
        .await
        .unwrap();
    let done = Completion {
        summary: Some("found three sources".into()),
        result: Some("source list: a, b, c".into()),
        worker: Some(claim.lease.worker),
        ..Completion::default()
    };
    b.store.complete(&b.slug, &parent.id, &done).await.unwrap();
    let body = "x".repeat(BODY_CAP + 500);
    let child = create(
        &b,
        NewTask::new("write it up")
            .with_body(body)
            .with_parent(parent.id.clone()),
    )
    .await;
    for i in 0..MAX_COMMENTS + 5 {
        b.store
            .add_comment(&b.slug, &child.id, "reviewer", &format!("note number {i}"))
            .await
            .unwrap();
    }
    let worker = WorkerId::local();
    b.store
        .claim_task(&b.slug, &child.id, &ClaimSpec::new(worker.clone()))
        .await
        .unwrap();
    let failure = Failure {
        kind: FailureKind::Crashed,
        error: "the model went away".into(),
        worker: Some(worker),
        configured_limit: None,
    };
    b.store
        .record_failure(&b.slug, &child.id, &failure)
        .await
        .unwrap();
    let task = b.store.task(&b.slug, &child.id).await.unwrap();
    let text = build_worker_context(b.store.as_ref(), &b.slug, &task)
        .await
        .unwrap();
    assert!(text.contains("found three sources") && text.contains("source list: a, b, c"));
    assert!(
        text.contains("500 more bytes not shown"),
        "the body is capped"
    );
    assert!(text.contains("note number 34") && !text.contains("note number 4\n"));
    assert_eq!(text.matches("- reviewer:").count(), MAX_COMMENTS);
    assert!(text.contains("crashed") && text.contains("the model went away"));
}

#[actix_rt::test]
async fn a_rate_limited_task_cools_down_before_it_is_claimed_again() {
    let b = board().await;
    let provider = Arc::new(LimitedFirst {
        calls: AtomicUsize::new(0),
        then: ScriptedProvider::new(completes()),
    });
    let profiles = Profiles::new().with_profile(profile("busy", provider));
    let task = create(&b, NewTask::new("a").with_assignee("busy")).await;
    let config = fast()
        .with_auto_dispatch(false)
        .with_rate_limit_cooldown(Duration::from_secs(3600));
    let d = start(&b, profiles, config);
    let mut events = d.subscribe();
    assert_eq!(d.dispatch_once(None, false).await.unwrap().claimed.len(), 1);
    loop {
        if let DispatcherEvent::WorkerFinished(report) =
            tokio::time::timeout(PATIENCE, events.recv())
                .await
                .unwrap()
                .unwrap()
        {
            assert_eq!(report.outcome, WorkerOutcome::RateLimited);
            break;
        }
    }
    let report = d.dispatch_once(None, false).await.unwrap();
    assert!(report.claimed.is_empty());
    assert_eq!(report.skipped_cooldown, vec![task.id.clone()]);
    let task = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Ready);
    assert_eq!(task.consecutive_failures, 0);
    d.stop().await;
}
