//! The [`ToolHandler`] behind every registered MCP tool: it hands the call to its server's
//! connection, which owns timeouts, cancellation and reconnection. It holds the connection
//! weakly, so tools left in a registry never keep a shut-down server alive.

use std::sync::Weak;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::connection::ServerConn;
use crate::tool::{CallContext, ToolHandler, ToolResult};

/// Calls one tool of one MCP server.
pub(crate) struct McpToolHandler {
    conn: Weak<ServerConn>,
    /// For the message when the server is gone.
    server: String,
    /// The tool's name as the server knows it (not the registered `mcp_...` name).
    tool: String,
}

impl McpToolHandler {
    pub(crate) fn new(conn: Weak<ServerConn>, server: String, tool: String) -> Self {
        McpToolHandler { conn, server, tool }
    }
}

impl ToolHandler for McpToolHandler {
    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        let Some(conn) = self.conn.upgrade() else {
            let message = format!(
                "The MCP server '{}' has been shut down, so '{}' cannot run. Restart troupe or reload its MCP servers.",
                self.server, self.tool
            );
            return Box::pin(std::future::ready(ToolResult::error(message)));
        };
        let tool = self.tool.clone();
        Box::pin(async move { conn.call(&tool, arguments, ctx.cancel).await })
    }
}
