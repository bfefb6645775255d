//! Figures for troupe's MCP layer, against the real servers the tests install:
//! 1. start-up of five servers in parallel versus each one alone (the slowest sets the floor);
//! 2. the cost of a call through troupe (`ToolsetView::call` on `mcp_everything_echo`) versus the
//!    same `tools/call` straight through rmcp: over stdio (a server-everything process per path)
//!    and over streamable HTTP (both paths on one server-everything process).
//!
//! Run with (the fault server must be built beside it):
//! `bash scripts/install-test-deps.sh && cargo build --release -p troupe-tests --bins && target/release/mcp_bench`
//! Optional arguments: start-up rounds, then calls per path (defaults 3 and 3000).

use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use troupe::tools::mcp::{McpManager, McpOptions, McpServerConfig, McpServers, ServerState};
use troupe::tools::{CallContext, Registry};
use troupe_tests::mcp_servers;

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("mcp_bench: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let missing = mcp_servers::missing_servers();
    if !missing.is_empty() {
        return Err(format!(
            "servers not installed ({missing:?}); run scripts/install-test-deps.sh first"
        ));
    }
    let mut argv = std::env::args().skip(1);
    let rounds: usize = argv.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let calls: usize = argv.next().and_then(|a| a.parse().ok()).unwrap_or(3000);

    let scratch = std::env::temp_dir().join(format!("troupe-mcp-bench-{}", std::process::id()));
    let repo = scratch.join("repo");
    mcp_servers::init_git_repo(&repo).map_err(|e| format!("git repository: {e}"))?;
    let options = McpOptions::default().with_log_dir(scratch.join("logs"));
    let five = vec![
        mcp_servers::everything("everything"),
        mcp_servers::filesystem("filesystem", &scratch),
        mcp_servers::memory("memory", &scratch.join("memory.jsonl")),
        mcp_servers::time("time"),
        mcp_servers::git("git", &repo),
    ];

    eprintln!("start-up: {rounds} rounds (median shown)");
    let mut slowest_alone = Duration::ZERO;
    let mut sum_alone = Duration::ZERO;
    for server in &five {
        let took = median(startup(std::slice::from_ref(server), &options, rounds).await?);
        eprintln!("  {:<12} alone      {:>8.1} ms", server.name, ms(took));
        slowest_alone = slowest_alone.max(took);
        sum_alone += took;
    }
    let together = median(startup(&five, &options, rounds).await?);
    eprintln!("  all five in parallel  {:>8.1} ms", ms(together));
    eprintln!("  slowest alone         {:>8.1} ms", ms(slowest_alone));
    eprintln!(
        "  sum of the five alone {:>8.1} ms  (these servers spend their start-up on CPU: python and node loading)",
        ms(sum_alone)
    );

    // The same with five servers that start slowly without using CPU (our fault server told to
    // wait 200..1000 ms before serving): here the machine's cores do not limit the overlap.
    let fault = fault_server_bin()?;
    let delayed: Vec<McpServerConfig> = (1..=5)
        .map(|i| {
            McpServerConfig::stdio(
                format!("delayed{i}"),
                fault.to_string_lossy(),
                ["--start-delay-ms".to_string(), (i * 200).to_string()],
            )
        })
        .collect();
    let mut slowest_delayed = Duration::ZERO;
    for server in &delayed {
        slowest_delayed = slowest_delayed.max(median(
            startup(std::slice::from_ref(server), &options, rounds).await?,
        ));
    }
    let together = median(startup(&delayed, &options, rounds).await?);
    eprintln!(
        "  five fault servers (start delays 200..1000 ms): parallel {:>7.1} ms, slowest alone {:>7.1} ms",
        ms(together),
        ms(slowest_delayed)
    );

    call_overhead(&options, calls, false).await?;
    call_overhead(&options, calls, true).await?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// The fault server built beside this program (`cargo build -p troupe-tests --bins`).
fn fault_server_bin() -> Result<std::path::PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let bin = me.with_file_name("fault_server");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is missing; build it with `cargo build --release -p troupe-tests --bins`",
            bin.display()
        ))
    }
}

/// Times `rounds` start-ups of `servers` in one manager, up to every server connected.
async fn startup(
    servers: &[McpServerConfig],
    options: &McpOptions,
    rounds: usize,
) -> Result<Vec<Duration>, String> {
    let config = McpServers {
        servers: servers.to_vec(),
        ..McpServers::default()
    };
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let (manager, statuses) =
            McpManager::start_with(&config, Registry::new(), options.clone()).await;
        let took = started.elapsed();
        if let Some(bad) = statuses.iter().find(|s| s.state != ServerState::Connected) {
            return Err(format!(
                "{} did not connect: {:?}",
                bad.name, bad.last_error
            ));
        }
        manager.shutdown().await;
        times.push(took);
    }
    Ok(times)
}

