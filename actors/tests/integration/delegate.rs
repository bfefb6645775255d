//! `delegate_task` end to end on the scripted model (and once over real HTTP against the mock
//! OpenAI-compatible server): depth-3 trees, a fan-out of ten in task order, narrowed views as a
//! security property, depth and task-count limits, steer / stop / list with background delivery,
//! hard stop with no process left, inactivity timeout, a child's approval, output_schema.
//! Run with `cargo test -p troupe-actors --features mock-server --test integration delegate::`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Actor, Addr};
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use troupe_actors::call::CallStatus;
use troupe_actors::delegate::run::SUBAGENT_SYSTEM_PROMPT;
use troupe_actors::delegate::{DelegationConfig, register_delegate_task};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::hooks::{Hook, HookRegistry, ToolCallInfo};
use troupe_actors::model::{
    ChatMessage, FinishReason, ModelError, ModelProvider, ModelRequest, ModelResponse, Script,
    ScriptTurn, ScriptedProvider, ToolCallRequest, Usage,
};
use troupe_actors::session::{SessionConfig, SessionHandle, SessionParams, TurnStatus};
use troupe_actors::supervisor::{
    AnswerApproval, ApprovalChoice, ApprovalConfig, ApprovalRules, RuleInput, RuleVerdict,
    SubscribeApprovals, Supervisor,
};
use troupe_actors::tool_runner::RunnerLimits;
use troupe_actors::usage::Budget;
use troupe_tools::{CallContext, Registry, ToolDef, ToolResult};

use crate::support::drain_events as drain;

// ---------------------------------------------------------------------------------------------
// Fixtures

fn tool<F>(name: &str, toolset: &str, description: &str, f: F) -> ToolDef
where
    F: Fn(Map<String, Value>, CallContext) -> BoxFuture<'static, ToolResult>
        + Send
        + Sync
        + 'static,
{
    ToolDef::new(name, description, json!({"type": "object"}))
        .with_toolset(toolset)
        .with_fn(f)
}

fn fixed(name: &str, toolset: &str, description: &str, answer: &'static str) -> ToolDef {
    tool(name, toolset, description, move |_, _| {
        Box::pin(async move { ToolResult::text(answer) })
    })
}

/// Allows every call.
struct AllowAll;

impl ApprovalRules for AllowAll {
    fn check(&self, _input: &RuleInput<'_>) -> RuleVerdict {
        RuleVerdict::Allow
    }
}

/// Asks before every call of one tool.
struct AskFor(&'static str);

impl ApprovalRules for AskFor {
    fn check(&self, input: &RuleInput<'_>) -> RuleVerdict {
        if input.tool == self.0 {
            RuleVerdict::Ask {
                key: format!("tool:{}", self.0),
                reason: "it deploys".into(),
            }
        } else {
            RuleVerdict::Allow
        }
    }
}

/// One finished call as the hooks saw it.
#[derive(Debug, Clone)]
struct Seen {
    session_id: String,
    tool: String,
    underlying: String,
    status: CallStatus,
    text: String,
}

/// Records every finished call and the tools offered to each session.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Seen>>,
    offered: Mutex<HashMap<String, Vec<String>>>,
}

impl Hook for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, result: &ToolResult) {
        self.calls.lock().unwrap().push(Seen {
            session_id: call.session_id.to_string(),
            tool: call.tool.to_string(),
            underlying: call.underlying_tool.to_string(),
            status,
            text: result.to_model_text(),
        });
    }

    fn pre_llm_call(&self, session_id: &str, request: &mut ModelRequest) {
        let names = request
            .tools
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
            .collect();
        self.offered
            .lock()
            .unwrap()
            .insert(session_id.to_string(), names);
    }
}

impl Recorder {
    fn calls(&self) -> Vec<Seen> {
        self.calls.lock().unwrap().clone()
    }

    fn not_by(&self, session_id: &str) -> Vec<Seen> {
        self.calls()
            .into_iter()
            .filter(|c| c.session_id != session_id)
            .collect()
    }
}

fn session_config(delegation: DelegationConfig) -> SessionConfig {
    SessionConfig {
        runner: RunnerLimits {
            stop_grace: Duration::from_secs(5),
            ..RunnerLimits::default()
        },
        delegation,
        ..SessionConfig::default()
    }
}

struct Rig {
    supervisor: Addr<Supervisor>,
    root: SessionHandle,
    recorder: Arc<Recorder>,
    events: mpsc::UnboundedReceiver<SessionEvent>,
}

