//! troupe's boundary through `troupe chat -q` with a scripted model: approved dangerous commands
//! still cannot reach beyond the workspace or into troupe's home, hooks and MCP servers cannot
//! read troupe's home, and `terminal.confine` (off, or Landlock unavailable) is said at start.

use std::path::PathBuf;

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};
use troupe_tools::builtin::confine::{PROBE_VAR, Support, probe};

/// Whether this kernel confines (the tests that need it say so and pass otherwise).
fn landlock() -> bool {
    match probe() {
        Support::Available { .. } => true,
        Support::Unavailable { why } => {
            eprintln!("skipped: {why}");
            false
        }
    }
}

/// A workspace, a troupe home holding a token, and a directory outside both (not under `/tmp`,
/// which commands may write).
/// Where a test world goes: a folder commands inside the boundary may not write. The build's own
/// temporary folder, unless the checkout lies under a temp folder (writable inside the
/// boundary, as when CI clones into /tmp); then a folder under `$HOME`.
fn unwritable_base() -> PathBuf {
    troupe_tools::test_support::unwritable_base(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")))
        .unwrap()
}

struct World {
    _root: tempfile::TempDir,
    work: PathBuf,
    home: PathBuf,
    outside: PathBuf,
}

impl World {
    fn new(yaml: &str) -> World {
        let root = tempfile::tempdir_in(unwritable_base()).unwrap();
        let base = root.path().canonicalize().unwrap();
        let (work, home, outside) = (base.join("work"), base.join("home"), base.join("outside"));
        for dir in [&work, &home, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(home.join("serve.token"), "tok-0123456789abcdef").unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        let yaml = yaml
            .replace("{{WORK}}", &work.display().to_string())
            .replace("{{HOME}}", &home.display().to_string());
        std::fs::write(work.join("troupe.yaml"), yaml).unwrap();
        World {
            _root: root,
            work,
            home,
            outside,
        }
    }

    /// `troupe chat -q` against `server`, with `env` added: (exit code, stdout, stderr).
    async fn chat(&self, server: &MockServer, env: &[(&str, &str)]) -> (i32, String, String) {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
        command
            .current_dir(&self.work)
            .stdin(std::process::Stdio::null())
            .env("TROUPE_HOME", &self.home)
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove(PROBE_VAR)
            .args(["chat", "-q", "go", "--base-url", &server.url(), "--json"]);
        for (k, v) in env {
            command.env(k, v);
        }
        let output = tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

/// The tool results the model was sent (the last request carries the whole conversation).
fn tool_results(server: &MockServer) -> Vec<String> {
    server
        .requests()
        .last()
        .map(|r| r.messages())
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            m["content"]
                .as_str()
                .map_or_else(|| m["content"].to_string(), str::to_string)
        })
        .collect()
}

fn finished(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "tool_call_finished")
        .collect()
}

fn terminal_turns(commands: &[String]) -> Script {
    let mut script = Script::new();
    for command in commands {
        script = script.turn(ScriptTurn::tool_call(
            "terminal",
            json!({"command": command}),
        ));
    }
    script.turn(ScriptTurn::text("done"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_commands_still_stop_at_the_boundary() {
    if !landlock() {
        return;
    }
    let world = World::new("approvals: {mode: off}\n");
    let (home, outside) = (world.home.display(), world.outside.display());
    let server = MockServer::start(terminal_turns(&[
        format!("rm -rf {outside}"),
        format!("cat {home}/serve.token"),
        format!("echo x > {home}/x"),
        "echo made > made.txt && mkdir -p sub && echo ok".to_string(),
    ]))
    .await
    .unwrap();
    let (code, stdout, stderr) = world.chat(&server, &[]).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(finished(&stdout).len(), 4, "{stdout}");
    assert!(
        world.outside.join("keep.txt").exists(),
        "the directory outside was deleted"
    );
    assert!(
        !world.home.join("x").exists(),
        "a command wrote troupe's home"
    );
    let results = tool_results(&server);
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results[0].contains("boundary"), "{}", results[0]);
    assert!(
        !results[1].contains("tok-0123456789abcdef"),
        "{}",
        results[1]
    );
    assert!(results[1].contains("Permission denied"), "{}", results[1]);
    // The workspace stays the workspace.
    assert!(world.work.join("made.txt").exists(), "{}", results[3]);
    assert!(
        !stderr.contains("boundary"),
        "no warning when confined: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_and_mcp_servers_cannot_read_troupes_home() {
    if !landlock() {
        return;
    }
    let probe = |name: &str| {
        format!(
            "(cat {{{{HOME}}}}/serve.token; ls {{{{HOME}}}}; echo end) > {{{{WORK}}}}/{name}.txt 2>&1"
        )
    };
    let yaml = format!(
        "hooks:\n  on_session_start: \"{}\"\nmcp_servers:\n  spy:\n    command: sh\n    args: [\"-c\", \"{}; exit 1\"]\n",
        probe("hook"),
        probe("mcp")
    );
    let world = World::new(&yaml);
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("hello")))
        .await
        .unwrap();
    let (code, _, stderr) = world.chat(&server, &[]).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    for name in ["hook", "mcp"] {
        let seen = std::fs::read_to_string(world.work.join(format!("{name}.txt")))
            .unwrap_or_else(|e| panic!("the {name} did not run: {e}; stderr: {stderr}"));
        assert!(seen.contains("end"), "{name}: {seen}");
        assert!(
            !seen.contains("tok-0123456789abcdef"),
            "{name} read the token: {seen}"
        );
        assert!(
            !seen.contains("serve.token\n"),
            "{name} listed the home: {seen}"
        );
        assert!(seen.contains("Permission denied"), "{name}: {seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confine_off_is_said_at_every_start() {
    let world = World::new("terminal: {confine: off}\n");
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("hi")))
        .await
        .unwrap();
    let (code, _, stderr) = world.chat(&server, &[]).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stderr.contains("terminal.confine is off"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_landlock_troupe_says_so_and_the_text_check_still_asks() {
    let world = World::new("");
    let victim = world.work.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    let server = MockServer::start(terminal_turns(&[format!("rm -rf {}", victim.display())]))
        .await
        .unwrap();
    let (code, stdout, stderr) = world.chat(&server, &[(PROBE_VAR, "unavailable")]).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains("without troupe's boundary") && stderr.contains(PROBE_VAR),
        "{stderr}"
    );
    // No one to ask in -q: the flagged command is refused, and the directory is still there.
    let calls = finished(&stdout);
    assert_eq!(calls[0]["status"], "denied", "{calls:?}");
    assert!(victim.exists());

    // `on` refuses to start without it, saying what to do.
    std::fs::write(world.work.join("troupe.yaml"), "terminal: {confine: on}\n").unwrap();
    let (code, _, stderr) = world.chat(&server, &[(PROBE_VAR, "unavailable")]).await;
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(
        stderr.contains("terminal.confine") && stderr.contains("confine: auto"),
        "{stderr}"
    );
}
