//! `troupe serve`: runs the HTTP API (see [`crate::http`]) until Ctrl-C or SIGTERM. It opens
//! the board store the way `troupe kanban` does (`--store`, `TROUPE_KANBAN_STORE`,
//! `kanban.store`, else `<troupe home>/kanban`), starts a troupe with the built-in tools, and
//! listens on 127.0.0.1:8642 unless `--bind`/`--port` or the `serve:` section say otherwise.
//! When troupe.yaml has `profiles:` it also runs a kanban dispatcher for the served board (as
//! `troupe kanban worker` would), unless `--no-dispatch` leaves that to worker processes.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use troupe_kanban::store::{PostgresStore, StoreError};
use troupe_kanban::{BoardSlug, DispatcherHandle};

use super::error::CliError;
use crate::http::auth::{
    DASHBOARD_TOKEN_ENV, MIN_TOKEN_CHARS, TOKEN_ENV, TokenSource, resolve_dashboard_token,
    resolve_token,
};
use crate::http::{DispatcherPass, FeedWake, HttpState, PromotePass, ServeConfig};
use crate::kanban_api::Kanban;
use crate::runtime::{Runtime, RuntimeOptions};
use crate::settings::Settings;
use crate::settings::kanban::{KanbanSettings, StoreLocation, open_location};

use super::error::{EXIT_BAD_INPUT as EXIT_USAGE, EXIT_DONE, EXIT_FAILED};

/// `troupe serve`: the HTTP API for sessions, approvals and boards.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1; anything else is reachable from the network).
    #[arg(long, value_name = "IP")]
    pub(crate) bind: Option<IpAddr>,
    /// Port to listen on (default 8642; 0 picks a free one).
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// The board store: a directory (SQLite) or a postgres:// URL. Overrides kanban.store.
    #[arg(long, env = "TROUPE_KANBAN_STORE", value_name = "URL|PATH")]
    pub(crate) store: Option<String>,
    /// The board routes use when a request names none.
    #[arg(long, env = "TROUPE_KANBAN_BOARD", value_name = "SLUG")]
    pub(crate) board: Option<String>,
    /// Run no dispatcher here even when troupe.yaml has profiles: `troupe kanban worker`
    /// processes on the same store claim and run the tasks.
    #[arg(long)]
    pub(crate) no_dispatch: bool,
}

/// The dispatch note of a server started with `--no-dispatch`.
const NO_DISPATCH_NOTE: &str = "this server was started with --no-dispatch, so it claims nothing: ready tasks wait for a `troupe kanban worker` process on the same store. Restart `troupe serve` without --no-dispatch to run them here with the profiles of troupe.yaml";

/// Runs `troupe serve`; returns the exit code.
pub(crate) async fn run(args: ServeArgs) -> i32 {
    let result = run_inner(args)
        .await
        .map(|()| EXIT_DONE)
        .map_err(|(code, message)| CliError { code, message });
    super::error::report("serve", result)
}

async fn run_inner(args: ServeArgs) -> Result<(), (i32, String)> {
    let usage = |message: String| (EXIT_USAGE, message);
    let failed = |message: String| (EXIT_FAILED, message);
    let config =
        Settings::load_or_default(args.config.as_deref()).map_err(|e| usage(e.to_string()))?;
    let mut serve = config.serve.clone();
    if let Some(bind) = args.bind {
        serve.bind = bind;
    }
    if let Some(port) = args.port {
        serve.port = port;
    }
    let mut settings = config.kanban.clone();
    if let Some(raw) = &args.store {
        settings.store = StoreLocation::parse(raw).map_err(|e| usage(format!("--store: {e}")))?;
    }
    let board = match &args.board {
        Some(raw) => BoardSlug::parse(raw.trim()).map_err(|e| usage(format!("--board: {e}")))?,
        None => BoardSlug::default_board(),
    };
    let home = config.home.path().to_path_buf();
    let from_env = std::env::var(TOKEN_ENV).ok();
    // Whether the commands troupe runs are kept from reading troupe's home (the confinement
    // decides it): only then may the token live in a file there.
    // Hooks and MCP servers run on this machine whatever the backend, so only the Landlock
    // boundary (which covers them too) keeps them out.
    let commands_cannot_read_home =
        crate::runtime::backends::boundary(&config.builtins, &home, config.path.as_deref())
            .is_ok_and(|boundary| boundary.policy.is_some());
    let (token, source) = resolve_token(
        serve.token.as_deref(),
        from_env.as_deref(),
        &home,
        commands_cannot_read_home,
    )
    .map_err(|e| usage(e.to_string()))?;
    // Masked wherever it shows up (a tool result, a trace, the session store).
    troupe_tools::builtin::redact::remember_secret(&token);
    // The people's token: it reads every stored session, which /v1 clients holding the API
    // token may not.
    let dashboard = resolve_dashboard_token(
        serve.dashboard_token.as_deref(),
        std::env::var(DASHBOARD_TOKEN_ENV).ok().as_deref(),
        &home,
        commands_cannot_read_home,
        &token,
    )
    .map_err(|e| usage(e.to_string()))?;
    troupe_tools::builtin::redact::remember_secret(&dashboard.0);

    // The store: a PostgreSQL store is kept by its own type too, so the feed can LISTEN.
    let (store, wake) = match &settings.store {
        StoreLocation::Postgres(url) => {
            let pg = Arc::new(
                PostgresStore::connect(url)
                    .await
                    .map_err(|e| failed(format!("{}: {e}", settings.store.describe())))?,
            );
            let store: Arc<dyn troupe_kanban::Store> = pg.clone();
            (store, FeedWake::Postgres(pg))
        }
        location @ StoreLocation::Sqlite(_) => (
            open_location(location)
                .await
                .map_err(|e| failed(format!("{}: {e}", location.describe())))?,
            FeedWake::Poll(serve.feed_poll),
        ),
    };

    // Sessions served here take later messages, so delegations run in the background and
    // their results arrive as a message between turns (progress on the session's SSE stream).
    let runtime = Runtime::start(config, RuntimeOptions::default())
        .await
        .map_err(|e| {
            let e = CliError::from(e);
            (e.code, e.message)
        })?;
    runtime.report_notices("troupe serve");
    let result = serve_with(
        &args, &runtime, settings, board, serve, store, wake, token, source, dashboard,
    )
    .await;
    runtime.close().await;
    result
}

