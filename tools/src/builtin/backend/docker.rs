//! The docker backend: one long-lived container per troupe process, started on first use and
//! removed at the end (kept and reused with `persistent`). Every command, file operation and
//! `execute_code` script runs inside it through `docker exec`.
//!
//! Hardened by default: every capability dropped, `no-new-privileges`, a read-only root file
//! system with a private `/tmp`, pids, memory and cpu limits, no network unless configured, and
//! the configured directories (the workspace) the only writable mounts, each at the same path
//! as on this machine so that paths mean the same inside and out. Commands run with troupe's
//! own user and group ids, so files they make in the workspace belong to the user.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use super::super::files::{Files, ShellFiles};
use super::remote::{RemoteShell, host_scratch, remove_scratch, spawn_remote};
use super::{SpawnRequest, SpawnedCommand, TerminalBackend};
use crate::builtin::sandbox_env::{ChildSecrets, client_env, process_vars};

/// How to run the container.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerSettings {
    /// The image (it must hold `sh`, `setsid` and GNU coreutils; `python3` for `execute_code`).
    pub image: String,
    /// Keep the container when troupe exits and reuse it next time.
    pub persistent: bool,
    /// Directories mounted writable at the same path (the workspace, the working directory).
    pub mounts: Vec<PathBuf>,
    /// Where commands start when none is given.
    pub cwd: PathBuf,
    /// `--memory` (for example `2g`).
    pub memory: Option<String>,
    /// `--cpus` (for example `1.5`).
    pub cpus: Option<String>,
    /// `--pids-limit`.
    pub pids: Option<u32>,
    /// A docker network to join; `None` means no network at all.
    pub network: Option<String>,
    /// Disk limit in megabytes: the size of the container's `/tmp`, and of its root file
    /// system where docker's storage driver can limit it (`--storage-opt size=`).
    pub disk_mb: Option<u64>,
    /// Variables of troupe's environment handed to every command in the container (the
    /// person's choice: commands inside can read them), never one of troupe's own keys.
    pub forward_env: Vec<String>,
    /// Directories covered by an empty one when a mount holds them (troupe's home); the
    /// mounts inside them are mounted again on top.
    pub hidden: Vec<PathBuf>,
    /// The docker command.
    pub docker: PathBuf,
    /// troupe's keys: the docker client never gets them in its environment.
    pub secrets: ChildSecrets,
}

impl DockerSettings {
    /// Defaults for `image`: no network, 1024 processes, a writable mount of `cwd`.
    pub fn new(image: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        let cwd = cwd.into();
        DockerSettings {
            image: image.into(),
            persistent: false,
            mounts: vec![cwd.clone()],
            cwd,
            memory: None,
            cpus: None,
            pids: Some(1024),
            network: None,
            disk_mb: None,
            forward_env: vec![],
            hidden: vec![],
            docker: PathBuf::from("docker"),
            secrets: ChildSecrets::default(),
        }
    }
}