async fn rig(
    registry: &Arc<Registry>,
    provider: Arc<dyn ModelProvider>,
    config: SessionConfig,
    rules: impl ApprovalRules,
) -> Rig {
    register_delegate_task(registry, &config.delegation);
    let supervisor = Supervisor::new(ApprovalConfig::default(), Arc::new(rules)).start();
    let recorder = Arc::new(Recorder::default());
    let root = SessionHandle::open(SessionParams {
        provider,
        view: registry.view_all(),
        config,
        hooks: HookRegistry::with_hooks(vec![recorder.clone() as Arc<dyn Hook>]),
        supervisor: supervisor.clone(),
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap();
    let events = root.events();
    Rig {
        supervisor,
        root,
        recorder,
        events,
    }
}

fn scripted(turns: Vec<ScriptTurn>) -> Arc<dyn ModelProvider> {
    let mut script = Script::new();
    for turn in turns {
        script = script.turn(turn);
    }
    Arc::new(ScriptedProvider::new(script))
}

fn delegate(tasks: Value) -> ScriptTurn {
    ScriptTurn::tool_call("delegate_task", json!({ "tasks": tasks }))
}

/// The parsed result of call `index` of a turn.
fn call_json(outcome: &troupe_actors::session::TurnOutcome, index: usize) -> Value {
    serde_json::from_str(&outcome.calls[index].result.to_model_text()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Trees and fan-out

#[actix_rt::test]
async fn a_tree_three_levels_deep_reports_up_through_every_level() {
    let registry = Registry::new();
    let provider = scripted(vec![
        delegate(json!([{"goal": "level-one job"}])).when_input_contains("ROOT-GO"),
        delegate(json!([{"goal": "level-two job"}])).when_input_contains("level-one job"),
        delegate(json!([{"goal": "level-three job"}])).when_input_contains("level-two job"),
        // The third level is a leaf: it has no delegate_task and is told so.
        delegate(json!([{"goal": "level-four job"}])).when_input_contains("level-three job"),
        ScriptTurn::text("L3-REPORT").when_input_contains("no tool called 'delegate_task'"),
        ScriptTurn::text("L2-REPORT").when_input_contains("L3-REPORT"),
        ScriptTurn::text("L1-REPORT").when_input_contains("L2-REPORT"),
        ScriptTurn::text("ROOT-FINAL").when_input_contains("L1-REPORT"),
    ]);
    let config = session_config(DelegationConfig {
        max_spawn_depth: 3,
        ..DelegationConfig::default()
    });
    let mut rig = rig(&registry, provider, config, AllowAll).await;

    let outcome = rig.root.send("ROOT-GO").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.text, "ROOT-FINAL");
    let result = call_json(&outcome, 0);
    assert_eq!(result["results"][0]["status"], "completed");
    assert_eq!(result["results"][0]["summary"], "L1-REPORT");
    assert_eq!(result["results"][0]["task_index"], 0);

    let events = drain(&mut rig.events);
    let depths: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SubagentSpawned { depth, .. } => Some(u64::from(*depth)),
            _ => None,
        })
        .collect();
    assert_eq!(depths, [1, 2, 3]);
    let deepest = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SessionStarted { agent_path, .. } => Some(agent_path.len()),
            _ => None,
        })
        .max();
    assert_eq!(deepest, Some(4), "root + three levels of subagents");
    // The leaf's attempt to delegate failed as an unknown tool.
    let leaf_try = rig
        .recorder
        .not_by(rig.root.id())
        .into_iter()
        .find(|c| c.tool == "delegate_task" && c.status == CallStatus::Error)
        .expect("the leaf's delegate_task call is recorded as an error");
    assert!(
        leaf_try.text.contains("no tool called 'delegate_task'"),
        "{}",
        leaf_try.text
    );
}

#[actix_rt::test]
async fn a_fan_out_of_ten_returns_every_result_in_task_order() {
    let registry = Registry::new();
    let tasks: Vec<Value> = (0..10)
        .map(|i| json!({"goal": format!("unit-{i}-go")}))
        .collect();
    let mut turns = vec![delegate(Value::Array(tasks)).when_input_contains("FAN-GO")];
    for i in 0..10u64 {
        // Later tasks answer sooner, so finishing order is not task order.
        turns.push(
            ScriptTurn::text(format!("unit-{i}-done"))
                .when_input_contains(format!("unit-{i}-go"))
                .with_delay(Duration::from_millis((10 - i) * 20)),
        );
    }
    turns.push(ScriptTurn::text("FAN-DONE").when_input_contains("unit-0-done"));
    let mut rig = rig(
        &registry,
        scripted(turns),
        session_config(DelegationConfig::default()),
        AllowAll,
    )
    .await;

    let outcome = rig.root.send("FAN-GO").await.unwrap();
    assert_eq!(outcome.text, "FAN-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    for (i, entry) in results.iter().enumerate() {
        assert_eq!(entry["task_index"], i);
        assert_eq!(entry["status"], "completed");
        assert_eq!(entry["exit_reason"], "completed");
        assert_eq!(entry["summary"], format!("unit-{i}-done"));
        assert_eq!(entry["api_calls"], 1);
    }
    let completed = drain(&mut rig.events)
        .into_iter()
        .filter(|e| {
            matches!(e.kind, EventKind::SubagentCompleted { .. }) && e.session_id == rig.root.id()
        })
        .count();
    assert_eq!(completed, 10);
}

