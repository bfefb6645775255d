//! The OpenAI-compatible provider against the mock server over real HTTP on 127.0.0.1:
//! streamed and whole answers, tool calls assembled from deltas, what troupe sends, retries
//! (429 with Retry-After, 5xx, broken connections), clear errors, timeouts and cancellation.
//! Run with `cargo test -p troupe-actors --features mock-server --test integration model_openai::`.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use troupe_actors::model::mock_server::{Fault, MockServer};
use troupe_actors::model::{
    ChatMessage, CursorMode, FinishReason, ModelError, ModelProvider, ModelRequest, ModelResponse,
    OpenAiConfig, OpenAiProvider, Script, ScriptTurn, StreamDelta,
};

fn script() -> Script {
    Script::new()
        .turn(
            ScriptTurn::text("Reading both files now.")
                .with_tool_call("read_file", json!({"path": "src/main.rs"}))
                .with_tool_call("search_files", json!({"pattern": "fn main", "path": "é/ü"})),
        )
        .turn(
            ScriptTurn::text("Both files are short and tidy.").when_input_contains("fn main() {}"),
        )
}

fn config(server: &MockServer) -> OpenAiConfig {
    OpenAiConfig::new(server.url(), "mock-model")
        .with_api_key("sk-test")
        .with_retry_delays(Duration::from_millis(10), Duration::from_secs(5))
}

fn tools() -> Vec<serde_json::Value> {
    ["read_file", "search_files"]
        .iter()
        .map(|name| {
            json!({"type": "function", "function": {"name": name, "description": "d",
                "parameters": {"type": "object", "properties": {}}}})
        })
        .collect()
}

fn request(messages: Vec<ChatMessage>) -> ModelRequest {
    ModelRequest {
        messages,
        tools: tools().into(),
        model: None,
        max_tokens: None,
        stream: None,
        notices: None,
        state: None,
    }
}

fn opening() -> Vec<ChatMessage> {
    vec![
        ChatMessage::System {
            content: "You are terse.".into(),
        },
        ChatMessage::User {
            content: "Look at main.rs".into(),
        },
    ]
}

fn drain(rx: &mut mpsc::UnboundedReceiver<StreamDelta>) -> (String, Vec<(usize, String)>) {
    let mut text = String::new();
    let mut started = Vec::new();
    while let Ok(delta) = rx.try_recv() {
        match delta {
            StreamDelta::Text(piece) => text.push_str(&piece),
            StreamDelta::ToolCallStarted { index, name } => started.push((index, name)),
        }
    }
    (text, started)
}

fn assert_first_turn(response: &ModelResponse) {
    assert_eq!(response.content.as_deref(), Some("Reading both files now."));
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    let calls: Vec<(&str, &str, Option<serde_json::Value>)> = response
        .tool_calls
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.name.as_str(),
                serde_json::from_str(&c.arguments).ok(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "call_1_0",
                "read_file",
                Some(json!({"path": "src/main.rs"}))
            ),
            (
                "call_1_1",
                "search_files",
                Some(json!({"pattern": "fn main", "path": "é/ü"}))
            ),
        ]
    );
}

fn assert_counted(response: &ModelResponse) {
    assert!(response.usage.prompt_tokens > 0 && response.usage.completion_tokens > 0);
}

#[tokio::test]
async fn streamed_answer_assembles_tool_calls_and_forwards_text() {
    let server = MockServer::start(script()).await.unwrap();
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut req = request(opening());
    req.stream = Some(tx);
    let response = provider
        .complete(req, CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    assert_counted(&response);
    let (text, started) = drain(&mut rx);
    assert_eq!(text, "Reading both files now.");
    assert_eq!(
        started,
        vec![
            (0, "read_file".to_string()),
            (1, "search_files".to_string())
        ]
    );

    // What troupe sent.
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    let body = &sent[0].body;
    assert!(sent[0].is_stream());
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["parallel_tool_calls"], true);
    assert_eq!(sent[0].tool_names(), vec!["read_file", "search_files"]);
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(
        sent[0].messages()[1],
        json!({"role": "user", "content": "Look at main.rs"})
    );
}

