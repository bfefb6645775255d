//! Many hosts on one PostgreSQL board, proven with real processes: three `troupe kanban worker`
//! processes share 1,000 tasks and one is killed with SIGKILL while it holds claims; and two
//! workers whose database connections are all terminated mid-run. Both end with every task
//! completed exactly once, checked from the events and runs tables.
//!
//! Needs a throwaway cluster, as `troupe-kanban`'s `postgres_store` tests do: run
//! `scripts/start-test-postgres.sh` and export `TROUPE_TEST_POSTGRES_URL` from
//! `target/test-postgres.env`. Without it each test prints a loud skip, unless
//! `TROUPE_REQUIRE_POSTGRES=1`, which makes the skip a failure. Each test makes its own database;
//! `TROUPE_TEST_KEEP_LOGS=1` keeps the worker processes' logs and prints where.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tempfile::TempDir;
use troupe_kanban::domain::{BoardSlug, NewTask, WorkerId};
use troupe_kanban::store::test_cluster::{self, connect};
use troupe_kanban::store::{PostgresStore, Store};

/// The profile every task is assigned to; its model is the script below.
const PROFILE: &str = "scripted";
/// How long a board may go without a single completion before the test calls it stalled. A
/// liveness bound so a broken dispatcher fails the test instead of hanging it, not a timing
/// assertion: a healthy run completes tasks every few milliseconds.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// Each worker session calls `kanban_complete` once, then ends its turn.
const SCRIPT: &str = r#"when_exhausted: "Finished."
turns:
  - tool_calls:
      - name: kanban_complete
        arguments: {summary: "done by the scripted worker", result: "ok"}
  - text: "Finished."
"#;

/// Whether a test cluster is configured; a loud skip (or a failure when required) if not.
fn postgres_configured() -> bool {
    test_cluster::cluster_url("multi-host kanban test").is_some()
}

/// A fresh database on the test cluster, a directory with its `troupe.yaml`, and an admin
/// connection for reading the tables and cutting other connections.
struct Board {
    url: String,
    dbname: String,
    dir: TempDir,
    admin: tokio_postgres::Client,
    /// The cluster's own database, for statements about this one.
    cluster: tokio_postgres::Config,
}

impl Board {
    async fn fresh(lease_ttl: &str) -> Board {
        let cluster_url = std::env::var(test_cluster::URL_VAR).unwrap();
        let cluster: tokio_postgres::Config = cluster_url.trim().parse().unwrap();
        let db = test_cluster::fresh_database(&cluster_url, "troupe_multihost").await;
        let admin = connect(&db.config).await;
        let (url, dbname) = (db.url, db.name);
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("worker-script.yaml");
        std::fs::write(&script, SCRIPT).unwrap();
        // The dispatcher sweeps every second so lapsed leases are seen quickly; the short lease
        // is what lets the survivors take a dead worker's tasks back within seconds.
        let yaml = format!(
            "kanban:\n  store: {url}\n  default_assignee: {PROFILE}\n  lease_ttl: {lease_ttl}\n  \
             dispatch_interval: 1s\nprofiles:\n  {PROFILE}:\n    script: {}\n",
            script.display()
        );
        std::fs::write(dir.path().join("troupe.yaml"), yaml).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Board {
            url,
            dbname,
            dir,
            admin,
            cluster,
        }
    }

    /// Creates `n` tasks for the scripted profile (the schema is created by the first connect).
    async fn seed(&self, n: usize) -> HashSet<String> {
        let store = PostgresStore::connect(&self.url).await.unwrap();
        let board = BoardSlug::default_board();
        let mut ids = HashSet::new();
        for i in 0..n {
            let task = NewTask::new(format!("job {i}")).with_assignee(PROFILE);
            let created = store.create_task(&board, &task).await.unwrap();
            ids.insert(created.task.id.to_string());
        }
        ids
    }