#[actix_rt::test]
async fn a_child_spends_from_its_parents_budget_and_stops_when_it_is_gone() {
    let worked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&worked);
    let registry = Registry::with_tools([tool("work", "core", "does work", move |args, _| {
        let count = Arc::clone(&count);
        Box::pin(async move {
            count.fetch_add(1, Ordering::SeqCst);
            ToolResult::text(format!("worked-{}", args["n"]))
        })
    })]);
    // The parent may spend 1,000 tokens; the child has no budget of its own. The parent's
    // request takes 100, each of the child's 500: after the child's second request the
    // parent's budget is gone, so the child stops there, and the parent with it.
    let provider = scripted(vec![
        delegate(json!([{"goal": "SPEND-CHILD"}]))
            .when_input_contains("BUDGET-GO")
            .with_usage(100, 0),
        ScriptTurn::tool_call("work", json!({"n": 1}))
            .when_input_contains("SPEND-CHILD")
            .with_usage(500, 0),
        ScriptTurn::tool_call("work", json!({"n": 2}))
            .with_text("CHILD-PARTIAL")
            .when_input_contains("worked-1")
            .with_usage(500, 0),
        ScriptTurn::text("CHILD-NEVER").when_input_contains("worked-2"),
        ScriptTurn::text("PARENT-NEVER").when_input_contains("budget"),
    ]);
    let config = SessionConfig {
        budget: Budget {
            max_tokens: Some(1_000),
            ..Budget::default()
        },
        ..session_config(DelegationConfig::default())
    };
    let rig = rig(&registry, provider, config, AllowAll).await;

    let outcome = rig.root.send("BUDGET-GO").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::BudgetExceeded, "{outcome:?}");
    assert_eq!(
        worked.load(Ordering::SeqCst),
        1,
        "the child's second call never ran"
    );
    let result = call_json(&outcome, 0);
    let child = &result["results"][0];
    assert_eq!(child["status"], "budget_exceeded", "{result}");
    let summary = child["summary"].as_str().unwrap();
    assert!(summary.starts_with("CHILD-PARTIAL"), "{summary}");
    assert!(
        summary.contains("the parent session's token budget"),
        "{summary}"
    );
    // The subtree's requests are the parent's: one of its own and two of the child's.
    assert_eq!(outcome.spend.requests, 3);
    assert_eq!(outcome.spend.tokens(), 1_100);
    assert_eq!(rig.root.spent().tokens(), 1_100);
}

// ---------------------------------------------------------------------------------------------
// Views: narrowing and blocked tools, as a security property

#[actix_rt::test]
async fn a_child_cannot_find_describe_or_call_what_its_parent_did_not_grant() {
    let opened = Arc::new(AtomicUsize::new(0));
    let counter = opened.clone();
    let registry = Registry::with_tools([
        fixed(
            "read_notes",
            "notes",
            "Read the team notes",
            "notes content",
        ),
        tool(
            "vault_open",
            "vault",
            "Open the secret vault and read stored credentials",
            move |_, _| {
                counter.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { ToolResult::text("credentials") })
            },
        ),
        fixed("clarify", "clarify", "Ask the user a question", "answer"),
        fixed("memory", "memory", "Remember a fact", "saved"),
        fixed("send_message", "messaging", "Message someone", "sent"),
        fixed("kanban_show", "kanban", "Show a kanban task", "task"),
    ]);
    let probe_calls = vec![
        (
            "tool_search",
            json!({"queries": ["secret vault credentials"]}),
        ),
        ("tool_describe", json!({"names": ["vault_open"]})),
        (
            "tool_call",
            json!({"calls": [{"name": "vault_open", "arguments": {}}]}),
        ),
        ("vault_open", json!({})),
        ("clarify", json!({})),
        ("memory", json!({})),
        ("send_message", json!({})),
        ("kanban_show", json!({})),
        (
            "tool_call",
            json!({"calls": [{"name": "kanban_show", "arguments": {}}]}),
        ),
        ("delegate_task", json!({"tasks": [{"goal": "deeper"}]})),
        ("read_notes", json!({})),
    ];
    let mut probe = ScriptTurn::text("probing").when_input_contains("probe the vault");
    for (name, args) in &probe_calls {
        probe = probe.with_tool_call(*name, args.clone());
    }
    let provider = scripted(vec![
        // The parent can find the vault tool, so a child not finding it means something.
        ScriptTurn::tool_call(
            "tool_search",
            json!({"queries": ["secret vault credentials"]}),
        )
        .when_input_contains("SEC-GO"),
        probe,
        ScriptTurn::text("PROBE-DONE").when_input_contains("notes content"),
        delegate(json!([{"goal": "probe the vault"}])).when_input_contains("vault_open"),
        ScriptTurn::text("SEC-DONE").when_input_contains("PROBE-DONE"),
    ]);
    let config = session_config(DelegationConfig {
        // The ceiling names everything but the vault; blocked tools go whatever it says.
        default_toolsets: Some(
            [
                "notes",
                "clarify",
                "memory",
                "messaging",
                "kanban",
                "delegation",
                "no-such-set",
            ]
            .map(String::from)
            .to_vec(),
        ),
        ..DelegationConfig::default()
    });
    let rig = rig(&registry, provider, config, AllowAll).await;

    let outcome = rig.root.send("SEC-GO").await.unwrap();
    assert_eq!(outcome.text, "SEC-DONE", "{outcome:?}");
    let parent_search = &outcome.calls.first().unwrap().result.to_model_text();
    assert!(parent_search.contains("vault_open"), "{parent_search}");

    let child_calls = rig.recorder.not_by(rig.root.id());
    assert_eq!(child_calls.len(), probe_calls.len(), "{child_calls:#?}");
    for seen in &child_calls {
        match (seen.tool.as_str(), seen.underlying.as_str()) {
            ("read_notes", _) => assert_eq!(seen.status, CallStatus::Ok),
            ("tool_search", _) => {
                assert!(
                    !seen.text.contains("vault_open"),
                    "search leaked: {}",
                    seen.text
                );
                assert!(
                    !seen.text.contains("kanban_show"),
                    "search leaked: {}",
                    seen.text
                );
            }
            ("tool_describe", _) => {
                assert!(
                    !seen.text.contains("stored credentials"),
                    "describe leaked: {}",
                    seen.text
                );
            }
            (tool, underlying) => {
                assert_eq!(
                    seen.status,
                    CallStatus::Error,
                    "{tool} → {underlying} ran: {}",
                    seen.text
                );
            }
        }
    }
    assert_eq!(opened.load(Ordering::SeqCst), 0, "the vault tool never ran");
    let offered = rig.recorder.offered.lock().unwrap().clone();
    let child_offer = offered
        .iter()
        .find(|(session, _)| session.as_str() != rig.root.id())
        .map(|(_, names)| names.clone())
        .unwrap();
    for blocked in [
        "vault_open",
        "clarify",
        "memory",
        "send_message",
        "kanban_show",
        "delegate_task",
    ] {
        assert!(
            !child_offer.iter().any(|n| n == blocked),
            "{blocked} offered: {child_offer:?}"
        );
    }
    assert!(
        child_offer.iter().any(|n| n == "read_notes")
            || child_offer.iter().any(|n| n == "tool_search")
    );
}

