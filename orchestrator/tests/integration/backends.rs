//! The terminal backends the way a user reaches them: `troupe chat` with a troupe.yaml naming
//! `terminal.backend`, a scripted model making the calls, and the transcript read back with
//! `troupe sessions show --json`. Each backend is a real one started by
//! scripts/start-test-backends.sh: a docker container from a locally built image, an sshd on
//! 127.0.0.1 with keys made for the run, and bubblewrap.
//!
//! For each: a command's output and exit code, a file written and patched, `execute_code`
//! calling `terminal` from inside, a timed-out command that leaves no process behind (checked
//! inside the backend), a background process stopped with the session, the network refused
//! where it should be, and a write outside the workspace refused by the backend itself.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The test backends' settings, or `None` (with a note) when they were not started.
fn backend_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("TROUPE_REQUIRE_BACKENDS").is_ok_and(|v| v == "1") => panic!(
            "{var} is not set: start the test backends first (bash scripts/start-test-backends.sh, then source target/test-backends.env)"
        ),
        _ => {
            eprintln!(
                "skipped: {var} is not set (bash scripts/start-test-backends.sh starts the test backends)"
            );
            None
        }
    }
}

/// This machine's address on its main interface (no packet is sent to find it).
fn host_address() -> String {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    match socket.connect("10.255.255.255:9") {
        Ok(()) => socket.local_addr().unwrap().ip().to_string(),
        Err(_) => "172.17.0.1".to_string(),
    }
}

struct Run {
    /// tool_call_id -> the tool's result text.
    results: HashMap<String, String>,
}

impl Run {
    fn result(&self, id: &str) -> &str {
        self.results
            .get(id)
            .unwrap_or_else(|| panic!("no result for {id}: {:#?}", self.results))
    }

    fn json(&self, id: &str) -> Value {
        serde_json::from_str(self.result(id))
            .unwrap_or_else(|e| panic!("{id} is not JSON ({e}): {}", self.result(id)))
    }
}

/// Runs `troupe chat -q` in `dir` with `terminal_yaml` as the `terminal:` section and the
/// model's turns from `script`; returns the tool results of the session.
fn chat(dir: &Path, terminal_yaml: &str, script: &str) -> Run {
    chat_with_env(dir, terminal_yaml, script, &[])
}

/// [`chat`] with `env` set in troupe's own environment.
fn chat_with_env(dir: &Path, terminal_yaml: &str, script: &str, env: &[(&str, &str)]) -> Run {
    std::fs::write(
        dir.join("troupe.yaml"),
        format!("terminal:\n{terminal_yaml}"),
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    let home = dir.join(".home");
    let troupe = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(dir)
            .env("TROUPE_HOME", &home)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .args(args)
            .output()
            .unwrap()
    };
    let out = troupe(&[
        "chat",
        "--config",
        "troupe.yaml",
        "-q",
        "go",
        "--script",
        "script.yaml",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "troupe chat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "final", "{stdout}");
    assert_eq!(last["text"], "done", "{stdout}");
    let id = first["session_id"].as_str().unwrap().to_string();
    let shown = troupe(&["sessions", "show", &id, "--json"]);
    assert!(shown.status.success());
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let results = shown["sessions"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    Run { results }
}

/// What every backend is put through. `tag` makes the sleeps of this run recognisable;
/// `net` is an address and port of this machine that accepts connections.
fn script(tag: u32, net: &str) -> String {
    let (host, port) = net.rsplit_once(':').unwrap();
    let probe =
        format!("(exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null && echo net=open || echo net=closed");
    let code = "from troupe_tools import terminal\\nr = terminal(command='cat made.txt; echo inner-$$')\\nprint(r['output'])";
    format!(
        r#"turns:
  - tool_calls:
      - name: terminal
        arguments: {{command: "echo ran; echo ssh=${{SSH_CONNECTION:+yes}}; exit 3"}}
      - name: write_file
        arguments: {{path: made.txt, content: "one\ntwo\n"}}
  - tool_calls:
      - name: patch
        arguments: {{path: made.txt, old_string: two, new_string: deux}}
      - name: terminal
        arguments: {{command: "sleep 4{tag}1 & sleep 4{tag}2", timeout: 1}}
      - name: terminal
        arguments: {{command: "sleep 4{tag}3", background: true}}
  - tool_calls:
      - name: terminal
        arguments: {{command: "echo left=$(ps -eo args | grep -c '^sleep 4{tag}[12]'); cat made.txt"}}
      - name: execute_code
        arguments: {{code: "{code}"}}
      - name: terminal
        arguments: {{command: "{probe}"}}
      - name: terminal
        arguments: {{command: "touch /usr/troupe-outside-{tag}; echo touched=$?"}}
  - text: done
"#
    )
}

/// A listener the network probe can reach when the backend lets it.
fn listener() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, format!("{}:{port}", host_address()))
}

fn tag() -> u32 {
    1000 + std::process::id() % 8000
}

/// Processes of this machine whose command line starts with `prefix`.
fn local_processes(prefix: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.starts_with(prefix))
        .count()
}

