//! A connector batch through the programmatic API: each entry asks its own approval before it
//! is sent, the entries go to the gateway one by one in input order, and a stop while one runs
//! leaves it and the rest `interrupted`, the finished ones keeping their results.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe::actors::call::CallStatus;
use troupe::actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe::actors::session::TurnStatus;
use troupe::actors::supervisor::{ApprovalChoice, ApprovalConfig};
use troupe::tools::Registry;
use troupe::tools::connectors::manage::{Connections, manage_connections_def};
use troupe::tools::connectors::{Gateway, GatewaySettings};
use troupe::{SessionOptions, Troupe, TroupeConfig};

use crate::support::gateway::{MockGateway, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_between_connector_entries_interrupts_the_rest() {
    let gateway = MockGateway::start(|path, body| match (path, body["tool"].as_str()) {
        ("execute", Some("LINEAR_CREATE_ISSUE")) => Reply::Hang,
        ("execute", _) => Reply::Json(json!({"ok": true, "data": "done"})),
        _ => Reply::Status(404, "{}".into()),
    });
    let client = Arc::new(Gateway::new(GatewaySettings {
        url: gateway.url.clone(),
        token: Some("api-test-token".into()),
        timeout: Duration::from_secs(60),
    }));
    let registry = Registry::with_tools([manage_connections_def(Connections {
        gateway: Some(Arc::clone(&client)),
        local: None,
    })]);
    registry.set_connectors(Some(client));
    let approvals = ApprovalConfig {
        require_approval: vec!["connectors__notion__QUERY".into()],
        ..ApprovalConfig::default()
    };
    let troupe = Troupe::start(TroupeConfig::new(registry).with_approvals(approvals)).unwrap();
    let mut requests = troupe.approvals().await.unwrap();
    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "tool_call",
            json!({"calls": [
                {"name": "connectors__gmail__SEND_EMAIL", "arguments": {"to": "a"}},
                {"name": "connectors__notion__QUERY", "arguments": {}},
                {"name": "connectors__linear__CREATE_ISSUE", "arguments": {"title": "t"}},
                {"name": "connectors__gmail__ARCHIVE", "arguments": {}},
            ]}),
        ))
        .turn(ScriptTurn::text("never asked"));
    let session = troupe
        .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(script))))
        .await
        .unwrap();
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("go").await })
    };
    // The second entry's approval is asked once the first has run, and refused.
    let request = requests.next().await.unwrap();
    assert_eq!(request.tool, "connectors__notion__QUERY");
    assert_eq!(gateway.seen_at("execute").len(), 1);
    troupe
        .answer(&request.request_id, ApprovalChoice::Deny { reason: None })
        .await
        .unwrap();
    // The third hangs at the gateway; stop the turn there.
    while gateway.seen_at("execute").len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    troupe.stop(session.id(), false).await.unwrap();
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    let calls: Vec<(&str, CallStatus)> = outcome
        .calls
        .iter()
        .map(|c| (c.underlying_tool.as_str(), c.status))
        .collect();
    assert_eq!(
        calls,
        [
            ("connectors__gmail__SEND_EMAIL", CallStatus::Ok),
            ("connectors__notion__QUERY", CallStatus::Denied),
            ("connectors__linear__CREATE_ISSUE", CallStatus::Interrupted),
            ("connectors__gmail__ARCHIVE", CallStatus::Interrupted),
        ]
    );
    let sent: Vec<String> = gateway
        .seen_at("execute")
        .into_iter()
        .map(|s| s.body["tool"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["GMAIL_SEND_EMAIL", "LINEAR_CREATE_ISSUE"]);
    troupe.close().await;
}

