//! A batch of the model's calls: checked against the repeat guard, held back while servers
//! that may bring its tools are starting, planned and run on the pool, and its results read
//! back into the conversation.

use std::collections::HashSet;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use troupe_tools::ToolResult;
use troupe_tools::connectors::{EntryOutcome, batch_answer};

use super::Session;
use super::outcome::TurnStatus;
use super::routing::{
    Route, RoutedCall, STARTING_SOURCES_WAIT, call_key, needs_starting_sources, reroute_unresolved,
    route_all,
};
use super::turn::AfterExtension;
use crate::call::{CallOutcome, CallStatus};
use crate::events::EventKind;
use crate::model::{ChatMessage, ModelResponse};
use crate::repeats::{CallKey, Decision, REPEAT_NOTE};
use crate::tool_runner::BatchContext;

impl Session {
    /// Runs the calls the model asked for in `response` (or answers repeats without running).
    pub(super) fn run_calls(&mut self, ctx: &mut Context<Self>, response: ModelResponse) {
        self.conversation.push(ChatMessage::Assistant {
            content: response.content,
            tool_calls: response.tool_calls.clone(),
        });
        // Routed once here: the guard, the wait for starting servers and the batch read it.
        let routed = route_all(response.tool_calls, &self.view, &self.config.tool_search);
        let keys: Vec<CallKey> = routed.iter().map(|r| call_key(r, &self.view)).collect();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let turn_id = turn.id.clone();
        match turn.repeats.check(&keys) {
            Decision::Run => {
                turn.running = keys;
                self.run_batch(ctx, routed);
            }
            Decision::Repeat { wrap_up } => {
                turn.wrap_up = wrap_up;
                self.answer_repeats(ctx, &turn_id, &routed, wrap_up);
            }
        }
    }

    /// Plans and runs `calls`, once the servers that may bring their tools are ready.
    pub(super) fn run_batch(&mut self, ctx: &mut Context<Self>, calls: Vec<RoutedCall>) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        if needs_starting_sources(&calls, &self.view) {
            // A search, or a tool the view lacks, while MCP servers are still starting: wait
            // for them (a stop ends the wait), then plan on the tools they brought.
            let view = self.view.clone();
            let token = turn.token.clone();
            let turn_id = turn.id.clone();
            let addr = ctx.address();
            tokio::spawn(async move {
                tokio::select! {
                    _ = view.wait_sources_settled(STARTING_SOURCES_WAIT) => {}
                    () = token.cancelled() => {}
                }
                addr.do_send(SourcesSettled { turn_id, calls });
            });
            return;
        }
        self.plan_and_run(ctx, calls);
    }

    /// Answers a repeated batch with a note per call instead of running it, then asks the model
    /// again: for its answer, with no tools, when `wrap_up`.
    pub(super) fn answer_repeats(
        &mut self,
        ctx: &mut Context<Self>,
        turn_id: &str,
        calls: &[RoutedCall],
        wrap_up: bool,
    ) {
        self.events.send(
            &self.id,
            EventKind::RepeatedCalls {
                turn_id: turn_id.to_string(),
                tools: calls.iter().map(|c| c.call.name.clone()).collect(),
                wrap_up,
            },
        );
        for RoutedCall { call, .. } in calls {
            self.conversation.push(ChatMessage::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: ToolResult::error_json(json!({
                    "error": "repeated_call",
                    "message": REPEAT_NOTE,
                }))
                .to_model_text(),
            });
        }
        let final_round = wrap_up
            || self
                .turn
                .as_ref()
                .is_some_and(|t| t.requests >= self.config.max_iterations);
        self.request_model(ctx, final_round);
    }

    /// Plans the batch on the current view and runs it on the pool.
    pub(super) fn plan_and_run(&mut self, ctx: &mut Context<Self>, calls: Vec<RoutedCall>) {
        if self.turn.is_none() {
            return;
        }
        // The model's message naming these calls is durable before any of them runs.
        self.persist();
        let written = self.written.take();
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let connector_batches: HashSet<String> = calls
            .iter()
            .filter(|c| matches!(c.route, Route::Connectors(_)))
            .map(|c| c.call.id.clone())
            .collect();
        let entries = self.entries(calls);
        let batch = BatchContext {
            session_id: self.id.clone(),
            agent_path: self.path.clone(),
            turn_id: turn.id.clone(),
            view: self.view.clone(),
            search: self.config.tool_search.clone(),
            hooks: self.hooks.clone(),
            supervisor: self.supervisor.clone(),
            events: self.events.clone(),
            token: turn.token.clone(),
            drain: turn.drain.clone(),
            trace: turn.trace.clone(),
            journal: self.config.persist.as_ref().map(|p| Arc::clone(&p.journal)),
        };
        let planner = self.planner.clone();
        let runner = self.runner;
        let addr = ctx.address();
        let span =
            tracing::info_span!("batch", session_id = %batch.session_id, turn_id = %batch.turn_id);
        tokio::spawn(
            async move {
                if let Some(written) = written {
                    written.await;
                }
                let plan = planner.plan(&entries, &batch.view).await;
                tracing::debug!(?plan, "batch planned");
                let outcomes = runner.run_batch(&batch, entries, &plan).await;
                addr.do_send(BatchFinished {
                    turn_id: batch.turn_id,
                    outcomes,
                    connector_batches,
                });
            }
            .instrument(span),
        );
    }
}

