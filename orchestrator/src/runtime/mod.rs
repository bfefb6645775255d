//! One runtime from a checked `troupe.yaml`, behind every entry point (`troupe chat`, `troupe
//! serve` and its board workers, `troupe kanban dispatch|worker`, `troupe demo`, and programs
//! through [`Troupe::from_config`](crate::Troupe::from_config)).
//!
//! [`Runtime::start`] only assembles what the checked [`Settings`] say, once per process:
//! - the config seals ([`crate::config_seal`]): an unaccepted change to troupe.yaml or a hook
//!   script stops the start;
//! - the plugins and `hooks:` ([`crate::plugins::Plugins::contribution`]: hooks, board hooks,
//!   tool sources) and the trace exporter ([`crate::observability`]);
//! - the boundary and the terminal backend ([`backends`]), then the built-in tools, configured
//!   from `terminal:` and `code_execution:` ([`Settings::builtins`]), and the session store
//!   (`sessions:`) with `session_search`;
//! - the MCP servers of `mcp_servers:`, started once and shared by every session and worker,
//!   stopped when the runtime closes. A server that cannot start is left out and reported as a
//!   [`StartupNotice`] (the runtime starts without it);
//! - extra tools: [`ToolSource`]s (plugins) and plain [`ToolDef`]s from [`RuntimeOptions`];
//! - `toolsets.define` composites, `delegate_task` with the `delegation:` limits, tool search
//!   settings, approvals (`approvals:`) and hooks ([`RuntimeOptions::with_hook`]);
//! - the `profiles:` of the config, checked (a toolset nobody provides is a config error listing
//!   the toolsets that exist), for sessions that name a profile and for board workers
//!   ([`Runtime::worker_profiles`]);
//! - task workspaces for board workers ([`workspaces`]: scratch, `dir:`, git worktrees);
//! - the [`Troupe`] (actor system, supervisor) those sessions and workers run in.
//!
//! `execute_code` scripts reach tools through the session's own tool runner (same view, hooks
//! and approvals as the model's calls): that wiring lives in the actor runtime and holds for
//! every session the troupe opens, workers and subagents included.

pub mod backends;
mod worker_profiles;
pub mod workspaces;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use troupe_actors::hooks::{Hook, HookRegistry};
use troupe_actors::model::ModelProvider;
use troupe_actors::session::SessionConfig;
use troupe_actors::supervisor::{ApprovalRules, DefaultRules};
use troupe_kanban::hooks::KanbanHook;
use troupe_kanban::profiles::Profiles;
use troupe_tools::builtin::{BuiltinConfig, Builtins, NamedBackend, core_tools};
use troupe_tools::mcp::{McpManager, ServerState, ServerStatus};
use troupe_tools::memory::MemoryStore;
use troupe_tools::sync::lock;
use troupe_tools::{Registry, ToolDef, ToolsetView, ViewSpec};

use crate::api::{CloseReport, SessionProfile, Troupe, TroupeConfig};
use crate::plugins::Plugins;
use crate::settings::secrets;
use crate::settings::{ConfigError, ProfileSettings, Settings};

/// How long start-up waits for the MCP servers. Long enough that a server which cannot even be
/// spawned is reported at start like any other failure; slower servers keep starting in the
/// background, and the calls that need their tools wait for them (see the session), so no turn
/// waits for a server it does not use.
const MCP_STARTUP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The MCP servers of a runtime, taken out when it closes.
type SharedMcp = Arc<std::sync::Mutex<Option<McpManager>>>;

/// How long closing waits for observer hooks still running.
const OBSERVER_DRAIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The toolset `delegate_task` belongs to.
pub const DELEGATION_TOOLSET: &str = "delegation";

pub use crate::tool_source::ToolSource;

