//! Attacks on troupe made the way a hostile model or script makes them, through the `troupe`
//! binary: a `terminal` command hunting for troupe's secrets in `/proc` and sneaking what it can
//! reach out in encodings the redaction would not recognise.

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

/// A secret troupe holds for itself (stripped from children's environment).
const OWN_KEY: &str = "sk-troupe-own-key-9f8e7d6c5b4a3210";
/// A secret in troupe's environment that `terminal` commands inherit (the user's own token).
const INHERITED: &str = "deploy-tok-0a1b2c3d4e5f6789";

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Pieces of `secret`'s base64 that appear whatever its position in an encoded stream.
fn base64_pieces(secret: &str) -> Vec<String> {
    (0..3)
        .map(|offset| {
            let mut bytes = vec![b'x'; offset];
            bytes.extend_from_slice(secret.as_bytes());
            let encoded = base64(&bytes);
            // Skip the characters touched by the prefix and the last two (touched by padding).
            encoded[offset + 2..encoded.len() - 2].to_string()
        })
        .collect()
}

/// The tool results the model was sent, joined.
fn tool_results(server: &MockServer) -> String {
    server
        .requests()
        .iter()
        .flat_map(|r| r.messages())
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            m["content"]
                .as_str()
                .map_or_else(|| m["content"].to_string(), str::to_string)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_read_or_sneak_out_troupes_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let leak = dir.path().join("leak.txt");
    // Every process's environment, as a script hunting for keys would read it (troupe is the
    // shell's parent), then the inherited token in base64 and hex, and a lower-case password=.
    let command = format!(
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done > {leak} 2>/dev/null; \
         tr '\\0' '\\n' < /proc/$PPID/environ | base64; \
         printf %s \"$DEPLOY_TOKEN\" | base64; \
         printf %s \"$DEPLOY_TOKEN\" | od -An -tx1 | tr -d ' \\n'; echo; \
         echo \"login with password=$DEPLOY_TOKEN\"",
        leak = leak.display()
    );
    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "terminal",
            json!({"command": command}),
        ))
        .turn(ScriptTurn::text("done"));
    let server = MockServer::start(script).await.unwrap();
    let url = server.url();
    let cwd = dir.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(&cwd)
            .stdin(std::process::Stdio::null())
            .env("TROUPE_HOME", cwd.join("home"))
            .env("OPENAI_API_KEY", OWN_KEY)
            .env("DEPLOY_TOKEN", INHERITED)
            .args(["chat", "-q", "look around", "--base-url", &url, "--json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let finished: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(
        finished[0]["status"], "ok",
        "the command should have run: {finished:?}"
    );

    // troupe's environment was out of reach, even for a root child.
    let leaked = std::fs::read_to_string(&leak).unwrap_or_default();
    // (The inherited token is in the command's own environment, which it may read.)
    assert!(
        !leaked.contains(OWN_KEY),
        "a child read troupe's environment from /proc"
    );
    // What reached the model holds neither secret in any form.
    let seen = tool_results(&server);
    assert!(!seen.is_empty(), "the model never got the tool result");
    for secret in [OWN_KEY, INHERITED] {
        assert!(!seen.contains(secret), "{secret} reached the model: {seen}");
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(
            !seen.contains(&hex),
            "{secret} in hex reached the model: {seen}"
        );
        for piece in base64_pieces(secret) {
            assert!(
                !seen.contains(&piece),
                "{secret} in base64 reached the model: {seen}"
            );
        }
    }
    assert!(seen.contains("redacted"), "{seen}");
}

/// `troupe kanban --store <dir> args...` in `dir`, with nothing from the environment.
fn kanban(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.arg("kanban")
        .arg("--store")
        .arg(dir.join("store"))
        .args(args)
        .current_dir(dir)
        .env("TROUPE_HOME", dir.join("home"));
    for var in [
        "TROUPE_BASE_URL",
        "OPENAI_BASE_URL",
        "TROUPE_KANBAN_BOARD",
        "TROUPE_KANBAN_STORE",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn escape_sequences_on_the_board_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    // Clear screen, window title, a hyperlink, backspaces over text and a carriage return.
    let title = "fix it\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\ ok\x08\x08\x08\rrm -rf";
    let body = "details\x1b[31m red\x1b[0m\nsecond line\u{9b}2J";
    kanban(dir.path(), &["init"]);
    let created = kanban(dir.path(), &["create", title, "--body", body, "--json"]);
    let task: Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = task["task"]["id"].as_str().unwrap().to_string();
    kanban(
        dir.path(),
        &["comment", &id, "looks good\x1b]52;c;cm0gLXJmIC8=\x07"],
    );
    for args in [vec!["list"], vec!["show", id.as_str()]] {
        let out = kanban(dir.path(), &args);
        let text = String::from_utf8(out.stdout).unwrap();
        let raw: Vec<char> = text
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(
            raw.is_empty(),
            "{args:?} printed raw control characters {raw:?}:\n{text}"
        );
        assert!(text.contains("fix it\\x1b[2J"), "{args:?}: {text}");
    }
    let shown = String::from_utf8(kanban(dir.path(), &["show", &id]).stdout).unwrap();
    assert!(
        shown.contains("second line\\x9b2J") && shown.contains("\\x1b]52;c;"),
        "{shown}"
    );
}

/// Whether process `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Waits up to `limit` for `pid` to stop running.
fn gone_within(pid: i32, limit: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    !running(pid)
}

/// A workspace whose troupe.yaml names an MCP server that starts and never answers.
fn hung_server_workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    // The server writes its pid beside the test folder, which holds troupe's home (hidden by
    // the boundary, which lets nothing new be made directly in the folders above it).
    let marks = tempfile::Builder::new().tempdir().unwrap().keep();
    let pid = marks.join("server.pid");
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "mcp_servers:\n  hung:\n    command: sh\n    args: [\"-c\", \"echo $$ > {}; exec sleep 300\"]\n    connect_timeout: 120\n",
            pid.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - text: answered without waiting\n",
    )
    .unwrap();
    (dir, pid)
}

