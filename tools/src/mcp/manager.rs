//! [`McpManager`]: starts every configured MCP server into a shared [`Registry`] (all at once,
//! each bounded by its `connect_timeout`), reports their health, reconnects one on request and
//! shuts them all down. The CLI (`troupe mcp`, `troupe tools --config`) and the orchestrator
//! hold one per process.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::config::McpServers;
use super::connection::ServerConn;
use super::names::NameBook;
use super::status::ServerStatus;
use crate::builtin::sandbox_env::ChildSecrets;
use crate::home::TroupeHome;
use crate::registry::Registry;
use crate::tool::ToolDef;
use crate::view::ViewSpec;

/// Settings of the manager itself (not of any one server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpOptions {
    /// Folder for the per-server stderr logs (`<name>.log`).
    pub log_dir: PathBuf,
    /// troupe's keys: no stdio server gets them, whatever its `env_passthrough` says.
    pub secrets: ChildSecrets,
}

impl Default for McpOptions {
    /// [`McpOptions::in_home`] of this process's home ([`TroupeHome::from_env`]).
    fn default() -> Self {
        McpOptions::in_home(&TroupeHome::from_env())
    }
}

impl McpOptions {
    /// The defaults for troupe's home `home`: the server logs in its `logs/mcp`, unless
    /// `$TROUPE_MCP_LOG_DIR` names another folder (tests and packagers move the logs alone).
    /// The folder and the logs are the owner's only.
    pub fn in_home(home: &TroupeHome) -> Self {
        let log_dir = std::env::var_os("TROUPE_MCP_LOG_DIR")
            .filter(|dir| !dir.is_empty())
            .map_or_else(|| home.mcp_logs(), PathBuf::from);
        McpOptions {
            log_dir,
            secrets: ChildSecrets::default(),
        }
    }

    /// Puts the server logs in `dir`.
    pub fn with_log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = dir.into();
        self
    }

    /// Withholds `secrets` from every stdio server.
    pub fn with_secrets(mut self, secrets: ChildSecrets) -> Self {
        self.secrets = secrets;
        self
    }
}

/// A failure of a manager operation on one server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// No server of that name is configured (or its entry was broken).
    #[error("no MCP server called '{name}' is configured; the configured ones are: {known}")]
    UnknownServer {
        /// The name asked for.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
    /// The server could not be reached.
    #[error("MCP server '{server}' is unavailable: {reason}")]
    Unavailable {
        /// The server.
        server: String,
        /// Why, in operator terms.
        reason: String,
    },
}

/// Every configured MCP server of a process, and their tools in one registry.
pub struct McpManager {
    registry: Arc<Registry>,
    servers: Vec<Arc<ServerConn>>,
    /// Entries of the config that could not be used, reported as failed.
    broken: Vec<ServerStatus>,
    /// Parent of every server's shutdown token.
    root: CancellationToken,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field(
                "servers",
                &self.servers.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field("broken", &self.broken.len())
            .finish()
    }
}

impl McpManager {
    /// Starts every enabled server of `config` in parallel, registers their tools in
    /// `registry` (toolset `mcp-<server>`), and returns the manager with each server's status.
    /// A server that fails is reported and left out; it never stops the others.
    pub async fn start(
        config: &McpServers,
        registry: Arc<Registry>,
    ) -> (McpManager, Vec<ServerStatus>) {
        McpManager::start_with(config, registry, McpOptions::default()).await
    }

    /// [`McpManager::start`] with manager settings (where the logs go).
    pub async fn start_with(
        config: &McpServers,
        registry: Arc<Registry>,
        options: McpOptions,
    ) -> (McpManager, Vec<ServerStatus>) {
        let root = CancellationToken::new();
        let names = Arc::new(Mutex::new(NameBook::new()));
        let servers: Vec<Arc<ServerConn>> = config
            .servers
            .iter()
            .map(|server| {
                ServerConn::new(
                    server.clone(),
                    Arc::clone(&registry),
                    Arc::clone(&names),
                    options.log_dir.join(log_file_name(&server.name)),
                    options.secrets.clone(),
                    root.child_token(),
                )
            })
            .collect();
        let opened = futures::future::join_all(servers.iter().map(|conn| {
            let conn = Arc::clone(conn);
            async move {
                if conn.is_disabled() {
                    return None;
                }
                let _starting = super::starting::mark(conn.name());
                conn.open_session().await.ok()
            }
        }))
        .await;
        // Register in name order, so that which tool keeps a contested name never depends on
        // which server answered first.
        let mut ready: Vec<(&Arc<ServerConn>, Vec<rmcp::model::Tool>)> = servers
            .iter()
            .zip(opened)
            .filter_map(|(conn, tools)| tools.map(|t| (conn, t)))
            .collect();
        ready.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        for (conn, tools) in ready {
            conn.install_tools(tools);
        }
        let broken = config
            .errors
            .iter()
            .map(|e| ServerStatus::broken_entry(e.server.clone(), e.to_string()))
            .collect();
        let manager = McpManager {
            registry,
            servers,
            broken,
            root,
        };
        let statuses = manager.statuses();
        (manager, statuses)
    }

