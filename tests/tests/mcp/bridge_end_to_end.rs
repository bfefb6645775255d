//! The search bridge over live MCP servers: `tool_search` finds a real server's tool,
//! `tool_describe` gives its schema, `tool_call` resolves the call, and the view runs it.

use serde_json::json;
use troupe::tools::bridge::{resolve, tool_describe, tool_search};
use troupe::tools::{CallContext, ToolSearchConfig};
use troupe_tests::mcp_servers;

use super::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_describe_and_call_a_tool_on_a_real_server() {
    if !mcp_servers::servers_available("search_describe_and_call_a_tool_on_a_real_server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    mcp_servers::init_git_repo(&repo).unwrap();
    let started = start(
        vec![
            mcp_servers::everything("everything"),
            mcp_servers::time("time"),
            mcp_servers::git("git", &repo),
        ],
        dir.path(),
    )
    .await;
    let view = started.view();
    let config = ToolSearchConfig::default();

    let found = tool_search(
        &view,
        &config,
        &json!({"queries": ["current time timezone"]}),
    );
    let matches = found["results"][0]["matches"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"));
    assert!(
        matches.iter().any(|m| m == "mcp_time_get_current_time"),
        "tool_search finds the time server's tool: {found}"
    );
    assert!(found["total_available"].as_u64().unwrap() >= 20, "{found}");

    let described = tool_describe(
        &view,
        &config,
        &json!({"names": ["mcp_time_get_current_time"]}),
    );
    let schema = &described["tools"]["mcp_time_get_current_time"]["parameters"];
    assert!(schema["properties"]["timezone"].is_object(), "{described}");

    let resolved = resolve(
        &view,
        &config,
        &json!({"name": "mcp_time_get_current_time", "arguments": {"timezone": "Europe/Paris"}}),
    )
    .unwrap_or_else(|e| panic!("tool_call refused: {e}"));
    assert_eq!(resolved.name, "mcp_time_get_current_time");
    let result = view
        .call(
            &resolved.name,
            resolved.arguments,
            CallContext::detached("bridge"),
        )
        .await;
    assert!(!result.is_error, "{result:?}");
    assert!(
        result.to_model_text().contains("Europe/Paris"),
        "{result:?}"
    );
    started.manager.shutdown().await;
}
