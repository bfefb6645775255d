//! What tracing costs, as a plain bench program (`harness = false`):
//! 1. one no-op tool call through planner, supervisor, hooks and runner with tracing off, then
//!    with spans exported over OTLP/HTTP to a receiver on localhost (alternating rounds, so the
//!    machine's noise falls on both alike);
//! 2. how many spans a second the exporter delivers when a thread makes them as fast as it can,
//!    and how many it drops (the bounded queue is full) rather than slow the work down.
//!
//! Run with `cargo bench -p troupe --bench traces`.

#![allow(clippy::print_stdout, reason = "a bench program prints its figures")]
#![allow(clippy::unwrap_used, reason = "a bench program fails loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix::Actor;
use axum::body::Bytes;
use axum::extract::State;
use opentelemetry::trace::SpanKind;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::{Map, json};
use tokio_util::sync::CancellationToken;
use troupe::observability::{self, ObservabilitySettings};
use troupe_actors::batch_planner::Planners;
use troupe_actors::call::{CallEntry, CallStatus, CallTarget};
use troupe_actors::events::EventSink;
use troupe_actors::hooks::HookRegistry;
use troupe_actors::supervisor::{ApprovalConfig, DefaultRules, Supervisor};
use troupe_actors::tool_runner::{BatchContext, RunnerLimits, ToolRunner};
use troupe_actors::trace::TraceSpan;
use troupe_tools::{Registry, ToolDef, ToolHints, ToolResult};

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

async fn receive(State(spans): State<Arc<AtomicU64>>, body: Bytes) -> Vec<u8> {
    if let Ok(request) = ExportTraceServiceRequest::decode(body) {
        let n: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        spans.fetch_add(n as u64, Ordering::Relaxed);
    }
    Vec::new()
}

/// Medians of `rounds` rounds of `per_round` no-op calls each: (off, on) in microseconds.
async fn call_overhead(
    ctx: &BatchContext,
    traced: &BatchContext,
    rounds: usize,
    per_round: usize,
) -> (f64, f64) {
    let planner = Planners::of_system(std::env::temp_dir()).await;
    let runner = ToolRunner::new(RunnerLimits::default());
    let mut off = Vec::new();
    let mut on = Vec::new();
    let mut n = 0u64;
    for round in 0..rounds * 2 {
        // Off rounds make no spans at all (as before a provider is installed).
        let (context, samples) = if round % 2 == 0 {
            troupe_actors::trace::disable();
            (ctx, &mut off)
        } else {
            troupe_actors::trace::enable();
            (traced, &mut on)
        };
        for _ in 0..per_round {
            n += 1;
            let entries = vec![CallEntry {
                index: 0,
                call_id: format!("c{n}"),
                model_call_id: format!("m{n}"),
                tool: "noop".into(),
                target: CallTarget::Tool {
                    name: "noop".into(),
                    arguments: Map::new(),
                },
            }];
            let started = Instant::now();
            let plan = planner.plan(&entries, &context.view).await;
            let outcomes = runner.run_batch(context, entries, &plan).await;
            samples.push(started.elapsed());
            assert_eq!(outcomes[0].status, CallStatus::Ok);
        }
    }
    let median = |samples: &mut Vec<Duration>| {
        samples.sort();
        samples[samples.len() / 2].as_secs_f64() * 1e6
    };
    troupe_actors::trace::enable();
    (median(&mut off), median(&mut on))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let system = actix_rt::System::with_tokio_rt(move || runtime);
    system.block_on(async {
        let received = Arc::new(AtomicU64::new(0));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(Arc::clone(&received));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        observability::install(&ObservabilitySettings {
            endpoint: Some(url),
            ..ObservabilitySettings::default()
        }, None)
        .unwrap();

        let supervisor =
            Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
        let ctx = BatchContext {
            agent_path: Vec::new(),
            session_id: "bench".into(),
            turn_id: "turn".into(),
            view: registry().view_all(),
            search: troupe_tools::ToolSearchConfig::default(),
            hooks: HookRegistry::new(),
            supervisor,
            events: EventSink::new(),
            token: CancellationToken::new(),
            drain: CancellationToken::new(),
            trace: TraceSpan::default(),
            journal: None,
        };
        // The same calls under a live turn span: each makes its own span, exported.
        let turn = TraceSpan::start("turn", &TraceSpan::default(), SpanKind::Internal, Vec::new);
        let traced = BatchContext {
            trace: turn.clone(),
            ..ctx.clone()
        };
        call_overhead(&ctx, &traced, 2, 1_000).await; // warm up
        let (off, on) = call_overhead(&ctx, &traced, 20, 1_000).await;
        turn.end();
        println!(
            "one no-op call: median {off:.1} µs with tracing off, {on:.1} µs with every call's span exported ({:+.1} %)",
            (on / off - 1.0) * 100.0
        );

        // Spans as fast as one thread can make them.
        let before = received.load(Ordering::Relaxed);
        let made = 200_000u64;
        let started = Instant::now();
        let root = TraceSpan::start("burst", &TraceSpan::default(), SpanKind::Internal, Vec::new);
        for _ in 0..made {
            TraceSpan::start("span", &root, SpanKind::Internal, Vec::new).end();
        }
        root.end();
        let making = started.elapsed();
        tokio::task::spawn_blocking(observability::shutdown).await.unwrap();
        let delivered = received.load(Ordering::Relaxed) - before;
        let took = started.elapsed();
        println!(
            "{made} spans made in {:.0} ms ({:.0} spans/s made); {delivered} delivered in {:.0} ms ({:.0} spans/s), {} dropped by the full queue",
            making.as_secs_f64() * 1e3,
            made as f64 / making.as_secs_f64(),
            took.as_secs_f64() * 1e3,
            delivered as f64 / took.as_secs_f64(),
            (made + 1).saturating_sub(delivered)
        );
    });
}
