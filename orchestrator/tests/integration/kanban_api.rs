//! The kanban Rust API on a running `Troupe` (a fan-out of 20 children and a final task through
//! a dispatcher and scripted workers, checked from the event log), the `troupe kanban worker`
//! process stopping cleanly on SIGTERM (handing a running task back to the board), and two
//! worker processes sharing one PostgreSQL board.
//! The PostgreSQL test needs `TROUPE_TEST_POSTGRES_URL` (see `scripts/start-test-postgres.sh`);
//! without it, it prints a loud skip unless `TROUPE_REQUIRE_POSTGRES=1` makes that a failure.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use troupe::kanban_api::Kanban;
use troupe::settings::kanban::StoreLocation;
use troupe::{Troupe, TroupeConfig};
use troupe_actors::model::{Script, ScriptedProvider};
use troupe_kanban::dispatcher::DispatcherConfig;
use troupe_kanban::domain::{BoardSlug, EventId, EventKind, NewTask, TaskFilter, TaskStatus};
use troupe_kanban::profiles::{Profiles, WorkerProfile};
use troupe_kanban::store::test_cluster;
use troupe_tools::Registry;

const COMPLETING_SCRIPT: &str = "cursor: conversation\nturns:\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: \"done by the script\"}\n  - text: \"Finished.\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_through_the_rust_api() {
    let dir = tempfile::tempdir().unwrap();
    let kanban = Kanban::open_at(StoreLocation::Sqlite(dir.path().to_path_buf()))
        .await
        .unwrap();
    let troupe = Troupe::start(TroupeConfig::new(Registry::new())).unwrap();
    let board = BoardSlug::default_board();

    let root = kanban
        .create_task(&board, &NewTask::new("plan"))
        .await
        .unwrap()
        .task;
    let mut children = Vec::new();
    for i in 0..20 {
        let child = NewTask::new(format!("part {i}")).with_parent(root.id.clone());
        children.push(kanban.create_task(&board, &child).await.unwrap().task.id);
    }
    let mut last = NewTask::new("combine");
    for id in &children {
        last = last.with_parent(id.clone());
    }
    let last = kanban.create_task(&board, &last).await.unwrap().task;
    assert_eq!(last.status, TaskStatus::Todo);

    let script = Script::from_yaml_str(COMPLETING_SCRIPT).unwrap();
    let profile = WorkerProfile::new(
        "coder",
        Arc::new(ScriptedProvider::new(script)),
        Registry::new().view_all(),
    );
    let profiles = Profiles::new()
        .with_profile(profile)
        .with_default_assignee("coder");
    let config = DispatcherConfig::default()
        .with_max_in_progress(8)
        .with_poll_interval(Duration::from_millis(20));
    let dispatcher = kanban
        .start_dispatcher(&troupe, board.clone(), profiles, config)
        .await
        .unwrap();
    dispatcher.dispatch_once(None, false).await.unwrap();
    dispatcher.wait_idle().await.unwrap();
    dispatcher.stop().await;

    let tasks = kanban.list(&board, &TaskFilter::default()).await.unwrap();
    assert_eq!(tasks.len(), 22);
    assert!(tasks.iter().all(|t| t.status == TaskStatus::Done));

    // From the event log: every task completed exactly once, the combining task after every part.
    let mut feed = kanban.watch(board.clone(), EventId::START);
    let mut completed: HashMap<String, Vec<i64>> = HashMap::new();
    while let Some(event) = feed.try_next().await.unwrap() {
        if event.kind == EventKind::Completed {
            let id = event.task_id.unwrap().to_string();
            completed.entry(id).or_default().push(event.id.0);
        }
    }
    assert_eq!(completed.len(), 22);
    assert!(completed.values().all(|ids| ids.len() == 1));
    let last_done = completed[&last.id.to_string()][0];
    for id in &children {
        assert!(completed[&id.to_string()][0] < last_done);
    }
    assert!(completed[&root.id.to_string()][0] < completed[&children[0].to_string()][0]);
    troupe.close().await;
}

fn write_profile(dir: &Path) {
    std::fs::write(dir.join("coder.yaml"), COMPLETING_SCRIPT).unwrap();
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {}\n",
            dir.join("coder.yaml").display()
        ),
    )
    .unwrap();
}

