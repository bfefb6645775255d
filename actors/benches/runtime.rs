//! Figures for the actor runtime, as a plain bench program (`harness = false`):
//! 1. the overhead of one no-op tool call through planner, supervisor, hooks and runner, and
//!    what planning a two-call batch costs in place and through the planner pool;
//! 2. tool calls per second through one session on a scripted model;
//! 3. 1,000 concurrent sessions on a scripted model: time to finish, memory per idle session.
//!
//! Run with `cargo bench -p troupe-actors --bench runtime`.

#![allow(clippy::print_stdout, reason = "a bench program prints its figures")]
#![allow(clippy::unwrap_used, reason = "a bench program fails loudly")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use futures::future::join_all;
use serde_json::{Map, json};
use tokio_util::sync::CancellationToken;
use troupe_actors::batch_planner::{BatchPlanner, Planners, claims_of};
use troupe_actors::call::{CallEntry, CallStatus, CallTarget};
use troupe_actors::events::EventSink;
use troupe_actors::hooks::{Hook, HookRegistry, ToolCallInfo};
use troupe_actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe_actors::session::{SessionConfig, SessionHandle, SessionParams};
use troupe_actors::supervisor::{ApprovalConfig, DefaultRules, Supervisor};
use troupe_actors::tool_runner::{BatchContext, RunnerLimits, ToolRunner};
use troupe_tools::{Registry, ToolDef, ToolHints, ToolResult};

/// A hook that looks at every call, so the figure includes the hook path.
struct Observe;

impl Hook for Observe {
    fn name(&self) -> &str {
        "observe"
    }
    fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, _result: &ToolResult) {
        std::hint::black_box((call.call_id, status));
    }
}

fn registry() -> Arc<Registry> {
    Registry::with_tools([
        ToolDef::new("noop", "Does nothing.", json!({"type": "object"}))
            .with_toolset("core")
            .with_hints(ToolHints {
                read_only: true,
                ..ToolHints::default()
            })
            .with_fn(|_, _| Box::pin(async { ToolResult::text("ok") })),
    ])
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

async fn one_call_overhead(iterations: usize) {
    let supervisor =
        Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
    let view = registry().view_all();
    let ctx = BatchContext {
        agent_path: Vec::new(),
        session_id: "bench".into(),
        turn_id: "turn".into(),
        view: view.clone(),
        search: troupe_tools::ToolSearchConfig::default(),
        hooks: HookRegistry::new().with(Arc::new(Observe)),
        supervisor,
        events: EventSink::new(),
        token: CancellationToken::new(),
        drain: tokio_util::sync::CancellationToken::new(),
        trace: Default::default(),
        journal: None,
    };
    let planner = Planners::of_system(std::env::temp_dir()).await;
    let runner = ToolRunner::new(RunnerLimits::default());
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + 1000 {
        let started = Instant::now();
        let entries = vec![CallEntry {
            index: 0,
            call_id: format!("c{i}"),
            model_call_id: format!("m{i}"),
            tool: "noop".into(),
            target: CallTarget::Tool {
                name: "noop".into(),
                arguments: Map::new(),
            },
        }];
        let plan = planner.plan(&entries, &view).await;
        let outcomes = runner.run_batch(&ctx, entries, &plan).await;
        let elapsed = started.elapsed();
        assert_eq!(outcomes[0].status, CallStatus::Ok);
        if i >= 1000 {
            samples.push(elapsed);
        }
    }
    samples.sort();
    println!(
        "one no-op call through planner + supervisor + hooks + runner: median {:.1} µs, p90 {:.1} µs, p99 {:.1} µs ({iterations} calls)",
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.9).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
    );
}

