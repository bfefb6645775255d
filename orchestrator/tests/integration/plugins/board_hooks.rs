//! Board hook points through `troupe kanban worker`: `on_task_claimed` and
//! `on_task_completed` observers of a plugin see the task, and the worker's session runs the
//! plugin's tool hooks too (its calls are seen with the worker's agent path).

use troupe_actors::model::Script;
use troupe_actors::model::mock_server::MockServer;

use crate::support::plugin_world::{World, hook_log};

const RECORD: &str = r#"#!/usr/bin/env python3
import json, sys
payload = json.load(sys.stdin)
with open("seen.jsonl", "a") as f:
    f.write(json.dumps(payload) + "\n")
"#;

#[tokio::test(flavor = "multi_thread")]
async fn board_hooks_see_claims_completions_and_worker_calls() {
    let w = World::new();
    let plugin = w.plugin(
        &w.user_plugins(),
        "board-watch",
        "hooks:\n  on_task_claimed: python3 record.py\n  on_task_completed: python3 record.py\n  post_tool_call: python3 record.py\n",
        &[("record.py", RECORD)],
    );
    let script = Script::from_yaml_str(
        "turns:\n  - tool_calls:\n      - {id: k1, name: kanban_complete, arguments: {summary: done by the worker}}\n  - text: finished\n",
    )
    .unwrap();
    let server = MockServer::start(script).await.unwrap();
    w.config(&format!(
        "model: {{base_url: \"{}\", model: mock}}\nplugins:\n  enabled: [board-watch]\nkanban:\n  store: \"{}\"\n  default_assignee: coder\nprofiles:\n  coder:\n    toolsets: [core]\n",
        server.url(),
        w.dir.path().join("store").display()
    ));
    let run = |args: &[&str]| {
        let out = w.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["kanban", "init"]);
    run(&["kanban", "create", "Write the notes", "--assignee", "coder"]);
    let mut cmd = tokio::process::Command::from(w.command(&["kanban", "worker", "--until-idle"]));
    let out = cmd.output().await.unwrap();
    assert!(
        out.status.success(),
        "worker: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let seen = hook_log(&plugin.join("seen.jsonl"));
    let claimed = seen.iter().find(|e| e["hook"] == "on_task_claimed");
    let completed = seen.iter().find(|e| e["hook"] == "on_task_completed");
    assert_eq!(
        claimed.unwrap()["task"]["title"],
        "Write the notes",
        "{seen:?}"
    );
    assert_eq!(completed.unwrap()["task"]["status"], "done", "{seen:?}");
    let call = seen
        .iter()
        .find(|e| e["hook"] == "post_tool_call" && e["tool"] == "kanban_complete")
        .unwrap_or_else(|| panic!("the worker's call was not seen: {seen:?}"));
    assert_eq!(call["status"], "ok");
}
