//! Hosted connectors in a running troupe: the gateway configured in `tools.connectors`
//! attached to a registry, and the `manage_connections` tool built with what this process can
//! switch on (docs/connectors.md).

pub mod local_servers;

use std::sync::Arc;

use troupe_tools::connectors::Gateway;
use troupe_tools::connectors::manage::{Connections, LocalServers, manage_connections_def};
use troupe_tools::{Registry, ToolDef};

use crate::settings::Settings;

/// Attaches the gateway `config` declares to `registry` and returns it; `None` (and nothing
/// attached) when connectors are absent or disabled.
pub fn attach_gateway(config: &Settings, registry: &Registry) -> Option<Arc<Gateway>> {
    let settings = config.connectors.as_ref()?;
    let gateway = settings.gateway(&|name| std::env::var(name).ok());
    if gateway.token.is_none() {
        tracing::warn!(
            variable = %settings.token_env,
            "tools.connectors: the token variable is not set; the gateway will be asked without a token"
        );
    }
    let gateway = Arc::new(Gateway::new(gateway));
    registry.set_connectors(Some(Arc::clone(&gateway)));
    Some(gateway)
}

/// `manage_connections` over `gateway` and, when given, the local servers it may switch on.
pub fn manage_tool(gateway: Option<Arc<Gateway>>, local: Option<Arc<dyn LocalServers>>) -> ToolDef {
    manage_connections_def(Connections { gateway, local })
}