/// What a program or an entry point adds to what `troupe.yaml` says.
#[derive(Clone)]
pub struct RuntimeOptions {
    /// Hooks every session and worker runs, after none from the config.
    pub hooks: Vec<Arc<dyn Hook>>,
    /// Board observers handed to every dispatcher.
    pub kanban_hooks: Vec<Arc<dyn KanbanHook>>,
    /// Extra tool sources, started after the MCP servers.
    pub tool_sources: Vec<Arc<dyn ToolSource>>,
    /// Extra tools, registered as they are (give them a toolset).
    pub tools: Vec<ToolDef>,
    /// Whether top-level sessions delegate in the background (sessions that take later
    /// messages: `troupe serve`, programs); one-shot runs and workers wait for their children.
    pub background_delegation: bool,
    /// Whether to start the MCP servers of the config.
    pub start_mcp: bool,
    /// Replaces the approval rules ([`DefaultRules`] with `approvals.require_approval` and the
    /// built-in tools' checks when `None`).
    pub rules: Option<Arc<dyn ApprovalRules>>,
    /// Replaces the built-in tools' settings read from the config.
    pub builtins: Option<BuiltinConfig>,
    /// Threads of the tokio pool that runs model requests and tools.
    pub worker_threads: usize,
    /// The plugins, when the entry point already loaded them (for its slash commands);
    /// otherwise the runtime loads them from the config.
    pub plugins: Option<Plugins>,
    /// Whether sessions are written to the session store `sessions:` names (unless it says
    /// `persist: false`); off for commands that open no session.
    pub persist_sessions: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            hooks: Vec::new(),
            kanban_hooks: Vec::new(),
            tool_sources: Vec::new(),
            tools: Vec::new(),
            background_delegation: true,
            start_mcp: true,
            rules: None,
            builtins: None,
            worker_threads: 2,
            plugins: None,
            persist_sessions: true,
        }
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("hooks", &self.hooks.len())
            .field("kanban_hooks", &self.kanban_hooks.len())
            .field("tool_sources", &self.tool_sources.len())
            .field("tools", &self.tools.len())
            .field("background_delegation", &self.background_delegation)
            .field("start_mcp", &self.start_mcp)
            .finish_non_exhaustive()
    }
}

impl RuntimeOptions {
    /// Uses `plugins` (loaded by the entry point) instead of loading them from the config.
    pub fn with_plugins(mut self, plugins: Plugins) -> Self {
        self.plugins = Some(plugins);
        self
    }

    /// Adds a hook for every session and worker.
    pub fn with_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Adds a board observer for every dispatcher.
    pub fn with_kanban_hook(mut self, hook: Arc<dyn KanbanHook>) -> Self {
        self.kanban_hooks.push(hook);
        self
    }

    /// Adds a tool source.
    pub fn with_tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.tool_sources.push(source);
        self
    }

    /// Adds a tool.
    pub fn with_tool(mut self, tool: ToolDef) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets whether top-level sessions delegate in the background.
    pub fn with_background_delegation(mut self, background: bool) -> Self {
        self.background_delegation = background;
        self
    }

    /// Leaves the MCP servers of the config unstarted.
    pub fn without_mcp(mut self) -> Self {
        self.start_mcp = false;
        self
    }

    /// Replaces the approval rules.
    pub fn with_rules(mut self, rules: Arc<dyn ApprovalRules>) -> Self {
        self.rules = Some(rules);
        self
    }

    /// Replaces the built-in tools' settings.
    pub fn with_builtin_config(mut self, builtins: BuiltinConfig) -> Self {
        self.builtins = Some(builtins);
        self
    }
}

/// Why a runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The config says something troupe cannot use (bad input: exit code 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Something the config is fine with failed to start (exit code 1).
    #[error("{0}")]
    Start(String),
    /// A config file was changed while a session could write it, and no person accepted the
    /// change yet (exit code 2).
    #[error("{0}")]
    Unaccepted(crate::config_seal::PendingChange),
}

/// Something left out at start-up, which the runtime runs without: an MCP server that did not
/// connect, a config entry it could not use, a tool source that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupNotice {
    /// What was left out (`MCP server 'github'`).
    pub source: String,
    /// Why, in words a person can act on.
    pub reason: String,
}

impl std::fmt::Display for StartupNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.source.is_empty() {
            // The reason says it all (a plugin's warning names the plugin).
            return f.write_str(&self.reason);
        }
        write!(
            f,
            "{} is not available, so troupe runs without it: {}",
            self.source, self.reason
        )
    }
}

