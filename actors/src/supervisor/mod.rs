//! The [`Supervisor`] actor: one per troupe, shared by every session and subagent. It owns the
//! tree of sessions (parent and children, so a child's request carries its path from the
//! root), each session's running turn token (what `/stop` cancels), and the pending approvals
//! (FIFO per session). The approval pipeline, in order: the hard-deny floor, the mode (`manual`,
//! `off`), the allowlist (once, session, always), unattended contexts, then a person.
//!
//! Answers come from the Rust API (a stream of [`PendingApproval`]s and [`AnswerApproval`]),
//! the CLI prompt and the HTTP API. Every request settles exactly once. What is decided before
//! anyone is asked (settings, rules, the answers a person may give) is in `policy.rs`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use actix::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use troupe_tools::{ToolHints, ToolKind};

mod policy;
mod question;
mod secret;

pub use policy::{
    ApprovalChoice, ApprovalConfig, ApprovalMode, ApprovalRules, DEFAULT_APPROVAL_TIMEOUT,
    DefaultRules, RuleInput, RuleVerdict, UnattendedPolicy,
};
pub use question::AskQuestion;
pub use secret::{AnswerSecret, AskSecret, SecretRequest, SubscribeSecrets, WithdrawSecret};

use crate::call::new_id;
use crate::events::{EventKind, EventSink};

/// The words the model reads after a refusal, so it does not try the same thing another way.
const DO_NOT_RETRY: &str = "The user has not agreed to this action. Do not run it again, do not reword it, and do not try to reach the same result another way; stop and wait for the user.";

/// How an approval question ended, as the tool runner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No rule flagged the call.
    Allowed,
    /// A rule flagged it and it was approved (by a person, the allowlist or mode `off`).
    Approved,
    /// Refused; the text is what the model reads.
    Denied(String),
    /// Nobody answered in time; the text is what the model reads.
    TimedOut(String),
    /// A stop or the session's end withdrew the request.
    Interrupted,
    /// A question was answered; the text is the person's answer.
    Answered(String),
}

/// The answer to [`RequestApproval`]: settled at once, or waiting for a person.
#[derive(Debug)]
pub enum Ticket {
    /// Decided without asking.
    Settled(Verdict),
    /// Waiting; the receiver yields the verdict exactly once.
    Pending {
        /// The request's id.
        request_id: String,
        /// Where the verdict arrives.
        verdict: oneshot::Receiver<Verdict>,
    },
}

/// What a person is asked to approve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A tool call (`tool` and `arguments` say which).
    #[default]
    Call,
    /// More budget for a session whose budget ran out (`arguments` hold the limit, what was
    /// spent, the limit now and what it would become).
    BudgetExtension,
    /// A question from the `clarify` tool (`arguments` hold `question`, `choices` and
    /// `allow_other`); answered with [`ApprovalChoice::Answer`].
    Question,
}

/// An approval request waiting for a person, as answerers see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingApproval {
    /// The id to answer it by.
    pub request_id: String,
    /// A tool call, or more budget.
    pub kind: ApprovalKind,
    /// The session asking.
    pub session_id: String,
    /// Session ids from the root down to the asking session.
    pub agent_path: Vec<String>,
    /// The call entry waiting on it.
    pub call_id: String,
    /// The underlying tool.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Map<String, Value>,
    /// Why approval is needed.
    pub reason: String,
    /// The rule's allowlist key.
    pub key: String,
}

/// Why a registration failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupervisorError {
    /// The parent session is not registered (closed, or never opened).
    #[error("there is no open session {0} to attach a child session to")]
    UnknownParent(String),
    /// A session with this id is already registered.
    #[error("a session with id {0} is already open")]
    DuplicateSession(String),
}

/// The supervisor's record of one session.
struct SessionNode {
    parent: Option<String>,
    children: Vec<String>,
    path: Vec<String>,
    events: EventSink,
    /// The running turn and its token; `/stop` cancels it.
    turn: Option<(String, CancellationToken)>,
    /// The session's background delegations; a hard stop cancels it with the turn.
    delegations: Option<CancellationToken>,
    /// Keys approved for this session.
    allowed: HashSet<String>,
}

