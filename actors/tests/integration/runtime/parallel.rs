//! Parallel readers overlap; writers to one file run in order.

use super::*;

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
