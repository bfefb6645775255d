//! What several test modules share: a `troupe serve` process and the workspace it runs in, the
//! plugin tests' world of folders, a headless browser, the MCP test servers' whereabouts and
//! the opt-in local model.

pub(crate) mod browser;
pub(crate) mod gateway;
pub(crate) mod local_model;
pub(crate) mod mcp_servers;
pub(crate) mod plugin_world;
pub(crate) mod serve;
pub(crate) mod terminal;
