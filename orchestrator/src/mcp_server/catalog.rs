//! The tools `troupe mcp serve` lists: the three bridge tools over every deferred tool of the
//! runtime (MCP servers, plugins), and, with `--toolsets`, the tools of those toolsets offered
//! directly. Each becomes an MCP [`Tool`] with annotations from troupe's planner hints, so a
//! client's own planner may run the read-only ones side by side.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;
use troupe_tools::search::assemble;
use troupe_tools::search::bridge_schemas::bridge_schemas;
use troupe_tools::search::listing::Listing;
use troupe_tools::{ToolDef, ToolSearchConfig, ToolsetView};

/// Tools a client may never reach directly: they need a session's own state.
const NOT_OFFERED: [&str; 1] = ["delegate_task"];

/// Whether `name` may be offered directly.
pub(super) fn offered_directly(def: &ToolDef) -> bool {
    !NOT_OFFERED.contains(&def.name.as_str()) && !troupe_tools::deferral::is_bridge_name(&def.name)
}

/// The three bridge tools as `bridge` would show them to a model: `tool_search` with the
/// listing of what it finds, `tool_describe`, `tool_call`. Offered even over an empty catalog,
/// so a client configured once keeps them when a server joins later.
pub(super) fn bridge_tools(bridge: &ToolsetView, config: &ToolSearchConfig) -> Vec<Tool> {
    let assembly = assemble(bridge, None, config);
    let mut schemas: Vec<Value> = assembly
        .tools
        .iter()
        .filter(|t| {
            t["function"]["name"]
                .as_str()
                .is_some_and(troupe_tools::deferral::is_bridge_name)
        })
        .cloned()
        .collect();
    if schemas.len() != 3 {
        schemas = bridge_schemas(0, false, &Listing::none(), config).to_vec();
    }
    schemas
        .iter()
        .filter_map(|schema| {
            let function = &schema["function"];
            let name = function["name"].as_str()?.to_string();
            let description = function["description"].as_str().unwrap_or("").to_string();
            let read_only = name != "tool_call";
            let annotations = ToolAnnotations::new()
                .read_only(read_only)
                .destructive(!read_only)
                .idempotent(read_only)
                // tool_call reaches whatever the configured servers reach.
                .open_world(!read_only);
            Some(
                Tool::new(name, description, Arc::new(object(&function["parameters"])))
                    .with_annotations(annotations),
            )
        })
        .collect()
}

/// The tools of `direct` that may be offered as themselves, with their hints as annotations.
pub(super) fn direct_tools(direct: &ToolsetView) -> Vec<Tool> {
    direct
        .tools()
        .iter()
        .filter(|def| offered_directly(def))
        .map(|def| {
            let hints = &def.hints;
            let annotations = ToolAnnotations::new()
                .read_only(hints.read_only)
                .destructive(!hints.read_only && hints.destructive)
                .idempotent(hints.read_only || hints.idempotent);
            Tool::new(
                def.name.clone(),
                def.description().to_string(),
                Arc::new(object(def.parameters())),
            )
            .with_annotations(annotations)
        })
        .collect()
}

/// A JSON schema as the object MCP wants; anything else becomes an open object schema.
fn object(schema: &Value) -> JsonObject {
    match schema {
        Value::Object(map) if map.get("type").is_some() => map.clone(),
        Value::Object(map) => {
            let mut map = map.clone();
            map.insert("type".into(), Value::String("object".into()));
            map
        }
        _ => {
            let mut map = JsonObject::new();
            map.insert("type".into(), Value::String("object".into()));
            map
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use troupe_tools::{Registry, ToolHints, ViewSpec};

    fn view() -> ToolsetView {
        Registry::with_tools([
            ToolDef::new(
                "mcp_time_get_current_time",
                "Current time in a time zone.",
                json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
            )
            .with_toolset("mcp-time")
            .with_hints(ToolHints {
                read_only: true,
                ..ToolHints::default()
            }),
            ToolDef::new("read_file", "Read a file.", json!({"properties": {}}))
                .with_toolset("core")
                .with_hints(ToolHints {
                    read_only: true,
                    ..ToolHints::default()
                }),
            ToolDef::new("delegate_task", "Delegate.", json!({"type": "object"}))
                .with_toolset("delegation"),
        ])
        .view(ViewSpec::all())
        .unwrap()
    }

    #[test]
    fn the_bridge_lists_three_tools_and_only_tool_call_may_write() {
        let tools = bridge_tools(&view(), &ToolSearchConfig::default());
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["tool_search", "tool_describe", "tool_call"]);
        for tool in &tools {
            let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
            assert_eq!(read_only, Some(tool.name != "tool_call"), "{}", tool.name);
        }
        assert!(
            tools[0]
                .description
                .as_deref()
                .is_some_and(|d| d.contains("Finds tools among 1 more")),
            "{:?}",
            tools[0].description
        );
    }

    #[test]
    fn direct_tools_keep_their_hints_and_leave_out_session_tools() {
        let tools = direct_tools(&view());
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(!names.contains(&"delegate_task"), "{names:?}");
        let read = tools.iter().find(|t| t.name == "read_file").unwrap();
        assert_eq!(
            read.annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(true)
        );
        assert_eq!(read.input_schema.get("type"), Some(&json!("object")));
    }
}
