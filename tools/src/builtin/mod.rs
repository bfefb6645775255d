//! The built-in tools every session gets directly (toolset `core`, never deferred): `terminal`
//! and `process` for shell commands and background processes, `read_file`, `write_file`,
//! `patch` and `search_files` for files, and `execute_code` for Python scripts that call tools.
//! They run real processes on the host, so each command leads its own process group and is
//! stopped as a whole on timeout, stop and session end.
//!
//! Start with [`Builtins::start`] (shared state: the session directories, the process registry,
//! the terminal backend), then [`core_tools`] gives the [`ToolDef`]s to register. The Supervisor
//! uses the pure checks [`check_command`] and [`path_needs_approval`] before letting a call run,
//! and marks approved calls with [`CallContext::with_approval`](crate::CallContext::with_approval).
//!
//! # Layout
//! - [`backend`]: the [`TerminalBackend`] trait and the backends: local, sandbox (bubblewrap),
//!   docker, ssh. [`files`]: the file system the file tools see through a backend.
//! - `terminal`, `process_tool`: the two process tools; [`process_registry`] the registry actor,
//!   [`receipts`] what finished processes leave on disk.
//! - [`confine`]: the boundary (Landlock) of what commands, hooks and MCP servers reach.
//! - [`danger`] (the dangerous-command check, the second layer behind confinement), [`paths`]:
//!   what needs approval; [`exit_codes`]: exit codes explained;
//!   [`redact`]: secret masking; [`sandbox_env`]: child environments.
//! - `file_read`, `file_write`, `patch`, `search_files`: the file tools.
//! - `execute_code`, `code_rpc`, `code_stub`: scripts calling tools over a Unix socket.

mod args;
pub(crate) mod atomic_write;
pub mod backend;
mod beneath;
mod capture;
#[cfg(unix)]
mod code_rpc;
#[cfg(unix)]
mod code_stub;
pub mod confine;
pub mod danger;
#[cfg(unix)]
mod execute_code;
pub mod exit_codes;
mod file_read;
mod file_write;
pub mod files;
mod glob;
mod patch;
pub mod paths;
pub mod privileges;
pub mod process_group;
pub mod process_registry;
mod process_tool;
pub mod pty;
pub mod receipts;
pub mod redact;
pub mod sandbox_env;
mod schemas;
mod search_files;
pub mod sudo;
pub mod sudo_plan;
mod terminal;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Map, Value};

pub use backend::{
    CommandReach, DockerBackend, DockerSettings, LocalBackend, SandboxBackend, SandboxSettings,
    SpawnRequest, SpawnedCommand, SshBackend, SshSettings, TerminalBackend,
};
pub use danger::{
    CommandVerdict, KeystrokeCheck, approval_reason, check_command, check_command_in,
    check_keystrokes, forbidden_reason, write_targets,
};
#[cfg(unix)]
pub use execute_code::{ALLOWED_IN_SCRIPTS, CodeMode};
pub use exit_codes::exit_code_meaning;
pub use files::Files;
pub use paths::{PathAccess, path_needs_approval, resolve_path};
pub use process_registry::{
    NoticeKind, ProcessNotice, ProcessRegistry, RegistryConfig, StartOptions, StartedProcess,
    StdinText,
};
pub use process_tool::process_keystrokes;
pub use receipts::{Receipt, ReceiptStore};

use crate::home::TroupeHome;
use crate::tool::{CallContext, PatchPaths, ToolDef, ToolHandler, ToolHints, ToolResult};

