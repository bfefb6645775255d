//! The WebSocket feed of a board resuming from a cursor without gaps or repeats, on SQLite
//! (polled) and on PostgreSQL (woken by LISTEN/NOTIFY).

use futures::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use troupe::http::FeedWake;
use troupe_kanban::store::{PostgresStore, test_cluster};
use troupe_kanban::{BoardSlug, EventId, NewTask, Store};

use super::server::{Server, TOKEN, error_code};

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
