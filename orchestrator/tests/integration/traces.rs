//! Traces as a user gets them: the real `troupe` binary with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! pointing at an OTLP receiver in the test (a real HTTP server decoding the protobuf the
//! exporter sent). A `troupe chat` turn that calls a bridged MCP tool through `tool_call` and
//! delegates to a child comes back as one trace: session → turn → model requests and tool
//! calls (named after the underlying tool) → the child's session under the `delegate_task`
//! call. A collector that refuses connections, or takes them and never answers, changes
//! nothing for the turn. `troupe serve` puts a session under its creator's `traceparent` and each
//! message's turn under the sender's, with a person's approval wait as a span of its own.
//!
//! Needs the MCP test servers (`scripts/install-test-deps.sh`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;
use troupe_actors::model::Script;
use troupe_actors::model::mock_server::MockServer;

use crate::support::mcp_servers::{everything_bin, servers_available};
use crate::support::serve::{Served, TOKEN, TroupeDir};

/// An OTLP/HTTP trace receiver: every span of every request, decoded.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
    /// (path, Authorization header) of each request.
    requests: Arc<Mutex<Vec<(String, String)>>>,
    /// Resource attributes seen, as text.
    resource: Arc<Mutex<Vec<(String, String)>>>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let app = axum::Router::new()
            .route("/v1/traces", post(take))
            .route("/api/public/otel/v1/traces", post(take))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

async fn take(
    State(receiver): State<Receiver>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Vec<u8> {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    receiver
        .requests
        .lock()
        .unwrap()
        .push((uri.path().to_string(), auth));
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    for resource in request.resource_spans {
        if let Some(resource) = &resource.resource {
            for attribute in &resource.attributes {
                if let Some(AnyValue::StringValue(value)) =
                    attribute.value.as_ref().and_then(|v| v.value.clone())
                {
                    receiver
                        .resource
                        .lock()
                        .unwrap()
                        .push((attribute.key.clone(), value));
                }
                if attribute.key == "service.name"
                    && let Some(AnyValue::StringValue(name)) =
                        attribute.value.as_ref().and_then(|v| v.value.clone())
                {
                    receiver.services.lock().unwrap().push(name);
                }
            }
        }
        for scope in resource.scope_spans {
            receiver.spans.lock().unwrap().extend(scope.spans);
        }
    }
    Vec::new()
}

fn attribute(span: &Span, key: &str) -> Option<AnyValue> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.clone())
}

