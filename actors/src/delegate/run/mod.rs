//! Running a `delegate_task` call: [`run_delegate_task`] checks depth and limits, derives each
//! child's view from the parent's, opens children as `Session` actors under the parent, drives
//! them concurrently under an inactivity watch, checks `output_schema` answers (one correction
//! turn) and returns results in task order, or in background mode a handle at once and the
//! results later as a [`DelegationFinished`] message. The session builds a [`DelegateContext`]
//! per call; `list`, `steer` and `stop` go through the tree's [`SubagentTracker`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::{Addr, Recipient};
use actix_rt::ArbiterHandle;
use futures::future::{BoxFuture, join_all};
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use troupe_tools::{ToolKind, ToolResult, ToolsetView, ViewSpec};

use super::config::DelegationConfig;
use super::request::{DelegateRequest, TaskSpec};
use super::tool::{BLOCKED_FOR_CHILDREN, BLOCKED_TOOLSETS_FOR_CHILDREN, DELEGATE_TASK};
use super::tracker::{SubagentRecord, SubagentTracker, round2};
use crate::events::{EventKind, EventSink};
use crate::hooks::{HookRegistry, SubagentInfo};
use crate::model::{ChatMessage, ModelError, ModelProvider, ModelRequest, ModelResponse};
use crate::session::{
    CloseSession, SessionConfig, SessionError, SessionHandle, SessionParams, TurnOutcome,
    TurnStatus,
};
use crate::supervisor::Supervisor;

mod child;
mod report;

use child::*;
use report::*;

/// The system prompt of every subagent.
pub const SUBAGENT_SYSTEM_PROMPT: &str = "You are a subagent: another agent handed you one task and is waiting for your report. You cannot talk to the user and nobody will answer questions, so make reasonable choices and note them. Work with the tools you have until the task is done, then reply with a short report: what you did, what you found or changed (with paths), and anything left undone or uncertain.";

/// How long a stopped child has to hand back its partial result before it is closed. Twice
/// this stays under the tool runner's default stop grace, so the parent's call is not
/// abandoned while it collects its children.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Characters of a summary shown in the completion event.
const PREVIEW_CHARS: usize = 200;

/// Results of a background delegation, for the session that started it. Sent by the
/// delegation's join task; the session reads them as a new message between turns.
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub struct DelegationFinished {
    /// The delegation id the tool returned.
    pub delegation_id: String,
    /// The message the model reads.
    pub text: String,
    /// Whether the delegation was stopped (a hard stop or close) rather than finishing: the
    /// session then keeps the results for the user's next message instead of starting a turn.
    pub stopped: bool,
}

/// Everything `delegate_task` needs from the calling session. Built by the session per call.
#[derive(Clone)]
pub struct DelegateContext {
    /// The parent session's id.
    pub parent_id: String,
    /// Session ids from the root down to the parent.
    pub parent_path: Vec<String>,
    /// The parent's model; children use the same one.
    pub provider: Arc<dyn ModelProvider>,
    /// The parent's view; children get it narrowed.
    pub view: ToolsetView,
    /// The parent's settings, the template for children's.
    pub config: SessionConfig,
    /// The parent's hooks; children run them too.
    pub hooks: HookRegistry,
    /// The troupe's supervisor: children register under the parent.
    pub supervisor: Addr<Supervisor>,
    /// The parent's events: progress goes here, and children's own events flow through it.
    pub events: EventSink,
    /// The tree's running subagents.
    pub tracker: Arc<SubagentTracker>,
    /// Where actors are started (sessions are actix actors).
    pub arbiter: ArbiterHandle,
    /// Fires when the parent session closes or is hard-stopped; background children stop
    /// with it.
    pub lifetime: CancellationToken,
    /// The parent's subagent slots (`delegation.max_concurrent_children` permits): each
    /// child holds one while it runs, so the cap holds across calls.
    pub slots: Arc<Semaphore>,
    /// Where background results go; `None` when the parent cannot take a later message.
    pub background: Option<Recipient<DelegationFinished>>,
    /// The parent's spending: a child's requests count against it, and a child stops when the
    /// parent's budget (or any ancestor's) is spent.
    pub meter: Arc<crate::usage::Meter>,
}

