//! The ssh backend: commands, file operations and `execute_code` scripts on a remote host, so
//! that the agent cannot touch the machine troupe runs on. The system `ssh` is used with one
//! master connection per backend (started on first use, closed at the end) that every command
//! reuses, host key checking on, and no password prompts. A script's tool socket is forwarded
//! over the same connection.
//!
//! troupe's boundary: nothing of troupe's (its home, tokens, sessions, config) is on the remote
//! host, so commands there need no Landlock to keep them off it; what they may do on that host
//! is the remote user's rights. `terminal`'s `writable` has nothing to widen here.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use super::super::files::{Files, ShellFiles, ShellRunner};
use super::remote::{
    RemoteShell, host_scratch, remove_scratch, run_to_end, shell_quote, spawn_remote,
};
use super::{ExposedScratch, SpawnRequest, SpawnedCommand, TerminalBackend};
use crate::builtin::sandbox_env::{ChildSecrets, client_env, process_vars};

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSettings {
    /// The host name or address.
    pub host: String,
    /// The remote user; ssh's default when `None`.
    pub user: Option<String>,
    /// The port.
    pub port: u16,
    /// A private key file.
    pub key: Option<PathBuf>,
    /// The known-hosts file the host key is checked against (ssh's default when `None`).
    pub known_hosts: Option<PathBuf>,
    /// The ssh command.
    pub ssh: PathBuf,
    /// troupe's keys: the ssh client (and its long-lived master) never gets them.
    pub secrets: ChildSecrets,
}

impl SshSettings {
    /// Port 22, ssh's defaults for the rest.
    pub fn new(host: impl Into<String>) -> Self {
        SshSettings {
            host: host.into(),
            user: None,
            port: 22,
            key: None,
            known_hosts: None,
            ssh: PathBuf::from("ssh"),
            secrets: ChildSecrets::default(),
        }
    }

    fn shown(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}:{}", self.host, self.port),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Runs commands on a remote host over ssh.
#[derive(Clone)]
pub struct SshBackend {
    inner: Arc<Ssh>,
}

impl std::fmt::Debug for SshBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshBackend")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

struct Ssh {
    settings: SshSettings,
    /// Holds the master connection's socket (private to this process).
    control_dir: PathBuf,
    /// Whether the master connection is up.
    connected: Mutex<bool>,
    /// Shut down: no connection is opened again.
    closed: std::sync::atomic::AtomicBool,
    /// This backend's group files on the host (other troupes may share it).
    groups_dir: String,
}

impl SshBackend {
    /// A backend that connects on first use.
    pub fn new(settings: SshSettings) -> io::Result<Self> {
        if settings.host.trim().is_empty() || settings.host.starts_with('-') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{:?} is not a host name", settings.host),
            ));
        }
        let control_dir = host_scratch("ssh")?;
        Ok(SshBackend {
            inner: Arc::new(Ssh {
                settings,
                control_dir,
                connected: Mutex::new(false),
                closed: std::sync::atomic::AtomicBool::new(false),
                groups_dir: format!(
                    "{}/{}",
                    super::remote::GROUPS_DIR,
                    uuid::Uuid::new_v4().simple()
                ),
            }),
        })
    }

    /// Opens the master connection now (it opens on first use otherwise).
    pub fn connect(&self) -> io::Result<()> {
        self.inner.connect()
    }
}

impl Ssh {
    fn control_path(&self) -> PathBuf {
        self.control_dir.join("master")
    }