/// `terminal` settings.
#[derive(Debug, Clone)]
pub struct TerminalConfig {
    /// Timeout when the call gives none (seconds).
    pub default_timeout_secs: u64,
    /// Longest foreground timeout accepted (seconds); longer runs must go to the background.
    pub max_foreground_timeout_secs: u64,
    /// Output shown at most (characters), head and tail kept.
    pub max_output_chars: usize,
    /// Between SIGTERM and SIGKILL when a command is stopped.
    pub kill_grace: Duration,
    /// Variables passed to commands even when they would be stripped (never troupe's own
    /// keys: see [`BuiltinConfig::secrets`]).
    pub env_passthrough: Vec<String>,
    /// Ask before dangerous commands. Turning it off only takes effect on a backend that
    /// keeps commands off this machine and its network ([`TerminalBackend::isolated`]).
    pub dangerous_command_approval: bool,
    /// `terminal.confine`: whether commands run inside the boundary.
    pub confine: confine::ConfineMode,
    /// `terminal.network`: commands may use TCP (local backend, under the boundary).
    pub network: bool,
    /// `terminal.writable`: more paths commands may write.
    pub writable: Vec<PathBuf>,
    /// `SUDO_PASSWORD` from troupe's environment file (or environment): fed to sudo for
    /// sessions that cannot ask a person.
    pub sudo_password: Option<SudoPassword>,
}

/// A sudo password: never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SudoPassword(pub String);

impl std::fmt::Debug for SudoPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SudoPassword(..)")
    }
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            default_timeout_secs: 180,
            max_foreground_timeout_secs: 600,
            max_output_chars: 50_000,
            kill_grace: Duration::from_secs(2),
            env_passthrough: vec![],
            dangerous_command_approval: true,
            confine: confine::ConfineMode::Auto,
            network: true,
            writable: vec![],
            sudo_password: None,
        }
    }
}

/// `execute_code` settings.
#[derive(Debug, Clone)]
pub struct CodeConfig {
    /// Longest run.
    pub timeout: Duration,
    /// Between SIGTERM and SIGKILL when a script is stopped.
    pub kill_grace: Duration,
    /// Tool calls a run may make.
    pub max_tool_calls: usize,
    /// Stdout kept (bytes, head and tail).
    pub max_stdout_bytes: usize,
    /// Stderr kept (bytes, head and tail).
    pub max_stderr_bytes: usize,
    /// Where scripts run and with which interpreter.
    #[cfg(unix)]
    pub mode: CodeMode,
    /// The interpreter for `strict` mode and the fallback for `project` (default `python3`).
    pub python: PathBuf,
    /// Variables passed to scripts even though they would be dropped.
    pub env_passthrough: Vec<String>,
}

impl Default for CodeConfig {
    fn default() -> Self {
        CodeConfig {
            timeout: Duration::from_secs(300),
            kill_grace: Duration::from_secs(5),
            max_tool_calls: 50,
            max_stdout_bytes: 50_000,
            max_stderr_bytes: 10_000,
            #[cfg(unix)]
            mode: CodeMode::Project,
            python: PathBuf::from("python3"),
            env_passthrough: vec![],
        }
    }
}

/// Settings of the built-in tools.
#[derive(Debug, Clone)]
pub struct BuiltinConfig {
    /// Where a session starts (its first working directory).
    pub default_cwd: PathBuf,
    /// Directories sessions may use without approval; empty means the session's working
    /// directory.
    pub allowed_roots: Vec<PathBuf>,
    /// Where receipts of finished background processes go.
    pub receipts_dir: PathBuf,
    /// `terminal` settings.
    pub terminal: TerminalConfig,
    /// `execute_code` settings.
    pub code: CodeConfig,
    /// troupe's keys (the variables naming them, their values): no command, script or backend
    /// client gets them, whatever `env_passthrough` says.
    pub secrets: sandbox_env::ChildSecrets,
}

impl Default for BuiltinConfig {
    /// [`BuiltinConfig::in_home`] of this process's home ([`TroupeHome::from_env`]).
    fn default() -> Self {
        BuiltinConfig::in_home(&TroupeHome::from_env())
    }
}

impl BuiltinConfig {
    /// The defaults, with receipts in `home`'s `process-results` and sessions starting in the
    /// current directory.
    pub fn in_home(home: &TroupeHome) -> Self {
        BuiltinConfig {
            default_cwd: std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir()),
            allowed_roots: vec![],
            receipts_dir: home.process_results(),
            terminal: TerminalConfig::default(),
            code: CodeConfig::default(),
            secrets: sandbox_env::ChildSecrets::default(),
        }
    }
}

