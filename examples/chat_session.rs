//! A session through troupe's public API, on a scripted model: open a troupe from a plain
//! `#[tokio::main]`, give the session two tools, watch its events, answer the approval the
//! second tool needs, and close everything.
//!
//! Run with:
//!
//! ```sh
//! cargo run -p troupe-examples --example chat_session
//! ```
//!
//! You will see the tool calls start and finish, one approval request (answered "once" by
//! this program), and the model's final answer.

#![allow(clippy::print_stdout, reason = "an example shows its results")]

use std::sync::Arc;

use serde_json::{Map, Value, json};
use troupe::actors::events::EventKind;
use troupe::actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe::actors::supervisor::{ApprovalChoice, ApprovalConfig};
use troupe::tools::{CallContext, Registry, ToolDef, ToolHandler, ToolHints, ToolResult};
use troupe::{SessionOptions, Troupe, TroupeConfig};

/// What a handler returns: a boxed future of its result.
type Reply = std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send>>;

/// Counts the words of its `text` argument.
struct WordCount;

impl ToolHandler for WordCount {
    fn call(&self, arguments: Map<String, Value>, _ctx: CallContext) -> Reply {
        let words = arguments
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .split_whitespace()
            .count();
        Box::pin(async move { ToolResult::json(json!({ "words": words })) })
    }
}

/// Pretends to publish a note; it needs a person's approval first.
struct Publish;

impl ToolHandler for Publish {
    fn call(&self, arguments: Map<String, Value>, _ctx: CallContext) -> Reply {
        let title = arguments
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("untitled")
            .to_string();
        Box::pin(async move { ToolResult::text(format!("published \"{title}\"")) })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let registry = Registry::with_tools([
        ToolDef::new(
            "word_count",
            "Count the words in a text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )
        .with_toolset("notes")
        .with_hints(ToolHints {
            read_only: true,
            ..ToolHints::default()
        })
        .with_handler(Arc::new(WordCount)),
        ToolDef::new(
            "publish",
            "Publish a note under a title.",
            json!({"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}),
        )
        .with_toolset("notes")
        .with_handler(Arc::new(Publish)),
    ]);
    let approvals = ApprovalConfig {
        require_approval: vec!["publish".into()],
        ..ApprovalConfig::default()
    };
    let troupe = Troupe::start(TroupeConfig::new(registry).with_approvals(approvals))?;

    // Whoever holds an approval stream answers requests; here, this program says "once".
    let mut requests = troupe.approvals().await?;
    let answerer = troupe.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            println!("approval asked: {} ({})", request.tool, request.reason);
            let _ = answerer
                .answer(&request.request_id, ApprovalChoice::Once)
                .await;
        }
    });

    let mut events = troupe.events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event.kind {
                EventKind::ToolCallStarted { tool, .. } => println!("  started  {tool}"),
                EventKind::ToolCallFinished {
                    tool,
                    status,
                    duration_ms,
                    ..
                } => println!("  finished {tool}: {status} in {duration_ms} ms"),
                _ => {}
            }
        }
    });

    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("word_count", json!({"text": "actors own state and decide"}))
                .with_tool_call("publish", json!({"title": "Actors"})),
        )
        .turn(ScriptTurn::text(
            "The note has five words, and it is published.",
        ));
    let session = troupe
        .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(script))))
        .await?;
    let outcome = session
        .send("Count the words of my note, then publish it.")
        .await?;
    println!("answer ({}): {}", outcome.status.as_str(), outcome.text);

    let report = troupe.close().await;
    println!(
        "closed {} session(s), clean: {}",
        report.sessions_closed, report.clean
    );
    Ok(())
}