/// Serves until a signal, on a started runtime; the caller closes it.
#[allow(
    clippy::too_many_arguments,
    reason = "the pieces run_inner checked, handed over once"
)]
async fn serve_with(
    args: &ServeArgs,
    runtime: &Runtime,
    settings: KanbanSettings,
    board: BoardSlug,
    serve: ServeConfig,
    store: Arc<dyn troupe_kanban::Store>,
    wake: FeedWake,
    token: String,
    source: TokenSource,
    dashboard: (String, TokenSource),
) -> Result<(), (i32, String)> {
    let usage = |message: String| (EXIT_USAGE, message);
    let failed = |message: String| (EXIT_FAILED, message);
    let troupe = runtime.troupe().clone();
    // The dispatcher, when there are profiles to run tasks with and it is not turned off.
    let dispatcher = if args.no_dispatch || settings.profiles.is_empty() {
        None
    } else {
        let profiles = runtime.worker_profiles(None).map_err(|e| {
            usage(format!(
                "{e}; or pass --no-dispatch to serve without running tasks here"
            ))
        })?;
        let kanban = match &settings.store {
            // Its own connection, so the dispatcher wakes on LISTEN/NOTIFY.
            StoreLocation::Postgres(_) => Kanban::open(settings.clone())
                .await
                .map_err(|e| failed(format!("{}: {e}", settings.store.describe())))?,
            StoreLocation::Sqlite(_) => {
                Kanban::new(Arc::clone(&store)).with_settings(settings.clone())
            }
        };
        match store.board(&board).await {
            Ok(_) => {}
            Err(StoreError::BoardNotFound { .. }) => {
                return Err(usage(format!(
                    "the board {board} does not exist, so no dispatcher can serve it: create it with `troupe kanban boards create {board}`, pick another with --board, or pass --no-dispatch"
                )));
            }
            Err(e) => return Err(failed(format!("board {board}: {e}"))),
        }
        let handle = kanban
            .start_dispatcher(
                &troupe,
                board.clone(),
                profiles.clone(),
                settings.dispatcher_config(),
            )
            .await
            .map_err(|e| failed(format!("cannot start the dispatcher: {e}")))?;
        Some((handle, profiles.names().join(", ")))
    };

    // Shown once below when it lives nowhere else (an ephemeral token); dropped otherwise.
    let shown_token = matches!(source, TokenSource::Ephemeral { .. }).then(|| token.clone());
    let mut state = HttpState::new(troupe.clone(), Arc::clone(&store), token)
        .await
        .map_err(|e| failed(e.to_string()))?
        .with_wake(wake)
        .with_cors_origins(serve.cors_origins.clone())
        .with_allowed_hosts(serve.allowed_hosts.clone())
        .with_dashboard_token(dashboard.0.clone())
        .with_default_board(board.clone())
        .with_commands(runtime.plugins().commands().clone());
    // Dashboard tabs from plugins; the achievements tab counts the stored sessions.
    let plugin_tabs = Arc::new(crate::http::plugin_tabs::PluginTabs::from_catalog(
        runtime.plugins().catalog(),
        runtime.plugins().secrets(),
        troupe.session_store().cloned(),
    ));
    for tab in plugin_tabs.tabs() {
        if let Err(problem) = &tab.part {
            eprintln!(
                "troupe serve: the dashboard tab of plugin '{}' is disabled: {problem}",
                tab.name
            );
        }
    }
    state = state.with_plugin_tabs(Arc::clone(&plugin_tabs));
    match &dispatcher {
        Some((handle, _)) => {
            state = state.with_dispatcher(Arc::new(DispatcherPass::new(
                vec![handle.clone()],
                Arc::clone(&store),
            )));
        }
        None if args.no_dispatch => {
            state = state.with_dispatcher(Arc::new(
                PromotePass::new(Arc::clone(&store)).with_note(NO_DISPATCH_NOTE),
            ));
        }
        None => {}
    }
    if let Some(provider) = troupe.default_provider() {
        state = state.with_provider(provider);
    }
    // Old sessions go first (`sessions.keep_days`); those a previous run left open come back
    // before the first request.
    let keep_days = runtime.config().sessions.keep_days;
    if let (Some(store), Some(days)) = (troupe.session_store(), keep_days) {
        match store.prune(days).await {
            Ok(0) => {}
            Ok(pruned) => eprintln!(
                "troupe serve: removed {pruned} stored session(s) older than {days} day(s)"
            ),
            Err(error) => eprintln!("troupe serve: could not prune old sessions: {error}"),
        }
    }
    let reopened = crate::http::sessions::reopen_stored(&state).await;
    let server = crate::http::serve_with_limits(state, serve.addr(), serve.limits)
        .await
        .map_err(|e| failed(format!("cannot listen on {}: {e}", serve.addr())))?;
    let addr = server.local_addr();
    // The first scan runs in the background: the page shows what it has so far.
    plugin_tabs.start();
    eprintln!(
        "troupe serve: listening on http://{addr} ({})",
        settings.store.describe()
    );
    eprintln!("troupe serve: dashboard at http://{addr}/ (sign in with the token)");
    if let Some(sessions) = troupe.session_store() {
        eprintln!(
            "troupe serve: sessions kept in the {}; {reopened} reopened",
            sessions.describe()
        );
    }
    match source {
        TokenSource::Config => eprintln!("troupe serve: token from serve.token in the config"),
        TokenSource::Environment => eprintln!("troupe serve: token from {TOKEN_ENV}"),
        TokenSource::File(path) => eprintln!("troupe serve: token in {}", path.display()),
        TokenSource::Generated(path) => {
            eprintln!(
                "troupe serve: generated a token into {} (mode 0600)",
                path.display()
            )
        }
        TokenSource::Ephemeral { ignored } => {
            if let Some(path) = ignored {
                eprintln!(
                    "troupe serve: ignoring the token file {}: the commands sessions run could read it; delete it",
                    path.display()
                );
            }
            eprintln!(
                "troupe serve: this run's token (shown once, gone when the server stops; no file is written because the commands sessions run could read it): {}",
                shown_token.as_deref().unwrap_or_default()
            );
            eprintln!(
                "troupe serve: to keep one token across runs, set {TOKEN_ENV} to a random string of at least {MIN_TOKEN_CHARS} characters before `troupe serve`"
            );
        }
    }
    report_dashboard_token(&dashboard);
    match &dispatcher {
        Some((_, names)) => eprintln!(
            "troupe serve: dispatching board {board} with profiles {names}; --no-dispatch leaves it to `troupe kanban worker`"
        ),
        None if args.no_dispatch => eprintln!(
            "troupe serve: --no-dispatch: no dispatcher here; `troupe kanban worker` processes run the tasks"
        ),
        None => eprintln!(
            "troupe serve: no profiles in troupe.yaml, so no dispatcher runs here; add a profiles: section to run tasks from this server"
        ),
    }
    if !serve.cors_origins.is_empty() {
        eprintln!(
            "troupe serve: CORS open to {}",
            serve.cors_origins.join(", ")
        );
    }
    shutdown_signal().await;
    eprintln!("troupe serve: shutting down");
    let result = server.shutdown().await;
    if let Some((handle, _)) = &dispatcher {
        // Running tasks are handed back to the board, for this server's next start or a worker.
        stop_dispatcher(handle).await;
    }
    result.map_err(|e| failed(format!("the server failed: {e}")))
}