/// The MCP servers a batch waited for are ready (or the wait ended): plan and run it now.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct SourcesSettled {
    turn_id: String,
    calls: Vec<RoutedCall>,
}

impl Handler<SourcesSettled> for Session {
    type Result = ();

    fn handle(&mut self, msg: SourcesSettled, ctx: &mut Self::Context) {
        if !self.is_current(&msg.turn_id) {
            return;
        }
        // Whatever is still starting after the wait, the batch runs on what there is; the
        // bridge says which servers are not ready.
        self.refresh_view();
        // Calls the old view could not route get their chance on the tools that came.
        let calls = reroute_unresolved(msg.calls, &self.view, &self.config.tool_search);
        self.plan_and_run(ctx, calls);
    }
}

/// A tool batch finished; one outcome per call, in order. Sent by the session's batch task.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct BatchFinished {
    turn_id: String,
    outcomes: Vec<CallOutcome>,
    /// The model calls that were connector batches: their entries' outcomes go back as one
    /// answer.
    connector_batches: HashSet<String>,
}

impl Handler<BatchFinished> for Session {
    type Result = ();

    fn handle(&mut self, msg: BatchFinished, ctx: &mut Self::Context) {
        if !self.is_current(&msg.turn_id) {
            return;
        }
        let answers = model_answers(&msg.outcomes, &msg.connector_batches);
        for answer in &answers {
            self.conversation.push(ChatMessage::Tool {
                tool_call_id: answer.model_call_id.clone(),
                name: answer.tool.clone(),
                content: answer.content.clone(),
            });
        }
        // A tool that ends the turn succeeded: the batch's answers are in the conversation,
        // and the model is not asked again.
        let ended_by = msg.outcomes.iter().find(|o| {
            o.status == CallStatus::Ok && self.config.end_turn_after.contains(&o.underlying_tool)
        });
        let ending = ended_by.map(|o| o.result.to_model_text());
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let ok: Vec<bool> = answers.iter().map(|a| a.ok).collect();
        let running = std::mem::take(&mut turn.running);
        turn.repeats.ran(&running, &ok);
        turn.calls.extend(msg.outcomes);
        if let Some(text) = ending {
            self.finish_turn(text, TurnStatus::Completed, None);
            return;
        }
        let drained_by_budget = turn.out_of_budget.take().is_some();
        // Read again rather than kept from when time ran out: a person may have raised the
        // budget meanwhile (answering a subagent's question about it).
        if let Some(spent) = self.meter.exhausted() {
            if !self.turn_stopped() {
                self.ask_for_budget(ctx, spent, AfterExtension::Continue { drained_by_budget });
                return;
            }
            self.finish_over_budget(spent);
            return;
        }
        self.undo_budget_drain(drained_by_budget);
        self.after_batch(ctx);
    }
}

