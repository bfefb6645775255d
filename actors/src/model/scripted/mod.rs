//! The scripted model: [`ScriptedProvider`] answers from a [`Script`] of assistant turns (text
//! and tool calls) instead of asking a real model. Tests, examples, benches and offline runs use
//! it; the mock HTTP server (`mock_server`, feature `mock-server`) serves the same scripts over
//! the wire. The script format is documented on [`Script`].

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    ChatMessage, FinishReason, ModelError, ModelProvider, ModelRequest, ModelResponse, StreamDelta,
    ToolCallRequest, Usage,
};

/// A script of assistant turns, read from YAML or JSON or built in code.
///
/// # Format
///
/// ```yaml
/// cursor: conversation        # optional: `conversation` (default) or `sequential`
/// when_exhausted: "Done."     # optional: the answer once no turn is left (else an error)
/// turns:
///   - text: "Let me look at the README."
///     tool_calls:
///       - name: read_file
///         arguments: {path: README.md}   # an object, or a string sent exactly as written
///   - match: "# troupe"       # optional: only when the new input contains this text
///     delay_ms: 200           # optional: wait this long before answering
///     text: "It describes troupe."
/// ```
///
/// A bare list of turns (`- text: ...`) is accepted as well. A turn needs `text`, `tool_calls`
/// or both; a tool call may also give an `id` (otherwise it is `call_<turn>_<n>`, counted from 1
/// and 0, so the same script always yields the same ids).
///
/// **Which turn answers.** Each request gets the first turn, in file order, that this
/// conversation has not used yet and whose `match` (if any) occurs in one of the user or tool
/// messages that arrived since the model last spoke. With `cursor: conversation` the turns a
/// conversation already used are worked out from its own earlier assistant messages, so one
/// provider serves any number of sessions at once, each with its own place in the script.
/// With `cursor: sequential` one cursor per provider (or mock server) walks the script whatever
/// the conversation; give each session its own with [`ScriptedProvider::fork`].
///
/// ```
/// use troupe_actors::model::Script;
///
/// let script = Script::from_yaml_str("- text: hello\n- text: bye\n").unwrap();
/// assert_eq!(script.turns.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// How the place in the script is kept.
    #[serde(default)]
    pub cursor: CursorMode,
    /// The answer once no turn is left; without it an exhausted script is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_exhausted: Option<String>,
    /// The assistant turns, in order.
    #[serde(default)]
    pub turns: Vec<ScriptTurn>,
}

/// How a script keeps its place; see [`Script`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorMode {
    /// Each conversation's place is derived from its own assistant messages.
    #[default]
    Conversation,
    /// One cursor per provider (or mock server), moved by every request.
    Sequential,
}

/// One scripted assistant turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// Only answer when the new input contains this text.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    /// The answer text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Milliseconds to wait before answering (a cancel ends the wait).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// The token counts to report, as a server would (`prompt_tokens`, `completion_tokens`,
    /// `cached_tokens`); estimated from the text when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// The call id; `call_<turn>_<n>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments: a JSON object, or a string sent exactly as written (to script malformed
    /// arguments).
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

/// A script that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("script {origin}: {reason}")]
pub struct ScriptError {
    /// Where the script came from: a path, or "(inline)".
    pub origin: String,
    /// What is wrong and what to write instead.
    pub reason: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

const INLINE: &str = "(inline)";

impl Script {
    /// An empty script (conversation cursor, no final text); add turns with [`Script::turn`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a turn at the end.
    pub fn turn(mut self, turn: ScriptTurn) -> Self {
        self.turns.push(turn);
        self
    }

    /// Sets how the place in the script is kept.
    pub fn with_cursor(mut self, cursor: CursorMode) -> Self {
        self.cursor = cursor;
        self
    }

    /// Answers with this text once no turn is left, instead of an error.
    pub fn when_exhausted(mut self, text: impl Into<String>) -> Self {
        self.when_exhausted = Some(text.into());
        self
    }

    /// Reads a script written in YAML (JSON is accepted too, as YAML contains it).
    pub fn from_yaml_str(text: &str) -> Result<Self, ScriptError> {
        Self::parse_yaml(text, INLINE)
    }

