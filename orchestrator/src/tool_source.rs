//! [`ToolSource`]: a source of extra tools started with the runtime, such as a plugin's MCP
//! server or a program's own tool server.

use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_tools::Registry;

/// A source of extra tools started with the runtime (a plugin, a program's own tool server).
/// It registers its tools in the runtime's registry under toolsets of its own, which profiles
/// and sessions may then name; [`ToolSource::stop`] runs when the runtime closes.
pub trait ToolSource: Send + Sync + 'static {
    /// A short name for messages (`plugin github-helper`).
    fn name(&self) -> String;

    /// Registers the tools into `registry`; returns the toolsets it provides. An error leaves
    /// the source out (reported as a [`crate::StartupNotice`]); the runtime starts without it.
    fn start(&self, registry: Arc<Registry>) -> BoxFuture<'static, Result<Vec<String>, String>>;

    /// Stops whatever [`ToolSource::start`] started.
    fn stop(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}
