//! The chat-completions wire format as troupe writes and reads it: the request body built from
//! a [`ModelRequest`], lenient types for answers from the many servers that speak the protocol
//! (OpenAI, OpenRouter, vLLM, llama.cpp, Ollama), and the [`Assembler`] that folds streamed
//! chunks (or one whole answer) into a [`ModelResponse`]. Used by the OpenAI provider; the mock
//! server reads request messages with [`said_of_wire_message`].

use serde::Deserialize;
use serde_json::{Map, Value, json};
use troupe_tools::text::clip_bytes;

#[cfg(any(test, feature = "mock-server"))]
use super::scripted::Said;
use super::{
    ChatMessage, FinishReason, ModelError, ModelRequest, ModelResponse, StreamDelta,
    ToolCallRequest, Usage,
};

/// The JSON body of one chat-completions request.
pub(crate) fn request_body(
    model: &str,
    request: &ModelRequest,
    default_max_tokens: Option<u32>,
    stream: bool,
    extra: &Map<String, Value>,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model));
    body.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(wire_message).collect()),
    );
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(request.tools.iter().map(wire_tool).collect()),
        );
        body.insert("tool_choice".into(), Value::from("auto"));
        body.insert("parallel_tool_calls".into(), Value::Bool(true));
    }
    if let Some(max) = request.max_tokens.or(default_max_tokens) {
        body.insert("max_tokens".into(), Value::from(max));
    }
    body.insert("stream".into(), Value::Bool(stream));
    if stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    // Configured extras (temperature, provider routing, ...) may add or replace fields.
    for (key, value) in extra {
        body.insert(key.clone(), value.clone());
    }
    Value::Object(body)
}

/// One message in the wire shape: assistant tool calls become `{id, type, function}`.
fn wire_message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::System { content } => json!({"role": "system", "content": content}),
        ChatMessage::User { content } => json!({"role": "user", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut out = Map::new();
            out.insert("role".into(), Value::from("assistant"));
            out.insert(
                "content".into(),
                match content {
                    Some(text) => Value::from(text.as_str()),
                    // OpenAI allows a null content only beside tool calls.
                    None if !tool_calls.is_empty() => Value::Null,
                    None => Value::from(""),
                },
            );
            if !tool_calls.is_empty() {
                let calls = tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        })
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(out)
        }
        ChatMessage::Tool {
            tool_call_id,
            name,
            content,
        } => {
            json!({"role": "tool", "tool_call_id": tool_call_id, "name": name, "content": content})
        }
    }
}

/// A tool definition in the wire shape; a bare `{name, description, parameters}` is wrapped.
fn wire_tool(tool: &Value) -> Value {
    if tool.get("function").is_some() {
        tool.clone()
    } else {
        json!({"type": "function", "function": tool})
    }
}

/// How selection of a scripted turn reads one wire message (for the mock server).
#[cfg(any(test, feature = "mock-server"))]
pub(crate) fn said_of_wire_message(message: &Value) -> Said<'_> {
    match message.get("role").and_then(Value::as_str) {
        Some("assistant") => Said::Model,
        Some("user" | "tool" | "function") => match message.get("content") {
            Some(Value::String(text)) => Said::Input(text),
            // Parts: selection looks at the first text part, which is where the words are.
            Some(Value::Array(parts)) => parts
                .iter()
                .find_map(|part| part.get("text").and_then(Value::as_str))
                .map_or(Said::Input(""), Said::Input),
            _ => Said::Input(""),
        },
        _ => Said::Other,
    }
}

