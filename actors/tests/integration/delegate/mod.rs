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

mod branches;
mod http;
mod limits;
mod stops;
mod trees;
mod views;

// Fixtures shared by the delegation tests.

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
