//! [`OpenAiProvider`]: a chat-completions client for any OpenAI-compatible server (OpenAI,
//! OpenRouter, vLLM, llama.cpp, Ollama), configured by [`OpenAiConfig`]. It streams over SSE or
//! reads one JSON answer, retries rate limits, server errors and broken connections with
//! backoff that honours `Retry-After`, bounds each attempt with a timeout, and drops the
//! connection when cancelled. The wire types live in `openai_wire`, the waits in `retry`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use troupe_tools::text::clip_bytes;

use super::mode_memory::ModeMemory;
use super::openai_wire::{Assembler, WireCompletion, error_body_message, request_body};
use super::retry::{backoff_delay, is_retryable_status, server_wait};
use super::settings::{SessionModelState, ToolCallMode};
use super::text_calls::{parse_reply, text_mode_messages};
use super::{
    ChatMessage, FinishReason, ModelError, ModelNotice, ModelProvider, ModelRequest, ModelResponse,
    RetryReason, StreamDelta, ToolCallRequest,
};

mod config;
mod follow_up;
mod served;
#[cfg(test)]
mod tests;

pub use config::{DEFAULT_MODEL, OpenAiConfig};
use follow_up::{
    Next, gave_up, is_unreadable_output, refused_optional_field, refuses_tools,
    retry_unless_forwarded, stream_error, with_note,
};

/// A [`ModelProvider`] over an OpenAI-compatible chat-completions endpoint. Cheap to clone; the
/// clones share one connection pool.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The config as given (the key is kept only in `headers`).
    config: OpenAiConfig,
    /// The resolved chat-completions URL.
    endpoint: String,
    /// The pooled HTTP client.
    http: reqwest::Client,
    /// Authorization and extra headers, built once.
    headers: HeaderMap,
    /// Which models of this server are known to need text tool calls (for `auto`).
    memory: ModeMemory,
    /// What the server lists at `/models`, asked once when needed.
    served: served::ServedModels,
}

/// Unreadable native answers in one session before `auto` switches it to text tool calls.
const NATIVE_FAILURES_BEFORE_TEXT: u32 = 2;

/// Unreadable answers in one request before `native` gives up.
const NATIVE_CHANGES_BEFORE_GIVING_UP: u32 = 3;

/// Where generation stops after changes and in text mode: a result the model starts to invent
/// (with or without the `name` attribute troupe writes).
const INVENTED_RESULT_STOP: &str = "<tool_response";

/// What the model reads after an answer the server could not parse.
const UNREADABLE_NUDGE: &str = "Your last reply could not be read. Either call exactly one of the listed tools, with a JSON object of its arguments and nothing else, or answer in plain text.";

impl OpenAiProvider {
    /// Checks the config, resolves the API key and builds the HTTP client. Fails with
    /// [`ModelError::Config`] saying what to fix.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let base = config.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ModelError::Config(format!(
                "base_url `{base}` is not an http(s) URL; write it like http://127.0.0.1:8080/v1 \
                 or https://api.openai.com/v1"
            )));
        }
        // An empty model name is allowed: the first request asks the server's `/models`.
        let key = match (&config.api_key, &config.api_key_env) {
            (Some(key), _) if !key.trim().is_empty() => Some(key.trim().to_string()),
            (_, Some(variable)) => match std::env::var(variable) {
                Ok(key) if !key.trim().is_empty() => Some(key.trim().to_string()),
                _ => {
                    return Err(ModelError::Config(format!(
                        "the API key variable {variable} is not set (or is empty); export it, or \
                         set `api_key` in the provider config"
                    )));
                }
            },
            _ => None,
        };
        let mut headers = HeaderMap::new();
        if let Some(key) = key {
            let value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ModelError::Config(
                    "the API key holds characters a header cannot carry (a line break?); \
                     check how it was pasted"
                        .to_string(),
                )
            })?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        for (name, value) in &config.extra_headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ModelError::Config(format!("`{name}` is not a valid HTTP header name"))
            })?;
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                ModelError::Config(format!(
                    "the value of header `{name}` holds characters a header cannot carry"
                ))
            })?;
            headers.insert(header_name, header_value);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        let endpoint = config.endpoint();
        let memory = ModeMemory::load(config.mode_memory.clone(), &endpoint);
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint,
                config,
                http,
                headers,
                memory,
                served: served::ServedModels::default(),
            }),
        })
    }

    /// The config this provider was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.inner.config
    }
}

