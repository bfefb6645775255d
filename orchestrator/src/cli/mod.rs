//! The `troupe` command line: the clap tree and the dispatch to each subcommand's module.
//! Each subcommand lives in its own file and returns the process exit code.

pub mod demo;
pub mod tools;

use clap::{Parser, Subcommand};

/// troupe: an actor-based multi-agent orchestrator.
#[derive(Debug, Parser)]
#[command(name = "troupe", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Search, describe, call and assemble tools as a model would through the bridge.
    #[command(subcommand)]
    Tools(tools::ToolsCommand),
    /// Show tool search at work on the bundled 3,309-tool catalog.
    Demo(demo::DemoArgs),
}

/// Runs the parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Tools(command) => tools::run(command).await,
        Command::Demo(args) => demo::run(args).await,
    }
}