/// The checks every backend passes.
fn common_checks(run: &Run, tag: u32) {
    let first = run.json("call_1_0");
    assert_eq!(first["exit_code"], 3, "{first}");
    assert!(first["output"].as_str().unwrap().contains("ran"), "{first}");
    assert_eq!(run.json("call_1_1")["verified"], true);
    assert_eq!(
        run.json("call_2_0")["success"],
        true,
        "{}",
        run.result("call_2_0")
    );
    let timed_out = run.result("call_2_1");
    assert!(timed_out.contains("timed out"), "{timed_out}");
    let left = run.json("call_3_0");
    let left = left["output"].as_str().unwrap();
    assert!(
        left.contains("left=0"),
        "the timed-out command left processes: {left}"
    );
    assert!(left.contains("one\ndeux"), "{left}");
    let code = run.json("call_3_1");
    assert_eq!(code["status"], "success", "{code}");
    assert_eq!(code["tool_calls_made"], 1, "{code}");
    assert!(
        code["output"].as_str().unwrap().contains("deux\ninner-"),
        "{code}"
    );
    assert!(
        !Path::new(&format!("/usr/troupe-outside-{tag}")).exists()
            || run.result("call_3_3").contains("touched=0"),
        "a write outside the workspace reached this machine"
    );
}

