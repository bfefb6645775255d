//! A board task whose worker process is killed with SIGKILL in the middle of a tool call (issue
//! 37, point 7), with real processes on a SQLite board: the lease lapses, a second `troupe
//! kanban worker` takes the task back, and its run's first model request (recorded by a mock
//! model server over HTTP) names the call that was cut off and says its effect is unknown.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{CursorMode, Script, ScriptTurn};

/// Guard against a hung step; never an assertion about speed.
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);

/// One `troupe kanban worker` process in a process group of its own (its commands with it),
/// killed with the whole group when dropped.
struct Worker(Child);

impl Worker {
    fn spawn(dir: &Path, log: &str) -> Worker {
        let out = std::fs::File::create(dir.join(log)).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .args(["kanban", "worker", "--store", "store"])
            .current_dir(dir)
            .env("TROUPE_HOME", dir.join("home"))
            .env("OPENAI_API_KEY", "sk-test")
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("TROUPE_KANBAN_STORE")
            .env_remove("TROUPE_KANBAN_BOARD")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0);
        // SAFETY: one prctl call between fork and exec, async-signal-safe, touching no memory
        // shared with the parent: should the test die, its workers die too.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        Worker(command.spawn().unwrap())
    }

    /// SIGKILL to the worker and everything it started, then reap.
    fn kill(&mut self) {
        if let Ok(pgid) = i32::try_from(self.0.id()) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `troupe kanban <args> --store store` in `dir`, as JSON.
fn kanban_json(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("kanban")
        .args(args)
        .args(["--store", "store", "--json"])
        .current_dir(dir)
        .env("TROUPE_HOME", dir.join("home"))
        .env_remove("TROUPE_KANBAN_STORE")
        .env_remove("TROUPE_KANBAN_BOARD")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kanban {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits for `done`, failing with `what` and the workers' logs after [`GIVE_UP_AFTER`].
async fn wait_for(dir: &Path, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > GIVE_UP_AFTER {
            let log = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            panic!(
                "gave up waiting for {what}\nfirst worker:\n{}\nsecond worker:\n{}",
                log("first.log"),
                log("second.log")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of the first user message of a recorded request.
fn first_prompt(messages: &[Value]) -> String {
    messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_task_is_told_which_calls_were_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    // Beside the test folder, not in it: that folder holds troupe's home, which the boundary
    // hides by granting only what is beside it.
    let marks = tempfile::tempdir().unwrap();
    let started = marks.path().join("started");
    let command = format!("touch {} && sleep 30", started.display());
    // One cursor across both workers: the first run's model asks for the slow command; the
    // second run's completes the task.
    let script = Script::new()
        .with_cursor(CursorMode::Sequential)
        .turn(ScriptTurn::tool_call(
            "terminal",
            json!({"command": command}),
        ))
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "checked what the last run left", "result": "ok"}),
        ))
        .when_exhausted("Finished.");
    let server = MockServer::start(script).await.unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: coder\n  lease_ttl: 3s\n  dispatch_interval: 1s\n\
             profiles:\n  coder:\n    model: mock\n    base_url: {}\n    toolsets: [core]\n",
            server.url()
        ),
    )
    .unwrap();
    let created = kanban_json(dir.path(), &["create", "tidy the build directory"]);
    let id = created["task"]["id"]
        .as_str()
        .or_else(|| created["id"].as_str())
        .unwrap()
        .to_string();

    let mut first = Worker::spawn(dir.path(), "first.log");
    wait_for(dir.path(), "the slow command to start", || started.exists()).await;
    first.kill();
    assert_eq!(server.requests().len(), 1, "the first run made one request");

    let _second = Worker::spawn(dir.path(), "second.log");
    wait_for(dir.path(), "the second run's first request", || {
        server.requests().len() >= 2
    })
    .await;
    let request = &server.requests()[1];
    let prompt = first_prompt(&request.messages());
    assert!(
        prompt.contains("Calls cut off in the last run"),
        "the new run is told a call was cut off: {prompt}"
    );
    assert!(
        prompt.contains("terminal") && prompt.contains("sleep 30"),
        "it names the call: {prompt}"
    );
    assert!(
        prompt.contains("effect is unknown"),
        "it says the effect is unknown: {prompt}"
    );
    wait_for(dir.path(), "the task to be done", || {
        kanban_json(dir.path(), &["show", &id])["task"]["status"] == "done"
    })
    .await;
    let runs = kanban_json(dir.path(), &["runs", &id]);
    let outcomes: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["reclaimed", "completed"], "{runs}");
}
