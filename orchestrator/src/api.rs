//! The programmatic API: [`Troupe`], a handle on a running troupe. It starts its own actor
//! system (an actix `System` on a dedicated thread, over a multi-thread tokio runtime), so it
//! works from any program, a plain `#[tokio::main]` included. Open sessions, send messages,
//! stream events, answer approvals, stop, and shut down with [`Troupe::close`].
//!
//! A troupe is usually started from a `troupe.yaml` ([`Troupe::from_file`],
//! [`Troupe::from_config`], defined in [`crate::runtime`] beside [`crate::Runtime`], which
//! assembles it): the built-in tools and MCP servers of the config, its approvals, delegation
//! and `profiles:`; sessions may then name a profile ([`SessionOptions::from_profile`]).
//! [`Troupe::start`] is the bare form over a registry a program filled itself; this file knows
//! nothing of how a runtime is assembled.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use troupe_tools::sync::lock;

use actix::{Actor, Addr};
use futures::future::BoxFuture;
use troupe_actors::events::{EventSink, SessionEvent};
use troupe_actors::hooks::HookRegistry;
use troupe_actors::journal::{Origin, Persist, Restore};
use troupe_actors::model::ModelProvider;
use troupe_actors::session::{SessionConfig, SessionError, SessionHandle, SessionParams};
use troupe_actors::supervisor::{
    AnswerApproval, AnswerSecret, ApprovalChoice, ApprovalConfig, ApprovalRules, DefaultRules,
    ListPending, PendingApproval, SecretRequest, Stop, SubscribeApprovals, SubscribeSecrets,
    Supervisor,
};
use troupe_tools::ViewSpec;
use troupe_tools::{Registry, ToolsetView};

/// How long [`Troupe::close`] waits for the actor system to wind down.
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the API could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum TroupeError {
    /// The actor system could not start.
    #[error("the troupe actor system could not start: {0}")]
    Start(String),
    /// The troupe was closed.
    #[error("this troupe is closed; start a new one")]
    Closed,
    /// No open session has this id.
    #[error("there is no open session {0}")]
    UnknownSession(String),
    /// A session-level failure.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A session named a profile this troupe does not have.
    #[error("there is no profile {name:?} (known: {known})")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The profiles that exist, comma-separated.
        known: String,
    },
    /// A session could not be set up as asked (no model, an unknown toolset, ...).
    #[error("{0}")]
    Setup(String),
}

/// What a named profile gives the sessions that name it (`profiles:` in `troupe.yaml`).
#[derive(Clone)]
pub struct SessionProfile {
    /// Its model, or why it has none.
    pub provider: Result<Arc<dyn ModelProvider>, String>,
    /// The tools its sessions see.
    pub view: ToolsetView,
    /// Its session settings (system prompt, iterations, model name).
    pub session: SessionConfig,
}

impl std::fmt::Debug for SessionProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionProfile")
            .field("tools", &self.view.len())
            .field("has_model", &self.provider.is_ok())
            .finish_non_exhaustive()
    }
}

/// Work a troupe does when it closes, after its sessions ended (stop MCP servers, plugins).
pub type CloseHook = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// How a troupe is set up: the tools, approvals, hooks and the defaults of its sessions.
#[derive(Clone)]
pub struct TroupeConfig {
    /// Every tool the troupe knows.
    pub registry: Arc<Registry>,
    /// Approval mode, timeout, unattended policy, allowlist.
    pub approvals: ApprovalConfig,
    /// Which calls need approval; [`DefaultRules`] (with `approvals.require_approval`) when `None`.
    pub rules: Option<Arc<dyn ApprovalRules>>,
    /// Hooks every session runs.
    pub hooks: HookRegistry,
    /// Settings of sessions opened without their own.
    pub session: SessionConfig,
    /// Worker threads of the tokio pool that runs model requests and tools.
    pub worker_threads: usize,
    /// The model of sessions opened without one and without a profile.
    pub default_provider: Option<Arc<dyn ModelProvider>>,
    /// Named profiles sessions may ask for.
    pub profiles: HashMap<String, SessionProfile>,
    /// Board observers handed to the dispatchers started on this troupe.
    pub kanban_hooks: Vec<Arc<dyn troupe_kanban::hooks::KanbanHook>>,
    /// Run in order by [`Troupe::close`] once the actor system is down.
    pub on_close: Vec<CloseHook>,
    /// Makes task workspaces ready for the workers of dispatchers started on this troupe.
    pub workspaces: Option<Arc<dyn troupe_kanban::workspace::Workspaces>>,
    /// Where sessions are written so they outlive the process; in memory only when `None`.
    pub sessions: Option<crate::sessions::SessionStore>,
}

