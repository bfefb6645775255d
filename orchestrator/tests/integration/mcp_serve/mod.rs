//! `troupe mcp serve` as MCP clients use it: the official `mcp` Python SDK client
//! (`tests/mcp-clients/troupe_mcp_client.py`) drives the real `troupe` binary, over stdio (the
//! client starts troupe) and over streamable HTTP (`--http`, behind the token), with a
//! troupe.yaml naming the real MCP test servers (server-everything, mcp-server-time):
//! - a server's tool is found with `tool_search` and run with `tool_call`; read-only bridge
//!   tools say so;
//! - a hook's denial is a tool error (isError), and the call never reaches the server;
//! - a call needing approval is asked of the client's person through elicitation; when the
//!   client cannot be asked it waits in the approval queue (`--http`, or `--queue` with stdio)
//!   for a person's answer over HTTP, and without a queue it is refused with the reason;
//! - a slow call reports progress; one cancelled by the client ends, its process gone;
//! - `list_changed` arrives when a server that started late brings its tools;
//! - with `--toolsets kanban`, a client creates a board task that a profile's worker (a
//!   scripted model) runs, and follows it to its end;
//! - with `--agent PROFILE`, `run_<profile>` answers from a whole turn of a scripted model,
//!   with progress, and `session` continues it.
//!
//! The servers and the SDK come from `scripts/install-test-deps.sh`; without them these tests
//! skip loudly, unless `TROUPE_REQUIRE_MCP_SERVERS` is set. This file holds what the tests
//! share: the folder troupe runs in, the Python client, a running `--http` server.

mod agents;
mod board;
mod bridge;
mod secrets;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::mcp_servers::{everything_bin, servers_available, time_server};

/// The token the HTTP tests serve with.
pub(super) const TOKEN: &str = "mcp-serve-test-token-0123456789";

pub(super) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    repo().join("tests/.venv-mcp/bin/python")
}

fn client_script() -> PathBuf {
    repo().join("tests/mcp-clients/troupe_mcp_client.py")
}

/// A folder with a troupe.yaml naming the MCP test servers (with `extra` appended) and a
/// troupe home of its own; `None` when the servers are not installed (the test skips).
pub(super) struct World {
    dir: tempfile::TempDir,
    /// troupe's home, when not `home` inside the folder.
    home: Option<PathBuf>,
}

impl World {
    pub(super) fn new(test: &str, extra: &str) -> Option<World> {
        if !servers_available(test) {
            return None;
        }
        let time = time_server()?;
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "approvals:\n  mode: manual\n  unattended: deny\nmcp_servers:\n  everything:\n    command: \"{}\"\n    args: [stdio]\n  time:\n    command: \"{}\"\n    args: [--local-timezone, UTC]\n{extra}",
            everything_bin().display(),
            time.display()
        );
        std::fs::write(dir.path().join("troupe.yaml"), yaml).unwrap();
        Some(World { dir, home: None })
    }

    /// A world in `dir` (its troupe.yaml written by the caller) with troupe's home at `home`.
    pub(super) fn in_dir(dir: tempfile::TempDir, home: &Path) -> World {
        World {
            dir,
            home: Some(home.to_path_buf()),
        }
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    fn home(&self) -> PathBuf {
        self.home
            .clone()
            .unwrap_or_else(|| self.path().join("home"))
    }

    fn config(&self) -> String {
        self.path().join("troupe.yaml").display().to_string()
    }

    /// Runs the Python client's `scenario` with `env`, troupe started over stdio with `serve`
    /// (arguments after `troupe mcp serve --config troupe.yaml`); returns what it saw.
    pub(super) async fn stdio(
        &self,
        scenario: &str,
        serve: &[&str],
        env: &[(&str, &str)],
    ) -> Value {
        let mut target = vec![
            "--stdio".to_string(),
            env!("CARGO_BIN_EXE_troupe").to_string(),
            "mcp".into(),
            "serve".into(),
            "--config".into(),
            self.config(),
        ];
        target.extend(serve.iter().map(|s| s.to_string()));
        self.client(scenario, &target, env).await
    }

    pub(super) async fn client(
        &self,
        scenario: &str,
        target: &[String],
        env: &[(&str, &str)],
    ) -> Value {
        let mut command = tokio::process::Command::new(python());
        command
            .arg(client_script())
            .arg(scenario)
            .args(target)
            .current_dir(self.path())
            .env("TROUPE_HOME", self.home())
            .env_remove("TROUPE_SERVE_TOKEN")
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let out = tokio::time::timeout(Duration::from_secs(120), command.output())
            .await
            .expect("the MCP client ran for over 2 minutes")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the client failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("the client printed no JSON ({e}):\n{stdout}\n{stderr}"))
    }

    /// Starts `troupe mcp serve --http 127.0.0.1:0` with the test token; returns it once it
    /// listens.
    pub(super) async fn http(&self, serve: &[&str]) -> HttpServer {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
            .args([
                "mcp",
                "serve",
                "--config",
                &self.config(),
                "--http",
                "127.0.0.1:0",
            ])
            .args(serve)
            .current_dir(self.path())
            .env("TROUPE_HOME", self.home())
            .env("TROUPE_SERVE_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.push_str(&line);
                seen.push('\n');
                if let Some(at) = line.split("listening on ").nth(1) {
                    return at.trim().to_string();
                }
            }
            panic!("troupe mcp serve --http ended before listening:\n{seen}")
        })
        .await
        .expect("troupe mcp serve --http did not listen within 60 s");
        // Keep reading its stderr, so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        HttpServer { _child: child, url }
    }
}

/// A running `troupe mcp serve --http`; killed when dropped.
pub(super) struct HttpServer {
    _child: tokio::process::Child,
    pub(super) url: String,
}

impl HttpServer {
    pub(super) fn target(&self, token: &str) -> Vec<String> {
        vec![
            "--http".into(),
            self.url.clone(),
            "--token".into(),
            token.to_string(),
        ]
    }
}
