//! troupe's side of the side-by-side bench (`examples/peers/run.sh`): the same workloads the
//! Python peers run, through troupe's programmatic API, against the same mock model server over
//! real HTTP. Prints one JSON line per workload.
//!
//! ```sh
//! cargo run --release -p troupe-examples --example peer_workloads -- http://127.0.0.1:PORT/v1
//! ```
//!
//! Workloads (names shared with `examples/peers/peers.py`):
//! - `fan_out`: one turn in which the model asks for eight calls of a 200 ms async tool that
//!   declares nothing; wall time of the turn.
//! - `long_conversation`: 200 turns in one session; time per turn.
//! - `many_conversations`: 200 sessions of one turn each, one after another; time per turn.
//! - `concurrent`: 100 sessions of one turn each, all at once; wall time.
//! - `memory` (troupe only, not part of the default set): resident memory before the troupe
//!   starts, after its first session's first turn, and after 10,000 more sessions sit idle.

#![allow(clippy::print_stdout, reason = "a bench program prints its figures")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe::actors::model::{ModelProvider, OpenAiConfig, OpenAiProvider};
use troupe::actors::session::TurnStatus;
use troupe::tool_fn::tool_fn;
use troupe::tools::Registry;
use troupe::{SessionOptions, Troupe, TroupeConfig};

/// The arguments of `slow_lookup`.
#[derive(serde::Deserialize, troupe::schemars::JsonSchema)]
#[schemars(crate = "troupe::schemars")]
struct Lookup {
    /// Which item to look up.
    #[allow(dead_code, reason = "read through serde")]
    n: u32,
}

/// The workloads' sizes, as the issue that set them wrote them.
const FAN_OUT_CALLS: usize = 8;
const TOOL_TIME: Duration = Duration::from_millis(200);
const LONG_TURNS: usize = 200;
const MANY_SESSIONS: usize = 200;
const CONCURRENT_SESSIONS: usize = 100;
const IDLE_SESSIONS: usize = 10_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let base_url = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: peer_workloads BASE_URL [WORKLOAD...]"))?;
    let chosen: Vec<String> = args.collect();
    let wants = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    let before_start = resident_kib();

    let mut config = OpenAiConfig::new(base_url, "mock");
    config.api_key = Some("bench".into());
    config.stream = false;
    config.max_retries = 0;
    let provider: Arc<dyn ModelProvider> = Arc::new(OpenAiProvider::new(config)?);
    let registry = Registry::with_tools([tool_fn(
        "slow_lookup",
        "Look up one item; takes a while.",
        |_: Lookup| async {
            tokio::time::sleep(TOOL_TIME).await;
            "found".to_string()
        },
    )]);
    let troupe = Troupe::start(TroupeConfig::new(registry).with_default_provider(provider))?;
    let options = SessionOptions::configured;

    if chosen.iter().any(|c| c == "memory") {
        return memory(&troupe, before_start).await;
    }

    if wants("fan_out") {
        let session = troupe.open_session(options()).await?;
        let start = Instant::now();
        let outcome = session.send("fan out: look up eight items").await?;
        let wall = start.elapsed();
        anyhow::ensure!(
            outcome.calls.len() == FAN_OUT_CALLS,
            "the model asked for {} calls, not {FAN_OUT_CALLS}",
            outcome.calls.len()
        );
        report("fan_out", wall, 1);
        troupe.close_session(session.id()).await?;
    }

    if wants("long_conversation") {
        let session = troupe.open_session(options()).await?;
        let start = Instant::now();
        for turn in 0..LONG_TURNS {
            let outcome = session.send(&format!("turn {turn}")).await?;
            anyhow::ensure!(
                outcome.status == TurnStatus::Completed,
                "turn {turn} failed"
            );
        }
        report("long_conversation", start.elapsed(), LONG_TURNS);
        troupe.close_session(session.id()).await?;
    }

    if wants("many_conversations") {
        let start = Instant::now();
        for turn in 0..MANY_SESSIONS {
            let session = troupe.open_session(options()).await?;
            let outcome = session.send(&format!("conversation {turn}")).await?;
            anyhow::ensure!(
                outcome.status == TurnStatus::Completed,
                "turn {turn} failed"
            );
            troupe.close_session(session.id()).await?;
        }
        report("many_conversations", start.elapsed(), MANY_SESSIONS);
    }

    if wants("concurrent") {
        let start = Instant::now();
        let mut running = Vec::with_capacity(CONCURRENT_SESSIONS);
        for n in 0..CONCURRENT_SESSIONS {
            let troupe = troupe.clone();
            running.push(tokio::spawn(async move {
                let session = troupe.open_session(SessionOptions::configured()).await?;
                let outcome = session.send(&format!("session {n}")).await?;
                troupe.close_session(session.id()).await?;
                anyhow::Ok(outcome.status)
            }));
        }
        for task in running {
            let status = task.await??;
            anyhow::ensure!(status == TurnStatus::Completed, "a session's turn failed");
        }
        report("concurrent", start.elapsed(), 1);
    }

    troupe.close().await;
    Ok(())
}

/// The `memory` workload: one session's first turn, then idle sessions.
async fn memory(troupe: &Troupe, before_start: u64) -> anyhow::Result<()> {
    let first = troupe.open_session(SessionOptions::configured()).await?;
    first.send("hello").await?;
    let one_session = resident_kib();
    let mut idle = Vec::with_capacity(IDLE_SESSIONS);
    for _ in 0..IDLE_SESSIONS {
        idle.push(troupe.open_session(SessionOptions::configured()).await?);
    }
    let with_idle = resident_kib();
    println!(
        "{}",
        json!({
            "framework": "troupe",
            "workload": "memory",
            "before_start_mib": before_start as f64 / 1024.0,
            "one_session_mib": one_session as f64 / 1024.0,
            "idle_sessions": IDLE_SESSIONS,
            "idle_sessions_more_mib": with_idle.saturating_sub(one_session) as f64 / 1024.0,
            "per_idle_session_kib": with_idle.saturating_sub(one_session) as f64 / IDLE_SESSIONS as f64,
        })
    );
    drop(idle);
    troupe.close().await;
    Ok(())
}

/// This process's resident memory in KiB (`VmRSS`), or 0 where `/proc` has none.
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// One JSON line: the workload, its wall time and the time per unit.
fn report(workload: &str, wall: Duration, units: usize) {
    let per = wall.as_secs_f64() / units.max(1) as f64;
    println!(
        "{}",
        json!({
            "framework": "troupe",
            "workload": workload,
            "wall_s": wall.as_secs_f64(),
            "per_unit_ms": per * 1000.0,
        })
    );
}
