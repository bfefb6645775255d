//! `troupe tools phrasings`: asks the configured model, once per tool, for requests people
//! might type when they need that tool, and keeps them in the file `tools.tool_search.phrasings`
//! names (or `--out`). Tool search then ranks with them (`troupe_tools::search::phrasings`).
//!
//! The file is rewritten whole every few tools, so an interrupted run loses at most those and
//! a rerun goes on where it stopped: tools that already have phrasings are skipped unless
//! `--again` is given.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_actors::model::{ChatMessage, ModelProvider, ModelRequest};
use troupe_tools::search::phrasings::{Phrasings, requests_from_reply};
use troupe_tools::tool::ToolDef;

use super::error::CliError;
use super::tools::Source;

/// The file is rewritten after this many tools.
const SAVE_EVERY: usize = 10;
/// Failed tools in a row after which the run stops: the model is not answering at all.
const FAILURES_IN_A_ROW: usize = 3;
/// Upper bound on a reply: six short requests fit well inside.
const MAX_REPLY_TOKENS: u32 = 200;

/// What the model is asked to do, and two worked examples of the answer's form.
const INSTRUCTIONS: &str = "For a tool, write 6 short requests that people type to an assistant \
when they need what the tool does. Use everyday words and the person's own situation, with \
made-up names and details; vary the verbs and avoid the tool's own wording. One request per \
line, nothing else.";
const EXAMPLES: [(&str, &str); 2] = [
    (
        "Tool: get_forecast\nWhat it does: Returns the weather forecast (temperature, \
         precipitation, wind) for a location for the coming days.\nInputs: location, days",
        "will it rain in Lisbon tomorrow\ndo I need an umbrella this weekend in Oslo\nhow hot is \
         it going to get in Madrid on Friday\nshow me the week ahead for Denver\nis snow coming \
         to Boston\nwhat should I pack for the weather on my Rome trip",
    ),
    (
        "Tool: archive_conversation\nWhat it does: Moves a chat conversation out of the inbox \
         into the archive. The conversation is kept and can be restored.\nInputs: \
         conversation_id",
        "get the chat with Priya out of my inbox\nI'm done with this thread, tuck it away\nhide \
         the old support conversation without deleting it\nclean up my inbox by putting the \
         vendor chat aside\nstash the conversation about the offsite\nput the billing \
         discussion away for later",
    ),
];

/// Arguments of `phrasings`.
#[derive(Debug, Args)]
pub(crate) struct PhrasingsArgs {
    #[command(flatten)]
    pub(super) source: Source,
    /// Where to keep them; defaults to the file `tools.tool_search.phrasings` names in --config.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Ask again for tools that already have phrasings in the file.
    #[arg(long)]
    again: bool,
    /// Requests sent to the model at once.
    #[arg(long, value_name = "N", default_value_t = 2)]
    parallel: usize,
}

/// The messages that ask for one tool's phrasings.
fn messages(def: &ToolDef) -> Vec<ChatMessage> {
    let mut out = vec![ChatMessage::System {
        content: INSTRUCTIONS.to_string(),
    }];
    for (tool, answer) in EXAMPLES {
        out.push(ChatMessage::User {
            content: tool.to_string(),
        });
        out.push(ChatMessage::Assistant {
            content: Some(answer.to_string()),
            tool_calls: Vec::new(),
        });
    }
    out.push(ChatMessage::User {
        content: describe(def),
    });
    out
}

/// A tool as the model is shown it: name, description and parameter names.
fn describe(def: &ToolDef) -> String {
    let description: String = def
        .description()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(700)
        .collect();
    let inputs: Vec<&str> = def
        .parameters()
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().take(8).map(String::as_str).collect())
        .unwrap_or_default();
    let inputs = if inputs.is_empty() {
        "none".to_string()
    } else {
        inputs.join(", ")
    };
    format!(
        "Tool: {}\nWhat it does: {description}\nInputs: {inputs}",
        def.name
    )
}

async fn ask(provider: &dyn ModelProvider, def: &ToolDef) -> Result<Vec<String>, String> {
    let request = ModelRequest {
        messages: messages(def),
        tools: Arc::from(Vec::<Value>::new()),
        model: None,
        max_tokens: Some(MAX_REPLY_TOKENS),
        stream: None,
        notices: None,
        state: None,
    };
    let reply = provider
        .complete(request, CancellationToken::new())
        .await
        .map_err(|e| e.to_string())?;
    let requests = requests_from_reply(reply.content.as_deref().unwrap_or_default());
    if requests.is_empty() {
        return Err("the model's reply held no request".into());
    }
    Ok(requests)
}

