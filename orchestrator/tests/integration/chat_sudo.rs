//! sudo the way a person meets it: `troupe chat` in a real terminal (the tmux harness of
//! `chat_terminal`), a fake `sudo` first on PATH that accepts only one password (read from its
//! stdin with `-S`, as troupe feeds it), against the mock model over real HTTP.
//! - interactive: the sudo command is approved, the password is asked at a masked prompt,
//!   reaches sudo, and is found nowhere afterwards: not on the screen, in the model's requests,
//!   the session store, the log or any other file troupe wrote; the next sudo of the session
//!   is not asked again;
//! - a subagent's sudo never prompts and comes back with the provisioning hint;
//! - a password the model writes itself (`echo pw | sudo -S ...`) is refused unasked;
//! - headless, `SUDO_PASSWORD` from troupe's environment file is fed to sudo.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

use crate::chat_terminal::Project;
use crate::support::terminal::Pane;

/// The one password the fake sudo takes.
const PASSWORD: &str = "Typed-S3cret-9431";

/// A folder with a fake `sudo`: with `-S` it reads one line from stdin and runs nothing; it
/// prints what sudo would print for a missing or a wrong password.
fn fake_sudo(root: &Path) -> PathBuf {
    let bin = root.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        r#"#!/bin/sh
stdin=0
while [ $# -gt 0 ]; do
  case "$1" in
    -S) stdin=1; shift ;;
    -p|-u|-g) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
pw=""
if [ "$stdin" = 1 ]; then IFS= read -r pw || true; fi
if [ -z "$pw" ]; then echo "sudo: a password is required" >&2; exit 1; fi
if [ "$pw" != '{PASSWORD}' ]; then echo "Sorry, try again." >&2; echo "sudo: 1 incorrect password attempt" >&2; exit 1; fi
echo "fake-sudo ran as root: $*"
"#
    );
    let path = bin.join("sudo");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn path_with(bin: &Path) -> String {
    format!(
        "PATH={}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Every file below `dir` (the fake sudo's folder left out) that holds `needle`.
fn files_holding(dir: &Path, needle: &str, skip: &Path) -> Vec<PathBuf> {
    let mut found = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        if at.starts_with(skip) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(path);
            }
        }
    }
    found
}

