//! A plugin's toolset: the MCP server its manifest names, started with the runtime as a
//! [`ToolSource`]. Its tools join the registry in the toolset named after the plugin (the
//! plugin is their `source_name`), so they hide behind the search bridge and go into views
//! like any MCP toolset; the server stops when the runtime closes.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::Mutex;
use troupe_tools::Registry;
use troupe_tools::builtin::sandbox_env::ChildSecrets;
use troupe_tools::mcp::{McpManager, McpOptions, McpServerConfig, McpServers, ServerState};

use crate::tool_source::ToolSource;

/// One plugin's MCP server as a tool source.
pub struct PluginToolset {
    server: McpServerConfig,
    /// troupe's keys, withheld from the server.
    secrets: ChildSecrets,
    manager: Arc<Mutex<Option<McpManager>>>,
}

impl PluginToolset {
    /// The source for `server` (whose toolset is the plugin's name), run without `secrets`.
    pub fn new(server: McpServerConfig, secrets: ChildSecrets) -> PluginToolset {
        PluginToolset {
            server,
            secrets,
            manager: Arc::new(Mutex::new(None)),
        }
    }
}

impl ToolSource for PluginToolset {
    fn name(&self) -> String {
        format!("plugin '{}' (MCP server)", self.server.name)
    }

    fn start(&self, registry: Arc<Registry>) -> BoxFuture<'static, Result<Vec<String>, String>> {
        let server = self.server.clone();
        let options = McpOptions::default().with_secrets(self.secrets.clone());
        let slot = Arc::clone(&self.manager);
        Box::pin(async move {
            let toolset = server.toolset();
            if registry.toolsets().contains(&toolset) {
                return Err(format!(
                    "the toolset '{toolset}' already exists (an mcp_servers entry or another source); the plugin's server was not started"
                ));
            }
            let servers = McpServers {
                servers: vec![server],
                ..McpServers::default()
            };
            let (manager, statuses) = McpManager::start_with(&servers, registry, options).await;
            let failed = statuses
                .iter()
                .find(|s| s.state != ServerState::Connected)
                .map(|s| {
                    s.last_error
                        .clone()
                        .unwrap_or_else(|| "it did not connect".into())
                });
            if let Some(reason) = failed {
                manager.shutdown().await;
                return Err(reason);
            }
            *slot.lock().await = Some(manager);
            Ok(vec![toolset])
        })
    }

    fn stop(&self) -> BoxFuture<'static, ()> {
        let slot = Arc::clone(&self.manager);
        Box::pin(async move {
            if let Some(manager) = slot.lock().await.take() {
                manager.shutdown().await;
            }
        })
    }
}
