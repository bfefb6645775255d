//! `--agent PROFILE`: an MCP client hands a task to a troupe profile with `run_<profile>`; the
//! whole turn runs (here a scripted model over real HTTP that calls `terminal`, then answers),
//! progress arrives while it works, and `session` continues the same conversation; a cancelled
//! request stops the turn and the command it was running.

use serde_json::json;

use super::World;
use crate::support::mcp_servers::servers_available;
use crate::support::serve::TroupeDir;

const YAML: &str = "model:
  base_url: \"{{MODEL_URL}}\"
  model: mock-model
approvals:
  mode: manual
  unattended: deny
profiles:
  helper:
    toolsets: [core]
    system_prompt: You answer questions about this folder.
  other:
    toolsets: [core]
";

const SCRIPT: &str = "cursor: conversation
turns:
  - match: FIRST-QUESTION
    tool_calls:
      - name: terminal
        arguments: {command: echo TOOL-RAN-$((40+2))}
  - match: TOOL-RAN-42
    text: ANSWER-ONE after the tool
  - match: SECOND-QUESTION
    text: ANSWER-TWO remembering the first
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_profile_answers_from_a_whole_turn_and_session_continues_it() {
    if !servers_available("mcp_serve agents") {
        return;
    }
    let fx = TroupeDir::new(YAML, SCRIPT).await;
    let home = fx.home().to_path_buf();
    let TroupeDir { dir, model, .. } = fx;
    let world = World::in_dir(dir, &home);
    let seen = world
        .stdio(
            "agent",
            &["--agent", "helper"],
            &[
                ("TROUPE_TOOL", "run_helper"),
                ("TROUPE_PROMPT", "FIRST-QUESTION: what does the tool say?"),
                ("TROUPE_PROMPT2", "SECOND-QUESTION: and now?"),
            ],
        )
        .await;
    let offered = seen["offered"].as_array().unwrap();
    assert!(offered.contains(&json!("run_helper")), "{offered:?}");
    assert!(
        !offered.contains(&json!("run_other")),
        "only the profiles asked for are offered: {offered:?}"
    );

    let first = &seen["first"];
    assert_eq!(first["is_error"], json!(false), "{first}");
    assert!(
        first["text"].as_str().unwrap().contains("ANSWER-ONE"),
        "{first}"
    );
    let structured = &first["structured"];
    assert_eq!(structured["status"], json!("completed"), "{first}");
    assert_eq!(structured["tool_calls"], json!(1), "{first}");
    let session = structured["session"].as_str().unwrap();

    let second = &seen["second"];
    assert_eq!(second["is_error"], json!(false), "{second}");
    assert!(
        second["text"].as_str().unwrap().contains("ANSWER-TWO"),
        "{second}"
    );
    assert_eq!(second["structured"]["session"], json!(session), "{second}");

    let stranger = &seen["stranger"];
    assert_eq!(stranger["is_error"], json!(true), "{stranger}");
    assert!(
        stranger["text"]
            .as_str()
            .unwrap()
            .contains("leave `session` out"),
        "{stranger}"
    );

    let progress: Vec<String> = seen["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str().map(str::to_string))
        .collect();
    assert!(
        progress.iter().any(|m| m.contains("calling terminal")),
        "{progress:?}"
    );

    // The tool ran for real, and the second turn was sent with the first one's conversation.
    let bodies: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        bodies.iter().any(|b| b.contains("TOOL-RAN-42")),
        "the terminal call never ran"
    );
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("SECOND-QUESTION") && b.contains("ANSWER-ONE")),
        "the second turn did not continue the first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_agent_profile_is_refused_naming_the_ones_there_are() {
    let fx = TroupeDir::new(YAML, SCRIPT).await;
    let out = fx
        .troupe()
        .args(["mcp", "serve", "--agent", "nobody"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"nobody\"") && stderr.contains("helper, other"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_stops_the_agents_turn_and_its_command() {
    if !servers_available("mcp_serve agent cancellation") {
        return;
    }
    // A number no other test sleeps for, so the process can be found by its command line.
    let marker = format!("sleep 96.{}", std::process::id());
    let script = format!(
        "cursor: conversation\nturns:\n  - match: SLOW-QUESTION\n    tool_calls:\n      - name: terminal\n        arguments: {{command: \"{marker} && echo never\"}}\n  - text: finished anyway\n"
    );
    let fx = TroupeDir::new(YAML, &script).await;
    let home = fx.home().to_path_buf();
    let TroupeDir { dir, .. } = fx;
    let world = World::in_dir(dir, &home);
    let seen = world
        .stdio(
            "cancel",
            &["--agent", "helper"],
            &[
                ("TROUPE_TOOL", "run_helper"),
                (
                    "TROUPE_ARGS",
                    r#"{"prompt": "SLOW-QUESTION: wait a while"}"#,
                ),
                ("TROUPE_MARKER", marker.as_str()),
                ("TROUPE_CANCEL_AFTER", "4"),
            ],
        )
        .await;
    assert_eq!(seen["cancelled"], json!(true), "{seen}");
    assert!(
        !seen["running_before"].as_array().unwrap().is_empty(),
        "the agent's command never ran: {seen}"
    );
    assert_eq!(seen["left_after"], json!([]), "{seen}");
    let progress: Vec<&str> = seen["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(
        progress.iter().any(|m| m.contains("calling terminal")),
        "{progress:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_session_is_its_connections_alone() {
    if !servers_available("mcp_serve agent sessions per connection") {
        return;
    }
    let fx = TroupeDir::new(YAML, SCRIPT).await;
    let home = fx.home().to_path_buf();
    let TroupeDir { dir, model, .. } = fx;
    let world = World::in_dir(dir, &home);
    let server = world.http(&["--agent", "helper", "--agent", "other"]).await;
    let target = server.target(super::TOKEN);
    let session_file = world.path().join("session-id");
    let done_file = world.path().join("done");
    let (session_file_s, done_file_s) = (
        session_file.display().to_string(),
        done_file.display().to_string(),
    );
    let holder_env = [
        ("TROUPE_TOOL", "run_helper"),
        ("TROUPE_OTHER_TOOL", "run_other"),
        ("TROUPE_PROMPT", "FIRST-QUESTION: what does the tool say?"),
        ("TROUPE_PROMPT2", "SECOND-QUESTION: and now?"),
        ("TROUPE_SESSION_FILE", session_file_s.as_str()),
        ("TROUPE_DONE_FILE", done_file_s.as_str()),
    ];
    // While the first client holds its connection open, a second one tries its session.
    let intruder = async {
        let mut id = String::new();
        for _ in 0..900 {
            if let Ok(read) = std::fs::read_to_string(&session_file) {
                id = read;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(!id.is_empty(), "the first client never opened a session");
        let seen = world
            .client(
                "agent_continue",
                &target,
                &[
                    ("TROUPE_TOOL", "run_helper"),
                    ("TROUPE_SESSION", id.as_str()),
                ],
            )
            .await;
        std::fs::write(&done_file, "").unwrap();
        seen
    };
    let (holder, intruder) =
        tokio::join!(world.client("agent_hold", &target, &holder_env), intruder);

    assert_eq!(holder["first"]["is_error"], json!(false), "{holder}");
    assert_eq!(holder["waited"], json!(true), "{holder}");
    assert_eq!(intruder["is_error"], json!(true), "{intruder}");
    assert!(
        intruder["text"]
            .as_str()
            .unwrap()
            .contains("belongs to another client connection"),
        "{intruder}"
    );
    // Its own connection still continues it, and another profile's tool cannot take it over.
    assert_eq!(holder["second"]["is_error"], json!(false), "{holder}");
    assert!(
        holder["second"]["text"]
            .as_str()
            .unwrap()
            .contains("ANSWER-TWO"),
        "{holder}"
    );
    let other = &holder["other_profile"];
    assert_eq!(other["is_error"], json!(true), "{other}");
    assert!(
        other["text"]
            .as_str()
            .unwrap()
            .contains("is a helper session"),
        "{other}"
    );
    // The intruder's prompt never reached the model.
    assert!(
        !model
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("let me in")),
        "the second client's prompt ran in the first one's session"
    );
}