/// The tool results the model was sent, as one text.
fn tool_results(server: &MockServer) -> String {
    server
        .requests()
        .iter()
        .flat_map(|r| r.messages())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_is_asked_masked_reaches_sudo_and_is_kept_nowhere() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "sudo apt-get install -y cowsay"}),
            ))
            .turn(ScriptTurn::text("Installed it."))
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "env -u UNUSED sudo id"}),
            ))
            .turn(ScriptTurn::text("Checked who I am.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "approvals: {mode: manual}\n");
    let bin = fake_sudo(project.work().parent().unwrap());
    let pane = Pane::start_with_env(&project.work(), &project.home(), &[path_with(&bin)], &[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("install cowsay");
    // A command run as root needs a person's yes first, then the password.
    let asked = pane.wait_for("approve?");
    assert!(asked.contains("sudo apt-get install -y cowsay"), "{asked}");
    pane.line("y");
    let prompt = pane.wait_for("password (not shown):");
    assert!(
        prompt.contains("sudo password for: sudo apt-get install"),
        "{prompt}"
    );
    pane.line(PASSWORD);
    pane.wait_for("Installed it.");
    pane.wait_turns(1);
    let results = tool_results(&server);
    assert!(
        results.contains("fake-sudo ran as root: apt-get install -y cowsay"),
        "sudo did not get the password: {results}"
    );

    // The second sudo of the session (behind `env -u`) uses the password already given.
    pane.line("who am i");
    pane.wait("the second approval", |s| {
        s.matches("approve?").count() >= 2
    });
    pane.line("y");
    let screen = pane.wait_for("Checked who I am.");
    assert_eq!(
        screen.matches("password (not shown):").count(),
        1,
        "asked twice: {screen}"
    );
    assert!(
        tool_results(&server).contains("fake-sudo ran as root: id"),
        "{}",
        tool_results(&server)
    );
    pane.wait_turns(2);
    pane.key("C-d");
    // Nowhere: the screen, what the model was sent, and every file troupe wrote (the session
    // store, the log, traces, receipts) in its home and the project.
    assert!(!pane.screen().contains(PASSWORD), "{}", pane.screen());
    let sent: String = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(!sent.contains(PASSWORD), "the model was sent the password");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let root = project.work().parent().unwrap().to_path_buf();
    let holding = files_holding(&root, PASSWORD, &bin);
    assert!(
        holding.is_empty(),
        "the password was written to {holding:?}"
    );
    assert!(
        project.home().join("logs/chat.log").is_file(),
        "no log to check"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_never_prompts_and_a_written_password_is_refused() {
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::tool_call(
                    "terminal",
                    json!({"command": "echo model-guess | sudo -S id"}),
                )
                .when_input_contains("PARENT-GO"),
            )
            .turn(
                ScriptTurn::tool_call("delegate_task", json!({"tasks": [{"goal": "run sudo id"}]}))
                    .when_input_contains("hands sudo a password"),
            )
            .turn(
                ScriptTurn::tool_call("terminal", json!({"command": "sudo id"}))
                    .when_input_contains("run sudo id"),
            )
            .turn(ScriptTurn::text("CHILD-DONE").when_input_contains("a password is required"))
            .turn(ScriptTurn::text("PARENT-DONE").when_input_contains("CHILD-DONE")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "approvals: {mode: manual}\n");
    let bin = fake_sudo(project.work().parent().unwrap());
    let pane = Pane::start_with_env(&project.work(), &project.home(), &[path_with(&bin)], &[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("PARENT-GO");
    // The written password is refused without asking; the subagent's sudo is approved...
    let asked = pane.wait_for("approve?");
    assert!(asked.contains("sudo id"), "{asked}");
    assert!(
        !asked.contains("wants to run: echo")
            && asked.contains("(a subagent, depth 1) wants to run: sudo id"),
        "{asked}"
    );
    pane.line("y");
    let screen = pane.wait_for("PARENT-DONE");
    // ...and never asks for a password.
    assert!(!screen.contains("password (not shown)"), "{screen}");
    let results = tool_results(&server);
    assert!(
        results.contains("hands sudo a password"),
        "the written password was not refused: {results}"
    );
    assert!(!results.contains("fake-sudo ran"), "{results}");
    assert!(
        results.contains("a password is required")
            && results.contains("SUDO_PASSWORD")
            && results.contains("parent session"),
        "no provisioning hint for the subagent: {results}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_sessions_feed_sudo_password_from_the_environment_file() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "/usr/bin/env LANG=C sudo -u root whoami"}),
            ))
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "echo pw-is-${SUDO_PASSWORD:+present}${SUDO_PASSWORD:-absent}"}),
            ))
            .turn(ScriptTurn::text("done")),
    )
    .await
    .unwrap();
    // A headless run approves by configuration (here: approvals off).
    let project = Project::new(&server, "approvals: {mode: 'off'}\n");
    let bin = fake_sudo(project.work().parent().unwrap());
    std::fs::write(
        project.home().join(".env"),
        format!("SUDO_PASSWORD={PASSWORD}\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(project.work())
        .env("TROUPE_HOME", project.home())
        .env("PATH", path_with(&bin).trim_start_matches("PATH="))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SUDO_PASSWORD")
        .stdin(Stdio::null())
        .args(["chat", "-q", "go"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = tool_results(&server);
    assert!(
        results.contains("fake-sudo ran as root: whoami"),
        "SUDO_PASSWORD was not fed: {results}"
    );
    // The password never reaches a command's environment or the model.
    assert!(results.contains("pw-is-absent"), "{results}");
    let sent: String = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(!sent.contains(PASSWORD));
}
