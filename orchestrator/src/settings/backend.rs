//! Where commands run: `terminal.backend` (`local`, `docker`, `ssh` or `sandbox`) and each
//! backend's keys, checked into a [`BackendChoice`] (also for a profile's own `terminal:`). The
//! backend is started from it by `runtime/backends.rs`.
//!
//! ```yaml
//! terminal:
//!   backend: docker
//!   docker_image: python:3.12-slim
//!   container_persistent: false
//!   docker_memory: 2g
//!   docker_cpus: 1.5
//!   docker_pids: 512
//!   docker_network: bridge      # none when left out
//!   dangerous_command_approval: false   # only inside docker or sandbox without network
//! ```
//!
//! ssh takes `terminal.ssh: {host, user, port, key, known_hosts}`, each also from
//! `TERMINAL_SSH_HOST`, `TERMINAL_SSH_USER`, `TERMINAL_SSH_PORT`, `TERMINAL_SSH_KEY`,
//! `TERMINAL_SSH_KNOWN_HOSTS` (the file wins over the environment); sandbox takes
//! `sandbox_network: true` to keep the network.

use std::path::PathBuf;

use serde_json::{Map, Value};
use troupe_tools::builtin::{DockerSettings, SshSettings};
use troupe_tools::text::yaml_kind;

use super::keys::{ConfigError, absolute, flag, invalid, mapping, string, whole};

/// The keys of `terminal:` the backends read.
pub const BACKEND_KEYS: &[&str] = &[
    "backend",
    "docker_image",
    "container_persistent",
    "docker_memory",
    "docker_cpus",
    "docker_pids",
    "docker_network",
    "ssh",
    "sandbox_network",
    "dangerous_command_approval",
];

/// The chosen backend and its settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendChoice {
    /// This machine.
    Local,
    /// One container (mounts are added when it starts).
    Docker(DockerSettings),
    /// A remote host.
    Ssh(SshSettings),
    /// A bubblewrap sandbox here.
    Sandbox {
        /// Keep the network.
        network: bool,
    },
}

impl BackendChoice {
    /// The name `terminal.backend` takes.
    pub fn name(&self) -> &'static str {
        match self {
            BackendChoice::Local => "local",
            BackendChoice::Docker(_) => "docker",
            BackendChoice::Ssh(_) => "ssh",
            BackendChoice::Sandbox { .. } => "sandbox",
        }
    }

    /// Whether the backend keeps commands off this machine's files and network.
    fn isolated(&self) -> bool {
        match self {
            BackendChoice::Local | BackendChoice::Ssh(_) => false,
            BackendChoice::Docker(d) => d.network.is_none(),
            BackendChoice::Sandbox { network } => !network,
        }
    }
}

