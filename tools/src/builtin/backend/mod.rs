//! Where terminal commands run. [`TerminalBackend`] starts a shell script and hands back its
//! output, its stdin, its exit and its process group, and gives the file system those commands
//! see. `terminal`, the process registry, `execute_code` and the file tools only ever talk to
//! the trait.
//!
//! # Layout
//! - this file: the trait and [`LocalBackend`] (this machine).
//! - [`sandbox`]: [`SandboxBackend`], a bubblewrap sandbox on this machine.
//! - [`docker`]: [`DockerBackend`], one long-lived hardened container.
//! - [`ssh`]: [`SshBackend`], a remote host over one multiplexed connection.
//! - `remote`: what docker and ssh share: the wrapper that puts a command in a process group
//!   of its own inside the backend, and the group handle that signals it there.

pub mod docker;
pub(crate) mod remote;
pub mod sandbox;
pub mod ssh;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

use super::confine::{ConfinePolicy, Ruleset};
use super::files::{Files, LocalFiles};
use super::process_group::{ProcessGroup, spawn_kept};
use super::pty::{self, PtySize};

pub use docker::{DockerBackend, DockerSettings};
pub use sandbox::{SandboxBackend, SandboxSettings};
pub use ssh::{SshBackend, SshSettings};

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// The shell script to run.
    pub script: String,
    /// The directory to run it in.
    pub cwd: PathBuf,
    /// The complete environment (nothing else is inherited).
    pub env: Vec<(String, String)>,
    /// Give the command a writable stdin; otherwise it reads from an empty input.
    pub stdin: bool,
    /// Keep stderr apart from stdout (in [`SpawnedCommand::stderr`]).
    pub split_stderr: bool,
    /// The session's workspace (its roots): writable under a boundary
    /// ([`LocalBackend::confined`]), re-granted in the sandbox when troupe's home hides it.
    pub workspace: Vec<PathBuf>,
    /// More paths a person approved this one call to write (`terminal`'s `writable`, the
    /// targets of an approved command).
    pub extra_writable: Vec<PathBuf>,
    /// Run on a pseudo-terminal of this size (its controlling terminal, stdin, stdout and
    /// stderr in one); `stdin` and `split_stderr` are then ignored and a writer is always
    /// given.
    pub pty: Option<PtySize>,
}

impl SpawnRequest {
    /// A script with no stdin and its two streams merged.
    pub fn new(
        script: impl Into<String>,
        cwd: impl Into<PathBuf>,
        env: Vec<(String, String)>,
    ) -> Self {
        SpawnRequest {
            script: script.into(),
            cwd: cwd.into(),
            env,
            stdin: false,
            split_stderr: false,
            workspace: vec![],
            extra_writable: vec![],
            pty: None,
        }
    }
}

/// What a command may write beyond temp and the configured grants, under a boundary: the
/// two fields of [`SpawnRequest`] that say so, for callers that pass them along.
#[derive(Debug, Clone, Default)]
pub struct CommandReach {
    /// The session's workspace roots ([`SpawnRequest::workspace`]).
    pub workspace: Vec<PathBuf>,
    /// Paths a person approved for this call ([`SpawnRequest::extra_writable`]).
    pub extra_writable: Vec<PathBuf>,
}

/// A started command. Dropping it does not stop the command: stop it through `group`.
pub struct SpawnedCommand {
    /// The leader's pid, when the backend knows it.
    pub pid: Option<u32>,
    /// Stdout and stderr merged, in the order written (stdout alone when split).
    pub output: Box<dyn AsyncRead + Send + Unpin>,
    /// Stderr, when the request asked for it apart.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// The command's stdin, when requested.
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Resolves to the exit code (minus the signal number when a signal killed it).
    pub exit: BoxFuture<'static, i32>,
    /// The command's process group.
    pub group: Arc<dyn ProcessGroup>,
}