/// One answer or one streamed chunk. Every field is optional and typed loosely, because
/// servers differ: `null` where others omit, objects where others send strings.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireCompletion {
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChoice {
    index: Option<Value>,
    message: Option<WireMessage>,
    delta: Option<WireMessage>,
    finish_reason: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessage {
    content: Option<Value>,
    tool_calls: Option<Vec<WireToolCall>>,
    /// The pre-tools form some older servers still send.
    function_call: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireToolCall {
    index: Option<Value>,
    id: Option<Value>,
    function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunction {
    name: Option<Value>,
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    prompt_tokens: Option<Value>,
    completion_tokens: Option<Value>,
    /// The names some servers use instead.
    input_tokens: Option<Value>,
    output_tokens: Option<Value>,
    /// Cached prompt tokens: OpenAI's `prompt_tokens_details.cached_tokens`, the Responses
    /// form `input_tokens_details.cached_tokens`, Anthropic-style `cache_read_input_tokens`.
    prompt_tokens_details: Option<Value>,
    input_tokens_details: Option<Value>,
    cache_read_input_tokens: Option<Value>,
}

impl WireCompletion {
    /// Characters of model output (text, call names and arguments) the answer or chunk
    /// carries: how much the model wrote, for a person's progress line.
    pub(crate) fn output_chars(&self) -> usize {
        let text_len = |value: &Option<Value>| match value {
            Some(Value::String(text)) => text.chars().count(),
            Some(Value::Null) | None => 0,
            Some(other) => other.to_string().len(),
        };
        let mut chars = 0;
        for choice in self.choices.iter().flatten() {
            for message in [&choice.message, &choice.delta].into_iter().flatten() {
                chars += text_len(&message.content);
                let calls = message
                    .tool_calls
                    .iter()
                    .flatten()
                    .filter_map(|c| c.function.as_ref());
                for function in calls.chain(message.function_call.as_ref()) {
                    chars += text_len(&function.name) + text_len(&function.arguments);
                }
            }
        }
        chars
    }

    /// The error message a server put in a 200 answer or a stream chunk, if any.
    /// Control characters are escaped: the text comes from the server and is shown on
    /// terminals and in logs.
    pub(crate) fn error_message(&self) -> Option<String> {
        let error = self.error.as_ref()?;
        let message = match error {
            Value::Null => None,
            Value::String(text) => Some(text.clone()),
            Value::Object(fields) => Some(
                fields
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_string),
            ),
            other => Some(other.to_string()),
        };
        message.map(|m| troupe_tools::text::escape_controls(&m))
    }
}

/// The message of an error body (`{"error": {"message": ...}}` and its variants), or the start
/// of the body as text.
pub(crate) fn error_body_message(body: &str) -> String {
    if let Ok(parsed) = serde_json::from_str::<WireCompletion>(body)
        && let Some(message) = parsed.error_message()
    {
        return message;
    }
    if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(body)
        && let Some(message) = fields
            .get("message")
            .or_else(|| fields.get("detail"))
            .and_then(Value::as_str)
    {
        return troupe_tools::text::escape_controls(message);
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        "(empty body)".to_string()
    } else {
        troupe_tools::text::escape_controls(&clip_bytes(trimmed, 500))
    }
}

/// A tool call being put together from deltas.
#[derive(Debug, Default)]
struct PartialCall {
    /// The server's index for it, when it sent one.
    wire_index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
    /// Whether `ToolCallStarted` went out for it.
    announced: bool,
}

/// Folds an answer, streamed or whole, into a [`ModelResponse`].
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    text: String,
    calls: Vec<PartialCall>,
    finish: Option<FinishReason>,
    usage: Usage,
    /// Whether any choice, usage or finish arrived at all.
    anything: bool,
}

impl Assembler {
    /// Whether nothing of an answer has arrived yet.
    pub(crate) fn is_empty(&self) -> bool {
        !self.anything
    }

    /// Whether a finish reason arrived.
    pub(crate) fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Folds in one chunk (`whole` for a non-streamed answer, where each listed tool call is
    /// complete) and pushes what the listener should see onto `out`. A chunk that carries an
    /// error becomes that error.
    pub(crate) fn push(
        &mut self,
        chunk: WireCompletion,
        whole: bool,
        out: &mut Vec<StreamDelta>,
    ) -> Result<(), ModelError> {
        if let Some(message) = chunk.error_message() {
            return Err(ModelError::Protocol(format!(
                "the server reported an error instead of an answer: {message}"
            )));
        }
        if let Some(usage) = chunk.usage {
            self.anything = true;
            let count = |a: Option<Value>, b: Option<Value>| {
                a.as_ref()
                    .and_then(token_count)
                    .or_else(|| b.as_ref().and_then(token_count))
            };
            if let Some(n) = count(usage.prompt_tokens, usage.input_tokens) {
                self.usage.prompt_tokens = n;
            }
            if let Some(n) = count(usage.completion_tokens, usage.output_tokens) {
                self.usage.completion_tokens = n;
            }
            let details = [usage.prompt_tokens_details, usage.input_tokens_details];
            let cached = details
                .iter()
                .flatten()
                .find_map(|d| d.get("cached_tokens").and_then(token_count))
                .or_else(|| usage.cache_read_input_tokens.as_ref().and_then(token_count));
            if let Some(n) = cached {
                self.usage.cached_tokens = n;
            }
        }
        for choice in chunk.choices.unwrap_or_default() {
            // Only the first choice is used (troupe never asks for more than one).
            if choice
                .index
                .as_ref()
                .and_then(token_count)
                .is_some_and(|i| i != 0)
            {
                continue;
            }
            self.anything = true;
            for message in [choice.message, choice.delta].into_iter().flatten() {
                self.fold_message(message, whole, out);
            }
            if let Some(reason) = choice.finish_reason.as_ref().and_then(finish_reason) {
                self.finish = Some(reason);
            }
        }
        Ok(())
    }

    fn fold_message(&mut self, message: WireMessage, whole: bool, out: &mut Vec<StreamDelta>) {
        if let Some(content) = message.content {
            let mut text = String::new();
            content_text(&content, &mut text);
            if !text.is_empty() {
                self.text.push_str(&text);
                out.push(StreamDelta::Text(text));
            }
        }
        for call in message.tool_calls.unwrap_or_default() {
            let wire_index = call.index.as_ref().and_then(token_count);
            let id = call
                .id
                .as_ref()
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            let slot = self.slot_for(wire_index, id, whole);
            self.fold_call(slot, id, call.function.unwrap_or_default(), out);
        }
        if let Some(function) = message.function_call {
            let slot = self.slot_for(Some(0), None, whole);
            self.fold_call(slot, None, function, out);
        }
    }

    /// Which partial call a delta belongs to: the one with its index, unless it carries a
    /// different id (some servers reuse index 0); without an index, the last one (or a new one
    /// in a whole answer, where each entry is its own call).
    fn slot_for(&mut self, wire_index: Option<u64>, id: Option<&str>, whole: bool) -> usize {
        let differs = |call: &PartialCall| matches!((id, call.id.as_deref()), (Some(new), Some(old)) if new != old);
        let existing = match wire_index {
            _ if whole => None,
            Some(index) => self.calls.iter().rposition(|c| c.wire_index == Some(index)),
            None => self.calls.len().checked_sub(1),
        };
        match existing {
            Some(slot) if !differs(&self.calls[slot]) => slot,
            _ => {
                self.calls.push(PartialCall {
                    wire_index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        }
    }

    fn fold_call(
        &mut self,
        slot: usize,
        id: Option<&str>,
        function: WireFunction,
        out: &mut Vec<StreamDelta>,
    ) {
        let call = &mut self.calls[slot];
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        if let Some(name) = function.name.as_ref().and_then(Value::as_str)
            && call.name.is_empty()
        {
            call.name = name.to_string();
        }
        match function.arguments {
            // Fragments of the argument text, in order.
            Some(Value::String(fragment)) => call.arguments.push_str(&fragment),
            // Some servers send the arguments already parsed: write them back as text.
            Some(Value::Null) | None => {}
            Some(parsed) => call.arguments = parsed.to_string(),
        }
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            out.push(StreamDelta::ToolCallStarted {
                index: slot,
                name: call.name.clone(),
            });
        }
    }

    /// The finished answer. Ids the server left out are made up; empty arguments become `{}`;
    /// a missing finish reason (or `stop` beside tool calls) is read from what arrived.
    pub(crate) fn finish(self) -> ModelResponse {
        let tool_calls: Vec<ToolCallRequest> = self
            .calls
            .into_iter()
            .map(|call| ToolCallRequest {
                id: call
                    .id
                    .unwrap_or_else(|| format!("call_{}", uuid::Uuid::now_v7().simple())),
                name: call.name,
                arguments: if call.arguments.trim().is_empty() {
                    "{}".to_string()
                } else {
                    call.arguments
                },
            })
            .collect();
        let finish_reason = match self.finish {
            None | Some(FinishReason::Stop) if !tool_calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
            Some(reason) => reason,
        };
        ModelResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls,
            finish_reason,
            usage: self.usage,
        }
    }
}

/// The text in a `content` value: a string, or a list of parts (strings or `{text}` objects).
fn content_text(content: &Value, out: &mut String) {
    match content {
        Value::String(text) => out.push_str(text),
        Value::Array(parts) => {
            for part in parts {
                match part {
                    Value::String(text) => out.push_str(text),
                    Value::Object(fields) => {
                        let kind = fields.get("type").and_then(Value::as_str).unwrap_or("text");
                        if matches!(kind, "text" | "output_text")
                            && let Some(text) = fields.get("text").and_then(Value::as_str)
                        {
                            out.push_str(text);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// A count or index from a number or a numeric string.
fn token_count(value: &Value) -> Option<u64> {
    troupe_tools::lenient::py_int(value).and_then(|n| u64::try_from(n).ok())
}

/// A finish reason, or `None` for "not yet" (`null`, `""`, anything not a string).
fn finish_reason(value: &Value) -> Option<FinishReason> {
    let text = value.as_str()?.trim();
    Some(match text {
        "" => return None,
        "stop" | "eos" | "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
        "length" | "max_tokens" => FinishReason::Length,
        other => FinishReason::Other(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(chunks: &[&str]) -> (ModelResponse, Vec<StreamDelta>) {
        let mut assembler = Assembler::default();
        let mut out = Vec::new();
        for chunk in chunks {
            let parsed: WireCompletion = serde_json::from_str(chunk).unwrap();
            assembler.push(parsed, false, &mut out).unwrap();
        }
        (assembler.finish(), out)
    }

    fn whole(body: &str) -> ModelResponse {
        let mut assembler = Assembler::default();
        let parsed: WireCompletion = serde_json::from_str(body).unwrap();
        assembler.push(parsed, true, &mut Vec::new()).unwrap();
        assembler.finish()
    }

    #[test]
    fn openai_stream_with_split_tool_calls() {
        // The shape OpenAI streams: id and name first, then argument fragments, usage last.
        let (response, deltas) = fold(&[
            r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"search_files","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"a\"}"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"pattern\":\"x\"}"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":8}}}"#,
        ]);
        assert_eq!(response.content, None);
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            response.usage,
            Usage {
                prompt_tokens: 12,
                completion_tokens: 7,
                cached_tokens: 8,
            }
        );
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCallRequest {
                    id: "call_a".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path": "a"}"#.into()
                },
                ToolCallRequest {
                    id: "call_b".into(),
                    name: "search_files".into(),
                    arguments: r#"{"pattern":"x"}"#.into()
                },
            ]
        );
        assert_eq!(
            deltas,
            vec![
                StreamDelta::ToolCallStarted {
                    index: 0,
                    name: "read_file".into()
                },
                StreamDelta::ToolCallStarted {
                    index: 1,
                    name: "search_files".into()
                },
            ]
        );
    }

    #[test]
    fn text_stream_with_empty_finish_reasons_and_empty_usage() {
        // llama.cpp and some proxies send "" for "not finished"; others send `usage: {}`.
        let (response, deltas) = fold(&[
            r#"{"choices":[{"delta":{"role":"assistant"},"finish_reason":""}],"usage":{}}"#,
            r#"{"choices":[{"delta":{"content":"Hel"},"finish_reason":""}]}"#,
            r#"{"choices":[{"delta":{"content":"lo"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(response.content.as_deref(), Some("Hello"));
        assert_eq!(response.finish_reason, FinishReason::Stop);
        assert_eq!(response.usage, Usage::default());
        assert_eq!(
            deltas,
            vec![
                StreamDelta::Text("Hel".into()),
                StreamDelta::Text("lo".into())
            ]
        );
    }

    #[test]
    fn unknown_finish_reasons_are_kept() {
        let (response, _) =
            fold(&[r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"content_filter"}]}"#]);
        assert_eq!(
            response.finish_reason,
            FinishReason::Other("content_filter".into())
        );
        let (response, _) =
            fold(&[r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"length"}]}"#]);
        assert_eq!(response.finish_reason, FinishReason::Length);
        // No finish reason at all: decided by what arrived.
        let (response, _) = fold(&[r#"{"choices":[{"delta":{"content":"x"}}]}"#]);
        assert_eq!(response.finish_reason, FinishReason::Stop);
    }

    #[test]
    fn ollama_whole_answer_with_object_arguments_and_no_ids() {
        let response = whole(
            r#"{"model":"qwen","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[
                {"function":{"name":"read_file","arguments":{"path":"README.md"}}},
                {"function":{"name":"list","arguments":""}}]},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":"30","completion_tokens":4.0}}"#,
        );
        assert_eq!(response.tool_calls.len(), 2);
        assert!(response.tool_calls[0].id.starts_with("call_"));
        assert_ne!(response.tool_calls[0].id, response.tool_calls[1].id);
        assert_eq!(response.tool_calls[0].arguments, r#"{"path":"README.md"}"#);
        assert_eq!(response.tool_calls[1].arguments, "{}");
        // "stop" beside tool calls means the model wants the results.
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.content, None);
        assert_eq!(
            response.usage,
            Usage {
                prompt_tokens: 30,
                completion_tokens: 4,
                cached_tokens: 0,
            }
        );
    }

    #[test]
    fn content_as_parts_and_nulls_everywhere() {
        let response = whole(
            r#"{"id":null,"choices":[{"index":0,"message":{"role":"assistant","content":[
                {"type":"text","text":"Part one. "},{"type":"image_url","image_url":{}},"Part two."],
                "tool_calls":null},"finish_reason":null}],"usage":null}"#,
        );
        assert_eq!(response.content.as_deref(), Some("Part one. Part two."));
        assert!(response.tool_calls.is_empty());
        assert_eq!(response.finish_reason, FinishReason::Stop);
    }

    #[test]
    fn deltas_without_index_and_reused_index_with_new_ids() {
        // A server that sends no index: fragments belong to the last call.
        let (response, _) = fold(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"one","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#,
            // index 0 again, but a new id: a second call.
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"two","arguments":"{}"}}]}}]}"#,
            // The same id repeated with a fragment stays on its call.
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"two","arguments":""}}]}}],"usage":{"input_tokens":5,"output_tokens":2}}"#,
        ]);
        let got: Vec<(&str, &str, &str)> = response
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(got, vec![("a", "one", r#"{"x":1}"#), ("b", "two", "{}")]);
        assert_eq!(
            response.usage,
            Usage {
                prompt_tokens: 5,
                completion_tokens: 2,
                cached_tokens: 0,
            }
        );
    }

    #[test]
    fn legacy_function_call_and_other_choices() {
        let (response, _) = fold(&[
            r#"{"choices":[{"index":1,"delta":{"content":"ignored"}},{"index":0,"delta":{"function_call":{"name":"f","arguments":"{\"a\":"}}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"function_call":{"arguments":"2}"}},"finish_reason":"function_call"}]}"#,
        ]);
        assert_eq!(response.content, None);
        assert_eq!(response.tool_calls[0].name, "f");
        assert_eq!(response.tool_calls[0].arguments, r#"{"a":2}"#);
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn error_chunks_and_error_bodies() {
        let chunk: WireCompletion =
            serde_json::from_str(r#"{"error":{"message":"upstream overloaded","code":502}}"#)
                .unwrap();
        let err = Assembler::default()
            .push(chunk, false, &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("upstream overloaded"), "{err}");

        assert_eq!(
            error_body_message(r#"{"error":{"message":"Incorrect API key provided"}}"#),
            "Incorrect API key provided"
        );
        assert_eq!(
            error_body_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_body_message(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(error_body_message("  "), "(empty body)");
        assert_eq!(
            error_body_message("<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
    }

    #[test]
    fn request_body_carries_tools_streaming_and_history() {
        let request = ModelRequest {
            messages: vec![
                ChatMessage::System {
                    content: "be brief".into(),
                },
                ChatMessage::User {
                    content: "read it".into(),
                },
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![ToolCallRequest {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: "{}".into(),
                    }],
                },
                ChatMessage::Tool {
                    tool_call_id: "c1".into(),
                    name: "read_file".into(),
                    content: "text".into(),
                },
            ],
            tools: vec![
                json!({"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}),
                json!({"name": "bare", "parameters": {"type": "object"}}),
            ]
            .into(),
            model: None,
            max_tokens: Some(64),
            stream: None,
            notices: None,
            state: None,
        };
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0));
        let body = request_body("m", &request, Some(10), true, &extra);
        assert_eq!(body["model"], "m");
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["temperature"], 0);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["parallel_tool_calls"], true);
        assert_eq!(
            body["tools"][1],
            json!({"type": "function", "function": {"name": "bare", "parameters": {"type": "object"}}})
        );
        assert_eq!(
            body["messages"][2],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]})
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "c1");

        let plain = ModelRequest {
            tools: Vec::new().into(),
            max_tokens: None,
            ..request
        };
        let body = request_body("m", &plain, None, false, &Map::new());
        for absent in [
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "stream_options",
            "max_tokens",
        ] {
            assert!(body.get(absent).is_none(), "{absent} should be absent");
        }
        assert_eq!(body["stream"], false);
    }

    #[test]
    fn wire_messages_read_back_for_turn_selection() {
        let said: Vec<String> = [
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": [{"type": "text", "text": "hello"}]}),
            json!({"role": "assistant", "content": null}),
            json!({"role": "tool", "content": "result"}),
        ]
        .iter()
        .map(|m| format!("{:?}", said_of_wire_message(m)))
        .collect();
        assert_eq!(
            said,
            vec!["Other", "Input(\"hello\")", "Model", "Input(\"result\")"]
        );
    }
}
