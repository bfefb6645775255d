//! The session actor's life (started, stopped) and the messages it takes from outside: a user
//! message, a drain, a close, a steer, background results, the conversation, a resumed turn.

use actix::prelude::*;
use tokio::sync::oneshot;

use super::Session;
use super::outcome::{SessionError, TurnOutcome, TurnStatus};
use super::routing::{call_key, route_all};
use crate::delegate::DelegationFinished;
use crate::events::EventKind;
use crate::journal::OpenedSession;
use crate::model::{ChatMessage, ToolCallRequest};
use crate::repeats::CallKey;
use crate::supervisor::UnregisterSession;
use crate::trace::TraceSpan;

impl Actor for Session {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.arbiter = actix_rt::Arbiter::try_current();
        self.me = Some(ctx.address().downgrade());
        if self.resume.is_none() && !self.inbox.is_empty() {
            // A reopened session with background results waiting reads them now.
            ctx.notify(ReadInbox);
        }
        self.watch_delegations();
        if let Some(persist) = &self.config.persist {
            persist.journal.opened(OpenedSession {
                id: self.id.clone(),
                agent_path: self.path.clone(),
                model: self
                    .config
                    .model
                    .clone()
                    .or_else(|| self.provider.model())
                    .unwrap_or_default(),
                origin: persist.origin.clone(),
            });
        }
        self.hooks.on_session_start(&self.id, &self.path);
        self.events.send(
            &self.id,
            EventKind::SessionStarted {
                agent_path: self.path.clone(),
                provider: self.provider.describe(),
            },
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.lifetime.cancel();
        if self.turn.is_some() {
            self.finish_turn(
                "The session closed before the turn ended.".into(),
                TurnStatus::Interrupted,
                None,
            );
        }
        self.supervisor.do_send(UnregisterSession {
            session_id: self.id.clone(),
        });
        self.hooks.on_session_end(&self.id, &self.path, "closed");
        self.trace.end();
        self.events.send(
            &self.id,
            EventKind::SessionEnded {
                reason: "closed".into(),
            },
        );
    }
}

/// A user message. Sent through [`SessionHandle::send`](super::SessionHandle::send); replies
/// when the turn ends.
#[derive(Debug, Message)]
#[rtype(result = "Result<TurnOutcome, SessionError>")]
pub struct SendMessage {
    /// What the user said.
    pub text: String,
    /// The span the turn goes under (an HTTP request's `traceparent`); the session's when
    /// `None`.
    pub trace: Option<TraceSpan>,
}

impl Handler<SendMessage> for Session {
    type Result = ResponseFuture<Result<TurnOutcome, SessionError>>;

    fn handle(&mut self, msg: SendMessage, ctx: &mut Self::Context) -> Self::Result {
        if self.turn.is_some() {
            let id = self.id.clone();
            return Box::pin(async move { Err(SessionError::Busy(id)) });
        }
        if self.delegations.is_cancelled() && !self.lifetime.is_cancelled() {
            // The user is back after a hard stop: new delegations get a fresh token.
            self.delegations = self.lifetime.child_token();
            self.watch_delegations();
        }
        let (reply, answer) = oneshot::channel();
        self.next_turn_parent = msg.trace;
        self.begin_turn(ctx, msg.text, Some(reply));
        let id = self.id.clone();
        Box::pin(async move { answer.await.map_err(|_| SessionError::Closed(id)) })
    }
}

/// Ends the running turn gently: calls already running finish and their results are kept,
/// nothing new starts (no further model request or batch). With no batch running (the model is
/// being asked), the request is cancelled at once. Replies false when no turn is running.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Drain;

impl Handler<Drain> for Session {
    type Result = bool;

    fn handle(&mut self, _msg: Drain, _ctx: &mut Self::Context) -> bool {
        let Some(turn) = self.turn.as_mut() else {
            return false;
        };
        let turn_id = turn.id.clone();
        turn.drain_asked = true;
        if turn.running.is_empty() {
            turn.token.cancel();
        } else {
            turn.drain.cancel();
        }
        // Subagents at work under a running `delegate_task` drain too, each passing it down.
        let depth = self.path.len() + 1;
        for record in self.subagents.records_below(&self.id) {
            if record.session.agent_path().len() == depth {
                tokio::spawn(async move {
                    let _ = record.session.drain().await;
                });
            }
        }
        self.events.send(
            &self.id,
            EventKind::Stop {
                kind: "drain".into(),
                turn_id: Some(turn_id),
            },
        );
        true
    }
}

