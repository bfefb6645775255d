//! Hosted connectors in `troupe chat`, with a scripted model and a real gateway on 127.0.0.1:
//! a search whose answer merges a local MCP tool with a connector tool, and a batch of three
//! connector calls whose second is refused at its approval (no terminal to ask on), run in
//! input order and answered to the model as one spliced result.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::gateway::{MockGateway, Reply};
use crate::support::mcp_servers::{everything_bin, servers_available};

const TOKEN_ENV: &str = "TROUPE_TEST_GATEWAY_TOKEN";
const TOKEN: &str = "chat-gw-token-77ab30";

/// Runs `troupe chat -q … --script script.yaml --json` in `dir`; the JSON lines it printed.
fn chat(dir: &Path) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join("home"))
        .env(TOKEN_ENV, TOKEN)
        .args([
            "chat",
            "-q",
            "do the thing",
            "--script",
            "script.yaml",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
        "the token leaked"
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn last_text(lines: &[Value]) -> (&str, &str) {
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final", "{last}");
    (
        last["text"].as_str().unwrap(),
        last["status"].as_str().unwrap(),
    )
}

#[test]
fn a_search_in_chat_merges_local_and_connector_tools() {
    if !servers_available("a_search_in_chat_merges_local_and_connector_tools") {
        return;
    }
    let gateway = MockGateway::start(|path, body| match path {
        "search" => Reply::Json(json!({
            "schemas": {"GMAIL_ECHO_REPLY": {"connector": "gmail", "description": "Echo a reply back to an email thread.", "input_schema": {"type": "object"}}},
            "results": [{"use_case": body["queries"][0], "tools": ["GMAIL_ECHO_REPLY"]}],
        })),
        _ => Reply::Status(404, "{}".into()),
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "tools:\n  tool_search: {{ranking: reference}}\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\n    timeout_s: 5\nmcp_servers:\n  everything:\n    command: \"{}\"\n    args: [stdio]\n",
            gateway.url,
            everything_bin().display()
        ),
    )
    .unwrap();
    // The second turn answers only if the search result the model got holds both tools, the
    // local one first (the shorter text with the same two "echo"s).
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: tool_search\n        arguments: {queries: [echo]}\n  - match: '\"matches\":[\"mcp_everything_echo\",\"connectors__gmail__ECHO_REPLY\"]'\n    text: Both kinds found.\n",
    )
    .unwrap();
    let lines = chat(dir.path());
    assert_eq!(last_text(&lines), ("Both kinds found.", "completed"));
    let searches = gateway.seen_at("search");
    assert_eq!(searches.len(), 1);
    assert_eq!(searches[0].body, json!({"queries": ["echo"]}));
    assert_eq!(
        searches[0].auth.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
}

#[test]
fn a_connector_batch_in_chat_runs_in_order_with_the_second_denied() {
    let gateway = MockGateway::start(|path, body| match path {
        "execute" => Reply::Json(json!({"ok": true, "data": {"ran": body["tool"]}})),
        _ => Reply::Status(404, "{}".into()),
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "tools:\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\napprovals:\n  require_approval: [connectors__notion__QUERY]\n",
            gateway.url
        ),
    )
    .unwrap();
    let calls = json!({"calls": [
        {"name": "connectors__gmail__SEND_EMAIL", "arguments": {"to": "a@example.com"}},
        {"name": "connectors__notion__QUERY", "arguments": {}},
        {"name": "connectors__linear__CREATE_ISSUE", "arguments": {"title": "x"}},
    ]});
    // The model's next turn answers only if it read the three results spliced in order, the
    // second refused.
    let spliced = r#"{"index":1,"name":"connectors__notion__QUERY","error":{"code":"DENIED""#;
    std::fs::write(
        dir.path().join("script.yaml"),
        format!(
            "turns:\n  - tool_calls:\n      - name: tool_call\n        arguments: {calls}\n  - match: '{spliced}'\n    text: Two of three ran.\n"
        ),
    )
    .unwrap();
    let lines = chat(dir.path());
    assert_eq!(last_text(&lines), ("Two of three ran.", "completed"));
    let finished: Vec<(&str, &str, &str)> = lines
        .iter()
        .filter(|l| l["type"] == "tool_call_finished")
        .map(|l| {
            (
                l["tool"].as_str().unwrap(),
                l["underlying_tool"].as_str().unwrap(),
                l["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        finished,
        [
            ("tool_call", "connectors__gmail__SEND_EMAIL", "ok"),
            ("tool_call", "connectors__notion__QUERY", "denied"),
            ("tool_call", "connectors__linear__CREATE_ISSUE", "ok"),
        ]
    );
    // One request per entry that ran, in input order; the denied one never reached the gateway.
    let executed: Vec<String> = gateway
        .seen_at("execute")
        .into_iter()
        .map(|s| s.body["tool"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(executed, ["GMAIL_SEND_EMAIL", "LINEAR_CREATE_ISSUE"]);
}

#[test]
fn connection_required_is_answered_with_manage_connections() {
    let gateway = MockGateway::start(|path, _| match path {
        "execute" => Reply::Json(
            json!({"ok": false, "error": {"code": "CONNECTION_REQUIRED", "message": "gmail is not connected"}}),
        ),
        "connections/gmail" => {
            Reply::Json(json!({"connect_url": "https://connect.example/gmail/abc"}))
        }
        "connections" => Reply::Json(
            json!({"connectors": [{"name": "gmail", "connected": false, "connect_url": "https://connect.example/gmail/abc"}]}),
        ),
        _ => Reply::Status(404, "{}".into()),
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "tools:\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\n",
            gateway.url
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: tool_call\n        arguments: {calls: [{name: connectors__gmail__SEND_EMAIL, arguments: {to: a}}]}\n  - match: CONNECTION_REQUIRED\n    tool_calls:\n      - name: manage_connections\n        arguments: {action: connect, connector: gmail}\n  - match: https://connect.example/gmail/abc\n    text: Open the link to connect Gmail.\n",
    )
    .unwrap();
    let lines = chat(dir.path());
    assert_eq!(
        last_text(&lines),
        ("Open the link to connect Gmail.", "completed")
    );
    let paths: Vec<String> = gateway.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["execute", "connections/gmail"]);
}

#[test]
fn manage_connections_switches_on_a_declared_server_and_its_tools_are_searchable() {
    if !servers_available("manage_connections_switches_on_a_declared_server") {
        return;
    }
    let gateway = MockGateway::start(|_, _| Reply::Json(json!({})));
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "# my settings\ntools:\n  tool_search: {{ranking: reference}}\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\nmcp_servers:\n  everything:\n    command: \"{}\"\n    args: [stdio]\n    enabled: false  # off until needed\n",
        gateway.url,
        everything_bin().display()
    );
    std::fs::write(dir.path().join("troupe.yaml"), &config).unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: tool_search\n        arguments: {queries: [echo]}\n  - match: '\"matches\":[]'\n    tool_calls:\n      - name: manage_connections\n        arguments: {action: enable, server: everything}\n  - match: switched on\n    tool_calls:\n      - name: tool_search\n        arguments: {queries: [echo]}\n  - match: mcp_everything_echo\n    text: Echo is there now.\n",
    )
    .unwrap();
    let lines = chat(dir.path());
    assert_eq!(last_text(&lines), ("Echo is there now.", "completed"));
    let after = std::fs::read_to_string(dir.path().join("troupe.yaml")).unwrap();
    assert_eq!(
        after,
        config.replace("enabled: false  # off", "enabled: true  # off"),
        "only that key changed"
    );
}

/// Every file under a folder, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(files_under(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The gateway token reaches the gateway and nothing else: a command the model runs does not
/// get its variable, and the session store (with everything the turn wrote) never holds it.
#[test]
fn the_gateway_token_reaches_no_tool_script_or_store() {
    let gateway = MockGateway::start(|_, _| Reply::Json(json!({"ok": true, "data": "fine"})));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "tools:\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\n",
            gateway.url
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        format!(
            "turns:\n  - tool_calls:\n      - name: terminal\n        arguments: {{command: \"echo gateway-var=[${TOKEN_ENV}]\"}}\n      - name: tool_call\n        arguments: {{calls: [{{name: connectors__gmail__SEND_EMAIL, arguments: {{to: a}}}}]}}\n  - match: 'gateway-var=[]'\n    text: The variable was empty.\n"
        ),
    )
    .unwrap();
    let lines = chat(dir.path());
    assert_eq!(last_text(&lines), ("The variable was empty.", "completed"));
    assert_eq!(gateway.seen_at("execute").len(), 1);
    assert_eq!(
        gateway.seen()[0].auth.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let stored = files_under(&dir.path().join("home"));
    let mut wrote_the_turn = false;
    for file in &stored {
        let bytes = std::fs::read(file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(TOKEN), "the token is in {}", file.display());
        wrote_the_turn |= text.contains("gateway-var=[]");
    }
    assert!(
        wrote_the_turn,
        "the session store kept the turn: {stored:?}"
    );
}

/// A gateway that never answers costs the turn at most `timeout_s`: the search answers with the
/// local tools and says the gateway was unreachable, and the turn goes on.
#[test]
fn a_hung_gateway_leaves_the_turn_its_local_results() {
    if !servers_available("a_hung_gateway_leaves_the_turn_its_local_results") {
        return;
    }
    let gateway = MockGateway::start(|_, _| Reply::Hang);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "tools:\n  tool_search: {{ranking: reference}}\n  connectors:\n    url: {}\n    token_env: {TOKEN_ENV}\n    timeout_s: 1\nmcp_servers:\n  everything:\n    command: \"{}\"\n    args: [stdio]\n",
            gateway.url,
            everything_bin().display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: tool_search\n        arguments: {queries: [echo]}\n  - match: '\"reason\":\"unreachable\"'\n    text: Local tools only.\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let lines = chat(dir.path());
    assert_eq!(last_text(&lines), ("Local tools only.", "completed"));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(gateway.seen_at("search").len(), 1);
}
