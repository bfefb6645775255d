//! Asking the model: the request of a running turn (the tool list the tool-search assembly
//! gives, the wrap-up prompt of a final round), its retries and streamed text as events, and
//! what the session does with the answer.

use std::sync::Arc;

use actix::prelude::*;
use opentelemetry::KeyValue;
use tracing::Instrument;

use super::Session;
use super::outcome::TurnStatus;
use super::turn::{AfterExtension, Answer, Request};
use crate::events::EventKind;
use crate::model::{
    ChatMessage, ModelError, ModelNotice, ModelRequest, ModelResponse, StreamDelta,
};
use crate::trace::TraceSpan;

impl Session {
    /// Sends the next request of the running turn to the model, on the pool.
    pub(super) fn request_model(&mut self, ctx: &mut Context<Self>, final_round: bool) {
        self.refresh_view();
        let notices = std::mem::take(&mut self.notices);
        if !notices.is_empty() {
            self.conversation.push(ChatMessage::User {
                content: super::control::join_notices(notices),
            });
        }
        for note in std::mem::take(&mut self.steers) {
            self.conversation.push(ChatMessage::User {
                content: format!("[Note from the agent that gave you this task] {note}"),
            });
        }
        self.persist();
        let (turn_id, requests, token) = match self.turn.as_mut() {
            Some(turn) => {
                turn.requests += 1;
                turn.request = Request::Out;
                (turn.id.clone(), turn.requests, turn.token.clone())
            }
            None => return,
        };
        let (tools, deferred, lean) = if final_round {
            let lean = self.config.prompt_style.is_lean(self.config.context_length);
            (Vec::new().into(), None, lean)
        } else {
            super::prompt::tool_list(&self.view, &self.config)
        };
        let mut messages = Vec::with_capacity(self.conversation.len() + 2);
        messages.push(ChatMessage::System {
            content: self.system_prompt(deferred, lean),
        });
        messages.extend(self.conversation.iter().cloned());
        if final_round {
            let wrap_up = self.turn.as_ref().is_some_and(|t| t.wrap_up);
            messages.push(ChatMessage::User {
                content: if wrap_up {
                    "You are repeating calls whose results you already have. Do not call any tool and do not write JSON: answer now from the results above, in plain sentences.".to_string()
                } else {
                    format!(
                        "You have used all {} tool rounds allowed for this message. Do not call tools; answer now with what you have, and say what is left undone.",
                        self.config.max_iterations
                    )
                },
            });
        }
        let (notices, mut noticed) = tokio::sync::mpsc::unbounded_channel();
        let (stream, mut streamed) = if self.config.stream_text {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            (Some(sender), Some(receiver))
        } else {
            (None, None)
        };
        let mut request = ModelRequest {
            messages,
            tools,
            model: self.config.model.clone(),
            max_tokens: self.config.max_tokens,
            stream,
            notices: Some(notices),
            state: Some(Arc::clone(&self.model_state)),
        };
        self.hooks.pre_llm_call(&self.id, &mut request);
        // The span's name needs the model's; worked out only when spans are made.
        let model_name = if crate::trace::enabled() {
            request
                .model
                .clone()
                .or_else(|| self.provider.model())
                .unwrap_or_default()
        } else {
            String::new()
        };
        let model_span = TraceSpan::start(
            format!("chat {model_name}"),
            self.turn.as_ref().map_or(&self.trace, |t| &t.trace),
            opentelemetry::trace::SpanKind::Client,
            || {
                vec![
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.request.model", model_name.clone()),
                    KeyValue::new("troupe.iteration", i64::from(requests)),
                    KeyValue::new("troupe.tools_offered", request.tools.len() as i64),
                ]
            },
        );
        self.events.send(
            &self.id,
            EventKind::ModelRequest {
                turn_id: turn_id.clone(),
                iteration: requests,
                messages: request.messages.len(),
                tools: request.tools.len(),
            },
        );
        let provider = Arc::clone(&self.provider);
        let addr = ctx.address();
        // Tokens received so far, read from the shared model state (the provider counts them).
        let progress = self
            .config
            .report_progress
            .then(|| (Arc::clone(&self.model_state), self.model_state.streamed().0));
        let (events, session_id) = (self.events.clone(), self.id.clone());
        let span = tracing::info_span!("model_request", session_id = %self.id, turn_id = %turn_id, iteration = requests);
        tokio::spawn(
            async move {
                let answer = provider.complete(request, token.child_token());
                tokio::pin!(answer);
                // Retries and fallbacks become events while the request runs, all of them
                // before the answer is handled.
                let show = |notice| events.send(&session_id, notice_event(&turn_id, notice));
                let text = |delta| {
                    if let StreamDelta::Text(text) = delta {
                        let turn_id = turn_id.clone();
                        events.send(&session_id, EventKind::TextDelta { turn_id, text });
                    }
                };
                let asked = tokio::time::Instant::now();
                let mut ticker = tokio::time::interval(PROGRESS_EVERY);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut reported = 0u64;
                let result = loop {
                    tokio::select! {
                        result = &mut answer => break result,
                        _ = ticker.tick(), if progress.is_some() => {
                            if let Some((state, before)) = &progress {
                                let (now, estimated) = state.streamed();
                                let tokens = now.saturating_sub(*before);
                                if tokens != reported {
                                    reported = tokens;
                                    let elapsed_ms = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX);
                                    events.send(&session_id, EventKind::ModelProgress { turn_id: turn_id.clone(), tokens, estimated, elapsed_ms });
                                }
                            }
                        }
                        Some(notice) = noticed.recv() => {
                            // Text sent before the notice is shown before it: a retry's
                            // notice says the text before it was not the answer.
                            if let Some(streamed) = &mut streamed {
                                while let Ok(delta) = streamed.try_recv() {
                                    text(delta);
                                }
                            }
                            show(notice);
                        }
                        Some(delta) = next_delta(&mut streamed) => text(delta),
                        _ = token.cancelled() => break Err(ModelError::Cancelled),
                    }
                };
                while let Ok(notice) = noticed.try_recv() {
                    show(notice);
                }
                if let Some(streamed) = &mut streamed {
                    while let Ok(delta) = streamed.try_recv() {
                        text(delta);
                    }
                }
                if let Err(error) = &result {
                    tracing::warn!(%error, "model request failed");
                }
                addr.do_send(ModelAnswered {
                    turn_id,
                    final_round,
                    result,
                    span: model_span,
                });
            }
            .instrument(span),
        );
    }
}