impl ModelProvider for OpenAiProvider {
    fn describe(&self) -> String {
        format!(
            "openai-compatible at {}, model {}, tool calls {}",
            self.inner.config.base_url,
            if self.inner.config.model.trim().is_empty() {
                "(the one the server lists)"
            } else {
                &self.inner.config.model
            },
            self.inner.config.settings.tool_calls.as_str()
        )
    }

    fn model(&self) -> Option<String> {
        // No name configured: nothing to price or show until the server is asked.
        let model = self.inner.config.model.trim();
        (!model.is_empty()).then(|| model.to_string())
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.run(request, cancel).await })
    }
}

impl Inner {
    /// Attempts, retries and waits, each in a race with `cancel`. Failures are sorted by what
    /// helps: passing ones are retried after a backoff; an answer the server could not parse
    /// is retried with a small change, then (in `auto`) the session switches to text tool
    /// calls; the rest fail at once with what to fix. Retries come out of the turn's budget.
    async fn run(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelResponse, ModelError> {
        let config = &self.config;
        let settings = &config.settings;
        // The memory of text tool calls is keyed by the model the server reports serving; it
        // matters only in `auto` with tools offered, so only then is the server asked.
        let by_listing = settings.tool_calls == ToolCallMode::Auto && !request.tools.is_empty();
        let resolved = self
            .served
            .resolve(
                &self.http,
                &self.headers,
                &config.base_url,
                request.model.as_deref().unwrap_or(&config.model),
                by_listing,
            )
            .await?;
        let model = resolved.requested.as_str();
        let served = resolved.served.as_str();
        let offered = tool_names(&request.tools);
        let local_state = SessionModelState::new();
        let state = request.state.as_deref().unwrap_or(&local_state);
        if request.state.is_none() {
            local_state.begin_turn();
        }
        if settings.tool_calls == ToolCallMode::Text {
            state.switch_to_text_tools();
        } else if settings.tool_calls == ToolCallMode::Auto
            && self.memory.prefers_text(served)
            && !request.tools.is_empty()
            && !state.uses_text_tools()
        {
            self.switch_to_text(
                &request,
                state,
                served,
                "an earlier session with this server and model had to switch (remembered)"
                    .to_string(),
            );
        }
        let attempt_timeout = settings
            .request_timeout
            .map_or(config.request_timeout, Duration::from_secs);
        // Fields the server refused (`stream_options`, ...), left out from then on.
        let mut refused: Vec<&'static str> = Vec::new();
        // Set once any delta reached the listener: from then on a broken stream cannot be
        // retried without the listener seeing text twice.
        let mut forwarded = false;
        let mut transient_retries = 0u32;
        let mut attempts = 0u32;
        // Unreadable answers in this request: each asks again with one more change.
        let mut changes = 0u32;
        loop {
            if cancel.is_cancelled() {
                return Err(ModelError::Cancelled);
            }
            let text_mode = !request.tools.is_empty() && state.uses_text_tools();
            let mut body = self.body(model, &request, text_mode, changes);
            if let Value::Object(fields) = &mut body {
                for field in &refused {
                    fields.remove(*field);
                }
            }
            attempts += 1;
            tracing::debug!(endpoint = %self.endpoint, model, attempts, text_mode, "model request");
            // In text mode the answer's text holds the calls' markup: it is parsed, not shown.
            let sink = request.stream.as_ref().filter(|_| !text_mode);
            let attempt = tokio::time::timeout(
                attempt_timeout,
                self.attempt(&body, sink, &mut forwarded, state),
            );
            // Dropping the attempt drops the response and closes its connection.
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                outcome = attempt => outcome,
            };
            let (error, asked, reason) = match outcome {
                Ok(Ok(response)) => return Ok(read_calls(response, text_mode, &offered)),
                Ok(Err(Next::Fail(error))) => {
                    if let Some(field) = refused_optional_field(&error, &body) {
                        // Some servers reject what they do not know; these fields are extras.
                        tracing::warn!(
                            field,
                            "the server refused an optional field; asking again without it"
                        );
                        refused.push(field);
                        continue;
                    }
                    return Err(error);
                }
                Ok(Err(Next::RefusedTools(error))) => {
                    if text_mode || request.tools.is_empty() {
                        return Err(error);
                    }
                    if settings.tool_calls == ToolCallMode::Native {
                        return Err(with_note(
                            error,
                            "the server does not take the `tools` field; set model.tool_calls to text (or auto) so troupe describes the tools in the prompt",
                        ));
                    }
                    self.switch_to_text(
                        &request,
                        state,
                        served,
                        format!("the server refused the tools field: {error}"),
                    );
                    continue;
                }
                Ok(Err(Next::Unreadable(error))) => {
                    // The listener drops what it was shown when it hears of the retry.
                    forwarded = false;
                    if !text_mode && !request.tools.is_empty() {
                        let failures = state.note_native_failure();
                        if settings.tool_calls == ToolCallMode::Auto
                            && failures >= NATIVE_FAILURES_BEFORE_TEXT
                        {
                            self.switch_to_text(
                                &request,
                                state,
                                served,
                                format!(
                                    "the server could not parse the model's tool calls {failures} times: {error}"
                                ),
                            );
                            continue;
                        }
                        if settings.tool_calls == ToolCallMode::Native
                            && changes + 1 >= NATIVE_CHANGES_BEFORE_GIVING_UP
                        {
                            return Err(with_note(
                                error,
                                &format!(
                                    "the server could not parse the model's output {} times; set model.tool_calls to text or auto so troupe reads tool calls from the reply itself",
                                    changes + 1
                                ),
                            ));
                        }
                        changes += 1;
                    }
                    (error, Some(Duration::ZERO), RetryReason::UnreadableOutput)
                }
                Ok(Err(Next::Retry(error, asked))) => {
                    if transient_retries >= config.max_retries {
                        return Err(gave_up(error, attempts));
                    }
                    transient_retries += 1;
                    (error, asked, RetryReason::Transient)
                }
                Err(_elapsed) => {
                    return Err(ModelError::Timeout {
                        seconds: attempt_timeout.as_secs().max(1),
                    });
                }
            };
            if !state.spend_retry(settings.retry_budget) {
                return Err(with_note(
                    error,
                    &format!(
                        "the turn's retry budget of {} is spent (model.retry_budget)",
                        settings.retry_budget
                    ),
                ));
            }
            let wait = match asked {
                Some(asked) if asked > config.retry_max_delay => {
                    return Err(with_note(
                        error,
                        &format!(
                            "the server asked to wait {} s before retrying, longer than the {} s \
                             troupe waits (retry_max_delay)",
                            asked.as_secs(),
                            config.retry_max_delay.as_secs()
                        ),
                    ));
                }
                Some(asked) => asked,
                None => backoff_delay(
                    config.retry_base_delay,
                    config.retry_max_delay,
                    transient_retries.saturating_sub(1),
                ),
            };
            tracing::warn!(
                error = %error,
                reason = reason.as_str(),
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                attempt = attempts,
                "model request failed; retrying"
            );
            notify(
                &request,
                ModelNotice::Retrying {
                    attempt: attempts,
                    reason,
                    error: error.to_string(),
                    wait,
                },
            );
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Switches the session to text tool calls and says so.
    fn switch_to_text(
        &self,
        request: &ModelRequest,
        state: &SessionModelState,
        served: &str,
        reason: String,
    ) {
        if state.switch_to_text_tools() {
            tracing::warn!(%reason, "switching this session to text tool calls");
            if self.config.settings.tool_calls == ToolCallMode::Auto {
                self.memory.remember_text(served, &reason);
            }
            notify(
                request,
                ModelNotice::ToolCallsSwitched {
                    to: ToolCallMode::Text,
                    reason,
                },
            );
        }
    }

    /// The request body: native or text tool calls, with the changes made after `changes`
    /// unreadable answers (a stop on invented results and a nudge, then a warmer sampling).
    fn body(&self, model: &str, request: &ModelRequest, text_mode: bool, changes: u32) -> Value {
        let config = &self.config;
        let mut extra = config.extra_body.clone();
        for (key, value) in &config.settings.request_fields {
            extra.insert(key.clone(), value.clone());
        }
        let rewritten;
        let mut request = request;
        if text_mode {
            rewritten = ModelRequest {
                messages: text_mode_messages(&request.messages, &request.tools),
                tools: Vec::new().into(),
                ..request.clone()
            };
            request = &rewritten;
        }
        let nudged;
        if changes > 0 && !text_mode {
            let mut messages = request.messages.clone();
            messages.push(ChatMessage::User {
                content: UNREADABLE_NUDGE.to_string(),
            });
            nudged = ModelRequest {
                messages,
                ..request.clone()
            };
            request = &nudged;
        }
        let mut body = request_body(model, request, config.max_tokens, config.stream, &extra);
        if let Value::Object(fields) = &mut body {
            if text_mode || changes > 0 {
                add_stop(fields, INVENTED_RESULT_STOP);
            }
            if changes > 1 {
                let warm = fields
                    .get("temperature")
                    .and_then(Value::as_f64)
                    .is_none_or(|t| t < 0.5);
                if warm {
                    fields.insert("temperature".into(), Value::from(0.5));
                }
            }
        }
        body
    }

    /// One HTTP exchange: send, check the status, read the answer as a stream or as JSON.
    async fn attempt(
        &self,
        body: &Value,
        sink: Option<&UnboundedSender<StreamDelta>>,
        forwarded: &mut bool,
        state: &SessionModelState,
    ) -> Result<ModelResponse, Next> {
        let mut builder = self
            .http
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .json(body);
        if self.config.stream {
            builder = builder.header(ACCEPT, "text/event-stream");
        }
        let response = builder.send().await.map_err(|e| {
            if e.is_builder() {
                // The URL itself is unusable: asking again cannot help.
                Next::Fail(ModelError::Config(format!(
                    "cannot make a request to {} ({e}); check base_url",
                    self.endpoint
                )))
            } else {
                Next::Retry(self.unreachable(&e, "sending the request"), None)
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_failure(response).await);
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        // Servers do not always do as asked: read what was sent, not what was requested.
        if is_sse {
            self.read_stream(response, sink, forwarded, state).await
        } else {
            self.read_whole(response, sink, forwarded, state).await
        }
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        sink: Option<&UnboundedSender<StreamDelta>>,
        forwarded: &mut bool,
        state: &SessionModelState,
    ) -> Result<ModelResponse, Next> {
        let mut events = response.bytes_stream().eventsource();
        let mut assembler = Assembler::default();
        let mut deltas = Vec::new();
        let mut done = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    let error = ModelError::Unreachable {
                        url: self.endpoint.clone(),
                        reason: format!(
                            "the connection broke in the middle of the answer ({e}); the server \
                             may have crashed or a proxy cut the stream"
                        ),
                    };
                    return Err(retry_unless_forwarded(error, *forwarded));
                }
            };
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                done = true;
                break;
            }
            let chunk: WireCompletion = match serde_json::from_str::<WireCompletion>(data) {
                Ok(chunk) if chunk.error_message().is_some() => {
                    let message = chunk.error_message().unwrap_or_default();
                    return Err(stream_error(&message, *forwarded));
                }
                Ok(chunk) => {
                    // Counted, not estimated: a chunk with output is about one token.
                    if chunk.output_chars() > 0 {
                        state.note_streamed(1, false);
                    }
                    chunk
                }
                // Keep-alive notes and other non-JSON lines carry no answer.
                Err(_) if !data.starts_with('{') => {
                    tracing::debug!(data = %troupe_tools::text::escape_controls(&clip_bytes(data, 200)), "skipping a non-JSON stream event");
                    continue;
                }
                Err(e) => {
                    return Err(Next::Fail(ModelError::Protocol(format!(
                        "a streamed chunk is not a chat-completions chunk ({e}): {}",
                        troupe_tools::text::escape_controls(&clip_bytes(data, 300))
                    ))));
                }
            };
            assembler
                .push(chunk, false, &mut deltas)
                .map_err(Next::Fail)?;
            forward(sink, &mut deltas, forwarded);
        }
        if assembler.is_empty() {
            let error = ModelError::Protocol(format!(
                "the stream from {} ended before any answer arrived; check that the URL is a \
                 chat-completions endpoint and the model name is right",
                self.endpoint
            ));
            return Err(retry_unless_forwarded(error, *forwarded));
        }
        if !done && !assembler.finished() {
            // Cut off: what arrived may be half an answer.
            let error = ModelError::Unreachable {
                url: self.endpoint.clone(),
                reason: "the stream ended without [DONE] or a finish reason; the server or a \
                         proxy cut the answer short"
                    .to_string(),
            };
            return Err(retry_unless_forwarded(error, *forwarded));
        }
        Ok(assembler.finish())
    }