/// A request waiting for an answer, with every call that shares it.
struct PendingEntry {
    request: PendingApproval,
    /// Identity for sharing one prompt among identical concurrent requests.
    share_key: String,
    /// The first waiter is the leader; the rest followed it.
    waiters: Vec<oneshot::Sender<Verdict>>,
    timer: Option<SpawnHandle>,
}

/// Routes approvals and stops. See the module doc.
pub struct Supervisor {
    /// The rules that decide which calls need approval.
    rules: Arc<dyn ApprovalRules>,
    /// Mode, timeout, unattended policy and permanent allowlist.
    config: ApprovalConfig,
    /// Keys approved with `always` (and the configured allowlist).
    always: HashSet<String>,
    /// Every open session.
    sessions: HashMap<String, SessionNode>,
    /// Pending requests by id.
    pending: HashMap<String, PendingEntry>,
    /// Pending request ids per session, oldest first.
    queues: HashMap<String, VecDeque<String>>,
    /// Live answerers: each receives every new pending request.
    answerers: Vec<mpsc::UnboundedSender<PendingApproval>>,
    /// Answerers that can take a secret at a masked prompt (see `secret.rs`).
    secret_answerers: Vec<mpsc::UnboundedSender<SecretRequest>>,
    /// Secret requests waiting, by id: only the way back to the tool, never the answer.
    secrets: HashMap<String, oneshot::Sender<Option<String>>>,
}

impl Supervisor {
    /// A supervisor with `config` and `rules`.
    pub fn new(config: ApprovalConfig, rules: Arc<dyn ApprovalRules>) -> Self {
        Supervisor {
            rules,
            always: config.allowlist.iter().cloned().collect(),
            config,
            sessions: HashMap::new(),
            pending: HashMap::new(),
            queues: HashMap::new(),
            answerers: Vec::new(),
            secret_answerers: Vec::new(),
            secrets: HashMap::new(),
        }
    }

    fn attended(&mut self) -> bool {
        self.answerers.retain(|tx| !tx.is_closed());
        !self.answerers.is_empty()
    }