/// What an isolated backend (docker, sandbox) refuses: the network, and writes outside the
/// workspace (by the backend itself, not an approval rule).
fn isolation_checks(run: &Run) {
    let net_probe = run.json("call_3_2");
    assert!(
        net_probe["output"].as_str().unwrap().contains("net=closed"),
        "{net_probe}"
    );
    let outside = run.json("call_3_3");
    assert!(
        outside["output"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{outside}"
    );
}

#[test]
fn docker_runs_everything_in_one_hardened_container() {
    let Some(image) = backend_env("TROUPE_TEST_DOCKER_IMAGE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_listener, net) = listener();
    let tag = tag();
    let before = containers();
    let run = chat(
        dir.path(),
        &format!(
            "  backend: docker\n  docker_image: {image}\n  docker_pids: 256\n  dangerous_command_approval: false\n"
        ),
        &script(tag, &net),
    );
    common_checks(&run, tag);
    let first = run.json("call_1_0");
    assert!(
        first["output"].as_str().unwrap().contains("ssh=\n"),
        "{first}"
    );
    isolation_checks(&run);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
        "one\ndeux\n",
        "the workspace is the same directory inside and out"
    );
    // The container went with the process.
    assert_eq!(containers(), before, "a container was left behind");
}

#[test]
fn the_container_keys_limit_the_container_and_forward_what_they_name() {
    let Some(image) = backend_env("TROUPE_TEST_DOCKER_IMAGE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let before = containers();
    // cgroup v2 files, else v1's.
    let command = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); grep ' /tmp ' /proc/mounts; echo fwd-length=${#GH_TOKEN}";
    let code = "import os\nprint('code-fwd-length=%d' % len(os.environ.get('GH_TOKEN', '')))";
    let script = format!(
        "turns:\n  - tool_calls:\n      - name: terminal\n        arguments: {{command: {}}}\n      - name: execute_code\n        arguments: {{code: {}}}\n  - text: done\n",
        serde_json::to_string(command).unwrap(),
        serde_json::to_string(code).unwrap()
    );
    let run = chat_with_env(
        dir.path(),
        &format!(
            "  backend: docker\n  docker_image: {image}\n  container_cpu: 1\n  container_memory: 256\n  container_disk: 64\n  docker_forward_env: [GH_TOKEN]\n"
        ),
        &script,
        &[("GH_TOKEN", "forwarded-by-name")],
    );
    let shown = run.json("call_1_0");
    let output = shown["output"].as_str().unwrap_or_default();
    // 256 MB of memory, one cpu (a full period of quota), /tmp of 64 MB.
    assert!(output.contains("268435456"), "{shown}");
    assert!(output.contains("100000 100000"), "{shown}");
    assert!(
        output
            .lines()
            .any(|l| l.contains(" /tmp tmpfs ") && l.contains("size=65536k")),
        "{shown}"
    );
    // GH_TOKEN is one troupe keeps from commands unless the person forwards it by name (its
    // value is masked in what the model reads, so its length tells it arrived).
    let forwarded = "forwarded-by-name".len();
    assert!(
        output.contains(&format!("fwd-length={forwarded}")),
        "{shown}"
    );
    assert!(
        run.result("call_1_1")
            .contains(&format!("code-fwd-length={forwarded}")),
        "{}",
        run.result("call_1_1")
    );
    assert_eq!(containers(), before, "a container was left behind");
}

/// The containers the docker backend made, running or not.
fn containers() -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=troupe.backend=docker",
            "--format",
            "{{.Names}}",
        ])
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

#[test]
fn ssh_runs_everything_on_the_remote_host_over_one_connection() {
    let Some(host) = backend_env("TROUPE_TEST_SSH_HOST") else {
        return;
    };
    let port = backend_env("TROUPE_TEST_SSH_PORT").unwrap();
    let user = backend_env("TROUPE_TEST_SSH_USER").unwrap();
    let key = backend_env("TROUPE_TEST_SSH_KEY").unwrap();
    let known = backend_env("TROUPE_TEST_SSH_KNOWN_HOSTS").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_listener, net) = listener();
    let tag = tag() + 1;
    let run = chat(
        dir.path(),
        &format!(
            "  backend: ssh\n  cwd: {}\n  ssh: {{host: {host}, port: {port}, user: {user}, key: {key}, known_hosts: {known}}}\n",
            dir.path().display()
        ),
        &script(tag, &net),
    );
    // The remote host is this machine: what the session wrote outside its directory is ours
    // to clean up.
    let _ = std::fs::remove_file(format!("/usr/troupe-outside-{tag}"));
    common_checks(&run, tag);
    let first = run.json("call_1_0");
    assert!(
        first["output"].as_str().unwrap().contains("ssh=yes"),
        "{first}"
    );
    // A remote host keeps its network.
    let net_probe = run.json("call_3_2");
    assert!(
        net_probe["output"].as_str().unwrap().contains("net=open"),
        "{net_probe}"
    );
    // The sshd runs here, so what the session left behind would show here.
    assert_eq!(
        local_processes(&format!("sleep 4{tag}")),
        0,
        "a process outlived the session"
    );
}

