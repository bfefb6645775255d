//! A turn end to end: the core loop and error results.

use super::*;

#[actix_rt::test]
async fn core_loop_runs_a_tool_and_answers() {
    let registry = Registry::with_tools([tool("echo", read_only(), |args, _ctx| {
        Box::pin(async move {
            ToolResult::text(format!("echo: {}", args["text"].as_str().unwrap_or("")))
        })
    })]);
    let script = Script::new()
        .turn(ScriptTurn::tool_call("echo", json!({"text": "hi"})))
        .turn(ScriptTurn::text("all done"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let mut events = session.events();

    let outcome = session.send("say hi").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.text, "all done");
    assert_eq!(outcome.calls.len(), 1);
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);

    let conversation = session.conversation().await.unwrap();
    let tool_message = conversation.iter().find_map(|m| match m {
        ChatMessage::Tool { content, .. } => Some(content.clone()),
        _ => None,
    });
    assert_eq!(tool_message.as_deref(), Some("echo: hi"));

    let kinds: Vec<String> = drain(&mut events)
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "turn_started",
            "model_request",
            "model_usage",
            "tool_call_started",
            "tool_call_finished",
            "model_request",
            "model_usage",
            "final"
        ]
    );
}

#[actix_rt::test]
async fn bad_arguments_and_unknown_tools_get_their_own_error_results() {
    let registry = Registry::with_tools([tool("echo", read_only(), |_args, _ctx| {
        Box::pin(async { ToolResult::text("ran") })
    })]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("echo", json!("[1, 2]"))
                .with_tool_call("echo", json!("{not json"))
                .with_tool_call("nope", json!({}))
                .with_tool_call("echo", json!({})),
        )
        .turn(ScriptTurn::text("ok"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let outcome = session.send("go").await.unwrap();
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            CallStatus::Error,
            CallStatus::Error,
            CallStatus::Error,
            CallStatus::Ok
        ]
    );
    assert!(
        outcome.calls[0]
            .result
            .to_model_text()
            .contains("JSON object")
    );
    assert!(
        outcome.calls[2]
            .result
            .to_model_text()
            .contains("no tool called 'nope'")
    );
}

#[actix_rt::test]
async fn a_tool_in_end_turn_after_ends_the_turn_when_it_succeeds() {
    let registry = Registry::with_tools([
        tool("finish", read_only(), |args, _ctx| {
            Box::pin(async move {
                if args["ok"] == json!(true) {
                    ToolResult::text("finished")
                } else {
                    ToolResult::error("refused: not yet")
                }
            })
        }),
        tool("echo", read_only(), |_args, _ctx| {
            Box::pin(async { ToolResult::text("echoed") })
        }),
    ]);
    // A refused call does not end the turn; a successful one ends it once its batch (the
    // echo beside it included) has run, without the model's closing answer.
    let script = Script::new()
        .turn(ScriptTurn::tool_call("finish", json!({"ok": false})))
        .turn(
            ScriptTurn::tool_call("finish", json!({"ok": true})).with_tool_call("echo", json!({})),
        )
        .turn(ScriptTurn::text("never asked for"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open_with(
        &registry,
        script,
        &sup,
        SessionConfig {
            end_turn_after: vec!["finish".into()],
            ..SessionConfig::default()
        },
    )
    .await;
    let outcome = session.send("go").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.text, "finished");
    assert_eq!(outcome.model_requests, 2, "{outcome:?}");
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [CallStatus::Error, CallStatus::Ok, CallStatus::Ok],
        "{outcome:?}"
    );
    assert_eq!(session.spent().requests, 2);
    // The conversation ends on the batch's results, every call answered.
    let conversation = session.conversation().await.unwrap();
    assert!(
        matches!(conversation.last(), Some(ChatMessage::Tool { .. })),
        "{conversation:?}"
    );
}
