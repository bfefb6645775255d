//! troupe as an MCP server (`troupe mcp serve`): one runtime from troupe.yaml, offered to MCP
//! clients over stdio or streamable HTTP. A client sees the tool-search bridge (`tool_search`,
//! `tool_describe`, `tool_call`) over every MCP server and plugin the config names, and with
//! `--toolsets` those toolsets' tools directly. Every call runs through the troupe's tool runner,
//! as a session's would: hooks, approval rules, danger checks, confinement and traces apply.
//!
//! # Layout
//! - this file: [`McpServer`] (what a running server shares) and [`Front`], the rmcp
//!   `ServerHandler` of one client connection.
//! - [`catalog`]: the tools listed, with their annotations.
//! - [`calls`]: running one call through the runner, with progress and cancellation.
//! - [`board_tools`]: the `kanban` toolset (`--toolsets kanban`): create, list, show, comment
//!   on and follow a board's tasks.
//! - [`agents`]: `run_<profile>` tools (`--agent PROFILE`), a whole troupe turn each.
//! - [`approvals`]: flagged calls asked of the client's person (elicitation), left in the
//!   [`queue`] when the server has one, or refused.
//! - [`queue`]: the approval queue's routes (`--http`, or `--queue` with stdio).
//! - [`changes`]: `notifications/tools/list_changed` when the catalog changes.
//! - [`transport`]: stdio and streamable HTTP (behind the server's bearer token).

mod agents;
mod approvals;
pub(crate) mod board_tools;
mod calls;
mod catalog;
mod changes;
mod queue;
pub(crate) mod transport;

pub(crate) use queue::QUEUE_PATH;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Addr;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use troupe_actors::call::CallTarget;
use troupe_actors::events::EventSink;
use troupe_actors::supervisor::Supervisor;
use troupe_actors::tool_runner::{RunnerLimits, ToolRunner};
use troupe_tools::sync::lock;
use troupe_tools::{
    ToolDef, ToolKind, ToolResult, ToolSearchConfig, ToolsetView, ViewSpec, bridge,
};

use crate::runtime::Runtime;

/// How long a search waits for MCP servers that are still starting, as a session's does.
const STARTING_SOURCES_WAIT: Duration = Duration::from_secs(30);

/// What `troupe mcp serve` offers besides the bridge.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServeOptions {
    /// Toolsets whose tools are offered directly (`--toolsets core,...`).
    pub(crate) toolsets: Vec<String>,
    /// Profiles offered as `run_<profile>` tools (`--agent`).
    pub(crate) agents: Vec<String>,
    /// An approval queue is served (`--http` or `--queue`): a call whose client cannot ask its
    /// person waits there instead of being refused at once.
    pub(crate) queue: bool,
}

/// A running MCP server over one runtime; each client connection gets a [`Front`] on it.
pub(crate) struct McpServer {
    shared: Arc<Shared>,
}

/// What every connection shares.
struct Shared {
    /// The runtime whose tools, hooks and approvals every call goes through.
    runtime: Runtime,
    /// The troupe's supervisor: where approvals are asked.
    supervisor: Addr<Supervisor>,
    /// Where call events go (the troupe's stream, so traces and observers see them).
    events: EventSink,
    /// Runs each call with the session runner's limits.
    runner: ToolRunner,
    /// Tool search settings of the config.
    search: ToolSearchConfig,
    /// The view behind the bridge: the config's toolsets; refreshed when the registry changes.
    bridge: Mutex<ToolsetView>,
    /// The view of `--toolsets`, offered directly; `None` without the flag.
    direct: Mutex<Option<ToolsetView>>,
    /// Connections whose person can be asked about approvals.
    askers: Arc<approvals::Askers>,
    /// Profiles offered as agents.
    agent_names: Vec<String>,
    /// The sessions agent tools opened.
    agents: Arc<agents::AgentSessions>,
}

