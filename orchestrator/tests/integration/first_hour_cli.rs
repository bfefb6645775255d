//! What a newcomer meets in the first hour, through the real binary: every listing command
//! piped into `head -1` (and into `true`, which closes the pipe before the first line) exits 0
//! without a panic; a piped conversation whose last turn failed exits non-zero; a `-q` session
//! is closed when the command ends; stderr written to a file carries no colour codes.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// A workspace with a troupe.yaml, a scripted model, a stored chat session and a board of
/// tasks, all under a temporary folder (its own `TROUPE_HOME`).
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("script.yaml"),
            "turns:\n  - text: Hello there.\n",
        )
        .unwrap();
        let catalog: Vec<serde_json::Value> = (0..40)
            .map(|i| {
                serde_json::json!({"type": "function", "toolset": "files", "function": {
                    "name": format!("read_file_{i}"),
                    "description": format!("Read file number {i} from the disk"),
                    "parameters": {"type": "object", "properties": {}}}})
            })
            .collect();
        std::fs::write(
            dir.path().join("tools.json"),
            serde_json::to_string(&catalog).unwrap(),
        )
        .unwrap();
        // `troupe mcp list` reads a config file; this one names no server.
        std::fs::write(
            dir.path().join("troupe.yaml"),
            "approvals: {mode: manual}\n",
        )
        .unwrap();
        let world = World { dir };
        world.troupe_ok(&["kanban", "init"]);
        for i in 0..30 {
            world.troupe_ok(&["kanban", "create", &format!("task number {i}")]);
        }
        world.troupe_ok(&["chat", "-q", "hi", "--script", "script.yaml"]);
        world
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.path())
            .stdin(Stdio::null())
            .env("TROUPE_HOME", self.path().join("home"))
            .env("TROUPE_KANBAN_STORE", self.path().join("store"))
            // A terminal's TERM, so only the missing terminal can keep colour out.
            .env("TERM", "xterm-256color")
            .env_remove("NO_COLOR")
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("TROUPE_KANBAN_BOARD");
        cmd
    }

    fn troupe(&self, args: &[&str]) -> Output {
        self.command(env!("CARGO_BIN_EXE_troupe"))
            .args(args)
            .output()
            .unwrap()
    }

    fn troupe_ok(&self, args: &[&str]) -> String {
        let out = self.troupe(args);
        assert!(
            out.status.success(),
            "{args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `troupe ARGS | READER` under `sh -c`; troupe's own exit code and its stderr.
    fn piped(&self, args: &[&str], reader: &str) -> (i32, String) {
        let quoted: Vec<String> = args.iter().map(|a| quote(a)).collect();
        let script = format!(
            "{{ {} {} 2>troupe.err; echo $? >troupe.code; }} | {reader}",
            quote(env!("CARGO_BIN_EXE_troupe")),
            quoted.join(" ")
        );
        let out = self.command("sh").args(["-c", &script]).output().unwrap();
        assert!(out.status.success(), "sh -c {script}: {out:?}");
        let code = std::fs::read_to_string(self.path().join("troupe.code")).unwrap();
        let stderr = std::fs::read_to_string(self.path().join("troupe.err")).unwrap();
        (code.trim().parse().unwrap(), stderr)
    }
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
fn every_listing_command_piped_into_head_exits_0_without_a_panic() {
    let world = World::new();
    let listings: &[&[&str]] = &[
        &["sessions", "list"],
        &["sessions", "list", "--json"],
        &["sessions", "list", "--all"],
        &["sessions", "search", "hi"],
        &["kanban", "list"],
        &["kanban", "list", "--json"],
        &["kanban", "boards", "list"],
        &["kanban", "stats"],
        &["plugins", "list"],
        &["mcp", "list"],
        &[
            "tools",
            "search",
            "--catalog",
            "tools.json",
            "--args",
            r#"{"queries": ["read a file"]}"#,
        ],
        &["chat", "-q", "hi", "--script", "script.yaml"],
        &["chat", "-q", "hi", "--script", "script.yaml", "--json"],
        &["--help"],
    ];
    for args in listings {
        for reader in ["head -1", "true"] {
            let (code, stderr) = world.piped(args, reader);
            assert!(
                !stderr.contains("panicked"),
                "troupe {args:?} | {reader} panicked:\n{stderr}"
            );
            assert_eq!(code, 0, "troupe {args:?} | {reader}:\n{stderr}");
        }
    }
    // The chat answered into a closed pipe still ended its session and stored it, closed.
    let listed = world.troupe_ok(&["sessions", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let sessions = listed["sessions"].as_array().unwrap();
    assert!(sessions.len() >= 5, "{listed}");
    for session in sessions {
        assert_eq!(session["status"], "closed", "{session}");
    }
}

#[test]
fn a_one_shot_session_is_closed_when_the_command_ends() {
    let world = World::new();
    let listed = world.troupe_ok(&["sessions", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["origin"], "chat");
    assert_eq!(sessions[0]["status"], "closed", "{listed}");
    let table = world.troupe_ok(&["sessions", "list"]);
    assert!(!table.contains(" open "), "{table}");
}

#[test]
fn a_piped_conversation_whose_last_turn_failed_exits_1() {
    let world = World::new();
    // Nothing listens on port 9: every turn fails at once.
    std::fs::write(
        world.path().join("troupe.yaml"),
        "model:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n  retry_budget: 0\n",
    )
    .unwrap();
    let mut child = world
        .command(env!("CARGO_BIN_EXE_troupe"))
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"first question\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("failed"), "{stderr}");
    // Written to a pipe, not a terminal: no colour codes anywhere.
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));

    // The same conversation with a model that answers exits 0.
    std::fs::remove_file(world.path().join("troupe.yaml")).unwrap();
    let mut child = world
        .command(env!("CARGO_BIN_EXE_troupe"))
        .args(["chat", "--script", "script.yaml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"hello\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hello there."));
}

#[test]
fn warnings_written_to_a_file_carry_no_colour_codes() {
    let world = World::new();
    // An unknown top-level key is a warning on stderr.
    std::fs::write(world.path().join("troupe.yaml"), "modle: {}\n").unwrap();
    let out = world.troupe(&["sessions", "list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("modle"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}