/// A finish reason as the GenAI conventions write it.
fn finish_reason_name(reason: &crate::model::FinishReason) -> opentelemetry::StringValue {
    use crate::model::FinishReason;
    match reason {
        FinishReason::Stop => "stop".into(),
        FinishReason::ToolCalls => "tool_calls".into(),
        FinishReason::Length => "length".into(),
        FinishReason::Other(other) => other.clone().into(),
    }
}

/// The event for a provider's notice.
fn notice_event(turn_id: &str, notice: ModelNotice) -> EventKind {
    match notice {
        ModelNotice::Retrying {
            attempt,
            reason,
            error,
            wait,
        } => EventKind::ModelRetry {
            turn_id: turn_id.to_string(),
            attempt,
            reason: reason.as_str().to_string(),
            error,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        },
        ModelNotice::ToolCallsSwitched { to, reason } => EventKind::ToolCallsSwitched {
            turn_id: turn_id.to_string(),
            mode: to.as_str().to_string(),
            reason,
        },
    }
}

/// How often a running request reports the tokens received so far (`report_progress`).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// The next streamed delta, or never when the session does not stream.
async fn next_delta(
    streamed: &mut Option<tokio::sync::mpsc::UnboundedReceiver<StreamDelta>>,
) -> Option<StreamDelta> {
    match streamed {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The model answered (or failed). Sent by the session's own request task.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ModelAnswered {
    turn_id: String,
    final_round: bool,
    result: Result<ModelResponse, ModelError>,
    /// The request's span, ended here with what came back.
    span: TraceSpan,
}

impl Handler<ModelAnswered> for Session {
    type Result = ();

    fn handle(&mut self, msg: ModelAnswered, ctx: &mut Self::Context) {
        // What was spent counts even when the turn has moved on (stopped, superseded).
        let cost_usd = match &msg.result {
            Ok(response) => {
                let cost = self.cost_of(response.usage);
                self.meter.record(response.usage, cost);
                msg.span.set(|| {
                    vec![
                        KeyValue::new(
                            "gen_ai.usage.input_tokens",
                            response.usage.prompt_tokens as i64,
                        ),
                        KeyValue::new(
                            "gen_ai.usage.output_tokens",
                            response.usage.completion_tokens as i64,
                        ),
                        KeyValue::new(
                            "gen_ai.usage.cache_read.input_tokens",
                            response.usage.cached_tokens as i64,
                        ),
                        KeyValue::new(
                            "gen_ai.response.finish_reasons",
                            opentelemetry::Value::Array(
                                vec![finish_reason_name(&response.finish_reason)].into(),
                            ),
                        ),
                        KeyValue::new("troupe.tool_calls", response.tool_calls.len() as i64),
                        KeyValue::new("troupe.cost_usd", cost.unwrap_or(0.0)),
                    ]
                });
                cost
            }
            Err(error) => {
                msg.span.fail(error.to_string());
                None
            }
        };
        msg.span.end();
        if !self.is_current(&msg.turn_id) {
            return;
        }
        let answer = Answer {
            turn_id: msg.turn_id,
            final_round: msg.final_round,
            result: msg.result,
            cost_usd,
        };
        if let Some(turn) = self.turn.as_mut() {
            match &mut turn.request {
                Request::AskingForTime(held) => {
                    // Its fate is the person's verdict on the time budget.
                    *held = Some(answer);
                    return;
                }
                request => *request = Request::Idle,
            }
        }
        self.answered(ctx, answer);
    }
}

impl Session {
    /// Goes on with the model's answer: ends the turn, or runs the calls it asks for.
    pub(super) fn answered(&mut self, ctx: &mut Context<Self>, msg: Answer) {
        let cost_usd = msg.cost_usd;
        if let Some(spent) = self.turn.as_mut().and_then(|t| t.out_of_budget.take()) {
            self.finish_over_budget(spent);
            return;
        }
        if self.turn_stopped() {
            self.finish_turn(
                "The turn was stopped before the model answered.".into(),
                TurnStatus::Interrupted,
                None,
            );
            return;
        }
        let response = match msg.result {
            Ok(response) => response,
            Err(error) => {
                let text = format!("The model request failed: {error}");
                self.finish_turn(text, TurnStatus::Failed, Some(error.to_string()));
                return;
            }
        };
        self.hooks.post_llm_call(&self.id, &response);
        self.events.send(
            &self.id,
            EventKind::ModelUsage {
                turn_id: msg.turn_id.clone(),
                input_tokens: response.usage.prompt_tokens,
                output_tokens: response.usage.completion_tokens,
                cached_tokens: response.usage.cached_tokens,
                cost_usd,
            },
        );
        let empty = response.tool_calls.is_empty()
            && response
                .content
                .as_deref()
                .is_none_or(|t| t.trim().is_empty());
        if empty && !msg.final_round {
            // Nothing to show and nothing to run: ask once more, with a nudge.
            let Some(turn) = self.turn.as_mut() else {
                return;
            };
            if !turn.nudged {
                turn.nudged = true;
                self.conversation.push(ChatMessage::Assistant {
                    content: Some(String::new()),
                    tool_calls: Vec::new(),
                });
                self.conversation.push(ChatMessage::User {
                    content: crate::model::EMPTY_REPLY_NUDGE.to_string(),
                });
                self.events.send(
                    &self.id,
                    EventKind::ModelRetry {
                        turn_id: msg.turn_id,
                        attempt: turn.requests,
                        reason: crate::model::RetryReason::EmptyReply.as_str().to_string(),
                        error: "the model answered with no text and no tool call".to_string(),
                        wait_ms: 0,
                    },
                );
                self.request_model(ctx, false);
                return;
            }
            let text = "The model answered with nothing twice (no text, no tool call), even after a nudge; try again, or use a stronger model.".to_string();
            self.finish_turn(text.clone(), TurnStatus::Failed, Some(text));
            return;
        }
        let requests = self.turn.as_ref().map(|t| t.requests).unwrap_or(0);
        if response.tool_calls.is_empty() || msg.final_round {
            let text = response.content.unwrap_or_default();
            self.conversation.push(ChatMessage::Assistant {
                content: Some(text.clone()),
                tool_calls: Vec::new(),
            });
            let wrapped_up = self.turn.as_ref().is_some_and(|t| t.wrap_up);
            let status = if msg.final_round && self.config.max_iterations > 0 && !wrapped_up {
                TurnStatus::MaxIterations
            } else {
                TurnStatus::Completed
            };
            self.finish_turn(text, status, None);
            return;
        }
        tracing::debug!(requests, calls = response.tool_calls.len(), "tool round");
        if let Some(spent) = self.meter.exhausted() {
            // More work was asked for and there is no budget for it: a person may extend it,
            // or the calls are not run.
            self.ask_for_budget(ctx, spent, AfterExtension::Calls(response));
            return;
        }
        self.run_calls(ctx, response);
    }
}