/// Reads the backend from a `terminal:` mapping (`section` names it in errors: `terminal` or
/// `profiles.<name>.terminal`), with `env` for the `TERMINAL_SSH_*` variables.
pub fn backend_choice(
    terminal: &Map<String, Value>,
    section: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BackendChoice, ConfigError> {
    let key = |k: &str| format!("{section}.{k}");
    let choice = match string(terminal, section, "backend")?.as_deref() {
        None | Some("local") => BackendChoice::Local,
        Some("docker") => {
            let image = string(terminal, section, "docker_image")?.ok_or_else(|| {
                invalid(
                    &key("docker_image"),
                    "the docker backend needs an image: write docker_image: <image> (one on this machine, or pulled first with docker pull)".into(),
                )
            })?;
            let mut settings = DockerSettings::new(image, PathBuf::from("/"));
            settings.mounts.clear();
            settings.persistent = flag(terminal, section, "container_persistent")?.unwrap_or(false);
            settings.memory = string(terminal, section, "docker_memory")?;
            settings.cpus = match terminal.get("docker_cpus") {
                None | Some(Value::Null) => None,
                Some(Value::Number(n)) if n.as_f64().is_some_and(|c| c > 0.0) => {
                    Some(n.to_string())
                }
                Some(other) => {
                    return Err(invalid(
                        &key("docker_cpus"),
                        format!("expected a number of cpus above 0 (1.5), found {other}"),
                    ));
                }
            };
            if let Some(pids) = whole(terminal, section, "docker_pids")? {
                settings.pids = Some(u32::try_from(pids).map_err(|_| {
                    invalid(&key("docker_pids"), format!("{pids} is too many processes"))
                })?);
            }
            settings.network = string(terminal, section, "docker_network")?.filter(|n| n != "none");
            BackendChoice::Docker(settings)
        }
        Some("ssh") => BackendChoice::Ssh(ssh_settings(terminal, section, env)?),
        Some("sandbox") => BackendChoice::Sandbox {
            network: flag(terminal, section, "sandbox_network")?.unwrap_or(false),
        },
        Some(other) => {
            return Err(invalid(
                &key("backend"),
                format!("{other:?} is not a backend; write local, docker, ssh or sandbox"),
            ));
        }
    };
    if flag(terminal, section, "dangerous_command_approval")? == Some(false) && !choice.isolated() {
        return Err(invalid(
            &key("dangerous_command_approval"),
            format!(
                "dangerous-command approval can only be turned off inside docker or sandbox without network, not on the {} backend; remove the key",
                choice.name()
            ),
        ));
    }
    Ok(choice)
}

fn ssh_settings(
    terminal: &Map<String, Value>,
    section: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SshSettings, ConfigError> {
    let ssh_section = format!("{section}.ssh");
    let ssh = mapping(terminal.get("ssh").unwrap_or(&Value::Null), &ssh_section)?;
    let pick = |name: &str, var: &str| -> Result<Option<String>, ConfigError> {
        Ok(string(&ssh, &ssh_section, name)?.or_else(|| env(var).filter(|v| !v.trim().is_empty())))
    };
    let host = pick("host", "TERMINAL_SSH_HOST")?.ok_or_else(|| {
        invalid(
            &format!("{ssh_section}.host"),
            "the ssh backend needs a host: write ssh: {host: ...} under terminal, or set TERMINAL_SSH_HOST".into(),
        )
    })?;
    if host.starts_with('-') || host.contains(char::is_whitespace) {
        return Err(invalid(
            &format!("{ssh_section}.host"),
            format!("{host:?} is not a host name"),
        ));
    }
    let mut settings = SshSettings::new(host);
    settings.user = pick("user", "TERMINAL_SSH_USER")?;
    if let Some(user) = &settings.user
        && (user.starts_with('-') || user.contains(char::is_whitespace))
    {
        return Err(invalid(
            &format!("{ssh_section}.user"),
            format!("{user:?} is not a user name"),
        ));
    }
    let port = match ssh.get("port") {
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::Null) | None => env("TERMINAL_SSH_PORT"),
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(invalid(
                &format!("{ssh_section}.port"),
                format!("expected a port number, found {}", yaml_kind(other)),
            ));
        }
    };
    if let Some(port) = port {
        settings.port = port
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                invalid(
                    &format!("{ssh_section}.port"),
                    format!("{port:?} is not a port; write a number from 1 to 65535"),
                )
            })?;
    }
    let file = |name: &str, var: &str| -> Result<Option<PathBuf>, ConfigError> {
        let Some(raw) = pick(name, var)? else {
            return Ok(None);
        };
        let path = absolute(&raw, None);
        if !path.is_file() {
            return Err(invalid(
                &format!("{ssh_section}.{name}"),
                format!("{} is not a file", path.display()),
            ));
        }
        Ok(Some(path))
    };
    settings.key = file("key", "TERMINAL_SSH_KEY")?;
    settings.known_hosts = file("known_hosts", "TERMINAL_SSH_KNOWN_HOSTS")?;
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<BackendChoice, ConfigError> {
        let document: Value = serde_norway::from_str(yaml).unwrap();
        let terminal = mapping(&document["terminal"], "terminal").unwrap();
        backend_choice(&terminal, "terminal", &|var| match var {
            "TERMINAL_SSH_HOST" => Some("env-host".into()),
            "TERMINAL_SSH_PORT" => Some("2222".into()),
            _ => None,
        })
    }

    #[test]
    fn backends_are_read() {
        assert_eq!(parse("terminal: {}").unwrap(), BackendChoice::Local);
        let BackendChoice::Docker(d) = parse(
            "terminal: {backend: docker, docker_image: img:1, container_persistent: true, docker_cpus: 1.5, docker_pids: 64, docker_memory: 1g, dangerous_command_approval: false}",
        )
        .unwrap() else {
            panic!("docker expected")
        };
        assert_eq!((d.image.as_str(), d.persistent), ("img:1", true));
        assert_eq!(
            (d.cpus.as_deref(), d.pids, d.memory.as_deref()),
            (Some("1.5"), Some(64), Some("1g"))
        );
        assert_eq!(d.network, None);
        let BackendChoice::Ssh(s) = parse("terminal: {backend: ssh, ssh: {user: me}}").unwrap()
        else {
            panic!("ssh expected")
        };
        assert_eq!(
            (s.host.as_str(), s.port, s.user.as_deref()),
            ("env-host", 2222, Some("me"))
        );
        let BackendChoice::Ssh(s) =
            parse("terminal: {backend: ssh, ssh: {host: box, port: 22}}").unwrap()
        else {
            panic!("ssh expected")
        };
        assert_eq!((s.host.as_str(), s.port), ("box", 22));
        assert_eq!(
            parse("terminal: {backend: sandbox}").unwrap(),
            BackendChoice::Sandbox { network: false }
        );
    }

    #[test]
    fn bad_backends_name_the_key() {
        for (yaml, key, says) in [
            (
                "terminal: {backend: vm}",
                "terminal.backend",
                "local, docker, ssh or sandbox",
            ),
            (
                "terminal: {backend: docker}",
                "terminal.docker_image",
                "needs an image",
            ),
            (
                "terminal: {backend: ssh, ssh: {host: '-oProxyCommand=x'}}",
                "terminal.ssh.host",
                "not a host",
            ),
            (
                "terminal: {backend: ssh, ssh: {port: 70000}}",
                "terminal.ssh.port",
                "not a port",
            ),
            (
                "terminal: {backend: ssh, ssh: {key: /no/such/key}}",
                "terminal.ssh.key",
                "not a file",
            ),
            (
                "terminal: {dangerous_command_approval: false}",
                "terminal.dangerous_command_approval",
                "local",
            ),
            (
                "terminal: {backend: docker, docker_image: i, docker_network: bridge, dangerous_command_approval: false}",
                "terminal.dangerous_command_approval",
                "without network",
            ),
            (
                "terminal: {backend: docker, docker_image: i, docker_cpus: 0}",
                "terminal.docker_cpus",
                "above 0",
            ),
        ] {
            let err = parse(yaml).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(says), "{yaml}: {err}");
        }
    }
}
