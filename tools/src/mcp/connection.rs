//! One MCP server's connection: it opens the session, keeps the server's tools in the
//! [`Registry`] (toolset `mcp-<server>`), serves calls over one shared rmcp `Peer`, reopens a
//! session that died on the next call (with bounded exponential backoff), and refreshes the
//! tools on `notifications/tools/list_changed`. Each live session is owned by one task that
//! holds the `RunningService` and, when the session ends, kills the server's process group.
//! [`super::McpManager`] creates these; tool handlers call [`ServerConn::call`].

use crate::sync::lock;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResponse, Tool};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::client::{self, Opened};
use super::config::McpServerConfig;
use super::names::NameBook;
use super::result::map_call_result;
use super::status::{ServerState, ServerStatus};
use super::tool_handler::McpToolHandler;
use crate::builtin::sandbox_env::ChildSecrets;
use crate::registry::Registry;
use crate::tool::{ToolDef, ToolHints, ToolKind, ToolResult};
use crate::view::ViewSpec;

/// First wait after a failed reopen; it doubles with each failure up to [`BACKOFF_MAX`].
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest wait between reopen attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long shutdown waits for a session to close before killing what is left.
const CLOSE_GRACE: Duration = Duration::from_secs(8);

/// Everything known about one configured server.
pub(crate) struct ServerConn {
    /// Its checked settings.
    pub(crate) config: McpServerConfig,
    /// Where its tools are registered.
    registry: Arc<Registry>,
    /// Registered names across all servers, shared with the manager.
    names: Arc<Mutex<NameBook>>,
    /// The stdio server's stderr goes here.
    log_path: PathBuf,
    /// troupe's keys, kept out of a stdio server's environment.
    secrets: ChildSecrets,
    /// Fires on shutdown: every session of this server ends.
    shutdown: CancellationToken,
    /// The live session and the status fields; held only briefly, never across an await.
    state: Mutex<State>,
    /// One reopen at a time; callers that arrive meanwhile wait for its outcome.
    reopening: tokio::sync::Mutex<()>,
    /// Tasks owning sessions and refreshing tools, awaited on shutdown.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Back-reference handed to tool handlers and tasks, so they never keep the server alive.
    me: Weak<ServerConn>,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    /// Bumped per session, so a task of an old session cannot clobber a newer one.
    generation: u64,
    phase: Phase,
    last_error: Option<String>,
    tool_count: usize,
    /// Failed reopen attempts in a row.
    failures: u32,
    /// No reopen before this instant.
    retry_at: Option<Instant>,
    pid: Option<u32>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    #[default]
    Starting,
    Connected,
    Failed,
    Disabled,
    Closed,
}

#[derive(Clone)]
struct Live {
    peer: Peer<RoleClient>,
    /// Ends this session only (a child of the server's shutdown token).
    ct: CancellationToken,
}

impl ServerConn {
    pub(crate) fn new(
        config: McpServerConfig,
        registry: Arc<Registry>,
        names: Arc<Mutex<NameBook>>,
        log_path: PathBuf,
        secrets: ChildSecrets,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let disabled = !config.enabled;
        Arc::new_cyclic(|me| ServerConn {
            config,
            registry,
            names,
            log_path,
            secrets,
            shutdown,
            state: Mutex::new(State {
                phase: if disabled {
                    Phase::Disabled
                } else {
                    Phase::Starting
                },
                ..State::default()
            }),
            reopening: tokio::sync::Mutex::new(()),
            tasks: Mutex::new(Vec::new()),
            me: me.clone(),
        })
    }

    /// The server's name as configured.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Opens a session and lists its tools without registering them (start-up registers all
    /// servers afterwards, in name order, so registered names do not depend on timing).
    pub(crate) async fn open_session(&self) -> Result<Vec<Tool>, String> {
        let result = self.open_session_inner().await;
        if let Err(error) = &result {
            let mut state = lock(&self.state);
            state.phase = Phase::Failed;
            state.last_error = Some(error.clone());
            state.failures = state.failures.saturating_add(1);
            state.retry_at = Some(Instant::now() + backoff(state.failures));
            tracing::warn!(server = %self.config.name, %error, "MCP server unavailable");
        }
        result
    }

