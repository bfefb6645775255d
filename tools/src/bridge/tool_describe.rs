//! `tool_describe`: the full description and parameter schema of deferred tools, by name, so
//! the model can build a `tool_call`. Only the view is consulted: a tool outside it is reported
//! exactly like a name that does not exist, so a subagent learns nothing about tools it was not
//! granted. Called by the session when the model uses `tool_describe`.

use serde_json::{Map, Value};

use super::args::string_list;
use super::tool_call::{CONNECTOR_PREFIX, is_direct_tool, not_deferred_message};
use super::tool_error;
use crate::config::ToolSearchConfig;
use crate::deferral::is_bridge_name;
use crate::view::ToolsetView;

/// Most names one `tool_describe` call may ask for, after duplicates are removed.
pub const MAX_DESCRIBE_NAMES: usize = 10;

const EXAMPLE_NAMES: &str = "[\"mcp__github__create_issue\"]";

/// Answers a `tool_describe` call: `{"tools": {name: {"description", "parameters"}}}`, then
/// `not_found` with a `hint` when some names are unknown (or outside the view), then `errors`
/// for names the model is offered directly and should call without the bridge.
pub fn tool_describe(view: &ToolsetView, config: &ToolSearchConfig, args: &Value) -> Value {
    let empty = Map::new();
    let args = args.as_object().unwrap_or(&empty);
    let names = match string_list(args, "names", true) {
        Ok(names) => names,
        Err(e) => return tool_error(e.message("names", EXAMPLE_NAMES)),
    };
    if names.len() > MAX_DESCRIBE_NAMES {
        return tool_error(format!(
            "Too many names: {} asked for, at most {MAX_DESCRIBE_NAMES} per call. Split them over several tool_describe calls.",
            names.len()
        ));
    }
    let mut tools = Map::new();
    let mut not_found: Vec<Value> = Vec::new();
    let mut errors = Map::new();
    for name in names {
        let def = if is_bridge_name(&name) {
            None
        } else {
            view.get(&name)
        };
        match def {
            Some(def) if view.is_deferred(&name, &config.defer) => {
                let mut record = Map::new();
                record.insert(
                    "description".into(),
                    Value::String(def.description().to_string()),
                );
                record.insert("parameters".into(), def.parameters().clone());
                tools.insert(name, Value::Object(record));
            }
            // Hosted connectors are not wired in yet: their names are simply not found.
            _ if name.starts_with(CONNECTOR_PREFIX) => not_found.push(Value::String(name)),
            Some(def) if is_direct_tool(def) => {
                errors.insert(name.clone(), Value::String(not_deferred_message(&name)));
            }
            _ => not_found.push(Value::String(name)),
        }
    }
    let mut out = Map::new();
    out.insert("tools".into(), Value::Object(tools));
    if !not_found.is_empty() {
        out.insert("not_found".into(), Value::Array(not_found));
        out.insert(
            "hint".into(),
            Value::String(
                "The names in not_found are not available to you right now. Run tool_search again to get current names."
                    .into(),
            ),
        );
    }
    if !errors.is_empty() {
        out.insert("errors".into(), Value::Object(errors));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::tool::ToolDef;
    use crate::view::ViewSpec;
    use serde_json::json;

    fn registry() -> std::sync::Arc<Registry> {
        Registry::with_tools([
            ToolDef::new("gh_issue", "Open an issue", json!({"type": "object"}))
                .with_toolset("mcp-github"),
            ToolDef::new("secret", "Hidden", json!({"type": "object"})).with_toolset("mcp-secret"),
            ToolDef::new("terminal", "Run", json!({"type": "object"})).with_toolset("core"),
            ToolDef::new("tool_search", "bridge", json!({"type": "object"})).with_toolset("bridge"),
        ])
    }

    #[test]
    fn found_not_found_and_errors_in_order() {
        let view = registry().view_all();
        let out = tool_describe(
            &view,
            &ToolSearchConfig::default(),
            &json!({"names": ["gh_issue", "nope", "terminal", "gh_issue", "tool_search", "connectors__a__B"]}),
        );
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["tools", "not_found", "hint", "errors"]);
        assert_eq!(
            out["tools"]["gh_issue"],
            json!({"description": "Open an issue", "parameters": {"type": "object"}})
        );
        assert_eq!(
            out["not_found"],
            json!(["nope", "tool_search", "connectors__a__B"])
        );
        assert!(out["errors"]["terminal"].is_string());
    }

    #[test]
    fn outside_the_view_is_not_found() {
        let view = registry()
            .view(ViewSpec::all().without_toolsets(["mcp-secret"]))
            .unwrap();
        let hidden = tool_describe(
            &view,
            &ToolSearchConfig::default(),
            &json!({"names": "secret"}),
        );
        let missing = tool_describe(
            &view,
            &ToolSearchConfig::default(),
            &json!({"names": "secreT"}),
        );
        assert_eq!(hidden["not_found"], json!(["secret"]));
        assert_eq!(hidden["hint"], missing["hint"]);
        assert_eq!(
            hidden.as_object().unwrap().len(),
            missing.as_object().unwrap().len()
        );
    }

    #[test]
    fn bad_names_are_errors() {
        let view = registry().view_all();
        let config = ToolSearchConfig::default();
        assert!(tool_describe(&view, &config, &json!({}))["error"].is_string());
        assert!(tool_describe(&view, &config, &json!("names"))["error"].is_string());
        assert!(tool_describe(&view, &config, &json!({"names": [null, " "]}))["error"].is_string());
        let eleven: Vec<String> = (0..11).map(|i| format!("n{i}")).collect();
        assert!(tool_describe(&view, &config, &json!({"names": eleven}))["error"].is_string());
        let ten_after_dedupe: Vec<String> = (0..12).map(|i| format!("n{}", i % 10)).collect();
        assert_eq!(
            tool_describe(&view, &config, &json!({"names": ten_after_dedupe}))["not_found"]
                .as_array()
                .unwrap()
                .len(),
            10
        );
    }
}
