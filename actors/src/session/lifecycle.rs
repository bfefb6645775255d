//! A turn's life: begun on a user message (or on background results), opened with its budget
//! checked and its timer set, and finished with its outcome stored and sent.

use actix::WeakAddr;
use actix::prelude::*;
use opentelemetry::KeyValue;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::control::ReadInbox;
use super::outcome::{TurnOutcome, TurnStatus};
use super::turn::{Request, Turn};
use crate::call::new_id;
use crate::events::EventKind;
use crate::model::ChatMessage;
use crate::repeats::RepeatGuard;
use crate::supervisor::{BeginTurn, EndTurn};
use crate::trace::TraceSpan;

impl Session {
    /// Ends the running turn with `text` and `status`, and answers the sender.
    pub(super) fn finish_turn(&mut self, text: String, status: TurnStatus, error: Option<String>) {
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        self.meter.stop_work();
        self.written = None;
        self.persist();
        let spend = self.meter.spent().since(&turn.spent_before);
        turn.trace.set(|| {
            vec![
                KeyValue::new("troupe.turn.status", status.as_str()),
                KeyValue::new("troupe.model_requests", i64::from(turn.requests)),
                KeyValue::new("gen_ai.usage.input_tokens", spend.input_tokens as i64),
                KeyValue::new("gen_ai.usage.output_tokens", spend.output_tokens as i64),
                KeyValue::new("troupe.cost_usd", spend.cost_usd),
            ]
        });
        if status == TurnStatus::Failed {
            turn.trace
                .fail(error.clone().unwrap_or_else(|| text.clone()));
        }
        turn.trace.end();
        self.supervisor.do_send(EndTurn {
            session_id: self.id.clone(),
            turn_id: turn.id.clone(),
        });
        self.events.send(
            &self.id,
            EventKind::Final {
                turn_id: turn.id.clone(),
                text: text.clone(),
                status: status.as_str().to_string(),
                usage: spend,
            },
        );
        if let Some(reply) = turn.reply.take() {
            let outcome = TurnOutcome {
                turn_id: turn.id,
                text,
                status,
                model_requests: turn.requests,
                calls: turn.calls,
                error,
                spend,
            };
            match self.written.take() {
                // The caller hears the outcome once it is stored: an answer it was given is
                // never lost to a crash.
                Some(written) => {
                    tokio::spawn(async move {
                        written.await;
                        let _ = reply.send(outcome);
                    });
                }
                None => {
                    let _ = reply.send(outcome);
                }
            }
        }
        // Notices that came after the turn's last request are read in a turn of their own.
        if !self.notices.is_empty() {
            let notices = std::mem::take(&mut self.notices);
            self.inbox.push(super::control::join_notices(notices));
        }
        if self.delegations.is_cancelled() {
            // A hard stop ended this turn: what arrived waits for the user.
            self.held.append(&mut self.inbox);
        }
        if !self.inbox.is_empty()
            && let Some(me) = self.me.as_ref().and_then(WeakAddr::upgrade)
        {
            me.do_send(ReadInbox);
        }
    }

    /// Starts a turn on `text`; `reply` receives the outcome (none for a turn the session
    /// starts itself to read background results).
    pub(super) fn begin_turn(
        &mut self,
        ctx: &mut Context<Self>,
        text: String,
        reply: Option<oneshot::Sender<TurnOutcome>>,
    ) {
        // Calls a reopened session could have asked again: a new message goes first.
        if let Some(calls) = self.resume.take() {
            self.note_not_run(calls);
        }
        let waiting: Vec<String> = self.held.drain(..).chain(self.inbox.drain(..)).collect();
        for waiting in waiting {
            self.conversation
                .push(ChatMessage::User { content: waiting });
        }
        self.conversation.push(ChatMessage::User { content: text });
        if !self.undelivered.is_empty()
            && let Some(persist) = self.config.persist.clone()
        {
            // Read results are marked so only once the messages holding them are queued.
            self.persist();
            for id in self.undelivered.drain(..) {
                persist.journal.delegation(
                    &self.id,
                    &id,
                    crate::journal::DelegationState::Delivered,
                );
            }
        }
        if self.open_turn(ctx, reply) {
            self.request_model(ctx, self.config.max_iterations == 0);
        }
    }

    /// Opens a turn on the conversation as it is; false when its budget is already spent (the
    /// turn then ended at once).
    pub(super) fn open_turn(
        &mut self,
        ctx: &mut Context<Self>,
        reply: Option<oneshot::Sender<TurnOutcome>>,
    ) -> bool {
        let turn_id = new_id();
        let token = self.lifetime.child_token();
        self.supervisor.do_send(BeginTurn {
            session_id: self.id.clone(),
            turn_id: turn_id.clone(),
            token: token.clone(),
        });
        self.events.send(
            &self.id,
            EventKind::TurnStarted {
                turn_id: turn_id.clone(),
            },
        );
        self.meter.start_work();
        let parent = self.next_turn_parent.take();
        let trace = TraceSpan::start(
            "turn",
            parent.as_ref().unwrap_or(&self.trace),
            opentelemetry::trace::SpanKind::Internal,
            || vec![KeyValue::new("troupe.turn.id", turn_id.clone())],
        );
        self.turn = Some(Turn {
            id: turn_id,
            token,
            requests: 0,
            reply,
            calls: Vec::new(),
            nudged: false,
            repeats: RepeatGuard::default(),
            running: Vec::new(),
            wrap_up: false,
            drain: CancellationToken::new(),
            spent_before: self.meter.spent(),
            out_of_budget: None,
            request: Request::Idle,
            drain_asked: false,
            trace,
        });
        self.model_state.begin_turn();
        if let Some(spent) = self.meter.exhausted() {
            let text = format!("Nothing was done: {spent}. Raise the budget to go on.");
            self.finish_turn(text, TurnStatus::BudgetExceeded, Some(spent.to_string()));
            return false;
        }
        if let Some(left) = self.meter.wall_left() {
            let turn_id = self.turn.as_ref().map(|t| t.id.clone()).unwrap_or_default();
            ctx.run_later(left, move |session, ctx| session.out_of_time(ctx, &turn_id));
        }
        true
    }
}
