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

#[actix_rt::test]
async fn core_loop_runs_a_tool_and_answers() {
    let registry = Registry::with_tools([tool("echo", read_only(), |args, _ctx| {
        Box::pin(async move {
            ToolResult::text(format!("echo: {}", args["text"].as_str().unwrap_or("")))
        })
    })]);
    let script = Script::new()
        .turn(ScriptTurn::tool_call("echo", json!({"text": "hi"})))
        .turn(ScriptTurn::text("all done"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let mut events = session.events();

    let outcome = session.send("say hi").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.text, "all done");
    assert_eq!(outcome.calls.len(), 1);
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);

    let conversation = session.conversation().await.unwrap();
    let tool_message = conversation.iter().find_map(|m| match m {
        ChatMessage::Tool { content, .. } => Some(content.clone()),
        _ => None,
    });
    assert_eq!(tool_message.as_deref(), Some("echo: hi"));

    let kinds: Vec<String> = drain(&mut events)
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "turn_started",
            "model_request",
            "model_usage",
            "tool_call_started",
            "tool_call_finished",
            "model_request",
            "model_usage",
            "final"
        ]
    );
}

#[actix_rt::test]
async fn bad_arguments_and_unknown_tools_get_their_own_error_results() {
    let registry = Registry::with_tools([tool("echo", read_only(), |_args, _ctx| {
        Box::pin(async { ToolResult::text("ran") })
    })]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("echo", json!("[1, 2]"))
                .with_tool_call("echo", json!("{not json"))
                .with_tool_call("nope", json!({}))
                .with_tool_call("echo", json!({})),
        )
        .turn(ScriptTurn::text("ok"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let outcome = session.send("go").await.unwrap();
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            CallStatus::Error,
            CallStatus::Error,
            CallStatus::Error,
            CallStatus::Ok
        ]
    );
    assert!(
        outcome.calls[0]
            .result
            .to_model_text()
            .contains("JSON object")
    );
    assert!(
        outcome.calls[2]
            .result
            .to_model_text()
            .contains("no tool called 'nope'")
    );
}

/// Records when each call started and finished.
#[derive(Default)]
struct Timeline(Mutex<Vec<(Instant, Instant)>>);

#[actix_rt::test]
async fn eight_read_only_calls_overlap() {
    let timeline = Arc::new(Timeline::default());
    let t = Arc::clone(&timeline);
    let registry = Registry::with_tools([tool("slow_read", read_only(), move |_args, _ctx| {
        let t = Arc::clone(&t);
        Box::pin(async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(200)).await;
            t.0.lock().unwrap().push((start, Instant::now()));
            ToolResult::text("read")
        })
    })]);
    let mut turn = ScriptTurn::default();
    for i in 0..8 {
        turn = turn.with_tool_call("slow_read", json!({ "n": i }));
    }
    let script = Script::new()
        .turn(turn)
        .turn(ScriptTurn::text("read them all"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let outcome = session.send("read").await.unwrap();
    assert_eq!(outcome.calls.len(), 8);
    assert!(outcome.calls.iter().all(|c| c.status == CallStatus::Ok));
    let spans = timeline.0.lock().unwrap().clone();
    assert_eq!(spans.len(), 8);
    let last_start = spans.iter().map(|s| s.0).max().unwrap();
    let first_finish = spans.iter().map(|s| s.1).min().unwrap();
    assert!(
        last_start < first_finish,
        "every call started before any finished"
    );
    // Results come back in the model's order.
    let indices: Vec<usize> = outcome.calls.iter().map(|c| c.index).collect();
    assert_eq!(indices, (0..8).collect::<Vec<_>>());
}

#[actix_rt::test]
async fn every_round_of_parallel_calls_is_planned_and_run() {
    let registry = Registry::with_tools([tool("quick_read", read_only(), |_args, _ctx| {
        Box::pin(async { ToolResult::text("read") })
    })]);
    let mut script = Script::new();
    for round in 0..3 {
        let mut turn = ScriptTurn::default();
        for i in 0..4 {
            turn = turn.with_tool_call("quick_read", json!({ "round": round, "n": i }));
        }
        script = script.turn(turn);
    }
    let script = script.turn(ScriptTurn::text("done"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let outcome = session.send("read").await.unwrap();
    assert_eq!(outcome.text, "done");
    assert_eq!(outcome.calls.len(), 12);
    assert!(outcome.calls.iter().all(|c| c.status == CallStatus::Ok));
}

#[actix_rt::test]
async fn two_writers_to_one_file_run_in_order() {
    let timeline = Arc::new(Mutex::new(Vec::<(String, Instant, Instant)>::new()));
    let t = Arc::clone(&timeline);
    let hints = ToolHints {
        path_args: vec!["path".into()],
        ..ToolHints::default()
    };
    let registry = Registry::with_tools([tool("write_file", hints, move |args, _ctx| {
        let t = Arc::clone(&t);
        Box::pin(async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let content = args["content"].as_str().unwrap_or("").to_string();
            t.lock().unwrap().push((content, start, Instant::now()));
            ToolResult::text("written")
        })
    })]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call(
                "write_file",
                json!({"path": "notes.txt", "content": "first"}),
            )
            .with_tool_call(
                "write_file",
                json!({"path": "./notes.txt", "content": "second"}),
            ),
        )
        .turn(ScriptTurn::text("written twice"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec![]));
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let outcome = session.send("write").await.unwrap();
    assert!(outcome.calls.iter().all(|c| c.status == CallStatus::Ok));
    let runs = timeline.lock().unwrap().clone();
    assert_eq!(runs[0].0, "first");
    assert_eq!(runs[1].0, "second");
    assert!(
        runs[0].2 <= runs[1].1,
        "the second write started after the first finished"
    );
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

#[actix_rt::test]
async fn approval_granted_runs_the_call_marked_approved() {
    let ran = Arc::new(AtomicUsize::new(0));
    let registry = deploy_registry(Arc::clone(&ran));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["deploy"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let session = open(&registry, deploy_script(), &sup, None, HookRegistry::new()).await;
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            let request = pending.recv().await.unwrap();
            assert_eq!(request.tool, "deploy");
            assert_eq!(request.arguments["env"], "prod");
            sup.send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap()
        })
    };
    let outcome = session.send("deploy it").await.unwrap();
    assert!(answerer.await.unwrap(), "the answer found its request");
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);
    assert_eq!(
        outcome.calls[0].result.to_model_text(),
        "deployed (approved flag: true)"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[actix_rt::test]
async fn approval_denied_passes_the_reason_to_the_model_and_never_runs() {
    let ran = Arc::new(AtomicUsize::new(0));
    let registry = deploy_registry(Arc::clone(&ran));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["deploy"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let session = open(&registry, deploy_script(), &sup, None, HookRegistry::new()).await;
    let mut events = session.events();
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            let request = pending.recv().await.unwrap();
            sup.send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Deny {
                    reason: Some("not on a Friday".into()),
                },
            })
            .await
            .unwrap()
        })
    };
    let outcome = session.send("deploy it").await.unwrap();
    assert!(answerer.await.unwrap());
    assert_eq!(outcome.calls[0].status, CallStatus::Denied);
    assert!(
        outcome.calls[0]
            .result
            .to_model_text()
            .contains("not on a Friday")
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let events = drain(&mut events);
    assert!(
        events.iter().any(
            |e| matches!(&e.kind, EventKind::ApprovalRequested { tool, .. } if tool == "deploy")
        )
    );
    assert!(events.iter().any(
        |e| matches!(&e.kind, EventKind::ApprovalAnswered { outcome, .. } if outcome == "deny")
    ));
}

