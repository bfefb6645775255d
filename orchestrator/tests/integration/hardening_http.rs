//! `troupe serve` against clients that misbehave, as an attacker would: a flood of idle sockets
//! with no token, a client that sends its headers a byte at a time, and large boards read in
//! pages; and many WebSocket subscribers of one board sharing one watcher.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use troupe::http::{FeedWake, HttpState};
use troupe::tools::Registry;
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::{BoardSlug, NewTask, SqliteStore, Store};

use crate::support::serve::{Served, TOKEN, TroupeDir};

/// `troupe serve` started by a shell with a low open-file limit (as on many machines), with
/// `serve:` settings from troupe.yaml; the workspace lives as long as the server.
async fn serve_limited(open_files: u32, serve_section: &str) -> (TroupeDir, Served) {
    let dir = TroupeDir::new(serve_section, "turns:\n  - text: unused\n").await;
    let mut command = dir.troupe_with_open_files(open_files);
    command.args(["serve", "--port", "0", "--store", "store", "--no-dispatch"]);
    let served = Served::spawn(command, Some(TOKEN)).await;
    (dir, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_without_a_token_do_not_lock_out_a_client_with_it() {
    let (_dir, served) = serve_limited(256, "serve:\n  header_read_timeout_ms: 30000\n").await;
    // More idle connections than the server has file descriptors.
    let mut idle = Vec::new();
    for _ in 0..400 {
        match tokio::net::TcpStream::connect(served.addr()).await {
            Ok(stream) => idle.push(stream),
            Err(_) => break,
        }
    }
    assert!(idle.len() >= 300, "only {} connections opened", idle.len());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = reqwest::Client::new();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        client
            .get(format!("http://{}/api/plugins/kanban/board", served.addr()))
            .bearer_auth(TOKEN)
            .send(),
    )
    .await
    .expect("a client with the token got no answer while idle sockets were open")
    .expect("a client with the token was refused while idle sockets were open");
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_sent_a_byte_at_a_time_are_cut_off() {
    let (_dir, served) = serve_limited(1024, "serve:\n  header_read_timeout_ms: 500\n").await;
    let mut stream = tokio::net::TcpStream::connect(served.addr()).await.unwrap();
    let request = b"GET /api/plugins/kanban/board HTTP/1.1\r\nHost: x\r\n";
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        for byte in request.iter().cycle() {
            if stream.write_all(&[*byte]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut buf = [0u8; 512];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buf)).await
            {
                // End of file, or the server's error response before it closes.
                return n == 0
                    || buf.starts_with(b"HTTP/1.1 408")
                    || buf.starts_with(b"HTTP/1.1 4");
            }
        }
        false
    })
    .await;
    assert_eq!(closed, Ok(true), "the slow client kept its connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_closes_quiet_connections() {
    let (_dir, served) = serve_limited(1024, "serve:\n  idle_timeout_ms: 300\n").await;
    let mut stream = tokio::net::TcpStream::connect(served.addr()).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
}

