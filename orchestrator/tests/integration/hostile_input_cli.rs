//! Input troupe reads from places it does not control, through the `troupe` binary: a model
//! server whose error body carries terminal escape sequences, and a troupe.yaml nested 100,000
//! deep (issue 37, point 8).

use troupe_actors::model::mock_server::{Fault, MockServer};
use troupe_actors::model::{Script, ScriptTurn};

/// Runs `troupe chat -q hi` in `dir` against `url`; its status, stdout and stderr.
fn chat(dir: &std::path::Path, url: &str) -> (Option<i32>, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .env("TROUPE_HOME", dir.join("home"))
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(["chat", "-q", "hi", "--base-url", url])
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_servers_error_reaches_the_terminal_with_its_escapes_shown() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "model:\n  retry_budget: 0\n",
    )
    .unwrap();
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("never sent")))
        .await
        .unwrap();
    // A window title (OSC 0 ended by BEL), a clear screen (CSI 2J) and a cursor home.
    let hostile = "upstream failed\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[H";
    for _ in 0..8 {
        server.push_fault(Fault::Raw {
            status: 500,
            content_type: "application/json".into(),
            body: serde_json::json!({"error": {"message": hostile}}).to_string(),
        });
    }
    let url = server.url();
    let cwd = dir.path().to_path_buf();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || chat(&cwd, &url))
        .await
        .unwrap();
    assert_ne!(code, Some(0), "the turn failed, so the exit is not 0");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("upstream failed"),
        "the error is shown: {all:?}"
    );
    // (The log lines' own colours are troupe's; the server's sequences must not be raw.)
    for raw in ["\u{1b}]0;pwned", "\u{7}", "\u{1b}[2J", "\u{1b}[H"] {
        assert!(
            !all.contains(raw),
            "a raw escape sequence of the server reached the terminal: {all:?}"
        );
    }
    assert!(
        all.contains("\\x1b]0;pwned\\x07\\x1b[2J"),
        "the sequences are shown escaped: {all:?}"
    );
}

#[test]
fn a_troupe_yaml_nested_100000_deep_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let deep = format!(
        "model:\n  name: x\nbudget: {}1{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    std::fs::write(dir.path().join("troupe.yaml"), deep).unwrap();
    let (code, stdout, stderr) = chat(dir.path(), "http://127.0.0.1:9/v1");
    assert!(
        matches!(code, Some(c) if c != 0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stderr.contains("troupe.yaml") && stderr.contains("128") && stderr.contains("flatten"),
        "the error names the file, the limit and what to do: {stderr}"
    );
    // Block nesting (one key per line, each indented further) is refused the same way.
    let indented: String = (0..300)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    std::fs::write(dir.path().join("troupe.yaml"), indented).unwrap();
    let (code, _, stderr) = chat(dir.path(), "http://127.0.0.1:9/v1");
    assert!(matches!(code, Some(c) if c != 0), "{stderr}");
    assert!(stderr.contains("nested more than 128"), "{stderr}");
}
