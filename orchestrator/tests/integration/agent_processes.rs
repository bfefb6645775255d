//! Background processes as a model drives them through `troupe chat -q` and the mock model
//! server: an interactive program on a pty (`python3 -i`: a line submitted, its answer read
//! from the log, Ctrl-D, its exit), a stop that leaves nothing running, and the notices a
//! session gets by itself: one when a `notify_on_complete` process ends, one when a watched
//! line is printed, in the parent's and in a subagent's conversation. Backends other than the
//! local one are in `agent_processes_backends`.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use troupe_actors::model::mock_server::{LAST_PROCESS_ID, MockServer, RecordedRequest};
use troupe_actors::model::{Script, ScriptTurn};

/// Runs `troupe chat -q MESSAGE --json` in `dir` against `server`, with `extra` config lines.
pub(crate) async fn chat(
    dir: &Path,
    server: &MockServer,
    extra: &str,
    message: &str,
) -> (Vec<Value>, String) {
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\n{extra}",
            server.url()
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join(".troupe-home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(["chat", "-q", message, "--json"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (lines, stderr)
}

/// The results of calls to `tool` the model was sent, in order, as JSON.
pub(crate) fn results_of(request: &RecordedRequest, tool: &str) -> Vec<Value> {
    let messages = request.messages();
    let ids: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["function"]["name"] == tool)
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect();
    messages
        .iter()
        .filter(|m| m["role"] == "tool" && ids.iter().any(|id| m["tool_call_id"] == *id))
        .filter_map(|m| serde_json::from_str(m["content"].as_str()?).ok())
        .collect()
}

/// The user messages of a request holding `needle`.
pub(crate) fn user_messages_with(request: &RecordedRequest, needle: &str) -> Vec<String> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .filter(|c| c.contains(needle))
        .collect()
}

/// Config for runs whose typed lines need an approval nobody is there to give.
pub(crate) const APPROVE: &str = "approvals: {unattended: approve}\n";

/// The script that drives `python3 -i` on a pty: submit a line, read the screen, Ctrl-D,
/// wait for the exit.
pub(crate) fn repl_script(start: Value) -> Script {
    let id = LAST_PROCESS_ID;
    Script::new()
        .turn(ScriptTurn::tool_call("terminal", start))
        .turn(ScriptTurn::tool_call(
            "process",
            json!({"action": "submit", "session_id": id, "data": "print(6*7, __import__('os').isatty(0))"}),
        ))
        .turn(
            ScriptTurn::tool_call("process", json!({"action": "log", "session_id": id}))
                .with_delay(std::time::Duration::from_millis(1500)),
        )
        .turn(ScriptTurn::tool_call(
            "process",
            json!({"action": "write", "session_id": id, "keys": ["Ctrl-D"]}),
        ))
        .turn(ScriptTurn::tool_call(
            "process",
            json!({"action": "wait", "session_id": id, "timeout": 20}),
        ))
        .turn(ScriptTurn::text("REPL-DONE"))
}