#[actix_rt::test]
async fn approval_times_out_and_fails_closed() {
    tokio::time::pause();
    let ran = Arc::new(AtomicUsize::new(0));
    let registry = deploy_registry(Arc::clone(&ran));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["deploy"]));
    // Subscribed, so someone could answer, but nobody does.
    let _pending = sup.send(SubscribeApprovals).await.unwrap();
    let session = open(&registry, deploy_script(), &sup, None, HookRegistry::new()).await;
    let outcome = session.send("deploy it").await.unwrap();
    assert_eq!(outcome.calls[0].status, CallStatus::Timeout);
    assert!(outcome.calls[0].result.to_model_text().contains("300 s"));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    // A late answer finds nothing pending.
    let late = sup
        .send(AnswerApproval {
            request_id: "anything".into(),
            choice: ApprovalChoice::Once,
        })
        .await
        .unwrap();
    assert!(!late);
}

#[actix_rt::test]
async fn unattended_requests_are_denied_unless_configured() {
    let ran = Arc::new(AtomicUsize::new(0));
    let registry = deploy_registry(Arc::clone(&ran));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["deploy"]));
    let session = open(&registry, deploy_script(), &sup, None, HookRegistry::new()).await;
    let outcome = session.send("deploy it").await.unwrap();
    assert_eq!(outcome.calls[0].status, CallStatus::Denied);
    assert!(
        outcome.calls[0]
            .result
            .to_model_text()
            .contains("approvals.unattended")
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    let config = ApprovalConfig {
        unattended: troupe_actors::supervisor::UnattendedPolicy::Approve,
        ..ApprovalConfig::default()
    };
    let sup = supervisor(config, AskFor(vec!["deploy"]));
    let session = open(&registry, deploy_script(), &sup, None, HookRegistry::new()).await;
    let outcome = session.send("deploy it").await.unwrap();
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[actix_rt::test]
async fn the_hard_deny_floor_holds_with_approvals_off() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let registry = Registry::with_tools([tool("terminal", ToolHints::default(), move |_a, _c| {
        let r = Arc::clone(&r);
        Box::pin(async move {
            r.fetch_add(1, Ordering::SeqCst);
            ToolResult::text("ran")
        })
    })]);
    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "terminal",
            json!({"command": "rm -rf /"}),
        ))
        .turn(ScriptTurn::text("ok"));
    let config = ApprovalConfig {
        mode: troupe_actors::supervisor::ApprovalMode::Off,
        ..ApprovalConfig::default()
    };
    let sup = supervisor(config, DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let outcome = session.send("wipe").await.unwrap();
    assert_eq!(outcome.calls[0].status, CallStatus::Denied);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// Counts running calls; the guard lowers the count however the call ends (return or abort).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn hanging_tools(
    running: &Arc<AtomicUsize>,
    started: &Arc<tokio::sync::Semaphore>,
) -> Vec<ToolDef> {
    let (r1, s1) = (Arc::clone(running), Arc::clone(started));
    let (r2, s2) = (Arc::clone(running), Arc::clone(started));
    vec![
        // Returns as soon as its token fires.
        tool("wait_for_cancel", read_only(), move |_a, ctx| {
            let (running, started) = (Arc::clone(&r1), Arc::clone(&s1));
            Box::pin(async move {
                running.fetch_add(1, Ordering::SeqCst);
                let _guard = Running(running);
                started.add_permits(1);
                ctx.cancel.cancelled().await;
                ToolResult::text("noticed the stop")
            })
        }),
        // Ignores its token; only the runner's abort after the grace ends it.
        tool("ignore_cancel", read_only(), move |_a, _ctx| {
            let (running, started) = (Arc::clone(&r2), Arc::clone(&s2));
            Box::pin(async move {
                running.fetch_add(1, Ordering::SeqCst);
                let _guard = Running(running);
                started.add_permits(1);
                std::future::pending::<()>().await;
                ToolResult::text("never")
            })
        }),
    ]
}

