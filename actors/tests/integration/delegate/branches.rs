//! Steer, stop and list of one branch; background delivery, the pool's cap and a hard stop holding results.

use super::*;

/// Answers the root from a queue the test fills, and subagents from a script.
struct Puppet {
    children: ScriptedProvider,
    root: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ModelResponse>>>,
}

impl ModelProvider for Puppet {
    fn describe(&self) -> String {
        "puppet".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let is_child = matches!(
            request.messages.first(),
            Some(ChatMessage::System { content }) if content == SUBAGENT_SYSTEM_PROMPT
        );
        if is_child {
            return self.children.complete(request, cancel);
        }
        let root = Arc::clone(&self.root);
        Box::pin(async move {
            let mut queue = root.lock().await;
            tokio::select! {
                next = queue.recv() => next.ok_or(ModelError::Cancelled),
                _ = cancel.cancelled() => Err(ModelError::Cancelled),
            }
        })
    }
}

fn say(text: &str) -> ModelResponse {
    ModelResponse {
        content: Some(text.into()),
        tool_calls: vec![],
        finish_reason: FinishReason::Stop,
        usage: Usage::default(),
    }
}

fn call(name: &str, args: Value) -> ModelResponse {
    ModelResponse {
        content: None,
        tool_calls: vec![ToolCallRequest {
            id: format!("root_{}", uuid_like()),
            name: name.into(),
            arguments: args.to_string(),
        }],
        finish_reason: FinishReason::ToolCalls,
        usage: Usage::default(),
    }
}

fn uuid_like() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

#[actix_rt::test]
async fn steer_reaches_one_child_and_stop_ends_only_its_branch() {
    let gate = Arc::new(Notify::new());
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<&'static str>();
    let held_cancelled = Arc::new(AtomicBool::new(false));
    let (g, e1, e2, h) = (
        gate.clone(),
        entered_tx.clone(),
        entered_tx,
        held_cancelled.clone(),
    );
    let registry = Registry::with_tools([
        tool("wait_gate", "core", "Wait for the gate", move |_, _| {
            let (gate, entered) = (g.clone(), e1.clone());
            Box::pin(async move {
                let opened = gate.notified();
                let _ = entered.send("wait_gate");
                opened.await;
                ToolResult::text("gate opened")
            })
        }),
        tool("hold", "core", "Hold until stopped", move |_, ctx| {
            let (held, entered) = (h.clone(), e2.clone());
            Box::pin(async move {
                let _ = entered.send("hold");
                ctx.cancel.cancelled().await;
                held.store(true, Ordering::SeqCst);
                ToolResult::text("held and released")
            })
        }),
    ]);
    let children = ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call("wait_gate", json!({})).when_input_contains("steer-target"))
            .turn(ScriptTurn::tool_call("hold", json!({})).when_input_contains("stop-target"))
            .turn(ScriptTurn::text("heard STEER-NOTE").when_input_contains("STEER-NOTE")),
    );
    let (root_tx, root_rx) = mpsc::unbounded_channel();
    let puppet = Arc::new(Puppet {
        children,
        root: Arc::new(tokio::sync::Mutex::new(root_rx)),
    });
    let config = SessionConfig {
        background_delegation: true,
        ..session_config(DelegationConfig::default())
    };
    let mut rig = rig(&registry, puppet.clone(), config, AllowAll).await;

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "steer-target"}, {"goal": "stop-target"}]}),
        ))
        .unwrap();
    root_tx.send(say("spawned")).unwrap();
    let first = rig.root.send("start").await.unwrap();
    assert_eq!(first.text, "spawned");
    let handle = call_json(&first, 0);
    assert_eq!(handle["status"], "running", "{handle}");
    assert!(
        handle["delegation_id"]
            .as_str()
            .unwrap()
            .starts_with("deleg_")
    );
    let ids: Vec<String> = handle["subagent_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(ids[0].starts_with("sa-0-") && ids[1].starts_with("sa-1-"));
    let mut inside = vec![entered.recv().await.unwrap(), entered.recv().await.unwrap()];
    inside.sort_unstable();
    assert_eq!(inside, ["hold", "wait_gate"]);

    root_tx
        .send(call(
            "delegate_task",
            json!({"action": "steer", "subagent_id": ids[0], "message": "STEER-NOTE"}),
        ))
        .unwrap();
    root_tx
        .send(call(
            "delegate_task",
            json!({"action": "stop", "subagent_id": ids[1]}),
        ))
        .unwrap();
    root_tx
        .send(call("delegate_task", json!({"action": "list"})))
        .unwrap();
    root_tx
        .send(call(
            "delegate_task",
            json!({"action": "steer", "subagent_id": "sa-9-nothere", "message": "x"}),
        ))
        .unwrap();
    root_tx.send(say("managed")).unwrap();
    let second = rig.root.send("manage them").await.unwrap();
    assert_eq!(second.text, "managed", "{second:?}");
    assert_eq!(call_json(&second, 0)["status"], "queued");
    assert_eq!(call_json(&second, 1)["status"], "stopping");
    let listed = call_json(&second, 2);
    assert!(
        listed["subagents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subagent_id"] == ids[0].as_str()),
        "{listed}"
    );
    assert!(second.calls[3].result.is_error);
    assert!(
        second.calls[3]
            .result
            .to_model_text()
            .contains("action=list")
    );

    // Child 0 goes on, reads the note, and the results arrive as a new turn of the root.
    root_tx.send(say("read the results")).unwrap();
    gate.notify_waiters();
    let delivered = loop {
        let event = rig.events.recv().await.unwrap();
        if event.session_id == rig.root.id()
            && let EventKind::Final { text, turn_id, .. } = &event.kind
            && *turn_id != first.turn_id
            && *turn_id != second.turn_id
        {
            break text.clone();
        }
    };
    assert_eq!(delivered, "read the results");
    assert!(
        held_cancelled.load(Ordering::SeqCst),
        "the stopped child's tool was cancelled"
    );
    let conversation = rig.root.conversation().await.unwrap();
    let report = conversation
        .iter()
        .find_map(|m| match m {
            ChatMessage::User { content } if content.contains("Background delegation") => {
                Some(content.clone())
            }
            _ => None,
        })
        .unwrap();
    let results: Value = serde_json::from_str(report.split_once('\n').unwrap().1).unwrap();
    assert_eq!(results[0]["status"], "completed", "{results}");
    assert!(
        results[0]["summary"]
            .as_str()
            .unwrap()
            .contains("STEER-NOTE")
    );
    assert_eq!(results[1]["status"], "interrupted", "{results}");
}

