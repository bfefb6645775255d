//! Tools a `/v1` client declares in `tools`: offered to the model beside troupe's own, run by
//! the client. A call to one is held open inside troupe's turn while the client's request is
//! answered with `finish_reason: "tool_calls"`; the client's next request carries the result,
//! which the held call returns, and the same turn goes on. So the session's conversation holds
//! the call and its result like any other tool's.
//!
//! The session sees them through a registry of its own: a copy of the tools its profile grants
//! plus the client's, in toolset [`CLIENT_TOOLSET`] (replaced when a later request declares
//! others).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Map, Value};
use tokio::sync::{oneshot, watch};
use troupe_tools::registry::Registry;
use troupe_tools::sync::lock;
use troupe_tools::{ToolDef, ToolHints, ToolKind, ToolResult, ToolsetView};

use super::errors::{Kind, OpenAiError, field, required};

/// The toolset the client's tools are registered under.
pub const CLIENT_TOOLSET: &str = "openai-client";

/// How long a held call waits for the client to send its result before it returns an error
/// and the turn goes on without it.
pub const CLIENT_RESULT_TIMEOUT: Duration = Duration::from_secs(600);

/// One tool as the client declared it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its JSON Schema.
    pub parameters: Value,
}

/// A call to a client tool, as the client is told of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientCall {
    /// The id the client answers with (`tool_call_id`).
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

struct Held {
    call: ClientCall,
    /// Whether a response told the client of it already.
    reported: bool,
    reply: Option<oneshot::Sender<String>>,
}

/// One session's client tools and the calls to them that wait for results.
pub struct ClientTools {
    registry: Arc<Registry>,
    held: Mutex<Vec<Held>>,
    /// Counts calls made, so a watcher wakes on each.
    made: watch::Sender<u64>,
}

impl std::fmt::Debug for ClientTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTools")
            .field("held", &lock(&self.held).len())
            .finish_non_exhaustive()
    }
}

/// Reads the request's `tools` (OpenAI's function tools; `path` names the field in errors).
pub fn parse_tools(body: &Map<String, Value>, path: &str) -> Result<Vec<ClientTool>, OpenAiError> {
    let Some(tools) = field(body, "tools", path, Kind::Array)? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<ClientTool> = Vec::new();
    for (i, tool) in tools.as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(tool) = tool.as_object() else {
            return Err(OpenAiError::invalid_param(
                &at,
                "invalid_type",
                format!(
                    "`{at}` must be an object {{\"type\": \"function\", \"function\": {{...}}}}"
                ),
            ));
        };
        let kind = required(tool, "type", &format!("{at}.type"), Kind::Str)?;
        if kind != "function" {
            return Err(OpenAiError::invalid_param(
                format!("{at}.type"),
                "unsupported_tool_type",
                format!("`{at}.type` is {kind}; only \"function\" tools can be declared"),
            ));
        }
        // Chat completions nest the function; the responses API puts its fields on the tool.
        let function = match field(tool, "function", &format!("{at}.function"), Kind::Object)? {
            Some(function) => function.as_object().cloned().unwrap_or_default(),
            None => tool.clone(),
        };
        let fpath = format!("{at}.function");
        let name = required(&function, "name", &format!("{fpath}.name"), Kind::Str)?
            .as_str()
            .unwrap_or_default()
            .to_string();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(OpenAiError::invalid_param(
                format!("{fpath}.name"),
                "invalid_tool_name",
                format!(
                    "the tool name {name:?} is not allowed; use 1 to 64 letters, digits, `_` or `-`"
                ),
            ));
        }
        if out.iter().any(|t| t.name == name) {
            return Err(OpenAiError::invalid_param(
                format!("{fpath}.name"),
                "duplicate_tool",
                format!("the tool {name} is declared twice; declare each tool once"),
            ));
        }
        let description = field(
            &function,
            "description",
            &format!("{fpath}.description"),
            Kind::Str,
        )?
        .and_then(Value::as_str)
        .map(str::to_string);
        let parameters = field(
            &function,
            "parameters",
            &format!("{fpath}.parameters"),
            Kind::Object,
        )?
        .cloned()
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        out.push(ClientTool {
            name,
            description,
            parameters,
        });
    }
    Ok(out)
}

impl ClientTools {
    /// Client tools over `base` (the tools the session would see): refuses a client tool named
    /// like one of troupe's, since the model could not tell them apart.
    pub fn new(base: &ToolsetView, tools: &[ClientTool]) -> Result<Arc<ClientTools>, OpenAiError> {
        let troupe_names: HashSet<&str> = base.tools().iter().map(|d| d.name.as_str()).collect();
        if let Some(clash) = tools
            .iter()
            .find(|t| troupe_names.contains(t.name.as_str()))
        {
            return Err(OpenAiError::invalid_param(
                "tools",
                "tool_name_taken",
                format!(
                    "the tool {} is one of troupe's own tools on this model; rename yours",
                    clash.name
                ),
            ));
        }
        let registry = Registry::with_tools(base.tools().iter().map(|d| (**d).clone()));
        let hub = Arc::new(ClientTools {
            registry,
            held: Mutex::new(Vec::new()),
            made: watch::channel(0).0,
        });
        hub.declare(tools);
        Ok(hub)
    }

    /// The view the session is opened with.
    pub fn view(&self) -> ToolsetView {
        self.registry.view_all()
    }

