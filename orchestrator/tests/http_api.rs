//! The HTTP API end to end, over real HTTP on 127.0.0.1:0: a session driven over HTTP whose
//! tool call needs approval (answered over HTTP, events read over SSE), the token on every
//! route, JSON errors for bad input, the board routes, the WebSocket feed resuming from a
//! cursor, `/openapi.json` against the routes really served, and the `troupe serve` binary
//! running its own dispatcher (scripted profiles): a task posted and dispatched over HTTP
//! reaches `done`, a terminated run's worker is stopped, `--no-dispatch` claims nothing.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use troupe::actors::delegate::DelegationConfig;
use troupe::actors::session::SessionConfig;
use troupe::actors::supervisor::ApprovalConfig;
use troupe::http::{FeedWake, HttpState, RunningServer};
use troupe::tools::{Registry, ToolDef, ToolResult};
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::domain::WorkerId;
use troupe_kanban::store::{ClaimSpec, PostgresStore, test_cluster};
use troupe_kanban::{BoardSlug, EventId, NewTask, SqliteStore, Store};

const TOKEN: &str = "test-token-0123456789abcdef";

fn test_registry() -> Arc<Registry> {
    Registry::with_tools([
        ToolDef::new("publish", "Publish the draft.", json!({"type": "object"}))
            .with_toolset("test")
            .with_fn(|_, _| Box::pin(async { ToolResult::text("published") })),
    ])
}

