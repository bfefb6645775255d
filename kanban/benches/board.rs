//! A whole board run: 10,000 ready tasks through one dispatcher with 32 in-process workers on
//! the scripted model, on an embedded SQLite board.
//!
//! Run with `cargo bench -p troupe-kanban --bench board` (set `BOARD_TASKS` / `BOARD_WORKERS`
//! to change the size, `BOARD_THREADS` for the threads the workers run on; by default one per
//! core, at most four; `BOARD_BATCH` for the most jobs one SQLite commit takes, 1 for none). Prints tasks per second end to end, claims per second, and the p50 and
//! p99 time from `ready` to `running`. Every task is ready from the start, so that time is
//! mostly queueing behind the 32 slots; the report also gives the time from a worker ending to
//! the next claim (the dispatcher's own latency).
#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark program: it prints its figures and a failure is fatal"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use serde_json::json;
use troupe_actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe_actors::supervisor::{ApprovalConfig, ApprovalMode, DefaultRules, Supervisor};
use troupe_kanban::dispatcher::{DispatcherConfig, DispatcherEvent, DispatcherHandle};
use troupe_kanban::domain::{BoardSlug, NewTask, TaskStatus};
use troupe_kanban::hooks::DispatcherHooks;
use troupe_kanban::profiles::{Profiles, WorkerProfile};
use troupe_kanban::store::{SqliteOptions, SqliteStore, Store};
use troupe_tools::Registry;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; this program takes no arguments of its own.
    let tasks = env_usize("BOARD_TASKS", 10_000);
    let workers = env_usize("BOARD_WORKERS", 32);
    let threads = env_usize(
        "BOARD_THREADS",
        troupe_kanban::dispatcher_config::default_worker_threads(),
    );
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    actix_rt::System::with_tokio_rt(runtime).block_on(run(tasks, workers, threads));
}

