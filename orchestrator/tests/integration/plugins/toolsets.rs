//! A plugin's MCP server (the real `mcp-server-time`): its tools join the registry as the
//! toolset named after the plugin, hide behind the search bridge, are found with `tool_search`
//! and called through `tool_call`, and hooks see the underlying tool of the bridged call.

use crate::support::mcp_servers::time_server;
use crate::support::plugin_world::{World, assert_success, hook_log, statuses, tool_results};

const RECORD: &str = r#"#!/usr/bin/env python3
import json, sys
payload = json.load(sys.stdin)
with open("seen.jsonl", "a") as f:
    f.write(json.dumps(payload) + "\n")
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_toolset_is_searched_and_called_through_the_bridge() {
    let Some(server) = time_server() else { return };
    let w = World::new();
    let plugin = w.plugin(
        &w.user_plugins(),
        "clock",
        &format!(
            "description: Tells the time\nmcp_server:\n  command: {}\n  args: [--local-timezone, UTC]\nhooks:\n  pre_tool_call: {{command: python3 record.py, tools: [mcp_clock_get_current_time]}}\n",
            server.display()
        ),
        &[("record.py", RECORD)],
    );
    w.config("plugins:\n  enabled: [clock]\ntools:\n  tool_search: {enabled: true}\n");
    let listing = w.listing();
    let clock = listing["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "clock")
        .unwrap();
    assert_eq!(clock["provides"][0], "hooks: pre_tool_call");
    assert_eq!(clock["provides"][1], "toolset: clock");

    let script = r#"
turns:
  - tool_calls:
      - {id: s1, name: tool_search, arguments: {queries: ["current time timezone"]}}
  - tool_calls:
      - {id: t1, name: tool_call, arguments: {name: mcp_clock_get_current_time, arguments: {timezone: UTC}}}
  - text: done
"#;
    let (out, requests) = w.chat("what time is it?", script).await;
    assert_success(&out);
    // The tool is deferred: not offered directly, found by search.
    let offered: Vec<String> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect();
    assert!(offered.contains(&"tool_search".to_string()), "{offered:?}");
    assert!(
        !offered.iter().any(|n| n.starts_with("mcp_clock")),
        "{offered:?}"
    );
    let said = tool_results(&requests);
    assert!(
        said["s1"].contains("mcp_clock_get_current_time"),
        "{}",
        said["s1"]
    );
    assert!(said["s1"].contains("clock"), "{}", said["s1"]);
    assert_eq!(statuses(&out)["t1"], "ok", "{}", said["t1"]);
    assert!(said["t1"].contains("UTC"), "{}", said["t1"]);
    // The hook saw the underlying tool of the bridged call.
    let seen = hook_log(&plugin.join("seen.jsonl"));
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["tool"], "mcp_clock_get_current_time");
    assert_eq!(seen[0]["called_as"], "tool_call");
    assert_eq!(seen[0]["arguments"]["timezone"], "UTC");
}
