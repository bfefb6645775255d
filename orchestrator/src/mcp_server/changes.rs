//! `notifications/tools/list_changed` for one client: sent when the registry's catalog changes
//! (an MCP server that started late joined, one restarted and brought other tools, a plugin's
//! tools arrived), so the client lists again and sees the new `tool_search` listing or direct
//! tools. The registry counts its changes; a short poll reads the count, and a burst of
//! changes (a server registering its tools one by one) becomes one notification.

use std::sync::Arc;
use std::time::Duration;

use rmcp::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;
use troupe_tools::Registry;

/// How often the registry's change count is read.
const POLL: Duration = Duration::from_millis(200);

/// Sends `list_changed` to `peer` after each settled change of `registry`, until `closed`
/// fires or the client is gone.
pub(super) async fn watch(
    registry: Arc<Registry>,
    peer: Peer<RoleServer>,
    closed: CancellationToken,
) {
    let mut seen = registry.version();
    loop {
        tokio::select! {
            _ = closed.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
        let now = registry.version();
        if now == seen {
            continue;
        }
        // Let a burst settle: wait until one poll passes with no further change.
        let mut settled = now;
        loop {
            tokio::select! {
                _ = closed.cancelled() => return,
                _ = tokio::time::sleep(POLL) => {}
            }
            let later = registry.version();
            if later == settled {
                break;
            }
            settled = later;
        }
        seen = settled;
        if let Err(error) = peer.notify_tool_list_changed().await {
            tracing::debug!(%error, "mcp serve: the client is gone; no more list_changed");
            return;
        }
    }
}
