//! A reviewer profile's review of a completion that waits in `review`.
//!
//! Run by the worker whose completion it is, once the worker's session ended: a session of the
//! reviewer profile (its own model and tools, so it may check the work itself) is given the
//! task, the worker's summary and result and the evidence (the calls that really ran), and two
//! tools of its own, `review_approve` and `review_request_changes`. Its verdict is applied with
//! [`crate::review::approve`] or [`crate::review::send_back`]. Past `max_rounds` reviews of the
//! task, or when the reviewer gives no verdict, the task stays in `review` for a person, with a
//! comment saying why.

use std::sync::{Arc, Mutex};

use actix::Addr;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_actors::hooks::HookRegistry;
use troupe_actors::session::{SessionHandle, SessionParams, TurnStatus};
use troupe_actors::supervisor::Supervisor;
use troupe_tools::{CallContext, Registry, ToolDef, ToolHandler, ToolKind, ToolResult};

use crate::domain::{BoardSlug, Run, RunOutcome, Task};
use crate::evidence;
use crate::profiles::WorkerProfile;
use crate::review::{approve, review_rounds, send_back};
use crate::store::Store;
use crate::worker_context::{BODY_CAP, FIELD_CAP, clip};

/// The verdict tools' names.
pub const APPROVE_TOOL: &str = "review_approve";
/// See [`APPROVE_TOOL`].
pub const CHANGES_TOOL: &str = "review_request_changes";

/// What every reviewer is told after its profile's own prompt.
const GUIDANCE: &str = "You review the work of another agent on a kanban board. \
The first message holds the task, the worker's result and its evidence: the tool calls that \
really ran in its run, recorded by the system, not written by the worker. \
A result that needed a command, a file or a search must rest on a call that did that and \
succeeded; 'evidence: none' means nothing ran and the result was not checked against anything. \
You may check the work with your own tools. \
End with exactly one verdict: review_approve when the result is right and supported, or \
review_request_changes with what the next worker must do differently.";

/// Everything a review needs, handed over by the worker.
pub struct AgentReview {
    /// The board store.
    pub store: Arc<dyn Store>,
    /// The board.
    pub board: BoardSlug,
    /// The reviewer profile.
    pub reviewer: Arc<WorkerProfile>,
    /// Reviews of one task by a reviewer before a person must decide.
    pub max_rounds: u32,
    /// Approvals and stops for the reviewer's session.
    pub supervisor: Addr<Supervisor>,
    /// Hooks for the reviewer's session (the worker sessions' own).
    pub hooks: HookRegistry,
}

/// How a review ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviewEnd {
    /// The reviewer approved: the task is done.
    Approved(Box<Task>),
    /// The reviewer sent it back with this reason.
    SentBack(String),
    /// It stays in review for a person, for this reason.
    ForAPerson(String),
}

#[derive(Debug, Clone)]
enum Verdict {
    Approve(Option<String>),
    Changes(String),
}

impl AgentReview {
    /// Reviews `task` (in `review`, as the worker's completion left it). Never fails: what
    /// goes wrong leaves the task in `review` for a person, with a comment saying so. The
    /// reviewer's session is put in `session` while it runs, for whoever may stop it.
    pub async fn run(&self, task: &Task, session: &Mutex<Option<SessionHandle>>) -> ReviewEnd {
        let by = format!("reviewer {}", self.reviewer.name);
        let rounds = match review_rounds(self.store.as_ref(), &self.board, &task.id).await {
            Ok(n) => n,
            Err(error) => {
                return self
                    .leave(
                        task,
                        format!("the review rounds could not be counted: {error}"),
                    )
                    .await;
            }
        };
        if rounds > self.max_rounds {
            return self
                .leave(
                    task,
                    format!(
                        "the reviewer profile {} has reviewed this task {} time(s), its limit; a person decides now",
                        self.reviewer.name, self.max_rounds
                    ),
                )
                .await;
        }
        let verdict = match self.ask(task, session).await {
            Ok(Some(verdict)) => verdict,
            Ok(None) => {
                let why = format!(
                    "the reviewer profile {} gave no verdict; a person decides",
                    self.reviewer.name
                );
                return self.leave(task, why).await;
            }
            Err(why) => return self.leave(task, why).await,
        };
        let store = self.store.as_ref();
        match verdict {
            Verdict::Approve(comment) => {
                match approve(store, &self.board, &task.id, &by, comment.as_deref()).await {
                    Ok(done) => ReviewEnd::Approved(Box::new(done)),
                    Err(error) => ReviewEnd::ForAPerson(format!(
                        "the reviewer's approval could not be applied: {error}"
                    )),
                }
            }
            Verdict::Changes(reason) => {
                match send_back(store, &self.board, &task.id, &by, &reason).await {
                    Ok(_) => ReviewEnd::SentBack(reason),
                    Err(error) => ReviewEnd::ForAPerson(format!(
                        "the reviewer's request for changes could not be applied: {error}"
                    )),
                }
            }
        }
    }

