//! Schedules on a PostgreSQL board, with real processes: three `troupe kanban worker`
//! processes sweep one job due every second while one of them is SIGKILLed half-way, and every
//! due time gets exactly one task; then an outage of every worker, after which a `run_once` job
//! makes exactly one catch-up run and a `skip` job none. Jobs are made and paused with
//! `troupe cron`; the tables are read back directly.
//!
//! Needs the test cluster (`TROUPE_TEST_POSTGRES_URL`, see `kanban_multihost.rs`); without it
//! each test prints a loud skip, unless `TROUPE_REQUIRE_POSTGRES=1`.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use troupe_kanban::store::test_cluster::{self, connect};

const PROFILE: &str = "scripted";

/// Each worker session completes its task at once.
const SCRIPT: &str = r#"when_exhausted: "Finished."
turns:
  - tool_calls:
      - name: kanban_complete
        arguments: {summary: "scheduled work done", result: "ok"}
  - text: "Finished."
"#;

struct Setup {
    url: String,
    dir: tempfile::TempDir,
    admin: tokio_postgres::Client,
}

async fn setup() -> Option<Setup> {
    let cluster_url = test_cluster::cluster_url("schedules multi-host test")?;
    let db = test_cluster::fresh_database(&cluster_url, "troupe_schedules").await;
    let admin = connect(&db.config).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("worker-script.yaml"), SCRIPT).unwrap();
    let yaml = format!(
        "kanban:\n  store: {}\n  default_assignee: {PROFILE}\n  lease_ttl: 5s\n  dispatch_interval: 1s\n\
         profiles:\n  {PROFILE}:\n    script: {}\n",
        db.url,
        dir.path().join("worker-script.yaml").display()
    );
    std::fs::write(dir.path().join("troupe.yaml"), yaml).unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    Some(Setup {
        url: db.url,
        dir,
        admin,
    })
}

impl Setup {
    fn troupe(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_troupe"));
        c.current_dir(self.dir.path())
            .env("TROUPE_HOME", self.dir.path().join("home"))
            .env("TROUPE_KANBAN_STORE", &self.url)
            .stdin(Stdio::null());
        c
    }

    /// `troupe cron ARGS`, which must succeed; its stdout.
    fn cron(&self, args: &[&str]) -> String {
        let out = self.troupe().arg("cron").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "troupe cron {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn job_id(&self, name: &str) -> String {
        let list: serde_json::Value =
            serde_json::from_str(&self.cron(&["list", "--json"])).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .and_then(|j| j["id"].as_str())
            .unwrap()
            .to_string()
    }