/// Runs commands in one docker container.
#[derive(Clone)]
pub struct DockerBackend {
    inner: Arc<Docker>,
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

struct Docker {
    settings: DockerSettings,
    /// Mounted at the same path: `execute_code` runs' scratch directories.
    scratch: PathBuf,
    /// The container's name once it runs.
    container: Mutex<Option<String>>,
    /// Shut down: no container is started again (a late stop of a process must not).
    closed: std::sync::atomic::AtomicBool,
}

impl DockerBackend {
    /// A backend that starts its container on first use.
    pub fn new(settings: DockerSettings) -> io::Result<Self> {
        Ok(DockerBackend {
            inner: Arc::new(Docker {
                scratch: host_scratch("docker")?,
                settings,
                container: Mutex::new(None),
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The container's name, starting it if needed.
    pub fn container(&self) -> io::Result<String> {
        self.inner.container()
    }
}

impl Docker {
    fn docker(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.settings.docker);
        // The client's own settings (DOCKER_HOST, ...), none of troupe's keys: a command's
        // environment is passed with `--env` from the request, never from the client's.
        command
            .env_clear()
            .envs(client_env(process_vars(), &self.settings.secrets));
        command
    }

    fn container(&self) -> io::Result<String> {
        let mut slot = self.container.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(name) = slot.as_ref() {
            return Ok(name.clone());
        }
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(io::Error::other("the docker backend was shut down"));
        }
        let name = self.start()?;
        *slot = Some(name.clone());
        Ok(name)
    }

    /// A persistent container's name: the same for the same image and mounts.
    fn persistent_name(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.settings.image.hash(&mut hasher);
        self.settings.mounts.hash(&mut hasher);
        format!("troupe-keep-{:016x}", hasher.finish())
    }

    fn start(&self) -> io::Result<String> {
        let image = &self.settings.image;
        let name = if self.settings.persistent {
            let name = self.persistent_name();
            // A kept container from an earlier run is reused (started again if it stopped).
            let running = self
                .docker()
                .args(["inspect", "-f", "{{.State.Running}}", &name])
                .stderr(Stdio::null())
                .output()?;
            if running.status.success() {
                if String::from_utf8_lossy(&running.stdout).trim() != "true" {
                    let started = self.docker().args(["start", &name]).output()?;
                    if !started.status.success() {
                        return Err(self.explain("start the kept container", &started.stderr));
                    }
                }
                return Ok(name);
            }
            name
        } else {
            format!(
                "troupe-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )
        };
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let user = unsafe { format!("{}:{}", libc::getuid(), libc::getgid()) };
        let out = match self.settings.disk_mb {
            Some(mb) => {
                let limited = self.run_container(&name, &user, Some(mb))?;
                let text = String::from_utf8_lossy(&limited.stderr).to_ascii_lowercase();
                if limited.status.success()
                    || !(text.contains("storage-opt") || text.contains("storage opt"))
                {
                    limited
                } else {
                    // The storage driver cannot cap a container's size (overlay2 needs xfs
                    // with pquota): run without that cap, and say so.
                    tracing::warn!(
                        disk_mb = mb,
                        reason = %String::from_utf8_lossy(&limited.stderr).trim(),
                        "terminal.container_disk: docker's storage driver cannot limit the container's root file system here (it needs overlay2 on xfs with pquota, btrfs, zfs or devicemapper); only /tmp is limited to {mb} MB, and the mounted workspace is the host's disk"
                    );
                    let _ = self
                        .docker()
                        .args(["rm", "--force", &name])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status();
                    self.run_container(&name, &user, None)?
                }
            }
            None => self.run_container(&name, &user, None)?,
        };
        if !out.status.success() {
            return Err(self.explain("start a container", &out.stderr));
        }
        tracing::info!(container = %name, image = %image, "started the docker backend's container");
        Ok(name)
    }

    /// `docker run` of the container `name`, its root file system capped at `root_mb` when set.
    fn run_container(
        &self,
        name: &str,
        user: &str,
        root_mb: Option<u64>,
    ) -> io::Result<std::process::Output> {
        let image = &self.settings.image;
        let tmp = match self.settings.disk_mb {
            Some(mb) => format!("/tmp:rw,exec,nosuid,mode=1777,size={mb}m"),
            None => "/tmp:rw,exec,nosuid,mode=1777".to_string(),
        };
        let mut run = self.docker();
        run.args(["run", "--detach", "--init", "--name", name])
            .args(["--label", "troupe.backend=docker"])
            .args(["--pull", "never"])
            .args(["--cap-drop", "ALL"])
            .args(["--security-opt", "no-new-privileges"])
            .arg("--read-only")
            .args(["--tmpfs", &tmp])
            .args(["--user", user])
            .args(["--workdir", &self.settings.cwd.display().to_string()])
            .args([
                "--network",
                self.settings.network.as_deref().unwrap_or("none"),
            ]);
        if let Some(pids) = self.settings.pids {
            run.args(["--pids-limit", &pids.to_string()]);
        }
        if let Some(memory) = &self.settings.memory {
            run.args(["--memory", memory]);
        }
        if let Some(cpus) = &self.settings.cpus {
            run.args(["--cpus", cpus]);
        }
        if let Some(mb) = root_mb {
            run.args(["--storage-opt", &format!("size={mb}m")]);
        }
        let mounts: Vec<&PathBuf> = self.settings.mounts.iter().chain([&self.scratch]).collect();
        for dir in &mounts {
            run.args(["--mount", &bind(dir)?]);
        }
        // Docker mounts by depth, so an empty directory over troupe's home inside a mount (the
        // working directory holding it) comes after that mount, and the workspaces inside the
        // home after the empty directory.
        for hidden in &self.settings.hidden {
            let held = mounts.iter().any(|m| hidden.starts_with(m) && hidden != *m);
            if held && hidden.is_dir() {
                run.args(["--tmpfs", &format!("{}:ro,mode=0500", hidden.display())]);
            }
        }
        run.args([image.as_str(), "sleep", "infinity"]);
        run.output().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "could not run `{}`: {e}. Install docker (Debian: apt-get install docker.io) or choose another terminal.backend",
                    self.settings.docker.display()
                ),
            )
        })
    }

