//! The HTTP API behind `troupe serve`: sessions (create, message, SSE events, approvals, stop)
//! over the [`Troupe`] API, the kanban dashboard routes and the WebSocket event feed over a
//! board [`Store`], `/openapi.json`, and the web dashboard at `/`. Every API route needs the
//! bearer token (the dashboard's page and assets do not: the page asks for the token); the
//! server binds to loopback unless told otherwise.
//!
//! # Layout
//! - this file: [`HttpState`], [`router`], [`serve`]; the `serve:` section is read in
//!   [`crate::settings::serve`].
//! - [`auth`]: the token (config, environment, a generated 0600 file under the troupe home, or
//!   one made for the run alone), its check, CORS.
//! - [`errors`]: the `{"error": {"code", "message"}}` shape and the extractors that use it.
//! - [`sessions`]: the session table, session routes, approvals and `/stop`, and the
//!   per-session event log the SSE stream and the transcript read.
//! - [`boards`]: the dashboard routes (board, tasks, comments, links, dispatch, runs).
//! - [`feed`]: the WebSocket feed of a board's events from a cursor.
//! - [`board_directory`]: the list of boards and creating one.
//! - [`openai`]: the OpenAI-compatible routes under `/v1` (models, chat completions, responses).
//! - [`openapi`]: the OpenAPI 3.1 document, kept beside the route table it describes.
//! - [`dashboard`]: the page at `/` and its built-in assets.
//! - [`plugin_tabs`]: dashboard tabs from plugins: their list, their routes under
//!   `/api/plugins/<name>/` and their assets.
//! - [`listener`]: the accept loop (timeouts, connection and request caps); `gate.rs`: its
//!   `Host` check (421) and whether a request carries the token.

pub mod auth;
pub mod board_directory;
pub mod boards;
pub mod dashboard;
pub mod errors;
pub mod feed;
mod gate;
pub mod listener;
pub mod openai;
pub mod openapi;
pub mod plugin_tabs;
pub mod schedules;
pub mod sessions;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use troupe_actors::model::ModelProvider;
use troupe_kanban::{BoardSlug, Store};

use crate::api::{Troupe, TroupeError};

pub use crate::settings::serve::{DEFAULT_FEED_POLL, DEFAULT_PORT, ServeConfig, ServerLimits};
pub use boards::{DispatchPass, DispatcherPass, PromotePass, WorkerStop};
pub use feed::FeedWake;

/// Path of the plugin tabs' routes.
pub const PLUGIN_ROUTES: &str = "/api/plugins/{plugin}/{*path}";

/// Path of the WebSocket event feed.
pub const FEED_PATH: &str = "/api/plugins/kanban/events";

/// Everything the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct HttpState {
    /// The troupe whose sessions the API drives.
    pub troupe: Troupe,
    /// Sessions opened over HTTP, with their event logs.
    pub sessions: Arc<sessions::SessionTable>,
    /// The board store.
    pub store: Arc<dyn Store>,
    /// How the feed learns of new events.
    pub wake: FeedWake,
    /// One watcher per followed board, shared by all its WebSocket clients.
    pub heads: Arc<feed::BoardHeads>,
    /// What `POST /dispatch` runs.
    pub dispatcher: Arc<dyn DispatchPass>,
    /// The bearer token every request must carry.
    pub token: Arc<str>,
    /// The dashboard token: the API token's rights (but `/v1`) and every stored session; none
    /// means no request has that scope.
    pub dashboard_token: Option<Arc<str>>,
    /// Browser origins allowed by CORS.
    pub cors_origins: Arc<[String]>,
    /// Host names accepted besides the listen address (`serve.allowed_hosts`).
    pub allowed_hosts: Arc<[String]>,
    /// The model of sessions that do not bring a script.
    pub provider: Option<Arc<dyn ModelProvider>>,
    /// The board used when a request gives no `?board=`.
    pub default_board: BoardSlug,
    /// Plugins' slash commands: a message starting with `/<command>` goes to them.
    pub commands: crate::plugins::slash::SlashCommands,
    /// What the OpenAI-compatible `/v1` routes keep between requests.
    pub openai: Arc<openai::OpenAiState>,
    /// Dashboard tabs from plugins, with their routes.
    pub plugin_tabs: Arc<plugin_tabs::PluginTabs>,
    /// Flips to true when the server shuts down, so streams end and shutdown completes.
    pub closing: tokio::sync::watch::Receiver<bool>,
    closing_tx: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("default_board", &self.default_board)
            .field("cors_origins", &self.cors_origins)
            .finish_non_exhaustive()
    }
}

