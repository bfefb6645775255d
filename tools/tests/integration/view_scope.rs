//! A scoped view is a hard boundary: a tool outside it is never found, described or called,
//! through any of the three bridge tools or a direct call, and the answers do not reveal that the
//! tool exists elsewhere in the registry.

use std::sync::Arc;

use serde_json::{Value, json};
use troupe_tools::bridge::{resolve, tool_describe, tool_search};
use troupe_tools::{CallContext, Registry, ToolDef, ToolResult, ToolSearchConfig, ViewSpec};

fn registry() -> Arc<Registry> {
    let tool = |name: &str, toolset: &str, description: &str| {
        ToolDef::new(
            name,
            description,
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        )
        .with_toolset(toolset)
        .with_fn(|arguments, _| Box::pin(async move { ToolResult::json(Value::Object(arguments)) }))
    };
    Registry::with_tools([
        tool(
            "mcp_github_create_issue",
            "mcp-github",
            "Open a new issue in a GitHub repository",
        ),
        tool(
            "mcp_github_list_issues",
            "mcp-github",
            "List issues in a GitHub repository",
        ),
        tool(
            "mcp_vault_read_secret",
            "mcp-vault",
            "Read a secret from the vault",
        ),
        tool(
            "mcp_vault_delete_secret",
            "mcp-vault",
            "Delete a secret from the vault",
        ),
    ])
}

#[test]
fn search_never_finds_tools_outside_the_view() {
    let registry = registry();
    let config = ToolSearchConfig::default();
    let narrow = registry.view(ViewSpec::toolsets(["mcp-github"])).unwrap();
    for query in [
        "vault secret",
        "mcp_vault_read_secret",
        "read secret",
        "delete",
    ] {
        let answer = tool_search(&narrow, &config, &json!({"queries": [query]}));
        let text = answer.to_string();
        let group = &answer["results"][0];
        let found = format!(
            "{}{}{}",
            group["matches"], group["available_sources"], answer["tools"]
        );
        assert!(
            !found.contains("vault_"),
            "query {query:?} leaked a hidden tool: {text}"
        );
        assert!(
            !found.contains("\"vault\""),
            "query {query:?} leaked a hidden source: {text}"
        );
        assert_eq!(answer["total_available"], json!(2), "{text}");
    }
    // The same query on the full view finds it, so the narrow result is the scope, not a miss.
    let full = registry.view_all();
    let answer = tool_search(
        &full,
        &config,
        &json!({"queries": ["mcp_vault_read_secret"]}),
    );
    assert_eq!(
        answer["results"][0]["matches"][0],
        json!("mcp_vault_read_secret")
    );
}

#[test]
fn describe_treats_hidden_tools_as_unknown() {
    let registry = registry();
    let config = ToolSearchConfig::default();
    let narrow = registry.view(ViewSpec::toolsets(["mcp-github"])).unwrap();
    let hidden = tool_describe(
        &narrow,
        &config,
        &json!({"names": ["mcp_vault_read_secret"]}),
    );
    let unknown = tool_describe(&narrow, &config, &json!({"names": ["no_such_tool_at_all"]}));
    assert_eq!(hidden["tools"], json!({}));
    assert_eq!(hidden["not_found"], json!(["mcp_vault_read_secret"]));
    // Same shape and same wording, apart from the name itself.
    assert_eq!(
        hidden.to_string().replace("mcp_vault_read_secret", "X"),
        unknown.to_string().replace("no_such_tool_at_all", "X")
    );
}

#[test]
fn tool_call_refuses_hidden_tools_like_unknown_ones() {
    let registry = registry();
    let config = ToolSearchConfig::default();
    let narrow = registry.view(ViewSpec::toolsets(["mcp-github"])).unwrap();
    let call = |name: &str| json!({"calls": [{"name": name, "arguments": {"text": "x"}}]});
    let hidden = resolve(&narrow, &config, &call("mcp_vault_delete_secret")).unwrap_err();
    let unknown = resolve(&narrow, &config, &call("mcp_nothing_here_at_al")).unwrap_err();
    assert!(
        hidden.get("error").is_some_and(Value::is_string),
        "{hidden}"
    );
    assert_eq!(
        hidden.to_string().replace("mcp_vault_delete_secret", "X"),
        unknown.to_string().replace("mcp_nothing_here_at_al", "X")
    );
    let granted = resolve(&narrow, &config, &call("mcp_github_create_issue")).unwrap();
    assert_eq!(granted.name, "mcp_github_create_issue");
}

#[tokio::test]
async fn direct_calls_stop_at_the_view() {
    let registry = registry();
    let narrow = registry.view(ViewSpec::toolsets(["mcp-github"])).unwrap();
    let args = json!({"text": "hi"}).as_object().cloned().unwrap();
    let refused = narrow
        .call(
            "mcp_vault_read_secret",
            args.clone(),
            CallContext::detached("c1"),
        )
        .await;
    assert!(refused.is_error);
    let ran = narrow
        .call("mcp_github_list_issues", args, CallContext::detached("c2"))
        .await;
    assert!(!ran.is_error, "{ran:?}");
}

#[test]
fn narrowing_never_widens() {
    let registry = registry();
    let parent = registry.view(ViewSpec::toolsets(["mcp-github"])).unwrap();
    let child = parent
        .narrow(ViewSpec::toolsets(["mcp-github", "mcp-vault"]))
        .unwrap();
    assert!(!child.contains("mcp_vault_read_secret"));
    assert!(child.contains("mcp_github_create_issue"));
    let leaf = child
        .narrow(ViewSpec::all().blocking(["mcp_github_create_issue"]))
        .unwrap();
    assert_eq!(leaf.len(), 1);
}

#[test]
fn a_registry_change_gives_a_new_catalog_version() {
    let registry = registry();
    let view = registry.view_all();
    let before = view.fingerprint();
    registry.register(
        ToolDef::new(
            "mcp_github_close_issue",
            "Close an issue",
            json!({"type": "object"}),
        )
        .with_toolset("mcp-github"),
    );
    assert!(view.is_stale());
    let after = view.refreshed().unwrap();
    assert_ne!(before, after.fingerprint());
    let config = ToolSearchConfig::default();
    let answer = tool_search(&after, &config, &json!({"queries": ["close issue"]}));
    assert_eq!(
        answer["results"][0]["matches"][0],
        json!("mcp_github_close_issue")
    );
}
