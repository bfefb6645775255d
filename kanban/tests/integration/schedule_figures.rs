//! Figures for docs/benchmarks.md (ignored; run by hand with `--ignored --nocapture`):
//! 10,000 one-time jobs due in the same minute, on SQLite and (when the test cluster is
//! configured) PostgreSQL: the time to fire them all, and what an idle sweep costs while the
//! 10,000 jobs wait for their time.

#![allow(clippy::unwrap_used, reason = "a figures run: a failed step fails it")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_kanban::domain::{BoardSlug, TaskFilter, Timestamp};
use troupe_kanban::schedule::sweep::sweep;
use troupe_kanban::schedule::{JobAction, Missed, NewJob};
use troupe_kanban::store::{PostgresStore, SqliteStore, Store, test_cluster};

const JOBS: usize = 10_000;

fn one_time(i: usize, at: Timestamp) -> NewJob {
    let text = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(at.0)
        .unwrap()
        .to_rfc3339();
    NewJob {
        name: format!("job-{i}"),
        owner: "figures".into(),
        schedule: text,
        timezone: None,
        action: JobAction::Task {
            title: format!("scheduled {i}"),
            body: String::new(),
            assignee: None,
            parents: Vec::new(),
        },
        missed: Missed::RunOnce,
        until: None,
        max_runs: None,
        paused: false,
    }
}

async fn figures(label: &str, store: Arc<dyn Store>) {
    let board = BoardSlug::default_board();
    // All due at the same second, far enough ahead to make them all first.
    let due = Timestamp(Timestamp::now().0 + 60_000);
    let made = Instant::now();
    let mut makers = tokio::task::JoinSet::new();
    for part in 0..4 {
        let store = Arc::clone(&store);
        let board = board.clone();
        makers.spawn(async move {
            for i in (part..JOBS).step_by(4) {
                store.create_job(&board, &one_time(i, due)).await.unwrap();
            }
        });
    }
    while makers.join_next().await.is_some() {}
    let made = made.elapsed();
    // Idle: sweeps while every job waits.
    let mut idle = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let report = sweep(store.as_ref(), &board).await;
        assert!(report.fired.is_empty() && report.error.is_none());
        idle.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    idle.sort();
    let median = idle[idle.len() / 2];
    // Sweep on (as running dispatchers do) until the jobs fall due; then three sweepers at once
    // fire them, as three dispatchers would.
    while Timestamp::now().0 < due.0 {
        let report = sweep(store.as_ref(), &board).await;
        assert!(report.fired.is_empty() && report.error.is_none());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let start = Instant::now();
    let mut sweepers = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let store = Arc::clone(&store);
        let board = board.clone();
        sweepers.spawn(async move {
            let mut n = 0;
            loop {
                let r = sweep(store.as_ref(), &board).await;
                n += r.fired.len();
                if r.fired.is_empty() && r.error.is_none() {
                    return n;
                }
            }
        });
    }
    let mut fired = 0;
    while let Some(n) = sweepers.join_next().await {
        fired += n.unwrap();
    }
    let took = start.elapsed();
    let tasks = store
        .list_tasks(&board, &TaskFilter::default())
        .await
        .unwrap()
        .len();
    assert_eq!(
        (fired, tasks),
        (JOBS, JOBS),
        "each job fired once, one task each"
    );
    eprintln!(
        "{label}: made {JOBS} jobs in {made:.2?}; idle sweep with {JOBS} future jobs: median {median:.2?} \
         (max {:.2?}) → {:.2}% of one core at one sweep a second; fired all {JOBS} in {took:.2?} \
         ({:.0} jobs/s, one task each)",
        idle[idle.len() - 1],
        median.as_secs_f64() * 100.0,
        JOBS as f64 / took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "figures for docs/benchmarks.md; takes two minutes"]
async fn schedule_figures_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    figures("SQLite", store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "figures for docs/benchmarks.md; takes two minutes"]
async fn schedule_figures_postgres() {
    let Some(url) = test_cluster::cluster_url("schedule figures") else {
        return;
    };
    let db = test_cluster::fresh_database(&url, "troupe_schedule_figures").await;
    let store = Arc::new(PostgresStore::connect(&db.url).await.unwrap());
    figures("PostgreSQL", store).await;
}
