//! troupe behind the OpenAI API, tried as a user meets it: `troupe serve` with a troupe.yaml
//! whose model is the mock model server over real HTTP, driven by the real `openai` Python
//! package (`tests/openai-client/v1_client.py`, one scenario per run). The client checks what it
//! sees; these tests check the server's side: what the model was sent, the sessions `troupe
//! sessions` lists, the approval queue, a stopped turn.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::serve::{Served, TOKEN, TroupeDir};

/// The model's answers, each picked by what the user (or a tool) just said.
const SCRIPT: &str = r#"
cursor: conversation
turns:
  - match: "please say hello"
    text: "Hello from troupe."
  - match: "stream please"
    text: "Streaming words arrive one by one."
  - match: "remember kiwi"
    text: "I will remember kiwi."
  - match: "which fruit"
    text: "The fruit was kiwi."
  - match: "and once more"
    text: "Still kiwi."
  - match: "weather in Paris"
    tool_calls:
      - name: get_weather
        arguments: {city: Paris}
  - match: "sunny-21C"
    text: "Paris is sunny at 21C."
  - match: "responses hi"
    text: "First response."
  - match: "responses again"
    text: "Second response."
  - match: "responses stream"
    text: "Streamed response."
  - match: "print the line"
    tool_calls:
      - name: terminal
        arguments: {command: echo approved-over-v1}
  - match: "approved-over-v1"
    text: "It printed the line."
  - match: "a slow one"
    delay_ms: 4000
    text: "Finally, the slow answer."
  - match: "a very slow one"
    delay_ms: 30000
    text: "Finally, the very slow answer."
"#;

fn yaml(extra: &str) -> String {
    format!(
        "model:\n  base_url: \"{{{{MODEL_URL}}}}\"\n  model: mock-model\n  context_length: 32768\n\
         approvals:\n  mode: manual\n  require_approval: [terminal]\n\
         kanban:\n  store: \"{{{{STORE}}}}\"\n\
         sessions:\n  store: \"{{{{DIR}}}}/state/sessions.db\"\n\
         profiles:\n  helper:\n    toolsets: [core]\n{extra}"
    )
}

async fn serve(extra: &str) -> (TroupeDir, Served) {
    let fx = TroupeDir::new(&yaml(extra), SCRIPT).await;
    let served = Served::start(&fx, &["--no-dispatch"]).await;
    (fx, served)
}

/// The Python of the test set-up (scripts/install-test-deps.sh), which has `openai`.
fn python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/.venv-mcp/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        python.display()
    );
    python
}

/// Runs one scenario of the Python client against `served`; returns what it printed.
async fn client(served: &Served, scenario: &str) -> Value {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/openai-client/v1_client.py");
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python())
            .arg(script)
            .arg(scenario)
            .env("OPENAI_BASE_URL", format!("{}/v1", served.base))
            .env("OPENAI_API_KEY", TOKEN)
            .env_remove("OPENAI_ORG_ID")
            .env_remove("OPENAI_PROJECT_ID")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("the {scenario} client did not finish in two minutes"))
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the {scenario} client failed:\n{}\n{stdout}\nserver log: {:?}",
        String::from_utf8_lossy(&output.stderr),
        served.log()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The sessions `troupe sessions list` shows (read from the store the server writes).