    /// Ends a pending request with `choice` (an answer) or `fallback` (timeout, stop), and
    /// wakes every call that shares it. Returns false when it was already settled.
    fn settle(&mut self, ctx: &mut Context<Self>, request_id: &str, outcome: Outcome) -> bool {
        let Some(mut entry) = self.pending.remove(request_id) else {
            return false;
        };
        if let Some(timer) = entry.timer.take() {
            ctx.cancel_future(timer);
        }
        let session_id = entry.request.session_id.clone();
        if let Some(queue) = self.queues.get_mut(&session_id) {
            queue.retain(|id| id != request_id);
            if queue.is_empty() {
                self.queues.remove(&session_id);
            }
        }
        let word = match &outcome {
            Outcome::Answered(choice) => choice.word(),
            Outcome::TimedOut => "timeout",
            Outcome::Interrupted => "interrupted",
        };
        if let Some(node) = self.sessions.get(&session_id) {
            node.events.send(
                &session_id,
                EventKind::ApprovalAnswered {
                    request_id: request_id.to_string(),
                    outcome: word.to_string(),
                },
            );
        }
        if entry.request.kind == ApprovalKind::Question {
            let verdict = question::question_verdict(outcome, self.config.timeout.as_secs());
            for waiter in entry.waiters {
                let _ = waiter.send(verdict.clone());
            }
            return true;
        }
        let key = entry.request.key.clone();
        // An answer in words to a call or budget request refuses it, with those words.
        let outcome = match outcome {
            Outcome::Answered(ApprovalChoice::Answer { text }) => {
                Outcome::Answered(ApprovalChoice::Deny { reason: Some(text) })
            }
            other => other,
        };
        let verdict = match outcome {
            // An extension raises one limit to one value, however many sessions wait on it.
            Outcome::Answered(
                ApprovalChoice::Once | ApprovalChoice::Session | ApprovalChoice::Always,
            ) if entry.request.kind == ApprovalKind::BudgetExtension => Verdict::Approved,
            Outcome::Answered(ApprovalChoice::Once) => {
                // `once` covers the leader only: followers get a fresh prompt of their own.
                let mut waiters = std::mem::take(&mut entry.waiters).into_iter();
                if let Some(leader) = waiters.next() {
                    let _ = leader.send(Verdict::Approved);
                }
                let followers: Vec<_> = waiters.collect();
                if !followers.is_empty() {
                    let mut request = entry.request.clone();
                    request.request_id = new_id();
                    self.enqueue(ctx, request, entry.share_key.clone(), followers);
                }
                return true;
            }
            Outcome::Answered(ApprovalChoice::Session) => {
                if let Some(node) = self.sessions.get_mut(&session_id) {
                    node.allowed.insert(key);
                }
                Verdict::Approved
            }
            Outcome::Answered(ApprovalChoice::Always) => {
                self.always.insert(key);
                Verdict::Approved
            }
            Outcome::Answered(ApprovalChoice::Answer { .. }) => Verdict::Denied(format!(
                "BLOCKED: the user refused this call. {DO_NOT_RETRY}"
            )),
            Outcome::Answered(ApprovalChoice::Deny { reason }) => Verdict::Denied(match reason {
                Some(reason) if !reason.trim().is_empty() => {
                    format!(
                        "BLOCKED: the user refused this call and said: \"{}\". {DO_NOT_RETRY}",
                        reason.trim()
                    )
                }
                _ => format!("BLOCKED: the user refused this call. {DO_NOT_RETRY}"),
            }),
            Outcome::TimedOut => Verdict::TimedOut(format!(
                "BLOCKED: nobody answered the approval request within {} s, and silence is not consent. {DO_NOT_RETRY}",
                self.config.timeout.as_secs()
            )),
            Outcome::Interrupted => Verdict::Interrupted,
        };
        for waiter in entry.waiters {
            let _ = waiter.send(verdict.clone());
        }
        true
    }

    fn enqueue(
        &mut self,
        ctx: &mut Context<Self>,
        request: PendingApproval,
        share_key: String,
        waiters: Vec<oneshot::Sender<Verdict>>,
    ) {
        let request_id = request.request_id.clone();
        let timer_id = request_id.clone();
        let timer = ctx.run_later(self.config.timeout, move |act, ctx| {
            act.settle(ctx, &timer_id, Outcome::TimedOut);
        });
        if let Some(node) = self.sessions.get(&request.session_id) {
            node.events.send(
                &request.session_id,
                EventKind::ApprovalRequested {
                    request_id: request_id.clone(),
                    call_id: request.call_id.clone(),
                    tool: request.tool.clone(),
                    reason: request.reason.clone(),
                    agent_path: request.agent_path.clone(),
                },
            );
        }
        self.answerers.retain(|tx| tx.send(request.clone()).is_ok());
        self.queues
            .entry(request.session_id.clone())
            .or_default()
            .push_back(request_id.clone());
        self.pending.insert(
            request_id,
            PendingEntry {
                request,
                share_key,
                waiters,
                timer: Some(timer),
            },
        );
    }

