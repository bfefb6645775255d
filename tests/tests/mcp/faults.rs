//! Faults, against our own fault server (tests/src/bin/fault_server.rs): a crash mid-call and
//! the reconnect after it, a server that stays down (backoff, clear errors, no hang), stops and
//! timeouts reaching the server as MCP cancellation, `tools/list_changed`, error results, a
//! server that never answers `initialize`, broken config entries, stderr logs, and shutdown
//! killing the whole process group.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe::tools::mcp::{McpServerConfig, McpServers, ServerState};
use troupe::tools::{CallContext, Content, ViewSpec};

use super::{args, call, eventually, fault_server, start, start_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_an_error_and_the_next_call_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![fault_server("fault", dir.path(), &[])], dir.path()).await;
    assert_eq!(
        started.statuses[0].state,
        ServerState::Connected,
        "{:?}",
        started.statuses[0]
    );
    let view = started.view();
    let first_pid = call(&view, "mcp_fault_pid", json!({}))
        .await
        .to_model_text();

    let crashed = call(&view, "mcp_fault_crash", json!({})).await;
    assert!(crashed.is_error);
    assert!(crashed.to_model_text().contains("went away"), "{crashed:?}");
    assert!(eventually(|| started.status("fault").state == ServerState::Failed).await);
    assert!(started.status("fault").last_error.is_some());

    let second_pid = call(&view, "mcp_fault_pid", json!({})).await;
    assert!(!second_pid.is_error, "{second_pid:?}");
    assert_ne!(
        second_pid.to_model_text(),
        first_pid,
        "a new server process answers"
    );
    assert_eq!(started.status("fault").state, ServerState::Connected);
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_down_gives_clear_errors_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let refuse = dir.path().join("refuse");
    let refuse_arg = refuse.to_string_lossy().into_owned();
    let started = start(
        vec![fault_server(
            "fault",
            dir.path(),
            &["--refuse-start-if", &refuse_arg],
        )],
        dir.path(),
    )
    .await;
    let view = started.view();

    let crashed = call(&view, "mcp_fault_crash", json!({"refuse_restart": true})).await;
    assert!(crashed.is_error);
    // The reopen fails: the server exits at once.
    let first = call(&view, "mcp_fault_echo", json!({"text": "x"})).await;
    assert!(first.is_error);
    assert!(
        first.to_model_text().contains("could not be reopened"),
        "{first:?}"
    );
    // Within the backoff window troupe does not even try; it says when it will.
    let second = call(&view, "mcp_fault_echo", json!({"text": "x"})).await;
    assert!(second.is_error);
    assert!(second.to_model_text().contains("is down"), "{second:?}");
    let status = started.status("fault");
    assert_eq!(status.state, ServerState::Failed);
    assert!(status.last_error.is_some());
    // Its stderr went to its log file, not to our terminal.
    let log = std::fs::read_to_string(status.log_file.unwrap()).unwrap();
    assert!(log.contains("refusing to start"), "{log}");

    std::fs::remove_file(&refuse).unwrap();
    let count = started.manager.reconnect("fault").await.unwrap();
    assert!(count >= 6);
    let back = call(&view, "mcp_fault_echo", json!({"text": "back"})).await;
    assert_eq!(back.to_model_text(), "back");
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_sends_mcp_cancellation_to_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![fault_server("fault", dir.path(), &[])], dir.path()).await;
    let view = started.view();
    let stop = CancellationToken::new();
    let slow = {
        let view = view.clone();
        let ctx = CallContext::new("s", "slow", stop.clone());
        tokio::spawn(async move {
            view.call(
                "mcp_fault_slow",
                args(json!({"seconds": 600, "tag": "stop"})),
                ctx,
            )
            .await
        })
    };
    let started_marker = dir.path().join("started-stop");
    assert!(
        eventually(|| started_marker.exists()).await,
        "the call reached the server"
    );
    stop.cancel();
    let result = slow.await.unwrap();
    assert!(result.is_error);
    assert!(result.to_model_text().contains("cancelled"), "{result:?}");
    let cancelled_marker = dir.path().join("cancelled-stop");
    assert!(
        eventually(|| cancelled_marker.exists()).await,
        "the server saw notifications/cancelled"
    );
    // The connection is still good.
    assert_eq!(
        call(&view, "mcp_fault_echo", json!({"text": "ok"}))
            .await
            .to_model_text(),
        "ok"
    );
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_cancels_the_call_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = fault_server("fault", dir.path(), &[]).with_timeout(Duration::from_millis(500));
    let started = start(vec![config], dir.path()).await;
    let view = started.view();
    let result = call(
        &view,
        "mcp_fault_slow",
        json!({"seconds": 600, "tag": "timeout"}),
    )
    .await;
    assert!(result.is_error);
    assert!(
        result.to_model_text().contains("took longer than"),
        "{result:?}"
    );
    let marker = dir.path().join("cancelled-timeout");
    assert!(
        eventually(|| marker.exists()).await,
        "the server saw notifications/cancelled"
    );
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_refreshes_the_registry_and_the_search_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![fault_server("fault", dir.path(), &[])], dir.path()).await;
    let view = started.view();
    assert!(!view.contains("mcp_fault_bonus"));
    let before = started.registry.version();
    let fingerprint = view.fingerprint();

    let added = call(&view, "mcp_fault_add_tool", json!({})).await;
    assert_eq!(added.to_model_text(), "bonus added");
    assert!(
        eventually(|| started.registry.version() != before).await,
        "the registry version moved"
    );
    assert!(eventually(|| view.refreshed().unwrap().contains("mcp_fault_bonus")).await);
    let fresh = view.refreshed().unwrap();
    assert_ne!(
        fresh.fingerprint(),
        fingerprint,
        "the catalog version changed with the tools"
    );
    assert_eq!(
        fresh.get("mcp_fault_bonus").unwrap().toolset.as_deref(),
        Some("mcp-fault")
    );
    assert_eq!(
        call(&fresh, "mcp_fault_bonus", json!({}))
            .await
            .to_model_text(),
        "bonus tool here"
    );
    assert_eq!(
        started.status("fault").tool_count,
        fresh
            .narrow(ViewSpec::toolsets(["mcp-fault"]))
            .unwrap()
            .len()
    );
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_results_and_rich_content_map_to_tool_results() {
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![fault_server("fault", dir.path(), &[])], dir.path()).await;
    let view = started.view();
    let failed = call(&view, "mcp_fault_fail", json!({})).await;
    assert!(failed.is_error);
    assert_eq!(failed.to_model_text(), "the fault server failed on purpose");

    let rich = call(&view, "mcp_fault_rich", json!({})).await;
    assert!(!rich.is_error);
    assert_eq!(rich.content[0], Content::Text("rich answer".into()));
    assert!(
        matches!(&rich.content[1], Content::Image { mime_type, .. } if mime_type == "image/png")
    );
    assert!(
        matches!(&rich.content[2], Content::Resource { uri, text: Some(t), .. } if uri == "memo://fault/1" && t == "resource body")
    );
    assert_eq!(rich.structured, Some(json!({"answer": 42})));

    let hints = &view.get("mcp_fault_crash").unwrap().hints;
    assert!(hints.destructive && !hints.read_only);
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_initialises_times_out_and_the_others_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let mute = fault_server("mute", dir.path(), &["--never-initialize"])
        .with_connect_timeout(Duration::from_millis(800));
    let raw = json!({
        "broken": {"command": "x", "timeout": "soon"},
        "off": {"command": "x", "enabled": false},
    });
    let mut config = McpServers::parse(&raw, None);
    config.servers.push(mute);
    config
        .servers
        .push(fault_server("good", dir.path(), &[]).with_parallel_tool_calls(true));
    config.servers.push(McpServerConfig::stdio(
        "nosuch",
        "/nonexistent/troupe-mcp-server",
        Vec::<String>::new(),
    ));
    let started = start_config(&config, dir.path()).await;

    let mute = started.status("mute");
    assert_eq!(mute.state, ServerState::Failed);
    assert!(
        mute.last_error
            .as_deref()
            .unwrap()
            .contains("did not answer `initialize`"),
        "{mute:?}"
    );
    let nosuch = started.status("nosuch");
    assert_eq!(nosuch.state, ServerState::Failed);
    assert!(
        nosuch
            .last_error
            .as_deref()
            .unwrap()
            .contains("could not start"),
        "{nosuch:?}"
    );
    let broken = started.status("broken");
    assert_eq!(broken.state, ServerState::Failed);
    assert!(
        broken
            .last_error
            .as_deref()
            .unwrap()
            .contains("mcp_servers.broken.timeout"),
        "{broken:?}"
    );
    assert_eq!(started.status("off").state, ServerState::Disabled);

    let good = started.status("good");
    assert_eq!(good.state, ServerState::Connected);
    let view = started.view();
    assert!(view.get("mcp_fault_echo").is_none());
    let echo = view.get("mcp_good_echo").unwrap();
    assert!(
        echo.hints.parallel_safe,
        "supports_parallel_tool_calls reaches the hints"
    );
    assert_eq!(
        call(&view, "mcp_good_echo", json!({"text": "fine"}))
            .await
            .to_model_text(),
        "fine"
    );
    started.manager.shutdown().await;
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_grandchildren_and_removes_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    // A wrapper that leaves a grandchild behind, as npx and uv do.
    let script = format!(
        "sleep 600 & echo $! > '{}'; exec '{}' --state-dir '{}'",
        pid_file.display(),
        env!("CARGO_BIN_EXE_fault_server"),
        dir.path().display()
    );
    let config = McpServerConfig::stdio("wrapped", "/bin/sh", ["-c".to_string(), script]);
    let started = start(vec![config], dir.path()).await;
    assert_eq!(
        started.statuses[0].state,
        ServerState::Connected,
        "{:?}",
        started.statuses[0]
    );
    assert!(eventually(|| pid_file.exists()).await);
    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    let registry = started.registry.clone();
    assert!(registry.get("mcp_wrapped_echo").is_some());

    started.manager.shutdown().await;
    assert!(
        eventually(|| !alive(grandchild)).await,
        "the grandchild died with its group"
    );
    assert!(
        registry.get("mcp_wrapped_echo").is_none(),
        "the tools left the registry"
    );
}

/// Whether a process exists and is not a zombie.
#[cfg(target_os = "linux")]
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
