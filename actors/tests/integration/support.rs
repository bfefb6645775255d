//! Helpers the parts of the integration binary share.

use tokio::sync::mpsc::UnboundedReceiver;
use troupe_actors::events::SessionEvent;

/// Every event received so far, without waiting for more.
pub(crate) fn drain_events(rx: &mut UnboundedReceiver<SessionEvent>) -> Vec<SessionEvent> {
    let mut out = Vec::new();
    while let Ok(event) = rx.try_recv() {
        out.push(event);
    }
    out
}