/// An in-process server on a SQLite board with `tasks` tasks.
async fn board_with(
    tasks: usize,
) -> (
    troupe::http::RunningServer,
    Arc<dyn Store>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let board = BoardSlug::default_board();
    for i in 0..tasks {
        let task = NewTask::new(format!("task {i}")).with_priority((i % 7) as i64);
        store.create_task(&board, &task).await.unwrap();
    }
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let state = HttpState::new(troupe, Arc::clone(&store), TOKEN)
        .await
        .unwrap()
        .with_wake(FeedWake::Poll(Duration::from_millis(10)));
    let server = troupe::http::serve(state, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (server, store, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_board_comes_in_pages_that_cover_it_once() {
    let (server, _store, _dir) = board_with(1_203).await;
    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        let url = format!("http://{}{path}", server.local_addr());
        async move {
            let response = client.get(url).bearer_auth(TOKEN).send().await.unwrap();
            assert_eq!(response.status(), reqwest::StatusCode::OK);
            let bytes = response.bytes().await.unwrap();
            (
                bytes.len(),
                serde_json::from_slice::<Value>(&bytes).unwrap(),
            )
        }
    };
    for (path, list) in [
        ("/api/plugins/kanban/board?limit=400", "columns"),
        ("/api/plugins/kanban/tasks?limit=400", "tasks"),
    ] {
        let mut seen = std::collections::HashSet::new();
        let mut pages = 0;
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("{path}&cursor={c}"),
                None => path.to_string(),
            };
            let (_, page) = get(path).await;
            let tasks: Vec<Value> = if list == "columns" {
                page["columns"]
                    .as_object()
                    .unwrap()
                    .values()
                    .flat_map(|c| c.as_array().unwrap().clone())
                    .collect()
            } else {
                page["tasks"].as_array().unwrap().clone()
            };
            assert!(tasks.len() <= 400);
            for t in tasks {
                assert!(
                    seen.insert(t["id"].as_str().unwrap().to_string()),
                    "{t} twice"
                );
            }
            pages += 1;
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        assert_eq!((seen.len(), pages), (1_203, 4), "{path}");
    }
    // The default page of a large board stays small; a made-up cursor is refused clearly.
    let (bytes, page) = get("/api/plugins/kanban/board".to_string()).await;
    assert!(page["next_cursor"].is_string());
    assert!(bytes < 1_000_000, "{bytes} bytes");
    let response = client
        .get(format!(
            "http://{}/api/plugins/kanban/tasks?cursor=garbage",
            server.local_addr()
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "bad_cursor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_subscribers_of_a_board_share_one_watcher() {
    let (server, store, _dir) = board_with(1).await;
    let mut sockets = Vec::new();
    for _ in 0..40 {
        let mut request = format!(
            "ws://{}/api/plugins/kanban/events?since=0",
            server.local_addr()
        )
        .into_client_request()
        .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        sockets.push(socket);
    }
    // Everyone gets the backlog, then a new event.
    let board = BoardSlug::default_board();
    store
        .create_task(&board, &NewTask::new("one more"))
        .await
        .unwrap();
    for socket in &mut sockets {
        let mut created = 0;
        while created < 2 {
            let message = tokio::time::timeout(Duration::from_secs(20), socket.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let event: Value = serde_json::from_str(message.to_text().unwrap()).unwrap();
            if event["kind"] == "created" {
                created += 1;
            }
        }
    }
    assert_eq!(server.watched_boards(), 1);
    drop(sockets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_idle_ones_expire() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let troupe = Troupe::start(TroupeConfig::new(Registry::with_tools([]))).unwrap();
    let state = HttpState::new(troupe, store, TOKEN).await.unwrap();
    let limits = troupe::http::ServerLimits {
        max_sessions: 3,
        session_idle_timeout: Duration::from_secs(1),
        ..troupe::http::ServerLimits::default()
    };
    let server = troupe::http::serve_with_limits(state, "127.0.0.1:0".parse().unwrap(), limits)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://{}", server.local_addr());
    let create = || {
        client
            .post(format!("{base}/api/sessions"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"script": {"turns": [{"text": "hello"}]}}))
            .send()
    };
    let mut ids = vec![];
    for _ in 0..3 {
        let response = create().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        ids.push(body["session_id"].as_str().unwrap().to_string());
    }
    // Each session's events are its own.
    let answer = client
        .post(format!("{base}/api/sessions/{}/messages", ids[1]))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"text": "hi", "wait": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    let refused = create().await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_sessions");
    // Left alone, they close on their own and make room.
    let mut open = usize::MAX;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let listed: Value = client
            .get(format!("{base}/api/sessions"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        open = listed["sessions"].as_array().unwrap().len();
        if open == 0 {
            break;
        }
    }
    assert_eq!(open, 0, "idle sessions were not closed");
    assert_eq!(
        create().await.unwrap().status(),
        reqwest::StatusCode::CREATED
    );
}

/// Sends `request` over a fresh connection to `addr` and reads the whole answer.
async fn raw_exchange(addr: std::net::SocketAddr, request: String) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_is_not_this_server_gets_421() {
    let (_dir, served) = serve_limited(1024, "serve:\n  allowed_hosts: [troupe.test]\n").await;
    let port = served.addr().port();
    let ask = |host: String| {
        raw_exchange(
            served.addr(),
            format!(
                "GET /api/plugins/kanban/board HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    // A page on another site whose name now resolves to 127.0.0.1 sends its own name.
    let refused = ask(format!("rebound.example:{port}")).await;
    assert!(refused.starts_with("HTTP/1.1 421"), "{refused}");
    let body: Value = serde_json::from_str(refused.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "misdirected_request");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("rebound.example")
            && message.contains(&format!("localhost:{port}"))
            && message.contains("serve.allowed_hosts"),
        "{message}"
    );
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "troupe.test".to_string(),
    ] {
        let answer = ask(host.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    // Without the token a foreign host still gets 421, not a hint about the token.
    let anonymous = raw_exchange(
        served.addr(),
        "GET / HTTP/1.1\r\nHost: rebound.example\r\nConnection: close\r\n\r\n".to_string(),
    )
    .await;
    assert!(anonymous.starts_with("HTTP/1.1 421"), "{anonymous}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_without_the_token_never_costs_the_token_holder_a_request() {
    // One request at a time per budget: two anonymous requests that overlap already fill it.
    let (_dir, served) = serve_limited(1024, "serve:\n  max_requests_per_client: 1\n").await;
    let url = format!("http://{}/api/plugins/kanban/board", served.addr());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut flood = Vec::new();
    for i in 0..40 {
        let (stop, refused, url) = (stop.clone(), refused.clone(), url.clone());
        flood.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut request = client.get(&url);
                if i % 2 == 0 {
                    request = request.bearer_auth("a-wrong-token-0123456789");
                }
                if let Ok(answer) = request.send().await
                    && answer.status() == reqwest::StatusCode::TOO_MANY_REQUESTS
                {
                    refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The token holder, one request at a time as its budget allows.
    let holder = reqwest::Client::new();
    let mut workers = Vec::new();
    for _ in 0..1 {
        let (holder, url) = (holder.clone(), url.clone());
        workers.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..100 {
                let answer = holder.get(&url).bearer_auth(TOKEN).send().await.unwrap();
                statuses.push(answer.status());
            }
            statuses
        }));
    }
    for worker in workers {
        let statuses = worker.await.unwrap();
        assert!(
            statuses.iter().all(|s| *s == reqwest::StatusCode::OK),
            "the token holder was refused: {statuses:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in flood {
        task.await.unwrap();
    }
    assert!(
        refused.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the flood never reached its own budget, so it tested nothing"
    );
}
