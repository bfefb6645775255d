//! What real OpenAI-compatible servers (local ones above all) do wrong, reproduced by the mock
//! server over real HTTP, and how the provider gets the answer anyway: a tool-call parser that
//! fails (500, or an error event in a stream), a stream without `[DONE]`, calls written in the
//! text in every form, `tools` refused; the switch to text tool calls, the per-turn retry
//! budget, and the notices that become events.
//! Run with `cargo test -p troupe-actors --features mock-server --test integration model_failures::`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use troupe_actors::model::mock_server::{CallForm, Fault, MockServer, RecordedRequest};
use troupe_actors::model::{
    ChatMessage, FinishReason, ModelError, ModelNotice, ModelProvider, ModelRequest, ModelResponse,
    OpenAiConfig, OpenAiProvider, ProviderSettings, Script, ScriptTurn, SessionModelState,
    ToolCallMode, ToolCallRequest,
};

fn script() -> Script {
    Script::new()
        .turn(ScriptTurn::text("Let me add them.").with_tool_call("add", json!({"a": 2, "b": 3})))
        .turn(ScriptTurn::text("The sum is 5.").when_input_contains("5"))
}

fn provider(server: &MockServer, mode: ToolCallMode, stream: bool) -> OpenAiProvider {
    let settings = ProviderSettings {
        tool_calls: mode,
        ..ProviderSettings::default()
    };
    OpenAiProvider::new(
        OpenAiConfig::new(server.url(), "local")
            .with_stream(stream)
            .with_retry_delays(Duration::from_millis(5), Duration::from_secs(2))
            .with_settings(settings),
    )
    .unwrap()
}

struct Asked {
    request: ModelRequest,
    notices: mpsc::UnboundedReceiver<ModelNotice>,
}

fn ask(state: &Arc<SessionModelState>, messages: Vec<ChatMessage>) -> Asked {
    let (tx, notices) = mpsc::unbounded_channel();
    Asked {
        request: ModelRequest {
            messages,
            tools: vec![json!({"type": "function", "function": {"name": "add",
                "description": "Adds two numbers.",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                    "b": {"type": "number"}}}}})]
            .into(),
            model: None,
            max_tokens: None,
            stream: None,
            notices: Some(tx),
            state: Some(Arc::clone(state)),
        },
        notices,
    }
}

fn opening() -> Vec<ChatMessage> {
    vec![
        ChatMessage::System {
            content: "You are terse.".into(),
        },
        ChatMessage::User {
            content: "What is 2 + 3?".into(),
        },
    ]
}

async fn complete(
    provider: &OpenAiProvider,
    asked: Asked,
) -> (Result<ModelResponse, ModelError>, Vec<ModelNotice>) {
    let Asked {
        request,
        mut notices,
    } = asked;
    let result = provider.complete(request, CancellationToken::new()).await;
    let mut seen = Vec::new();
    while let Ok(notice) = notices.try_recv() {
        seen.push(notice);
    }
    (result, seen)
}

/// One request of a fresh session in `mode`; the session's state comes back for later checks.
async fn ask_fresh(
    server: &MockServer,
    mode: ToolCallMode,
    stream: bool,
    messages: Vec<ChatMessage>,
) -> (
    Result<ModelResponse, ModelError>,
    Vec<ModelNotice>,
    Arc<SessionModelState>,
) {
    let state = Arc::new(SessionModelState::new());
    let (result, notices) = complete(&provider(server, mode, stream), ask(&state, messages)).await;
    (result, notices, state)
}

fn assert_adds(response: &ModelResponse) {
    assert_eq!(response.tool_calls.len(), 1, "{response:?}");
    assert_eq!(response.tool_calls[0].name, "add");
    assert_eq!(
        serde_json::from_str::<Value>(&response.tool_calls[0].arguments).unwrap(),
        json!({"a": 2, "b": 3})
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.content.as_deref(), Some("Let me add them."));
}