fn read_pid(path: &std::path::Path) -> i32 {
    for _ in 0..400 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("no pid in {}", path.display());
}

#[test]
fn a_hung_mcp_server_holds_no_turn_hostage_and_ends_with_troupe() {
    let (dir, pid_file) = hung_server_workspace();
    let home = dir.path().join("home");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .env("TROUPE_HOME", &home)
        .env_remove("TROUPE_MCP_LOG_DIR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .args(["chat", "-q", "hi", "--script", "script.yaml"])
        .spawn()
        .unwrap();
    let server = read_pid(&pid_file);
    // The turn does not wait for the server's 120 s connect timeout.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("troupe chat waited for the hung MCP server");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let output = child.wait_with_output().unwrap();
    assert!(
        status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("answered without waiting"));
    assert!(
        gone_within(server, std::time::Duration::from_secs(10)),
        "the hung server {server} outlived troupe chat"
    );
    // Its log is in troupe's home, readable by its owner only.
    use std::os::unix::fs::PermissionsExt as _;
    let log_dir = home.join("logs").join("mcp");
    let log = log_dir.join("hung.log");
    assert!(log.exists(), "no log at {}", log.display());
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&log_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[test]
fn sigterm_during_mcp_start_up_leaves_no_server_running() {
    let (dir, pid_file) = hung_server_workspace();
    // A model that never answers keeps the turn (and troupe) running until the signal.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .env("TROUPE_HOME", dir.path().join("home"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .args(["chat", "-q", "hi", "--base-url", &url])
        .spawn()
        .unwrap();
    let server = read_pid(&pid_file);
    assert!(running(server));
    let troupe = i32::try_from(child.id()).unwrap();
    // SIGTERM, as a service manager or `kill` sends it.
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &troupe.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let _ = child.wait();
    assert!(
        gone_within(server, std::time::Duration::from_secs(10)),
        "the MCP server {server} outlived troupe after SIGTERM"
    );
    drop(listener);
}

/// `troupe chat -q` in `dir` against `url` (a mock model), with its own troupe home.
fn chat_in(dir: &std::path::Path, url: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .env("TROUPE_HOME", dir.join("home"))
        .args(["chat", "-q", "go", "--base-url", url, "--json"])
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_rewrites_troupe_yaml_does_not_set_the_next_sessions_rules() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("troupe.yaml");
    std::fs::write(&config, "approvals:\n  timeout: 5\n").unwrap();
    // The attack of issue 37: loosen the approvals and add a start-up hook, from inside a
    // session, with a plain write and with a shell append.
    let script = Script::new()
        .turn(ScriptTurn::tool_call(
            "write_file",
            json!({"path": "troupe.yaml", "content": "approvals:\n  unattended: approve\n"}),
        ))
        .turn(ScriptTurn::tool_call(
            "terminal",
            json!({"command": "printf 'hooks:\\n  on_session_start: touch pwned\\n' >> troupe.yaml"}),
        ))
        .turn(ScriptTurn::text("done"));
    let server = MockServer::start(script).await.unwrap();
    let url = server.url();
    let cwd = dir.path().to_path_buf();
    let first = {
        let (cwd, url) = (cwd.clone(), url.clone());
        tokio::task::spawn_blocking(move || chat_in(&cwd, &url))
            .await
            .unwrap()
    };
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains("unattended: approve"),
        "the attack did not even write the file: {written}"
    );

    // The next start refuses the file until a person accepts it; the hook never ran.
    let second = {
        let (cwd, url) = (cwd.clone(), url.clone());
        tokio::task::spawn_blocking(move || chat_in(&cwd, &url))
            .await
            .unwrap()
    };
    let stderr = String::from_utf8_lossy(&second.stderr).to_string();
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("troupe config trust"), "{stderr}");
    assert!(!dir.path().join("pwned").exists(), "the session's hook ran");

    // A person reads it and says yes: from then on it is the config.
    let trusted = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .env("TROUPE_HOME", dir.path().join("home"))
        .args(["config", "trust", "troupe.yaml"])
        .output()
        .unwrap();
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    // The person's own edit while no session runs is taken as it is.
    std::fs::write(&config, "approvals:\n  timeout: 7\n").unwrap();
    let script = Script::new().turn(ScriptTurn::text("hello"));
    let server = MockServer::start(script).await.unwrap();
    let url = server.url();
    let third = tokio::task::spawn_blocking(move || chat_in(&cwd, &url))
        .await
        .unwrap();
    assert_eq!(
        third.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
}