    /// `ssh` with the options every use shares.
    fn ssh(&self) -> std::process::Command {
        let s = &self.settings;
        let mut command = std::process::Command::new(&s.ssh);
        // The client's own settings (SSH_AUTH_SOCK, ...), none of troupe's keys: on a host
        // shared with this one a command could read the client's environment.
        command
            .env_clear()
            .envs(client_env(process_vars(), &s.secrets))
            .args(["-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=yes"])
            .args(["-o", "ServerAliveInterval=15"])
            .args(["-o", "ExitOnForwardFailure=yes"])
            .args(["-o", "LogLevel=ERROR"])
            .arg("-o")
            .arg(format!("ControlPath={}", self.control_path().display()))
            .args(["-p", &s.port.to_string()]);
        if let Some(file) = &s.known_hosts {
            command
                .arg("-o")
                .arg(format!("UserKnownHostsFile={}", file.display()));
        }
        if let Some(key) = &s.key {
            command
                .arg("-i")
                .arg(key)
                .args(["-o", "IdentitiesOnly=yes"]);
        }
        if let Some(user) = &s.user {
            command.args(["-l", user]);
        }
        command
    }

    fn connect(&self) -> io::Result<()> {
        let mut connected = self.connected.lock().unwrap_or_else(|p| p.into_inner());
        if *connected {
            return Ok(());
        }
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(io::Error::other("the ssh backend was shut down"));
        }
        // The master goes to the background once it is up (-f) with no stdio of ours, so it
        // never holds a command's output pipe open.
        let out = self
            .ssh()
            .args(["-o", "ControlMaster=yes", "-o", "ControlPersist=yes", "-f", "-N"])
            .arg("--")
            .arg(&self.settings.host)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "could not run `{}`: {e}. Install the OpenSSH client or choose another terminal.backend",
                        self.settings.ssh.display()
                    ),
                )
            })?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let hint = if text.contains("Host key verification failed")
                || text.contains("No ED25519 host key")
                || text.contains("host key")
            {
                "The host's key is not in the known-hosts file: add it (ssh-keyscan, after checking it) and point terminal.ssh.known_hosts at that file."
            } else if text.contains("Permission denied") {
                "The key was refused: check terminal.ssh.key and terminal.ssh.user."
            } else {
                "Check terminal.ssh.host and terminal.ssh.port, and that sshd runs there."
            };
            return Err(io::Error::other(format!(
                "ssh to {} failed: {text}. {hint}",
                self.settings.shown()
            )));
        }
        tracing::info!(host = %self.settings.shown(), "opened the ssh backend's connection");
        *connected = true;
        Ok(())
    }

    /// A command reusing the master connection, opening it first if needed.
    fn over_master(&self) -> io::Result<std::process::Command> {
        self.connect()?;
        Ok(self.reusing_master())
    }

    /// A command reusing the master connection (which must be up).
    fn reusing_master(&self) -> std::process::Command {
        let mut command = self.ssh();
        command.args(["-o", "ControlMaster=no", "-T"]);
        command
    }

    /// `sh -c script sh args...` for the remote login shell, every word quoted.
    fn remote_line(script: &str, args: &[&str], env: &[(String, String)]) -> String {
        let mut remote = String::new();
        if !env.is_empty() {
            remote.push_str("env");
            for (key, value) in env {
                remote.push(' ');
                remote.push_str(&shell_quote(&format!("{key}={value}")));
            }
            remote.push(' ');
        }
        remote.push_str("sh -c ");
        remote.push_str(&shell_quote(script));
        remote.push_str(" sh");
        for arg in args {
            remote.push(' ');
            remote.push_str(&shell_quote(arg));
        }
        remote
    }

    fn shutdown(&self) {
        let mut connected = self.connected.lock().unwrap_or_else(|p| p.into_inner());
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        if !*connected {
            return;
        }
        // Whatever this troupe's commands left running there ends with the connection (groups
        // already gone simply fail to be signalled), and their group files go.
        let mut sweep = self.reusing_master();
        sweep.arg("--").arg(&self.settings.host).arg(Self::remote_line(
            r#"for f in "$1"/*; do [ -f "$f" ] && kill -s KILL -- "-$(cat "$f")" 2>/dev/null; done; rm -rf -- "$1""#,
            &[&self.groups_dir],
            &[],
        ));
        if let Err(err) = run_to_end(sweep, &[]) {
            tracing::debug!(%err, "could not sweep the ssh backend's processes");
        }
        let closed = self
            .ssh()
            .args(["-O", "exit", "--", &self.settings.host])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !closed.is_ok_and(|s| s.success()) {
            tracing::warn!(host = %self.settings.shown(), "could not close the ssh master connection");
        }
        *connected = false;
    }
}

