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
