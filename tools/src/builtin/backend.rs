//! Where terminal commands run. [`TerminalBackend`] starts a shell script and hands back its
//! merged output, its stdin, its exit and its process group; [`LocalBackend`] does that on this
//! machine. A docker or ssh backend implements the same trait; `terminal` and the process
//! registry only ever talk to the trait.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

use super::process_group::{ProcessGroup, spawn_kept};

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
}

/// A started command. Dropping it does not stop the command: stop it through `group`.
pub struct SpawnedCommand {
    /// The leader's pid, when the backend knows it.
    pub pid: Option<u32>,
    /// Stdout and stderr merged, in the order written.
    pub output: Box<dyn AsyncRead + Send + Unpin>,
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

/// Runs shell scripts somewhere: this machine, a container, a remote host.
pub trait TerminalBackend: Send + Sync + 'static {
    /// A short name for messages and logs (`local`, `docker`, ...).
    fn name(&self) -> &str;
    /// Starts `request.script` in a process group of its own.
    fn spawn(&self, request: SpawnRequest) -> std::io::Result<SpawnedCommand>;
}

/// Runs scripts on this machine with bash (or `sh` when bash is missing), each command leading
/// a new session so that its whole tree can be signalled.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    shell: PathBuf,
}

impl Default for LocalBackend {
    fn default() -> Self {
        let shell = ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("/bin/sh"));
        LocalBackend { shell }
    }
}

impl LocalBackend {
    /// A backend running scripts with `shell -c`.
    pub fn with_shell(shell: impl Into<PathBuf>) -> Self {
        LocalBackend {
            shell: shell.into(),
        }
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

    fn spawn(&self, request: SpawnRequest) -> std::io::Result<SpawnedCommand> {
        // One pipe for both streams keeps their interleaving as the command wrote it.
        let (reader, writer) = std::io::pipe()?;
        let mut command = tokio::process::Command::new(&self.shell);
        command
            .arg("-c")
            .arg(&request.script)
            .current_dir(&request.cwd)
            .env_clear()
            .envs(request.env.iter().map(|(k, v)| (k, v)))
            .stdin(if request.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(writer.try_clone()?)
            .stderr(writer);
        let mut kept = spawn_kept(&mut command)?;
        // The command object still holds our copies of the pipe's write end; while they live
        // the reader would never see end-of-file.
        drop(command);
        let pid = kept.child.id();
        let stdin = kept
            .child
            .stdin
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>);
        let output = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
        let group = kept.group();
        let exit = kept.exit();
        Ok(SpawnedCommand {
            pid,
            output: Box::new(output),
            stdin,
            exit,
            group: Arc::new(group),
        })
    }
}
