//! Event-feed latency, from commit to client: how long after a task write commits its event
//! arrives at a WebSocket client of `troupe serve`'s feed. Real server on 127.0.0.1:0, real
//! WebSocket client, real store.
//!
//! Run with `cargo bench -p troupe --bench feed`. It measures the SQLite store (polled every
//! 5 ms and every 50 ms, the default) and, when `TROUPE_TEST_POSTGRES_URL` names a cluster
//! (see scripts/start-test-postgres.sh), PostgreSQL woken by LISTEN/NOTIFY, in a fresh database.

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    reason = "a bench program prints its figures and stops on any setup failure"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use troupe::http::{FeedWake, HttpState};
use troupe::tools::Registry;
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::store::{PostgresStore, test_cluster};
use troupe_kanban::{BoardSlug, NewTask, SqliteStore, Store};

const TOKEN: &str = "bench-token-0123456789abcdef";
/// Writes measured per configuration (after a few warm-up ones).
const SAMPLES: usize = 300;
const WARM_UP: usize = 10;

struct Figures {
    label: String,
    commit_to_client: Vec<Duration>,
    call_to_client: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn measure(label: &str, store: Arc<dyn Store>, wake: FeedWake) -> Figures {
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let state = HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
        .await
        .unwrap()
        .with_wake(wake);
    let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut request = format!("ws://{}/api/plugins/kanban/events", server.local_addr())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    // The reader stamps each event the moment it arrives, independent of the writer.
    let (arrived_tx, mut arrived) = tokio::sync::mpsc::unbounded_channel::<(i64, Instant)>();
    let reader = tokio::spawn(async move {
        let mut socket = socket;
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Text(text) = message {
                let now = Instant::now();
                let event: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
                if arrived_tx
                    .send((event["id"].as_i64().unwrap(), now))
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    let board = BoardSlug::default_board();
    let mut figures = Figures {
        label: label.to_string(),
        commit_to_client: Vec::with_capacity(SAMPLES),
        call_to_client: Vec::with_capacity(SAMPLES),
    };
    for n in 0..(SAMPLES + WARM_UP) {
        let called = Instant::now();
        let created = store
            .create_task(&board, &NewTask::new(format!("task {n}")))
            .await
            .unwrap();
        let committed = Instant::now();
        let last_id = store.stats(&board).await.unwrap().last_event_id.0;
        let _ = created;
        // Wait for every event of this write (a create may write more than one).
        let mut arrival = committed;
        loop {
            let (id, at) = arrived.recv().await.unwrap();
            arrival = arrival.max(at);
            if id >= last_id {
                break;
            }
        }
        if n >= WARM_UP {
            figures
                .commit_to_client
                .push(arrival.saturating_duration_since(committed));
            figures
                .call_to_client
                .push(arrival.saturating_duration_since(called));
        }
        // Space the writes out by 0 to 50 ms, spread evenly, so a polled feed is caught at
        // every phase of its interval rather than always just after a look.
        tokio::time::sleep(Duration::from_micros(((n * 7919) % 50_000) as u64)).await;
    }
    reader.abort();
    server.shutdown().await.unwrap();
    troupe.close().await;
    figures
}

async fn postgres_store(url: &str) -> Arc<PostgresStore> {
    let db = test_cluster::fresh_database(url, "troupe_feed").await;
    Arc::new(PostgresStore::connect(&db.url).await.unwrap())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut all = Vec::new();
        for poll_ms in [5u64, 50] {
            let dir = tempfile::tempdir().unwrap();
            let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
            all.push(
                measure(
                    &format!("SQLite, polled every {poll_ms} ms"),
                    store,
                    FeedWake::Poll(Duration::from_millis(poll_ms)),
                )
                .await,
            );
        }
        match std::env::var("TROUPE_TEST_POSTGRES_URL") {
            Ok(url) if !url.trim().is_empty() => {
                let pg = postgres_store(url.trim()).await;
                let store: Arc<dyn Store> = pg.clone();
                all.push(measure("PostgreSQL, LISTEN/NOTIFY", store, FeedWake::Postgres(pg)).await);
            }
            _ => println!(
                "(PostgreSQL skipped: set TROUPE_TEST_POSTGRES_URL, see scripts/start-test-postgres.sh)"
            ),
        }
        println!("event-feed latency, {SAMPLES} writes each (median / p95 / max)");
        println!("| store and wake | commit to client | write call to client |");
        println!("| --- | --- | --- |");
        for mut f in all {
            f.commit_to_client.sort();
            f.call_to_client.sort();
            println!(
                "| {} | {} / {} / {} | {} / {} / {} |",
                f.label,
                ms(percentile(&f.commit_to_client, 0.5)),
                ms(percentile(&f.commit_to_client, 0.95)),
                ms(*f.commit_to_client.last().unwrap()),
                ms(percentile(&f.call_to_client, 0.5)),
                ms(percentile(&f.call_to_client, 0.95)),
                ms(*f.call_to_client.last().unwrap()),
            );
        }
    });
}
