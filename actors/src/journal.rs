//! Durable sessions: what a session writes while it works ([`Journal`]) and what it is reopened
//! from ([`Restore`]).
//!
//! A session with a journal (`SessionConfig::persist`) hands it each completed step: the
//! messages added since the last step, with what the session has spent. A journal applies a
//! step whole or not at all, in the order given, so a process that dies leaves the session as of
//! its last completed step. Calls that wait for a person are recorded before anyone can answer
//! them, and an approved call is recorded before it runs: on reopening, a call with no result is
//! either known never to have run (it was waiting for approval: it may be asked again) or its
//! effect is unknown (it is marked interrupted and not run again).
//!
//! The store behind the trait (SQLite, PostgreSQL) lives with the runtime that opens it.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

use crate::model::ChatMessage;
use crate::usage::Spend;

/// The future of a write the caller waits for.
pub type Durable = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a session came from, so it can be reopened the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Origin {
    /// `chat`, `http`, `worker`, `subagent` or `api`.
    pub kind: String,
    /// What reopening it needs (the HTTP request that created it, the profile); opaque here.
    #[serde(default)]
    pub options: serde_json::Value,
}

impl Origin {
    /// An origin of `kind` with no options.
    pub fn new(kind: impl Into<String>) -> Origin {
        Origin {
            kind: kind.into(),
            options: serde_json::Value::Null,
        }
    }
}

/// A session as it is first written.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenedSession {
    /// Its id.
    pub id: String,
    /// Session ids from the root down to it.
    pub agent_path: Vec<String>,
    /// The model it talks to.
    pub model: String,
    /// Where it came from.
    pub origin: Origin,
}

/// How far a call without a result got before the process stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPhase {
    /// A person was asked; the call had not started.
    AwaitingApproval,
    /// A person approved it; it was about to run (or ran).
    Approved,
    /// A person was asked and the call had not started, but its arguments held secrets that
    /// are masked in the store: it cannot be asked again as it was, so it is noted as not run.
    AwaitingMasked,
}

impl CallPhase {
    /// The word stored.
    pub fn as_str(self) -> &'static str {
        match self {
            CallPhase::AwaitingApproval => "awaiting_approval",
            CallPhase::Approved => "approved",
            CallPhase::AwaitingMasked => "awaiting_masked",
        }
    }

    /// The phase a stored word names.
    pub fn parse(word: &str) -> Option<CallPhase> {
        match word {
            "awaiting_approval" => Some(CallPhase::AwaitingApproval),
            "approved" => Some(CallPhase::Approved),
            "awaiting_masked" => Some(CallPhase::AwaitingMasked),
            _ => None,
        }
    }
}

/// Where a background delegation's results are.
#[derive(Debug, Clone, PartialEq)]
pub enum DelegationState {
    /// Its subagents are at work.
    Running,
    /// Its results arrived and wait to be read by the session.
    Arrived(String),
    /// The session read them (they are in its messages).
    Delivered,
}

/// Where a session's steps are written. Writes are queued in order; [`Journal::call_phase`] is
/// the one that can be awaited until it is durable.
pub trait Journal: Send + Sync + fmt::Debug {
    /// A session opened (or reopened: the record is kept, its status set to open).
    fn opened(&self, session: OpenedSession);
    /// One completed step: `messages` replace the stored ones from position `first` on (so a
    /// conversation loaded whole is written whole), and `spent` is the session's total now. The
    /// write is queued at once; the future resolves once it is durable. A write that fails
    /// sets `lost`, and the session then writes its whole conversation again at its next step,
    /// so the store never keeps a conversation with a hole in it.
    fn step(
        &self,
        session_id: &str,
        first: usize,
        messages: Vec<ChatMessage>,
        spent: Spend,
        lost: &Arc<AtomicBool>,
    ) -> Durable;
    /// How far the call `model_call_id` got; the future resolves once that is durable.
    fn call_phase(&self, session_id: &str, model_call_id: &str, phase: CallPhase) -> Durable;
    /// Where the background delegation `delegation_id` of the session is.
    fn delegation(&self, session_id: &str, delegation_id: &str, state: DelegationState);
    /// The session's work is over (a board run settled, say): it stays readable and can be
    /// reopened, but nothing should reopen it by itself. A process that merely stops does not
    /// call this, so what it had open is found open again.
    fn closed(&self, _session_id: &str) {}
}