#[actix_rt::test]
async fn a_hard_stop_during_a_parallel_batch_leaves_nothing_running() {
    let running = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let registry = Registry::with_tools(hanging_tools(&running, &started));
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("wait_for_cancel", json!({}))
                .with_tool_call("ignore_cancel", json!({}))
                .with_tool_call("wait_for_cancel", json!({}))
                .with_tool_call("terminal_like_barrier", json!({})),
        )
        .turn(ScriptTurn::text("should not be reached"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec![]));
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("hang").await })
    };
    // Wait until the three parallel calls are running.
    let _all = started.acquire_many(3).await.unwrap();
    assert_eq!(session.stop(true).await.unwrap(), 1);
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert_eq!(outcome.calls.len(), 4, "every call has a result");
    assert!(
        outcome
            .calls
            .iter()
            .all(|c| c.status == CallStatus::Interrupted)
    );
    assert!(
        outcome.calls[3]
            .result
            .to_model_text()
            .contains("not started")
    );
    assert_eq!(running.load(Ordering::SeqCst), 0, "no call is left running");
    // The session takes the next message.
    assert!(session.conversation().await.unwrap().len() >= 5);
}

#[actix_rt::test]
async fn a_child_request_reaches_the_root_supervisor_and_a_hard_stop_reaches_the_child() {
    let running = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let mut tools = hanging_tools(&running, &started);
    tools.push(tool("deploy", ToolHints::default(), |_a, _c| {
        Box::pin(async { ToolResult::text("deployed") })
    }));
    let registry = Registry::with_tools(tools);
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["deploy"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();

    let root = open(&registry, Script::new(), &sup, None, HookRegistry::new()).await;
    let child = open(
        &registry,
        deploy_script(),
        &sup,
        Some(root.id().to_string()),
        HookRegistry::new(),
    )
    .await;
    assert_eq!(
        child.agent_path(),
        [root.id().to_string(), child.id().to_string()]
    );

    let turn = {
        let child = child.clone();
        tokio::spawn(async move { child.send("deploy").await })
    };
    let request = pending.recv().await.unwrap();
    assert_eq!(
        request.agent_path,
        [root.id().to_string(), child.id().to_string()]
    );
    assert_eq!(request.session_id, child.id());
    sup.send(AnswerApproval {
        request_id: request.request_id,
        choice: ApprovalChoice::Once,
    })
    .await
    .unwrap();
    assert_eq!(turn.await.unwrap().unwrap().calls[0].status, CallStatus::Ok);

    // A grandchild hanging in a tool is stopped by a hard stop on the root, not a soft one.
    let grandchild_script = Script::new()
        .turn(ScriptTurn::tool_call("wait_for_cancel", json!({})))
        .turn(ScriptTurn::text("after"));
    let grandchild = open(
        &registry,
        grandchild_script,
        &sup,
        Some(child.id().to_string()),
        HookRegistry::new(),
    )
    .await;
    let turn = {
        let g = grandchild.clone();
        tokio::spawn(async move { g.send("hang").await })
    };
    let _one = started.acquire_many(1).await.unwrap();
    assert_eq!(
        root.stop(false).await.unwrap(),
        0,
        "a soft stop touches only the idle root"
    );
    assert_eq!(running.load(Ordering::SeqCst), 1);
    assert_eq!(root.stop(true).await.unwrap(), 1);
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert_eq!(running.load(Ordering::SeqCst), 0);
}

/// Blocks terminal calls and records every post hook.
#[derive(Default)]
struct Recorder {
    post: Mutex<Vec<(String, String, CallStatus)>>,
}

impl Hook for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn pre_tool_call(&self, call: &ToolCallInfo<'_>) -> PreToolDecision {
        if call.underlying_tool == "blocked_tool" {
            return PreToolDecision::Block {
                reason: "policy says no".into(),
            };
        }
        let mut arguments = call.arguments.clone();
        arguments.insert("text".into(), json!("rewritten"));
        PreToolDecision::Rewrite(arguments)
    }
    fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, _result: &ToolResult) {
        self.post.lock().unwrap().push((
            call.tool.to_string(),
            call.underlying_tool.to_string(),
            status,
        ));
    }
}

#[actix_rt::test]
async fn hooks_block_rewrite_and_see_every_call_once() {
    let registry = Registry::with_tools([
        tool("echo", read_only(), |args, _ctx| {
            Box::pin(
                async move { ToolResult::text(args["text"].as_str().unwrap_or("").to_string()) },
            )
        }),
        tool("blocked_tool", read_only(), |_a, _c| {
            Box::pin(async { ToolResult::text("ran") })
        }),
    ]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("echo", json!({"text": "original"}))
                .with_tool_call("blocked_tool", json!({}))
                .with_tool_call("echo", json!("not an object")),
        )
        .turn(ScriptTurn::text("done"));
    let recorder = Arc::new(Recorder::default());
    let hooks = HookRegistry::new().with(recorder.clone());
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec![]));
    let session = open(&registry, script, &sup, None, hooks).await;
    let outcome = session.send("go").await.unwrap();
    assert_eq!(outcome.calls[0].result.to_model_text(), "rewritten");
    assert_eq!(outcome.calls[1].status, CallStatus::Denied);
    assert!(
        outcome.calls[1]
            .result
            .to_model_text()
            .contains("policy says no")
    );
    let post = recorder.post.lock().unwrap().clone();
    assert_eq!(post.len(), 3, "exactly one post hook per call");
    assert!(post.contains(&(
        "blocked_tool".into(),
        "blocked_tool".into(),
        CallStatus::Denied
    )));
}

