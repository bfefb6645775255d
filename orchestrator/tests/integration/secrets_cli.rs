//! troupe's keys never reach what it runs, nor the model, nor the session store, tried the way
//! a hostile model would through `troupe chat -q` and `troupe serve`: a model whose key is
//! named by `api_key_env`, an inline key on a profile, the serve token; commands that print
//! the environment, reverse and encode what they find, read troupe.yaml and the `/proc` files
//! of their ancestors; an MCP server and a hook that dump their environment. Then the bytes of
//! everything under troupe's home (the session store among them) are searched.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::support::serve::{Served, TOKEN, TroupeDir};
use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

/// A key written inline in troupe.yaml (the model's in the serve test).
const INLINE_KEY: &str = "ik-inline-profile-key-93fa0c1e8d72";

/// The keys of one chat run; each run has its own, so a run scanning every process cannot
/// mistake another run's starting troupe (dumpable for its first instants) for a leak.
struct Keys {
    /// The model's key, in the variable `model.api_key_env` names.
    model: String,
    /// A key written inline on a profile in troupe.yaml.
    inline: String,
    /// The serve token (set, though chat serves nothing: it must not leak either).
    token: String,
}

impl Keys {
    fn new(tag: &str) -> Keys {
        Keys {
            model: format!("mk-model-key-via-env-{tag}-4b1d9e7a55c0"),
            inline: format!("ik-inline-profile-key-{tag}-93fa0c1e8d72"),
            token: format!("st-serve-token-in-env-{tag}-7c3e2a9b104f"),
        }
    }

    fn all(&self) -> [&str; 3] {
        [&self.model, &self.inline, &self.token]
    }
}

/// An MCP server speaking just enough of the protocol over stdio (initialize, an empty tool
/// list), which first writes its whole environment to the file named by its first argument.
const ENV_DUMP_SERVER: &str = r#"
import json, os, sys
with open(sys.argv[1], "w") as out:
    for name, value in sorted(os.environ.items()):
        out.write(f"{name}={value}\n")
for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if "id" not in message:
        continue
    method = message.get("method")
    if method == "initialize":
        result = {"protocolVersion": message["params"].get("protocolVersion", "2025-03-26"),
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "envdump", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": []}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"#;

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

/// `secret` as a command could bring it out: plain, reversed, upper case, hex, and the pieces
/// of its base64 that show whatever its position in an encoded stream.
fn forms(secret: &str) -> Vec<String> {
    let mut forms = vec![
        secret.to_string(),
        secret.chars().rev().collect(),
        secret.to_uppercase(),
        secret.bytes().map(|b| format!("{b:02x}")).collect(),
    ];
    for offset in 0..3 {
        let mut bytes = vec![b'x'; offset];
        bytes.extend_from_slice(secret.as_bytes());
        let encoded = base64(&bytes);
        forms.push(encoded[offset + 2..encoded.len() - 2].to_string());
    }
    forms
}

/// Panics when `haystack` holds any form of any of `secrets`; `what` says where it looked.
fn assert_no_secret(haystack: &[u8], secrets: &[&str], what: &str) {
    for secret in secrets {
        for form in forms(secret) {
            assert!(
                !haystack
                    .windows(form.len())
                    .any(|window| window == form.as_bytes()),
                "{what} holds {secret} (as {form:?})"
            );
        }
    }
}

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    out
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

/// The variable names of an `env`-style dump (`NAME=value` lines).
fn names_in(dump: &str) -> Vec<String> {
    let mut names: Vec<String> = dump
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_string()))
        .collect();
    names.sort();
    names
}