    /// Replaces the client's tools with `tools` (a later request may declare others).
    pub fn declare(self: &Arc<Self>, tools: &[ClientTool]) {
        let defs = tools
            .iter()
            .map(|tool| {
                let hub = Arc::downgrade(self);
                let name = tool.name.clone();
                let mut def = ToolDef::new(
                    tool.name.clone(),
                    tool.description.clone().unwrap_or_default(),
                    tool.parameters.clone(),
                )
                .with_toolset(CLIENT_TOOLSET)
                // Offered directly (never behind tool search), and several may be held at once.
                .with_kind(ToolKind::Core)
                .with_hints(ToolHints {
                    parallel_safe: true,
                    ..ToolHints::default()
                })
                .with_fn(move |arguments, ctx| {
                    let hub = hub.clone();
                    let name = name.clone();
                    async move {
                        match hub.upgrade() {
                            Some(hub) => hub.hold(name, arguments, ctx).await,
                            None => ToolResult::error("the client that declared this tool is gone"),
                        }
                    }
                    .boxed()
                });
                if tool.description.is_none() {
                    def.description = None;
                }
                def
            })
            .collect();
        self.registry.replace_toolset(CLIENT_TOOLSET, defs);
    }

    /// Holds a call until the client sends its result (or the wait or the call ends).
    async fn hold(
        &self,
        name: String,
        arguments: Map<String, Value>,
        ctx: troupe_tools::CallContext,
    ) -> ToolResult {
        let (tx, rx) = oneshot::channel();
        let id = ctx.call_id.clone();
        lock(&self.held).push(Held {
            call: ClientCall {
                id: id.clone(),
                name: name.clone(),
                arguments: Value::Object(arguments).to_string(),
            },
            reported: false,
            reply: Some(tx),
        });
        self.made.send_modify(|n| *n += 1);
        let result = tokio::select! {
            reply = rx => match reply {
                Ok(text) => ToolResult::text(text),
                Err(_) => ToolResult::error(format!("{name}: the client's result never came")),
            },
            _ = tokio::time::sleep(CLIENT_RESULT_TIMEOUT) => ToolResult::error(format!(
                "{name}: the client did not send this call's result within {} s",
                CLIENT_RESULT_TIMEOUT.as_secs()
            )),
            _ = ctx.cancel.cancelled() => ToolResult::error(format!("{name}: the call was stopped")),
        };
        lock(&self.held).retain(|h| h.call.id != id);
        result
    }

    /// A receiver that changes with each call made.
    pub fn calls_made(&self) -> watch::Receiver<u64> {
        self.made.subscribe()
    }

    /// The held calls no response reported yet, now marked reported.
    pub fn take_unreported(&self) -> Vec<ClientCall> {
        let mut held = lock(&self.held);
        held.iter_mut()
            .filter(|h| !h.reported)
            .map(|h| {
                h.reported = true;
                h.call.clone()
            })
            .collect()
    }

    /// The ids of the calls the client was told of and that wait for their result.
    pub fn awaiting(&self) -> Vec<String> {
        lock(&self.held)
            .iter()
            .filter(|h| h.reported && h.reply.is_some())
            .map(|h| h.call.id.clone())
            .collect()
    }

    /// Hands `content` to the held call `id`; false when no call waits under that id.
    pub fn deliver(&self, id: &str, content: String) -> bool {
        let mut held = lock(&self.held);
        match held.iter_mut().find(|h| h.call.id == id) {
            Some(h) => match h.reply.take() {
                Some(reply) => reply.send(content).is_ok(),
                None => false,
            },
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(tools: Value) -> Map<String, Value> {
        json!({"tools": tools})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn declared_tools_are_read_in_both_shapes() {
        let chat = json!([{"type": "function", "function": {"name": "get_weather",
            "description": "The weather.", "parameters": {"type": "object"}}}]);
        let responses = json!([{"type": "function", "name": "get_weather"}]);
        for tools in [chat, responses] {
            let parsed = parse_tools(&body(tools), "tools").unwrap();
            assert_eq!(parsed.len(), 1);
            assert_eq!(parsed[0].name, "get_weather");
        }
    }

    #[test]
    fn bad_tools_are_refused_naming_the_field() {
        let cases = [
            (json!("get_weather"), "tools"),
            (json!([{"type": "code_interpreter"}]), "tools[0].type"),
            (
                json!([{"type": "function", "function": {"name": "has space"}}]),
                "tools[0].function.name",
            ),
            (
                json!([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]),
                "tools[1].function.name",
            ),
            (
                json!([{"type": "function", "function": {"name": "a", "parameters": "x"}}]),
                "tools[0].function.parameters",
            ),
        ];
        for (tools, param) in cases {
            let error = parse_tools(&body(tools.clone()), "tools").unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST, "{tools}");
            assert_eq!(
                error.param.as_deref(),
                Some(param),
                "{tools}: {}",
                error.message
            );
        }
    }

    #[tokio::test]
    async fn a_held_call_returns_the_result_the_client_sends() {
        let base = Registry::new().view_all();
        let hub = ClientTools::new(
            &base,
            &[ClientTool {
                name: "get_weather".into(),
                description: None,
                parameters: json!({"type": "object"}),
            }],
        )
        .unwrap();
        let view = hub.view();
        let def = view.get("get_weather").cloned().unwrap();
        let mut made = hub.calls_made();
        let handler = def.handler.clone().unwrap();
        let ctx = troupe_tools::CallContext::detached("c1");
        let call = tokio::spawn(handler.call(Map::new(), ctx));
        made.changed().await.unwrap();
        let reported = hub.take_unreported();
        assert_eq!(reported.len(), 1);
        assert_eq!(reported[0].id, "c1");
        assert!(hub.take_unreported().is_empty(), "reported once");
        assert_eq!(hub.awaiting(), vec!["c1".to_string()]);
        assert!(!hub.deliver("c2", "nope".into()));
        assert!(hub.deliver("c1", "sunny".into()));
        let result = call.await.unwrap();
        assert_eq!(result.to_model_text(), "sunny");
        assert!(hub.awaiting().is_empty());
    }
}