#[tokio::test]
async fn whole_answer_and_the_next_turn_carry_the_history() {
    let server = MockServer::start(script()).await.unwrap();
    let provider = OpenAiProvider::new(config(&server).with_stream(false)).unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut req = request(opening());
    req.stream = Some(tx);
    let first = provider
        .complete(req, CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&first);
    assert_counted(&first);
    // A whole answer still reaches the listener, in one piece.
    let (text, started) = drain(&mut rx);
    assert_eq!(text, "Reading both files now.");
    assert_eq!(started.len(), 2);

    let mut messages = opening();
    messages.push(ChatMessage::Assistant {
        content: first.content.clone(),
        tool_calls: first.tool_calls.clone(),
    });
    for call in &first.tool_calls {
        messages.push(ChatMessage::Tool {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content: "fn main() {}".into(),
        });
    }
    let second = provider
        .complete(request(messages), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        second.content.as_deref(),
        Some("Both files are short and tidy.")
    );
    assert_eq!(second.finish_reason, FinishReason::Stop);
    assert!(second.tool_calls.is_empty());

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert!(!sent[1].is_stream());
    assert!(sent[1].body.get("stream_options").is_none());
    let history = sent[1].messages();
    assert_eq!(history[2]["role"], "assistant");
    assert_eq!(history[2]["tool_calls"][1]["id"], "call_1_1");
    assert_eq!(history[2]["tool_calls"][1]["type"], "function");
    assert_eq!(
        history[2]["tool_calls"][1]["function"]["name"],
        "search_files"
    );
    assert_eq!(history[3]["role"], "tool");
    assert_eq!(history[3]["tool_call_id"], "call_1_0");
}

#[tokio::test]
async fn rate_limit_waits_as_long_as_the_server_asks_then_succeeds() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::RateLimited {
        retry_after: Some("1".into()),
    });
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    // The retry came no sooner than Retry-After said (a lower bound, which cannot flake).
    assert!(sent[1].received_at.duration_since(sent[0].received_at) >= Duration::from_secs(1));
}

#[tokio::test]
async fn retry_after_beyond_the_cap_is_not_waited_for() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::RateLimited {
        retry_after: Some("3600".into()),
    });
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Status { status: 429, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("3600 s") && text.contains("retry_max_delay"),
        "{text}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_then_given_up_on() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::Status(500));
    let provider = OpenAiProvider::new(config(&server).with_max_retries(2)).unwrap();
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    assert_eq!(server.requests().len(), 2);

    for _ in 0..3 {
        server.push_fault(Fault::Status(503));
    }
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ModelError::Status { status: 503, .. }),
        "{text}"
    );
    assert!(text.contains("gave up after 3 attempts"), "{text}");
    assert!(text.contains("told to fail"), "{text}");
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test]
async fn client_errors_are_not_retried_and_name_what_to_check() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::Status(401));
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("check the API key"), "{err}");
    assert_eq!(server.requests().len(), 1);

    let wrong_path = OpenAiProvider::new(OpenAiConfig::new(
        format!("{}/nowhere", server.url()),
        "mock-model",
    ))
    .unwrap();
    let err = wrong_path
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Status { status: 404, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("it usually ends in /v1"), "{err}");
}

#[tokio::test]
async fn dropped_connection_after_text_is_a_clear_error() {
    let server = MockServer::start(script()).await.unwrap();
    // Event 0 is the role, 1 and 2 are text: the listener has seen words when it breaks.
    server.push_fault(Fault::DropMidStream { after_events: 3 });
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut req = request(opening());
    req.stream = Some(tx);
    let err = provider
        .complete(req, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Unreachable { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("broke in the middle of the answer"),
        "{err}"
    );
    assert_eq!(drain(&mut rx).0, "Reading both ");
    // Not retried: the listener would have seen the same words twice.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn dropped_connection_before_anything_was_shown_is_retried() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::DropMidStream { after_events: 2 });
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    assert_eq!(server.requests().len(), 2);

    // The same for a whole answer cut in half.
    server.push_fault(Fault::DropMidStream { after_events: 0 });
    let whole = OpenAiProvider::new(config(&server).with_stream(false)).unwrap();
    let response = whole
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn cancelling_a_slow_stream_returns_cancelled_and_closes_it() {
    let long = "word ".repeat(200);
    let server = MockServer::start(Script::new().turn(ScriptTurn::text(long)))
        .await
        .unwrap();
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_millis(50),
    });
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut req = request(opening());
    req.stream = Some(tx);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(provider.complete(req, cancel.clone()));
    // Cancel once the answer is really streaming.
    assert!(matches!(rx.recv().await, Some(StreamDelta::Text(_))));
    cancel.cancel();
    let result = task.await.unwrap();
    assert!(matches!(result, Err(ModelError::Cancelled)), "{result:?}");
    // The server sees its stream closed early: the connection was dropped, not left open.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.streams_cut_short() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.streams_cut_short(), 1);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_slower_than_the_timeout_times_out() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_secs(30),
    });
    let provider =
        OpenAiProvider::new(config(&server).with_request_timeout(Duration::from_millis(300)))
            .unwrap();
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Timeout { .. }), "{err}");
}

#[tokio::test]
async fn nothing_listening_is_unreachable_with_a_hint() {
    // A port that was free a moment ago and is closed now.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let provider = OpenAiProvider::new(
        OpenAiConfig::new(format!("http://{addr}/v1"), "m")
            .with_max_retries(1)
            .with_retry_delays(Duration::from_millis(5), Duration::from_millis(10)),
    )
    .unwrap();
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ModelError::Unreachable { .. }), "{text}");
    assert!(text.contains(&addr.to_string()), "{text}");
    assert!(text.contains("check that the server is running"), "{text}");
    assert!(text.contains("gave up after 2 attempts"), "{text}");
}