impl DelegateContext {
    fn depth(&self) -> u32 {
        u32::try_from(self.parent_path.len().saturating_sub(1)).unwrap_or(u32::MAX)
    }

    fn delegation(&self) -> &DelegationConfig {
        &self.config.delegation
    }
}

/// Signs of life of one child, for the inactivity watch and the report.
#[derive(Debug)]
pub struct Activity {
    last: Mutex<Instant>,
    tool_calls: AtomicU32,
    api_calls: AtomicU32,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            last: Mutex::new(Instant::now()),
            tool_calls: AtomicU32::new(0),
            api_calls: AtomicU32::new(0),
            input_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Tool calls the child has started.
    pub fn tool_calls(&self) -> u32 {
        self.tool_calls.load(Ordering::Relaxed)
    }

    fn api_calls(&self) -> u32 {
        self.api_calls.load(Ordering::Relaxed)
    }
}

/// The parent's provider, counting a child's answers and tokens and stamping its activity.
struct CountingProvider {
    inner: Arc<dyn ModelProvider>,
    activity: Arc<Activity>,
}

impl ModelProvider for CountingProvider {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn model(&self) -> Option<String> {
        self.inner.model()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let answer = self.inner.complete(request, cancel);
        let activity = Arc::clone(&self.activity);
        Box::pin(async move {
            let result = answer.await;
            if let Ok(response) = &result {
                activity.api_calls.fetch_add(1, Ordering::Relaxed);
                activity
                    .input_tokens
                    .fetch_add(response.usage.prompt_tokens, Ordering::Relaxed);
                activity
                    .output_tokens
                    .fetch_add(response.usage.completion_tokens, Ordering::Relaxed);
                activity.touch();
            }
            result
        })
    }
}

/// Runs one `delegate_task` call for the session in `ctx`. `cancel` is the call's token: when
/// it fires, every child of this call is stopped and reported as interrupted.
pub async fn run_delegate_task(
    ctx: DelegateContext,
    arguments: Map<String, Value>,
    cancel: CancellationToken,
) -> ToolResult {
    let request = match DelegateRequest::parse(&arguments, ctx.delegation()) {
        Ok(request) => request,
        Err(message) => return refusal(message),
    };
    match request {
        DelegateRequest::List => {
            let running = ctx.tracker.list_below(&ctx.parent_id);
            ToolResult::json(json!({"running": running.len(), "subagents": running}))
        }
        DelegateRequest::Steer {
            subagent_id,
            message,
        } => steer(&ctx, &subagent_id, message).await,
        DelegateRequest::Stop { subagent_id } => stop(&ctx, &subagent_id).await,
        DelegateRequest::Spawn(tasks) => spawn(ctx, tasks, cancel).await,
    }
}

fn refusal(message: String) -> ToolResult {
    ToolResult::error_json(json!({"error": message}))
}

fn unknown_subagent(ctx: &DelegateContext, subagent_id: &str) -> ToolResult {
    refusal(format!(
        "No running subagent '{subagent_id}' was started by you or your subagents ({} running). It may have finished already; action=list shows the running ones.",
        ctx.tracker.count_below(&ctx.parent_id)
    ))
}

async fn steer(ctx: &DelegateContext, subagent_id: &str, message: String) -> ToolResult {
    let Some(record) = ctx.tracker.find_below(&ctx.parent_id, subagent_id) else {
        return unknown_subagent(ctx, subagent_id);
    };
    match record.session.steer(message).await {
        Ok(true) => ToolResult::json(json!({
            "status": "queued",
            "subagent_id": subagent_id,
            "note": "The subagent reads this before its next model turn."
        })),
        _ => ToolResult::json(json!({
            "status": "rejected",
            "subagent_id": subagent_id,
            "note": "The subagent had already finished its task, so the message was not delivered."
        })),
    }
}

