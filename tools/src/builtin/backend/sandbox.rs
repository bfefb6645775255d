//! The sandbox backend: each command in a bubblewrap sandbox on this machine, for people
//! without docker. The sandbox sees this machine's files read-only, the workspace writable, a
//! private `/tmp`, no network (unless configured), its own process tree, and not troupe's home
//! (where tokens and session logs are kept). Stopping the sandbox's `bwrap` ends everything in
//! it: the sandbox has its own pid namespace, whose processes all die with its first one.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::files::{Files, ShellFiles, ShellRunner};
use super::remote::{host_scratch, remove_scratch, run_to_end};
use super::{SpawnRequest, SpawnedCommand, TerminalBackend, command_of, spawn_here};
use crate::builtin::sandbox_env::{ChildSecrets, client_env, process_vars};

/// How to build the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// Directories writable inside (the workspace, the working directory).
    pub writable: Vec<PathBuf>,
    /// Directories hidden behind an empty one (troupe's home).
    pub hidden: Vec<PathBuf>,
    /// Let commands use the network.
    pub network: bool,
    /// The bubblewrap command.
    pub bwrap: PathBuf,
    /// troupe's keys: bubblewrap never gets them in its environment.
    pub secrets: ChildSecrets,
}

impl SandboxSettings {
    /// No network, `writable` writable.
    pub fn new(writable: Vec<PathBuf>) -> Self {
        SandboxSettings {
            writable,
            hidden: vec![],
            network: false,
            bwrap: PathBuf::from("bwrap"),
            secrets: ChildSecrets::default(),
        }
    }
}

/// Runs each command in a bubblewrap sandbox.
#[derive(Clone)]
pub struct SandboxBackend {
    inner: Arc<Sandbox>,
}

impl std::fmt::Debug for SandboxBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxBackend")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

struct Sandbox {
    settings: SandboxSettings,
    /// Writable inside at the same path: `execute_code` runs' scratch directories.
    scratch: PathBuf,
    shell: PathBuf,
}

impl SandboxBackend {
    /// A sandbox backend; fails when bubblewrap cannot make a sandbox on this machine.
    pub fn new(settings: SandboxSettings) -> io::Result<Self> {
        let sandbox = Sandbox {
            shell: super::LocalBackend::default().shell().to_path_buf(),
            scratch: host_scratch("sandbox")?,
            settings,
        };
        let probe = run_to_end(sandbox.argv_command(&[OsString::from("true")], None)?, &[])
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "could not run `{}`: {e}. Install bubblewrap (Debian: apt-get install bubblewrap) or choose another terminal.backend",
                        sandbox.settings.bwrap.display()
                    ),
                )
            })?;
        if !probe.status.success() {
            remove_scratch(&sandbox.scratch);
            return Err(io::Error::other(format!(
                "bubblewrap cannot make a sandbox here: {}. It needs unprivileged user namespaces (or root).",
                String::from_utf8_lossy(&probe.stderr).trim()
            )));
        }
        Ok(SandboxBackend {
            inner: Arc::new(sandbox),
        })
    }
}

