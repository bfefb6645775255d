//! `troupe chat --json` against what real OpenAI-compatible servers do wrong, the way a user
//! meets it: the real binary, a troupe.yaml whose `model:` points at the mock server (real
//! HTTP), the built-in tools. Each test scripts one behaviour (a tool-call parser failing, an
//! error event in a stream, no `[DONE]`, an empty reply, calls written in the text, an unknown
//! tool, arguments that are not JSON, a key that is wrong, the same reads again and again) and
//! shows the turn completing, or failing at once with what to fix, with each retry and fallback
//! in the JSON events.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use troupe_actors::model::mock_server::{CallForm, Fault, MockServer};
use troupe_actors::model::{Script, ScriptTurn};

struct Run {
    code: Option<i32>,
    lines: Vec<Value>,
    stderr: String,
}

impl Run {
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.lines.iter().filter(|l| l["type"] == kind).collect()
    }

    fn last(&self) -> &Value {
        self.lines.last().unwrap()
    }

    fn assert_completed_with(&self, text: &str) {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        assert_eq!(self.last()["type"], "final");
        assert_eq!(self.last()["status"], "completed");
        assert_eq!(self.last()["text"], text);
    }
}

/// Writes troupe.yaml (`model:` pointing at `server`, plus `extra` lines) and runs
/// `troupe chat -q QUESTION --json` in `dir`.
async fn chat(dir: &Path, server: &MockServer, extra: &str, question: &str) -> Run {
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\n{extra}",
            server.url()
        ),
    )
    .unwrap();
    let dir = dir.to_path_buf();
    let question = question.to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            // Each test's own home: `auto` remembers switches there, by server URL and model.
            .env("TROUPE_HOME", dir.join(".troupe-home"))
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .args(["chat", "-q", &question, "--json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    Run {
        code: output.status.code(),
        lines: String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A directory with notes.txt.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello from a file\n").unwrap();
    dir
}

/// Read notes.txt, then answer from what it says.
fn read_then_answer() -> Script {
    Script::new()
        .turn(
            ScriptTurn::text("Reading it.")
                .with_tool_call("read_file", json!({"path": "notes.txt"})),
        )
        .turn(ScriptTurn::text("The file says hello.").when_input_contains("hello from a file"))
}

fn read_file_ran(run: &Run) {
    let finished = run.of_type("tool_call_finished");
    assert_eq!(finished.len(), 1, "{:?}", run.lines);
    assert_eq!(finished[0]["tool"], "read_file");
    assert_eq!(finished[0]["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_call_parser_falls_back_to_text_calls_and_the_turn_completes() {
    let server = MockServer::start(read_then_answer()).await.unwrap();
    server.push_fault(Fault::UnreadableOutput);
    server.push_fault(Fault::UnreadableOutput);
    let dir = workspace();
    let run = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    run.assert_completed_with("The file says hello.");
    read_file_ran(&run);
    let retries = run.of_type("model_retry");
    assert_eq!(retries.len(), 1, "{:?}", run.lines);
    assert_eq!(retries[0]["reason"], "unreadable_output");
    assert!(
        retries[0]["error"]
            .as_str()
            .unwrap()
            .contains("does not match the expected"),
        "{}",
        retries[0]
    );
    let switched = run.of_type("tool_calls_switched");
    assert_eq!(switched.len(), 1);
    assert_eq!(switched[0]["mode"], "text");
    // The events come before the call they made possible.
    let position = |kind: &str| run.lines.iter().position(|l| l["type"] == kind).unwrap();
    assert!(position("tool_calls_switched") < position("tool_call_started"));
    // After the switch: no tools field, the result sent back in the told form.
    let sent = server.requests();
    assert_eq!(sent.len(), 4);
    assert!(!sent[1].tool_names().is_empty());
    assert!(sent[2].body.get("tools").is_none());
    assert!(sent[3].body.get("tools").is_none());
    let result = sent[3].messages().last().cloned().unwrap();
    assert_eq!(result["role"], "user");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("<tool_response name=\"read_file\">"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_chat_with_the_same_server_starts_with_text_calls() {
    let server = MockServer::start(read_then_answer()).await.unwrap();
    server.push_fault(Fault::UnreadableOutput);
    server.push_fault(Fault::UnreadableOutput);
    let dir = workspace();
    let first = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    first.assert_completed_with("The file says hello.");
    assert_eq!(first.of_type("tool_calls_switched").len(), 1);
    let memory = dir.path().join(".troupe-home/state/tool_calls.json");
    let remembered = std::fs::read_to_string(&memory).unwrap();
    // Keyed by the model the server lists, not the name troupe.yaml gave (`local-model`).
    assert!(remembered.contains("mock-model"), "{remembered}");

    // A new process: its first request already goes in text, and the event says why.
    let before = server.requests().len();
    let second = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    second.assert_completed_with("The file says hello.");
    read_file_ran(&second);
    let switched = second.of_type("tool_calls_switched");
    assert_eq!(switched.len(), 1, "{:?}", second.lines);
    assert!(
        switched[0]["reason"]
            .as_str()
            .unwrap()
            .contains("remembered")
    );
    assert!(
        second.of_type("model_retry").is_empty(),
        "{:?}",
        second.lines
    );
    let sent = server.requests();
    assert!(
        sent[before].body.get("tools").is_none(),
        "{}",
        sent[before].body
    );

    // `tool_calls: native` does not read the memory; deleting the file forgets.
    let before = server.requests().len();
    let native = chat(
        dir.path(),
        &server,
        "  tool_calls: native\n",
        "what does notes.txt say?",
    )
    .await;
    native.assert_completed_with("The file says hello.");
    assert!(
        native.of_type("tool_calls_switched").is_empty(),
        "{:?}",
        native.lines
    );
    assert!(!server.requests()[before].tool_names().is_empty());
    std::fs::remove_file(&memory).unwrap();
    let before = server.requests().len();
    let forgotten = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    forgotten.assert_completed_with("The file says hello.");
    assert!(!server.requests()[before].tool_names().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_event_in_a_stream_and_a_stream_without_done_are_retried() {
    let server = MockServer::start(read_then_answer()).await.unwrap();
    server.push_fault(Fault::StreamError {
        message: "upstream went away".into(),
    });
    server.push_fault(Fault::NoDone);
    let dir = workspace();
    let run = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    run.assert_completed_with("The file says hello.");
    read_file_ran(&run);
    let retries = run.of_type("model_retry");
    assert_eq!(retries.len(), 2, "{:?}", run.lines);
    assert!(retries.iter().all(|r| r["reason"] == "transient"));
    assert!(
        retries[0]["error"]
            .as_str()
            .unwrap()
            .contains("upstream went away")
    );
    assert!(retries[1]["error"].as_str().unwrap().contains("[DONE]"));
    assert!(run.of_type("tool_calls_switched").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_reply_gets_one_nudge() {
    let script = Script::new()
        .turn(ScriptTurn::text(""))
        .turn(ScriptTurn::text("Here I am.").when_input_contains("was empty"));
    let server = MockServer::start(script).await.unwrap();
    let dir = workspace();
    let run = chat(dir.path(), &server, "", "say something").await;
    run.assert_completed_with("Here I am.");
    let retries = run.of_type("model_retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["reason"], "empty_reply");

    // Empty twice: the turn fails and says why, instead of printing nothing.
    let server = MockServer::start(Script::new().when_exhausted(""))
        .await
        .unwrap();
    let run = chat(dir.path(), &server, "", "say something").await;
    assert_eq!(run.code, Some(1));
    assert_eq!(run.last()["status"], "failed");
    assert!(run.stderr.contains("nothing twice"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_written_in_the_reply_text_run() {
    for form in [
        CallForm::Fenced,
        CallForm::DoubledBraces,
        CallForm::SingleQuotes,
    ] {
        let server = MockServer::start(read_then_answer()).await.unwrap();
        server.push_fault(Fault::CallsInContent(form));
        let dir = workspace();
        let run = chat(dir.path(), &server, "", "what does notes.txt say?").await;
        run.assert_completed_with("The file says hello.");
        read_file_ran(&run);
    }
    // Text mode from the start: no tools field ever, calls read from the text.
    let server = MockServer::start(read_then_answer()).await.unwrap();
    server.set_text_call_form(CallForm::Bare);
    let dir = workspace();
    let run = chat(
        dir.path(),
        &server,
        "  tool_calls: text\n  request_fields: {cache_prompt: true}\n",
        "what does notes.txt say?",
    )
    .await;
    run.assert_completed_with("The file says hello.");
    read_file_ran(&run);
    for request in server.requests() {
        assert!(request.body.get("tools").is_none());
        assert_eq!(request.body["cache_prompt"], true);
        assert_eq!(request.body["stop"], json!(["<tool_response"]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_and_bad_arguments_go_back_to_the_model() {
    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "readfile",
            json!({"path": "notes.txt"}),
        ))
        .turn(
            ScriptTurn::tool_call("read_file", json!("{\"path\": notes.txt"))
                .when_input_contains("Close names: 'read_file'"),
        )
        .turn(
            ScriptTurn::tool_call("read_file", json!({"path": "notes.txt"}))
                .when_input_contains("not valid JSON"),
        )
        .turn(ScriptTurn::text("The file says hello.").when_input_contains("hello from a file"));
    let server = MockServer::start(script).await.unwrap();
    let dir = workspace();
    let run = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    run.assert_completed_with("The file says hello.");
    let statuses: Vec<(&str, &str)> = run
        .of_type("tool_call_finished")
        .iter()
        .map(|f| (f["tool"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("readfile", "error"),
            ("read_file", "error"),
            ("read_file", "ok")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_reads_the_same_files_again_is_asked_for_its_answer() {
    let read = |path: &str| ScriptTurn::tool_call("read_file", json!({"path": path}));
    let script = Script::new()
        .turn(read("first.txt"))
        .turn(read("second.txt"))
        // The loop small models fall into: the same reads again, round after round.
        .turn(read("first.txt"))
        .turn(read("second.txt").when_input_contains("Not run again"))
        .turn(
            ScriptTurn::text("lantern and harbor")
                .when_input_contains("answer now from the results above"),
        );
    let server = MockServer::start(script).await.unwrap();
    let dir = workspace();
    std::fs::write(dir.path().join("first.txt"), "lantern\n").unwrap();
    std::fs::write(dir.path().join("second.txt"), "harbor\n").unwrap();
    let run = chat(
        dir.path(),
        &server,
        "",
        "what do first.txt and second.txt hold?",
    )
    .await;
    run.assert_completed_with("lantern and harbor");
    // Each file was read once; the repeats were answered without running anything.
    assert_eq!(
        run.of_type("tool_call_finished").len(),
        2,
        "{:?}",
        run.lines
    );
    let repeats: Vec<(&Value, &Value)> = run
        .of_type("repeated_calls")
        .iter()
        .map(|e| (&e["tools"], &e["wrap_up"]))
        .collect();
    assert_eq!(
        repeats,
        vec![
            (&json!(["read_file"]), &json!(false)),
            (&json!(["read_file"]), &json!(true))
        ]
    );
    // The answer was asked for with no tools offered.
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    assert!(
        requests[4].body.get("tools").is_none(),
        "{}",
        requests[4].body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_that_will_not_change_fail_at_once_saying_what_to_fix() {
    let server = MockServer::start(read_then_answer()).await.unwrap();
    server.push_fault(Fault::Status(401));
    let dir = workspace();
    let run = chat(dir.path(), &server, "", "what does notes.txt say?").await;
    assert_eq!(run.code, Some(1));
    assert_eq!(run.last()["status"], "failed");
    assert!(run.stderr.contains("check the API key"), "{}", run.stderr);
    assert!(run.of_type("model_retry").is_empty());
    assert_eq!(server.requests().len(), 1);

    // A mode troupe does not know is a config error naming the key.
    let run = chat(dir.path(), &server, "  tool_calls: json\n", "hi").await;
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr
            .contains("`model.tool_calls`: `json` is not a mode"),
        "{}",
        run.stderr
    );
}

/// The same fallback seen over the HTTP API: `troupe serve` with the same troupe.yaml, a
/// session driven over HTTP, and the retry and the switch in its SSE event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_the_switch_to_text_are_events_in_the_http_stream() {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;

    use crate::support::serve::{Served, TroupeDir};

    let fx = TroupeDir::with_script(
        workspace(),
        "model:\n  base_url: {{MODEL_URL}}\n  model: local-model\nkanban:\n  store: {{STORE}}\n",
        read_then_answer(),
    )
    .await;
    fx.model.push_fault(Fault::UnreadableOutput);
    fx.model.push_fault(Fault::UnreadableOutput);
    let served = Served::start(&fx, &[]).await;
    let (status, created) = served
        .call(reqwest::Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let response = served.events(&id, None).send().await.unwrap();
    assert!(response.status().is_success());
    let mut events = response.bytes_stream().eventsource();
    let (status, accepted) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "what does notes.txt say?"})),
        )
        .await;
    assert!((200..300).contains(&status), "{accepted}");
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let data: Value = serde_json::from_str(&event.unwrap().data).unwrap();
        let done = data["type"] == "final";
        seen.push(data);
        if done {
            break;
        }
    }
    served.kill().await;
    let of_type = |kind: &str| seen.iter().filter(|e| e["type"] == kind).count();
    assert_eq!(of_type("model_retry"), 1, "{seen:?}");
    assert_eq!(of_type("tool_calls_switched"), 1, "{seen:?}");
    let last = seen.last().unwrap();
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["text"], "The file says hello.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_cost_reach_the_json_and_a_cost_budget_stops_the_turn() {
    // Prices that make each request visible: 200 prompt tokens at $1,000 and 50 generated at
    // $2,000 per million is $0.30. The budget of $0.50 holds one round, not two.
    let script = Script::new()
        .turn(
            ScriptTurn::text("Reading it.")
                .with_tool_call("read_file", json!({"path": "notes.txt"}))
                .with_usage(200, 50),
        )
        .turn(
            ScriptTurn::text("It says hello; reading it once more to be sure.")
                .with_tool_call("read_file", json!({"path": "notes.txt", "offset": 1}))
                .with_usage(200, 50),
        )
        .turn(ScriptTurn::text("never reached"));
    let server = MockServer::start(script).await.unwrap();
    let dir = workspace();
    let extra =
        "pricing:\n  local-model: {input: 1000, output: 2000}\nbudget:\n  max_cost_usd: 0.5\n";
    let run = chat(dir.path(), &server, extra, "what does notes.txt say?").await;
    assert_eq!(
        run.code,
        Some(3),
        "a spent budget has its own exit code; {}",
        run.stderr
    );
    let last = run.last();
    assert_eq!(last["type"], "final");
    assert_eq!(last["status"], "budget_exceeded");
    let text = last["text"].as_str().unwrap();
    assert!(text.starts_with("It says hello"), "{text}");
    assert!(text.contains("cost budget is spent"), "{text}");
    assert_eq!(last["usage"]["requests"], 2);
    assert_eq!(last["usage"]["input_tokens"], 400);
    assert_eq!(last["usage"]["output_tokens"], 100);
    let cost = last["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.6).abs() < 1e-9, "{cost}");
    assert_eq!(last["session_usage"]["requests"], 2);
    read_file_ran(&run);
    let usage = run.of_type("model_usage");
    assert_eq!(usage.len(), 2);
    assert!((usage[0]["cost_usd"].as_f64().unwrap() - 0.3).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_budget_on_a_model_with_no_price_is_refused_before_anything_runs() {
    let server = MockServer::start(read_then_answer()).await.unwrap();
    let dir = workspace();
    let run = chat(dir.path(), &server, "budget:\n  max_cost_usd: 1\n", "hi").await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("budget.max_cost_usd"), "{}", run.stderr);
    assert!(
        run.stderr.contains("local-model has no price"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("pricing"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 0, "no model request was made");
}
