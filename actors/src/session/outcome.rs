//! What a session answers: how a turn ended ([`TurnStatus`], [`TurnOutcome`]) and why it could
//! not do what was asked ([`SessionError`]).

use actix::MailboxError;
use serde::Serialize;

use crate::call::CallOutcome;
use crate::supervisor::SupervisorError;
use crate::usage::Spend;

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The model gave its final answer.
    Completed,
    /// A stop ended the turn.
    Interrupted,
    /// The tool-round budget ran out; the answer is the model's summary.
    MaxIterations,
    /// The model could not be reached or failed.
    Failed,
    /// A budget ran out; the answer is what the turn had so far.
    BudgetExceeded,
}

impl TurnStatus {
    /// The word used in events and `--json` output.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Completed => "completed",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::MaxIterations => "max_iterations",
            TurnStatus::Failed => "failed",
            TurnStatus::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// The result of one user message.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The turn's id.
    pub turn_id: String,
    /// The answer, or what went wrong.
    pub text: String,
    /// How the turn ended.
    pub status: TurnStatus,
    /// How many model requests the turn made.
    pub model_requests: u32,
    /// Every tool call of the turn, in order.
    pub calls: Vec<CallOutcome>,
    /// The model error, for a failed turn; for a turn stopped by its budget, which one ran out.
    pub error: Option<String>,
    /// What the turn spent, its subagents' requests included.
    pub spend: Spend,
}

/// Why a session could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A turn is already running; send again when it ends (or stop it).
    #[error("session {0} is busy with another message; wait for its answer or stop it first")]
    Busy(String),
    /// The session has closed.
    #[error("session {0} is closed")]
    Closed(String),
    /// The supervisor refused the registration.
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
    /// The actor system is gone (shut down).
    #[error("the actor system is not running: {0}")]
    Mailbox(String),
}

impl From<MailboxError> for SessionError {
    fn from(error: MailboxError) -> Self {
        SessionError::Mailbox(error.to_string())
    }
}
