//! `troupe doctor` as a newcomer runs it: against the mock model server over real HTTP (its
//! `/models` listing one model, a one-token answer), with no model named in troupe.yaml, and
//! against a server that is not there (a failed check, exit 1). `--json` is read back whole.

use std::process::{Command, Output, Stdio};

use serde_json::Value;
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

fn doctor(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join("home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("TROUPE_MODEL")
        .env_remove("TROUPE_KANBAN_STORE")
        .arg("doctor")
        .args(args)
        .output()
        .unwrap()
}

fn checks(out: &Output) -> Vec<Value> {
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    report["checks"].as_array().unwrap().clone()
}

fn named<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {checks:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_setup_passes_and_names_the_served_model() {
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("OK")))
        .await
        .unwrap();
    server.serve_models(&["local-qwen"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!("model:\n  base_url: {}\n", server.url()),
    )
    .unwrap();
    let dir_path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || doctor(&dir_path, &["--json"]))
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let checks = checks(&out);
    let model = named(&checks, "model");
    assert_eq!(model["status"], "ok", "{model}");
    let detail = model["detail"].as_str().unwrap();
    assert!(detail.contains("local-qwen"), "{detail}");
    assert!(detail.contains("one-token answer"), "{detail}");
    // The one-token request went to the listed model, as a session would.
    assert_eq!(
        server.requests().last().unwrap().body["model"],
        "local-qwen"
    );
    for name in [
        "config",
        "board store",
        "session store",
        "backend",
        "disk",
        "mcp",
    ] {
        assert_ne!(named(&checks, name)["status"], "fail", "{checks:?}");
    }
    assert!(["ok", "warn"].contains(&named(&checks, "landlock")["status"].as_str().unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_there_fails_the_check_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "model:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n",
    )
    .unwrap();
    let dir_path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || doctor(&dir_path, &[]))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("FAIL  model"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("cannot reach http://127.0.0.1:9/v1"),
        "{line}"
    );
    assert!(line.contains("model.base_url"), "{line}");
    assert!(
        stdout.lines().any(|l| l.starts_with("ok    disk")),
        "{stdout}"
    );
}