#[test]
fn an_unknown_host_key_is_refused_with_what_to_do() {
    let Some(host) = backend_env("TROUPE_TEST_SSH_HOST") else {
        return;
    };
    let port = backend_env("TROUPE_TEST_SSH_PORT").unwrap();
    let key = backend_env("TROUPE_TEST_SSH_KEY").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("known_hosts");
    std::fs::write(&empty, "").unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "terminal:\n  backend: ssh\n  cwd: /tmp\n  ssh: {{host: {host}, port: {port}, user: root, key: {key}, known_hosts: {}}}\n",
            empty.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: terminal\n        arguments: {command: \"echo should-not-run\"}\n  - text: done\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .env("TROUPE_HOME", dir.path().join(".home"))
        .stdin(Stdio::null())
        .args([
            "chat",
            "--config",
            "troupe.yaml",
            "-q",
            "go",
            "--script",
            "script.yaml",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("should-not-run\\n"), "{stdout}");
    let id: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let shown = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .env("TROUPE_HOME", dir.path().join(".home"))
        .args([
            "sessions",
            "show",
            id["session_id"].as_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("known-hosts file"), "{shown}");
}

#[test]
fn the_sandbox_keeps_commands_to_the_workspace_without_network() {
    let Some(_) = backend_env("TROUPE_TEST_BACKENDS_STATE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_listener, net) = listener();
    let tag = tag() + 2;
    let marker = std::env::temp_dir().join(format!("troupe-host-tmp-{tag}"));
    std::fs::write(&marker, "host").unwrap();
    let mut script = script(tag, &net);
    script = script.replace(
        "echo ran;",
        &format!(
            "echo ran; test -e {} && echo host-tmp-visible;",
            marker.display()
        ),
    );
    let run = chat(
        dir.path(),
        &format!("  backend: sandbox\n  cwd: {}\n", dir.path().display()),
        &script,
    );
    std::fs::remove_file(&marker).unwrap();
    common_checks(&run, tag);
    let first = run.json("call_1_0");
    assert!(
        !first["output"]
            .as_str()
            .unwrap()
            .contains("host-tmp-visible"),
        "{first}"
    );
    isolation_checks(&run);
    assert!(!Path::new(&format!("/usr/troupe-outside-{tag}")).exists());
    assert_eq!(
        local_processes(&format!("sleep 4{tag}")),
        0,
        "a process outlived the session"
    );
}

#[test]
fn a_board_profile_runs_its_workers_in_its_own_backend() {
    let Some(_) = backend_env("TROUPE_TEST_BACKENDS_STATE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let marker = std::env::temp_dir().join(format!("troupe-board-tmp-{}", tag()));
    std::fs::write(&marker, "host").unwrap();
    // The worker's command notes what it sees into its workspace.
    let command = format!(
        "(test -e {} && echo tmp=host || echo tmp=private; test -e {}/sessions.db && echo home=visible || echo home=hidden) > seen.txt",
        marker.display(),
        home.display()
    );
    std::fs::write(
        dir.path().join("boxed.yaml"),
        format!(
            "cursor: conversation\nturns:\n  - tool_calls:\n      - name: terminal\n        arguments: {{command: {}}}\n  - tool_calls:\n      - name: kanban_complete\n        arguments: {{summary: looked, result: ok}}\n  - text: Finished.\n",
            serde_json::to_string(&command).unwrap()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "kanban:\n  default_assignee: boxed\nprofiles:\n  boxed:\n    script: boxed.yaml\n    toolsets: [core]\n    terminal: {backend: sandbox}\n",
    )
    .unwrap();
    let kanban = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(dir.path())
            .env("TROUPE_HOME", &home)
            .env_remove("TROUPE_KANBAN_STORE")
            .env_remove("TROUPE_KANBAN_BOARD")
            .arg("kanban")
            .arg("--store")
            .arg(dir.path().join("store"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    kanban(&["create", "look around", "--assignee", "boxed"]);
    kanban(&["dispatch"]);
    std::fs::remove_file(&marker).unwrap();
    let seen: Vec<String> = walk(&home.join("workspaces"))
        .into_iter()
        .filter(|p| p.ends_with("seen.txt"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert_eq!(
        seen,
        vec!["tmp=private\nhome=hidden\n".to_string()],
        "the worker ran outside its profile's sandbox"
    );
}

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