impl HttpState {
    /// State over a troupe and a store, with `token`. Subscribes to the troupe's approval
    /// requests for as long as the troupe lives, so a call needing approval waits for an answer
    /// over HTTP instead of following the unattended policy. Defaults: the feed polls every
    /// [`DEFAULT_FEED_POLL`], dispatch runs [`PromotePass`], no default model, no CORS.
    pub async fn new(
        troupe: Troupe,
        store: Arc<dyn Store>,
        token: impl Into<String>,
    ) -> Result<HttpState, TroupeError> {
        let mut approvals = troupe.approvals().await?;
        tokio::spawn(async move {
            // Holding the subscription is what makes requests wait; the requests themselves
            // are read back through `pending_approvals`.
            while let Some(request) = approvals.next().await {
                tracing::debug!(request_id = %request.request_id, tool = %request.tool, "approval waiting for an HTTP answer");
            }
        });
        let (closing_tx, closing) = tokio::sync::watch::channel(false);
        Ok(HttpState {
            troupe,
            sessions: Arc::new(sessions::SessionTable::default()),
            dispatcher: Arc::new(PromotePass::new(Arc::clone(&store))),
            store,
            wake: FeedWake::Poll(DEFAULT_FEED_POLL),
            heads: Arc::new(feed::BoardHeads::default()),
            token: Arc::from(token.into()),
            dashboard_token: None,
            cors_origins: Arc::from(Vec::new()),
            allowed_hosts: Arc::from(Vec::new()),
            provider: None,
            default_board: BoardSlug::default_board(),
            commands: crate::plugins::slash::SlashCommands::default(),
            openai: Arc::default(),
            plugin_tabs: Arc::default(),
            closing,
            closing_tx: Arc::new(closing_tx),
        })
    }

    /// Sets how the feed learns of new events.
    pub fn with_wake(mut self, wake: FeedWake) -> Self {
        self.wake = wake;
        self
    }

    /// Sets what `POST /dispatch` runs.
    pub fn with_dispatcher(mut self, dispatcher: Arc<dyn DispatchPass>) -> Self {
        self.dispatcher = dispatcher;
        self
    }

    /// Sets the dashboard token (see [`auth::Scope::Dashboard`]).
    pub fn with_dashboard_token(mut self, token: impl Into<String>) -> Self {
        self.dashboard_token = Some(Arc::from(token.into()));
        self
    }

    /// Sets the allowed browser origins.
    pub fn with_cors_origins(mut self, origins: Vec<String>) -> Self {
        self.cors_origins = Arc::from(origins);
        self
    }

    /// Sets the host names accepted besides the listen address (a `Host` header naming
    /// anything else is answered 421, against DNS rebinding).
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = Arc::from(hosts);
        self
    }

    /// Sets the model of sessions created without a script.
    pub fn with_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Sets the slash commands messages may start with.
    pub fn with_commands(mut self, commands: crate::plugins::slash::SlashCommands) -> Self {
        self.commands = commands;
        self
    }

    /// Sets the plugin tabs the dashboard shows and whose routes it serves.
    pub fn with_plugin_tabs(mut self, tabs: Arc<plugin_tabs::PluginTabs>) -> Self {
        self.plugin_tabs = tabs;
        self
    }

    /// Sets the board used when a request names none.
    pub fn with_default_board(mut self, board: BoardSlug) -> Self {
        self.default_board = board;
        self
    }

    /// Tells every open stream and feed to end.
    pub fn close_streams(&self) {
        let _ = self.closing_tx.send(true);
    }
}