/// Figures for docs/benchmarks.md (run on purpose: `cargo test --workspace --test integration
/// connectors_api::figures -- --ignored --nocapture`): a merged search over the 3,309-tool
/// catalog against a gateway on 127.0.0.1, troupe's time beside the gateway's own round trip,
/// and a 10-entry connector batch through a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures; run by hand for docs/benchmarks.md"]
async fn figures() {
    use std::time::Instant;
    use troupe::tools::bridge::tool_search_with_connectors;
    use troupe::tools::catalog_file::parse_catalog;
    use troupe::tools::{Ranking, ToolSearchConfig};

    let gateway = MockGateway::start(|path, body| match path {
        "search" => {
            let slugs: Vec<String> = (0..10).map(|i| format!("GMAIL_ACTION_{i}")).collect();
            let schemas: serde_json::Map<String, serde_json::Value> = slugs
                .iter()
                .map(|s| (s.clone(), json!({"connector": "gmail", "description": format!("Send or manage email, variant {s}."), "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}})))
                .collect();
            Reply::Json(
                json!({"schemas": schemas, "results": [{"use_case": body["queries"][0], "tools": slugs}]}),
            )
        }
        "execute" => Reply::Json(json!({"ok": true, "data": {"done": body["tool"]}})),
        _ => Reply::Status(404, "{}".into()),
    });
    let client = Arc::new(Gateway::new(GatewaySettings {
        url: gateway.url.clone(),
        token: Some("bench".into()),
        timeout: Duration::from_secs(30),
    }));
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tools/tests/fixtures/tool_search/data/cloudflare_3300.json"),
    )
    .unwrap();
    let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = raw.get("catalog").cloned().unwrap_or(raw);
    let registry = Registry::with_tools(parse_catalog(&entries).unwrap());
    registry.register(manage_connections_def(Connections {
        gateway: Some(Arc::clone(&client)),
        local: None,
    }));
    registry.set_connectors(Some(Arc::clone(&client)));
    let view = registry.view_all();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for ranking in [Ranking::Reference, Ranking::Hybrid] {
        let config = ToolSearchConfig {
            ranking,
            ..ToolSearchConfig::default()
        };
        let args = json!({"queries": ["gmail send email"]});
        let _ = tool_search_with_connectors(&view, &config, &args).await;
        let (mut gateway_ms, mut total_ms) = (Vec::new(), Vec::new());
        for _ in 0..30 {
            let t = Instant::now();
            let _ = client.search(&["gmail send email".to_string()]).await;
            gateway_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let out = tool_search_with_connectors(&view, &config, &args).await;
            total_ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(out.get("connectors").is_none(), "{out}");
        }
        let (g, t) = (median(gateway_ms), median(total_ms));
        println!(
            "merged search, {ranking:?}, 3,309 local + 10 connector tools: gateway round trip {g:.2} ms, whole search {t:.2} ms, troupe's own {:.2} ms",
            t - g
        );
    }
    // A 10-entry batch through a session (planner, hooks, approval checks, one request each).
    let calls: Vec<serde_json::Value> = (0..10)
        .map(
            |i| json!({"name": format!("connectors__gmail__ACTION_{i}"), "arguments": {"to": "a"}}),
        )
        .collect();
    let troupe = Troupe::start(TroupeConfig::new(registry)).unwrap();
    let mut took = Vec::new();
    for _ in 0..10 {
        let script = Script::new()
            .turn(ScriptTurn::tool_call(
                "tool_call",
                json!({ "calls": calls }),
            ))
            .turn(ScriptTurn::text("done"));
        let session = troupe
            .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(script))))
            .await
            .unwrap();
        let t = Instant::now();
        let outcome = session.send("go").await.unwrap();
        took.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(outcome.calls.len(), 10);
        assert!(outcome.calls.iter().all(|c| c.status == CallStatus::Ok));
    }
    let t0 = Instant::now();
    for i in 0..10 {
        let _ = client
            .execute("gmail", &format!("ACTION_{i}"), &serde_json::Map::new())
            .await;
    }
    let direct = t0.elapsed().as_secs_f64() * 1e3;
    println!(
        "10-entry connector batch through a session: {:.2} ms per turn (median of 10); the same 10 requests sent directly: {direct:.2} ms",
        median(took)
    );
    troupe.close().await;
}

