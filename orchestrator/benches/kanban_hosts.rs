//! Claims and tasks per second with 1, 2 and 4 worker processes on one PostgreSQL board, against
//! the SQLite store with the same number of workers in one process.
//!
//! Run with `cargo bench -p troupe --bench kanban_hosts`. It uses `TROUPE_TEST_POSTGRES_URL`
//! when set, else starts a throwaway cluster with `scripts/start-test-postgres.sh` and stops it
//! at the end. `KANBAN_HOSTS_TASKS` (default 2000) and `KANBAN_HOSTS_SLOTS` (workers per
//! process, default 8) size the runs. Prints a Markdown table for docs/benchmarks.md.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use troupe_kanban::domain::{BoardSlug, EventId, EventKind, NewTask, TaskStatus, WorkerId};
use troupe_kanban::store::{
    ClaimSpec, Completion, PostgresStore, SqliteStore, Store, test_cluster,
};

const PROFILE: &str = "scripted";
const SCRIPT: &str = r#"when_exhausted: "Finished."
turns:
  - tool_calls:
      - name: kanban_complete
        arguments: {summary: "done by the scripted worker", result: "ok"}
  - text: "Finished."
"#;
/// A run that completes nothing for this long is reported as stalled rather than waited on.
const STALL_LIMIT: Duration = Duration::from_secs(120);

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; a filter argument is not supported, so ignore arguments.
    let tasks = env_count("KANBAN_HOSTS_TASKS", 2000)?;
    let slots = env_count("KANBAN_HOSTS_SLOTS", 8)?;
    let rt = tokio::runtime::Runtime::new().context("starting a tokio runtime")?;
    let cluster = Cluster::from_env_or_start()?;
    let result = rt.block_on(run_all(&cluster, tasks, slots));
    drop(cluster);
    result
}

async fn run_all(cluster: &Cluster, tasks: usize, slots: usize) -> Result<()> {
    let mut rows = Vec::new();
    for processes in [1usize, 2, 4] {
        let workers = processes * slots;
        eprintln!("kanban_hosts: {processes} PostgreSQL process(es), {workers} workers in all");
        // The store alone: claim then complete in a loop, no actors, no model.
        let (pg, pg_rollbacks, pg_cost) =
            store_loop_postgres(cluster, tasks, processes, slots).await?;
        let lite = store_loop_sqlite(tasks, workers).await?;
        rows.push(Row {
            case: format!("store loop, {workers} claimers"),
            processes,
            pg,
            pg_rollbacks,
            pg_cost,
            lite,
        });
        // End to end: `troupe kanban worker` processes running scripted sessions.
        let (pg, pg_rollbacks, pg_cost) =
            end_to_end_postgres(cluster, tasks, processes, slots).await?;
        let lite = end_to_end_sqlite(tasks, workers).await?;
        rows.push(Row {
            case: format!("worker processes, {workers} workers"),
            processes,
            pg,
            pg_rollbacks,
            pg_cost,
            lite,
        });
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{tasks} tasks per run, {slots} workers per PostgreSQL process\n\n\
         | case | PostgreSQL processes | PostgreSQL claims/s | PostgreSQL tasks/s | PostgreSQL rolled-back transactions | SQLite (1 process) claims/s | SQLite tasks/s |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n"
    ));
    for r in &rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {:.0} | {:.0} |\n",
            r.case,
            r.processes,
            r.pg.claims_per_s,
            r.pg.tasks_per_s,
            r.pg_rollbacks,
            r.lite.claims_per_s,
            r.lite.tasks_per_s
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    out.push_str(&format!(
        "\nWhere a PostgreSQL task's CPU goes (server: every process of the cluster; client: \
         this program for the store loop, the worker processes end to end). Ceiling: the rate \
         at which {cores} cores would be busy with nothing else.\n\n\
         | case | PostgreSQL processes | server CPU per task | client CPU per task | transactions per task | ceiling on {cores} cores |\n\
         | --- | --- | --- | --- | --- | --- |\n"
    ));
    for r in &rows {
        match &r.pg_cost {
            Some(c) => out.push_str(&format!(
                "| {} | {} | {:.0} µs | {:.0} µs | {:.1} | {:.0} tasks/s |\n",
                r.case,
                r.processes,
                c.server_us,
                c.client_us,
                c.transactions,
                cores as f64 * 1e6 / (c.server_us + c.client_us).max(1.0)
            )),
            None => out.push_str(&format!(
                "| {} | {} | (server not readable) | | | |\n",
                r.case, r.processes
            )),
        }
    }
    print_table(&out);
    Ok(())
}