/// Builds the router while recording each (method, path) it serves, so the OpenAPI test can
/// compare the document with what is really routed.
struct RouteTable {
    router: Router<HttpState>,
    routes: Vec<(&'static str, &'static str)>,
}

impl RouteTable {
    fn at(
        mut self,
        method: &'static str,
        path: &'static str,
        handler: MethodRouter<HttpState>,
    ) -> Self {
        self.routes.push((method, path));
        self.router = self.router.route(path, handler);
        self
    }
}

/// Every route: `(method, path)`, in the order they are declared.
fn table() -> RouteTable {
    let t = RouteTable {
        router: Router::new(),
        routes: Vec::new(),
    };
    t.at("get", "/openapi.json", get(openapi::serve_document))
        // Sessions and approvals.
        .at("post", "/api/sessions", post(sessions::create))
        .at("get", "/api/sessions", get(sessions::list))
        .at("get", "/api/sessions/{id}", get(sessions::show))
        .at("delete", "/api/sessions/{id}", delete(sessions::close))
        .at(
            "post",
            "/api/sessions/{id}/messages",
            post(sessions::send_message),
        )
        .at("get", "/api/sessions/{id}/events", get(sessions::events))
        .at(
            "get",
            "/api/sessions/{id}/transcript",
            get(sessions::transcript),
        )
        .at(
            "get",
            "/api/sessions/{id}/approvals",
            get(sessions::session_approvals),
        )
        .at("post", "/api/sessions/{id}/stop", post(sessions::stop))
        .at("get", "/api/store/sessions", get(sessions::stored::list))
        .at("get", "/api/approvals", get(sessions::all_approvals))
        .at(
            "post",
            "/api/approvals/{request_id}",
            post(sessions::answer),
        )
        // The kanban dashboard.
        .at(
            "get",
            "/api/plugins/kanban/boards",
            get(board_directory::list),
        )
        .at(
            "post",
            "/api/plugins/kanban/boards",
            post(board_directory::create),
        )
        .at("get", "/api/plugins/kanban/board", get(boards::board))
        .at("get", "/api/plugins/kanban/tasks", get(boards::list_tasks))
        .at(
            "post",
            "/api/plugins/kanban/tasks",
            post(boards::create_task),
        )
        .at(
            "delete",
            "/api/plugins/kanban/tasks",
            delete(boards::delete_tasks),
        )
        .at(
            "post",
            "/api/plugins/kanban/tasks/bulk",
            post(boards::bulk_patch),
        )
        .at(
            "get",
            "/api/plugins/kanban/tasks/{id}",
            get(boards::show_task),
        )
        .at(
            "patch",
            "/api/plugins/kanban/tasks/{id}",
            patch(boards::patch_task),
        )
        .at(
            "post",
            "/api/plugins/kanban/tasks/{id}/comments",
            post(boards::add_comment),
        )
        .at(
            "post",
            "/api/plugins/kanban/tasks/{id}/review",
            post(boards::review_task),
        )
        .at("get", "/api/plugins/kanban/links", get(boards::list_links))
        .at("post", "/api/plugins/kanban/links", post(boards::link))
        .at(
            "delete",
            "/api/plugins/kanban/links",
            delete(boards::unlink),
        )
        .at(
            "post",
            "/api/plugins/kanban/dispatch",
            post(boards::dispatch),
        )
        .at(
            "get",
            "/api/plugins/kanban/runs/{id}",
            get(boards::show_run),
        )
        .at(
            "post",
            "/api/plugins/kanban/runs/{id}/terminate",
            post(boards::terminate_run),
        )
        // Scheduled jobs.
        .at("get", "/api/schedules", get(schedules::list))
        .at("post", "/api/schedules", post(schedules::create))
        .at("get", "/api/schedules/{id}", get(schedules::show))
        .at("patch", "/api/schedules/{id}", patch(schedules::update))
        .at("delete", "/api/schedules/{id}", delete(schedules::remove))
        .at("post", "/api/schedules/{id}/pause", post(schedules::pause))
        .at(
            "post",
            "/api/schedules/{id}/resume",
            post(schedules::resume),
        )
        .at("post", "/api/schedules/{id}/run", post(schedules::run_now))
        .at(
            "get",
            "/api/schedules/{id}/history",
            get(schedules::history),
        )
        .at("get", FEED_PATH, get(feed::upgrade))
        // Dashboard tabs from plugins, and their routes.
        .at("get", "/api/dashboard/tabs", get(plugin_tabs::list))
        .at("get", PLUGIN_ROUTES, get(plugin_tabs::call))
        .at("post", PLUGIN_ROUTES, post(plugin_tabs::call))
        .at("put", PLUGIN_ROUTES, put(plugin_tabs::call))
        .at("patch", PLUGIN_ROUTES, patch(plugin_tabs::call))
        .at("delete", PLUGIN_ROUTES, delete(plugin_tabs::call))
        // The OpenAI-compatible API.
        .at("get", "/v1/models", get(openai::models::list))
        .at("get", "/v1/models/{*model}", get(openai::models::show))
        .at(
            "post",
            "/v1/chat/completions",
            post(openai::chat::completions),
        )
        .at("post", "/v1/responses", post(openai::responses::create))
        .at("get", "/v1/responses/{id}", get(openai::responses::show))
}