/// A running runtime: see the module doc. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    config: Settings,
    troupe: Troupe,
    builtins: Arc<Builtins>,
    /// The MCP servers, shared with the close hook that shuts them down.
    mcp: SharedMcp,
    notices: Vec<StartupNotice>,
    toolsets: BTreeSet<String>,
    /// Session settings of board workers (they wait for their children).
    worker_session: SessionConfig,
    /// The plugins: their slash commands, and their observer hooks to wait for at close.
    plugins: Plugins,
    /// The watch over the config files (see [`crate::config_seal`]).
    seal: Arc<crate::config_seal::ConfigWatch>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.inner.config.path)
            .field("tools", &self.registry().len())
            .field("toolsets", &self.inner.toolsets)
            .field("notices", &self.inner.notices)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts a runtime from a checked config; see the module doc. Must run inside a tokio
    /// runtime (the built-in tools' process registry lives there).
    pub async fn start(config: Settings, options: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        // The rules come from files a session may have written: those need a person's yes.
        let home = config.home.path().to_path_buf();
        let watched = crate::config_seal::watched_files(&config);
        match crate::config_seal::pending_change(&home, &watched) {
            Ok(Some(change)) => return Err(RuntimeError::Unaccepted(change)),
            Ok(None) => {}
            Err(e) => {
                return Err(RuntimeError::Start(format!(
                    "cannot read troupe's record of config changes under {}: {e}",
                    home.display()
                )));
            }
        }
        let seal = crate::config_seal::ConfigWatch::start(&home, watched).map_err(|e| {
            RuntimeError::Start(format!(
                "cannot write troupe's record of config changes under {}: {e}",
                home.display()
            ))
        })?;
        let options = options.with_hook(Arc::new(crate::config_seal::ConfigWatchHook(Arc::clone(
            &seal,
        ))));
        // troupe's keys: kept out of every program it starts, masked in every output.
        let secrets = secrets::child_secrets(&config);
        secrets::mask_in_outputs(&secrets);
        let (options, plugins, plugin_notices) = extend_from_config(&config, &secrets, options)?;
        crate::observability::install(&config.observability, plugins.trace_target())?;
        let approvals = config.approvals.clone();
        let delegation = config.delegation.clone();
        let mut builtin_settings = match options.builtins.clone() {
            Some(settings) => settings,
            None => config.builtins.clone(),
        };
        builtin_settings.secrets.merge(&secrets);
        let default_provider = config.model.provider(&config.home)?;
        check_cost_budgets(&config, &delegation, default_provider.as_deref())?;
        let workspaces_dir = config.home.workspaces();
        // The boundary of what commands, hooks and MCP servers reach (terminal.confine).
        let boundary = backends::boundary(&builtin_settings, &home, config.path.as_deref())?;
        troupe_tools::builtin::confine::set_service_policy(boundary.policy.clone());
        let mut boundary_notices = vec![];
        if let Some(warning) = &boundary.warning {
            tracing::warn!("{warning}");
            boundary_notices.push(StartupNotice {
                source: String::new(),
                reason: warning.clone(),
            });
        }
        let backend = backends::start_backend(
            &config.backend,
            &builtin_settings,
            Some(&workspaces_dir),
            &boundary,
            &home,
        )
        .map_err(|e| RuntimeError::Start(format!("terminal.backend: {e}")))?;
        // A profile with a terminal: of its own runs its workers (and their subagents) there.
        let mut named = vec![];
        for (name, profile) in &config.kanban.profiles {
            if let Some((choice, ask)) = &profile.terminal {
                let backend = backends::start_backend(
                    choice,
                    &builtin_settings,
                    Some(&workspaces_dir),
                    &boundary,
                    &home,
                )
                .map_err(|e| {
                    RuntimeError::Start(format!("profiles.{name}.terminal.backend: {e}"))
                })?;
                named.push(NamedBackend::new(name.clone(), backend, *ask));
            }
        }
        let builtins = Builtins::start_with_backends(builtin_settings, backend, named)
            .map_err(|e| RuntimeError::Start(format!("the built-in tools could not start: {e}")))?;
        let registry = Registry::with_tools(core_tools(&builtins));
        for tool in &options.tools {
            registry.register(tool.clone());
        }
        // Hosted connectors: the gateway joins the registry, reached by the views that hold
        // `manage_connections` (registered with it, in the `connectors` toolset).
        if let Some(gateway) = crate::connectors::attach_gateway(&config, &registry) {
            // It may also switch on the MCP servers troupe.yaml declares `enabled: false`.
            let local = crate::connectors::local_servers::ConfigServers::new(
                config.path.clone(),
                &config.mcp_server_list(),
                Arc::clone(&registry),
                troupe_tools::mcp::McpOptions::in_home(&config.home).with_secrets(secrets.clone()),
            );
            registry.register(crate::connectors::manage_tool(
                Some(gateway),
                options.start_mcp.then(|| Arc::new(local) as _),
            ));
        }
        // Durable sessions, and `session_search` over them.
        let sessions = match options.persist_sessions {
            true => crate::sessions::open_configured(&config.sessions)
                .await
                .map_err(|e| RuntimeError::Start(e.to_string()))?,
            false => None,
        };
        if let Some(store) = &sessions {
            registry.register(crate::sessions::session_search_tool(store.clone()));
        }
        // `cronjob`: jobs on the configured board store, fired by its workers.
        registry.register(crate::schedules::cronjob_tool(
            config.kanban.clone(),
            sessions.clone(),
        ));
        let mut notices = boundary_notices;
        notices.extend(plugin_notices);
        let mut provided: BTreeSet<String> = BTreeSet::new();

        // MCP servers: once per process, into the one registry.
        let mut manager = None;
        if options.start_mcp && !config.mcp_servers.is_null() {
            let servers = config.mcp_server_list();
            for server in &servers.servers {
                provided.insert(format!("mcp-{}", server.name));
            }
            // Servers start in the background: those that come up (or fail) within the grace
            // are known before the first turn; a slow or hung one keeps starting and its tools
            // join the registry when it is ready, so it never holds a turn hostage.
            let started = McpManager::start_in_background(
                &servers,
                Arc::clone(&registry),
                troupe_tools::mcp::McpOptions::in_home(&config.home).with_secrets(secrets.clone()),
            );
            started.wait_started(MCP_STARTUP_GRACE).await;
            let still_starting = started.starting();
            let statuses = started.statuses();
            for status in &statuses {
                if still_starting.contains(&status.name) {
                    // Not a failure: its tools join when it is ready.
                    tracing::info!(server = %status.name, "MCP server still starting in the background");
                } else if let Some(error) = &status.last_error
                    && status.state != ServerState::Connected
                {
                    notices.push(StartupNotice {
                        source: format!("MCP server '{}'", status.name),
                        reason: error.clone(),
                    });
                }
            }
            manager = Some(started);
        }

        // Tool sources (plugins): after MCP, so their names cannot shadow a server's.
        for source in &options.tool_sources {
            match source.start(Arc::clone(&registry)).await {
                Ok(toolsets) => provided.extend(toolsets),
                Err(reason) => notices.push(StartupNotice {
                    source: source.name(),
                    reason,
                }),
            }
        }
        // Every command prints them once (`report_notices`); programs read `notices()`.
        for notice in &notices {
            tracing::info!("{notice}");
        }

        for (name, includes) in &config.toolsets.composites {
            registry.define_toolset(name.clone(), includes.clone());
        }
        let mut session = SessionConfig {
            tool_search: config.tool_search.clone(),
            context_length: config.model.context_length,
            prompt_style: config.model.prompt_style,
            cwd: builtins.config().default_cwd.clone(),
            budget: config.budget,
            prices: Arc::clone(&config.prices),
            // Sessions of no profile share the default stores; each profile has its own.
            memory: Some(Arc::new(MemoryStore::in_home(&config.home, None))),
            // Background processes tell the session that started them when they end or print
            // a watched line.
            processes: Some(builtins.processes().clone()),
            ..SessionConfig::default()
        };
        crate::delegation::enable_delegation(
            &registry,
            &mut session,
            delegation,
            options.background_delegation,
        );
        let worker_session = SessionConfig {
            background_delegation: false,
            ..session.clone()
        };

        let mut toolsets = registry.toolsets();
        toolsets.extend(provided);
        toolsets.insert(DELEGATION_TOOLSET.to_string());

        // Profiles: checked here, so a bad one is a config error at start, everywhere. What
        // was started is stopped again before the error is returned.
        let profiles = match session_profiles(&config, &toolsets, &registry, &session) {
            Ok(profiles) => profiles,
            Err(error) => {
                if let Some(manager) = manager {
                    manager.shutdown().await;
                }
                for source in &options.tool_sources {
                    source.stop().await;
                }
                return Err(error);
            }
        };

        let rules: Arc<dyn ApprovalRules> = match options.rules.clone() {
            Some(rules) => rules,
            None => Arc::new(
                DefaultRules::new(approvals.require_approval.iter().cloned())
                    .with_builtins(Arc::clone(&builtins)),
            ),
        };
        let sources = options.tool_sources.clone();
        let mcp: SharedMcp = Arc::new(std::sync::Mutex::new(manager));
        let on_close: crate::api::CloseHook = Arc::new({
            let mcp = Arc::clone(&mcp);
            move || {
                let mcp = Arc::clone(&mcp);
                let sources = sources.clone();
                Box::pin(async move {
                    let manager = lock(&mcp).take();
                    if let Some(manager) = manager {
                        manager.shutdown().await;
                    }
                    for source in &sources {
                        source.stop().await;
                    }
                })
            }
        });
        let mut troupe_config = TroupeConfig::new(Arc::clone(&registry))
            .with_approvals(approvals)
            .with_rules(rules)
            .with_hooks(HookRegistry::with_hooks(options.hooks.clone()))
            .with_session(session)
            .with_close_hook(on_close);
        troupe_config.worker_threads = options.worker_threads.max(1);
        troupe_config.kanban_hooks = options.kanban_hooks.clone();
        troupe_config.profiles = profiles;
        troupe_config.default_provider = default_provider;
        troupe_config.sessions = sessions;
        troupe_config.workspaces = Some(Arc::new(workspaces::TaskWorkspaces::new(
            Arc::clone(&builtins),
            home.clone(),
        )));
        let troupe =
            Troupe::start(troupe_config).map_err(|e| RuntimeError::Start(e.to_string()))?;
        Ok(Runtime {
            inner: Arc::new(Inner {
                config,
                troupe,
                builtins,
                mcp,
                notices,
                toolsets,
                worker_session,
                plugins,
                seal,
            }),
        })
    }

    /// [`Runtime::start`] on a config file (YAML or JSON).
    pub async fn from_file(
        path: impl AsRef<Path>,
        options: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        Runtime::start(Settings::load(path.as_ref())?, options).await
    }

    /// The troupe sessions and workers run in.
    pub fn troupe(&self) -> &Troupe {
        &self.inner.troupe
    }

    /// The config it was started from.
    pub fn config(&self) -> &Settings {
        &self.inner.config
    }

    /// Every tool: built-in, MCP, sources, `delegate_task`.
    pub fn registry(&self) -> &Arc<Registry> {
        self.inner.troupe.registry()
    }

    /// The built-in tools' shared state (working directories, processes).
    pub fn builtins(&self) -> &Arc<Builtins> {
        &self.inner.builtins
    }

    /// What start-up left out; see [`Runtime::report_notices`].
    pub fn notices(&self) -> &[StartupNotice] {
        &self.inner.notices
    }

    /// Each configured MCP server's status now (empty once the runtime is closed).
    pub fn mcp_statuses(&self) -> Vec<ServerStatus> {
        lock(&self.inner.mcp)
            .as_ref()
            .map(McpManager::statuses)
            .unwrap_or_default()
    }

    /// Waits (at most `limit`) until no MCP server is still starting; true when none is.
    pub async fn wait_mcp_ready(&self, limit: std::time::Duration) -> bool {
        let registry = self.registry();
        registry
            .wait_until(limit, || registry.starting().is_empty())
            .await
    }

    /// Every toolset a view or profile may name.
    pub fn toolsets(&self) -> &BTreeSet<String> {
        &self.inner.toolsets
    }

    /// The default session settings (tool search, delegation, working directory).
    pub fn session_defaults(&self) -> SessionConfig {
        self.inner.troupe.session_defaults()
    }

    /// Tells the person what start-up left out, one line each on stderr, prefixed by the
    /// command (`troupe chat: MCP server 'x' is not available, ...`). Every command does this
    /// the same way.
    pub fn report_notices(&self, command: &str) {
        for notice in &self.inner.notices {
            eprintln!("{command}: {notice}");
        }
    }

    /// The view of `toolsets` (composites expanded); the `toolsets:` section's when `None`.
    /// A name nobody provides is an error that lists the toolsets there are.
    pub fn view(&self, toolsets: Option<&[String]>) -> Result<ToolsetView, RuntimeError> {
        let registry = self.registry();
        let spec = match toolsets {
            Some(names) => {
                let names: Vec<String> = names
                    .iter()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect();
                check_toolsets(&self.inner.toolsets, &names, registry, "toolsets")?;
                ViewSpec::toolsets(names)
            }
            None => {
                let mut disabled = self.inner.config.toolsets.disabled.clone();
                if self.inner.config.toolsets.enabled.is_none() {
                    // Reading past conversations is opted into by naming the toolset.
                    disabled.push(crate::sessions::SESSION_SEARCH.to_string());
                }
                ViewSpec {
                    enabled: self.inner.config.toolsets.enabled.clone(),
                    disabled,
                    blocked: self.inner.config.toolsets.blocked_tools.clone(),
                }
            }
        };
        registry.view(spec).map_err(|e| {
            RuntimeError::Config(ConfigError::Invalid {
                key: "toolsets".into(),
                problem: e.to_string(),
            })
        })
    }

    /// The board workers' profiles: each its model, the tools its toolsets name (MCP and
    /// source toolsets deferred behind tool search as in sessions; `delegation` lets it
    /// delegate) and its settings. `only` keeps the named ones; an unknown name, or a profile
    /// with no model, is a config error.
    pub fn worker_profiles(&self, only: Option<&[String]>) -> Result<Profiles, RuntimeError> {
        let kanban = &self.inner.config.kanban;
        if let Some(only) = only {
            for name in only {
                if !kanban.profiles.contains_key(name) {
                    return Err(invalid(
                        "profiles",
                        format!(
                            "there is no profile {name:?} under profiles: in troupe.yaml (known: {})",
                            crate::settings::kanban::known(&kanban.profiles)
                        ),
                    ));
                }
            }
        }
        let mut profiles = Profiles::new();
        for (name, p) in &kanban.profiles {
            if only.is_some_and(|only| !only.contains(name)) {
                continue;
            }
            profiles.insert(self.worker_profile(name, p)?);
        }
        if let Some(default) = &kanban.default_assignee {
            profiles = profiles.with_default_assignee(default.clone());
        }
        Ok(profiles)
    }

    /// Closes the troupe (its sessions and workers' sessions) and stops the MCP servers and
    /// tool sources.
    pub async fn close(&self) -> CloseReport {
        let report = self.inner.troupe.close().await;
        // The container goes, the connection closes, once no session can use them.
        let builtins = Arc::clone(&self.inner.builtins);
        if let Err(e) = tokio::task::spawn_blocking(move || builtins.shutdown_backend()).await {
            tracing::warn!(%e, "closing the terminal backend failed");
        }
        // Observer hooks (`on_session_end`, ...) still running get a bounded wait, so an
        // exiting program does not cut them off.
        self.inner.plugins.drain(OBSERVER_DRAIN).await;
        // Last: every process a session started is gone, so nothing writes after this look.
        let seal = Arc::clone(&self.inner.seal);
        if let Err(e) = tokio::task::spawn_blocking(move || seal.close()).await {
            tracing::warn!(%e, "the last look at the config files failed");
        }
        report
    }

    /// The plugins: what was found, their slash commands.
    pub fn plugins(&self) -> &Plugins {
        &self.inner.plugins
    }
}