    /// Leaves the task in review with a comment saying why.
    async fn leave(&self, task: &Task, why: String) -> ReviewEnd {
        let text = format!(
            "Waiting in review for a person: {why}. Approve with `troupe kanban review {id} --approve`, or send it back with `troupe kanban review {id} --changes \"what to change\"`.",
            id = task.id
        );
        if let Err(error) = self
            .store
            .add_comment(&self.board, &task.id, "troupe", &text)
            .await
        {
            tracing::warn!(task = %task.id, %error, "could not say why the task waits for a person");
        }
        ReviewEnd::ForAPerson(why)
    }

    /// Runs the reviewer's session: its verdict, `None` when it gave none.
    async fn ask(
        &self,
        task: &Task,
        slot_for_stops: &Mutex<Option<SessionHandle>>,
    ) -> Result<Option<Verdict>, String> {
        let runs = self
            .store
            .runs(&self.board, &task.id)
            .await
            .map_err(|e| format!("the task's runs could not be read: {e}"))?;
        let message = review_message(task, &runs);
        let slot: Arc<Mutex<Option<Verdict>>> = Arc::default();
        let view = reviewer_view(&self.reviewer, &slot);
        let mut config = self.reviewer.session.clone();
        config.system_prompt = Some(match config.system_prompt.as_deref() {
            Some(own) if !own.trim().is_empty() => format!("{own}\n\n{GUIDANCE}"),
            _ => GUIDANCE.to_string(),
        });
        if let Some(persist) = &mut config.persist
            && let Value::Object(options) = &mut persist.origin.options
        {
            let run = runs.iter().map(|r| r.id.0).max();
            options.insert(
                "review_of".into(),
                json!({"board": self.board.to_string(), "task": task.id.to_string(), "run": run}),
            );
        }
        let params = SessionParams {
            provider: Arc::clone(&self.reviewer.provider),
            view,
            config,
            hooks: self.hooks.clone(),
            supervisor: self.supervisor.clone(),
            parent: None,
            upstream_events: None,
        };
        let session = SessionHandle::open(params)
            .await
            .map_err(|e| format!("the reviewer's session could not start: {e}"))?;
        if let Ok(mut held) = slot_for_stops.lock() {
            *held = Some(session.clone());
        }
        let verdict = converse(&session, &slot, message).await;
        let _ = session.close().await;
        verdict
    }
}

/// Sends the review, and one reminder when the reviewer ends without a verdict.
async fn converse(
    session: &SessionHandle,
    slot: &Mutex<Option<Verdict>>,
    message: String,
) -> Result<Option<Verdict>, String> {
    let mut message = message;
    for reminder in [true, false] {
        let outcome = session
            .send(message)
            .await
            .map_err(|e| format!("the reviewer's session failed: {e}"))?;
        if let Some(verdict) = slot.lock().ok().and_then(|v| v.clone()) {
            return Ok(Some(verdict));
        }
        if !matches!(
            outcome.status,
            TurnStatus::Completed | TurnStatus::MaxIterations
        ) {
            let why = outcome.error.unwrap_or(outcome.text);
            return Err(format!("the reviewer's model failed: {why}"));
        }
        if !reminder {
            break;
        }
        message =
            format!("You ended without a verdict. Call {APPROVE_TOOL} or {CHANGES_TOOL} now.");
    }
    Ok(None)
}

/// What the reviewer is shown: the task, the worker's last summary and result, the evidence.
pub fn review_message(task: &Task, runs: &[Run]) -> String {
    let last = runs
        .iter()
        .filter(|r| r.outcome == Some(RunOutcome::ReviewRequested))
        .max_by_key(|r| r.id.0);
    let mut out = format!(
        "Review task {} — {}\n\n## The task\n{}\n",
        task.id,
        task.title,
        clip(&task.body, BODY_CAP)
    );
    if let Some(run) = last {
        out.push_str(&format!(
            "\n## The worker's summary (run {}, profile {})\n{}\n",
            run.id.0,
            run.profile.as_deref().unwrap_or("?"),
            clip(run.summary.as_deref().unwrap_or("(none)"), FIELD_CAP)
        ));
    }
    out.push_str(&format!(
        "\n## The worker's result\n{}\n",
        clip(task.result.as_deref().unwrap_or("(none)"), FIELD_CAP)
    ));
    let calls = last.and_then(|r| evidence::read(r.metadata.as_ref()));
    out.push_str("\n## Evidence (recorded by troupe)\n");
    out.push_str(&match calls {
        Some(calls) => evidence::describe(&calls),
        None => "evidence: not recorded for this run".to_string(),
    });
    out.push_str(&format!(
        "\n\nGive your verdict with {APPROVE_TOOL} or {CHANGES_TOOL}."
    ));
    out
}

