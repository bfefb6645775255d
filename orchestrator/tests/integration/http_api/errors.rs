//! Bad input gets a JSON 4xx that says what was wrong.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::server::{Server, error_code};

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