// ---------------------------------------------------------------------------------------------
// Limits

#[actix_rt::test]
async fn depth_limit_leaves_leaves_without_delegate_task_and_refuses_deeper_spawns() {
    let registry = Registry::new();
    let provider = scripted(vec![
        delegate(json!([{"goal": "leaf job"}])).when_input_contains("DEPTH-GO"),
        delegate(json!([{"goal": "deeper job"}])).when_input_contains("leaf job"),
        ScriptTurn::text("LEAF-DONE").when_input_contains("no tool called"),
        ScriptTurn::text("DEPTH-DONE").when_input_contains("LEAF-DONE"),
        delegate(json!([{"goal": "from depth one"}])).when_input_contains("TRY-DEEP"),
        ScriptTurn::text("REFUSED").when_input_contains("depth limit"),
    ]);
    let config = session_config(DelegationConfig::default());
    let rig = rig(&registry, provider.clone(), config.clone(), AllowAll).await;

    let outcome = rig.root.send("DEPTH-GO").await.unwrap();
    assert_eq!(outcome.text, "DEPTH-DONE", "{outcome:?}");

    // A session at depth 1 that somehow holds delegate_task is still refused.
    let deep = SessionHandle::open(SessionParams {
        provider,
        view: registry.view_all(),
        config,
        hooks: HookRegistry::new(),
        supervisor: rig.supervisor.clone(),
        parent: Some(rig.root.id().to_string()),
        upstream_events: None,
    })
    .await
    .unwrap();
    let refused = deep.send("TRY-DEEP").await.unwrap();
    assert_eq!(refused.text, "REFUSED", "{refused:?}");
    let text = refused.calls[0].result.to_model_text();
    assert!(refused.calls[0].result.is_error);
    assert!(
        text.contains("depth 1") && text.contains("max_spawn_depth is 1"),
        "{text}"
    );
}

#[actix_rt::test]
async fn too_many_tasks_is_an_error_that_names_the_limit() {
    let registry = Registry::new();
    let tasks: Vec<Value> = (0..4).map(|i| json!({"goal": format!("t{i}")})).collect();
    let provider = scripted(vec![
        delegate(Value::Array(tasks)).when_input_contains("MANY-GO"),
        ScriptTurn::text("SPLIT").when_input_contains("Too many tasks"),
    ]);
    let config = session_config(DelegationConfig {
        max_concurrent_children: 3,
        ..DelegationConfig::default()
    });
    let mut rig = rig(&registry, provider, config, AllowAll).await;
    let outcome = rig.root.send("MANY-GO").await.unwrap();
    assert_eq!(outcome.text, "SPLIT");
    let text = outcome.calls[0].result.to_model_text();
    assert!(
        text.contains("4 were given") && text.contains("max_concurrent_children is 3"),
        "{text}"
    );
    assert!(
        !drain(&mut rig.events)
            .iter()
            .any(|e| matches!(e.kind, EventKind::SubagentSpawned { .. })),
        "nothing was spawned"
    );
}

