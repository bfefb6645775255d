//! `manage_connections`: the core tool that grants hosted connectors to a view and lets the
//! model see and change what is connected: list the gateway's apps with their state, start an
//! app's authorization (the answer carries the link the person opens), and switch on a local
//! MCP server that troupe.yaml declares with `enabled: false`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::gateway::Gateway;
use crate::deferral::MANAGE_CONNECTIONS;
use crate::tool::{CallContext, ToolDef, ToolHints, ToolKind, ToolResult};

/// The local MCP servers `manage_connections` may switch on, as the embedding program knows them.
pub trait LocalServers: Send + Sync {
    /// The servers declared but switched off (`enabled: false`), by name.
    fn disabled(&self) -> Vec<String>;
    /// Switches `name` on (in the config file and in the running process); `Ok` says what
    /// became available, `Err` what went wrong and what to do.
    fn enable(&self, name: &str) -> BoxFuture<'static, Result<String, String>>;
}

/// What `manage_connections` works with.
#[derive(Clone, Default)]
pub struct Connections {
    /// The gateway, when connectors are configured.
    pub gateway: Option<Arc<Gateway>>,
    /// The local servers, when the program can switch them on.
    pub local: Option<Arc<dyn LocalServers>>,
}

/// The `manage_connections` definition: toolset `connectors` (so a view can grant or deny
/// connectors as a toolset), a core tool (never deferred).
pub fn manage_connections_def(connections: Connections) -> ToolDef {
    let connections = Arc::new(connections);
    ToolDef::new(
        MANAGE_CONNECTIONS,
        "Lists the hosted apps (mail, calendars, documents, trackers, …) and local MCP servers that can be connected, and connects them. \
action \"list\" shows each app and whether it is connected; \"connect\" with a connector returns the link the person must open to authorize it \
(give it to them, wait until they say it is done, then search again); \"enable\" with a server switches on a local MCP server that is \
declared but off, so its tools can be searched on the next call.",
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "connect", "enable"], "description": "What to do; list when absent."},
                "connector": {"type": "string", "description": "For connect: the app, as list names it (gmail, notion, …)."},
                "server": {"type": "string", "description": "For enable: the local MCP server's name."}
            }
        }),
    )
    .with_toolset(super::remote::CONNECTORS_TOOLSET)
    .with_kind(ToolKind::Core)
    .with_hints(ToolHints {
        idempotent: true,
        ..ToolHints::default()
    })
    .with_fn(move |arguments: Map<String, Value>, _ctx: CallContext| {
        let connections = Arc::clone(&connections);
        Box::pin(async move { run(&connections, &arguments).await })
    })
}

fn text_arg<'a>(arguments: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

async fn run(connections: &Connections, arguments: &Map<String, Value>) -> ToolResult {
    match text_arg(arguments, "action").unwrap_or("list") {
        "list" => list(connections).await,
        "connect" => {
            let Some(connector) = text_arg(arguments, "connector") else {
                return ToolResult::error(
                    "connect needs 'connector': the app to connect, as action \"list\" names it, for example {\"action\": \"connect\", \"connector\": \"gmail\"}.",
                );
            };
            let Some(gateway) = &connections.gateway else {
                return ToolResult::error(
                    "No connector gateway is configured (tools.connectors in troupe.yaml), so hosted apps cannot be connected here.",
                );
            };
            match gateway.authorize(connector).await {
                Ok(url) => ToolResult::json(json!({
                    "connector": connector,
                    "connect_url": url,
                    "next": "Give the person this link to authorize the app. Once they say it is connected, search for its tools again.",
                })),
                Err(failure) => ToolResult::error_json(json!({"error": {
                    "code": failure.as_str(),
                    "message": format!("Could not start connecting '{connector}': {}", super::failure_message(failure)),
                }})),
            }
        }
        "enable" => {
            let Some(server) = text_arg(arguments, "server") else {
                return ToolResult::error(
                    "enable needs 'server': the local MCP server to switch on, as action \"list\" names it under local_servers.",
                );
            };
            let Some(local) = &connections.local else {
                return ToolResult::error(
                    "This program cannot switch local MCP servers on; enable it in troupe.yaml instead.",
                );
            };
            match local.enable(server).await {
                Ok(message) => {
                    ToolResult::json(json!({"server": server, "enabled": true, "message": message}))
                }
                Err(message) => ToolResult::error(message),
            }
        }
        other => ToolResult::error(format!(
            "Unknown action '{other}'. Send \"list\", \"connect\" (with connector) or \"enable\" (with server)."
        )),
    }
}

async fn list(connections: &Connections) -> ToolResult {
    let mut out = Map::new();
    if let Some(gateway) = &connections.gateway {
        match gateway.connections().await {
            Ok(list) => {
                let apps: Vec<Value> = list
                    .iter()
                    .filter_map(|c| {
                        let name = c.get("name")?.as_str()?;
                        let mut app = json!({
                            "name": name,
                            "connected": c.get("connected").and_then(Value::as_bool).unwrap_or(false),
                        });
                        if let Some(url) = c.get("connect_url").and_then(Value::as_str) {
                            app["connect_url"] = json!(url);
                        }
                        Some(app)
                    })
                    .collect();
                out.insert("connectors".into(), Value::Array(apps));
            }
            Err(failure) => {
                out.insert(
                    "connectors_error".into(),
                    json!({"code": failure.as_str(), "message": super::failure_message(failure)}),
                );
            }
        }
    }
    if let Some(local) = &connections.local {
        let servers: Vec<Value> = local
            .disabled()
            .into_iter()
            .map(|name| json!({"name": name, "enabled": false}))
            .collect();
        out.insert("local_servers".into(), Value::Array(servers));
    }
    ToolResult::json(Value::Object(out))
}
