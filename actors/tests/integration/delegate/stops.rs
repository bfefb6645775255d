//! A hard stop leaves no process alive; a child's approval carries its path; output schemas get one correction.

use super::*;

#[actix_rt::test]
async fn a_hard_stop_of_the_root_leaves_no_terminal_process_alive() {
    use troupe_tools::builtin::process_group::{LocalGroup, ProcessGroup};
    use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};

    let dir = tempfile::tempdir().unwrap();
    let builtins = Builtins::start(BuiltinConfig {
        default_cwd: dir.path().to_path_buf(),
        receipts_dir: dir.path().join("receipts"),
        ..BuiltinConfig::default()
    })
    .unwrap();
    let registry = Registry::with_tools(core_tools(&builtins));
    let sleeper = |name: &str| {
        let pid_file = dir.path().join(format!("{name}.pid"));
        json!({"command": format!("echo $$ > {}; sleep 120 & sleep 121 & wait", pid_file.display()), "timeout": 300})
    };
    let provider = scripted(vec![
        delegate(json!([{"goal": "sleeper-a"}, {"goal": "nester"}])).when_input_contains("HALT-GO"),
        ScriptTurn::tool_call("terminal", sleeper("a")).when_input_contains("sleeper-a"),
        delegate(json!([{"goal": "sleeper-deep"}])).when_input_contains("nester"),
        ScriptTurn::tool_call("terminal", sleeper("deep")).when_input_contains("sleeper-deep"),
        ScriptTurn::text("stopped").when_input_contains("HALT-NEVER"),
    ]);
    let config = session_config(DelegationConfig {
        max_spawn_depth: 2,
        ..DelegationConfig::default()
    });
    let rig = rig(&registry, provider, config, AllowAll).await;
    let root = rig.root.clone();
    let turn = tokio::spawn(async move { root.send("HALT-GO").await });

    let mut groups = Vec::new();
    for name in ["a", "deep"] {
        let path = dir.path().join(format!("{name}.pid"));
        let shell = loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                break pid;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // The command's group is led by troupe's keeper process, not by the shell itself.
        let pgid = process_group_of(shell);
        assert!(
            LocalGroup { pgid }.alive(),
            "{name} is running before the stop"
        );
        groups.push(pgid);
    }
    let stopped = rig.root.stop(true).await.unwrap();
    assert!(
        stopped >= 3,
        "root, nester and the two sleepers had running turns ({stopped})"
    );
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted, "{outcome:?}");
    for pgid in groups {
        // Termination is asynchronous (TERM, grace, KILL); wait for it, however long it takes.
        while (LocalGroup { pgid }).alive() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[actix_rt::test]
async fn a_childs_approval_request_carries_its_agent_path() {
    let registry = Registry::with_tools([fixed("deploy", "core", "Deploy the site", "deployed")]);
    let provider = scripted(vec![
        delegate(json!([{"goal": "ship it"}])).when_input_contains("APPROVE-GO"),
        ScriptTurn::tool_call("deploy", json!({})).when_input_contains("ship it"),
        ScriptTurn::text("SHIPPED").when_input_contains("deployed"),
        ScriptTurn::text("APPROVE-DONE").when_input_contains("SHIPPED"),
    ]);
    let rig = rig(
        &registry,
        provider,
        session_config(DelegationConfig::default()),
        AskFor("deploy"),
    )
    .await;
    let mut approvals = rig.supervisor.send(SubscribeApprovals).await.unwrap();
    let root = rig.root.clone();
    let turn = tokio::spawn(async move { root.send("APPROVE-GO").await });
    let request = approvals.recv().await.unwrap();
    assert_eq!(request.tool, "deploy");
    assert_eq!(request.agent_path.len(), 2);
    assert_eq!(request.agent_path[0], rig.root.id());
    assert_eq!(request.agent_path[1], request.session_id);
    assert!(
        rig.supervisor
            .send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap()
    );
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.text, "APPROVE-DONE", "{outcome:?}");
    assert_eq!(call_json(&outcome, 0)["results"][0]["summary"], "SHIPPED");
}

#[actix_rt::test]
async fn output_schema_gets_one_correction_turn() {
    let registry = Registry::new();
    let schema = json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]});
    let provider = scripted(vec![
        delegate(json!([
            {"goal": "count-fixable", "output_schema": schema},
            {"goal": "count-hopeless", "output_schema": schema}
        ]))
        .when_input_contains("SCHEMA-GO"),
        ScriptTurn::text("{\"count\": \"three\"}").when_input_contains("count-fixable"),
        ScriptTurn::text("```json\n{\"count\": 3}\n```").when_input_contains("/count"),
        ScriptTurn::text("about three").when_input_contains("count-hopeless"),
        // Before the next turn: the parent's results also say "not JSON".
        ScriptTurn::text("SCHEMA-DONE").when_input_contains("schema_valid"),
        ScriptTurn::text("still about three").when_input_contains("not JSON"),
    ]);
    let rig = rig(
        &registry,
        provider,
        session_config(DelegationConfig::default()),
        AllowAll,
    )
    .await;
    let outcome = rig.root.send("SCHEMA-GO").await.unwrap();
    assert_eq!(outcome.text, "SCHEMA-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let fixed = &result["results"][0];
    assert_eq!(fixed["schema_valid"], true, "{fixed}");
    assert_eq!(fixed["output"], json!({"count": 3}));
    assert_eq!(fixed["api_calls"], 2);
    let hopeless = &result["results"][1];
    assert_eq!(hopeless["status"], "completed");
    assert_eq!(hopeless["schema_valid"], false, "{hopeless}");
    assert_eq!(hopeless["summary"], "still about three");
    assert!(
        hopeless["schema_errors"][0]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
}

/// The process group of `pid`, from the fifth field of `/proc/<pid>/stat`.
fn process_group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(2).unwrap().parse().unwrap()
}
