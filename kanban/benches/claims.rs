//! Claims per second on one board with 1, 2 and 4 concurrent claimers, on SQLite and, when a
//! test cluster is there, on PostgreSQL.
//!
//! Run with `cargo bench -p troupe-kanban --bench claims`; for PostgreSQL start a cluster with
//! `scripts/start-test-postgres.sh` and export `TROUPE_TEST_POSTGRES_URL` first (without it
//! those cases are skipped). Each iteration seeds a fresh board with ready tasks (not timed),
//! then times the claimers draining it. `separate_handles`: each claimer has its own handle
//! (its own file lock on SQLite, its own pool on PostgreSQL), as separate dispatchers would;
//! `shared_handle`: the claimers share one handle, as one dispatcher's workers do; `batch_8`:
//! separate handles taking up to 8 tasks per call with `claim_many`, as a dispatcher with 8
//! free slots does (`batch_32` on PostgreSQL: 32 free slots, a host running 32 workers). Criterion reports the figure as elements (claims) per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use troupe_kanban::domain::{BoardSlug, NewBoard, NewTask, WorkerId};
use troupe_kanban::store::{ClaimSpec, PostgresStore, SqliteStore, Store, test_cluster};

const TASKS: usize = 400;

/// Claims every ready task of `board` with `claimers` concurrent claimers, `batch` at a time
/// (`claim_next` when 1); returns how long that took.
async fn drain_with(handles: Vec<Arc<dyn Store>>, board: &BoardSlug, batch: usize) -> Duration {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for store in handles {
        let board = board.clone();
        set.spawn(async move {
            loop {
                let got = if batch == 1 {
                    let spec = ClaimSpec::new(WorkerId::local());
                    store
                        .claim_next(&board, &spec)
                        .await
                        .map(|c| usize::from(c.is_some()))
                } else {
                    let specs: Vec<ClaimSpec> = (0..batch)
                        .map(|_| ClaimSpec::new(WorkerId::local()))
                        .collect();
                    store.claim_many(&board, &specs).await.map(|c| c.len())
                };
                match got {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("claim failed: {e}"),
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    start.elapsed()
}

/// The PostgreSQL cases, on a database of their own on the test cluster.
fn postgres_claims(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let Some(url) = test_cluster::cluster_url("PostgreSQL claim benchmarks") else {
        return;
    };
    let db = rt.block_on(test_cluster::fresh_database(&url, "bench_claims"));
    let seed: Arc<dyn Store> = Arc::new(
        rt.block_on(PostgresStore::connect(&db.url))
            .expect("connect"),
    );
    let mut group = c.benchmark_group("postgres_claims");
    group.sample_size(10);
    group.throughput(Throughput::Elements(TASKS as u64));
    let mut boards = 0usize;
    let cases = [
        ("separate_handles", 1usize, 1usize),
        ("separate_handles", 2, 1),
        ("separate_handles", 4, 1),
        ("batch_8", 4, 8),
        ("batch_32", 4, 32),
    ];
    for (name, claimers, batch) in cases {
        let handles: Vec<Arc<dyn Store>> = (0..claimers)
            .map(|_| {
                let store = rt
                    .block_on(PostgresStore::connect(&db.url))
                    .expect("connect");
                Arc::new(store) as Arc<dyn Store>
            })
            .collect();
        group.bench_with_input(BenchmarkId::new(name, claimers), &claimers, |b, _| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    boards += 1;
                    let board = BoardSlug::parse(&format!("bench-{boards}")).expect("slug");
                    rt.block_on(async {
                        seed.create_board(&NewBoard::new(board.clone()))
                            .await
                            .expect("board");
                        for i in 0..TASKS {
                            seed.create_task(&board, &NewTask::new(format!("job {i}")))
                                .await
                                .expect("seed task");
                        }
                        total += drain_with(handles.clone(), &board, batch).await;
                    });
                }
                total
            });
        });
    }
    group.finish();
}

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
    group.bench_function(BenchmarkId::new("batch_8", 4), |b| {
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
                    let mut handles: Vec<Arc<dyn Store>> = Vec::new();
                    for _ in 0..4 {
                        let store = SqliteStore::open(dir.path()).await.expect("open store");
                        handles.push(Arc::new(store));
                    }
                    total += drain_with(handles, &board, 8).await;
                });
            }
            total
        });
    });
    group.finish();
    postgres_claims(c, &rt);
}

criterion_group!(benches, claims);
criterion_main!(benches);