    /// The session and every descendant, depth first.
    fn subtree(&self, root: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_string()];
        while let Some(id) = stack.pop() {
            if let Some(node) = self.sessions.get(&id) {
                stack.extend(node.children.iter().rev().cloned());
                out.push(id);
            }
        }
        out
    }

    /// Settles every pending request of a session as interrupted.
    fn withdraw_all(&mut self, ctx: &mut Context<Self>, session_id: &str) {
        let pending: Vec<String> = self
            .queues
            .get(session_id)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default();
        for request_id in pending {
            self.settle(ctx, &request_id, Outcome::Interrupted);
        }
    }

    fn stop_one(&mut self, ctx: &mut Context<Self>, session_id: &str, hard: bool) -> bool {
        self.withdraw_all(ctx, session_id);
        let Some(node) = self.sessions.get(session_id) else {
            return false;
        };
        let turn_id = node.turn.as_ref().map(|(id, _)| id.clone());
        node.events.send(
            session_id,
            EventKind::Stop {
                kind: if hard { "hard" } else { "soft" }.into(),
                turn_id: turn_id.clone(),
            },
        );
        // Background children outlive the turn that started them, so only their own token
        // stops them (and tells the session not to start a turn for their results).
        if hard && let Some(delegations) = &node.delegations {
            delegations.cancel();
        }
        match &node.turn {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

/// How a pending request ended.
enum Outcome {
    Answered(ApprovalChoice),
    TimedOut,
    Interrupted,
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Every session and every call entry talks to this one actor.
        ctx.set_mailbox_capacity(1024);
    }
}

/// Registers a session (a child when `parent` is set). Sent by a session as it opens; replies
/// with its path of session ids from the root.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<String>, SupervisorError>")]
pub struct RegisterSession {
    /// The new session's id.
    pub session_id: String,
    /// The parent's id, for a subagent.
    pub parent: Option<String>,
    /// Where the session's events go (approval events are sent there).
    pub events: EventSink,
}

impl Handler<RegisterSession> for Supervisor {
    type Result = Result<Vec<String>, SupervisorError>;

    fn handle(&mut self, msg: RegisterSession, _ctx: &mut Self::Context) -> Self::Result {
        if self.sessions.contains_key(&msg.session_id) {
            return Err(SupervisorError::DuplicateSession(msg.session_id));
        }
        let mut path = match &msg.parent {
            Some(parent) => match self.sessions.get_mut(parent) {
                Some(node) => {
                    node.children.push(msg.session_id.clone());
                    node.path.clone()
                }
                None => return Err(SupervisorError::UnknownParent(parent.clone())),
            },
            None => Vec::new(),
        };
        path.push(msg.session_id.clone());
        self.sessions.insert(
            msg.session_id,
            SessionNode {
                parent: msg.parent,
                children: Vec::new(),
                path: path.clone(),
                events: msg.events,
                turn: None,
                delegations: None,
                allowed: HashSet::new(),
            },
        );
        Ok(path)
    }
}

/// Forgets a closed session, withdrawing its pending requests. Sent by a session as it closes.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UnregisterSession {
    /// The session's id.
    pub session_id: String,
}

impl Handler<UnregisterSession> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: UnregisterSession, ctx: &mut Self::Context) {
        self.withdraw_all(ctx, &msg.session_id);
        if let Some(node) = self.sessions.remove(&msg.session_id) {
            if let Some((_, token)) = &node.turn {
                token.cancel();
            }
            if let Some(parent) = node.parent.and_then(|p| self.sessions.get_mut(&p)) {
                parent.children.retain(|c| c != &msg.session_id);
            }
        }
    }
}

/// A session started a turn; `token` is what a stop cancels. Sent by the session.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct BeginTurn {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// Cancelled by `/stop`.
    pub token: CancellationToken,
}

impl Handler<BeginTurn> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: BeginTurn, _ctx: &mut Self::Context) {
        if let Some(node) = self.sessions.get_mut(&msg.session_id) {
            node.turn = Some((msg.turn_id, msg.token));
        }
    }
}

/// The token of a session's background delegations, which a hard stop cancels. Sent by a
/// session that may delegate in the background, as it starts and whenever it renews the
/// token after a hard stop.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct WatchDelegations {
    /// The session.
    pub session_id: String,
    /// Cancelled by a hard `/stop` of the session or an ancestor.
    pub token: CancellationToken,
}

impl Handler<WatchDelegations> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: WatchDelegations, _ctx: &mut Self::Context) {
        if let Some(node) = self.sessions.get_mut(&msg.session_id) {
            node.delegations = Some(msg.token);
        }
    }
}

/// A session's turn ended. Sent by the session.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct EndTurn {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
}

