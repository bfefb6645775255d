//! Starting where commands run, from the checked `terminal.backend` ([`BackendChoice`], read
//! in [`crate::settings`]): the backend with the directories it must reach (the working
//! directory, the allowed roots, the board workspaces), and the boundary of `terminal.confine`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_tools::builtin::confine::{ConfineMode, ConfinePolicy, ConfineSettings, Support, probe};
use troupe_tools::builtin::{
    BuiltinConfig, DockerBackend, LocalBackend, SandboxBackend, SandboxSettings, SshBackend,
    TerminalBackend,
};

use crate::settings::BackendChoice;
use crate::settings::ConfigError;
use crate::settings::keys::invalid;

/// What `terminal.confine` came to at start: the boundary (none when off or unavailable) and
/// the warning to show at every start when there is none.
#[derive(Debug, Clone, Default)]
pub struct Boundary {
    /// The boundary of local commands, hooks and MCP servers.
    pub policy: Option<Arc<ConfinePolicy>>,
    /// Said loudly at start (stderr, the serve start lines, tracing) when there is no boundary.
    pub warning: Option<String>,
}

/// Sets up the boundary of `terminal.confine` (see [`troupe_tools::builtin::confine`]): hidden
/// are `home` (troupe's home) and `config_file` when it lies outside the writable places.
/// `on` without Landlock is a config error (exit 2) saying what to do.
pub fn boundary(
    builtins: &BuiltinConfig,
    home: &Path,
    config_file: Option<&Path>,
) -> Result<Boundary, ConfigError> {
    let terminal = &builtins.terminal;
    if terminal.confine == ConfineMode::Off {
        return Ok(Boundary {
            policy: None,
            warning: Some(
                "terminal.confine is off: commands, hooks and MCP servers can read and write everything this user can, troupe's home (its tokens and sessions) included; only the check of the command text stands in the way. Remove the setting to confine them.".into(),
            ),
        });
    }
    let abi = match probe() {
        Support::Available { abi } => abi,
        Support::Unavailable { why } if terminal.confine == ConfineMode::On => {
            return Err(invalid(
                "terminal.confine",
                format!(
                    "is on, but commands cannot be confined here: {why}. Run troupe on Linux 5.13 or later with Landlock enabled, choose terminal.backend: sandbox or docker, or set terminal.confine: auto to run with the text check alone"
                ),
            ));
        }
        Support::Unavailable { why } => {
            return Ok(Boundary {
                policy: None,
                warning: Some(format!(
                    "commands, hooks and MCP servers run without troupe's boundary, because {why}; only the check of the command text protects this machine (dangerous commands still ask). Use terminal.backend: sandbox or docker to isolate them."
                )),
            });
        }
    };
    // troupe makes its home anyway; made now, it is hidden from the first command on.
    let _ = std::fs::create_dir_all(home);
    let mut places: Vec<PathBuf> = vec![builtins.default_cwd.clone()];
    places.extend(builtins.allowed_roots.iter().cloned());
    places.extend(terminal.writable.iter().cloned());
    places.push(std::env::temp_dir());
    let mut hidden = vec![home.to_path_buf()];
    if let Some(file) = config_file {
        let file = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
        let writable = places
            .iter()
            .any(|p| p.canonicalize().is_ok_and(|p| file.starts_with(&p)));
        if !writable {
            hidden.push(file);
        }
    }
    let settings = ConfineSettings {
        hidden,
        writable: terminal.writable.clone(),
        network: terminal.network,
        service_workspace: {
            let mut roots = vec![builtins.default_cwd.clone()];
            roots.extend(builtins.allowed_roots.iter().cloned());
            roots
        },
        service_caches: ConfineSettings::default_caches(),
    };
    for granted in &terminal.writable {
        if settings.hidden.iter().any(|h| {
            let h = h.canonicalize().unwrap_or_else(|_| h.clone());
            granted.starts_with(&h) || h.starts_with(granted)
        }) {
            return Err(invalid(
                "terminal.writable",
                format!(
                    "{} is or holds troupe's home or this config file, which commands never reach; grant a directory beside it",
                    granted.display()
                ),
            ));
        }
    }
    let policy = ConfinePolicy::new(abi, settings).map_err(|e| {
        invalid(
            "terminal.confine",
            format!("the boundary could not be prepared: {e}"),
        )
    })?;
    tracing::info!(
        abi,
        network = terminal.network,
        "commands, hooks and MCP servers run inside troupe's boundary (Landlock)"
    );
    // Landlock grants are allow-only: a home inside the workspace is hidden by granting what is
    // beside it, so nothing new can be made directly in the folders above it. Say so.
    let home_real = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    // (Under the temp folder commands get a private TMPDIR instead.)
    let temp = std::env::temp_dir();
    let holder = places.iter().filter(|p| **p != temp).find(|p| {
        p.canonicalize()
            .is_ok_and(|p| home_real.starts_with(&p) && home_real != p)
    });
    if let Some(holder) = holder {
        tracing::info!(
            "troupe's home {} lies inside {}, where commands work: to keep it out of their reach, commands cannot make new files directly in the folders between the two (subfolders are fine). Set TROUPE_HOME to a folder outside the workspace.",
            home.display(),
            holder.display()
        );
    }
    Ok(Boundary {
        policy: Some(Arc::new(policy)),
        warning: None,
    })
}

