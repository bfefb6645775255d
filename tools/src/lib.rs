//! troupe-tools: what troupe can call.
//!
//! Every tool is a [`ToolDef`] in a [`Registry`]. Nobody calls through the registry: sessions,
//! subagents and kanban workers each hold a [`ToolsetView`], an immutable scoped window that is
//! the only way to see, search, describe and call tools. Tools outside a view do not exist for
//! its holder.
//!
//! When MCP or plugin tools are attached, the model sees three bridge tools instead of every
//! schema: `tool_search` (BM25 over the deferred tools), `tool_describe` and `tool_call`. They
//! are plain functions over a view in [`bridge`]; the index behind them lives in [`search`] and
//! is built once per catalog version.
//!
//! # Layout
//! - [`tool`]: `ToolDef`, `ToolHandler`, `ToolResult`.
//! - [`registry`] and [`view`]: the registry, its toolsets, and scoped views.
//! - [`config`]: the `tools.tool_search` settings.
//! - [`deferral`]: which tools hide behind the bridge.
//! - [`search`]: tokenizer, BM25 catalog, listing and tool-list assembly.
//! - [`bridge`]: `tool_search`, `tool_describe`, `tool_call`.
//! - [`connectors`]: hosted connector tools behind a tool gateway.
//! - [`builtin`]: terminal, background processes, file tools, execute_code.
//! - [`memory`]: the `memory` tool's stores; [`todo`](mod@todo): the `todo` tool's list;
//!   [`clarify`]: the `clarify` tool's question.
//! - [`catalog_file`]: catalogs of tool definitions read from JSON.
//! - [`home`]: troupe's home directory ([`TroupeHome`]), resolved once and passed down.
//! - [`input_limits`]: size and nesting limits checked before a configuration file is parsed.
//! - `test_support` (feature `test-support`): helpers for the tests of every crate.

pub mod bridge;
pub mod builtin;
pub mod catalog_file;
pub mod clarify;
pub mod config;
pub mod connectors;
pub mod deferral;
mod error;
pub mod home;
pub mod input_limits;
pub mod lean;
pub mod lenient;
pub mod mcp;
pub mod memory;
pub mod registry;
pub mod search;
pub mod sync;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod text;
pub mod todo;
pub mod tool;
pub mod view;

pub use config::{DeferSet, Ranking, Switch, ToolSearchConfig};
pub use error::ToolsError;
pub use home::TroupeHome;
pub use registry::Registry;
pub use tool::{
    AskSecret, CallContext, Content, Dispatch, FnHandler, PatchPaths, ToolDef, ToolHandler,
    ToolHints, ToolKind, ToolResult,
};
pub use view::{ToolsetView, ViewSpec};