/// What the REPL run must show: the answer on the screen, a terminal, the exit.
pub(crate) fn check_repl(server: &MockServer) {
    let last = server.requests().last().cloned().unwrap();
    let started = &results_of(&last, "terminal")[0];
    assert_eq!(
        started["pty"],
        json!({"rows": 30, "cols": 120}),
        "{started}"
    );
    let process = results_of(&last, "process");
    assert_eq!(process[0]["status"], "ok", "{:?}", last.messages());
    let screen = process[1]["output"].as_str().unwrap();
    assert!(
        screen.contains("42 True"),
        "the answer and a tty: {screen:?}"
    );
    assert!(
        !screen.contains('\u{1b}'),
        "escapes are removed: {screen:?}"
    );
    assert!(process[1]["raw_tail"].as_str().is_some(), "{}", process[1]);
    assert_eq!(process[2]["status"], "ok", "{}", process[2]);
    assert_eq!(process[3]["status"], "exited", "{}", process[3]);
    assert_eq!(process[3]["exit_code"], 0, "{}", process[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repl_on_a_pty_answers_a_submitted_line_and_exits_on_ctrl_d() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(repl_script(
        json!({"command": "python3 -q -i", "background": true, "pty": true}),
    ))
    .await
    .unwrap();
    // What is typed into a process is checked like a command; unattended, a flagged line
    // (this Python reaches `os`) goes ahead only when the config says so.
    let (lines, _) = chat(dir.path(), &server, APPROVE, "drive python").await;
    assert_eq!(lines.last().unwrap()["text"], "REPL-DONE", "{lines:?}");
    check_repl(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipe_mode_has_no_stdin_and_a_stop_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("m{}", uuid::Uuid::new_v4().simple());
    let id = LAST_PROCESS_ID;
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "sleep 300", "background": true}),
            ))
            .turn(ScriptTurn::tool_call(
                "process",
                json!({"action": "write", "session_id": id, "data": "x\n"}),
            ))
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": format!("python3 -q -i -c 'M=\"{mark}\"'; true"), "background": true, "pty": true}),
            ))
            .turn(
                ScriptTurn::tool_call("process", json!({"action": "kill", "session_id": id}))
                    .with_delay(std::time::Duration::from_millis(500)),
            )
            // The bracket keeps this command's own text from matching.
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": format!("ps -eo args | grep -c '[{}]{}' || true", &mark[..1], &mark[1..])}),
            ))
            .turn(ScriptTurn::text("STOPPED")),
    )
    .await
    .unwrap();
    let (lines, _) = chat(dir.path(), &server, "", "stop it").await;
    assert_eq!(lines.last().unwrap()["text"], "STOPPED", "{lines:?}");
    let last = server.requests().last().cloned().unwrap();
    let starts = results_of(&last, "terminal");
    assert!(
        starts[0]["hint"].as_str().unwrap().contains("silently"),
        "the nudge: {}",
        starts[0]
    );
    let process = results_of(&last, "process");
    assert!(
        process[0]["error"].as_str().unwrap().contains("pty=true"),
        "pipe mode has no stdin: {}",
        process[0]
    );
    assert_eq!(process[1]["status"], "killed", "{}", process[1]);
    assert_eq!(
        starts[2]["output"].as_str().unwrap().trim(),
        "0",
        "{}",
        starts[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_process_tells_the_model_once_without_a_poll() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "sleep 2; echo DONE", "background": true, "notify_on_complete": true}),
            ))
            .turn(ScriptTurn::tool_call("terminal", json!({"command": "sleep 4"})))
            .turn(ScriptTurn::tool_call("terminal", json!({"command": "sleep 1"})))
            .turn(ScriptTurn::text("NOTIFIED")),
    )
    .await
    .unwrap();
    let (lines, stderr) = chat(dir.path(), &server, "", "build it").await;
    assert_eq!(lines.last().unwrap()["text"], "NOTIFIED", "{lines:?}");
    let notices: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "process_notice")
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["kind"], "completed");
    assert_eq!(notices[0]["exit_code"], 0);
    assert_eq!(notices[0]["started_turn"], false);
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let started = &results_of(&requests[1], "terminal")[0];
    assert_eq!(started["notify_on_complete"], true, "{started}");
    assert!(
        started
            .get("hint")
            .is_none_or(|h| !h.as_str().unwrap_or("").contains("silently"))
    );
    // The request right after the process ended carries the notice, once; no poll was made.
    let carried = user_messages_with(&requests[2], "background process proc_");
    assert_eq!(carried.len(), 1, "{carried:?}");
    assert!(carried[0].contains("finished successfully") && carried[0].contains("DONE"));
    assert_eq!(
        user_messages_with(&requests[3], "background process proc_").len(),
        1,
        "not repeated"
    );
    assert!(requests.iter().all(|r| results_of(r, "process").is_empty()));
    assert!(
        stderr.is_empty() || !stderr.contains("panicked"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_line_tells_the_model_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "echo booting; sleep 1; echo 'server READY on 8080'; sleep 2; echo still up; sleep 30", "background": true, "watch_patterns": ["READY"]}),
            ))
            .turn(ScriptTurn::tool_call("terminal", json!({"command": "sleep 4"})))
            .turn(ScriptTurn::text("SEEN")),
    )
    .await
    .unwrap();
    let (lines, _) = chat(dir.path(), &server, "", "serve it").await;
    assert_eq!(lines.last().unwrap()["text"], "SEEN", "{lines:?}");
    let notices: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "process_notice")
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["kind"], "watch_match");
    let requests = server.requests();
    let carried = user_messages_with(&requests[2], "watch pattern \"READY\"");
    assert_eq!(carried.len(), 1, "{:?}", requests[2].messages());
    let matched = carried[0].split("Matched output:").nth(1).unwrap();
    assert!(matched.contains("server READY on 8080"), "{matched}");
    assert!(
        !matched.contains("booting") && !matched.contains("still up"),
        "{matched}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_process_tells_the_subagent() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::tool_call("delegate_task", json!({"tasks": [{"goal": "child build"}]}))
                    .when_input_contains("PARENT-GO"),
            )
            .turn(
                ScriptTurn::tool_call(
                    "terminal",
                    json!({"command": "sleep 1; echo CHILD-BUILT", "background": true, "notify_on_complete": true}),
                )
                .when_input_contains("child build"),
            )
            .turn(
                ScriptTurn::tool_call("terminal", json!({"command": "sleep 3"}))
                    .when_input_contains("Background process started"),
            )
            .turn(ScriptTurn::text("CHILD-REPORT").when_input_contains("CHILD-BUILT"))
            .turn(ScriptTurn::text("ALL-DONE").when_input_contains("CHILD-REPORT")),
    )
    .await
    .unwrap();
    let (lines, _) = chat(dir.path(), &server, "", "PARENT-GO").await;
    assert_eq!(lines.last().unwrap()["text"], "ALL-DONE", "{lines:?}");
    let root = lines
        .iter()
        .find(|l| l["type"] == "session_started")
        .unwrap()["session_id"]
        .clone();
    let notices: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "process_notice")
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_ne!(
        notices[0]["session_id"], root,
        "the subagent's own session hears it"
    );
    // The subagent's request after the process ended carried it.
    let child_request = server
        .requests()
        .into_iter()
        .find(|r| !user_messages_with(r, "CHILD-BUILT").is_empty())
        .expect("a request carried the notice");
    assert!(user_messages_with(&child_request, "child build").len() == 1);
}

