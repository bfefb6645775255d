//! A session's settings ([`SessionConfig`]) and their defaults.

use std::path::PathBuf;
use std::sync::Arc;

use troupe_tools::ToolSearchConfig;
use troupe_tools::lean::PromptStyle;
use troupe_tools::memory::MemoryStore;

use crate::delegate::DelegationConfig;
use crate::journal::Persist;
use crate::tool_runner::RunnerLimits;
use crate::trace::TraceSpan;
use crate::usage::{Budget, PriceTable};

/// Default tool rounds per user message.
pub const DEFAULT_MAX_ITERATIONS: u32 = 90;

/// The system prompt used when the config gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a careful assistant that gets things done with the tools you are given. Use a tool when it helps; call several at once when they do not depend on each other. When you have what you need, answer plainly.";

/// A session's settings.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The system prompt; [`DEFAULT_SYSTEM_PROMPT`] when `None`.
    pub system_prompt: Option<String>,
    /// Tool rounds per user message before the model must answer.
    pub max_iterations: u32,
    /// The tool-search settings (which tools hide behind the bridge, listing budget).
    pub tool_search: ToolSearchConfig,
    /// The model's context window in tokens, when known (sizes the listing).
    pub context_length: Option<i64>,
    /// The full prompt or the lean one for small contexts (`auto`: by `context_length`).
    pub prompt_style: PromptStyle,
    /// Overrides the provider's model name.
    pub model: Option<String>,
    /// Upper bound on generated tokens per request.
    pub max_tokens: Option<u32>,
    /// The tool runner's limits.
    pub runner: RunnerLimits,
    /// The directory relative paths in tool arguments resolve against, for planning.
    pub cwd: PathBuf,
    /// The operator's limits for `delegate_task` (used only when the view holds it).
    pub delegation: DelegationConfig,
    /// Whether `delegate_task` may run in the background: the call returns a handle at once and
    /// the results arrive as a later message. Only for top-level sessions that can take one;
    /// off (wait for the results) by default, for one-shot runs and workers.
    pub background_delegation: bool,
    /// Emit the answer's text as it arrives (`TextDelta` events), for displays that show it
    /// live. Off by default: once text went out, a broken stream cannot be retried unseen.
    pub stream_text: bool,
    /// Emit `ModelProgress` events while a model request runs (tokens received so far), for
    /// a person's status line. Off by default.
    pub report_progress: bool,
    /// What the session, with its subagents, may spend; a subagent also stays within what
    /// each ancestor has left.
    pub budget: Budget,
    /// Prices by model name, for costs and `budget.max_cost_usd`.
    pub prices: Arc<PriceTable>,
    /// The span the session's own span goes under: the `delegate_task` call of a subagent, a
    /// board task's creator, an HTTP request's `traceparent`; a new trace when empty.
    pub trace_parent: TraceSpan,
    /// Where the session's steps are written, so it survives its process; `None` keeps it in
    /// memory only. Subagents write to their parent's journal.
    pub persist: Option<Persist>,
    /// The memory stores the `memory` tool writes to and whose snapshot a top-level session
    /// puts in its system prompt when it opens (its profile's); `None`: the session has none.
    /// Subagents share their parent's.
    pub memory: Option<Arc<MemoryStore>>,
    /// The background process registry whose notices (a process ended, printed a watched
    /// line) the session reads; `None`: no notices reach it. Subagents share their parent's.
    pub processes: Option<troupe_tools::builtin::ProcessRegistry>,
    /// Tools whose successful call ends the turn: once a batch in which one of them succeeded
    /// has finished, the turn ends with that tool's answer as its text and the model is not
    /// asked again (a board worker's `kanban_complete`: nothing is left for the model to do,
    /// and its spend is final when the tool writes it). Empty by default.
    pub end_turn_after: Vec<String>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            system_prompt: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            tool_search: ToolSearchConfig::default(),
            context_length: None,
            prompt_style: PromptStyle::default(),
            model: None,
            max_tokens: None,
            runner: RunnerLimits::default(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            delegation: DelegationConfig::default(),
            background_delegation: false,
            stream_text: false,
            report_progress: false,
            budget: Budget::default(),
            prices: Arc::new(PriceTable::default()),
            trace_parent: TraceSpan::default(),
            persist: None,
            memory: None,
            processes: None,
            end_turn_after: Vec::new(),
        }
    }
}