    /// Reads a script written in JSON.
    pub fn from_json_str(text: &str) -> Result<Self, ScriptError> {
        Self::parse_json(text, INLINE)
    }

    /// Reads a script file: `.json` as JSON, anything else as YAML.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScriptError {
            origin: origin.clone(),
            reason: format!("cannot read the file ({e}); check the path"),
        })?;
        let is_json = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
        if is_json {
            Self::parse_json(&text, &origin)
        } else {
            Self::parse_yaml(&text, &origin)
        }
    }

    fn parse_yaml(text: &str, origin: &str) -> Result<Self, ScriptError> {
        check_limits(text, origin)?;
        let invalid = |e: serde_norway::Error| ScriptError {
            origin: origin.to_string(),
            reason: format!("{e}"),
        };
        // Look at the shape first, then parse the text again as that shape, so errors keep
        // their line numbers.
        let shape: serde_norway::Value = serde_norway::from_str(text).map_err(invalid)?;
        let script = match shape {
            serde_norway::Value::Sequence(_) => Script {
                turns: serde_norway::from_str(text).map_err(invalid)?,
                ..Script::default()
            },
            serde_norway::Value::Mapping(_) => serde_norway::from_str(text).map_err(invalid)?,
            serde_norway::Value::Null => Script::default(),
            _ => return Err(shape_error(origin)),
        };
        script.checked(origin)
    }

    fn parse_json(text: &str, origin: &str) -> Result<Self, ScriptError> {
        check_limits(text, origin)?;
        let invalid = |e: serde_json::Error| ScriptError {
            origin: origin.to_string(),
            reason: format!("{e}"),
        };
        let shape: Value = serde_json::from_str(text).map_err(invalid)?;
        let script = match shape {
            Value::Array(_) => Script {
                turns: serde_json::from_str(text).map_err(invalid)?,
                ..Script::default()
            },
            Value::Object(_) => serde_json::from_str(text).map_err(invalid)?,
            _ => return Err(shape_error(origin)),
        };
        script.checked(origin)
    }

    fn checked(self, origin: &str) -> Result<Self, ScriptError> {
        self.validate().map_err(|reason| ScriptError {
            origin: origin.to_string(),
            reason,
        })?;
        Ok(self)
    }

    /// Checks what serde cannot: every turn says something, every call names a tool and has
    /// object or string arguments. Returns what is wrong and how to fix it.
    pub fn validate(&self) -> Result<(), String> {
        for (t, turn) in self.turns.iter().enumerate() {
            let number = t + 1;
            if turn.text.is_none() && turn.tool_calls.is_empty() {
                return Err(format!(
                    "turn {number} has neither `text` nor `tool_calls`; give it one or both"
                ));
            }
            for (c, call) in turn.tool_calls.iter().enumerate() {
                if call.name.trim().is_empty() {
                    return Err(format!(
                        "tool call {} of turn {number} has an empty `name`; write the tool's name",
                        c + 1
                    ));
                }
                if !matches!(call.arguments, Value::Object(_) | Value::String(_)) {
                    return Err(format!(
                        "the `arguments` of tool call {} ({}) in turn {number} must be an object \
                         like {{path: README.md}}, or a string to send exactly as written",
                        c + 1,
                        call.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The first unused turn that fits the new input, if any.
    fn pick(&self, used: &[bool], fresh_input: &[&str]) -> Option<usize> {
        self.turns.iter().enumerate().position(|(i, turn)| {
            !used.get(i).copied().unwrap_or(false)
                && turn
                    .matches
                    .as_deref()
                    .is_none_or(|needle| fresh_input.iter().any(|text| text.contains(needle)))
        })
    }

    /// Picks the turn for a conversation by replaying the choices behind its earlier
    /// assistant messages (the conversation cursor).
    pub(crate) fn pick_for_conversation<'a>(
        &self,
        conversation: impl IntoIterator<Item = Said<'a>>,
    ) -> Option<usize> {
        let mut used = vec![false; self.turns.len()];
        let mut fresh: Vec<&str> = Vec::new();
        for said in conversation {
            match said {
                Said::Input(text) => fresh.push(text),
                Said::Model => {
                    if let Some(i) = self.pick(&used, &fresh) {
                        used[i] = true;
                    }
                    fresh.clear();
                }
                Said::Other => {}
            }
        }
        self.pick(&used, &fresh)
    }

    /// Picks the turn for a request with a shared cursor, marking it used.
    pub(crate) fn pick_sequential<'a>(
        &self,
        used: &mut Vec<bool>,
        conversation: impl IntoIterator<Item = Said<'a>>,
    ) -> Option<usize> {
        used.resize(self.turns.len(), false);
        let mut fresh: Vec<&str> = Vec::new();
        for said in conversation {
            match said {
                Said::Input(text) => fresh.push(text),
                Said::Model => fresh.clear(),
                Said::Other => {}
            }
        }
        let index = self.pick(used, &fresh)?;
        used[index] = true;
        Some(index)
    }

    /// The tool calls of turn `index` (0-based), with their final ids and argument text.
    pub(crate) fn calls_of(&self, index: usize) -> Vec<ToolCallRequest> {
        let Some(turn) = self.turns.get(index) else {
            return Vec::new();
        };
        turn.tool_calls
            .iter()
            .enumerate()
            .map(|(n, call)| ToolCallRequest {
                id: call
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{n}", index + 1)),
                name: call.name.clone(),
                arguments: match &call.arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            })
            .collect()
    }
}

/// Refuses a script too large or too deeply nested to parse (checked first: the parser would
/// take minutes on a deeply nested file).
fn check_limits(text: &str, origin: &str) -> Result<(), ScriptError> {
    troupe_tools::input_limits::check_config_text(text, origin).map_err(|e| {
        let message = e.to_string();
        ScriptError {
            origin: origin.to_string(),
            reason: message
                .strip_prefix(&format!("{origin}: "))
                .unwrap_or(&message)
                .to_string(),
        }
    })
}

fn shape_error(origin: &str) -> ScriptError {
    ScriptError {
        origin: origin.to_string(),
        reason: "expected a list of turns, or a map with `turns` (and optionally `cursor`, \
                 `when_exhausted`)"
            .to_string(),
    }
}

/// One message of a conversation as turn selection sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Said<'a> {
    /// A user or tool message: new input that `match` looks at.
    Input(&'a str),
    /// An assistant message: the model spoke (one turn was used).
    Model,
    /// Anything else (system prompts).
    Other,
}

impl<'a> From<&'a ChatMessage> for Said<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        match message {
            ChatMessage::User { content } | ChatMessage::Tool { content, .. } => {
                Said::Input(content)
            }
            ChatMessage::Assistant { .. } => Said::Model,
            ChatMessage::System { .. } => Said::Other,
        }
    }
}

impl ScriptTurn {
    /// A turn that answers with text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A turn that calls one tool.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::default().with_tool_call(name, arguments)
    }

    /// Adds answer text.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Adds a tool call (an object, or a string sent as written).
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push(ScriptToolCall {
            id: None,
            name: name.into(),
            arguments,
        });
        self
    }

    /// Answers only when the new input contains `needle`.
    pub fn when_input_contains(mut self, needle: impl Into<String>) -> Self {
        self.matches = Some(needle.into());
        self
    }

    /// Reports these token counts (prompt, generated) instead of an estimate.
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some(Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens: 0,
        });
        self
    }

    /// Waits this long before answering.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }
}

