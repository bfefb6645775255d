//! troupe: an actor-based multi-agent orchestrator.
//!
//! Every session, subagent and kanban worker is an actor holding a scoped view of the tools it
//! may see and call. This crate is troupe's face: the programmatic API, `troupe.yaml`, and the
//! `troupe` command line. It re-exports what users need from the layers below, so programs and
//! examples import only `troupe::...`.
//!
//! # Layout
//! - [`api`]: [`Troupe`], the programmatic API (sessions, events, approvals, stop, close).
//! - [`settings`]: troupe.yaml, read once into typed sections ([`settings::Settings`]); the
//!   one model/provider resolution, the key readers and the one error shape.
//! - [`runtime`]: [`Runtime`], one running runtime assembled from [`settings::Settings`],
//!   behind every entry point; the terminal backend and task workspaces.
//! - [`config_seal`]: the watch over troupe.yaml and the hooks' scripts.
//! - [`connectors`]: the connector gateway of `tools.connectors` and `manage_connections`.
//! - [`delegation`]: turning `delegate_task` on with the `delegation:` limits.
//! - [`sessions`]: durable sessions (SQLite or PostgreSQL) and `session_search`.
//! - [`observability`]: traces over OTLP (`observability:`, the Langfuse plugin).
//! - [`tool_source`]: [`ToolSource`], extra tools started with a runtime (plugins, programs).
//! - [`tool_fn`]: tools from typed async functions and closures, schema derived.
//! - [`kanban_api`]: [`Kanban`](kanban_api::Kanban), the Rust API for boards, tasks and events.
//! - [`plugins`]: plugins (bundled, user, project), hook commands, plugin toolsets, slash
//!   commands, and the bundled disk-cleanup plugin.
//! - [`http`]: the HTTP API behind `troupe serve` (sessions, approvals, boards, event feed,
//!   dashboard).
//! - Private to the crate: `cli` (the `troupe` command line, run by [`run_command_line`]),
//!   `catalog` (the bundled demo catalog and catalog files), `kanban_demo_model` (the
//!   fan-out plan of `troupe demo` and its offline model) and `mcp_server` (`troupe mcp
//!   serve`: the runtime's tools offered to MCP clients over stdio or streamable HTTP).
//! - Re-exports: [`tools`] (`troupe-tools`: tool model, views, tool search, bridge), [`actors`]
//!   (`troupe-actors`), [`kanban`] (`troupe-kanban`) and [`schemars`].

pub mod api;
mod catalog;
#[allow(clippy::print_stdout, reason = "the command line prints its results")]
mod cli;
pub mod config_seal;
pub mod connectors;
pub mod delegation;
pub mod http;
pub mod kanban_api;
mod kanban_demo_model;
mod mcp_server;
pub mod observability;
pub mod plugins;
pub mod runtime;
pub mod schedules;
pub mod sessions;
pub mod settings;
pub mod tool_fn;
pub mod tool_source;

/// Derives the JSON Schemas of typed tool arguments ([`tool_fn`]).
pub use schemars;
/// Boards, tasks, dispatchers and workers.
pub use troupe_kanban as kanban;
pub use troupe_tools as tools;

pub use api::{SessionOptions, SessionProfile, Troupe, TroupeConfig, TroupeError};
pub use runtime::{Runtime, RuntimeError, RuntimeOptions, StartupNotice};
pub use tool_source::ToolSource;
/// The actor runtime: sessions, events, hooks, the supervisor, model providers.
pub use troupe_actors as actors;

/// Runs the `troupe` command line on this process's arguments, with logging set up from
/// `TROUPE_LOG`; returns the exit code. The `troupe` binary is this and an async runtime.
pub async fn run_command_line() -> i32 {
    use clap::Parser;
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let log_file = cli.log_file().and_then(|path| {
        std::fs::create_dir_all(path.parent()?).ok()?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    match log_file {
        Some(file) => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init(),
        None => tracing_subscriber::fmt()
            .with_env_filter(filter)
            // Colour codes only for a person's terminal: a file or a pipe gets plain text.
            .with_ansi(cli::colour_on_stderr())
            .with_writer(std::io::stderr)
            .init(),
    }
    cli::quiet_on_closed_output();
    // troupe holds API keys in its environment and memory: programs it runs (and anything else
    // of the same user) must not read them through /proc or ptrace.
    if let Err(err) = troupe_tools::builtin::privileges::make_non_dumpable() {
        tracing::warn!(%err, "could not make troupe's process non-dumpable");
    }
    cli::run(cli).await
}