#[tokio::test]
async fn servers_that_answer_in_their_own_way() {
    let server = MockServer::start(script()).await.unwrap();
    let provider = OpenAiProvider::new(config(&server)).unwrap();

    // Asked to stream, it sends one JSON answer (arguments as an object, no ids, no usage).
    server.push_fault(Fault::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: r#"{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"read_file","arguments":{"path":"a"}}}]},"finish_reason":"tool_calls"}]}"#.into(),
    });
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(response.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert!(response.tool_calls[0].id.starts_with("call_"));

    // An SSE stream with keep-alive comments, "" finish reasons, parts, and no [DONE].
    server.push_fault(Fault::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: concat!(
            ": OPENROUTER PROCESSING\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":[{\"type\":\"text\",\"text\":\"Hi \"}]},\"finish_reason\":\"\"}]}\n\n",
            "data:{\"choices\":[{\"delta\":{\"content\":\"there\"},\"finish_reason\":\"stop\"}],\"usage\":{}}\n\n",
        )
        .into(),
    });
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Hi there"));
    assert_eq!(response.finish_reason, FinishReason::Stop);

    // An error inside the stream passes: asked again, the answer comes.
    server.push_fault(Fault::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: "data: {\"error\":{\"message\":\"provider overloaded\"}}\n\n".into(),
    });
    let before = server.requests().len();
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    assert_eq!(server.requests().len(), before + 2);

    // Not JSON at all: say what was received and what to check.
    server.push_fault(Fault::Raw {
        status: 200,
        content_type: "text/html".into(),
        body: "<html>login page</html>".into(),
    });
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ModelError::Protocol(_)), "{text}");
    assert!(
        text.contains("<html>login page</html>") && text.contains("/v1"),
        "{text}"
    );
}

#[tokio::test]
async fn many_conversations_share_one_server_and_provider() {
    let server = MockServer::start(script()).await.unwrap();
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let mut tasks = Vec::new();
    for n in 0..16 {
        let provider = provider.clone();
        tasks.push(tokio::spawn(async move {
            let mut messages = vec![ChatMessage::User {
                content: format!("session {n}"),
            }];
            let first = provider
                .complete(request(messages.clone()), CancellationToken::new())
                .await
                .unwrap();
            messages.push(ChatMessage::Assistant {
                content: first.content,
                tool_calls: first.tool_calls.clone(),
            });
            for call in first.tool_calls {
                messages.push(ChatMessage::Tool {
                    tool_call_id: call.id,
                    name: call.name,
                    content: "fn main() {}".into(),
                });
            }
            provider
                .complete(request(messages), CancellationToken::new())
                .await
                .unwrap()
        }));
    }
    for task in tasks {
        let last = task.await.unwrap();
        assert_eq!(
            last.content.as_deref(),
            Some("Both files are short and tidy.")
        );
    }
    assert_eq!(server.requests().len(), 32);
}

#[tokio::test]
async fn sequential_scripts_walk_on_and_exhausted_ones_say_so() {
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::text("first"))
        .turn(ScriptTurn::text("second"));
    let server = MockServer::start(script).await.unwrap();
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let mut answers = Vec::new();
    for _ in 0..2 {
        // The same conversation each time: only the server's cursor moves.
        let response = provider
            .complete(request(opening()), CancellationToken::new())
            .await
            .unwrap();
        answers.push(response.content.unwrap_or_default());
    }
    assert_eq!(answers, vec!["first", "second"]);
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Status { status: 400, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no turn left"), "{err}");

    let closing = MockServer::start(Script::new().when_exhausted("That is all."))
        .await
        .unwrap();
    let provider = OpenAiProvider::new(config(&closing)).unwrap();
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("That is all."));
}

#[tokio::test]
async fn optional_fields_a_server_refuses_are_dropped() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: r#"{"error":{"message":"Unrecognized request argument supplied: stream_options"}}"#
            .into(),
    });
    server.push_fault(Fault::Raw {
        status: 422,
        content_type: "application/json".into(),
        body: r#"{"detail":"extra field not permitted: parallel_tool_calls"}"#.into(),
    });
    let provider = OpenAiProvider::new(config(&server)).unwrap();
    let response = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap();
    assert_first_turn(&response);
    let sent = server.requests();
    assert_eq!(sent.len(), 3);
    assert!(sent[1].body.get("stream_options").is_none());
    assert!(sent[2].body.get("parallel_tool_calls").is_none());
    // Still streamed, still offering the tools.
    assert!(sent[2].is_stream());
    assert_eq!(sent[2].tool_names().len(), 2);
    // Without stream_options the server is not asked for usage, and this one sends none.
    assert_eq!(response.usage.prompt_tokens, 0);

    // Any other refusal is returned as it is.
    server.push_fault(Fault::Status(400));
    let err = provider
        .complete(request(opening()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Status { status: 400, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("check the model name"), "{err}");
}
