use super::*;
use serde_json::json;
use tokio::sync::mpsc;

fn request(messages: Vec<ChatMessage>) -> ModelRequest {
    ModelRequest {
        messages,
        tools: Vec::new().into(),
        model: None,
        max_tokens: None,
        stream: None,
        notices: None,
        state: None,
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User {
        content: text.to_string(),
    }
}

fn assistant(response: &ModelResponse) -> ChatMessage {
    ChatMessage::Assistant {
        content: response.content.clone(),
        tool_calls: response.tool_calls.clone(),
    }
}

fn tool(id: &str, content: &str) -> ChatMessage {
    ChatMessage::Tool {
        tool_call_id: id.to_string(),
        name: "t".to_string(),
        content: content.to_string(),
    }
}

const SCRIPT: &str = r##"
when_exhausted: "nothing more"
turns:
  - text: "Let me look."
    tool_calls:
      - name: read_file
        arguments: {path: README.md}
      - name: search_files
        arguments: '{"pattern": "x"'
  - match: "# troupe"
    text: "It is the troupe README."
  - text: "Fallback answer."
"##;

#[test]
fn yaml_script_reads_all_fields() {
    let script = Script::from_yaml_str(SCRIPT).unwrap();
    assert_eq!(script.cursor, CursorMode::Conversation);
    assert_eq!(script.when_exhausted.as_deref(), Some("nothing more"));
    assert_eq!(script.turns.len(), 3);
    assert_eq!(script.turns[1].matches.as_deref(), Some("# troupe"));
    let calls = script.calls_of(0);
    assert_eq!(calls[0].id, "call_1_0");
    assert_eq!(calls[0].arguments, r#"{"path":"README.md"}"#);
    // A string is sent exactly as written, even when it is not valid JSON.
    assert_eq!(calls[1].id, "call_1_1");
    assert_eq!(calls[1].arguments, r#"{"pattern": "x""#);
}

#[test]
fn json_list_and_builder_give_the_same_script() {
    let from_json = Script::from_json_str(
            r#"[{"text": "hi", "delay_ms": 5}, {"tool_calls": [{"name": "t", "arguments": {"a": 1}}]}]"#,
        )
        .unwrap();
    let built = Script::new()
        .turn(ScriptTurn::text("hi").with_delay(Duration::from_millis(5)))
        .turn(ScriptTurn::tool_call("t", json!({"a": 1})));
    assert_eq!(from_json, built);
    // YAML reads JSON too.
    assert_eq!(
            Script::from_yaml_str(r#"[{"text": "hi", "delay_ms": 5}, {"tool_calls": [{"name": "t", "arguments": {"a": 1}}]}]"#)
                .unwrap(),
            built
        );
}

#[test]
fn bad_scripts_say_what_to_fix() {
    let typo = Script::from_yaml_str("- text: hi\n  tool_call: []\n").unwrap_err();
    assert!(typo.to_string().contains("tool_call"), "{typo}");
    let empty = Script::from_yaml_str("- delay_ms: 3\n").unwrap_err();
    assert!(empty.to_string().contains("turn 1 has neither"), "{empty}");
    let args = Script::from_yaml_str("- tool_calls: [{name: t, arguments: 3}]\n").unwrap_err();
    assert!(args.to_string().contains("must be an object"), "{args}");
    let shape = Script::from_yaml_str("just words").unwrap_err();
    assert!(
        shape.to_string().contains("expected a list of turns"),
        "{shape}"
    );
    let cursor = Script::from_yaml_str("cursor: sideways\nturns: []\n").unwrap_err();
    assert!(cursor.to_string().contains("sideways"), "{cursor}");
    let missing = Script::load("/nonexistent/script.yaml").unwrap_err();
    assert!(
        missing.to_string().contains("/nonexistent/script.yaml"),
        "{missing}"
    );
}

#[test]
fn load_reads_files_by_extension() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("turns.yaml");
    std::fs::write(&yaml, "- text: from yaml\n").unwrap();
    let json = dir.path().join("turns.json");
    std::fs::write(&json, r#"{"turns": [{"text": "from json"}]}"#).unwrap();
    assert_eq!(
        Script::load(&yaml).unwrap().turns[0].text.as_deref(),
        Some("from yaml")
    );
    let provider = ScriptedProvider::from_file(&json).unwrap();
    assert!(provider.describe().contains("turns.json"));
}

#[tokio::test]
async fn conversation_cursor_follows_each_conversation() {
    let provider = ScriptedProvider::new(Script::from_yaml_str(SCRIPT).unwrap());
    let token = CancellationToken::new;

    let mut convo = vec![user("read the readme")];
    let first = provider
        .complete(request(convo.clone()), token())
        .await
        .unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(first.tool_calls.len(), 2);
    assert!(first.usage.prompt_tokens > 0);

    // A second conversation on the same provider starts at the top.
    let other = provider
        .complete(request(vec![user("another session")]), token())
        .await
        .unwrap();
    assert_eq!(other, first);

    // The tool result matches turn 2.
    convo.push(assistant(&first));
    convo.push(tool("call_1_0", "# troupe\nan orchestrator"));
    convo.push(tool("call_1_1", "no matches"));
    let second = provider
        .complete(request(convo.clone()), token())
        .await
        .unwrap();
    assert_eq!(second.content.as_deref(), Some("It is the troupe README."));
    assert_eq!(second.finish_reason, FinishReason::Stop);

    convo.push(assistant(&second));
    convo.push(user("and then?"));
    let third = provider
        .complete(request(convo.clone()), token())
        .await
        .unwrap();
    assert_eq!(third.content.as_deref(), Some("Fallback answer."));

    convo.push(assistant(&third));
    convo.push(user("more?"));
    let fourth = provider.complete(request(convo), token()).await.unwrap();
    assert_eq!(fourth.content.as_deref(), Some("nothing more"));
}

#[tokio::test]
async fn unmatched_input_skips_matching_turns() {
    let script = Script::new()
        .turn(ScriptTurn::text("about cats").when_input_contains("cat"))
        .turn(ScriptTurn::text("about dogs").when_input_contains("dog"));
    let provider = ScriptedProvider::new(script);
    let dogs = provider
        .complete(
            request(vec![user("tell me of a dog")]),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(dogs.content.as_deref(), Some("about dogs"));
    let neither = provider
        .complete(request(vec![user("birds")]), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(neither, ModelError::ScriptExhausted { turns: 2 }));
}

#[tokio::test]
async fn sequential_cursor_and_forks() {
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::text("one"))
        .turn(ScriptTurn::text("two"));
    let provider = ScriptedProvider::new(script);
    let same = vec![user("hi")];
    let a = provider
        .complete(request(same.clone()), CancellationToken::new())
        .await
        .unwrap();
    let fork = provider.fork();
    let b = provider
        .complete(request(same.clone()), CancellationToken::new())
        .await
        .unwrap();
    let fork_a = fork
        .complete(request(same.clone()), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(a.content.as_deref(), Some("one"));
    assert_eq!(b.content.as_deref(), Some("two"));
    assert_eq!(fork_a.content.as_deref(), Some("one"));
    let done = provider
        .complete(request(same), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(done.to_string().contains("no more turns"), "{done}");
}

#[tokio::test]
async fn cancel_during_delay_returns_cancelled_and_keeps_the_turn() {
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::text("slow").with_delay(Duration::from_secs(600)));
    let provider = ScriptedProvider::new(script);
    let cancel = CancellationToken::new();
    let pending = provider.complete(request(vec![user("hi")]), cancel.clone());
    let task = tokio::spawn(pending);
    cancel.cancel();
    let result = task.await.unwrap();
    assert!(matches!(result, Err(ModelError::Cancelled)), "{result:?}");
    // The cancelled request did not use the turn up.
    let mut used = provider.used.lock().unwrap().clone();
    assert_eq!(provider.script.pick_sequential(&mut used, []), Some(0));

    let already = CancellationToken::new();
    already.cancel();
    let result = provider.complete(request(vec![user("hi")]), already).await;
    assert!(matches!(result, Err(ModelError::Cancelled)));
}

#[tokio::test]
async fn deltas_stream_text_and_call_starts() {
    let provider = ScriptedProvider::new(Script::from_yaml_str(SCRIPT).unwrap());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut req = request(vec![user("go")]);
    req.stream = Some(tx);
    let response = provider
        .complete(req, CancellationToken::new())
        .await
        .unwrap();
    let mut text = String::new();
    let mut started = Vec::new();
    while let Ok(delta) = rx.try_recv() {
        match delta {
            StreamDelta::Text(t) => text.push_str(&t),
            StreamDelta::ToolCallStarted { index, name } => started.push((index, name)),
        }
    }
    assert_eq!(Some(text.as_str()), response.content.as_deref());
    assert_eq!(
        started,
        vec![
            (0, "read_file".to_string()),
            (1, "search_files".to_string())
        ]
    );
}

#[tokio::test]
async fn many_sessions_share_one_provider() {
    let provider = Arc::new(ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call("t", json!({})))
            .turn(ScriptTurn::text("done")),
    ));
    let mut tasks = Vec::new();
    for n in 0..50 {
        let provider = Arc::clone(&provider);
        tasks.push(tokio::spawn(async move {
            let mut convo = vec![user(&format!("session {n}"))];
            let first = provider
                .complete(request(convo.clone()), CancellationToken::new())
                .await
                .unwrap();
            convo.push(assistant(&first));
            convo.push(tool("call_1_0", "ok"));
            provider
                .complete(request(convo), CancellationToken::new())
                .await
                .unwrap()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().content.as_deref(), Some("done"));
    }
}