// The API's constructors from troupe.yaml live here, so the API itself knows nothing of how a
// runtime is assembled.
impl Troupe {
    /// Starts a troupe from a checked `troupe.yaml` through [`Runtime`]: its
    /// tools, MCP servers, approvals, delegation and profiles. Closing it stops them.
    pub async fn from_config(config: Settings) -> Result<Troupe, RuntimeError> {
        let runtime = Runtime::start(config, RuntimeOptions::default()).await?;
        Ok(runtime.troupe().clone())
    }

    /// [`Troupe::from_config`] on a config file (YAML or JSON).
    pub async fn from_file(path: impl AsRef<std::path::Path>) -> Result<Troupe, RuntimeError> {
        let config = Settings::load(path.as_ref())?;
        Troupe::from_config(config).await
    }
}

/// The extension point for sections of `troupe.yaml` that other modules read (plugins and
/// their hooks and toolsets): whatever they add to `options` here, every entry point gets.
fn extend_from_config(
    config: &Settings,
    secrets: &troupe_tools::builtin::sandbox_env::ChildSecrets,
    mut options: RuntimeOptions,
) -> Result<(RuntimeOptions, Plugins, Vec<StartupNotice>), RuntimeError> {
    let plugins = match options.plugins.take() {
        Some(plugins) => plugins,
        None => Plugins::from_config(config, secrets)?,
    };
    // A broken plugin disables itself only; it is reported like a server that did not start.
    let notices = plugins
        .catalog()
        .warnings()
        .into_iter()
        .map(|reason| StartupNotice {
            source: String::new(),
            reason,
        })
        .collect();
    let mut options = options;
    let contribution = plugins.contribution();
    options.hooks.extend(contribution.hooks);
    options.kanban_hooks.extend(contribution.kanban_hooks);
    options.tool_sources.extend(contribution.tool_sources);
    Ok((options, plugins, notices))
}