#[allow(clippy::print_stdout, reason = "a bench program prints its figures")]
fn print_table(text: &str) {
    println!("{text}");
}

struct Row {
    case: String,
    processes: usize,
    pg: Figures,
    /// Transactions the PostgreSQL database rolled back: mostly claims lost to another claimer.
    pg_rollbacks: i64,
    /// What one PostgreSQL task cost in CPU and transactions, when the server could be read.
    pg_cost: Option<Cost>,
    lite: Figures,
}

/// One run's throughput, from the board's own event timestamps.
#[derive(Debug, Clone, Copy)]
struct Figures {
    claims_per_s: f64,
    tasks_per_s: f64,
}

fn env_count(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| anyhow!("{name}={v:?}: give a whole number of at least 1")),
        Err(_) => Ok(default),
    }
}

// ---- the PostgreSQL cluster ----

/// The cluster the runs use: the one named in the environment, or one this program started
/// (and stops when dropped).
struct Cluster {
    url: String,
    started: Option<PathBuf>,
    /// The cluster's directory (`TROUPE_TEST_POSTGRES_DIR`), to find its server processes.
    dir: Option<PathBuf>,
}

impl Cluster {
    fn from_env_or_start() -> Result<Cluster> {
        if let Ok(url) = std::env::var("TROUPE_TEST_POSTGRES_URL")
            && !url.trim().is_empty()
        {
            let dir = std::env::var_os("TROUPE_TEST_POSTGRES_DIR").map(PathBuf::from);
            return Ok(Cluster {
                url,
                started: None,
                dir,
            });
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let env_file = std::env::temp_dir().join(format!(
            "troupe-kanban-hosts-{}.env",
            uuid::Uuid::new_v4().simple()
        ));
        let status = Command::new("bash")
            .arg(root.join("scripts/start-test-postgres.sh"))
            .arg(&env_file)
            .stdout(Stdio::null())
            .status()
            .context("running scripts/start-test-postgres.sh")?;
        if !status.success() {
            bail!(
                "scripts/start-test-postgres.sh failed ({status}); set TROUPE_TEST_POSTGRES_URL instead"
            );
        }
        let text = std::fs::read_to_string(&env_file)
            .with_context(|| format!("reading {}", env_file.display()))?;
        let url = text
            .lines()
            .find_map(|l| l.strip_prefix("TROUPE_TEST_POSTGRES_URL="))
            .ok_or_else(|| anyhow!("{} names no URL", env_file.display()))?
            .to_string();
        let dir = text
            .lines()
            .find_map(|l| l.strip_prefix("TROUPE_TEST_POSTGRES_DIR="))
            .map(PathBuf::from);
        Ok(Cluster {
            url,
            started: Some(env_file),
            dir,
        })
    }

    /// A new empty database; returns its URL.
    async fn fresh_database(&self) -> Result<String> {
        Ok(test_cluster::fresh_database(&self.url, "troupe_bench")
            .await
            .url)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(env_file) = &self.started {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let _ = Command::new("bash")
                .arg(root.join("scripts/stop-test-postgres.sh"))
                .arg(env_file)
                .stdout(Stdio::null())
                .status();
        }
    }
}

// ---- seeding and measuring ----

async fn seed(store: &dyn Store, tasks: usize) -> Result<()> {
    let board = BoardSlug::default_board();
    for i in 0..tasks {
        let task = NewTask::new(format!("job {i}")).with_assignee(PROFILE);
        store.create_task(&board, &task).await?;
    }
    Ok(())
}

/// Claims per second over the span from the first to the last claim, and tasks per second
/// from the first claim to the last completion, read from the event log.
async fn figures(store: &dyn Store, tasks: usize) -> Result<Figures> {
    let board = BoardSlug::default_board();
    let mut cursor = EventId(0);
    let (mut first_claim, mut last_claim, mut last_done) = (i64::MAX, i64::MIN, i64::MIN);
    let (mut claims, mut done) = (0u64, 0usize);
    loop {
        let page = store.events_since(&board, cursor, 1000).await?;
        let Some(last) = page.last() else { break };
        cursor = last.id;
        for e in &page {
            match e.kind {
                EventKind::Claimed => {
                    claims += 1;
                    first_claim = first_claim.min(e.created_at.0);
                    last_claim = last_claim.max(e.created_at.0);
                }
                EventKind::Completed => {
                    done += 1;
                    last_done = last_done.max(e.created_at.0);
                }
                _ => {}
            }
        }
    }
    if done != tasks || claims == 0 {
        bail!("the log shows {done} of {tasks} tasks completed and {claims} claims");
    }
    // Timestamps are milliseconds; a span under one is counted as one.
    let claim_span = ((last_claim - first_claim).max(1)) as f64 / 1000.0;
    let task_span = ((last_done - first_claim).max(1)) as f64 / 1000.0;
    Ok(Figures {
        claims_per_s: claims as f64 / claim_span,
        tasks_per_s: tasks as f64 / task_span,
    })
}

/// `claimers` loops claiming and completing until the board is empty.
async fn drain(stores: Vec<Arc<dyn Store>>, per_store: usize) -> Result<()> {
    let board = BoardSlug::default_board();
    let mut set = tokio::task::JoinSet::new();
    for store in stores {
        for _ in 0..per_store {
            let store = Arc::clone(&store);
            let board = board.clone();
            set.spawn(async move {
                let worker = WorkerId::local();
                let spec = ClaimSpec::new(worker.clone());
                loop {
                    match store.claim_next(&board, &spec).await {
                        Ok(Some(claim)) => {
                            let done = Completion {
                                worker: Some(worker.clone()),
                                ..Completion::default()
                            };
                            loop {
                                match store.complete(&board, &claim.task.id, &done).await {
                                    Ok(_) => break,
                                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                                    Err(e) => return Err(anyhow!(e)),
                                }
                            }
                        }
                        Ok(None) => return Ok(()),
                        Err(e) if e.is_transient() => tokio::task::yield_now().await,
                        Err(e) => return Err(anyhow!(e)),
                    }
                }
            });
        }
    }
    while let Some(joined) = set.join_next().await {
        joined.context("a claimer task panicked")??;
    }
    Ok(())
}

async fn store_loop_postgres(
    cluster: &Cluster,
    tasks: usize,
    hosts: usize,
    per_host: usize,
) -> Result<(Figures, i64, Option<Cost>)> {
    let url = cluster.fresh_database().await?;
    let seed_store = PostgresStore::connect(&url).await?;
    seed(&seed_store, tasks).await?;
    // One store (one pool) per simulated host, as separate processes would have.
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..hosts {
        stores.push(Arc::new(PostgresStore::connect(&url).await?));
    }
    let before = Cpu::now(cluster);
    drain(stores, per_host).await?;
    let counts = transactions(&url).await?;
    let after = Cpu::now(cluster);
    let cost = Cost::between(before, after, |c| c.own, counts, tasks);
    Ok((figures(&seed_store, tasks).await?, counts.rolled_back, cost))
}

async fn store_loop_sqlite(tasks: usize, claimers: usize) -> Result<Figures> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await?);
    seed(store.as_ref(), tasks).await?;
    drain(vec![Arc::clone(&store)], claimers).await?;
    figures(store.as_ref(), tasks).await
}