impl TroupeConfig {
    /// A troupe over `registry` with the defaults: manual approvals, 300 s to answer, deny when
    /// nobody can answer, default session settings, two pool threads.
    pub fn new(registry: Arc<Registry>) -> Self {
        TroupeConfig {
            registry,
            approvals: ApprovalConfig::default(),
            rules: None,
            hooks: HookRegistry::new(),
            session: SessionConfig::default(),
            worker_threads: 2,
            default_provider: None,
            profiles: HashMap::new(),
            kanban_hooks: Vec::new(),
            on_close: Vec::new(),
            workspaces: None,
            sessions: None,
        }
    }

    /// Sets the model of sessions opened without one.
    pub fn with_default_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.default_provider = Some(provider);
        self
    }

    /// Adds (or replaces) a named profile.
    pub fn with_profile(mut self, name: impl Into<String>, profile: SessionProfile) -> Self {
        self.profiles.insert(name.into(), profile);
        self
    }

    /// Adds work for [`Troupe::close`].
    pub fn with_close_hook(mut self, hook: CloseHook) -> Self {
        self.on_close.push(hook);
        self
    }

    /// Sets the approval settings.
    pub fn with_approvals(mut self, approvals: ApprovalConfig) -> Self {
        self.approvals = approvals;
        self
    }

    /// Replaces the approval rules.
    pub fn with_rules(mut self, rules: Arc<dyn ApprovalRules>) -> Self {
        self.rules = Some(rules);
        self
    }

    /// Sets the hooks.
    pub fn with_hooks(mut self, hooks: HookRegistry) -> Self {
        self.hooks = hooks;
        self
    }

    /// Sets the default session settings.
    pub fn with_session(mut self, session: SessionConfig) -> Self {
        self.session = session;
        self
    }
}

/// What a new session gets; its profile (when it names one), then the troupe's defaults fill
/// what is left `None`.
pub struct SessionOptions {
    /// The model; the profile's, else the troupe's default model, when `None`.
    pub provider: Option<Arc<dyn ModelProvider>>,
    /// The profile (`profiles:` in `troupe.yaml`) whose model, tools and settings it takes.
    pub profile: Option<String>,
    /// The tools it may see and call; the whole registry when `None`.
    pub view: Option<ToolsetView>,
    /// Its settings; the troupe's defaults when `None`.
    pub config: Option<SessionConfig>,
    /// The parent session, for a subagent.
    pub parent: Option<String>,
    /// Where it comes from, written with it (`api` when `None`).
    pub origin: Option<Origin>,
    /// A stored session to reopen instead of a new one.
    pub restore: Option<Restore>,
}

impl SessionOptions {
    /// A session on `provider` with the troupe's defaults.
    pub fn new(provider: Arc<dyn ModelProvider>) -> Self {
        SessionOptions {
            provider: Some(provider),
            ..SessionOptions::configured()
        }
    }

    /// A session on the troupe's default model (`model:` of `troupe.yaml`).
    pub fn configured() -> Self {
        SessionOptions {
            provider: None,
            profile: None,
            view: None,
            config: None,
            parent: None,
            origin: None,
            restore: None,
        }
    }

    /// A session of a named profile: its model, tools and settings.
    pub fn from_profile(name: impl Into<String>) -> Self {
        SessionOptions::configured().with_profile(name)
    }

    /// Takes what the options leave open from the profile `name`.
    pub fn with_profile(mut self, name: impl Into<String>) -> Self {
        self.profile = Some(name.into());
        self
    }

