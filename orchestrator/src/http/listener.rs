//! The accept loop of `troupe serve`, built so that clients without the token cannot starve
//! the ones with it: headers must arrive within a deadline, a connection that does nothing for
//! a while is closed, the number of open connections is capped overall and per client address,
//! and so is the number of requests in flight: per credential for requests that carry the token,
//! per client address for the others, each in its own budget. A request whose `Host` does not
//! name this server is answered 421 before it reaches the router (`gate.rs`).
//!
//! When a cap is reached the newcomer is not turned away while some connection merely sits
//! idle: an idle connection that never carried the token is closed to make room (the one idle
//! longest, of that client for the per-client cap), and only when there is none an idle one that
//! did. Only when every connection is busy is the newcomer closed at once. So a flood of idle
//! sockets costs the flooder its own oldest sockets, never the server its file descriptors, and
//! a client with the token still gets its answer.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use troupe_tools::sync::lock;

use super::ServerLimits;
use super::gate::Gate;

/// One open connection, as the accept loop sees it.
struct Conn {
    client: IpAddr,
    /// Requests in progress (a streamed response counts until its body ends).
    in_flight: Arc<AtomicUsize>,
    /// Milliseconds since the server started, at the last byte read or written.
    last_active: Arc<AtomicU64>,
    /// Closes the connection.
    close: Arc<tokio::sync::Notify>,
    /// Already told to close to make room (it still holds its descriptor until it has).
    evicted: Arc<std::sync::atomic::AtomicBool>,
    /// A request with the token came over it: it is closed to make room only after every
    /// idle connection that never carried it.
    authenticated: Arc<std::sync::atomic::AtomicBool>,
}

/// Whose budget a request in progress counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Budget {
    /// The token's holder (there is one credential, the server's token).
    Token,
    /// A client address, for requests without the right token.
    Address(IpAddr),
}

/// What the accept loop and the connections share.
struct Shared {
    limits: ServerLimits,
    started: Instant,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Conn>>,
    /// Requests in progress per budget.
    requests: Mutex<HashMap<Budget, usize>>,
    /// Host and token checks.
    gate: Gate,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes room for a connection from `client`: true when there is (or now will be) room.
    fn admit(&self, client: IpAddr) -> bool {
        let conns = lock(&self.conns);
        let from_client = conns.values().filter(|c| c.client == client).count();
        let evict = |only: Option<IpAddr>| {
            conns
                .values()
                .filter(|c| only.is_none_or(|ip| c.client == ip))
                .filter(|c| {
                    c.in_flight.load(Ordering::Acquire) == 0 && !c.evicted.load(Ordering::Acquire)
                })
                // Connections without the token go first, the longest idle first.
                .min_by_key(|c| {
                    (
                        c.authenticated.load(Ordering::Acquire),
                        c.last_active.load(Ordering::Acquire),
                    )
                })
                .map(|c| {
                    c.evicted.store(true, Ordering::Release);
                    c.close.clone()
                })
        };
        if from_client >= self.limits.max_connections_per_client {
            match evict(Some(client)) {
                Some(close) => close.notify_one(),
                None => return false,
            }
        } else if conns.len() >= self.limits.max_connections {
            match evict(None) {
                Some(close) => close.notify_one(),
                None => return false,
            }
        }
        true
    }

    /// Counts a request in against `budget`; None when that budget is spent.
    fn begin_request(self: &Arc<Self>, budget: Budget) -> Option<RequestGuard> {
        let mut requests = lock(&self.requests);
        let n = requests.entry(budget).or_insert(0);
        if *n >= self.limits.max_requests_per_client {
            return None;
        }
        *n += 1;
        Some(RequestGuard {
            shared: Arc::clone(self),
            budget,
        })
    }
}

/// A request in progress; counted out when dropped.
struct RequestGuard {
    shared: Arc<Shared>,
    budget: Budget,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut requests = lock(&self.shared.requests);
        if let Some(n) = requests.get_mut(&self.budget) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                requests.remove(&self.budget);
            }
        }
    }
}

