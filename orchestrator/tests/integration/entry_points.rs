//! One runtime behind every entry point, tried as a user runs it: the `troupe` binary with ONE
//! troupe.yaml fixture (`fixtures/troupe.yaml`: a real MCP server, server-everything
//! over stdio, and the mock OpenAI-compatible model over real HTTP).
//! - the same MCP tool is found (`tool_search`) and called (`tool_call`) from `troupe chat`,
//!   from a `troupe serve` session, from a board worker of `troupe serve`, and from board
//!   workers started by `troupe kanban dispatch` and by `troupe kanban worker`;
//! - an `execute_code` script calls `terminal` and `read_file` inside a `troupe chat` session
//!   and inside a board worker, and a call refused by approvals inside the script is a denial
//!   in the script's result;
//! - a board worker delegates to a child that runs;
//! - a profile naming a toolset nobody provides is a config error listing the toolsets there
//!   are, and a broken MCP server is reported and left out, the same way everywhere.
//!
//! The MCP servers come from `scripts/install-test-deps.sh`; without them these tests skip
//! loudly, unless `TROUPE_REQUIRE_MCP_SERVERS` is set (CI), where they fail.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mcp_servers::{everything_bin, servers_available};
use crate::support::serve::{Served, TroupeDir};
const FIXTURE: &str = include_str!("fixtures/troupe.yaml");

/// A directory with the fixture troupe.yaml (`edit` may change it first) and its mock model.
async fn fixture_in(
    dir: tempfile::TempDir,
    script: &str,
    edit: impl FnOnce(String) -> String,
) -> TroupeDir {
    let yaml = FIXTURE.replace("{{EVERYTHING}}", &everything_bin().to_string_lossy());
    TroupeDir::in_dir(dir, &edit(yaml), script).await
}

async fn fixture_with(script: &str, edit: impl FnOnce(String) -> String) -> TroupeDir {
    fixture_in(tempfile::tempdir().unwrap(), script, edit).await
}

async fn fixture(script: &str) -> TroupeDir {
    fixture_with(script, |yaml| yaml).await
}

