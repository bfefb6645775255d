//! Where commands run: `terminal.backend` (`local`, `docker`, `ssh` or `sandbox`) and each
//! backend's keys, checked into a [`BackendChoice`] (also for a profile's own `terminal:`). The
//! backend is started from it by `runtime/backends.rs`.
//!
//! ```yaml
//! terminal:
//!   backend: docker
//!   docker_image: python:3.12-slim
//!   container_persistent: false # the default: a fresh container per troupe process
//!   container_memory: 2048      # MB, or with a unit (2g); docker_memory is the same key
//!   container_cpu: 1.5          # cpus; docker_cpus is the same key
//!   container_disk: 10240       # MB, or with a unit (10g): /tmp and, where docker can, the root
//!   docker_forward_env: [GITHUB_TOKEN]  # variables handed to every command in the container
//!   docker_pids: 512
//!   docker_network: bridge      # none when left out
//!   dangerous_command_approval: false   # only inside docker or sandbox without network
//! ```
//!
//! The container keys take the reference's names (`container_cpu`, `container_memory`,
//! `container_disk`, `container_persistent`, `docker_forward_env`); troupe's earlier names
//! `docker_cpus` and `docker_memory` stay as aliases, and writing both spellings of one key is an
//! error.
//!
//! ssh takes `terminal.ssh: {host, user, port, key, known_hosts}`, each also from
//! `TERMINAL_SSH_HOST`, `TERMINAL_SSH_USER`, `TERMINAL_SSH_PORT`, `TERMINAL_SSH_KEY`,
//! `TERMINAL_SSH_KNOWN_HOSTS` (the file wins over the environment); sandbox takes
//! `sandbox_network: true` to keep the network.

use std::path::PathBuf;

use serde_json::{Map, Value};
use troupe_tools::builtin::{DockerSettings, SshSettings};
use troupe_tools::text::yaml_kind;

use super::keys::{ConfigError, absolute, flag, invalid, mapping, names, string, whole};

/// The keys of `terminal:` the backends read.
pub const BACKEND_KEYS: &[&str] = &[
    "backend",
    "docker_image",
    "container_persistent",
    "container_cpu",
    "container_memory",
    "container_disk",
    "docker_forward_env",
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
            let memory = one_of(terminal, section, "container_memory", "docker_memory")?;
            settings.memory = megabytes(memory, section)?.map(|mb| format!("{mb}m"));
            settings.cpus = match one_of(terminal, section, "container_cpu", "docker_cpus")? {
                None => None,
                Some((_, Value::Number(n))) if n.as_f64().is_some_and(|c| c > 0.0) => {
                    Some(n.to_string())
                }
                Some((used, other)) => {
                    return Err(invalid(
                        &key(used),
                        format!("expected a number of cpus above 0 (1.5), found {other}"),
                    ));
                }
            };
            let disk = terminal
                .get("container_disk")
                .map(|v| ("container_disk", v));
            settings.disk_mb = megabytes(disk, section)?;
            if let Some(v) = terminal.get("docker_forward_env").filter(|v| !v.is_null()) {
                let forwarded = names(&key("docker_forward_env"), v)?;
                if let Some(bad) = forwarded.iter().find(|n| !is_variable_name(n)) {
                    return Err(invalid(
                        &key("docker_forward_env"),
                        format!("{bad:?} is not a variable name; list names such as GITHUB_TOKEN"),
                    ));
                }
                settings.forward_env = forwarded;
            }
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

/// The value of `key`, or of its alias `alias` (troupe's earlier name), with the name used;
/// both at once is an error.
fn one_of<'a>(
    terminal: &'a Map<String, Value>,
    section: &str,
    key: &'static str,
    alias: &'static str,
) -> Result<Option<(&'static str, &'a Value)>, ConfigError> {
    let present = |k: &'static str| terminal.get(k).filter(|v| !v.is_null()).map(|v| (k, v));
    match (present(key), present(alias)) {
        (Some(_), Some(_)) => Err(invalid(
            &format!("{section}.{alias}"),
            format!("{alias} is another name for {key}, and both are set; keep {key} only"),
        )),
        (one, other) => Ok(one.or(other)),
    }
}

