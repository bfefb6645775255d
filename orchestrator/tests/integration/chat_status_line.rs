//! The status line troupe draws while a person waits, read back from a real terminal (a tmux
//! pane) against the mock model server over real HTTP streaming slowly: `troupe chat -q` shows
//! the model thinking with its time and the tokens received so far, then erases the line
//! before the answer; an approval shows `waiting for your answer…` with the time, and the
//! tool's reported time leaves the wait out (said apart, in the chat's tool line too); the
//! first `troupe tools search` on a large catalog shows a progress bar of the tools embedded.
//! Piped, none of it is drawn and no escape code is written. The interactive chat recovers
//! from llama.cpp's tool-call parse error answered as a plain HTTP 500.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_actors::model::mock_server::{Fault, MockServer, UNREADABLE_OUTPUT_MESSAGE};
use troupe_actors::model::{Script, ScriptTurn};

use crate::chat_terminal::Project;
use crate::support::mcp_servers::{everything_bin, servers_available};
use crate::support::terminal::Pane;

/// The number before `after` in `text` (`12 tokens so far` → 12), the last one on screen.
fn number_before(text: &str, after: &str) -> Option<f64> {
    let at = text.rfind(after)?;
    let head = text[..at].trim_end();
    let start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    head[start..].parse().ok()
}

/// The seconds on the `waiting for your answer… 2.4 s` row, if it is on screen.
fn waiting_seconds(screen: &str) -> Option<f64> {
    let line = screen
        .lines()
        .find(|l| l.contains("waiting for your answer…"))?;
    let after = line.split_once('…')?.1.trim();
    after.split_whitespace().next()?.parse().ok()
}

