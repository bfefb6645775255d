//! Hosted connectors: tools that are never registered locally but found, described and run
//! through a tool gateway (Gmail, Calendar, Notion, … behind one HTTP service). A gateway is
//! attached to the [`Registry`](crate::Registry) once ([`Registry::set_connectors`](crate::Registry::set_connectors));
//! a view reaches it only when it holds `manage_connections`
//! ([`ToolsetView::connectors`](crate::ToolsetView::connectors)), so connectors follow the
//! same scoping as every other tool.
//!
//! # Layout
//! - [`names`]: `connectors__<connector>__<tool>` and the vendor slugs behind it.
//! - [`gateway`]: the HTTP client and its failure codes.
//! - [`remote`]: gateway answers read into catalog entries; the bridge's `connectors` field.
//! - [`manage`]: the `manage_connections` tool.

pub mod gateway;
pub mod manage;
pub mod names;
pub mod remote;

use std::sync::Arc;

use serde_json::{Map, Value, json};

pub use gateway::{Execution, Failure, Gateway, GatewaySettings};
pub use names::{CONNECTOR_PREFIX, format_connector_name, is_connector_name, parse_connector_name};

use crate::tool::{CallContext, ToolDef, ToolKind, ToolResult};

/// The definition a connector name runs as: no schema of its own (the gateway checks the
/// arguments), exclusive (so the planner runs it alone, in order), and a handler that sends one
/// `execute` request. A malformed name still gets a definition, whose call answers
/// `TOOL_NOT_FOUND`, so it fails as one entry of its batch rather than the batch.
pub fn executable_def(gateway: &Arc<Gateway>, name: &str) -> ToolDef {
    let gateway = Arc::clone(gateway);
    let owned = name.to_string();
    let mut def = ToolDef::new(name, "", json!({"type": "object"}))
        .with_toolset(remote::CONNECTORS_TOOLSET)
        .with_kind(ToolKind::Connector)
        .exclusive();
    def.source_name = parse_connector_name(name).map(|(c, _)| c.to_string());
    def.with_fn(move |arguments: Map<String, Value>, ctx: CallContext| {
        let gateway = Arc::clone(&gateway);
        let name = owned.clone();
        Box::pin(async move {
            tokio::select! {
                result = execute(&gateway, &name, &arguments) => result,
                () = ctx.cancel.cancelled() => ToolResult::error_json(json!({"error": {
                    "code": "INTERRUPTED",
                    "message": format!("{name} was stopped before the gateway answered."),
                }})),
            }
        })
    })
}

/// Runs one connector tool on the gateway: `data` on success; otherwise
/// `{"error": {"code", "message"}}` with the gateway's code or the failure's.
pub async fn execute(gateway: &Gateway, name: &str, arguments: &Map<String, Value>) -> ToolResult {
    let Some((connector, tool)) = parse_connector_name(name) else {
        return ToolResult::error_json(json!({"error": {
            "code": "TOOL_NOT_FOUND",
            "message": "Malformed connector tool name; expected connectors__<connector>__<tool>, as tool_search returns it.",
        }}));
    };
    match gateway.execute(connector, tool, arguments).await {
        Ok(Execution::Ok(data)) => ToolResult::json(data),
        Ok(Execution::Refused { code, message }) => {
            let hint = match code.as_str() {
                "CONNECTION_REQUIRED" => Some(format!(
                    "The person has not connected {connector} yet. Call manage_connections with {{\"action\": \"connect\", \"connector\": \"{connector}\"}} to get the link, then retry."
                )),
                "TOOL_NOT_FOUND" => Some(
                    "The gateway does not know this tool. Run tool_search again for current names."
                        .to_string(),
                ),
                _ => None,
            };
            let mut error = json!({"code": code, "message": message});
            if let Some(hint) = hint {
                error["hint"] = json!(hint);
            }
            ToolResult::error_json(json!({ "error": error }))
        }
        Err(failure) => ToolResult::error_json(json!({"error": {
            "code": failure.as_str(),
            "message": failure_message(failure),
        }})),
    }
}

/// What a model reads when the gateway failed on a call.
pub fn failure_message(failure: Failure) -> &'static str {
    match failure {
        Failure::SignInExpired => {
            "The connector gateway refused the sign-in; the person has to sign in again. The tool was not run."
        }
        Failure::NotSetUp => {
            "Hosted connectors are not set up for this person yet; call manage_connections to connect an app first. The tool was not run."
        }
        Failure::Unreachable => {
            "The connector gateway could not be reached or gave no usable answer; it is not known whether the tool ran. Tell the person before retrying."
        }
    }
}

/// How one entry of a connector batch ended, for [`batch_answer`].
#[derive(Debug, Clone, PartialEq)]
pub enum EntryOutcome {
    /// It ran and the gateway gave this.
    Response(Value),
    /// It failed or never ran: `{"code", "message"}`.
    Error(Value),
}

impl EntryOutcome {
    /// The outcome of a result a connector tool gave: its data, or its `error` object.
    pub fn of_result(result: &ToolResult) -> EntryOutcome {
        let value = result
            .structured
            .clone()
            .unwrap_or_else(|| Value::String(result.to_model_text()));
        if !result.is_error {
            return EntryOutcome::Response(value);
        }
        match value.get("error") {
            Some(error @ Value::Object(_)) => EntryOutcome::Error(error.clone()),
            Some(Value::String(message)) => {
                EntryOutcome::Error(json!({"code": "ERROR", "message": message}))
            }
            _ => EntryOutcome::Error(json!({"code": "ERROR", "message": result.to_model_text()})),
        }
    }
}

/// The answer of a connector batch: `{"results": [{"index", "name", "response"|"error"}],
/// "success_count", "error_count", "total_count"}`, in input order.
pub fn batch_answer(entries: &[(String, EntryOutcome)]) -> Value {
    let mut ok = 0usize;
    let results: Vec<Value> = entries
        .iter()
        .enumerate()
        .map(|(index, (name, outcome))| match outcome {
            EntryOutcome::Response(data) => {
                ok += 1;
                json!({"index": index, "name": name, "response": data})
            }
            EntryOutcome::Error(error) => json!({"index": index, "name": name, "error": error}),
        })
        .collect();
    json!({
        "results": results,
        "success_count": ok,
        "error_count": entries.len() - ok,
        "total_count": entries.len(),
    })
}