/// The commands a hostile model runs, each one call. Raw findings also go to files in the
/// workspace (`*.txt`), so the test sees what a command could read before any masking.
fn hostile_commands() -> Vec<String> {
    vec![
        "env | tee env.txt".into(),
        "printenv MY_KEY | rev; printenv MY_KEY | base64; printenv TROUPE_SERVE_TOKEN | base64".into(),
        "cat troupe.yaml; rev troupe.yaml; base64 troupe.yaml".into(),
        "cat /proc/$PPID/environ | tr '\\0' '\\n' | tee ppid.txt".into(),
        // Every ancestor up to init: its environ, its command line, whether its memory opens.
        "p=$PPID; while [ \"$p\" -gt 1 ]; do echo \"== $p\"; tr '\\0' '\\n' < /proc/$p/environ; \
         tr '\\0' ' ' < /proc/$p/cmdline; echo; : < /proc/$p/mem 2>/dev/null && echo \"mem-opened $p\"; \
         p=$(cut -d ' ' -f 4 /proc/$p/stat); done 2>&1 | tee ancestors.txt"
            .into(),
        // Every process there is, as a script hunting for keys would look.
        "cat /proc/*/environ > all-environ.txt 2>/dev/null; tr '\\0' '\\n' < all-environ.txt | wc -l".into(),
    ]
}

fn hostile_script() -> Script {
    let mut script = Script::new();
    for command in hostile_commands() {
        script = script.turn(ScriptTurn::tool_call(
            "terminal",
            json!({"command": command}),
        ));
    }
    script.turn(ScriptTurn::text("done"))
}

/// The troupe.yaml of the chat runs: the model's key by `api_key_env`, an inline profile key,
/// an MCP server and a hook that dump their environment, each passing one variable through.
/// troupe's home for a test folder: beside it, as `~/.troupe` is beside a project, so the
/// commands working in the folder may make files there while the home stays hidden.
fn home_of(dir: &Path) -> std::path::PathBuf {
    let name = dir.file_name().map_or_else(
        || "troupe-test".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    dir.with_file_name(format!("{name}.home"))
}

fn chat_yaml(dir: &Path, model_url: &str, python: &str, keys: &Keys) -> String {
    let server = dir.join("envdump.py");
    std::fs::write(&server, ENV_DUMP_SERVER).unwrap();
    format!(
        "model:\n  base_url: {model_url}\n  model: mock-model\n  api_key_env: MY_KEY\n\
         profiles:\n  helper:\n    api_key: {inline}\n\
         mcp_servers:\n  envdump:\n    command: {python}\n    args: [{server}, {mcp_dump}]\n    env: {{FROM_CONFIG: set-by-config}}\n    env_passthrough: [PASSED_ON]\n\
         hooks:\n  on_session_start:\n    command: env > {hook_dump}\n    env_passthrough: [PASSED_ON]\n",
        server = server.display(),
        mcp_dump = dir.join("mcp-env.txt").display(),
        hook_dump = dir.join("hook-env.txt").display(),
        inline = keys.inline,
    )
}

/// Runs `troupe chat -q` in `dir` (as `user` when given, through `setpriv`) against `model`;
/// returns troupe's pid and its output.
fn run_chat(dir: &Path, user: Option<&str>, keys: &Keys) -> (u32, std::process::Output) {
    let troupe = env!("CARGO_BIN_EXE_troupe");
    let mut command = match user {
        Some(user) => {
            let mut c = std::process::Command::new("setpriv");
            // setpriv execs in place: its pid is troupe's.
            c.args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--init-groups",
                "--reset-env",
                "--",
                "env",
            ]);
            c.arg(format!(
                "PATH={}",
                std::env::var("PATH").unwrap_or_default()
            ));
            for (name, value) in [
                ("TROUPE_HOME", home_of(dir).display().to_string()),
                ("TROUPE_MCP_LOG_DIR", dir.join("logs").display().to_string()),
                ("MY_KEY", keys.model.clone()),
                ("TROUPE_SERVE_TOKEN", keys.token.clone()),
                ("PASSED_ON", "passed-on-value".to_string()),
                ("NOT_PASSED", "kept-from-servers".to_string()),
            ] {
                c.arg(format!("{name}={value}"));
            }
            // A copy inside the user's own folder: the build's may sit under a folder only
            // root can enter (a checkout in a `mktemp -d` directory).
            c.arg(dir.join("troupe"));
            c
        }
        None => {
            let mut c = std::process::Command::new(troupe);
            c.env("TROUPE_HOME", home_of(dir))
                .env("TROUPE_MCP_LOG_DIR", dir.join("logs"))
                .env("MY_KEY", &keys.model)
                .env("TROUPE_SERVE_TOKEN", &keys.token)
                .env("PASSED_ON", "passed-on-value")
                .env("NOT_PASSED", "kept-from-servers");
            c
        }
    };
    for var in [
        "TROUPE_BASE_URL",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "TROUPE_API_KEY",
    ] {
        command.env_remove(var);
    }
    let child = command
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .args(["chat", "-q", "look around", "--json"])
        .spawn()
        .unwrap();
    let pid = child.id();
    (pid, child.wait_with_output().unwrap())
}

