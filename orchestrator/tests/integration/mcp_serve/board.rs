//! `--toolsets kanban`: an MCP client creates a task on the board of troupe.yaml, the profile's
//! worker (the scripted model over real HTTP) runs it in the same `troupe mcp serve` process,
//! and the client follows it to `done` and reads its result.

use serde_json::json;

use super::World;
use crate::support::mcp_servers::servers_available;
use crate::support::serve::TroupeDir;

const YAML: &str = "model:
  base_url: \"{{MODEL_URL}}\"
  model: mock-model
approvals:
  mode: manual
  unattended: deny
kanban:
  store: \"{{STORE}}\"
  dispatch_interval: 1s
profiles:
  coder:
    toolsets: [core]
    system_prompt: You carry out board tasks with the tools you have.
";

/// The worker completes its task at once; the summary is the task's result.
const SCRIPT: &str = "cursor: conversation
turns:
  - tool_calls:
      - name: kanban_complete
        arguments: {summary: BOARD-RESULT-7 written by the coder}
  - text: Done.
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_creates_a_board_task_and_follows_it_to_done() {
    // Only the Python SDK is needed here, which the MCP test set-up installs.
    if !servers_available("mcp_serve kanban") {
        return;
    }
    let fx = TroupeDir::new(YAML, SCRIPT).await;
    let home = fx.home().to_path_buf();
    let TroupeDir {
        dir,
        home: _home,
        model,
    } = fx;
    let world = World::in_dir(dir, &home);
    let seen = world
        .stdio(
            "kanban",
            &["--toolsets", "kanban"],
            &[("TROUPE_TITLE", "write the release note")],
        )
        .await;

    let tools = &seen["tools"];
    for (tool, read_only) in [
        ("kanban_create", false),
        ("kanban_list", true),
        ("kanban_show", true),
        ("kanban_comment", false),
        ("kanban_follow", true),
    ] {
        assert_eq!(tools[tool], json!(read_only), "{tool}: {tools}");
    }
    let created = &seen["created"];
    assert_eq!(created["title"], json!("write the release note"), "{seen}");
    assert_eq!(created["assignee"], json!("coder"), "{seen}");

    let followed = &seen["followed"];
    assert_eq!(followed["settled"], json!(true), "{followed}");
    assert_eq!(followed["task"]["status"], json!("done"), "{followed}");
    assert!(
        followed["task"]["result"]
            .as_str()
            .is_some_and(|r| r.contains("BOARD-RESULT-7")),
        "{followed}"
    );
    let statuses = followed["statuses_seen"].as_array().unwrap();
    assert_eq!(statuses.last(), Some(&json!("done")), "{followed}");

    let shown = &seen["shown"];
    assert_eq!(shown["task"]["id"], created["id"], "{shown}");
    assert!(!shown["runs"].as_array().unwrap().is_empty(), "{shown}");
    let done = seen["done"]["tasks"].as_array().unwrap();
    assert!(done.iter().any(|t| t["id"] == created["id"]), "{done:?}");
    let bad = &seen["bad"];
    assert_eq!(bad["is_error"], json!(true), "{bad}");
    assert!(bad["text"].as_str().unwrap().contains("task id"), "{bad}");

    // The worker really asked the model: the task reached it.
    let asked = model.requests();
    assert!(
        asked
            .iter()
            .any(|r| r.body.to_string().contains("write the release note")),
        "the model never saw the task"
    );
}
