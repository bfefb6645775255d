//! Real MCP servers from npm and PyPI (installed by scripts/install-test-deps.sh): each one over
//! stdio, server-everything over streamable HTTP, many calls on one connection, cancellation,
//! and the include filter.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe::tools::mcp::{ServerState, ToolFilter};
use troupe::tools::{CallContext, Content, ToolKind};
use troupe_tests::mcp_servers;

use super::{args, call, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_tools_keep_schema_hints_and_content_kinds() {
    if !mcp_servers::servers_available(
        "server_everything_tools_keep_schema_hints_and_content_kinds",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![mcp_servers::everything("everything")], dir.path()).await;
    let status = &started.statuses[0];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.transport, "stdio");
    assert!(status.tool_count >= 10, "{status:?}");
    let view = started.view();

    let echo = view
        .get("mcp_everything_echo")
        .expect("echo is registered under its troupe name");
    assert_eq!(echo.toolset.as_deref(), Some("mcp-everything"));
    assert_eq!(echo.kind, ToolKind::Mcp);
    assert!(echo.hints.read_only && !echo.hints.destructive && echo.hints.idempotent);
    assert!(
        !echo.hints.parallel_safe,
        "supports_parallel_tool_calls defaults to false"
    );
    assert_eq!(echo.parameters()["properties"]["message"]["type"], "string");
    assert!(
        view.contains("mcp_everything_get-tiny-image"),
        "dashes are kept"
    );

    let result = call(
        &view,
        "mcp_everything_echo",
        json!({"message": "hello troupe"}),
    )
    .await;
    assert!(!result.is_error, "{result:?}");
    assert_eq!(result.to_model_text(), "Echo: hello troupe");

    let sum = call(&view, "mcp_everything_get-sum", json!({"a": 2, "b": 3})).await;
    assert!(sum.to_model_text().contains('5'), "{sum:?}");

    let image = call(&view, "mcp_everything_get-tiny-image", json!({})).await;
    assert!(
        image.content.iter().any(|c| matches!(c, Content::Image { mime_type, data } if mime_type == "image/png" && !data.is_empty())),
        "{image:?}"
    );

    let resource = call(
        &view,
        "mcp_everything_get-resource-reference",
        json!({"resourceType": "Text", "resourceId": 1}),
    )
    .await;
    assert!(
        resource
            .content
            .iter()
            .any(|c| matches!(c, Content::Resource { uri, .. } if !uri.is_empty())),
        "{resource:?}"
    );

    let structured = call(
        &view,
        "mcp_everything_get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert!(!structured.is_error, "{structured:?}");
    assert!(
        structured
            .structured
            .as_ref()
            .is_some_and(|s| s.get("temperature").is_some()),
        "{structured:?}"
    );

    // A server-side argument error comes back as an error result, not a panic or a hang.
    let bad = call(&view, "mcp_everything_get-sum", json!({"a": "two"})).await;
    assert!(bad.is_error, "{bad:?}");
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_reads_what_it_wrote_and_marks_readers() {
    if !mcp_servers::servers_available("server_filesystem_reads_what_it_wrote_and_marks_readers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let started = start(vec![mcp_servers::filesystem("fs", &root)], dir.path()).await;
    assert_eq!(
        started.statuses[0].state,
        ServerState::Connected,
        "{:?}",
        started.statuses[0]
    );
    let view = started.view();
    let tools = started.manager.tools("fs").unwrap();
    let readers = tools.iter().filter(|t| t.hints.read_only).count();
    assert!(
        readers >= 5 && readers < tools.len(),
        "some tools read, some write: {tools:?}"
    );
    assert!(view.get("mcp_fs_read_text_file").unwrap().hints.read_only);
    assert!(!view.get("mcp_fs_write_file").unwrap().hints.read_only);

    let file = root.join("note.txt");
    let wrote = call(
        &view,
        "mcp_fs_write_file",
        json!({"path": file, "content": "written through troupe"}),
    )
    .await;
    assert!(!wrote.is_error, "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "written through troupe"
    );
    let read = call(&view, "mcp_fs_read_text_file", json!({"path": file})).await;
    assert!(
        read.to_model_text().contains("written through troupe"),
        "{read:?}"
    );
    let outside = call(
        &view,
        "mcp_fs_read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert!(
        outside.is_error,
        "the server refuses paths outside its root: {outside:?}"
    );
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_memory_keeps_state_between_calls() {
    if !mcp_servers::servers_available("server_memory_keeps_state_between_calls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = start(
        vec![mcp_servers::memory(
            "memory",
            &dir.path().join("memory.jsonl"),
        )],
        dir.path(),
    )
    .await;
    assert_eq!(
        started.statuses[0].state,
        ServerState::Connected,
        "{:?}",
        started.statuses[0]
    );
    let view = started.view();
    let created = call(
        &view,
        "mcp_memory_create_entities",
        json!({"entities": [{"name": "troupe", "entityType": "project", "observations": ["written in Rust"]}]}),
    )
    .await;
    assert!(!created.is_error, "{created:?}");
    let graph = call(&view, "mcp_memory_read_graph", json!({})).await;
    assert!(
        graph.to_model_text().contains("written in Rust"),
        "{graph:?}"
    );
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_servers_time_and_git_answer() {
    if !mcp_servers::servers_available("python_servers_time_and_git_answer") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    mcp_servers::init_git_repo(&repo).unwrap();
    let started = start(
        vec![mcp_servers::time("time"), mcp_servers::git("git", &repo)],
        dir.path(),
    )
    .await;
    for status in &started.statuses {
        assert_eq!(status.state, ServerState::Connected, "{status:?}");
    }
    let view = started.view();
    let now = call(
        &view,
        "mcp_time_get_current_time",
        json!({"timezone": "UTC"}),
    )
    .await;
    assert!(!now.is_error, "{now:?}");
    assert!(now.to_model_text().contains("UTC"), "{now:?}");

    let log = call(&view, "mcp_git_git_log", json!({"repo_path": repo})).await;
    assert!(!log.is_error, "{log:?}");
    assert!(log.to_model_text().contains("first"), "{log:?}");
    assert!(view.contains("mcp_git_git_commit"));
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    if !mcp_servers::servers_available("server_everything_over_streamable_http") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = mcp_servers::free_port().unwrap();
    let _server = mcp_servers::spawn_everything_http(port).await.unwrap();
    let config =
        troupe::tools::mcp::McpServerConfig::http("remote", format!("http://127.0.0.1:{port}/mcp"));
    let started = start(vec![config], dir.path()).await;
    let status = &started.statuses[0];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.transport, "http");
    let view = started.view();
    let result = call(&view, "mcp_remote_echo", json!({"message": "over http"})).await;
    assert_eq!(result.to_model_text(), "Echo: over http", "{result:?}");
    let calls = (0..8).map(|i| {
        let view = view.clone();
        async move {
            call(
                &view,
                "mcp_remote_echo",
                json!({"message": format!("h{i}")}),
            )
            .await
        }
    });
    for (i, result) in futures_join(calls).await.into_iter().enumerate() {
        assert_eq!(result.to_model_text(), format!("Echo: h{i}"));
    }
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_connection() {
    if !mcp_servers::servers_available("concurrent_calls_share_one_connection") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![mcp_servers::everything("everything")], dir.path()).await;
    let pid = started.status("everything").pid;
    assert!(pid.is_some());
    let view = started.view();
    let calls = (0..32).map(|i| {
        let view = view.clone();
        async move {
            call(
                &view,
                "mcp_everything_echo",
                json!({"message": format!("m{i}")}),
            )
            .await
        }
    });
    let results = futures_join(calls).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(
            result.to_model_text(),
            format!("Echo: m{i}"),
            "each answer goes back to its own call"
        );
    }
    assert_eq!(
        started.status("everything").pid,
        pid,
        "still the one process and connection"
    );
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_long_call_is_cancelled_and_the_connection_stays_usable() {
    if !mcp_servers::servers_available(
        "a_stopped_long_call_is_cancelled_and_the_connection_stays_usable",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = start(vec![mcp_servers::everything("everything")], dir.path()).await;
    let view = started.view();
    let stop = CancellationToken::new();
    let long = {
        let view = view.clone();
        let ctx = CallContext::new("s", "long", stop.clone());
        tokio::spawn(async move {
            view.call(
                "mcp_everything_trigger-long-running-operation",
                args(json!({"duration": 600, "steps": 600})),
                ctx,
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    let stopped = long.await.unwrap();
    assert!(stopped.is_error);
    assert!(stopped.to_model_text().contains("cancelled"), "{stopped:?}");
    let after = call(
        &view,
        "mcp_everything_echo",
        json!({"message": "still here"}),
    )
    .await;
    assert_eq!(after.to_model_text(), "Echo: still here");
    started.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_filter_registers_only_the_named_tools() {
    if !mcp_servers::servers_available("include_filter_registers_only_the_named_tools") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = mcp_servers::everything("everything").with_tool_filter(ToolFilter {
        include: Some(vec!["echo".into(), "get-s*".into()]),
        exclude: Vec::new(),
    });
    let started = start(vec![config], dir.path()).await;
    let mut names: Vec<String> = started
        .view()
        .tools()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "mcp_everything_echo",
            "mcp_everything_get-structured-content",
            "mcp_everything_get-sum"
        ]
    );
    assert_eq!(started.statuses[0].tool_count, 3);
    started.manager.shutdown().await;
}

/// Runs the futures as separate tasks, all at once, and collects their outputs in order.
async fn futures_join<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}