impl std::fmt::Debug for SpawnedCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnedCommand")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// A scratch directory of an `execute_code` run as the backend sees it.
pub struct ExposedScratch {
    /// The directory inside the backend.
    pub dir: PathBuf,
    /// The tool socket inside the backend.
    pub socket: PathBuf,
    /// Undoes the exposure (an upload, a forwarded socket); run when the script ended.
    pub release: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for ExposedScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExposedScratch")
            .field("dir", &self.dir)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// Runs shell scripts somewhere: this machine, a sandbox, a container, a remote host.
pub trait TerminalBackend: Send + Sync + 'static {
    /// A short name for messages and logs (`local`, `docker`, ...).
    fn name(&self) -> &str;
    /// Starts `request.script` in a process group of its own.
    fn spawn(&self, request: SpawnRequest) -> std::io::Result<SpawnedCommand>;
    /// The file system the commands see, for the file tools.
    fn files(&self) -> Arc<dyn Files> {
        Arc::new(LocalFiles)
    }
    /// Whether the directories of this machine are the ones commands see (checks like "is
    /// this an existing directory" can be made here).
    fn shares_host_paths(&self) -> bool {
        true
    }
    /// Where `execute_code` puts a run's scratch directory on this machine; `None` for the
    /// system's temporary directory.
    fn scratch_root(&self) -> Option<PathBuf> {
        None
    }
    /// Makes a scratch directory (the script, its module and the tool socket at `socket`)
    /// reachable from inside the backend.
    fn expose_scratch(&self, dir: &Path, socket: &Path) -> std::io::Result<ExposedScratch> {
        Ok(ExposedScratch {
            dir: dir.to_path_buf(),
            socket: socket.to_path_buf(),
            release: None,
        })
    }
    /// Whether commands are kept off this machine's files (but their workspace) and network:
    /// only then may the configuration relax the dangerous-command approval.
    fn isolated(&self) -> bool {
        false
    }
    /// Whether commands run inside troupe's boundary here, and a call may ask for more
    /// writable paths ([`SpawnRequest::extra_writable`]).
    fn confined(&self) -> bool {
        false
    }
    /// Whether `path` lies beyond the boundary for good (troupe's home, a config file troupe
    /// read, or a directory holding one): no approval may make it writable.
    fn out_of_reach(&self, path: &Path) -> bool {
        let _ = path;
        false
    }
    /// Gives back what the backend holds (a container, a connection). Called once, at the end.
    fn shutdown(&self) {}
}

/// Runs scripts on this machine with bash (or `sh` when bash is missing), each command leading
/// a new session so that its whole tree can be signalled; inside the boundary of a
/// [`ConfinePolicy`] when given one ([`LocalBackend::confined`]).
#[derive(Debug, Clone)]
pub struct LocalBackend {
    shell: PathBuf,
    confine: Option<Arc<ConfinePolicy>>,
}

impl Default for LocalBackend {
    fn default() -> Self {
        let shell = ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("/bin/sh"));
        LocalBackend {
            shell,
            confine: None,
        }
    }
}

impl LocalBackend {
    /// A backend running scripts with `shell -c`.
    pub fn with_shell(shell: impl Into<PathBuf>) -> Self {
        LocalBackend {
            shell: shell.into(),
            confine: None,
        }
    }

    /// Runs every command inside `policy`'s boundary: writable only the request's workspace,
    /// its approved extras, temp and the configured grants; troupe's home out of reach.
    pub fn confined(mut self, policy: Arc<ConfinePolicy>) -> Self {
        self.confine = Some(policy);
        self
    }

    /// The boundary, when commands run in one.
    pub fn policy(&self) -> Option<&Arc<ConfinePolicy>> {
        self.confine.as_ref()
    }

    /// The shell it runs scripts with.
    pub fn shell(&self) -> &std::path::Path {
        &self.shell
    }
}

impl TerminalBackend for LocalBackend {
    fn name(&self) -> &str {
        "local"
    }