async fn listed(fx: &TroupeDir) -> Vec<Value> {
    let (code, out, err) = fx.run(&["sessions", "list", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    listed["sessions"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_plain_streamed_and_continued_chats_are_troupe_sessions() {
    let (fx, served) = serve("").await;
    let models = client(&served, "models").await;
    assert_eq!(
        models["models"],
        serde_json::json!(["troupe", "troupe/helper"])
    );

    let plain = client(&served, "plain").await;
    let session = plain["session"].as_str().unwrap().to_string();
    // The session is one of the server's: shown over its API, written to its store.
    let (status, shown) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/sessions/{session}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["last_outcome"]["text"], "Hello from troupe.");
    let sessions = listed(&fx).await;
    let stored = sessions
        .iter()
        .find(|s| s["id"] == session.as_str())
        .unwrap_or_else(|| panic!("troupe sessions lists {session}: {sessions:#?}"));
    assert_eq!(stored["origin"], "http", "{stored}");

    client(&served, "stream").await;

    let history = client(&served, "history").await;
    let kept = history["session"].as_str().unwrap();
    // The continued session's model request held the whole conversation once: troupe sent it
    // the earlier turns from the session, not from the client.
    let requests = fx.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| r.contains("and once more"))
        .unwrap();
    assert!(
        last.contains("remember kiwi") && last.contains("The fruit was kiwi."),
        "{last}"
    );
    assert_eq!(
        last.matches(r#""content":"remember kiwi""#).count(),
        1,
        "{last}"
    );
    assert!(
        last.contains("Answer in one line."),
        "the client's system message is in the prompt: {last}"
    );
    // A history troupe never gave opened a session seeded with it.
    let seeded = requests
        .iter()
        .rev()
        .find(|r| r.contains("something troupe never said"))
        .unwrap();
    assert!(seeded.contains("which fruit"), "{seeded}");
    let ids: Vec<String> = listed(&fx)
        .await
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect();
    assert!(ids.iter().any(|i| i == kept), "{ids:?}");
    assert!(
        ids.iter().any(|i| i == history["other"].as_str().unwrap()),
        "{ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_call_ends_the_answer_and_its_result_continues_the_turn() {
    let (fx, served) = serve("").await;
    let round = client(&served, "client_tool").await;
    let requests = fx.model.requests();
    // The model was offered the client's tool beside troupe's own.
    let offered = requests[0].tool_names();
    assert!(offered.iter().any(|t| t == "get_weather"), "{offered:?}");
    assert!(offered.iter().any(|t| t == "read_file"), "{offered:?}");
    // The result reached the model as the call's tool result, in the same conversation.
    let last = Value::Array(requests.last().unwrap().messages()).to_string();
    assert!(last.contains("sunny-21C"), "{last}");
    assert!(last.contains("weather in Paris"), "{last}");
    let session = round["session"].as_str().unwrap();
    let (status, shown) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/sessions/{session}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["busy"], false, "{shown}");
    assert_eq!(shown["last_outcome"]["text"], "Paris is sunny at 21C.");
    client(&served, "client_tool_stream").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_continue_a_session_with_previous_response_id_and_take_function_outputs() {
    let (fx, served) = serve("").await;
    let out = client(&served, "responses").await;
    let session = out["session"].as_str().unwrap();
    let (status, shown) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/sessions/{session}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["last_outcome"]["text"], "Streamed response.");
    // The third response's request held the first two turns: one session all along.
    let requests = fx.requests();
    let third = requests
        .iter()
        .find(|r| r.contains("responses stream"))
        .unwrap();
    assert!(
        third.contains("responses hi") && third.contains("Second response."),
        "{third}"
    );
    // The client tool's output reached the model as the call's result.
    assert!(
        requests.iter().any(|r| r.contains(
            r#""role":"tool","tool_call_id":"call_6_0","name":"get_weather","content":"sunny-21C""#
        )),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_approval_while_the_request_stays_open() {
    let (fx, served) = serve("").await;
    let out = client(&served, "approval").await;
    assert!(
        fx.model_saw("approved-over-v1\\\\n"),
        "the approved command ran and the model read its output: {:?}",
        fx.requests()
    );
    let (status, pending) = served
        .call(reqwest::Method::GET, "/api/approvals", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(pending["approvals"], serde_json::json!([]), "{pending}");
    let session = out["session"].as_str().unwrap();
    let (_, shown) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/sessions/{session}"),
            None,
        )
        .await;
    assert_eq!(shown["last_outcome"]["status"], "completed", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_come_in_openai_shape_with_their_status() {
    let (_fx, served) = serve("").await;
    let seen = client(&served, "errors").await;
    assert_eq!(
        seen,
        serde_json::json!({
            "unknown_model": 404, "bad_json": 400, "wrong_type": 400, "too_large": 413,
            "unauthorized": 401, "busy": 429, "unknown_session": 404,
        })
    );
    let (_fx, full) = serve("serve:\n  max_sessions: 1\n").await;
    let seen = client(&full, "server_full").await;
    assert_eq!(seen["status"], 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_client_that_goes_away_stops_its_turn() {
    let (_fx, served) = serve("").await;
    let out = client(&served, "disconnect").await;
    let session = out["session"].as_str().unwrap();
    // The model answers after 30 s; the stop comes well before.
    let mut shown = Value::Null;
    for _ in 0..500 {
        let (status, body) = served
            .call(
                reqwest::Method::GET,
                &format!("/api/sessions/{session}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        shown = body;
        if shown["busy"] == false && !shown["last_outcome"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        shown["last_outcome"]["status"],
        "interrupted",
        "{shown}\n{:?}",
        served.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_waiting_for_approval_names_the_request_and_keeps_alive() {
    use futures::StreamExt;
    let (_fx, served) = serve("").await;
    let response = served
        .request(reqwest::Method::POST, "/v1/chat/completions")
        .json(&serde_json::json!({
            "model": "troupe/helper",
            "stream": true,
            "messages": [{"role": "user", "content": "print the line"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    // Read until the request is named and a keep-alive comment followed it.
    let request_id = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .unwrap_or_else(|_| panic!("no approval comment: {text}"))
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(at) = text.find("(request ") {
            let after_comment = &text[at..];
            if let Some(end) = after_comment.find(';')
                && after_comment.contains("\n\n:")
            {
                break after_comment["(request ".len()..end].to_string();
            }
        }
    };
    assert!(
        text.starts_with("data: {"),
        "the stream opened with a chunk: {text}"
    );
    let (status, answered) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/approvals/{request_id}"),
            Some(serde_json::json!({"choice": "once"})),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let content: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "It printed the line.", "{text}");
}
