//! The `cronjob` tool from `troupe chat -q`, against the scripted model over real HTTP: the
//! model makes a job (and is told, with what to send instead, when it names a profile that does
//! not exist), `troupe cron list --json` shows it, a `troupe kanban worker` process fires it
//! and runs the task it makes to done, and `troupe cron history` records the run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{Script, ScriptTurn};

/// The board worker's model: it completes its task at once.
const WORKER_SCRIPT: &str = r#"when_exhausted: "Finished."
turns:
  - tool_calls:
      - name: kanban_complete
        arguments: {summary: "checked", result: "ok"}
  - text: "Finished."
"#;

fn troupe(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_troupe"));
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TROUPE_HOME", dir.join(".troupe-home"))
        .env_remove("TROUPE_KANBAN_STORE")
        .env_remove("TROUPE_KANBAN_BOARD")
        .env_remove("TROUPE_BASE_URL")
        .env_remove("OPENAI_BASE_URL");
    command
}

async fn output(mut command: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn cron_json(dir: &Path, args: &[&str]) -> Value {
    let out = troupe(dir)
        .arg("cron")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "troupe cron {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_in_chat_is_listed_fired_by_a_worker_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script::new()
        .turn(ScriptTurn::text("Scheduling.").with_tool_call(
            "cronjob",
            json!({"action": "create", "name": "health-check", "schedule": "every 1s",
                   "prompt": "check the service", "profile": "nobody"}),
        ))
        .turn(ScriptTurn::text("Fixing the profile.").with_tool_call(
            "cronjob",
            json!({"action": "create", "name": "health-check", "schedule": "every 1s",
                   "task": {"title": "check the service", "body": "look at it", "assignee": "checker"},
                   "missed": "skip", "max_runs": 2}),
        ))
        .turn(ScriptTurn::text("It is scheduled."));
    let server = MockServer::start(script).await.unwrap();
    std::fs::write(dir.path().join("worker-script.yaml"), WORKER_SCRIPT).unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\napprovals:\n  allowlist: [\"cronjob:create\"]\nkanban:\n  store: {}\nprofiles:\n  checker:\n    script: {}\n",
            server.url(),
            dir.path().join("boards").display(),
            dir.path().join("worker-script.yaml").display()
        ),
    )
    .unwrap();
    let mut chat = troupe(dir.path());
    chat.args([
        "chat",
        "-q",
        "check the service every second, twice",
        "--json",
    ]);
    let out = output(chat).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The first call was refused with the known profiles named; the second made the job.
    let sent = server.requests();
    let tool_texts: Vec<String> = sent
        .iter()
        .flat_map(|r| r.messages().to_vec())
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert!(
        tool_texts.iter().any(|t| t.contains("no profile \\\"nobody\\\"") || t.contains("no profile \"nobody\"")),
        "{tool_texts:?}"
    );
    assert!(
        tool_texts.iter().any(|t| t.contains("checker")),
        "{tool_texts:?}"
    );

    let list = cron_json(dir.path(), &["list"]);
    let jobs = list.as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{list}");
    let job = &jobs[0];
    assert_eq!(job["name"], "health-check");
    assert_eq!(job["schedule"], "every 1s");
    assert_eq!(job["state"], "active");
    assert!(job["next_run"].is_string(), "{job}");
    assert_eq!(
        job["owner"], "default",
        "a chat session without a profile owns it as default"
    );

    // A worker fires it; each made task is run to done by the scripted worker.
    let mut worker = troupe(dir.path());
    worker
        .args(["kanban", "worker"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut worker = worker.spawn().unwrap();
    let mut history = Value::Null;
    for _ in 0..300 {
        history = cron_json(dir.path(), &["history", "health-check"]);
        let runs = history.as_array().unwrap();
        if runs.len() == 2 && runs.iter().all(|r| r["outcome"] == "done") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = worker.kill();
    let _ = worker.wait();
    let runs = history.as_array().unwrap();
    assert_eq!(runs.len(), 2, "max_runs 2: {history}");
    assert!(
        runs.iter()
            .all(|r| r["outcome"] == "done" && r["kind"] == "on_time"),
        "{history}"
    );
    assert!(
        runs.iter()
            .all(|r| r["task_id"].as_str().is_some_and(|t| t.starts_with("t_")))
    );

    // Two runs, then the job ended; the list says so with its last outcome.
    let list = cron_json(dir.path(), &["list"]);
    assert_eq!(list[0]["state"], "ended", "{list}");
    assert_eq!(list[0]["runs"], 2);
    assert_eq!(list[0]["last_outcome"], "done");
}

/// A model that schedules work for a profile, with no person to say yes: the job is never made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_model_cannot_schedule_work_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script::new()
        .turn(ScriptTurn::text("Scheduling.").with_tool_call(
            "cronjob",
            json!({"action": "create", "name": "every-minute", "schedule": "every 1m",
                   "prompt": "run the deploy script", "profile": "checker"}),
        ))
        .turn(ScriptTurn::text("Done."));
    let server = MockServer::start(script).await.unwrap();
    std::fs::write(dir.path().join("worker-script.yaml"), WORKER_SCRIPT).unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: local-model\nkanban:\n  store: {}\nprofiles:\n  checker:\n    script: {}\n",
            server.url(),
            dir.path().join("boards").display(),
            dir.path().join("worker-script.yaml").display()
        ),
    )
    .unwrap();
    let mut chat = troupe(dir.path());
    chat.args(["chat", "-q", "deploy every minute"]);
    output(chat).await;
    let refused = server.requests()[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .next_back()
        .unwrap_or_default();
    assert!(refused.contains("cronjob create"), "{refused}");
    let list = cron_json(dir.path(), &["list"]);
    assert_eq!(list, json!([]), "no job was made");
}
