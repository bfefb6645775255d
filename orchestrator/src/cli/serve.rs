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
use troupe_actors::model::{DEFAULT_MODEL, ModelProvider, OpenAiConfig, OpenAiProvider};
use troupe_actors::session::SessionConfig;
use troupe_actors::supervisor::{ApprovalConfig, DefaultRules};
use troupe_kanban::store::{PostgresStore, StoreError};
use troupe_kanban::{BoardSlug, DispatcherHandle};
use troupe_tools::Registry;
use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};

use crate::api::{Troupe, TroupeConfig};
use crate::config::Config;
use crate::http::auth::{TOKEN_ENV, TokenSource, resolve_token};
use crate::http::{DispatcherPass, FeedWake, HttpState, PromotePass, ServeConfig};
use crate::kanban_api::Kanban;
use crate::kanban_config::{KanbanSettings, StoreLocation, open_location, troupe_home};

/// Exit code for bad flags or config.
const EXIT_USAGE: i32 = 2;
/// Exit code when the server could not start or failed.
const EXIT_FAILED: i32 = 1;

/// `troupe serve`: the HTTP API for sessions, approvals and boards.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1; anything else is reachable from the network).
    #[arg(long, value_name = "IP")]
    pub bind: Option<IpAddr>,
    /// Port to listen on (default 8642; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// The board store: a directory (SQLite) or a postgres:// URL. Overrides kanban.store.
    #[arg(long, env = "TROUPE_KANBAN_STORE", value_name = "URL|PATH")]
    pub store: Option<String>,
    /// The board routes use when a request names none.
    #[arg(long, env = "TROUPE_KANBAN_BOARD", value_name = "SLUG")]
    pub board: Option<String>,
    /// Run no dispatcher here even when troupe.yaml has profiles: `troupe kanban worker`
    /// processes on the same store claim and run the tasks.
    #[arg(long)]
    pub no_dispatch: bool,
}

/// The dispatch note of a server started with `--no-dispatch`.
const NO_DISPATCH_NOTE: &str = "this server was started with --no-dispatch, so it claims nothing: ready tasks wait for a `troupe kanban worker` process on the same store. Restart `troupe serve` without --no-dispatch to run them here with the profiles of troupe.yaml";

/// Runs `troupe serve`; returns the exit code.
pub async fn run(args: ServeArgs) -> i32 {
    match run_inner(args).await {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("troupe serve: {message}");
            code
        }
    }
}

async fn run_inner(args: ServeArgs) -> Result<(), (i32, String)> {
    let usage = |message: String| (EXIT_USAGE, message);
    let failed = |message: String| (EXIT_FAILED, message);
    let config =
        Config::load_or_default(args.config.as_deref()).map_err(|e| usage(e.to_string()))?;
    let mut serve =
        ServeConfig::from_value(config.section("serve")).map_err(|e| usage(e.to_string()))?;
    if let Some(bind) = args.bind {
        serve.bind = bind;
    }
    if let Some(port) = args.port {
        serve.port = port;
    }
    let mut settings = KanbanSettings::from_config(&config).map_err(|e| usage(e.to_string()))?;
    if let Some(raw) = &args.store {
        settings.store = StoreLocation::parse(raw).map_err(|e| usage(format!("--store: {e}")))?;
    }
    let board = match &args.board {
        Some(raw) => BoardSlug::parse(raw.trim()).map_err(|e| usage(format!("--board: {e}")))?,
        None => BoardSlug::default_board(),
    };
    let home = troupe_home();
    let from_env = std::env::var(TOKEN_ENV).ok();
    let (token, source) = resolve_token(serve.token.as_deref(), from_env.as_deref(), &home)
        .map_err(|e| usage(e.to_string()))?;

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

    let approvals = ApprovalConfig::from_value(config.section("approvals")).map_err(usage)?;
    let delegation =
        crate::delegation::delegation_config(&config).map_err(|e| usage(e.to_string()))?;
    let builtins = Builtins::start(BuiltinConfig::default()).map_err(|e| failed(e.to_string()))?;
    let registry = Registry::with_tools(core_tools(&builtins));
    for (name, includes) in &config.toolsets.composites {
        registry.define_toolset(name.clone(), includes.clone());
    }
    let rules = DefaultRules::new(approvals.require_approval.iter().cloned())
        .with_builtins(Arc::clone(&builtins));
    let mut session = SessionConfig {
        tool_search: config.tool_search.clone(),
        context_length: config.model.context_length,
        cwd: builtins.config().default_cwd.clone(),
        ..SessionConfig::default()
    };
    // Sessions served here take later messages, so delegations run in the background and
    // their results arrive as a message between turns (progress on the session's SSE stream).
    crate::delegation::enable_delegation(&registry, &mut session, delegation, true);
    let troupe = Troupe::start(
        TroupeConfig::new(Arc::clone(&registry))
            .with_approvals(approvals)
            .with_rules(Arc::new(rules))
            .with_session(session.clone()),
    )
    .map_err(|e| failed(e.to_string()))?;

    // The dispatcher, when there are profiles to run tasks with and it is not turned off.
    let dispatcher = if args.no_dispatch || settings.profiles.is_empty() {
        None
    } else {
        // A worker's task ends with its turn, so its delegations wait for their results.
        let worker_session = SessionConfig {
            background_delegation: false,
            ..session.clone()
        };
        let profiles = settings
            .build_profiles(&registry, &config.model, &worker_session, None)
            .map_err(|e| {
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

    let mut state = HttpState::new(troupe.clone(), Arc::clone(&store), token)
        .await
        .map_err(|e| failed(e.to_string()))?
        .with_wake(wake)
        .with_cors_origins(serve.cors_origins.clone())
        .with_default_board(board.clone());
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
    if let Some(provider) = provider(&config).map_err(usage)? {
        state = state.with_provider(provider);
    }
    let server = crate::http::serve(state, serve.addr())
        .await
        .map_err(|e| failed(format!("cannot listen on {}: {e}", serve.addr())))?;
    let addr = server.local_addr();
    eprintln!(
        "troupe serve: listening on http://{addr} ({})",
        settings.store.describe()
    );
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
    }
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
    troupe.close().await;
    result.map_err(|e| failed(format!("the server failed: {e}")))
}

async fn stop_dispatcher(handle: &DispatcherHandle) {
    handle.stop().await;
    let stats = handle.stats();
    eprintln!(
        "troupe serve: dispatcher stopped: {} claimed, {} completed, {} blocked, {} failed",
        stats.claimed, stats.completed, stats.blocked, stats.failed
    );
}

/// The model of sessions created without a script: `model.base_url` or `TROUPE_BASE_URL`, when
/// set; otherwise sessions must bring a script.
fn provider(config: &Config) -> Result<Option<Arc<dyn ModelProvider>>, String> {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let Some(base_url) = config
        .model
        .base_url
        .clone()
        .or_else(|| env("TROUPE_BASE_URL"))
    else {
        return Ok(None);
    };
    let model = config
        .model
        .model
        .clone()
        .or_else(|| env("TROUPE_MODEL"))
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    let mut openai = OpenAiConfig::new(base_url, model);
    openai.settings = config.model.provider.clone();
    openai.api_key = config
        .model
        .api_key
        .clone()
        .or_else(|| config.model.api_key_env.as_deref().and_then(env))
        .or_else(|| env("TROUPE_API_KEY"));
    OpenAiProvider::new(openai)
        .map(|p| Some(Arc::new(p) as Arc<dyn ModelProvider>))
        .map_err(|e| e.to_string())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
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
