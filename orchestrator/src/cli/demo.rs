//! `troupe demo`: troupe's main job for a person to watch. By default a fan-out on a kanban board
//! (`cli/kanban_demo.rs`): an orchestrating task splits work into children run in parallel by
//! worker actors, then a final task. With `--tool-search`: tool search at work on a big catalog
//! (the tool list a model would see, a few searches, a describe and a dry-run call, each timed),
//! then one session.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde_json::{Value, json};
use troupe_tools::bridge::{resolve, tool_describe, tool_search};
use troupe_tools::search::assemble::assemble;
use troupe_tools::text::clip_chars;
use troupe_tools::{Registry, ToolSearchConfig};

use super::error::{CliError, EXIT_DONE, report};
use crate::catalog::{bundled_catalog, load_catalog_file};

/// Arguments of `troupe demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Show the tool-search tour instead of the kanban fan-out.
    #[arg(long)]
    tool_search: bool,
    /// Run the fan-out on a SQLite store in this directory (default: a new temporary one).
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    /// With --tool-search: use this catalog instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// The model's context window in tokens.
    #[arg(long, default_value_t = 200_000)]
    context_length: i64,
    /// Queries to search for (repeat the flag); a default set when absent.
    #[arg(long = "query", value_name = "TEXT")]
    queries: Vec<String>,
    /// With --tool-search: skip the session at the end.
    #[arg(long)]
    no_session: bool,
}

/// The scripted model the demo's session uses when the environment names no real one.
const DEMO_SCRIPT: &str = include_str!("../../data/demo_session.yaml");

/// The task the demo's session is given.
const DEMO_TASK: &str = "What kind of machine is this? Use the terminal to find out.";

const DEFAULT_QUERIES: &[&str] = &[
    "dns records create",
    "purge cache zone",
    "github create issue",
    "list workers scripts",
    "sentry resolve issue",
];

/// Runs the demo; returns the exit code.
pub(crate) async fn run(args: DemoArgs) -> i32 {
    if !args.tool_search {
        return super::kanban_demo::run(args.store).await;
    }
    let (registry, source) = match &args.catalog {
        Some(path) => (load_catalog_file(path), path.display().to_string()),
        None => (bundled_catalog(), "the bundled catalog".to_string()),
    };
    let registry = match registry {
        Ok(registry) => registry,
        Err(e) => return report("demo", Err(CliError::usage(e.to_string()))),
    };
    walk_through(&registry, &source, &args);
    if args.no_session {
        return EXIT_DONE;
    }
    run_session().await
}

/// A real session through the actor runtime: on the environment's OpenAI-compatible provider
/// when one is set (TROUPE_BASE_URL or OPENAI_BASE_URL, with TROUPE_API_KEY or OPENAI_API_KEY and
/// TROUPE_MODEL), else on the bundled scripted model. It says which.
async fn run_session() -> i32 {
    let endpoint = ["TROUPE_BASE_URL", "OPENAI_BASE_URL"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    println!();
    match &endpoint {
        Some(url) => {
            println!("session: asking the model at {url} (from the environment): {DEMO_TASK}")
        }
        None => println!(
            "session: no model endpoint in the environment (TROUPE_BASE_URL), so the bundled scripted \
             model answers: {DEMO_TASK}"
        ),
    }
    let args = super::chat::ChatArgs {
        query: Some(DEMO_TASK.to_string()),
        config: None,
        base_url: None,
        model: None,
        toolsets: None,
        profile: None,
        json: false,
        script: None,
        max_iterations: Some(4),
        script_text: endpoint.is_none().then(|| DEMO_SCRIPT.to_string()),
        resume: None,
        continue_latest: false,
    };
    super::chat::run(args).await
}

fn walk_through(registry: &std::sync::Arc<Registry>, source: &str, args: &DemoArgs) {
    let config = ToolSearchConfig::default();
    let view = registry.view_all();
    let servers = registry.toolsets();
    println!(
        "troupe tool search: {} tools from {source}, on {} servers ({})",
        view.len(),
        servers.len(),
        servers.iter().cloned().collect::<Vec<_>>().join(", ")
    );

    let started = Instant::now();
    let catalog = view.catalog(&config.defer);
    println!(
        "index: {} deferred tools indexed in {:.2} ms (once per catalog version; every later call reuses it)",
        catalog.len(),
        ms(started)
    );

    let started = Instant::now();
    let assembly = assemble(&view, Some(args.context_length), &config);
    let took = ms(started);
    let visible: Vec<String> = assembly
        .tools
        .iter()
        .filter_map(|d| {
            d.pointer("/function/name")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .collect();
    println!(
        "assembly at a {}-token context ({took:.2} ms): tier {}, listing form '{}'; {} deferred tools \
         worth ~{} tokens of schemas become {} tools the model sees ({}) and a listing within a {}-token budget",
        args.context_length,
        assembly.tier,
        assembly.listing_form.as_str(),
        assembly.deferred_count,
        assembly.deferred_tokens,
        visible.len(),
        visible.join(", "),
        assembly.listing_budget,
    );
    if let Some(listing) = &assembly.listing {
        println!("listing, first lines:");
        for line in listing.lines().take(6) {
            println!("  | {}", clip_chars(line, 110));
        }
    }

    let queries: Vec<String> = if args.queries.is_empty() {
        DEFAULT_QUERIES.iter().map(|q| q.to_string()).collect()
    } else {
        args.queries.clone()
    };
    let mut best: Option<String> = None;
    println!();
    for query in &queries {
        let call = json!({"queries": [query], "limit": 3});
        let started = Instant::now();
        let answer = tool_search(&view, &config, &call);
        let took = us(started);
        let matches: Vec<String> = answer
            .pointer("/results/0/matches")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if best.is_none() {
            best = matches.first().cloned();
        }
        println!(
            "tool_search {query:?} ({took:.0} µs): {}",
            if matches.is_empty() {
                "no match".to_string()
            } else {
                matches.join(", ")
            }
        );
    }

    let Some(name) = best else {
        return;
    };
    println!();
    let started = Instant::now();
    let described = tool_describe(&view, &config, &json!({"names": [name]}));
    let took = us(started);
    let parameters = described
        .pointer(&format!("/tools/{name}/parameters"))
        .cloned()
        .unwrap_or(Value::Null);
    println!(
        "tool_describe {name} ({took:.0} µs): parameters {}",
        clip_chars(&parameters.to_string(), 300)
    );

    // A model often sends numbers as strings and a single value where a list is expected; the
    // bridge repairs what the schema makes unambiguous and checks the rest.
    let arguments = sample_arguments(&parameters);
    let call = json!({"calls": [{"name": name, "arguments": arguments}]});
    let started = Instant::now();
    let outcome = resolve(&view, &config, &call);
    let took = us(started);
    match outcome {
        Ok(resolved) => println!(
            "tool_call dry run ({took:.0} µs): would run {} with {}",
            resolved.name,
            Value::Object(resolved.arguments)
        ),
        Err(error) => println!("tool_call dry run ({took:.0} µs): refused: {error}"),
    }
}

/// Arguments for a demo call: every required string gets a placeholder, integers arrive as
/// strings (to show coercion).
fn sample_arguments(parameters: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let required: Vec<&str> = parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(Value::Object(props)) = parameters.get("properties") {
        for (key, schema) in props {
            let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
            match ty {
                "integer" => {
                    out.insert(key.clone(), Value::String("3".into()));
                }
                "string" if required.contains(&key.as_str()) => {
                    out.insert(key.clone(), Value::String(format!("example-{key}")));
                }
                _ => {}
            }
        }
    }
    Value::Object(out)
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

fn us(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e6
}
