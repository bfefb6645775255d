//! `troupe prompt`: what a session sends the model before any conversation, the system prompt
//! and every tool's schema, exactly as the session builds it (`troupe_actors::session::
//! model_prompt`). `--stats` counts it in tokens, full and lean side by side, for the session
//! kind asked: a chat (`troupe chat`'s tools), a board profile's workers (`--profile`), or a
//! subagent (`--subagent`). Counts come from the model server's tokenizer with `--tokenize URL`
//! (llama.cpp's `/tokenize`), else from the estimate troupe sizes listings with (4 characters a
//! token). A schema is counted as its JSON text; chat templates add a few tokens per tool.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use troupe_actors::delegate::child_view;
use troupe_actors::delegate::run::SUBAGENT_SYSTEM_PROMPT;
use troupe_actors::session::{ModelPrompt, SessionConfig, model_prompt};
use troupe_tools::ToolsetView;
use troupe_tools::lean::PromptStyle;
use troupe_tools::search::listing::estimate_tokens;

use super::error::{CliError, EXIT_DONE, report};
use crate::runtime::{Runtime, RuntimeOptions};
use crate::settings::Settings;

/// How long MCP servers get to bring their tools before the prompt is counted without them.
const MCP_WAIT: Duration = Duration::from_secs(60);

/// `troupe prompt`.
#[derive(Debug, Args)]
pub(crate) struct PromptArgs {
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Count instead of printing: tokens of the system prompt and of each tool, full and lean.
    #[arg(long)]
    pub(crate) stats: bool,
    /// The prompt of this board profile's workers (its tools and the worker's instructions;
    /// the kanban tools bound to each task come on top).
    #[arg(long, value_name = "NAME", conflicts_with = "subagent")]
    pub(crate) profile: Option<String>,
    /// The prompt of a subagent that a chat session delegates to.
    #[arg(long)]
    pub(crate) subagent: bool,
    /// Without --stats: print this form (`full`, `lean`, or `auto` as the config chooses).
    #[arg(long, value_name = "STYLE", default_value = "auto")]
    pub(crate) style: String,
    /// The model's context window in tokens, instead of `model.context_length`.
    #[arg(long, value_name = "N")]
    pub(crate) context_length: Option<i64>,
    /// A llama.cpp server (`http://127.0.0.1:8080` or its `/v1` URL) whose `/tokenize` counts
    /// the tokens with the model's own tokenizer.
    #[arg(long, value_name = "URL")]
    pub(crate) tokenize: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `troupe prompt`; returns the exit code.
pub(crate) async fn run(args: PromptArgs) -> i32 {
    report("prompt", run_inner(args).await)
}

async fn run_inner(args: PromptArgs) -> Result<i32, CliError> {
    let style = match args.style.as_str() {
        "auto" => None,
        other => Some(PromptStyle::parse(other).ok_or_else(|| {
            CliError::usage(format!(
                "--style {other:?} is not a prompt style; use one of {}",
                PromptStyle::ALLOWED.join(", ")
            ))
        })?),
    };
    if args.context_length.is_some_and(|n| n <= 0) {
        return Err(CliError::usage(
            "--context-length must be a positive number of tokens, such as 8192",
        ));
    }
    let config = Settings::load_or_default(args.config.as_deref())?;
    let runtime = Runtime::start(config, RuntimeOptions::default()).await?;
    runtime.report_notices("troupe prompt");
    // The tools of MCP servers are part of what the model sees (behind the bridge, or listed).
    runtime.wait_mcp_ready(MCP_WAIT).await;
    let result = measure(&args, style, &runtime).await;
    runtime.close().await;
    result
}

/// The session kind's view and settings, then the output asked for.
async fn measure(
    args: &PromptArgs,
    style: Option<PromptStyle>,
    runtime: &Runtime,
) -> Result<i32, CliError> {
    let (kind, view, mut session) = session_kind(args, runtime)?;
    if let Some(n) = args.context_length {
        session.context_length = Some(n);
    }
    if !args.stats {
        if let Some(style) = style {
            session.prompt_style = style;
        }
        let prompt = model_prompt(&view, &session);
        let out = json!({"kind": kind, "lean": prompt.lean, "system": prompt.system, "tools": prompt.tools});
        if args.json {
            println!("{out}");
        } else {
            println!("{}\n", prompt.system);
            for tool in &prompt.tools {
                println!("{tool}");
            }
        }
        return Ok(EXIT_DONE);
    }
    let counter = Counter::new(args.tokenize.as_deref())?;
    let mut forms = Vec::new();
    for style in [PromptStyle::Full, PromptStyle::Lean] {
        let config = SessionConfig {
            prompt_style: style,
            ..session.clone()
        };
        forms.push(counter.count(&model_prompt(&view, &config)).await?);
    }
    let chosen = session.prompt_style.is_lean(session.context_length);
    if args.json {
        println!(
            "{}",
            json!({
                "kind": kind,
                "counted_with": counter.name(),
                "context_length": session.context_length,
                "prompt_style": session.prompt_style.as_str(),
                "chosen": if chosen { "lean" } else { "full" },
                "full": forms[0].to_json(),
                "lean": forms[1].to_json(),
            })
        );
    } else {
        print!(
            "{}",
            table(&kind, &counter.name(), chosen, &forms[0], &forms[1])
        );
    }
    Ok(EXIT_DONE)
}

/// What is measured: its name, tools and settings.
fn session_kind(
    args: &PromptArgs,
    runtime: &Runtime,
) -> Result<(String, ToolsetView, SessionConfig), CliError> {
    if let Some(name) = &args.profile {
        let profile = runtime.troupe().profile(name).ok_or_else(|| {
            CliError::usage(format!(
                "there is no profile {name:?} under profiles: in the config (known: {})",
                runtime.troupe().profile_names().join(", ")
            ))
        })?;
        let mut session = profile.session.clone();
        session.system_prompt = Some(troupe_kanban::worker_context::system_prompt(
            profile.session.system_prompt.as_deref(),
        ));
        return Ok((
            format!("board worker ({name})"),
            profile.view.clone(),
            session,
        ));
    }
    let view = runtime.view(None)?;
    let defaults = runtime.session_defaults();
    if args.subagent {
        let child = child_view(&view, &defaults.delegation, 1).map_err(CliError::usage)?;
        let session = SessionConfig {
            system_prompt: Some(SUBAGENT_SYSTEM_PROMPT.to_string()),
            ..defaults
        };
        return Ok(("subagent".into(), child, session));
    }
    Ok(("chat".into(), view, defaults))
}

/// Token counts of one form of the prompt.
struct Counted {
    lean: bool,
    system: i64,
    tools: Vec<(String, i64)>,
}

impl Counted {
    fn tools_total(&self) -> i64 {
        self.tools.iter().map(|(_, n)| n).sum()
    }

