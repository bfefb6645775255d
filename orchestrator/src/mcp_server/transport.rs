//! The two ways a client reaches `troupe mcp serve`: stdio (the client started us; one
//! connection, until it hangs up or a signal) and streamable HTTP (`--http ADDR`, every request
//! behind the server's bearer token, resolved as `troupe serve` resolves it; one connection per
//! MCP session), which also serves the approval queue. With stdio, `--queue ADDR` serves the
//! queue alone. All end on Ctrl-C or SIGTERM; the caller closes the runtime.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::McpServer;
use crate::http::auth::{constant_time_eq, presented_token_in};

/// The path the MCP endpoint is served at.
pub(crate) const HTTP_PATH: &str = "/mcp";

/// Serves one client over stdin/stdout until it hangs up or `stop` fires.
pub(crate) async fn serve_stdio(server: &McpServer, stop: CancellationToken) -> Result<(), String> {
    let running = server
        .connection()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP handshake on stdin/stdout failed: {e}"))?;
    let ct = running.cancellation_token();
    tokio::select! {
        quit = running.waiting() => {
            if let Err(error) = quit {
                tracing::debug!(%error, "mcp serve: the stdio connection ended");
            }
        }
        _ = stop.cancelled() => ct.cancel(),
    }
    Ok(())
}

/// Serves MCP over streamable HTTP on `listener` until `stop` fires; every request must carry
/// `Authorization: Bearer <token>`.
pub(crate) async fn serve_http(
    server: McpServer,
    listener: tokio::net::TcpListener,
    token: String,
    extra_hosts: Vec<String>,
    stop: CancellationToken,
) -> Result<(), String> {
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = stop.child_token();
    let mut hosts = allowed_hosts(local);
    hosts.extend(extra_hosts);
    config.allowed_hosts = hosts;
    let queue = super::queue::router(server.troupe().clone());
    let server = Arc::new(server);
    let service = StreamableHttpService::new(
        move || Ok(server.connection()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new()
        .nest_service(HTTP_PATH, service)
        .merge(queue);
    serve_guarded(listener, router, token, stop).await
}

/// Serves the approval queue alone on `listener` (stdio's `--queue`) until `stop` fires.
pub(crate) async fn serve_queue(
    server: &McpServer,
    listener: tokio::net::TcpListener,
    token: String,
    stop: CancellationToken,
) -> Result<(), String> {
    let queue = super::queue::router(server.troupe().clone());
    serve_guarded(listener, queue, token, stop).await
}

/// Serves `router` with every request behind the token.
async fn serve_guarded(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    token: String,
    stop: CancellationToken,
) -> Result<(), String> {
    let router = router.layer(axum::middleware::from_fn_with_state(
        Arc::new(token),
        require_bearer,
    ));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
        .map_err(|e| format!("the HTTP server failed: {e}"))
}

/// Host headers the endpoint answers: the listening address, and `localhost` on loopback
/// (anything else may be a DNS-rebinding page); `--allowed-host` adds the names a server bound
/// elsewhere is reached by.
fn allowed_hosts(local: SocketAddr) -> Vec<String> {
    let mut hosts = vec![local.ip().to_string()];
    if local.ip().is_loopback() {
        hosts.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
    }
    hosts
}

/// Checks an `--allowed-host` value: a host name or address, optionally with `:port`.
pub(crate) fn check_allowed_host(host: &str) -> Result<String, String> {
    let host = host.trim();
    let fine = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if fine {
        Ok(host.to_ascii_lowercase())
    } else {
        Err(format!(
            "--allowed-host {host:?}: give the host name (or address) clients put in the URL, \
             optionally with :PORT, e.g. --allowed-host troupe.example.org"
        ))
    }
}

/// Refuses every request without the server's token.
async fn require_bearer(
    State(token): State<Arc<String>>,
    request: Request,
    next: Next,
) -> Response {
    match presented_token_in(request.headers(), request.uri()) {
        Some(presented) if constant_time_eq(presented.as_bytes(), token.as_bytes()) => {
            next.run(request).await
        }
        Some(_) => refuse("the token is wrong; use the one `troupe mcp serve` was started with"),
        None => refuse(
            "this endpoint needs the server's token: send `Authorization: Bearer <token>` \
             (serve.token, TROUPE_SERVE_TOKEN, or the token `troupe mcp serve` printed)",
        ),
    }
}

fn refuse(message: &str) -> Response {
    let body = serde_json::json!({"error": {"code": "unauthorized", "message": message}});
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}
