//! Built-in tool benchmarks: start-to-result latency of `terminal` running `true` against
//! spawning `sh -c true` and `bash -c true` directly, and the round trip of one execute_code
//! tool call over the Unix socket (timed inside the Python script, per call, against a
//! dispatcher that answers at once).
//! Run with `cargo bench -p troupe-tools --bench builtin`.

use std::hint::black_box;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};
use troupe_tools::{CallContext, Dispatch, ToolDef, ToolResult};

/// Answers every call at once with a small JSON object.
struct Echo;

impl Dispatch for Echo {
    fn dispatch(
        &self,
        _tool: String,
        _arguments: Map<String, Value>,
        _ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        async { ToolResult::json(json!({"ok": true})) }.boxed()
    }
}

fn tool<'a>(tools: &'a [ToolDef], name: &str) -> &'a ToolDef {
    tools
        .iter()
        .find(|t| t.name == name)
        .expect("the built-in tool exists")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let builtins = rt
        .block_on(async {
            Builtins::start(BuiltinConfig {
                default_cwd: dir.path().to_path_buf(),
                receipts_dir: dir.path().join("receipts"),
                ..BuiltinConfig::default()
            })
        })
        .expect("the built-ins start");
    let tools = core_tools(&builtins);
    let terminal = tool(&tools, "terminal")
        .handler
        .clone()
        .expect("terminal has a handler");
    let execute = tool(&tools, "execute_code")
        .handler
        .clone()
        .expect("execute_code has a handler");

    let mut group = c.benchmark_group("terminal_start_to_result");
    group
        .sample_size(200)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("terminal_true", |b| {
        b.iter(|| {
            rt.block_on(async {
                let args = json!({"command": "true"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                black_box(
                    terminal
                        .call(
                            args,
                            CallContext::new("bench", "c", CancellationToken::new()),
                        )
                        .await,
                )
            })
        })
    });
    for shell in ["sh", "bash"] {
        group.bench_function(format!("spawn_{shell}_c_true"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let out = tokio::process::Command::new(shell)
                        .args(["-c", "true"])
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .output()
                        .await;
                    black_box(out.map(|o| o.status.success()).unwrap_or(false))
                })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("execute_code");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("rpc_round_trip_per_call", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                // One script makes `iters` calls and reports the loop's own time, so the
                // interpreter's start-up is not counted.
                let code = format!(
                    "import time\nfrom troupe_tools import read_file\nread_file('warm')\nt = time.perf_counter()\nfor _ in range({iters}):\n    read_file('x')\nprint(time.perf_counter() - t)\n"
                );
                let ctx = CallContext::new("bench", "c", CancellationToken::new()).with_dispatch(Arc::new(Echo));
                let args = json!({"code": code}).as_object().cloned().unwrap_or_default();
                let result = execute.call(args, ctx).await;
                let seconds: f64 = result
                    .structured
                    .as_ref()
                    .and_then(|v| v["output"].as_str())
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(f64::NAN);
                Duration::from_secs_f64(if seconds.is_finite() { seconds } else { 0.0 })
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
