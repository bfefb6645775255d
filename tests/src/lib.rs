//! Cross-crate tests.

pub mod mcp_servers;