#[actix_rt::test]
async fn bridge_calls_are_searched_unwrapped_approved_and_hooked_as_the_underlying_tool() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let destructive = ToolHints {
        destructive: true,
        ..ToolHints::default()
    };
    let registry = Registry::with_tools([
        ToolDef::new(
            "mcp_github_delete_branch",
            "Delete a branch of a GitHub repository.",
            json!({"type": "object", "properties": {"branch": {"type": "string"}}, "required": ["branch"]}),
        )
        .with_toolset("mcp-github")
        .with_hints(destructive)
        .with_fn(move |args: Map<String, Value>, _ctx: CallContext| {
            let r = Arc::clone(&r);
            Box::pin(async move {
                r.fetch_add(1, Ordering::SeqCst);
                ToolResult::text(format!("deleted {}", args["branch"].as_str().unwrap_or("?")))
            }) as BoxFuture<'static, ToolResult>
        }),
        ToolDef::new("mcp_github_list_branches", "List the branches of a GitHub repository.", json!({"type": "object"}))
            .with_toolset("mcp-github"),
    ]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("tool_search", json!({"queries": ["delete branch"]}))
                .with_tool_call(
                    "tool_call",
                    json!({"calls": [{"name": "mcp_github_delete_branch", "arguments": {"branch": "old"}}]}),
                )
                .with_tool_call("tool_call", json!({"calls": [{"name": "mcp_github_delete_branch", "arguments": {}}]})),
        )
        .turn(ScriptTurn::text("cleaned up"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let recorder = Arc::new(Recorder::default());
    let session = open(
        &registry,
        script,
        &sup,
        None,
        HookRegistry::new().with(recorder.clone()),
    )
    .await;
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            let request = pending.recv().await.unwrap();
            let tool = request.tool.clone();
            sup.send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap();
            tool
        })
    };
    let outcome = session.send("delete the old branch").await.unwrap();
    assert_eq!(
        answerer.await.unwrap(),
        "mcp_github_delete_branch",
        "approval judged the underlying tool"
    );
    let search = &outcome.calls[0];
    assert_eq!(search.status, CallStatus::Ok);
    assert!(
        search
            .result
            .to_model_text()
            .contains("mcp_github_delete_branch")
    );
    let call = &outcome.calls[1];
    assert_eq!(
        (call.tool.as_str(), call.underlying_tool.as_str()),
        ("tool_call", "mcp_github_delete_branch")
    );
    assert_eq!(call.status, CallStatus::Ok);
    assert_eq!(call.result.to_model_text(), "deleted old");
    // Missing required argument: refused by the bridge before any approval or run.
    assert_eq!(outcome.calls[2].status, CallStatus::Error);
    assert_eq!(outcome.calls[2].underlying_tool, "mcp_github_delete_branch");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let post = recorder.post.lock().unwrap().clone();
    assert!(post.contains(&(
        "tool_call".into(),
        "mcp_github_delete_branch".into(),
        CallStatus::Ok
    )));
}

/// Whether a process is still alive (a zombie waiting to be reaped counts as gone).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

#[actix_rt::test]
async fn a_hard_stop_kills_the_processes_of_running_calls() {
    let pids = Arc::new(Mutex::new(Vec::<u32>::new()));
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let (p, s) = (Arc::clone(&pids), Arc::clone(&started));
    // Starts a real child process and waits for it, ignoring its token: only the runner's
    // abort (dropping the future, which kills the child) can end it.
    let registry = Registry::with_tools([tool("sleeper", read_only(), move |_a, _ctx| {
        let (pids, started) = (Arc::clone(&p), Arc::clone(&s));
        Box::pin(async move {
            let mut child = match tokio::process::Command::new("sleep")
                .arg("30")
                .kill_on_drop(true)
                .spawn()
            {
                Ok(child) => child,
                Err(error) => return ToolResult::error(format!("could not start sleep: {error}")),
            };
            if let Some(pid) = child.id() {
                pids.lock().unwrap().push(pid);
            }
            started.add_permits(1);
            let _ = child.wait().await;
            ToolResult::text("slept")
        })
    })]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("sleeper", json!({"n": 1}))
                .with_tool_call("sleeper", json!({"n": 2})),
        )
        .turn(ScriptTurn::text("unreachable"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec![]));
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("sleep").await })
    };
    let _both = started.acquire_many(2).await.unwrap();
    let spawned = pids.lock().unwrap().clone();
    assert_eq!(spawned.len(), 2);
    assert!(spawned.iter().all(|&pid| process_alive(pid)));
    session.stop(true).await.unwrap();
    let outcome = turn.await.unwrap().unwrap();
    assert!(
        outcome
            .calls
            .iter()
            .all(|c| c.status == CallStatus::Interrupted)
    );
    // SIGKILL is delivered at once; give the kernel a moment to mark the processes dead.
    for _ in 0..200 {
        if spawned.iter().all(|&pid| !process_alive(pid)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        spawned.iter().all(|&pid| !process_alive(pid)),
        "no child process is left running"
    );
}

