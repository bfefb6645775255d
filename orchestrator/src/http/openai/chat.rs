//! `POST /v1/chat/completions`: one turn of a troupe session, answered whole or streamed as
//! server-sent events in OpenAI's chunk format (ending with `data: [DONE]`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::super::HttpState;
use super::chunks::Completion;
use super::client_tools::{ClientCall, parse_tools};
use super::continuation::{self, Turn};
use super::errors::{Kind, OpenAiBody, OpenAiError, field, required};
use super::turn::{self, Signal, Started, TurnRequest};
use super::{SESSION_HEADER, models, named_session};

/// How often a stream that has nothing to say sends a comment, so proxies and clients keep it
/// open (while a call waits for approval, say).
pub const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// A chat request's fields troupe reads.
#[derive(Debug)]
struct ChatRequest {
    model: String,
    messages: Vec<Turn>,
    stream: bool,
    include_usage: bool,
    tools: Vec<super::client_tools::ClientTool>,
}

fn parse(body: &Map<String, Value>) -> Result<ChatRequest, OpenAiError> {
    let model = required(body, "model", "model", Kind::Str)?
        .as_str()
        .unwrap_or_default()
        .to_string();
    let messages = continuation::parse_messages(body)?;
    let stream = field(body, "stream", "stream", Kind::Bool)?
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let include_usage = match field(body, "stream_options", "stream_options", Kind::Object)? {
        Some(options) => {
            let options = options.as_object().cloned().unwrap_or_default();
            field(
                &options,
                "include_usage",
                "stream_options.include_usage",
                Kind::Bool,
            )?
            .and_then(Value::as_bool)
            .unwrap_or(false)
        }
        None => false,
    };
    // Sampling settings belong to the profile's model; they are checked, not applied.
    for number in [
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "presence_penalty",
        "frequency_penalty",
        "seed",
    ] {
        field(body, number, number, Kind::Number)?;
    }
    if let Some(n) = field(body, "n", "n", Kind::Number)?
        && n.as_u64() != Some(1)
    {
        return Err(OpenAiError::invalid_param(
            "n",
            "unsupported_value",
            "`n` must be 1: a troupe session gives one answer per turn",
        ));
    }
    let tools = parse_tools(body, "tools")?;
    if let Some(choice) = body.get("tool_choice")
        && !(choice.is_string() || choice.is_object() || choice.is_null())
    {
        return Err(OpenAiError::invalid_param(
            "tool_choice",
            "invalid_type",
            "`tool_choice` must be \"auto\", \"none\", \"required\" or an object",
        ));
    }
    Ok(ChatRequest {
        model,
        messages,
        stream,
        include_usage,
        tools,
    })
}

