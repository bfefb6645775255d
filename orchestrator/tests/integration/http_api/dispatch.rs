//! Dispatching over HTTP: the board's in-process dispatcher run by a route, and the `troupe
//! serve` binary with scripted profiles running a posted task to `done`, stopping a
//! terminated run's worker, and claiming nothing under `--no-dispatch`.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use troupe::http::HttpState;
use troupe::tools::Registry;
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::{BoardSlug, NewTask, SqliteStore, Store};

use super::server::TOKEN;
use crate::support::serve::{Served, TroupeDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_runs_the_boards_in_process_dispatcher() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let board = BoardSlug::default_board();
    let dispatcher = troupe::kanban_api::Kanban::new(Arc::clone(&store))
        .start_dispatcher(
            &troupe,
            board.clone(),
            troupe_kanban::Profiles::new(),
            troupe_kanban::DispatcherConfig::default().with_auto_dispatch(false),
        )
        .await
        .unwrap();
    let state = HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
        .await
        .unwrap()
        .with_dispatcher(Arc::new(troupe::http::DispatcherPass::new(
            vec![dispatcher.clone()],
            Arc::clone(&store),
        )));
    let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let task = store
        .create_task(&board, &NewTask::new("nobody is assigned"))
        .await
        .unwrap()
        .task;
    let report: Value = client
        .post(format!(
            "http://{}/api/plugins/kanban/dispatch?dry_run=true&max=3",
            server.local_addr()
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(report["dispatcher"], "local", "{report}");
    assert!(
        report["skipped_unassigned"]
            .as_array()
            .unwrap()
            .iter()
            .any(|id| id == task.id.as_str()),
        "{report}"
    );
    dispatcher.stop().await;
    server.shutdown().await.unwrap();
    troupe.close().await;
}

/// A script that completes its task at once.
const COMPLETING_SCRIPT: &str = "cursor: conversation\nturns:\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: \"finished by the script\"}\n  - text: \"Done.\"\n";

/// A script whose first tool call runs for a minute, so its run can be terminated midway.
const SLOW_SCRIPT: &str = "cursor: conversation\nturns:\n  - tool_calls:\n      - name: terminal\n        arguments: {command: \"sleep 60\"}\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: slept}\n  - text: Finished.\n";

/// troupe.yaml for a board with the scripted profile `coder` (its script at `coder.yaml` in the
/// workspace) as the default assignee; `toolsets` are the profile's.
fn profile_yaml(toolsets: &str) -> String {
    format!(
        "kanban:\n  store: {{{{STORE}}}}\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {{{{DIR}}}}/coder.yaml\n    toolsets: {toolsets}\n"
    )
}

/// `troupe serve` in a workspace with troupe.yaml `yaml` and `script` as the profile `coder`'s,
/// once it has said what dispatches its board.
async fn serve_profiles(yaml: &str, script: &str, extra: &[&str]) -> (TroupeDir, Served) {
    let dir = TroupeDir::new(yaml, "turns:\n  - text: the default model is not asked\n").await;
    std::fs::write(dir.path().join("coder.yaml"), script).unwrap();
    let served = Served::start(&dir, extra).await;
    served
        .wait_for_line_where("a dispatch line", |l| l.contains("dispatch"))
        .await;
    (dir, served)
}

/// Reads the task over the API until `done(task)` holds; gives up (failing the test) after a
/// minute, so a broken dispatcher cannot hang the suite.
async fn wait_for(served: &Served, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..1200 {
        let (status, shown) = served
            .call(
                Method::GET,
                &format!("/api/plugins/kanban/tasks/{id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{shown}");
        if done(&shown) {
            return shown;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never got {what}");
}

/// Whether some line `served` wrote so far contains `needle`.
fn said(served: &Served, needle: &str) -> bool {
    served.log().iter().any(|l| l.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_profiles_runs_a_posted_task_to_done() {
    let (_dir, server) = serve_profiles(&profile_yaml("[]"), COMPLETING_SCRIPT, &[]).await;
    assert!(
        said(&server, "dispatching board default with profiles coder"),
        "{:?}",
        server.log()
    );
    let tasks = "/api/plugins/kanban/tasks";
    let (status, created) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "write the summary", "assignee": "coder"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["id"].as_str().unwrap().to_string();
    // A task for a profile this server does not have is reported as skipped, not claimed.
    let (_, stranger) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "for someone else", "assignee": "reviewer"})),
        )
        .await;
    let stranger_id = stranger["task"]["id"].as_str().unwrap().to_string();

    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["dispatcher"], "local", "{report}");
    assert_eq!(report["dry_run"], false, "{report}");
    assert!(
        report["skipped_nonspawnable"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == stranger_id.as_str() && pair[1] == "reviewer"),
        "{report}"
    );
    // The dispatcher also runs rounds on its own, so this round or an earlier one claimed it.
    let claimed_here = report["claimed"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["task_id"] == id.as_str() && c["assignee"] == "coder");
    let shown = wait_for(&server, &id, "done", |shown| {
        shown["task"]["status"] == "done"
    })
    .await;
    let runs = shown["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "claimed once: {shown}");
    assert_eq!(runs[0]["outcome"], "completed", "{shown}");
    assert_eq!(runs[0]["summary"], "finished by the script", "{shown}");
    if claimed_here {
        assert_eq!(
            report["claimed"][0]["run_id"], runs[0]["id"],
            "{report} {shown}"
        );
    }
    // The stranger's task is still waiting.
    let (_, other) = server
        .call(Method::GET, &format!("{tasks}/{stranger_id}"), None)
        .await;
    assert_eq!(other["task"]["status"], "ready", "{other}");
    let rest = server.stop().await;
    assert!(
        rest.iter()
            .any(|l| l.contains("dispatcher stopped: 1 claimed, 1 completed")),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_a_run_stops_the_local_worker() {
    let (_dir, server) = serve_profiles(&profile_yaml("[core]"), SLOW_SCRIPT, &[]).await;
    let (status, created) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/tasks",
            Some(json!({"title": "nap"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(status, 200, "{report}");
    let running = wait_for(&server, &id, "running", |shown| {
        shown["task"]["status"] == "running"
    })
    .await;
    let run_id = running["task"]["lease"]["run_id"].as_i64().unwrap();
    let (status, ended) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{ended}");
    assert_eq!(ended["worker"], "stopped", "{ended}");
    assert_eq!(ended["task"]["status"], "blocked", "{ended}");
    assert_eq!(ended["ended_lease"]["run_id"], run_id, "{ended}");
    assert_eq!(ended["run"]["outcome"], "blocked", "{ended}");
    // The run stays ended; the worker did not come back to finish it.
    let shown = wait_for(&server, &id, "blocked", |shown| {
        shown["task"]["status"] == "blocked"
    })
    .await;
    assert!(shown["task"]["lease"].is_null(), "{shown}");
    assert_eq!(shown["runs"].as_array().unwrap().len(), 1, "{shown}");
    // Terminating it again is refused: nothing is open.
    let (status, again) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, 409, "{again}");
    let rest = server.stop().await;
    assert!(
        rest.iter()
            .any(|l| l.contains("dispatcher stopped: 1 claimed")),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_dispatch_leaves_tasks_to_workers() {
    // Profiles, but --no-dispatch: nothing is claimed and the report says why.
    let yaml = "kanban:\n  store: {{STORE}}\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {{DIR}}/coder.yaml\n";
    let (_dir, server) = serve_profiles(yaml, COMPLETING_SCRIPT, &["--no-dispatch"]).await;
    assert!(said(&server, "--no-dispatch"), "{:?}", server.log());
    let (_, created) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/tasks",
            Some(json!({"title": "wait for a worker"})),
        )
        .await;
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["dispatcher"], "none", "{report}");
    assert!(
        report["note"].as_str().unwrap().contains("--no-dispatch"),
        "{report}"
    );
    assert_eq!(report["waiting_for_worker"][0], id.as_str(), "{report}");
    let (_, shown) = server
        .call(
            Method::GET,
            &format!("/api/plugins/kanban/tasks/{id}"),
            None,
        )
        .await;
    assert_eq!(shown["task"]["status"], "ready", "{shown}");
    server.stop().await;

    // No profiles at all: the banner and the report say how to add one.
    let yaml = "kanban:\n  store: {{STORE}}\n  failure_limit: 2\n";
    let (_dir, server) = serve_profiles(yaml, COMPLETING_SCRIPT, &[]).await;
    assert!(said(&server, "no profiles"), "{:?}", server.log());
    let (_, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(report["dispatcher"], "none", "{report}");
    assert!(
        report["note"].as_str().unwrap().contains("profiles:"),
        "{report}"
    );
    server.stop().await;
}