fn system_text(request: &RecordedRequest) -> String {
    request.messages()[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn reasons(notices: &[ModelNotice]) -> Vec<String> {
    notices
        .iter()
        .map(|n| match n {
            ModelNotice::Retrying { reason, .. } => reason.as_str().to_string(),
            ModelNotice::ToolCallsSwitched { to, .. } => format!("switched to {}", to.as_str()),
        })
        .collect()
}

#[tokio::test]
async fn an_unreadable_answer_is_asked_again_with_a_stop_and_a_nudge() {
    for stream in [false, true] {
        let server = MockServer::start(script()).await.unwrap();
        server.push_fault(Fault::UnreadableOutput);
        let (result, notices, state) =
            ask_fresh(&server, ToolCallMode::Auto, stream, opening()).await;
        assert_adds(&result.unwrap());
        assert_eq!(
            reasons(&notices),
            vec!["unreadable_output"],
            "stream {stream}"
        );
        let sent = server.requests();
        assert_eq!(sent.len(), 2);
        assert!(sent[0].body.get("stop").is_none());
        assert_eq!(sent[1].body["stop"], json!(["<tool_response"]));
        let last = sent[1].messages().last().cloned().unwrap();
        assert!(
            last["content"]
                .as_str()
                .unwrap()
                .contains("could not be read"),
            "{last}"
        );
        // Still native.
        assert_eq!(sent[1].tool_names(), vec!["add"]);
        assert!(!state.uses_text_tools());
    }
}

#[tokio::test]
async fn auto_switches_the_session_to_text_after_repeated_unreadable_answers() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::UnreadableOutput);
    server.push_fault(Fault::UnreadableOutput);
    let (result, notices, state) = ask_fresh(&server, ToolCallMode::Auto, true, opening()).await;
    let response = result.unwrap();
    assert_adds(&response);
    assert_eq!(
        reasons(&notices),
        vec!["unreadable_output", "switched to text"]
    );
    assert!(state.uses_text_tools());
    let sent = server.requests();
    assert_eq!(sent.len(), 3);
    // The text request: no tools field, the tools in the system prompt, a stop on results.
    assert!(sent[2].body.get("tools").is_none());
    assert!(sent[2].body.get("tool_choice").is_none());
    let system = system_text(&sent[2]);
    assert!(system.starts_with("You are terse.\n\n# Tools"), "{system}");
    assert!(system.contains("{\"name\": \"TOOL_NAME\""), "{system}");
    assert!(
        system.contains("\n- add(a?: number, b?: number): Adds two numbers.\n"),
        "{system}"
    );
    assert_eq!(sent[2].body["stop"], json!(["<tool_response"]));

    // The next request of the session stays in text mode, with the history in the told form.
    let mut messages = opening();
    messages.push(ChatMessage::Assistant {
        content: response.content.clone(),
        tool_calls: response.tool_calls.clone(),
    });
    messages.push(ChatMessage::Tool {
        tool_call_id: response.tool_calls[0].id.clone(),
        name: "add".into(),
        content: "5".into(),
    });
    // The provider keeps nothing between requests: the session's state does.
    let provider = provider(&server, ToolCallMode::Auto, true);
    let (result, notices) = complete(&provider, ask(&state, messages)).await;
    let answer = result.unwrap();
    assert_eq!(answer.content.as_deref(), Some("The sum is 5."));
    assert!(answer.tool_calls.is_empty());
    assert!(notices.is_empty());
    let sent = server.requests();
    let history = sent[3].messages();
    assert!(sent[3].body.get("tools").is_none());
    assert_eq!(history[2]["role"], "assistant");
    assert!(
        history[2]["content"]
            .as_str()
            .unwrap()
            .ends_with("\n{\"name\":\"add\",\"arguments\":{\"a\":2,\"b\":3}}"),
        "{}",
        history[2]
    );
    assert!(history[2].get("tool_calls").is_none());
    assert_eq!(history[3]["role"], "user");
    assert_eq!(
        history[3]["content"],
        "<tool_response name=\"add\">\n5\n</tool_response>"
    );
}