/// What the model reads for one of its calls.
struct ModelAnswer {
    model_call_id: String,
    tool: String,
    content: String,
    ok: bool,
}

/// One answer per model call, in order: a call's own outcome, or, for a connector batch, its
/// entries' outcomes spliced into one `{"results": [...], ...}` in input order.
fn model_answers(
    outcomes: &[CallOutcome],
    connector_batches: &HashSet<String>,
) -> Vec<ModelAnswer> {
    let mut answers: Vec<ModelAnswer> = Vec::with_capacity(outcomes.len());
    let mut i = 0;
    while i < outcomes.len() {
        let first = &outcomes[i];
        if !connector_batches.contains(&first.model_call_id) {
            answers.push(ModelAnswer {
                model_call_id: first.model_call_id.clone(),
                tool: first.tool.clone(),
                content: first.result.to_model_text(),
                ok: first.status == CallStatus::Ok,
            });
            i += 1;
            continue;
        }
        let group: Vec<&CallOutcome> = outcomes[i..]
            .iter()
            .take_while(|o| o.model_call_id == first.model_call_id)
            .collect();
        i += group.len();
        let entries: Vec<(String, EntryOutcome)> = group
            .iter()
            .map(|o| (o.underlying_tool.clone(), entry_outcome(o)))
            .collect();
        answers.push(ModelAnswer {
            model_call_id: first.model_call_id.clone(),
            tool: first.tool.clone(),
            content: batch_answer(&entries).to_string(),
            ok: group.iter().all(|o| o.status == CallStatus::Ok),
        });
    }
    answers
}

/// One connector entry's part of its batch's answer.
fn entry_outcome(outcome: &CallOutcome) -> EntryOutcome {
    let code = match outcome.status {
        CallStatus::Ok | CallStatus::Error => return EntryOutcome::of_result(&outcome.result),
        CallStatus::Denied => "DENIED",
        CallStatus::Timeout => "TIMEOUT",
        CallStatus::Interrupted => "INTERRUPTED",
    };
    EntryOutcome::Error(json!({"code": code, "message": outcome.result.to_model_text()}))
}

impl Session {
    /// The budget that drained the running batch has room again: the turn goes on, unless
    /// somebody drained it too.
    pub(super) fn undo_budget_drain(&mut self, drained_by_budget: bool) {
        if let Some(turn) = self.turn.as_mut()
            && drained_by_budget
            && !turn.drain_asked
        {
            turn.drain = CancellationToken::new();
        }
    }

    /// A batch's results are in: the turn ends if it was stopped or drained, else the model
    /// is asked again.
    pub(super) fn after_batch(&mut self, ctx: &mut Context<Self>) {
        let stopped = self.turn_stopped();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let drained = turn.drain.is_cancelled() && !stopped;
        if drained {
            let text = format!(
                "Stopped after the running calls finished ({} tool call(s) of this turn got a result); nothing new was started.",
                turn.calls.len()
            );
            self.finish_turn(text, TurnStatus::Interrupted, None);
            return;
        }
        if stopped {
            let text = format!(
                "Stopped. {} tool call(s) of this turn got a result; the rest were cancelled.",
                turn.calls
                    .iter()
                    .filter(|c| c.status != CallStatus::Interrupted)
                    .count()
            );
            self.finish_turn(text, TurnStatus::Interrupted, None);
            return;
        }
        let final_round = turn.requests >= self.config.max_iterations;
        self.request_model(ctx, final_round);
    }
}