/// Every `(method, path)` the router serves.
pub fn routes() -> Vec<(&'static str, &'static str)> {
    table().routes
}

/// The whole API as a router (auth, CORS and JSON 404/405 included), with the dashboard page
/// merged in after the auth layer so that it loads without the token; tests may call it
/// without a socket.
pub fn router(state: HttpState) -> Router {
    table()
        .router
        .fallback(errors::route_not_found)
        .method_not_allowed_fallback(errors::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::cors,
        ))
        .merge(dashboard::router())
        .with_state(state)
}

/// A server that is listening. Dropping it, or [`RunningServer::shutdown`], stops it.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    state: HttpState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl RunningServer {
    /// The address it really listens on (the port is filled in when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Boards whose events a watcher follows now (one per board, however many clients).
    pub fn watched_boards(&self) -> usize {
        self.state.heads.watched()
    }

    /// Waits until the server ends on its own (an I/O failure) or is shut down elsewhere.
    pub async fn wait(mut self) -> std::io::Result<()> {
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }

    /// Ends every stream, stops accepting connections and waits for open requests to end.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.state.close_streams();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.state.close_streams();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `addr` and serves the API on it in a background task, with the default
/// [`ServerLimits`]. A non-loopback address is allowed but logged as a warning, since anyone
/// who can reach it may try the token.
pub async fn serve(state: HttpState, addr: SocketAddr) -> std::io::Result<RunningServer> {
    serve_with_limits(state, addr, ServerLimits::default()).await
}

/// [`serve`] with the timeouts and caps of the `serve:` section.
pub async fn serve_with_limits(
    state: HttpState,
    addr: SocketAddr,
    limits: ServerLimits,
) -> std::io::Result<RunningServer> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the HTTP API is listening beyond this machine; keep the token secret and prefer a TLS proxy in front");
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    state
        .sessions
        .set_limits(limits.max_sessions, limits.session_idle_timeout);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let app = router(state.clone());
    let closing = state.clone();
    let gate = gate::Gate::new(Arc::clone(&state.token), addr, &state.allowed_hosts)
        .with_dashboard_token(state.dashboard_token.clone());
    let task = tokio::spawn(listener::run(listener, app, limits, gate, async move {
        let _ = stop_rx.await;
        closing.close_streams();
    }));
    tracing::info!(%addr, "troupe HTTP API listening");
    Ok(RunningServer {
        addr,
        state,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// A request's well-formed W3C `traceparent` header, if it has one.
pub(crate) fn traceparent(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| troupe_actors::trace::is_traceparent(t))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_declared_once() {
        let routes = routes();
        let mut seen = std::collections::HashSet::new();
        for route in &routes {
            assert!(seen.insert(*route), "{route:?} declared twice");
        }
    }
}