#[actix_rt::test]
async fn the_batch_deadline_skips_time_spent_waiting_for_a_person() {
    tokio::time::pause();
    let registry = Registry::with_tools([
        tool("nap", read_only(), |args, _ctx| {
            let secs = args["secs"].as_u64().unwrap_or(0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                ToolResult::text(format!("napped {secs} s"))
            })
        }),
        tool("publish", read_only(), |_a, _c| {
            Box::pin(async { ToolResult::text("published") })
        }),
    ]);
    let script = Script::new()
        .turn(ScriptTurn::tool_call("nap", json!({"secs": 8})).with_tool_call("publish", json!({})))
        .turn(ScriptTurn::text("first done").when_input_contains("published"))
        .turn(ScriptTurn::tool_call("nap", json!({"secs": 20})).when_input_contains("second"))
        .turn(ScriptTurn::text("second done"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["publish"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let config = SessionConfig {
        runner: RunnerLimits {
            batch_deadline: Some(Duration::from_secs(10)),
            ..RunnerLimits::default()
        },
        ..SessionConfig::default()
    };
    let session = SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(script)),
        view: registry.view_all(),
        config,
        hooks: HookRegistry::new(),
        supervisor: sup.clone(),
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap();
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            let request = pending.recv().await.unwrap();
            // The person takes 30 s, three times the batch deadline.
            tokio::time::sleep(Duration::from_secs(30)).await;
            sup.send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap()
        })
    };
    let outcome = session.send("nap and publish").await.unwrap();
    assert!(answerer.await.unwrap());
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [CallStatus::Ok, CallStatus::Ok],
        "waiting on a person did not use up the deadline"
    );

    let outcome = session.send("second").await.unwrap();
    assert_eq!(
        outcome.calls[0].status,
        CallStatus::Timeout,
        "a slow tool still times out"
    );
    assert!(outcome.calls[0].result.to_model_text().contains("10.0 s"));
}

#[actix_rt::test]
async fn identical_requests_share_one_prompt_and_prompts_come_in_call_order() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let registry = Registry::with_tools([tool("publish", read_only(), move |_a, _c| {
        let r = Arc::clone(&r);
        Box::pin(async move {
            r.fetch_add(1, Ordering::SeqCst);
            ToolResult::text("published")
        })
    })]);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("publish", json!({"title": "a"}))
                .with_tool_call("publish", json!({"title": "b"}))
                .with_tool_call("publish", json!({"title": "a"}))
                .with_tool_call("publish", json!({"title": "c"})),
        )
        .turn(ScriptTurn::text("done"));
    let sup = supervisor(ApprovalConfig::default(), AskFor(vec!["publish"]));
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let answerer = {
        let sup = sup.clone();
        tokio::spawn(async move {
            // Collect every prompt first: nothing is answered (or allowlisted) until all
            // calls have asked, so the count of prompts is exact.
            let mut requests = Vec::new();
            for _ in 0..3 {
                requests.push(pending.recv().await.unwrap());
            }
            let mut titles = Vec::new();
            for request in requests {
                let title = request.arguments["title"].as_str().unwrap().to_string();
                let choice = match title.as_str() {
                    "a" => ApprovalChoice::Session,
                    "b" => ApprovalChoice::Deny { reason: None },
                    _ => ApprovalChoice::Once,
                };
                titles.push(title);
                sup.send(AnswerApproval {
                    request_id: request.request_id,
                    choice,
                })
                .await
                .unwrap();
            }
            titles
        })
    };
    let outcome = session.send("publish").await.unwrap();
    assert_eq!(
        answerer.await.unwrap(),
        ["a", "b", "c"],
        "one prompt per distinct call, in call order"
    );
    let statuses: Vec<CallStatus> = outcome.calls.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            CallStatus::Ok,
            CallStatus::Denied,
            CallStatus::Ok,
            CallStatus::Ok
        ]
    );
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

#[actix_rt::test]
async fn a_drain_lets_running_calls_finish_and_starts_nothing_new() {
    let finished = Arc::new(AtomicUsize::new(0));
    let begun = Arc::new(AtomicUsize::new(0));
    let (done, started) = (Arc::clone(&finished), Arc::clone(&begun));
    // Not read-only: the two calls of a turn run one after the other.
    let registry = Registry::with_tools([tool(
        "slow_step",
        ToolHints::default(),
        move |_args, ctx| {
            let done = Arc::clone(&done);
            started.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(400)) => {
                        done.fetch_add(1, Ordering::SeqCst);
                        ToolResult::text("read it")
                    }
                    () = ctx.cancel.cancelled() => ToolResult::error("cancelled"),
                }
            })
        },
    )]);
    // Without the drain the model would be asked again and call the tool a second time.
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("slow_step", json!({"n": 1}))
                .with_tool_call("slow_step", json!({"n": 2})),
        )
        .turn(ScriptTurn::tool_call("slow_step", json!({"n": 3})))
        .turn(ScriptTurn::text("never reached"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let mut events = session.events();
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("read slowly").await })
    };
    // The drain comes once the first call's tool is running.
    while begun.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(session.drain().await.unwrap());
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert_eq!(
        outcome.model_requests, 1,
        "a model request was made after the drain"
    );
    assert_eq!(outcome.calls.len(), 2);
    assert_eq!(
        outcome.calls[0].status,
        CallStatus::Ok,
        "the running call was cut short"
    );
    assert_eq!(
        outcome.calls[1].status,
        CallStatus::Interrupted,
        "the second call started after the drain"
    );
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(
        begun.load(Ordering::SeqCst),
        1,
        "the second call's tool ran"
    );
    assert!(
        drain(&mut events).iter().any(|e| matches!(
            &e.kind,
            EventKind::Stop { kind, .. } if kind == "drain"
        )),
        "no drain event"
    );
    // The result stays in the conversation for the next message.
    let conversation = session.conversation().await.unwrap();
    assert!(
        conversation
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { content, .. } if content.contains("read it")))
    );
    assert!(
        !session.drain().await.unwrap(),
        "a drain with no turn running"
    );
}

