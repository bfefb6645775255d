//! `troupe tools phrasings` and the phrasings it writes, as a person runs them: the real binary,
//! a model over real HTTP (the mock server), troupe.yaml's `tools.tool_search.phrasings`, and
//! `troupe tools search` ranking with the file.

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{CursorMode, Script, ScriptTurn};

/// Three to-do tools, none of whose text says "tick off" or "errand", among sixty others (a
/// catalog large enough for the fitted "nothing fits" decision).
fn write_catalog(dir: &Path) {
    let tool = |server: &str, name: &str, description: &str| {
        json!({
            "type": "function",
            "toolset": format!("mcp-{server}"),
            "function": {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
            }
        })
    };
    let mut catalog = vec![
        tool("todo", "todo_close_task", "Close a task by its id."),
        tool("todo", "todo_add_label", "Attach a label to a task."),
        tool("todo", "todo_move_task", "Move a task to another project."),
    ];
    let others = [
        "Read a file from the disk.",
        "List the members of a team.",
        "Send an email to a recipient.",
        "Create an event in a calendar.",
        "Convert an amount between currencies.",
        "Fetch the weather forecast for a city.",
        "Resize an image.",
        "Query rows from a database table.",
        "Translate a text into another language.",
        "Restart a virtual machine.",
    ];
    for i in 0..60 {
        let name = format!("other_tool_{i}");
        catalog.push(tool("misc", &name, others[i % others.len()]));
    }
    std::fs::write(dir.join("catalog.json"), json!(catalog).to_string()).unwrap();
}

fn troupe(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join("home"))
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .args(args)
        .output()
        .unwrap()
}

/// `troupe tools phrasings` with troupe.yaml and the catalog of `dir`, and `extra`.
fn write_phrasings(dir: &Path, extra: &[&str]) -> Output {
    let base = [
        "tools",
        "phrasings",
        "--config",
        "troupe.yaml",
        "--catalog",
        "catalog.json",
    ];
    troupe(dir, &[&base[..], extra].concat())
}

/// `troupe tools search` of `query` with troupe.yaml and the catalog of `dir`, and `extra`.
fn search_tools(dir: &Path, query: &str, extra: &[&str]) -> Output {
    let args = json!({"queries": [query]}).to_string();
    let base = [
        "tools",
        "search",
        "--config",
        "troupe.yaml",
        "--catalog",
        "catalog.json",
        "--args",
        args.as_str(),
    ];
    troupe(dir, &[&base[..], extra].concat())
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_writes_phrasings_once_and_search_ranks_with_them() {
    let dir = tempfile::tempdir().unwrap();
    write_catalog(dir.path());
    // One reply per tool, in the catalog's order (one request at a time; each request starts
    // a conversation of its own, so the script keeps one place for all of them).
    let server = MockServer::start(
        Script::new()
            .with_cursor(CursorMode::Sequential)
            .turn(ScriptTurn::text(
                "1. tick off the errand for the dry cleaning\n- \"done with the dentist errand, tick it off\"\n\nmark the errand finished",
            ))
            .turn(ScriptTurn::text("tag this ticket as urgent\nput a colour label on it"))
            .turn(ScriptTurn::text("shift this to the home project\nfile it under work"))
            .when_exhausted("do the usual thing\nhelp me with the other thing"),
    )
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\ntools:\n  tool_search:\n    phrasings: phrasings.json\n",
            server.url()
        ),
    )
    .unwrap();
    let write = ["--parallel", "1"];
    let summary = stdout_json(&write_phrasings(dir.path(), &write));
    assert_eq!(summary["written"], 63, "{summary}");
    assert_eq!(summary["failed"], json!([]), "{summary}");
    // The model was shown each tool, in order.
    let sent = server.requests();
    assert_eq!(sent.len(), 63);
    for (request, name) in sent
        .iter()
        .zip(["todo_close_task", "todo_add_label", "todo_move_task"])
    {
        let last = request.messages().last().cloned().unwrap_or_default();
        assert!(
            last["content"].as_str().unwrap_or_default().contains(name),
            "{last}"
        );
    }
    // The file holds the replies' requests, list marks and quotes trimmed, next to troupe.yaml.
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("phrasings.json")).unwrap())
            .unwrap();
    assert_eq!(
        file["tools"]["todo_close_task"],
        json!([
            "tick off the errand for the dry cleaning",
            "done with the dentist errand, tick it off",
            "mark the errand finished"
        ]),
        "{file}"
    );

    // A second run goes on where the first stopped: nothing left to ask.
    let again = stdout_json(&write_phrasings(dir.path(), &write));
    assert_eq!(
        (again["written"].clone(), again["kept"].clone()),
        (json!(0), json!(63))
    );
    assert_eq!(server.requests().len(), 63);

    // Search ranks with them: the request's words are only in the phrasings.
    let query = "tick off the errand";
    let found = stdout_json(&search_tools(dir.path(), query, &[]));
    assert_eq!(
        found["results"][0]["matches"][0], "todo_close_task",
        "{found}"
    );
    let explained = search_tools(dir.path(), query, &["--explain"]);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("phrasings: 63 tools"), "{text}");
    // Without them the same query finds nothing: none of its words is in the tools' text.
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!("model:\n  base_url: {}\n", server.url()),
    )
    .unwrap();
    let plain = stdout_json(&search_tools(dir.path(), query, &[]));
    assert_ne!(
        plain["results"][0]["matches"][0], "todo_close_task",
        "{plain}"
    );
}

#[test]
fn a_bad_phrasings_setting_or_file_is_a_config_error_that_says_what_to_send() {
    let dir = tempfile::tempdir().unwrap();
    write_catalog(dir.path());
    let search = |config: &str| {
        std::fs::write(dir.path().join("troupe.yaml"), config).unwrap();
        search_tools(dir.path(), "close a task", &[])
    };
    let out = search("tools:\n  tool_search:\n    phrasings: 5\n");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tools.tool_search.phrasings") && err.contains("path of a phrasings file"),
        "{err}"
    );

    std::fs::write(
        dir.path().join("broken.json"),
        r#"{"todo_close_task": ["x"]}"#,
    )
    .unwrap();
    let out = search("tools:\n  tool_search:\n    phrasings: broken.json\n");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.json")
            && err.contains("\"tools\"")
            && err.contains("troupe tools phrasings"),
        "{err}"
    );

    // Not written yet: search runs without them and says how to write them.
    let out = search("tools:\n  tool_search:\n    phrasings: later.json\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Writing needs a model and a place to write to.
    std::fs::write(dir.path().join("troupe.yaml"), "tools: {}\n").unwrap();
    let out = write_phrasings(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--out FILE"));
    let out = write_phrasings(dir.path(), &["--out", "p.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model.base_url"));
    assert!(!dir.path().join("p.json").exists());
}
