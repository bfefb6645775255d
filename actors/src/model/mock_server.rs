//! A mock OpenAI-compatible chat-completions server over real HTTP on 127.0.0.1, for tests in
//! any crate (feature `mock-server`). [`MockServer`] answers from a [`Script`], streamed (tool
//! calls split over several deltas) or whole, as each request asks; it records every request
//! and injects the [`Fault`]s a test queues: 429 with Retry-After, error statuses, a connection
//! dropped mid-stream, a slow stream, what real local servers do wrong (a tool-call parser
//! failing with a 500 or an error event in a stream, a stream without `[DONE]`, calls written
//! in the text in several forms, `tools` refused), or any raw answer. A request without
//! `tools` gets its calls written in the text, as a model told about tools in its prompt would.
//!
//! Another crate's tests enable it with a dev-dependency:
//! `troupe-actors = { workspace = true, features = ["mock-server"] }`, then:
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use serde_json::json;
//! use troupe_actors::model::mock_server::{Fault, MockServer};
//! use troupe_actors::model::{OpenAiConfig, Script, ScriptTurn};
//!
//! let script = Script::new()
//!     .turn(ScriptTurn::tool_call("read_file", json!({"path": "README.md"})))
//!     .turn(ScriptTurn::text("Done."));
//! let server = MockServer::start(script).await?;
//! server.push_fault(Fault::Status(500)); // the first request fails, the retry succeeds
//! let config = OpenAiConfig::new(server.url(), "any-model");
//! // ... run a session against `config`, then look at what it sent:
//! let offered = server.requests()[0].tool_names();
//! # let _ = (config, offered);
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use troupe_tools::sync::lock;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use serde_json::{Value, json};

use super::openai_wire::said_of_wire_message;
use super::scripted::{CursorMode, Script, estimate_tokens};

/// A fault the mock server plays instead of (or while) answering one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Answer 429 with this `Retry-After` value (seconds or an HTTP date), if any.
    RateLimited {
        /// The `Retry-After` header value.
        retry_after: Option<String>,
    },
    /// Answer this status with an OpenAI-style error body.
    Status(u16),
    /// Answer normally but break the connection after this many SSE events (or, for a
    /// non-streamed answer, after half the body).
    DropMidStream {
        /// Events sent before the break.
        after_events: usize,
    },
    /// Stream normally but pause this long before each event.
    SlowStream {
        /// The pause before each event.
        pause: Duration,
    },
    /// What llama.cpp does when its tool-call parser rejects the model's output: a 500 with
    /// its parser message, or, streamed, a 200 with the role chunk, an error event and no
    /// `[DONE]`.
    UnreadableOutput,
    /// Streamed: the role chunk, then an error event with this message and no `[DONE]` (an
    /// upstream failing mid-answer); whole: a 502 with it.
    StreamError {
        /// The error's message.
        message: String,
    },
    /// Streamed: the answer's deltas without the finish, the usage and `[DONE]`, then a clean
    /// close; whole: the normal answer.
    NoDone,
    /// Write this turn's tool calls in the answer's text, in this form, instead of as native
    /// `tool_calls` (a server without a tool-call parser).
    CallsInContent(CallForm),
    /// Answer 400 saying tools are not supported, when the request carries `tools`.
    RefuseTools,
    /// Answer exactly this.
    Raw {
        /// The status.
        status: u16,
        /// The `Content-Type`.
        content_type: String,
        /// The body.
        body: String,
    },
}

/// How [`Fault::CallsInContent`] (and requests without `tools`) write calls in the text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallForm {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the form Qwen's own chat
    /// template asks for.
    Tagged,
    /// The bare JSON object, troupe's told form.
    #[default]
    Bare,
    /// A fenced ```` ```json ```` block.
    Fenced,
    /// The object with every brace doubled (`{{"name": ...}}`).
    DoubledBraces,
    /// Python-style single quotes.
    SingleQuotes,
    /// A comma before every closing brace.
    TrailingCommas,
}