#[actix_rt::test]
async fn streamed_text_arrives_as_deltas_when_asked_for() {
    let registry = Registry::with_tools([]);
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(
            Script::new().turn(ScriptTurn::text("Hello there, streamed.")),
        )),
        view: registry.view_all(),
        config: SessionConfig {
            stream_text: true,
            ..SessionConfig::default()
        },
        hooks: HookRegistry::new(),
        supervisor: sup.clone(),
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap();
    let mut events = session.events();
    let outcome = session.send("hi").await.unwrap();
    assert_eq!(outcome.text, "Hello there, streamed.");
    let events = drain(&mut events);
    let streamed: String = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "Hello there, streamed.");
    let deltas = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::TextDelta { .. }))
        .unwrap();
    let last = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::Final { .. }))
        .unwrap();
    assert!(deltas < last, "text arrived after the final event");
}

/// A session on `script` with `budget`, priced as `test-model` at $1 in / $2 out per million.
async fn open_with_budget(
    registry: &Arc<Registry>,
    script: Script,
    budget: Budget,
) -> SessionHandle {
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    open_with_budget_on(registry, script, budget, sup).await
}

/// As [`open_with_budget`], under `sup`.
async fn open_with_budget_on(
    registry: &Arc<Registry>,
    script: Script,
    budget: Budget,
    sup: Addr<Supervisor>,
) -> SessionHandle {
    let mut prices = PriceTable::empty();
    prices.set(
        "test-model",
        Price {
            input: 1.0,
            output: 2.0,
            cached_input: 0.5,
        },
    );
    let config = SessionConfig {
        model: Some("test-model".into()),
        budget,
        prices: Arc::new(prices),
        ..SessionConfig::default()
    };
    SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(script)),
        view: registry.view_all(),
        config,
        hooks: HookRegistry::new(),
        supervisor: sup,
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap()
}

fn counting_step(ran: &Arc<AtomicUsize>) -> ToolDef {
    let ran = Arc::clone(ran);
    tool("step", read_only(), move |_args, _ctx| {
        let ran = Arc::clone(&ran);
        Box::pin(async move {
            ran.fetch_add(1, Ordering::SeqCst);
            ToolResult::text("stepped")
        })
    })
}

/// What a person asked by `sup` was asked, in order.
type Asked = Arc<std::sync::Mutex<Vec<PendingApproval>>>;

/// A person who answers every question `sup` asks from now on with `choice`, after `wait`.
async fn answer_every_question(
    sup: &Addr<Supervisor>,
    choice: ApprovalChoice,
    wait: Duration,
) -> (Asked, tokio::task::JoinHandle<()>) {
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let asked = Asked::default();
    let answerer = {
        let (sup, asked) = (sup.clone(), Arc::clone(&asked));
        tokio::spawn(async move {
            while let Some(request) = pending.recv().await {
                asked.lock().unwrap().push(request.clone());
                tokio::time::sleep(wait).await;
                sup.send(AnswerApproval {
                    request_id: request.request_id,
                    choice: choice.clone(),
                })
                .await
                .unwrap();
            }
        })
    };
    (asked, answerer)
}

/// The script of the budget extension tests: three rounds of 600 tokens, then an answer.
fn three_steps() -> Script {
    Script::new()
        .turn(ScriptTurn::tool_call("step", json!({"n": 1})).with_usage(500, 100))
        .turn(ScriptTurn::tool_call("step", json!({"n": 2})).with_usage(500, 100))
        .turn(ScriptTurn::tool_call("step", json!({"n": 3})).with_usage(500, 100))
        .turn(ScriptTurn::text("All three steps are done.").with_usage(500, 100))
}

#[actix_rt::test]
async fn a_person_may_extend_a_spent_budget_or_refuse_to() {
    for (choice, expected) in [
        (ApprovalChoice::Once, TurnStatus::Completed),
        (
            ApprovalChoice::Deny { reason: None },
            TurnStatus::BudgetExceeded,
        ),
    ] {
        let ran = Arc::new(AtomicUsize::new(0));
        let registry = Registry::with_tools([counting_step(&ran)]);
        let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
        let (asked, answerer) = answer_every_question(&sup, choice, Duration::ZERO).await;
        let budget = Budget {
            max_tokens: Some(1_000),
            ..Budget::default()
        };
        let session = open_with_budget_on(&registry, three_steps(), budget, sup.clone()).await;
        let outcome = session.send("do the steps").await.unwrap();
        answerer.abort();
        assert_eq!(outcome.status, expected, "{outcome:?}");
        let asked = asked.lock().unwrap().clone();
        // Asked once: at 1,200 tokens of 1,000, for 1,000 more (the budget as first set).
        assert_eq!(asked.len(), 1, "{asked:?}");
        let first = &asked[0];
        assert_eq!(first.kind, ApprovalKind::BudgetExtension);
        assert_eq!(first.tool, "budget");
        assert_eq!(first.arguments["limit"], "max_tokens");
        assert_eq!(first.arguments["extend_to"], 2_000.0);
        assert!(
            first.reason.contains("token budget is spent (1200 of 1000")
                && first.reason.contains("2000 tokens"),
            "{}",
            first.reason
        );
        if expected == TurnStatus::Completed {
            assert_eq!(ran.load(Ordering::SeqCst), 3);
            assert_eq!(outcome.text, "All three steps are done.");
        } else {
            assert_eq!(ran.load(Ordering::SeqCst), 1, "the refused round never ran");
            assert!(
                outcome.text.contains("token budget is spent"),
                "{}",
                outcome.text
            );
        }
    }
}