/// Starts `choice` for the built-in tools configured as `builtins`; `workspaces` is where board
/// tasks get their directories (a container must mount it). A local backend runs its commands
/// inside `boundary`'s policy; the sandbox and docker hide troupe's home (`home`) their own way;
/// the ssh backend's commands run on another host, where nothing of troupe's is.
pub fn start_backend(
    choice: &BackendChoice,
    builtins: &BuiltinConfig,
    workspaces: Option<&Path>,
    boundary: &Boundary,
    home: &Path,
) -> Result<Arc<dyn TerminalBackend>, String> {
    // What commands must be able to write: the working directory, the allowed roots and the
    // board workspaces, each once. One inside another is kept: a hidden directory between
    // them (troupe's home, in the sandbox) must not hide the inner one.
    let mut writable: Vec<PathBuf> = vec![builtins.default_cwd.clone()];
    for dir in builtins
        .allowed_roots
        .iter()
        .map(PathBuf::as_path)
        .chain(workspaces)
    {
        if !writable.iter().any(|w| w == dir) {
            writable.push(dir.to_path_buf());
        }
    }
    for dir in &writable {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {} for the backend: {e}", dir.display()))?;
    }
    Ok(match choice {
        BackendChoice::Local => match &boundary.policy {
            Some(policy) => Arc::new(LocalBackend::default().confined(Arc::clone(policy))),
            None => Arc::new(LocalBackend::default()),
        },
        BackendChoice::Docker(settings) => {
            let mut settings = settings.clone();
            settings.cwd = builtins.default_cwd.clone();
            // Only the workspaces are mounted; troupe's home, when a mount holds it, is
            // covered by an empty directory (the workspaces inside it mounted again on top).
            settings.hidden = vec![home.to_path_buf()];
            settings.mounts = writable;
            settings.secrets = builtins.secrets.clone();
            Arc::new(DockerBackend::new(settings).map_err(|e| format!("the docker backend: {e}"))?)
        }
        BackendChoice::Ssh(settings) => {
            let mut settings = settings.clone();
            settings.secrets = builtins.secrets.clone();
            Arc::new(SshBackend::new(settings).map_err(|e| format!("the ssh backend: {e}"))?)
        }
        BackendChoice::Sandbox { network } => {
            let mut settings = SandboxSettings::new(writable);
            settings.network = *network;
            settings.secrets = builtins.secrets.clone();
            // troupe's home holds tokens and session logs: hidden unless commands work there;
            // so are the config files troupe read outside the writable places.
            settings.hidden.push(home.to_path_buf());
            if let Some(policy) = &boundary.policy {
                settings.hidden.extend(
                    policy
                        .hidden()
                        .iter()
                        .filter(|h| h.as_path() != home)
                        .cloned(),
                );
            }
            Arc::new(
                SandboxBackend::new(settings).map_err(|e| format!("the sandbox backend: {e}"))?,
            )
        }
    })
}