    fn spawn_worker(&self, name: &str, max: usize) -> WorkerProcess {
        WorkerProcess::spawn(self.dir.path(), &self.url, name, max)
    }

    async fn completed(&self) -> i64 {
        self.admin
            .query_one(
                "SELECT COUNT(*) FROM kanban_task_events \
                 WHERE board = 'default' AND kind = 'completed'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// The running claims each process holds, by pid.
    async fn claims_by_pid(&self) -> HashMap<u32, usize> {
        let rows = self
            .admin
            .query(
                "SELECT claim_lock FROM kanban_tasks \
                 WHERE board = 'default' AND status = 'running' AND claim_lock IS NOT NULL",
                &[],
            )
            .await
            .unwrap();
        let mut out = HashMap::new();
        for row in rows {
            let lock: String = row.get(0);
            *out.entry(pid_of(&lock)).or_insert(0) += 1;
        }
        out
    }

    /// Waits until `done` tasks are complete, failing if the board stops moving or every
    /// worker has exited.
    async fn wait_for_completions(&self, done: i64, workers: &mut [WorkerProcess]) {
        let mut last = -1;
        let mut last_change = Instant::now();
        loop {
            let now = self.completed().await;
            if now >= done {
                return;
            }
            if now != last {
                last = now;
                last_change = Instant::now();
            }
            let dead: Vec<String> = workers
                .iter_mut()
                .filter_map(|w| {
                    (!w.killed && !w.running())
                        .then(|| format!("{} exited:\n{}", w.name, w.log_tail()))
                })
                .collect();
            assert!(
                dead.is_empty(),
                "a worker process ended on its own at {now} completions:\n{}",
                dead.join("\n")
            );
            if last_change.elapsed() > STALL_LIMIT {
                let logs: Vec<String> = workers
                    .iter()
                    .map(|w| format!("--- {}:\n{}", w.name, w.log_tail()))
                    .collect();
                panic!(
                    "the board stalled at {now} of {done} completions\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The newest event id on the board.
    async fn last_event_id(&self) -> i64 {
        self.admin
            .query_one(
                "SELECT COALESCE(MAX(id), 0) FROM kanban_task_events WHERE board = 'default'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Ends every connection to this database except the admin one; returns how many.
    async fn terminate_connections(&self) -> i64 {
        self.admin
            .query_one(
                "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()) AS cut",
                &[&self.dbname],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// An outage of this database alone: new connections are refused, the open ones cut, and
    /// after `length` connections are allowed again. Returns how many connections were cut.
    async fn outage(&self, length: Duration) -> i64 {
        // A database's own connections may not change this setting; the cluster's may.
        let cluster = connect(&self.cluster).await;
        cluster
            .batch_execute(&format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
                self.dbname
            ))
            .await
            .unwrap();
        let cut = self.terminate_connections().await;
        tokio::time::sleep(length).await;
        cluster
            .batch_execute(&format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS true",
                self.dbname
            ))
            .await
            .unwrap();
        cut
    }

    /// Reads the whole history back and checks it; see [`Audit`].
    async fn audit(&self, ids: &HashSet<String>) -> Audit {
        let runs = self
            .admin
            .query(
                "SELECT id, task_id, claim_lock, started_at, ended_at, outcome \
                 FROM kanban_task_runs WHERE board = 'default' ORDER BY id",
                &[],
            )
            .await
            .unwrap();
        let runs: Vec<RunRow> = runs
            .iter()
            .map(|r| RunRow {
                id: r.get(0),
                task: r.get(1),
                lock: r.get(2),
                started_at: r.get(3),
                ended_at: r.get(4),
                outcome: r.get(5),
            })
            .collect();
        let events = self
            .admin
            .query(
                "SELECT id, task_id, run_id, kind FROM kanban_task_events \
                 WHERE board = 'default' AND task_id IS NOT NULL ORDER BY id",
                &[],
            )
            .await
            .unwrap();
        let events: Vec<EventRow> = events
            .iter()
            .map(|r| EventRow {
                id: r.get(0),
                task: r.get(1),
                run: r.get(2),
                kind: r.get(3),
            })
            .collect();
        let statuses = self
            .admin
            .query(
                "SELECT status, COUNT(*) FROM kanban_tasks WHERE board = 'default' GROUP BY status",
                &[],
            )
            .await
            .unwrap();
        let statuses: BTreeMap<String, i64> =
            statuses.iter().map(|r| (r.get(0), r.get(1))).collect();
        Audit::check(ids, &runs, &events, &statuses)
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // For a look at the workers' logs after a run: TROUPE_TEST_KEEP_LOGS=1.
        if std::env::var("TROUPE_TEST_KEEP_LOGS").is_ok_and(|v| v == "1") {
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
            eprintln!("worker logs kept in {}", dir.keep().display());
        }
    }
}

/// The pid in a lease holder's `host:pid:uuid`.
fn pid_of(lock: &str) -> u32 {
    WorkerId::parse(lock)
        .unwrap_or_else(|e| panic!("claim lock {lock:?} is not a worker identity: {e}"))
        .pid
}

/// One `troupe kanban worker` process in a process group of its own, killed with the whole
/// group when dropped, so a failing test leaves no stray workers behind.
struct WorkerProcess {
    name: String,
    child: Child,
    log: PathBuf,
    killed: bool,
}

impl WorkerProcess {
    fn spawn(dir: &Path, url: &str, name: &str, max: usize) -> WorkerProcess {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .args([
                "kanban",
                "worker",
                "--store",
                url,
                "--max",
                &max.to_string(),
            ])
            .current_dir(dir)
            .env("TROUPE_HOME", dir.join("home"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
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
        let child = command.spawn().unwrap();
        WorkerProcess {
            name: name.to_string(),
            child,
            log,
            killed: false,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL to the whole group, then reap.
    fn kill(&mut self) {
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
        self.killed = true;
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if !self.killed {
            self.kill();
        }
    }
}

struct RunRow {
    id: i64,
    task: String,
    lock: Option<String>,
    started_at: i64,
    ended_at: Option<i64>,
    outcome: Option<String>,
}

struct EventRow {
    id: i64,
    task: String,
    run: Option<i64>,
    kind: String,
}

/// Events that end the run they name.
const RUN_ENDING: &[&str] = &[
    "completed",
    "blocked",
    "dependency_wait",
    "block_loop_detected",
    "review_requested",
    "archived",
    "reclaimed",
    "crashed",
    "timed_out",
    "spawn_failed",
    "protocol_violation",
    "rate_limited",
];

/// What the history shows, after checking that every task completed exactly once and that no
/// two runs of a task were ever open at the same time.
#[derive(Debug)]
struct Audit {
    /// For each task, the `completed` event's id and the lease holder of the run it ended.
    completed_by: HashMap<String, (i64, String)>,
    /// Runs taken back after their lease lapsed: (task, holder).
    reclaimed: Vec<(String, String)>,
    /// Every `claimed` event.
    claims: usize,
}

impl Audit {
    fn check(
        ids: &HashSet<String>,
        runs: &[RunRow],
        events: &[EventRow],
        statuses: &BTreeMap<String, i64>,
    ) -> Audit {
        let total = i64::try_from(ids.len()).unwrap();
        assert_eq!(
            statuses.get("done").copied().unwrap_or(0),
            total,
            "every task ends done; statuses: {statuses:?}"
        );
        let lock_of: HashMap<i64, Option<&String>> =
            runs.iter().map(|r| (r.id, r.lock.as_ref())).collect();

        // Walk each task's events in commit order (event ids are handed out at commit): a
        // claim may only open a run when no other run of that task is open.
        let mut open: HashMap<&str, i64> = HashMap::new();
        let mut completions: HashMap<String, Vec<i64>> = HashMap::new();
        let mut completed_by = HashMap::new();
        let mut reclaimed = Vec::new();
        let mut claims = 0;
        for e in events {
            match e.kind.as_str() {
                "claimed" => {
                    claims += 1;
                    let run = e
                        .run
                        .unwrap_or_else(|| panic!("claim event {} has no run", e.id));
                    if let Some(prev) = open.insert(&e.task, run) {
                        panic!(
                            "task {} claimed for run {run} (holder {:?}) at event {} while run \
                             {prev} (holder {:?}) was still open",
                            e.task,
                            lock_of.get(&run),
                            e.id,
                            lock_of.get(&prev)
                        );
                    }
                }
                kind if RUN_ENDING.contains(&kind) => {
                    if e.run.is_some() && open.get(e.task.as_str()) == e.run.as_ref() {
                        open.remove(e.task.as_str());
                    }
                    let holder = e
                        .run
                        .and_then(|r| lock_of.get(&r).copied().flatten())
                        .cloned();
                    if kind == "completed" {
                        completions.entry(e.task.clone()).or_default().push(e.id);
                        completed_by.insert(e.task.clone(), (e.id, holder.unwrap_or_default()));
                    } else if kind == "reclaimed" {
                        reclaimed.push((e.task.clone(), holder.unwrap_or_default()));
                    }
                }
                _ => {}
            }
        }
        assert!(open.is_empty(), "runs never ended: {open:?}");
        let twice: Vec<_> = completions.iter().filter(|(_, v)| v.len() > 1).collect();
        assert!(
            twice.is_empty(),
            "tasks completed more than once: {twice:?}"
        );
        let seen: HashSet<String> = completions.keys().cloned().collect();
        let missing: Vec<_> = ids.difference(&seen).collect();
        assert!(missing.is_empty(), "tasks never completed: {missing:?}");
        assert_eq!(seen.len(), ids.len(), "completions of unknown tasks");

        // The runs table agrees: per task, each run ended before the next one started, and
        // exactly one run completed.
        let mut by_task: HashMap<&str, Vec<&RunRow>> = HashMap::new();
        for r in runs {
            by_task.entry(&r.task).or_default().push(r);
        }
        for (task, mut list) in by_task {
            list.sort_by_key(|r| (r.started_at, r.id));
            for pair in list.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let ended = a.ended_at.unwrap_or_else(|| {
                    panic!("task {task}: run {} is still open after run {}", a.id, b.id)
                });
                assert!(
                    ended <= b.started_at,
                    "task {task}: run {} ({:?}) ran until {ended}, after run {} ({:?}) started \
                     at {}",
                    a.id,
                    a.lock,
                    b.id,
                    b.lock,
                    b.started_at
                );
            }
            let done = list
                .iter()
                .filter(|r| r.outcome.as_deref() == Some("completed"))
                .count();
            assert_eq!(done, 1, "task {task}: {done} completed runs");
        }
        Audit {
            completed_by,
            reclaimed,
            claims,
        }
    }
}

/// Three worker processes, 1,000 tasks, one worker SIGKILLed while it holds claims: the other
/// two take its leases back once they lapse and every task completes exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_one_killed_every_task_completes_once() {
    if !postgres_configured() {
        return;
    }
    const TASKS: usize = 1_000;
    let board = Board::fresh("3s").await;
    let ids = board.seed(TASKS).await;
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|i| board.spawn_worker(&format!("worker-{i}"), 8))
        .collect();
    let victim_pid = workers[0].pid();

    // Kill the first worker once the board is well under way and it holds claims.
    board.wait_for_completions(150, &mut workers).await;
    let mut last_change = Instant::now();
    let mut last_seen = board.completed().await;
    loop {
        if board
            .claims_by_pid()
            .await
            .get(&victim_pid)
            .is_some_and(|n| *n > 0)
        {
            workers[0].kill();
            break;
        }
        let now = board.completed().await;
        assert!(
            now < i64::try_from(TASKS).unwrap(),
            "the board finished before {} held a claim to be killed with",
            workers[0].name
        );
        if now != last_seen {
            last_seen = now;
            last_change = Instant::now();
        }
        assert!(
            last_change.elapsed() < STALL_LIMIT,
            "the board stalled at {now} completions while waiting to kill a worker"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at_kill = board.completed().await;
    let kill_cursor = board.last_event_id().await;

    board
        .wait_for_completions(i64::try_from(TASKS).unwrap(), &mut workers)
        .await;
    let survivors: HashSet<u32> = workers[1..].iter().map(WorkerProcess::pid).collect();
    for w in &mut workers[1..] {
        assert!(
            w.running(),
            "{} should still be running:\n{}",
            w.name,
            w.log_tail()
        );
    }
    let audit = board.audit(&ids).await;

    // The dead worker's leases were taken back, and the survivors finished those tasks.
    let victim_reclaimed: Vec<&(String, String)> = audit
        .reclaimed
        .iter()
        .filter(|(_, lock)| pid_of(lock) == victim_pid)
        .collect();
    assert!(
        !victim_reclaimed.is_empty(),
        "the killed worker held claims, so some lease of pid {victim_pid} must be reclaimed"
    );
    for (task, _) in &victim_reclaimed {
        let (_, by) = &audit.completed_by[task.as_str()];
        assert!(
            survivors.contains(&pid_of(by)),
            "task {task}, taken back from the killed worker, was completed by {by}"
        );
    }
    // Each survivor did part of the work after the kill.
    let finishers: HashSet<u32> = audit
        .completed_by
        .values()
        .filter(|(event, _)| *event > kill_cursor)
        .map(|(_, lock)| pid_of(lock))
        .collect();
    assert_eq!(
        finishers, survivors,
        "both survivors complete tasks after the kill"
    );
    assert!(audit.claims >= TASKS);
    // A live worker starved of CPU may miss a heartbeat and lose a lease too; that is safe (its
    // completion is refused) but worth seeing.
    let others = audit.reclaimed.len() - victim_reclaimed.len();
    eprintln!(
        "multi-host: {TASKS} tasks, {} claims, {} leases reclaimed from the killed worker (killed \
         at {at_kill} completions), {others} from live workers",
        audit.claims,
        victim_reclaimed.len()
    );
}

/// Two workers lose every database connection mid-run, once briefly and once for a three-second
/// outage: they keep running, reconnect, and the board still finishes with every task completed
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_terminated_connections() {
    if !postgres_configured() {
        return;
    }
    const TASKS: usize = 300;
    let board = Board::fresh("5s").await;
    let ids = board.seed(TASKS).await;
    let mut workers: Vec<WorkerProcess> = (0..2)
        .map(|i| board.spawn_worker(&format!("worker-{i}"), 4))
        .collect();

    // First every connection is cut and may come straight back; then the database refuses
    // connections for three seconds, so heartbeats and claims fail until it returns.
    board.wait_for_completions(60, &mut workers).await;
    let mut cut = board.terminate_connections().await;
    board.wait_for_completions(150, &mut workers).await;
    cut += board.outage(Duration::from_secs(3)).await;
    assert!(cut > 0, "the workers had connections to cut");
    let cut_cursor = board.last_event_id().await;
    board
        .wait_for_completions(i64::try_from(TASKS).unwrap(), &mut workers)
        .await;
    for w in &mut workers {
        assert!(
            w.running(),
            "{} ended after losing its connections:\n{}",
            w.name,
            w.log_tail()
        );
    }
    let audit = board.audit(&ids).await;
    // The workers reconnected: both completed tasks after their connections were last cut.
    let finishers: HashSet<u32> = audit
        .completed_by
        .values()
        .filter(|(event, _)| *event > cut_cursor)
        .map(|(_, lock)| pid_of(lock))
        .collect();
    let pids: HashSet<u32> = workers.iter().map(WorkerProcess::pid).collect();
    assert_eq!(finishers, pids, "both workers complete tasks after the cut");
    eprintln!(
        "connection loss: {TASKS} tasks, {} claims, {} connections cut, {} leases reclaimed",
        audit.claims,
        cut,
        audit.reclaimed.len()
    );
}

/// The audit itself must catch what it is there to catch; these feed it made-up histories.
mod audit_checks {
    use super::*;

    const A: &str = "h:10:00000000-0000-0000-0000-00000000000a";
    const B: &str = "h:20:00000000-0000-0000-0000-00000000000b";

    fn run(id: i64, task: &str, lock: &str, span: (i64, Option<i64>), outcome: &str) -> RunRow {
        RunRow {
            id,
            task: task.into(),
            lock: Some(lock.into()),
            started_at: span.0,
            ended_at: span.1,
            outcome: Some(outcome.into()),
        }
    }

    fn event(id: i64, task: &str, run: i64, kind: &str) -> EventRow {
        EventRow {
            id,
            task: task.into(),
            run: Some(run),
            kind: kind.into(),
        }
    }

    fn done(n: i64) -> BTreeMap<String, i64> {
        BTreeMap::from([("done".to_string(), n)])
    }

    fn ids(list: &[&str]) -> HashSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_reclaimed_then_completed_task_passes() {
        let runs = [
            run(1, "t1", A, (0, Some(10)), "reclaimed"),
            run(2, "t1", B, (10, Some(12)), "completed"),
        ];
        let events = [
            event(1, "t1", 1, "claimed"),
            event(2, "t1", 1, "reclaimed"),
            event(3, "t1", 2, "claimed"),
            event(4, "t1", 2, "completed"),
        ];
        let audit = Audit::check(&ids(&["t1"]), &runs, &events, &done(1));
        assert_eq!(audit.claims, 2);
        assert_eq!(audit.reclaimed, vec![("t1".to_string(), A.to_string())]);
        assert_eq!(audit.completed_by["t1"], (4, B.to_string()));
    }

    #[test]
    #[should_panic(expected = "was still open")]
    fn a_second_claim_while_a_run_is_open_is_caught() {
        let runs = [
            run(1, "t1", A, (0, Some(10)), "completed"),
            run(2, "t1", B, (5, Some(6)), "reclaimed"),
        ];
        let events = [
            event(1, "t1", 1, "claimed"),
            event(2, "t1", 2, "claimed"),
            event(3, "t1", 2, "reclaimed"),
            event(4, "t1", 1, "completed"),
        ];
        Audit::check(&ids(&["t1"]), &runs, &events, &done(1));
    }

    #[test]
    #[should_panic(expected = "completed more than once")]
    fn a_double_completion_is_caught() {
        let runs = [run(1, "t1", A, (0, Some(10)), "completed")];
        let events = [
            event(1, "t1", 1, "claimed"),
            event(2, "t1", 1, "completed"),
            event(3, "t1", 1, "completed"),
        ];
        Audit::check(&ids(&["t1"]), &runs, &events, &done(1));
    }

    #[test]
    #[should_panic(expected = "after run")]
    fn overlapping_runs_in_the_runs_table_are_caught() {
        let runs = [
            run(1, "t1", A, (0, Some(10)), "reclaimed"),
            run(2, "t1", B, (5, Some(12)), "completed"),
        ];
        let events = [
            event(1, "t1", 1, "claimed"),
            event(2, "t1", 1, "reclaimed"),
            event(3, "t1", 2, "claimed"),
            event(4, "t1", 2, "completed"),
        ];
        Audit::check(&ids(&["t1"]), &runs, &events, &done(1));
    }

    #[test]
    #[should_panic(expected = "never completed")]
    fn a_lost_task_is_caught() {
        let runs = [run(1, "t1", A, (0, Some(10)), "completed")];
        let events = [event(1, "t1", 1, "claimed"), event(2, "t1", 1, "completed")];
        Audit::check(&ids(&["t1", "t2"]), &runs, &events, &done(2));
    }
}
