//! The shared store suite run against [`PostgresStore`], plus what only a real server shows:
//! separate pools racing for 300 claims, the event cursor never skipping a row committed late,
//! LISTEN/NOTIFY wake-ups, recovery from killed connections, and concurrent migrations.
//!
//! Needs a throwaway cluster: `scripts/start-test-postgres.sh` writes its URL to
//! `target/test-postgres.env`; export `TROUPE_TEST_POSTGRES_URL` from it. Without it every test
//! here prints a loud skip, unless `TROUPE_REQUIRE_POSTGRES=1`, which turns the skip into a
//! failure. Each test works in a fresh database of its own on that cluster.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failed step must fail the test"
)]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_kanban::domain::{BoardSlug, EventId, NewTask, TaskStatus, WorkerId};
use troupe_kanban::store::suite::{SuiteBackend, assert_consistent};
use troupe_kanban::store::test_cluster;
use troupe_kanban::store::{
    ClaimSpec, PostgresOptions, PostgresStore, Store, StoreError, StoreFuture,
};

/// Whether a test cluster is configured; a loud skip (or a failure when required) if not.
fn postgres_configured() -> bool {
    test_cluster::cluster_url("PostgreSQL store test").is_some()
}

/// The cluster's admin connection settings.
fn admin_config() -> tokio_postgres::Config {
    std::env::var(test_cluster::URL_VAR)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A database of its own on the test cluster; every `open` is a new store with its own pool.
struct PgBackend {
    config: tokio_postgres::Config,
    dbname: String,
}

impl PgBackend {
    fn options(&self) -> PostgresOptions {
        PostgresOptions {
            max_connections: 8,
            ..PostgresOptions::default()
        }
    }

    async fn store(&self) -> PostgresStore {
        PostgresStore::connect_with(self.config.clone(), self.options())
            .await
            .unwrap()
    }

    async fn client(&self) -> tokio_postgres::Client {
        test_cluster::connect(&self.config).await
    }
}

impl SuiteBackend for PgBackend {
    fn open(&self) -> StoreFuture<'_, Arc<dyn Store>> {
        Box::pin(async move {
            let store = PostgresStore::connect_with(self.config.clone(), self.options()).await?;
            let store: Arc<dyn Store> = Arc::new(store);
            Ok(store)
        })
    }
}

async fn fresh() -> PgBackend {
    let url = std::env::var(test_cluster::URL_VAR).unwrap();
    let db = test_cluster::fresh_database(&url, "troupe_test").await;
    PgBackend {
        config: db.config,
        dbname: db.name,
    }
}

troupe_kanban::store_suite!(fresh, run_if = postgres_configured);

fn board() -> BoardSlug {
    BoardSlug::default_board()
}

fn long_ttl(worker: WorkerId) -> ClaimSpec {
    ClaimSpec::new(worker).with_ttl(Duration::from_secs(3600))
}

/// Several stores, each with its own pool (as on separate hosts), claim the same 300 ready tasks
/// at once: each task is claimed exactly once, as the events table shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_pools_claim_each_of_300_tasks_once() {
    if !postgres_configured() {
        return;
    }
    let b = fresh().await;
    let seed = b.store().await;
    let mut ids = HashSet::new();
    for i in 0..300 {
        let t = seed
            .create_task(&board(), &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
        ids.insert(t.task.id.to_string());
    }
    let mut set = tokio::task::JoinSet::new();
    for host in 0..4 {
        let store = Arc::new(b.store().await);
        for n in 0..3 {
            let store = Arc::clone(&store);
            set.spawn(async move {
                let worker = WorkerId::new(format!("host-{host}"), 1000 + n, uuid::Uuid::new_v4());
                let spec = long_ttl(worker);
                let mut mine = Vec::new();
                loop {
                    match store.claim_next(&board(), &spec).await {
                        Ok(Some(c)) => mine.push(c.task.id.to_string()),
                        Ok(None) => return mine,
                        Err(e) if e.is_transient() => tokio::task::yield_now().await,
                        Err(e) => panic!("claim failed: {e}"),
                    }
                }
            });
        }
    }
    let mut claimed = Vec::new();
    while let Some(mine) = set.join_next().await {
        claimed.extend(mine.unwrap());
    }
    assert_eq!(
        claimed.len(),
        300,
        "every task claimed by exactly one claimer"
    );
    assert_eq!(claimed.iter().cloned().collect::<HashSet<_>>(), ids);

    // The events table agrees: one `claimed` event per task, and no gap in the ids.
    let client = b.client().await;
    let rows = client
        .query(
            "SELECT task_id, COUNT(*) FROM kanban_task_events \
             WHERE board = 'default' AND kind = 'claimed' GROUP BY task_id",
            &[],
        )
        .await
        .unwrap();
    let per_task: BTreeMap<String, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(per_task.len(), 300);
    assert!(per_task.values().all(|n| *n == 1), "{per_task:?}");
    let row = client
        .query_one(
            "SELECT COUNT(*), MIN(id), MAX(id) FROM kanban_task_events WHERE board = 'default'",
            &[],
        )
        .await
        .unwrap();
    let (count, min, max): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((min, max), (1, count), "event ids run 1..=n without gaps");
    assert_eq!(
        seed.stats(&board())
            .await
            .unwrap()
            .count(TaskStatus::Running),
        300
    );
    assert_consistent(&seed, &board()).await;
}