impl McpServer {
    /// Sets up the server over `runtime`: its views, and the task that answers approvals.
    pub(crate) async fn start(
        runtime: Runtime,
        options: ServeOptions,
    ) -> Result<McpServer, String> {
        let bridge = bridged_only(runtime.view(None).map_err(|e| e.to_string())?)?;
        let direct = if options.toolsets.is_empty() {
            None
        } else {
            // The config's `toolsets.disabled` and `toolsets.blocked_tools` hold here too.
            let settings = &runtime.config().toolsets;
            let spec = ViewSpec::all()
                .without_toolsets(settings.disabled.iter().cloned())
                .blocking(settings.blocked_tools.iter().cloned());
            let view = runtime
                .view(Some(&options.toolsets))
                .map_err(|e| format!("--toolsets: {e}"))?;
            Some(
                view.narrow(spec)
                    .map_err(|e| format!("--toolsets with the config's toolsets settings: {e}"))?,
            )
        };
        let troupe = runtime.troupe().clone();
        agents::check(&troupe, &options.agents)?;
        let supervisor = troupe
            .on_actor_thread(|supervisor| supervisor)
            .await
            .map_err(|e| e.to_string())?;
        let askers = Arc::new(approvals::Askers::default());
        tokio::spawn(approvals::answer_all(
            troupe.clone(),
            Arc::clone(&askers),
            runtime.config().approvals.unattended,
            runtime.config().approvals.timeout,
            options.queue,
        ));
        let shared = Shared {
            supervisor,
            events: EventSink::forwarding_to(troupe.event_sink()),
            runner: ToolRunner::new(RunnerLimits::default()),
            search: runtime.session_defaults().tool_search,
            bridge: Mutex::new(bridge),
            direct: Mutex::new(direct),
            askers,
            agent_names: options.agents,
            agents: Arc::default(),
            runtime,
        };
        Ok(McpServer {
            shared: Arc::new(shared),
        })
    }

    /// The troupe every call runs in (the queue answers its requests).
    pub(crate) fn troupe(&self) -> &crate::api::Troupe {
        self.shared.runtime.troupe()
    }

    /// The handler of a new client connection.
    pub(crate) fn connection(&self) -> Front {
        Front {
            shared: Arc::clone(&self.shared),
            connection: Arc::new(Connection {
                session_id: format!("mcp-{}", uuid::Uuid::now_v7().simple()),
                closed: CancellationToken::new(),
                watching: std::sync::atomic::AtomicBool::new(false),
                askers: Arc::clone(&self.shared.askers),
                agents: Arc::clone(&self.shared.agents),
                troupe: self.shared.runtime.troupe().clone(),
            }),
        }
    }
}

/// One client connection: its id (the session id hooks and approvals see) and its end.
struct Connection {
    session_id: String,
    /// Fires when the connection's handler is dropped: its watchers stop.
    closed: CancellationToken,
    /// `notifications/initialized` was handled (a client that sends it twice gets one watcher).
    watching: std::sync::atomic::AtomicBool,
    askers: Arc<approvals::Askers>,
    /// The agent sessions of the server, of which this connection's close with it.
    agents: Arc<agents::AgentSessions>,
    troupe: crate::api::Troupe,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.closed.cancel();
        self.askers.remove(&self.session_id);
        agents::close_sessions(&self.troupe, self.agents.take_of(&self.session_id));
    }
}

/// The rmcp handler of one client connection.
#[derive(Clone)]
pub(crate) struct Front {
    shared: Arc<Shared>,
    connection: Arc<Connection>,
}

impl Shared {
    /// The bridge's view, refreshed first when the registry changed since it was taken.
    fn bridge_view(&self) -> ToolsetView {
        refresh(&self.bridge)
    }

    /// The direct view, refreshed likewise.
    fn direct_view(&self) -> Option<ToolsetView> {
        let mut direct = lock(&self.direct);
        if let Some(view) = direct.as_mut()
            && view.is_stale()
            && let Ok(fresh) = view.refreshed()
        {
            *view = fresh;
        }
        direct.clone()
    }

    /// Waits (as a session does) for MCP servers still starting, when the bridge may need them.
    async fn wait_for_starting_servers(&self) {
        if !self.bridge_view().sources_starting().is_empty() {
            self.runtime.wait_mcp_ready(STARTING_SOURCES_WAIT).await;
        }
    }
}

/// Whether the bridge reaches `def`: MCP servers', plugins' and connectors' tools only. The
/// built-in tools (and `session_search`) are offered only when `--toolsets` names them.
fn bridged(def: &ToolDef) -> bool {
    // Tools troupe adds in code are plugin-kind too; those of its own toolsets are not bridged.
    let own = matches!(
        def.toolset.as_deref(),
        Some(crate::sessions::SESSION_SEARCH | board_tools::TOOLSET)
    );
    match def.kind {
        ToolKind::Mcp | ToolKind::Connector => true,
        ToolKind::Plugin => !own,
        ToolKind::Core => false,
    }
}

/// `view` without the tools the bridge does not reach (see [`bridged`]).
fn bridged_only(view: ToolsetView) -> Result<ToolsetView, String> {
    let others: Vec<String> = view
        .tools()
        .iter()
        .filter(|def| !bridged(def))
        .map(|def| def.name.clone())
        .collect();
    view.narrow(ViewSpec::all().blocking(others))
        .map_err(|e| format!("cannot set up the bridge's tools: {e}"))
}

