//! Slash commands over the HTTP API: a message starting with `/<command>` sent to a session of
//! `troupe serve` goes to the plugin that registered it (or `/help`), not to the model.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::World;

const TOKEN: &str = "plugins-slash-token-0123456789";

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn slash_commands_over_http_reach_the_plugin_not_the_model() {
    let w = World::new();
    w.plugin(
        &w.user_plugins(),
        "greeter",
        "commands:\n  greet: {command: 'python3 -c \"import json,sys; print(\\\"hi \\\" + json.load(sys.stdin)[\\\"args\\\"])\"', description: Greets}\n",
        &[],
    );
    w.config(&format!(
        "plugins:\n  enabled: [greeter, disk-cleanup]\nserve:\n  token: {TOKEN}\n"
    ));
    let mut cmd =
        tokio::process::Command::from(w.command(&["serve", "--port", "0", "--no-dispatch"]));
    let mut child = cmd
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("troupe serve did not start")
            .unwrap()
            .expect("troupe serve exited");
        if let Some(rest) = line.strip_prefix("troupe serve: listening on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // A session whose model would fail the test if it were asked anything.
    let (status, created) = post(
        &base,
        "/api/sessions",
        json!({"script": {"turns": [{"text": "THE MODEL WAS ASKED"}]}}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let messages = format!("/api/sessions/{id}/messages");
    let (status, reply) = post(
        &base,
        &messages,
        json!({"text": "/greet world", "wait": true}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["plugin"], "greeter");
    assert_eq!(reply["ok"], true);
    assert_eq!(reply["text"], "hi world");
    let (_, help) = post(&base, &messages, json!({"text": "/help"})).await;
    let help = help["text"].as_str().unwrap();
    assert!(
        help.contains("/greet") && help.contains("/disk-cleanup"),
        "{help}"
    );
    let (_, status_reply) = post(&base, &messages, json!({"text": "/disk-cleanup status"})).await;
    assert!(
        status_reply["text"]
            .as_str()
            .unwrap()
            .contains("Nothing is tracked")
    );
    // An ordinary message still reaches the model.
    let (_, outcome) = post(&base, &messages, json!({"text": "hello", "wait": true})).await;
    assert_eq!(outcome["text"], "THE MODEL WAS ASKED", "{outcome}");
    let _ = child.start_kill();
}