    async fn open_session_inner(&self) -> Result<Vec<Tool>, String> {
        if self.shutdown.is_cancelled() {
            return Err("troupe is shutting its MCP servers down".into());
        }
        let (tx, rx) = mpsc::channel(1);
        let ct = self.shutdown.child_token();
        let Opened {
            running,
            process_group,
            pid,
        } = client::open(&self.config, &self.log_path, &self.secrets, tx, ct.clone()).await?;
        let peer = running.peer().clone();
        let tools = match tokio::time::timeout(self.config.connect_timeout, peer.list_all_tools())
            .await
        {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                ct.cancel();
                client::kill_group(process_group);
                return Err(format!("the server would not list its tools: {e}"));
            }
            Err(_) => {
                ct.cancel();
                client::kill_group(process_group);
                return Err("the server did not answer `tools/list` within connect_timeout".into());
            }
        };
        let generation = {
            let mut state = lock(&self.state);
            state.generation += 1;
            state.live = Some(Live {
                peer: peer.clone(),
                ct: ct.clone(),
            });
            state.phase = Phase::Connected;
            state.last_error = None;
            state.failures = 0;
            state.retry_at = None;
            state.pid = pid;
            state.generation
        };
        tracing::info!(server = %self.config.name, tools = tools.len(), "MCP server connected");

