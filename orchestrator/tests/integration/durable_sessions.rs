//! Durable sessions, tried as a user meets them: the `troupe` binary with a troupe.yaml whose
//! model is the mock OpenAI-compatible server over real HTTP, killed with SIGKILL mid-turn.
//! - `troupe serve` killed while a call waits for approval: restarted on the same store, the
//!   approval is listed again, answered over HTTP, the call runs and the turn finishes; an SSE
//!   client that reconnects with `Last-Event-ID` gets every event after it once, numbered on;
//! - `troupe chat` killed while a call runs: `--continue` goes on with the session, and the
//!   model is told the call was interrupted (it is not run again);
//! - `troupe sessions list|show --tree|search|rm` read what was stored, subagents included.

use std::process::Stdio;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use troupe_actors::model::Script;
use troupe_actors::model::mock_server::MockServer;

use crate::support::serve::{Served, TroupeDir};

/// Sessions in a SQLite file under the directory.
async fn fixture(script: &str) -> TroupeDir {
    fixture_with_store(script, None).await
}

/// Sessions in the PostgreSQL database at `url` when given, else in a SQLite file.
async fn fixture_with_store(script: &str, url: Option<&str>) -> TroupeDir {
    let yaml = format!(
        "model:\n  base_url: {{{{MODEL_URL}}}}\n  model: mock-model\napprovals:\n  require_approval: [terminal]\nkanban:\n  store: {{{{STORE}}}}\nsessions:\n  store: {}\n",
        url.unwrap_or("{{DIR}}/state/sessions.db"),
    );
    TroupeDir::new(&yaml, script).await
}