/// A reader tailing `events_since` while several stores write at once never sees a gap: an id
/// is handed out only when its transaction is about to commit, in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_event_cursor_never_skips_a_late_commit() {
    if !postgres_configured() {
        return;
    }
    let b = fresh().await;
    let reader = b.store().await;
    let start = reader.stats(&board()).await.unwrap().last_event_id;
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let store = Arc::new(b.store().await);
        writers.spawn(async move {
            for i in 0..60 {
                let t = store
                    .create_task(&board(), &NewTask::new(format!("w{w} t{i}")))
                    .await
                    .unwrap();
                store
                    .add_comment(&board(), &t.task.id, "writer", "hello")
                    .await
                    .unwrap();
            }
        });
    }
    let total = 4 * 60 * 2;
    let mut cursor = start;
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while seen < total {
        assert!(
            Instant::now() < deadline,
            "writers stalled after {seen} events"
        );
        let batch = reader.events_since(&board(), cursor, 50).await.unwrap();
        for e in batch {
            assert_eq!(e.id, EventId(cursor.0 + 1), "the cursor skipped an event");
            cursor = e.id;
            seen += 1;
        }
        tokio::task::yield_now().await;
    }
    while let Some(r) = writers.join_next().await {
        r.unwrap();
    }
    assert!(
        reader
            .events_since(&board(), cursor, 50)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A subscriber hears about a change committed through another store, with its event id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listeners_wake_on_commits_from_other_stores() {
    if !postgres_configured() {
        return;
    }
    let b = fresh().await;
    let listener = b.store().await;
    let mut changes = listener.subscribe(&board());
    let writer = b.store().await;
    // LISTEN may not be in place yet: keep writing until a notice names one of our events.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no notice arrived");
        writer
            .create_task(&board(), &NewTask::new("wake up"))
            .await
            .unwrap();
        let last = writer.stats(&board()).await.unwrap().last_event_id;
        let got = tokio::time::timeout(Duration::from_secs(2), changes.recv()).await;
        if let Ok(Some(notice)) = got {
            assert_eq!(notice.board, board());
            let id = notice.last_event_id.unwrap();
            assert!(id.0 >= 1 && id <= last, "{id:?} vs {last:?}");
            break;
        }
    }
    // Another board's changes do not reach this board's subscriber.
    let other = BoardSlug::parse("other").unwrap();
    writer
        .create_board(&troupe_kanban::domain::NewBoard::new(other.clone()))
        .await
        .unwrap();
    while changes.try_recv().is_some() {}
    writer
        .create_task(&other, &NewTask::new("elsewhere"))
        .await
        .unwrap();
    writer
        .create_task(&board(), &NewTask::new("here"))
        .await
        .unwrap();
    let notice = tokio::time::timeout(Duration::from_secs(60), changes.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(notice.board, board());
}

/// Every subscription to a board from one store and its clones shares one listening
/// connection; each subscriber gets every notice; the connection goes once the last is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subscribers_of_a_board_share_one_listening_connection() {
    if !postgres_configured() {
        return;
    }
    let b = fresh().await;
    let store = b.store().await;
    let clone = store.clone();
    let mut first = store.subscribe(&board());
    let mut second = clone.subscribe(&board());
    let mut third = store.subscribe(&board());
    let admin = test_cluster::connect(&admin_config()).await;
    let listening = || async {
        let row = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
                 AND query LIKE 'LISTEN %'",
                &[&b.dbname],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    // LISTEN may not be in place yet: keep writing until every subscriber has a notice.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut heard = [false; 3];
    while heard.iter().any(|h| !h) {
        assert!(Instant::now() < deadline, "not every subscriber was woken");
        store
            .create_task(&board(), &NewTask::new("wake up"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for (h, changes) in heard.iter_mut().zip([&mut first, &mut second, &mut third]) {
            while changes.try_recv().is_some() {
                *h = true;
            }
        }
    }
    assert_eq!(
        listening().await,
        1,
        "one listening connection for the board"
    );
    drop((first, second, third));
    let deadline = Instant::now() + Duration::from_secs(60);
    while listening().await != 0 {
        assert!(
            Instant::now() < deadline,
            "the listening connection outlived its subscribers"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A new subscriber after that gets a listener of its own again.
    let mut again = store.subscribe(&board());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "the new subscriber was never woken"
        );
        store
            .create_task(&board(), &NewTask::new("again"))
            .await
            .unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(1), again.recv()).await {
            break;
        }
    }
}

/// Killing every connection of the database: calls fail only with transient errors, the pool
/// reconnects, and the listener comes back with a "re-read the board" notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_connections_give_transient_errors_and_reconnect() {
    if !postgres_configured() {
        return;
    }
    let b = fresh().await;
    let store = b.store().await;
    let mut changes = store.subscribe(&board());
    let id = store
        .create_task(&board(), &NewTask::new("survives"))
        .await
        .unwrap()
        .task
        .id;
    // Wait until the listener is connected, so killing it is a real reconnect.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "listener never connected");
        store
            .add_comment(&board(), &id, "me", "ping")
            .await
            .unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(1), changes.recv()).await {
            break;
        }
    }
    let admin = test_cluster::connect(&admin_config()).await;
    let killed = admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&b.dbname],
        )
        .await
        .unwrap();
    assert!(killed >= 2, "pool and listener connections were killed");
    let mut transient = 0;
    let task = loop {
        match store.task(&board(), &id).await {
            Ok(t) => break t,
            Err(e) => {
                assert!(e.is_transient(), "not transient: {e}");
                assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
                transient += 1;
                assert!(transient < 50, "the pool never reconnected: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(task.id, id);
    let notice = loop {
        let n = tokio::time::timeout(Duration::from_secs(60), changes.recv())
            .await
            .unwrap()
            .unwrap();
        if n.last_event_id.is_none() {
            break n;
        }
    };
    assert_eq!(notice.board, board());
}

/// Two processes connecting to an empty database at once both end up on the current schema,
/// with one `default` board.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_connections_migrate_once() {
    if !postgres_configured() {
        return;
    }
    let b = fresh().await;
    let (one, two) = tokio::join!(
        PostgresStore::connect_with(b.config.clone(), b.options()),
        PostgresStore::connect_with(b.config.clone(), b.options()),
    );
    let (one, _two) = (one.unwrap(), two.unwrap());
    let boards = one.list_boards(true).await.unwrap();
    assert_eq!(boards.len(), 1);
    let client = b.client().await;
    let row = client
        .query_one(
            "SELECT COUNT(*), MAX(version) FROM kanban_schema_version",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1, 4));
    // Connecting again changes nothing.
    let again = b.store().await;
    assert_eq!(again.list_boards(true).await.unwrap().len(), 1);
}

/// A URL that does not parse gets an error naming the expected shape.
#[tokio::test]
async fn a_malformed_url_is_explained() {
    let err = PostgresStore::connect("postgres://host:notaport/db")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("postgres://"), "{err}");
    assert!(!err.is_transient(), "a bad URL will not fix itself: {err}");
}

