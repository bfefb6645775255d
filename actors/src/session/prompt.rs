//! What the model reads at the top of every request: the system prompt and the tool list, in
//! the full form or the lean one (`SessionConfig::prompt_style`, see [`troupe_tools::lean`]).
//! One place, so `troupe prompt` measures exactly what a session sends.

use std::sync::Arc;

use serde_json::Value;
use troupe_tools::ToolsetView;
use troupe_tools::lean::lean_tools;
use troupe_tools::search::assemble;

use super::config::{DEFAULT_SYSTEM_PROMPT, SessionConfig};

/// The system prompt of the lean form when the config gives none: short, and plain about
/// using a tool for what a tool can tell. (A wording that ended on "answer from the results"
/// made Qwen2.5-Coder-1.5B open its text-mode replies with an invented `<tool_response`.)
pub const LEAN_SYSTEM_PROMPT: &str = "You are a careful assistant that gets things done with the tools you are given. Never guess what a tool can tell you (a file's content, a count, a value): use the tool, then answer plainly.";

/// The system prompt (without the memory snapshot and todo list a running session adds) and
/// the tool list a session with `config` and `view` sends.
#[derive(Debug, Clone)]
pub struct ModelPrompt {
    /// The system message.
    pub system: String,
    /// The OpenAI-style tool definitions.
    pub tools: Vec<Value>,
    /// Whether it is the lean form.
    pub lean: bool,
    /// How many tools hide behind `tool_search`, when the bridge is offered.
    pub deferred: Option<usize>,
}

/// What a session with `config` over `view` sends the model on a request that may call tools.
pub fn model_prompt(view: &ToolsetView, config: &SessionConfig) -> ModelPrompt {
    let (tools, deferred, lean) = tool_list(view, config);
    let mut system = base_system_prompt(config, lean);
    if let Some(count) = deferred {
        system.push_str(&deferred_note(count, lean));
    }
    ModelPrompt {
        system,
        tools: tools.to_vec(),
        lean,
        deferred,
    }
}

/// The tool list, how many tools are deferred behind the bridge (when it is offered), and
/// whether the lean form was used.
pub(super) fn tool_list(
    view: &ToolsetView,
    config: &SessionConfig,
) -> (Arc<[Value]>, Option<usize>, bool) {
    let lean = config.prompt_style.is_lean(config.context_length);
    let assembly = assemble(view, config.context_length, &config.tool_search);
    let deferred = assembly.activated.then_some(assembly.deferred_count);
    let tools = if lean {
        lean_tools(&assembly).into()
    } else {
        assembly.tools
    };
    (tools, deferred, lean)
}

/// The configured system prompt, else the default of the form.
pub(super) fn base_system_prompt(config: &SessionConfig, lean: bool) -> String {
    match &config.system_prompt {
        Some(prompt) => prompt.clone(),
        None if lean => LEAN_SYSTEM_PROMPT.to_string(),
        None => DEFAULT_SYSTEM_PROMPT.to_string(),
    }
}

/// What the system prompt says about the tools behind `tool_search`.
pub(super) fn deferred_note(count: usize, lean: bool) -> String {
    if lean {
        // Servers still starting (or connectors only) give no count yet.
        let more = if count == 0 {
            "Other tools".to_string()
        } else {
            format!("{count} more tools")
        };
        format!(
            "\n\n{more} are not in your list. When none of your tools fits the request, call tool_search with keywords before you answer: never say that no tool exists without searching. Run what it finds with tool_call."
        )
    } else {
        format!(
            "\n\n{count} more tools are available but not listed directly. Find them with tool_search (its description lists them), read one's parameters with tool_describe, and run it with tool_call."
        )
    }
}