async fn stop(ctx: &DelegateContext, subagent_id: &str) -> ToolResult {
    let Some(record) = ctx.tracker.find_below(&ctx.parent_id, subagent_id) else {
        return unknown_subagent(ctx, subagent_id);
    };
    match record.session.stop(true).await {
        Ok(_) => ToolResult::json(json!({
            "status": "stopping",
            "subagent_id": subagent_id,
            "note": "The subagent and everything it started are being stopped; its result arrives with the others, marked interrupted."
        })),
        Err(error) => refusal(format!(
            "Could not stop '{subagent_id}': {error}. It may have finished already."
        )),
    }
}

/// One prepared child: its id, task and place.
struct ChildPlan {
    index: usize,
    subagent_id: String,
    task: TaskSpec,
}

async fn spawn(
    ctx: DelegateContext,
    tasks: Vec<TaskSpec>,
    cancel: CancellationToken,
) -> ToolResult {
    let depth = ctx.depth();
    let limits = ctx.delegation().clone();
    if !limits.may_spawn_at(depth) {
        return refusal(format!(
            "Delegation depth limit reached: this agent is at depth {depth} and delegation.max_spawn_depth is {}. Do the work yourself, or ask the operator to raise delegation.max_spawn_depth (each level multiplies the cost).",
            limits.max_spawn_depth
        ));
    }
    let view = match child_view(&ctx.view, &limits, depth + 1) {
        Ok(view) => view,
        Err(message) => return refusal(message),
    };
    let delegation_id = format!("deleg_{}", short_hex());
    let plans: Vec<ChildPlan> = tasks
        .into_iter()
        .enumerate()
        .map(|(index, task)| ChildPlan {
            index,
            subagent_id: format!("sa-{index}-{}", short_hex()),
            task,
        })
        .collect();
    let subagent_ids: Vec<String> = plans.iter().map(|p| p.subagent_id.clone()).collect();

    let mut note = None;
    if let Some(recipient) = ctx.background.clone() {
        let cap = limits.max_concurrent_children;
        let free = ctx.slots.available_permits();
        if let Some(permits) = take_slots(&ctx.slots, plans.len()) {
            if let Some(persist) = &ctx.config.persist {
                persist.journal.delegation(
                    &ctx.parent_id,
                    &delegation_id,
                    crate::journal::DelegationState::Running,
                );
            }
            let token = ctx.lifetime.child_token();
            let id = delegation_id.clone();
            let count = plans.len();
            tokio::spawn(async move {
                let started = Instant::now();
                let slotted = plans
                    .into_iter()
                    .zip(permits.into_iter().map(Some))
                    .collect();
                let results = join_children(&ctx, &id, view, slotted, token.clone()).await;
                let stopped = token.is_cancelled();
                let headline = if stopped {
                    format!(
                        "[Background delegation {id} was stopped after {:.1} s, before all of its {count} task(s) were done. What each subagent had reached, in task order; interrupted ones did not finish.]",
                        started.elapsed().as_secs_f64()
                    )
                } else {
                    format!(
                        "[Background delegation {id} finished: {count} task(s) in {:.1} s. Results in task order; the summaries are the subagents' own reports, so check their side effects before relying on them.]",
                        started.elapsed().as_secs_f64()
                    )
                };
                recipient.do_send(DelegationFinished {
                    delegation_id: id,
                    text: format!("{headline}\n{}", Value::Array(results)),
                    stopped,
                });
            });
            return ToolResult::json(json!({
                "status": "running",
                "delegation_id": delegation_id,
                "subagent_ids": subagent_ids,
                "note": "The subagents are working in the background. Their results will arrive as a new message when all have finished: carry on with other work or end your turn, and do not poll for them."
            }));
        }
        note = Some(format!(
            "Only {free} of the {cap} subagent slots were free (subagents still running hold the others), so this call did not run in the background: each task started as a slot freed up, never more than {cap} subagents at once, and the call waited for all {} to finish.",
            plans.len()
        ));
    } else if depth == 0 {
        note = Some(
            "This session cannot take a later message, so the call waited for every task to finish instead of running them in the background."
                .to_string(),
        );
    }
    // Foreground children take their slots as they start, queueing behind running ones.
    let plans = plans.into_iter().map(|plan| (plan, None)).collect();
    let started = Instant::now();
    let results = join_children(&ctx, &delegation_id, view, plans, cancel).await;
    let mut body = json!({
        "delegation_id": delegation_id,
        "results": results,
        "total_duration_seconds": round2(started.elapsed().as_secs_f64()),
    });
    if let Some(note) = note {
        body["note"] = Value::String(note);
    }
    ToolResult::json(body)
}

