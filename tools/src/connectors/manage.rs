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
action \"list\" shows each app and whether it is connected; \"connect\" with a connector starts its authorization: when someone is \
watching, the call shows them the link and waits until they say it is connected (the answer is then the app's new state) or skipped; \
otherwise it returns the link the person must open (give it to them, wait until they say it is done, then search again); \"enable\" with a server switches on a local MCP server that is \
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

/// The choice a person makes once the app is authorized.
pub const CONNECTED_CHOICE: &str = "connected";
/// The choice a person makes to go on without the app.
pub const SKIP_CHOICE: &str = "skip";

/// The question that waits on the person for a `connect` whose result carries a link: the
/// connector's name and the question. `None` for any other result (an error, another action).
pub fn connect_question(result: &ToolResult) -> Option<(String, crate::clarify::Question)> {
    if result.is_error {
        return None;
    }
    let structured = result.structured.as_ref()?;
    let connector = structured.get("connector")?.as_str()?;
    let url = structured.get("connect_url")?.as_str()?;
    Some((
        connector.to_string(),
        crate::clarify::Question {
            question: format!("Open {url} to connect {connector}, then choose."),
            choices: vec![CONNECTED_CHOICE.to_string(), SKIP_CHOICE.to_string()],
            allow_other: false,
        },
    ))
}

/// What the model reads when the person went on without connecting `connector`.
pub fn connect_skipped(connector: &str) -> ToolResult {
    ToolResult::json(json!({
        "connector": connector,
        "connected": false,
        "skipped": true,
        "next": format!("The person skipped connecting {connector}. Go on without it, and do not ask again unless they bring it up."),
    }))
}

/// What the model reads after the person said `connector` is connected: its state as `listed`
/// (a `list` action's result) reports it, so a person who clicked too soon is not believed.
pub fn connect_checked(connector: &str, listed: &ToolResult) -> ToolResult {
    let state = listed
        .structured
        .as_ref()
        .and_then(|v| v.get("connectors"))
        .and_then(Value::as_array)
        .and_then(|apps| {
            apps.iter()
                .find(|app| app.get("name").and_then(Value::as_str) == Some(connector))
        });
    match state {
        Some(app) if app.get("connected").and_then(Value::as_bool) == Some(true) => {
            ToolResult::json(json!({
                "connector": connector,
                "connected": true,
                "next": format!("{connector} is connected: search for its tools (tool_search) and go on."),
            }))
        }
        Some(app) => {
            let mut out = json!({
                "connector": connector,
                "connected": false,
                "next": format!("The person said {connector} is connected, but the gateway does not report it yet. Tell them, and check again with action \"list\" once they have finished authorizing."),
            });
            if let Some(url) = app.get("connect_url") {
                out["connect_url"] = url.clone();
            }
            ToolResult::json(out)
        }
        None => {
            let why = listed
                .structured
                .as_ref()
                .and_then(|v| v.get("connectors_error"))
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            ToolResult::error(format!(
                "The person said {connector} is connected, but its state could not be read from the gateway{why}. Check again with action \"list\"."
            ))
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_becomes_a_question_and_the_answer_is_checked_against_the_gateway() {
        let started = ToolResult::json(
            json!({"connector": "gmail", "connect_url": "https://c.example/g", "next": "…"}),
        );
        let (connector, question) = connect_question(&started).unwrap();
        assert_eq!(connector, "gmail");
        assert!(question.question.contains("https://c.example/g"));
        assert_eq!(question.choices, [CONNECTED_CHOICE, SKIP_CHOICE]);
        assert_eq!(question.read_answer("1").as_deref(), Some(CONNECTED_CHOICE));
        assert_eq!(question.read_answer("later"), None);
        // Errors and other actions ask nothing.
        assert!(connect_question(&ToolResult::error("no gateway")).is_none());
        assert!(connect_question(&ToolResult::json(json!({"connectors": []}))).is_none());

        let listed = |connected: bool| {
            ToolResult::json(json!({"connectors": [
                {"name": "notion", "connected": true},
                {"name": "gmail", "connected": connected, "connect_url": "https://c.example/g"},
            ]}))
        };
        let done = connect_checked("gmail", &listed(true));
        assert_eq!(done.structured.as_ref().unwrap()["connected"], true);
        // Said connected too soon: the gateway's word wins, and the link comes back.
        let early = connect_checked("gmail", &listed(false)).structured.unwrap();
        assert_eq!(early["connected"], false);
        assert_eq!(early["connect_url"], "https://c.example/g");
        let unreadable = connect_checked(
            "gmail",
            &ToolResult::json(json!({"connectors_error": {"code": "unreachable"}})),
        );
        assert!(unreadable.is_error);
        assert!(unreadable.to_model_text().contains("unreachable"));
        let skipped = connect_skipped("gmail").structured.unwrap();
        assert_eq!(skipped["skipped"], true);
    }
}
