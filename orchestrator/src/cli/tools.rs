//! `troupe tools search|describe|call|assemble`: the bridge tools driven from the command line,
//! exactly as a model would call them. Other programs drive troupe through this contract:
//! one JSON object on stdout; exit 0 even when that object is an error (it is what the model
//! would see); exit 2 with a message on stderr when the catalog or config file is unusable.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use troupe_tools::bridge::tool_call::{Resolution, resolve_batch};
use troupe_tools::bridge::{
    tool_describe_with_connectors, tool_error, tool_search_explain, tool_search_with_connectors,
};
use troupe_tools::connectors::{EntryOutcome, batch_answer};
use troupe_tools::search::assemble::assemble;
use troupe_tools::search::semantic::default_embedder;
use troupe_tools::{CallContext, Ranking, Registry, ToolSearchConfig, ToolsetView};

use troupe_tools::mcp::McpManager;

use super::error::{CliError, EXIT_DONE, report};
use super::mcp::start_configured;
use super::status_line::{REDRAW_EVERY, StatusLine, elapsed, progress_bar, while_starting};
use crate::catalog::load_catalog_file;
use crate::settings::Settings;

/// Longest wait for the tool embeddings (a first run encodes every tool: seconds for hundreds).
const EMBEDDINGS_WAIT: Duration = Duration::from_secs(600);

/// The `troupe tools` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ToolsCommand {
    /// Print what `tool_search` answers to ARGS (with --explain: why, for a person).
    Search(SearchArgs),
    /// Print what `tool_describe` answers to ARGS.
    Describe(BridgeArgs),
    /// Resolve a `tool_call` (with --dry-run: print the tool and its checked arguments).
    Call(CallArgs),
    /// Print the tool list a model would see at a given context length.
    Assemble(AssembleArgs),
    /// Ask the configured model, once per tool, for requests people might type for it, and
    /// keep them in the phrasings file tool search ranks with.
    Phrasings(super::phrasings::PhrasingsArgs),
}

/// Where the tools come from.
#[derive(Debug, Args)]
pub(crate) struct Source {
    /// A JSON array of tool definitions (OpenAI style, with `toolset` and `source_name`).
    /// Without it, the MCP servers of --config are started and their live tools are used.
    #[arg(long, value_name = "FILE")]
    pub(crate) catalog: Option<PathBuf>,
    /// troupe's config (YAML or JSON); its `tools.tool_search` settings apply.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// Arguments of `search` and `describe`.
#[derive(Debug, Args)]
pub(crate) struct BridgeArgs {
    #[command(flatten)]
    source: Source,
    /// The arguments the model would send, as JSON.
    #[arg(long, value_name = "JSON")]
    args: String,
}

/// Arguments of `search`.
#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    #[command(flatten)]
    bridge: BridgeArgs,
    /// Instead of the model's JSON, explain the ranking for a person: per query what it became
    /// (words, expansions), whether anything fits and why, and per match which legs found it
    /// (matched terms, similarity).
    #[arg(long)]
    explain: bool,
}

/// Arguments of `call`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    source: Source,
    /// The arguments the model would send, as JSON: {"calls": [{"name", "arguments"}]}.
    #[arg(long, value_name = "JSON")]
    args: String,
    /// Only resolve and check the call; do not run the tool.
    #[arg(long)]
    dry_run: bool,
}

/// Arguments of `assemble`.
#[derive(Debug, Args)]
pub(crate) struct AssembleArgs {
    #[command(flatten)]
    source: Source,
    /// The model's context window in tokens (0 or less: unknown).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    context_length: i64,
}

/// The tools and settings a command works on.
pub(super) struct Loaded {
    pub(super) view: ToolsetView,
    pub(super) config: ToolSearchConfig,
    /// The whole config file (defaults without --config).
    pub(super) settings: Settings,
    /// The MCP servers started for a live catalog; shut down when the command ends.
    pub(super) mcp: Option<McpManager>,
}