    /// Starts every enabled server of `config` in the background and returns at once, so no
    /// turn waits for a slow or hung server: each server's tools are registered in `registry`
    /// as soon as it is ready, and until then the registry lists it as starting (the bridge's
    /// `tool_search` says so). Shutting down (or dropping) the manager mid-start kills the
    /// servers still starting, process group and all.
    pub fn start_in_background(
        config: &McpServers,
        registry: Arc<Registry>,
        options: McpOptions,
    ) -> McpManager {
        let root = CancellationToken::new();
        let names = Arc::new(Mutex::new(NameBook::new()));
        let servers: Vec<Arc<ServerConn>> = config
            .servers
            .iter()
            .map(|server| {
                ServerConn::new(
                    server.clone(),
                    Arc::clone(&registry),
                    Arc::clone(&names),
                    options.log_dir.join(log_file_name(&server.name)),
                    options.secrets.clone(),
                    root.child_token(),
                )
            })
            .collect();
        for conn in servers.iter().filter(|c| !c.is_disabled()) {
            let source = format!("mcp-{}", conn.name());
            registry.set_starting(&source, true);
            let conn = Arc::clone(conn);
            let registry = Arc::clone(&registry);
            let stop = root.child_token();
            tokio::spawn(async move {
                let _starting = super::starting::mark(conn.name());
                // Dropping the start (on shutdown) kills the half-started server.
                tokio::select! {
                    opened = conn.open_session() => {
                        if let Ok(tools) = opened {
                            conn.install_tools(tools);
                        }
                    }
                    () = stop.cancelled() => {}
                }
                registry.set_starting(&source, false);
            });
        }
        let broken = config
            .errors
            .iter()
            .map(|e| ServerStatus::broken_entry(e.server.clone(), e.to_string()))
            .collect();
        McpManager {
            registry,
            servers,
            broken,
            root,
        }
    }

    /// The servers whose start has not finished yet.
    pub fn starting(&self) -> Vec<String> {
        let starting = self.registry.starting();
        self.servers
            .iter()
            .filter(|s| starting.contains(&format!("mcp-{}", s.name())))
            .map(|s| s.name().to_string())
            .collect()
    }

    /// Waits until no server is starting any more, or `limit` passes; true when all are done.
    pub async fn wait_started(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.starting().is_empty() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Every server's status: configured servers in config order, then broken entries.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers
            .iter()
            .map(|s| s.status())
            .chain(self.broken.iter().cloned())
            .collect()
    }

    /// One server's status.
    pub fn status(&self, server: &str) -> Option<ServerStatus> {
        self.statuses().into_iter().find(|s| s.name == server)
    }

    /// The registry the tools live in.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The registered tools of `server`, in registry order.
    pub fn tools(&self, server: &str) -> Result<Vec<Arc<ToolDef>>, McpError> {
        let conn = self.find(server)?;
        let view = self
            .registry
            .view(ViewSpec::toolsets([conn.config.toolset()]))
            .map_err(|e| McpError::Unavailable {
                server: server.to_string(),
                reason: e.to_string(),
            })?;
        Ok(view.tools().to_vec())
    }

    /// Closes `server`'s session and opens a new one now, ignoring any backoff; re-registers
    /// its tools and returns how many there are.
    pub async fn reconnect(&self, server: &str) -> Result<usize, McpError> {
        let conn = self.find(server)?;
        if conn.is_disabled() {
            return Err(McpError::Unavailable {
                server: server.to_string(),
                reason: "it is disabled in the config (enabled: false)".into(),
            });
        }
        conn.reconnect()
            .await
            .map_err(|reason| McpError::Unavailable {
                server: server.to_string(),
                reason,
            })
    }

    fn find(&self, server: &str) -> Result<&Arc<ServerConn>, McpError> {
        self.servers
            .iter()
            .find(|s| s.name() == server)
            .ok_or_else(|| McpError::UnknownServer {
                name: server.to_string(),
                known: self
                    .servers
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Closes every session (each server gets a few seconds to exit, then its process group is
    /// killed) and takes the servers' tools out of the registry.
    pub async fn shutdown(self) {
        self.root.cancel();
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}

impl Drop for McpManager {
    fn drop(&mut self) {
        // Without shutdown(): sessions still end, asynchronously, as long as the runtime runs.
        self.root.cancel();
    }
}

fn log_file_name(server: &str) -> String {
    let safe: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}.log", safe.trim_start_matches('.'))
}