        // The owner task: the session lives until the server goes away or shutdown fires.
        let me = self.me.clone();
        let owner = tokio::spawn(async move {
            let reason = running.waiting().await;
            client::kill_group(process_group);
            if let Some(conn) = me.upgrade() {
                conn.session_ended(generation, &format!("{reason:?}"));
            }
        });
        let me = self.me.clone();
        let refresher = tokio::spawn(refresh_on_notice(me, peer, rx, ct));
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(owner);
        tasks.push(refresher);
        Ok(tools)
    }

    fn session_ended(&self, generation: u64, reason: &str) {
        let mut state = lock(&self.state);
        if state.generation != generation {
            return;
        }
        state.live = None;
        if self.shutdown.is_cancelled() {
            state.phase = Phase::Closed;
            return;
        }
        state.phase = Phase::Failed;
        state.last_error = Some(
            "the server closed the connection (its process exited or the endpoint went away); it is reopened on the next call".into(),
        );
        tracing::warn!(server = %self.config.name, reason, "MCP session ended");
    }

    /// Registers `tools` (after the include/exclude filter) as the server's toolset, unless the
    /// registry already holds exactly these definitions.
    pub(crate) fn install_tools(&self, tools: Vec<Tool>) {
        if self.shutdown.is_cancelled() {
            return;
        }
        let toolset = self.config.toolset();
        let admitted: Vec<Tool> = tools
            .into_iter()
            .filter(|t| self.config.tools.admits(&t.name))
            .collect();
        let remote_names: Vec<String> = admitted.iter().map(|t| t.name.to_string()).collect();
        let assigned = {
            let registry = &self.registry;
            let mut names = lock(&self.names);
            names.assign(&self.config.name, &remote_names, |n| {
                registry
                    .get(n)
                    .is_some_and(|d| d.toolset.as_deref() != Some(toolset.as_str()))
            })
        };
        let by_remote: std::collections::HashMap<&str, &Tool> =
            admitted.iter().map(|t| (t.name.as_ref(), t)).collect();
        let defs: Vec<ToolDef> = assigned
            .iter()
            .filter_map(|(registered, remote)| {
                by_remote
                    .get(remote.as_str())
                    .map(|tool| self.tool_def(registered, tool, &toolset))
            })
            .collect();
        let count = defs.len();
        if !self.same_as_registered(&toolset, &defs) {
            self.registry.replace_toolset(&toolset, defs);
        }
        lock(&self.state).tool_count = count;
    }

    fn tool_def(&self, registered: &str, tool: &Tool, toolset: &str) -> ToolDef {
        let annotations = tool.annotations.as_ref();
        let read_only = annotations.and_then(|a| a.read_only_hint).unwrap_or(false);
        // MCP's defaults: a tool that is not read-only may destroy data unless it says otherwise.
        let destructive =
            !read_only && annotations.and_then(|a| a.destructive_hint).unwrap_or(true);
        let idempotent = read_only || annotations.and_then(|a| a.idempotent_hint).unwrap_or(false);
        let handler = McpToolHandler::new(
            self.me.clone(),
            self.config.name.clone(),
            tool.name.to_string(),
        );
        ToolDef {
            name: registered.to_string(),
            description: tool
                .description
                .as_ref()
                .map(|d| d.to_string())
                .or_else(|| tool.title.clone()),
            parameters: Some(Value::Object((*tool.input_schema).clone())),
            toolset: Some(toolset.to_string()),
            kind: ToolKind::Mcp,
            source_name: Some(self.config.name.clone()),
            vendor_slug: None,
            hints: ToolHints {
                read_only,
                destructive,
                idempotent,
                parallel_safe: self.config.supports_parallel_tool_calls,
                interactive: false,
                exclusive: false,
                resource_args: Vec::new(),
                path_args: Vec::new(),
                default_path: None,
                patch_paths: None,
            },
            handler: Some(Arc::new(handler)),
        }
    }

    fn same_as_registered(&self, toolset: &str, defs: &[ToolDef]) -> bool {
        let Ok(view) = self.registry.view(ViewSpec::toolsets([toolset])) else {
            return false;
        };
        view.len() == defs.len()
            && view.tools().iter().zip(defs).all(|(old, new)| {
                old.name == new.name
                    && old.description == new.description
                    && old.parameters == new.parameters
                    && old.hints == new.hints
            })
    }

    /// Lists the tools again and re-registers them (after `list_changed`, or on request).
    pub(crate) async fn refresh_tools(&self, peer: &Peer<RoleClient>) -> Result<usize, String> {
        let tools = match tokio::time::timeout(self.config.connect_timeout, peer.list_all_tools())
            .await
        {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => return Err(format!("could not list the server's tools: {e}")),
            Err(_) => {
                return Err("the server did not answer `tools/list` within connect_timeout".into());
            }
        };
        self.install_tools(tools);
        Ok(lock(&self.state).tool_count)
    }

    /// The live session's peer, reopening the session when it is gone. While the server is
    /// down and its backoff has not run out, fails at once with a message saying so.
    async fn peer(&self, cancel: &CancellationToken) -> Result<Peer<RoleClient>, String> {
        if let Some(peer) = self.live_peer() {
            return Ok(peer);
        }
        let _turn = tokio::select! {
            guard = self.reopening.lock() => guard,
            _ = cancel.cancelled() => return Err("the call was cancelled while the server was being reopened".into()),
        };
        // Someone else may have reopened it while we waited.
        if let Some(peer) = self.live_peer() {
            return Ok(peer);
        }
        {
            let state = lock(&self.state);
            match state.phase {
                Phase::Disabled => {
                    return Err(format!(
                        "the MCP server '{}' is disabled in the config (enabled: false)",
                        self.config.name
                    ));
                }
                Phase::Closed => {
                    return Err(format!(
                        "the MCP server '{}' has been shut down",
                        self.config.name
                    ));
                }
                _ => {}
            }
            if let Some(at) = state.retry_at {
                let now = Instant::now();
                if at > now {
                    return Err(format!(
                        "the MCP server '{}' is down ({}); troupe tries to reopen it in {:.1}s, on the next call after that",
                        self.config.name,
                        state.last_error.as_deref().unwrap_or("no reason known"),
                        (at - now).as_secs_f64()
                    ));
                }
            }
        }
        let tools = tokio::select! {
            opened = self.open_session() => opened,
            _ = cancel.cancelled() => return Err("the call was cancelled while the server was being reopened".into()),
        };
        match tools {
            Ok(tools) => {
                self.install_tools(tools);
                self.live_peer().ok_or_else(|| {
                    format!(
                        "the MCP server '{}' closed again right after it was reopened",
                        self.config.name
                    )
                })
            }
            Err(error) => Err(format!(
                "the MCP server '{}' is down and could not be reopened: {error}",
                self.config.name
            )),
        }
    }

    fn live_peer(&self) -> Option<Peer<RoleClient>> {
        let state = lock(&self.state);
        state
            .live
            .as_ref()
            .filter(|l| !l.peer.is_transport_closed())
            .map(|l| l.peer.clone())
    }

    /// Drops the backoff and opens a fresh session now (for `/reload`-style commands).
    pub(crate) async fn reconnect(&self) -> Result<usize, String> {
        let _turn = self.reopening.lock().await;
        self.end_session();
        lock(&self.state).retry_at = None;
        let tools = self.open_session().await?;
        self.install_tools(tools);
        Ok(lock(&self.state).tool_count)
    }

    /// Closes the live session, if any; its owner task kills what is left of the process.
    fn end_session(&self) {
        if let Some(live) = lock(&self.state).live.take() {
            live.ct.cancel();
        }
    }

    /// Runs the server's tool `tool`. `cancel` (a stop, or the caller giving up) and the
    /// per-call timeout drop the request, which makes rmcp send `notifications/cancelled`.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        cancel: CancellationToken,
    ) -> ToolResult {
        let peer = match self.peer(&cancel).await {
            Ok(peer) => peer,
            Err(error) => return ToolResult::error(error),
        };
        let request = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let limit = self.config.timeout;
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                return ToolResult::error(format!(
                    "The call to '{tool}' on MCP server '{}' was cancelled; the server was told to stop.",
                    self.config.name
                ));
            }
            outcome = tokio::time::timeout(limit, peer.call_tool_once(request)) => outcome,
        };
        match outcome {
            Err(_) => ToolResult::error(format!(
                "The call to '{tool}' on MCP server '{}' took longer than {:.1}s and was cancelled. Try smaller input, or raise `timeout` for this server.",
                self.config.name,
                limit.as_secs_f64()
            )),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                map_call_result(&self.config.name, tool, result)
            }
            Ok(Ok(CallToolResponse::InputRequired(_))) => ToolResult::error(format!(
                "The MCP server '{}' asked for more input before '{tool}' could finish; troupe cannot answer such requests yet. Call it with complete arguments.",
                self.config.name
            )),
            Ok(Ok(CallToolResponse::Task(_))) => ToolResult::error(format!(
                "The MCP server '{}' turned the call to '{tool}' into a background task; troupe does not follow MCP tasks yet.",
                self.config.name
            )),
            Ok(Ok(_)) => ToolResult::error(format!(
                "The MCP server '{}' gave an answer to '{tool}' that troupe does not understand.",
                self.config.name
            )),
            Ok(Err(error)) => self.call_failed(tool, error),
        }
    }

    fn call_failed(&self, tool: &str, error: ServiceError) -> ToolResult {
        match error {
            ServiceError::McpError(data) => ToolResult::error(format!(
                "The MCP server '{}' refused the call to '{tool}': {}",
                self.config.name, data.message
            )),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                {
                    let mut state = lock(&self.state);
                    state.live = None;
                    if state.phase != Phase::Closed {
                        state.phase = Phase::Failed;
                        state.last_error = Some("the connection closed during a call".into());
                    }
                }
                ToolResult::error(format!(
                    "The MCP server '{}' went away during the call to '{tool}' (its process exited or the connection dropped). The result is lost; troupe reopens the server on the next call.",
                    self.config.name
                ))
            }
            other => ToolResult::error(format!(
                "The call to '{tool}' on MCP server '{}' failed: {other}",
                self.config.name
            )),
        }
    }

    /// What `troupe mcp list` shows for this server.
    pub(crate) fn status(&self) -> ServerStatus {
        let state = lock(&self.state);
        let live = state
            .live
            .as_ref()
            .is_some_and(|l| !l.peer.is_transport_closed());
        let state_name = match state.phase {
            Phase::Disabled => ServerState::Disabled,
            Phase::Connected if live => ServerState::Connected,
            Phase::Closed => ServerState::Closed,
            _ => ServerState::Failed,
        };
        let last_error = match (state_name, &state.last_error) {
            (ServerState::Failed, None) => Some("the connection closed".to_string()),
            (_, error) => error.clone(),
        };
        ServerStatus {
            name: self.config.name.clone(),
            state: state_name,
            transport: self.config.transport.kind(),
            tool_count: state.tool_count,
            last_error,
            log_file: matches!(
                self.config.transport,
                super::config::McpTransport::Stdio { .. }
            )
            .then(|| self.log_path.clone()),
            pid: if live { state.pid } else { None },
        }
    }

    /// Ends every session, waits for them to close (bounded), kills what is left and takes the
    /// server's tools out of the registry.
    pub(crate) async fn shutdown(&self) {
        self.shutdown.cancel();
        let tasks: Vec<JoinHandle<()>> = lock(&self.tasks).drain(..).collect();
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(CLOSE_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        {
            let mut state = lock(&self.state);
            state.live = None;
            if state.phase != Phase::Disabled {
                state.phase = Phase::Closed;
            }
            state.tool_count = 0;
        }
        lock(&self.names).release(&self.config.name);
        let toolset = self.config.toolset();
        if self
            .registry
            .view(ViewSpec::toolsets([toolset.as_str()]))
            .is_ok_and(|v| !v.is_empty())
        {
            self.registry.replace_toolset(&toolset, Vec::new());
        }
    }

    /// Whether the config switched this server off.
    pub(crate) fn is_disabled(&self) -> bool {
        lock(&self.state).phase == Phase::Disabled
    }
}

/// Waits for tool-list notices of one session and re-registers the tools after each.
async fn refresh_on_notice(
    conn: Weak<ServerConn>,
    peer: Peer<RoleClient>,
    mut notices: mpsc::Receiver<()>,
    ct: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = ct.cancelled() => return,
            notice = notices.recv() => {
                if notice.is_none() {
                    return;
                }
            }
        }
        let Some(conn) = conn.upgrade() else { return };
        match conn.refresh_tools(&peer).await {
            Ok(count) => {
                tracing::info!(server = %conn.name(), tools = count, "MCP tool list refreshed")
            }
            Err(error) => {
                tracing::warn!(server = %conn.name(), %error, "MCP tool list refresh failed")
            }
        }
    }
}

fn backoff(failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    BACKOFF_BASE.saturating_mul(factor).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_stops_at_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(2));
        assert_eq!(backoff(40), BACKOFF_MAX);
    }
}