fn troupe(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.current_dir(dir).env("TROUPE_HOME", dir.join("home"));
    for var in [
        "TROUPE_BASE_URL",
        "OPENAI_BASE_URL",
        "TROUPE_KANBAN_BOARD",
        "TROUPE_KANBAN_STORE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn worker_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    write_profile(dir.path());
    let mut child = troupe(dir.path())
        .args(["kanban", "--store", "store", "worker"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Wait for the banner: the dispatcher is up.
    let banner = lines.next().unwrap().unwrap();
    assert!(banner.contains("SIGINT or SIGTERM stops it"), "{banner}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}: {rest:?}");
    assert!(rest.iter().any(|l| l.starts_with("stopping")), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.starts_with("worker done")),
        "{rest:?}"
    );
}

#[test]
fn sigterm_hands_a_running_task_back_to_the_board() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow.yaml"),
        "cursor: conversation\nturns:\n  - tool_calls:\n      - name: terminal\n        arguments: {command: \"sleep 60\"}\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: slept}\n  - text: Finished.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: slow\nprofiles:\n  slow:\n    script: {}\n    toolsets: [core]\n",
            dir.path().join("slow.yaml").display()
        ),
    )
    .unwrap();
    let created = troupe(dir.path())
        .args(["kanban", "--store", "store", "create", "nap", "--json"])
        .output()
        .unwrap();
    let task: Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = task["task"]["id"].as_str().unwrap().to_string();
    let mut child = troupe(dir.path())
        .args(["kanban", "--store", "store", "worker"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Wait until the worker has started the task, then ask the process to stop.
    loop {
        let line = lines.next().unwrap().unwrap();
        if line.contains(&id) && line.contains("started") {
            break;
        }
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success(), "{rest:?}");
    let shown = troupe(dir.path())
        .args(["kanban", "--store", "store", "show", &id, "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        shown["task"]["status"], "ready",
        "handed back for another worker"
    );
    assert!(shown["task"]["lease"].is_null());
    assert_eq!(shown["runs"][0]["outcome"], "reclaimed");
    assert_eq!(
        shown["task"]["consecutive_failures"], 0,
        "a handed-back run is not a failure"
    );
}

fn postgres_url() -> Option<String> {
    test_cluster::cluster_url("kanban API on PostgreSQL")
}

#[test]
fn two_worker_processes_share_a_postgres_board() {
    let Some(url) = postgres_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    write_profile(dir.path());
    // A board of its own, so runs of this test never meet.
    let slug = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let slug = &slug[..20];
    let run = |args: &[&str]| {
        let out = troupe(dir.path())
            .args(["kanban", "--store", &url, "--board", slug])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let out = troupe(dir.path())
        .args(["kanban", "--store", &url, "boards", "create", slug])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..40 {
        run(&["create", &format!("job {i}")]);
    }
    let workers: Vec<_> = (0..2)
        .map(|_| {
            troupe(dir.path())
                .args(["kanban", "--store", &url, "--board", slug])
                .args(["worker", "--max", "4", "--until-idle"])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut claimed = 0;
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("worker done: "))
            .unwrap();
        let n: u32 = line["worker done: ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        claimed += n;
    }
    assert_eq!(claimed, 40, "every task claimed once across both processes");
    let stats: Value = serde_json::from_str(&run(&["stats", "--json"])).unwrap();
    assert_eq!(stats["counts"]["done"], 40);
    let events = run(&[
        "watch",
        "--since",
        "0",
        "--once",
        "--json",
        "--kinds",
        "completed",
    ]);
    let mut per_task: HashMap<String, u32> = HashMap::new();
    for line in events.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        *per_task
            .entry(v["task_id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(per_task.len(), 40);
    assert!(per_task.values().all(|n| *n == 1), "{per_task:?}");
}

/// An event feed on PostgreSQL wakes on `NOTIFY`: with the safety poll set to an hour, events
/// written by another connection still arrive, each once and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_feed_wakes_on_notices_and_never_skips_or_repeats() {
    let Some(url) = postgres_url() else { return };
    let location = StoreLocation::parse(&url).unwrap();
    let reader = Kanban::open_at(location.clone()).await.unwrap();
    let writer = Kanban::open_at(location).await.unwrap();
    let slug = format!("feed-{}", uuid::Uuid::new_v4().simple());
    let board = BoardSlug::parse(&slug[..20]).unwrap();
    writer
        .create_board(&troupe_kanban::domain::NewBoard::new(board.clone()))
        .await
        .unwrap();
    let task = writer
        .create_task(&board, &NewTask::new("talked about"))
        .await
        .unwrap()
        .task;
    let start = reader.stats(&board).await.unwrap().last_event_id;
    let feed = reader
        .watch(board.clone(), start)
        .with_safety_poll_interval(Duration::from_secs(3600));
    assert!(feed.wakes_on_notices());

    // The writer comments once, then waits for the reader to report it before the next, so
    // the reader has caught up and is waiting each time: only a notice can wake it. Until the
    // listener is up a notice can be missed, so a comment not seen within a second is followed
    // by another.
    const WANTED: usize = 30;
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let reading = tokio::spawn(async move {
        let mut feed = feed;
        let mut seen = Vec::new();
        while seen.len() < WANTED {
            seen.push(feed.next().await.unwrap());
            let _ = seen_tx.send(());
        }
        (seen, feed.cursor())
    });
    let mut acked = 0;
    let mut written = 0;
    'writing: while acked < WANTED {
        writer
            .comment(&board, &task.id, "writer", &format!("note {written}"))
            .await
            .unwrap();
        written += 1;
        // A few nudges cover the listener's start; more mean notices do not wake the feed.
        assert!(
            written <= WANTED + 20,
            "the feed stopped waking up on notices"
        );
        while acked < written {
            match tokio::time::timeout(Duration::from_secs(1), seen_rx.recv()).await {
                Ok(Some(())) => acked += 1,
                // The reader finished (or failed: its result says which).
                Ok(None) => break 'writing,
                // Not seen yet: write another comment.
                Err(_) => break,
            }
        }
    }
    let (seen, cursor) = reading.await.unwrap();
    assert!(seen.iter().all(|e| e.kind == EventKind::Commented));
    assert!(
        seen.windows(2).all(|w| w[0].id < w[1].id),
        "in order, no repeats"
    );
    assert_eq!(seen.last().map(|e| e.id), Some(cursor));
    // Nothing skipped: the events the feed returned are exactly the first WANTED in the log.
    let log = reader.events_since(&board, start, WANTED).await.unwrap();
    let log_ids: Vec<_> = log.iter().map(|e| e.id).collect();
    let seen_ids: Vec<_> = seen.iter().map(|e| e.id).collect();
    assert_eq!(seen_ids, log_ids);
    writer.remove_board(&board, true).await.unwrap();
}