/// A test backend's setting, or `None` (with a note) when the backends were not started;
/// `TROUPE_REQUIRE_BACKENDS=1` makes that a failure.
fn backend_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("TROUPE_REQUIRE_BACKENDS").is_ok_and(|v| v == "1") => {
            panic!("{var} is not set: start the test backends and source target/test-backends.env")
        }
        _ => {
            eprintln!("skipped: {var} is not set (scripts/start-test-backends.sh)");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repl_on_a_pty_in_the_sandbox() {
    if backend_env("TROUPE_TEST_BACKENDS_STATE").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(repl_script(
        json!({"command": "python3 -q -i", "background": true, "pty": true}),
    ))
    .await
    .unwrap();
    let config = format!(
        "{APPROVE}terminal:\n  backend: sandbox\n  cwd: {}\n",
        dir.path().display()
    );
    let (lines, _) = chat(dir.path(), &server, &config, "drive python").await;
    assert_eq!(lines.last().unwrap()["text"], "REPL-DONE", "{lines:?}");
    check_repl(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repl_on_a_pty_in_docker() {
    let Some(image) = backend_env("TROUPE_TEST_DOCKER_IMAGE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Debian's python3 in the test image.
    let server = MockServer::start(repl_script(
        json!({"command": "/usr/bin/python3 -q -i", "background": true, "pty": true}),
    ))
    .await
    .unwrap();
    let config = format!(
        "{APPROVE}terminal:\n  backend: docker\n  docker_image: {image}\n  dangerous_command_approval: false\n"
    );
    let (lines, _) = chat(dir.path(), &server, &config, "drive python").await;
    assert_eq!(lines.last().unwrap()["text"], "REPL-DONE", "{lines:?}");
    check_repl(&server);
}

/// Between turns, a notice starts a turn of its own: the conversation shows its line and the
/// model's answer, and the person's next message still goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_between_turns_starts_a_turn_in_chat() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::tool_call(
                    "terminal",
                    json!({"command": "sleep 1; echo LATE-DONE", "background": true, "notify_on_complete": true}),
                )
                .when_input_contains("start it"),
            )
            .turn(ScriptTurn::text("STARTED").when_input_contains("Background process started"))
            .turn(ScriptTurn::text("HEARD-IT").when_input_contains("LATE-DONE"))
            .turn(ScriptTurn::text("BYE-NOW").when_input_contains("bye")),
    )
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\n",
            server.url()
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("TROUPE_HOME", dir.path().join(".troupe-home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .arg("chat")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"start it\n").await.unwrap();
    let mut heard = false;
    for _ in 0..150 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if server.requests().len() >= 3 {
            heard = true;
            break;
        }
    }
    assert!(
        heard,
        "no turn for the notice: {} requests",
        server.requests().len()
    );
    // Wait for that turn's answer before the next message.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    stdin.write_all(b"bye\n").await.unwrap();
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if server.requests().len() >= 4 {
            break;
        }
    }
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let screen = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{screen}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{screen}");
    let carried = user_messages_with(&requests[2], "LATE-DONE");
    assert_eq!(carried.len(), 1, "{carried:?}");
    assert!(
        screen.contains("finished successfully"),
        "the notice's line: {screen}"
    );
    assert!(
        screen.contains("HEARD-IT") && screen.contains("BYE-NOW"),
        "{screen}"
    );
}

/// A board worker's process tells the worker's own session, before its next request: the
/// worker completes its task with what the notice said.
#[test]
fn a_board_workers_process_tells_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("worker.yaml"),
        r#"cursor: conversation
