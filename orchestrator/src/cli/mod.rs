//! The `troupe` command line: the clap tree and the dispatch to each subcommand's module.
//! Each subcommand lives in its own file and returns the process exit code.

pub(crate) mod chat;
pub(crate) mod config;
mod cron;
pub(crate) mod demo;
pub(crate) mod error;
pub(crate) mod kanban;
mod kanban_demo;
mod kanban_render;
pub(crate) mod mcp;
pub(crate) mod memory;
pub(crate) mod plugins;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod tools;
mod visible;

use clap::{Parser, Subcommand};

/// troupe: an actor-based multi-agent orchestrator.
#[derive(Debug, Parser)]
#[command(name = "troupe", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Talk with a session that has the built-in tools (a real model or a script); `-q` asks
    /// one question and exits.
    Chat(chat::ChatArgs),
    /// Search, describe, call and assemble tools as a model would through the bridge.
    #[command(subcommand)]
    Tools(tools::ToolsCommand),
    /// troupe's main job: a fan-out on a kanban board (`--tool-search`: the tool-search tour).
    Demo(demo::DemoArgs),
    /// List the configured MCP servers and their tools.
    Mcp(mcp::McpArgs),
    /// Boards of tasks that worker agents run: create, link, dispatch, watch.
    Kanban(kanban::KanbanArgs),
    /// Scheduled jobs that make board work by themselves: list, create, pause, run, history.
    Cron(cron::CronArgs),
    /// Serve the HTTP API (sessions, approvals, boards, event feed) with a bearer token.
    Serve(serve::ServeArgs),
    /// Plugins: list what was found, show one, enable or disable one in troupe.yaml.
    Plugins(plugins::PluginsArgs),
    /// Stored sessions: list, show (with subagents), search, remove, prune.
    Sessions(sessions::SessionsArgs),
    /// What the memory tool saved for a profile: show, edit, clear.
    Memory(memory::MemoryArgs),
    /// troupe.yaml itself: accept a change a session made (`trust`).
    #[command(subcommand)]
    Config(config::ConfigCommand),
}

impl Cli {
    /// Where logs go instead of stderr: a conversation on a terminal owns the screen, so its
    /// warnings go to `$TROUPE_HOME/logs/chat.log`.
    pub(crate) fn log_file(&self) -> Option<std::path::PathBuf> {
        use std::io::IsTerminal;
        match &self.command {
            Command::Chat(args) if args.query.is_none() && std::io::stdin().is_terminal() => Some(
                crate::settings::TroupeHome::from_env()
                    .path()
                    .to_path_buf()
                    .join("logs")
                    .join("chat.log"),
            ),
            _ => None,
        }
    }
}

/// Runs the parsed command line; returns the process exit code.
pub(crate) async fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Chat(args) => chat::run(args).await,
        Command::Tools(command) => tools::run(command).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Kanban(args) => kanban::run(args).await,
        Command::Cron(args) => cron::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Plugins(args) => plugins::run(args).await,
        Command::Sessions(args) => sessions::run(args).await,
        Command::Memory(args) => memory::run(args).await,
        Command::Config(command) => config::run(command),
    }
}
