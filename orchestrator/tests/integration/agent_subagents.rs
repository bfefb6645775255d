//! memory, todo and clarify inside a subagent, through `troupe chat -q` and the mock model
//! server: the child keeps its own plan (an event under its own session id, a summary in the
//! report its parent reads), writes to its parent's memory stores, and, with nobody to ask,
//! is told at once to decide.

use std::process::Stdio;

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_plans_remembers_and_asks_and_its_parent_sees_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::tool_call("delegate_task", json!({"tasks": [{"goal": "child job"}]}))
                    .when_input_contains("PARENT-GO"),
            )
            .turn(
                ScriptTurn::text("Planning.")
                    .with_tool_call(
                        "todo",
                        json!({"todos": [
                            {"id": "1", "content": "Child step one", "status": "completed"},
                            {"id": "2", "content": "Child step two"}
                        ]}),
                    )
                    .with_tool_call(
                        "memory",
                        json!({"action": "add", "content": "The child found the cache in /var/cache/app."}),
                    )
                    .with_tool_call("clarify", json!({"question": "Keep the cache?"}))
                    .when_input_contains("child job"),
            )
            .turn(ScriptTurn::text("CHILD-REPORT").when_input_contains("No one to ask"))
            .turn(ScriptTurn::text("ALL-DONE").when_input_contains("CHILD-REPORT")),
    )
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\n",
            server.url()
        ),
    )
    .unwrap();
    let home = dir.path().join(".troupe-home");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .env("TROUPE_HOME", &home)
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(["chat", "-q", "PARENT-GO", "--json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.last().unwrap()["text"], "ALL-DONE", "{lines:?}");
    let root = lines
        .iter()
        .find(|l| l["type"] == "session_started")
        .unwrap()["session_id"]
        .clone();
    // The child's plan is its own: the event comes under the child's id.
    let update = lines
        .iter()
        .find(|l| l["type"] == "todo_updated")
        .expect("the child's plan reached the stream");
    assert_ne!(update["session_id"], root);
    assert_eq!(update["summary"]["total"], 2);
    // The parent reads a summary of it in the child's report.
    let report = server
        .requests()
        .last()
        .unwrap()
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap();
    let report: Value = serde_json::from_str(&report).unwrap();
    let todos = &report["results"][0]["todos"];
    assert_eq!(todos["summary"]["completed"], 1, "{report}");
    assert_eq!(todos["open"], json!(["Child step two"]), "{report}");
    // It wrote to the stores its parent's session uses.
    let store = troupe_tools::memory::MemoryStore::in_home(
        &troupe_tools::home::TroupeHome::at(&home),
        None,
    );
    assert_eq!(
        store.entries(troupe_tools::memory::Target::Memory).unwrap(),
        vec!["The child found the cache in /var/cache/app."]
    );
}
