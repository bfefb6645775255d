//! `POST /v1/responses` (OpenAI's newer API): a turn of a troupe session whose answer is a
//! `response` object; `previous_response_id` continues the session that gave that response.
//! Streamed, it sends the typed events (`response.created`, `response.output_text.delta`, ...,
//! `response.completed`). `GET /v1/responses/{id}` reads a response back.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Mutex;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use troupe_tools::sync::lock;

use super::super::HttpState;
use super::chat::KEEP_ALIVE;
use super::chunks::now;
use super::client_tools::{ClientCall, parse_tools};
use super::continuation::{Bounded, Input, Turn, content_text};
use super::errors::{Kind, OpenAiBody, OpenAiError, field, required};
use super::turn::{self, Signal, Started, TurnRequest};
use super::{SESSION_HEADER, models, named_session};

/// Responses kept to be read back or continued; the oldest are forgotten first.
pub const KEPT_RESPONSES: usize = 50_000;

/// Response ids and their sessions (and the responses, to read back).
#[derive(Debug)]
pub struct Responses {
    inner: Mutex<Bounded<String, (String, Value)>>,
}

impl Default for Responses {
    fn default() -> Self {
        Responses {
            inner: Mutex::new(Bounded::new(KEPT_RESPONSES)),
        }
    }
}

impl Responses {
    fn keep(&self, id: &str, session: &str, response: &Value) {
        lock(&self.inner).insert(id.to_string(), (session.to_string(), response.clone()));
    }

    fn session_of(&self, id: &str) -> Option<String> {
        lock(&self.inner).get(&id.to_string()).map(|(s, _)| s)
    }

    fn get(&self, id: &str) -> Option<Value> {
        lock(&self.inner).get(&id.to_string()).map(|(_, r)| r)
    }
}

/// The request's input: the history before the new input, and the new input.
fn parse_input(body: &Map<String, Value>) -> Result<(Vec<Turn>, Input), OpenAiError> {
    let input = required(body, "input", "input", Kind::Str).or_else(|e| {
        // A string or an array of items.
        match body.get("input") {
            Some(Value::Array(_)) => Ok(&body["input"]),
            _ => Err(OpenAiError {
                message: "`input` must be a string or an array of input items".into(),
                ..e
            }),
        }
    })?;
    let mut history = Vec::new();
    if let Some(text) = input.as_str() {
        if let Some(instructions) = field(body, "instructions", "instructions", Kind::Str)? {
            history.push(Turn::text(
                "system",
                instructions.as_str().unwrap_or_default(),
            ));
        }
        return match text.trim().is_empty() {
            true => Err(OpenAiError::invalid_param(
                "input",
                "empty_message",
                "`input` is empty; send the user's text",
            )),
            false => Ok((history, Input::Message(text.to_string()))),
        };
    }
    if let Some(instructions) = field(body, "instructions", "instructions", Kind::Str)? {
        history.push(Turn::text(
            "system",
            instructions.as_str().unwrap_or_default(),
        ));
    }
    let mut results = Vec::new();
    for (i, item) in input.as_array().into_iter().flatten().enumerate() {
        let at = format!("input[{i}]");
        let Some(item) = item.as_object() else {
            return Err(OpenAiError::invalid_param(
                &at,
                "invalid_type",
                format!("`{at}` must be an object"),
            ));
        };
        let kind = field(item, "type", &format!("{at}.type"), Kind::Str)?
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = required(item, "role", &format!("{at}.role"), Kind::Str)?
                    .as_str()
                    .unwrap_or_default();
                let role = match role {
                    "developer" | "system" => "system",
                    "user" | "assistant" => role,
                    other => {
                        return Err(OpenAiError::invalid_param(
                            format!("{at}.role"),
                            "invalid_role",
                            format!(
                                "`{at}.role` is {other:?}; send user, assistant, system or developer"
                            ),
                        ));
                    }
                };
                let text = content_text(item.get("content"), &format!("{at}.content"))?;
                history.push(Turn::text(role, &text));
            }
            "function_call_output" => {
                let call = required(item, "call_id", &format!("{at}.call_id"), Kind::Str)?;
                let output = content_text(item.get("output"), &format!("{at}.output"))?;
                results.push((call.as_str().unwrap_or_default().to_string(), output));
            }
            // Earlier answers' items the client sends back are already in the session.
            "function_call" | "reasoning" => {}
            other => {
                return Err(OpenAiError::invalid_param(
                    format!("{at}.type"),
                    "unsupported_item",
                    format!(
                        "input items of type {other} are not supported; send messages or function_call_output"
                    ),
                ));
            }
        }
    }
    if !results.is_empty() {
        return Ok((history, Input::ToolResults(results)));
    }
    match history.pop() {
        Some(last) if last.role == "user" && !last.content.is_empty() => {
            Ok((history, Input::Message(last.content)))
        }
        _ => Err(OpenAiError::invalid_param(
            "input",
            "invalid_conversation",
            "`input` must end with a user message (or hold function_call_output items)",
        )),
    }
}