impl Handler<EndTurn> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: EndTurn, _ctx: &mut Self::Context) {
        if let Some(node) = self.sessions.get_mut(&msg.session_id)
            && node.turn.as_ref().is_some_and(|(id, _)| *id == msg.turn_id)
        {
            node.turn = None;
        }
    }
}

/// Asks whether a call may run. Sent by the tool runner, in call order, before the call starts;
/// the reply is immediate (a [`Ticket`]), and a pending ticket's verdict arrives later.
#[derive(Message)]
#[rtype(result = "Ticket")]
pub struct RequestApproval {
    /// The session making the call.
    pub session_id: String,
    /// troupe's id for the call entry.
    pub call_id: String,
    /// The underlying tool.
    pub tool: String,
    /// Its kind, when known.
    pub kind: Option<ToolKind>,
    /// Its hints.
    pub hints: ToolHints,
    /// Its arguments (after hooks).
    pub arguments: Map<String, Value>,
    /// Records that the call waits for a person; a new request is shown only once that is
    /// durable, so a person can never answer a wait the session's store does not know of.
    pub record: Option<RecordWait>,
}

/// Starts writing that a call (with these arguments) waits for approval; resolves once it is
/// durable.
pub type RecordWait = Box<dyn FnOnce(&Map<String, Value>) -> crate::journal::Durable + Send>;

/// The longest the supervisor waits for a wait to be recorded before showing it anyway: a
/// store that is down must not hold every session's approvals.
const RECORD_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

impl std::fmt::Debug for RequestApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestApproval")
            .field("session_id", &self.session_id)
            .field("call_id", &self.call_id)
            .field("tool", &self.tool)
            .field("recorded", &self.record.is_some())
            .finish_non_exhaustive()
    }
}

impl Handler<RequestApproval> for Supervisor {
    type Result = MessageResult<RequestApproval>;

    fn handle(&mut self, msg: RequestApproval, ctx: &mut Self::Context) -> Self::Result {
        let verdict = self.rules.check(&RuleInput {
            session_id: &msg.session_id,
            tool: &msg.tool,
            kind: msg.kind,
            hints: &msg.hints,
            arguments: &msg.arguments,
        });
        // 1. The floor: never, whatever the mode.
        let (key, reason) = match verdict {
            RuleVerdict::Allow => return MessageResult(Ticket::Settled(Verdict::Allowed)),
            RuleVerdict::Forbid { reason } => {
                return MessageResult(Ticket::Settled(Verdict::Denied(format!(
                    "BLOCKED: {reason}. troupe never runs this, whatever the approval settings. {DO_NOT_RETRY}"
                ))));
            }
            RuleVerdict::Ask { key, reason } => (key, reason),
        };
        // 2. The mode.
        if self.config.mode == ApprovalMode::Off {
            return MessageResult(Ticket::Settled(Verdict::Approved));
        }
        // 3. The allowlist.
        let session_allows = self
            .sessions
            .get(&msg.session_id)
            .is_some_and(|n| n.allowed.contains(&key));
        if session_allows || self.always.contains(&key) {
            return MessageResult(Ticket::Settled(Verdict::Approved));
        }
        // 4. Nobody to ask.
        if !self.attended() {
            return MessageResult(Ticket::Settled(match self.config.unattended {
                UnattendedPolicy::Approve => Verdict::Approved,
                UnattendedPolicy::Deny => Verdict::Denied(format!(
                    "BLOCKED: this call needs approval ({reason}) but nobody is there to approve it. To allow such calls without a person, set approvals.unattended: approve in troupe.yaml. {DO_NOT_RETRY}"
                )),
            }));
        }
        // 5. Ask, sharing one prompt among identical requests of the session.
        let (tx, rx) = oneshot::channel();
        let share_key = format!(
            "{}\u{0}{}\u{0}{}",
            msg.session_id,
            msg.tool,
            Value::Object(msg.arguments.clone())
        );
        if let Some(entry) = self.pending.values_mut().find(|e| e.share_key == share_key) {
            entry.waiters.push(tx);
            if let Some(record) = msg.record {
                // This call waits on a prompt already shown; its own record follows it.
                actix::spawn(record(&msg.arguments));
            }
            return MessageResult(Ticket::Pending {
                request_id: entry.request.request_id.clone(),
                verdict: rx,
            });
        }
        let agent_path = self
            .sessions
            .get(&msg.session_id)
            .map(|n| n.path.clone())
            .unwrap_or_else(|| vec![msg.session_id.clone()]);
        let request = PendingApproval {
            request_id: new_id(),
            kind: ApprovalKind::Call,
            session_id: msg.session_id,
            agent_path,
            call_id: msg.call_id,
            tool: msg.tool,
            arguments: msg.arguments,
            reason,
            key,
        };
        let request_id = request.request_id.clone();
        match msg.record {
            Some(record) => {
                // The supervisor takes no other message until the wait is recorded: a few
                // milliseconds, and only for calls that wait for a person anyway.
                let durable = tokio::time::timeout(RECORD_WAIT_LIMIT, record(&request.arguments));
                let durable = actix::fut::wrap_future::<_, Self>(durable);
                ctx.wait(durable.map(move |recorded, supervisor, ctx| {
                    if recorded.is_err() {
                        tracing::warn!(
                            "the session store did not record an approval wait in time; showing it anyway"
                        );
                    }
                    supervisor.enqueue(ctx, request, share_key, vec![tx]);
                }));
            }
            None => self.enqueue(ctx, request, share_key, vec![tx]),
        }
        MessageResult(Ticket::Pending {
            request_id,
            verdict: rx,
        })
    }
}