/// Runs `troupe tools phrasings`: the summary object, or why it stopped (bad input or config
/// exit 2; a model that does not answer, a file that cannot be written or an interruption exit
/// 1, with what was written kept).
pub(crate) async fn run(args: PhrasingsArgs) -> Result<Value, CliError> {
    let loaded = super::tools::load(&args.source)
        .await
        .map_err(CliError::usage)?;
    let result = write_all(&args, &loaded).await;
    super::tools::close(loaded.mcp).await;
    result
}

async fn write_all(args: &PhrasingsArgs, loaded: &super::tools::Loaded) -> Result<Value, CliError> {
    let configured = loaded
        .settings
        .phrasings_path()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let out = match (&args.out, configured) {
        (Some(out), _) => out.clone(),
        (None, Some(configured)) => configured,
        (None, None) => {
            return Err(CliError::usage(
                "say where to keep the phrasings: --out FILE, or \
                 tools.tool_search.phrasings in the --config file",
            ));
        }
    };
    let provider = loaded
        .settings
        .model
        .provider(&loaded.settings.home)
        .map_err(|e| CliError::usage(e.to_string()))?
        .ok_or_else(|| {
            CliError::usage(
                "no model to write with: set model.base_url (an OpenAI-compatible API such as \
                 http://127.0.0.1:8080/v1) in the --config file, or TROUPE_BASE_URL",
            )
        })?;
    // A file that is there but unreadable is kept as it is, not overwritten.
    let mut kept: Vec<(String, Vec<String>)> = if out.exists() {
        Phrasings::read(&out)
            .map_err(|e| CliError::usage(format!("{e}; fix it, or move it away to start anew")))?
            .iter()
            .map(|(name, list)| (name.to_string(), list.to_vec()))
            .collect()
    } else {
        Vec::new()
    };
    let catalog = loaded.view.catalog(&loaded.config.defer);
    let have: std::collections::HashSet<String> = kept.iter().map(|(n, _)| n.clone()).collect();
    let todo: Vec<Arc<ToolDef>> = catalog
        .defs()
        .iter()
        .filter(|d| args.again || !have.contains(&d.name))
        .cloned()
        .collect();
    let written_by = provider.model().unwrap_or_else(|| provider.describe());
    let save = |kept: &[(String, Vec<String>)]| {
        Phrasings::new(Some(written_by.clone()), kept.iter().cloned())
            .write(&out)
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", out.display())))
    };
    let total = todo.len();
    let mut replies = futures::stream::iter(todo.into_iter().map(|def| {
        let provider = Arc::clone(&provider);
        async move {
            let answer = ask(provider.as_ref(), &def).await;
            (def, answer)
        }
    }))
    .buffered(args.parallel.max(1));
    let (mut written, mut failed, mut in_a_row, mut since_save) = (0usize, Vec::new(), 0, 0);
    let end_progress = || {
        if total > 0 {
            eprintln!();
        }
    };
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let next = tokio::select! {
            next = replies.next() => next,
            _ = &mut interrupted => {
                end_progress();
                save(&kept)?;
                return Err(CliError::failed(format!(
                    "interrupted; {written} tools were written to {}; run again to go on",
                    out.display()
                )));
            }
        };
        let Some((def, answer)) = next else {
            break;
        };
        match answer {
            Ok(requests) => {
                kept.retain(|(name, _)| *name != def.name);
                kept.push((def.name.clone(), requests));
                written += 1;
                in_a_row = 0;
                since_save += 1;
            }
            Err(e) => {
                tracing::warn!(tool = %def.name, error = %e, "phrasings: no answer for a tool");
                failed.push(json!({"tool": def.name, "error": e}));
                in_a_row += 1;
                if in_a_row >= FAILURES_IN_A_ROW {
                    end_progress();
                    save(&kept)?;
                    return Err(CliError::failed(format!(
                        "the model failed {in_a_row} tools in a row, last with: {e}. \
                         {written} tools were written to {}; run again to go on",
                        out.display()
                    )));
                }
            }
        }
        if since_save >= SAVE_EVERY {
            save(&kept)?;
            since_save = 0;
        }
        eprint!(
            "\rtroupe tools phrasings: {}/{total}",
            written + failed.len()
        );
    }
    end_progress();
    save(&kept)?;
    // `kept`: entries the file already had and this run left as they were (tools of other
    // catalogs too: one file may serve several).
    Ok(json!({
        "file": out.display().to_string(),
        "written": written,
        "kept": kept.len().saturating_sub(written),
        "failed": failed,
        "tools": catalog.len(),
    }))
}
