//! The lean prompt for small contexts, the way a user reaches it: a troupe.yaml with
//! `model.context_length` (or `model.prompt_style`), the real binary, the built-in tools and
//! MCP server-everything behind tool search. What `troupe chat` sends the (mock) model server is
//! read from the requests it received; `troupe prompt --stats` counts both forms.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};
use troupe_tools::lean::LEAN_CONTEXT_MAX;

use crate::support::mcp_servers::{everything_bin, servers_available};

/// A troupe.yaml: the model at `url`, `model_extra` lines under `model:`, the file tools and
/// server-everything behind tool search (the local-model bench's tool set).
fn write_config(dir: &Path, url: &str, model_extra: &str) {
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "model:\n  base_url: {url}\n  model: local-model\n{model_extra}toolsets:\n  enabled: [core, mcp-everything]\n  blocked_tools: [terminal, process, patch, execute_code]\nmcp_servers:\n  everything:\n    command: {}\n    args: [stdio]\ntools:\n  tool_search:\n    enabled: on\n",
            everything_bin().display()
        ),
    )
    .unwrap();
}

fn troupe(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join(".troupe-home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(args)
        .output()
        .unwrap()
}

fn json_out(output: &std::process::Output) -> Value {
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The first request `troupe chat -q` sends with `model_extra` in the config.
async fn first_request(model_extra: &str) -> Value {
    let server = MockServer::start(Script::new().turn(ScriptTurn::text("done")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server.url(), model_extra);
    let path = dir.path().to_path_buf();
    let output =
        tokio::task::spawn_blocking(move || troupe(&path, &["chat", "-q", "hi", "--json"]))
            .await
            .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    server.requests()[0].body.clone()
}

fn system_of(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn tool<'a>(request: &'a Value, name: &str) -> &'a Value {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {request}"))
}

#[tokio::test]
async fn a_small_context_gets_the_lean_prompt_and_a_large_one_the_full() {
    if !servers_available("a_small_context_gets_the_lean_prompt_and_a_large_one_the_full") {
        return;
    }
    let small = first_request("  context_length: 4096\n").await;
    let system = system_of(&small);
    assert!(
        system.contains("call tool_search with keywords before you answer")
            && system.contains("never say that no tool exists without searching"),
        "{system}"
    );
    let search = tool(&small, "tool_search")["function"]["description"]
        .as_str()
        .unwrap();
    // (The first request may go out while the MCP server is still starting, so whether the
    // listing is there yet depends on timing; `troupe prompt` waits for it, see below.)
    assert!(
        search.contains("Call it first whenever none of your listed tools fits"),
        "{search}"
    );
    assert!(!search.contains("Every word counts"), "{search}");
    let read = tool(&small, "read_file");
    assert!(
        read["function"]["description"].as_str().unwrap().len() <= 125,
        "{read}"
    );
    assert_eq!(
        read["function"]["parameters"]["required"],
        serde_json::json!(["path"])
    );

    let large = first_request("  context_length: 131072\n").await;
    let system = system_of(&large);
    assert!(system.starts_with(troupe_actors::session::DEFAULT_SYSTEM_PROMPT));
    assert!(!system.contains("never say that no tool exists"));
    // Unknown context: the full prompt too; `prompt_style: lean` forces the lean one.
    let unknown = first_request("").await;
    assert_eq!(tool(&unknown, "read_file"), tool(&large, "read_file"));
    let forced = first_request("  prompt_style: lean\n").await;
    assert!(system_of(&forced).starts_with(troupe_actors::session::LEAN_SYSTEM_PROMPT));
    let kept = first_request(&format!(
        "  context_length: {LEAN_CONTEXT_MAX}\n  prompt_style: full\n"
    ))
    .await;
    assert_eq!(tool(&kept, "read_file"), tool(&large, "read_file"));
    assert!(system_of(&kept).starts_with(troupe_actors::session::DEFAULT_SYSTEM_PROMPT));
    let search = tool(&kept, "tool_search")["function"]["description"]
        .as_str()
        .unwrap();
    assert!(!search.contains("Call it first whenever"), "{search}");
}

/// Every property name and `required` list of `schema`, at every depth, as paths.
fn shape(schema: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(required) = schema.get("required") {
        out.push(format!("{at} required {required}"));
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            out.push(format!("{at}.{name}: {}", sub["type"]));
            shape(sub, &format!("{at}.{name}"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        shape(items, &format!("{at}[]"), out);
    }
}

#[tokio::test]
async fn prompt_stats_count_both_forms_and_the_lean_one_keeps_every_tool_and_parameter() {
    if !servers_available("prompt_stats_count_both_forms") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "http://127.0.0.1:9/v1",
        "  context_length: 4096\n",
    );
    let path = dir.path().to_path_buf();
    let (stats, full, lean) = tokio::task::spawn_blocking(move || {
        (
            json_out(&troupe(&path, &["prompt", "--stats", "--json"])),
            json_out(&troupe(&path, &["prompt", "--style", "full", "--json"])),
            json_out(&troupe(&path, &["prompt", "--style", "lean", "--json"])),
        )
    })
    .await
    .unwrap();
    assert_eq!(stats["kind"], "chat");
    assert_eq!(stats["chosen"], "lean");
    let full_total = stats["full"]["total"].as_i64().unwrap();
    let lean_total = stats["lean"]["total"].as_i64().unwrap();
    // Measured: about half; the test holds it to at least a third less.
    assert!(
        lean_total * 3 <= full_total * 2,
        "lean {lean_total} vs full {full_total}: {stats}"
    );
    assert_eq!(
        stats["full"]["tools"].as_array().unwrap().len(),
        stats["lean"]["tools"].as_array().unwrap().len()
    );

    // Same tools in the same order, each with every parameter, type and required list.
    let (full_tools, lean_tools) = (
        full["tools"].as_array().unwrap(),
        lean["tools"].as_array().unwrap(),
    );
    assert_eq!(full_tools.len(), lean_tools.len());
    assert!(full_tools.len() >= 5, "{full}");
    for (f, l) in full_tools.iter().zip(lean_tools) {
        assert_eq!(f["function"]["name"], l["function"]["name"]);
        let (mut fs, mut ls) = (Vec::new(), Vec::new());
        shape(&f["function"]["parameters"], "", &mut fs);
        shape(&l["function"]["parameters"], "", &mut ls);
        assert_eq!(fs, ls, "{}", f["function"]["name"]);
        let (fd, ld) = (
            f["function"]["description"].as_str().unwrap(),
            l["function"]["description"].as_str().unwrap(),
        );
        assert!(ld.len() <= fd.len(), "{ld}");
    }

    // The bridge's listing stays within its budget: 5% of the 4096-token context.
    let search = lean_tools
        .iter()
        .find(|t| t["function"]["name"] == "tool_search")
        .unwrap();
    let description = search["function"]["description"].as_str().unwrap();
    let listing = description
        .split_once("\n\n")
        .map(|(_, l)| l)
        .unwrap_or_default();
    assert!(!listing.is_empty(), "{description}");
    let listing_tokens = listing.chars().count().div_ceil(4);
    assert!(
        listing_tokens <= 4096 * 5 / 100,
        "{listing_tokens}: {listing}"
    );
}

#[tokio::test]
async fn a_subagent_and_a_board_worker_are_measured_with_their_own_instructions() {
    if !servers_available("a_subagent_and_a_board_worker_are_measured") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "http://127.0.0.1:9/v1",
        "  context_length: 4096\n",
    );
    let mut config = std::fs::read_to_string(dir.path().join("troupe.yaml")).unwrap();
    config.push_str("profiles:\n  coder:\n    toolsets: [core]\n");
    std::fs::write(dir.path().join("troupe.yaml"), config).unwrap();
    let path = dir.path().to_path_buf();
    let (worker, subagent, bad) = tokio::task::spawn_blocking(move || {
        (
            json_out(&troupe(&path, &["prompt", "--profile", "coder", "--json"])),
            json_out(&troupe(&path, &["prompt", "--subagent", "--json"])),
            troupe(&path, &["prompt", "--profile", "nobody", "--stats"]),
        )
    })
    .await
    .unwrap();
    assert!(worker["kind"].as_str().unwrap().starts_with("board worker"));
    assert!(
        worker["system"]
            .as_str()
            .unwrap()
            .contains("kanban_complete")
    );
    assert_eq!(worker["lean"], true);
    let names: Vec<&str> = worker["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"read_file") && !names.contains(&"tool_search"),
        "{names:?}"
    );
    assert!(
        subagent["system"]
            .as_str()
            .unwrap()
            .starts_with("You are a subagent")
    );
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("no profile \"nobody\"") && stderr.contains("coder"),
        "{stderr}"
    );
}

#[test]
fn a_prompt_style_that_is_not_one_says_which_are() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        "model:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n  prompt_style: tiny\n",
    )
    .unwrap();
    let output = troupe(dir.path(), &["config", "check"]);
    assert_eq!(output.status.code(), Some(2));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("model.prompt_style") && text.contains("auto, full, lean"),
        "{text}"
    );
}