    fn worker(&self, name: &str) -> Worker {
        let log = self.dir.path().join(format!("{name}.log"));
        let out = File::create(&log).unwrap();
        let mut c = self.troupe();
        c.args(["kanban", "worker", "--max", "4"])
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0);
        // SAFETY: one prctl call between fork and exec, async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        Worker {
            child: c.spawn().unwrap(),
            killed: false,
        }
    }

    /// Each recorded run of a job: (due_at, kind, task_id).
    async fn runs(&self, job: &str) -> Vec<(i64, String, Option<String>)> {
        self.admin
            .query(
                "SELECT due_at, kind, task_id FROM kanban_schedule_runs WHERE board = 'default' \
                 AND job_id = $1 ORDER BY due_at",
                &[&job],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// The tasks a job made: (id, status).
    async fn tasks(&self, job: &str) -> Vec<(String, String)> {
        self.admin
            .query(
                "SELECT id, status FROM kanban_tasks WHERE board = 'default' AND created_by = $1",
                &[&format!("schedule:{job}")],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    /// Waits until every task of `job` is done (the scripted workers complete them).
    async fn wait_done(&self, job: &str) {
        for _ in 0..600 {
            if self.tasks(job).await.iter().all(|(_, s)| s == "done") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the tasks of {job} were not all done in a minute: {:?}",
            self.tasks(job).await
        );
    }
}

struct Worker {
    child: Child,
    killed: bool,
}

impl Worker {
    fn kill(&mut self) {
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
        self.killed = true;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.killed {
            self.kill();
        }
    }
}

fn log_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

/// Checks a job's runs and tasks: one task per run that made one, each task made by one run,
/// and due times one second apart with none missing between the first and the last.
fn assert_each_due_time_once(runs: &[(i64, String, Option<String>)], tasks: &[(String, String)]) {
    let made: Vec<&String> = runs.iter().filter_map(|r| r.2.as_ref()).collect();
    let unique: HashSet<&String> = made.iter().copied().collect();
    assert_eq!(
        unique.len(),
        made.len(),
        "a task stands for two runs: {runs:?}"
    );
    let ids: HashSet<&String> = tasks.iter().map(|t| &t.0).collect();
    assert_eq!(ids.len(), made.len(), "tasks {tasks:?} vs runs {runs:?}");
    assert!(
        made.iter().all(|t| ids.contains(t)),
        "a run names a task that is not there"
    );
    let dues: Vec<i64> = runs.iter().map(|r| r.0).collect();
    assert!(dues.windows(2).all(|w| w[1] > w[0]), "{dues:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_fire_each_second_once_with_one_killed() {
    let Some(s) = setup().await else { return };
    s.cron(&[
        "create",
        "--name",
        "tick",
        "--schedule",
        "every 1s",
        "--title",
        "tick",
        "--assignee",
        PROFILE,
    ]);
    let job = s.job_id("tick");
    let mut workers = vec![s.worker("w0"), s.worker("w1"), s.worker("w2")];
    // 20 s of due times (shortened from 30 s to keep the suite's time; a kill half-way still
    // lands while sweeps on the other two go on).
    tokio::time::sleep(Duration::from_secs(10)).await;
    workers[1].kill();
    tokio::time::sleep(Duration::from_secs(10)).await;
    s.cron(&["pause", "tick"]);
    s.wait_done(&job).await;
    let runs = s.runs(&job).await;
    let tasks = s.tasks(&job).await;
    assert!(
        runs.len() >= 15,
        "a run each second for 20 s: {} runs\n{}",
        runs.len(),
        log_of(s.dir.path(), "w0")
    );
    assert_each_due_time_once(&runs, &tasks);
    // Every due time from the first to the last, each once, all on time.
    let dues: Vec<i64> = runs.iter().map(|r| r.0).collect();
    assert!(
        dues.windows(2).all(|w| w[1] - w[0] == 1000),
        "a due time was skipped or doubled: {dues:?}"
    );
    assert!(runs.iter().all(|r| r.1 == "on_time"), "{runs:?}");
    // The history as `troupe cron history` shows it: every run's task done.
    let history: serde_json::Value =
        serde_json::from_str(&s.cron(&["history", "tick", "--json", "--limit", "1000"])).unwrap();
    let history = history.as_array().unwrap();
    assert_eq!(history.len(), runs.len());
    assert!(
        history.iter().all(|r| r["outcome"] == "done"),
        "{history:?}"
    );
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_run_once_catches_up_once_and_skip_makes_nothing() {
    let Some(s) = setup().await else { return };
    s.cron(&[
        "create",
        "--name",
        "catchup",
        "--schedule",
        "every 1s",
        "--title",
        "c",
        "--assignee",
        PROFILE,
        "--missed",
        "run_once",
    ]);
    s.cron(&[
        "create",
        "--name",
        "skipper",
        "--schedule",
        "every 1s",
        "--title",
        "s",
        "--assignee",
        PROFILE,
        "--missed",
        "skip",
    ]);
    let (catchup, skipper) = (s.job_id("catchup"), s.job_id("skipper"));
    let mut first = s.worker("before");
    tokio::time::sleep(Duration::from_secs(4)).await;
    first.kill();
    // The outage: nothing runs for 10 s.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let second = s.worker("after");
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.cron(&["pause", "catchup"]);
    s.cron(&["pause", "skipper"]);
    s.wait_done(&catchup).await;
    s.wait_done(&skipper).await;
    drop(second);

    let runs = s.runs(&catchup).await;
    let kinds: Vec<&str> = runs.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "catch_up").count(),
        1,
        "one catch-up: {runs:?}"
    );
    assert!(
        kinds.iter().filter(|k| **k == "on_time").count() >= 4,
        "{runs:?}"
    );
    assert_each_due_time_once(&runs, &s.tasks(&catchup).await);
    let covers: i64 = s
        .admin
        .query_one(
            "SELECT covers FROM kanban_schedule_runs WHERE board = 'default' AND job_id = $1 AND kind = 'catch_up'",
            &[&catchup],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        covers >= 8,
        "the catch-up stands for the ~10 missed seconds: {covers}"
    );

    let runs = s.runs(&skipper).await;
    let skipped: Vec<_> = runs.iter().filter(|r| r.1 == "skipped").collect();
    assert_eq!(skipped.len(), 1, "{runs:?}");
    assert_eq!(skipped[0].2, None, "a skip makes no task");
    assert_eq!(runs.iter().filter(|r| r.1 == "catch_up").count(), 0);
    let tasks = s.tasks(&skipper).await;
    assert_eq!(
        tasks.len(),
        runs.iter().filter(|r| r.1 == "on_time").count(),
        "no task for the outage"
    );
    assert_each_due_time_once(&runs, &tasks);
}
