//! Figures for the one runtime behind every entry point, against the five real MCP servers the
//! tests install (server-everything, -filesystem, -memory, mcp-server-time, mcp-server-git):
//! 1. start-up of a `troupe::Runtime` from a troupe.yaml naming the five servers, median of a
//!    few rounds: how soon a first turn may begin (the servers go on starting in the
//!    background), and how soon all five servers' tools are ready: the cost a process pays once;
//! 2. sixteen board workers at once on that one runtime, each finding nothing new to start:
//!    every worker calls an MCP tool (`mcp_everything_echo` through `tool_call`) and completes
//!    its task. The bench counts the MCP server processes alive under this process while they
//!    run (sampled from /proc), to show 16 workers share one set of five.
//!
//! Run with:
//! `bash scripts/install-test-deps.sh && cargo build --release -p troupe-tests --bin runtime_bench && target/release/runtime_bench`
//! Optional argument: start-up rounds (default 5).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use troupe::kanban::dispatcher::DispatcherConfig;
use troupe::kanban::{BoardSlug, NewTask, TaskStatus};
use troupe::kanban_api::Kanban;
use troupe::settings::Settings;
use troupe::settings::kanban::StoreLocation;
use troupe::tools::mcp::ServerState;
use troupe::{Runtime, RuntimeOptions};
use troupe_tests::mcp_servers;

/// One server of the config: name, command, arguments, one environment variable.
type ServerLine = (
    &'static str,
    String,
    Vec<String>,
    Option<(&'static str, String)>,
);

/// Workers run at once.
const WORKERS: usize = 16;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("runtime_bench: {e}");
        std::process::exit(1);
    }
}

fn yaml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

