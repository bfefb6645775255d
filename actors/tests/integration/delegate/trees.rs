//! Trees and fan-out: results come up through every level, in task order, within the parent's budget.

use super::*;

#[actix_rt::test]
async fn a_tree_three_levels_deep_reports_up_through_every_level() {
    let registry = Registry::new();
    let provider = scripted(vec![
        delegate(json!([{"goal": "level-one job"}])).when_input_contains("ROOT-GO"),
        delegate(json!([{"goal": "level-two job"}])).when_input_contains("level-one job"),
        delegate(json!([{"goal": "level-three job"}])).when_input_contains("level-two job"),
        // The third level is a leaf: it has no delegate_task and is told so.
        delegate(json!([{"goal": "level-four job"}])).when_input_contains("level-three job"),
        ScriptTurn::text("L3-REPORT").when_input_contains("no tool called 'delegate_task'"),
        ScriptTurn::text("L2-REPORT").when_input_contains("L3-REPORT"),
        ScriptTurn::text("L1-REPORT").when_input_contains("L2-REPORT"),
        ScriptTurn::text("ROOT-FINAL").when_input_contains("L1-REPORT"),
    ]);
    let config = session_config(DelegationConfig {
        max_spawn_depth: 3,
        ..DelegationConfig::default()
    });
    let mut rig = rig(&registry, provider, config, AllowAll).await;

    let outcome = rig.root.send("ROOT-GO").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.text, "ROOT-FINAL");
    let result = call_json(&outcome, 0);
    assert_eq!(result["results"][0]["status"], "completed");
    assert_eq!(result["results"][0]["summary"], "L1-REPORT");
    assert_eq!(result["results"][0]["task_index"], 0);

    let events = drain(&mut rig.events);
    let depths: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SubagentSpawned { depth, .. } => Some(u64::from(*depth)),
            _ => None,
        })
        .collect();
    assert_eq!(depths, [1, 2, 3]);
    let deepest = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SessionStarted { agent_path, .. } => Some(agent_path.len()),
            _ => None,
        })
        .max();
    assert_eq!(deepest, Some(4), "root + three levels of subagents");
    // The leaf's attempt to delegate failed as an unknown tool.
    let leaf_try = rig
        .recorder
        .not_by(rig.root.id())
        .into_iter()
        .find(|c| c.tool == "delegate_task" && c.status == CallStatus::Error)
        .expect("the leaf's delegate_task call is recorded as an error");
    assert!(
        leaf_try.text.contains("no tool called 'delegate_task'"),
        "{}",
        leaf_try.text
    );
}

#[actix_rt::test]
async fn a_fan_out_of_ten_returns_every_result_in_task_order() {
    let registry = Registry::new();
    let tasks: Vec<Value> = (0..10)
        .map(|i| json!({"goal": format!("unit-{i}-go")}))
        .collect();
    let mut turns = vec![delegate(Value::Array(tasks)).when_input_contains("FAN-GO")];
    for i in 0..10u64 {
        // Later tasks answer sooner, so finishing order is not task order.
        turns.push(
            ScriptTurn::text(format!("unit-{i}-done"))
                .when_input_contains(format!("unit-{i}-go"))
                .with_delay(Duration::from_millis((10 - i) * 20)),
        );
    }
    turns.push(ScriptTurn::text("FAN-DONE").when_input_contains("unit-0-done"));
    let mut rig = rig(
        &registry,
        scripted(turns),
        session_config(DelegationConfig::default()),
        AllowAll,
    )
    .await;

    let outcome = rig.root.send("FAN-GO").await.unwrap();
    assert_eq!(outcome.text, "FAN-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    for (i, entry) in results.iter().enumerate() {
        assert_eq!(entry["task_index"], i);
        assert_eq!(entry["status"], "completed");
        assert_eq!(entry["exit_reason"], "completed");
        assert_eq!(entry["summary"], format!("unit-{i}-done"));
        assert_eq!(entry["api_calls"], 1);
    }
    let completed = drain(&mut rig.events)
        .into_iter()
        .filter(|e| {
            matches!(e.kind, EventKind::SubagentCompleted { .. }) && e.session_id == rig.root.id()
        })
        .count();
    assert_eq!(completed, 10);
}

#[actix_rt::test]
async fn a_child_spends_from_its_parents_budget_and_stops_when_it_is_gone() {
    let worked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&worked);
    let registry = Registry::with_tools([tool("work", "core", "does work", move |args, _| {
        let count = Arc::clone(&count);
        Box::pin(async move {
            count.fetch_add(1, Ordering::SeqCst);
            ToolResult::text(format!("worked-{}", args["n"]))
        })
    })]);
    // The parent may spend 1,000 tokens; the child has no budget of its own. The parent's
    // request takes 100, each of the child's 500: after the child's second request the
    // parent's budget is gone, so the child stops there, and the parent with it.
    let provider = scripted(vec![
        delegate(json!([{"goal": "SPEND-CHILD"}]))
            .when_input_contains("BUDGET-GO")
            .with_usage(100, 0),
        ScriptTurn::tool_call("work", json!({"n": 1}))
            .when_input_contains("SPEND-CHILD")
            .with_usage(500, 0),
        ScriptTurn::tool_call("work", json!({"n": 2}))
            .with_text("CHILD-PARTIAL")
            .when_input_contains("worked-1")
            .with_usage(500, 0),
        ScriptTurn::text("CHILD-NEVER").when_input_contains("worked-2"),
        ScriptTurn::text("PARENT-NEVER").when_input_contains("budget"),
    ]);
    let config = SessionConfig {
        budget: Budget {
            max_tokens: Some(1_000),
            ..Budget::default()
        },
        ..session_config(DelegationConfig::default())
    };
    let rig = rig(&registry, provider, config, AllowAll).await;

    let outcome = rig.root.send("BUDGET-GO").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::BudgetExceeded, "{outcome:?}");
    assert_eq!(
        worked.load(Ordering::SeqCst),
        1,
        "the child's second call never ran"
    );
    let result = call_json(&outcome, 0);
    let child = &result["results"][0];
    assert_eq!(child["status"], "budget_exceeded", "{result}");
    let summary = child["summary"].as_str().unwrap();
    assert!(summary.starts_with("CHILD-PARTIAL"), "{summary}");
    assert!(
        summary.contains("the parent session's token budget"),
        "{summary}"
    );
    // The subtree's requests are the parent's: one of its own and two of the child's.
    assert_eq!(outcome.spend.requests, 3);
    assert_eq!(outcome.spend.tokens(), 1_100);
    assert_eq!(rig.root.spent().tokens(), 1_100);
}
