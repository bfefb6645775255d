//! Opening one MCP session through rmcp: a stdio child process (in its own process group, its
//! stderr appended to a per-server log file) or a streamable-HTTP endpoint, then the
//! `initialize` handshake under the server's `connect_timeout`. Also the small rmcp client
//! handler that passes `notifications/tools/list_changed` on. Used by [`super::connection`].

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::{McpServerConfig, McpTransport};
use crate::builtin::sandbox_env::{ChildSecrets, minimal_env, process_vars};

/// The rmcp client side of one session: it answers the server with troupe's name and forwards
/// tool-list changes to the connection's refresh task.
pub(crate) struct TroupeClient {
    /// Room for one pending refresh: several notifications in a row need only one re-list.
    list_changed: mpsc::Sender<()>,
}

impl ClientHandler for TroupeClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Full means a refresh is already queued; it will see this change too.
        let _ = self.list_changed.try_send(());
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("troupe", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A running session and what is needed to end it for good.
pub(crate) struct Opened {
    /// The rmcp service; its task owns the transport.
    pub(crate) running: RunningService<RoleClient, TroupeClient>,
    /// The child's process group, for stdio servers: killed once the session ends so that
    /// grandchildren (npx, uv) go with it.
    pub(crate) process_group: Option<i32>,
    /// The child's pid, for status and tests.
    pub(crate) pid: Option<u32>,
}

/// Starts the server and completes `initialize` within `config.connect_timeout`; a stdio
/// server gets the minimal environment ([`minimal_env`]) without `secrets`. `ct` ends the
/// session later; `list_changed` receives tool-list notifications. The error says what failed
/// in words an operator can act on.
pub(crate) async fn open(
    config: &McpServerConfig,
    log_path: &Path,
    secrets: &ChildSecrets,
    list_changed: mpsc::Sender<()>,
    ct: CancellationToken,
) -> Result<Opened, String> {
    let client = TroupeClient { list_changed };
    let limit = config.connect_timeout;
    match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let log = open_log(log_path, command, args)?;
            let mut cmd = tokio::process::Command::new(command);
            // Only the basics, the names `env_passthrough` lists and the entry's own `env`:
            // never troupe's keys, which a server (or a command reading its environ) could
            // otherwise hand on.
            cmd.args(args)
                .env_clear()
                .envs(minimal_env(
                    process_vars(),
                    &config.env_passthrough,
                    secrets,
                ))
                .envs(env);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            // A group of its own: killing the group reaches whatever the server spawned.
            #[cfg(unix)]
            cmd.process_group(0);
            // Inside troupe's boundary (built here, applied in the child; a server that cannot
            // be confined does not start), without inspection capabilities, and with a keeper
            // that kills the server and whatever it started once troupe is gone, however
            // troupe went (a signal, a crash).
            let ruleset =
                crate::builtin::confine::service_ruleset(cwd.as_deref()).map_err(|e| {
                    format!("troupe's boundary for `{command}` could not be set up: {e}")
                })?;
            let confine = ruleset
                .as_ref()
                .map(crate::builtin::confine::Ruleset::raw_fd);
            // SAFETY: it only makes async-signal-safe system calls; `ruleset` outlives the spawn.
            #[cfg(unix)]
            unsafe {
                let environ = crate::builtin::process_group::environ_area();
                cmd.pre_exec(move || {
                    crate::builtin::process_group::mcp_child_setup(confine, environ)
                });
            }
            // Backstop for a session dropped while the runtime is going away: the child still dies.
            cmd.kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::from(log))
                .spawn()
                .map_err(|e| spawn_error(command, cwd.as_deref(), &e))?;
            drop(ruleset);
            let pid = transport.id();
            let process_group = pid.and_then(|p| i32::try_from(p).ok());
            let mut abandoned = KillGroupOnDrop(process_group);
            match tokio::time::timeout(limit, client.serve_with_ct(transport, ct)).await {
                Ok(Ok(running)) => {
                    abandoned.0 = None;
                    Ok(Opened {
                        running,
                        process_group,
                        pid,
                    })
                }
                Ok(Err(e)) => {
                    kill_group(process_group);
                    Err(format!(
                        "the server started but the MCP handshake failed: {e}; its log is {}",
                        log_path.display()
                    ))
                }
                Err(_) => {
                    kill_group(process_group);
                    Err(handshake_timeout(limit, Some(log_path)))
                }
            }
        }
        McpTransport::Http { url, headers } => {
            let mut custom = HashMap::with_capacity(headers.len());
            for (name, value) in headers {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    format!("header name `{name}` is not valid; use letters, digits and dashes")
                })?;
                let value = HeaderValue::from_str(value).map_err(|_| {
                    format!("the value of header `{name}` is not valid header text")
                })?;
                custom.insert(name, value);
            }
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom),
            );
            match tokio::time::timeout(limit, client.serve_with_ct(transport, ct)).await {
                Ok(Ok(running)) => Ok(Opened {
                    running,
                    process_group: None,
                    pid: None,
                }),
                Ok(Err(e)) => Err(format!(
                    "could not open an MCP session at {url}: {e}; check that the server is running and that the URL is its streamable-HTTP endpoint"
                )),
                Err(_) => Err(handshake_timeout(limit, None)),
            }
        }
    }
}

fn handshake_timeout(limit: Duration, log: Option<&Path>) -> String {
    let mut text = format!(
        "the server did not answer `initialize` within {:.1}s (connect_timeout)",
        limit.as_secs_f64()
    );
    if let Some(log) = log {
        text.push_str(&format!("; its log is {}", log.display()));
    }
    text.push_str("; raise connect_timeout if it is just slow to start");
    text
}

fn spawn_error(command: &str, cwd: Option<&Path>, error: &std::io::Error) -> String {
    let mut text = format!("could not start `{command}`: {error}");
    if error.kind() == std::io::ErrorKind::NotFound {
        text.push_str("; check `command` (a program on PATH or a full path)");
        if let Some(cwd) = cwd {
            text.push_str(&format!(" and that `cwd` {} exists", cwd.display()));
        }
    }
    text
}

/// Opens the server's log for appending and marks where this start begins. The folder and
/// the file are the owner's only: a server's stderr can hold tokens and paths.
fn open_log(path: &Path, command: &str, args: &[String]) -> Result<std::fs::File, String> {
    if let Some(dir) = path.parent() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt as _;
            builder.mode(0o700);
        }
        builder
            .create(dir)
            .map_err(|e| format!("cannot create the MCP log folder {}: {e}", dir.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            // A folder made before (by an older troupe) is tightened too.
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
    }
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| format!("cannot open the server's log file {}: {e}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The marker is a courtesy; a failed write must not stop the server from starting.
    let _ = writeln!(
        file,
        "--- troupe starts `{command} {}` (unix time {now}) ---",
        args.join(" ")
    );
    Ok(file)
}

/// Kills a stdio server's whole process group, and what its keeper holds that left the group;
/// a group that is already gone is fine.
pub(crate) fn kill_group(group: Option<i32>) {
    #[cfg(unix)]
    if let Some(group) = group.filter(|g| *g > 1) {
        use crate::builtin::process_group::{LocalGroup, ProcessGroup as _};
        use nix::sys::signal::Signal;
        LocalGroup { pgid: group }.signal(Signal::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = group;
}

/// Kills a server's process group if the start-up is abandoned half-way (its future dropped:
/// Ctrl-C, shutdown during start-up).
struct KillGroupOnDrop(Option<i32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        kill_group(self.0.take());
    }
}