/// `tool_search` or `tool_describe` answered from `view`, as a session's lookup is.
fn lookup_target(
    view: ToolsetView,
    search: ToolSearchConfig,
    name: String,
    arguments: Map<String, Value>,
) -> CallTarget {
    let lookup = name.clone();
    CallTarget::Lookup {
        name,
        arguments,
        run: Box::new(move |arguments| {
            Box::pin(async move {
                let arguments = Value::Object(arguments);
                let value = match lookup.as_str() {
                    "tool_describe" => {
                        bridge::tool_describe_with_connectors(&view, &search, &arguments).await
                    }
                    _ => bridge::tool_search_with_connectors(&view, &search, &arguments).await,
                };
                if value.get("error").is_some() {
                    ToolResult::error_json(value)
                } else {
                    ToolResult::json(value)
                }
            })
        }),
    }
}

fn refresh(view: &Mutex<ToolsetView>) -> ToolsetView {
    let mut view = lock(view);
    if view.is_stale()
        && let Ok(fresh) = view.refreshed()
    {
        *view = fresh;
    }
    view.clone()
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .with_server_info(Implementation::new("troupe", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "troupe's tools: find a tool with tool_search (keywords: service, action, object), \
             load its schema with tool_describe, run it with tool_call. Calls pass troupe's \
             hooks and approvals.",
        )
    }

    // The handshake versions only: elicitation (how approvals are asked) is a request from
    // server to client, which 2026-07-28 no longer allows.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        use std::sync::atomic::Ordering;
        if self.connection.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let peer = context.peer;
        let elicits = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some());
        if elicits {
            self.shared
                .askers
                .add(&self.connection.session_id, peer.clone());
        }
        tokio::spawn(changes::watch(
            Arc::clone(self.shared.runtime.registry()),
            peer,
            self.connection.closed.clone(),
        ));
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let shared = &self.shared;
        let mut tools = catalog::bridge_tools(&shared.bridge_view(), &shared.search);
        if let Some(direct) = shared.direct_view() {
            tools.extend(catalog::direct_tools(&direct));
        }
        tools.extend(agents::agent_tools(
            shared.runtime.troupe(),
            &shared.agent_names,
        ));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = &self.shared;
        let name = request.name.to_string();
        let arguments = request.arguments.unwrap_or_default();
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| calls::Progress {
                token,
                peer: context.peer.clone(),
            });
        let session = &self.connection.session_id;
        let result = match name.as_str() {
            "tool_search" | "tool_describe" => {
                shared.wait_for_starting_servers().await;
                let view = shared.bridge_view();
                let target =
                    lookup_target(view.clone(), shared.search.clone(), name.clone(), arguments);
                shared
                    .run_call(session, view, &name, target, context.ct.clone(), progress)
                    .await
            }
            "tool_call" => {
                shared.wait_for_starting_servers().await;
                let view = shared.bridge_view();
                let target = match bridge::resolve(&view, &shared.search, &Value::Object(arguments))
                {
                    // Checked again against what the bridge offers, whatever resolved it.
                    Ok(resolved) if view.get(&resolved.name).is_some_and(|d| bridged(d)) => {
                        CallTarget::Tool {
                            name: resolved.name,
                            arguments: resolved.arguments,
                        }
                    }
                    Ok(resolved) => CallTarget::Invalid {
                        name: "tool_call".to_string(),
                        result: ToolResult::error_json(serde_json::json!({"error": format!(
                            "{:?} is not offered through tool_call, which reaches the tools of \
                             MCP servers, plugins and connectors; find those with tool_search. \
                             Built-in tools are offered directly when the server runs with \
                             --toolsets",
                            resolved.name
                        )})),
                    },
                    // Still a call with its slot, hooks and events, as a session's is.
                    Err(error) => CallTarget::Invalid {
                        name: "tool_call".to_string(),
                        result: ToolResult::error_json(error),
                    },
                };
                shared
                    .run_call(session, view, &name, target, context.ct.clone(), progress)
                    .await
            }
            agent
                if agent
                    .strip_prefix(agents::PREFIX)
                    .is_some_and(|p| shared.agent_names.iter().any(|n| n == p)) =>
            {
                let profile = &agent[agents::PREFIX.len()..];
                return Ok(shared
                    .run_agent(session, profile, arguments, context.ct.clone(), progress)
                    .await
                    .into());
            }
            _ => {
                let direct = shared.direct_view().filter(|view| {
                    view.get(&name)
                        .is_some_and(|d| catalog::offered_directly(d))
                });
                let Some(view) = direct else {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "there is no tool called {name:?} here; list the tools (tools/list), \
                             or find one with tool_search and run it with tool_call"
                        ),
                        None,
                    ));
                };
                let target = CallTarget::Tool {
                    name: name.clone(),
                    arguments,
                };
                shared
                    .run_call(session, view, &name, target, context.ct.clone(), progress)
                    .await
            }
        };
        Ok(calls::to_mcp(result).into())
    }
}