#[tokio::test]
async fn native_mode_changes_the_request_then_says_to_use_text() {
    let server = MockServer::start(script()).await.unwrap();
    for _ in 0..3 {
        server.push_fault(Fault::UnreadableOutput);
    }
    let (result, notices, state) = ask_fresh(&server, ToolCallMode::Native, false, opening()).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("peg-native format"), "{err}");
    assert!(
        err.contains("set model.tool_calls to text or auto"),
        "{err}"
    );
    assert_eq!(reasons(&notices), vec!["unreadable_output"; 2]);
    let sent = server.requests();
    assert_eq!(sent.len(), 3);
    // The third try also samples warmer.
    assert!(sent[1].body.get("temperature").is_none());
    assert_eq!(sent[2].body["temperature"], 0.5);
    assert!(!state.uses_text_tools());
}

#[tokio::test]
async fn a_server_that_refuses_tools_gets_text_at_once_in_auto_and_an_error_in_native() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::RefuseTools);
    let (result, notices, _) = ask_fresh(&server, ToolCallMode::Auto, true, opening()).await;
    assert_adds(&result.unwrap());
    assert_eq!(reasons(&notices), vec!["switched to text"]);
    assert_eq!(server.requests().len(), 2);

    server.push_fault(Fault::RefuseTools);
    let (result, _, _) = ask_fresh(&server, ToolCallMode::Native, true, opening()).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("tools are not supported"), "{err}");
    assert!(err.contains("set model.tool_calls to text"), "{err}");
}

#[tokio::test]
async fn stream_errors_and_streams_without_done_are_retried() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::StreamError {
        message: "upstream connection reset".into(),
    });
    server.push_fault(Fault::NoDone);
    let (result, notices, _) = ask_fresh(&server, ToolCallMode::Auto, true, opening()).await;
    assert_adds(&result.unwrap());
    assert_eq!(reasons(&notices), vec!["transient", "transient"]);
    let ModelNotice::Retrying { error, .. } = &notices[0] else {
        panic!("{notices:?}")
    };
    assert!(error.contains("upstream connection reset"), "{error}");
    let ModelNotice::Retrying { error, .. } = &notices[1] else {
        panic!("{notices:?}")
    };
    assert!(error.contains("without [DONE]"), "{error}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn the_retry_budget_is_shared_by_the_requests_of_a_turn() {
    let server = MockServer::start(script()).await.unwrap();
    let settings = ProviderSettings {
        retry_budget: 2,
        ..ProviderSettings::default()
    };
    let provider = OpenAiProvider::new(
        OpenAiConfig::new(server.url(), "local")
            .with_retry_delays(Duration::from_millis(5), Duration::from_secs(2))
            .with_settings(settings),
    )
    .unwrap();
    let state = Arc::new(SessionModelState::new());
    state.begin_turn();
    server.push_fault(Fault::Status(503));
    let (result, _) = complete(&provider, ask(&state, opening())).await;
    assert_adds(&result.unwrap());
    server.push_fault(Fault::Status(502));
    server.push_fault(Fault::Status(502));
    let (result, notices) = complete(&provider, ask(&state, opening())).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("retry budget of 2 is spent"), "{err}");
    assert_eq!(notices.len(), 1);
    // A new turn has its budget back.
    state.begin_turn();
    let (result, _) = complete(&provider, ask(&state, opening())).await;
    assert_adds(&result.unwrap());
}

#[tokio::test]
async fn calls_written_in_the_text_are_read_in_every_form() {
    for form in [
        CallForm::Tagged,
        CallForm::Bare,
        CallForm::Fenced,
        CallForm::DoubledBraces,
        CallForm::SingleQuotes,
        CallForm::TrailingCommas,
    ] {
        for mode in [ToolCallMode::Auto, ToolCallMode::Native, ToolCallMode::Text] {
            let server = MockServer::start(script()).await.unwrap();
            server.push_fault(Fault::CallsInContent(form));
            server.set_text_call_form(form);
            let (result, notices, _) = ask_fresh(&server, mode, true, opening()).await;
            let response = result.unwrap();
            assert_adds(&response);
            assert!(notices.is_empty(), "{form:?} {mode:?}: {notices:?}");
            assert_eq!(server.requests().len(), 1);
            assert_eq!(
                server.requests()[0].body.get("tools").is_none(),
                mode == ToolCallMode::Text
            );
        }
    }
}

