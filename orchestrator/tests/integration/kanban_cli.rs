//! `troupe kanban` and `troupe demo` as a user runs them: the built binary on a temporary
//! SQLite store. Round trips through `--json`, errors with their exit codes and messages,
//! board switching across invocations, dispatch and `worker` with a scripted profile, and the
//! offline fan-out demo.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

struct Board {
    dir: tempfile::TempDir,
}

impl Board {
    fn new() -> Board {
        Board {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Runs `troupe kanban --store <dir> args...` in the temp dir, with no model or board in
    /// the environment.
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.arg("kanban")
            .arg("--store")
            .arg(self.store())
            .args(args)
            .current_dir(self.dir.path());
        isolate(&mut cmd, self.dir.path());
        cmd.output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }

    fn fails(&self, args: &[&str], code: i32, needle: &str) {
        let out = self.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
    }

    fn create(&self, args: &[&str]) -> String {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        all.push("--json");
        let v = self.json(&all);
        v["task"]["id"].as_str().unwrap().to_string()
    }
}

fn isolate(cmd: &mut Command, home: &Path) {
    for var in [
        "TROUPE_BASE_URL",
        "OPENAI_BASE_URL",
        "TROUPE_KANBAN_BOARD",
        "TROUPE_KANBAN_STORE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("TROUPE_HOME", home.join("home"));
}

#[test]
fn create_list_show_link_complete_and_stats_round_trip() {
    let b = Board::new();
    assert!(b.ok(&["init"]).contains("kanban store ready"));
    let report = b.create(&[
        "write the report",
        "--body",
        "about kanban",
        "--priority",
        "2",
        "--max-runtime",
        "30m",
    ]);
    let review = b.create(&["review it", "--parent", &report, "--assignee", "reviewer"]);
    let spare = b.create(&["spare"]);

    let listed = b.json(&["list", "--json"]);
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let status = |id: &str| {
        b.json(&["show", id, "--json"])["task"]["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(status(&report), "ready");
    assert_eq!(status(&review), "todo");

    let shown = b.json(&["show", &report, "--json"]);
    assert_eq!(shown["task"]["title"], "write the report");
    assert_eq!(shown["task"]["priority"], 2);
    assert_eq!(shown["task"]["max_runtime_seconds"], 1800);
    assert_eq!(shown["links"]["children"][0], review.as_str());

    // spare waits for review now; unlinking frees it again.
    b.ok(&["link", &review, &spare]);
    assert_eq!(status(&spare), "todo");
    b.ok(&["unlink", &review, &spare]);
    assert_eq!(status(&spare), "ready");

    b.ok(&["comment", &report, "first draft is in"]);
    b.ok(&[
        "complete",
        &report,
        "--summary",
        "written",
        "--result",
        "the full text",
    ]);
    assert_eq!(status(&report), "done");
    assert_eq!(
        status(&review),
        "ready",
        "completing the parent promotes the child"
    );
    let shown = b.json(&["show", &report, "--json"]);
    assert_eq!(shown["task"]["result"], "the full text");
    assert_eq!(shown["comments"][0]["body"], "first draft is in");

    b.ok(&["assign", &review, "none"]);
    assert!(b.json(&["show", &review, "--json"])["task"]["assignee"].is_null());
    b.ok(&["block", &spare, "waiting for a decision"]);
    assert_eq!(status(&spare), "blocked");
    b.ok(&["unblock", &spare]);
    b.ok(&["archive", &spare]);
    assert_eq!(status(&spare), "archived");

    let stats = b.json(&["stats", "--json"]);
    assert_eq!(stats["counts"]["done"], 1);
    assert_eq!(stats["counts"]["ready"], 1);
    assert_eq!(stats["counts"]["archived"], 1);

    // Tables for people: aligned columns with a header.
    let table = b.ok(&["list"]);
    let header = table.lines().next().unwrap();
    assert!(header.starts_with("ID") && header.contains("STATUS") && header.contains("TITLE"));
    assert!(b.ok(&["stats"]).contains("done"));
    let filtered = b.json(&["list", "--status", "done", "--json"]);
    assert_eq!(filtered.as_array().unwrap().len(), 1);

    // The event log replays from a cursor.
    let out = b.ok(&["watch", "--since", "0", "--once", "--json"]);
    let kinds: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(kinds.contains(&"created".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"completed".to_string()), "{kinds:?}");
    let ids: Vec<i64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "events in order: {ids:?}"
    );
    let since = ids[ids.len() - 2].to_string();
    let tail = b.ok(&["watch", "--since", &since, "--once", "--json"]);
    assert_eq!(tail.lines().count(), 1, "only events after the cursor");
}

#[test]
fn idempotency_keys_return_the_same_task() {
    let b = Board::new();
    let first = b.json(&[
        "create",
        "nightly build",
        "--idempotency-key",
        "build-42",
        "--json",
    ]);
    let again = b.json(&[
        "create",
        "nightly build",
        "--idempotency-key",
        "build-42",
        "--json",
    ]);
    assert_eq!(first["task"]["id"], again["task"]["id"]);
    assert_eq!(first["created"], true);
    assert_eq!(again["created"], false);
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_code() {
    let b = Board::new();
    let a = b.create(&["a"]);
    let c = b.create(&["c", "--parent", &a]);
    b.fails(&["show", "42"], 2, "is not a task id");
    b.fails(&["show", "t_00000000"], 1, "there is no task t_00000000");
    b.fails(
        &["create", "x", "--max-runtime", "soon"],
        2,
        "write whole seconds",
    );
    b.fails(&["create", "  "], 2, "title is empty");
    b.fails(
        &["list", "--status", "finished"],
        2,
        "use one of triage, todo",
    );
    b.fails(
        &["list", "--sort", "random"],
        2,
        "created, created-desc, priority or updated",
    );
    b.fails(&["link", &c, &a], 1, "cycle");
    b.fails(&["link", &a, &a], 1, "");
    b.fails(
        &["complete", &a, &c, "--summary", "both"],
        2,
        "one at a time",
    );
    b.fails(&["--board", "Bad Slug!", "list"], 2, "slug");
    b.fails(
        &["boards", "switch", "nowhere"],
        1,
        "there is no board nowhere;",
    );
    b.fails(&["assign", &a, " "], 2, "profile is empty");
    b.fails(
        &["comment", &a, "hi", "--author", ""],
        2,
        "--author is empty",
    );
    b.fails(&["create", "x", "--tenant", ""], 2, "--tenant is empty");
    b.fails(&["dispatch", "--dry-run", "--max", "0"], 2, "at least 1");
    b.fails(
        &["dispatch", "--dry-run", "--failure-limit", "0"],
        2,
        "--failure-limit must be at least 1",
    );
    b.fails(&["watch", "--once", "--interval", "soon"], 2, "--interval");
    assert!(
        b.ok(&["watch", "--once", "--since", "0", "--interval", "2s"])
            .contains("created"),
        "--interval is accepted"
    );
    // Every id is checked before any task changes.
    b.fails(&["archive", &a, "t_nothex!"], 2, "is not a task id");
    assert_eq!(b.json(&["show", &a, "--json"])["task"]["status"], "ready");
    b.fails(&["boards", "rm", "default"], 1, "default board");
    b.fails(
        &["watch", "--kinds", "exploded", "--once"],
        2,
        "not an event kind",
    );
    b.fails(&["comment", &a, ""], 2, "comment is empty");

    // A bad config value names its key; a bad store says what to give instead.
    std::fs::write(
        b.dir.path().join("troupe.yaml"),
        "kanban:\n  failure_limit: 0\n",
    )
    .unwrap();
    b.fails(&["list"], 2, "kanban.failure_limit");
    std::fs::remove_file(b.dir.path().join("troupe.yaml")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.args(["kanban", "--store", "mysql://db/x", "list"]);
    isolate(&mut cmd, b.dir.path());
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("postgres://"));
}

#[test]
fn store_errors_name_boards_and_tasks_as_typed() {
    let b = Board::new();
    b.ok(&["boards", "create", "ops"]);
    let messages = [
        (vec!["boards", "create", "ops"], "board ops already exists;"),
        (
            vec!["--board", "nowhere", "list"],
            "there is no board nowhere;",
        ),
        (
            vec!["--board", "ops", "show", "t_00000000"],
            "there is no task t_00000000 on board ops",
        ),
    ];
    for (args, needle) in messages {
        let out = b.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
        assert!(!err.contains("BoardSlug"), "{args:?}: {err}");
    }
    b.ok(&["boards", "rm", "ops"]);
    let out = b.run(&["--board", "ops", "create", "late"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("board ops is archived;"), "{err}");
}

#[test]
fn board_switching_persists_across_invocations() {
    let b = Board::new();
    b.ok(&[
        "boards",
        "create",
        "ops",
        "--description",
        "operations work",
    ]);
    let out = b.ok(&["boards", "switch", "ops"]);
    assert!(out.contains("remembered in"), "{out}");
    let id = b.create(&["on the ops board"]);
    // A later invocation works on ops without --board.
    let ops = b.json(&["list", "--json"]);
    assert_eq!(ops[0]["id"], id.as_str());
    let default = b.json(&["--board", "default", "list", "--json"]);
    assert!(default.as_array().unwrap().is_empty());
    let boards = b.ok(&["boards", "list"]);
    assert!(
        boards
            .lines()
            .any(|l| l.starts_with('*') && l.contains("ops")),
        "{boards}"
    );
    // Cross-board links are refused.
    let other = b.create(&["on default", "--board", "default"]);
    b.fails(&["link", &id, &other], 1, "");
    // Removing the current board falls back to default.
    b.ok(&["boards", "rm", "ops"]);
    let now = b.json(&["list", "--json"]);
    assert_eq!(now[0]["id"], other.as_str());
}

/// A troupe.yaml with one profile answering from a script that completes its task.
fn scripted_profile(dir: &Path) {
    let script = dir.join("coder.yaml");
    std::fs::write(
        &script,
        "cursor: conversation\nturns:\n  - text: \"On it.\"\n    tool_calls:\n      - name: kanban_complete\n        arguments: {summary: \"done by the script\", result: \"scripted result\"}\n  - text: \"Finished.\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("troupe.yaml"),
        format!(
            "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {}\n",
            script.display()
        ),
    )
    .unwrap();
}

#[test]
fn dispatch_runs_ready_tasks_with_a_scripted_profile() {
    let b = Board::new();
    // A task for a profile that is not (or no longer) configured: made before troupe.yaml
    // names profiles, since with them `create` refuses it.
    let ghost = b.create(&["for nobody", "--assignee", "ghost"]);
    scripted_profile(b.dir.path());
    b.fails(
        &["create", "again for nobody", "--assignee", "ghost"],
        2,
        "there is no profile \"ghost\" under profiles: in troupe.yaml",
    );
    let first = b.create(&["first", "--assignee", "coder"]);
    let second = b.create(&["second", "--parent", &first]);

    let dry = b.json(&["dispatch", "--dry-run", "--json"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["claimed"].as_array().unwrap().len(), 1);
    assert_eq!(dry["skipped_nonspawnable"][0][0], ghost.as_str());
    let status = |id: &str| b.json(&["show", id, "--json"])["task"]["status"].clone();
    assert_eq!(status(&first), "ready", "a dry run changes nothing");

    let report = b.json(&["dispatch", "--json"]);
    assert_eq!(report["claimed"][0]["task_id"], first.as_str());
    // The one-shot dispatch runs until idle: the child (default assignee) ran too.
    assert_eq!(status(&first), "done");
    assert_eq!(status(&second), "done");
    assert_eq!(status(&ghost), "ready");
    let runs = b.json(&["runs", &first, "--json"]);
    assert_eq!(runs[0]["outcome"], "completed");
    assert_eq!(runs[0]["profile"], "coder");
    assert!(b.ok(&["runs", &first]).contains("done by the script"));
}

#[test]
fn a_run_that_spends_its_profiles_budget_blocks_its_task() {
    let b = Board::new();
    let script = b.dir.path().join("costly.yaml");
    // The first answer alone takes 610 tokens against the profile's 500: its call (which
    // would complete the task) is never run, and the task is blocked for a person.
    std::fs::write(
        &script,
        "turns:\n  - text: \"Starting.\"\n    usage: {prompt_tokens: 600, completion_tokens: 10}\n    tool_calls:\n      - name: kanban_complete\n        arguments: {summary: \"should not happen\"}\n",
    )
    .unwrap();
    let config = |budget: &str| {
        std::fs::write(
            b.dir.path().join("troupe.yaml"),
            format!(
                "kanban:\n  default_assignee: coder\nprofiles:\n  coder:\n    script: {}\n    budget: {budget}\n",
                script.display()
            ),
        )
        .unwrap();
    };
    config("{max_tokens: -1}");
    b.fails(
        &["dispatch"],
        2,
        "`profiles.coder.budget.max_tokens`: expected a whole number of tokens above 0",
    );
    config("{max_tokens: 500}");
    let id = b.create(&["costly job"]);
    b.json(&["dispatch", "--json"]);
    let task = b.json(&["show", &id, "--json"])["task"].clone();
    assert_eq!(task["status"], "blocked", "{task}");
    assert_eq!(task["block_kind"], "budget", "{task}");
    let reason = task["block_reason"].as_str().unwrap();
    assert!(
        reason.contains("token budget is spent (610 of 500"),
        "{reason}"
    );
    assert!(reason.contains("raise the profile's budget"), "{reason}");
    // What the run spent is kept with it, and shown.
    let runs = b.json(&["runs", &id, "--json"]);
    assert_eq!(runs[0]["usage"]["input_tokens"], 600, "{runs}");
    assert_eq!(runs[0]["usage"]["requests"], 1, "{runs}");
    assert!(b.ok(&["runs", &id]).contains("610 tok"));
    assert!(b.ok(&["show", &id]).contains("spent 610 tok over 1 run(s)"));

    // A task's own budget narrows a looser profile's.
    config("{max_tokens: 100000}");
    b.fails(
        &["create", "x", "--max-cost-usd", "0"],
        2,
        "--max-cost-usd: expected a number above 0",
    );
    let narrow = b.create(&["narrow job", "--max-tokens", "300"]);
    let loose = b.json(&["show", &narrow, "--json"])["task"]["budget"].clone();
    assert_eq!(loose["max_tokens"], 300, "{loose}");
    b.json(&["dispatch", "--json"]);
    let task = b.json(&["show", &narrow, "--json"])["task"].clone();
    assert_eq!(task["block_kind"], "budget", "{task}");
    let reason = task["block_reason"].as_str().unwrap();
    assert!(reason.contains("(610 of 300"), "{reason}");
}

#[test]
fn worker_process_drains_the_board_and_exits_when_idle() {
    let b = Board::new();
    scripted_profile(b.dir.path());
    let ids: Vec<String> = (0..4).map(|i| b.create(&[&format!("job {i}")])).collect();
    let out = b.run(&[
        "worker",
        "--profiles",
        "coder",
        "--max",
        "2",
        "--until-idle",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("4 claimed, 4 completed"), "{err}");
    for id in ids {
        assert_eq!(b.json(&["show", &id, "--json"])["task"]["status"], "done");
    }
    b.fails(
        &["worker", "--profiles", "nobody", "--until-idle"],
        2,
        "no profile \"nobody\"",
    );
}

#[test]
fn a_worker_without_profiles_says_how_to_add_one() {
    let b = Board::new();
    b.fails(&["dispatch"], 2, "profiles:");
    b.fails(&["worker", "--until-idle"], 2, "profiles:");
}

#[test]
fn a_dry_run_needs_no_profiles_and_names_unrunnable_tasks() {
    let b = Board::new();
    let mine = b.create(&["assigned", "--assignee", "coder"]);
    let loose = b.create(&["unassigned"]);
    let text = b.ok(&["dispatch", "--dry-run"]);
    assert!(text.contains("would claim 0 task(s)"), "{text}");
    let line = |id: &str| {
        text.lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{id} missing from {text}"))
            .to_string()
    };
    assert!(line(&mine).contains("\"coder\" is not a profile"), "{text}");
    assert!(line(&mine).contains("none are configured"), "{text}");
    assert!(line(&loose).contains("no assignee"), "{text}");
    assert!(text.contains("add a profiles: section"), "{text}");

    let report = b.json(&["dispatch", "--dry-run", "--json"]);
    assert_eq!(report["dry_run"], true);
    assert!(report["claimed"].as_array().unwrap().is_empty());
    assert_eq!(report["skipped_nonspawnable"][0][0], mine.as_str());
    assert_eq!(report["skipped_nonspawnable"][0][1], "coder");
    assert_eq!(report["skipped_unassigned"][0], loose.as_str());
    assert_eq!(
        b.json(&["show", &mine, "--json"])["task"]["status"],
        "ready",
        "a dry run changes nothing"
    );
}

#[test]
fn demo_fans_out_offline_and_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("demo");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.arg("demo")
        .arg("--store")
        .arg(&store)
        .current_dir(dir.path());
    isolate(&mut cmd, dir.path());
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("bundled demo model"), "{text}");
    assert!(text.contains("7 of 7 tasks done"), "{text}");
    assert!(text.contains("Processors: "), "{text}");
    // The board stays behind for inspection, and the report waited for every check.
    let b = Board {
        dir: tempfile::tempdir().unwrap(),
    };
    let mut list = Command::new(env!("CARGO_BIN_EXE_troupe"));
    list.args(["kanban", "--store"])
        .arg(&store)
        .args(["list", "--json"]);
    isolate(&mut list, b.dir.path());
    let tasks: Value = serde_json::from_slice(&list.output().unwrap().stdout).unwrap();
    let tasks = tasks.as_array().unwrap();
    assert_eq!(tasks.len(), 7);
    let report = tasks
        .iter()
        .find(|t| t["title"] == "Write the machine report")
        .unwrap();
    let checks: Vec<&Value> = tasks
        .iter()
        .filter(|t| t["title"].as_str().unwrap().starts_with("Check: "))
        .collect();
    let report_started = report["started_at"].as_i64().unwrap();
    for check in checks {
        assert!(check["completed_at"].as_i64().unwrap() <= report_started);
    }
}

#[test]
fn dispatch_with_max_runs_at_most_that_many_tasks() {
    let b = Board::new();
    scripted_profile(b.dir.path());
    let first = b.create(&["first", "--assignee", "coder"]);
    let second = b.create(&["second", "--assignee", "coder"]);
    let child = b.create(&["after first", "--parent", &first]);
    let report = b.json(&["dispatch", "--max", "1", "--json"]);
    assert_eq!(report["claimed"].as_array().unwrap().len(), 1);
    let status = |id: &str| b.json(&["show", id, "--json"])["task"]["status"].clone();
    let statuses = [status(&first), status(&second), status(&child)];
    let done = statuses.iter().filter(|s| *s == "done").count();
    assert_eq!(done, 1, "--max 1 ran one task, not the board: {statuses:?}");
    assert_eq!(status(&first), "done", "the higher-ranked task ran");
    assert_eq!(status(&second), "ready");
    assert_eq!(
        status(&child),
        "ready",
        "the child became ready but was not run"
    );
}