/// Board workers: one whose view grants the toolset `connectors` finds and calls a connector
/// tool; one whose view takes it away neither finds it (the gateway is never asked) nor calls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_worker_gets_connectors_only_when_its_view_grants_them() {
    use troupe::kanban_api::Kanban;
    use troupe::settings::kanban::StoreLocation;
    use troupe::tools::ViewSpec;
    use troupe_kanban::dispatcher::DispatcherConfig;
    use troupe_kanban::domain::{BoardSlug, NewTask, TaskFilter, TaskStatus};
    use troupe_kanban::profiles::{Profiles, WorkerProfile};

    let gateway = MockGateway::start(|path, body| match path {
        "search" => Reply::Json(json!({
            "schemas": {"GMAIL_SEND_EMAIL": {"connector": "gmail", "description": "Send an email.", "input_schema": {"type": "object"}}},
            "results": [{"use_case": body["queries"][0], "tools": ["GMAIL_SEND_EMAIL"]}],
        })),
        "execute" => Reply::Json(json!({"ok": true, "data": "sent"})),
        _ => Reply::Status(404, "{}".into()),
    });
    let client = Arc::new(Gateway::new(GatewaySettings {
        url: gateway.url.clone(),
        token: Some("board-token".into()),
        timeout: Duration::from_secs(10),
    }));
    let registry = Registry::with_tools([manage_connections_def(Connections {
        gateway: Some(Arc::clone(&client)),
        local: None,
    })]);
    registry.set_connectors(Some(client));
    let dir = tempfile::tempdir().unwrap();
    let kanban = Kanban::open_at(StoreLocation::Sqlite(dir.path().to_path_buf()))
        .await
        .unwrap();
    let troupe = Troupe::start(TroupeConfig::new(Arc::clone(&registry))).unwrap();
    let board = BoardSlug::default_board();
    let send =
        r#"{"calls": [{"name": "connectors__gmail__SEND_EMAIL", "arguments": {"to": "a"}}]}"#;
    // Each turn answers only if the previous result says what this worker should have seen.
    let granted = format!(
        "turns:\n  - tool_calls:\n      - name: tool_search\n        arguments: {{queries: [gmail send email]}}\n  - match: '\"matches\":[\"connectors__gmail__SEND_EMAIL\"]'\n    tool_calls:\n      - name: tool_call\n        arguments: '{send}'\n  - match: '\"success_count\":1'\n    tool_calls:\n      - name: kanban_complete\n        arguments: {{summary: sent}}\n  - text: Finished.\n"
    );
    let denied = format!(
        "turns:\n  - tool_calls:\n      - name: tool_search\n        arguments: {{queries: [gmail send email]}}\n  - match: '\"matches\":[]'\n    tool_calls:\n      - name: tool_call\n        arguments: '{send}'\n  - match: not available in this session\n    tool_calls:\n      - name: kanban_complete\n        arguments: {{summary: could not send}}\n  - text: Finished.\n"
    );
    let profile = |name: &str, script: &str, spec: ViewSpec| {
        WorkerProfile::new(
            name,
            Arc::new(ScriptedProvider::new(
                Script::from_yaml_str(script).unwrap(),
            )),
            registry.view(spec).unwrap(),
        )
    };
    let profiles = Profiles::new()
        .with_profile(profile("mailer", &granted, ViewSpec::all()))
        .with_profile(profile(
            "coder",
            &denied,
            ViewSpec::all().without_toolsets(["connectors"]),
        ));
    for (title, assignee) in [("send the mail", "mailer"), ("try to send", "coder")] {
        kanban
            .create_task(&board, &NewTask::new(title).with_assignee(assignee))
            .await
            .unwrap();
    }
    let config = DispatcherConfig::default().with_poll_interval(Duration::from_millis(20));
    let dispatcher = kanban
        .start_dispatcher(&troupe, board.clone(), profiles, config)
        .await
        .unwrap();
    dispatcher.dispatch_once(None, false).await.unwrap();
    dispatcher.wait_idle().await.unwrap();
    dispatcher.stop().await;
    let tasks = kanban.list(&board, &TaskFilter::default()).await.unwrap();
    assert_eq!(tasks.len(), 2);
    assert!(
        tasks.iter().all(|t| t.status == TaskStatus::Done),
        "{:?}, gateway saw {:?}",
        tasks
            .iter()
            .map(|t| (&t.title, t.status))
            .collect::<Vec<_>>(),
        gateway
            .seen()
            .iter()
            .map(|s| (s.path.clone(), s.body.clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        gateway.seen_at("search").len(),
        1,
        "only the granted worker searched"
    );
    assert_eq!(
        gateway.seen_at("execute").len(),
        1,
        "only the granted worker called"
    );
    troupe.close().await;
}
