//! The `clarify` tool, routed like an approval: headless (`troupe chat -q` with no terminal) it
//! returns at once telling the model to decide; over `troupe serve` the question waits in the
//! approval queue, is answered through the API (a wrong answer refused with the reason), and
//! the batch's other call does not wait for it; a stop withdraws it; a program answers through
//! the Rust API.

use std::process::Stdio;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

use crate::support::serve::{Served, TroupeDir};

fn ask() -> Value {
    json!({"question": "Which database should the service use?", "choices": ["SQLite", "PostgreSQL"], "allow_other": false})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chat_returns_at_once_telling_the_model_to_decide() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::text("Asking.").with_tool_call("clarify", ask()))
            .turn(ScriptTurn::text("I assumed SQLite.")),
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
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.path().join(".troupe-home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(["chat", "-q", "set up the service", "--json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No wait for an approval timeout: nobody was there to ask.
    assert!(started.elapsed() < Duration::from_secs(20));
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    let result = sent[1]
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap();
    assert!(result.starts_with("No one to ask"), "{result}");
    assert!(
        result.contains("say in your answer what you assumed"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_queues_the_question_and_takes_the_answer_through_the_api() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "the notes\n").unwrap();
    let dir = TroupeDir::with_script(
        workspace,
        "model:\n  base_url: {{MODEL_URL}}\n  model: local-model\nkanban:\n  store: {{STORE}}\n",
        Script::new()
            .turn(
                ScriptTurn::text("Asking while I read.")
                    .with_tool_call("clarify", ask())
                    .with_tool_call("read_file", json!({"path": "notes.txt"})),
            )
            .turn(ScriptTurn::text("Going with PostgreSQL.")),
    )
    .await;
    let served = Served::start(&dir, &["--no-dispatch"]).await;
    let (status, created) = served
        .call(Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, _) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "set up the service"})),
        )
        .await;
    assert_eq!(status, 202);
    let question = served.pending_approval().await;
    assert_eq!(question["kind"], "question");
    assert_eq!(question["tool"], "clarify");
    assert_eq!(question["session_id"], id.as_str());
    assert_eq!(
        question["arguments"]["choices"],
        json!(["SQLite", "PostgreSQL"])
    );
    let request_id = question["request_id"].as_str().unwrap().to_string();

    // The batch's other call ran while the question waited.
    let response = served.events(&id, Some(0)).send().await.unwrap();
    let mut events = response.bytes_stream().eventsource();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("read_file waited for the question")
            .unwrap()
            .unwrap();
        let data: Value = serde_json::from_str(&event.data).unwrap();
        if event.event == "tool_call_finished" {
            assert_eq!(data["tool"], "read_file", "{data}");
            break;
        }
    }

    // Not a choice, and this question takes no other answer.
    let (status, refused) = served
        .call(
            Method::POST,
            &format!("/api/approvals/{request_id}"),
            Some(json!({"choice": "answer", "answer": "MySQL"})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.to_string().contains("not one of the choices"),
        "{refused}"
    );
    let (status, answered) = served
        .call(
            Method::POST,
            &format!("/api/approvals/{request_id}"),
            Some(json!({"choice": "answer", "answer": "2"})),
        )
        .await;
    assert_eq!(status, 200, "{answered}");

    let deadline = Instant::now() + Duration::from_secs(20);
    while dir.model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the turn did not go on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let messages = dir.model.requests()[1].messages();
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["content"].as_str().unwrap_or("").contains("question"))
        .and_then(|m| m["content"].as_str())
        .unwrap();
    let result: Value = serde_json::from_str(result).unwrap();
    assert_eq!(result["answer"], "PostgreSQL");
    assert_eq!(result["choice"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_withdraws_a_pending_question() {
    let dir = TroupeDir::with_script(
        tempfile::tempdir().unwrap(),
        "model:\n  base_url: {{MODEL_URL}}\n  model: local-model\nkanban:\n  store: {{STORE}}\n",
        Script::new()
            .turn(ScriptTurn::text("Asking.").with_tool_call(
                "clarify",
                json!({"question": "What should the service be called?"}),
            ))
            .turn(ScriptTurn::text("Stopped.")),
    )
    .await;
    let served = Served::start(&dir, &["--no-dispatch"]).await;
    let (_, created) = served
        .call(Method::POST, "/api/sessions", Some(json!({})))
        .await;
    let id = created["session_id"].as_str().unwrap().to_string();
    served
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "name it"})),
        )
        .await;
    let question = served.pending_approval().await;
    assert_eq!(question["arguments"]["allow_other"], true);
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
            Some(json!({"choice": "answer", "answer": "anything"})),
        )
        .await;
    assert_eq!(status, 404);
}

/// A program that subscribes to approvals answers questions the same way; one that does not is
/// "no one", and the call returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_answers_a_question_through_the_rust_api() {
    use std::sync::Arc;
    use troupe::actors::model::ScriptedProvider;
    use troupe::actors::supervisor::{ApprovalChoice, ApprovalKind};
    use troupe::{SessionOptions, Troupe, TroupeConfig};

    let registry = troupe::tools::Registry::with_tools([troupe::tools::clarify::clarify_tool()]);
    let troupe = Troupe::start(TroupeConfig::new(registry)).unwrap();
    let script = || {
        Arc::new(ScriptedProvider::new(
            Script::new()
                .turn(ScriptTurn::tool_call("clarify", ask()))
                .turn(ScriptTurn::text("done")),
        ))
    };
    // Nobody subscribed: answered at once.
    let session = troupe
        .open_session(SessionOptions::new(script()))
        .await
        .unwrap();
    let outcome = session.send("go").await.unwrap();
    assert!(
        outcome.calls[0]
            .result
            .to_model_text()
            .starts_with("No one to ask"),
        "{:?}",
        outcome.calls[0].result
    );

    let mut requests = troupe.approvals().await.unwrap();
    let session = troupe
        .open_session(SessionOptions::new(script()))
        .await
        .unwrap();
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("go").await })
    };
    let request = requests.next().await.unwrap();
    assert_eq!(request.kind, ApprovalKind::Question);
    assert_eq!(request.reason, "Which database should the service use?");
    assert!(
        troupe
            .answer(
                &request.request_id,
                ApprovalChoice::Answer {
                    text: "SQLite".into()
                }
            )
            .await
            .unwrap()
    );
    let outcome = turn.await.unwrap().unwrap();
    let result: Value = serde_json::from_str(&outcome.calls[0].result.to_model_text()).unwrap();
    assert_eq!(result["answer"], "SQLite");
    assert_eq!(result["choice"], 1);
    troupe.close().await;
}