/// The profiles sessions may name, each checked against the toolsets there are.
fn session_profiles(
    settings: &Settings,
    toolsets: &BTreeSet<String>,
    registry: &Arc<Registry>,
    session: &SessionConfig,
) -> Result<HashMap<String, SessionProfile>, RuntimeError> {
    let mut profiles = HashMap::new();
    for (name, p) in &settings.kanban.profiles {
        check_toolsets(
            toolsets,
            &p.toolsets,
            registry,
            &format!("profiles.{name}.toolsets"),
        )?;
        profiles.insert(
            name.clone(),
            SessionProfile {
                provider: p.provider(&settings.model, &settings.home),
                view: profile_view(registry, p)?,
                session: SessionConfig {
                    memory: Some(Arc::new(MemoryStore::in_home(&settings.home, Some(name)))),
                    ..p.session_config(session)
                },
            },
        );
    }
    Ok(profiles)
}

/// Refuses a cost budget on a model with no price: its spending could not be counted, and a
/// budget that never runs out is worse than none.
fn check_cost_budgets(
    config: &Settings,
    delegation: &troupe_actors::delegate::DelegationConfig,
    provider: Option<&dyn ModelProvider>,
) -> Result<(), RuntimeError> {
    let default_model = config
        .model
        .model
        .clone()
        .or_else(|| provider.and_then(ModelProvider::model));
    let mut budgets = vec![
        ("budget", config.budget, default_model.clone()),
        (
            "delegation.budget",
            delegation.budget,
            default_model.clone(),
        ),
    ];
    let keys: Vec<String> = config
        .kanban
        .profiles
        .keys()
        .map(|name| format!("profiles.{name}.budget"))
        .collect();
    for (p, key) in config.kanban.profiles.values().zip(&keys) {
        budgets.push((key, p.budget, p.model.clone().or(default_model.clone())));
    }
    for (key, budget, model) in budgets {
        if budget.max_cost_usd.is_none() {
            continue;
        }
        let Some(model) = model else {
            tracing::warn!(
                key,
                "a cost budget is set but the model is not named, so its price is unknown and only its other limits hold"
            );
            continue;
        };
        if config.prices.lookup(&model).is_none() {
            return Err(invalid(
                &format!("{key}.max_cost_usd"),
                format!(
                    "the model {model} has no price, so what it costs cannot be counted; add it under pricing (pricing: {{{model}: {{input: 0.5, output: 1.5}}}}, dollars per million tokens), or limit max_tokens instead"
                ),
            ));
        }
    }
    Ok(())
}

