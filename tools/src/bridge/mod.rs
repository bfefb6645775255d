//! The three bridge tools, as plain functions over a [`ToolsetView`](crate::ToolsetView):
//! `tool_search` finds deferred tools, `tool_describe` loads their schemas, and `tool_call`
//! resolves a call to the underlying tool with coerced, validated arguments. Every bad input
//! becomes an `{"error": ...}` value that says what was wrong and what to send instead.

pub(crate) mod args;
pub mod coerce;
pub mod tool_call;
pub mod tool_describe;
pub mod tool_search;
pub mod validate;

pub use tool_call::{ResolvedCall, resolve};
pub use tool_describe::{tool_describe, tool_describe_with_connectors};
pub use tool_search::{tool_search, tool_search_explain, tool_search_with_connectors};

use serde_json::{Value, json};

/// Longest error body a model gets; longer ones are cut and marked.
pub const ERROR_BODY_MAX_CHARS: usize = 2048;

/// `{"error": message}`, with the message cut to [`ERROR_BODY_MAX_CHARS`] characters.
pub fn tool_error(message: impl AsRef<str>) -> Value {
    json!({ "error": clip_error(message.as_ref()) })
}

fn clip_error(message: &str) -> String {
    if message.chars().count() <= ERROR_BODY_MAX_CHARS {
        return message.to_string();
    }
    let kept: String = message.chars().take(ERROR_BODY_MAX_CHARS).collect();
    format!("{kept}… [truncated]")
}