/// A child's view: the parent's, narrowed by `delegation.default_toolsets`, without the
/// kanban toolset and the tools children never get (`delegate_task` too for a leaf).
pub fn child_view(
    parent: &ToolsetView,
    config: &DelegationConfig,
    child_depth: u32,
) -> Result<ToolsetView, String> {
    let known = parent.registry().toolsets();
    let mut spec = ViewSpec::default();
    if let Some(ceiling) = &config.default_toolsets {
        let mut enabled: Vec<String> = Vec::new();
        for name in ceiling {
            if known.contains(name) {
                enabled.push(name.clone());
            } else {
                tracing::warn!(toolset = %name, "delegation.default_toolsets names a toolset nobody registered; skipping it");
            }
        }
        if config.inherit_mcp_toolsets {
            for def in parent.tools() {
                if def.kind == ToolKind::Mcp
                    && let Some(toolset) = &def.toolset
                    && !enabled.contains(toolset)
                {
                    enabled.push(toolset.clone());
                }
            }
        }
        // An orchestrator child keeps delegating whatever the ceiling says; leaves lose it below.
        if config.child_may_delegate(child_depth)
            && let Some(toolset) = parent.get(DELEGATE_TASK).and_then(|d| d.toolset.clone())
            && !enabled.contains(&toolset)
        {
            enabled.push(toolset);
        }
        spec.enabled = Some(enabled);
    }
    spec.disabled = BLOCKED_TOOLSETS_FOR_CHILDREN
        .iter()
        .filter(|name| known.contains(**name))
        .map(|name| (*name).to_string())
        .collect();
    spec.blocked = BLOCKED_FOR_CHILDREN
        .iter()
        .map(|n| (*n).to_string())
        .collect();
    if !config.child_may_delegate(child_depth) {
        spec.blocked.push(DELEGATE_TASK.to_string());
    }
    parent.narrow(spec).map_err(|error| {
        format!("Could not work out the subagents' tools ({error}); check delegation.default_toolsets in troupe.yaml.")
    })
}

/// One slot per task, all or none: a background call runs only when every task can start now.
fn take_slots(slots: &Arc<Semaphore>, count: usize) -> Option<Vec<OwnedSemaphorePermit>> {
    if slots.available_permits() < count {
        return None;
    }
    // Taken one by one so each child frees its own slot as it ends.
    (0..count)
        .map(|_| Arc::clone(slots).try_acquire_owned().ok())
        .collect()
}

