//! The interactive `troupe chat` in a real terminal (tmux) where `-q` and `troupe sessions`
//! already behave: a model server whose tool-call parser fails (a 500 with llama.cpp's message)
//! is asked again (also when prose was already streamed and shown) and the conversation
//! switches to text tool calls, as `-q` does, remembered
//! under the model the server lists (so a later chat that names the model otherwise starts in
//! text too); `/resume` lists the stored conversations and goes on with the one picked.

use std::process::{Command, Stdio};

use serde_json::json;
use troupe_actors::model::mock_server::{Fault, MockServer, UNREADABLE_OUTPUT_MESSAGE};
use troupe_actors::model::{Script, ScriptTurn};

use crate::chat_terminal::Project;

/// What llama.cpp's `/models` lists for the model it serves.
const SERVED: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

/// Read notes.txt, then answer from what it says.
fn read_then_answer() -> Script {
    Script::new()
        .turn(
            ScriptTurn::text("Reading it.")
                .with_tool_call("read_file", json!({"path": "notes.txt"})),
        )
        .turn(ScriptTurn::text("The file says hello.").when_input_contains("hello from a file"))
}

/// `troupe chat ARGS` run to its end in the project, without a terminal.
fn one_shot(project: &Project, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(project.work())
        .stdin(Stdio::null())
        .env("TROUPE_HOME", project.home())
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .arg("chat")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parse_error_of_the_server_is_recovered_from_as_with_q_and_remembered_by_served_model() {
    let server = MockServer::start(read_then_answer()).await.unwrap();
    server.serve_models(&[SERVED]);
    // What llama.cpp streams when the model writes prose, then a call its parser rejects: the
    // prose arrives (and is shown), then an error event, and no [DONE].
    server.push_fault(Fault::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: format!(
            "data: {}\n\ndata: {}\n\ndata: {}\n\n",
            json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": SERVED,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null}]}),
            json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": SERVED,
                "choices": [{"index": 0, "delta": {"content": "Let me look at the file first."}, "finish_reason": null}]}),
            json!({"error": {"code": 500, "message": UNREADABLE_OUTPUT_MESSAGE, "type": "server_error"}}),
        ),
    });
    server.push_fault(Fault::UnreadableOutput);
    let project = Project::new(&server, "");
    std::fs::write(project.work().join("notes.txt"), "hello from a file\n").unwrap();
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("what does notes.txt say?");
    pane.wait_for("The file says hello.");
    let screen = pane.wait_turns(1);
    assert!(screen.contains("model asked again"), "{screen}");
    assert!(
        screen.contains("Let me look at the file first."),
        "{screen}"
    );
    assert!(
        screen.contains("the text above was not its answer"),
        "{screen}"
    );
    assert!(screen.contains("tool calls switched to text"), "{screen}");
    assert!(!screen.contains("the turn failed"), "{screen}");
    pane.wait_prompt();
    pane.key("C-d");
    assert_eq!(pane.exit_code(), 0);
    // The two refused answers, then text calls: no `tools` field from the switch on.
    let sent = server.requests();
    assert_eq!(
        sent.len(),
        4,
        "{:?}",
        sent.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    assert!(!sent[1].tool_names().is_empty());
    assert!(sent[2].body.get("tools").is_none());

    // Remembered under what the server lists, not the name troupe.yaml gave.
    let memory = std::fs::read_to_string(project.home().join("state/tool_calls.json")).unwrap();
    assert!(memory.contains(SERVED), "{memory}");
    assert!(!memory.contains("mock-model"), "{memory}");

    // Naming the model otherwise keeps the memory: the first request already goes in text.
    let before = server.requests().len();
    let out = one_shot(
        &project,
        &[
            "-q",
            "what does notes.txt say?",
            "--model",
            "qwen",
            "--json",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("remembered"), "{stdout}");
    let sent = server.requests();
    assert!(
        sent[before].body.get("tools").is_none(),
        "{}",
        sent[before].body
    );
    assert_eq!(sent[before].body["model"], "qwen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_lists_the_stored_conversations_and_goes_on_with_the_one_picked() {
    let server = MockServer::start(
        Script::new()
            .turn(ScriptTurn::text("Noted: pelican.").when_input_contains("pelican"))
            .turn(ScriptTurn::text("Something else entirely.")),
    )
    .await
    .unwrap();
    let project = Project::new(&server, "");
    let out = one_shot(&project, &["-q", "remember the word pelican"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pane = project.chat(&[]);
    pane.wait_for("Ctrl-D to leave");
    pane.line("/resume");
    let screen = pane.wait_for("stored conversations");
    assert!(screen.contains("remember the word pelican"), "{screen}");
    assert!(screen.contains(" 1. "), "{screen}");
    pane.wait_prompt();
    pane.line("/resume 1");
    pane.wait_for("going on with session");
    pane.wait_prompt();
    pane.line("which word was it?");
    pane.wait_turns(1);
    pane.wait_prompt();
    pane.key("C-d");
    assert_eq!(pane.exit_code(), 0);
    // The model was sent the stored conversation before the new message.
    let last = server.requests().last().cloned().unwrap();
    let said: Vec<String> = last
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    let pelican = said
        .iter()
        .position(|c| c.contains("remember the word pelican"));
    let question = said.iter().position(|c| c.contains("which word was it?"));
    assert!(
        matches!((pelican, question), (Some(p), Some(q)) if p < q),
        "{said:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_model_named_the_servers_only_model_is_used_or_troupe_says_what_to_set() {
    let server =
        MockServer::start(Script::new().turn(ScriptTurn::text("Hi from the served model.")))
            .await
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write_config = |dir: &std::path::Path| {
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::write(
            dir.join("work/troupe.yaml"),
            format!("model:\n  base_url: {}\n", server.url()),
        )
        .unwrap();
    };
    write_config(dir.path());
    let run = |dir: std::path::PathBuf| {
        Command::new(env!("CARGO_BIN_EXE_troupe"))
            .current_dir(dir.join("work"))
            .stdin(Stdio::null())
            .env("TROUPE_HOME", dir.join("home"))
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("TROUPE_MODEL")
            .args(["chat", "-q", "hello"])
            .output()
            .unwrap()
    };
    // One model listed: that one is asked for, not a default name.
    server.serve_models(&[SERVED]);
    let path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || run(path))
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hi from the served model."));
    assert_eq!(server.requests().last().unwrap().body["model"], SERVED);

    // Several listed: the turn fails saying what to set, with the names to choose from.
    server.serve_models(&["big-model", "small-model"]);
    let fresh = tempfile::tempdir().unwrap();
    write_config(fresh.path());
    let before = server.requests().len();
    let path = fresh.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || run(path))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("set model.model in troupe.yaml"),
        "{stderr}"
    );
    assert!(stderr.contains("big-model, small-model"), "{stderr}");
    assert_eq!(
        server.requests().len(),
        before,
        "no chat request without a model"
    );

    // No listing at all: what to set.
    server.no_models_route();
    let path = fresh.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || run(path))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("did not list its models"), "{stderr}");
    assert!(stderr.contains("set model.model"), "{stderr}");
}
