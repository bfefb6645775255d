//! Hard stops and drains: nothing keeps running, no process survives.

use super::*;

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