    fn spawn(&self, mut request: SpawnRequest) -> std::io::Result<SpawnedCommand> {
        let mut command = tokio::process::Command::new(&self.shell);
        command
            .arg("-c")
            .arg(&request.script)
            .current_dir(&request.cwd);
        let Some(policy) = &self.confine else {
            return spawn_here(command, &request, None);
        };
        // Built in the parent, applied in the child; a boundary that cannot be built means
        // the command does not run.
        let ruleset = policy
            .command_ruleset(&request.workspace, &request.extra_writable)
            .map_err(|e| {
                std::io::Error::other(format!("troupe's boundary could not be set up: {e}"))
            })?;
        if let Some(tmp) = policy.private_tmp() {
            request.env.retain(|(k, _)| k != "TMPDIR");
            request
                .env
                .push(("TMPDIR".into(), tmp.display().to_string()));
        }
        spawn_here(command, &request, Some(&ruleset))
    }

    fn confined(&self) -> bool {
        self.confine.is_some()
    }

    fn out_of_reach(&self, path: &Path) -> bool {
        self.confine
            .as_ref()
            .is_some_and(|p| p.touches_hidden(path))
    }
}

/// The local command (its program and leading arguments) a backend runs a script through.
pub(crate) fn command_of(argv: &[OsString]) -> std::io::Result<tokio::process::Command> {
    let (program, args) = argv.split_first().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command line")
    })?;
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    Ok(command)
}

/// Starts `command` on this machine under a keeper, with `request`'s environment and streams,
/// inside `confine` when given.
pub(crate) fn spawn_here(
    mut command: tokio::process::Command,
    request: &SpawnRequest,
    confine: Option<&Ruleset>,
) -> std::io::Result<SpawnedCommand> {
    command
        .env_clear()
        .envs(request.env.iter().map(|(k, v)| (k, v)));
    if let Some(size) = request.pty {
        return spawn_here_on_pty(command, size, confine);
    }
    command.stdin(if request.stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let (output, stderr) = wire_output(&mut command, request.split_stderr)?;
    let mut kept = spawn_kept(&mut command, confine, false)?;
    // The command object still holds our copies of the pipes' write ends; while they live
    // the readers would never see end-of-file.
    drop(command);
    let pid = kept.child.id();
    let stdin = kept
        .child
        .stdin
        .take()
        .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>);
    let group = kept.group();
    let exit = kept.exit();
    Ok(SpawnedCommand {
        pid,
        output,
        stderr,
        stdin,
        exit,
        group: Arc::new(group),
    })
}

/// [`spawn_here`] on a pty: the keeper leads the session the pty controls, the command is
/// the terminal's foreground group.
fn spawn_here_on_pty(
    mut command: tokio::process::Command,
    size: PtySize,
    confine: Option<&Ruleset>,
) -> std::io::Result<SpawnedCommand> {
    let pair = pty::open(size)?;
    let master = pty::PtyMaster::new(pair.master)?;
    attach_slave(&mut command, &pair.slave)?;
    let kept = spawn_kept(&mut command, confine, true)?;
    // Our copies of the slave: while they live, the master never reads end-of-file.
    drop(command);
    drop(pair.slave);
    let pid = kept.child.id();
    let group = kept.group();
    let exit = kept.exit();
    Ok(SpawnedCommand {
        pid,
        output: Box::new(master.reader()),
        stderr: None,
        stdin: Some(Box::new(master.writer())),
        exit,
        group: Arc::new(group),
    })
}

/// Makes `slave` the command's stdin, stdout and stderr.
pub(crate) fn attach_slave(
    command: &mut tokio::process::Command,
    slave: &OwnedFd,
) -> std::io::Result<()> {
    command
        .stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(slave.try_clone()?);
    Ok(())
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// Points the command's stdout and stderr at pipes: one for both (which keeps their
/// interleaving as written) or one each.
pub(crate) fn wire_output(
    command: &mut tokio::process::Command,
    split: bool,
) -> std::io::Result<(Reader, Option<Reader>)> {
    let reader = |fd: std::io::PipeReader| -> std::io::Result<Reader> {
        Ok(Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(
            OwnedFd::from(fd),
        )?))
    };
    let (out_read, out_write) = std::io::pipe()?;
    if split {
        let (err_read, err_write) = std::io::pipe()?;
        command.stdout(out_write).stderr(err_write);
        Ok((reader(out_read)?, Some(reader(err_read)?)))
    } else {
        command.stdout(out_write.try_clone()?).stderr(out_write);
        Ok((reader(out_read)?, None))
    }
}
