//! `troupe mcp list` and `troupe mcp tools <server>`: start the MCP servers configured under
//! `mcp_servers` in the config file, then print each server's health or one server's tools.
//! Also [`start_configured`], which the other commands use to put the live MCP tools of a
//! config into a registry.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use troupe_tools::Registry;
use troupe_tools::mcp::{McpManager, McpServers, ServerStatus};

use super::error::{CliError, EXIT_DONE, report};
use super::visible::visible_line;
use crate::settings::Settings;

/// `troupe mcp`: the MCP servers of a config.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// What to show.
    #[command(subcommand)]
    pub(crate) command: McpCommand,
}

/// The `troupe mcp` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Start every configured server and print its status, transport, tool count and last error.
    List(ListArgs),
    /// Start one server and print the tools it registers.
    Tools(ToolsArgs),
}

/// Arguments of `troupe mcp list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// troupe's config file (YAML or JSON) with an `mcp_servers` section.
    #[arg(long, value_name = "FILE", default_value = "troupe.yaml")]
    pub(crate) config: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `troupe mcp tools`.
#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// The server's key under `mcp_servers`.
    pub(crate) server: String,
    /// troupe's config file (YAML or JSON) with an `mcp_servers` section.
    #[arg(long, value_name = "FILE", default_value = "troupe.yaml")]
    pub(crate) config: PathBuf,
    /// Print JSON (names, descriptions, schemas, hints) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Starts every MCP server of `config` into `registry`; returns the manager (call
/// `shutdown().await` on it before exiting) and each server's status.
pub(crate) async fn start_configured(
    config: &Settings,
    registry: Arc<Registry>,
) -> (McpManager, Vec<ServerStatus>) {
    McpManager::start_with(&config.mcp_server_list(), registry, mcp_options(config)).await
}

/// The manager settings for `config`'s servers: troupe's keys withheld from them.
fn mcp_options(config: &Settings) -> troupe_tools::mcp::McpOptions {
    troupe_tools::mcp::McpOptions::in_home(&config.home)
        .with_secrets(crate::settings::secrets::child_secrets(config))
}

/// Runs one `troupe mcp` command; returns the exit code.
pub(crate) async fn run(args: McpArgs) -> i32 {
    match args.command {
        McpCommand::List(args) => report("mcp list", list(args).await),
        McpCommand::Tools(args) => report("mcp tools", tools(args).await),
    }
}

async fn list(args: ListArgs) -> Result<i32, CliError> {
    let config = Settings::load(&args.config)?;
    let servers = config.mcp_server_list();
    if servers.servers.is_empty() && servers.errors.is_empty() {
        eprintln!(
            "troupe mcp list: {} has no `mcp_servers` section; add one, e.g. `mcp_servers: {{time: {{command: uvx, args: [mcp-server-time]}}}}`",
            args.config.display()
        );
        return Ok(EXIT_DONE);
    }
    let (manager, statuses) =
        McpManager::start_with(&servers, Registry::new(), mcp_options(&config)).await;
    manager.shutdown().await;
    if args.json {
        let rows: Vec<Value> = statuses.iter().map(status_json).collect();
        println!("{}", Value::Array(rows));
    } else {
        print_table(&statuses);
    }
    Ok(EXIT_DONE)
}

async fn tools(args: ToolsArgs) -> Result<i32, CliError> {
    let config = Settings::load(&args.config)?;
    let all = config.mcp_server_list();
    if let Some(error) = all.errors.iter().find(|e| e.server == args.server) {
        return Err(CliError::usage(error.to_string()));
    }
    let Some(server) = all.get(&args.server) else {
        let known: Vec<&str> = all.servers.iter().map(|s| s.name.as_str()).collect();
        return Err(CliError::usage(format!(
            "no server called '{}' in {}; the configured ones are: {}",
            args.server,
            args.config.display(),
            if known.is_empty() {
                "(none)".to_string()
            } else {
                known.join(", ")
            }
        )));
    };
    // `tools` is an explicit request: start the server even if the config switches it off.
    let only = McpServers {
        servers: vec![server.clone().with_enabled(true)],
        ..McpServers::default()
    };
    let registry = Registry::new();
    let (manager, statuses) =
        McpManager::start_with(&only, Arc::clone(&registry), mcp_options(&config)).await;
    let status = &statuses[0];
    let tools = manager.tools(&args.server).unwrap_or_default();
    manager.shutdown().await;
    if let Some(error) = status.last_error.as_deref().filter(|_| tools.is_empty()) {
        return Err(CliError::failed(format!(
            "server '{}' is {}: {}",
            visible_line(&args.server),
            status.state,
            visible_line(error)
        )));
    }
    if args.json {
        let rows: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "read_only": t.hints.read_only,
                    "destructive": t.hints.destructive,
                    "idempotent": t.hints.idempotent,
                    "parallel_safe": t.hints.parallel_safe,
                })
            })
            .collect();
        println!("{}", Value::Array(rows));
        return Ok(EXIT_DONE);
    }
    let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    println!("{:<width$}  {:<11}  DESCRIPTION", "NAME", "HINTS");
    for tool in &tools {
        let mut hints = Vec::new();
        if tool.hints.read_only {
            hints.push("read-only");
        } else if tool.hints.destructive {
            hints.push("destructive");
        } else {
            hints.push("writes");
        }
        let description = tool.description().lines().next().unwrap_or("");
        println!(
            "{:<width$}  {:<11}  {}",
            visible_line(&tool.name),
            hints.join(","),
            visible_line(description)
        );
    }
    println!(
        "{} tools from '{}' (toolset mcp-{})",
        tools.len(),
        args.server,
        args.server
    );
    Ok(EXIT_DONE)
}

fn status_json(status: &ServerStatus) -> Value {
    json!({
        "name": status.name,
        "status": status.state.as_str(),
        "transport": status.transport,
        "tools": status.tool_count,
        "last_error": status.last_error,
        "log_file": status.log_file.as_ref().map(|p| p.display().to_string()),
    })
}

fn print_table(statuses: &[ServerStatus]) {
    let width = statuses
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<width$}  {:<9}  {:<9}  {:>5}  LAST ERROR",
        "SERVER", "STATUS", "TRANSPORT", "TOOLS"
    );
    for s in statuses {
        println!(
            "{:<width$}  {:<9}  {:<9}  {:>5}  {}",
            visible_line(&s.name),
            s.state.as_str(),
            s.transport,
            s.tool_count,
            visible_line(s.last_error.as_deref().unwrap_or("-"))
        );
    }
}
