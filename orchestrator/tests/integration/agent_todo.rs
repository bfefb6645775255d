//! The `todo` tool from each door, against the mock model server over real HTTP: `troupe chat
//! -q` (the plan's changes as events and on screen, the list kept with the stored session and
//! found again by `--continue`), `troupe serve` (the list in `GET /api/sessions/{id}` and its
//! changes on the event stream), and the Rust API (a conversation shortened by the program,
//! after which the model is told the plan again).

use std::path::Path;
use std::process::{Command, Stdio};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use troupe::SessionOptions;
use troupe::actors::model::ChatMessage;
use troupe_actors::model::mock_server::{MockServer, RecordedRequest};
use troupe_actors::model::{Script, ScriptTurn};

use crate::support::serve::{Served, TroupeDir};

fn plan() -> Value {
    json!({"todos": [
        {"id": "1", "content": "Read the notes", "status": "in_progress"},
        {"id": "2", "content": "Write the summary"}
    ]})
}

fn progress() -> Value {
    json!({"merge": true, "todos": [
        {"id": "1", "status": "completed"},
        {"id": "2", "status": "in_progress"}
    ]})
}

/// Plans, moves on, answers.
fn planning_script() -> Script {
    Script::new()
        .turn(ScriptTurn::text("Planning.").with_tool_call("todo", plan()))
        .turn(ScriptTurn::text("Read them.").with_tool_call("todo", progress()))
        .turn(ScriptTurn::text("Summary written."))
}

fn troupe(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join(".troupe-home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL");
    command
}

fn write_config(dir: &Path, server: &MockServer) {
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\n",
            server.url()
        ),
    )
    .unwrap();
}

async fn output(mut command: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn last_tool_result(request: &RecordedRequest) -> Value {
    let text = request
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_shows_the_plan_and_a_continued_session_still_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(planning_script()).await.unwrap();
    write_config(dir.path(), &server);
    let mut command = troupe(dir.path());
    command.args(["chat", "-q", "summarise the notes", "--json"]);
    let out = output(command).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let updates: Vec<Value> = json_lines(&out)
        .into_iter()
        .filter(|l| l["type"] == "todo_updated")
        .collect();
    assert_eq!(updates.len(), 2, "{updates:?}");
    assert_eq!(updates[0]["summary"]["total"], 2);
    assert_eq!(updates[0]["todos"][1]["status"], "pending");
    assert_eq!(updates[1]["summary"]["completed"], 1);
    assert_eq!(updates[1]["todos"][1]["status"], "in_progress");
    // The model read the whole list back after each change.
    let sent = server.requests();
    assert_eq!(
        last_tool_result(&sent[2])["todos"][0]["status"],
        "completed"
    );

    // On screen (no --json): a compact block per change.
    let server = MockServer::start(planning_script()).await.unwrap();
    write_config(dir.path(), &server);
    let mut command = troupe(dir.path());
    command.args(["chat", "-q", "summarise the notes"]);
    let out = output(command).await;
    let screen = String::from_utf8_lossy(&out.stderr);
    assert!(screen.contains("· plan: 0/2 done"), "{screen}");
    assert!(screen.contains("· plan: 1/2 done"), "{screen}");
    assert!(screen.contains("[x] Read the notes"), "{screen}");
    assert!(screen.contains("[>] Write the summary"), "{screen}");

    // The stored session, continued in a new process, still has its list: a read returns it.
    // (The mock server replays the stored conversation's turns before the new ones.)
    let server = MockServer::start(
        planning_script()
            .turn(ScriptTurn::text("Checking.").with_tool_call("todo", json!({})))
            .turn(ScriptTurn::text("One left.")),
    )
    .await
    .unwrap();
    write_config(dir.path(), &server);
    let mut command = troupe(dir.path());
    command.args(["chat", "--continue", "-q", "what is left?", "--json"]);
    let out = output(command).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = last_tool_result(server.requests().last().unwrap());
    assert_eq!(read["summary"]["total"], 2, "{read}");
    assert_eq!(read["todos"][1]["content"], "Write the summary");
    assert_eq!(read["todos"][1]["status"], "in_progress");
    // Reading changed nothing, so no event.
    assert!(!json_lines(&out).iter().any(|l| l["type"] == "todo_updated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_the_list_and_streams_its_changes() {
    let dir = TroupeDir::with_script(
        tempfile::tempdir().unwrap(),
        "model:\n  base_url: {{MODEL_URL}}\n  model: local-model\nkanban:\n  store: {{STORE}}\n",
        planning_script(),
    )
    .await;
    let served = Served::start(&dir, &["--no-dispatch"]).await;
    let (status, created) = served
        .call(Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, fresh) = served
        .call(Method::GET, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        fresh["todos"],
        json!({"todos": [], "summary": {"total": 0, "pending": 0, "in_progress": 0, "completed": 0, "cancelled": 0}})
    );
    let (status, done) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "summarise the notes", "wait": true})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    let (_, shown) = served
        .call(Method::GET, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(shown["todos"]["summary"]["completed"], 1, "{shown}");
    assert_eq!(shown["todos"]["todos"][1]["status"], "in_progress");
    // The event log holds both changes, in order.
    let response = served.events(&id, Some(0)).send().await.unwrap();
    let mut events = response.bytes_stream().eventsource();
    let mut updates = Vec::new();
    while updates.len() < 2 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
            .await
            .expect("the event stream went quiet before both changes")
            .unwrap()
            .unwrap();
        if event.event == "todo_updated" {
            updates.push(serde_json::from_str::<Value>(&event.data).unwrap());
        }
    }
    assert_eq!(updates[0]["session_id"], id.as_str());
    assert_eq!(updates[0]["summary"]["pending"], 1);
    assert_eq!(updates[1]["summary"]["completed"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_conversation_is_shortened_the_model_is_told_the_plan_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(planning_script().when_exhausted("Carrying on."))
        .await
        .unwrap();
    // Nothing kept on disk but under this test's own home.
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\nsessions:\n  persist: false\n",
            server.url()
        ),
    )
    .unwrap();
    let mut config = troupe::settings::Settings::load(&dir.path().join("troupe.yaml")).unwrap();
    config.home = troupe::tools::home::TroupeHome::at(dir.path().join(".troupe-home"));
    let troupe = troupe::Troupe::from_config(config).await.unwrap();
    let session = troupe
        .open_session(SessionOptions::configured())
        .await
        .unwrap();
    session.send("summarise the notes").await.unwrap();
    let before = server.requests().len();
    // Nothing states the plan in the conversation any more: a compaction by the program.
    let shortened = vec![
        ChatMessage::User {
            content: "summarise the notes".into(),
        },
        ChatMessage::Assistant {
            content: Some("I read the notes and started the summary.".into()),
            tool_calls: vec![],
        },
    ];
    assert!(session.load_conversation(shortened).await.unwrap());
    session.send("go on").await.unwrap();
    let sent = server.requests();
    assert!(sent.len() > before);
    let prompt = sent[before].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("## Your todo list"), "{prompt}");
    assert!(prompt.contains("[x] 1. Read the notes"), "{prompt}");
    assert!(prompt.contains("[>] 2. Write the summary"), "{prompt}");
    // While a result in the conversation states the list, the prompt does not repeat it.
    assert!(
        !sent[2].messages()[0]["content"]
            .as_str()
            .unwrap()
            .contains("## Your todo list")
    );
    assert_eq!(session.todos().summary().completed, 1);
    troupe.close().await;
}
