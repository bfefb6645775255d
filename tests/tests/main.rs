//! Cross-crate tests, one module per area.

mod mcp;
