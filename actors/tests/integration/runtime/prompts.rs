//! Questions to a person and streamed text: the batch deadline skips time spent waiting, identical questions share one prompt.

use super::*;

#[actix_rt::test]
async fn the_batch_deadline_skips_time_spent_waiting_for_a_person() {
    tokio::time::pause();
    let registry = Registry::with_tools([
        tool("nap", read_only(), |args, _ctx| {
            let secs = args["secs"].as_u64().unwrap_or(0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                ToolResult::text(format!("napped {secs} s"))
            })
        }),
        tool("publish", read_only(), |_a, _c| {
            Box::pin(async { ToolResult::text("published") })
        }),
    ]);
    let script = Script::new()
        .turn(ScriptTurn::tool_call("nap", json!({"secs": 8})).with_tool_call("publish", json!({})))
        .turn(ScriptTurn::text("first done").when_input_contains("published"))
        .turn(ScriptTurn::tool_call("nap", json!({"secs": 20})).when_input_contains("second"))
        .turn(ScriptTurn::text("second done"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["publish"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let config = SessionConfig {
        runner: RunnerLimits {
            batch_deadline: Some(Duration::from_secs(10)),
            ..RunnerLimits::default()
        },
        ..SessionConfig::default()
    };
    let session = open_with(&registry, script, &sup, config).await;
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            let request = pending.recv().await.unwrap();
            // The person takes 30 s, three times the batch deadline.
            tokio::time::sleep(Duration::from_secs(30)).await;
            sup.send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap()
        })
    };
    let outcome = session.send("nap and publish").await.unwrap();
    assert!(answerer.await.unwrap());
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [CallStatus::Ok, CallStatus::Ok],
        "waiting on a person did not use up the deadline"
    );

    let outcome = session.send("second").await.unwrap();
    assert_eq!(
        outcome.calls[0].status,
        CallStatus::Timeout,
        "a slow tool still times out"
    );
    assert!(outcome.calls[0].result.to_model_text().contains("10.0 s"));
}

#[actix_rt::test]
async fn identical_requests_share_one_prompt_and_prompts_come_in_call_order() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let registry = Registry::with_tools([tool("publish", read_only(), move |_a, _c| {
        let r = Arc::clone(&r);
        Box::pin(async move {
            r.fetch_add(1, Ordering::SeqCst);
            ToolResult::text("published")
        })
    })]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("publish", json!({"title": "a"}))
                .with_tool_call("publish", json!({"title": "b"}))
                .with_tool_call("publish", json!({"title": "a"}))
                .with_tool_call("publish", json!({"title": "c"})),
        )
        .turn(ScriptTurn::text("done"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["publish"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            // Collect every prompt first: nothing is answered (or allowlisted) until all
            // calls have asked, so the count of prompts is exact.
            let mut requests = Vec::new();
            for _ in 0..3 {
                requests.push(pending.recv().await.unwrap());
            }
            let mut titles = Vec::new();
            for request in requests {
                let title = request.arguments["title"].as_str().unwrap().to_string();
                let choice = match title.as_str() {
                    "a" => ApprovalChoice::Session,
                    "b" => ApprovalChoice::Deny { reason: None },
                    _ => ApprovalChoice::Once,
                };
                titles.push(title);
                sup.send(AnswerApproval {
                    request_id: request.request_id,
                    choice,
                })
                .await
                .unwrap();
            }
            titles
        })
    };
    let outcome = session.send("publish").await.unwrap();
    assert_eq!(
        answerer.await.unwrap(),
        ["a", "b", "c"],
        "one prompt per distinct call, in call order"
    );
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            CallStatus::Ok,
            CallStatus::Denied,
            CallStatus::Ok,
            CallStatus::Ok
        ]
    );
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

#[actix_rt::test]
async fn streamed_text_arrives_as_deltas_when_asked_for() {
    let registry = Registry::with_tools([]);
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open_with(
        &registry,
        Script::new().turn(ScriptTurn::text("Hello there, streamed.")),
        &sup,
        SessionConfig {
            stream_text: true,
            ..SessionConfig::default()
        },
    )
    .await;
    let mut events = session.events();
    let outcome = session.send("hi").await.unwrap();
    assert_eq!(outcome.text, "Hello there, streamed.");
    let events = drain(&mut events);
    let streamed: String = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "Hello there, streamed.");
    let deltas = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::TextDelta { .. }))
        .unwrap();
    let last = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::Final { .. }))
        .unwrap();
    assert!(deltas < last, "text arrived after the final event");
}