/// A hard stop of the root ends its background subagents too, and their results wait for the
/// user's next message instead of starting a turn by themselves.
#[actix_rt::test]
async fn a_hard_stop_ends_background_subagents_and_holds_their_results() {
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let registry =
        Registry::with_tools([tool("hold", "core", "Hold until stopped", move |_, ctx| {
            let entered = entered_tx.clone();
            Box::pin(async move {
                let _ = entered.send(());
                ctx.cancel.cancelled().await;
                ToolResult::text("held and released")
            })
        })]);
    let children = ScriptedProvider::new(
        Script::new().turn(ScriptTurn::tool_call("hold", json!({})).when_input_contains("hold-on")),
    );
    let (root_tx, root_rx) = mpsc::unbounded_channel();
    let puppet = Arc::new(Puppet {
        children,
        root: Arc::new(tokio::sync::Mutex::new(root_rx)),
    });
    let config = SessionConfig {
        background_delegation: true,
        ..session_config(DelegationConfig::default())
    };
    let mut rig = rig(&registry, puppet, config, AllowAll).await;

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "hold-on one"}, {"goal": "hold-on two"}]}),
        ))
        .unwrap();
    root_tx.send(say("spawned")).unwrap();
    let first = rig.root.send("start").await.unwrap();
    assert_eq!(call_json(&first, 0)["status"], "running");
    entered.recv().await.unwrap();
    entered.recv().await.unwrap();
    drain(&mut rig.events);

    rig.root.stop(true).await.unwrap();
    let root_id = rig.root.id().to_string();
    let mut children_ended = 0;
    let mut delivered = None;
    let mut turns_after_stop = 0;
    while children_ended < 2 || delivered.is_none() {
        let event = rig.events.recv().await.unwrap();
        match &event.kind {
            EventKind::SessionEnded { .. } if event.session_id != root_id => children_ended += 1,
            EventKind::DelegationDelivered { started_turn, .. } => delivered = Some(*started_turn),
            EventKind::TurnStarted { .. } if event.session_id == root_id => turns_after_stop += 1,
            _ => {}
        }
    }
    // A turn the session started for the results would be announced right after delivery.
    turns_after_stop += drain(&mut rig.events)
        .iter()
        .filter(|e| e.session_id == root_id && matches!(e.kind, EventKind::TurnStarted { .. }))
        .count();
    assert_eq!(delivered, Some(false), "the results must not start a turn");
    assert_eq!(
        turns_after_stop, 0,
        "the stopped root started a turn by itself"
    );

    // The user's next message carries the held results to the model.
    root_tx.send(say("back")).unwrap();
    let next = rig.root.send("carry on").await.unwrap();
    assert_eq!(next.text, "back");
    let conversation = rig.root.conversation().await.unwrap();
    let report = conversation
        .iter()
        .find_map(|m| match m {
            ChatMessage::User { content } if content.contains("was stopped") => {
                Some(content.clone())
            }
            _ => None,
        })
        .unwrap();
    let results: Value = serde_json::from_str(report.split_once('\n').unwrap().1).unwrap();
    assert_eq!(results[0]["status"], "interrupted", "{results}");
    assert_eq!(results[1]["status"], "interrupted", "{results}");
}

