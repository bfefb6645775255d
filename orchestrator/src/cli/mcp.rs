//! `troupe mcp list` and `troupe mcp tools <server>`: start the MCP servers configured under
//! `mcp_servers` in the config file, then print each server's health or one server's tools.
//! `troupe mcp serve`: troupe itself as an MCP server (see [`crate::mcp_server`]).
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
    /// Be an MCP server: tool search over the configured servers and plugins (and, with
    /// --toolsets, those tools directly), over stdio or streamable HTTP.
    Serve(ServeArgs),
}

/// Arguments of `troupe mcp serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio; every
    /// request needs the server's token (serve.token or TROUPE_SERVE_TOKEN).
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,
    /// With --http: also answer requests whose Host header names HOST (repeatable). Needed when
    /// listening on anything but loopback, where clients reach the server by a name or address
    /// other than the bound one (0.0.0.0 is never a client's Host).
    #[arg(long = "allowed-host", value_name = "HOST", requires = "http")]
    pub(crate) allowed_host: Vec<String>,
    /// With stdio: also serve the approval queue on this address (e.g. 127.0.0.1:8766), behind
    /// the server's token: a call whose client cannot ask its person (no elicitation) waits
    /// there for `GET /api/approvals` and `POST /api/approvals/ID` instead of being refused.
    /// `--http` serves the queue on its own listener.
    #[arg(long, value_name = "ADDR", conflicts_with = "http")]
    pub(crate) queue: Option<std::net::SocketAddr>,
    /// Toolsets offered directly besides the bridge, comma-separated (e.g. core,kanban;
    /// `kanban` adds tools over the board of troupe.yaml, run by its profiles).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub(crate) toolsets: Vec<String>,
    /// Offer the profile PROFILE of troupe.yaml as a tool `run_<PROFILE>(prompt, session?)`
    /// that runs a whole troupe turn (repeatable).
    #[arg(long, value_name = "PROFILE")]
    pub(crate) agent: Vec<String>,
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
        McpCommand::Serve(args) => report("mcp serve", serve(args).await),
    }
}

async fn serve(args: ServeArgs) -> Result<i32, CliError> {
    use crate::http::auth::{TOKEN_ENV, TokenSource, resolve_token};
    use crate::mcp_server::{McpServer, ServeOptions, board_tools, transport};

    let allowed_hosts = args
        .allowed_host
        .iter()
        .map(|h| transport::check_allowed_host(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::usage)?;
    let config = Settings::load_or_default(args.config.as_deref())?;
    // An HTTP door (the MCP endpoint, or the queue alone) is refused before anything starts
    // when no token can be had.
    let door = match (args.http, args.queue) {
        (Some(addr), _) => Some((addr, "--http")),
        (None, Some(addr)) => Some((addr, "--queue")),
        (None, None) => None,
    };
    let http = match door {
        None => None,
        Some((addr, flag)) => {
            let home = config.home.path().to_path_buf();
            let cannot_read_home =
                crate::runtime::backends::boundary(&config.builtins, &home, config.path.as_deref())
                    .is_ok_and(|boundary| boundary.policy.is_some());
            let (token, source) = resolve_token(
                config.serve.token.as_deref(),
                std::env::var(TOKEN_ENV).ok().as_deref(),
                &home,
                cannot_read_home,
            )
            .map_err(|e| CliError::usage(format!("{flag} needs the server's token: {e}")))?;
            troupe_tools::builtin::redact::remember_secret(&token);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| CliError::failed(format!("cannot listen on {addr}: {e}")))?;
            Some((listener, token, source))
        }
    };
    // The board tools are tools of the runtime, so hooks and approvals see their calls too.
    let board = if args
        .toolsets
        .iter()
        .any(|t| t.trim() == board_tools::TOOLSET)
    {
        let kanban_settings = config.kanban.clone();
        Some(
            board_tools::open_board(&kanban_settings)
                .await
                .map_err(|e| CliError::failed(format!("--toolsets kanban: {e}")))?,
        )
    } else {
        None
    };
    // A `run_<profile>` call answers when its turn ends, so its subagents must end inside it.
    let mut options = crate::runtime::RuntimeOptions::default().with_background_delegation(false);
    if let Some((kanban, slug)) = &board {
        for tool in board_tools::board_tools(kanban.clone(), slug.clone()) {
            options = options.with_tool(tool);
        }
    }
    let runtime = crate::runtime::Runtime::start(config, options).await?;
    runtime.report_notices("troupe mcp serve");
    let server = match McpServer::start(
        runtime.clone(),
        ServeOptions {
            toolsets: args.toolsets.clone(),
            agents: args.agent.clone(),
            queue: door.is_some(),
        },
    )
    .await
    {
        Ok(server) => server,
        Err(e) => {
            runtime.close().await;
            return Err(CliError::usage(e));
        }
    };
    // With profiles, the board's tasks run here, as under `troupe serve`.
    let dispatcher = match &board {
        Some((kanban, slug)) if !runtime.config().kanban.profiles.is_empty() => {
            let started = match runtime.worker_profiles(None) {
                Ok(profiles) => kanban
                    .start_dispatcher(
                        runtime.troupe(),
                        slug.clone(),
                        profiles,
                        runtime.config().kanban.dispatcher_config(),
                    )
                    .await
                    .map_err(|e| format!("cannot start the dispatcher: {e}")),
                Err(e) => Err(e.to_string()),
            };
            match started {
                Ok(handle) => Some(handle),
                Err(e) => {
                    runtime.close().await;
                    return Err(CliError::usage(e));
                }
            }
        }
        _ => None,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            super::serve::shutdown_signal().await;
            stop.cancel();
        }
    });
    let result = match http {
        None => transport::serve_stdio(&server, stop).await,
        Some((listener, token, source)) => {
            let at = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            match source {
                TokenSource::Ephemeral { .. } => eprintln!(
                    "troupe mcp serve: this run's token (send it as `Authorization: Bearer`): {token}"
                ),
                TokenSource::Config => {
                    eprintln!("troupe mcp serve: the token is serve.token of the config")
                }
                TokenSource::Environment => eprintln!("troupe mcp serve: the token is {TOKEN_ENV}"),
                TokenSource::File(path) | TokenSource::Generated(path) => {
                    eprintln!("troupe mcp serve: the token is in {}", path.display())
                }
            }
            eprintln!(
                "troupe mcp serve: approvals of clients without elicitation wait at http://{at}{}",
                crate::mcp_server::QUEUE_PATH
            );
            if args.http.is_none() {
                // stdio, with the queue on its own listener beside it.
                let queue = transport::serve_queue(&server, listener, token, stop.clone());
                let (served, queued) = tokio::join!(
                    async {
                        let served = transport::serve_stdio(&server, stop.clone()).await;
                        stop.cancel();
                        served
                    },
                    queue
                );
                served.and(queued)
            } else {
                eprintln!(
                    "troupe mcp serve: listening on http://{at}{}",
                    transport::HTTP_PATH
                );
                if let Ok(at) = listener.local_addr()
                    && !at.ip().is_loopback()
                    && allowed_hosts.is_empty()
                {
                    eprintln!(
                        "troupe mcp serve: listening on {at}, but only requests whose Host is {} \
                         are answered; add --allowed-host NAME for the name clients use",
                        at.ip()
                    );
                }
                transport::serve_http(server, listener, token, allowed_hosts, stop).await
            }
        }
    };
    if let Some(dispatcher) = dispatcher {
        dispatcher.stop().await;
    }
    runtime.close().await;
    result.map(|()| EXIT_DONE).map_err(CliError::failed)
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
