//! `troupe chat` as a user runs it: the real binary, a scripted model, the built-in tools, and
//! `--json` output; and a server that cannot be reached.

use std::process::{Command, Stdio};

use serde_json::Value;

fn troupe() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
    command.stdin(Stdio::null());
    command
}

#[test]
fn json_output_has_call_events_and_ends_with_the_final_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello from a file\n").unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: read_file\n        arguments: {path: notes.txt}\n      - name: terminal\n        arguments: {command: \"rm -rf ./scratch\"}\n  - text: The file says hello.\n",
    )
    .unwrap();
    let output = troupe()
        .current_dir(dir.path())
        .args([
            "chat",
            "-q",
            "what does notes.txt say?",
            "--script",
            "script.yaml",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let finished: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), 2);
    assert_eq!(finished[0]["underlying_tool"], "read_file");
    assert_eq!(finished[0]["status"], "ok");
    assert!(finished[0]["duration_ms"].is_u64());
    // No terminal to ask on, so the approval-needing command is refused.
    assert_eq!(finished[1]["tool"], "terminal");
    assert_eq!(finished[1]["status"], "denied");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["type"] == "tool_call_started")
            .count(),
        2
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["text"], "The file says hello.");
    assert_eq!(last["status"], "completed");
    assert!(dir.path().join("notes.txt").exists());
}

#[test]
fn an_unreachable_server_exits_non_zero_with_a_message() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "approvals: {mode: manual}\n",
    )
    .unwrap();
    let output = troupe()
        .current_dir(dir.path())
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args([
            "chat",
            "-q",
            "hi",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
        ])
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("troupe chat:") && stderr.contains("cannot reach the model"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn no_model_configured_says_what_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    let output = troupe()
        .current_dir(dir.path())
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(["chat", "-q", "hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--base-url"));
}
