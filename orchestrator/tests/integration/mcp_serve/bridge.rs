//! The bridge, the token, hooks, approvals, cancellation and `list_changed`, over stdio and
//! HTTP (see the module doc of [`super`]).

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use super::{TOKEN, World};
use crate::support::mcp_servers::{everything_bin, time_server};

/// The environment of the `bridge` scenario: find the time server's tool and call it.
const FIND_AND_CALL: [(&str, &str); 3] = [
    ("TROUPE_QUERY", "current time timezone"),
    ("TROUPE_TOOL", "mcp_time_get_current_time"),
    ("TROUPE_ARGS", r#"{"timezone": "UTC"}"#),
];

/// What the `bridge` scenario must have seen, whatever the transport.
fn check_found_and_called(seen: &Value) {
    let tools = &seen["tools"];
    assert_eq!(tools["tool_search"]["read_only"], json!(true), "{tools}");
    assert_eq!(tools["tool_describe"]["read_only"], json!(true), "{tools}");
    assert_eq!(tools["tool_call"]["read_only"], json!(false), "{tools}");
    assert!(
        tools.get("terminal").is_none(),
        "no toolset was asked for, so only the bridge is offered: {tools}"
    );
    let search = &seen["search"];
    assert_eq!(search["is_error"], json!(false), "{search}");
    let found: Value = serde_json::from_str(search["text"].as_str().unwrap()).unwrap();
    let matches = &found["results"][0]["matches"];
    assert_eq!(matches[0], json!("mcp_time_get_current_time"), "{found}");
    let describe = seen["describe"]["text"].as_str().unwrap();
    assert!(describe.contains("\"timezone\""), "{describe}");
    let call = &seen["call"];
    assert_eq!(call["is_error"], json!(false), "{call}");
    let answer: Value = serde_json::from_str(call["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer["timezone"], json!("UTC"), "{answer}");
    assert!(
        answer["datetime"]
            .as_str()
            .is_some_and(|d| d.ends_with("+00:00")),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_finds_and_calls_a_servers_tool_over_stdio() {
    let Some(world) = World::new("mcp_serve stdio bridge", "") else {
        return;
    };
    let seen = world.stdio("bridge", &[], &FIND_AND_CALL).await;
    check_found_and_called(&seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_finds_and_calls_a_servers_tool_over_http_and_needs_the_token() {
    let Some(world) = World::new("mcp_serve http bridge", "") else {
        return;
    };
    let server = world.http(&[]).await;
    let seen = world
        .client("bridge", &server.target(TOKEN), &FIND_AND_CALL)
        .await;
    check_found_and_called(&seen);

    // Without the token, or with another, nothing is served.
    let client = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    for token in [None, Some("not-the-token-of-this-server")] {
        let mut request = client
            .post(&server.url)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "token {token:?}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("token")),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_bridged_call_reports_progress_over_http() {
    let Some(world) = World::new("mcp_serve progress", "") else {
        return;
    };
    let server = world.http(&[]).await;
    let seen = world
        .client(
            "call",
            &server.target(TOKEN),
            &[
                (
                    "TROUPE_TOOL",
                    "mcp_everything_trigger-long-running-operation",
                ),
                ("TROUPE_ARGS", r#"{"duration": 3.5, "steps": 2}"#),
            ],
        )
        .await;
    assert_eq!(seen["is_error"], json!(false), "{seen}");
    let progress = seen["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "{seen}");
    let values: Vec<f64> = progress
        .iter()
        .filter_map(|p| p["progress"].as_f64())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress must grow: {values:?}"
    );
    assert!(
        progress[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("mcp_everything_trigger-long-running-operation")),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hooks_denial_is_a_tool_error_and_the_call_never_runs() {
    let Some(world) = World::new("mcp_serve hook denial", "") else {
        return;
    };
    // The hook denies get-sum, naming the tool troupe told it about on stdin and how the
    // client named it (`tool_call`, as a session's model would).
    let hook = world.path().join("guard.sh");
    std::fs::write(
        &hook,
        r#"#!/bin/sh
input=$(cat)
tool=$(printf '%s' "$input" | sed -n 's/.*"tool": *"\([^"]*\)".*/\1/p')
via=$(printf '%s' "$input" | sed -n 's/.*"called_as": *"\([^"]*\)".*/\1/p')
echo "{\"decision\": \"deny\", \"reason\": \"the guard refuses $tool (called as $via) today\"}"
"#,
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = world.path().join("troupe.yaml");
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str(&format!(
        "hooks:\n  pre_tool_call: {{command: \"{}\", timeout: 5s, tools: [mcp_everything_get-sum, terminal]}}\n",
        hook.display()
    ));
    std::fs::write(&config, yaml).unwrap();

    let denied = world
        .stdio(
            "call",
            &[],
            &[
                ("TROUPE_TOOL", "mcp_everything_get-sum"),
                ("TROUPE_ARGS", r#"{"a": 2, "b": 40}"#),
            ],
        )
        .await;
    assert_eq!(denied["is_error"], json!(true), "{denied}");
    let text = denied["text"].as_str().unwrap();
    assert!(
        text.contains("the guard refuses mcp_everything_get-sum (called as tool_call) today"),
        "{text}"
    );
    assert!(!text.contains("42"), "the sum ran: {text}");

    // A denied call with a side effect leaves none: the command was never started.
    let touched = world.path().join("touched-despite-the-hook");
    let args = json!({"command": format!("touch '{}'", touched.display())}).to_string();
    let denied = world
        .stdio(
            "direct",
            &["--toolsets", "core"],
            &[("TROUPE_TOOL", "terminal"), ("TROUPE_ARGS", args.as_str())],
        )
        .await;
    assert_eq!(denied["is_error"], json!(true), "{denied}");
    assert!(
        denied["text"]
            .as_str()
            .unwrap()
            .contains("the guard refuses terminal"),
        "{denied}"
    );
    assert!(!touched.exists(), "the denied command ran");

    // Another tool of the same server passes the hook untouched.
    let echoed = world
        .stdio(
            "call",
            &[],
            &[
                ("TROUPE_TOOL", "mcp_everything_echo"),
                ("TROUPE_ARGS", r#"{"message": "through"}"#),
            ],
        )
        .await;
    assert_eq!(echoed["is_error"], json!(false), "{echoed}");
    assert!(
        echoed["text"].as_str().unwrap().contains("through"),
        "{echoed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_asked_through_elicitation_and_refused_when_nobody_can_answer() {
    let Some(world) = World::new("mcp_serve approvals", "") else {
        return;
    };
    let config = world.path().join("troupe.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap().replace(
        "  unattended: deny\n",
        "  unattended: deny\n  require_approval: [mcp_everything_echo]\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let echo = [
        ("TROUPE_TOOL", "mcp_everything_echo"),
        ("TROUPE_ARGS", r#"{"message": "approved"}"#),
    ];

    let yes = world
        .stdio("call", &[], &[echo[0], echo[1], ("TROUPE_ELICIT", "once")])
        .await;
    assert_eq!(yes["is_error"], json!(false), "{yes}");
    assert!(yes["text"].as_str().unwrap().contains("approved"), "{yes}");
    let asked = yes["asked"][0].as_str().unwrap_or_default();
    assert!(asked.contains("mcp_everything_echo"), "{yes}");
    // The form decides this call only: nothing that would outlive it is offered ...
    assert_eq!(yes["offered"], json!(["once", "deny"]), "{yes}");
    // ... and an answer outside it is a no, not a standing allow for every connection.
    let always = world
        .stdio(
            "call",
            &[],
            &[echo[0], echo[1], ("TROUPE_ELICIT", "always")],
        )
        .await;
    assert_eq!(always["is_error"], json!(true), "{always}");
    assert!(
        always["text"].as_str().unwrap().contains("\"always\""),
        "{always}"
    );

    let no = world
        .stdio("call", &[], &[echo[0], echo[1], ("TROUPE_ELICIT", "deny")])
        .await;
    assert_eq!(no["is_error"], json!(true), "{no}");
    assert!(no["text"].as_str().unwrap().contains("not today"), "{no}");

    // A client without elicitation: nobody can be asked, so the call fails closed, saying why.
    let nobody = world.stdio("call", &[], &echo).await;
    assert_eq!(nobody["is_error"], json!(true), "{nobody}");
    let text = nobody["text"].as_str().unwrap();
    assert!(
        text.contains("elicitation") && text.contains("troupe serve"),
        "{text}"
    );
    assert!(!text.contains("Echo: approved"), "{text}");

    // Over HTTP each request is asked of the connection that made it: of two clients calling
    // at the same time, one answers through elicitation; the other (without it) waits in the
    // server's queue until a person answers there.
    let server = world.http(&[]).await;
    let target = server.target(TOKEN);
    let queue = server.url.replace("/mcp", "/api/approvals");
    let answering = [echo[0], echo[1], ("TROUPE_ELICIT", "once")];
    let queued = [echo[0], ("TROUPE_ARGS", r#"{"message": "from the queue"}"#)];
    let (yes, from_queue, answered) = tokio::join!(
        world.client("call", &target, &answering),
        world.client("call", &target, &queued),
        answer_from_queue(&queue, "from the queue", json!({"choice": "once"})),
    );
    assert_eq!(yes["is_error"], json!(false), "{yes}");
    assert_eq!(yes["asked"].as_array().map(Vec::len), Some(1), "{yes}");
    assert_eq!(answered["answered"], json!("once"), "{answered}");
    assert_eq!(from_queue["is_error"], json!(false), "{from_queue}");
    assert!(
        from_queue["text"]
            .as_str()
            .unwrap()
            .contains("from the queue"),
        "{from_queue}"
    );
}

/// Waits until `queue` lists a request whose `message` argument is `message`, checking the
/// queue refuses a caller without the token, then answers it with `body`; returns the reply.
async fn answer_from_queue(queue: &str, message: &str, body: Value) -> Value {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // A server started by the client listens a moment later.
    let anonymous = loop {
        match client.get(queue).send().await {
            Ok(reply) => break reply,
            Err(e) if std::time::Instant::now() < deadline => {
                assert!(e.is_connect(), "{e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the queue never listened: {e}"),
        }
    };
    assert_eq!(
        anonymous.status(),
        401,
        "the queue answered without the token"
    );
    let request_id = loop {
        let listed: Value = client
            .get(queue)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let waiting = listed["approvals"].as_array().and_then(|all| {
            all.iter()
                .find(|p| p["arguments"]["message"] == json!(message))
                .cloned()
        });
        if let Some(waiting) = waiting {
            assert_eq!(waiting["tool"], json!("mcp_everything_echo"), "{waiting}");
            break waiting["request_id"].as_str().unwrap().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing waited in the queue: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    client
        .post(format!("{queue}/{request_id}"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_with_queue_lets_a_person_answer_over_http() {
    let Some(world) = World::new("mcp_serve queue", "") else {
        return;
    };
    let config = world.path().join("troupe.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap().replace(
        "  unattended: deny\n",
        "  unattended: deny\n  require_approval: [mcp_everything_echo]\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let at = format!("127.0.0.1:{port}");
    let queue = format!("http://{at}/api/approvals");
    let env = [
        ("TROUPE_TOOL", "mcp_everything_echo"),
        ("TROUPE_ARGS", r#"{"message": "ask the queue"}"#),
        ("TROUPE_SERVE_TOKEN", TOKEN),
    ];
    let serve = ["--queue", at.as_str()];
    let (refused, answered) = tokio::join!(
        world.stdio("call", &serve, &env),
        answer_from_queue(
            &queue,
            "ask the queue",
            json!({"choice": "deny", "reason": "not on a Friday"}),
        ),
    );
    assert_eq!(answered["answered"], json!("deny"), "{answered}");
    assert_eq!(refused["is_error"], json!(true), "{refused}");
    let text = refused["text"].as_str().unwrap();
    assert!(text.contains("not on a Friday"), "{text}");
    assert!(!text.contains("Echo: ask the queue"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_cancelled_by_the_client_ends_and_its_process_is_gone() {
    let Some(world) = World::new("mcp_serve cancellation", "") else {
        return;
    };
    // A number no other test sleeps for, so the process can be found by its command line.
    let marker = format!("sleep 97.{}", std::process::id());
    let args = json!({"command": format!("{marker} && echo never")}).to_string();
    let env = [
        ("TROUPE_TOOL", "terminal"),
        ("TROUPE_ARGS", args.as_str()),
        ("TROUPE_MARKER", marker.as_str()),
        ("TROUPE_CANCEL_AFTER", "3"),
    ];
    for transport in ["stdio", "http"] {
        let seen = match transport {
            "stdio" => world.stdio("cancel", &["--toolsets", "core"], &env).await,
            _ => {
                let server = world.http(&["--toolsets", "core"]).await;
                world.client("cancel", &server.target(TOKEN), &env).await
            }
        };
        assert_eq!(seen["cancelled"], json!(true), "{transport}: {seen}");
        assert!(
            !seen["running_before"].as_array().unwrap().is_empty(),
            "{transport}: the command never ran: {seen}"
        );
        assert_eq!(seen["left_after"], json!([]), "{transport}: {seen}");
        assert!(
            seen["gone_after_seconds"].is_number(),
            "{transport}: {seen}"
        );
        assert!(
            !seen["progress"].as_array().unwrap().is_empty(),
            "{transport}: no progress while it ran: {seen}"
        );
        assert_eq!(seen["still_answers"], json!(true), "{transport}: {seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_arrives_when_a_server_that_started_late_brings_its_tools() {
    let Some(world) = World::new("mcp_serve list_changed", "") else {
        return;
    };
    let Some(time) = time_server() else {
        return;
    };
    // Only server-everything is ready at once; the time server starts once the client has
    // listed the tools (the client writes `listed` then), however slow the machine is.
    let listed = world.path().join("listed");
    let yaml = format!(
        "mcp_servers:\n  everything:\n    command: \"{}\"\n    args: [stdio]\n  late:\n    command: sh\n    args: [-c, \"while [ ! -e '{}' ]; do sleep 0.1; done; exec '{}' --local-timezone UTC\"]\n    connect_timeout: 60\n",
        everything_bin().display(),
        listed.display(),
        time.display()
    );
    std::fs::write(world.path().join("troupe.yaml"), yaml).unwrap();
    let listed = listed.display().to_string();
    let seen = world
        .stdio(
            "list_changed",
            &[],
            &[
                ("TROUPE_WAIT", "40"),
                ("TROUPE_LISTED", listed.as_str()),
                ("TROUPE_EXPECT", "mcp_late_get_current_time"),
            ],
        )
        .await;
    assert_eq!(seen["changed"], json!(true), "{seen}");
    let before = seen["search_before"].as_str().unwrap();
    let after = seen["search_after"].as_str().unwrap();
    assert!(!before.contains("mcp_late_get_current_time"), "{before}");
    assert!(after.contains("mcp_late_get_current_time"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_arrives_when_a_server_is_switched_on() {
    use crate::support::gateway::{MockGateway, Reply};
    let Some(world) = World::new("mcp_serve list_changed on enable", "") else {
        return;
    };
    // server-everything is declared but off; `manage_connections` (offered directly with the
    // connectors toolset) switches it on, as a person's client would.
    let gateway = MockGateway::start(|_, _| Reply::Json(json!({})));
    let yaml = format!(
        "tools:\n  connectors:\n    url: {}\nmcp_servers:\n  everything:\n    command: \"{}\"\n    args: [stdio]\n    enabled: false\n",
        gateway.url,
        everything_bin().display()
    );
    std::fs::write(world.path().join("troupe.yaml"), yaml).unwrap();
    let seen = world
        .stdio(
            "list_changed",
            &["--toolsets", "connectors"],
            &[
                ("TROUPE_WAIT", "40"),
                ("TROUPE_TOOL", "manage_connections"),
                (
                    "TROUPE_ARGS",
                    r#"{"action": "enable", "server": "everything"}"#,
                ),
                ("TROUPE_QUERY", "echo back a message"),
                ("TROUPE_EXPECT", "mcp_everything_echo"),
            ],
        )
        .await;
    assert_eq!(seen["called"]["is_error"], json!(false), "{seen}");
    assert_eq!(seen["changed"], json!(true), "{seen}");
    let found = seen["found"]["text"].as_str().unwrap_or_default();
    assert!(found.contains("mcp_everything_echo"), "{seen}");
    let yaml = std::fs::read_to_string(world.path().join("troupe.yaml")).unwrap();
    assert!(yaml.contains("enabled: true"), "{yaml}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_reaches_no_built_in_tool_even_when_search_defers_it() {
    let Some(world) = World::new(
        "mcp_serve bridge scope",
        "tool_search:\n  defer: [terminal, session_search]\ntoolsets:\n  enabled: [core, session_search, mcp-everything, mcp-time]\n",
    ) else {
        return;
    };
    let touched = world.path().join("touched-by-the-bridge");
    let args = json!({"command": format!("touch '{}'", touched.display())}).to_string();
    for (tool, args) in [
        ("terminal", args.as_str()),
        ("session_search", r#"{"query": "anything"}"#),
    ] {
        let seen = world
            .stdio("call", &[], &[("TROUPE_TOOL", tool), ("TROUPE_ARGS", args)])
            .await;
        assert_eq!(seen["is_error"], json!(true), "{tool}: {seen}");
        let text = seen["text"].as_str().unwrap();
        assert!(
            text.contains(tool) && text.contains("tool_search"),
            "{tool}: {text}"
        );
    }
    assert!(
        !touched.exists(),
        "the terminal command ran through the bridge"
    );
    // The servers' tools are still reached.
    let echoed = world
        .stdio(
            "call",
            &[],
            &[
                ("TROUPE_TOOL", "mcp_everything_echo"),
                ("TROUPE_ARGS", r#"{"message": "still here"}"#),
            ],
        )
        .await;
    assert_eq!(echoed["is_error"], json!(false), "{echoed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolsets_on_request_keep_the_configs_blocked_tools_out() {
    let Some(world) = World::new(
        "mcp_serve toolsets blocked",
        "toolsets:\n  blocked_tools: [terminal]\n",
    ) else {
        return;
    };
    let seen = world.stdio("list", &["--toolsets", "core"], &[]).await;
    let tools = seen["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("read_file")), "{seen}");
    assert!(
        !tools.contains(&json!("terminal")),
        "toolsets.blocked_tools names terminal: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_host_lets_a_server_answer_the_name_clients_use() {
    let Some(world) = World::new("mcp_serve allowed host", "") else {
        return;
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    let client = reqwest::Client::new();
    let status_for = |url: String| {
        let client = client.clone();
        let initialize = initialize.clone();
        async move {
            client
                .post(&url)
                .header("Host", "troupe.example.org")
                .header("Accept", "application/json, text/event-stream")
                .bearer_auth(TOKEN)
                .json(&initialize)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    // By default a foreign Host is refused (it may be a DNS-rebinding page) ...
    let plain = world.http(&[]).await;
    let refused = status_for(plain.url.clone()).await;
    assert!(refused.is_client_error(), "{refused}");
    // ... and answered once named.
    let named = world.http(&["--allowed-host", "troupe.example.org"]).await;
    let answered = status_for(named.url.clone()).await;
    assert!(answered.is_success(), "{answered}");
}
