//! Hooks and the bridge: a bridged call is searched, unwrapped, approved and hooked as the underlying tool, and keeps its first resolution.

use super::*;

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
