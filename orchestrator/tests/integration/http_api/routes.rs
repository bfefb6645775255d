//! Which routes exist and who may call them: the token on every route, `/openapi.json`
//! against the routes really served, and CORS closed unless origins are configured.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use troupe::http::HttpState;
use troupe::tools::Registry;
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::{SqliteStore, Store};

use super::server::{Server, TOKEN, error_code};

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
