//! `troupe tools search` as a person or another program runs it: the real binary on a small
//! catalog file, the hybrid ranking by default (with the bundled sentence encoder and its cache
//! under the troupe home), `ranking: reference` from a config file, and `--explain`.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// A small catalog of our own: two servers' worth of tools, in the catalog file format.
fn write_catalog(dir: &Path) -> std::path::PathBuf {
    let tool = |server: &str, name: &str, description: &str, params: Value| {
        json!({
            "type": "function",
            "toolset": format!("mcp-{server}"),
            "function": {
                "name": format!("mcp_{server}_{name}"),
                "description": description,
                "parameters": {"type": "object", "properties": params},
            }
        })
    };
    let catalog = json!([
        tool(
            "github",
            "create_issue",
            "Create a new issue in a GitHub repository.",
            json!({"owner": {"type": "string"}, "repo": {"type": "string"}, "title": {"type": "string"}})
        ),
        tool(
            "github",
            "list_pull_requests",
            "List the pull requests of a repository.",
            json!({"owner": {"type": "string"}, "repo": {"type": "string"}})
        ),
        tool(
            "notion",
            "API-delete-a-block",
            "Delete a block.",
            json!({"block_id": {"type": "string"}})
        ),
        tool(
            "notion",
            "API-post-page",
            "Create a page.",
            json!({"parent": {"type": "object"}})
        ),
        tool(
            "slack",
            "slack_post_message",
            "Post a new message to a Slack channel.",
            json!({"channel_id": {"type": "string"}, "text": {"type": "string"}})
        ),
        tool(
            "playwright",
            "browser_take_screenshot",
            "Take a screenshot of the current page.",
            json!({"filename": {"type": "string"}})
        ),
        tool(
            "time",
            "get_current_time",
            "Get the current time in a specific timezone.",
            json!({"timezone": {"type": "string"}})
        ),
    ]);
    let path = dir.join("catalog.json");
    std::fs::write(&path, catalog.to_string()).unwrap();
    path
}

/// Runs `troupe tools search` with `home` as the troupe home; returns (exit code, stdout).
fn search(home: &Path, catalog: &Path, extra: &[&str], queries: &[&str]) -> (i32, String) {
    let args = json!({"queries": queries}).to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .stdin(Stdio::null())
        .env("TROUPE_HOME", home)
        .args(["tools", "search", "--catalog"])
        .arg(catalog)
        .args(["--args", &args])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.code().is_some(),
        "killed by a signal: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap(), stdout)
}