fn invalid(key: &str, problem: String) -> RuntimeError {
    RuntimeError::Config(crate::settings::keys::invalid(key, problem))
}

/// Refuses a toolset name nobody provides (a composite counts, and so do its parts).
fn check_toolsets(
    known: &BTreeSet<String>,
    names: &[String],
    registry: &Registry,
    key: &str,
) -> Result<(), RuntimeError> {
    let expanded = registry
        .expand_toolsets(names)
        .map_err(|e| invalid(key, e.to_string()))?;
    let mut missing: Vec<&String> = names
        .iter()
        .filter(|n| !known.contains(*n))
        .chain(expanded.iter().filter(|n| !known.contains(*n)))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    let missing: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
    Err(invalid(
        key,
        format!(
            "no tools are provided as {}; the toolsets there are: {} (an MCP server's toolset is mcp-<its key under mcp_servers>)",
            missing.join(", "),
            known.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    ))
}

/// The view of a profile's toolsets without its blocked tools; no tools at all when it names
/// no toolset.
fn profile_view(
    registry: &Arc<Registry>,
    p: &ProfileSettings,
) -> Result<ToolsetView, RuntimeError> {
    if p.toolsets.is_empty() {
        return Ok(Registry::new().view_all());
    }
    registry
        .view(
            ViewSpec::toolsets(p.toolsets.iter().cloned())
                .blocking(p.blocked_tools.iter().cloned()),
        )
        .map_err(|e| invalid(&format!("profiles.{}.toolsets", p.name), e.to_string()))
}