/// `troupe serve` without dispatch, once it has said where sessions are kept and how many
/// came back.
async fn serve(fx: &TroupeDir) -> Served {
    let served = Served::start(fx, &["--no-dispatch"]).await;
    served.wait_for_line("troupe serve: sessions kept").await;
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_while_a_call_waits_for_approval_goes_on_after_restart() {
    serve_restart_case(None, "SQLite session store").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_while_a_call_waits_for_approval_goes_on_after_restart_on_postgres() {
    let Some(cluster) =
        troupe_kanban::store::test_cluster::cluster_url("durable sessions on PostgreSQL")
    else {
        return;
    };
    let db = troupe_kanban::store::test_cluster::fresh_database(&cluster, "sessions").await;
    serve_restart_case(Some(&db.url), "PostgreSQL session store").await;
}

/// Kills `troupe serve` while a call waits for approval, restarts it on the same store, and
/// answers the approval; `store`: the PostgreSQL URL, else a SQLite file.
async fn serve_restart_case(store: Option<&str>, described: &str) {
    let fx = fixture_with_store(
        "turns:\n  - tool_calls:\n      - name: terminal\n        arguments: {command: echo approved-after-restart}\n  - text: It printed the line.\n",
        store,
    )
    .await;
    let served = serve(&fx).await;
    let (status, created) = served
        .call(reqwest::Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let response = served.events(&id, None).send().await.unwrap();
    let mut events = response.bytes_stream().eventsource();
    let (status, accepted) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "print the line"})),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    // Read until the approval is asked; that is the last event this client saw.
    let mut seen = Vec::new();
    let first_request = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(event.id.parse::<u64>().unwrap());
        if event.event == "approval_requested" {
            let data: Value = serde_json::from_str(&event.data).unwrap();
            break data["request_id"].as_str().unwrap().to_string();
        }
    };
    let last_seen = *seen.last().unwrap();
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "numbers run on: {seen:?}"
    );
    drop(events);
    served.kill().await;

    let served = serve(&fx).await;
    let log = served.log();
    assert!(
        log.iter()
            .any(|l| l.contains("1 reopened") && l.contains(described)),
        "serve says it reopened the session: {log:?}"
    );
    // The approval is pending again, for the same session and call.
    let pending = served.pending_approval().await;
    assert_eq!(pending["session_id"], id.as_str(), "{pending}");
    assert_eq!(pending["tool"], "terminal", "{pending}");
    assert_ne!(pending["request_id"], first_request.as_str());
    assert!(
        !fx.model_saw("approved-after-restart\\n"),
        "the command must not have run before it was approved"
    );
    let response = served.events(&id, Some(last_seen)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut events = response.bytes_stream().eventsource();
    let (status, answered) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/approvals/{}", pending["request_id"].as_str().unwrap()),
            Some(json!({"choice": "once"})),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let mut after = Vec::new();
    let mut kinds = Vec::new();
    let final_event = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap_or_else(|_| panic!("no final event; got {kinds:?}"))
            .unwrap()
            .unwrap();
        after.push(event.id.parse::<u64>().unwrap());
        kinds.push(event.event.clone());
        if event.event == "final" {
            break serde_json::from_str::<Value>(&event.data).unwrap();
        }
    };
    assert_eq!(
        after.first(),
        Some(&(last_seen + 1)),
        "the stream goes on right after the last event seen: {after:?}"
    );
    assert!(
        after.windows(2).all(|w| w[1] == w[0] + 1),
        "no gap and no repeat across the restart: {after:?}"
    );
    assert_eq!(final_event["status"], "completed", "{final_event}");
    assert_eq!(final_event["text"], "It printed the line.");
    assert!(kinds.iter().any(|k| k == "approval_answered"), "{kinds:?}");
    assert!(
        fx.model_saw("approved-after-restart"),
        "the model got the command's output"
    );
    // The session is the same one, with its history.
    let (status, shown) = served
        .call(reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200, "{shown}");
    served.kill().await;
    let (code, out, err) = fx.run(&["sessions", "show", &id, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    let messages = shown["sessions"][0]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "user, call, result, answer: {shown:#}");
    assert_eq!(messages[2]["role"], "tool");
    assert!(
        messages[2]["content"]
            .as_str()
            .unwrap()
            .contains("approved-after-restart"),
        "{shown:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_chat_goes_on_with_the_interrupted_call_marked() {
    let fx = fixture(
        "turns:\n  - tool_calls:\n      - name: read_file\n        arguments: {path: notes.txt}\n  - tool_calls:\n      - name: execute_code\n        arguments: {code: \"import time\\nprint('started-long-script', flush=True)\\ntime.sleep(60)\"}\n  - text: I see the script was interrupted.\n",
    )
    .await;
    std::fs::write(fx.path().join("notes.txt"), "the secret word is pelican\n").unwrap();
    let (code, _, err) = fx.run(&["chat", "--continue", "-q", "hello"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no chat session is stored yet"), "{err}");
    let mut chat = fx
        .troupe()
        .args([
            "chat",
            "-q",
            "read my notes, then run the long script",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(chat.stdout.take().unwrap()).lines();
    let mut session_id = None;
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("chat ended before the long call started");
        let event: Value = serde_json::from_str(&line).unwrap();
        session_id.get_or_insert_with(|| event["session_id"].as_str().unwrap().to_string());
        if event["type"] == "tool_call_started" && event["tool"] == "execute_code" {
            break;
        }
    }
    // Give the script a moment to be running, then kill the chat outright.
    tokio::time::sleep(Duration::from_millis(300)).await;
    chat.start_kill().unwrap();
    chat.wait().await.unwrap();
    let id = session_id.unwrap();

    let (code, out, err) = fx.run(&["sessions", "list", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["sessions"][0]["id"], id.as_str(), "{listed:#}");
    assert_eq!(listed["sessions"][0]["origin"], "chat");
    assert_eq!(
        listed["sessions"][0]["title"],
        "read my notes, then run the long script"
    );

    let (code, out, err) = fx
        .run(&[
            "chat",
            "--resume",
            &id[..13],
            "-q",
            "what happened?",
            "--json",
        ])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains(&format!("going on with session {id}")),
        "{err}"
    );
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["status"], "completed", "{out}");
    assert!(
        fx.model_saw("[Interrupted: troupe stopped while execute_code was running"),
        "the model is told the call was interrupted"
    );
    assert!(fx.model_saw("pelican"), "the earlier result is still there");
    let runs = fx
        .model
        .requests()
        .iter()
        .filter(|r| {
            Value::Array(r.messages())
                .to_string()
                .contains("what happened?")
        })
        .count();
    assert_eq!(
        runs, 1,
        "one request after the resume: nothing was run again"
    );

    // The stored session: found by a word of a tool result, shown, removed.
    let (code, out, err) = fx.run(&["sessions", "search", "pelican", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let found: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(found["matches"][0]["session_id"], id.as_str(), "{found:#}");
    assert_eq!(found["matches"][0]["role"], "tool");
    let (code, out, _) = fx.run(&["sessions", "show", &id[..13]]).await;
    assert_eq!(code, 0);
    assert!(out.contains("tool execute_code: [Interrupted"), "{out}");
    let (code, _, err) = fx.run(&["sessions", "show", "no-such-session"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("troupe sessions list"), "{err}");
    let (code, out, _) = fx.run(&["sessions", "rm", &id]).await;
    assert_eq!(code, 0);
    assert!(out.contains("Removed 1"), "{out}");
    let (_, out, _) = fx.run(&["sessions", "list", "--json"]).await;
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["sessions"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_search_finds_past_turns_only_where_the_caller_may_look() {
    let fx = fixture(
        "turns:\n  - tool_calls:\n      - name: read_file\n        arguments: {path: notes.txt}\n  - text: Read them.\n",
    )
    .await;
    std::fs::write(fx.path().join("notes.txt"), "the secret word is pelican\n").unwrap();
    let (code, out, err) = fx.run(&["chat", "-q", "read my notes", "--json"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let reader = first["session_id"].as_str().unwrap().to_string();

    // A later chat session of the same person finds it through the bridge.
    let searcher = MockServer::start(
        Script::from_yaml_str(
            "turns:\n  - tool_calls:\n      - name: tool_call\n        arguments: {calls: [{name: session_search, arguments: {query: pelicans}}]}\n  - text: Found it.\n",
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let (code, out, err) = fx
        .run(&[
            "chat",
            "-q",
            "which word did I keep?",
            "--base-url",
            &searcher.url(),
            "--toolsets",
            "core,session_search",
            "--json",
        ])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let shown: Vec<String> = searcher
        .requests()
        .iter()
        .map(|r| Value::Array(r.messages()).to_string())
        .collect();
    let result = shown.last().unwrap();
    assert!(
        result.contains(&reader) && result.contains("[pelican]"),
        "the search result names the session and the word (stemmed): {result}"
    );

    // A session opened over HTTP sees only its own tree: not the chats.
    let served = serve(&fx).await;
    let script = json!({"turns": [
        {"tool_calls": [{"name": "tool_call", "arguments": {"calls": [{"name": "session_search", "arguments": {"query": "pelican"}}]}}]},
        {"text": "Nothing."}
    ]});
    let (status, created) = served
        .call(
            reqwest::Method::POST,
            "/api/sessions",
            Some(json!({"script": script, "toolsets": ["session_search"]})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, outcome) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "find pelican", "wait": true})),
        )
        .await;
    assert_eq!(status, 200, "{outcome}");
    // Nor can a client read a chat's transcript through the server.
    let (status, refused) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/sessions/{reader}/transcript"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{refused}");
    served.kill().await;
    let (code, out, err) = fx.run(&["sessions", "show", &id, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    let tool_result = shown["sessions"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let found: Value = serde_json::from_str(&tool_result).unwrap();
    let roots: Vec<&str> = found["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["root_id"].as_str().unwrap())
        .collect();
    assert!(
        roots.iter().all(|r| *r == id) && !tool_result.contains(&reader),
        "an HTTP session sees only its own tree, never the chat sessions: {tool_result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_delegation_cut_by_a_crash_is_reported_after_restart() {
    let fx = fixture(
        "turns:\n  - match: COUNT-THE-BIRDS\n    delay_ms: 60000\n    text: Counted.\n  - match: START-SURVEY\n    tool_calls:\n      - name: delegate_task\n        arguments: {tasks: [{goal: \"COUNT-THE-BIRDS on the lake\"}]}\n  - match: working in the background\n    text: Started it.\n  - match: was interrupted\n    text: SURVEY-WAS-CUT\n",
    )
    .await;
    let served = serve(&fx).await;
    let (status, created) = served
        .call(reqwest::Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, outcome) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "START-SURVEY please", "wait": true})),
        )
        .await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["text"], "Started it.", "{outcome}");
    // The subagent is waiting on its model: the process dies under it.
    for _ in 0..200 {
        if fx.model_saw("COUNT-THE-BIRDS on the lake") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served.kill().await;

    let served = serve(&fx).await;
    let mut last = Value::Null;
    for _ in 0..200 {
        let (_, shown) = served
            .call(reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
            .await;
        last = shown;
        if fx.model_saw("was interrupted: troupe stopped before its subagents finished") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fx.model_saw("was interrupted: troupe stopped before its subagents finished"),
        "the parent is told its delegation was cut: {last}"
    );
    let (status, transcript) = served
        .call(
            reqwest::Method::GET,
            &format!("/api/sessions/{id}/transcript?tree=true"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{transcript}");
    assert_eq!(transcript["sessions"].as_array().unwrap().len(), 2);
    let (status, missing) = served
        .call(reqwest::Method::GET, "/api/sessions/nope/transcript", None)
        .await;
    assert_eq!(status, 404, "{missing}");
    served.kill().await;
    // The subagent's transcript is kept under its parent.
    let (code, out, err) = fx.run(&["sessions", "show", &id, "--tree", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    let sessions = shown["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{shown:#}");
    assert_eq!(sessions[1]["session"]["parent_id"], id.as_str());
    assert_eq!(sessions[1]["session"]["origin"], "subagent");
    assert!(
        sessions[1]["messages"]
            .to_string()
            .contains("COUNT-THE-BIRDS on the lake"),
        "{shown:#}"
    );
}