/// A backend sessions can be bound to by name (a board profile's).
pub struct NamedBackend {
    /// Its name (the profile's).
    pub name: String,
    /// The backend.
    pub backend: Arc<dyn TerminalBackend>,
    /// The file system it gives.
    files: Arc<dyn Files>,
    /// Ask before dangerous commands (only `false` on an isolated backend waives it).
    pub dangerous_command_approval: bool,
}

impl NamedBackend {
    /// `backend` under `name`.
    pub fn new(
        name: impl Into<String>,
        backend: Arc<dyn TerminalBackend>,
        dangerous_command_approval: bool,
    ) -> Self {
        NamedBackend {
            name: name.into(),
            files: backend.files(),
            backend,
            dangerous_command_approval,
        }
    }
}

impl std::fmt::Debug for NamedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedBackend")
            .field("name", &self.name)
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

/// Why the built-in tools could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuiltinError {
    /// Called outside a tokio runtime; the process registry needs one.
    #[error("the built-in tools need a tokio runtime; call Builtins::start from inside one")]
    NoRuntime,
}

/// The state the built-in tools share: settings, each session's working directory, the process
/// registry and the terminal backend. Cheap to share (`Arc`).
pub struct Builtins {
    pub(crate) config: BuiltinConfig,
    pub(crate) backend: Arc<dyn TerminalBackend>,
    /// The file system the backend's commands see.
    pub(crate) files: Arc<dyn Files>,
    /// Backends some sessions use instead (a board profile's), by name.
    named: HashMap<String, NamedBackend>,
    /// session id -> the name of the backend it uses, when not the default.
    session_backends: Mutex<HashMap<String, String>>,
    pub(crate) processes: ProcessRegistry,
    /// session id -> its working directory, as the last `cd` left it.
    dirs: Mutex<HashMap<String, PathBuf>>,
    /// session id -> its workspace: the root of its path checks (a kanban task's directory).
    workspaces: Mutex<HashMap<String, PathBuf>>,
    /// session id -> the sudo password its person typed, for the rest of the session.
    pub(crate) sudo_passwords: Mutex<HashMap<String, SudoPassword>>,
}

