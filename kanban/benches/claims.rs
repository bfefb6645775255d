//! Claims per second on one SQLite board with 1, 2 and 4 concurrent claimers.
//!
//! Run with `cargo bench -p troupe-kanban --bench claims`. Each iteration seeds a fresh board
//! with ready tasks (not timed), then times the claimers draining it. `separate_handles`: each
//! claimer has its own handle and contends through SQLite's file lock, as separate dispatchers
//! would; `shared_handle`: the claimers share one handle, as one dispatcher's workers do.
//! Criterion reports the figure as elements (claims) per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use troupe_kanban::domain::{BoardSlug, NewTask, WorkerId};
use troupe_kanban::store::{ClaimSpec, SqliteStore, Store};

const TASKS: usize = 400;

async fn drain(root: &std::path::Path, claimers: usize, shared: bool) -> Duration {
    let board = BoardSlug::default_board();
    let mut handles = Vec::new();
    let one = Arc::new(SqliteStore::open(root).await.expect("open store"));
    for _ in 0..claimers {
        if shared {
            handles.push(Arc::clone(&one));
        } else {
            handles.push(Arc::new(SqliteStore::open(root).await.expect("open store")));
        }
    }
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for store in handles {
        let board = board.clone();
        set.spawn(async move {
            let spec = ClaimSpec::new(WorkerId::local());
            loop {
                match store.claim_next(&board, &spec).await {
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("claim failed: {e}"),
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    start.elapsed()
}

fn claims(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut group = c.benchmark_group("sqlite_claims");
    group.sample_size(10);
    group.throughput(Throughput::Elements(TASKS as u64));
    let cases = [
        (1usize, false),
        (2, false),
        (4, false),
        (2, true),
        (4, true),
    ];
    for (claimers, shared) in cases {
        let name = if shared {
            "shared_handle"
        } else {
            "separate_handles"
        };
        group.bench_with_input(
            BenchmarkId::new(name, claimers),
            &claimers,
            |b, &claimers| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let dir = tempfile::tempdir().expect("temp dir");
                        rt.block_on(async {
                            let seed = SqliteStore::open(dir.path()).await.expect("open store");
                            let board = BoardSlug::default_board();
                            for i in 0..TASKS {
                                seed.create_task(&board, &NewTask::new(format!("job {i}")))
                                    .await
                                    .expect("seed task");
                            }
                            total += drain(dir.path(), claimers, shared).await;
                        });
                    }
                    total
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, claims);
criterion_main!(benches);
