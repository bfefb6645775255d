//! Slash commands over the HTTP API: a message starting with `/<command>` sent to a session of
//! `troupe serve` goes to the plugin that registered it (or `/help`), not to the model.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::plugin_world::World;
use crate::support::serve::Served;

const TOKEN: &str = "plugins-slash-token-0123456789";

async fn post(served: &Served, path: &str, body: Value) -> (u16, Value) {
    let (status, answer) = served.call(Method::POST, path, Some(body)).await;
    assert!(answer.is_object(), "{path}: {status} {answer}");
    (status, answer)
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
    let mut command =
        tokio::process::Command::from(w.command(&["serve", "--port", "0", "--no-dispatch"]));
    command.env_remove(troupe::http::auth::TOKEN_ENV);
    let served = Served::spawn(command, Some(TOKEN)).await;
    // A session whose model would fail the test if it were asked anything.
    let (status, created) = post(
        &served,
        "/api/sessions",
        json!({"script": {"turns": [{"text": "THE MODEL WAS ASKED"}]}}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let messages = format!("/api/sessions/{id}/messages");
    let (status, reply) = post(
        &served,
        &messages,
        json!({"text": "/greet world", "wait": true}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["plugin"], "greeter");
    assert_eq!(reply["ok"], true);
    assert_eq!(reply["text"], "hi world");
    let (_, help) = post(&served, &messages, json!({"text": "/help"})).await;
    let help = help["text"].as_str().unwrap();
    assert!(
        help.contains("/greet") && help.contains("/disk-cleanup"),
        "{help}"
    );
    let (_, status_reply) = post(&served, &messages, json!({"text": "/disk-cleanup status"})).await;
    assert!(
        status_reply["text"]
            .as_str()
            .unwrap()
            .contains("Nothing is tracked")
    );
    // An ordinary message still reaches the model.
    let (_, outcome) = post(&served, &messages, json!({"text": "hello", "wait": true})).await;
    assert_eq!(outcome["text"], "THE MODEL WAS ASKED", "{outcome}");
}