impl Drop for Ssh {
    /// A troupe that ends without closing still closes its connection.
    fn drop(&mut self) {
        self.shutdown();
        remove_scratch(&self.control_dir);
    }
}

impl RemoteShell for Ssh {
    fn command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
        _stdin: bool,
    ) -> io::Result<std::process::Command> {
        let mut command = self.over_master()?;
        command
            .arg("--")
            .arg(&self.settings.host)
            .arg(Self::remote_line(script, args, env));
        Ok(command)
    }

    fn tty_command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> io::Result<std::process::Command> {
        let mut command = self.over_master()?;
        // After the master's `-T`: the last word wins, and `-tt` insists on a terminal.
        command
            .arg("-tt")
            .arg("--")
            .arg(&self.settings.host)
            .arg(Self::remote_line(script, args, env));
        Ok(command)
    }

    fn groups_dir(&self) -> String {
        self.groups_dir.clone()
    }
}

impl TerminalBackend for SshBackend {
    fn name(&self) -> &str {
        "ssh"
    }

    fn spawn(&self, request: SpawnRequest) -> io::Result<SpawnedCommand> {
        spawn_remote(self.inner.clone(), request)
    }

    fn files(&self) -> Arc<dyn Files> {
        Arc::new(ShellFiles::new(self.inner.clone()))
    }

    fn shares_host_paths(&self) -> bool {
        false
    }

    fn expose_scratch(&self, dir: &Path, socket: &Path) -> io::Result<ExposedScratch> {
        let inner = &self.inner;
        // A name of its own: the remote host may be this machine, where the local directory's
        // name is taken (and its socket must not be replaced by the forward's).
        let remote_dir = format!("/tmp/troupe_remote_{}", uuid::Uuid::new_v4().simple());
        let created = inner.run_script(r#"umask 077 && mkdir -p -- "$1""#, &[&remote_dir], &[])?;
        if !created.status.success() {
            return Err(io::Error::other(format!(
                "could not make {remote_dir} on the remote host: {}",
                String::from_utf8_lossy(&created.stderr).trim()
            )));
        }
        let files = ShellFiles::new(inner.clone());
        for entry in std::fs::read_dir(dir)?.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                let remote = PathBuf::from(&remote_dir).join(entry.file_name());
                files.write(&remote, &std::fs::read(&path)?)?;
            }
        }
        // The script's socket on the remote host leads back to troupe's over the connection.
        let remote_socket = format!("{remote_dir}/rpc.sock");
        let forward = format!("{remote_socket}:{}", socket.display());
        let out = inner
            .ssh()
            .args(["-O", "forward", "-R", &forward, "--", &inner.settings.host])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "could not forward the tool socket to the remote host: {}. The server must allow stream-local forwarding (AllowStreamLocalForwarding).",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let exposed_dir = PathBuf::from(&remote_dir);
        let release_inner = inner.clone();
        let release = move || {
            let _ = release_inner
                .ssh()
                .args([
                    "-O",
                    "cancel",
                    "-R",
                    &forward,
                    "--",
                    &release_inner.settings.host,
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = release_inner.run_script(r#"rm -rf -- "$1""#, &[&remote_dir], &[]);
        };
        Ok(ExposedScratch {
            dir: exposed_dir,
            socket: PathBuf::from(remote_socket),
            release: Some(Box::new(release)),
        })
    }

    fn shutdown(&self) {
        self.inner.shutdown();
    }
}