#[actix_rt::test]
async fn a_stalled_child_times_out_and_reports_what_it_had_done() {
    let registry = Registry::with_tools([fixed("note", "core", "Take a note", "noted")]);
    let provider = scripted(vec![
        delegate(json!([{"goal": "slow job"}, {"goal": "quick job"}]))
            .when_input_contains("STALL-GO"),
        ScriptTurn::tool_call("note", json!({})).when_input_contains("slow job"),
        // After its first tool round the slow child's model never answers.
        ScriptTurn::text("never")
            .when_input_contains("noted")
            .with_delay(Duration::from_secs(600)),
        ScriptTurn::text("quick-done").when_input_contains("quick job"),
        ScriptTurn::text("STALL-DONE").when_input_contains("quick-done"),
    ]);
    let config = session_config(DelegationConfig {
        child_timeout: Some(Duration::from_secs(2)),
        ..DelegationConfig::default()
    });
    let rig = rig(&registry, provider, config, AllowAll).await;
    let outcome = rig.root.send("STALL-GO").await.unwrap();
    assert_eq!(outcome.text, "STALL-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let slow = &result["results"][0];
    assert_eq!(slow["status"], "timeout", "{slow}");
    assert_eq!(slow["exit_reason"], "timeout");
    assert_eq!(slow["api_calls"], 1);
    assert_eq!(slow["tool_calls"], 1);
    assert_eq!(slow["timeout_phase"], "after_llm_calls");
    assert_eq!(slow["calls_before_stop"][0]["tool"], "note");
    assert!(
        slow["error"]
            .as_str()
            .unwrap()
            .contains("child_timeout_seconds")
    );
    assert_eq!(result["results"][1]["status"], "completed");
    assert_eq!(result["results"][1]["summary"], "quick-done");
}

// ---------------------------------------------------------------------------------------------
// Steer, stop and list of one branch; background delivery

/// Answers the root from a queue the test fills, and subagents from a script.
struct Puppet {
    children: ScriptedProvider,
    root: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ModelResponse>>>,
}

impl ModelProvider for Puppet {
    fn describe(&self) -> String {
        "puppet".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let is_child = matches!(
            request.messages.first(),
            Some(ChatMessage::System { content }) if content == SUBAGENT_SYSTEM_PROMPT
        );
        if is_child {
            return self.children.complete(request, cancel);
        }
        let root = Arc::clone(&self.root);
        Box::pin(async move {
            let mut queue = root.lock().await;
            tokio::select! {
                next = queue.recv() => next.ok_or(ModelError::Cancelled),
                _ = cancel.cancelled() => Err(ModelError::Cancelled),
            }
        })
    }
}

fn say(text: &str) -> ModelResponse {
    ModelResponse {
        content: Some(text.into()),
        tool_calls: vec![],
        finish_reason: FinishReason::Stop,
        usage: Usage::default(),
    }
}

fn call(name: &str, args: Value) -> ModelResponse {
    ModelResponse {
        content: None,
        tool_calls: vec![ToolCallRequest {
            id: format!("root_{}", uuid_like()),
            name: name.into(),
            arguments: args.to_string(),
        }],
        finish_reason: FinishReason::ToolCalls,
        usage: Usage::default(),
    }
}

fn uuid_like() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

#[actix_rt::test]
async fn steer_reaches_one_child_and_stop_ends_only_its_branch() {
    let gate = Arc::new(Notify::new());
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<&'static str>();
    let held_cancelled = Arc::new(AtomicBool::new(false));
    let (g, e1, e2, h) = (
        gate.clone(),
        entered_tx.clone(),
        entered_tx,
        held_cancelled.clone(),
    );
    let registry = Registry::with_tools([
        tool("wait_gate", "core", "Wait for the gate", move |_, _| {
            let (gate, entered) = (g.clone(), e1.clone());
            Box::pin(async move {
                let opened = gate.notified();
                let _ = entered.send("wait_gate");
                opened.await;
                ToolResult::text("gate opened")
            })
        }),
        tool("hold", "core", "Hold until stopped", move |_, ctx| {
            let (held, entered) = (h.clone(), e2.clone());
            Box::pin(async move {
                let _ = entered.send("hold");
                ctx.cancel.cancelled().await;
                held.store(true, Ordering::SeqCst);
                ToolResult::text("held and released")
            })
        }),
    ]);
    let children = ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call("wait_gate", json!({})).when_input_contains("steer-target"))
            .turn(ScriptTurn::tool_call("hold", json!({})).when_input_contains("stop-target"))
            .turn(ScriptTurn::text("heard STEER-NOTE").when_input_contains("STEER-NOTE")),
    );
    let (root_tx, root_rx) = mpsc::unbounded_channel();
    let puppet = Arc::new(Puppet {
        children,
        root: Arc::new(tokio::sync::Mutex::new(root_rx)),
    });
    let config = SessionConfig {
        background_delegation: true,
        ..session_config(DelegationConfig::default())
    };
    let mut rig = rig(&registry, puppet.clone(), config, AllowAll).await;

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "steer-target"}, {"goal": "stop-target"}]}),
        ))
        .unwrap();
    root_tx.send(say("spawned")).unwrap();
    let first = rig.root.send("start").await.unwrap();
    assert_eq!(first.text, "spawned");
    let handle = call_json(&first, 0);
    assert_eq!(handle["status"], "running", "{handle}");
    assert!(
        handle["delegation_id"]
            .as_str()
            .unwrap()
            .starts_with("deleg_")
    );
    let ids: Vec<String> = handle["subagent_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(ids[0].starts_with("sa-0-") && ids[1].starts_with("sa-1-"));
    let mut inside = vec![entered.recv().await.unwrap(), entered.recv().await.unwrap()];
    inside.sort_unstable();
    assert_eq!(inside, ["hold", "wait_gate"]);

    root_tx
        .send(call(
            "delegate_task",
            json!({"action": "steer", "subagent_id": ids[0], "message": "STEER-NOTE"}),
        ))
        .unwrap();
    root_tx
        .send(call(
            "delegate_task",
            json!({"action": "stop", "subagent_id": ids[1]}),
        ))
        .unwrap();
    root_tx
        .send(call("delegate_task", json!({"action": "list"})))
        .unwrap();
    root_tx
        .send(call(
            "delegate_task",
            json!({"action": "steer", "subagent_id": "sa-9-nothere", "message": "x"}),
        ))
        .unwrap();
    root_tx.send(say("managed")).unwrap();
    let second = rig.root.send("manage them").await.unwrap();
    assert_eq!(second.text, "managed", "{second:?}");
    assert_eq!(call_json(&second, 0)["status"], "queued");
    assert_eq!(call_json(&second, 1)["status"], "stopping");
    let listed = call_json(&second, 2);
    assert!(
        listed["subagents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subagent_id"] == ids[0].as_str()),
        "{listed}"
    );
    assert!(second.calls[3].result.is_error);
    assert!(
        second.calls[3]
            .result
            .to_model_text()
            .contains("action=list")
    );

    // Child 0 goes on, reads the note, and the results arrive as a new turn of the root.
    root_tx.send(say("read the results")).unwrap();
    gate.notify_waiters();
    let delivered = loop {
        let event = rig.events.recv().await.unwrap();
        if event.session_id == rig.root.id()
            && let EventKind::Final { text, turn_id, .. } = &event.kind
            && *turn_id != first.turn_id
            && *turn_id != second.turn_id
        {
            break text.clone();
        }
    };
    assert_eq!(delivered, "read the results");
    assert!(
        held_cancelled.load(Ordering::SeqCst),
        "the stopped child's tool was cancelled"
    );
    let conversation = rig.root.conversation().await.unwrap();
    let report = conversation
        .iter()
        .find_map(|m| match m {
            ChatMessage::User { content } if content.contains("Background delegation") => {
                Some(content.clone())
            }
            _ => None,
        })
        .unwrap();
    let results: Value = serde_json::from_str(report.split_once('\n').unwrap().1).unwrap();
    assert_eq!(results[0]["status"], "completed", "{results}");
    assert!(
        results[0]["summary"]
            .as_str()
            .unwrap()
            .contains("STEER-NOTE")
    );
    assert_eq!(results[1]["status"], "interrupted", "{results}");
}