async fn run(tasks: usize, workers: usize, threads: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SqliteOptions::default();
    opts.max_batch = env_usize("BOARD_BATCH", opts.max_batch);
    println!("jobs per commit at most: {}", opts.max_batch);
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_with(dir.path(), opts).await.unwrap());
    let board = BoardSlug::default_board();
    let seed = Instant::now();
    // Many creations in flight at once, so they share commits (seeding is not timed).
    use futures::StreamExt as _;
    futures::stream::iter(0..tasks)
        .map(|i| {
            let (store, board) = (Arc::clone(&store), board.clone());
            async move {
                let task = NewTask::new(format!("task {i}")).with_assignee("coder");
                store.create_task(&board, &task).await.unwrap();
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<()>>()
        .await;
    println!(
        "seeded {tasks} tasks in {:.1} s",
        seed.elapsed().as_secs_f64()
    );

    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "done"}),
        ))
        .turn(ScriptTurn::text("ok"));
    let provider = Arc::new(ScriptedProvider::new(script));
    let profiles = Profiles::new().with_profile(WorkerProfile::new(
        "coder",
        provider,
        Registry::new().view_all(),
    ));
    let approvals = ApprovalConfig {
        mode: ApprovalMode::Off,
        ..ApprovalConfig::default()
    };
    let supervisor = Supervisor::new(approvals, Arc::new(DefaultRules::new(Vec::new()))).start();
    let config = DispatcherConfig::default()
        .with_max_in_progress(workers)
        .with_worker_threads(threads)
        .with_interval(Duration::from_secs(1))
        .with_poll_interval(Duration::from_millis(50));

    let start = Instant::now();
    let dispatcher = DispatcherHandle::start(
        Arc::clone(&store),
        board.clone(),
        profiles,
        supervisor,
        DispatcherHooks::new(),
        config,
    );
    let mut events = dispatcher.subscribe();
    // Time from a worker ending to the next worker starting, measured on the event stream.
    let gaps = tokio::spawn(async move {
        let mut last_finish: Option<Instant> = None;
        let mut gaps = Vec::new();
        loop {
            match events.recv().await {
                Ok(DispatcherEvent::WorkerFinished(_)) => last_finish = Some(Instant::now()),
                Ok(DispatcherEvent::WorkerStarted { .. }) => {
                    if let Some(at) = last_finish.take() {
                        gaps.push(at.elapsed().as_micros() as i64);
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return gaps,
            }
        }
    });
    dispatcher.wait_idle().await.unwrap();
    let elapsed = start.elapsed();
    let stats = dispatcher.stats();
    dispatcher.stop().await;
    drop(dispatcher);

    let done = store.stats(&board).await.unwrap().count(TaskStatus::Done);
    exactly_once(store.as_ref(), &board, tasks).await;
    let all = store.list_tasks(&board, &Default::default()).await.unwrap();
    let mut waits = Vec::with_capacity(all.len());
    let mut first_claim = i64::MAX;
    let mut last_claim = i64::MIN;
    for task in &all {
        let runs = store.runs(&board, &task.id).await.unwrap();
        if let Some(run) = runs.first() {
            waits.push(run.started_at.millis() - task.created_at.millis());
            first_claim = first_claim.min(run.started_at.millis());
            last_claim = last_claim.max(run.started_at.millis());
        }
    }
    // Queue wait counts from when the dispatcher started, not from seeding.
    let started_ms = waits.iter().copied().min().unwrap_or(0);
    let mut waits: Vec<i64> = waits.into_iter().map(|w| w - started_ms).collect();
    waits.sort_unstable();
    let claim_span = ((last_claim - first_claim).max(1)) as f64 / 1000.0;
    let mut gaps = gaps.await.unwrap_or_default();
    gaps.sort_unstable();

    println!(
        "tasks: {tasks}, workers: {workers}, threads: {threads}, done: {done}, claims: {}",
        stats.claimed
    );
    println!(
        "end to end: {:.2} s, {:.0} tasks/s",
        elapsed.as_secs_f64(),
        done as f64 / elapsed.as_secs_f64()
    );
    println!(
        "claims/s: {:.0} (first to last claim)",
        stats.claimed as f64 / claim_span
    );
    println!(
        "ready -> running (backlog queueing): p50 {} ms, p99 {} ms",
        percentile(&waits, 0.50),
        percentile(&waits, 0.99)
    );
    println!(
        "worker end -> next claim: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&gaps, 0.50) as f64 / 1000.0,
        percentile(&gaps, 0.99) as f64 / 1000.0
    );
    println!(
        "rounds: {}, completed: {}, failed: {}",
        stats.rounds, stats.completed, stats.failed
    );
}

/// Checks from the board's own event log that every task was claimed exactly once and
/// completed exactly once, and that nothing else happened to any of them; panics otherwise.
async fn exactly_once(store: &dyn Store, board: &BoardSlug, tasks: usize) {
    use std::collections::HashMap;
    use troupe_kanban::domain::{EventId, EventKind};
    let mut seen: HashMap<String, (u32, u32)> = HashMap::with_capacity(tasks);
    let mut cursor = EventId::START;
    loop {
        let page = store.events_since(board, cursor, 10_000).await.unwrap();
        let Some(last) = page.last() else { break };
        cursor = last.id;
        for event in &page {
            let Some(task) = &event.task_id else { continue };
            let entry = seen.entry(task.to_string()).or_default();
            match event.kind {
                EventKind::Created => {}
                EventKind::Claimed => entry.0 += 1,
                EventKind::Completed => entry.1 += 1,
                other => panic!("task {task} saw an unexpected {other:?} event"),
            }
        }
    }
    assert_eq!(seen.len(), tasks, "every task is on the board");
    for (task, (claimed, completed)) in &seen {
        assert_eq!(
            (*claimed, *completed),
            (1, 1),
            "task {task}: claimed {claimed} times, completed {completed} times"
        );
    }
    println!("checked: all {tasks} tasks claimed once and completed once");
}
