//! Schedules through `troupe serve`: jobs made with `troupe cron` show in the dashboard's
//! Schedules view (real headless Chromium) with their next run, a job due every second is
//! fired by the server's own dispatcher and its task run to done by a board worker, a job is
//! paused from the page, and the `/api/schedules` routes refuse bad definitions with what to
//! send instead. Without Chromium the page part skips, as the other dashboard tests do.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support::browser::{Browser, browser_available};
use crate::support::serve::{Served, TOKEN, TroupeDir};

const YAML: &str = r#"model:
  base_url: "{{MODEL_URL}}"
  model: mock-model
kanban:
  store: "{{STORE}}"
  dispatch_interval: 1s
serve:
  feed_poll_ms: 5
profiles:
  coder:
    toolsets: [core]
    system_prompt: You carry out board tasks.
"#;

/// The board worker's model: complete the task.
const WORKER_SCRIPT: &str = "cursor: conversation\nwhen_exhausted: Done.\nturns:\n  - match: SCHEDULED-JOB\n    tool_calls:\n      - name: kanban_complete\n        arguments: {summary: finished by the worker}\n";

const STEP: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_show_in_the_dashboard_fire_from_serve_and_pause_from_the_page() {
    let dir = TroupeDir::new(YAML, WORKER_SCRIPT).await;
    let served = Served::start(&dir, &[]).await;
    dir.run_json(&[
        "cron",
        "create",
        "--name",
        "nightly-report",
        "--schedule",
        "30 2 * * *",
        "--timezone",
        "America/New_York",
        "--title",
        "report",
    ])
    .await;
    dir.run_json(&[
        "cron",
        "create",
        "--name",
        "fast",
        "--schedule",
        "every 1s",
        "--title",
        "SCHEDULED-JOB tick",
        "--body",
        "SCHEDULED-JOB",
        "--assignee",
        "coder",
        "--max-runs",
        "1",
    ])
    .await;

    // The API: listed, and bad definitions refused with what to send instead.
    let (status, list) = served.call(Method::GET, "/api/schedules", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["jobs"].as_array().unwrap().len(), 2, "{list}");
    for (body, says) in [
        (
            json!({"name": "x", "schedule": "0 25 * * *", "task": {"title": "t"}}),
            "0 to 23",
        ),
        (
            json!({"name": "x", "schedule": "every 10m", "timezone": "Moon/Base", "task": {"title": "t"}}),
            "IANA",
        ),
        (
            json!({"name": "x", "schedule": "every 100ms", "task": {"title": "t"}}),
            "every <n><unit>",
        ),
        (
            json!({"name": "x", "schedule": "every 10m", "prompt": "p", "profile": "ghost"}),
            "known: coder",
        ),
    ] {
        let (status, answer) = served
            .call(Method::POST, "/api/schedules", Some(body))
            .await;
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message} should say {says}");
    }

    // The server's dispatcher fires the fast job once; its worker completes the task.
    let mut history = serde_json::Value::Null;
    for _ in 0..600 {
        let (_, h) = served
            .call(Method::GET, "/api/schedules/fast/history", None)
            .await;
        history = h;
        if history["runs"][0]["outcome"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(history["runs"].as_array().unwrap().len(), 1, "{history}");
    assert_eq!(history["runs"][0]["outcome"], "done", "{history}");

    if !browser_available("jobs_show_in_the_dashboard_fire_from_serve_and_pause_from_the_page") {
        return;
    }
    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    page.sign_in(TOKEN).await.unwrap();
    page.wait_for("document.body.dataset.boardLoaded === 'default'", STEP)
        .await
        .unwrap();
    page.click("#tab-schedules").await.unwrap();
    page.wait_for(
        "document.querySelectorAll('#schedules tr[data-job-id]').length === 2",
        STEP,
    )
    .await
    .unwrap();
    let row = |name: &str, cell: &str| {
        format!(
            "(() => {{ const r = [...document.querySelectorAll('#schedules tr[data-job-id]')]\
             .find(r => r.querySelector('.job-name').textContent === '{name}'); \
             return r ? r.querySelector('{cell}').textContent : null; }})()"
        )
    };
    let next = page
        .eval(&row("nightly-report", ".job-next"))
        .await
        .unwrap();
    assert!(
        next.as_str().is_some_and(|t| t.len() > 4),
        "a next run is shown: {next}"
    );
    let last = page.eval(&row("fast", ".job-last")).await.unwrap();
    assert_eq!(last, "done", "the fired job's last outcome");
    assert_eq!(
        page.eval(&row("fast", ".job-state")).await.unwrap(),
        "ended"
    );
    // The board view is hidden while the schedules show.
    assert_eq!(
        page.eval("document.getElementById('view-board').hidden")
            .await
            .unwrap(),
        true
    );

    // Pause from the page.
    page.eval(
        "[...document.querySelectorAll('#schedules tr[data-job-id]')]\
         .find(r => r.querySelector('.job-name').textContent === 'nightly-report')\
         .querySelector('button').click()",
    )
    .await
    .unwrap();
    page.wait_for(
        &format!("{} === 'paused'", row("nightly-report", ".job-state")),
        STEP,
    )
    .await
    .unwrap();
    let (_, job) = served
        .call(Method::GET, "/api/schedules/nightly-report", None)
        .await;
    assert_eq!(job["job"]["state"], "paused", "{job}");
    std::fs::create_dir_all(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard"),
    )
    .unwrap();
    let _ = page
        .screenshot(
            &std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join("dashboard")
                .join("schedules.png"),
        )
        .await;
}
