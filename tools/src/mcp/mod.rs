//! MCP servers as tool sources, through rmcp. Each server configured under `mcp_servers`
//! (a stdio child process or a streamable-HTTP endpoint) is opened at start-up, in parallel;
//! its tools are registered as `mcp_<server>_<tool>` in toolset `mcp-<server>` and called over
//! one shared connection per server.
//!
//! # Layout
//! - [`config`]: the `mcp_servers` section, checked per server ([`McpServers`]).
//! - [`names`]: registered names, sanitised, cut to 64 characters, collisions numbered.
//! - `client`: opening a session (process group, stderr log, HTTP headers, handshake timeout).
//! - `connection`: one server's session, tools, calls, reconnection and list refreshes.
//! - `tool_handler`, `result`: the handler behind each tool and the mapping of its results.
//! - [`manager`]: [`McpManager`], which starts, reports on and shuts down all servers.
//! - [`status`]: [`ServerStatus`], what `troupe mcp list` prints.
//!
//! rmcp's API changes quickly; nothing outside this module names an rmcp type.

mod client;
pub mod config;
mod connection;
pub mod manager;
pub mod names;
mod result;
pub mod starting;
pub mod status;
mod tool_handler;

pub use config::{McpConfigError, McpServerConfig, McpServers, McpTransport, ToolFilter};
pub use manager::{McpError, McpManager, McpOptions};
pub use status::{ServerState, ServerStatus};