/// What every event of one response carries.
#[derive(Debug, Clone)]
struct Shape {
    id: String,
    created: u64,
    model: String,
    previous: Option<String>,
    session_id: String,
    message_id: String,
}

impl Shape {
    fn response(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "metadata": {},
            "model": self.model,
            "output": output,
            "parallel_tool_calls": true,
            "previous_response_id": self.previous,
            "temperature": null,
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
            "usage": usage,
            "troupe": {"session_id": self.session_id},
        })
    }

    fn message(&self, text: &str, status: &str) -> Value {
        json!({
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })
    }
}

fn call_item(call: &ClientCall) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{}", call.id),
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    })
}

fn usage(chat: &Value) -> Value {
    json!({
        "input_tokens": chat["prompt_tokens"],
        "output_tokens": chat["completion_tokens"],
        "total_tokens": chat["total_tokens"],
        "input_tokens_details": {"cached_tokens": chat["prompt_tokens_details"]["cached_tokens"]},
        "output_tokens_details": {"reasoning_tokens": 0},
    })
}

/// Handler of `POST /v1/responses`.
pub async fn create(
    State(state): State<HttpState>,
    headers: HeaderMap,
    OpenAiBody(body): OpenAiBody,
) -> Result<Response, OpenAiError> {
    let model = required(&body, "model", "model", Kind::Str)?
        .as_str()
        .unwrap_or_default()
        .to_string();
    let stream = field(&body, "stream", "stream", Kind::Bool)?
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let previous = field(
        &body,
        "previous_response_id",
        "previous_response_id",
        Kind::Str,
    )?
    .and_then(Value::as_str)
    .map(str::to_string);
    for number in ["temperature", "top_p", "max_output_tokens"] {
        field(&body, number, number, Kind::Number)?;
    }
    let tools = parse_tools(&body, "tools")?;
    let profile = models::resolve(&state, &model)?;
    let (history, input) = parse_input(&body)?;
    let named = match &previous {
        Some(id) => Some(state.openai.responses.session_of(id).ok_or_else(|| {
            OpenAiError::not_found(
                "previous_response_id",
                "response_not_found",
                format!("there is no response {id} on this server; leave previous_response_id out to start a new conversation"),
            )
        })?),
        None => named_session(&headers)?,
    };
    let started = turn::start(
        &state,
        TurnRequest {
            profile,
            history,
            input,
            tools,
            named_session: named,
            trace_parent: super::super::traceparent(&headers),
        },
    )
    .await?;
    let shape = Shape {
        id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
        created: now(),
        model,
        previous,
        session_id: started.session_id.clone(),
        message_id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
    };
    let mut response = if stream {
        streamed(state, shape.clone(), started).into_response()
    } else {
        whole(&state, &shape, started).await?.into_response()
    };
    if let Ok(value) = HeaderValue::from_str(&shape.session_id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// The response once the turn ends or calls the client's tools; kept under its id.
fn finish(
    state: &HttpState,
    shape: &Shape,
    started: &Started,
    text: &str,
    calls: &[ClientCall],
    status: &str,
) -> Value {
    let mut output = Vec::new();
    if !text.is_empty() || calls.is_empty() {
        output.push(shape.message(text, "completed"));
    }
    output.extend(calls.iter().map(call_item));
    let usage = usage(&started.v1.take_usage(&started.handle));
    let response = shape.response(status, output, usage);
    state
        .openai
        .responses
        .keep(&shape.id, &shape.session_id, &response);
    response
}

async fn whole(
    state: &HttpState,
    shape: &Shape,
    mut started: Started,
) -> Result<axum::Json<Value>, OpenAiError> {
    loop {
        match started.signals.recv().await {
            Some(Signal::Text(_) | Signal::Waiting { .. }) => {}
            Some(Signal::ToolCalls(calls)) => {
                return Ok(axum::Json(finish(
                    state,
                    shape,
                    &started,
                    "",
                    &calls,
                    "completed",
                )));
            }
            Some(Signal::Done(outcome)) => {
                let status = match turn::finish_reason(&outcome) {
                    "length" => "incomplete",
                    _ => "completed",
                };
                return Ok(axum::Json(finish(
                    state,
                    shape,
                    &started,
                    &outcome.text,
                    &[],
                    status,
                )));
            }
            Some(Signal::Failed(error)) => {
                return Err(OpenAiError::internal(format!("the turn failed: {error}")));
            }
            None => return Err(OpenAiError::internal("the turn ended without an answer")),
        }
    }
}

struct Streaming {
    state: HttpState,
    shape: Shape,
    started: Started,
    queued: VecDeque<SseEvent>,
    sent: String,
    sequence: u64,
    opened_text: bool,
    done: bool,
}

impl Streaming {
    fn event(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.queued
            .push_back(SseEvent::default().event(kind).data(data.to_string()));
    }

    fn open_text(&mut self) {
        if self.opened_text {
            return;
        }
        self.opened_text = true;
        let item = self.shape.message("", "in_progress");
        let mut item = item;
        item["content"] = json!([]);
        self.event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        self.event(
            "response.content_part.added",
            json!({"item_id": self.shape.message_id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
    }

    fn close_text(&mut self) {
        if !self.opened_text {
            return;
        }
        let text = self.sent.clone();
        let id = self.shape.message_id.clone();
        self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "text": text}),
        );
        self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": text, "annotations": []}}),
        );
        let item = self.shape.message(&text, "completed");
        self.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        );
    }

    fn fail(&mut self, message: String) {
        tracing::warn!(%message, "a streamed /v1/responses turn failed");
        let mut response = self.shape.response("failed", vec![], Value::Null);
        response["error"] = json!({"code": "server_error", "message": message});
        self.event("response.failed", json!({"response": response}));
        self.done = true;
    }

    async fn advance(&mut self) -> bool {
        if self.done {
            return false;
        }
        match self.started.signals.recv().await {
            Some(Signal::Text(text)) => {
                self.open_text();
                self.sent.push_str(&text);
                let id = self.shape.message_id.clone();
                self.event(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": text}),
                );
            }
            Some(Signal::Waiting { request_id, tool }) => {
                self.queued.push_back(
                    SseEvent::default()
                        .comment(format!("{tool} waits for approval (request {request_id})")),
                );
            }
            Some(Signal::ToolCalls(calls)) => {
                self.close_text();
                let first = usize::from(self.opened_text);
                for (i, call) in calls.iter().enumerate() {
                    let item = call_item(call);
                    self.event(
                        "response.output_item.added",
                        json!({"output_index": first + i, "item": item}),
                    );
                    self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": item["id"], "output_index": first + i, "arguments": call.arguments}),
                    );
                    self.event(
                        "response.output_item.done",
                        json!({"output_index": first + i, "item": item}),
                    );
                }
                let text = self.sent.clone();
                let response = finish(
                    &self.state,
                    &self.shape,
                    &self.started,
                    &text,
                    &calls,
                    "completed",
                );
                self.event("response.completed", json!({"response": response}));
                self.done = true;
            }
            Some(Signal::Done(outcome)) => {
                if self.sent.trim().is_empty() && !outcome.text.is_empty() {
                    self.open_text();
                    self.sent = outcome.text.clone();
                    let id = self.shape.message_id.clone();
                    self.event(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": outcome.text}),
                    );
                }
                self.open_text();
                self.close_text();
                let status = match turn::finish_reason(&outcome) {
                    "length" => "incomplete",
                    _ => "completed",
                };
                let text = self.sent.clone();
                let response = finish(&self.state, &self.shape, &self.started, &text, &[], status);
                let kind = if status == "completed" {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                self.event(kind, json!({"response": response}));
                self.done = true;
            }
            Some(Signal::Failed(error)) => self.fail(format!("the turn failed: {error}")),
            None => self.fail("the turn ended without an answer".into()),
        }
        true
    }
}

fn streamed(
    state: HttpState,
    shape: Shape,
    started: Started,
) -> Sse<impl futures::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut streaming = Streaming {
        state,
        shape,
        started,
        queued: VecDeque::new(),
        sent: String::new(),
        sequence: 0,
        opened_text: false,
        done: false,
    };
    let created = streaming.shape.response("in_progress", vec![], Value::Null);
    streaming.event("response.created", json!({"response": created}));
    streaming.event("response.in_progress", json!({"response": created}));
    let events = futures::stream::unfold(streaming, |mut s| async move {
        loop {
            if let Some(event) = s.queued.pop_front() {
                return Some((Ok(event), s));
            }
            if !s.advance().await {
                return None;
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// Handler of `GET /v1/responses/{id}`.
pub async fn show(
    State(state): State<HttpState>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, OpenAiError> {
    state
        .openai
        .responses
        .get(&id)
        .map(axum::Json)
        .ok_or_else(|| {
            OpenAiError::not_found(
                "response_id",
                "response_not_found",
                format!(
                    "there is no response {id} on this server (responses are kept while it runs)"
                ),
            )
        })
}