/// Runs one `troupe tools` command; returns the exit code.
pub(crate) async fn run(command: ToolsCommand) -> i32 {
    let command = match command {
        ToolsCommand::Phrasings(args) => {
            return match super::phrasings::run(args).await {
                Ok(summary) => {
                    println!("{summary}");
                    EXIT_DONE
                }
                Err(error) => report("tools phrasings", Err(error)),
            };
        }
        other => other,
    };
    let source = match &command {
        ToolsCommand::Search(a) => &a.bridge.source,
        ToolsCommand::Describe(a) => &a.source,
        ToolsCommand::Call(a) => &a.source,
        ToolsCommand::Assemble(a) => &a.source,
        // Answered above.
        ToolsCommand::Phrasings(a) => &a.source,
    };
    // An unusable catalog or config is bad input; anything else is answered in the JSON object.
    let loaded = match load(source).await {
        Ok(loaded) => loaded,
        Err(message) => return report("tools", Err(CliError::usage(message))),
    };
    let output = match command {
        ToolsCommand::Search(a) => {
            wait_for_embeddings(&loaded);
            if a.explain {
                let explained = with_model_args(&a.bridge.args, |args| {
                    match tool_search_explain(&loaded.view, &loaded.config, args) {
                        Ok(text) => Value::String(text),
                        Err(error) => error,
                    }
                });
                if let Value::String(text) = explained {
                    print!("{text}");
                    close(loaded.mcp).await;
                    return EXIT_DONE;
                }
                explained
            } else {
                match model_args(&a.bridge.args) {
                    Ok(args) => {
                        tool_search_with_connectors(&loaded.view, &loaded.config, &args).await
                    }
                    Err(error) => error,
                }
            }
        }
        ToolsCommand::Describe(a) => match model_args(&a.args) {
            Ok(args) => tool_describe_with_connectors(&loaded.view, &loaded.config, &args).await,
            Err(error) => error,
        },
        ToolsCommand::Call(a) => call(&loaded, &a.args, a.dry_run).await,
        ToolsCommand::Assemble(a) => assembly_json(&loaded, a.context_length),
        // Answered above.
        ToolsCommand::Phrasings(_) => Value::Null,
    };
    println!("{output}");
    close(loaded.mcp).await;
    EXIT_DONE
}

pub(super) async fn close(mcp: Option<McpManager>) {
    if let Some(mcp) = mcp {
        mcp.shutdown().await;
    }
}

/// The command line answers once, so under the hybrid ranking it waits for the tool embeddings
/// (from the cache under the troupe home, or computed and cached on a first run) rather than
/// answering from the lexical leg alone as a session's first call does.
/// On a terminal a progress bar counts the tools embedded (`embedding tools ███░░ 1234/3309`).
fn wait_for_embeddings(loaded: &Loaded) {
    if loaded.config.ranking == Ranking::Hybrid {
        let catalog = loaded.view.catalog(&loaded.config.defer);
        let config = &loaded.config;
        let mut line = StatusLine::detect();
        let ready = if line.enabled() {
            let started = std::time::Instant::now();
            let deadline = started + EMBEDDINGS_WAIT;
            let mut ready = catalog.semantic(config);
            while ready.is_none() && std::time::Instant::now() < deadline {
                match catalog.embedding_progress() {
                    Some((done, total)) => line.show(
                        &progress_bar("embedding tools", done, total),
                        &elapsed(started.elapsed()),
                    ),
                    // Not started (no encoder) or over: nothing more to wait for.
                    None => break,
                }
                ready = catalog.semantic_wait(config, REDRAW_EVERY);
            }
            line.clear();
            ready.or_else(|| catalog.semantic(config))
        } else {
            catalog.semantic_wait(config, EMBEDDINGS_WAIT)
        };
        if ready.is_none() && default_embedder().is_some() {
            tracing::warn!(
                "tool search: the tool embeddings were not ready in time; ranking with the lexical leg alone"
            );
        }
    }
}