struct Server {
    base: String,
    client: reqwest::Client,
    store: Arc<dyn Store>,
    troupe: Troupe,
    server: Option<RunningServer>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
        Server::start_with(store, FeedWake::Poll(Duration::from_millis(5)), dir).await
    }

    async fn start_with(store: Arc<dyn Store>, wake: FeedWake, dir: tempfile::TempDir) -> Server {
        let registry = test_registry();
        let approvals = ApprovalConfig {
            require_approval: vec!["publish".into()],
            ..ApprovalConfig::default()
        };
        let troupe = Troupe::start(TroupeConfig::new(registry).with_approvals(approvals)).unwrap();
        Server::start_on(troupe, store, wake, dir).await
    }

    /// A server whose sessions may delegate, set up as `troupe serve` does (background
    /// delegation on).
    async fn start_delegating() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
        let registry = test_registry();
        let mut session = SessionConfig::default();
        troupe::delegation::enable_delegation(
            &registry,
            &mut session,
            DelegationConfig::default(),
            true,
        );
        let troupe = Troupe::start(TroupeConfig::new(registry).with_session(session)).unwrap();
        Server::start_on(troupe, store, FeedWake::Poll(Duration::from_millis(5)), dir).await
    }

    async fn start_on(
        troupe: Troupe,
        store: Arc<dyn Store>,
        wake: FeedWake,
        dir: tempfile::TempDir,
    ) -> Server {
        let state = HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
            .await
            .unwrap()
            .with_wake(wake);
        let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        Server {
            base: format!("http://{}", server.local_addr()),
            client: reqwest::Client::new(),
            store,
            troupe,
            server: Some(server),
            _dir: dir,
        }
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await.unwrap();
        }
        self.troupe.close().await;
    }
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(no error code)")
}

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
async fn every_route_needs_the_token() {
    let server = Server::start().await;
    for path in [
        "/openapi.json",
        "/api/sessions",
        "/api/approvals",
        "/api/plugins/kanban/board",
        "/api/plugins/kanban/events",
        "/no/such/route",
    ] {
        let url = format!("{}{path}", server.base);
        let response = server.client.get(&url).send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without a token"
        );
        assert_eq!(
            response.headers().get("www-authenticate").unwrap(),
            "Bearer"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(error_code(&body), "unauthorized");

        let response = server
            .client
            .get(&url)
            .bearer_auth("test-token-0123456789abcdeX")
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{path} with a wrong token"
        );
    }
    // The right token opens the door.
    let (status, _) = server.call(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    // `?token=` is taken only by the WebSocket feed.
    let response = server
        .client
        .get(format!("{}/openapi.json?token={TOKEN}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // A non-bearer scheme is refused.
    let response = server
        .client
        .get(format!("{}/openapi.json", server.base))
        .basic_auth("user", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_json_4xx_that_says_what_was_wrong() {
    let server = Server::start().await;
    let tasks = "/api/plugins/kanban/tasks";

    let response = server
        .request(Method::POST, tasks)
        .header("content-type", "application/json")
        .body("{\"title\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "bad_json");

    let response = server
        .request(Method::POST, tasks)
        .body("{\"title\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "bad_content_type");

    let (status, body) = server
        .call(Method::POST, tasks, Some(json!({"titel": "typo"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error_code(&body), "bad_fields");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("titel"),
        "{body}"
    );

    let (status, body) = server
        .call(Method::POST, tasks, Some(json!({"title": "   "})))
        .await;
    assert!(status.is_client_error(), "{status} {body}");

    let (status, body) = server
        .call(Method::GET, "/api/plugins/kanban/tasks/t_0000abcd", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "task_not_found");

    let (status, body) = server
        .call(Method::GET, "/api/plugins/kanban/tasks/not-an-id", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_task_id");

    let (status, body) = server
        .call(Method::GET, "/api/plugins/kanban/board?board=Nope!", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_board");

    let (status, body) = server
        .call(
            Method::GET,
            "/api/plugins/kanban/board?board=elsewhere",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "board_not_found");

    let (status, body) = server
        .call(Method::GET, "/api/plugins/kanban/runs/abc", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_path");

    let (status, body) = server
        .call(Method::GET, "/api/plugins/kanban/tasks?limit=lots", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_query");

    // Invalid transitions: a done task cannot be blocked, nor set running.
    let (_, created) = server
        .call(Method::POST, tasks, Some(json!({"title": "finish me"})))
        .await;
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let (status, done) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{id}"),
            Some(json!({"status": "done", "summary": "finished"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["task"]["status"], "done");
    let (status, body) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{id}"),
            Some(json!({"status": "blocked", "reason": "why not"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "invalid_transition");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("done"),
        "{body}"
    );
    let (status, body) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{id}"),
            Some(json!({"status": "running"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "invalid_transition");
    let (status, body) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{id}"),
            Some(json!({"status": "finished"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_status");

    // Sessions: a bad script, no model, unknown ids.
    let (status, body) = server
        .call(
            Method::POST,
            "/api/sessions",
            Some(json!({"script": {"turns": 3}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_script");
    let (status, body) = server
        .call(Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "no_model");
    let (status, body) = server
        .call(
            Method::POST,
            "/api/sessions/nope/messages",
            Some(json!({"text": "hello"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "session_not_found");

    // Unknown routes and methods.
    let (status, body) = server.call(Method::GET, "/api/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "route_not_found");
    let (status, body) = server.call(Method::PUT, "/api/sessions", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_code(&body), "method_not_allowed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_routes_round_trip() {
    let server = Server::start().await;
    let tasks = "/api/plugins/kanban/tasks";
    let (status, parent) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "write", "assignee": "writer", "priority": 2, "idempotency_key": "k1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{parent}");
    let parent_id = parent["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(parent["task"]["status"], "ready");
    // The same idempotency key returns the same task with 200.
    let (status, again) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "write", "idempotency_key": "k1"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["task"]["id"], parent_id.as_str());
    assert_eq!(again["created"], false);

    let (status, child) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "review", "parents": [parent_id]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let child_id = child["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(child["task"]["status"], "todo");
    let (_, loose) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "loose end", "triage": true})),
        )
        .await;
    let loose_id = loose["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(loose["task"]["status"], "triage");

    // Links: add one, a cycle is refused, remove it.
    let (status, body) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/links",
            Some(json!({"parent_id": child_id, "child_id": loose_id})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/links",
            Some(json!({"parent_id": loose_id, "child_id": parent_id})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "link_cycle");
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!("/api/plugins/kanban/links?parent_id={child_id}&child_id={loose_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = server
        .call(
            Method::DELETE,
            &format!("/api/plugins/kanban/links?parent_id={child_id}&child_id={loose_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "link_not_found");

    // Field edits and a comment.
    let (status, patched) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{parent_id}"),
            Some(json!({"title": "write the report", "priority": 5, "assignee": "author"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["task"]["title"], "write the report");
    assert_eq!(patched["task"]["priority"], 5);
    assert_eq!(patched["task"]["assignee"], "author");
    let (status, comment) = server
        .call(
            Method::POST,
            &format!("{tasks}/{parent_id}/comments"),
            Some(json!({"body": "start with the summary", "author": "lead"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{comment}");

    // A run: a worker claims the parent through the store; the API shows and terminates it.
    let board = BoardSlug::default_board();
    let claim = server
        .store
        .claim_next(&board, &ClaimSpec::new(WorkerId::local()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.task.id.as_str(), parent_id);
    let run_id = claim.run.id.0;
    let (status, run) = server
        .call(
            Method::GET,
            &format!("/api/plugins/kanban/runs/{run_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["run"]["task_id"], parent_id.as_str());
    let (status, terminated) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{terminated}");
    assert_eq!(terminated["task"]["status"], "blocked");
    assert!(terminated["run"]["outcome"].is_string());
    let (status, body) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "run_not_open");

    // Bulk: unblock the parent and one bad id; each reports on its own.
    let (status, bulk) = server
        .call(
            Method::POST,
            &format!("{tasks}/bulk"),
            Some(json!({"ids": [parent_id, "t_ffffffff"], "patch": {"status": "ready"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk["results"][0]["ok"], true);
    assert_eq!(bulk["results"][0]["task"]["status"], "ready");
    assert_eq!(bulk["results"][1]["ok"], false);
    assert_eq!(bulk["results"][1]["error"]["code"], "task_not_found");

    // Completing the parent makes the child ready; dispatch reports it waiting for a worker.
    let (status, _) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{parent_id}"),
            Some(json!({"status": "done", "result": "the report", "metadata": {"pages": 3}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch?max=5", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    // No profiles here, so no dispatcher: the report says so and how to add one.
    assert_eq!(report["dispatcher"], "none", "{report}");
    assert!(
        report["note"].as_str().unwrap().contains("profiles:"),
        "{report}"
    );
    assert!(
        report["waiting_for_worker"]
            .as_array()
            .unwrap()
            .iter()
            .any(|id| id == child_id.as_str()),
        "{report}"
    );

    // The whole task view.
    let (status, shown) = server
        .call(Method::GET, &format!("{tasks}/{parent_id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["task"]["status"], "done");
    assert_eq!(shown["task"]["result"], "the report");
    assert_eq!(shown["comments"][0]["body"], "start with the summary");
    assert_eq!(shown["links"]["children"][0], child_id.as_str());
    assert!(shown["runs"].as_array().unwrap().len() >= 2, "{shown}");
    assert!(shown["events"].as_array().unwrap().len() >= 4);

    // The board by columns, then removal (archive) with per-id results.
    let (status, board_view) = server
        .call(Method::GET, "/api/plugins/kanban/board", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(board_view["columns"]["done"][0]["id"], parent_id.as_str());
    assert_eq!(board_view["columns"]["ready"][0]["id"], child_id.as_str());
    let (status, removed) = server
        .call(
            Method::DELETE,
            tasks,
            Some(json!({"ids": [child_id, loose_id]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(removed["results"][1]["task"]["status"], "archived");
    let (_, listed) = server
        .call(Method::GET, &format!("{tasks}?status=archived"), None)
        .await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2);
    server.stop().await;
}

async fn connect_feed(
    server: &Server,
    since: i64,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let url = format!(
        "ws://{}/api/plugins/kanban/events?since={since}",
        server.base.trim_start_matches("http://")
    );
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    socket
}

async fn next_event(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let message = socket.next().await.unwrap().unwrap();
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_feed_resumes_from_a_cursor_without_gaps_or_repeats() {
    feed_resumes_without_gaps_or_repeats(Server::start().await).await;
}

/// The same over PostgreSQL, woken by LISTEN/NOTIFY, in a fresh database of the cluster that
/// `TROUPE_TEST_POSTGRES_URL` names (scripts/start-test-postgres.sh starts one); without it
/// the test says so and checks nothing, unless `TROUPE_REQUIRE_POSTGRES=1` makes that a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_feed_resumes_on_postgres_woken_by_notify() {
    let Some(url) = test_cluster::cluster_url("WebSocket feed on PostgreSQL") else {
        return;
    };
    let db = test_cluster::fresh_database(&url, "troupe_http").await;
    let pg = Arc::new(PostgresStore::connect(&db.url).await.unwrap());
    let store: Arc<dyn Store> = pg.clone();
    let server =
        Server::start_with(store, FeedWake::Postgres(pg), tempfile::tempdir().unwrap()).await;
    feed_resumes_without_gaps_or_repeats(server).await;
}

async fn feed_resumes_without_gaps_or_repeats(server: Server) {
    let board = BoardSlug::default_board();
    for n in 0..20 {
        server
            .store
            .create_task(&board, &NewTask::new(format!("task {n}")))
            .await
            .unwrap();
    }
    let mut seen: Vec<Value> = Vec::new();
    let mut socket = connect_feed(&server, 0).await;
    for _ in 0..7 {
        seen.push(next_event(&mut socket).await);
    }
    // Disconnect mid-stream; more events commit while nobody listens.
    socket.close(None).await.unwrap();
    drop(socket);
    for n in 20..30 {
        server
            .store
            .create_task(&board, &NewTask::new(format!("task {n}")))
            .await
            .unwrap();
    }
    let last = seen.last().unwrap()["id"].as_i64().unwrap();
    let mut socket = connect_feed(&server, last).await;
    // Events that commit while connected arrive live, after the backlog.
    let writer = {
        let store = Arc::clone(&server.store);
        let board = board.clone();
        tokio::spawn(async move {
            for n in 30..40 {
                store
                    .create_task(&board, &NewTask::new(format!("task {n}")))
                    .await
                    .unwrap();
            }
        })
    };
    writer.await.unwrap();
    let expected = server
        .store
        .events_since(&board, EventId::START, 10_000)
        .await
        .unwrap();
    while seen.len() < expected.len() {
        seen.push(next_event(&mut socket).await);
    }
    let expected: Vec<Value> = expected
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(
        seen, expected,
        "the feed equals events_since, in order, once each"
    );
    let ids: BTreeSet<i64> = seen.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), seen.len(), "no event repeated");

    // Absent `since`, the feed starts live: the first message is the next event to commit.
    drop(socket);
    let mut live = connect_feed_live(&server).await;
    server
        .store
        .create_task(&board, &NewTask::new("the live one"))
        .await
        .unwrap();
    let event = next_event(&mut live).await;
    assert!(event["id"].as_i64().unwrap() > expected.last().unwrap()["id"].as_i64().unwrap());
    assert_eq!(event["kind"], "created");
    let _ = live
        .send(tokio_tungstenite::tungstenite::Message::Close(None))
        .await;

    // A bad cursor is refused before the upgrade.
    let (status, body) = server
        .call(Method::GET, "/api/plugins/kanban/events?since=-4", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "bad_since");
    server.stop().await;
}

async fn connect_feed_live(
    server: &Server,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    // Browsers pass the token in the query; the feed accepts that.
    let url = format!(
        "ws://{}/api/plugins/kanban/events?token={TOKEN}",
        server.base.trim_start_matches("http://")
    );
    let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_matches_the_routes_served() {
    let server = Server::start().await;
    let (status, document) = server.call(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> =
        troupe::http::openapi::documented_routes(&document)
            .into_iter()
            .collect();
    let routed: BTreeSet<(String, String)> = troupe::http::routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, routed);
    // Each documented operation reaches a handler: whatever it answers, it is not the router's
    // "no such route" or "method not allowed".
    for (method, path) in &documented {
        let concrete = path
            .replace("/runs/{id}", "/runs/1")
            .replace("/tasks/{id}", "/tasks/t_00000000")
            .replace("{id}", "no-such-session")
            .replace("{request_id}", "no-such-request");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let (status, body) = server.call(method.clone(), &concrete, None).await;
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED
                && error_code(&body) != "route_not_found"
                && status != StatusCode::INTERNAL_SERVER_ERROR,
            "{method} {concrete}: {status} {body}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_runs_the_boards_in_process_dispatcher() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let board = BoardSlug::default_board();
    let dispatcher = troupe::kanban_api::Kanban::new(Arc::clone(&store))
        .start_dispatcher(
            &troupe,
            board.clone(),
            troupe_kanban::Profiles::new(),
            troupe_kanban::DispatcherConfig::default().with_auto_dispatch(false),
        )
        .await
        .unwrap();
    let state = HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
        .await
        .unwrap()
        .with_dispatcher(Arc::new(troupe::http::DispatcherPass::new(
            vec![dispatcher.clone()],
            Arc::clone(&store),
        )));
    let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let task = store
        .create_task(&board, &NewTask::new("nobody is assigned"))
        .await
        .unwrap()
        .task;
    let report: Value = client
        .post(format!(
            "http://{}/api/plugins/kanban/dispatch?dry_run=true&max=3",
            server.local_addr()
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(report["dispatcher"], "local", "{report}");
    assert!(
        report["skipped_unassigned"]
            .as_array()
            .unwrap()
            .iter()
            .any(|id| id == task.id.as_str()),
        "{report}"
    );
    dispatcher.stop().await;
    server.shutdown().await.unwrap();
    troupe.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_is_closed_unless_origins_are_configured() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let closed = troupe::http::serve(
        HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
            .await
            .unwrap(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let open = troupe::http::serve(
        HttpState::new(troupe.clone(), Arc::clone(&store), TOKEN)
            .await
            .unwrap()
            .with_cors_origins(vec!["http://dash.test".into()]),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let preflight = |addr: std::net::SocketAddr, origin: &'static str| {
        client
            .request(
                Method::OPTIONS,
                format!("http://{addr}/api/plugins/kanban/board"),
            )
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .send()
    };
    // No origins configured: the preflight is refused like any request without a token.
    let response = preflight(closed.local_addr(), "http://dash.test")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    // A configured origin gets its preflight answered, and its requests marked.
    let response = preflight(open.local_addr(), "http://dash.test")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        response
            .headers()
            .get("access-control-allow-origin")
            .unwrap(),
        "http://dash.test"
    );
    let response = client
        .get(format!(
            "http://{}/api/plugins/kanban/board",
            open.local_addr()
        ))
        .header("origin", "http://dash.test")
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response
            .headers()
            .get("access-control-allow-origin")
            .unwrap(),
        "http://dash.test"
    );
    // Another origin is not let in.
    let response = preflight(open.local_addr(), "http://evil.test")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    closed.shutdown().await.unwrap();
    open.shutdown().await.unwrap();
    troupe.close().await;
}

/// A script that completes its task at once.
const COMPLETING_SCRIPT: &str = "cursor: conversation\nturns:\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: \"finished by the script\"}\n  - text: \"Done.\"\n";

/// A script whose first tool call runs for a minute, so its run can be terminated midway.
const SLOW_SCRIPT: &str = "cursor: conversation\nturns:\n  - tool_calls:\n      - name: terminal\n        arguments: {command: \"sleep 60\"}\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: slept}\n  - text: Finished.\n";

/// A `troupe serve` process on 127.0.0.1:0 with its stderr read line by line.
struct ServeProcess {
    child: std::process::Child,
    base: String,
    client: reqwest::Client,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    banner: Vec<String>,
    _dir: tempfile::TempDir,
}

impl ServeProcess {
    /// Writes `script` as the profile `coder` (the default assignee) and starts the server.
    async fn start(script: &str, toolsets: &str, extra: &[&str]) -> ServeProcess {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("coder.yaml");
        std::fs::write(&path, script).unwrap();
        std::fs::write(
            dir.path().join("troupe.yaml"),
            format!(
                "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {}\n    toolsets: {toolsets}\n",
                path.display()
            ),
        )
        .unwrap();
        ServeProcess::spawn(dir, extra).await
    }

    async fn spawn(dir: tempfile::TempDir, extra: &[&str]) -> ServeProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.current_dir(dir.path())
            .env("TROUPE_HOME", dir.path().join("home"))
            .env(troupe::http::auth::TOKEN_ENV, TOKEN);
        for var in [
            "TROUPE_BASE_URL",
            "OPENAI_BASE_URL",
            "TROUPE_KANBAN_BOARD",
            "TROUPE_KANBAN_STORE",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args(["serve", "--port", "0", "--store", "store"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // The banner: the address, then what dispatches this board.
        let mut banner = Vec::new();
        let mut base = None;
        while let Some(line) = lines.recv().await {
            if let Some(rest) = line.strip_prefix("troupe serve: listening on ") {
                base = Some(rest.split_whitespace().next().unwrap().to_string());
            }
            let dispatch_line = line.contains("dispatch");
            banner.push(line);
            if base.is_some() && dispatch_line {
                break;
            }
        }
        let base = base.unwrap_or_else(|| panic!("troupe serve did not start: {banner:?}"));
        ServeProcess {
            child,
            base,
            client: reqwest::Client::new(),
            lines,
            banner,
            _dir: dir,
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Reads the task over the API until `done(task)` holds; gives up (failing the test)
    /// after a minute, so a broken dispatcher cannot hang the suite.
    async fn wait_for(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..1200 {
            let (status, shown) = self
                .call(
                    Method::GET,
                    &format!("/api/plugins/kanban/tasks/{id}"),
                    None,
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{shown}");
            if done(&shown) {
                return shown;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {id} never got {what}");
    }

    /// SIGTERM, then the rest of stderr; the process must exit cleanly.
    async fn stop(mut self) -> Vec<String> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let mut rest = Vec::new();
        while let Some(line) = self.lines.recv().await {
            rest.push(line);
        }
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "{exit:?}: {rest:?}");
        rest
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        // A failed test must not leave the server running.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn write_config(dir: &Path, profiles: bool) {
    let text = if profiles {
        format!(
            "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {}\n",
            dir.join("coder.yaml").display()
        )
    } else {
        "kanban:\n  failure_limit: 2\n".to_string()
    };
    std::fs::write(dir.join("coder.yaml"), COMPLETING_SCRIPT).unwrap();
    std::fs::write(dir.join("troupe.yaml"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_profiles_runs_a_posted_task_to_done() {
    let server = ServeProcess::start(COMPLETING_SCRIPT, "[]", &[]).await;
    assert!(
        server
            .banner
            .iter()
            .any(|l| l.contains("dispatching board default with profiles coder")),
        "{:?}",
        server.banner
    );
    let tasks = "/api/plugins/kanban/tasks";
    let (status, created) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "write the summary", "assignee": "coder"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["task"]["id"].as_str().unwrap().to_string();
    // A task for a profile this server does not have is reported as skipped, not claimed.
    let (_, stranger) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "for someone else", "assignee": "reviewer"})),
        )
        .await;
    let stranger_id = stranger["task"]["id"].as_str().unwrap().to_string();

    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["dispatcher"], "local", "{report}");
    assert_eq!(report["dry_run"], false, "{report}");
    assert!(
        report["skipped_nonspawnable"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == stranger_id.as_str() && pair[1] == "reviewer"),
        "{report}"
    );
    // The dispatcher also runs rounds on its own, so this round or an earlier one claimed it.
    let claimed_here = report["claimed"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["task_id"] == id.as_str() && c["assignee"] == "coder");
    let shown = server
        .wait_for(&id, "done", |shown| shown["task"]["status"] == "done")
        .await;
    let runs = shown["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "claimed once: {shown}");
    assert_eq!(runs[0]["outcome"], "completed", "{shown}");
    assert_eq!(runs[0]["summary"], "finished by the script", "{shown}");
    if claimed_here {
        assert_eq!(
            report["claimed"][0]["run_id"], runs[0]["id"],
            "{report} {shown}"
        );
    }
    // The stranger's task is still waiting.
    let (_, other) = server
        .call(Method::GET, &format!("{tasks}/{stranger_id}"), None)
        .await;
    assert_eq!(other["task"]["status"], "ready", "{other}");
    let rest = server.stop().await;
    assert!(
        rest.iter()
            .any(|l| l.contains("dispatcher stopped: 1 claimed, 1 completed")),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_a_run_stops_the_local_worker() {
    let server = ServeProcess::start(SLOW_SCRIPT, "[core]", &[]).await;
    let (status, created) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/tasks",
            Some(json!({"title": "nap"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let running = server
        .wait_for(&id, "running", |shown| shown["task"]["status"] == "running")
        .await;
    let run_id = running["task"]["lease"]["run_id"].as_i64().unwrap();
    let (status, ended) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(ended["worker"], "stopped", "{ended}");
    assert_eq!(ended["task"]["status"], "blocked", "{ended}");
    assert_eq!(ended["ended_lease"]["run_id"], run_id, "{ended}");
    assert_eq!(ended["run"]["outcome"], "blocked", "{ended}");
    // The run stays ended; the worker did not come back to finish it.
    let shown = server
        .wait_for(&id, "blocked", |shown| shown["task"]["status"] == "blocked")
        .await;
    assert!(shown["task"]["lease"].is_null(), "{shown}");
    assert_eq!(shown["runs"].as_array().unwrap().len(), 1, "{shown}");
    // Terminating it again is refused: nothing is open.
    let (status, again) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    let rest = server.stop().await;
    assert!(
        rest.iter()
            .any(|l| l.contains("dispatcher stopped: 1 claimed")),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_dispatch_leaves_tasks_to_workers() {
    // Profiles, but --no-dispatch: nothing is claimed and the report says why.
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), true);
    let server = ServeProcess::spawn(dir, &["--no-dispatch"]).await;
    assert!(
        server.banner.iter().any(|l| l.contains("--no-dispatch")),
        "{:?}",
        server.banner
    );
    let (_, created) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/tasks",
            Some(json!({"title": "wait for a worker"})),
        )
        .await;
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["dispatcher"], "none", "{report}");
    assert!(
        report["note"].as_str().unwrap().contains("--no-dispatch"),
        "{report}"
    );
    assert_eq!(report["waiting_for_worker"][0], id.as_str(), "{report}");
    let (_, shown) = server
        .call(
            Method::GET,
            &format!("/api/plugins/kanban/tasks/{id}"),
            None,
        )
        .await;
    assert_eq!(shown["task"]["status"], "ready", "{shown}");
    server.stop().await;

    // No profiles at all: the banner and the report say how to add one.
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), false);
    let server = ServeProcess::spawn(dir, &[]).await;
    assert!(
        server.banner.iter().any(|l| l.contains("no profiles")),
        "{:?}",
        server.banner
    );
    let (_, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch", None)
        .await;
    assert_eq!(report["dispatcher"], "none", "{report}");
    assert!(
        report["note"].as_str().unwrap().contains("profiles:"),
        "{report}"
    );
    server.stop().await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_patch_changes_nothing_and_a_zero_runtime_is_refused() {
    let server = Server::start().await;
    let tasks = "/api/plugins/kanban/tasks";

    let (status, body) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "never ends", "max_runtime_seconds": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "bad_max_runtime");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send 1 to"),
        "{body}"
    );
    // A budget is checked as the config's is, and kept with the task.
    let (status, body) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "costly", "budget": {"max_dollars": 5}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "bad_budget");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget.max_dollars: not a budget limit"),
        "{body}"
    );
    let (status, body) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "costly", "budget": {"max_cost_usd": 0.5}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["task"]["budget"]["max_cost_usd"], 0.5, "{body}");
    let (status, created) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "original", "max_runtime_seconds": 60})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["task"]["max_runtime_seconds"], 60);
    let id = created["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(created["task"]["status"], "ready");

    // Each of these changes the title and assignee but asks for a status a ready task cannot
    // take: refused whole, nothing written.
    for status_asked in ["running", "todo", "triage"] {
        let (status, body) = server
            .call(
                Method::PATCH,
                &format!("{tasks}/{id}"),
                Some(json!({"title": "renamed", "assignee": "someone", "status": status_asked})),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{status_asked}: {body}");
        assert_eq!(error_code(&body), "invalid_transition");
        let (_, shown) = server
            .call(Method::GET, &format!("{tasks}/{id}"), None)
            .await;
        assert_eq!(
            shown["task"]["title"], "original",
            "{status_asked}: {shown}"
        );
        assert!(
            shown["task"]["assignee"].is_null(),
            "{status_asked}: {shown}"
        );
        assert_eq!(shown["task"]["status"], "ready");
    }
    // The same field changes with an allowed status go through together.
    let (status, body) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{id}"),
            Some(json!({"title": "renamed", "assignee": "someone", "status": "review"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["task"]["title"], "renamed");
    assert_eq!(body["task"]["assignee"], "someone");
    assert_eq!(body["task"]["status"], "review");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_board_list_creation_and_links_routes() {
    let server = Server::start().await;
    // Without the token: refused, like every API route.
    for path in ["/api/plugins/kanban/boards", "/api/plugins/kanban/links"] {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let (status, listed) = server
        .call(Method::GET, "/api/plugins/kanban/boards", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["default_board"], "default");
    assert!(
        listed["boards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["board"]["slug"] == "default"),
        "{listed}"
    );

    let (status, created) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": "ops", "name": "Operations"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["board"]["name"], "Operations");
    let (status, again) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": "ops"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(error_code(&again), "board_exists");
    let (status, bad) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": "../etc"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert_eq!(error_code(&bad), "bad_board");

    // A task on the new board is counted in the listing; a fan-out's links are listed.
    let tasks = "/api/plugins/kanban/tasks?board=ops";
    let (_, parent) = server
        .call(Method::POST, tasks, Some(json!({"title": "plan"})))
        .await;
    let parent_id = parent["task"]["id"].as_str().unwrap().to_string();
    let mut children = Vec::new();
    for title in ["a", "b"] {
        let (status, child) = server
            .call(
                Method::POST,
                tasks,
                Some(json!({"title": title, "parents": [parent_id]})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{child}");
        children.push(child["task"]["id"].as_str().unwrap().to_string());
    }
    let (status, links) = server
        .call(Method::GET, "/api/plugins/kanban/links?board=ops", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{links}");
    let mut pairs: Vec<(String, String)> = links["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["parent_id"].as_str().unwrap().to_string(),
                l["child_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    let mut expected: Vec<(String, String)> = children
        .iter()
        .map(|c| (parent_id.clone(), c.clone()))
        .collect();
    expected.sort();
    assert_eq!(pairs, expected);
    let (_, listed) = server
        .call(Method::GET, "/api/plugins/kanban/boards", None)
        .await;
    let ops = listed["boards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["board"]["slug"] == "ops")
        .unwrap()
        .clone();
    let total: u64 = ops["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(total, 3, "{ops}");
    let (status, missing) = server
        .call(Method::GET, "/api/plugins/kanban/links?board=nope", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");

    // The dashboard's page and assets need no token and carry the content policy.
    for path in ["/", "/dashboard/app.js", "/dashboard/style.css"] {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .unwrap();
        assert!(policy.contains("default-src 'none'"), "{policy}");
    }
    let response = server
        .client
        .get(format!("{}/dashboard/nope.js", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}