/// Over stdio each path has its own server-everything process (a stdio server has one client);
/// over HTTP both paths open a session on the same process.
async fn call_overhead(options: &McpOptions, calls: usize, http: bool) -> Result<(), String> {
    let mut http_server = None;
    let url = if http {
        let port = mcp_servers::free_port().map_err(|e| format!("free port: {e}"))?;
        http_server = Some(
            mcp_servers::spawn_everything_http(port)
                .await
                .map_err(|e| format!("server-everything over HTTP: {e}"))?,
        );
        Some(format!("http://127.0.0.1:{port}/mcp"))
    } else {
        None
    };
    // troupe's path: the registered tool, called through a view.
    let registry = Registry::new();
    let server = match &url {
        Some(url) => McpServerConfig::http("everything", url.as_str()),
        None => mcp_servers::everything("everything"),
    };
    let config = McpServers {
        servers: vec![server],
        ..McpServers::default()
    };
    let (manager, statuses) =
        McpManager::start_with(&config, registry.clone(), options.clone()).await;
    if statuses[0].state != ServerState::Connected {
        return Err(format!(
            "server-everything did not connect: {:?}",
            statuses[0].last_error
        ));
    }
    let view = registry.view_all();
    let arguments: Map<String, Value> = json!({"message": "bench"})
        .as_object()
        .cloned()
        .unwrap_or_default();

    // rmcp's path: the same server over HTTP, or a second process of it over stdio.
    let raw = match &url {
        Some(url) => ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await,
        None => {
            let mut cmd = tokio::process::Command::new(mcp_servers::everything_bin());
            cmd.arg("stdio");
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("spawn: {e}"))?;
            ().serve(transport).await
        }
    }
    .map_err(|e| format!("rmcp handshake: {e}"))?;
    let peer = raw.peer().clone();

    let through_troupe = || {
        let view = view.clone();
        let arguments = arguments.clone();
        async move {
            let result = view
                .call(
                    "mcp_everything_echo",
                    arguments,
                    CallContext::detached("bench"),
                )
                .await;
            if result.is_error {
                Err(result.to_model_text())
            } else {
                Ok(())
            }
        }
    };
    let through_rmcp = || {
        let peer = peer.clone();
        let arguments = arguments.clone();
        async move {
            peer.call_tool_once(CallToolRequestParams::new("echo").with_arguments(arguments))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    // rmcp with the same per-call timeout and stop guard troupe wraps around each call: tells
    // what of the difference those two cost.
    let through_rmcp_guarded = || {
        let peer = peer.clone();
        let arguments = arguments.clone();
        async move {
            let stop = tokio_util::sync::CancellationToken::new();
            let call =
                peer.call_tool_once(CallToolRequestParams::new("echo").with_arguments(arguments));
            tokio::select! {
                biased;
                _ = stop.cancelled() => Err("stopped".to_string()),
                done = tokio::time::timeout(Duration::from_secs(300), call) => match done {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("timed out".to_string()),
                },
            }
        }
    };

    // Warm both paths, then alternate single calls so that load from anything else on the
    // machine hits both alike; compare the medians of the per-call times.
    for _ in 0..200 {
        through_troupe().await?;
        through_rmcp().await?;
    }
    let mut troupe_times = Vec::with_capacity(calls);
    let mut rmcp_times = Vec::with_capacity(calls);
    let mut guarded_times = Vec::with_capacity(calls);
    for i in 0..calls {
        // Rotate which path goes first, so none always follows another.
        for k in 0..3 {
            let t = Instant::now();
            match (i + k) % 3 {
                0 => {
                    through_rmcp().await?;
                    rmcp_times.push(t.elapsed());
                }
                1 => {
                    through_troupe().await?;
                    troupe_times.push(t.elapsed());
                }
                _ => {
                    through_rmcp_guarded().await?;
                    guarded_times.push(t.elapsed());
                }
            }
        }
    }
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
    let (troupe_mean, rmcp_mean) = (mean(&troupe_times), mean(&rmcp_times));
    let (troupe_median, rmcp_median) = (median(troupe_times), median(rmcp_times));
    let guarded_median = median(guarded_times);
    let overhead = us(troupe_median) - us(rmcp_median);
    let how = if http {
        "streamable HTTP, one process"
    } else {
        "stdio, one process per path"
    };
    eprintln!("echo on server-everything over {how}, {calls} calls per path, interleaved:");
    eprintln!(
        "  straight through rmcp   median {:>8.1} µs   mean {:>8.1} µs",
        us(rmcp_median),
        us(rmcp_mean)
    );
    eprintln!(
        "  through ToolsetView     median {:>8.1} µs   mean {:>8.1} µs",
        us(troupe_median),
        us(troupe_mean)
    );
    eprintln!(
        "  rmcp + timeout + stop   median {:>8.1} µs   (rmcp with troupe's per-call guards only)",
        us(guarded_median)
    );
    eprintln!(
        "  overhead (medians)      {:+.1} µs = {:+.2} %",
        overhead,
        100.0 * overhead / us(rmcp_median)
    );
    let _ = raw.cancel().await;
    manager.shutdown().await;
    drop(http_server);
    Ok(())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
