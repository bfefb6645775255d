//! Limits: depth, task count, and the inactivity timeout.

use super::*;

#[actix_rt::test]
async fn depth_limit_leaves_leaves_without_delegate_task_and_refuses_deeper_spawns() {
    let registry = Registry::new();
    let provider = scripted(vec![
        delegate(json!([{"goal": "leaf job"}])).when_input_contains("DEPTH-GO"),
        delegate(json!([{"goal": "deeper job"}])).when_input_contains("leaf job"),
        ScriptTurn::text("LEAF-DONE").when_input_contains("no tool called"),
        ScriptTurn::text("DEPTH-DONE").when_input_contains("LEAF-DONE"),
        delegate(json!([{"goal": "from depth one"}])).when_input_contains("TRY-DEEP"),
        ScriptTurn::text("REFUSED").when_input_contains("depth limit"),
    ]);
    let config = session_config(DelegationConfig::default());
    let rig = rig(&registry, provider.clone(), config.clone(), AllowAll).await;

    let outcome = rig.root.send("DEPTH-GO").await.unwrap();
    assert_eq!(outcome.text, "DEPTH-DONE", "{outcome:?}");

    // A session at depth 1 that somehow holds delegate_task is still refused.
    let deep = SessionHandle::open(SessionParams {
        provider,
        view: registry.view_all(),
        config,
        hooks: HookRegistry::new(),
        supervisor: rig.supervisor.clone(),
        parent: Some(rig.root.id().to_string()),
        upstream_events: None,
    })
    .await
    .unwrap();
    let refused = deep.send("TRY-DEEP").await.unwrap();
    assert_eq!(refused.text, "REFUSED", "{refused:?}");
    let text = refused.calls[0].result.to_model_text();
    assert!(refused.calls[0].result.is_error);
    assert!(
        text.contains("depth 1") && text.contains("max_spawn_depth is 1"),
        "{text}"
    );
}

#[actix_rt::test]
async fn too_many_tasks_is_an_error_that_names_the_limit() {
    let registry = Registry::new();
    let tasks: Vec<Value> = (0..4).map(|i| json!({"goal": format!("t{i}")})).collect();
    let provider = scripted(vec![
        delegate(Value::Array(tasks)).when_input_contains("MANY-GO"),
        ScriptTurn::text("SPLIT").when_input_contains("Too many tasks"),
    ]);
    let config = session_config(DelegationConfig {
        max_concurrent_children: 3,
        ..DelegationConfig::default()
    });
    let mut rig = rig(&registry, provider, config, AllowAll).await;
    let outcome = rig.root.send("MANY-GO").await.unwrap();
    assert_eq!(outcome.text, "SPLIT");
    let text = outcome.calls[0].result.to_model_text();
    assert!(
        text.contains("4 were given") && text.contains("max_concurrent_children is 3"),
        "{text}"
    );
    assert!(
        !drain(&mut rig.events)
            .iter()
            .any(|e| matches!(e.kind, EventKind::SubagentSpawned { .. })),
        "nothing was spawned"
    );
}

#[actix_rt::test]
async fn a_stalled_child_times_out_and_reports_what_it_had_done() {
    let registry = Registry::with_tools([fixed("note", "core", "Take a note", "noted")]);
    let provider = scripted(vec![
        delegate(json!([{"goal": "slow job"}, {"goal": "quick job"}]))
            .when_input_contains("STALL-GO"),
        ScriptTurn::tool_call("note", json!({})).when_input_contains("slow job"),
        // After its first tool round the slow child's model never answers.
        ScriptTurn::text("never")
            .when_input_contains("noted")
            .with_delay(Duration::from_secs(600)),
        ScriptTurn::text("quick-done").when_input_contains("quick job"),
        ScriptTurn::text("STALL-DONE").when_input_contains("quick-done"),
    ]);
    let config = session_config(DelegationConfig {
        child_timeout: Some(Duration::from_secs(2)),
        ..DelegationConfig::default()
    });
    let rig = rig(&registry, provider, config, AllowAll).await;
    let outcome = rig.root.send("STALL-GO").await.unwrap();
    assert_eq!(outcome.text, "STALL-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let slow = &result["results"][0];
    assert_eq!(slow["status"], "timeout", "{slow}");
    assert_eq!(slow["exit_reason"], "timeout");
    assert_eq!(slow["api_calls"], 1);
    assert_eq!(slow["tool_calls"], 1);
    assert_eq!(slow["timeout_phase"], "after_llm_calls");
    assert_eq!(slow["calls_before_stop"][0]["tool"], "note");
    assert!(
        slow["error"]
            .as_str()
            .unwrap()
            .contains("child_timeout_seconds")
    );
    assert_eq!(result["results"][1]["status"], "completed");
    assert_eq!(result["results"][1]["summary"], "quick-done");
}
