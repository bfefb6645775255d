//! The shared store suite run against [`SqliteStore`], plus what only files and processes can
//! show: WAL and the schema version on disk, two processes racing for claims, and a process
//! killed with SIGKILL in the middle of a claim transaction.
//!
//! Child processes are this test binary run again with
//! `--ignored --exact sqlite_store::child_process` and an environment variable saying what to do.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failed step must fail the test"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_kanban::domain::{BoardSlug, NewTask, TaskFilter, TaskStatus, WorkerId};
use troupe_kanban::store::suite::{SuiteBackend, assert_consistent};
use troupe_kanban::store::{ClaimSpec, Completion, SqliteStore, Store, StoreFuture};

/// A temporary root directory; every `open` is a new handle with its own connections.
struct SqliteBackend {
    dir: tempfile::TempDir,
}

impl SuiteBackend for SqliteBackend {
    fn open(&self) -> StoreFuture<'_, Arc<dyn Store>> {
        let root = self.dir.path().to_path_buf();
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(SqliteStore::open(root).await?);
            Ok(store)
        })
    }
}

async fn fresh() -> SqliteBackend {
    SqliteBackend {
        dir: tempfile::tempdir().unwrap(),
    }
}

troupe_kanban::store_suite!(fresh);

const CHILD_MODE: &str = "TROUPE_KANBAN_TEST_CHILD";
const CHILD_ROOT: &str = "TROUPE_KANBAN_TEST_ROOT";
const CHILD_FLAG: &str = "TROUPE_KANBAN_TEST_FLAG";

fn board() -> BoardSlug {
    BoardSlug::default_board()
}

/// Runs this binary again as a child doing `mode` on the store at `root`.
fn spawn_child(mode: &str, root: &Path, flag: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "sqlite_store::child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_MODE, mode)
        .env(CHILD_ROOT, root)
        .env(CHILD_FLAG, flag)
        .spawn()
        .unwrap()
}

/// Waits until the child has created `flag` (it has reached the point to kill it at).
fn wait_for(flag: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !flag.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited with {status} before reaching its point");
        }
        assert!(Instant::now() < deadline, "child never reached its point");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child side: not a test on its own (ignored), run only by the tests below.
#[test]
#[ignore = "run by the crash and race tests as a child process"]
fn child_process() {
    let mode = std::env::var(CHILD_MODE).unwrap();
    let root = PathBuf::from(std::env::var(CHILD_ROOT).unwrap());
    let flag = PathBuf::from(std::env::var(CHILD_FLAG).unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(SqliteStore::open(&root)).unwrap();
    match mode.as_str() {
        // Holds a half-done claim open until killed.
        "stall" => {
            store
                .stall_inside_claim(&board(), WorkerId::local(), &flag)
                .unwrap();
            panic!("nothing was ready to claim");
        }
        // Claims and completes in a loop until killed.
        "churn" => rt.block_on(async {
            let spec = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::from_secs(3600));
            let mut n = 0;
            while let Some(claim) = store.claim_next(&board(), &spec).await.unwrap() {
                n += 1;
                if n == 5 {
                    std::fs::write(&flag, b"churning").unwrap();
                }
                if n % 2 == 0 {
                    let done = Completion {
                        worker: Some(spec.worker.clone()),
                        ..Completion::default()
                    };
                    store
                        .complete(&board(), &claim.task.id, &done)
                        .await
                        .unwrap();
                }
            }
            panic!("ran out of tasks before being killed");
        }),
        // Claims until nothing is left, writing each claimed id to the flag file.
        "race" => rt.block_on(async {
            let spec = ClaimSpec::new(WorkerId::local()).with_ttl(Duration::from_secs(3600));
            let mut ids = Vec::new();
            loop {
                match store.claim_next(&board(), &spec).await {
                    Ok(Some(c)) => ids.push(c.task.id.to_string()),
                    Ok(None) => break,
                    Err(e) if e.is_transient() => continue,
                    Err(e) => panic!("{e}"),
                }
            }
            std::fs::write(&flag, ids.join("\n")).unwrap();
        }),
        other => panic!("unknown child mode {other}"),
    }
}