/// With the background pool full, a further call queues its tasks behind the running ones:
/// never more than `max_concurrent_children` subagents at once, and the note says so.
#[actix_rt::test]
async fn a_full_pool_queues_tasks_and_the_cap_holds() {
    let gate = Arc::new(Notify::new());
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let g = gate.clone();
    let registry = Registry::with_tools([tool(
        "wait_gate",
        "core",
        "Wait for the gate",
        move |_, _| {
            let (gate, entered) = (g.clone(), entered_tx.clone());
            Box::pin(async move {
                let opened = gate.notified();
                let _ = entered.send(());
                opened.await;
                ToolResult::text("gate opened")
            })
        },
    )]);
    let children = ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call("wait_gate", json!({})).when_input_contains("slow-task"))
            .turn(ScriptTurn::text("slow done").when_input_contains("gate opened"))
            .turn(ScriptTurn::text("quick done").when_input_contains("quick-task")),
    );
    let (root_tx, root_rx) = mpsc::unbounded_channel();
    let puppet = Arc::new(Puppet {
        children,
        root: Arc::new(tokio::sync::Mutex::new(root_rx)),
    });
    let config = SessionConfig {
        background_delegation: true,
        ..session_config(DelegationConfig {
            max_concurrent_children: 2,
            ..DelegationConfig::default()
        })
    };
    let mut rig = rig(&registry, puppet, config, AllowAll).await;

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "slow-task one"}, {"goal": "slow-task two"}]}),
        ))
        .unwrap();
    root_tx.send(say("spawned")).unwrap();
    let first = rig.root.send("start").await.unwrap();
    assert_eq!(call_json(&first, 0)["status"], "running");
    entered.recv().await.unwrap();
    entered.recv().await.unwrap();

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "quick-task one"}, {"goal": "quick-task two"}]}),
        ))
        .unwrap();
    root_tx.send(say("second done")).unwrap();
    let root = rig.root.clone();
    let turn = tokio::spawn(async move { root.send("more").await });
    let mut events = Vec::new();
    let mut queued = 0;
    while queued < 2 {
        let event = rig.events.recv().await.unwrap();
        if let EventKind::SubagentSpawned { goal, .. } = &event.kind
            && goal.starts_with("quick-task")
        {
            queued += 1;
        }
        events.push(event);
    }
    gate.notify_waiters();
    let second = turn.await.unwrap().unwrap();
    assert_eq!(second.text, "second done", "{second:?}");
    let body = call_json(&second, 0);
    assert_eq!(body["results"][0]["status"], "completed", "{body}");
    assert_eq!(body["results"][1]["status"], "completed", "{body}");
    let note = body["note"].as_str().unwrap();
    assert!(note.contains("Only 0 of the 2"), "{note}");
    assert!(note.contains("never more than 2"), "{note}");
    events.extend(drain(&mut rig.events));

    let root_id = rig.root.id().to_string();
    let (mut running, mut peak) = (0usize, 0usize);
    for event in events.iter().filter(|e| e.session_id == root_id) {
        match event.kind {
            EventKind::SubagentStarted { .. } => running += 1,
            EventKind::SubagentCompleted { .. } => running -= 1,
            _ => {}
        }
        peak = peak.max(running);
    }
    assert_eq!(peak, 2, "subagents running at once");
}
