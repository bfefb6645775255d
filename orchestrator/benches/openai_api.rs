//! What troupe's OpenAI-compatible `/v1` costs (the figures of docs/benchmarks.md), over real
//! sockets on 127.0.0.1 against the server's own accept loop, with a scripted model:
//! - troupe's time per `POST /v1/chat/completions` turn over the model's own time (measured
//!   around each model request), for a new session per request and for a session continued
//!   with `X-Troupe-Session`;
//! - 200 streaming clients at once for 20 s, each continuing its own session: requests per
//!   second, errors, and the process's memory.
//!
//! Run with `cargo bench -p troupe --bench openai_api` (release build).

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    reason = "a bench program prints its figures and stops on any setup failure"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe::actors::model::{
    ModelError, ModelProvider, ModelRequest, ModelResponse, Script, ScriptedProvider,
};
use troupe::http::{HttpState, ServerLimits};
use troupe::tools::Registry;
use troupe::{Troupe, TroupeConfig};
use troupe_kanban::{SqliteStore, Store};

const TOKEN: &str = "bench-token-0123456789abcdef";
const CLIENTS: usize = 200;
const LOAD: Duration = Duration::from_secs(20);

/// The scripted model, timed: every request's duration is kept.
struct Timed {
    inner: ScriptedProvider,
    times: Arc<Mutex<Vec<Duration>>>,
}

impl ModelProvider for Timed {
    fn describe(&self) -> String {
        "timed scripted model".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let started = Instant::now();
        let answer = self.inner.complete(request, cancel);
        let times = Arc::clone(&self.times);
        Box::pin(async move {
            let result = answer.await;
            times.lock().unwrap().push(started.elapsed());
            result
        })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Resident memory of this process, in MB (VmRSS).
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

fn body(text: &str, stream: bool) -> serde_json::Value {
    json!({"model": "troupe", "stream": stream, "messages": [{"role": "user", "content": text}]})
}

/// One whole chat turn; returns the session it ran in.
async fn turn(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    stream: bool,
) -> Result<String, String> {
    let mut request = client
        .post(url)
        .bearer_auth(TOKEN)
        .json(&body("tell me something", stream));
    if let Some(id) = session {
        request = request.header("X-Troupe-Session", id);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let id = response
        .headers()
        .get("x-troupe-session")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            response.text().await.unwrap_or_default()
        ));
    }
    if stream {
        let mut bytes = response.bytes_stream();
        let mut tail = Vec::new();
        while let Some(chunk) = bytes.next().await {
            tail.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
            if tail.len() > 64 {
                tail.drain(..tail.len() - 64);
            }
        }
        if !String::from_utf8_lossy(&tail).contains("data: [DONE]") {
            return Err("the stream ended without [DONE]".into());
        }
    } else {
        let answer: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
        if answer["choices"][0]["message"]["content"]
            .as_str()
            .is_none()
        {
            return Err(format!("no content: {answer}"));
        }
    }
    Ok(id)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let times = Arc::new(Mutex::new(Vec::new()));
    let script = Script {
        when_exhausted: Some("Here is an answer of a dozen words, streamed as it comes.".into()),
        ..Script::default()
    };
    let provider: Arc<dyn ModelProvider> = Arc::new(Timed {
        inner: ScriptedProvider::new(script),
        times: Arc::clone(&times),
    });
    let troupe = Troupe::start(
        TroupeConfig::new(Registry::with_tools([])).with_default_provider(Arc::clone(&provider)),
    )
    .unwrap();
    let state = HttpState::new(troupe, store, TOKEN)
        .await
        .unwrap()
        .with_provider(provider);
    let limits = ServerLimits {
        max_requests_per_client: 1_024,
        max_connections_per_client: 1_024,
        ..ServerLimits::default()
    };
    let server = troupe::http::serve_with_limits(state, "127.0.0.1:0".parse().unwrap(), limits)
        .await
        .unwrap();
    let url = format!("http://{}/v1/chat/completions", server.local_addr());
    let client = reqwest::Client::new();

    // 1. troupe's time per turn over the model's own time.
    for _ in 0..20 {
        turn(&client, &url, None, false).await.unwrap();
    }
    for (label, continued) in [
        ("a new session per request", false),
        ("one session continued", true),
    ] {
        times.lock().unwrap().clear();
        let session = turn(&client, &url, None, false).await.unwrap();
        times.lock().unwrap().clear();
        let mut totals = Vec::new();
        let runs = 500;
        for _ in 0..runs {
            let started = Instant::now();
            turn(&client, &url, continued.then_some(session.as_str()), false)
                .await
                .unwrap();
            totals.push(started.elapsed());
        }
        let mut model = times.lock().unwrap().clone();
        totals.sort();
        model.sort();
        let overhead: Vec<Duration> = {
            let mut o: Vec<Duration> = totals
                .iter()
                .zip(model.iter())
                .map(|(t, m)| t.saturating_sub(*m))
                .collect();
            o.sort();
            o
        };
        println!(
            "/v1/chat/completions, {label}, {runs} turns: whole turn median {:.2} ms (p95 {:.2}); model's own time median {:.3} ms; troupe's overhead median {:.2} ms, p95 {:.2} ms",
            ms(percentile(&totals, 0.5)),
            ms(percentile(&totals, 0.95)),
            ms(percentile(&model, 0.5)),
            ms(percentile(&overhead, 0.5)),
            ms(percentile(&overhead, 0.95)),
        );
    }

    // 2. 200 streaming clients for 20 s, each continuing its own session.
    let before = rss_mb();
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let peak = Arc::new(Mutex::new(before));
    let stop_at = Instant::now() + LOAD;
    let watcher = {
        let peak = Arc::clone(&peak);
        tokio::spawn(async move {
            while Instant::now() < stop_at {
                let now = rss_mb();
                {
                    let mut p = peak.lock().unwrap();
                    if now > *p {
                        *p = now;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (client, url) = (client.clone(), url.clone());
        let (done, failed, first_error) = (
            Arc::clone(&done),
            Arc::clone(&failed),
            Arc::clone(&first_error),
        );
        clients.push(tokio::spawn(async move {
            let mut session: Option<String> = None;
            while Instant::now() < stop_at {
                match turn(&client, &url, session.as_deref(), true).await {
                    Ok(id) => {
                        session = Some(id);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().unwrap().get_or_insert(error);
                    }
                }
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let elapsed = started.elapsed();
    watcher.await.unwrap();
    let done = done.load(Ordering::Relaxed);
    println!(
        "{CLIENTS} streaming clients for {:.1} s: {done} turns ({:.0} req/s), {} errors{}; memory {:.0} MB before, {:.0} MB at the peak (server and clients in one process)",
        elapsed.as_secs_f64(),
        done as f64 / elapsed.as_secs_f64(),
        failed.load(Ordering::Relaxed),
        first_error
            .lock()
            .unwrap()
            .as_ref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default(),
        before,
        *peak.lock().unwrap(),
    );
    server.shutdown().await.unwrap();
}