/// The checks every chat run must pass: no key reached a child, the model or the home.
fn check_chat_run(
    dir: &Path,
    server: &MockServer,
    pid: u32,
    output: &std::process::Output,
    keys: &Keys,
) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    let finished: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), hostile_commands().len(), "{finished:?}");
    for call in &finished {
        assert_eq!(
            call["status"],
            "ok",
            "every command should have run: {call}; calls: {}",
            server
                .requests()
                .last()
                .map(|r| r
                    .messages()
                    .iter()
                    .map(|m| m.to_string().chars().take(160).collect::<String>())
                    .collect::<Vec<_>>()
                    .join("\n"))
                .unwrap_or_default()
        );
    }
    let secrets = keys.all();

    // What the model saw: no form of any key, and the inline key shows as masked.
    let seen = tool_results(server);
    assert!(seen.contains("profiles:"), "cat troupe.yaml ran: {seen}");
    assert!(seen.contains("redacted"), "{seen}");
    assert_no_secret(seen.as_bytes(), &secrets, "what the model was sent");

    // What the commands could read, before any masking: the keys were not there to read.
    let env = std::fs::read_to_string(dir.join("env.txt")).unwrap();
    let names = names_in(&env);
    for hidden in ["MY_KEY", "TROUPE_SERVE_TOKEN"] {
        assert!(
            !names.contains(&hidden.to_string()),
            "{hidden} in env: {names:?}"
        );
    }
    assert!(names.contains(&"PATH".to_string()), "{names:?}");
    for file in ["env.txt", "ppid.txt", "ancestors.txt", "all-environ.txt"] {
        let bytes = std::fs::read(dir.join(file)).unwrap_or_default();
        // Plain only: these are raw reads, and any plain read would have been a leak.
        for secret in secrets {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "a command read {secret} in {file}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }
    // troupe's own environ and memory stayed closed (its command line is public, and holds
    // no key).
    let ancestors = std::fs::read_to_string(dir.join("ancestors.txt")).unwrap();
    let troupe_section = ancestors
        .split("== ")
        .find(|s| s.starts_with(&format!("{pid}\n")))
        .unwrap_or_else(|| panic!("troupe ({pid}) is an ancestor: {ancestors}"));
    assert!(
        !troupe_section.contains("PATH="),
        "troupe's environ was readable: {troupe_section}"
    );
    assert!(
        !ancestors.contains(&format!("mem-opened {pid}")),
        "troupe's memory opened: {ancestors}"
    );
    // The keeper ($PPID, a copy of troupe) neither.
    let ppid = std::fs::read_to_string(dir.join("ppid.txt")).unwrap_or_default();
    assert!(!ppid.contains("PATH="), "the keeper's environ: {ppid}");

    // The MCP server and the hook got the minimal set, the passed-through name and their own.
    let minimal = [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "TZ", "TMPDIR", "SHELL",
    ];
    let mcp = std::fs::read_to_string(dir.join("mcp-env.txt")).unwrap_or_else(|e| {
        panic!("the MCP server did not start ({e}): {stderr}");
    });
    let hook = std::fs::read_to_string(dir.join("hook-env.txt")).unwrap_or_else(|e| {
        panic!("the hook did not run ({e}): {stderr}");
    });
    for (who, dump, own) in [
        ("the MCP server", &mcp, &["FROM_CONFIG"][..]),
        (
            "the hook",
            &hook,
            &[
                "TROUPE_HOOK_POINT",
                "TROUPE_PLUGIN",
                "TROUPE_PLUGIN_DIR",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD",
            ][..],
        ),
    ] {
        for name in names_in(dump) {
            assert!(
                minimal.contains(&name.as_str())
                    || name.starts_with("LC_")
                    || name == "PASSED_ON"
                    || own.contains(&name.as_str()),
                "{who} got {name}: {dump}"
            );
        }
        assert!(dump.contains("PASSED_ON=passed-on-value"), "{who}: {dump}");
        assert!(!dump.contains("kept-from-servers"), "{who}: {dump}");
        for secret in secrets {
            assert!(!dump.contains(secret), "{who} got {secret}: {dump}");
        }
    }
    assert!(mcp.contains("FROM_CONFIG=set-by-config"), "{mcp}");

    // Nothing under troupe's home (the session store, logs, receipts) holds a key.
    let home = files_under(&home_of(dir));
    assert!(
        home.iter()
            .any(|(p, _)| p.to_string_lossy().contains("sessions.db")),
        "the session store was written: {:?}",
        home.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for (path, bytes) in home.iter().chain(files_under(&dir.join("logs")).iter()) {
        assert_no_secret(bytes, &secrets, &path.display().to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_keeps_every_key_from_commands_servers_hooks_the_model_and_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(hostile_script()).await.unwrap();
    // A plain interpreter (a version manager's shim would add variables of its own).
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .map(str::to_string)
        .or_else(which_python)
        .expect("python3 runs the test MCP server");
    let keys = Keys::new("root");
    std::fs::write(
        dir.path().join("troupe.yaml"),
        chat_yaml(dir.path(), &server.url(), &python, &keys),
    )
    .unwrap();
    let path = dir.path().to_path_buf();
    let (pid, output, keys) = tokio::task::spawn_blocking(move || {
        let (pid, output) = run_chat(&path, None, &keys);
        (pid, output, keys)
    })
    .await
    .unwrap();
    check_chat_run(dir.path(), &server, pid, &output, &keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_as_a_user_without_privileges_keeps_every_key_too() {
    let user = "tester";
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let has_user = std::process::Command::new("id")
        .arg(user)
        .output()
        .is_ok_and(|o| o.status.success());
    let has_setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(root && has_user && has_setpriv) {
        eprintln!(
            "skipping the non-root run: it needs root, setpriv and a user `{user}` (useradd -m {user}); root={root} user={has_user} setpriv={has_setpriv}"
        );
        return;
    }
    // A python every user may run (a per-user install under /root is out of reach).
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("skipping the non-root run: no system-wide python3 for the MCP server");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(hostile_script()).await.unwrap();
    let keys = Keys::new("user");
    std::fs::write(
        dir.path().join("troupe.yaml"),
        chat_yaml(dir.path(), &server.url(), python, &keys),
    )
    .unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_troupe"), dir.path().join("troupe")).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{user}:{user}")])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let path = dir.path().to_path_buf();
    let (pid, output, keys) = tokio::task::spawn_blocking(move || {
        let (pid, output) = run_chat(&path, Some(user), &keys);
        (pid, output, keys)
    })
    .await
    .unwrap();
    check_chat_run(dir.path(), &server, pid, &output, &keys);
}

/// A python3 the test can run (for the MCP server).
fn which_python() -> Option<String> {
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    (!path.is_empty()).then_some(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_session_never_sees_nor_stores_the_token_or_a_key() {
    let commands = [
        "env | tee env.txt",
        "printenv TROUPE_SERVE_TOKEN | rev; printenv TROUPE_SERVE_TOKEN | base64",
        "cat troupe.yaml; rev troupe.yaml; base64 troupe.yaml",
        "ls -a \"$TROUPE_HOME\" \"$HOME/.troupe\" 2>&1; cat \"$TROUPE_HOME/serve.token\" 2>&1",
    ];
    let mut turns = vec![];
    for command in commands {
        turns
            .push(json!({"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}));
    }
    turns.push(json!({"text": "done"}));
    let script = json!({ "turns": turns }).to_string();
    let yaml = format!(
        "model:\n  base_url: {{{{MODEL_URL}}}}\n  model: mock-model\n  api_key: {INLINE_KEY}\nkanban:\n  store: {{{{STORE}}}}\n"
    );
    let fx = TroupeDir::new(&yaml, &script).await;
    let served = Served::start(&fx, &["--no-dispatch"]).await;
    let (status, created) = served
        .call(reqwest::Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, accepted) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "look around"})),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    // The turn ends with the scripted answer.
    let mut answered = false;
    for _ in 0..600 {
        let (_, shown) = served
            .call(reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
            .await;
        if shown.to_string().contains("\"done\"") {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "the session did not finish its turn");
    served.kill().await;

    let secrets = [TOKEN, INLINE_KEY];
    let seen: String = fx.requests().join("\n");
    assert!(seen.contains("redacted"), "{seen}");
    assert_no_secret(seen.as_bytes(), &secrets, "what the model was sent");
    let env = std::fs::read_to_string(fx.path().join("env.txt")).unwrap();
    assert!(
        !names_in(&env).contains(&"TROUPE_SERVE_TOKEN".to_string()),
        "{env}"
    );
    assert!(!fx.home().to_path_buf().join("serve.token").exists());
    let home = files_under(fx.home());
    assert!(
        home.iter()
            .any(|(p, _)| p.to_string_lossy().contains("sessions.db")),
        "{:?}",
        home.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for (path, bytes) in &home {
        assert_no_secret(bytes, &secrets, &path.display().to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_a_token_variable_writes_no_token_file_and_shows_the_token_once() {
    let fx = TroupeDir::new(
        "model:\n  base_url: {{MODEL_URL}}\nkanban:\n  store: {{STORE}}\n",
        "turns:\n  - text: hi\n",
    )
    .await;
    let (code, _, err) = fx.run(&["kanban", "init"]).await;
    assert_eq!(code, 0, "{err}");
    // Where the boundary cannot keep commands out of troupe's home (no Landlock here, made so
    // by the probe's test switch), no token may be written there.
    let mut command = fx.troupe();
    command
        .env_remove(troupe::http::auth::TOKEN_ENV)
        .env("TROUPE_CONFINE_PROBE", "unavailable")
        .args(["serve", "--port", "0", "--no-dispatch"]);
    let served = Served::spawn(command, None).await;
    let line = served.wait_for_line("troupe serve: this run's token").await;
    served
        .wait_for_line_where("TROUPE_SERVE_TOKEN", |l| l.contains("TROUPE_SERVE_TOKEN"))
        .await;
    let seen = served.log();
    let token = line.rsplit(": ").next().unwrap().to_string();
    assert_eq!(token.len(), 64, "{seen:?}");
    assert!(!fx.home().to_path_buf().join("serve.token").exists());
    let with = served
        .client()
        .get(format!("{}/api/sessions", served.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(with.status().as_u16(), 200);
    let without = served
        .client()
        .get(format!("{}/api/sessions", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(without.status().as_u16(), 401);
    served.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_its_token_in_the_home_only_where_the_boundary_hides_it() {
    if !matches!(
        troupe_tools::builtin::confine::probe(),
        troupe_tools::builtin::confine::Support::Available { .. }
    ) {
        eprintln!("skipping: no Landlock here, so serve writes no token file (tested above)");
        return;
    }
    let fx = TroupeDir::new(
        "model:\n  base_url: {{MODEL_URL}}\nkanban:\n  store: {{STORE}}\n",
        "turns:\n  - text: hi\n",
    )
    .await;
    let (code, _, err) = fx.run(&["kanban", "init"]).await;
    assert_eq!(code, 0, "{err}");
    let mut command = fx.troupe();
    command.env_remove(troupe::http::auth::TOKEN_ENV).args([
        "serve",
        "--port",
        "0",
        "--no-dispatch",
    ]);
    let served = Served::spawn(command, None).await;
    let seen = served.log();
    served.kill().await;
    let file = fx.home().join("serve.token");
    let mode = std::fs::metadata(&file)
        .unwrap_or_else(|e| panic!("no {}: {e}; serve said {seen:?}", file.display()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{seen:?}");
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(
        !seen.iter().any(|l| l.contains(token.trim())),
        "the token was printed although it is kept in the file: {seen:?}"
    );
}
