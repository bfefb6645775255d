//! What `troupe mcp list` reports per server: [`ServerStatus`] with its [`ServerState`],
//! transport, tool count and last error. Produced by the connections, read by the CLI and by
//! anything that shows operators the health of their MCP servers.

use std::fmt;
use std::path::PathBuf;

/// Where a server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerState {
    /// A session is open and its tools are registered.
    Connected,
    /// It could not be started, or its session ended; `last_error` says why. Its tools stay
    /// registered (if it ever listed them) and the next call tries to reopen it.
    Failed,
    /// `enabled: false` in the config, or the entry itself is broken and never started.
    Disabled,
    /// Shut down by troupe.
    Closed,
}

impl ServerState {
    /// The token status lines print: `connected`, `failed`, `disabled` or `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Connected => "connected",
            ServerState::Failed => "failed",
            ServerState::Disabled => "disabled",
            ServerState::Closed => "closed",
        }
    }
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One server's health, as of the moment it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The server's key under `mcp_servers`.
    pub name: String,
    /// Where it stands.
    pub state: ServerState,
    /// `stdio` or `http` (`unknown` for an entry too broken to tell).
    pub transport: &'static str,
    /// How many of its tools are registered.
    pub tool_count: usize,
    /// The latest failure, in words an operator can act on.
    pub last_error: Option<String>,
    /// Where a stdio server's stderr goes.
    pub log_file: Option<PathBuf>,
    /// The stdio server's process id while it is connected.
    pub pid: Option<u32>,
}

impl ServerStatus {
    /// The status of a config entry that could not be used.
    pub fn broken_entry(name: impl Into<String>, error: impl Into<String>) -> Self {
        ServerStatus {
            name: name.into(),
            state: ServerState::Failed,
            transport: "unknown",
            tool_count: 0,
            last_error: Some(error.into()),
            log_file: None,
            pid: None,
        }
    }
}
