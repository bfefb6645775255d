//! Tool search through troupe's public API: a registry of deferred MCP-style tools, a scoped
//! view, and the three bridge tools a model would call.
//!
//! Run with:
//!
//! ```sh
//! cargo run -p troupe-examples --example tool_search
//! ```
//!
//! You will see the tool list a model gets (three bridge tools and a listing), the matches for a
//! query, the schema of the best match, and the checked arguments of a call to it.

#![allow(clippy::print_stdout, reason = "an example shows its results")]

use serde_json::json;
use troupe::tools::bridge::{resolve, tool_describe, tool_search};
use troupe::tools::search::assemble::assemble;
use troupe::tools::{Registry, ToolDef, ToolSearchConfig, ViewSpec};

fn main() -> anyhow::Result<()> {
    // SAFETY: the first thing the program does, before any thread starts.
    unsafe { troupe::tools::search::semantic::settle_encoder_threads() };
    let registry = Registry::with_tools([
        ToolDef::new(
            "mcp_github_create_issue",
            "Open a new issue in a GitHub repository.",
            json!({"type": "object", "properties": {
                "repo": {"type": "string"}, "title": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"}}
            }, "required": ["repo", "title"]}),
        )
        .with_toolset("mcp-github"),
        ToolDef::new(
            "mcp_github_list_issues",
            "List the issues of a repository.",
            json!({"type": "object", "properties": {"repo": {"type": "string"}, "limit": {"type": "integer"}}}),
        )
        .with_toolset("mcp-github"),
        ToolDef::new(
            "mcp_slack_send_message",
            "Post a message to a Slack channel.",
            json!({"type": "object", "properties": {"channel": {"type": "string"}, "text": {"type": "string"}}}),
        )
        .with_toolset("mcp-slack"),
    ]);
    // This holder was granted GitHub only: Slack's tool does not exist for it.
    let view = registry.view(ViewSpec::toolsets(["mcp-github"]))?;
    let config = ToolSearchConfig::default();

    let assembly = assemble(&view, Some(128_000), &config);
    println!(
        "tier {} ({}), listing:\n{}\n",
        assembly.tier,
        assembly.listing_form.as_str(),
        assembly.listing.unwrap_or_default()
    );

    let found = tool_search(
        &view,
        &config,
        &json!({"queries": ["github create issue", "slack send message"]}),
    );
    println!("tool_search: {found:#}\n");

    let described = tool_describe(
        &view,
        &config,
        &json!({"names": ["mcp_github_create_issue"]}),
    );
    println!("tool_describe: {described:#}\n");

    // `labels` arrives as a bare string; the schema says array, so the bridge repairs it.
    let call = json!({"calls": [{"name": "mcp_github_create_issue", "arguments": {"repo": "acme/app", "title": "Crash on start", "labels": "bug"}}]});
    match resolve(&view, &config, &call) {
        Ok(resolved) => println!(
            "tool_call resolves to {} with {}",
            resolved.name,
            serde_json::Value::Object(resolved.arguments)
        ),
        Err(error) => println!("tool_call refused: {error}"),
    }
    Ok(())
}