/// A size in megabytes: a whole number (MB) or a number with a unit (`512m`, `2g`, `1t`).
fn megabytes(value: Option<(&str, &Value)>, section: &str) -> Result<Option<u64>, ConfigError> {
    let Some((key, value)) = value else {
        return Ok(None);
    };
    let bad = |found: String| {
        invalid(
            &format!("{section}.{key}"),
            format!("expected a size in megabytes (2048) or with a unit (2g, 512m), found {found}"),
        )
    };
    let mb = match value {
        Value::Number(n) => n.as_u64().ok_or_else(|| bad(n.to_string()))?,
        Value::String(text) => {
            let lower = text.trim().to_ascii_lowercase();
            let lower = lower.strip_suffix('b').unwrap_or(&lower);
            let (digits, scale) = match lower.char_indices().last() {
                Some((at, 'k')) => (&lower[..at], 1.0 / 1024.0),
                Some((at, 'm')) => (&lower[..at], 1.0),
                Some((at, 'g')) => (&lower[..at], 1024.0),
                Some((at, 't')) => (&lower[..at], 1024.0 * 1024.0),
                _ => (lower, 1.0),
            };
            let number: f64 = digits
                .trim()
                .parse()
                .ok()
                .filter(|n: &f64| n.is_finite() && *n > 0.0)
                .ok_or_else(|| bad(format!("{text:?}")))?;
            (number * scale).ceil() as u64
        }
        other => return Err(bad(yaml_kind(other).to_string())),
    };
    if mb == 0 {
        return Err(bad("0".into()));
    }
    Ok(Some(mb))
}

/// Whether `name` can name an environment variable (letters, digits, `_`, not a digit first).
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
            (Some("1.5"), Some(64), Some("1024m"))
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
    fn the_container_keys_take_the_reference_names_and_troupe_earlier_ones() {
        let docker = |yaml: &str| match parse(yaml).unwrap() {
            BackendChoice::Docker(d) => d,
            other => panic!("docker expected, got {other:?}"),
        };
        let d = docker(
            "terminal: {backend: docker, docker_image: i, container_cpu: 2, container_memory: 5120, container_disk: 51200, docker_forward_env: [GH_TOKEN, MY_VAR]}",
        );
        assert_eq!(
            (d.cpus.as_deref(), d.memory.as_deref(), d.disk_mb),
            (Some("2"), Some("5120m"), Some(51200))
        );
        assert_eq!(d.forward_env, ["GH_TOKEN", "MY_VAR"]);
        // Not persistent unless asked: a fresh container per troupe process.
        assert!(!d.persistent);
        // Sizes with units; the earlier names are aliases.
        let d = docker(
            "terminal: {backend: docker, docker_image: i, docker_cpus: 0.5, docker_memory: 2g, container_disk: 10G, docker_forward_env: A_B}",
        );
        assert_eq!(
            (d.cpus.as_deref(), d.memory.as_deref(), d.disk_mb),
            (Some("0.5"), Some("2048m"), Some(10240))
        );
        assert_eq!(d.forward_env, ["A_B"]);
        let d = docker("terminal: {backend: docker, docker_image: i, container_memory: 512mb}");
        assert_eq!(d.memory.as_deref(), Some("512m"));
        let d = docker("terminal: {backend: docker, docker_image: i}");
        assert_eq!((d.memory, d.cpus, d.disk_mb), (None, None, None));
        assert!(d.forward_env.is_empty());
        // They are read, not reported as unknown.
        for key in [
            "container_cpu",
            "container_memory",
            "container_disk",
            "container_persistent",
            "docker_forward_env",
        ] {
            assert!(BACKEND_KEYS.contains(&key), "{key}");
        }
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
            (
                "terminal: {backend: docker, docker_image: i, container_cpu: many}",
                "terminal.container_cpu",
                "above 0",
            ),
            (
                "terminal: {backend: docker, docker_image: i, container_cpu: 1, docker_cpus: 2}",
                "terminal.docker_cpus",
                "keep container_cpu only",
            ),
            (
                "terminal: {backend: docker, docker_image: i, container_memory: 1g, docker_memory: 2g}",
                "terminal.docker_memory",
                "keep container_memory only",
            ),
            (
                "terminal: {backend: docker, docker_image: i, container_memory: lots}",
                "terminal.container_memory",
                "size in megabytes",
            ),
            (
                "terminal: {backend: docker, docker_image: i, container_disk: 0}",
                "terminal.container_disk",
                "size in megabytes",
            ),
            (
                "terminal: {backend: docker, docker_image: i, container_disk: -5}",
                "terminal.container_disk",
                "size in megabytes",
            ),
            (
                "terminal: {backend: docker, docker_image: i, docker_forward_env: ['A=B']}",
                "terminal.docker_forward_env",
                "not a variable name",
            ),
        ] {
            let err = parse(yaml).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(says), "{yaml}: {err}");
        }
    }
}
