//! Budgets: spent token and time budgets, and a person extending them.

use super::*;

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
    open_with(registry, script, &sup, config).await
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