/// A session's journal and how to reopen it.
#[derive(Debug, Clone)]
pub struct Persist {
    /// Where steps go.
    pub journal: Arc<dyn Journal>,
    /// Where the session came from.
    pub origin: Origin,
}

/// What a session is reopened from.
#[derive(Debug, Clone, Default)]
pub struct Restore {
    /// The stored session's id (kept).
    pub id: String,
    /// Its messages, as of its last completed step.
    pub conversation: Vec<ChatMessage>,
    /// What it had spent.
    pub spent: Spend,
    /// Provider ids of calls that were waiting for a person's approval (never started).
    pub awaiting_approval: HashSet<String>,
    /// Provider ids of other calls known never to have started (noted as not run, never
    /// asked again).
    pub never_started: HashSet<String>,
    /// Background delegations that were at work when the process stopped (their subagents
    /// stopped with it): the session is told they were interrupted.
    pub delegations_running: Vec<String>,
    /// Results of background delegations that had arrived but were not read yet:
    /// `(delegation id, text)`.
    pub delegations_arrived: Vec<(String, String)>,
    /// Whether calls that were waiting for approval are asked again (the turn then goes on once
    /// [`crate::session::SessionHandle::resume_turn`] is called); otherwise they are noted as
    /// not run, like the interrupted ones.
    pub ask_again: bool,
}

/// The result text a call gets when the process stopped while it ran: it is not run again.
pub fn interrupted_note(tool: &str) -> String {
    format!(
        "[Interrupted: troupe stopped while {tool} was running, so whether it had any effect is unknown. It was not run again; check its effect before calling it again.]"
    )
}

/// The result text a call gets when the process stopped while it waited for approval.
pub fn not_run_note(tool: &str) -> String {
    format!(
        "[Not run: {tool} was waiting for a person's approval when troupe stopped; it never started. Call it again if it is still needed.]"
    )
}

/// The message a session reads for a background delegation whose subagents stopped with the
/// process.
pub fn delegation_interrupted_note(delegation_id: &str, session_id: &str) -> String {
    format!(
        "[Background delegation {delegation_id} was interrupted: troupe stopped before its subagents finished, so it has no results. What they did is kept with this session (troupe sessions show {session_id} --tree); check it before starting the work again.]"
    )
}

/// The calls of the conversation's last model message that have no result, in order.
pub fn unanswered_calls(conversation: &[ChatMessage]) -> Vec<crate::model::ToolCallRequest> {
    let Some(at) = conversation
        .iter()
        .rposition(|m| matches!(m, ChatMessage::Assistant { .. }))
    else {
        return Vec::new();
    };
    let ChatMessage::Assistant { tool_calls, .. } = &conversation[at] else {
        return Vec::new();
    };
    let answered: HashSet<&str> = conversation[at + 1..]
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    tool_calls
        .iter()
        .filter(|c| !answered.contains(c.id.as_str()))
        .cloned()
        .collect()
}

/// Whether the conversation stopped inside a turn: its last message is not the model's answer.
pub fn ends_inside_turn(conversation: &[ChatMessage]) -> bool {
    match conversation.last() {
        None => false,
        Some(ChatMessage::Assistant { tool_calls, .. }) => !tool_calls.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCallRequest;

    fn call(id: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: "terminal".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn unanswered_calls_are_those_of_the_last_model_message_without_a_result() {
        let conversation = vec![
            ChatMessage::User {
                content: "go".into(),
            },
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![call("a"), call("b"), call("c")],
            },
            ChatMessage::Tool {
                tool_call_id: "b".into(),
                name: "terminal".into(),
                content: "ok".into(),
            },
        ];
        let ids: Vec<String> = unanswered_calls(&conversation)
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, ["a", "c"]);
        assert!(ends_inside_turn(&conversation));
        let done = vec![ChatMessage::Assistant {
            content: Some("done".into()),
            tool_calls: vec![],
        }];
        assert!(unanswered_calls(&done).is_empty());
        assert!(!ends_inside_turn(&done));
        assert!(!ends_inside_turn(&[]));
    }

    #[test]
    fn phases_round_trip_through_their_words() {
        for phase in [
            CallPhase::AwaitingApproval,
            CallPhase::Approved,
            CallPhase::AwaitingMasked,
        ] {
            assert_eq!(CallPhase::parse(phase.as_str()), Some(phase));
        }
        assert_eq!(CallPhase::parse("running"), None);
    }
}