    /// Sets the model.
    pub fn with_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Narrows what the session sees.
    pub fn with_view(mut self, view: ToolsetView) -> Self {
        self.view = Some(view);
        self
    }

    /// Gives the session its own settings.
    pub fn with_config(mut self, config: SessionConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Makes the session a child of `parent`.
    pub fn with_parent(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Says where the session comes from, so it can be reopened the same way.
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = Some(origin);
        self
    }

    /// Reopens a stored session (see [`crate::sessions::StoredSession::restore`]).
    pub fn resuming(mut self, restore: Restore) -> Self {
        self.restore = Some(restore);
        self
    }
}

/// The state every clone of a [`Troupe`] shares. Dropping the last clone stops the system.
struct Inner {
    config: TroupeConfig,
    system: actix_rt::System,
    arbiter: actix_rt::ArbiterHandle,
    supervisor: Addr<Supervisor>,
    events: EventSink,
    sessions: Mutex<HashMap<String, SessionHandle>>,
    /// Told when the actor thread has exited.
    exited: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// The config's close hooks, taken by the first close.
    on_close: Mutex<Vec<CloseHook>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The guard for programs that never call close(): nothing keeps running.
        self.system.stop();
    }
}

/// A running troupe. `Clone + Send + Sync`; see the module doc.
#[derive(Clone)]
pub struct Troupe {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Troupe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Troupe")
            .field("sessions", &lock(&self.inner.sessions).len())
            .finish_non_exhaustive()
    }
}