    /// An error naming what to do about a failed docker command.
    fn explain(&self, doing: &str, stderr: &[u8]) -> io::Error {
        let text = String::from_utf8_lossy(stderr).trim().to_string();
        let image = &self.settings.image;
        let hint = if text.contains("Cannot connect to the Docker daemon")
            || text.contains("docker.sock")
        {
            "The docker daemon is not running: start it (systemctl start docker, or dockerd)."
                .to_string()
        } else if text.contains("No such image")
            || text.contains("pull access denied")
            || text.contains("not found")
        {
            format!(
                "The image {image} is not on this machine: pull it (docker pull {image}) or build it, then try again."
            )
        } else {
            "Check terminal.docker_image and the docker settings.".to_string()
        };
        io::Error::other(format!("docker could not {doing}: {text}. {hint}"))
    }

    fn shutdown(&self) {
        let name = {
            let mut slot = self.container.lock().unwrap_or_else(|p| p.into_inner());
            self.closed
                .store(true, std::sync::atomic::Ordering::Release);
            slot.take()
        };
        if let Some(name) = name
            && !self.settings.persistent
        {
            match self
                .docker()
                .args(["rm", "--force", &name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
            {
                Ok(status) if status.success() => {
                    tracing::info!(container = %name, "removed the docker backend's container");
                }
                _ => {
                    tracing::warn!(container = %name, "could not remove the docker backend's container")
                }
            }
        }
        remove_scratch(&self.scratch);
    }
}

impl Drop for Docker {
    /// A troupe that ends without closing still removes its container.
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A `--mount` value binding `dir` at the same path.
fn bind(dir: &Path) -> io::Result<String> {
    let text = dir.to_str().filter(|t| !t.contains(',')).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} cannot be mounted into a container (it is not UTF-8 or holds a comma)",
                dir.display()
            ),
        )
    })?;
    Ok(format!("type=bind,source={text},target={text}"))
}

impl RemoteShell for Docker {
    fn command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
        stdin: bool,
    ) -> io::Result<std::process::Command> {
        self.exec(script, args, env, stdin, false)
    }

    fn tty_command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> io::Result<std::process::Command> {
        self.exec(script, args, env, true, true)
    }
}

impl Docker {
    /// `docker exec` of `sh -c script sh args...` with `env`, stdin passed on when `stdin`,
    /// on a terminal of the container's when `tty`.
    fn exec(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
        stdin: bool,
        tty: bool,
    ) -> io::Result<std::process::Command> {
        let container = self.container()?;
        let mut command = self.docker();
        command.arg("exec");
        if stdin {
            command.arg("--interactive");
        }
        if tty {
            command.arg("--tty");
        }
        // Values travel in the docker client's environment, not on its command line.
        for (key, value) in env {
            command.args(["--env", key]).env(key, value);
        }
        // `docker_forward_env`: what the person hands to every command, unless the request
        // set it already or it is one of troupe's own keys.
        if !self.settings.forward_env.is_empty() {
            for (key, value) in process_vars() {
                if self.settings.forward_env.contains(&key)
                    && !env.iter().any(|(k, _)| *k == key)
                    && !self.settings.secrets.withholds(&key, &value)
                {
                    command.args(["--env", &key]).env(&key, &value);
                }
            }
        }
        command
            .arg(container)
            .args(["sh", "-c", script, "sh"])
            .args(args);
        Ok(command)
    }
}

impl TerminalBackend for DockerBackend {
    fn name(&self) -> &str {
        "docker"
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

    fn scratch_root(&self) -> Option<PathBuf> {
        Some(self.inner.scratch.clone())
    }

    fn isolated(&self) -> bool {
        self.inner.settings.network.is_none()
    }

    fn shutdown(&self) {
        self.inner.shutdown();
    }
}