/// Asks a person for more budget: sent by a session whose budget (or an ancestor's) ran out
/// when it has more to do. Settled at once (denied) when approvals are off or nobody can
/// answer: a budget is a hard limit unless a person lifts it. Sessions waiting on the same
/// shortfall share one question.
#[derive(Debug, Message)]
#[rtype(result = "Ticket")]
pub struct RequestExtension {
    /// The session that has more to do.
    pub session_id: String,
    /// Its running turn.
    pub turn_id: String,
    /// The budget that ran out.
    pub spent: crate::usage::Exhausted,
    /// What the limit would become.
    pub extend_to: f64,
}

impl Handler<RequestExtension> for Supervisor {
    type Result = MessageResult<RequestExtension>;

    fn handle(&mut self, msg: RequestExtension, ctx: &mut Self::Context) -> Self::Result {
        if self.config.mode == ApprovalMode::Off || !self.attended() {
            return MessageResult(Ticket::Settled(Verdict::Denied(
                "nobody is asked to extend a budget when approvals are off or unattended".into(),
            )));
        }
        let agent_path = self
            .sessions
            .get(&msg.session_id)
            .map(|n| n.path.clone())
            .unwrap_or_else(|| vec![msg.session_id.clone()]);
        // The session whose budget it is: the asker, or the ancestor `spent` names.
        let owner = agent_path
            .len()
            .checked_sub(1 + msg.spent.ancestor)
            .and_then(|i| agent_path.get(i))
            .cloned()
            .unwrap_or_else(|| msg.session_id.clone());
        let limit = msg.spent.limit.key();
        let share_key = format!("budget\u{0}{owner}\u{0}{limit}\u{0}{}", msg.extend_to);
        let (tx, rx) = oneshot::channel();
        if let Some(entry) = self.pending.values_mut().find(|e| e.share_key == share_key) {
            entry.waiters.push(tx);
            return MessageResult(Ticket::Pending {
                request_id: entry.request.request_id.clone(),
                verdict: rx,
            });
        }
        let mut arguments = Map::new();
        arguments.insert("limit".into(), Value::from(limit));
        arguments.insert("spent".into(), Value::from(msg.spent.used));
        arguments.insert("allowed".into(), Value::from(msg.spent.allowed));
        arguments.insert("extend_to".into(), Value::from(msg.extend_to));
        arguments.insert("budget_of".into(), Value::from(owner));
        let request = PendingApproval {
            request_id: new_id(),
            kind: ApprovalKind::BudgetExtension,
            session_id: msg.session_id,
            agent_path,
            call_id: msg.turn_id,
            tool: "budget".into(),
            arguments,
            reason: format!(
                "{}; approving raises budget.{limit} to {}",
                msg.spent,
                crate::usage::format_limit(msg.spent.limit, msg.extend_to)
            ),
            key: format!("budget:{limit}"),
        };
        let request_id = request.request_id.clone();
        self.enqueue(ctx, request, share_key, vec![tx]);
        MessageResult(Ticket::Pending {
            request_id,
            verdict: rx,
        })
    }
}