    fn total(&self) -> i64 {
        self.system + self.tools_total()
    }

    fn to_json(&self) -> Value {
        json!({
            "lean": self.lean,
            "system": self.system,
            "tools": self.tools.iter().map(|(name, n)| json!({"name": name, "tokens": n})).collect::<Vec<_>>(),
            "tools_total": self.tools_total(),
            "total": self.total(),
        })
    }
}

/// The stats as a Markdown table, full and lean per part, with the saving.
fn table(kind: &str, counter: &str, chosen: bool, full: &Counted, lean: &Counted) -> String {
    let mut out = format!(
        "prompt of a {kind}, tokens counted with {counter}; this config sends the {} form\n\n| part | full | lean |\n|---|---|---|\n",
        if chosen { "lean" } else { "full" }
    );
    out.push_str(&format!(
        "| system prompt | {} | {} |\n",
        full.system, lean.system
    ));
    for ((name, f), (_, l)) in full.tools.iter().zip(&lean.tools) {
        out.push_str(&format!("| {name} | {f} | {l} |\n"));
    }
    out.push_str(&format!(
        "| tools ({}) | {} | {} |\n| **total** | **{}** | **{}** |\n",
        full.tools.len(),
        full.tools_total(),
        lean.tools_total(),
        full.total(),
        lean.total()
    ));
    if full.total() > 0 {
        let saved = 100.0 * (full.total() - lean.total()) as f64 / full.total() as f64;
        out.push_str(&format!("\nlean saves {saved:.0}%\n"));
    }
    out
}

/// Counts tokens: with a llama.cpp server's tokenizer, or estimated.
enum Counter {
    Estimate,
    Server {
        client: reqwest::Client,
        url: String,
    },
}

impl Counter {
    fn new(tokenize: Option<&str>) -> Result<Counter, CliError> {
        let Some(base) = tokenize else {
            return Ok(Counter::Estimate);
        };
        let base = base.trim().trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::usage(format!(
                "--tokenize {base:?} is not an http(s) URL; give the llama.cpp server, such as http://127.0.0.1:8080"
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CliError::failed(format!("cannot make an HTTP client: {e}")))?;
        Ok(Counter::Server {
            client,
            url: format!("{base}/tokenize"),
        })
    }

    fn name(&self) -> String {
        match self {
            Counter::Estimate => "the estimate (4 characters a token)".into(),
            Counter::Server { url, .. } => format!("the server's tokenizer ({url})"),
        }
    }

    async fn tokens(&self, text: &str) -> Result<i64, CliError> {
        match self {
            Counter::Estimate => Ok(estimate_tokens(text.chars().count())),
            Counter::Server { client, url } => {
                let failed =
                    |e: String| CliError::failed(format!("counting tokens with {url}: {e}"));
                let response = client
                    .post(url)
                    .json(&json!({"content": text}))
                    .send()
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                if !response.status().is_success() {
                    return Err(failed(format!("the server answered {}", response.status())));
                }
                let body: Value = response.json().await.map_err(|e| failed(e.to_string()))?;
                body["tokens"]
                    .as_array()
                    .map(|t| t.len() as i64)
                    .ok_or_else(|| failed("the answer has no `tokens` list".into()))
            }
        }
    }

    async fn count(&self, prompt: &ModelPrompt) -> Result<Counted, CliError> {
        let mut tools = Vec::with_capacity(prompt.tools.len());
        for tool in &prompt.tools {
            let name = tool["function"]["name"].as_str().unwrap_or("?").to_string();
            tools.push((name, self.tokens(&tool.to_string()).await?));
        }
        Ok(Counted {
            lean: prompt.lean,
            system: self.tokens(&prompt.system).await?,
            tools,
        })
    }
}