// ---- worker processes ----

/// A `troupe kanban worker` in a process group of its own, killed with its group when dropped.
struct WorkerProcess {
    child: Child,
    log: PathBuf,
}

impl WorkerProcess {
    fn spawn(dir: &Path, store: &str, max: usize, name: &str) -> Result<WorkerProcess> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .args([
                "kanban",
                "worker",
                "--store",
                store,
                "--max",
                &max.to_string(),
            ])
            .current_dir(dir)
            .env("TROUPE_HOME", dir.join("home"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // Should this program itself be killed, the kernel kills the worker too.
        // SAFETY: the hook runs in the child between fork and exec and makes one prctl call,
        // which is async-signal-safe and touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().context("starting troupe kanban worker")?;
        Ok(WorkerProcess { child, log })
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!(
                "worker exited ({status}); its log {}:\n{}",
                self.log.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )),
            Err(e) => Some(format!("cannot check the worker: {e}")),
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A directory with the troupe.yaml the workers read (the scripted profile).
fn worker_dir(store: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("worker-script.yaml");
    std::fs::write(&script, SCRIPT)?;
    std::fs::create_dir_all(dir.path().join("home"))?;
    let yaml = format!(
        "kanban:\n  store: {store}\n  default_assignee: {PROFILE}\n  dispatch_interval: 1s\n\
         profiles:\n  {PROFILE}:\n    script: {}\n",
        script.display()
    );
    std::fs::write(dir.path().join("troupe.yaml"), yaml)?;
    Ok(dir)
}

/// Starts the workers and waits until every task is done.
async fn run_workers(
    store: &dyn Store,
    location: &str,
    tasks: usize,
    processes: usize,
    slots: usize,
) -> Result<Figures> {
    let dir = worker_dir(location)?;
    let mut workers = Vec::new();
    for i in 0..processes {
        workers.push(WorkerProcess::spawn(
            dir.path(),
            location,
            slots,
            &format!("worker-{i}"),
        )?);
    }
    let board = BoardSlug::default_board();
    let mut last = u64::MAX;
    let mut last_change = Instant::now();
    loop {
        let stats = store.stats(&board).await?;
        let done = stats.count(TaskStatus::Done);
        if done as usize >= tasks {
            break;
        }
        if done != last {
            last = done;
            last_change = Instant::now();
        }
        for w in &mut workers {
            if let Some(why) = w.exited() {
                bail!("{why}");
            }
        }
        if last_change.elapsed() > STALL_LIMIT {
            let counts: HashMap<&str, u64> = stats
                .by_status
                .iter()
                .map(|(s, n)| (s.as_str(), *n))
                .collect();
            drop(workers);
            // Keep the logs for a look at what stalled.
            let kept = dir.keep();
            bail!(
                "the board stalled at {counts:?}; worker logs are in {}",
                kept.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(workers);
    figures(store, tasks).await
}

async fn end_to_end_postgres(
    cluster: &Cluster,
    tasks: usize,
    processes: usize,
    slots: usize,
) -> Result<(Figures, i64, Option<Cost>)> {
    let url = cluster.fresh_database().await?;
    let store = PostgresStore::connect(&url).await?;
    seed(&store, tasks).await?;
    let before = Cpu::now(cluster);
    let figures = run_workers(&store, &url, tasks, processes, slots).await?;
    let counts = transactions(&url).await?;
    let after = Cpu::now(cluster);
    let cost = Cost::between(before, after, |c| c.children, counts, tasks);
    Ok((figures, counts.rolled_back, cost))
}

/// Transactions the database at `url` has committed and rolled back.
#[derive(Debug, Clone, Copy)]
struct Transactions {
    committed: i64,
    /// Mostly claims lost to another claimer.
    rolled_back: i64,
}

/// The database's transaction counts, read once the claimers' connections have closed (a
/// backend reports its counts when it ends).
async fn transactions(url: &str) -> Result<Transactions> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let config: tokio_postgres::Config = url.parse().context("parsing the database URL")?;
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .context("connecting to read the database's statistics")?;
    let conn = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database \
             WHERE datname = current_database()",
            &[],
        )
        .await
        .context("reading pg_stat_database")?;
    drop(client);
    let _ = conn.await;
    Ok(Transactions {
        committed: row.get(0),
        rolled_back: row.get(1),
    })
}

// ---- where the CPU goes ----

/// CPU seconds used so far, from /proc: by this program, by its children that have ended
/// (the worker processes), and by the PostgreSQL cluster's processes.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    own: f64,
    children: f64,
    /// `None` when the cluster's directory is not known or its server cannot be read.
    server: Option<f64>,
}

/// One task's share of a run's CPU and transactions.
#[derive(Debug, Clone, Copy)]
struct Cost {
    server_us: f64,
    client_us: f64,
    transactions: f64,
}

impl Cost {
    fn between(
        before: Cpu,
        after: Cpu,
        client: impl Fn(&Cpu) -> f64,
        counts: Transactions,
        tasks: usize,
    ) -> Option<Cost> {
        let server = after.server? - before.server?;
        let per_task = |seconds: f64| seconds * 1e6 / tasks as f64;
        Some(Cost {
            server_us: per_task(server),
            client_us: per_task(client(&after) - client(&before)),
            // The counts include seeding's transactions; take them off (one per task created).
            transactions: (counts.committed + counts.rolled_back - tasks as i64).max(0) as f64
                / tasks as f64,
        })
    }
}

impl Cpu {
    fn now(cluster: &Cluster) -> Cpu {
        let ticks = clock_ticks();
        let own = proc_times("self").unwrap_or([0; 4]);
        Cpu {
            own: (own[0] + own[1]) as f64 / ticks,
            children: (own[2] + own[3]) as f64 / ticks,
            server: cluster
                .dir
                .as_deref()
                .and_then(server_ticks)
                .map(|t| t as f64 / ticks),
        }
    }
}

/// The cluster's CPU in clock ticks: the postmaster with every child it has reaped, plus the
/// children still running (backends, the WAL writer, …).
fn server_ticks(dir: &Path) -> Option<u64> {
    let pid_file = std::fs::read_to_string(dir.join("data/postmaster.pid")).ok()?;
    let postmaster: u32 = pid_file.lines().next()?.trim().parse().ok()?;
    let [user, system, child_user, child_system] = proc_times(&postmaster.to_string())?;
    let mut total = user + system + child_user + child_system;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if proc_parent(pid) == Some(postmaster)
            && let Some([user, system, _, _]) = proc_times(pid)
        {
            total += user + system;
        }
    }
    Some(total)
}

/// The fields of /proc/PID/stat after the command name (the first is the state, field 3).
fn proc_stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn proc_parent(pid: &str) -> Option<u32> {
    proc_stat_fields(pid)?.get(1)?.parse().ok()
}

/// utime, stime, cutime and cstime of a process (fields 14 to 17), in clock ticks.
fn proc_times(pid: &str) -> Option<[u64; 4]> {
    let fields = proc_stat_fields(pid)?;
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some([field(14)?, field(15)?, field(16)?, field(17)?])
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

async fn end_to_end_sqlite(tasks: usize, workers: usize) -> Result<Figures> {
    let boards = tempfile::tempdir()?;
    let store = SqliteStore::open(boards.path()).await?;
    seed(&store, tasks).await?;
    let location = boards
        .path()
        .to_str()
        .ok_or_else(|| anyhow!("the temporary directory's path is not UTF-8"))?
        .to_string();
    run_workers(&store, &location, tasks, 1, workers).await
}