    async fn read_whole(
        &self,
        response: reqwest::Response,
        sink: Option<&UnboundedSender<StreamDelta>>,
        forwarded: &mut bool,
        state: &SessionModelState,
    ) -> Result<ModelResponse, Next> {
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Next::Retry(self.unreachable(&e, "reading the answer"), None))?;
        if let Ok(chunk) = serde_json::from_slice::<WireCompletion>(&bytes)
            && let Some(message) = chunk.error_message()
        {
            return Err(stream_error(&message, *forwarded));
        }
        let chunk: WireCompletion = serde_json::from_slice(&bytes).map_err(|e| {
            Next::Fail(ModelError::Protocol(format!(
                "the answer from {} is not chat-completions JSON ({e}): {}; check that base_url \
                 points at an OpenAI-compatible API (it usually ends in /v1)",
                self.endpoint,
                troupe_tools::text::escape_controls(&clip_bytes(
                    &String::from_utf8_lossy(&bytes),
                    300
                ))
            )))
        })?;
        // One piece: the server gives no per-token count here, so characters / 4 stand in.
        state.note_streamed(chunk.output_chars().div_ceil(4) as u64, true);
        let mut assembler = Assembler::default();
        let mut deltas = Vec::new();
        assembler
            .push(chunk, true, &mut deltas)
            .map_err(Next::Fail)?;
        if assembler.is_empty() {
            return Err(Next::Fail(ModelError::Protocol(format!(
                "the answer from {} has no choices: {}",
                self.endpoint,
                troupe_tools::text::escape_controls(&clip_bytes(
                    &String::from_utf8_lossy(&bytes),
                    300
                ))
            ))));
        }
        forward(sink, &mut deltas, forwarded);
        Ok(assembler.finish())
    }

    /// Turns an error status into a failure: retried when passing, with the server's wait.
    async fn status_failure(&self, response: reqwest::Response) -> Next {
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let asked = server_wait(
            header("retry-after").as_deref(),
            header("retry-after-ms").as_deref(),
            SystemTime::now(),
        );
        let text = response.text().await.unwrap_or_default();
        let message = error_body_message(&text);
        let error = ModelError::Status {
            status,
            body: format!("{message}; {}", self.status_hint(status)),
        };
        if status >= 500 && is_unreadable_output(&message) {
            Next::Unreadable(error)
        } else if matches!(status, 400 | 422) && refuses_tools(&message) {
            Next::RefusedTools(error)
        } else if is_retryable_status(status) {
            Next::Retry(error, asked)
        } else {
            Next::Fail(error)
        }
    }

    /// What to check for an error status.
    fn status_hint(&self, status: u16) -> String {
        let config = &self.config;
        match status {
            401 | 403 => "check the API key (api_key, api_key_env, TROUPE_API_KEY or \
                          OPENAI_API_KEY) and that it may use this model"
                .to_string(),
            404 => format!(
                "check base_url ({}; it usually ends in /v1) and the model name ({})",
                config.base_url, config.model
            ),
            400 | 422 => format!(
                "the server refused the request; check the model name ({}) and that the server \
                 supports tool calls",
                config.model
            ),
            429 => "the server is rate limiting; wait, run fewer sessions at once, or raise \
                    max_retries"
                .to_string(),
            _ => "the server failed; check its logs or try again later".to_string(),
        }
    }

    fn unreachable(&self, error: &reqwest::Error, during: &str) -> ModelError {
        let mut reason = format!("{during}: {error}");
        // reqwest's own message is short; the cause says "connection refused" and the like.
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            reason.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        reason.push_str("; check that the server is running and that base_url is right");
        ModelError::Unreachable {
            url: self.endpoint.clone(),
            reason,
        }
    }
}