fn text(span: &Span, key: &str) -> Option<String> {
    match attribute(span, key) {
        Some(AnyValue::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn number(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key) {
        Some(AnyValue::IntValue(n)) => Some(n),
        _ => None,
    }
}

/// The parent finds the echo tool's result through `tool_call`, then delegates; the child
/// answers; the parent answers.
const SCRIPT: &str = "cursor: conversation\nturns:\n  - match: TRACE-ME\n    tool_calls:\n      - name: tool_call\n        arguments: {calls: [{name: mcp_everything_echo, arguments: {message: traced sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD}}]}\n  - match: 'Echo: traced'\n    tool_calls:\n      - name: delegate_task\n        arguments: {tasks: [{goal: CHILD-GOAL say done}]}\n  - match: CHILD-GOAL\n    text: CHILD-DONE\n  - text: All done.\n";

/// Runs `troupe chat -q TRACE-ME --json` in `dir` with the collector at `collector`.
async fn chat(dir: &Path, model: &MockServer, collector: &str) -> (i32, String, String) {
    let yaml = format!(
        "model: {{base_url: '{}', model: mock-model}}\ntools: {{tool_search: {{enabled: true}}}}\nmcp_servers:\n  everything: {{command: '{}', args: [stdio]}}\n",
        model.url(),
        everything_bin().display()
    );
    std::fs::write(dir.join("troupe.yaml"), yaml).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .env("TROUPE_HOME", dir.join("home"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("TROUPE_BASE_URL")
        .args(["chat", "-q", "TRACE-ME", "--json"])
        .output()
        .await
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn final_line(out: &str) -> Value {
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_with_a_bridged_call_and_a_child_is_one_trace() {
    if !servers_available("a_chat_turn_with_a_bridged_call_and_a_child_is_one_trace") {
        return;
    }
    let model = MockServer::start(Script::from_yaml_str(SCRIPT).unwrap())
        .await
        .unwrap();
    let (receiver, url) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = chat(dir.path(), &model, &url).await;
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(final_line(&out)["text"], "All done.");

    // The exporter flushed before the process ended.
    let spans = receiver.spans();
    assert!(!spans.is_empty(), "no spans arrived; stderr: {err}");
    assert_eq!(receiver.services.lock().unwrap()[0], "troupe");
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|s| &s.trace_id == trace), "one trace");
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let parent =
        |span: &Span| -> Option<&Span> { by_id.get(span.parent_span_id.as_slice()).copied() };
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };

    let sessions = named("session");
    assert_eq!(
        sessions.len(),
        2,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = sessions
        .iter()
        .find(|s| number(s, "troupe.agent.depth") == Some(0))
        .unwrap();
    assert!(
        root.parent_span_id.is_empty(),
        "the root session starts the trace"
    );
    let child = sessions
        .iter()
        .find(|s| number(s, "troupe.agent.depth") == Some(1))
        .unwrap();

    // The bridged call is named after the MCP tool, under the parent's turn.
    let echo = named("execute_tool mcp_everything_echo");
    assert_eq!(echo.len(), 1);
    assert_eq!(
        text(echo[0], "gen_ai.tool.name").as_deref(),
        Some("mcp_everything_echo")
    );
    assert_eq!(
        text(echo[0], "troupe.call.tool").as_deref(),
        Some("tool_call")
    );
    assert_eq!(text(echo[0], "troupe.call.status").as_deref(), Some("ok"));
    // Its arguments and result are there, with the key in them masked.
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
    let arguments = text(echo[0], "troupe.call.arguments").unwrap();
    let result = text(echo[0], "troupe.call.result").unwrap();
    assert!(
        arguments.contains("traced") && !arguments.contains(key),
        "{arguments}"
    );
    assert!(
        result.contains("Echo: traced") && !result.contains(key),
        "{result}"
    );
    let turn = parent(echo[0]).unwrap();
    assert_eq!(turn.name, "turn");
    assert_eq!(parent(turn).unwrap().span_id, root.span_id);

    // The child's session hangs under the delegate_task call of the same turn.
    let delegate = named("execute_tool delegate_task");
    assert_eq!(delegate.len(), 1);
    assert_eq!(parent(delegate[0]).unwrap().span_id, turn.span_id);
    assert_eq!(parent(child).unwrap().span_id, delegate[0].span_id);

    // Every model request is a GenAI span under a turn, with its token counts.
    let requests = named("chat mock-model");
    assert_eq!(requests.len(), 4, "three for the parent, one for the child");
    for request in &requests {
        assert_eq!(parent(request).unwrap().name, "turn");
        assert_eq!(
            text(request, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert!(number(request, "gen_ai.usage.input_tokens").unwrap() > 0);
        assert!(number(request, "gen_ai.usage.output_tokens").is_some());
    }
    let child_turn = named("turn")
        .into_iter()
        .find(|t| parent(t).unwrap().span_id == child.span_id)
        .unwrap();
    assert!(
        requests
            .iter()
            .any(|r| r.parent_span_id == child_turn.span_id)
    );
    // The root turn's totals include the child's request (the subtree's usage).
    let sum: i64 = requests
        .iter()
        .map(|r| number(r, "gen_ai.usage.input_tokens").unwrap())
        .sum();
    assert_eq!(number(turn, "gen_ai.usage.input_tokens"), Some(sum));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_refuses_or_hangs_changes_nothing_for_the_turn() {
    if !servers_available("a_collector_that_refuses_or_hangs_changes_nothing_for_the_turn") {
        return;
    }
    // Refuses: a port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    // Hangs: takes connections and never answers.
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging_url = format!("http://{}", hanging.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hanging.accept().await {
            held.push(socket);
        }
    });
    for collector in [format!("http://{closed}"), hanging_url] {
        let model = MockServer::start(Script::from_yaml_str(SCRIPT).unwrap())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (code, out, err) = chat(dir.path(), &model, &collector).await;
        assert_eq!(code, 0, "{collector}: {err}\n{out}");
        assert_eq!(final_line(&out)["status"], "completed", "{collector}");
        assert!(
            err.matches("the trace collector did not take spans")
                .count()
                <= 1,
            "a failing collector is reported once at most: {err}"
        );
    }
}

/// A worker's script: complete the task at once.
const COMPLETING: &str = "cursor: conversation\nturns:\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: done in the trace}\n  - text: Finished.\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_made_inside_a_trace_is_run_in_it_by_a_worker_process_on_postgres() {
    let Some(url) =
        troupe_kanban::store::test_cluster::cluster_url("traces across hosts on PostgreSQL")
    else {
        return;
    };
    let (receiver, collector) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("coder.yaml"), COMPLETING).unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {}\n",
            dir.path().join("coder.yaml").display()
        ),
    )
    .unwrap();
    let slug = format!("trace-{}", uuid::Uuid::new_v4().simple());
    let slug = &slug[..20];
    let kanban = |args: &[&str], traced: bool| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .current_dir(dir.path())
            .env("TROUPE_HOME", dir.path().join("home"))
            .env_remove("TRACEPARENT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .args(["kanban", "--store", &url, "--board", slug])
            .args(args);
        if traced {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector);
        } else {
            command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        }
        command.output()
    };
    // The creator (one host) is inside a trace; it exports nothing itself.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{parent_id}-01");
    let out = kanban(&["boards", "create", slug], false).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = kanban(&["create", "job", "--traceparent", "00-zz-1-01"], false)
        .await
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a W3C trace context"));
    let out = kanban(
        &["create", "job", "--traceparent", &traceparent, "--json"],
        false,
    )
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["task"]["traceparent"], traceparent.as_str());

    // A worker process (another host) runs it, exporting.
    let out = kanban(&["worker", "--profiles", "coder", "--until-idle"], true)
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let spans = receiver.spans();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(!spans.is_empty(), "no spans arrived");
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) == trace_id),
        "one trace, the creator's"
    );
    let run = spans.iter().find(|s| s.name == "kanban task run").unwrap();
    assert_eq!(
        hex(&run.parent_span_id),
        parent_id,
        "the run continues the creator's span"
    );
    assert_eq!(text(run, "troupe.board").as_deref(), Some(slug));
    assert_eq!(
        text(run, "troupe.run.outcome").as_deref(),
        Some("completed")
    );
    let session = spans.iter().find(|s| s.name == "session").unwrap();
    assert_eq!(session.parent_span_id, run.span_id);
    assert!(
        spans
            .iter()
            .any(|s| s.name == "execute_tool kanban_complete")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_langfuse_plugin_sends_the_same_spans_with_its_keys_or_says_once_what_it_needs() {
    let (receiver, base) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - text: Hello from the script.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "plugins:\n  enabled: [observability/langfuse]\n",
    )
    .unwrap();
    let run = |keys: bool| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .current_dir(dir.path())
            .env("TROUPE_HOME", dir.path().join("home"))
            .env("TROUPE_LANGFUSE_BASE_URL", &base)
            .env("LANGFUSE_TRACING_ENVIRONMENT", "staging")
            .env("TROUPE_LANGFUSE_RELEASE", "v9")
            .env_remove("LANGFUSE_PUBLIC_KEY")
            .env_remove("LANGFUSE_SECRET_KEY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .args(["chat", "-q", "hi", "--json", "--script", "script.yaml"]);
        if keys {
            command
                .env("TROUPE_LANGFUSE_PUBLIC_KEY", "pk-lf-1")
                .env("TROUPE_LANGFUSE_SECRET_KEY", "sk-lf-2");
        } else {
            command
                .env_remove("TROUPE_LANGFUSE_PUBLIC_KEY")
                .env_remove("TROUPE_LANGFUSE_SECRET_KEY");
        }
        command.output()
    };

    // Without keys: one notice, the turn as always, nothing sent.
    let out = run(false).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("observability/langfuse").count(),
        1,
        "one notice naming the plugin: {err}"
    );
    assert!(err.contains("TROUPE_LANGFUSE_PUBLIC_KEY"), "{err}");
    assert!(receiver.spans().is_empty());

    // With keys: Langfuse's OTLP path, its keys as basic auth, grouped by session.
    let out = run(true).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = receiver.requests.lock().unwrap().clone();
    assert!(!requests.is_empty());
    for (path, auth) in &requests {
        assert_eq!(path, "/api/public/otel/v1/traces");
        // base64("pk-lf-1:sk-lf-2")
        assert_eq!(auth, "Basic cGstbGYtMTpzay1sZi0y");
    }
    let spans = receiver.spans();
    let root = spans.iter().find(|s| s.name == "session").unwrap();
    assert_eq!(text(root, "session.id"), text(root, "troupe.session.id"));
    let resource = receiver.resource.lock().unwrap().clone();
    assert!(resource.contains(&("deployment.environment.name".into(), "staging".into())));
    assert!(resource.contains(&("service.version".into(), "v9".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_tool_calls_hang_under_the_execute_code_call() {
    let (receiver, collector) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let code = serde_json::to_string(
        "from troupe_tools import terminal\nprint(terminal('echo from-the-script'))\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        format!(
            "cursor: conversation\nturns:\n  - tool_calls:\n      - name: execute_code\n        arguments: {{code: {code}}}\n  - text: The script ran.\n"
        ),
    )
    .unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .env("TROUPE_HOME", dir.path().join("home"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .args(["chat", "-q", "run it", "--json", "--script", "script.yaml"])
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(final_line(&out)["text"], "The script ran.");
    let spans = receiver.spans();
    let script = spans
        .iter()
        .find(|s| s.name == "execute_tool execute_code")
        .unwrap_or_else(|| panic!("{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()));
    let inner = spans
        .iter()
        .find(|s| s.name == "execute_tool terminal")
        .unwrap();
    assert_eq!(
        inner.parent_span_id, script.span_id,
        "the script's call is under the script"
    );
    assert!(
        text(inner, "troupe.call.result")
            .unwrap()
            .contains("from-the-script")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_puts_a_session_and_each_message_under_the_callers_traceparent() {
    let (receiver, collector) = Receiver::start().await;
    let fx = TroupeDir::new(
        "model: {base_url: '{{MODEL_URL}}', model: mock-model}\napprovals: {require_approval: [terminal]}\n",
        "- tool_calls:\n    - name: terminal\n      arguments: {command: echo traced-approval}\n- text: Hello there.\n",
    )
    .await;
    let mut command = fx.troupe();
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .args(["serve", "--port", "0", "--no-dispatch"]);
    let served = Served::spawn(command, Some(TOKEN)).await;
    let base = served.base.clone();
    let session_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let message_trace = "0af7651916cd43dd8448eb211c80319c";
    let client = served.client();
    let created: Value = client
        .post(format!("{base}/api/sessions"))
        .header(
            "traceparent",
            format!("00-{session_trace}-00f067aa0ba902b7-01"),
        )
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["session_id"].as_str().unwrap();
    let accepted = client
        .post(format!("{base}/api/sessions/{id}/messages"))
        .header(
            "traceparent",
            format!("00-{message_trace}-b7ad6b7169203331-01"),
        )
        .json(&serde_json::json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status().as_u16(), 202);
    // The terminal call waits for a person, who approves it a little later.
    let get = |path: String| {
        let client = client.clone();
        async move {
            client
                .get(path)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let request = loop {
        let all = get(format!("{base}/api/approvals")).await;
        if let Some(first) = all["approvals"].as_array().and_then(|a| a.first()) {
            break first["request_id"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    client
        .post(format!("{base}/api/approvals/{request}"))
        .json(&serde_json::json!({"choice": "once"}))
        .send()
        .await
        .unwrap();
    let outcome = loop {
        let shown = get(format!("{base}/api/sessions/{id}")).await;
        if shown["busy"] == false && !shown["last_outcome"].is_null() {
            break shown["last_outcome"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(outcome["text"], "Hello there.", "{outcome}");
    // A clean stop flushes the exporter.
    served.stop().await;
    let spans = receiver.spans();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let session = spans
        .iter()
        .find(|s| s.name == "session")
        .expect("a session span");
    assert_eq!(hex(&session.trace_id), session_trace);
    assert_eq!(hex(&session.parent_span_id), "00f067aa0ba902b7");
    let turn = spans
        .iter()
        .find(|s| s.name == "turn")
        .expect("a turn span");
    assert_eq!(hex(&turn.trace_id), message_trace, "the message's trace");
    assert_eq!(hex(&turn.parent_span_id), "b7ad6b7169203331");
    assert!(
        spans
            .iter()
            .any(|s| s.name.starts_with("chat ") && s.parent_span_id == turn.span_id),
        "the model request goes under the turn"
    );
    // The person's wait is a span of its own, under the call it held up.
    let call = spans
        .iter()
        .find(|s| s.name == "execute_tool terminal")
        .expect("the terminal call's span");
    assert_eq!(call.parent_span_id, turn.span_id);
    let wait = spans
        .iter()
        .find(|s| s.name == "approval_wait")
        .expect("an approval_wait span");
    assert_eq!(wait.parent_span_id, call.span_id);
    assert_eq!(
        text(wait, "troupe.approval.request_id").as_deref(),
        Some(request.as_str())
    );
    assert!(
        wait.end_time_unix_nano - wait.start_time_unix_nano >= 50_000_000,
        "it lasts as long as the person took"
    );
}
