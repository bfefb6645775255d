//! The interactive `troupe chat` the way a person uses it: the real binary in a real terminal
//! (a tmux pane, 80 columns), keys typed into it, the screen read back, against the mock
//! OpenAI-compatible server over real HTTP. A conversation of two messages, a tool call's live
//! line and status, approvals answered with y and n, Ctrl-C during a long command (soft, then
//! hard: no process left), `/tools` with a deferred MCP tool, a plugin's command. Piped input
//! (one message per line) is checked without a terminal. A `clarify` question answered by a
//! choice's number, with the `todo` plan shown as a block. A background process's notice at the
//! prompt, and the turn it starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

use crate::support::mcp_servers::{everything_bin, servers_available};
use crate::support::terminal::Pane;

/// Longest wait for the tests of this file that poll on their own.
const WAIT: Duration = Duration::from_secs(60);

/// A project folder with troupe.yaml pointing at `server` (plus `extra`), and a troupe home.
pub(crate) struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    pub(crate) fn new(server: &MockServer, extra: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        std::fs::write(
            dir.path().join("work/troupe.yaml"),
            format!(
                "model:\n  base_url: {}\n  model: mock-model\n{extra}",
                server.url()
            ),
        )
        .unwrap();
        Project { dir }
    }

    pub(crate) fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub(crate) fn chat(&self, args: &[&str]) -> Pane {
        Pane::start(&self.work(), &self.home(), args)
    }
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_message_carries_the_first_and_history_is_kept() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::text("Hello from the first answer."))
            .turn(ScriptTurn::text("And this is the second.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("what is troupe?");
    pane.wait_for("Hello from the first answer.");
    pane.wait_turns(1);
    pane.line("and then?");
    pane.wait_for("And this is the second.");
    let screen = pane.wait_turns(2);
    assert!(screen.contains("1 model request"), "{screen}");
    pane.wait_prompt();
    pane.key("C-d");
    assert_eq!(pane.exit_code(), 0);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = serde_json::to_string(&requests[1].messages()).unwrap();
    assert!(second.contains("what is troupe?"), "{second}");
    assert!(second.contains("Hello from the first answer."), "{second}");
    assert!(second.contains("and then?"), "{second}");
    let history =
        std::fs::read_to_string(project.home().join("state/chat_history")).unwrap_or_default();
    assert!(history.contains("what is troupe?"), "history: {history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_has_a_live_line_then_its_status() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "sleep 3; echo slept"}),
            ))
            .turn(ScriptTurn::text("It slept.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("sleep a little");
    // While it runs: the tool, its command, no status yet.
    let running = pane.wait("the live line", |s| {
        s.lines()
            .any(|l| l.contains("terminal  sleep 3; echo slept") && !l.contains("· ok"))
    });
    assert!(!running.contains("It slept."), "{running}");
    let done = pane.wait_for("It slept.");
    let status = done
        .lines()
        .find(|l| l.contains("terminal  sleep 3; echo slept"))
        .unwrap();
    assert!(status.contains('✓') && status.contains("· ok"), "{done}");
    assert!(
        done.lines().all(|l| l.chars().count() <= 80),
        "a line is wider than the terminal:\n{done}"
    );
    let summary = pane.wait_turns(1);
    assert!(summary.contains("2 model requests · "), "{summary}");
    assert!(summary.contains("1 tool call"), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_answered_inline_with_y_and_n() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "rm -rf victim-a"}),
            ))
            .turn(ScriptTurn::text("Removed the first."))
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "rm -rf victim-b"}),
            ))
            .turn(ScriptTurn::text("Tried the second.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "approvals: {mode: manual}\n");
    for victim in ["victim-a", "victim-b"] {
        std::fs::create_dir_all(project.work().join(victim)).unwrap();
    }
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("remove a");
    let asked = pane.wait_for("approve?");
    assert!(
        asked.contains("terminal wants to run: rm -rf victim-a"),
        "{asked}"
    );
    pane.line("y");
    pane.wait_for("Removed the first.");
    assert!(!project.work().join("victim-a").exists());
    pane.wait_turns(1);

    pane.line("remove b");
    pane.wait("the second question", |s| {
        s.matches("approve?").count() >= 2
    });
    pane.line("n");
    let screen = pane.wait_for("Tried the second.");
    assert!(screen.contains("denied"), "{screen}");
    assert!(
        project.work().join("victim-b").exists(),
        "a denied command ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_extended_by_answering_y() {
    // Each request costs $0.30 at these prices (200 prompt tokens at $1,000 and 50 generated at
    // $2,000 per million), so the second spends the $0.50 budget with a call still to run.
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::text("Reading it.")
                    .with_tool_call("read_file", json!({"path": "notes.txt"}))
                    .with_usage(200, 50),
            )
            .turn(
                ScriptTurn::text("Once more to be sure.")
                    .with_tool_call("read_file", json!({"path": "notes.txt", "offset": 1}))
                    .with_usage(200, 50),
            )
            .turn(ScriptTurn::text("Both reads say hello.").with_usage(200, 50)),
    )
    .await
    .unwrap();
    let project = Project::new(
        &server,
        "approvals: {mode: manual}\npricing:\n  mock-model: {input: 1000, output: 2000}\nbudget:\n  max_cost_usd: 0.5\n",
    );
    std::fs::write(project.work().join("notes.txt"), "hello\n").unwrap();
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("what does notes.txt say?");
    let asked = pane.wait_for("approve?");
    assert!(asked.contains("the session wants more budget"), "{asked}");
    // The limit first set is added once more: $0.50 becomes $1.00.
    assert!(asked.contains("$1.0000"), "{asked}");
    pane.line("y");
    let screen = pane.wait_for("Both reads say hello.");
    let after = &screen[screen.find("approved once").unwrap()..];
    assert!(after.contains("✓ read_file"), "{screen}");
    pane.wait_turns(1);
    let screen = pane.screen();
    let after = &screen[screen.find("approved once").unwrap()..];
    assert!(!after.contains("budget is spent"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_time_budget_is_extended_while_the_model_is_still_thinking() {
    // The model takes 3 s; the session has 2 s. The question comes while the request is out,
    // and `y` lets its answer through instead of calling the request off.
    let server = MockServer::start(
        Script::new().turn(ScriptTurn::text("Slow, but here.").with_delay(Duration::from_secs(3))),
    )
    .await
    .unwrap();
    let project = Project::new(
        &server,
        "approvals: {mode: manual}\nbudget:\n  max_wall_seconds: 2\n",
    );
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("take your time");
    let asked = pane.wait_for("approve?");
    assert!(asked.contains("the session wants more budget"), "{asked}");
    assert!(asked.contains("time budget is spent"), "{asked}");
    pane.line("y");
    pane.wait_for("Slow, but here.");
    pane.wait_turns(1);
    let screen = pane.screen();
    let after = &screen[screen.find("approved once").unwrap()..];
    assert!(!after.contains("budget is spent"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_softly_then_hard_and_nothing_is_left_running() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "echo $$ > sleeper.pid; exec sleep 300"}),
            ))
            .turn(ScriptTurn::text("Stopped as asked.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("sleep for a long time");
    pane.wait_for("exec sleep 300");
    let pid_file = project.work().join("sleeper.pid");
    let start = Instant::now();
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(start.elapsed() < WAIT, "the command never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    pane.key("C-c");
    pane.wait_for("running calls finish");
    // A soft stop lets the running call go on.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(pid_alive(pid), "a soft stop killed the running command");

    pane.key("C-c");
    let screen = pane.wait("the call to end", |s| {
        s.lines()
            .any(|l| l.contains("exec sleep 300") && l.contains("· interrupted"))
    });
    assert!(screen.contains("stopping everything"), "{screen}");
    let start = Instant::now();
    while pid_alive(pid) {
        assert!(start.elapsed() < WAIT, "the command outlived the hard stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pane.wait_turns(1);
    pane.wait_prompt();
    pane.key("C-d");
    assert_eq!(pane.exit_code(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_tools_lists_a_deferred_mcp_tool() {
    if !servers_available("slash_tools_lists_a_deferred_mcp_tool") {
        return;
    }
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("unused")))
        .await
        .unwrap();
    let everything = everything_bin().to_string_lossy().into_owned();
    let project = Project::new(
        &server,
        &format!("mcp_servers:\n  everything:\n    command: \"{everything}\"\n    args: [stdio]\n"),
    );
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    // The server may still be starting: ask until its tools are listed.
    let start = Instant::now();
    let screen = loop {
        pane.line("/tools");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let screen = pane.screen();
        if screen.contains("mcp-everything") {
            break screen;
        }
        assert!(start.elapsed() < WAIT, "no MCP tools listed:\n{screen}");
    };
    let line = screen
        .lines()
        .rev()
        .find(|l| l.contains("mcp-everything"))
        .unwrap();
    assert!(line.contains("deferred"), "{screen}");
    assert!(screen.contains("echo"), "{screen}");
    assert!(
        screen.contains("behind") || screen.contains("tool_search"),
        "{screen}"
    );
    assert!(server.requests().is_empty(), "/tools reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_command_reaches_the_plugin_not_the_model() {
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("THE MODEL WAS ASKED")))
        .await
        .unwrap();
    let project = Project::new(&server, "plugins:\n  enabled: [greeter]\n");
    let plugin = project.home().join("plugins/greeter");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("plugin.yaml"),
        "commands:\n  greet: {command: 'python3 -c \"import json,sys; print(\\\"hello, \\\" + json.load(sys.stdin)[\\\"args\\\"])\"', description: Greets someone}\n",
    )
    .unwrap();
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("/help");
    pane.wait_for("Greets someone");
    pane.line("/greet Ada");
    pane.wait_for("hello, Ada");
    pane.line("/nonsense");
    pane.wait_for("there is no command /nonsense");
    assert!(server.requests().is_empty(), "a command reached the model");
    // A message that starts with a path is a message.
    pane.line("/etc/hostname holds what?");
    pane.wait_for("THE MODEL WAS ASKED");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_lines_are_one_message_each() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::text("first answer"))
            .turn(ScriptTurn::text("second answer")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let (work, home) = (project.work(), project.home());
    let run = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(&work)
            .env("TROUPE_HOME", &home)
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .arg("chat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"one\ntwo\n")
            .unwrap();
        child.wait_with_output().unwrap()
    });
    let output = tokio::time::timeout(WAIT, run)
        .await
        .expect("troupe chat did not end at the end of its input")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "first answer\nsecond answer\n", "stderr: {stderr}");
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "escape codes when piped"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = serde_json::to_string(&requests[1].messages()).unwrap();
    assert!(second.contains("first answer"), "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_model_and_toolsets_keeps_the_conversation() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::text("first answer"))
            .turn(ScriptTurn::text("second answer"))
            .turn(ScriptTurn::text("third answer")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("remember the word lantern");
    pane.wait_for("first answer");
    pane.wait_prompt();
    pane.line("/model other-model");
    pane.wait_for("model now: other-model");
    pane.line("what was the word?");
    pane.wait_for("second answer");
    pane.wait_prompt();
    pane.line("/toolsets nonsense");
    pane.wait_for("not allowed here");
    pane.line("/toolsets core");
    let narrowed = pane.wait_for("toolsets now: core");
    // `/tools` counts what `/toolsets` said the view holds: core's tools, none of delegation's.
    let count = narrowed
        .split("toolsets now: core (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_default()
        .to_string();
    assert!(count.parse::<usize>().is_ok_and(|n| n > 0), "{narrowed}");
    pane.line("/tools");
    let screen = pane.wait_for(&format!("{count} tools in 1 toolset\n"));
    assert!(!screen.contains("delegate_task"), "{screen}");
    pane.line("and now?");
    pane.wait_for("third answer");
    pane.line("/usage");
    pane.wait_for("3 model requests");

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].body["model"], "mock-model");
    assert_eq!(requests[1].body["model"], "other-model");
    let second = serde_json::to_string(&requests[1].messages()).unwrap();
    assert!(
        second.contains("lantern") && second.contains("first answer"),
        "{second}"
    );
    let third = serde_json::to_string(&requests[2].messages()).unwrap();
    assert!(
        third.contains("lantern") && third.contains("second answer"),
        "{third}"
    );
    assert!(
        requests[0]
            .tool_names()
            .iter()
            .any(|t| t == "delegate_task")
    );
    assert!(
        !requests[2]
            .tool_names()
            .iter()
            .any(|t| t == "delegate_task")
    );
    assert!(requests[2].tool_names().iter().any(|t| t == "terminal"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_typed_during_a_turn_steer_it_or_wait_for_it() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "until [ -e go ]; do sleep 0.1; done"}),
            ))
            .turn(ScriptTurn::text("slept"))
            .turn(ScriptTurn::text("the queued one")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("sleep");
    pane.wait_for("terminal  until [ -e go ]");
    pane.line("/steer keep it short");
    pane.wait_for("noted: the model reads it");
    pane.line("then say more");
    pane.wait_for("queued for when this turn ends: then say more");
    // The command ends when told to, so the lines above were typed while it ran.
    std::fs::write(project.work().join("go"), "").unwrap();
    pane.wait_for("the queued one");
    pane.wait_turns(2);

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let second = serde_json::to_string(&requests[1].messages()).unwrap();
    assert!(
        second.contains("keep it short"),
        "the steer was not read: {second}"
    );
    assert!(!second.contains("then say more"), "{second}");
    let third = serde_json::to_string(&requests[2].messages()).unwrap();
    assert!(third.contains("then say more"), "{third}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_by_number_and_the_plan_shows_as_a_block() {
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::text("Planning, then asking.")
                    .with_tool_call(
                        "todo",
                        json!({"todos": [
                            {"id": "1", "content": "Pick the database", "status": "in_progress"},
                            {"id": "2", "content": "Write the schema"}
                        ]}),
                    )
                    .with_tool_call(
                        "clarify",
                        json!({"question": "Which database should it use?", "choices": ["SQLite", "PostgreSQL"]}),
                    ),
            )
            .turn(ScriptTurn::text("Going with PostgreSQL.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("set up the service");
    let asked = pane.wait_for("pick a number or type your own answer");
    assert!(
        asked.contains("asks: Which database should it use?"),
        "{asked}"
    );
    assert!(
        asked.contains("1. SQLite") && asked.contains("2. PostgreSQL"),
        "{asked}"
    );
    pane.line("2");
    let screen = pane.wait_for("Going with PostgreSQL.");
    assert!(screen.contains("answered: PostgreSQL"), "{screen}");
    // The two calls run side by side, so the plan may be drawn before the question or after
    // the answer; either way it is drawn once the turn is over.
    assert!(screen.contains("plan · 0/2 done"), "{screen}");
    assert!(screen.contains("[>] Pick the database"), "{screen}");
    let requests = server.requests();
    let results: Vec<String> = requests[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    let answer = results
        .iter()
        .find(|c| c.contains("\"answer\""))
        .unwrap_or_else(|| panic!("no answer among the results: {results:?}"));
    assert!(answer.contains("\"answer\":\"PostgreSQL\""), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_shows_the_link_and_waits_until_the_app_is_connected() {
    use crate::support::gateway::{MockGateway, Reply};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let connected = Arc::new(AtomicBool::new(false));
    let state = Arc::clone(&connected);
    let gateway = MockGateway::start(move |path, _| match path {
        "connections/gmail" => Reply::Json(json!({"connect_url": "https://connect.example/g/7"})),
        "connections" => Reply::Json(
            json!({"connectors": [{"name": "gmail", "connected": state.load(Ordering::SeqCst)}]}),
        ),
        _ => Reply::Status(404, "{}".into()),
    });
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::text("Connecting.").with_tool_call(
                "manage_connections",
                json!({"action": "connect", "connector": "gmail"}),
            ))
            .turn(ScriptTurn::text("Gmail is ready.")),
    )
    .await
    .unwrap();
    let project = Project::new(
        &server,
        &format!("tools:\n  connectors:\n    url: {}\n", gateway.url),
    );
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("connect my gmail");
    let asked = pane.wait_for("2. skip");
    assert!(asked.contains("https://connect.example/g/7"), "{asked}");
    assert!(asked.contains("1. connected"), "{asked}");
    // The turn waits: the model has not been called again.
    assert_eq!(server.requests().len(), 1);
    connected.store(true, Ordering::SeqCst);
    pane.line("1");
    pane.wait_for("Gmail is ready.");
    let result = server.requests()[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .next_back()
        .unwrap();
    assert!(result.contains("\"connected\":true"), "{result}");
    assert_eq!(gateway.seen_at("connections").len(), 1);
}

/// A background process's notice at the prompt: its line shows, the turn it starts shows its
/// answer, and the person's next message still goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_notice_at_the_prompt_shows_and_starts_a_turn() {
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::tool_call(
                    "terminal",
                    json!({"command": "sleep 1; echo PANE-DONE", "background": true, "notify_on_complete": true}),
                )
                .when_input_contains("start it"),
            )
            .turn(ScriptTurn::text("STARTED").when_input_contains("Background process started"))
            .turn(ScriptTurn::text("HEARD-IN-PANE").when_input_contains("PANE-DONE"))
            .turn(ScriptTurn::text("SECOND-ANSWER").when_input_contains("and then")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("start it");
    pane.wait_for("STARTED");
    pane.wait_for("finished successfully");
    pane.wait_for("HEARD-IN-PANE");
    pane.line("and then?");
    pane.wait_for("SECOND-ANSWER");
    pane.wait_prompt();
    pane.key("C-d");
    assert_eq!(pane.exit_code(), 0);
    assert_eq!(server.requests().len(), 4);
}