impl std::fmt::Debug for Builtins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtins")
            .field("config", &self.config)
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl Builtins {
    /// Starts the built-ins with the local backend, on the current tokio runtime.
    pub fn start(config: BuiltinConfig) -> Result<Arc<Self>, BuiltinError> {
        Builtins::start_with_backend(config, Arc::new(LocalBackend::default()))
    }

    /// Starts the built-ins with another terminal backend.
    pub fn start_with_backend(
        config: BuiltinConfig,
        backend: Arc<dyn TerminalBackend>,
    ) -> Result<Arc<Self>, BuiltinError> {
        Builtins::start_with_backends(config, backend, vec![])
    }

    /// Starts the built-ins with a default backend and named ones that sessions can be bound
    /// to ([`Builtins::set_session_backend`]).
    pub fn start_with_backends(
        config: BuiltinConfig,
        backend: Arc<dyn TerminalBackend>,
        named: Vec<NamedBackend>,
    ) -> Result<Arc<Self>, BuiltinError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(BuiltinError::NoRuntime);
        }
        let registry = ProcessRegistry::launch(
            ReceiptStore::new(config.receipts_dir.clone()),
            RegistryConfig {
                kill_grace: config.terminal.kill_grace,
                max_wait: Duration::from_secs(config.terminal.default_timeout_secs),
            },
        );
        Ok(Arc::new(Builtins {
            config,
            files: backend.files(),
            backend,
            named: named.into_iter().map(|n| (n.name.clone(), n)).collect(),
            session_backends: Mutex::new(HashMap::new()),
            processes: registry,
            dirs: Mutex::new(HashMap::new()),
            workspaces: Mutex::new(HashMap::new()),
            sudo_passwords: Mutex::new(HashMap::new()),
        }))
    }

    /// The settings.
    pub fn config(&self) -> &BuiltinConfig {
        &self.config
    }

    /// The default terminal backend.
    pub fn backend(&self) -> &Arc<dyn TerminalBackend> {
        &self.backend
    }

    fn named_of(&self, session_id: &str) -> Option<&NamedBackend> {
        let bound = self
            .session_backends
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        bound.get(session_id).and_then(|name| self.named.get(name))
    }

    /// The backend `session_id`'s commands run on.
    pub fn backend_of(&self, session_id: &str) -> Arc<dyn TerminalBackend> {
        match self.named_of(session_id) {
            Some(named) => named.backend.clone(),
            None => self.backend.clone(),
        }
    }

    /// The file system `session_id`'s file tools use.
    pub(crate) fn files_of(&self, session_id: &str) -> Arc<dyn Files> {
        match self.named_of(session_id) {
            Some(named) => named.files.clone(),
            None => self.files.clone(),
        }
    }

    /// Runs `session_id` on the named backend; false (and nothing changes) when there is none
    /// by that name.
    pub fn set_session_backend(&self, session_id: &str, name: &str) -> bool {
        if !self.named.contains_key(name) {
            return false;
        }
        let mut bound = self
            .session_backends
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        bound.insert(session_id.to_string(), name.to_string());
        true
    }

    /// Whether `session_id`'s dangerous commands wait for approval: always, unless the
    /// configuration turned it off for its backend and that backend is isolated (a container or
    /// sandbox without network).
    pub fn dangerous_commands_need_approval(&self, session_id: &str) -> bool {
        match self.named_of(session_id) {
            Some(named) => named.dangerous_command_approval || !named.backend.isolated(),
            None => self.config.terminal.dangerous_command_approval || !self.backend.isolated(),
        }
    }

    /// Where the dangerous-command check reads the script files a command of `session_id`
    /// names: the directory it runs in (`workdir`, or the session's), when its backend shares
    /// the host's paths; `None` otherwise, so relative scripts count as unreadable.
    fn check_dir(&self, session_id: &str, workdir: Option<&str>) -> Option<PathBuf> {
        if !self.backend_of(session_id).shares_host_paths() {
            return None;
        }
        let dir = self.session_cwd(session_id);
        Some(match workdir.filter(|w| !w.trim().is_empty()) {
            Some(w) => {
                let p = paths::expand_home(w);
                if p.is_absolute() { p } else { dir.join(p) }
            }
            None => dir,
        })
    }

    /// The dangerous-command verdict for a `terminal` command of `session_id` that runs in
    /// `workdir` (or the session's directory).
    pub fn check_terminal_command(
        &self,
        session_id: &str,
        command: &str,
        workdir: Option<&str>,
    ) -> CommandVerdict {
        danger::check_command_at(command, self.check_dir(session_id, workdir).as_deref())
    }

    /// The dangerous-command check of writing `data` to the stdin of background process
    /// `process_id` (`closing`: its stdin is then closed, which runs an unfinished line): every
    /// line the write completes, with what earlier writes left unfinished before it, and what
    /// stays unfinished after it.
    pub fn check_process_write(
        &self,
        session_id: &str,
        process_id: &str,
        data: &str,
        closing: bool,
    ) -> KeystrokeCheck {
        let host = self.check_dir(session_id, None).is_some();
        match self.processes.stdin_text(process_id) {
            Some(typed) => {
                let cwd = host.then_some(typed.cwd.as_path());
                check_keystrokes(&typed.pending, data, &typed.command, cwd, closing)
            }
            None => check_keystrokes("", data, "", None, closing),
        }
    }

    /// Gives back what the backends hold (containers, connections).
    pub fn shutdown_backend(&self) {
        self.backend.shutdown();
        for named in self.named.values() {
            named.backend.shutdown();
        }
    }

    /// The process registry handle.
    pub fn processes(&self) -> &ProcessRegistry {
        &self.processes
    }

    /// The session's working directory (the default until a `cd` moved it).
    pub fn session_cwd(&self, session_id: &str) -> PathBuf {
        let dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.get(session_id)
            .cloned()
            .unwrap_or_else(|| self.config.default_cwd.clone())
    }

    /// Moves the session's working directory.
    pub fn set_session_cwd(&self, session_id: &str, dir: PathBuf) {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.insert(session_id.to_string(), dir);
    }

    /// Puts a session in a workspace: it starts there, and the workspace replaces the default
    /// directory as the root of its path checks (the configured roots still apply).
    pub fn set_session_workspace(&self, session_id: &str, dir: PathBuf) {
        self.set_session_cwd(session_id, dir.clone());
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        workspaces.insert(session_id.to_string(), dir);
    }

    /// Forgets a session's workspace, working directory and backend (the session ended).
    pub fn clear_session_workspace(&self, session_id: &str) {
        self.session_backends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        workspaces.remove(session_id);
        drop(workspaces);
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.remove(session_id);
    }

    /// What `session_id`'s commands may write under the boundary: its workspace (a board
    /// task's directory, else the directory troupe started in) and the configured roots. Not
    /// the directory a `cd` moved to: that would let `cd /` widen the boundary.
    pub fn writable_roots(&self, session_id: &str) -> Vec<PathBuf> {
        let workspace = {
            let workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
            workspaces.get(session_id).cloned()
        };
        let mut roots = vec![workspace.unwrap_or_else(|| self.config.default_cwd.clone())];
        roots.extend(self.config.allowed_roots.iter().cloned());
        roots
    }

    /// The directories `session_id` may use without approval.
    pub fn allowed_roots(&self, session_id: &str) -> Vec<PathBuf> {
        let workspace = {
            let workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
            workspaces.get(session_id).cloned()
        };
        if let Some(root) = workspace {
            let mut roots = vec![root];
            roots.extend(self.config.allowed_roots.iter().cloned());
            return roots;
        }
        if self.config.allowed_roots.is_empty() {
            vec![
                self.config.default_cwd.clone(),
                self.session_cwd(session_id),
            ]
        } else {
            self.config.allowed_roots.clone()
        }
    }

    /// Why `path` needs approval for this session, if it does.
    pub fn path_needs_approval(
        &self,
        session_id: &str,
        path: &str,
        access: PathAccess,
    ) -> Option<String> {
        path_needs_approval(
            path,
            access,
            &self.session_cwd(session_id),
            &self.allowed_roots(session_id),
        )
    }

    /// The directory a checked path of `session_id` is opened beneath: the deepest allowed root
    /// that holds it (the workspace, or a root troupe.yaml grants), or `/` for a path outside
    /// them all that a person approved. Writes and deletes below it cannot be redirected out of
    /// it by a link that appears after the check.
    pub(crate) fn root_beneath(&self, session_id: &str, resolved: &Path) -> PathBuf {
        let cwd = self.session_cwd(session_id);
        self.allowed_roots(session_id)
            .iter()
            .map(|root| resolve_path(&root.to_string_lossy(), &cwd))
            .filter(|root| resolved.starts_with(root))
            .max_by_key(|root| root.components().count())
            .unwrap_or_else(|| PathBuf::from("/"))
    }

    /// Ends a session: stops its background processes (unless handed over) and forgets its
    /// working directory. Returns how many processes were stopped. Its foreground calls are
    /// stopped through their cancellation tokens by whoever cancels the session.
    pub async fn end_session(&self, session_id: &str) -> usize {
        let stopped = self.processes.end_session(session_id).await;
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.remove(session_id);
        drop(dirs);
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        workspaces.remove(session_id);
        drop(workspaces);
        self.session_backends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
        // The password the person typed lives no longer than their session.
        crate::sync::lock(&self.sudo_passwords).remove(session_id);
        stopped
    }
}