/// Closes the session: its running turn is cancelled and ends as interrupted.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CloseSession;

impl Handler<CloseSession> for Session {
    type Result = ();

    fn handle(&mut self, _msg: CloseSession, ctx: &mut Self::Context) {
        self.lifetime.cancel();
        ctx.stop();
    }
}

/// A note for a running subagent, read before its next model request. Sent by the parent's
/// `delegate_task` (`action=steer`); replies false when no turn is running (too late).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Steer {
    /// The note.
    pub text: String,
}

impl Handler<Steer> for Session {
    type Result = bool;

    fn handle(&mut self, msg: Steer, _ctx: &mut Self::Context) -> bool {
        if self.turn.is_none() {
            return false;
        }
        self.steers.push(msg.text);
        true
    }
}

impl Handler<DelegationFinished> for Session {
    type Result = ();

    fn handle(&mut self, msg: DelegationFinished, ctx: &mut Self::Context) {
        // Results of a stopped delegation, or any that come after a hard stop, wait for the
        // user's next message: a stopped agent must not start working again by itself.
        let hold = msg.stopped || self.delegations.is_cancelled();
        let start = !hold && self.turn.is_none();
        if let Some(persist) = &self.config.persist {
            persist.journal.delegation(
                &self.id,
                &msg.delegation_id,
                crate::journal::DelegationState::Arrived(msg.text.clone()),
            );
            self.undelivered.push(msg.delegation_id.clone());
        }
        self.events.send(
            &self.id,
            EventKind::DelegationDelivered {
                delegation_id: msg.delegation_id,
                started_turn: start,
            },
        );
        if start {
            self.begin_turn(ctx, msg.text, None);
        } else if hold {
            self.held.push(msg.text);
        } else {
            self.inbox.push(msg.text);
        }
    }
}

/// A notice about one of the session's background processes (see
/// [`troupe_tools::builtin::ProcessNotice`]): read before the next model request of a running
/// turn, or in a turn of its own when the session is idle.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct BackgroundNotice(pub troupe_tools::builtin::ProcessNotice);

impl Handler<BackgroundNotice> for Session {
    type Result = ();

    fn handle(&mut self, msg: BackgroundNotice, ctx: &mut Self::Context) {
        let notice = msg.0;
        // After a hard stop the notice waits for the person's next message: a stopped agent
        // must not start working again by itself.
        let hold = self.delegations.is_cancelled();
        let start = self.turn.is_none() && !hold;
        self.events.send(
            &self.id,
            EventKind::ProcessNotice {
                process_id: notice.process_id.clone(),
                kind: notice.kind.as_str().to_string(),
                exit_code: notice.exit_code,
                summary: notice.summary.clone(),
                started_turn: start,
            },
        );
        if start {
            self.begin_turn(ctx, notice.text, None);
        } else if hold && self.turn.is_none() {
            self.held.push(notice.text);
        } else {
            self.notices.push(notice.text);
        }
    }
}

/// Several notices read at once go in one message, said to be one batch.
pub(super) fn join_notices(mut notices: Vec<String>) -> String {
    if notices.len() == 1 {
        return notices.pop().unwrap_or_default();
    }
    format!(
        "[troupe: {} background process notices arrived together; read them as one batch and answer them together, keeping failures in view.]\n{}",
        notices.len(),
        notices.join("\n")
    )
}

/// Passes the registry's notices for a session to its actor until the session closes; then
/// the channel closes and the registry sends what follows to the session's parent.
pub(super) fn forward_notices(
    mut notices: tokio::sync::mpsc::UnboundedReceiver<troupe_tools::builtin::ProcessNotice>,
    session: actix::WeakAddr<Session>,
    lifetime: tokio_util::sync::CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            let notice = tokio::select! {
                _ = lifetime.cancelled() => return,
                notice = notices.recv() => match notice {
                    Some(notice) => notice,
                    None => return,
                },
            };
            match session.upgrade() {
                Some(addr) => addr.do_send(BackgroundNotice(notice)),
                None => return,
            }
        }
    });
}