/// The catalog file when one is given; otherwise the live tools of the MCP servers the config
/// file declares.
pub(super) async fn load(source: &Source) -> Result<Loaded, String> {
    let config = match &source.config {
        Some(path) => Settings::load(path).map_err(|e| e.to_string())?,
        None => Settings::default(),
    };
    let (registry, mcp): (Arc<Registry>, Option<McpManager>) =
        match (&source.catalog, &source.config) {
            (Some(path), _) => (load_catalog_file(path).map_err(|e| e.to_string())?, None),
            (None, Some(_)) => {
                let registry = Registry::new();
                let (manager, statuses) =
                    while_starting(start_configured(&config, Arc::clone(&registry))).await;
                for status in &statuses {
                    if let Some(error) = &status.last_error {
                        eprintln!(
                            "troupe tools: MCP server '{}' is not available: {}",
                            super::visible::visible_line(&status.name),
                            super::visible::visible_line(error)
                        );
                    }
                }
                (registry, Some(manager))
            }
            (None, None) => {
                return Err(
                "give the tools to work on: --catalog FILE (a JSON array of tool definitions), \
                 or --config FILE whose mcp_servers are started for a live catalog"
                    .into(),
            );
            }
        };
    // A live catalog gets `manage_connections` with the gateway; a catalog file grants
    // connectors by holding a tool of that name.
    if let Some(gateway) = crate::connectors::attach_gateway(&config, &registry)
        && source.catalog.is_none()
    {
        registry.register(crate::connectors::manage_tool(Some(gateway), None));
    }
    Ok(Loaded {
        view: registry.view_all(),
        config: config.tool_search.clone(),
        settings: config,
        mcp,
    })
}

/// Parses the model's arguments; text that is not JSON gets the error a model would get.
fn with_model_args(text: &str, f: impl FnOnce(&Value) -> Value) -> Value {
    match model_args(text) {
        Ok(args) => f(&args),
        Err(error) => error,
    }
}

/// The model's arguments, or the error a model would get for text that is not JSON.
fn model_args(text: &str) -> Result<Value, Value> {
    serde_json::from_str::<Value>(text).map_err(|e| {
        tool_error(format!(
            "the arguments are not valid JSON ({e}); send a JSON object such as {{\"queries\": [\"github create issue\"]}}"
        ))
    })
}

async fn call(loaded: &Loaded, text: &str, dry_run: bool) -> Value {
    let args = match serde_json::from_str::<Value>(text) {
        Ok(args) => args,
        Err(e) => {
            return tool_error(format!(
                "the arguments are not valid JSON ({e}); send {{\"calls\": [{{\"name\": \"<tool>\", \"arguments\": {{...}}}}]}}"
            ));
        }
    };
    let resolved = match resolve_batch(&loaded.view, &loaded.config, &args) {
        Ok(Resolution::Local(resolved)) => resolved,
        Ok(Resolution::Connectors(entries)) => {
            if dry_run {
                let calls: Vec<Value> = entries
                    .into_iter()
                    .map(|e| json!({"name": e.name, "arguments": Value::Object(e.arguments)}))
                    .collect();
                return json!({ "calls": calls });
            }
            // One gateway request per entry, in input order.
            let mut outcomes = Vec::with_capacity(entries.len());
            for entry in entries {
                let result = loaded
                    .view
                    .call(&entry.name, entry.arguments, CallContext::detached("cli"))
                    .await;
                outcomes.push((entry.name, EntryOutcome::of_result(&result)));
            }
            return batch_answer(&outcomes);
        }
        Err(error) => return error,
    };
    if dry_run {
        return json!({"name": resolved.name, "arguments": Value::Object(resolved.arguments)});
    }
    let result = loaded
        .view
        .call(
            &resolved.name,
            resolved.arguments,
            CallContext::detached("cli"),
        )
        .await;
    let text = result.to_model_text();
    let output = result
        .structured
        .clone()
        .unwrap_or_else(|| serde_json::from_str(&text).unwrap_or(Value::String(text)));
    if result.is_error {
        json!({"name": resolved.name, "error": output})
    } else {
        json!({"name": resolved.name, "result": output})
    }
}

fn assembly_json(loaded: &Loaded, context_length: i64) -> Value {
    let assembly = assemble(&loaded.view, Some(context_length), &loaded.config);
    let names: Vec<Value> = assembly
        .tools
        .iter()
        .filter_map(|def| def.pointer("/function/name").cloned())
        .collect();
    json!({
        "activated": assembly.activated,
        "tier": assembly.tier,
        "listing_form": assembly.listing_form.as_str(),
        "deferred_count": assembly.deferred_count,
        "deferred_tokens": assembly.deferred_tokens,
        "listing_budget": assembly.listing_budget,
        "tools": names,
        "listing": assembly.listing,
    })
}
