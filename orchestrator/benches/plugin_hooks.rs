//! What plugins cost per tool call, as a plain bench program (`harness = false`): one no-op
//! call through planner, supervisor, hooks and runner with
//! 1. no plugins;
//! 2. an enabled plugin whose hooks are for other tools (no hook for this call);
//! 3. one `pre_tool_call` command hook on this tool (`/bin/sh -c true`: a process start);
//! 4. one `post_tool_call` observer command on this tool (runs on its own thread).
//!
//! All four run in one process, so the ratios hold on a noisy machine.
//!
//! Run with `cargo bench -p troupe --bench plugin_hooks`.

#![allow(clippy::print_stdout, reason = "a bench program prints its figures")]
#![allow(clippy::unwrap_used, reason = "a bench program fails loudly")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use serde_json::{Map, json};
use tokio_util::sync::CancellationToken;
use troupe::plugins::command_hook::{CommandHooks, Observers};
use troupe::plugins::manifest::CommandSpec;
use troupe_actors::batch_planner::Planners;
use troupe_actors::call::{CallEntry, CallStatus, CallTarget};
use troupe_actors::events::EventSink;
use troupe_actors::hooks::HookRegistry;
use troupe_actors::supervisor::{ApprovalConfig, DefaultRules, Supervisor};
use troupe_actors::tool_runner::{BatchContext, RunnerLimits, ToolRunner};
use troupe_tools::{Registry, ToolDef, ToolHints, ToolResult};

fn spec(command: &str, tools: &[&str]) -> CommandSpec {
    CommandSpec {
        command: command.into(),
        dir: std::env::temp_dir(),
        timeout: Duration::from_secs(10),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        description: None,
        env_passthrough: Vec::new(),
        secrets: Default::default(),
    }
}

fn plugin(table: &[(&str, CommandSpec)], observers: &Observers) -> HookRegistry {
    let mut map: BTreeMap<String, Vec<CommandSpec>> = BTreeMap::new();
    for (point, spec) in table {
        map.entry(point.to_string()).or_default().push(spec.clone());
    }
    HookRegistry::new().with(Arc::new(CommandHooks::new("bench", map, observers.clone())))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

async fn per_call(
    label: &str,
    hooks: HookRegistry,
    iterations: usize,
    observers: &Observers,
) -> Duration {
    let registry =
        Registry::with_tools([
            ToolDef::new("noop", "Does nothing.", json!({"type": "object"}))
                .with_toolset("core")
                .with_hints(ToolHints {
                    read_only: true,
                    ..ToolHints::default()
                })
                .with_fn(|_, _| Box::pin(async { ToolResult::text("ok") })),
        ]);
    let supervisor =
        Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
    let view = registry.view_all();
    let ctx = BatchContext {
        session_id: "bench".into(),
        agent_path: vec!["bench".into()],
        turn_id: "turn".into(),
        view: view.clone(),
        search: troupe_tools::ToolSearchConfig::default(),
        hooks,
        supervisor,
        events: EventSink::new(),
        token: CancellationToken::new(),
        drain: tokio_util::sync::CancellationToken::new(),
        trace: Default::default(),
        journal: None,
    };
    let planner = Planners::of_system(std::env::temp_dir()).await;
    let runner = ToolRunner::new(RunnerLimits::default());
    let warm = iterations / 10;
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + warm {
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
        if i >= warm {
            samples.push(elapsed);
        }
    }
    // Observers finish on their own threads; wait so the next case starts clean.
    observers.drain(Duration::from_secs(60)).await;
    samples.sort();
    let median = percentile(&samples, 0.5);
    println!(
        "{label:<58} median {:>9.1} µs  p90 {:>9.1} µs  ({iterations} calls)",
        median.as_secs_f64() * 1e6,
        percentile(&samples, 0.9).as_secs_f64() * 1e6,
    );
    median
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let system = actix_rt::System::with_tokio_rt(move || runtime);
    system.block_on(async {
        let observers = Observers::new();
        let idle_plugin = || {
            plugin(
                &[
                    ("pre_tool_call", spec("true", &["terminal"])),
                    ("post_tool_call", spec("true", &["write_file"])),
                ],
                &observers,
            )
        };
        // Interleaved, so drift in the machine's load hits both alike; the better round counts.
        let mut none = Duration::MAX;
        let mut idle = Duration::MAX;
        for round in 1..=3 {
            let label = format!("no plugins (round {round})");
            none = none.min(per_call(&label, HookRegistry::new(), 20_000, &observers).await);
            let label = format!("enabled plugin, no hook for this call (round {round})");
            idle = idle.min(per_call(&label, idle_plugin(), 20_000, &observers).await);
        }
        let pre = plugin(&[("pre_tool_call", spec("true", &[]))], &observers);
        let with_pre = per_call("one pre_tool_call command hook (sh -c true)", pre, 500, &observers).await;
        let post = plugin(&[("post_tool_call", spec("true", &[]))], &observers);
        let with_post =
            per_call("one post_tool_call observer command (own thread)", post, 500, &observers).await;
        println!(
            "\nratios to no plugins: idle plugin {:.2}x, pre hook {:.0}x, observer {:.1}x; pre hook adds {:.2} ms per call",
            idle.as_secs_f64() / none.as_secs_f64(),
            with_pre.as_secs_f64() / none.as_secs_f64(),
            with_post.as_secs_f64() / none.as_secs_f64(),
            (with_pre.saturating_sub(none)).as_secs_f64() * 1e3,
        );
    });
}