turns:
  - tool_calls:
      - name: terminal
        arguments: {command: "sleep 1; echo BOARD-BUILT", background: true, notify_on_complete: true}
  - tool_calls:
      - name: terminal
        arguments: {command: "sleep 3"}
  - match: BOARD-BUILT
    tool_calls:
      - name: kanban_complete
        arguments: {summary: "the build said BOARD-BUILT", result: ok}
  - text: Finished.
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "kanban:\n  default_assignee: builder\nprofiles:\n  builder:\n    script: worker.yaml\n    toolsets: [core]\n",
    )
    .unwrap();
    let kanban = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(dir.path())
            .env("TROUPE_HOME", dir.path().join("home"))
            .env_remove("TROUPE_KANBAN_STORE")
            .env_remove("TROUPE_KANBAN_BOARD")
            .arg("kanban")
            .arg("--store")
            .arg(dir.path().join("store"))
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{args:?}: {text}");
        text
    };
    let created = kanban(&["create", "build it", "--assignee", "builder"]);
    let id = created
        .split_whitespace()
        .find(|w| w.starts_with("t_"))
        .unwrap_or_else(|| panic!("no task id in {created}"))
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
        .to_string();
    kanban(&["dispatch"]);
    let shown = kanban(&["show", &id]);
    assert!(shown.contains("the build said BOARD-BUILT"), "{shown}");
}

/// A subagent hands its running process to its parent, which then gets the completion notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_process_tells_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::tool_call("delegate_task", json!({"tasks": [{"goal": "child serve"}]}))
                    .when_input_contains("PARENT-GO"),
            )
            .turn(
                ScriptTurn::tool_call(
                    "terminal",
                    json!({"command": "sleep 2; echo HANDED-DONE", "background": true}),
                )
                .when_input_contains("child serve"),
            )
            .turn(
                ScriptTurn::tool_call(
                    "process",
                    json!({"action": "handoff", "session_id": LAST_PROCESS_ID, "data": "Prints HANDED-DONE when it is done."}),
                )
                .when_input_contains("Background process started"),
            )
            .turn(ScriptTurn::text("CHILD-REPORT").when_input_contains("handed_off"))
            .turn(
                ScriptTurn::tool_call("terminal", json!({"command": "sleep 4"}))
                    .when_input_contains("CHILD-REPORT"),
            )
            .turn(ScriptTurn::text("ALL-DONE").when_input_contains("HANDED-DONE")),
    )
    .await
    .unwrap();
    let (lines, _) = chat(dir.path(), &server, "", "PARENT-GO").await;
    assert_eq!(lines.last().unwrap()["text"], "ALL-DONE", "{lines:?}");
    let root = lines
        .iter()
        .find(|l| l["type"] == "session_started")
        .unwrap()["session_id"]
        .clone();
    let notices: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "process_notice")
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["session_id"], root, "the parent hears it");
    let last = server.requests().last().cloned().unwrap();
    assert_eq!(user_messages_with(&last, "HANDED-DONE").len(), 1);
}

/// Through `troupe serve`: the notice is on the session's event stream, and between turns it
/// starts a turn whose answer follows it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_streams_the_notice_and_the_turn_it_starts() {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    use reqwest::Method;
    let dir = crate::support::serve::TroupeDir::with_script(
        tempfile::tempdir().unwrap(),
        "model:\n  base_url: {{MODEL_URL}}\n  model: local-model\nkanban:\n  store: {{STORE}}\n",
        Script::new()
            .turn(
                ScriptTurn::tool_call(
                    "terminal",
                    json!({"command": "sleep 1; echo HTTP-DONE", "background": true, "notify_on_complete": true}),
                )
                .when_input_contains("start it"),
            )
            .turn(ScriptTurn::text("STARTED").when_input_contains("Background process started"))
            .turn(ScriptTurn::text("HTTP-HEARD").when_input_contains("HTTP-DONE")),
    )
    .await;
    let served = crate::support::serve::Served::start(&dir, &["--no-dispatch"]).await;
    let (status, created) = served
        .call(Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, done) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "start it", "wait": true})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    let response = served.events(&id, Some(0)).send().await.unwrap();
    let mut events = response.bytes_stream().eventsource();
    let mut notice = None;
    let mut answers = vec![];
    while answers.len() < 2 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(15), events.next())
            .await
            .expect("the event stream went quiet before the notice's turn ended")
            .unwrap()
            .unwrap();
        let data: Value = serde_json::from_str(&event.data).unwrap_or_default();
        match event.event.as_str() {
            "process_notice" => notice = Some(data),
            "final" => answers.push(data["text"].as_str().unwrap_or_default().to_string()),
            _ => {}
        }
    }
    let notice = notice.expect("a process_notice event before the second answer");
    assert_eq!(notice["kind"], "completed", "{notice}");
    assert_eq!(notice["started_turn"], true, "{notice}");
    assert_eq!(answers, ["STARTED", "HTTP-HEARD"]);
}
