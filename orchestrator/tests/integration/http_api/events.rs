//! A session's SSE event log: cursors beyond the log refused with the valid range, and the
//! stream carrying its subagents' events.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

use super::server::{Server, error_code};

/// Reads a session's SSE stream until its own `final`, returning every event's data.
async fn read_until_final(server: &Server, id: &str, after: u64) -> Vec<Value> {
    let response = server
        .request(
            Method::GET,
            &format!("/api/sessions/{id}/events?after={after}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.bytes_stream().eventsource();
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let data: Value = serde_json::from_str(&event.unwrap().data).unwrap();
        let done = data["type"] == "final" && data["session_id"] == id;
        seen.push(data);
        if done {
            break;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_cursors_beyond_the_log_are_refused_with_the_valid_range() {
    let server = Server::start().await;
    let (status, created) = server
        .call(
            Method::POST,
            "/api/sessions",
            Some(json!({"script": {"turns": [{"text": "hi"}]}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, outcome) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "hello", "wait": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    // The turn's events reach the HTTP log through a forwarder: count them once its `final`
    // has arrived, so the log no longer grows under the assertions below.
    let response = server
        .request(Method::GET, &format!("/api/sessions/{id}/events"))
        .send()
        .await
        .unwrap();
    let mut events = response.bytes_stream().eventsource();
    while events.next().await.unwrap().unwrap().event != "final" {}
    drop(events);
    let (_, shown) = server
        .call(Method::GET, &format!("/api/sessions/{id}"), None)
        .await;
    let logged = shown["events"].as_u64().unwrap();
    assert!(logged > 0);

    let huge = u64::MAX.to_string();
    let (status, body) = server
        .call(
            Method::GET,
            &format!("/api/sessions/{id}/events?after={huge}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "bad_cursor");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("0 to {logged}")), "{message}");

    let response = server
        .request(Method::GET, &format!("/api/sessions/{id}/events"))
        .header("Last-Event-ID", &huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "bad_cursor");

    // The last event's own number is a valid cursor: the stream resumes after it (and,
    // the session still open, waits); the one before it replays exactly the last event.
    let response = server
        .request(Method::GET, &format!("/api/sessions/{id}/events"))
        .header("Last-Event-ID", (logged - 1).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.bytes_stream().eventsource();
    let last = events.next().await.unwrap().unwrap();
    assert_eq!(last.id.parse::<u64>().unwrap(), logged);
    let response = server
        .request(
            Method::GET,
            &format!("/api/sessions/{id}/events?after={logged}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stream_carries_its_subagents_events() {
    let server = Server::start_delegating().await;
    let script = json!({"turns": [
        {"match": "PARENT-GO",
         "tool_calls": [{"name": "delegate_task", "arguments": {"tasks": [{"goal": "child job"}]}}]},
        {"match": "child job", "text": "CHILD-REPORT"},
        {"text": "waiting for the child"},
        {"match": "CHILD-REPORT", "text": "ALL-DONE"}
    ]});
    let (status, created) = server
        .call(
            Method::POST,
            "/api/sessions",
            Some(json!({"script": script})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, accepted) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "PARENT-GO"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");

    // Read until the parent's final that carries the child's report (the delivery turn).
    // The timeout only turns a hang into a failure; nothing here depends on timing.
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let batch = read_until_final(&server, &id, after).await;
            after += batch.len() as u64;
            let last = batch.last().unwrap().clone();
            seen.extend(batch);
            if last["text"] == "ALL-DONE" {
                return seen;
            }
        }
    })
    .await
    .expect("the delegation's results reached the parent");
    let kinds: Vec<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for expected in [
        "subagent_spawned",
        "subagent_started",
        "subagent_completed",
        "delegation_delivered",
    ] {
        assert!(
            kinds.contains(&expected),
            "{expected} missing from {kinds:?}"
        );
    }
    let child = seen
        .iter()
        .find(|e| e["type"] == "subagent_started")
        .unwrap()["child_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let child_kinds: Vec<&str> = seen
        .iter()
        .filter(|e| e["session_id"] == child.as_str())
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(child_kinds.contains(&"session_started"), "{child_kinds:?}");
    assert!(child_kinds.contains(&"final"), "{child_kinds:?}");
    assert!(
        seen.iter()
            .all(|e| e["session_id"] == id.as_str() || e["session_id"] == child.as_str()),
        "only the session and its subagent report here"
    );
    server.stop().await;
}