/// Planning two `read_file` calls: in place, as sessions did before the pool, and through the
/// planner pool, as they do now.
async fn two_call_plan(iterations: usize) {
    // The planner judges `read_file` by the hints the built-in declares.
    let view = Registry::with_tools([ToolDef::new(
        "read_file",
        "Reads a file.",
        json!({"type": "object"}),
    )
    .with_toolset("core")
    .with_hints(troupe_tools::builtin::hints_of("read_file"))])
    .view_all();
    let dir = std::env::temp_dir();
    let entries: Vec<CallEntry> = (0..2)
        .map(|i| CallEntry {
            index: i,
            call_id: format!("c{i}"),
            model_call_id: format!("m{i}"),
            tool: "read_file".into(),
            target: CallTarget::Tool {
                name: "read_file".into(),
                arguments: serde_json::json!({ "path": format!("f{i}.txt") })
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            },
        })
        .collect();
    let inline = BatchPlanner::new(&dir);
    let pool = Planners::of_system(&dir).await;
    let mut in_place = Vec::with_capacity(iterations);
    let mut pooled = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        let a = inline.plan_claims(&claims_of(&entries, &view));
        in_place.push(started.elapsed());
        let started = Instant::now();
        let b = pool.plan(&entries, &view).await;
        pooled.push(started.elapsed());
        assert_eq!(a, b);
        assert!(a.fully_parallel());
    }
    in_place.sort();
    pooled.sort();
    println!(
        "planning two read_file calls: in place median {:.1} µs, through the planner pool median {:.1} µs ({iterations} batches)",
        percentile(&in_place, 0.5).as_secs_f64() * 1e6,
        percentile(&pooled, 0.5).as_secs_f64() * 1e6,
    );
}

fn session_config() -> SessionConfig {
    SessionConfig {
        max_iterations: 10_000,
        ..SessionConfig::default()
    }
}

async fn calls_per_second(rounds: usize, calls_per_round: usize) {
    let supervisor =
        Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
    let mut script = Script::new();
    for round in 0..rounds {
        let mut turn = ScriptTurn::default();
        // Distinct arguments each round: the session's repeat guard holds back a call the
        // model already made with the same arguments.
        for n in 0..calls_per_round {
            turn = turn.with_tool_call("noop", json!({ "round": round, "n": n }));
        }
        script = script.turn(turn);
    }
    script = script.turn(ScriptTurn::text("done"));
    let session = SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(script)),
        view: registry().view_all(),
        config: session_config(),
        hooks: HookRegistry::new(),
        supervisor,
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap();
    let started = Instant::now();
    let outcome = session.send("go").await.unwrap();
    let elapsed = started.elapsed();
    let calls = outcome.calls.len();
    assert_eq!(calls, rounds * calls_per_round);
    println!(
        "one session, {rounds} model rounds of {calls_per_round} parallel no-op calls: {calls} calls in {:.1} ms = {:.0} calls/s (model requests included)",
        elapsed.as_secs_f64() * 1e3,
        calls as f64 / elapsed.as_secs_f64()
    );
}

async fn many_sessions(count: usize) {
    let supervisor =
        Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
    let provider = Arc::new(ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call("noop", json!({})))
            .turn(ScriptTurn::text("done")),
    ));
    let view = registry().view_all();
    let before = rss_bytes();
    let started = Instant::now();
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        let session = SessionHandle::open(SessionParams {
            provider: provider.clone(),
            view: view.clone(),
            config: session_config(),
            hooks: HookRegistry::new(),
            supervisor: supervisor.clone(),
            parent: None,
            upstream_events: None,
        })
        .await
        .unwrap();
        sessions.push(session);
    }
    let opened = started.elapsed();
    let outcomes = join_all(sessions.iter().map(|s| s.send("go"))).await;
    let finished = started.elapsed();
    assert!(
        outcomes
            .iter()
            .all(|o| o.as_ref().is_ok_and(|o| o.calls.len() == 1))
    );
    let after = rss_bytes();
    println!(
        "{count} sessions on a scripted model (one tool round each): opened in {:.1} ms, all finished after {:.1} ms",
        opened.as_secs_f64() * 1e3,
        finished.as_secs_f64() * 1e3
    );
    if let (Some(before), Some(after)) = (before, after) {
        println!(
            "memory: {:.1} MiB more resident with {count} idle sessions = {:.1} KiB per idle session (conversation of 4 messages)",
            (after.saturating_sub(before)) as f64 / 1048576.0,
            (after.saturating_sub(before)) as f64 / 1024.0 / count as f64
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let system = actix_rt::System::with_tokio_rt(move || runtime);
    system.block_on(async {
        one_call_overhead(20_000).await;
        two_call_plan(5_000).await;
        calls_per_second(100, 10).await;
        many_sessions(1000).await;
    });
}
