//! A `troupe serve` process for tests that drive the binary as a user does: a directory with a
//! troupe.yaml (the mock model server's URL and the board store filled in), the `troupe` CLI run
//! in it, and the server's address read from its startup line.

#![allow(dead_code, reason = "each test binary uses the part it needs")]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use troupe_actors::model::Script;
use troupe_actors::model::mock_server::MockServer;

/// The token every served troupe here uses.
pub(crate) const TOKEN: &str = "served-troupe-test-token-0123456789";

/// A directory with a troupe.yaml and the mock model it names.
pub(crate) struct TroupeDir {
    pub(crate) dir: tempfile::TempDir,
    /// troupe's home, beside the directory rather than in it, as a user's `~/.troupe` is beside
    /// their project: the boundary hides it from the commands working in the directory.
    pub(crate) home: tempfile::TempDir,
    pub(crate) model: MockServer,
}

impl TroupeDir {
    /// Writes `yaml` as troupe.yaml in a new directory, with `{{MODEL_URL}}`, `{{STORE}}` (the
    /// board store) and `{{DIR}}` (the directory) filled in; the model answers with `script`.
    pub(crate) async fn new(yaml: &str, script: &str) -> TroupeDir {
        TroupeDir::in_dir(tempfile::tempdir().unwrap(), yaml, script).await
    }

    /// [`TroupeDir::new`] in a directory the test prepared.
    pub(crate) async fn in_dir(dir: tempfile::TempDir, yaml: &str, script: &str) -> TroupeDir {
        let model = MockServer::start(Script::from_yaml_str(script).unwrap())
            .await
            .unwrap();
        let yaml = yaml
            .replace("{{MODEL_URL}}", &model.url())
            .replace("{{STORE}}", &dir.path().join("boards").to_string_lossy())
            .replace("{{DIR}}", &dir.path().to_string_lossy());
        std::fs::write(dir.path().join("troupe.yaml"), yaml).unwrap();
        let home = tempfile::tempdir().unwrap();
        TroupeDir { dir, home, model }
    }

    /// troupe's home for every command run here.
    pub(crate) fn home(&self) -> &Path {
        self.home.path()
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `troupe` in the directory, reading its troupe.yaml, with the test token.
    pub(crate) fn troupe(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .current_dir(self.path())
            .env("TROUPE_HOME", self.home())
            .env("TROUPE_MCP_LOG_DIR", self.path().join("logs"))
            .env(troupe::http::auth::TOKEN_ENV, TOKEN)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for var in [
            "TROUPE_BASE_URL",
            "OPENAI_BASE_URL",
            "TROUPE_KANBAN_STORE",
            "TROUPE_KANBAN_BOARD",
        ] {
            command.env_remove(var);
        }
        command
    }

    /// Runs `troupe args…` to the end: (exit code, stdout, stderr).
    pub(crate) async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let output =
            tokio::time::timeout(Duration::from_secs(120), self.troupe().args(args).output())
                .await
                .unwrap_or_else(|_| panic!("troupe {args:?} did not finish in two minutes"))
                .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs `troupe args… --json` and parses what it printed; panics with stderr on failure.
    pub(crate) async fn run_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let (code, out, err) = self.run(&all).await;
        assert_eq!(code, 0, "troupe {all:?}: {err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Every message the model was sent, as one text per request.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.model
            .requests()
            .iter()
            .map(|r| Value::Array(r.messages()).to_string())
            .collect()
    }

    /// Whether some request to the model carried `needle` (a tool result it was shown).
    pub(crate) fn model_saw(&self, needle: &str) -> bool {
        self.requests().iter().any(|r| r.contains(needle))
    }
}

/// A running `troupe serve`.
pub(crate) struct Served {
    child: tokio::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// Its stderr lines after the address, read all along so it never blocks on a full pipe.
    pub(crate) log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Served {
    /// `troupe kanban init`, then `troupe serve --port 0 extra…`, waiting for its address.
    pub(crate) async fn start(dir: &TroupeDir, extra: &[&str]) -> Served {
        let (code, _, err) = dir.run(&["kanban", "init"]).await;
        assert_eq!(code, 0, "{err}");
        let mut child = dir
            .troupe()
            .args(["serve", "--port", "0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let base = loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("troupe serve did not start: {seen:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("troupe serve exited: {seen:?}"));
            if let Some(rest) = line.strip_prefix("troupe serve: listening on ") {
                break rest.split_whitespace().next().unwrap().to_string();
            }
            seen.push(line);
        };
        let log = std::sync::Arc::new(std::sync::Mutex::new(seen));
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        Served { child, base, log }
    }

    /// One API call with the token: (status, JSON body).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Waits for a line of its stderr starting with `prefix`; returns it.
    pub(crate) async fn wait_for_line(&self, prefix: &str) -> String {
        for _ in 0..600 {
            if let Some(line) = self
                .log
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.starts_with(prefix))
            {
                return line.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "troupe serve never said {prefix:?}: {:?}",
            self.log.lock().unwrap()
        );
    }

    /// `GET /api/sessions/{id}/events`, resuming after `last_event_id` when given.
    pub(crate) fn events(&self, id: &str, last_event_id: Option<u64>) -> reqwest::RequestBuilder {
        let mut request = reqwest::Client::new()
            .get(format!("{}/api/sessions/{id}/events", self.base))
            .bearer_auth(TOKEN);
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last.to_string());
        }
        request
    }

    /// Polls `GET /api/approvals` until one is pending; returns it.
    pub(crate) async fn pending_approval(&self) -> Value {
        for _ in 0..300 {
            let (status, all) = self
                .call(reqwest::Method::GET, "/api/approvals", None)
                .await;
            assert_eq!(status, 200, "{all}");
            if let Some(first) = all["approvals"].as_array().and_then(|a| a.first()) {
                return first.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no approval was ever pending");
    }

    /// SIGKILL: nothing is flushed, nothing is closed.
    pub(crate) async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    /// SIGTERM, then waits for a clean exit.
    pub(crate) async fn stop(mut self) {
        let pid = self.child.id().unwrap() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("troupe serve did not exit within 30 s of SIGTERM")
            .unwrap();
        assert_eq!(status.code(), Some(0), "{:?}", self.log.lock().unwrap());
    }
}
