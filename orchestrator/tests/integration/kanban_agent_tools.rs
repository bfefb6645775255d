//! The agent's own tools on a board (issue 40), as a user runs them: `troupe kanban worker` on
//! a SQLite board with a model server over HTTP.
//! - `clarify`: the model asks with choices; the task is `blocked` with the question as a
//!   comment; `troupe kanban comment` answers; the next `troupe kanban worker` reopens the same
//!   stored session (same id, earlier messages sent again), which reads the answer and completes
//!   the task.
//! - `todo`: a worker's plan is part of the task in `troupe kanban show --json` and in
//!   `GET /api/plugins/kanban/tasks/{id}` of `troupe serve`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{CursorMode, Script, ScriptTurn};

use crate::support::serve::{Served, TroupeDir};

/// `troupe <args>` in `dir`, with the board store and home inside it and no model or board
/// from the environment.
fn troupe(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(args)
        .current_dir(dir)
        .env("TROUPE_HOME", dir.join("home"))
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("TROUPE_KANBAN_STORE")
        .env_remove("TROUPE_KANBAN_BOARD")
        .output()
        .unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = troupe(dir, args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_of(dir: &Path, args: &[&str]) -> Value {
    let text = ok(dir, args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// Drains the board once with one worker process.
fn work(dir: &Path) -> String {
    let out = troupe(
        dir,
        &["kanban", "--store", "store", "worker", "--until-idle"],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "the worker failed: {err}");
    err
}

fn write_config(dir: &Path, url: &str, toolsets: &str) {
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    model: mock\n    base_url: {url}\n    toolsets: {toolsets}\n"
        ),
    )
    .unwrap();
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_question_blocks_its_task_and_a_comment_resumes_the_same_session() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let question = "Which database should the service use?";
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::text("I need a decision.").with_tool_call(
            "clarify",
            json!({"question": question, "choices": ["SQLite", "PostgreSQL"]}),
        ))
        .turn(ScriptTurn::text("Waiting for the answer."))
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "set up with PostgreSQL", "result": "PostgreSQL it is"}),
        ))
        .when_exhausted("Finished.");
    let server = MockServer::start(script).await.unwrap();
    write_config(dir, &server.url(), "[core]");
    let created = json_of(
        dir,
        &[
            "kanban",
            "--store",
            "store",
            "create",
            "set up the service",
            "--json",
        ],
    );
    let id = created["task"]["id"].as_str().unwrap().to_string();

    // The first run asks and parks the task; the worker is free again (it exits when idle).
    let log = work(dir);
    let shown = json_of(dir, &["kanban", "--store", "store", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "blocked", "{shown}\n{log}");
    assert_eq!(shown["task"]["block_kind"], "question", "{shown}");
    let comments = shown["comments"].as_array().cloned().unwrap_or_default();
    let asked = comments
        .iter()
        .filter_map(|c| c["body"].as_str())
        .find(|b| b.contains(question))
        .unwrap_or_else(|| panic!("the question is a comment: {shown}"));
    assert!(
        asked.contains("1. SQLite") && asked.contains("2. PostgreSQL"),
        "the choices are listed: {asked}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "ask, then end the turn");
    let first_tools = tool_names(&requests[0].body);
    assert!(
        first_tools.contains(&"clarify".to_string()),
        "{first_tools:?}"
    );

    let sessions = json_of(dir, &["sessions", "list", "--json"]);
    let worker_sessions: Vec<&Value> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["origin"] == "worker")
        .collect();
    assert_eq!(worker_sessions.len(), 1, "{sessions}");
    let session_id = worker_sessions[0]["id"].as_str().unwrap().to_string();

    // The answer, as a comment: the task goes back to the queue at once.
    ok(
        dir,
        &[
            "kanban",
            "--store",
            "store",
            "comment",
            &id,
            "PostgreSQL, please",
            "--author",
            "ada",
        ],
    );
    let shown = json_of(dir, &["kanban", "--store", "store", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "ready", "{shown}");

    let log = work(dir);
    let shown = json_of(dir, &["kanban", "--store", "store", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "done", "{shown}\n{log}");
    assert_eq!(shown["task"]["result"], "PostgreSQL it is", "{shown}");

    // The resumed run sent the first run's conversation again, then the answer naming the
    // question.
    let requests = server.requests();
    // The resumed run ends at its kanban_complete: no closing request after it.
    assert_eq!(requests.len(), 3, "ask and end the turn, then complete");
    let resumed = requests[2].messages();
    let text = |m: &Value| m["content"].as_str().unwrap_or_default().to_string();
    let users: Vec<String> = resumed
        .iter()
        .filter(|m| m["role"] == "user")
        .map(text)
        .collect();
    assert_eq!(users.len(), 2, "the task, then the answer: {users:?}");
    assert!(users[0].contains("set up the service"), "{}", users[0]);
    assert!(
        users[1].contains(question)
            && users[1].contains("PostgreSQL, please")
            && users[1].contains("ada"),
        "the answer names the question: {}",
        users[1]
    );
    assert!(
        resumed
            .iter()
            .any(|m| m["role"] == "tool" && text(m).contains("parked")),
        "the clarify call and its result are in the resumed conversation: {resumed:?}"
    );

    // One worker session, the same one, now holding both runs.
    let sessions = json_of(dir, &["sessions", "list", "--json"]);
    let worker_sessions: Vec<&Value> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["origin"] == "worker")
        .collect();
    assert_eq!(worker_sessions.len(), 1, "{sessions}");
    assert_eq!(worker_sessions[0]["id"], session_id.as_str());
    let stored = json_of(dir, &["sessions", "show", &session_id, "--json"]);
    let stored_text = stored.to_string();
    assert!(
        stored_text.contains("PostgreSQL, please") && stored_text.contains("kanban_complete"),
        "{stored}"
    );
    let runs = json_of(dir, &["kanban", "--store", "store", "runs", &id, "--json"]);
    let outcomes: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["blocked", "completed"], "{runs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_plan_is_shown_with_its_task_on_the_cli_and_the_http_api() {
    let plan = json!({"todos": [
        {"id": "1", "content": "read the spec", "status": "completed"},
        {"id": "2", "content": "write the migration", "status": "in_progress"},
        {"id": "3", "content": "run the tests", "status": "pending"}
    ]});
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::text("Planning.").with_tool_call("todo", plan))
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "migrated"}),
        ))
        .when_exhausted("Finished.");
    let dir = TroupeDir::with_script(
        tempfile::tempdir().unwrap(),
        "kanban:\n  store: \"{{STORE}}\"\n  default_assignee: coder\nprofiles:\n  coder:\n    model: mock\n    base_url: \"{{MODEL_URL}}\"\n    toolsets: [core]\n",
        script,
    )
    .await;
    let created = dir
        .run_json(&["kanban", "create", "migrate the database"])
        .await;
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let (code, _, err) = dir.run(&["kanban", "worker", "--until-idle"]).await;
    assert_eq!(code, 0, "{err}");

    let check = |shown: &Value, from: &str| {
        assert_eq!(shown["task"]["status"], "done", "{from}: {shown}");
        let items = shown["todos"]["todos"]
            .as_array()
            .unwrap_or_else(|| panic!("{from} has the plan: {shown}"));
        let lines: Vec<(String, String)> = items
            .iter()
            .map(|t| {
                (
                    t["content"].as_str().unwrap_or_default().to_string(),
                    t["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                ("read the spec".to_string(), "completed".to_string()),
                ("write the migration".to_string(), "in_progress".to_string()),
                ("run the tests".to_string(), "pending".to_string()),
            ],
            "{from}"
        );
        assert_eq!(shown["todos"]["summary"]["total"], 3, "{from}: {shown}");
    };
    let shown = dir.run_json(&["kanban", "show", &id]).await;
    check(&shown, "kanban show --json");
    let (code, text, err) = dir.run(&["kanban", "show", &id]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("Plan:") && text.contains("write the migration"),
        "{text}"
    );

    let served = Served::start(&dir, &[]).await;
    let (status, shown) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/plugins/kanban/tasks/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    check(&shown, "GET /api/plugins/kanban/tasks/{id}");

    // A task no worker ran has no plan: null, not an error.
    let (status, other) = served
        .call(
            reqwest::Method::POST,
            "/api/plugins/kanban/tasks",
            Some(json!({"title": "unassigned work", "assignee": "nobody-runs-this"})),
        )
        .await;
    assert_eq!(status, 201, "{other}");
    let other_id = other["task"]["id"].as_str().unwrap().to_string();
    let (status, shown) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/plugins/kanban/tasks/{other_id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    assert!(shown["todos"].is_null(), "{shown}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_can_leave_out_clarify_and_keep_the_rest_of_core() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "nothing to ask"}),
        ))
        .when_exhausted("Finished.");
    let server = MockServer::start(script).await.unwrap();
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    model: mock\n    base_url: {}\n    toolsets: [core]\n    blocked_tools: [clarify]\n",
            server.url()
        ),
    )
    .unwrap();
    let created = json_of(
        dir,
        &["kanban", "--store", "store", "create", "tidy up", "--json"],
    );
    let id = created["task"]["id"].as_str().unwrap().to_string();
    work(dir);
    let shown = json_of(dir, &["kanban", "--store", "store", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "done", "{shown}");
    let requests = server.requests();
    let offered = tool_names(&requests[0].body);
    assert!(
        !offered.contains(&"clarify".to_string()),
        "clarify was left out: {offered:?}"
    );
    for kept in ["todo", "memory", "kanban_complete"] {
        assert!(
            offered.contains(&kept.to_string()),
            "{kept} is kept: {offered:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unblock_with_an_answer_resumes_the_session_that_asked() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let question = "Which port should it listen on?";
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::tool_call(
            "clarify",
            json!({"question": question}),
        ))
        .turn(ScriptTurn::text("Waiting."))
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "listens on 8080"}),
        ))
        .when_exhausted("Finished.");
    let server = MockServer::start(script).await.unwrap();
    write_config(dir, &server.url(), "[core]");
    let created = json_of(
        dir,
        &["kanban", "--store", "store", "create", "serve it", "--json"],
    );
    let id = created["task"]["id"].as_str().unwrap().to_string();
    work(dir);
    let shown = json_of(dir, &["kanban", "--store", "store", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "blocked", "{shown}");
    let out = ok(
        dir,
        &[
            "kanban", "--store", "store", "unblock", &id, "--answer", "8080", "--author", "bo",
        ],
    );
    assert!(out.contains("ready"), "{out}");
    work(dir);
    let shown = json_of(dir, &["kanban", "--store", "store", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "done", "{shown}");
    let requests = server.requests();
    // The resumed run ends at its kanban_complete: no closing request after it.
    assert_eq!(requests.len(), 3, "ask and end the turn, then complete");
    let resumed = Value::Array(requests[2].messages()).to_string();
    assert!(
        resumed.contains("Answer from bo: 8080") && resumed.contains(question),
        "{resumed}"
    );
    assert!(
        resumed.contains("serve it"),
        "the first run's messages: {resumed}"
    );
}
