//! The actor runtime end to end: a session on a scripted model running real tool handlers
//! through the planner, the supervisor, the hooks and the runner. Covers the core loop, overlap
//! of parallel readers, ordering of writers, approvals (granted, denied, timed out, unattended),
//! hard stops during a parallel batch, and a child session's approvals and stops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Actor, Addr};
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use troupe_actors::call::CallStatus;
use troupe_actors::events::EventKind;
use troupe_actors::hooks::{Hook, HookRegistry, PreToolDecision, ToolCallInfo};
use troupe_actors::model::{ChatMessage, Script, ScriptTurn, ScriptedProvider};
use troupe_actors::session::{SessionConfig, SessionHandle, SessionParams, TurnStatus};
use troupe_actors::supervisor::{
    AnswerApproval, ApprovalChoice, ApprovalConfig, ApprovalKind, ApprovalRules, DefaultRules,
    ListPending, PendingApproval, RuleInput, RuleVerdict, SubscribeApprovals, Supervisor,
};
use troupe_actors::tool_runner::RunnerLimits;
use troupe_actors::usage::{Budget, Price, PriceTable};
use troupe_tools::{CallContext, Registry, ToolDef, ToolHints, ToolResult};

use crate::support::drain_events as drain;

mod approvals;
mod budgets;
mod core;
mod hooks;
mod parallel;
mod prompts;
mod stops;

fn tool<F>(name: &str, hints: ToolHints, f: F) -> ToolDef
where
    F: Fn(Map<String, Value>, CallContext) -> BoxFuture<'static, ToolResult>
        + Send
        + Sync
        + 'static,
{
    ToolDef::new(name, format!("test tool {name}"), json!({"type": "object"}))
        .with_toolset("core")
        .with_hints(hints)
        .with_fn(f)
}

fn read_only() -> ToolHints {
    ToolHints {
        read_only: true,
        ..ToolHints::default()
    }
}

/// Asks for approval before every call of the named tools; allows the rest.
struct AskFor(Vec<&'static str>);

impl ApprovalRules for AskFor {
    fn check(&self, input: &RuleInput<'_>) -> RuleVerdict {
        if self.0.contains(&input.tool) {
            RuleVerdict::Ask {
                key: format!("tool:{}", input.tool),
                reason: format!("{} changes things", input.tool),
            }
        } else {
            RuleVerdict::Allow
        }
    }
}

fn supervisor(config: ApprovalConfig, rules: impl ApprovalRules) -> Addr<Supervisor> {
    Supervisor::new(config, Arc::new(rules)).start()
}

async fn open(
    registry: &Arc<Registry>,
    script: Script,
    supervisor: &Addr<Supervisor>,
    parent: Option<String>,
    hooks: HookRegistry,
) -> SessionHandle {
    let config = SessionConfig {
        runner: RunnerLimits {
            stop_grace: Duration::from_millis(200),
            ..RunnerLimits::default()
        },
        ..SessionConfig::default()
    };
    open_as(registry, script, supervisor, parent, hooks, config).await
}

/// A root session on `script` with `config` and no hooks.
async fn open_with(
    registry: &Arc<Registry>,
    script: Script,
    supervisor: &Addr<Supervisor>,
    config: SessionConfig,
) -> SessionHandle {
    open_as(
        registry,
        script,
        supervisor,
        None,
        HookRegistry::new(),
        config,
    )
    .await
}

async fn open_as(
    registry: &Arc<Registry>,
    script: Script,
    supervisor: &Addr<Supervisor>,
    parent: Option<String>,
    hooks: HookRegistry,
    config: SessionConfig,
) -> SessionHandle {
    SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(script)),
        view: registry.view_all(),
        config,
        hooks,
        supervisor: supervisor.clone(),
        parent,
        upstream_events: None,
    })
    .await
    .unwrap()
}

fn deploy_registry(ran: Arc<AtomicUsize>) -> Arc<Registry> {
    Registry::with_tools([tool("deploy", ToolHints::default(), move |_args, ctx| {
        let ran = Arc::clone(&ran);
        Box::pin(async move {
            ran.fetch_add(1, Ordering::SeqCst);
            ToolResult::text(format!("deployed (approved flag: {})", ctx.approved))
        })
    })])
}

fn deploy_script() -> Script {
    Script::new()
        .turn(ScriptTurn::tool_call("deploy", json!({"env": "prod"})))
        .turn(ScriptTurn::text("finished"))
}
