//! Questions a session asks its person (`clarify`), routed like approvals: the same queue, the
//! same answerers (the chat prompt, the HTTP API, a program's stream), the same timeout and
//! the same withdrawal on `/stop`. A subagent's question reaches whoever answers the root's
//! approvals. With nobody to ask it settles at once, so a headless run never waits.

use actix::prelude::*;
use tokio::sync::oneshot;
use troupe_tools::clarify::{NO_ONE_TO_ASK, Question};

use super::{ApprovalChoice, ApprovalKind, Outcome, PendingApproval, Supervisor, Ticket, Verdict};
use crate::call::new_id;

/// Asks the session's person a question. Sent by the session's `clarify` call (and by a
/// `manage_connections` connect that waits on the person); the reply is a
/// [`Ticket`] whose verdict is [`Verdict::Answered`] with the person's words, or a text the
/// model reads when nobody answered ([`Verdict::TimedOut`], [`Verdict::Denied`]).
#[derive(Debug, Message)]
#[rtype(result = "Ticket")]
pub struct AskQuestion {
    /// The session asking.
    pub session_id: String,
    /// The `clarify` call entry.
    pub call_id: String,
    /// The question.
    pub question: Question,
    /// The tool whose call asks (`clarify`, or `manage_connections` waiting on a connect).
    pub tool: String,
}

impl Handler<AskQuestion> for Supervisor {
    type Result = MessageResult<AskQuestion>;

    fn handle(&mut self, msg: AskQuestion, ctx: &mut Self::Context) -> Self::Result {
        if !self.attended() {
            return MessageResult(Ticket::Settled(Verdict::Denied(NO_ONE_TO_ASK.to_string())));
        }
        let agent_path = self
            .sessions
            .get(&msg.session_id)
            .map(|n| n.path.clone())
            .unwrap_or_else(|| vec![msg.session_id.clone()]);
        let request = PendingApproval {
            request_id: new_id(),
            kind: ApprovalKind::Question,
            session_id: msg.session_id,
            agent_path,
            call_id: msg.call_id,
            tool: msg.tool,
            arguments: msg.question.to_arguments(),
            reason: msg.question.question.clone(),
            key: String::new(),
        };
        let request_id = request.request_id.clone();
        // Never shared: two questions are two questions, even when worded alike.
        let share_key = format!("question\u{0}{request_id}");
        let (tx, rx) = oneshot::channel();
        self.enqueue(ctx, request, share_key, vec![tx]);
        MessageResult(Ticket::Pending {
            request_id,
            verdict: rx,
        })
    }
}

/// How a question ended, as the model reads it.
pub(super) fn question_verdict(outcome: Outcome, timeout_secs: u64) -> Verdict {
    match outcome {
        Outcome::Answered(ApprovalChoice::Answer { text }) => Verdict::Answered(text),
        // A yes of the approval kind is no answer to a question; a deny is a refusal to answer.
        Outcome::Answered(ApprovalChoice::Deny {
            reason: Some(reason),
        }) if !reason.trim().is_empty() => Verdict::Denied(format!(
            "The person did not pick an answer and said: \"{}\". Take that into account, decide, and say what you assumed.",
            reason.trim()
        )),
        Outcome::Answered(_) => Verdict::Denied(
            "The person chose not to answer. Decide for yourself and say what you assumed.".into(),
        ),
        Outcome::TimedOut => Verdict::TimedOut(format!(
            "Nobody answered within {timeout_secs} s. Decide for yourself, go on, and say what you assumed."
        )),
        Outcome::Interrupted => Verdict::Interrupted,
    }
}