impl Sandbox {
    /// bwrap's options, then `--`; `extra` are more writable paths (a task's workspace, what
    /// a person approved for the call).
    fn options(&self, cwd: Option<&Path>, extra: &[PathBuf]) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![];
        let mut push =
            |items: &[&std::ffi::OsStr]| args.extend(items.iter().map(|s| s.to_os_string()));
        push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
        push(&["--dev".as_ref(), "/dev".as_ref()]);
        push(&["--proc".as_ref(), "/proc".as_ref()]);
        push(&["--tmpfs".as_ref(), "/tmp".as_ref()]);
        let writable: Vec<&PathBuf> = self
            .settings
            .writable
            .iter()
            .chain([&self.scratch])
            .chain(extra.iter().filter(|p| p.exists()))
            .collect();
        for dir in &writable {
            push(&["--bind".as_ref(), dir.as_os_str(), dir.as_os_str()]);
        }
        // Hidden after the binds (a writable parent would show them again), then the writable
        // directories inside them bound once more on top.
        for hidden in self.settings.hidden.iter().filter(|d| d.is_dir()) {
            push(&["--tmpfs".as_ref(), hidden.as_os_str()]);
            for dir in writable.iter().filter(|d| d.starts_with(hidden)) {
                push(&["--bind".as_ref(), dir.as_os_str(), dir.as_os_str()]);
            }
        }
        // A hidden file (a config file troupe read) reads as empty.
        for hidden in self.settings.hidden.iter().filter(|f| f.is_file()) {
            push(&[
                "--ro-bind".as_ref(),
                "/dev/null".as_ref(),
                hidden.as_os_str(),
            ]);
        }
        push(&[
            // A user namespace of its own: bubblewrap then needs no capability (troupe's
            // children have none to spare), and the mapping keeps the caller's own ids.
            "--unshare-user".as_ref(),
            "--unshare-pid".as_ref(),
            "--unshare-ipc".as_ref(),
            "--unshare-uts".as_ref(),
            "--die-with-parent".as_ref(),
            // A sandboxed command cannot push keystrokes into troupe's terminal.
            "--new-session".as_ref(),
        ]);
        if !self.settings.network {
            push(&["--unshare-net".as_ref()]);
        }
        if let Some(cwd) = cwd {
            push(&["--chdir".as_ref(), cwd.as_os_str()]);
        }
        args.push("--".into());
        args
    }

    /// `bwrap <options> -- argv...` as a blocking command.
    fn argv_command(
        &self,
        argv: &[OsString],
        cwd: Option<&Path>,
    ) -> io::Result<std::process::Command> {
        let mut command = std::process::Command::new(&self.settings.bwrap);
        command
            .env_clear()
            .envs(client_env(process_vars(), &self.settings.secrets))
            .args(self.options(cwd, &[]))
            .args(argv);
        Ok(command)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        remove_scratch(&self.scratch);
    }
}

impl ShellRunner for Sandbox {
    fn run_script(
        &self,
        script: &str,
        args: &[&str],
        stdin: &[u8],
    ) -> io::Result<std::process::Output> {
        let mut argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into(), "sh".into()];
        argv.extend(args.iter().map(OsString::from));
        run_to_end(self.argv_command(&argv, None)?, stdin)
    }
}

impl TerminalBackend for SandboxBackend {
    fn name(&self) -> &str {
        "sandbox"
    }

    fn spawn(&self, request: SpawnRequest) -> io::Result<SpawnedCommand> {
        let inner = &self.inner;
        let mut argv = vec![inner.settings.bwrap.clone().into_os_string()];
        let extra: Vec<PathBuf> = request
            .workspace
            .iter()
            .chain(&request.extra_writable)
            .cloned()
            .collect();
        argv.extend(inner.options(Some(&request.cwd), &extra));
        argv.extend([
            inner.shell.clone().into_os_string(),
            "-c".into(),
            request.script.clone().into(),
        ]);
        let mut command = command_of(&argv)?;
        command.current_dir("/");
        spawn_here(command, &request, None)
    }

    fn files(&self) -> Arc<dyn Files> {
        Arc::new(ShellFiles::new(self.inner.clone()))
    }

    fn scratch_root(&self) -> Option<PathBuf> {
        Some(self.inner.scratch.clone())
    }

    fn isolated(&self) -> bool {
        !self.inner.settings.network
    }

    fn confined(&self) -> bool {
        true
    }

    fn out_of_reach(&self, path: &Path) -> bool {
        self.inner
            .settings
            .hidden
            .iter()
            .any(|h| path.starts_with(h) || h.starts_with(path))
    }

    fn shutdown(&self) {
        remove_scratch(&self.inner.scratch);
    }
}