/// The time budget runs out while the model is still answering: with somebody to ask, the
/// request goes on while they decide; more time lets its answer through (also one that came
/// back before they did), a refusal calls the request off. Nobody to ask: it is called off.
#[actix_rt::test]
async fn a_time_budget_spent_while_the_model_answers_may_be_extended() {
    let cases = [
        (Some((ApprovalChoice::Once, 0)), TurnStatus::Completed),
        (Some((ApprovalChoice::Once, 400)), TurnStatus::Completed),
        (
            Some((ApprovalChoice::Deny { reason: None }, 0)),
            TurnStatus::BudgetExceeded,
        ),
        (None, TurnStatus::BudgetExceeded),
    ];
    for (answer, expected) in cases {
        let registry = Registry::with_tools(Vec::new());
        let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
        // Nobody answering: a model that would keep the test waiting for a minute.
        let delay = if answer.is_some() { 300 } else { 60_000 };
        let script = Script::new()
            .turn(ScriptTurn::text("Here is the answer.").with_delay(Duration::from_millis(delay)));
        let budget = Budget {
            max_wall_seconds: Some(0.2),
            ..Budget::default()
        };
        let (asked, answerer) = match answer.clone() {
            Some((choice, wait_ms)) => {
                let (asked, answerer) =
                    answer_every_question(&sup, choice, Duration::from_millis(wait_ms)).await;
                (asked, Some(answerer))
            }
            None => (Arc::default(), None),
        };
        let session = open_with_budget_on(&registry, script, budget, sup).await;
        let outcome = session.send("answer slowly").await.unwrap();
        if let Some(answerer) = answerer {
            answerer.abort();
        }
        assert_eq!(outcome.status, expected, "{answer:?}: {outcome:?}");
        assert_eq!(outcome.model_requests, 1, "{outcome:?}");
        let asked = asked.lock().unwrap().clone();
        if answer.is_some() {
            assert!(!asked.is_empty(), "nobody was asked: {outcome:?}");
            assert_eq!(asked[0].kind, ApprovalKind::BudgetExtension);
            assert_eq!(asked[0].arguments["limit"], "max_wall_seconds");
        }
        if expected == TurnStatus::Completed {
            assert_eq!(outcome.text, "Here is the answer.");
        } else {
            assert!(
                outcome.text.contains("time budget is spent"),
                "{answer:?}: {}",
                outcome.text
            );
        }
    }
}

/// Nobody answers the question about more time and the person drains the turn instead: it
/// ends at once (not when the question times out), the question is taken back, and the
/// request still out is called off.
#[actix_rt::test]
async fn a_drain_while_a_budget_question_is_open_ends_the_turn_and_takes_it_back() {
    let registry = Registry::with_tools(Vec::new());
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let mut pending = sup.send(SubscribeApprovals).await.unwrap();
    let script =
        Script::new().turn(ScriptTurn::text("far too late").with_delay(Duration::from_secs(60)));
    let budget = Budget {
        max_wall_seconds: Some(0.2),
        ..Budget::default()
    };
    let session = open_with_budget_on(&registry, script, budget, sup.clone()).await;
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("answer slowly").await })
    };
    let asked = pending.recv().await.unwrap();
    assert_eq!(asked.kind, ApprovalKind::BudgetExtension);
    assert!(session.drain().await.unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(20), turn)
        .await
        .expect("the drained turn waited for an answer nobody gave")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, TurnStatus::BudgetExceeded, "{outcome:?}");
    assert!(
        outcome.text.contains("time budget is spent"),
        "{}",
        outcome.text
    );
    assert!(sup.send(ListPending).await.unwrap().is_empty());
}

