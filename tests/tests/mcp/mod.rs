//! MCP servers as tool sources: real servers nobody on this project wrote (npm and PyPI, over
//! stdio and streamable HTTP), our own fault server, and the search bridge end to end.
//! Shared helpers live here; each file holds one area.

// Test helpers fail the test on a broken precondition; an unwrap says exactly where.
#![allow(clippy::unwrap_used, reason = "test code")]

mod bridge_end_to_end;
mod faults;
mod real_servers;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use troupe::tools::mcp::{McpManager, McpOptions, McpServerConfig, McpServers, ServerStatus};
use troupe::tools::{CallContext, Registry, ToolResult, ToolsetView};

/// A started manager with its registry, for one test.
struct Started {
    manager: McpManager,
    statuses: Vec<ServerStatus>,
    registry: Arc<Registry>,
}

impl Started {
    fn view(&self) -> ToolsetView {
        self.registry.view_all()
    }

    fn status(&self, name: &str) -> ServerStatus {
        self.manager.status(name).unwrap()
    }
}

async fn start(servers: Vec<McpServerConfig>, logs: &Path) -> Started {
    let config = McpServers {
        servers,
        ..McpServers::default()
    };
    start_config(&config, logs).await
}

async fn start_config(config: &McpServers, logs: &Path) -> Started {
    let registry = Registry::new();
    let (manager, statuses) = McpManager::start_with(
        config,
        registry.clone(),
        McpOptions::default().with_log_dir(logs),
    )
    .await;
    Started {
        manager,
        statuses,
        registry,
    }
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

async fn call(view: &ToolsetView, name: &str, arguments: Value) -> ToolResult {
    view.call(name, args(arguments), CallContext::detached("test"))
        .await
}

/// Polls `check` until it holds or 30 s pass; returns whether it held. Not a timing assertion:
/// the deadline only keeps a broken test from hanging.
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// The fault server (tests/src/bin/fault_server.rs) with markers in `state`.
fn fault_server(name: &str, state: &Path, extra: &[&str]) -> McpServerConfig {
    let mut args = vec![
        "--state-dir".to_string(),
        state.to_string_lossy().into_owned(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    McpServerConfig::stdio(name, env!("CARGO_BIN_EXE_fault_server"), args)
}
