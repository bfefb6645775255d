//! Model providers: the [`ModelProvider`] trait the session actor talks to, and the messages
//! that cross it. Implementations: an OpenAI-compatible HTTP provider (`openai`) and a scripted
//! provider that replays a file of assistant turns (`scripted`), for tests, examples and offline
//! runs. With the `mock-server` feature, `mock_server` serves scripts over real HTTP in the
//! OpenAI wire format, with faults, for tests in any crate. `settings` holds what differs
//! between a cloud and a local server (tool-call mode, retry budget, extra request fields);
//! `text_calls` reads tool calls written in a reply's text, for servers whose own tool-call
//! parsing fails.

#[cfg(feature = "mock-server")]
pub mod mock_server;
mod mode_memory;
mod openai;
mod openai_wire;
mod replies;
mod retry;
mod scripted;
mod settings;
mod text_calls;

pub use openai::{DEFAULT_MODEL, OpenAiConfig, OpenAiProvider};
pub use replies::{EMPTY_REPLY_NUDGE, unknown_tool_message};
pub use scripted::{CursorMode, Script, ScriptError, ScriptToolCall, ScriptTurn, ScriptedProvider};
pub use settings::{
    DEFAULT_RETRY_BUDGET, ProviderOverrides, ProviderSettings, SETTINGS_KEYS, SessionModelState,
    ToolCallMode,
};

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One message of a conversation, in the chat-completions shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// Instructions for the model.
    System {
        /// The text.
        content: String,
    },
    /// What the user said.
    User {
        /// The text.
        content: String,
    },
    /// What the model said: text, tool calls, or both.
    Assistant {
        /// The text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// The tool calls, in the order the model emitted them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallRequest>,
    },
    /// The result of one tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// The result text the model reads.
        content: String,
    },
}

/// A tool call as the model emitted it. `arguments` stays the raw string the model wrote: it is
/// parsed (and refused when it is not a JSON object) only when the call is planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The provider's id for the call.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as the raw JSON text the model wrote.
    pub arguments: String,
}

/// One request to a model.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call: OpenAI-style function definitions. Shared: the requests
    /// of sessions over one tool view reuse one list instead of building it for each.
    pub tools: Arc<[Value]>,
    /// Overrides the provider's configured model name.
    pub model: Option<String>,
    /// Upper bound on generated tokens.
    pub max_tokens: Option<u32>,
    /// Receives text and tool-call deltas while the answer streams, when set.
    pub stream: Option<mpsc::UnboundedSender<StreamDelta>>,
    /// Receives a notice for each retry and fallback, when set (the session turns them into
    /// events, so a person sees why a turn took longer).
    pub notices: Option<mpsc::UnboundedSender<ModelNotice>>,
    /// The session's memory across requests (turn retry budget, text tool calls), when the
    /// caller keeps one; without it each request has its own budget.
    pub state: Option<Arc<SessionModelState>>,
}

/// Why a request is being sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryReason {
    /// The server or the connection failed in a way that passes (5xx, 429, a broken stream).
    Transient,
    /// The server could not parse what the model wrote; asked again with a small change.
    UnreadableOutput,
    /// The model answered with nothing; asked again with a nudge.
    EmptyReply,
}

impl RetryReason {
    /// The word used in events.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::Transient => "transient",
            RetryReason::UnreadableOutput => "unreadable_output",
            RetryReason::EmptyReply => "empty_reply",
        }
    }
}

/// Something a provider did on the way to an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelNotice {
    /// A failed attempt is being retried.
    Retrying {
        /// 1 for the first retry of this request.
        attempt: u32,
        /// Why.
        reason: RetryReason,
        /// What failed.
        error: String,
        /// How long it waits first.
        wait: std::time::Duration,
    },
    /// The session switched how tool calls travel (from native to text).
    ToolCallsSwitched {
        /// The mode from now on.
        to: ToolCallMode,
        /// Why.
        reason: String,
    },
}

/// A piece of an answer as it streams.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamDelta {
    /// More answer text.
    Text(String),
    /// A tool call has started (its id and name are known).
    ToolCallStarted {
        /// Position of the call in the answer.
        index: usize,
        /// The tool's name.
        name: String,
    },
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// Prompt tokens the server served from its cache (part of `prompt_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A complete answer.
    Stop,
    /// It wants tool results.
    ToolCalls,
    /// It hit the token limit.
    Length,
    /// Something else the server reported.
    Other(String),
}

/// A complete model answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// Answer text, if any.
    pub content: Option<String>,
    /// Tool calls, in emission order.
    pub tool_calls: Vec<ToolCallRequest>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Token counts, when the server reported them.
    pub usage: Usage,
}

/// Why a model request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The endpoint could not be reached or the connection broke.
    #[error("cannot reach the model at {url}: {reason}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server answered with an error status after all retries.
    #[error("the model server answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The server's answer could not be understood.
    #[error("the model server sent something troupe cannot read: {0}")]
    Protocol(String),
    /// The request took longer than the configured timeout.
    #[error("the model did not answer within {seconds} s")]
    Timeout {
        /// The timeout.
        seconds: u64,
    },
    /// The request was cancelled (a stop).
    #[error("the model request was cancelled")]
    Cancelled,
    /// The provider's configuration cannot work (bad URL, missing key variable, ...).
    #[error("the model provider is misconfigured: {0}")]
    Config(String),
    /// A scripted provider ran out of turns.
    #[error("the script has no more turns (it had {turns})")]
    ScriptExhausted {
        /// How many turns it had.
        turns: usize,
    },
}

/// A chat model. Implementations are cheap to share (`Arc<dyn ModelProvider>`) and run their
/// I/O on the tokio pool; `cancel` closes the request (and its stream) early.
pub trait ModelProvider: Send + Sync + 'static {
    /// A short description for logs and the CLI ("openai-compatible at URL, model M").
    fn describe(&self) -> String;

    /// The model requests go to when they name none, for pricing; `None` when unknown.
    fn model(&self) -> Option<String> {
        None
    }

    /// Sends one request and waits for the whole answer.
    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>>;
}