/// The one model `GET /models` lists unless a test sets others.
pub const MOCK_MODEL: &str = "mock-model";

/// `GET /models`: the ids set with [`MockServer::serve_models`], or 404.
async fn list_models(State(shared): State<Arc<Shared>>) -> Response {
    match lock(&shared.models).clone() {
        Some(ids) => {
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "object": "model", "owned_by": "mock"}))
                .collect();
            axum::Json(json!({"object": "list", "data": data})).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The message llama.cpp sends when its parser rejects the model's output.
pub const UNREADABLE_OUTPUT_MESSAGE: &str =
    "The model produced output that does not match the expected peg-native format";

/// One request the mock server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The JSON body (`Value::Null` when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// When it arrived.
    pub received_at: Instant,
}

impl RecordedRequest {
    /// Whether it asked for a streamed answer.
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The names of the tools it offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|tool| tool.pointer("/function/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }

    /// Its messages, as sent.
    pub fn messages(&self) -> Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
}

/// What the server's handlers share.
struct Shared {
    /// The answers.
    script: Script,
    /// The sequential cursor (used when the script asks for one).
    used: Mutex<Vec<bool>>,
    /// Faults for the next requests, first in first played.
    faults: Mutex<VecDeque<Fault>>,
    /// Every request, in arrival order.
    requests: Mutex<Vec<RecordedRequest>>,
    /// Streams whose client stopped reading before the end (a cancel, a timeout); planned
    /// breaks are not counted.
    streams_cut_short: AtomicUsize,
    /// Numbers answers, for their ids.
    answers: AtomicUsize,
    /// How calls are written for requests without `tools`.
    text_form: Mutex<CallForm>,
    /// What `GET /models` lists (`mock-model` until a test says otherwise); `None` answers
    /// 404, as a server without the route does.
    models: Mutex<Option<Vec<String>>>,
}

/// A running mock server; it stops when dropped.
pub struct MockServer {
    /// Where it listens.
    addr: SocketAddr,
    /// The state its handlers share.
    shared: Arc<Shared>,
    /// The serving task, aborted on drop.
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Starts serving `script` on a free port of 127.0.0.1 (inside the current tokio runtime).
    pub async fn start(script: Script) -> std::io::Result<MockServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script,
            used: Mutex::new(Vec::new()),
            faults: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            streams_cut_short: AtomicUsize::new(0),
            answers: AtomicUsize::new(0),
            text_form: Mutex::new(CallForm::Bare),
            models: Mutex::new(Some(vec![MOCK_MODEL.to_string()])),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            .route("/v1/models", axum::routing::get(list_models))
            .route("/models", axum::routing::get(list_models))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the mock model server stopped");
            }
        });
        Ok(MockServer { addr, shared, task })
    }

    /// The base URL to configure a provider with: `http://127.0.0.1:PORT/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a fault for the next request that has none yet.
    pub fn push_fault(&self, fault: Fault) {
        lock(&self.shared.faults).push_back(fault);
    }

    /// How calls are written in the text of answers to requests without `tools` (a model
    /// told about its tools in the prompt); tagged by default.
    pub fn set_text_call_form(&self, form: CallForm) {
        *lock(&self.shared.text_form) = form;
    }

    /// Makes `GET /models` list these ids (as llama.cpp lists the one model it serves); by
    /// default it lists [`MOCK_MODEL`].
    pub fn serve_models(&self, ids: &[&str]) {
        *lock(&self.shared.models) = Some(ids.iter().map(|id| id.to_string()).collect());
    }

    /// Makes `GET /models` answer 404, as a server without a listing does.
    pub fn no_models_route(&self) {
        *lock(&self.shared.models) = None;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// How many streamed answers the client stopped reading before their end.
    pub fn streams_cut_short(&self) -> usize {
        self.shared.streams_cut_short.load(Ordering::SeqCst)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    lock(&shared.requests).push(RecordedRequest {
        body: parsed.clone().unwrap_or(Value::Null),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        received_at: Instant::now(),
    });
    let fault = lock(&shared.faults).pop_front();
    match fault {
        Some(Fault::RateLimited { retry_after }) => {
            let mut response = error_response(429, "rate limited by the mock server");
            if let Some(value) = retry_after
                && let Ok(value) = header::HeaderValue::from_str(&value)
            {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            return response;
        }
        Some(Fault::Status(status)) => {
            return error_response(status, "the mock server was told to fail this request");
        }
        Some(Fault::RefuseTools)
            if parsed
                .as_ref()
                .and_then(|r| r.get("tools"))
                .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty())) =>
        {
            return error_response(400, "tools are not supported by this model");
        }
        Some(Fault::Raw {
            status,
            content_type,
            body,
        }) => {
            return Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, content_type)
                .body(Body::from(body))
                .unwrap_or_else(|_| {
                    error_response(500, "the mock server cannot build this raw answer")
                });
        }
        _ => {}
    }
    let Some(request) = parsed.filter(Value::is_object) else {
        return error_response(
            400,
            "the body is not a JSON object; send a chat-completions request",
        );
    };
    let Some(mut answer) = shared.answer_for(&request) else {
        return error_response(
            400,
            &format!(
                "the mock server's script has no turn left for this conversation (it has {}); \
                 add turns or `when_exhausted`",
                shared.script.turns.len()
            ),
        );
    };
    if answer.delay > Duration::ZERO {
        tokio::time::sleep(answer.delay).await;
    }
    let offers_tools = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    if let Some(Fault::CallsInContent(form)) = fault {
        answer.write_calls_in_text(form);
    } else if !offers_tools {
        let form = *lock(&shared.text_form);
        answer.write_calls_in_text(form);
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock")
        .to_string();
    let number = shared.answers.fetch_add(1, Ordering::SeqCst) + 1;
    let id = format!("chatcmpl-mock-{number}");
    let wants_stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let wants_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let failure = match &fault {
        Some(Fault::UnreadableOutput) => Some((500, UNREADABLE_OUTPUT_MESSAGE.to_string())),
        Some(Fault::StreamError { message }) => Some((502, message.clone())),
        _ => None,
    };
    if let Some((status, message)) = failure {
        if !wants_stream {
            return error_response(status, &message);
        }
        let role = json!({"id": id, "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [{"index": 0, "delta": {"role": "assistant",
            "content": null}, "finish_reason": null}]});
        let error = json!({"error": {"code": status, "message": message, "type": "server_error"}});
        let events = vec![format!("data: {role}\n\n"), format!("data: {error}\n\n")];
        return sse_response(events, Duration::ZERO, None, Arc::clone(&shared));
    }
    if wants_stream {
        let mut events = answer.sse_events(&id, &model, wants_usage);
        if fault == Some(Fault::NoDone) {
            // Keep the deltas; drop the finish chunk, the usage and [DONE].
            let keep = events.len().saturating_sub(if wants_usage { 3 } else { 2 });
            events.truncate(keep);
        }
        let (pause, drop_after) = match fault {
            Some(Fault::SlowStream { pause }) => (pause, None),
            Some(Fault::DropMidStream { after_events }) => (Duration::ZERO, Some(after_events)),
            _ => (Duration::ZERO, None),
        };
        sse_response(events, pause, drop_after, Arc::clone(&shared))
    } else {
        let body = answer.whole_body(&id, &model).to_string();
        match fault {
            Some(Fault::DropMidStream { .. }) => {
                let half = body.as_bytes()[..body.len() / 2].to_vec();
                let pieces = futures::stream::iter([Some(half), None]).then(|piece| async move {
                    match piece {
                        Some(bytes) => Ok(bytes),
                        None => {
                            // As for streams: let the first half reach the client first.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            Err(std::io::Error::other(
                                "the mock server dropped the connection on purpose",
                            ))
                        }
                    }
                });
                Response::builder()
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from_stream(pieces))
                    .unwrap_or_else(|_| error_response(500, "cannot build the broken answer"))
            }
            Some(Fault::SlowStream { pause }) => {
                tokio::time::sleep(pause).await;
                json_response(body)
            }
            _ => json_response(body),
        }
    }
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn error_response(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body =
        json!({"error": {"message": message, "type": "mock_error", "code": status.as_u16()}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A scripted answer ready to be written in either form.
struct Answer {
    text: Option<String>,
    /// (id, name, arguments text) per call.
    calls: Vec<(String, String, String)>,
    delay: Duration,
    prompt_tokens: u64,
    /// The script's token counts, when it gives them.
    usage: Option<crate::model::Usage>,
}

/// What a script writes for "the background process the conversation last named": a tool
/// call's argument text may hold it, and it is replaced by the last `proc_` id (12 hex
/// digits) in the request's messages, as a model would copy it from a result.
pub const LAST_PROCESS_ID: &str = "{{last_process_id}}";

fn fill_process_id(arguments: String, messages: &[Value]) -> String {
    if !arguments.contains(LAST_PROCESS_ID) {
        return arguments;
    }
    let found = messages.iter().rev().find_map(|m| {
        let text = m.get("content").map(Value::to_string).unwrap_or_default();
        text.match_indices("proc_")
            .filter_map(|(at, _)| {
                let hex = text.get(at + 5..at + 17)?;
                hex.chars()
                    .all(|c| c.is_ascii_hexdigit())
                    .then(|| text[at..at + 17].to_string())
            })
            .last()
    });
    match found {
        Some(id) => arguments.replace(LAST_PROCESS_ID, &id),
        None => arguments,
    }
}

impl Shared {
    fn answer_for(&self, request: &Value) -> Option<Answer> {
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let said = messages.iter().map(said_of_wire_message);
        let picked = match self.script.cursor {
            CursorMode::Conversation => self.script.pick_for_conversation(said),
            CursorMode::Sequential => self.script.pick_sequential(&mut lock(&self.used), said),
        };
        let prompt_tokens = estimate_tokens(
            messages
                .iter()
                .map(|m| m.get("content").map_or(0, |c| c.to_string().len()))
                .sum(),
        );
        let Some(index) = picked else {
            return self.script.when_exhausted.as_ref().map(|text| Answer {
                text: Some(text.clone()),
                calls: Vec::new(),
                delay: Duration::ZERO,
                prompt_tokens,
                usage: None,
            });
        };
        let turn = &self.script.turns[index];
        Some(Answer {
            text: turn.text.clone(),
            calls: self
                .script
                .calls_of(index)
                .into_iter()
                .map(|c| (c.id, c.name, fill_process_id(c.arguments, messages)))
                .collect(),
            delay: Duration::from_millis(turn.delay_ms),
            prompt_tokens,
            usage: turn.usage,
        })
    }
}

impl Answer {
    /// Moves the calls into the text, written in `form` (after the text, one per line).
    fn write_calls_in_text(&mut self, form: CallForm) {
        if self.calls.is_empty() {
            return;
        }
        let mut text = self.text.take().unwrap_or_default();
        for (_, name, arguments) in self.calls.drain(..) {
            let arguments = serde_json::from_str::<Value>(&arguments)
                .unwrap_or_else(|_| Value::String(arguments));
            let object = json!({"name": name, "arguments": arguments}).to_string();
            let written = match form {
                CallForm::Tagged => format!("<tool_call>\n{object}\n</tool_call>"),
                CallForm::Bare => object,
                CallForm::Fenced => format!("```json\n{object}\n```"),
                CallForm::DoubledBraces => object.replace('{', "{{").replace('}', "}}"),
                CallForm::SingleQuotes => object.replace('"', "'"),
                CallForm::TrailingCommas => object.replace('}', ",}"),
            };
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&written);
        }
        self.text = Some(text);
    }

    fn finish_reason(&self) -> &'static str {
        if self.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    fn usage(&self) -> Value {
        if let Some(usage) = self.usage {
            return json!({
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
            });
        }
        let chars = self.text.as_deref().map_or(0, str::len)
            + self
                .calls
                .iter()
                .map(|(_, n, a)| n.len() + a.len())
                .sum::<usize>();
        let completion = estimate_tokens(chars);
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    fn whole_body(&self, id: &str, model: &str) -> Value {
        let mut message = json!({"role": "assistant", "content": self.text});
        if !self.calls.is_empty() {
            message["tool_calls"] = self
                .calls
                .iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
        }
        json!({
            "id": id,
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason()}],
            "usage": self.usage(),
        })
    }

    /// The SSE events of a streamed answer: text word by word, each tool call as a start
    /// (id, name) then its arguments in three fragments, the finish, usage, `[DONE]`.
    fn sse_events(&self, id: &str, model: &str, with_usage: bool) -> Vec<String> {
        let chunk = |delta: Value, finish: Value| {
            json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            })
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        for piece in self
            .text
            .as_deref()
            .unwrap_or_default()
            .split_inclusive(' ')
        {
            events.push(chunk(json!({"content": piece}), Value::Null));
        }
        for (index, (call_id, name, arguments)) in self.calls.iter().enumerate() {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            for fragment in thirds(arguments) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
                    Value::Null,
                ));
            }
        }
        events.push(chunk(json!({}), Value::from(self.finish_reason())));
        if with_usage {
            events.push(json!({
                "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [], "usage": self.usage(),
            }));
        }
        let mut lines: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        lines.push("data: [DONE]\n\n".to_string());
        lines
    }
}