impl TroupeDir {
    /// Creates a task for `coder` on the default board; returns its id.
    async fn create_task(&self, title: &str, body: &str, extra: &[&str]) -> String {
        let (code, _, err) = self.run(&["kanban", "init"]).await;
        assert_eq!(code, 0, "{err}");
        let mut args = vec![
            "kanban",
            "create",
            title,
            "--body",
            body,
            "--assignee",
            "coder",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = self.run(&args).await;
        assert_eq!(code, 0, "{err}");
        let created: Value = serde_json::from_str(out.trim()).unwrap();
        created["task"]["id"]
            .as_str()
            .or_else(|| created["id"].as_str())
            .unwrap_or_else(|| panic!("no task id in {created}"))
            .to_string()
    }

    async fn task(&self, id: &str) -> Value {
        let (code, out, err) = self.run(&["kanban", "show", id, "--json"]).await;
        assert_eq!(code, 0, "{err}");
        let shown: Value = serde_json::from_str(out.trim()).unwrap();
        if shown.get("task").is_some() {
            shown["task"].clone()
        } else {
            shown
        }
    }
}

/// The model finds the echo tool with `tool_search`, calls it through `tool_call` with
/// `marker`, then (as a board worker) completes its task.
fn mcp_script(marker: &str, worker: bool) -> String {
    let finish = if worker {
        "  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: echoed through MCP}\n"
    } else {
        ""
    };
    format!(
        "cursor: conversation\nturns:\n  - tool_calls:\n      - name: tool_search\n        arguments: {{queries: [echo back the input]}}\n  - tool_calls:\n      - name: tool_call\n        arguments: {{calls: [{{name: mcp_everything_echo, arguments: {{message: {marker}}}}}]}}\n{finish}  - text: The echo came back.\n"
    )
}

/// The model was shown the echo tool by tool_search, and the echo's answer by tool_call.
fn assert_found_and_called(fx: &TroupeDir, marker: &str) {
    let requests = fx.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("mcp_everything_echo") && !r.contains(&format!("Echo: {marker}"))),
        "tool_search never showed the model mcp_everything_echo: {requests:#?}"
    );
    assert!(
        fx.model_saw(&format!("Echo: {marker}")),
        "the MCP echo never answered {marker}: {requests:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_finds_and_calls_the_mcp_tool() {
    if !servers_available("chat_finds_and_calls_the_mcp_tool") {
        return;
    }
    let fx = fixture(&mcp_script("from-chat", false)).await;
    let (code, out, err) = fx.run(&["chat", "-q", "Echo something.", "--json"]).await;
    assert_eq!(code, 0, "stderr: {err}\nstdout: {out}");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let echo = events
        .iter()
        .find(|e| {
            e["type"] == "tool_call_finished" && e["underlying_tool"] == "mcp_everything_echo"
        })
        .unwrap_or_else(|| panic!("no echo call in {events:#?}"));
    assert_eq!(echo["status"], "ok");
    assert_found_and_called(&fx, "from-chat");
    assert_eq!(events.last().unwrap()["text"], "The echo came back.");

    // The same through a profile (its model, toolsets and prompt); an unknown one is bad input.
    let fx = fixture(&mcp_script("from-profile", false)).await;
    let (code, out, err) = fx
        .run(&[
            "chat",
            "-q",
            "Echo something.",
            "--profile",
            "coder",
            "--json",
        ])
        .await;
    assert_eq!(code, 0, "stderr: {err}\nstdout: {out}");
    assert_found_and_called(&fx, "from-profile");
    assert!(
        fx.model_saw("You carry out board tasks"),
        "the profile's prompt was not used"
    );
    let (code, _, err) = fx.run(&["chat", "-q", "hi", "--profile", "nobody"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("coder"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_finds_the_tools_of_a_server_that_was_still_starting() {
    if !servers_available("a_turn_finds_the_tools_of_a_server_that_was_still_starting") {
        return;
    }
    // The server takes seconds to come up: the turn starts without it, the bridge is offered
    // at once, and the search waits for the server instead of coming back empty.
    let fx = fixture_with(&mcp_script("late-server", false), |yaml| {
        let everything = everything_bin().to_string_lossy().into_owned();
        yaml.replace(
            &format!("    command: \"{everything}\"\n    args: [stdio]\n"),
            &format!(
                "    command: sh\n    args: [\"-c\", \"sleep 4; exec '{everything}' stdio\"]\n"
            ),
        )
    })
    .await;
    assert!(
        std::fs::read_to_string(fx.path().join("troupe.yaml"))
            .unwrap()
            .contains("sleep 4"),
        "the fixture's server line changed; update this test"
    );
    let (code, out, err) = fx.run(&["chat", "-q", "Echo something.", "--json"]).await;
    assert_eq!(code, 0, "stderr: {err}\nstdout: {out}");
    let first = &fx.model.requests()[0];
    let search = first.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "tool_search")
        .unwrap_or_else(|| panic!("no bridge in the first request: {:?}", first.tool_names()));
    assert!(
        search["function"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("still starting (mcp-everything)")),
        "the first request should say the server is still starting: {search}"
    );
    assert_found_and_called(&fx, "late-server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_sessions_and_board_workers_find_and_call_the_mcp_tool() {
    if !servers_available("serve_sessions_and_board_workers_find_and_call_the_mcp_tool") {
        return;
    }
    // A session of `troupe serve`, on the configured model.
    let fx = fixture(&mcp_script("from-serve", false)).await;
    let served = Served::start(&fx, &["--no-dispatch"]).await;
    let (status, created) = served
        .call(reqwest::Method::POST, "/api/sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, outcome) = served
        .call(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "Echo something.", "wait": true})),
        )
        .await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["status"], "completed", "{outcome}");
    assert_found_and_called(&fx, "from-serve");
    // A session may name a profile: its model and toolsets.
    let (status, created) = served
        .call(
            reqwest::Method::POST,
            "/api/sessions",
            Some(json!({"profile": "coder"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, refused) = served
        .call(
            reqwest::Method::POST,
            "/api/sessions",
            Some(json!({"profile": "nobody"})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("coder"), "{refused}");
    served.stop().await;

    // The board worker of `troupe serve` (its own dispatcher).
    let fx = fixture(&mcp_script("from-serve-worker", true)).await;
    let served = Served::start(&fx, &[]).await;
    let (status, created) = served
        .call(
            reqwest::Method::POST,
            "/api/plugins/kanban/tasks",
            Some(json!({"title": "Echo through MCP", "body": "Echo something.", "assignee": "coder"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["id"].as_str().unwrap().to_string();
    let mut done = false;
    for _ in 0..600 {
        let (_, shown) = served
            .call(
                reqwest::Method::GET,
                &format!("/api/plugins/kanban/tasks/{id}"),
                None,
            )
            .await;
        if shown["task"]["status"] == "done" {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(done, "the task never got done: {:#?}", fx.requests());
    assert_found_and_called(&fx, "from-serve-worker");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kanban_dispatch_workers_find_and_call_the_mcp_tool() {
    if !servers_available("kanban_dispatch_workers_find_and_call_the_mcp_tool") {
        return;
    }
    let fx = fixture(&mcp_script("from-dispatch", true)).await;
    let id = fx
        .create_task("Echo through MCP", "Echo something.", &[])
        .await;
    let (code, out, err) = fx.run(&["kanban", "dispatch"]).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(fx.task(&id).await["status"], "done", "{err}");
    assert_found_and_called(&fx, "from-dispatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kanban_worker_processes_find_and_call_the_mcp_tool() {
    if !servers_available("kanban_worker_processes_find_and_call_the_mcp_tool") {
        return;
    }
    let fx = fixture(&mcp_script("from-worker", true)).await;
    let id = fx
        .create_task("Echo through MCP", "Echo something.", &[])
        .await;
    let (code, out, err) = fx.run(&["kanban", "worker", "--until-idle"]).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(fx.task(&id).await["status"], "done", "{err}");
    assert_found_and_called(&fx, "from-worker");
}

/// A script that writes a file with `terminal`, reads it back with `read_file`, and tries a
/// command that needs approval (refused: nobody can answer).
const SCRIPT_CODE: &str = "from troupe_tools import terminal, read_file\nwrote = terminal('echo script-wrote-this > notes.txt && echo wrote-ok')\nprint('T:', wrote)\ngot = read_file('notes.txt')\nprint('R:', got)\nrefused = terminal('rm -rf ./precious')\nprint('D:', refused)\n";

fn code_script(worker: bool) -> String {
    let code = serde_json::to_string(SCRIPT_CODE).unwrap();
    let finish = if worker {
        "  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: ran the script}\n"
    } else {
        ""
    };
    format!(
        "cursor: conversation\nturns:\n  - tool_calls:\n      - name: execute_code\n        arguments: {{code: {code}}}\n{finish}  - text: The script ran.\n"
    )
}

/// The script's output the model was shown: the file written and read through tools, and the
/// refused command reported as a denial inside the script.
fn assert_script_ran(fx: &TroupeDir) {
    let requests = fx.requests();
    let shown = requests
        .iter()
        .find(|r| r.contains("T:"))
        .unwrap_or_else(|| panic!("the script's output never reached the model: {requests:#?}"));
    assert!(shown.contains("wrote-ok"), "{shown}");
    assert!(
        shown.contains("script-wrote-this"),
        "read_file did not read it: {shown}"
    );
    let denial = shown.split("D:").nth(1).unwrap_or_default();
    assert!(
        denial.contains("error") && !denial.contains("no dispatcher"),
        "the refused command was not a denial in the script: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_code_calls_tools_inside_a_chat_session() {
    if !servers_available("execute_code_calls_tools_inside_a_chat_session") {
        return;
    }
    let fx = fixture(&code_script(false)).await;
    std::fs::create_dir(fx.path().join("precious")).unwrap();
    let (code, out, err) = fx.run(&["chat", "-q", "Run the script.", "--json"]).await;
    assert_eq!(code, 0, "stderr: {err}\nstdout: {out}");
    assert_script_ran(&fx);
    assert!(
        fx.path().join("precious").is_dir(),
        "the refused command ran"
    );
    assert_eq!(
        std::fs::read_to_string(fx.path().join("notes.txt"))
            .unwrap()
            .trim(),
        "script-wrote-this"
    );
    // The script's calls went through the session: its events show them, the refused one
    // as denied.
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let terminal: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_finished" && e["tool"] == "terminal")
        .collect();
    assert!(terminal.iter().any(|e| e["status"] == "ok"), "{events:#?}");
    assert!(
        terminal.iter().any(|e| e["status"] == "denied"),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_code_calls_tools_inside_a_board_worker() {
    if !servers_available("execute_code_calls_tools_inside_a_board_worker") {
        return;
    }
    let fx = fixture(&code_script(true)).await;
    let id = fx
        .create_task("Run the script", "Run the script.", &[])
        .await;
    let (code, out, err) = fx.run(&["kanban", "dispatch"]).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(fx.task(&id).await["status"], "done", "{err}");
    assert_script_ran(&fx);
    // The worker worked in its task's scratch directory, not in the process's.
    assert!(!fx.path().join("notes.txt").exists());
    let scratch = fx
        .home()
        .join("workspaces/default")
        .join(&id)
        .join("notes.txt");
    assert_eq!(
        std::fs::read_to_string(scratch).unwrap().trim(),
        "script-wrote-this"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_worker_delegates_to_a_child_that_runs() {
    if !servers_available("a_board_worker_delegates_to_a_child_that_runs") {
        return;
    }
    // The worker delegates; the child (asked CHILD-GOAL) answers; the worker sees the answer
    // and completes its task.
    let script = "cursor: conversation\nturns:\n  - match: PARENT-TASK\n    tool_calls:\n      - name: delegate_task\n        arguments: {tasks: [{goal: \"CHILD-GOAL: say the magic word\"}]}\n  - match: CHILD-SAYS-42\n    tool_calls:\n      - name: kanban_complete\n        arguments: {summary: the child answered}\n  - match: CHILD-GOAL\n    text: CHILD-SAYS-42\n  - text: Finished.\n";
    let fx = fixture(script).await;
    let id = fx
        .create_task("Delegate", "PARENT-TASK: ask a subagent.", &[])
        .await;
    let (code, out, err) = fx.run(&["kanban", "dispatch"]).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let task = fx.task(&id).await;
    assert_eq!(task["status"], "done", "{task}\n{:#?}", fx.requests());
    let requests = fx.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("CHILD-GOAL") && !r.contains("PARENT-TASK")),
        "the child never asked the model: {requests:#?}"
    );
    assert!(fx.model_saw("CHILD-SAYS-42"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_and_broken_servers_are_told_the_same_way_everywhere() {
    if !servers_available("config_errors_and_broken_servers_are_told_the_same_way_everywhere") {
        return;
    }
    // A profile naming a toolset nobody provides: a config error listing what exists.
    let fx = fixture_with(&mcp_script("x", false), |yaml| {
        yaml.replace("[core, mcp-everything, delegation]", "[core, mcp-github]")
    })
    .await;
    for args in [
        &["chat", "-q", "hi"][..],
        &["kanban", "dispatch"][..],
        &["serve", "--port", "0"][..],
    ] {
        let (code, _, err) = fx.run(args).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("profiles.coder.toolsets")
                && err.contains("mcp-github")
                && err.contains("mcp-everything"),
            "{args:?}: {err}"
        );
    }
    // An MCP server that cannot start: left out, said which and why, and the run goes on.
    let fx = fixture_with(&mcp_script("x", false), |yaml| {
        format!("{yaml}\n").replace(
            "mcp_servers:\n",
            "mcp_servers:\n  broken:\n    command: /no/such/mcp-server\n",
        )
    })
    .await;
    let script = "turns:\n  - text: fine\n";
    std::fs::write(fx.path().join("s.yaml"), script).unwrap();
    let (code, out, err) = fx.run(&["chat", "-q", "hi", "--script", "s.yaml"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "fine");
    assert!(
        err.contains(
            "troupe chat: MCP server 'broken' is not available, so troupe runs without it"
        ),
        "{err}"
    );
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktree_workspaces_keep_parallel_workers_apart() {
    if !servers_available("worktree_workspaces_keep_parallel_workers_apart") {
        return;
    }
    // Four workers each write out.txt in their own worktree; a fifth tries to write into the
    // main checkout (outside its workspace), which needs an approval nobody can give.
    let dir = tempfile::tempdir().unwrap();
    let escape = dir.path().join("escape.txt");
    let mut script = String::from("cursor: conversation\nturns:\n");
    for n in 1..=4 {
        script.push_str(&format!(
            "  - match: WRITE-{n}\n    tool_calls:\n      - name: write_file\n        arguments: {{path: out.txt, content: content-{n}}}\n"
        ));
    }
    script.push_str(&format!(
        "  - match: WRITE-OUT\n    tool_calls:\n      - name: write_file\n        arguments: {{path: {}, content: escaped}}\n",
        escape.display()
    ));
    script.push_str("  - tool_calls:\n      - name: kanban_complete\n        arguments: {summary: wrote it}\n  - text: Done.\n");
    let fx = fixture_in(dir, &script, |yaml| yaml).await;
    std::fs::write(
        fx.path().join(".gitignore"),
        "troupe.yaml\nhome/\nboards/\nlogs/\n",
    )
    .unwrap();
    std::fs::write(fx.path().join("README"), "main checkout\n").unwrap();
    git(fx.path(), &["init", "--quiet", "--initial-branch", "main"]);
    git(fx.path(), &["add", "README", ".gitignore"]);
    git(fx.path(), &["commit", "--quiet", "-m", "start"]);

    let mut ids = Vec::new();
    for n in 1..=4 {
        let id = fx
            .create_task(
                &format!("write {n}"),
                &format!("WRITE-{n}"),
                &["--workspace", "worktree"],
            )
            .await;
        ids.push(id);
    }
    let outside = fx
        .create_task("write outside", "WRITE-OUT", &["--workspace", "worktree"])
        .await;
    let scratch = fx.create_task("scratch", "WRITE-OUT", &[]).await;
    let (code, out, err) = fx.run(&["kanban", "dispatch"]).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");

    let home = fx.home().to_path_buf();
    let branches = git(fx.path(), &["branch", "--list", "troupe/*"]);
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(fx.task(id).await["status"], "done");
        assert!(branches.contains(&format!("troupe/{id}")), "{branches}");
        let tree = home.join("worktrees/default").join(id);
        assert_eq!(
            std::fs::read_to_string(tree.join("out.txt")).unwrap(),
            format!("content-{}", n + 1)
        );
    }
    // Nothing was written to the main checkout, and the write outside was refused.
    assert!(!fx.path().join("out.txt").exists());
    assert!(
        !escape.exists(),
        "a write outside the workspace ran without approval"
    );
    assert_eq!(git(fx.path(), &["status", "--porcelain"]), "");
    assert_eq!(
        git(fx.path(), &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );

    // Archiving removes the clean worktree and the scratch directory, keeps the ones with
    // changes and says where.
    let clean = home.join("worktrees/default").join(&outside);
    assert!(clean.is_dir());
    let scratch_dir = home.join("workspaces/default").join(&scratch);
    assert!(scratch_dir.is_dir());
    let args = [
        "kanban",
        "archive",
        ids[0].as_str(),
        outside.as_str(),
        scratch.as_str(),
    ];
    let (code, _, err) = fx.run(&args).await;
    assert_eq!(code, 0, "{err}");
    assert!(!clean.exists(), "the clean worktree was kept");
    assert!(!scratch_dir.exists(), "the scratch directory was kept");
    let kept = home.join("worktrees/default").join(&ids[0]);
    assert!(
        kept.join("out.txt").exists(),
        "a worktree with changes was removed"
    );
    let (_, shown, _) = fx.run(&["kanban", "show", &ids[0], "--json"]).await;
    assert!(shown.contains(&kept.display().to_string()), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_that_cannot_be_made_blocks_the_task_without_a_failure() {
    if !servers_available("a_workspace_that_cannot_be_made_blocks_the_task_without_a_failure") {
        return;
    }
    let fx = fixture("turns:\n  - text: never asked\n").await;
    let missing = fx
        .create_task("dir", "x", &["--workspace", "dir:/no/such/dir/anywhere"])
        .await;
    // Not a git repository: no worktree.
    let no_repo = fx
        .create_task("tree", "x", &["--workspace", "worktree"])
        .await;
    let (code, out, err) = fx.run(&["kanban", "dispatch"]).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    for (id, says) in [
        (&missing, "/no/such/dir/anywhere"),
        (&no_repo, "not inside a git repository"),
    ] {
        let task = fx.task(id).await;
        assert_eq!(task["status"], "blocked", "{task}");
        assert_eq!(task["consecutive_failures"], 0, "{task}");
        let (_, shown, _) = fx.run(&["kanban", "show", id, "--json"]).await;
        assert!(shown.contains(says), "{shown}");
    }
    assert!(
        fx.model.requests().is_empty(),
        "no session should have started"
    );
}

/// A script that finds the MCP echo tool with `tool_search`, reads its schema with
/// `tool_describe`, calls it with `tool_call`, and prints what of troupe's environment reached
/// it.
const BRIDGE_CODE: &str = r#"import os
from troupe_tools import tool_search, tool_describe, tool_call
found = tool_search(['echo back the input'])
name = next(n for n in found.get('tools', {}) if n.endswith('_echo'))
print('FOUND:', name)
described = tool_describe([name])
print('DESCRIBED:', 'message' in str(described))
answer = tool_call(name=name, arguments={'message': 'from-a-script'})
print('CALLED:', answer)
bad = tool_call(name=name, arguments={})
print('BAD:', bad)
print('ENV:', os.environ.get('BRIDGE_PASSED', 'absent'), os.environ.get('BRIDGE_WITHHELD', 'absent'))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_code_script_finds_and_calls_an_mcp_tool() {
    if !servers_available("an_execute_code_script_finds_and_calls_an_mcp_tool") {
        return;
    }
    let code = serde_json::to_string(BRIDGE_CODE).unwrap();
    let script = format!(
        "cursor: conversation\nturns:\n  - tool_calls:\n      - name: execute_code\n        arguments: {{code: {code}}}\n  - text: The script ran.\n"
    );
    let fx = fixture_with(&script, |yaml| {
        yaml.replace(
            "terminal:\n  timeout: 60\n",
            "terminal:\n  timeout: 60\n  env_passthrough: [BRIDGE_PASSED]\n",
        )
    })
    .await;
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        fx.troupe()
            .args(["chat", "-q", "Run the script.", "--json"])
            .env("BRIDGE_PASSED", "passed-value")
            .env("BRIDGE_WITHHELD", "withheld-value")
            .output(),
    )
    .await
    .expect("troupe chat did not finish in two minutes")
    .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "stderr: {err}\nstdout: {out}");
    let requests = fx.requests();
    let shown = requests
        .iter()
        .find(|r| r.contains("FOUND:"))
        .unwrap_or_else(|| panic!("the script's output never reached the model: {requests:#?}"));
    assert!(shown.contains("FOUND: mcp_everything_echo"), "{shown}");
    assert!(shown.contains("DESCRIBED: True"), "{shown}");
    assert!(shown.contains("Echo: from-a-script"), "{shown}");
    assert!(!shown.contains("no tool called"), "{shown}");
    // Bad arguments are the bridge's error, naming what is missing.
    let bad = shown.split("BAD: {").nth(1).unwrap_or_default();
    assert!(bad.contains("error") && bad.contains("message"), "{shown}");
    // terminal.env_passthrough reaches scripts; other variables do not.
    assert!(shown.contains("ENV: passed-value absent"), "{shown}");
    // The echo ran as a call of the session, under its own name, through hooks and approvals.
    let events: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        events.iter().any(|e| e["type"] == "tool_call_finished"
            && e["underlying_tool"] == "mcp_everything_echo"
            && e["status"] == "ok"),
        "{out}"
    );
}