/// An answer of twenty words, streamed one word per chunk.
const LONG_ANSWER: &str = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_on_a_terminal_shows_the_model_thinking_with_time_and_tokens_then_erases_it() {
    let server = MockServer::start(Script::new().turn(ScriptTurn::text(LONG_ANSWER)))
        .await
        .unwrap();
    // About a quarter of a second per chunk: six seconds of thinking to watch.
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_millis(250),
    });
    let project = Project::new(&server, "");
    let term = Pane::command(
        &project.work(),
        &project.home(),
        &["chat", "-q", "count to twenty"],
    );
    let seen = tokio::task::spawn_blocking(move || {
        let seen = term.wait("thinking with tokens", |s| {
            s.contains("model thinking")
                && number_before(s, " tokens so far").is_some_and(|n| n >= 3.0)
        });
        (term, seen)
    })
    .await
    .unwrap();
    let (term, seen) = seen;
    let line = seen
        .lines()
        .find(|l| l.contains("model thinking"))
        .unwrap()
        .to_string();
    // `⠋ model thinking 1.8 s · 7 tokens so far`: elapsed time and tokens counted.
    assert!(line.contains(" s · "), "{line}");
    assert!(!line.contains("about"), "counted, not estimated: {line}");
    let code = tokio::task::spawn_blocking(move || (term.exit_code(), term.screen()))
        .await
        .unwrap();
    let (code, screen) = code;
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains(LONG_ANSWER), "{screen}");
    // Erased before the answer: no status line is left on the screen.
    assert!(!screen.contains("model thinking"), "{screen}");
    assert!(!screen.contains("tokens so far"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_names_the_mcp_servers_still_starting_and_for_how_long() {
    if !servers_available("q_names_the_mcp_servers_still_starting_and_for_how_long") {
        return;
    }
    let server = MockServer::start(Script::new().turn(ScriptTurn::text(LONG_ANSWER)))
        .await
        .unwrap();
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_millis(300),
    });
    // A server that takes its time to come up.
    let everything = everything_bin().to_string_lossy().into_owned();
    let project = Project::new(
        &server,
        &format!(
            "mcp_servers:\n  slowpoke:\n    command: sh\n    args: [-c, \"sleep 5; exec '{everything}' stdio\"]\n"
        ),
    );
    let term = Pane::command(
        &project.work(),
        &project.home(),
        &["chat", "-q", "count to twenty"],
    );
    let (seen, code, screen) = tokio::task::spawn_blocking(move || {
        let seen = term.wait("the server named as starting", |s| {
            s.contains("starting MCP servers: slowpoke")
        });
        (seen, term.exit_code(), term.screen())
    })
    .await
    .unwrap();
    let line = seen
        .lines()
        .find(|l| l.contains("starting MCP servers: slowpoke"))
        .unwrap();
    // `⠋ model thinking 1.2 s · 3 tokens so far · starting MCP servers: slowpoke 2.2 s`, or the
    // line of the start itself: with the time it has taken.
    assert!(line.trim_end().ends_with(" s"), "{line}");
    assert_eq!(code, 0, "{screen}");
    assert!(!screen.contains("starting MCP servers"), "{screen}");
    assert!(screen.contains(LONG_ANSWER), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_shows_the_approval_wait_and_reports_the_tools_time_without_it() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "rm -rf victim-q"}),
            ))
            .turn(ScriptTurn::text("It ran.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "approvals: {mode: manual}\n");
    std::fs::create_dir_all(project.work().join("victim-q")).unwrap();
    let term = Pane::command(
        &project.work(),
        &project.home(),
        &["chat", "-q", "remove it"],
    );
    let (code, screen) = tokio::task::spawn_blocking(move || {
        term.wait_for("allow? [o]nce");
        // The person takes their time: the row above the question counts it.
        let waiting = term.wait("two seconds of waiting", |s| {
            waiting_seconds(s).is_some_and(|n| n >= 2.0)
        });
        assert!(!waiting.contains("model thinking"), "{waiting}");
        term.line("o");
        term.wait_for("It ran.");
        (term.exit_code(), term.screen())
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{screen}");
    // The wait is kept as a record above the question.
    assert!(screen.contains("answered after"), "{screen}");
    assert!(!screen.contains("waiting for your answer"), "{screen}");
    // `· terminal: ok (12 ms; waited 2.3 s for your approval)`.
    let line = screen
        .lines()
        .find(|l| l.starts_with("· terminal: ok ("))
        .unwrap_or_else(|| panic!("no tool line: {screen}"));
    let ran_ms = number_before(line, " ms;").unwrap_or_else(|| panic!("{line}"));
    let waited = number_before(line, " s for your approval").unwrap_or_else(|| panic!("{line}"));
    assert!(waited >= 2.0, "{line}");
    assert!(
        ran_ms < 1500.0,
        "the tool's time holds the approval wait: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_shows_thinking_and_the_approval_wait_and_keeps_it_out_of_the_calls_time() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "terminal",
                json!({"command": "rm -rf victim-chat"}),
            ))
            .turn(ScriptTurn::text("Done here.")),
    )
    .await
    .unwrap();
    // The call streams slowly: the thinking line has time to count its chunks.
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_millis(500),
    });
    let project = Project::new(&server, "approvals: {mode: manual}\n");
    std::fs::create_dir_all(project.work().join("victim-chat")).unwrap();
    let term = Pane::command(&project.work(), &project.home(), &["chat"]);
    let screen = tokio::task::spawn_blocking(move || {
        term.wait_for("Ctrl-D to leave");
        term.line("remove it");
        let thinking = term.wait("thinking with tokens", |s| {
            s.contains("model thinking")
                && number_before(s, " tokens so far").is_some_and(|n| n >= 1.0)
        });
        assert!(thinking.contains(" s · "), "{thinking}");
        term.wait_for("approve? [y]es once");
        term.wait("two seconds of waiting", |s| {
            waiting_seconds(s).is_some_and(|n| n >= 2.0)
        });
        term.line("y");
        let screen = term.wait_for("Done here.");
        term.wait("the turn's summary", |s| s.contains("── "));
        term.wait_prompt();
        term.key("C-d");
        assert_eq!(term.exit_code(), 0);
        screen
    })
    .await
    .unwrap();
    assert!(screen.contains("answered after"), "{screen}");
    // `✓ terminal  echo from-the-chat · ok 0.0 s · waited 2.4 s for you`
    let line = screen
        .lines()
        .find(|l| l.contains("rm -rf victim-chat") && l.contains("· ok "))
        .unwrap_or_else(|| panic!("no tool line: {screen}"));
    let ran = number_before(line, " s · waited").unwrap_or_else(|| panic!("{line}"));
    let waited = number_before(line, " s for you").unwrap_or_else(|| panic!("{line}"));
    assert!(waited >= 2.0, "{line}");
    assert!(ran < 1.5, "the call's time holds the approval wait: {line}");
    assert!(!screen.contains("model thinking"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_output_has_no_status_line_and_no_escape_codes() {
    let server = MockServer::start(Script::new().turn(ScriptTurn::text(LONG_ANSWER)))
        .await
        .unwrap();
    server.push_fault(Fault::SlowStream {
        pause: Duration::from_millis(60),
    });
    let project = Project::new(&server, "");
    let (work, home) = (project.work(), project.home());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(&work)
            .stdin(Stdio::null())
            .env("TROUPE_HOME", &home)
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("NO_COLOR")
            .args(["chat", "-q", "count to twenty"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains(LONG_ANSWER), "{stdout}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains("model thinking"), "{text}");
        assert!(
            !text.contains('\x1b'),
            "an escape code when piped: {text:?}"
        );
    }

    // The first search on a catalog that needs embedding: piped, no bar.
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog_of(dir.path(), 70);
    let out = search_command(&dir.path().join("home"), &catalog)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("embedding tools"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["total_available"], 70, "{answer}");
}

/// The first `count` tools of the 3,309-tool Cloudflare catalog the tool-search tests use.
fn catalog_of(dir: &Path, count: usize) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tools/tests/fixtures/tool_search/data/cloudflare_3300.json");
    let all: Vec<Value> = serde_json::from_slice(&std::fs::read(&fixture).unwrap()).unwrap();
    assert!(all.len() > 3000, "{fixture:?}");
    let path = dir.join("catalog.json");
    std::fs::write(&path, serde_json::to_vec(&all[..count]).unwrap()).unwrap();
    path
}

fn search_command(home: &Path, catalog: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
    command
        .env("TROUPE_HOME", home)
        .env_remove("NO_COLOR")
        .args(["tools", "search", "--catalog"])
        .arg(catalog)
        .args(["--args", r#"{"queries": ["list dns records"]}"#]);
    command
}

#[test]
fn the_first_search_on_a_large_catalog_shows_a_bar_of_the_tools_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog_of(dir.path(), 200);
    let home = dir.path().join("home");
    let catalog_arg = catalog.to_string_lossy().into_owned();
    let term = Pane::command(
        dir.path(),
        &home,
        &[
            "tools",
            "search",
            "--catalog",
            &catalog_arg,
            "--args",
            r#"{"queries": ["list dns records"]}"#,
        ],
    );
    // Part way: `⠙ embedding tools ██████░░░░ 64/200 2.9 s`.
    let seen = term.wait("a part-filled bar", |s| {
        s.lines().any(|l| {
            l.contains("embedding tools ")
                && l.contains('█')
                && l.contains('░')
                && l.contains("/200")
        })
    });
    let bar = seen
        .lines()
        .find(|l| l.contains("embedding tools "))
        .unwrap();
    let done = number_before(bar, "/200").unwrap_or_else(|| panic!("{bar}"));
    assert!(done > 0.0 && done < 200.0, "{bar}");
    assert_eq!(term.exit_code(), 0, "{}", term.screen());
    let screen = term.screen();
    assert!(
        !screen.contains("embedding tools"),
        "erased before the answer: {screen}"
    );
    assert!(screen.contains("\"total_available\":200"), "{screen}");
    // Cached now: a second search has nothing to embed and draws no bar.
    let again = search_command(&home, &catalog).output().unwrap();
    assert_eq!(again.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_recovers_from_llama_cpps_parse_error_sent_as_http_500() {
    let server = MockServer::start(
        Script::new()
            .turn(
                ScriptTurn::text("Reading it.")
                    .with_tool_call("read_file", json!({"path": "notes.txt"})),
            )
            .turn(
                ScriptTurn::text("The file says hello.").when_input_contains("hello from a file"),
            ),
    )
    .await
    .unwrap();
    // llama.cpp answering a request whose tool call its parser rejected: a plain 500 with its
    // message (not a stream), twice.
    let failure = json!({"error": {"code": 500, "message": UNREADABLE_OUTPUT_MESSAGE, "type": "server_error"}});
    for _ in 0..2 {
        server.push_fault(Fault::Raw {
            status: 500,
            content_type: "application/json".into(),
            body: failure.to_string(),
        });
    }
    let project = Project::new(&server, "");
    std::fs::write(project.work().join("notes.txt"), "hello from a file\n").unwrap();
    let term = Pane::command(&project.work(), &project.home(), &["chat"]);
    let screen = tokio::task::spawn_blocking(move || {
        term.wait_for("Ctrl-D to leave");
        term.line("what does notes.txt say?");
        term.wait_for("The file says hello.");
        let screen = term.wait("the turn's summary", |s| s.contains("── "));
        term.wait_prompt();
        term.key("C-d");
        assert_eq!(term.exit_code(), 0, "{}", term.screen());
        screen
    })
    .await
    .unwrap();
    assert!(screen.contains("model asked again"), "{screen}");
    assert!(screen.contains("tool calls switched to text"), "{screen}");
    assert!(!screen.contains("the turn failed"), "{screen}");
    let sent = server.requests();
    assert!(!sent[0].tool_names().is_empty());
    assert!(sent.last().unwrap().body.get("tools").is_none());
}