/// Handler of `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<HttpState>,
    headers: HeaderMap,
    OpenAiBody(body): OpenAiBody,
) -> Result<Response, OpenAiError> {
    let request = parse(&body)?;
    let profile = models::resolve(&state, &request.model)?;
    let (history, input) = continuation::split(&request.messages)?;
    let started = turn::start(
        &state,
        TurnRequest {
            profile,
            history: history.to_vec(),
            input,
            tools: request.tools.clone(),
            named_session: named_session(&headers)?,
            trace_parent: super::super::traceparent(&headers),
        },
    )
    .await?;
    let completion = Completion::new(&request.model, &started.session_id);
    let session_id = completion.session_id.clone();
    let mut response = if request.stream {
        stream(state, request, completion, started).into_response()
    } else {
        whole(&state, request, &completion, started)
            .await?
            .into_response()
    };
    if let Ok(value) = HeaderValue::from_str(&session_id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// Remembers the conversation the client now holds, so its next request continues the session.
fn remember(
    state: &HttpState,
    messages: &[Turn],
    content: &str,
    calls: &[ClientCall],
    session: &str,
) {
    let mut held = messages.to_vec();
    let mut answer = Turn::text("assistant", content);
    answer.tool_calls = calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
        .collect();
    held.push(answer);
    state.openai.conversations.remember(&held, session);
}

/// The answer, whole, once the turn ends or asks for the client's tools.
async fn whole(
    state: &HttpState,
    request: ChatRequest,
    completion: &Completion,
    mut started: Started,
) -> Result<axum::Json<Value>, OpenAiError> {
    loop {
        match started.signals.recv().await {
            Some(Signal::Text(_)) => {}
            Some(Signal::Waiting { request_id, tool }) => {
                tracing::debug!(%request_id, %tool, "a /v1 request waits for an approval");
            }
            Some(Signal::ToolCalls(calls)) => {
                remember(state, &request.messages, "", &calls, &started.session_id);
                let usage = started.v1.take_usage(&started.handle);
                return Ok(axum::Json(completion.message(
                    None,
                    &calls,
                    "tool_calls",
                    usage,
                )));
            }
            Some(Signal::Done(outcome)) => {
                remember(
                    state,
                    &request.messages,
                    &outcome.text,
                    &[],
                    &started.session_id,
                );
                let usage = started.v1.take_usage(&started.handle);
                let mut answer = completion.message(
                    Some(&outcome.text),
                    &[],
                    turn::finish_reason(&outcome),
                    usage,
                );
                answer["troupe"]["status"] = Value::from(outcome.status.as_str());
                return Ok(axum::Json(answer));
            }
            Some(Signal::Failed(error)) => {
                return Err(OpenAiError::internal(format!("the turn failed: {error}")));
            }
            None => return Err(OpenAiError::internal("the turn ended without an answer")),
        }
    }
}

/// What the stream has to do next.
struct Streaming {
    state: HttpState,
    request: ChatRequest,
    completion: Completion,
    started: Started,
    queued: VecDeque<SseEvent>,
    /// The text sent so far.
    sent: String,
    done: bool,
}

fn data(value: &Value) -> SseEvent {
    SseEvent::default().data(value.to_string())
}

impl Streaming {
    /// Turns the next signal into events; false once the stream is over.
    async fn advance(&mut self) -> bool {
        if self.done {
            return false;
        }
        let signal = self.started.signals.recv().await;
        let end = |s: &mut Streaming, finish: &str| {
            s.queued.push_back(data(
                &s.completion.chunk(serde_json::json!({}), Some(finish)),
            ));
            if s.request.include_usage {
                let usage = s.started.v1.take_usage(&s.started.handle);
                s.queued.push_back(data(&s.completion.usage(usage)));
            }
            s.queued.push_back(SseEvent::default().data("[DONE]"));
            s.done = true;
        };
        match signal {
            Some(Signal::Text(text)) => {
                self.sent.push_str(&text);
                self.queued.push_back(data(&self.completion.text(&text)));
            }
            Some(Signal::Waiting { request_id, tool }) => {
                self.queued.push_back(SseEvent::default().comment(format!(
                    "{tool} waits for approval (request {request_id}; answer with POST /api/approvals/{request_id})"
                )));
            }
            Some(Signal::ToolCalls(calls)) => {
                let text = self.sent.clone();
                remember(
                    &self.state,
                    &self.request.messages,
                    &text,
                    &calls,
                    &self.started.session_id,
                );
                self.queued
                    .push_back(data(&self.completion.tool_calls(&calls)));
                end(self, "tool_calls");
            }
            Some(Signal::Done(outcome)) => {
                // An answer that was not streamed (a failed turn, a refusal) is sent whole.
                if self.sent.trim().is_empty() && !outcome.text.is_empty() {
                    self.sent = outcome.text.clone();
                    self.queued
                        .push_back(data(&self.completion.text(&outcome.text)));
                }
                let text = self.sent.clone();
                remember(
                    &self.state,
                    &self.request.messages,
                    &text,
                    &[],
                    &self.started.session_id,
                );
                end(self, turn::finish_reason(&outcome));
            }
            Some(Signal::Failed(error)) => {
                let error = OpenAiError::internal(format!("the turn failed: {error}"));
                self.queued.push_back(data(&error.body()));
                self.queued.push_back(SseEvent::default().data("[DONE]"));
                self.done = true;
            }
            None => {
                self.queued.push_back(SseEvent::default().data("[DONE]"));
                self.done = true;
            }
        }
        true
    }
}

/// The answer as server-sent events. Dropping the stream (the client went away) drops the
/// turn's signals, which stops the turn.
fn stream(
    state: HttpState,
    request: ChatRequest,
    completion: Completion,
    started: Started,
) -> Sse<impl futures::Stream<Item = Result<SseEvent, Infallible>>> {
    let opening = data(&completion.opening());
    let streaming = Streaming {
        state,
        request,
        completion,
        started,
        queued: VecDeque::from([opening]),
        sent: String::new(),
        done: false,
    };
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