type CallFn = fn(Arc<Builtins>, Map<String, Value>, CallContext) -> BoxFuture<'static, ToolResult>;

/// A built-in tool's handler: the shared state plus the function that runs the tool.
struct BuiltinHandler {
    builtins: Arc<Builtins>,
    run: CallFn,
}

impl ToolHandler for BuiltinHandler {
    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        (self.run)(self.builtins.clone(), arguments, ctx)
    }
}

fn def(builtins: &Arc<Builtins>, name: &str, run: CallFn) -> ToolDef {
    let (description, parameters) = schemas::schema(name);
    ToolDef::new(name, description, parameters)
        .with_toolset("core")
        .with_hints(hints_of(name))
        .with_handler(Arc::new(BuiltinHandler {
            builtins: builtins.clone(),
            run,
        }))
}

fn paths(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The planner and approval hints a built-in declares: what it reads or writes and where the
/// paths are. The batch planner judges tools by these alone, never by their names, so a tool of
/// another source named like a built-in gets none of them. Default hints for any other name.
pub fn hints_of(name: &str) -> ToolHints {
    match name {
        "read_file" => ToolHints {
            read_only: true,
            idempotent: true,
            parallel_safe: true,
            path_args: paths(&["path"]),
            ..ToolHints::default()
        },
        // A search without a path covers the working directory, so it still runs beside
        // other readers.
        "search_files" => ToolHints {
            read_only: true,
            idempotent: true,
            parallel_safe: true,
            path_args: paths(&["path"]),
            default_path: Some(".".into()),
            ..ToolHints::default()
        },
        "write_file" => ToolHints {
            destructive: true,
            idempotent: true,
            path_args: paths(&["path"]),
            ..ToolHints::default()
        },
        // In patch mode the patch names the files and `path` is ignored.
        "patch" => ToolHints {
            destructive: true,
            path_args: paths(&["path"]),
            patch_paths: Some(PatchPaths {
                mode_arg: "mode".into(),
                mode_value: "patch".into(),
                body_arg: "patch".into(),
            }),
            ..ToolHints::default()
        },
        // terminal, process, execute_code: anything may happen; each runs alone.
        _ => ToolHints::default(),
    }
}

/// Every built-in tool, ready to register: toolset `core`, kind core, with handlers, schemas
/// and planner hints ([`hints_of`]). `execute_code` is only offered on Unix.
pub fn core_tools(builtins: &Arc<Builtins>) -> Vec<ToolDef> {
    let mut tools = vec![
        def(builtins, "terminal", |b, a, c| {
            terminal::call(b, a, c).boxed()
        }),
        def(builtins, "process", |b, a, c| {
            process_tool::call(b, a, c).boxed()
        }),
        def(builtins, "read_file", |b, a, c| {
            file_read::call(b, a, c).boxed()
        }),
        def(builtins, "write_file", |b, a, c| {
            file_write::call(b, a, c).boxed()
        }),
        def(builtins, "patch", |b, a, c| patch::call(b, a, c).boxed()),
        def(builtins, "search_files", |b, a, c| {
            search_files::call(b, a, c).boxed()
        }),
    ];
    #[cfg(unix)]
    tools.push(def(builtins, "execute_code", |b, a, c| {
        execute_code::call(b, a, c).boxed()
    }));
    // Answered by the session with its profile's stores (`SessionConfig::memory`).
    tools.push(crate::memory::memory_tool(None));
    // Answered by the session with its own list.
    tools.push(crate::todo::todo_tool());
    // Routed by the session to its supervisor, like an approval.
    tools.push(crate::clarify::clarify_tool());
    tools
}

/// Resolves `path` for a file tool of `ctx`'s session, refusing it when it needs approval the
/// call does not carry.
pub(crate) fn authorize(
    builtins: &Builtins,
    ctx: &CallContext,
    path: &str,
    access: PathAccess,
) -> Result<PathBuf, ToolResult> {
    if path.trim().is_empty() {
        return Err(ToolResult::error_json(
            serde_json::json!({"error": "'path' is empty. Send a file path, absolute or relative to the working directory."}),
        ));
    }
    // Resolved once: the path checked is the path used.
    let cwd = builtins.session_cwd(&ctx.session_id);
    let resolved = resolve_path(path, &cwd);
    if let Some(reason) = paths::resolved_needs_approval(
        &resolved,
        access,
        &cwd,
        &builtins.allowed_roots(&ctx.session_id),
    ) && !ctx.approved
    {
        return Err(ToolResult::error_json(serde_json::json!({
            "error": format!("This needs the user's approval first: {reason}. Nothing was read or changed."),
            "status": "blocked",
            "path": path,
        })));
    }
    Ok(resolved)
}
