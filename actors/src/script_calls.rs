//! Where a script's tool call goes (`execute_code`'s `troupe_tools` module calls back through
//! [`RunnerDispatch`](crate::tool_runner::RunnerDispatch)). The bridge names are resolved here
//! as the session resolves the model's own: `tool_search` and `tool_describe` are answered from
//! the session's view, and `tool_call` is unwrapped into the tool it names, so that tool then
//! runs through the same hooks and approvals as a direct call.
//!
//! One difference from the model's route: a script has no other way to reach a tool that is
//! loaded up front (its module offers only a few tools by name), so `tool_call` accepts any
//! tool of the view there, deferred or not, with its arguments checked against the schema.

use serde_json::{Map, Value, json};
use troupe_tools::bridge::tool_call::{
    CONNECTOR_PREFIX, Resolution, ResolvedCall, normalize_entries, resolve_batch, validate,
};
use troupe_tools::deferral::is_bridge_name;
use troupe_tools::{ToolResult, ToolSearchConfig, ToolsetView, bridge};

use crate::call::CallTarget;

/// How long a script's search or `tool_call` waits for MCP servers that are still starting
/// (the same as the model's own calls wait).
pub(crate) const SCRIPT_SOURCES_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a script's call becomes: one target, or the entries of a connector batch run one
/// after another (their answers go back as one `{"results": [...]}`).
pub(crate) enum ScriptRoute {
    /// One call.
    One(CallTarget),
    /// A `tool_call` batch of hosted connector tools, in order.
    Batch(Vec<CallTarget>),
}