/// Claims per second with 1, 2 and 4 claimers, each with its own pool. Run with
/// `cargo test -p troupe-kanban --release --test postgres_store -- --ignored claim_throughput --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, not a check; run by hand"]
async fn claim_throughput() {
    if !postgres_configured() {
        return;
    }
    for claimers in [1usize, 2, 4] {
        let b = fresh().await;
        let seed = b.store().await;
        let n = 2000;
        for i in 0..n {
            seed.create_task(&board(), &NewTask::new(format!("job {i}")))
                .await
                .unwrap();
        }
        let mut stores = Vec::new();
        for _ in 0..claimers {
            stores.push(Arc::new(b.store().await));
        }
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for (k, store) in stores.into_iter().enumerate() {
            set.spawn(async move {
                let spec = long_ttl(WorkerId::new("bench", 1, uuid::Uuid::new_v4()));
                let mut got = 0usize;
                loop {
                    match store.claim_next(&board(), &spec).await {
                        Ok(Some(_)) => got += 1,
                        Ok(None) => return got,
                        Err(e) if e.is_transient() => continue,
                        Err(e) => panic!("claimer {k}: {e}"),
                    }
                }
            });
        }
        let mut total = 0;
        while let Some(r) = set.join_next().await {
            total += r.unwrap();
        }
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(total, n);
        eprintln!(
            "postgres: {claimers} claimer(s): {n} claims in {secs:.2}s = {:.0} claims/s",
            n as f64 / secs
        );
    }
}