/// Reads waiting background results in a new turn, if the session is idle. Sent by the
/// session to itself when a turn ends with results waiting.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(super) struct ReadInbox;

impl Handler<ReadInbox> for Session {
    type Result = ();

    fn handle(&mut self, _msg: ReadInbox, ctx: &mut Self::Context) {
        if self.turn.is_none() && !self.inbox.is_empty() && !self.delegations.is_cancelled() {
            let mut waiting = std::mem::take(&mut self.inbox);
            let last = waiting.pop().unwrap_or_default();
            self.inbox = waiting;
            self.begin_turn(ctx, last, None);
        }
    }
}

/// A copy of the conversation so far (without the system prompt).
#[derive(Debug, Message)]
#[rtype(result = "Vec<ChatMessage>")]
pub struct GetConversation;

impl Handler<GetConversation> for Session {
    type Result = MessageResult<GetConversation>;

    fn handle(&mut self, _msg: GetConversation, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.conversation.clone())
    }
}

/// Replaces the conversation of an idle session (a chat that changes its model or tools goes on
/// in a new session with the old messages); replies false while a turn runs.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct LoadConversation(pub Vec<ChatMessage>);

impl Handler<LoadConversation> for Session {
    type Result = bool;

    fn handle(&mut self, msg: LoadConversation, _ctx: &mut Self::Context) -> bool {
        if self.turn.is_some() {
            return false;
        }
        self.conversation = msg.0;
        self.persisted = 0;
        self.written = None;
        self.persist();
        true
    }
}

/// Goes on with the turn a reopened session stopped inside: the calls that were waiting for
/// approval are asked again and the turn continues as if it never stopped; with none, the
/// turn ends as interrupted. Replies `None` when there is no such turn.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<TurnOutcome>, SessionError>")]
pub struct ResumeTurn;

impl Handler<ResumeTurn> for Session {
    type Result = ResponseFuture<Result<Option<TurnOutcome>, SessionError>>;

    fn handle(&mut self, _msg: ResumeTurn, ctx: &mut Self::Context) -> Self::Result {
        if self.turn.is_some() {
            let id = self.id.clone();
            return Box::pin(async move { Err(SessionError::Busy(id)) });
        }
        let Some(calls) = self.resume.take() else {
            return Box::pin(async { Ok(None) });
        };
        let (reply, answer) = oneshot::channel();
        if self.meter.exhausted().is_none() {
            return self.resume_with(ctx, calls, reply, answer);
        }
        // No budget left to run them: they are noted as not run, and the turn ends at once.
        self.note_not_run(calls);
        self.open_turn(ctx, Some(reply));
        let id = self.id.clone();
        Box::pin(async move { answer.await.map(Some).map_err(|_| SessionError::Closed(id)) })
    }
}

impl Session {
    /// Gives each call a result saying it never ran (a reopened session's calls that were
    /// waiting for approval and will not be asked again).
    pub(super) fn note_not_run(&mut self, calls: Vec<ToolCallRequest>) {
        for call in calls {
            self.conversation.push(ChatMessage::Tool {
                content: crate::journal::not_run_note(&call.name),
                tool_call_id: call.id,
                name: call.name,
            });
        }
    }

    /// [`ResumeTurn`] with budget left: asks for `calls` again, or ends the turn when none.
    pub(super) fn resume_with(
        &mut self,
        ctx: &mut Context<Self>,
        calls: Vec<ToolCallRequest>,
        reply: oneshot::Sender<TurnOutcome>,
        answer: oneshot::Receiver<TurnOutcome>,
    ) -> ResponseFuture<Result<Option<TurnOutcome>, SessionError>> {
        if self.open_turn(ctx, Some(reply)) {
            if calls.is_empty() {
                self.finish_turn(
                    "troupe stopped while this turn was working, and it did not finish. Send the message again to go on.".into(),
                    TurnStatus::Interrupted,
                    None,
                );
            } else {
                let routed = route_all(calls, &self.view, &self.config.tool_search);
                let keys: Vec<CallKey> = routed.iter().map(|r| call_key(r, &self.view)).collect();
                if let Some(turn) = self.turn.as_mut() {
                    turn.running = keys;
                }
                self.run_batch(ctx, routed);
            }
        }
        let id = self.id.clone();
        Box::pin(async move { answer.await.map(Some).map_err(|_| SessionError::Closed(id)) })
    }
}