#[actix_rt::test]
async fn a_spent_budget_is_not_extended_when_nobody_can_answer() {
    let ran = Arc::new(AtomicUsize::new(0));
    let registry = Registry::with_tools([counting_step(&ran)]);
    let budget = Budget {
        max_tokens: Some(1_000),
        ..Budget::default()
    };
    // No answerer is subscribed: the budget holds without asking anyone.
    let session = open_with_budget(&registry, three_steps(), budget).await;
    let outcome = session.send("do the steps").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::BudgetExceeded, "{outcome:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[actix_rt::test]
async fn a_spent_token_budget_ends_the_turn_with_what_it_had() {
    let ran = Arc::new(AtomicUsize::new(0));
    let registry = Registry::with_tools([counting_step(&ran)]);
    // 600 tokens a request against a budget of 1,000: the first round runs, the second answer
    // asks for more work that there is no budget for.
    let script = Script::new()
        .turn(ScriptTurn::tool_call("step", json!({"n": 1})).with_usage(500, 100))
        .turn(
            ScriptTurn::tool_call("step", json!({"n": 2}))
                .with_text("Half way: step one is done.")
                .with_usage(500, 100),
        )
        .turn(ScriptTurn::text("never reached"));
    let budget = Budget {
        max_tokens: Some(1_000),
        ..Budget::default()
    };
    let session = open_with_budget(&registry, script, budget).await;
    let mut events = session.events();

    let outcome = session.send("do the steps").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::BudgetExceeded, "{outcome:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the second round never ran");
    assert_eq!(outcome.calls.len(), 1);
    assert!(
        outcome.text.starts_with("Half way: step one is done."),
        "{}",
        outcome.text
    );
    assert!(
        outcome.text.contains("token budget is spent (1200 of 1000"),
        "{}",
        outcome.text
    );
    assert_eq!(outcome.spend.requests, 2);
    assert_eq!(outcome.spend.tokens(), 1_200);
    // 1,000 prompt tokens at $1 and 200 generated at $2 per million.
    assert!(
        (outcome.spend.cost_usd - 0.0014).abs() < 1e-12,
        "{:?}",
        outcome.spend
    );
    assert_eq!(session.spent().tokens(), 1_200);

    let seen = drain(&mut events);
    let costs: Vec<Option<f64>> = seen
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ModelUsage { cost_usd, .. } => Some(*cost_usd),
            _ => None,
        })
        .collect();
    assert_eq!(costs.len(), 2);
    assert!(
        costs
            .iter()
            .all(|c| c.is_some_and(|c| (c - 0.0007).abs() < 1e-12))
    );
    let last = serde_json::to_value(seen.last().unwrap()).unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["status"], "budget_exceeded");
    assert_eq!(last["usage"]["requests"], 2);

    // The conversation stays one a server accepts: no call is left without a result.
    let conversation = session.conversation().await.unwrap();
    assert!(matches!(
        conversation.last(),
        Some(ChatMessage::Assistant { tool_calls, .. }) if tool_calls.is_empty()
    ));

    // With the budget spent, the next message does nothing.
    let next = session.send("go on").await.unwrap();
    assert_eq!(next.status, TurnStatus::BudgetExceeded);
    assert_eq!(next.model_requests, 0);
    assert!(next.text.starts_with("Nothing was done"), "{}", next.text);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[actix_rt::test]
async fn a_spent_time_budget_lets_the_running_call_finish_and_starts_nothing_more() {
    let finished = Arc::new(AtomicUsize::new(0));
    let done = Arc::clone(&finished);
    let registry = Registry::with_tools([tool("slow", read_only(), move |_args, _ctx| {
        let done = Arc::clone(&done);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            done.fetch_add(1, Ordering::SeqCst);
            ToolResult::text("slow work done")
        })
    })]);
    let script = Script::new()
        .turn(ScriptTurn::tool_call("slow", json!({})))
        .turn(ScriptTurn::text("never reached"));
    let budget = Budget {
        max_wall_seconds: Some(0.2),
        ..Budget::default()
    };
    let session = open_with_budget(&registry, script, budget).await;
    let outcome = session.send("work slowly").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::BudgetExceeded, "{outcome:?}");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the running call finished"
    );
    assert_eq!(outcome.calls.len(), 1);
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);
    assert_eq!(
        outcome.model_requests, 1,
        "no request after the budget ran out"
    );
    assert!(
        outcome.text.contains("time budget is spent"),
        "{}",
        outcome.text
    );
}

/// A `tool_call` is resolved once, when the model's answer comes in. Here the batch waits for a
/// still-starting server (it holds a `tool_search`), and meanwhile the deferred tool it names
/// becomes a core tool, which the bridge refuses to call: resolving the call again after the
/// wait would refuse it, so the call running shows the first resolution was carried along.
#[actix_rt::test]
async fn a_bridged_call_keeps_the_resolution_it_got_when_the_model_answered() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counting = |toolset: &str| {
        let ran = Arc::clone(&ran);
        ToolDef::new(
            "mcp_github_list_issues",
            "List the issues of a GitHub repository.",
            json!({"type": "object", "properties": {"count": {"type": "integer"}}}),
        )
        .with_toolset(toolset)
        .with_hints(read_only())
        .with_fn(move |args: Map<String, Value>, _ctx: CallContext| {
            let ran = Arc::clone(&ran);
            Box::pin(async move {
                ran.fetch_add(1, Ordering::SeqCst);
                ToolResult::text(format!("{} issues", args["count"]))
            }) as BoxFuture<'static, ToolResult>
        })
    };
    let registry = Registry::with_tools([counting("mcp-github")]);
    registry.set_starting("mcp-slow", true);
    let script = Script::new()
        .turn(
            ScriptTurn::tool_call("tool_search", json!({"queries": ["issues"]})).with_tool_call(
                "tool_call",
                json!({"calls": [{"name": "mcp_github_list_issues", "arguments": {"count": "2"}}]}),
            ),
        )
        .turn(ScriptTurn::text("two issues"));
    let sup = supervisor(ApprovalConfig::default(), DefaultRules::default());
    let session = open(&registry, script, &sup, None, HookRegistry::new()).await;
    let mut events = session.events();
    let turn = tokio::spawn({
        let session = session.clone();
        async move { session.send("list the issues").await.unwrap() }
    });
    // The request went out on the view as it was; the calls of its answer are routed on it.
    loop {
        let event = events.recv().await.unwrap();
        if matches!(event.kind, EventKind::ModelUsage { .. }) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the batch waits for mcp-slow"
    );
    registry.unregister("mcp_github_list_issues");
    registry.register(counting("core"));
    registry.set_starting("mcp-slow", false);
    let outcome = tokio::time::timeout(Duration::from_secs(20), turn)
        .await
        .unwrap()
        .unwrap();
    let call = &outcome.calls[1];
    assert_eq!(call.underlying_tool, "mcp_github_list_issues");
    assert_eq!(
        call.status,
        CallStatus::Ok,
        "{}",
        call.result.to_model_text()
    );
    // The arguments the bridge coerced the first time ("2" to 2) are the ones that ran.
    assert_eq!(call.result.to_model_text(), "2 issues");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}