/// Routes `tool` with `arguments` on `view`. `Err` is the answer the script reads when the call
/// cannot run (a `tool_call` that names nothing usable, or arguments that do not fit).
pub(crate) fn route_script_call(
    tool: String,
    arguments: Map<String, Value>,
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> Result<ScriptRoute, ToolResult> {
    match tool.as_str() {
        "tool_search" | "tool_describe" => {
            Ok(ScriptRoute::One(lookup(tool, arguments, view, config)))
        }
        "tool_call" => resolve_tool_call(arguments, view, config),
        _ => Ok(ScriptRoute::One(CallTarget::Tool {
            name: tool,
            arguments,
        })),
    }
}

/// A bridge lookup bound to `view`.
pub(crate) fn lookup(
    name: String,
    arguments: Map<String, Value>,
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> CallTarget {
    let (view, config, which) = (view.clone(), config.clone(), name.clone());
    CallTarget::Lookup {
        name,
        arguments,
        run: Box::new(move |arguments| {
            Box::pin(async move { bridge_lookup(&which, &view, &config, arguments).await })
        }),
    }
}

/// Answers `tool_search` or `tool_describe` from the view (and the connector gateway, when
/// the view grants connectors).
pub(crate) async fn bridge_lookup(
    name: &str,
    view: &ToolsetView,
    config: &ToolSearchConfig,
    arguments: Map<String, Value>,
) -> ToolResult {
    let args = Value::Object(arguments);
    let value = match name {
        "tool_describe" => bridge::tool_describe_with_connectors(view, config, &args).await,
        _ => bridge::tool_search_with_connectors(view, config, &args).await,
    };
    if value.get("error").is_some() {
        ToolResult::error_json(value)
    } else {
        ToolResult::json(value)
    }
}

fn resolve_tool_call(
    arguments: Map<String, Value>,
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> Result<ScriptRoute, ToolResult> {
    let args = Value::Object(arguments);
    let entries =
        normalize_entries(&args).map_err(|e| ToolResult::error_json(bridge::tool_error(e)))?;
    // One tool of the view, by its exact name: run it whether or not it is deferred.
    if let [entry] = entries.as_slice()
        && !entry.name.starts_with(CONNECTOR_PREFIX)
        && !is_bridge_name(&entry.name)
        && view.contains(&entry.name)
    {
        let call = ResolvedCall {
            name: entry.name.clone(),
            arguments: entry.arguments.clone(),
        };
        let check = validate(view, &call);
        return match check.error {
            Some(error) => Err(ToolResult::error_json(error)),
            None => Ok(ScriptRoute::One(CallTarget::Tool {
                name: call.name,
                arguments: check.arguments,
            })),
        };
    }
    match resolve_batch(view, config, &args) {
        Ok(Resolution::Local(call)) => Ok(ScriptRoute::One(CallTarget::Tool {
            name: call.name,
            arguments: call.arguments,
        })),
        Ok(Resolution::Connectors(entries)) => Ok(ScriptRoute::Batch(
            entries
                .into_iter()
                .map(|e| CallTarget::Tool {
                    name: e.name,
                    arguments: e.arguments,
                })
                .collect(),
        )),
        Err(error) => Err(ToolResult::error_json(error)),
    }
}

/// The one answer of a connector batch: each entry's name and result, in order.
pub(crate) fn batch_answer(results: Vec<(String, ToolResult)>) -> ToolResult {
    let any_failed = results.iter().any(|(_, r)| r.is_error);
    let items: Vec<Value> = results
        .into_iter()
        .map(|(name, result)| {
            let text = result.to_model_text();
            let body = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
            if result.is_error {
                json!({"name": name, "error": body})
            } else {
                json!({"name": name, "result": body})
            }
        })
        .collect();
    let value = json!({ "results": items });
    if any_failed {
        ToolResult::error_json(value)
    } else {
        ToolResult::json(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_tools::{Registry, ToolDef, ViewSpec};

    fn view() -> ToolsetView {
        Registry::with_tools([
            ToolDef::new(
                "mcp_echo",
                "Echoes.",
                json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}),
            )
            .with_toolset("mcp-test"),
            ToolDef::new("local", "A local tool.", json!({"type": "object"})).with_toolset("core"),
        ])
        .view(ViewSpec::all())
        .unwrap()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn tool_call_unwraps_to_the_named_tool_with_coerced_arguments() {
        let config = ToolSearchConfig::default();
        let routed = route_script_call(
            "tool_call".into(),
            args(json!({"name": "mcp_echo", "arguments": {"count": "3"}})),
            &view(),
            &config,
        );
        match routed {
            Ok(ScriptRoute::One(CallTarget::Tool { name, arguments })) => {
                assert_eq!(name, "mcp_echo");
                assert_eq!(arguments.get("count"), Some(&json!(3)));
            }
            _ => panic!("not unwrapped"),
        }
        // A tool loaded up front is reachable too: the script has no other way to call it.
        assert!(matches!(
            route_script_call("tool_call".into(), args(json!({"calls": [{"name": "local"}]})), &view(), &config),
            Ok(ScriptRoute::One(CallTarget::Tool { ref name, .. })) if name == "local"
        ));
    }

    #[test]
    fn bad_tool_calls_come_back_as_errors_that_say_what_to_send() {
        let config = ToolSearchConfig::default();
        let Err(missing) = route_script_call(
            "tool_call".into(),
            args(json!({"name": "mcp_echo", "arguments": {}})),
            &view(),
            &config,
        ) else {
            panic!("missing argument accepted");
        };
        assert!(missing.is_error);
        assert!(missing.to_model_text().contains("count"));
        let Err(unknown) = route_script_call(
            "tool_call".into(),
            args(json!({"name": "nope"})),
            &view(),
            &config,
        ) else {
            panic!("unknown tool accepted");
        };
        assert!(unknown.to_model_text().contains("nope"));
        // Searches are lookups answered from the view.
        assert!(matches!(
            route_script_call(
                "tool_search".into(),
                args(json!({"queries": ["echo"]})),
                &view(),
                &config
            ),
            Ok(ScriptRoute::One(CallTarget::Lookup { .. }))
        ));
    }
}
