//! `tool_describe`: the full description and parameter schema of deferred tools, by name, so
//! the model can build a `tool_call`. Only the view is consulted: a tool outside it is reported
//! exactly like a name that does not exist, so a subagent learns nothing about tools it was not
//! granted. Called by the session when the model uses `tool_describe`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::args::string_list;
use super::tool_call::{is_direct_tool, not_deferred_message};
use super::tool_error;
use crate::config::ToolSearchConfig;
use crate::connectors::Failure;
use crate::connectors::names::{
    format_connector_name, is_connector_name, parse_connector_name, vendor_slug_candidates,
};
use crate::connectors::remote::failure_field;
use crate::deferral::is_bridge_name;
use crate::view::ToolsetView;

/// Most names one `tool_describe` call may ask for, after duplicates are removed.
pub const MAX_DESCRIBE_NAMES: usize = 10;

const EXAMPLE_NAMES: &str = "[\"mcp__github__create_issue\"]";

/// Answers a `tool_describe` call: `{"tools": {name: {"description", "parameters"}}}`, then
/// `not_found` with a `hint` when some names are unknown (or outside the view), then `errors`
/// for names the model is offered directly and should call without the bridge. Connector names
/// are not looked up here: they are not found (see [`tool_describe_with_connectors`]).
pub fn tool_describe(view: &ToolsetView, config: &ToolSearchConfig, args: &Value) -> Value {
    match describe_names(args) {
        Ok(names) => answer(view, config, names, None),
        Err(error) => error,
    }
}

/// [`tool_describe`] that fetches the schemas of `connectors__` names from the tool gateway
/// (one request for all of them) when the view grants connectors. Names the gateway could not
/// describe because it failed are listed under `connectors.names`.
pub async fn tool_describe_with_connectors(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    args: &Value,
) -> Value {
    let names = match describe_names(args) {
        Ok(names) => names,
        Err(error) => return error,
    };
    let wanted: Vec<&String> = names
        .iter()
        .filter(|n| is_connector_name(n) && !view.contains(n))
        .collect();
    let remote = match view.connectors() {
        Some(gateway) if !wanted.is_empty() => {
            let mut slugs: Vec<String> = Vec::new();
            for name in &wanted {
                if let Some((connector, tool)) = parse_connector_name(name) {
                    let (conventional, literal) = vendor_slug_candidates(connector, tool);
                    for slug in [conventional, literal] {
                        if !slugs.contains(&slug) {
                            slugs.push(slug);
                        }
                    }
                }
            }
            Some(gateway.describe(&slugs).await.map(|schemas| {
                let mut found = HashMap::new();
                for (slug, schema) in schemas {
                    let Some(connector) = schema
                        .get("connector")
                        .and_then(Value::as_str)
                        .filter(|c| !c.is_empty())
                    else {
                        continue;
                    };
                    let description = match schema.get("description") {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => String::new(),
                        Some(other) => other.to_string(),
                    };
                    let parameters = match schema.get("input_schema") {
                        Some(v @ Value::Object(_)) => v.clone(),
                        _ => Value::Object(Map::new()),
                    };
                    let name = format_connector_name(&connector.to_lowercase(), &slug);
                    found.entry(name).or_insert((description, parameters));
                }
                found
            }))
        }
        _ => None,
    };
    answer(view, config, names, remote)
}

/// The names of a `tool_describe` call, deduplicated, or the error a model gets.
fn describe_names(args: &Value) -> Result<Vec<String>, Value> {
    let empty = Map::new();
    let args = args.as_object().unwrap_or(&empty);
    let names = string_list(args, "names", true)
        .map_err(|e| tool_error(e.message("names", EXAMPLE_NAMES)))?;
    if names.len() > MAX_DESCRIBE_NAMES {
        return Err(tool_error(format!(
            "Too many names: {} asked for, at most {MAX_DESCRIBE_NAMES} per call. Split them over several tool_describe calls.",
            names.len()
        )));
    }
    Ok(names)
}

/// Connector schemas by tool name, or why the gateway could not give them.
type RemoteSchemas = Result<HashMap<String, (String, Value)>, Failure>;

fn answer(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    names: Vec<String>,
    remote: Option<RemoteSchemas>,
) -> Value {
    let mut tools = Map::new();
    let mut not_found: Vec<Value> = Vec::new();
    let mut undescribed: Vec<String> = Vec::new();
    let mut errors = Map::new();
    for name in names {
        let def = if is_bridge_name(&name) {
            None
        } else {
            view.get(&name)
        };
        let remote_schema = match &remote {
            Some(Ok(found)) => found.get(&name),
            _ => None,
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
            _ if remote_schema.is_some() => {
                if let Some((description, parameters)) = remote_schema {
                    let mut record = Map::new();
                    record.insert("description".into(), Value::String(description.clone()));
                    record.insert("parameters".into(), parameters.clone());
                    tools.insert(name, Value::Object(record));
                }
            }
            _ if is_connector_name(&name) => {
                if matches!(remote, Some(Err(_))) {
                    undescribed.push(name);
                } else {
                    not_found.push(Value::String(name));
                }
            }
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
    if let Some(Err(failure)) = remote {
        out.insert(
            "connectors".into(),
            failure_field(failure, "described", &undescribed),
        );
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