/// Says where the dashboard token comes from (showing it once when it lives nowhere else).
fn report_dashboard_token((token, source): &(String, TokenSource)) {
    let what = "the dashboard token (every stored session; give it to people, not to /v1 clients)";
    match source {
        TokenSource::Config => {
            eprintln!("troupe serve: {what} is serve.dashboard_token in the config")
        }
        TokenSource::Environment => eprintln!("troupe serve: {what} is {DASHBOARD_TOKEN_ENV}"),
        TokenSource::File(path) => eprintln!("troupe serve: {what} is in {}", path.display()),
        TokenSource::Generated(path) => eprintln!(
            "troupe serve: {what} was generated into {} (mode 0600)",
            path.display()
        ),
        TokenSource::Ephemeral { ignored } => {
            if let Some(path) = ignored {
                eprintln!(
                    "troupe serve: ignoring the dashboard token file {}: the commands sessions run could read it; delete it",
                    path.display()
                );
            }
            eprintln!(
                "troupe serve: {what}, for this run only (set {DASHBOARD_TOKEN_ENV} to keep one): {token}"
            );
        }
    }
}

async fn stop_dispatcher(handle: &DispatcherHandle) {
    handle.stop().await;
    let stats = handle.stats();
    eprintln!(
        "troupe serve: dispatcher stopped: {} claimed, {} completed, {} blocked, {} failed",
        stats.claimed, stats.completed, stats.blocked, stats.failed
    );
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