/// A hard stop of the root ends its background subagents too, and their results wait for the
/// user's next message instead of starting a turn by themselves.
#[actix_rt::test]
async fn a_hard_stop_ends_background_subagents_and_holds_their_results() {
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let registry =
        Registry::with_tools([tool("hold", "core", "Hold until stopped", move |_, ctx| {
            let entered = entered_tx.clone();
            Box::pin(async move {
                let _ = entered.send(());
                ctx.cancel.cancelled().await;
                ToolResult::text("held and released")
            })
        })]);
    let children = ScriptedProvider::new(
        Script::new().turn(ScriptTurn::tool_call("hold", json!({})).when_input_contains("hold-on")),
    );
    let (root_tx, root_rx) = mpsc::unbounded_channel();
    let puppet = Arc::new(Puppet {
        children,
        root: Arc::new(tokio::sync::Mutex::new(root_rx)),
    });
    let config = SessionConfig {
        background_delegation: true,
        ..session_config(DelegationConfig::default())
    };
    let mut rig = rig(&registry, puppet, config, AllowAll).await;

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "hold-on one"}, {"goal": "hold-on two"}]}),
        ))
        .unwrap();
    root_tx.send(say("spawned")).unwrap();
    let first = rig.root.send("start").await.unwrap();
    assert_eq!(call_json(&first, 0)["status"], "running");
    entered.recv().await.unwrap();
    entered.recv().await.unwrap();
    drain(&mut rig.events);

    rig.root.stop(true).await.unwrap();
    let root_id = rig.root.id().to_string();
    let mut children_ended = 0;
    let mut delivered = None;
    let mut turns_after_stop = 0;
    while children_ended < 2 || delivered.is_none() {
        let event = rig.events.recv().await.unwrap();
        match &event.kind {
            EventKind::SessionEnded { .. } if event.session_id != root_id => children_ended += 1,
            EventKind::DelegationDelivered { started_turn, .. } => delivered = Some(*started_turn),
            EventKind::TurnStarted { .. } if event.session_id == root_id => turns_after_stop += 1,
            _ => {}
        }
    }
    // A turn the session started for the results would be announced right after delivery.
    turns_after_stop += drain(&mut rig.events)
        .iter()
        .filter(|e| e.session_id == root_id && matches!(e.kind, EventKind::TurnStarted { .. }))
        .count();
    assert_eq!(delivered, Some(false), "the results must not start a turn");
    assert_eq!(
        turns_after_stop, 0,
        "the stopped root started a turn by itself"
    );

    // The user's next message carries the held results to the model.
    root_tx.send(say("back")).unwrap();
    let next = rig.root.send("carry on").await.unwrap();
    assert_eq!(next.text, "back");
    let conversation = rig.root.conversation().await.unwrap();
    let report = conversation
        .iter()
        .find_map(|m| match m {
            ChatMessage::User { content } if content.contains("was stopped") => {
                Some(content.clone())
            }
            _ => None,
        })
        .unwrap();
    let results: Value = serde_json::from_str(report.split_once('\n').unwrap().1).unwrap();
    assert_eq!(results[0]["status"], "interrupted", "{results}");
    assert_eq!(results[1]["status"], "interrupted", "{results}");
}

