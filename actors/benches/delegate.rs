//! Figures for `delegate_task` (a bench program, `harness = false`): 1,000 scripted subagents
//! with one no-op tool call each, spawned by one call and joined (wall time, peak RSS from
//! VmHWM); and a hard stop of a root with 100 running descendants until every one has ended.
//! Run with `cargo bench -p troupe-actors --bench delegate`.

#![allow(clippy::print_stdout, reason = "a bench program prints its figures")]
#![allow(clippy::unwrap_used, reason = "a bench program fails loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::Actor;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_actors::delegate::{DelegationConfig, register_delegate_task};
use troupe_actors::events::EventKind;
use troupe_actors::hooks::HookRegistry;
use troupe_actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe_actors::session::{SessionConfig, SessionHandle, SessionParams, TurnStatus};
use troupe_actors::supervisor::{ApprovalConfig, DefaultRules, Supervisor};
use troupe_tools::{CallContext, Registry, ToolDef, ToolHandler, ToolHints, ToolResult};

/// Answers at once, or (for `block`) when the call is cancelled, counting who is inside.
struct Tool {
    blocks: bool,
    inside: Arc<AtomicUsize>,
}

impl ToolHandler for Tool {
    fn call(
        &self,
        _arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        let (blocks, inside) = (self.blocks, Arc::clone(&self.inside));
        Box::pin(async move {
            if blocks {
                inside.fetch_add(1, Ordering::SeqCst);
                ctx.cancel.cancelled().await;
            }
            ToolResult::text("noop-ok")
        })
    }
}

fn registry(inside: &Arc<AtomicUsize>) -> Arc<Registry> {
    let def = |name: &str, blocks: bool| {
        ToolDef::new(name, "bench tool", json!({"type": "object"}))
            .with_toolset("core")
            .with_hints(ToolHints {
                read_only: true,
                ..ToolHints::default()
            })
            .with_handler(Arc::new(Tool {
                blocks,
                inside: Arc::clone(inside),
            }))
    };
    Registry::with_tools([def("noop", false), def("block", true)])
}

async fn root(
    registry: &Arc<Registry>,
    script: Script,
    delegation: DelegationConfig,
) -> SessionHandle {
    register_delegate_task(registry, &delegation);
    let supervisor =
        Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
    SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(script)),
        view: registry.view_all(),
        config: SessionConfig {
            delegation,
            ..SessionConfig::default()
        },
        hooks: HookRegistry::new(),
        supervisor,
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap()
}

/// The process's peak resident set, in MiB, from /proc/self/status.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

async fn thousand_subagents(count: usize) {
    let inside = Arc::new(AtomicUsize::new(0));
    let registry = registry(&inside);
    let tasks: Vec<Value> = (0..count)
        .map(|i| json!({"goal": format!("bench-task {i}")}))
        .collect();
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("delegate_task", json!({"tasks": tasks}))
                .when_input_contains("BENCH-GO"),
        )
        .turn(ScriptTurn::tool_call("noop", json!({})).when_input_contains("bench-task"))
        .turn(ScriptTurn::text("child-ok").when_input_contains("noop-ok"))
        .turn(ScriptTurn::text("root-done").when_input_contains("total_duration_seconds"));
    let delegation = DelegationConfig {
        max_concurrent_children: count,
        ..DelegationConfig::default()
    };
    let session = root(&registry, script, delegation).await;
    let before = peak_rss_mib();
    let started = Instant::now();
    let outcome = session.send("BENCH-GO").await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(outcome.text, "root-done");
    let result: Value = serde_json::from_str(&outcome.calls[0].result.to_model_text()).unwrap();
    let completed = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "completed")
        .count();
    assert_eq!(completed, count);
    println!(
        "delegate: {count} subagents spawned and joined (one no-op tool call each): {:.0} ms ({:.2} ms per subagent); peak RSS {:.1} MiB (before: {:.1} MiB)",
        elapsed.as_secs_f64() * 1000.0,
        elapsed.as_secs_f64() * 1000.0 / count as f64,
        peak_rss_mib().unwrap_or(f64::NAN),
        before.unwrap_or(f64::NAN),
    );
    session.close().await.unwrap();
}

async fn hard_stop(children: usize, grandchildren: usize) {
    let inside = Arc::new(AtomicUsize::new(0));
    let registry = registry(&inside);
    let level_one: Vec<Value> = (0..children)
        .map(|i| json!({"goal": format!("middle {i}")}))
        .collect();
    let level_two: Vec<Value> = (0..grandchildren)
        .map(|i| json!({"goal": format!("leaf {i}")}))
        .collect();
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("delegate_task", json!({"tasks": level_one}))
                .when_input_contains("STOP-GO"),
        )
        .turn(
            ScriptTurn::tool_call("delegate_task", json!({"tasks": level_two}))
                .when_input_contains("middle"),
        )
        .turn(ScriptTurn::tool_call("block", json!({})).when_input_contains("leaf"));
    let delegation = DelegationConfig {
        max_spawn_depth: 2,
        max_concurrent_children: children.max(grandchildren),
        ..DelegationConfig::default()
    };
    let session = root(&registry, script, delegation).await;
    let mut events = session.events();
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("STOP-GO").await })
    };
    while inside.load(Ordering::SeqCst) < children * grandchildren {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    session.stop(true).await.unwrap();
    let outcome = turn.await.unwrap().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    let mut ended = 0;
    while let Ok(event) = events.try_recv() {
        if matches!(event.kind, EventKind::SubagentCompleted { .. }) {
            ended += 1;
        }
    }
    assert_eq!(ended, children + children * grandchildren);
    println!(
        "delegate: hard stop of a root with {ended} running descendants ({children} children x {grandchildren} grandchildren, all inside a tool): every one ended {:.1} ms after the stop",
        elapsed.as_secs_f64() * 1000.0
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let system = actix_rt::System::with_tokio_rt(move || runtime);
    system.block_on(async {
        thousand_subagents(1000).await;
        hard_stop(10, 9).await;
    });
}
