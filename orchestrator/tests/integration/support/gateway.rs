//! A connector gateway for tests: a real HTTP server on 127.0.0.1, answering each request as
//! the test's script says (a JSON payload, a status, garbage, a hang or a huge body) and
//! recording every request with its bearer token. It runs on its own thread and runtime, so
//! blocking tests (that run the `troupe` binary) and async ones can both use it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::Value;

/// How the gateway answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 with this JSON.
    Json(Value),
    /// This status with this body.
    Status(u16, String),
    /// 200 with a body that is not JSON.
    Garbage,
    /// Never answers (until the test ends).
    Hang,
    /// 200 with a body of this many bytes, streamed without a length.
    Huge(usize),
}

/// One request the gateway received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The path after the base (`search`, `execute`, `connections/gmail`).
    pub(crate) path: String,
    pub(crate) body: Value,
    /// The `Authorization` header, as sent.
    pub(crate) auth: Option<String>,
}

type Script = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// A running gateway; its base URL ends in `/v1`.
pub(crate) struct MockGateway {
    pub(crate) url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockGateway {
    /// Starts a gateway answering with `script(path, body)`.
    pub(crate) fn start(
        script: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> MockGateway {
        let script: Arc<Script> = Arc::new(script);
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let recorded = Arc::clone(&seen);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new().fallback(
                    move |uri: Uri, headers: HeaderMap, body: Bytes| {
                        let script = Arc::clone(&script);
                        let recorded = Arc::clone(&recorded);
                        async move {
                            let path = uri
                                .path()
                                .strip_prefix("/v1/")
                                .unwrap_or(uri.path())
                                .to_string();
                            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let auth = headers
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string);
                            recorded.lock().unwrap().push(Seen {
                                path: path.clone(),
                                body: body.clone(),
                                auth,
                            });
                            answer(script(&path, &body)).await
                        }
                    },
                );
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .unwrap();
            });
            // Hung handlers are dropped with the runtime.
            runtime.shutdown_timeout(Duration::from_millis(100));
        });
        let addr = addr_rx.recv().unwrap();
        MockGateway {
            url: format!("http://{addr}/v1"),
            seen,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Every request so far, in order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests to `path`.
    pub(crate) fn seen_at(&self, path: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.path == path).collect()
    }
}

impl Drop for MockGateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn answer(reply: Reply) -> axum::response::Response {
    let json = |status: u16, body: String, kind: &str| {
        axum::response::Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .header("content-type", kind)
            .body(Body::from(body))
            .unwrap()
    };
    match reply {
        Reply::Json(value) => json(200, value.to_string(), "application/json"),
        Reply::Status(status, body) => json(status, body, "application/json"),
        Reply::Garbage => json(200, "<html>this is not json".into(), "text/html"),
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json(504, String::new(), "text/plain")
        }
        Reply::Huge(bytes) => {
            const CHUNK: usize = 64 * 1024;
            let chunks = bytes.div_ceil(CHUNK);
            let stream = futures::stream::iter(
                (0..chunks).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; CHUNK]))),
            );
            axum::response::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    }
}