fn matches(out: &str) -> Vec<Vec<String>> {
    let v: Value = serde_json::from_str(out).unwrap();
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g["matches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn hybrid_is_the_default_and_caches_tool_embeddings_under_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_catalog(dir.path());
    let home = dir.path().join("home");
    let (code, out) = search(
        &home,
        &catalog,
        &[],
        &[
            "remove a notion block",
            "github create a new issue in the repository for telegram",
            "stripe refund payment",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let got = matches(&out);
    // A synonym the catalog never uses.
    assert_eq!(got[0][0], "mcp_notion_API-delete-a-block", "{out}");
    // One word no tool holds narrows the query instead of emptying it.
    assert_eq!(got[1][0], "mcp_github_create_issue", "{out}");
    // A service the catalog lacks: nothing fits.
    assert!(got[2].is_empty(), "{out}");
    // The tool embeddings were computed once and cached under the troupe home.
    let cache = home.join("cache").join("tool-embeddings");
    let files: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(files.len(), 1, "one cache file per model in {cache:?}");
}

#[test]
fn reference_ranking_from_the_config_keeps_the_rarest_token_gate() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_catalog(dir.path());
    let config = dir.path().join("troupe.yaml");
    std::fs::write(&config, "tools:\n  tool_search:\n    ranking: reference\n").unwrap();
    let config = config.to_str().unwrap();
    let (code, out) = search(
        &dir.path().join("home"),
        &catalog,
        &["--config", config],
        &["github create issue telegram", "github create issue"],
    );
    assert_eq!(code, 0, "{out}");
    let got = matches(&out);
    assert!(
        got[0].is_empty(),
        "the reference empties on an unknown word: {out}"
    );
    assert_eq!(got[1][0], "mcp_github_create_issue", "{out}");
    let (_, explained) = search(
        &dir.path().join("home"),
        &catalog,
        &["--config", config, "--explain"],
        &["github create issue telegram"],
    );
    assert!(explained.contains("(ranking: reference)"), "{explained}");
    assert!(
        explained.contains("rarest-token gate: telegram"),
        "{explained}"
    );
    assert!(explained.contains("no match"), "{explained}");
}

#[test]
fn explain_says_which_legs_found_each_match_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_catalog(dir.path());
    let home = dir.path().join("home");
    let (code, out) = search(
        &home,
        &catalog,
        &["--explain"],
        &[
            "erase a notion block",
            "stripe refund payment",
            "book a table for two",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("7 tools searched"), "{out}");
    assert!(
        out.contains("query \"erase a notion block\" (ranking: hybrid)"),
        "{out}"
    );
    assert!(out.contains("legs: lexical and semantic legs"), "{out}");
    assert!(
        out.contains("typed words (stemmed): eras, notion, block"),
        "{out}"
    );
    // The vocabulary's expansion of "erase" to the tool's own "delete", and the tool's evidence
    // from both legs.
    assert!(out.contains("delet for \"eras\""), "{out}");
    assert!(
        out.contains("1. mcp_notion_API-delete-a-block (fused"),
        "{out}"
    );
    assert!(out.contains("delet (expands \"eras\")"), "{out}");
    assert!(out.contains("semantic: rank 1, similarity"), "{out}");
    assert!(out.contains("decision: answered"), "{out}");
    // The absent service: the decision and its reason, the candidates shown but not returned.
    let start = out.find("query \"stripe").unwrap();
    let end = out.find("query \"book").unwrap();
    let absent = &out[start..end];
    assert!(
        absent.contains("no match returned (the query names stripe, which no tool here serves)"),
        "{absent}"
    );
    assert!(absent.contains("best candidates, not returned"), "{absent}");
    // Nothing named and nothing held: seven tools make no background for a semantic margin, so
    // lexical support decides.
    let unrelated = &out[end..];
    assert!(unrelated.contains("decision: nothing fits"), "{unrelated}");
    assert!(unrelated.contains("lexical support 0.00"), "{unrelated}");
    assert!(unrelated.contains("no semantic background"), "{unrelated}");
}

#[test]
fn a_named_service_is_answered_by_its_own_tools_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_catalog(dir.path());
    let home = dir.path().join("home");
    let (code, out) = search(
        &home,
        &catalog,
        &[],
        &[
            "post a message on Slack",
            "send a discord message",
            "slack delete message",
            "list the pull requests on GitHub",
            "post a message on slack about discord",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let got = matches(&out);
    assert_eq!(got[0][0], "mcp_slack_slack_post_message", "{out}");
    // Discord is served by no tool here; Slack's post-message tool does not delete.
    assert!(got[1].is_empty(), "{out}");
    assert!(got[2].is_empty(), "{out}");
    // "GitHub" written as a proper name is the github server.
    assert!(got[3].iter().any(|m| m.starts_with("mcp_github_")), "{out}");
    // Beside a served service, an absent one is what the query is about, not where it runs.
    assert_eq!(got[4][0], "mcp_slack_slack_post_message", "{out}");
    let (_, explained) = search(&home, &catalog, &["--explain"], &["slack delete message"]);
    assert!(explained.contains("services named: slack"), "{explained}");
}

#[test]
fn explain_with_bad_arguments_prints_the_models_error() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_catalog(dir.path());
    let output = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.path().join("home"))
        .args(["tools", "search", "--catalog"])
        .arg(&catalog)
        .args(["--args", "{\"queries\": 3}", "--explain"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("queries"), "{v}");
}