#[tokio::test]
async fn several_calls_in_one_text_reply_and_unknown_names_in_native_text() {
    let script = Script::new().turn(
        ScriptTurn::text("Both at once.")
            .with_tool_call("add", json!({"a": 1, "b": 1}))
            .with_tool_call("add", json!({"a": 2, "b": 2})),
    );
    let server = MockServer::start(script).await.unwrap();
    let (result, _, _) = ask_fresh(&server, ToolCallMode::Text, false, opening()).await;
    let response = result.unwrap();
    let arguments: Vec<&str> = response
        .tool_calls
        .iter()
        .map(|c| c.arguments.as_str())
        .collect();
    assert_eq!(arguments, vec!["{\"a\":1,\"b\":1}", "{\"a\":2,\"b\":2}"]);
    assert_ne!(response.tool_calls[0].id, response.tool_calls[1].id);
    assert_eq!(response.content.as_deref(), Some("Both at once."));

    // A native answer whose text names a tool that was not offered stays text.
    let server = MockServer::start(Script::new().turn(ScriptTurn::text(
        "Use {\"name\": \"multiply\", \"arguments\": {\"a\": 2}} next time.",
    )))
    .await
    .unwrap();
    let (result, _, _) = ask_fresh(&server, ToolCallMode::Auto, true, opening()).await;
    let response = result.unwrap();
    assert!(response.tool_calls.is_empty());
    assert!(response.content.unwrap().contains("multiply"));
}

#[tokio::test]
async fn errors_that_will_not_change_fail_at_once() {
    let server = MockServer::start(script()).await.unwrap();
    for status in [401, 404, 400] {
        server.push_fault(Fault::Status(status));
        let before = server.requests().len();
        let (result, notices, _) = ask_fresh(&server, ToolCallMode::Auto, true, opening()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(&err, ModelError::Status { status: s, .. } if *s == status),
            "{err}"
        );
        assert!(err.to_string().contains("check"), "{err}");
        assert!(notices.is_empty());
        assert_eq!(server.requests().len(), before + 1);
    }
}

#[tokio::test]
async fn text_mode_rewrites_a_conversation_with_bad_arguments_faithfully() {
    // Arguments the model wrote that are not JSON travel back as the model wrote them.
    let server = MockServer::start(Script::new().when_exhausted("ok"))
        .await
        .unwrap();
    let mut messages = opening();
    messages.push(ChatMessage::Assistant {
        content: None,
        tool_calls: vec![ToolCallRequest {
            id: "c1".into(),
            name: "add".into(),
            arguments: "{a: 2".into(),
        }],
    });
    messages.push(ChatMessage::Tool {
        tool_call_id: "c1".into(),
        name: "add".into(),
        content: "Invalid tool arguments".into(),
    });
    let (result, _, _) = ask_fresh(&server, ToolCallMode::Text, false, messages).await;
    assert_eq!(result.unwrap().content.as_deref(), Some("ok"));
    let sent = server.requests();
    let history = sent[0].messages();
    assert_eq!(
        history[2]["content"],
        "{\"name\":\"add\",\"arguments\":\"{a: 2\"}"
    );
}

#[tokio::test]
async fn the_settings_request_timeout_bounds_each_attempt() {
    let server = MockServer::start(script()).await.unwrap();
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_secs(30),
    });
    let settings = ProviderSettings {
        request_timeout: Some(1),
        ..ProviderSettings::default()
    };
    // The provider's own timeout (600 s) gives way to the one in the settings.
    let provider =
        OpenAiProvider::new(OpenAiConfig::new(server.url(), "local").with_settings(settings))
            .unwrap();
    let state = Arc::new(SessionModelState::new());
    let (result, _) = complete(&provider, ask(&state, opening())).await;
    let err = result.unwrap_err();
    assert!(matches!(err, ModelError::Timeout { seconds: 1 }), "{err}");
}
