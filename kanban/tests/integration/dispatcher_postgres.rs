//! The dispatcher on a PostgreSQL board, woken by `LISTEN/NOTIFY` ([`ListenWake`]) instead of
//! polling, with two dispatchers (as on two hosts) sharing one board: every task runs exactly
//! once. Needs a throwaway cluster: run `scripts/start-test-postgres.sh` and export
//! `TROUPE_TEST_POSTGRES_URL` from the env file it writes; without it the test is skipped loudly.
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test code: a failed unwrap is the test failing; the skip notice goes to stderr"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe_kanban::dispatcher::{DispatcherConfig, DispatcherHandle, ListenWake};
use troupe_kanban::domain::{BoardSlug, NewTask, TaskStatus};
use troupe_kanban::hooks::DispatcherHooks;
use troupe_kanban::profiles::Profiles;
use troupe_kanban::store::{PostgresStore, Store, test_cluster};

use crate::support::{profile, supervisor};

#[actix_rt::test]
async fn two_dispatchers_woken_by_notify_run_every_task_once() {
    let Some(url) = test_cluster::cluster_url("dispatcher on PostgreSQL") else {
        return;
    };
    let config = test_cluster::fresh_database(&url, "troupe_dispatch")
        .await
        .config;
    let options = troupe_kanban::store::PostgresOptions::default();
    let first = PostgresStore::connect_with(config.clone(), options.clone())
        .await
        .unwrap();
    let second = PostgresStore::connect_with(config, options).await.unwrap();
    let board = BoardSlug::default_board();
    let mut ids = Vec::new();
    for i in 0..40 {
        let task = NewTask::new(format!("job {i}")).with_assignee("coder");
        ids.push(first.create_task(&board, &task).await.unwrap().task.id);
    }
    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "ok"}),
        ))
        .turn(ScriptTurn::text("done"));
    let profiles =
        Profiles::new().with_profile(profile("coder", Arc::new(ScriptedProvider::new(script))));
    let supervisor = supervisor();
    // A long tick and no polling: new work is noticed through NOTIFY (and ending workers).
    let dispatcher_config = DispatcherConfig::default()
        .with_interval(Duration::from_secs(3600))
        .with_max_in_progress(4);
    let mut handles = Vec::new();
    for store in [first, second] {
        let wake = Box::new(ListenWake::new(&store, &board));
        let store: Arc<dyn Store> = Arc::new(store);
        handles.push((
            Arc::clone(&store),
            DispatcherHandle::start_with_wake(
                store,
                board.clone(),
                profiles.clone(),
                supervisor.clone(),
                DispatcherHooks::new(),
                dispatcher_config.clone(),
                wake,
            ),
        ));
    }
    // A task created after both started is picked up through a notice.
    let late = NewTask::new("late").with_assignee("coder");
    ids.push(
        handles[0]
            .0
            .create_task(&board, &late)
            .await
            .unwrap()
            .task
            .id,
    );
    for (_, d) in &handles {
        tokio::time::timeout(Duration::from_secs(120), d.wait_idle())
            .await
            .expect("the board never went idle")
            .unwrap();
    }
    let store = &handles[0].0;
    for id in &ids {
        assert_eq!(
            store.task(&board, id).await.unwrap().status,
            TaskStatus::Done
        );
        assert_eq!(
            store.runs(&board, id).await.unwrap().len(),
            1,
            "{id} ran once"
        );
    }
    let claimed: u64 = handles.iter().map(|(_, d)| d.stats().claimed).sum();
    assert_eq!(claimed, ids.len() as u64);
    for (_, d) in &handles {
        d.stop().await;
    }
}