/// `text` in three pieces cut at character boundaries (fewer when it is short).
fn thirds(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    if chars.len() < 3 {
        return vec![text];
    }
    let cut = |n: usize| chars[chars.len() * n / 3].0;
    let (a, b) = (cut(1), cut(2));
    vec![&text[..a], &text[a..b], &text[b..]]
}

fn sse_response(
    events: Vec<String>,
    pause: Duration,
    drop_after: Option<usize>,
    shared: Arc<Shared>,
) -> Response {
    let total = events.len();
    let stream =
        futures::stream::iter(events.into_iter().enumerate()).then(move |(n, event)| async move {
            if drop_after.is_some_and(|limit| n >= limit) {
                // Wait first: while the stream is pending the server flushes the events
                // already written, so the client really receives them before the break.
                tokio::time::sleep(Duration::from_millis(20)).await;
                return Err(std::io::Error::other(
                    "the mock server dropped the connection on purpose",
                ));
            }
            if pause > Duration::ZERO {
                tokio::time::sleep(pause).await;
            }
            Ok(event)
        });
    let tracked = Tracked {
        inner: Box::pin(stream),
        sent: 0,
        total,
        planned_break: drop_after.is_some(),
        shared,
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(tracked))
        .unwrap_or_else(|_| error_response(500, "cannot build the stream"))
}

/// A response stream that counts itself cut short when dropped before its last event, which
/// is how a test sees that a cancelled client really closed the connection.
struct Tracked {
    /// The events, with their pauses and planned break.
    inner: BoxStream<'static, Result<String, std::io::Error>>,
    /// Events handed to the connection so far.
    sent: usize,
    /// Events in the whole answer.
    total: usize,
    /// A `DropMidStream` fault ends it early on purpose; that is not the client's doing.
    planned_break: bool,
    /// Where the count goes.
    shared: Arc<Shared>,
}

impl Stream for Tracked {
    type Item = Result<String, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.sent += 1;
        }
        polled
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.sent < self.total && !self.planned_break {
            self.shared.streams_cut_short.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirds_cover_the_text() {
        assert_eq!(thirds(r#"{"path":"é.md"}"#).concat(), r#"{"path":"é.md"}"#);
        assert_eq!(thirds(r#"{"path":"é.md"}"#).len(), 3);
        assert_eq!(thirds("{}"), vec!["{}"]);
    }
}