/// With the background pool full, a further call queues its tasks behind the running ones:
/// never more than `max_concurrent_children` subagents at once, and the note says so.
#[actix_rt::test]
async fn a_full_pool_queues_tasks_and_the_cap_holds() {
    let gate = Arc::new(Notify::new());
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let g = gate.clone();
    let registry = Registry::with_tools([tool(
        "wait_gate",
        "core",
        "Wait for the gate",
        move |_, _| {
            let (gate, entered) = (g.clone(), entered_tx.clone());
            Box::pin(async move {
                let opened = gate.notified();
                let _ = entered.send(());
                opened.await;
                ToolResult::text("gate opened")
            })
        },
    )]);
    let children = ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call("wait_gate", json!({})).when_input_contains("slow-task"))
            .turn(ScriptTurn::text("slow done").when_input_contains("gate opened"))
            .turn(ScriptTurn::text("quick done").when_input_contains("quick-task")),
    );
    let (root_tx, root_rx) = mpsc::unbounded_channel();
    let puppet = Arc::new(Puppet {
        children,
        root: Arc::new(tokio::sync::Mutex::new(root_rx)),
    });
    let config = SessionConfig {
        background_delegation: true,
        ..session_config(DelegationConfig {
            max_concurrent_children: 2,
            ..DelegationConfig::default()
        })
    };
    let mut rig = rig(&registry, puppet, config, AllowAll).await;

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "slow-task one"}, {"goal": "slow-task two"}]}),
        ))
        .unwrap();
    root_tx.send(say("spawned")).unwrap();
    let first = rig.root.send("start").await.unwrap();
    assert_eq!(call_json(&first, 0)["status"], "running");
    entered.recv().await.unwrap();
    entered.recv().await.unwrap();

    root_tx
        .send(call(
            "delegate_task",
            json!({"tasks": [{"goal": "quick-task one"}, {"goal": "quick-task two"}]}),
        ))
        .unwrap();
    root_tx.send(say("second done")).unwrap();
    let root = rig.root.clone();
    let turn = tokio::spawn(async move { root.send("more").await });
    let mut events = Vec::new();
    let mut queued = 0;
    while queued < 2 {
        let event = rig.events.recv().await.unwrap();
        if let EventKind::SubagentSpawned { goal, .. } = &event.kind
            && goal.starts_with("quick-task")
        {
            queued += 1;
        }
        events.push(event);
    }
    gate.notify_waiters();
    let second = turn.await.unwrap().unwrap();
    assert_eq!(second.text, "second done", "{second:?}");
    let body = call_json(&second, 0);
    assert_eq!(body["results"][0]["status"], "completed", "{body}");
    assert_eq!(body["results"][1]["status"], "completed", "{body}");
    let note = body["note"].as_str().unwrap();
    assert!(note.contains("Only 0 of the 2"), "{note}");
    assert!(note.contains("never more than 2"), "{note}");
    events.extend(drain(&mut rig.events));

    let root_id = rig.root.id().to_string();
    let (mut running, mut peak) = (0usize, 0usize);
    for event in events.iter().filter(|e| e.session_id == root_id) {
        match event.kind {
            EventKind::SubagentStarted { .. } => running += 1,
            EventKind::SubagentCompleted { .. } => running -= 1,
            _ => {}
        }
        peak = peak.max(running);
    }
    assert_eq!(peak, 2, "subagents running at once");
}

// ---------------------------------------------------------------------------------------------
// Hard stop: no process left alive

#[actix_rt::test]
async fn a_hard_stop_of_the_root_leaves_no_terminal_process_alive() {
    use troupe_tools::builtin::process_group::{LocalGroup, ProcessGroup};
    use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};

    let dir = tempfile::tempdir().unwrap();
    let builtins = Builtins::start(BuiltinConfig {
        default_cwd: dir.path().to_path_buf(),
        receipts_dir: dir.path().join("receipts"),
        ..BuiltinConfig::default()
    })
    .unwrap();
    let registry = Registry::with_tools(core_tools(&builtins));
    let sleeper = |name: &str| {
        let pid_file = dir.path().join(format!("{name}.pid"));
        json!({"command": format!("echo $$ > {}; sleep 120 & sleep 121 & wait", pid_file.display()), "timeout": 300})
    };
    let provider = scripted(vec![
        delegate(json!([{"goal": "sleeper-a"}, {"goal": "nester"}])).when_input_contains("HALT-GO"),
        ScriptTurn::tool_call("terminal", sleeper("a")).when_input_contains("sleeper-a"),
        delegate(json!([{"goal": "sleeper-deep"}])).when_input_contains("nester"),
        ScriptTurn::tool_call("terminal", sleeper("deep")).when_input_contains("sleeper-deep"),
        ScriptTurn::text("stopped").when_input_contains("HALT-NEVER"),
    ]);
    let config = session_config(DelegationConfig {
        max_spawn_depth: 2,
        ..DelegationConfig::default()
    });
    let rig = rig(&registry, provider, config, AllowAll).await;
    let root = rig.root.clone();
    let turn = tokio::spawn(async move { root.send("HALT-GO").await });

    let mut groups = Vec::new();
    for name in ["a", "deep"] {
        let path = dir.path().join(format!("{name}.pid"));
        let shell = loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                break pid;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // The command's group is led by troupe's keeper process, not by the shell itself.
        let pgid = process_group_of(shell);
        assert!(
            LocalGroup { pgid }.alive(),
            "{name} is running before the stop"
        );
        groups.push(pgid);
    }
    let stopped = rig.root.stop(true).await.unwrap();
    assert!(
        stopped >= 3,
        "root, nester and the two sleepers had running turns ({stopped})"
    );
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted, "{outcome:?}");
    for pgid in groups {
        // Termination is asynchronous (TERM, grace, KILL); wait for it, however long it takes.
        while (LocalGroup { pgid }).alive() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Approvals and output schemas

#[actix_rt::test]
async fn a_childs_approval_request_carries_its_agent_path() {
    let registry = Registry::with_tools([fixed("deploy", "core", "Deploy the site", "deployed")]);
    let provider = scripted(vec![
        delegate(json!([{"goal": "ship it"}])).when_input_contains("APPROVE-GO"),
        ScriptTurn::tool_call("deploy", json!({})).when_input_contains("ship it"),
        ScriptTurn::text("SHIPPED").when_input_contains("deployed"),
        ScriptTurn::text("APPROVE-DONE").when_input_contains("SHIPPED"),
    ]);
    let rig = rig(
        &registry,
        provider,
        session_config(DelegationConfig::default()),
        AskFor("deploy"),
    )
    .await;
    let mut approvals = rig.supervisor.send(SubscribeApprovals).await.unwrap();
    let root = rig.root.clone();
    let turn = tokio::spawn(async move { root.send("APPROVE-GO").await });
    let request = approvals.recv().await.unwrap();
    assert_eq!(request.tool, "deploy");
    assert_eq!(request.agent_path.len(), 2);
    assert_eq!(request.agent_path[0], rig.root.id());
    assert_eq!(request.agent_path[1], request.session_id);
    assert!(
        rig.supervisor
            .send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap()
    );
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.text, "APPROVE-DONE", "{outcome:?}");
    assert_eq!(call_json(&outcome, 0)["results"][0]["summary"], "SHIPPED");
}