async fn seed(root: &Path, n: usize) -> SqliteStore {
    let store = SqliteStore::open(root).await.unwrap();
    for i in 0..n {
        store
            .create_task(&board(), &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
    }
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_inside_a_claim_leaves_no_half_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = seed(dir.path(), 3).await;
    let before = store.stats(&board()).await.unwrap();
    let flag = dir.path().join("stalled");
    let mut child = spawn_child("stall", dir.path(), &flag);
    wait_for(&flag, &mut child);
    child.kill().unwrap(); // SIGKILL, with the claim's rows written but not committed
    child.wait().unwrap();

    let reopened = SqliteStore::open(dir.path()).await.unwrap();
    let after = reopened.stats(&board()).await.unwrap();
    assert_eq!(after, before, "the killed claim left nothing behind");
    assert_eq!(after.count(TaskStatus::Ready), 3);
    assert_consistent(&reopened, &board()).await;
    let claim = reopened
        .claim_next(&board(), &ClaimSpec::new(WorkerId::local()))
        .await
        .unwrap();
    assert!(
        claim.is_some(),
        "the board still takes claims after the kill"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_after_killing_a_busy_claimer() {
    let dir = tempfile::tempdir().unwrap();
    let store = seed(dir.path(), 3000).await;
    let flag = dir.path().join("churning");
    let mut child = spawn_child("churn", dir.path(), &flag);
    wait_for(&flag, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    drop(store);

    let reopened = SqliteStore::open(dir.path()).await.unwrap();
    assert_consistent(&reopened, &board()).await;
    let stats = reopened.stats(&board()).await.unwrap();
    let total: u64 = stats.by_status.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 3000);
    assert!(stats.count(TaskStatus::Running) + stats.count(TaskStatus::Done) >= 5);
    // Everything left is claimable, and each claim succeeds once.
    let spec = ClaimSpec::new(WorkerId::local());
    let mut n = 0;
    while reopened
        .claim_next(&board(), &spec)
        .await
        .unwrap()
        .is_some()
    {
        n += 1;
    }
    assert_eq!(n, stats.count(TaskStatus::Ready));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_claim_each_task_once() {
    const TASKS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let store = seed(dir.path(), TASKS).await;
    let flags: Vec<PathBuf> = (0..2)
        .map(|i| dir.path().join(format!("claimed-{i}")))
        .collect();
    let children: Vec<Child> = flags
        .iter()
        .map(|f| spawn_child("race", dir.path(), f))
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut all = Vec::new();
    for f in &flags {
        let text = std::fs::read_to_string(f).unwrap();
        all.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), TASKS, "no task claimed twice, none missed");
    assert_eq!(unique.len(), TASKS);
    assert_consistent(&store, &board()).await;
}

#[tokio::test]
async fn boards_are_wal_files_with_a_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).await.unwrap();
    store
        .create_task(&board(), &NewTask::new("x"))
        .await
        .unwrap();
    let path = dir.path().join("boards/default/kanban.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!((mode.as_str(), version), ("wal", 4));
    drop(conn);
    // Opening again migrates nothing and loses nothing.
    let again = SqliteStore::open(dir.path()).await.unwrap();
    assert_eq!(
        again
            .list_tasks(&board(), &TaskFilter::default())
            .await
            .unwrap()
            .len(),
        1
    );

    let newer = rusqlite::Connection::open(&path).unwrap();
    newer.execute_batch("PRAGMA user_version = 99").unwrap();
    drop(newer);
    let err = SqliteStore::open(dir.path()).await.unwrap_err();
    assert!(err.to_string().contains("newer"), "{err}");
}

#[tokio::test]
async fn switching_boards_is_remembered_until_the_board_goes() {
    use troupe_kanban::domain::NewBoard;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).await.unwrap();
    assert_eq!(store.current_board().await.unwrap(), board());
    let research = BoardSlug::parse("research").unwrap();
    let missing = BoardSlug::parse("missing").unwrap();
    assert!(store.switch_board(&missing).await.is_err());
    store
        .create_board(&NewBoard::new(research.clone()))
        .await
        .unwrap();
    store.switch_board(&research).await.unwrap();
    let other_handle = SqliteStore::open(dir.path()).await.unwrap();
    assert_eq!(other_handle.current_board().await.unwrap(), research);
    store.archive_board(&research).await.unwrap();
    assert_eq!(store.current_board().await.unwrap(), board());
    assert!(store.switch_board(&research).await.is_err());
}

#[tokio::test]
async fn a_job_whose_parent_task_is_gone_pauses_and_the_other_jobs_fire() {
    use troupe_kanban::schedule::sweep::sweep;
    use troupe_kanban::schedule::{FireKind, JobAction, Missed, NewJob};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).await.unwrap();
    let parent = store
        .create_task(&board(), &NewTask::new("parent"))
        .await
        .unwrap()
        .task
        .id;
    let job = |name: &str, parents: Vec<_>| NewJob {
        name: name.into(),
        owner: "test".into(),
        schedule: "every 1s".into(),
        timezone: None,
        action: JobAction::Task {
            title: format!("made by {name}"),
            body: String::new(),
            assignee: None,
            parents,
        },
        missed: Missed::Skip,
        until: None,
        max_runs: None,
        paused: false,
    };
    let orphan = store
        .create_job(&board(), &job("orphan", vec![parent.clone()]))
        .await
        .unwrap();
    store
        .create_job(&board(), &job("healthy", Vec::new()))
        .await
        .unwrap();
    // The parent goes from under the job (no interface erases a task; a hand-edited file can).
    let conn = rusqlite::Connection::open(dir.path().join("boards/default/kanban.db")).unwrap();
    conn.execute_batch(&format!(
        "DELETE FROM task_events WHERE task_id = '{parent}'; DELETE FROM tasks WHERE id = '{parent}';"
    ))
    .unwrap();
    drop(conn);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let report = sweep(&store, &board()).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let paused = store.job(&board(), &orphan.id).await.unwrap();
    assert_eq!(paused.state(), "paused");
    let history = store.job_history(&board(), &orphan.id, 10).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].kind, FireKind::Skipped);
    let made = store
        .list_tasks(&board(), &TaskFilter::default())
        .await
        .unwrap();
    assert!(
        made.iter().any(|t| t.title == "made by healthy"),
        "the other job still fired: {made:?}"
    );
}
