//! `troupe config check` on broken configs, one mistake each, as a newcomer writes them: every
//! one exits 2 with a message naming the key and what to write instead; a file with several
//! mistakes lists all of them; a clean file exits 0. A typo inside a section also reaches the
//! warnings of an ordinary command, and `approvals.mode: manul` stops it instead of falling back.
//! `kanban create --assignee` naming no configured profile is refused with the ones that exist.

use std::process::{Command, Output, Stdio};

/// Runs `troupe ARGS` in `dir` with its own home and no model in the environment.
fn troupe(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join("home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("TROUPE_TEST_UNSET_KEY_VAR")
        .env_remove("TROUPE_KANBAN_STORE")
        .env_remove("TROUPE_KANBAN_BOARD")
        .args(args)
        .output()
        .unwrap()
}

/// Checks `config` written to a file: the exit code and stdout.
fn check(config: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mine.yaml");
    std::fs::write(&file, config).unwrap();
    let out = troupe(dir.path(), &["config", "check", "--config", "mine.yaml"]);
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn twenty_broken_configs_each_get_their_message_and_exit_2() {
    let cases: &[(&str, &[&str])] = &[
        (
            "model: {modle: qwen}\n",
            &[
                "warning: unknown key `model.modle` under model",
                "did you mean `model`?",
            ],
        ),
        (
            "approvals: {mode: manul}\n",
            &[
                "error: config key `approvals.mode`",
                "expected manual or off",
                "manul",
            ],
        ),
        (
            "model: {base_url: http://127.0.0.1:9/v1, api_key_env: TROUPE_TEST_UNSET_KEY_VAR}\n",
            &[
                "`model.api_key_env`",
                "TROUPE_TEST_UNSET_KEY_VAR, which is not set",
            ],
        ),
        (
            "kanbann: {store: ./board.db}\n",
            &[
                "unknown key `kanbann` at the top level",
                "did you mean `kanban`?",
            ],
        ),
        (
            "model: {base_url: 5}\n",
            &["`model.base_url`", "expected a string"],
        ),
        (
            "model: {context_length: -3}\n",
            &["`model.context_length`", "128000"],
        ),
        (
            "model: {tool_calls: json}\n",
            &["config key `model.tool_calls`", "write native", "or auto"],
        ),
        (
            "approvals: {unattended: maybe}\n",
            &["approvals.unattended", "expected deny or approve"],
        ),
        (
            "approvals: {timeout: -1}\n",
            &["approvals.timeout", "positive number"],
        ),
        (
            "terminal: {timeot: 30}\n",
            &["unknown key `terminal.timeot`", "did you mean `timeout`?"],
        ),
        (
            "kanban: {lease_tll: 5m}\n",
            &[
                "unknown key `kanban.lease_tll`",
                "did you mean `lease_ttl`?",
            ],
        ),
        ("serve: {port: 99999}\n", &["`serve.port`"]),
        (
            "serve: {prot: 8080}\n",
            &["unknown key `serve.prot`", "did you mean `port`?"],
        ),
        (
            "sessions: {persist: maybe}\n",
            &["`sessions.persist`", "true or false"],
        ),
        (
            "pricing: {qwen: {inptu: 1, output: 2}}\n",
            &["unknown key `pricing.qwen.inptu`", "did you mean `input`?"],
        ),
        ("budget: {max_tokens: -5}\n", &["budget.max_tokens"]),
        (
            "tools: {connectors: {url: http://127.0.0.1:9, tokn_env: X}}\n",
            &[
                "unknown key `tools.connectors.tokn_env`",
                "did you mean `token_env`?",
            ],
        ),
        (
            "code_execution: {timeout: soon}\n",
            &["code_execution.timeout"],
        ),
        ("model: {\n", &["is not valid YAML or JSON"]),
        (
            "plugins: {enabeld: [x]}\n",
            &["unknown key `plugins.enabeld`", "did you mean `enabled`?"],
        ),
        (
            "observability: {endpoit: x}\n",
            &["endpoit", "otlp_endpoint"],
        ),
    ];
    assert!(cases.len() >= 20);
    for (config, needles) in cases {
        let (code, out) = check(config);
        assert_eq!(code, Some(2), "{config}: {out}");
        for needle in *needles {
            assert!(
                out.contains(needle),
                "{config}: expected {needle:?} in:\n{out}"
            );
        }
        assert!(!out.contains("panicked"), "{out}");
    }
}

#[test]
fn every_problem_of_a_file_is_listed_at_once() {
    let (code, out) = check(
        "model:\n  modle: qwen\n  base_url: 5\napprovals:\n  mode: manul\nserve:\n  port: 99999\nkanban:\n  lease_tll: 5m\n",
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("5 problems"), "{out}");
    for needle in [
        "`model.base_url`",
        "`approvals.mode`",
        "`serve.port`",
        "`model.modle`",
        "`kanban.lease_tll`",
    ] {
        assert!(out.contains(needle), "expected {needle} in:\n{out}");
    }
}

#[test]
fn a_clean_file_passes_and_json_lists_the_problems() {
    let (code, out) = check(
        "model:\n  base_url: http://127.0.0.1:9/v1\n  model: qwen\napprovals: {mode: manual}\nserve: {port: 8080}\n",
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("no problems found"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("troupe.yaml"), "model: {modle: x}\n").unwrap();
    let out = troupe(dir.path(), &["config", "check", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["errors"].as_array().unwrap().len(), 0);
    assert_eq!(report["warnings"].as_array().unwrap().len(), 1, "{report}");
}

#[test]
fn ordinary_commands_warn_of_typos_and_stop_on_wrong_values() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("troupe.yaml"), "model: {modle: qwen}\n").unwrap();
    let out = troupe(dir.path(), &["sessions", "list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("`model.modle`"), "{stderr}");
    assert!(stderr.contains("did you mean `model`?"), "{stderr}");

    std::fs::write(dir.path().join("troupe.yaml"), "approvals: {mode: manul}\n").unwrap();
    let out = troupe(dir.path(), &["sessions", "list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected manual or off"), "{stderr}");
}

#[test]
fn a_task_for_a_profile_that_does_not_exist_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "kanban: {store: ./board.db}\nprofiles:\n  coder: {base_url: http://127.0.0.1:9/v1, model: m}\n  writer: {base_url: http://127.0.0.1:9/v1, model: m}\n",
    )
    .unwrap();
    let out = troupe(dir.path(), &["kanban", "init"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = troupe(
        dir.path(),
        &["kanban", "create", "a task", "--assignee", "nobody"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no profile \"nobody\""), "{stderr}");
    assert!(stderr.contains("coder, writer"), "{stderr}");
    let out = troupe(
        dir.path(),
        &["kanban", "create", "a task", "--assignee", "coder"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