impl Troupe {
    /// Starts a troupe: a new thread running its actor system and tokio pool. Returns once the
    /// supervisor is up (a few milliseconds).
    pub fn start(config: TroupeConfig) -> Result<Troupe, TroupeError> {
        let rules: Arc<dyn ApprovalRules> = match &config.rules {
            Some(rules) => Arc::clone(rules),
            None => Arc::new(DefaultRules::new(
                config.approvals.require_approval.iter().cloned(),
            )),
        };
        let approvals = config.approvals.clone();
        let on_close = config.on_close.clone();
        let threads = config.worker_threads.max(1);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("troupe-actors".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .thread_name("troupe-pool")
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready_tx.send(Err(error.to_string()));
                        return;
                    }
                };
                let system = actix_rt::System::with_tokio_rt(move || runtime);
                let started = system.block_on(async move {
                    let supervisor = Supervisor::new(approvals, rules).start();
                    (
                        actix_rt::System::current(),
                        actix_rt::Arbiter::current(),
                        supervisor,
                    )
                });
                let _ = ready_tx.send(Ok(started));
                if let Err(error) = system.run() {
                    tracing::error!(%error, "troupe actor system ended with an error");
                }
                let _ = exit_tx.send(());
            })
            .map_err(|e| TroupeError::Start(e.to_string()))?;
        let (system, arbiter, supervisor) = ready_rx
            .recv()
            .map_err(|_| TroupeError::Start("the actor thread ended before it was ready".into()))?
            .map_err(TroupeError::Start)?;
        Ok(Troupe {
            inner: Arc::new(Inner {
                config,
                system,
                arbiter,
                supervisor,
                events: EventSink::new(),
                sessions: Mutex::new(HashMap::new()),
                exited: Mutex::new(Some(exit_rx)),
                on_close: Mutex::new(on_close),
            }),
        })
    }

    /// The troupe's tools.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.inner.config.registry
    }

    /// Runs `start` on the troupe's actor thread, inside its actix system, with the supervisor's
    /// address, and returns what it returns. This is how actors that must live on the troupe's
    /// arbiter and route approvals through its supervisor (a kanban dispatcher) are started.
    pub async fn on_actor_thread<T, F>(&self, start: F) -> Result<T, TroupeError>
    where
        T: Send + 'static,
        F: FnOnce(Addr<Supervisor>) -> T + Send + 'static,
    {
        let supervisor = self.inner.supervisor.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = self.inner.arbiter.spawn(async move {
            let _ = tx.send(start(supervisor));
        });
        if !spawned {
            return Err(TroupeError::Closed);
        }
        rx.await.map_err(|_| TroupeError::Closed)
    }

    /// The settings sessions get when opened without their own (a starting point for a
    /// session that changes only a few of them).
    pub fn session_defaults(&self) -> SessionConfig {
        self.inner.config.session.clone()
    }

    /// The hooks every session of this troupe runs.
    pub fn hooks(&self) -> &HookRegistry {
        &self.inner.config.hooks
    }

    /// The hooks a kanban dispatcher started on this troupe hands its workers: the troupe's
    /// session hooks, its board observers and its task workspaces.
    pub fn dispatcher_hooks(&self) -> troupe_kanban::hooks::DispatcherHooks {
        let mut hooks = troupe_kanban::hooks::DispatcherHooks::new()
            .with_session_hooks(self.inner.config.hooks.clone());
        for hook in &self.inner.config.kanban_hooks {
            hooks = hooks.with_kanban_hook(Arc::clone(hook));
        }
        if let Some(workspaces) = &self.inner.config.workspaces {
            hooks = hooks.with_workspaces(Arc::clone(workspaces));
        }
        // A run is told which calls of the task's last run were cut off, read from the
        // sessions the workers wrote.
        if let Some(store) = self.session_store() {
            hooks = hooks.with_run_history(Arc::new(crate::sessions::StoredRunHistory::new(
                store.clone(),
            )));
        }
        hooks
    }

    /// The named profiles sessions may ask for, sorted.
    pub fn profile_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.config.profiles.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// The named profile, if the troupe has it.
    pub fn profile(&self, name: &str) -> Option<&SessionProfile> {
        self.inner.config.profiles.get(name)
    }

    /// Where this troupe's sessions are written, when they are.
    pub fn session_store(&self) -> Option<&crate::sessions::SessionStore> {
        self.inner.config.sessions.as_ref()
    }

    /// The model sessions get when they name none, if the troupe has one.
    pub fn default_provider(&self) -> Option<Arc<dyn ModelProvider>> {
        self.inner.config.default_provider.clone()
    }

    /// Opens a session.
    pub async fn open_session(
        &self,
        options: SessionOptions,
    ) -> Result<SessionHandle, TroupeError> {
        let inner = &self.inner;
        let profile = match &options.profile {
            None => None,
            Some(name) => Some(inner.config.profiles.get(name).ok_or_else(|| {
                let mut known: Vec<&str> =
                    inner.config.profiles.keys().map(String::as_str).collect();
                known.sort_unstable();
                TroupeError::UnknownProfile {
                    name: name.clone(),
                    known: if known.is_empty() {
                        "none; add a profiles: section to troupe.yaml".into()
                    } else {
                        known.join(", ")
                    },
                }
            })?),
        };
        let provider = match (options.provider, profile) {
            (Some(provider), _) => provider,
            (None, Some(profile)) => profile.provider.clone().map_err(TroupeError::Setup)?,
            (None, None) => inner.config.default_provider.clone().ok_or_else(|| {
                TroupeError::Setup(
                    "this troupe has no model configured: set model.base_url in troupe.yaml (an OpenAI-compatible API), name a profile that has one, or give the session a model".into(),
                )
            })?,
        };
        let mut config = options.config.unwrap_or_else(|| match profile {
            Some(profile) => profile.session.clone(),
            None => inner.config.session.clone(),
        });
        if let Some(store) = &inner.config.sessions {
            config.persist = Some(Persist {
                journal: Arc::new(store.clone()),
                origin: options.origin.unwrap_or_else(|| Origin::new("api")),
            });
        }
        let params = SessionParams {
            provider,
            view: options.view.unwrap_or_else(|| match profile {
                Some(profile) => profile.view.clone(),
                // Reading past conversations is opted into by naming `session_search`.
                None => inner
                    .config
                    .registry
                    .view(ViewSpec::all().without_toolsets([crate::sessions::SESSION_SEARCH]))
                    .unwrap_or_else(|_| inner.config.registry.view_all()),
            }),
            config,
            hooks: inner.config.hooks.clone(),
            supervisor: inner.supervisor.clone(),
            parent: options.parent,
            upstream_events: Some(inner.events.clone()),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let restore = options.restore;
        let spawned = inner.arbiter.spawn(async move {
            let _ = tx.send(match restore {
                Some(restore) => SessionHandle::reopen(params, restore).await,
                None => SessionHandle::open(params).await,
            });
        });
        if !spawned {
            return Err(TroupeError::Closed);
        }
        let handle = rx.await.map_err(|_| TroupeError::Closed)??;
        lock(&inner.sessions).insert(handle.id().to_string(), handle.clone());
        Ok(handle)
    }

    /// Reopens a stored session by its id (or the start of it): its messages, spending and
    /// place in the tree, with `options` for the model and tools (its stored origin when they
    /// name none). A turn it stopped inside goes on with [`SessionHandle::resume_turn`]: calls
    /// that were waiting for approval are asked again; those that had started get a note that
    /// their effect is unknown and are not run again.
    pub async fn reopen_session(
        &self,
        id: &str,
        options: SessionOptions,
    ) -> Result<SessionHandle, TroupeError> {
        let Some(store) = &self.inner.config.sessions else {
            return Err(TroupeError::Setup(
                "this troupe keeps no sessions (give TroupeConfig a session store, or set sessions.persist in troupe.yaml)".into(),
            ));
        };
        let stored = store.load(id).await.map_err(|e| match e {
            crate::sessions::SessionStoreError::NotFound(_) => {
                TroupeError::UnknownSession(id.to_string())
            }
            other => TroupeError::Setup(other.to_string()),
        })?;
        let origin = options.origin.clone().unwrap_or(Origin {
            kind: stored.summary.origin.clone(),
            options: stored.options.clone(),
        });
        self.open_session(options.with_origin(origin).resuming(stored.restore(true)))
            .await
    }

    /// The open session with this id.
    pub fn session(&self, session_id: &str) -> Result<SessionHandle, TroupeError> {
        lock(&self.inner.sessions)
            .get(session_id)
            .cloned()
            .ok_or_else(|| TroupeError::UnknownSession(session_id.to_string()))
    }

    /// Every event of every session, from now on.
    pub fn events(&self) -> EventStream {
        EventStream {
            rx: self.inner.events.subscribe(),
        }
    }

    /// The sink every session's events go to, for callers that run calls outside a session
    /// (`troupe mcp serve`) and must be seen the same way.
    pub(crate) fn event_sink(&self) -> EventSink {
        self.inner.events.clone()
    }

    /// Approval requests as they arrive (those already waiting first). While one of these
    /// streams is alive, requests wait for an answer instead of following the unattended policy.
    pub async fn approvals(&self) -> Result<ApprovalStream, TroupeError> {
        let rx = self
            .inner
            .supervisor
            .send(SubscribeApprovals)
            .await
            .map_err(|_| TroupeError::Closed)?;
        Ok(ApprovalStream { rx })
    }

    /// The requests waiting for an answer, oldest first.
    pub async fn pending_approvals(&self) -> Result<Vec<PendingApproval>, TroupeError> {
        self.inner
            .supervisor
            .send(ListPending)
            .await
            .map_err(|_| TroupeError::Closed)
    }

    /// Answers a request; false when it was no longer pending.
    pub async fn answer(
        &self,
        request_id: &str,
        choice: ApprovalChoice,
    ) -> Result<bool, TroupeError> {
        self.inner
            .supervisor
            .send(AnswerApproval {
                request_id: request_id.to_string(),
                choice,
            })
            .await
            .map_err(|_| TroupeError::Closed)
    }

    /// Secret requests (sudo's password) as they arrive. Only an answerer that reads a secret
    /// at a masked prompt should take this stream; without one, nothing is ever asked.
    pub async fn secret_requests(
        &self,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<SecretRequest>, TroupeError> {
        self.inner
            .supervisor
            .send(SubscribeSecrets)
            .await
            .map_err(|_| TroupeError::Closed)
    }

    /// Answers a secret request (`None`: declined); false when it was no longer waiting.
    pub async fn answer_secret(
        &self,
        request_id: &str,
        secret: Option<String>,
    ) -> Result<bool, TroupeError> {
        self.inner
            .supervisor
            .send(AnswerSecret {
                request_id: request_id.to_string(),
                secret,
            })
            .await
            .map_err(|_| TroupeError::Closed)
    }

    /// Stops a session's running turn (`hard`: and its descendants'). Returns how many turns
    /// were running.
    pub async fn stop(&self, session_id: &str, hard: bool) -> Result<usize, TroupeError> {
        self.inner
            .supervisor
            .send(Stop {
                session_id: session_id.to_string(),
                hard,
            })
            .await
            .map_err(|_| TroupeError::Closed)
    }

    /// Closes a session.
    pub async fn close_session(&self, session_id: &str) -> Result<(), TroupeError> {
        let handle = lock(&self.inner.sessions).remove(session_id);
        match handle {
            Some(handle) => {
                if let Some(store) = &self.inner.config.sessions {
                    store.mark_closed(session_id);
                }
                Ok(handle.close().await?)
            }
            None => Err(TroupeError::UnknownSession(session_id.to_string())),
        }
    }

    /// Shuts down within [`DEFAULT_CLOSE_TIMEOUT`]; see [`Troupe::close_with_timeout`].
    pub async fn close(&self) -> CloseReport {
        self.close_with_timeout(DEFAULT_CLOSE_TIMEOUT).await
    }

    /// Shuts down: stops every running turn, closes every session, stops the actor system and
    /// waits up to `timeout` for its thread to end.
    pub async fn close_with_timeout(&self, timeout: Duration) -> CloseReport {
        let sessions: Vec<SessionHandle> =
            lock(&self.inner.sessions).drain().map(|(_, h)| h).collect();
        let work = async {
            for session in &sessions {
                let _ = session.stop(true).await;
            }
            for session in &sessions {
                let _ = session.close().await;
            }
        };
        let drained = tokio::time::timeout(timeout, work).await.is_ok();
        self.inner.system.stop();
        if let Some(store) = &self.inner.config.sessions {
            // Every step queued so far is on disk before the process may exit.
            if tokio::time::timeout(timeout, store.flush()).await.is_err() {
                tracing::warn!("the session store did not finish writing in time");
            }
        }
        let exited = lock(&self.inner.exited).take();
        let stopped = match exited {
            Some(rx) => tokio::time::timeout(timeout, rx).await.is_ok(),
            None => true,
        };
        // Once only: a second close finds the list empty.
        let hooks: Vec<CloseHook> = std::mem::take(&mut *lock(&self.inner.on_close));
        for hook in hooks {
            if tokio::time::timeout(timeout, hook()).await.is_err() {
                tracing::warn!("a close hook did not finish in time");
            }
        }
        CloseReport {
            sessions_closed: sessions.len(),
            clean: drained && stopped,
        }
    }
}

/// What [`Troupe::close`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseReport {
    /// How many sessions were open.
    pub sessions_closed: usize,
    /// Whether everything ended within the timeout.
    pub clean: bool,
}

/// A stream of [`SessionEvent`]s.
#[derive(Debug)]
pub struct EventStream {
    rx: tokio::sync::mpsc::UnboundedReceiver<SessionEvent>,
}

impl EventStream {
    /// The next event; `None` once the troupe is gone.
    pub async fn next(&mut self) -> Option<SessionEvent> {
        self.rx.recv().await
    }

    /// The next event if one is already waiting.
    pub fn try_next(&mut self) -> Option<SessionEvent> {
        self.rx.try_recv().ok()
    }
}

impl futures::Stream for EventStream {
    type Item = SessionEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>> {
        self.rx.poll_recv(cx)
    }
}

/// A stream of [`PendingApproval`]s.
#[derive(Debug)]
pub struct ApprovalStream {
    rx: tokio::sync::mpsc::UnboundedReceiver<PendingApproval>,
}

impl ApprovalStream {
    /// The next request; `None` once the troupe is gone.
    pub async fn next(&mut self) -> Option<PendingApproval> {
        self.rx.recv().await
    }
}

impl futures::Stream for ApprovalStream {
    type Item = PendingApproval;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PendingApproval>> {
        self.rx.poll_recv(cx)
    }
}