/// The reviewer profile's tools (less any board tools) and the two verdict tools.
fn reviewer_view(
    reviewer: &WorkerProfile,
    slot: &Arc<Mutex<Option<Verdict>>>,
) -> troupe_tools::ToolsetView {
    let registry = Registry::new();
    for def in reviewer.view.tools() {
        if def.name.starts_with("kanban_") || def.name.starts_with("review_") {
            continue;
        }
        registry.register(def.as_ref().clone());
    }
    registry.register(verdict_tool(
        APPROVE_TOOL,
        "Approve the work: the result is right and the evidence supports it. The task is then done.",
        json!({"type": "object", "properties": {
            "comment": {"type": "string", "description": "A short note kept on the task (optional)."}
        }}),
        slot,
    ));
    registry.register(verdict_tool(
        CHANGES_TOOL,
        "Send the work back: say what is wrong or unsupported and what the next worker must do. The task goes back to the board.",
        json!({"type": "object", "properties": {
            "reason": {"type": "string", "description": "What must change, for the next worker to read."}
        }, "required": ["reason"]}),
        slot,
    ));
    registry.set_connectors(reviewer.view.connectors());
    registry.view_all()
}

fn verdict_tool(
    name: &str,
    description: &str,
    parameters: Value,
    slot: &Arc<Mutex<Option<Verdict>>>,
) -> ToolDef {
    ToolDef::new(name, description, parameters)
        .with_toolset("review")
        .with_kind(ToolKind::Core)
        .with_handler(Arc::new(VerdictTool {
            approve: name == APPROVE_TOOL,
            slot: Arc::clone(slot),
        }))
}

struct VerdictTool {
    approve: bool,
    slot: Arc<Mutex<Option<Verdict>>>,
}

impl ToolHandler for VerdictTool {
    fn call(&self, args: Map<String, Value>, _ctx: CallContext) -> BoxFuture<'static, ToolResult> {
        let result = self.decide(&args);
        Box::pin(async move { result })
    }
}

impl VerdictTool {
    fn decide(&self, args: &Map<String, Value>) -> ToolResult {
        let text = |key: &str| match args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
            Some(other) => Err(ToolResult::error(format!(
                "'{key}' must be a string; got {other}. Send it as text."
            ))),
        };
        let verdict = if self.approve {
            match text("comment") {
                Ok(comment) => Verdict::Approve(comment),
                Err(e) => return e,
            }
        } else {
            match text("reason") {
                Ok(Some(reason)) => Verdict::Changes(reason),
                Ok(None) => {
                    return ToolResult::error(
                        "'reason' is required: say what must change, for the next worker to read.",
                    );
                }
                Err(e) => return e,
            }
        };
        let Ok(mut slot) = self.slot.lock() else {
            return ToolResult::error("the verdict could not be recorded; end your turn");
        };
        if slot.is_some() {
            return ToolResult::error(
                "A verdict was already given for this review; only the first counts. End your turn.",
            );
        }
        *slot = Some(verdict);
        ToolResult::json(json!({"ok": true, "next": "Verdict recorded. End your turn now."}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_verdict_counts_and_a_reason_is_required() {
        let slot: Arc<Mutex<Option<Verdict>>> = Arc::default();
        let changes = VerdictTool {
            approve: false,
            slot: Arc::clone(&slot),
        };
        let approve = VerdictTool {
            approve: true,
            slot: Arc::clone(&slot),
        };
        let empty = json!({"reason": "  "});
        assert!(changes.decide(empty.as_object().unwrap()).is_error);
        assert!(slot.lock().unwrap().is_none());
        let why = json!({"reason": "run wc -l"});
        assert!(!changes.decide(why.as_object().unwrap()).is_error);
        assert!(
            approve.decide(&Map::new()).is_error,
            "a second verdict is refused"
        );
        assert!(matches!(
            slot.lock().unwrap().clone(),
            Some(Verdict::Changes(r)) if r == "run wc -l"
        ));
    }
}
