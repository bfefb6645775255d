//! What misbehaving clients cost `troupe serve` (the hardening figures of docs/benchmarks.md),
//! over real sockets on
//! 127.0.0.1 against the server's own accept loop, with its default limits:
//! - answer time of a client with the token while 2,000 idle connections without one are open;
//! - CPU of the whole process while 1,000 idle WebSocket subscribers follow one board;
//! - size of the default page of `GET /board` on a 10,000-task board.
//!
//! Run with `cargo bench -p troupe --bench serve_limits`.

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    reason = "a bench program prints its figures and stops on any setup failure"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use troupe::http::{FeedWake, HttpState};
use troupe::tools::Registry;
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::{BoardSlug, NewTask, SqliteStore, Store};

const TOKEN: &str = "bench-token-0123456789abcdef";

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 after the name).
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf only reads a constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / per_second
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let board = BoardSlug::default_board();
    let started = Instant::now();
    for i in 0..10_000 {
        let task = NewTask::new(format!("bench task number {i} with an ordinary title"))
            .with_body("a short body, as tasks written by people tend to have")
            .with_priority((i % 5) as i64);
        store.create_task(&board, &task).await.unwrap();
    }
    println!(
        "10,000 tasks created in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let state = HttpState::new(troupe, Arc::clone(&store), TOKEN)
        .await
        .unwrap()
        .with_wake(FeedWake::Poll(troupe::http::DEFAULT_FEED_POLL));
    let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = server.local_addr();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();

    // 1. The default page of a 10,000-task board.
    let body = client
        .get(format!("http://{addr}/api/plugins/kanban/board"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    println!(
        "GET /board, default page of a 10,000-task board: {} bytes ({:.2} MB)",
        body.len(),
        body.len() as f64 / 1e6
    );

    // 2. Answer time with 2,000 idle connections open (no token, nothing sent).
    let answer = |client: reqwest::Client| async move {
        let start = Instant::now();
        let response = client
            .get(format!("http://{addr}/api/plugins/kanban/tasks?limit=1"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
        let _ = response.bytes().await.unwrap();
        start.elapsed()
    };
    let mut quiet = Vec::new();
    for _ in 0..50 {
        quiet.push(answer(client.clone()).await);
    }
    quiet.sort();
    let mut idle = Vec::new();
    for _ in 0..2_000 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut loaded = Vec::new();
    for _ in 0..50 {
        loaded.push(answer(client.clone()).await);
    }
    loaded.sort();
    println!(
        "answer with the token: median {:.2} ms, p95 {:.2} ms, max {:.2} ms with no idle connections; median {:.2} ms, p95 {:.2} ms, max {:.2} ms with 2,000 idle connections open",
        percentile(&quiet, 0.5).as_secs_f64() * 1e3,
        percentile(&quiet, 0.95).as_secs_f64() * 1e3,
        quiet.last().unwrap().as_secs_f64() * 1e3,
        percentile(&loaded, 0.5).as_secs_f64() * 1e3,
        percentile(&loaded, 0.95).as_secs_f64() * 1e3,
        loaded.last().unwrap().as_secs_f64() * 1e3,
    );
    drop(idle);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // 3. CPU of 1,000 idle WebSocket subscribers of one board.
    let mut sockets = Vec::new();
    for _ in 0..1_000 {
        let mut request = format!("ws://{addr}/api/plugins/kanban/events")
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        sockets.push(socket);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let window = Duration::from_secs(10);
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    tokio::time::sleep(window).await;
    let used = cpu_seconds() - cpu0;
    let share = used / t0.elapsed().as_secs_f64() * 100.0;
    println!(
        "1,000 idle WebSocket subscribers on one board (feed poll {} ms): {share:.2} % of one core for the whole process, {} board watcher(s)",
        troupe::http::DEFAULT_FEED_POLL.as_millis(),
        server.watched_boards()
    );
    drop(sockets);
    server.shutdown().await.unwrap();
}
