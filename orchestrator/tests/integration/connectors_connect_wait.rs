//! `manage_connections` connect waits on the person: over `troupe serve` the connect link goes
//! into the approval queue as a question (connected / skip); answered "connected", the call
//! reads the gateway's `/connections` again and the model gets the app's new state. Headless
//! (`troupe chat -q`), with nobody to ask, the link comes back at once. A skip is reported as
//! one, and a stop withdraws the question.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

use crate::support::gateway::{MockGateway, Reply};
use crate::support::serve::{Served, TOKEN, TroupeDir};

const TOKEN_ENV: &str = "TROUPE_TEST_GATEWAY_TOKEN";
const LINK: &str = "https://connect.example/gmail/wait-5c1";

/// A gateway whose gmail is connected once `connected` is set (the person finished the
/// authorization in their browser).
fn gateway(connected: Arc<AtomicBool>) -> MockGateway {
    MockGateway::start(move |path, _body| match path {
        "connections/gmail" => Reply::Json(json!({"connect_url": LINK})),
        "connections" => {
            let now = connected.load(Ordering::SeqCst);
            let mut gmail = json!({"name": "gmail", "connected": now});
            if !now {
                gmail["connect_url"] = json!(LINK);
            }
            Reply::Json(json!({"connectors": [gmail]}))
        }
        _ => Reply::Status(404, "{}".into()),
    })
}

fn connect_call() -> Value {
    json!({"action": "connect", "connector": "gmail"})
}

/// The last tool result the model was sent in `request`.
fn tool_result(request: &troupe_actors::model::mock_server::RecordedRequest) -> String {
    request
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// `troupe serve` with the gateway, a session whose scripted model connects gmail, and the
/// question that call put in the queue.
async fn serve_until_the_question(gateway: &MockGateway) -> (TroupeDir, Served, String, Value) {
    let yaml = format!(
        "model:\n  base_url: {{{{MODEL_URL}}}}\n  model: local-model\nkanban:\n  store: {{{{STORE}}}}\ntools:\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\n    timeout_s: 5\n",
        gateway.url
    );
    let dir = TroupeDir::with_script(
        tempfile::tempdir().unwrap(),
        &yaml,
        Script::new()
            .turn(
                ScriptTurn::text("Connecting.")
                    .with_tool_call("manage_connections", connect_call()),
            )
            .turn(ScriptTurn::text("Gmail is ready.")),
    )
    .await;
    let (code, _, err) = dir.run(&["kanban", "init"]).await;
    assert_eq!(code, 0, "{err}");
    let mut command = dir.troupe();
    command
        .env(TOKEN_ENV, "wait-token-91")
        .args(["serve", "--port", "0", "--no-dispatch"]);
    let served = Served::spawn(command, Some(TOKEN)).await;
    let (status, created) = served
        .call(Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, _) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "connect my gmail"})),
        )
        .await;
    assert_eq!(status, 202);
    let question = served.pending_approval().await;
    (dir, served, id, question)
}

async fn wait_for_second_request(dir: &TroupeDir) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    while dir.model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the turn did not go on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serde_json::from_str(&tool_result(&dir.model.requests()[1])).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_asks_with_the_link_and_a_connected_answer_returns_the_new_state() {
    let connected = Arc::new(AtomicBool::new(false));
    let gateway = gateway(Arc::clone(&connected));
    let (dir, served, id, question) = serve_until_the_question(&gateway).await;
    assert_eq!(question["kind"], "question", "{question}");
    assert_eq!(question["tool"], "manage_connections");
    assert_eq!(question["session_id"], id.as_str());
    let asked = question["arguments"]["question"].as_str().unwrap();
    assert!(asked.contains(LINK) && asked.contains("gmail"), "{asked}");
    assert_eq!(
        question["arguments"]["choices"],
        json!(["connected", "skip"])
    );
    // The model has not been told anything yet: the call waits on the person.
    assert_eq!(dir.model.requests().len(), 1);
    assert_eq!(gateway.seen_at("connections").len(), 0);

    // The person authorizes in the browser, then says so.
    connected.store(true, Ordering::SeqCst);
    let request_id = question["request_id"].as_str().unwrap();
    let (status, answered) = served
        .call(
            Method::POST,
            &format!("/api/approvals/{request_id}"),
            Some(json!({"choice": "answer", "answer": "connected"})),
        )
        .await;
    assert_eq!(status, 200, "{answered}");

    let result = wait_for_second_request(&dir).await;
    assert_eq!(result["connector"], "gmail", "{result}");
    assert_eq!(result["connected"], true, "{result}");
    // The state came from the gateway, read after the answer.
    assert_eq!(gateway.seen_at("connections").len(), 1);
    assert_eq!(gateway.seen_at("connections/gmail").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_skip_answer_returns_that_the_person_skipped() {
    let gateway = gateway(Arc::new(AtomicBool::new(false)));
    let (dir, served, _id, question) = serve_until_the_question(&gateway).await;
    let request_id = question["request_id"].as_str().unwrap();
    let (status, answered) = served
        .call(
            Method::POST,
            &format!("/api/approvals/{request_id}"),
            Some(json!({"choice": "answer", "answer": "2"})),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let result = wait_for_second_request(&dir).await;
    assert_eq!(result["skipped"], true, "{result}");
    assert_eq!(result["connected"], false, "{result}");
    // A skip reads nothing more from the gateway.
    assert_eq!(gateway.seen_at("connections").len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chat_returns_the_link_at_once() {
    let connected = Arc::new(AtomicBool::new(false));
    let gateway = gateway(connected);
    let dir = tempfile::tempdir().unwrap();
    let model = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::text("Connecting.")
                    .with_tool_call("manage_connections", connect_call()),
            )
            .turn(ScriptTurn::text("Open the link to connect Gmail.")),
    )
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\ntools:\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\n    timeout_s: 5\n",
            model.url(),
            gateway.url
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.path().join(".troupe-home"))
        .env(TOKEN_ENV, "wait-token-92")
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(["chat", "-q", "connect my gmail", "--json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nobody to ask: no wait for an approval timeout.
    assert!(started.elapsed() < Duration::from_secs(20));
    let sent = model.requests();
    assert_eq!(sent.len(), 2);
    let result: Value = serde_json::from_str(&tool_result(&sent[1])).unwrap();
    assert_eq!(result["connector"], "gmail", "{result}");
    assert_eq!(result["connect_url"], LINK, "{result}");
    // Nothing was re-checked: nobody said it was connected.
    assert_eq!(gateway.seen_at("connections").len(), 0);
    assert_eq!(gateway.seen_at("connections/gmail").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_withdraws_the_connect_question() {
    let gateway = gateway(Arc::new(AtomicBool::new(false)));
    let (_dir, served, id, question) = serve_until_the_question(&gateway).await;
    let (status, _) = served
        .call(Method::POST, &format!("/api/sessions/{id}/stop"), None)
        .await;
    assert_eq!(status, 200);
    served.no_approval_pending().await;
    let request_id = question["request_id"].as_str().unwrap();
    let (status, _) = served
        .call(
            Method::POST,
            &format!("/api/approvals/{request_id}"),
            Some(json!({"choice": "answer", "answer": "connected"})),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(gateway.seen_at("connections").len(), 0);
}
