//! The state of a running turn: its [`Turn`] record, where its model request stands
//! ([`Request`], [`Answer`]) and what a budget extension goes on with ([`AfterExtension`]).
//! The behaviour lives with the session's other parts; this file holds only the state.

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::outcome::TurnOutcome;
use crate::call::CallOutcome;
use crate::model::{ModelError, ModelResponse};
use crate::repeats::{CallKey, RepeatGuard};
use crate::trace::TraceSpan;
use crate::usage::{Exhausted, Spend};

/// The running turn.
pub(super) struct Turn {
    pub(super) id: String,
    pub(super) token: CancellationToken,
    /// Model requests made so far.
    pub(super) requests: u32,
    pub(super) reply: Option<oneshot::Sender<TurnOutcome>>,
    pub(super) calls: Vec<CallOutcome>,
    /// Whether an empty reply already got this turn's one nudge.
    pub(super) nudged: bool,
    /// Calls the model makes again with nothing changed.
    pub(super) repeats: RepeatGuard,
    /// The keys of the batch running now, for `repeats` when it ends.
    pub(super) running: Vec<CallKey>,
    /// Whether the model repeated itself enough that the turn asks for its answer.
    pub(super) wrap_up: bool,
    /// Fires on a drain: the running batch finishes (its unstarted calls never start), then
    /// the turn ends.
    pub(super) drain: CancellationToken,
    /// The session's spending when the turn began.
    pub(super) spent_before: Spend,
    /// The budget that ran out while the turn worked (the time budget), if one did.
    pub(super) out_of_budget: Option<Exhausted>,
    /// Where the turn's model request stands.
    pub(super) request: Request,
    /// Whether somebody drained the turn (as opposed to its time budget draining it).
    pub(super) drain_asked: bool,
    /// The turn's span.
    pub(super) trace: TraceSpan,
}

/// Where a turn's model request stands.
#[derive(Debug)]
pub(super) enum Request {
    /// None is out.
    Idle,
    /// One is out.
    Out,
    /// The time budget ran out while one was out, and a person is asked for more time; the
    /// model's answer waits here if it comes back first.
    AskingForTime(Option<Answer>),
}

impl Turn {
    /// The person has answered about the time budget: the model's answer if it came back
    /// meanwhile, else `None` (the request is still out).
    pub(super) fn time_question_settled(&mut self) -> Option<Answer> {
        match std::mem::replace(&mut self.request, Request::Out) {
            Request::AskingForTime(Some(answer)) => {
                self.request = Request::Idle;
                Some(answer)
            }
            Request::AskingForTime(None) => None,
            other => {
                self.request = other;
                None
            }
        }
    }
}

/// A model answer for the running turn, its usage already counted.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) turn_id: String,
    pub(super) final_round: bool,
    pub(super) result: Result<ModelResponse, ModelError>,
    pub(super) cost_usd: Option<f64>,
}

/// What a turn that ran out of budget does once a person extends it.
#[derive(Debug)]
pub(super) enum AfterExtension {
    /// Runs the calls of this response.
    Calls(ModelResponse),
    /// The model request that is out goes on (and its answer, if it came meanwhile, is used).
    Request,
    /// Goes on after a batch (asks the model again, unless the turn was stopped).
    Continue {
        /// The time budget drained the batch; an extension undoes that drain.
        drained_by_budget: bool,
    },
}
