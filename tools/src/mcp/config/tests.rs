use super::*;
use serde_json::json;

#[test]
fn stdio_and_http_entries_parse_with_defaults() {
    let parsed = McpServers::parse(
        &json!({
            "fs": {"command": "npx", "args": ["-y", "server", 7], "env": {"DEBUG": 1}, "timeout": 20},
            "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Api-Key": "k"}, "supports_parallel_tool_calls": true,
                       "tools": {"include": ["get_*"]}}
        }),
        None,
    );
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    let fs = parsed.get("fs").unwrap();
    assert_eq!(fs.timeout, Duration::from_secs(20));
    assert_eq!(fs.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    assert!(!fs.supports_parallel_tool_calls);
    match &fs.transport {
        McpTransport::Stdio { args, env, .. } => {
            assert_eq!(args, &["-y", "server", "7"]);
            assert_eq!(env.get("DEBUG").map(String::as_str), Some("1"));
        }
        other => panic!("expected stdio, got {other:?}"),
    }
    let remote = parsed.get("remote").unwrap();
    assert!(remote.supports_parallel_tool_calls);
    assert!(remote.tools.admits("get_time"));
    assert!(!remote.tools.admits("set_time"));
    assert_eq!(remote.toolset(), "mcp-remote");
}

#[test]
fn one_broken_server_leaves_the_others() {
    let parsed = McpServers::parse(
        &json!({
            "good": {"command": "srv"},
            "typo": {"comand": "srv"},
            "badtype": {"command": "srv", "timeout": "soon"},
            "both": {"command": "srv", "url": "http://x/mcp"},
            "neither": {"enabled": true},
            "nested": {"command": "srv", "tools": {"include": ["a", 3]}},
        }),
        None,
    );
    assert_eq!(parsed.servers.len(), 1);
    assert_eq!(parsed.servers[0].name, "good");
    let find = |s: &str| parsed.errors.iter().find(|e| e.server == s).unwrap();
    let typo = find("typo");
    assert_eq!(typo.key, "comand");
    assert!(
        typo.message.contains("did you mean `command`"),
        "{}",
        typo.message
    );
    assert_eq!(find("badtype").key, "timeout");
    assert!(
        find("badtype")
            .to_string()
            .starts_with("mcp_servers.badtype.timeout:")
    );
    assert!(find("both").message.contains("both"));
    assert!(find("neither").message.contains("neither"));
    assert_eq!(find("nested").key, "tools.include[1]");
}

#[test]
fn hermes_only_keys_warn_but_load() {
    let parsed = McpServers::parse(
        &json!({"s": {"command": "x", "keepalive_interval": 30, "trust": "full"}}),
        None,
    );
    assert_eq!(parsed.servers.len(), 1);
    assert_eq!(parsed.warnings.len(), 2);
}

#[test]
fn section_of_the_wrong_type_is_one_error() {
    let parsed = McpServers::parse(&json!(["a"]), None);
    assert!(parsed.servers.is_empty());
    assert_eq!(parsed.errors.len(), 1);
    assert!(parsed.errors[0].to_string().contains("expected a mapping"));
}

#[test]
fn env_passthrough_names_variables_for_stdio_servers_only() {
    let parsed = McpServers::parse(
        &json!({
            "ok": {"command": "srv", "env_passthrough": ["GITHUB_TOKEN", "PROXY_URL"]},
            "bad": {"command": "srv", "env_passthrough": ["NOT A NAME"]},
            "http": {"url": "http://127.0.0.1/mcp", "env_passthrough": ["X"]},
        }),
        None,
    );
    assert_eq!(
        parsed.get("ok").unwrap().env_passthrough,
        ["GITHUB_TOKEN", "PROXY_URL"]
    );
    assert_eq!(parsed.errors.len(), 2, "{:?}", parsed.errors);
    let text: Vec<String> = parsed.errors.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|e| e.contains("env_passthrough[0]") && e.contains("variable name")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|e| e.contains("local (stdio) servers only")),
        "{text:?}"
    );
}

#[test]
fn reserved_headers_and_sse_are_refused() {
    let parsed = McpServers::parse(
        &json!({
            "h": {"url": "http://127.0.0.1/mcp", "headers": {"Mcp-Session-Id": "x"}},
            "s": {"url": "http://127.0.0.1/sse", "transport": "sse"},
            "f": {"url": "ftp://x"},
        }),
        None,
    );
    assert!(parsed.servers.is_empty());
    assert_eq!(parsed.errors.len(), 3);
}

#[test]
fn variables_are_interpolated_and_missing_ones_reported() {
    // PATH is set in every environment the tests run in.
    let path = std::env::var("PATH").unwrap();
    let parsed = McpServers::parse(
        &json!({
            "a": {"command": "srv", "env": {"P": "${PATH}", "Q": "x${env:PATH}y"}},
            "b": {"command": "srv", "args": ["${TROUPE_SURELY_UNSET_VARIABLE_42}"]},
        }),
        None,
    );
    let McpTransport::Stdio { env, .. } = &parsed.get("a").unwrap().transport else {
        panic!("stdio expected")
    };
    assert_eq!(env["P"], path);
    assert_eq!(env["Q"], format!("x{path}y"));
    assert_eq!(parsed.errors[0].key, "args[0]");
}

#[test]
fn relative_paths_follow_the_config_folder() {
    let parsed = McpServers::parse(
        &json!({"a": {"command": "./bin/srv", "cwd": "work"}}),
        Some(Path::new("/etc/troupe")),
    );
    let McpTransport::Stdio { command, cwd, .. } = &parsed.get("a").unwrap().transport else {
        panic!("stdio expected")
    };
    assert_eq!(command, "/etc/troupe/./bin/srv");
    assert_eq!(cwd.as_deref(), Some(Path::new("/etc/troupe/work")));
}

#[test]
fn globs_match_like_shell_patterns() {
    assert!(glob_match("git_*", "git_status"));
    assert!(glob_match("*", ""));
    assert!(glob_match("a?c", "abc"));
    assert!(!glob_match("a?c", "ac"));
    assert!(glob_match("*_file", "read_text_file"));
    assert!(!glob_match("read", "read_file"));
    let filter = ToolFilter {
        include: None,
        exclude: vec!["delete_*".into()],
    };
    assert!(filter.admits("read_graph"));
    assert!(!filter.admits("delete_entities"));
}
