//! Running out of budget during a turn: the time budget ending a turn gently, a person asked
//! to extend a spent budget, and the turn ending with what it has when nobody does.

use actix::prelude::*;

use super::Session;
use super::outcome::TurnStatus;
use super::turn::{AfterExtension, Request};
use crate::model::ChatMessage;
use crate::supervisor::{RequestExtension, Ticket, Verdict, WithdrawApproval};
use crate::usage::Exhausted;

impl Session {
    /// The time budget ran out during the turn `turn_id`: it ends gently, as on a drain (the
    /// running calls finish, nothing new starts), with status `budget_exceeded`. While a model
    /// request is out, a person may be asked for more time first; the request goes on meanwhile.
    pub(super) fn out_of_time(&mut self, ctx: &mut Context<Self>, turn_id: &str) {
        if !self.is_current(turn_id) {
            return;
        }
        let Some(spent) = self.meter.exhausted() else {
            return;
        };
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if matches!(turn.request, Request::AskingForTime(_)) {
            // Another timer for the same deadline: the person is being asked already.
            return;
        }
        tracing::info!(session_id = %self.id, %spent, "budget spent; the turn ends");
        turn.out_of_budget = Some(spent.clone());
        if !turn.running.is_empty() {
            turn.drain.cancel();
        } else if matches!(turn.request, Request::Out) && !turn.token.is_cancelled() {
            turn.request = Request::AskingForTime(None);
            self.ask_for_budget(ctx, spent, AfterExtension::Request);
        } else {
            turn.token.cancel();
        }
    }

    /// Ends the turn because `spent` ran out, answering with what the turn has: the model's
    /// latest text of this turn, if it wrote any.
    pub(super) fn finish_over_budget(&mut self, spent: Exhausted) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let got = turn.calls.len();
        let said = self
            .conversation
            .iter()
            .rev()
            .take_while(|m| !matches!(m, ChatMessage::User { .. }))
            .find_map(|m| match m {
                ChatMessage::Assistant {
                    content: Some(text),
                    ..
                } if !text.trim().is_empty() => Some(text.trim().to_string()),
                _ => None,
            });
        let note = format!(
            "Stopped: {spent}. {got} tool call(s) of this turn got a result; nothing further was started."
        );
        let text = match said {
            Some(said) => format!("{said}\n\n{note}"),
            None => note,
        };
        self.finish_turn(text, TurnStatus::BudgetExceeded, Some(spent.to_string()));
    }

    /// The turn has more to do and `spent` ran out: the supervisor may ask a person to extend
    /// it (approvals on and somebody to answer). Extended, the turn goes on with `then`;
    /// otherwise it ends softly with status `budget_exceeded`.
    pub(super) fn ask_for_budget(
        &mut self,
        ctx: &mut Context<Self>,
        spent: Exhausted,
        then: AfterExtension,
    ) {
        let (Some(turn), Some(extend_to)) = (self.turn.as_ref(), self.meter.extension_of(&spent))
        else {
            self.refuse_extension(spent, then);
            return;
        };
        let turn_id = turn.id.clone();
        let stopped = turn.token.clone();
        let supervisor = self.supervisor.clone();
        let ask = self.supervisor.send(RequestExtension {
            session_id: self.id.clone(),
            turn_id: turn_id.clone(),
            spent: spent.clone(),
            extend_to,
        });
        // A stop or a drain of the turn ends the wait at once and takes the question back (a
        // drain alone would leave it waiting for an answer nobody needs).
        let verdict = async move {
            match ask.await {
                Ok(Ticket::Settled(verdict)) => verdict,
                Ok(Ticket::Pending {
                    request_id,
                    mut verdict,
                }) => {
                    let answered = tokio::select! {
                        answer = &mut verdict => Some(answer.unwrap_or(Verdict::Interrupted)),
                        () = stopped.cancelled() => None,
                    };
                    answered.unwrap_or_else(|| {
                        // Dropped first: the supervisor withdraws a question nobody waits on.
                        drop(verdict);
                        supervisor.do_send(WithdrawApproval { request_id });
                        Verdict::Interrupted
                    })
                }
                Err(_) => Verdict::Interrupted,
            }
        };
        ctx.spawn(verdict.into_actor(self).map(move |verdict, session, ctx| {
            if !session.is_current(&turn_id) {
                return;
            }
            if verdict != Verdict::Approved || session.turn_stopped() {
                session.refuse_extension(spent, then);
                return;
            }
            session.meter.extend(&spent, extend_to);
            tracing::info!(session_id = %session.id, %spent, extend_to, "budget extended by a person");
            if let Some(more) = session.meter.exhausted() {
                // Another limit (or an ancestor's) is spent too: that is a question of its own.
                session.ask_for_budget(ctx, more, then);
                return;
            }
            if let Some(left) = session.meter.wall_left() {
                let turn_id = turn_id.clone();
                ctx.run_later(left, move |session, ctx| session.out_of_time(ctx, &turn_id));
            }
            match then {
                AfterExtension::Calls(response) => session.run_calls(ctx, response),
                AfterExtension::Request => {
                    let Some(turn) = session.turn.as_mut() else {
                        return;
                    };
                    turn.out_of_budget = None;
                    if let Some(answer) = turn.time_question_settled() {
                        session.answered(ctx, answer);
                    }
                }
                AfterExtension::Continue { drained_by_budget } => {
                    session.undo_budget_drain(drained_by_budget);
                    session.after_batch(ctx);
                }
            }
        }));
    }

    /// No more budget: the turn ends with what it has.
    pub(super) fn refuse_extension(&mut self, spent: Exhausted, then: AfterExtension) {
        let response = match then {
            AfterExtension::Calls(response) => Some(response),
            AfterExtension::Request => {
                let Some(turn) = self.turn.as_mut() else {
                    return;
                };
                match turn.time_question_settled() {
                    Some(answer) => answer.result.ok(),
                    None => {
                        // The request is called off; its (cancelled) answer ends the turn.
                        turn.token.cancel();
                        return;
                    }
                }
            }
            AfterExtension::Continue { .. } => None,
        };
        if let Some(response) = response {
            // Its calls are not run, and the conversation keeps only the text (a call with
            // no result would be refused by the server at the next request).
            self.conversation.push(ChatMessage::Assistant {
                content: response.content,
                tool_calls: Vec::new(),
            });
        }
        self.finish_over_budget(spent);
    }
}
