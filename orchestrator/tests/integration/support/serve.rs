//! `troupe serve` as a user runs it, the one harness every test of a served troupe uses: a
//! workspace with a troupe.yaml (the mock model server's URL and the board store filled in),
//! troupe's home beside it, the `troupe` binary run there, the server's address read from its
//! startup line, a client that carries the token, and the whole process group killed when the
//! test lets go of it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use troupe_actors::model::Script;
use troupe_actors::model::mock_server::MockServer;

/// The token every served troupe here uses unless the test says otherwise.
pub(crate) const TOKEN: &str = "served-troupe-test-token-0123456789";

/// The line `troupe serve` prints once it listens, before its address.
const LISTENING: &str = "troupe serve: listening on ";

/// A workspace with a troupe.yaml, troupe's home and the mock model the yaml names.
pub(crate) struct TroupeDir {
    pub(crate) dir: tempfile::TempDir,
    /// troupe's home, beside the workspace rather than in it, as a user's `~/.troupe` is beside
    /// their project: the boundary hides it from the commands working in the workspace.
    pub(crate) home: tempfile::TempDir,
    pub(crate) model: MockServer,
}

impl TroupeDir {
    /// Writes `yaml` as troupe.yaml in a new workspace, with `{{MODEL_URL}}`, `{{STORE}}` (the
    /// board store) and `{{DIR}}` (the workspace) filled in; the model answers with `script`.
    pub(crate) async fn new(yaml: &str, script: &str) -> TroupeDir {
        TroupeDir::in_dir(tempfile::tempdir().unwrap(), yaml, script).await
    }

    /// [`TroupeDir::new`] in a workspace the test prepared.
    pub(crate) async fn in_dir(dir: tempfile::TempDir, yaml: &str, script: &str) -> TroupeDir {
        TroupeDir::with_script(dir, yaml, Script::from_yaml_str(script).unwrap()).await
    }

    /// [`TroupeDir::in_dir`] with a script built in code.
    pub(crate) async fn with_script(
        dir: tempfile::TempDir,
        yaml: &str,
        script: Script,
    ) -> TroupeDir {
        let model = MockServer::start(script).await.unwrap();
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

    /// `troupe` in the workspace, reading its troupe.yaml, with the test token and nothing
    /// from the environment that would point it at another model or board.
    pub(crate) fn troupe(&self) -> tokio::process::Command {
        self.command(tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe")))
    }

    /// [`TroupeDir::troupe`] started by a shell that first lowers the open-file limit to
    /// `open_files` (as on many machines); `exec` keeps the process id troupe's own.
    pub(crate) fn troupe_with_open_files(&self, open_files: u32) -> tokio::process::Command {
        let mut shell = tokio::process::Command::new("sh");
        shell
            .arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_troupe"));
        self.command(shell)
    }

    fn command(&self, mut command: tokio::process::Command) -> tokio::process::Command {
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

/// A running `troupe serve`, in a process group of its own that is killed on drop, so neither
/// the server nor a worker it started outlives a failed test.
pub(crate) struct Served {
    child: tokio::process::Child,
    /// Its process id, which is also its process group's.
    pid: Pid,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    client: reqwest::Client,
    /// Every line of its stderr, read all along so it never blocks on a full pipe.
    log: Arc<Mutex<Vec<String>>>,
    /// The task reading stderr; it ends when the pipe closes.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    /// `troupe kanban init`, then `troupe serve --port 0 extra…` in `dir` with [`TOKEN`].
    pub(crate) async fn start(dir: &TroupeDir, extra: &[&str]) -> Served {
        let (code, _, err) = dir.run(&["kanban", "init"]).await;
        assert_eq!(code, 0, "{err}");
        let mut command = dir.troupe();
        command.args(["serve", "--port", "0"]).args(extra);
        Served::spawn(command, Some(TOKEN)).await
    }

    /// Runs `command` (a `troupe serve` its caller set up) and waits for its address; the
    /// client carries `token` when given.
    pub(crate) async fn spawn(mut command: tokio::process::Command, token: Option<&str>) -> Served {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let base = loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("troupe serve did not start: {seen:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("troupe serve exited: {seen:?}"));
            let address = line
                .strip_prefix(LISTENING)
                .map(|rest| rest.split_whitespace().next().unwrap().to_string());
            seen.push(line);
            if let Some(address) = address {
                break address;
            }
        };
        let log = Arc::new(Mutex::new(seen));
        let kept = Arc::clone(&log);
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        let mut client = reqwest::Client::builder();
        if let Some(token) = token {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
            client = client.default_headers(headers);
        }
        Served {
            child,
            pid,
            base,
            client: client.build().unwrap(),
            log,
            reader: Some(reader),
        }
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    /// A client that sends the token with every request.
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A request to `path` with the token.
    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// One API call with the token: (status, JSON body, or the text when it is not JSON).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.request(method, path);
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

    /// Every stderr line so far.
    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits for a line of its stderr starting with `prefix`; returns it.
    pub(crate) async fn wait_for_line(&self, prefix: &str) -> String {
        self.wait_for_line_where(prefix, |l| l.starts_with(prefix))
            .await
    }

    /// Waits for a line of its stderr that `found` accepts (`what` names it in the failure).
    pub(crate) async fn wait_for_line_where(
        &self,
        what: &str,
        found: impl Fn(&str) -> bool,
    ) -> String {
        for _ in 0..600 {
            if let Some(line) = self.log.lock().unwrap().iter().find(|l| found(l)) {
                return line.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("troupe serve never said {what:?}: {:?}", self.log());
    }

    /// `GET /api/sessions/{id}/events`, resuming after `last_event_id` when given.
    pub(crate) fn events(&self, id: &str, last_event_id: Option<u64>) -> reqwest::RequestBuilder {
        let request = self.request(reqwest::Method::GET, &format!("/api/sessions/{id}/events"));
        match last_event_id {
            Some(last) => request.header("Last-Event-ID", last.to_string()),
            None => request,
        }
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

    /// Polls `GET /api/approvals` until nothing is pending (a stop withdrew it).
    pub(crate) async fn no_approval_pending(&self) {
        let mut all = Value::Null;
        for _ in 0..400 {
            let (status, answer) = self
                .call(reqwest::Method::GET, "/api/approvals", None)
                .await;
            assert_eq!(status, 200, "{answer}");
            if answer["approvals"].as_array().is_some_and(Vec::is_empty) {
                return;
            }
            all = answer;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("a request stayed pending: {all}");
    }

    /// SIGKILL: nothing is flushed, nothing is closed.
    pub(crate) async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    /// SIGTERM, then waits for a clean exit; returns every line it wrote to stderr.
    pub(crate) async fn stop(mut self) -> Vec<String> {
        kill(self.pid, Signal::SIGTERM).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("troupe serve did not exit within 30 s of SIGTERM")
            .unwrap();
        // The last lines: the reader ends when the pipe closes.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), reader).await;
        }
        let log = self.log();
        assert_eq!(status.code(), Some(0), "{log:?}");
        log
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // The group: the server and whatever it started (workers, tool processes). After a
        // clean stop nothing is left and the signal finds no one, which is fine.
        let _ = killpg(self.pid, Signal::SIGKILL);
    }
}