/// Serves `app` on `listener` until `stop` resolves, within `limits`, answering only requests
/// `gate` lets through.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    gate: Gate,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Every connection holds a file descriptor: never let connections take the ones the rest
    // of troupe needs (stores, logs, child processes), whatever the configured cap.
    let room = descriptor_room();
    if room < limits.max_connections {
        tracing::info!(
            room,
            configured = limits.max_connections,
            "the open-file limit caps connections below serve.max_connections"
        );
    }
    let limits = ServerLimits {
        max_connections: limits.max_connections.min(room),
        ..limits
    };
    let shared = Arc::new(Shared {
        limits,
        started: Instant::now(),
        next_id: AtomicU64::new(0),
        conns: Mutex::new(HashMap::new()),
        requests: Mutex::new(HashMap::new()),
        gate,
    });
    let closing = Arc::new(tokio::sync::Notify::new());
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                // Out of descriptors or a connection reset before accept: keep serving.
                tracing::warn!(%err, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        if !shared.admit(peer.ip()) {
            tracing::debug!(%peer, "connection refused: every connection is busy");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            Arc::clone(&shared),
            Arc::clone(&closing),
            stream,
            peer,
            app.clone(),
        ));
    }
    // Stop accepting; connections with requests in progress finish them (graceful shutdown).
    closing.notify_waiters();
    for _ in 0..500 {
        if lock(&shared.conns).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// How many connections fit in the process's open-file limit, keeping a quarter of it (at
/// least 128) for everything else.
fn descriptor_room() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return usize::MAX;
    }
    let soft = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    soft.saturating_sub((soft / 4).max(128)).max(16)
}