/// A rough token count (four characters a token) for scripted answers, which have no
/// tokenizer; it keeps usage figures non-zero and proportional to the text.
pub(crate) fn estimate_tokens(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

fn message_chars(message: &ChatMessage) -> usize {
    match message {
        ChatMessage::System { content }
        | ChatMessage::User { content }
        | ChatMessage::Tool { content, .. } => content.len(),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            content.as_deref().map_or(0, str::len)
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
        }
    }
}

/// A [`ModelProvider`] that answers from a [`Script`].
///
/// Clones share the script and, in sequential mode, the cursor; [`ScriptedProvider::fork`]
/// gives a provider with the same script and a cursor of its own.
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    /// The turns, shared by every fork.
    script: Arc<Script>,
    /// Which turns the sequential cursor has used (unused in conversation mode).
    used: Arc<Mutex<Vec<bool>>>,
    /// Where the script came from, for `describe`.
    origin: Arc<str>,
}

impl ScriptedProvider {
    /// A provider over a script built in code or already read.
    pub fn new(script: Script) -> Self {
        Self::with_origin(script, INLINE)
    }

    /// A provider over a script file (see [`Script::load`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        Ok(Self::with_origin(
            Script::load(path)?,
            &path.display().to_string(),
        ))
    }

    fn with_origin(script: Script, origin: &str) -> Self {
        Self {
            script: Arc::new(script),
            used: Arc::new(Mutex::new(Vec::new())),
            origin: Arc::from(origin),
        }
    }

    /// The same script with a fresh sequential cursor (for one more session).
    pub fn fork(&self) -> Self {
        Self {
            script: Arc::clone(&self.script),
            used: Arc::new(Mutex::new(Vec::new())),
            origin: Arc::clone(&self.origin),
        }
    }

    /// The script being replayed.
    pub fn script(&self) -> &Script {
        &self.script
    }

    fn pick(&self, messages: &[ChatMessage]) -> Option<usize> {
        let said = messages.iter().map(Said::from);
        match self.script.cursor {
            CursorMode::Conversation => self.script.pick_for_conversation(said),
            CursorMode::Sequential => {
                // A poisoned lock only means another request panicked mid-pick; the flags
                // are still usable.
                let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
                self.script.pick_sequential(&mut used, said)
            }
        }
    }

    /// Gives a turn back to the sequential cursor after its request was cancelled.
    fn release(&self, index: usize) {
        if self.script.cursor == CursorMode::Sequential {
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(flag) = used.get_mut(index) {
                *flag = false;
            }
        }
    }

    async fn answer(
        self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelResponse, ModelError> {
        if cancel.is_cancelled() {
            return Err(ModelError::Cancelled);
        }
        let prompt_tokens = estimate_tokens(request.messages.iter().map(message_chars).sum());
        let Some(index) = self.pick(&request.messages) else {
            return match &self.script.when_exhausted {
                Some(text) => {
                    forward(&request, Some(text), &[]);
                    Ok(ModelResponse {
                        content: Some(text.clone()),
                        tool_calls: Vec::new(),
                        finish_reason: FinishReason::Stop,
                        usage: Usage {
                            prompt_tokens,
                            completion_tokens: estimate_tokens(text.len()),
                            cached_tokens: 0,
                        },
                    })
                }
                None => Err(ModelError::ScriptExhausted {
                    turns: self.script.turns.len(),
                }),
            };
        };
        let turn = &self.script.turns[index];
        tracing::debug!(turn = index + 1, origin = %self.origin, "scripted model answers");
        if turn.delay_ms > 0 {
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.release(index);
                    return Err(ModelError::Cancelled);
                }
                () = tokio::time::sleep(Duration::from_millis(turn.delay_ms)) => {}
            }
        }
        let tool_calls = self.script.calls_of(index);
        forward(&request, turn.text.as_deref(), &tool_calls);
        let completion_chars = turn.text.as_deref().map_or(0, str::len)
            + tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>();
        Ok(ModelResponse {
            content: turn.text.clone(),
            finish_reason: if tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            },
            tool_calls,
            usage: turn.usage.unwrap_or(Usage {
                prompt_tokens,
                completion_tokens: estimate_tokens(completion_chars),
                cached_tokens: 0,
            }),
        })
    }
}

/// Streams a scripted answer to the request's listener, word by word, as a real model would.
fn forward(request: &ModelRequest, text: Option<&str>, calls: &[ToolCallRequest]) {
    let Some(sink) = &request.stream else {
        return;
    };
    // A listener that went away is not an error: the answer is still returned.
    for piece in text.unwrap_or_default().split_inclusive(' ') {
        let _ = sink.send(StreamDelta::Text(piece.to_string()));
    }
    for (index, call) in calls.iter().enumerate() {
        let _ = sink.send(StreamDelta::ToolCallStarted {
            index,
            name: call.name.clone(),
        });
    }
}

impl ModelProvider for ScriptedProvider {
    fn describe(&self) -> String {
        format!(
            "scripted model ({} turns, from {})",
            self.script.turns.len(),
            self.origin
        )
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        Box::pin(self.clone().answer(request, cancel))
    }
}

#[cfg(test)]
mod tests;
