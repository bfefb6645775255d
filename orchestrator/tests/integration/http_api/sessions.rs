//! A session driven over HTTP: its tool call's approval answered over HTTP while its events
//! arrive over SSE, and a message to a session busy elsewhere refused rather than lost.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::server::{Server, error_code};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_driven_over_http_with_its_approval_answered_over_http() {
    let server = Server::start().await;
    let script = json!({"turns": [
        {"tool_calls": [{"name": "publish", "arguments": {}}]},
        {"text": "published it"}
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

    let response = server
        .request(Method::GET, &format!("/api/sessions/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.bytes_stream().eventsource();

    let (status, accepted) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "publish the draft"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");

    // A second message while the turn waits for approval is refused.
    let (status, busy) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "again"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&busy), "session_busy");

    let mut kinds = Vec::new();
    let mut ids = Vec::new();
    let mut final_event = None;
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        ids.push(event.id.parse::<u64>().unwrap());
        kinds.push(event.event.clone());
        let data: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(data["session_id"], id);
        if event.event == "approval_requested" {
            assert_eq!(data["tool"], "publish");
            let request_id = data["request_id"].as_str().unwrap().to_string();
            let (status, pending) = server
                .call(Method::GET, &format!("/api/sessions/{id}/approvals"), None)
                .await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(pending["approvals"][0]["request_id"], request_id.as_str());
            let (status, all) = server.call(Method::GET, "/api/approvals", None).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(all["approvals"].as_array().unwrap().len(), 1);
            let (status, bad) = server
                .call(
                    Method::POST,
                    &format!("/api/approvals/{request_id}"),
                    Some(json!({"choice": "perhaps"})),
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert_eq!(error_code(&bad), "bad_choice");
            let (status, answered) = server
                .call(
                    Method::POST,
                    &format!("/api/approvals/{request_id}"),
                    Some(json!({"choice": "once"})),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{answered}");
            let (status, again) = server
                .call(
                    Method::POST,
                    &format!("/api/approvals/{request_id}"),
                    Some(json!({"choice": "once"})),
                )
                .await;
            assert_eq!(status, StatusCode::NOT_FOUND);
            assert_eq!(error_code(&again), "approval_not_pending");
        }
        if event.event == "tool_call_finished" {
            assert_eq!(data["status"], "ok", "{data}");
        }
        if event.event == "final" {
            final_event = Some(data);
            break;
        }
    }
    let final_event = final_event.expect("the stream carried the final answer");
    assert_eq!(final_event["text"], "published it");
    assert_eq!(final_event["status"], "completed");
    for expected in [
        "turn_started",
        "approval_requested",
        "approval_answered",
        "tool_call_finished",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "{expected} missing from {kinds:?}"
        );
    }
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "event numbers run without gaps: {ids:?}"
    );

    // A reconnect with Last-Event-ID resumes right after it.
    let resume_after = ids[ids.len() / 2];
    let response = server
        .request(Method::GET, &format!("/api/sessions/{id}/events"))
        .header("Last-Event-ID", resume_after.to_string())
        .send()
        .await
        .unwrap();
    let mut resumed = response.bytes_stream().eventsource();
    let first = resumed.next().await.unwrap().unwrap();
    assert_eq!(first.id.parse::<u64>().unwrap(), resume_after + 1);

    // The session is idle again; its description carries the outcome.
    let (status, shown) = server
        .call(Method::GET, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["busy"], false);
    assert_eq!(shown["last_outcome"]["status"], "completed");
    // What the session spent: the one turn's requests, also in the final event.
    let requests = shown["usage"]["requests"].as_u64().unwrap();
    assert!(requests >= 2, "{shown}");
    assert_eq!(shown["last_outcome"]["usage"]["requests"], requests);
    assert_eq!(final_event["usage"]["requests"], requests);
    assert!(
        shown["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{shown}"
    );

    // Stops: soft with an empty body, hard by name, nonsense refused.
    let response = server
        .request(Method::POST, &format!("/api/sessions/{id}/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (status, hard) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/stop"),
            Some(json!({"mode": "hard"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hard["mode"], "hard");
    let (status, bad) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/stop"),
            Some(json!({"mode": "gentle"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&bad), "bad_stop_mode");

    // A message with wait=true answers with the outcome.
    let (status, outcome) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "anything else?", "wait": true})),
        )
        .await;
    // The script is spent, so the turn fails; the failure is reported, not a 5xx.
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert!(outcome["status"].is_string());

    let (status, closed) = server
        .call(Method::DELETE, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    let (status, gone) = server
        .call(Method::GET, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&gone), "session_not_found");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_a_session_busy_elsewhere_is_refused_not_lost() {
    let server = Server::start().await;
    let script = json!({"turns": [
        {"tool_calls": [{"name": "publish", "arguments": {}}]},
        {"text": "published it"}
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
    let mut approvals = server.troupe.approvals().await.unwrap();

    // A turn this HTTP table did not start (as a delegation's results would) waits on approval.
    let handle = server.troupe.session(&id).unwrap();
    let running = tokio::spawn(async move { handle.send("publish the draft").await });
    let request = approvals.next().await.unwrap();
    // Events reach the HTTP log through a forwarder; wait until that turn shows there, as a
    // client watching the stream would see it, before sending.
    let response = server
        .request(Method::GET, &format!("/api/sessions/{id}/events"))
        .send()
        .await
        .unwrap();
    let mut events = response.bytes_stream().eventsource();
    while events.next().await.unwrap().unwrap().event != "turn_started" {}

    let (status, body) = server
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "are you there?"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "session_busy");

    assert!(
        server
            .troupe
            .answer(
                &request.request_id,
                troupe::actors::supervisor::ApprovalChoice::Once
            )
            .await
            .unwrap()
    );
    let outcome = running.await.unwrap().unwrap();
    assert_eq!(outcome.text, "published it");
    server.stop().await;
}