/// Withdraws a pending request whose call was stopped. Sent by the tool runner; the request
/// settles as interrupted (unless it already settled).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct WithdrawApproval {
    /// The request.
    pub request_id: String,
}

impl Handler<WithdrawApproval> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: WithdrawApproval, ctx: &mut Self::Context) {
        // Shared prompts are withdrawn only once nobody waits on them any more.
        if let Some(entry) = self.pending.get_mut(&msg.request_id) {
            entry.waiters.retain(|w| !w.is_closed());
            if entry.waiters.is_empty() {
                self.settle(ctx, &msg.request_id, Outcome::Interrupted);
            }
        }
    }
}

/// A person's answer. Sent by the API, the CLI prompt or HTTP; replies whether the request was
/// still pending (false: unknown, already answered, or timed out).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct AnswerApproval {
    /// The request.
    pub request_id: String,
    /// The answer.
    pub choice: ApprovalChoice,
}

impl Handler<AnswerApproval> for Supervisor {
    type Result = bool;

    fn handle(&mut self, msg: AnswerApproval, ctx: &mut Self::Context) -> bool {
        self.settle(ctx, &msg.request_id, Outcome::Answered(msg.choice))
    }
}

/// Subscribes an answerer: the receiver gets every pending request from now on (the ones
/// already waiting first, oldest first). While any answerer is subscribed the supervisor asks
/// instead of applying the unattended policy.
#[derive(Debug, Message)]
#[rtype(result = "mpsc::UnboundedReceiver<PendingApproval>")]
pub struct SubscribeApprovals;

impl Handler<SubscribeApprovals> for Supervisor {
    type Result = MessageResult<SubscribeApprovals>;

    fn handle(&mut self, _msg: SubscribeApprovals, _ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut waiting: Vec<&PendingApproval> =
            self.pending.values().map(|e| &e.request).collect();
        // uuid v7 ids sort by creation time.
        waiting.sort_by(|a, b| a.request_id.cmp(&b.request_id));
        for request in waiting {
            let _ = tx.send(request.clone());
        }
        self.answerers.push(tx);
        MessageResult(rx)
    }
}

/// Lists the pending requests, oldest first.
#[derive(Debug, Message)]
#[rtype(result = "Vec<PendingApproval>")]
pub struct ListPending;

impl Handler<ListPending> for Supervisor {
    type Result = MessageResult<ListPending>;

    fn handle(&mut self, _msg: ListPending, _ctx: &mut Self::Context) -> Self::Result {
        let mut out: Vec<PendingApproval> =
            self.pending.values().map(|e| e.request.clone()).collect();
        out.sort_by(|a, b| a.request_id.cmp(&b.request_id));
        MessageResult(out)
    }
}

/// `/stop`: soft stops the session's running turn; hard also stops every descendant's and the
/// background delegations of the whole subtree. Sent by
/// the API, the CLI or HTTP; replies with how many running turns were cancelled.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct Stop {
    /// The session.
    pub session_id: String,
    /// Whether descendants stop too.
    pub hard: bool,
}

impl Handler<Stop> for Supervisor {
    type Result = usize;

    fn handle(&mut self, msg: Stop, ctx: &mut Self::Context) -> usize {
        let targets = if msg.hard {
            self.subtree(&msg.session_id)
        } else {
            vec![msg.session_id.clone()]
        };
        targets
            .iter()
            .filter(|id| self.stop_one(ctx, id, msg.hard))
            .count()
    }
}
