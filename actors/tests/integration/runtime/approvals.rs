//! Approvals: granted, denied, timed out, unattended, and the hard floor.

use super::*;

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

#[actix_rt::test]
async fn the_wait_for_an_approval_is_reported_apart_from_the_calls_run_time() {
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
            // The person takes a while to answer.
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            sup.send(AnswerApproval {
                request_id: request.request_id,
                choice: ApprovalChoice::Once,
            })
            .await
            .unwrap()
        })
    };
    let outcome = session.send("deploy it").await.unwrap();
    assert!(answerer.await.unwrap());
    let call = &outcome.calls[0];
    assert_eq!(call.status, CallStatus::Ok);
    assert!(
        call.approval_wait >= std::time::Duration::from_millis(400),
        "{call:?}"
    );
    // The tool answers at once: its run time holds none of the wait.
    assert!(
        call.duration < std::time::Duration::from_millis(300),
        "{call:?}"
    );
    let finished = drain(&mut events)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::ToolCallFinished {
                duration_ms,
                approval_wait_ms,
                ..
            } => Some((duration_ms, approval_wait_ms)),
            _ => None,
        })
        .unwrap();
    assert!(finished.1 >= 400, "{finished:?}");
    assert!(finished.0 < 300, "{finished:?}");
}