/// One connection: HTTP/1 with upgrades (the WebSocket feed), a header deadline, and a
/// watchdog that closes it when idle or when asked to make room.
async fn serve_connection(
    shared: Arc<Shared>,
    closing: Arc<tokio::sync::Notify>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let last_active = Arc::new(AtomicU64::new(shared.now_ms()));
    let close = Arc::new(tokio::sync::Notify::new());
    let authenticated = Arc::new(std::sync::atomic::AtomicBool::new(false));
    lock(&shared.conns).insert(
        id,
        Conn {
            client: peer.ip(),
            in_flight: Arc::clone(&in_flight),
            last_active: Arc::clone(&last_active),
            close: Arc::clone(&close),
            evicted: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            authenticated: Arc::clone(&authenticated),
        },
    );
    let io = TokioIo::new(Watched {
        inner: stream,
        shared: Arc::clone(&shared),
        last_active: Arc::clone(&last_active),
    });
    let service = {
        let shared = Arc::clone(&shared);
        let in_flight = Arc::clone(&in_flight);
        let client = peer.ip();
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let shared = Arc::clone(&shared);
            let in_flight = Arc::clone(&in_flight);
            let authenticated = Arc::clone(&authenticated);
            let app = app.clone();
            async move {
                let host = request.headers().get(axum::http::header::HOST);
                if !shared
                    .gate
                    .host_allowed(host.map(|h| h.to_str().unwrap_or("\u{0}")))
                {
                    let shown = host
                        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
                        .unwrap_or_default();
                    tracing::debug!(%peer, host = %shown.escape_default(), "refused a request for another host");
                    return Ok::<_, std::convert::Infallible>(shared.gate.misdirected(&shown));
                }
                let budget = if shared.gate.authenticated(request.headers(), request.uri()) {
                    authenticated.store(true, Ordering::Release);
                    Budget::Token
                } else {
                    Budget::Address(client)
                };
                let Some(guard) = shared.begin_request(budget) else {
                    return Ok(too_many_requests());
                };
                in_flight.fetch_add(1, Ordering::AcqRel);
                let busy = Busy {
                    in_flight,
                    _guard: guard,
                };
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                let response = match tower_call(app, request.map(Body::new)).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                // The request stays in progress until its body has been sent.
                Ok(response.map(|body| {
                    Body::new(BusyBody {
                        inner: body,
                        _busy: busy,
                    })
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.header_read_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(connection);
    let idle = shared.limits.idle_timeout;
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    let mut shutting_down = false;
    loop {
        let check = tokio::time::sleep(idle.min(Duration::from_secs(1)));
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%err, %peer, "connection ended with an error");
                }
                break;
            }
            () = close.notified() => {
                tracing::debug!(%peer, "closing an idle connection to make room");
                break;
            }
            () = closing.notified(), if !shutting_down => {
                shutting_down = true;
                connection.as_mut().graceful_shutdown();
            }
            () = check => {
                let quiet = shared.now_ms().saturating_sub(last_active.load(Ordering::Acquire));
                if in_flight.load(Ordering::Acquire) == 0 && quiet >= idle_ms {
                    tracing::debug!(%peer, "closing a connection idle for {quiet} ms");
                    break;
                }
            }
        }
    }
    lock(&shared.conns).remove(&id);
}

/// Calls the router as a service.
async fn tower_call(
    app: Router,
    request: Request<Body>,
) -> Result<Response<Body>, std::convert::Infallible> {
    use hyper::service::Service as _;
    hyper_util::service::TowerToHyperService::new(app)
        .call(request)
        .await
}

fn too_many_requests() -> Response<Body> {
    let body = serde_json::json!({"error": {
        "code": "too_many_requests",
        "message": "this client (this token, or this address for requests without it) already has as many requests in progress as serve.max_requests_per_client allows; wait for some to finish, then retry",
    }});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

/// A request counted in progress; counted out when the response body is done.
struct Busy {
    in_flight: Arc<AtomicUsize>,
    _guard: RequestGuard,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's [`Busy`] until it is dropped.
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for BusyBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A TCP stream that notes when it last moved a byte.
struct Watched {
    inner: tokio::net::TcpStream,
    shared: Arc<Shared>,
    last_active: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        self.last_active
            .store(self.shared.now_ms(), Ordering::Release);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn conn(client: IpAddr, last_active: u64, authenticated: bool) -> Conn {
        Conn {
            client,
            in_flight: Arc::new(AtomicUsize::new(0)),
            last_active: Arc::new(AtomicU64::new(last_active)),
            close: Arc::new(tokio::sync::Notify::new()),
            evicted: Arc::new(AtomicBool::new(false)),
            authenticated: Arc::new(AtomicBool::new(authenticated)),
        }
    }

    #[test]
    fn connections_without_the_token_make_room_first() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let shared = Arc::new(Shared {
            limits: ServerLimits {
                max_connections_per_client: 3,
                max_requests_per_client: 1,
                ..ServerLimits::default()
            },
            started: Instant::now(),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            requests: Mutex::new(HashMap::new()),
            gate: Gate::new(Arc::from("t"), "127.0.0.1:1".parse().unwrap(), &[]),
        });
        {
            let mut conns = lock(&shared.conns);
            // The token holder's connection is the longest idle.
            conns.insert(0, conn(ip, 1, true));
            conns.insert(1, conn(ip, 50, false));
            conns.insert(2, conn(ip, 10, false));
        }
        let evicted = |id: u64| lock(&shared.conns)[&id].evicted.load(Ordering::Acquire);
        assert!(shared.admit(ip));
        assert!(evicted(2) && !evicted(1) && !evicted(0));
        assert!(shared.admit(ip));
        assert!(evicted(1) && !evicted(0));
        // Only then the token holder's.
        assert!(shared.admit(ip));
        assert!(evicted(0));
        assert!(!shared.admit(ip), "nothing idle is left to close");

        // Budgets: the token's and an address's are counted apart.
        let token = shared.begin_request(Budget::Token);
        assert!(token.is_some());
        assert!(shared.begin_request(Budget::Token).is_none());
        let anonymous = shared.begin_request(Budget::Address(ip));
        assert!(anonymous.is_some());
        assert!(shared.begin_request(Budget::Address(ip)).is_none());
        drop(token);
        assert!(shared.begin_request(Budget::Token).is_some());
    }
}