/// The names of the offered tools (wrapped or bare definitions).
fn tool_names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|tool| {
            tool.pointer("/function/name")
                .or_else(|| tool.get("name"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// Reads tool calls written in the answer's text: always in text mode; in native mode only
/// when the server returned none and the text calls tools that were offered (a server with no
/// tool-call parser of its own leaves them there).
fn read_calls(mut response: ModelResponse, text_mode: bool, offered: &[String]) -> ModelResponse {
    if offered.is_empty() || !response.tool_calls.is_empty() {
        return response;
    }
    let Some(content) = response.content.as_deref() else {
        return response;
    };
    let parsed = parse_reply(content, (!text_mode).then_some(offered));
    if parsed.calls.is_empty() {
        return response;
    }
    response.tool_calls = parsed
        .calls
        .into_iter()
        .map(|(name, arguments)| ToolCallRequest {
            id: format!("call_{}", uuid::Uuid::now_v7().simple()),
            name,
            arguments: if arguments.trim().is_empty() {
                "{}".to_string()
            } else {
                arguments
            },
        })
        .collect();
    response.content = (!parsed.prose.is_empty()).then_some(parsed.prose);
    response.finish_reason = FinishReason::ToolCalls;
    response
}

/// Sends a notice to the request's listener, if any.
fn notify(request: &ModelRequest, notice: ModelNotice) {
    if let Some(notices) = &request.notices {
        // A listener that left is not an error.
        let _ = notices.send(notice);
    }
}

/// Adds `stop` to the body's stop sequences (a string or a list), keeping the ones set.
fn add_stop(fields: &mut Map<String, Value>, stop: &str) {
    let mut list = match fields.remove("stop") {
        Some(Value::String(one)) => vec![Value::String(one)],
        Some(Value::Array(many)) => many,
        _ => Vec::new(),
    };
    if !list.iter().any(|s| s.as_str() == Some(stop)) {
        list.push(Value::from(stop));
    }
    fields.insert("stop".into(), Value::Array(list));
}

/// Sends the collected deltas to the listener, if any, and notes that some arrived.
fn forward(
    sink: Option<&UnboundedSender<StreamDelta>>,
    deltas: &mut Vec<StreamDelta>,
    forwarded: &mut bool,
) {
    if let Some(sink) = sink {
        for delta in deltas.drain(..) {
            // Only shown text commits the answer (a retry would show it twice); a listener
            // that left is not an error: the answer is still returned.
            let shown = matches!(delta, StreamDelta::Text(_));
            if sink.send(delta).is_ok() && shown {
                *forwarded = true;
            }
        }
    } else {
        deltas.clear();
    }
}