/// Runs every planned child (each with its slot, or taking one when it has none) and returns
/// the results in task order.
async fn join_children(
    ctx: &DelegateContext,
    delegation_id: &str,
    view: ToolsetView,
    plans: Vec<(ChildPlan, Option<OwnedSemaphorePermit>)>,
    cancel: CancellationToken,
) -> Vec<Value> {
    // join_all keeps the input order, so results come back in task order.
    join_all(plans.into_iter().map(|(plan, slot)| {
        run_child(ctx, delegation_id, view.clone(), plan, slot, cancel.clone())
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_against_the_schema() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        assert_eq!(
            check_output(&schema, "```json\n{\"n\": 3}\n```").unwrap(),
            json!({"n": 3})
        );
        let errors = check_output(&schema, "{\"n\": \"three\"}").unwrap_err();
        assert!(errors[0].contains("/n"), "{errors:?}");
        assert!(check_output(&schema, "three").unwrap_err()[0].contains("not JSON"));
    }

    #[test]
    fn child_views_narrow_block_and_keep_delegation_only_for_orchestrators() {
        use troupe_tools::Registry;
        let def = |name: &str, toolset: &str| {
            troupe_tools::ToolDef::new(name, "t", json!({"type": "object"})).with_toolset(toolset)
        };
        let registry = Registry::with_tools([
            def("read_file", "core"),
            def("web_search", "web"),
            def("clarify", "core"),
            def("kanban_show", "kanban"),
            def("mcp_gh_list", "mcp-gh"),
        ]);
        crate::delegate::register_delegate_task(&registry, &DelegationConfig::default());
        let parent = registry
            .view(ViewSpec::all().blocking(["web_search"]))
            .unwrap();
        let ceiling = DelegationConfig {
            default_toolsets: Some(vec!["core".into(), "web".into(), "unknown".into()]),
            max_spawn_depth: 2,
            ..DelegationConfig::default()
        };
        let names = |view: &ToolsetView| -> Vec<String> {
            view.tools().iter().map(|d| d.name.clone()).collect()
        };
        let middle = child_view(&parent, &ceiling, 1).unwrap();
        assert_eq!(
            names(&middle),
            ["read_file", "clarify", "mcp_gh_list", "delegate_task"]
        );
        let leaf = child_view(&parent, &ceiling, 2).unwrap();
        assert_eq!(names(&leaf), ["read_file", "clarify", "mcp_gh_list"]);
        let no_mcp = DelegationConfig {
            inherit_mcp_toolsets: false,
            ..ceiling
        };
        assert_eq!(
            names(&child_view(&parent, &no_mcp, 2).unwrap()),
            ["read_file", "clarify"]
        );
        let unlimited = child_view(&parent, &DelegationConfig::default(), 1).unwrap();
        assert_eq!(names(&unlimited), ["read_file", "clarify", "mcp_gh_list"]);
    }

    /// A call abandoned while its child is still opening must not leave the child behind.
    #[actix_rt::test]
    async fn a_child_that_opens_after_its_call_was_abandoned_is_closed() {
        use futures::FutureExt;
        use troupe_tools::Registry;

        use crate::model::{Script, ScriptedProvider};
        use crate::supervisor::{ApprovalConfig, DefaultRules};
        use actix::Actor;

        let registry = Registry::new();
        let supervisor =
            Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::new([]))).start();
        let provider: Arc<dyn ModelProvider> = Arc::new(ScriptedProvider::new(Script::new()));
        let parent = SessionHandle::open(SessionParams {
            provider: Arc::clone(&provider),
            view: registry.view_all(),
            config: SessionConfig::default(),
            hooks: HookRegistry::default(),
            supervisor: supervisor.clone(),
            parent: None,
            upstream_events: None,
        })
        .await
        .unwrap();
        let events = EventSink::new();
        let mut seen = events.subscribe();
        let ctx = DelegateContext {
            parent_id: parent.id().to_string(),
            parent_path: parent.agent_path().to_vec(),
            provider,
            view: registry.view_all(),
            config: SessionConfig::default(),
            hooks: HookRegistry::default(),
            supervisor,
            events,
            tracker: SubagentTracker::new(),
            arbiter: actix_rt::Arbiter::current(),
            lifetime: CancellationToken::new(),
            slots: Arc::new(Semaphore::new(1)),
            background: None,
            meter: crate::usage::Meter::root(crate::usage::Budget::default()),
        };
        // Start opening (the open is handed to the arbiter), then drop the call mid-way.
        let mut opening = Box::pin(open_child(
            &ctx,
            registry.view_all(),
            Arc::new(Activity::new()),
        ));
        assert!(opening.as_mut().now_or_never().is_none());
        drop(opening);
        let mut child = None;
        loop {
            // Generous: this only bounds how long a broken build takes to fail.
            let event = tokio::time::timeout(Duration::from_secs(20), seen.recv())
                .await
                .expect("the orphaned child was never closed")
                .unwrap();
            match event.kind {
                EventKind::SessionStarted { .. } => child = Some(event.session_id),
                EventKind::SessionEnded { .. } if child.as_ref() == Some(&event.session_id) => {
                    break;
                }
                _ => {}
            }
        }
        drop(parent);
    }

    #[test]
    fn the_opening_carries_goal_context_and_format() {
        let text = opening(&TaskSpec {
            goal: "count files".into(),
            context: Some("in src/".into()),
            output_schema: Some(json!({"type": "integer"})),
        });
        assert!(text.contains("count files") && text.contains("in src/"));
        assert!(text.contains("only a JSON value"));
    }
}
