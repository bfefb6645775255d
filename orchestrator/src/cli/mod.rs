//! The `troupe` command line: the clap tree and the dispatch to each subcommand's module.
//! Each subcommand lives in its own file and returns the process exit code.

pub(crate) mod chat;
pub(crate) mod config;
mod config_check;
mod cron;
pub(crate) mod demo;
mod doctor;
pub(crate) mod error;
pub(crate) mod kanban;
mod kanban_demo;
mod kanban_render;
pub(crate) mod mcp;
pub(crate) mod memory;
mod phrasings;
pub(crate) mod plugins;
mod prompt;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod status_line;
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
    /// troupe.yaml itself: list every problem of it (`check`), accept a change a session made
    /// (`trust`).
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Whether what troupe.yaml names works here: the model server, MCP servers, stores,
    /// the terminal backend, Landlock and bubblewrap, disk (`--json` for a program).
    Doctor(doctor::DoctorArgs),
    /// What a session sends the model before the conversation (system prompt and tool
    /// schemas); `--stats` counts it in tokens, full and lean.
    Prompt(prompt::PromptArgs),
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
        Command::Doctor(args) => doctor::run(args).await,
        Command::Prompt(args) => prompt::run(args).await,
    }
}

/// Whether stderr is a person's terminal that takes colour (not a file, a pipe, `TERM=dumb`
/// or `NO_COLOR`).
pub(crate) fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A reader that closed the output early (`troupe sessions list | head -1`) has all it wanted:
/// the print that found the pipe closed ends the process with code 0 instead of a panic and a
/// backtrace. Every other panic goes to the hook that was there.
pub(crate) fn quiet_on_closed_output() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_closed_output(message) {
            std::process::exit(error::EXIT_DONE);
        }
        previous(info);
    }));
}

/// Whether a panic's message is the standard library's for a print to a closed pipe.
fn is_closed_output(message: &str) -> bool {
    (message.starts_with("failed printing to stdout")
        || message.starts_with("failed printing to stderr"))
        && message.contains("Broken pipe")
}

#[cfg(test)]
mod tests {
    use super::is_closed_output;

    #[test]
    fn only_a_print_to_a_closed_pipe_is_quiet() {
        assert!(is_closed_output(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(is_closed_output(
            "failed printing to stderr: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_output(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_closed_output("index out of bounds: Broken pipe"));
    }
}