async fn run() -> Result<(), String> {
    let missing = mcp_servers::missing_servers();
    if !missing.is_empty() {
        return Err(format!(
            "servers not installed ({missing:?}); run scripts/install-test-deps.sh first"
        ));
    }
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5)
        .max(1);
    let scratch = std::env::temp_dir().join(format!("troupe-runtime-bench-{}", std::process::id()));
    let repo = scratch.join("repo");
    mcp_servers::init_git_repo(&repo).map_err(|e| format!("git repository: {e}"))?;
    let script = scratch.join("worker.yaml");
    std::fs::write(
        &script,
        "cursor: conversation\nturns:\n  - tool_calls:\n      - name: tool_call\n        arguments: {calls: [{name: mcp_everything_echo, arguments: {message: bench}}]}\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: echoed}\n  - text: Done.\n",
    )
    .map_err(|e| e.to_string())?;
    let bin = |path: std::path::PathBuf| path.display().to_string();
    let servers: Vec<ServerLine> = vec![
        (
            "everything",
            bin(mcp_servers::npm_bin("mcp-server-everything")),
            vec!["stdio".into()],
            None,
        ),
        (
            "filesystem",
            bin(mcp_servers::npm_bin("mcp-server-filesystem")),
            vec![scratch.display().to_string()],
            None,
        ),
        (
            "memory",
            bin(mcp_servers::npm_bin("mcp-server-memory")),
            vec![],
            Some((
                "MEMORY_FILE_PATH",
                scratch.join("memory.jsonl").display().to_string(),
            )),
        ),
        (
            "time",
            bin(mcp_servers::venv_bin("mcp-server-time")),
            vec!["--local-timezone".into(), "UTC".into()],
            None,
        ),
        (
            "git",
            bin(mcp_servers::venv_bin("mcp-server-git")),
            vec!["--repository".into(), repo.display().to_string()],
            None,
        ),
    ];
    let mut yaml = format!(
        "approvals: {{mode: manual, unattended: deny}}\nterminal: {{cwd: {}}}\nkanban: {{store: {}, max_in_progress: {WORKERS}}}\nprofiles:\n  coder:\n    script: {}\n    toolsets: [core, mcp-everything, mcp-filesystem, mcp-memory, mcp-time, mcp-git]\nmcp_servers:\n",
        scratch.display(),
        scratch.join("boards").display(),
        script.display()
    );
    for (name, command, args, env) in &servers {
        yaml.push_str(&format!(
            "  {name}:\n    command: {command:?}\n    args: {}\n",
            yaml_list(args)
        ));
        if let Some((key, value)) = env {
            yaml.push_str(&format!("    env: {{{key}: {value:?}}}\n"));
        }
    }
    let config = Settings::parse(&yaml).map_err(|e| e.to_string())?;

    eprintln!("runtime start-up with five MCP servers: {rounds} rounds");
    let mut startups = Vec::new();
    let mut readies = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let runtime = Runtime::start(
            config.clone(),
            RuntimeOptions::default().with_background_delegation(false),
        )
        .await
        .map_err(|e| e.to_string())?;
        // A first turn may begin here; the servers go on starting in the background.
        let took = started.elapsed();
        if !runtime.wait_mcp_ready(Duration::from_secs(120)).await {
            return Err("the MCP servers were still starting after 120 s".into());
        }
        let ready = started.elapsed();
        let connected = runtime
            .mcp_statuses()
            .iter()
            .filter(|s| s.state == ServerState::Connected)
            .count();
        if connected != 5 {
            return Err(format!(
                "only {connected} of 5 servers connected: {:?}",
                runtime.mcp_statuses()
            ));
        }
        runtime.close().await;
        startups.push(took);
        readies.push(ready);
    }
    let (startup, ready) = (median(&mut startups), median(&mut readies));
    eprintln!(
        "  runtime ready for a first turn: median {:.1} ms (min {:.1}, max {:.1})",
        ms(startup),
        ms(startups[0]),
        ms(startups[startups.len() - 1])
    );
    eprintln!(
        "  all five servers' tools ready:  median {:.1} ms (min {:.1}, max {:.1})",
        ms(ready),
        ms(readies[0]),
        ms(readies[readies.len() - 1])
    );

    // Sixteen workers on one runtime.
    let runtime = Runtime::start(
        config.clone(),
        RuntimeOptions::default().with_background_delegation(false),
    )
    .await
    .map_err(|e| e.to_string())?;
    runtime.wait_mcp_ready(Duration::from_secs(120)).await;
    let pids_at_start: BTreeSet<u32> = runtime
        .mcp_statuses()
        .iter()
        .filter_map(|s| s.pid)
        .collect();
    let kanban = Kanban::open_at(StoreLocation::Sqlite(scratch.join("boards")))
        .await
        .map_err(|e| e.to_string())?;
    let board = BoardSlug::default_board();
    let mut ids = Vec::new();
    for n in 0..WORKERS {
        let task = NewTask::new(format!("echo {n}")).with_assignee("coder");
        ids.push(
            kanban
                .create_task(&board, &task)
                .await
                .map_err(|e| e.to_string())?
                .task
                .id,
        );
    }
    let profiles = runtime.worker_profiles(None).map_err(|e| e.to_string())?;
    let dispatcher = kanban
        .start_dispatcher(
            runtime.troupe(),
            board.clone(),
            profiles,
            DispatcherConfig::default().with_max_in_progress(WORKERS),
        )
        .await
        .map_err(|e| e.to_string())?;
    // The most MCP server processes alive under this process while the workers run.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampling = {
        let peak = std::sync::Arc::clone(&peak);
        tokio::spawn(async move {
            loop {
                peak.fetch_max(mcp_children(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let started = Instant::now();
    dispatcher
        .dispatch_once(None, false)
        .await
        .map_err(|e| e.to_string())?;
    dispatcher.wait_idle().await.map_err(|e| e.to_string())?;
    let took = started.elapsed();
    sampling.abort();
    let peak_children = peak.load(std::sync::atomic::Ordering::Relaxed);
    dispatcher.stop().await;
    let stats = dispatcher.stats();
    let mut done = 0;
    for id in &ids {
        if kanban
            .task(&board, id)
            .await
            .map_err(|e| e.to_string())?
            .status
            == TaskStatus::Done
        {
            done += 1;
        }
    }
    let pids_at_end: BTreeSet<u32> = runtime
        .mcp_statuses()
        .iter()
        .filter_map(|s| s.pid)
        .collect();
    runtime.close().await;
    eprintln!(
        "{WORKERS} workers on one runtime: {done} of {WORKERS} tasks done in {:.1} ms ({} claimed, {} failed)",
        ms(took),
        stats.claimed,
        stats.failed
    );
    eprintln!(
        "  MCP server processes: {} at start-up, at most {} alive under this process while the workers ran; the same set after: {}",
        pids_at_start.len(),
        peak_children,
        pids_at_start == pids_at_end
    );
    eprintln!(
        "  a runtime per worker would have paid the servers' start-up {WORKERS} times: about {:.0} ms and {} server processes",
        ms(ready) * WORKERS as f64,
        5 * WORKERS
    );
    let _ = std::fs::remove_dir_all(&scratch);
    if done != WORKERS {
        return Err(format!("only {done} of {WORKERS} tasks finished"));
    }
    Ok(())
}

/// Processes whose parent is this process (Linux /proc): the MCP servers, and the commands
/// the workers run (none here).
fn mcp_children() -> usize {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // Fields after the command name, which is in parentheses: state, ppid, ...
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            after.split_whitespace().nth(1) == Some(me.as_str())
        })
        .count()
}

/// The median of `samples`, which it sorts.
fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