#[actix_rt::test]
async fn output_schema_gets_one_correction_turn() {
    let registry = Registry::new();
    let schema = json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]});
    let provider = scripted(vec![
        delegate(json!([
            {"goal": "count-fixable", "output_schema": schema},
            {"goal": "count-hopeless", "output_schema": schema}
        ]))
        .when_input_contains("SCHEMA-GO"),
        ScriptTurn::text("{\"count\": \"three\"}").when_input_contains("count-fixable"),
        ScriptTurn::text("```json\n{\"count\": 3}\n```").when_input_contains("/count"),
        ScriptTurn::text("about three").when_input_contains("count-hopeless"),
        // Before the next turn: the parent's results also say "not JSON".
        ScriptTurn::text("SCHEMA-DONE").when_input_contains("schema_valid"),
        ScriptTurn::text("still about three").when_input_contains("not JSON"),
    ]);
    let rig = rig(
        &registry,
        provider,
        session_config(DelegationConfig::default()),
        AllowAll,
    )
    .await;
    let outcome = rig.root.send("SCHEMA-GO").await.unwrap();
    assert_eq!(outcome.text, "SCHEMA-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let fixed = &result["results"][0];
    assert_eq!(fixed["schema_valid"], true, "{fixed}");
    assert_eq!(fixed["output"], json!({"count": 3}));
    assert_eq!(fixed["api_calls"], 2);
    let hopeless = &result["results"][1];
    assert_eq!(hopeless["status"], "completed");
    assert_eq!(hopeless["schema_valid"], false, "{hopeless}");
    assert_eq!(hopeless["summary"], "still about three");
    assert!(
        hopeless["schema_errors"][0]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
}

// ---------------------------------------------------------------------------------------------
// Over real HTTP

#[cfg(feature = "mock-server")]
#[actix_rt::test]
async fn delegation_works_through_the_openai_compatible_provider() {
    use troupe_actors::model::mock_server::MockServer;
    use troupe_actors::model::{OpenAiConfig, OpenAiProvider};

    let registry = Registry::with_tools([fixed("note", "core", "Take a note", "noted")]);
    let script = Script::new()
        .turn(
            delegate(json!([{"goal": "http-a"}, {"goal": "http-b"}, {"goal": "http-c"}]))
                .when_input_contains("HTTP-GO"),
        )
        .turn(ScriptTurn::tool_call("note", json!({})).when_input_contains("http-b"))
        .turn(ScriptTurn::text("a-done").when_input_contains("http-a"))
        .turn(ScriptTurn::text("b-done").when_input_contains("noted"))
        .turn(ScriptTurn::text("c-done").when_input_contains("http-c"))
        .turn(ScriptTurn::text("HTTP-DONE").when_input_contains("b-done"));
    let server = MockServer::start(script).await.unwrap();
    let provider =
        OpenAiProvider::new(OpenAiConfig::new(server.url(), "mock-model").with_api_key("sk-test"))
            .unwrap();
    let rig = rig(
        &registry,
        Arc::new(provider),
        session_config(DelegationConfig::default()),
        AllowAll,
    )
    .await;
    let outcome = rig.root.send("HTTP-GO").await.unwrap();
    assert_eq!(outcome.text, "HTTP-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let summaries: Vec<&str> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["summary"].as_str().unwrap())
        .collect();
    assert_eq!(summaries, ["a-done", "b-done", "c-done"]);
    assert_eq!(result["results"][1]["tool_calls"], 1);
    // Root: 2 requests; children: 1 + 2 + 1.
    assert_eq!(server.requests().len(), 6);
}

/// The process group of `pid`, from the fifth field of `/proc/<pid>/stat`.
fn process_group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(2).unwrap().parse().unwrap()
}
