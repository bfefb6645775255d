//! Every stored session in the dashboard, behind the dashboard token: `troupe serve` with
//! `TROUPE_DASHBOARD_TOKEN`, a chat session (`troupe chat -q`), a session opened over HTTP and a
//! board worker's run, all in one session store.
//! - HTTP: `GET /api/store/sessions` lists all three origins a page at a time (the cursor walks
//!   them without a repeat), finds a task's run sessions with their run number, and refuses the
//!   API token (403 `dashboard_scope_required`), no token and a wrong one (401); the transcript
//!   route reads a chat's conversation with the dashboard token and not with the API token; the
//!   dashboard token opens no `/v1` route.
//! - Chromium: signed in with the dashboard token, the Sessions tab lists the stored sessions
//!   and opens a worker's transcript (its `kanban_complete` call, and no command it never ran);
//!   a task's panel links its run to the same transcript; signed in with the API token, the
//!   list says which token it needs. A long title and body stay inside the card.
//!
//! Screenshots go to `target/tmp/dashboard/`.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::browser::{Browser, browser_available, screenshots};
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

/// The worker reports a line count it never measured: its transcript shows no command.
const SCRIPT: &str = "cursor: conversation\nwhen_exhausted: Done.\nturns:\n  - match: WORKER-JOB\n    tool_calls:\n      - name: kanban_complete\n        arguments: {summary: the file has 152 lines}\n";

const DASHBOARD_TOKEN: &str = "dashboard-token-for-the-tests-0123456789";

const STEP: Duration = Duration::from_secs(60);

/// `troupe serve` with the dashboard token set.
async fn start(dir: &TroupeDir) -> Served {
    let (code, _, err) = dir.run(&["kanban", "init"]).await;
    assert_eq!(code, 0, "{err}");
    let mut command = dir.troupe();
    command
        .args(["serve", "--port", "0"])
        .env(troupe::http::auth::DASHBOARD_TOKEN_ENV, DASHBOARD_TOKEN);
    Served::spawn(command, Some(TOKEN)).await
}

/// One call with `token` (or none): (status, JSON body).
async fn call_with(served: &Served, token: Option<&str>, path: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("{}{path}", served.base));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// What the store holds after a chat, an HTTP session and a worker's run.
struct Stored {
    http_id: String,
    task_id: String,
    run_id: i64,
}

async fn populate(dir: &TroupeDir, served: &Served) -> Stored {
    let (code, out, err) = dir.run(&["chat", "-q", "CHAT-ONLY words"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let (status, opened) = served
        .call(
            Method::POST,
            "/api/sessions",
            Some(json!({"script": {"turns": [{"text": "HTTP reply"}]}})),
        )
        .await;
    assert_eq!(status, 201, "{opened}");
    let http_id = opened["session_id"].as_str().unwrap().to_string();
    let (status, answer) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{http_id}/messages"),
            Some(json!({"text": "hello over http", "wait": true})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let created = dir
        .run_json(&[
            "kanban",
            "create",
            "WORKER-JOB count the lines of notes.txt",
            "--body",
            "WORKER-JOB: run wc -l on notes.txt and report the count",
            "--assignee",
            "coder",
        ])
        .await;
    let task_id = created["task"]["id"]
        .as_str()
        .or_else(|| created["id"].as_str())
        .unwrap()
        .to_string();
    let deadline = tokio::time::Instant::now() + STEP;
    let run_id = loop {
        let (status, detail) = served
            .call(
                Method::GET,
                &format!("/api/plugins/kanban/tasks/{task_id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{detail}");
        if detail["task"]["status"] == "done" {
            break detail["runs"][0]["id"].as_i64().unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker did not finish: {detail}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Stored {
        http_id,
        task_id,
        run_id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_token_reads_every_stored_session_and_the_api_token_does_not() {
    let dir = TroupeDir::new(YAML, SCRIPT).await;
    let served = start(&dir).await;
    let stored = populate(&dir, &served).await;
    let dash = Some(DASHBOARD_TOKEN);

    // The API token (the one /v1 clients hold) is refused, saying which token to send.
    let (status, body) = call_with(&served, Some(TOKEN), "/api/store/sessions").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "dashboard_scope_required", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TROUPE_DASHBOARD_TOKEN"),
        "{body}"
    );
    for token in [None, Some("not-the-token-of-this-server-0000")] {
        let (status, body) = call_with(&served, token, "/api/store/sessions").await;
        assert_eq!(status, 401, "{token:?}: {body}");
    }

    // Every origin is listed with the dashboard token.
    let (status, all) = call_with(&served, dash, "/api/store/sessions?limit=500").await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["next"], Value::Null, "{all}");
    let rows = all["sessions"].as_array().unwrap();
    let origin_of = |origin: &str| {
        rows.iter()
            .find(|s| s["origin"] == origin)
            .unwrap_or_else(|| panic!("no {origin} session in {all}"))["session_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let chat_id = origin_of("chat");
    let worker_id = origin_of("worker");
    // A worker's session is closed once its run settled, not left open forever.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let (status, page) = call_with(&served, dash, "/api/store/sessions?origin=worker").await;
        assert_eq!(status, 200, "{page}");
        let row = page["sessions"]
            .as_array()
            .and_then(|rows| rows.iter().find(|s| s["session_id"] == worker_id.as_str()))
            .cloned()
            .unwrap_or_default();
        if row["status"] == "closed" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker's session is still {}: {page}",
            row["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(origin_of("http"), stored.http_id);
    let newest_first: Vec<i64> = rows
        .iter()
        .map(|s| s["updated_at"].as_i64().unwrap())
        .collect();
    assert!(newest_first.windows(2).all(|w| w[0] >= w[1]), "{all}");

    // A page of one at a time walks the same rows, none twice.
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/store/sessions?limit=1&cursor={c}"),
            None => "/api/store/sessions?limit=1".to_string(),
        };
        let (status, page) = call_with(&served, dash, &path).await;
        assert_eq!(status, 200, "{page}");
        let rows = page["sessions"].as_array().unwrap();
        assert!(rows.len() <= 1, "{page}");
        walked.extend(rows.iter().map(|s| s["session_id"].clone()));
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    let listed: Vec<Value> = rows.iter().map(|s| s["session_id"].clone()).collect();
    assert_eq!(walked, listed);
    let (status, origin) = call_with(&served, dash, "/api/store/sessions?origin=chat").await;
    assert_eq!(status, 200);
    assert!(
        origin["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["origin"] == "chat"),
        "{origin}"
    );
    for (path, code) in [
        ("/api/store/sessions?cursor=garbage", "bad_cursor"),
        ("/api/store/sessions?limit=0", "bad_limit"),
        ("/api/store/sessions?limit=501", "bad_limit"),
    ] {
        let (status, body) = call_with(&served, dash, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], code, "{path}: {body}");
    }

    // A task's runs: the worker's session, with the run's number.
    let (status, runs) = call_with(
        &served,
        dash,
        &format!("/api/store/sessions?task={}", stored.task_id),
    )
    .await;
    assert_eq!(status, 200, "{runs}");
    let runs = runs["sessions"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["session_id"], worker_id.as_str());
    assert_eq!(runs[0]["run"], stored.run_id);

    // Transcripts: a chat's with the dashboard token only; the HTTP session's with either.
    let chat_path = format!("/api/sessions/{chat_id}/transcript");
    let (status, body) = call_with(&served, Some(TOKEN), &chat_path).await;
    assert_eq!(status, 404, "{body}");
    let (status, chat) = call_with(&served, dash, &chat_path).await;
    assert_eq!(status, 200, "{chat}");
    assert!(chat.to_string().contains("CHAT-ONLY words"), "{chat}");
    let http_path = format!("/api/sessions/{}/transcript", stored.http_id);
    for token in [TOKEN, DASHBOARD_TOKEN] {
        let (status, body) = call_with(&served, Some(token), &http_path).await;
        assert_eq!(status, 200, "{body}");
    }
    // The worker's transcript shows what it called: kanban_complete, and no command.
    let (status, worker) = call_with(
        &served,
        dash,
        &format!("/api/sessions/{worker_id}/transcript"),
    )
    .await;
    assert_eq!(status, 200, "{worker}");
    let text = worker.to_string();
    assert!(text.contains("kanban_complete"), "{text}");
    assert!(!text.contains("\"name\":\"terminal\""), "{text}");

    // The dashboard token is no key for the OpenAI-compatible API.
    let (status, body) = call_with(&served, dash, "/v1/models").await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = call_with(&served, Some(TOKEN), "/v1/models").await;
    assert_eq!(status, 200);
    // And the server said where the dashboard token comes from.
    assert!(
        served
            .log()
            .iter()
            .any(|l| l.contains("dashboard token") && l.contains("TROUPE_DASHBOARD_TOKEN")),
        "{:?}",
        served.log()
    );
}

/// Signs the page in with `token` and waits for the dashboard to show.
async fn sign_in(page: &Browser, token: &str) {
    page.sign_in(token).await.unwrap();
    page.wait_for("!document.getElementById('app').hidden", STEP)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_tab_and_a_task_panel_open_workers_transcripts() {
    if !browser_available("the_sessions_tab_and_a_task_panel_open_workers_transcripts") {
        return;
    }
    let dir = TroupeDir::new(YAML, SCRIPT).await;
    let served = start(&dir).await;
    let stored = populate(&dir, &served).await;
    std::fs::create_dir_all(screenshots()).unwrap();
    let page = Browser::launch().await.unwrap();
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
    )
    .await
    .unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    sign_in(&page, DASHBOARD_TOKEN).await;

    // A title of three lines at this width is shown whole (two lines were, the rest cut), and
    // the card's text stays inside its box.
    let card = format!(".card[data-task-id=\"{}\"]", stored.task_id);
    page.wait_for(&format!("!!document.querySelector('{card}')"), STEP)
        .await
        .unwrap();
    let fits = page
        .eval(&format!(
            "(() => {{ const c = document.querySelector('{card}'); const box = c.getBoundingClientRect(); \
             const t = c.querySelector('.title'); const lines = Math.round(t.clientHeight / parseFloat(getComputedStyle(t).lineHeight)); \
             return [lines, t.scrollHeight <= t.clientHeight + 1, \
             [...c.children].filter(ch => !ch.hidden).every(ch => ch.getBoundingClientRect().bottom <= box.bottom - 5)]; }})()"
        ))
        .await
        .unwrap();
    page.screenshot(&screenshots().join("cards.png"))
        .await
        .unwrap();
    assert_eq!(
        fits,
        json!([3, true, true]),
        "[title lines, title whole, inside the card]"
    );

    // The Sessions tab: every stored session, the worker's transcript a click away.
    page.click("#tab-sessions").await.unwrap();
    page.wait_for(
        "['chat', 'http', 'worker'].every(o => document.querySelector(`.stored-row[data-origin=\"${o}\"]`))",
        STEP,
    )
    .await
    .unwrap();
    page.screenshot(&screenshots().join("stored-sessions.png"))
        .await
        .unwrap();
    page.click(".stored-row[data-origin=\"worker\"] button[data-transcript]")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('transcript')?.open && !!document.querySelector('#transcript .msg-call[data-tool=\"kanban_complete\"]')",
        STEP,
    )
    .await
    .unwrap();
    let ran = page
        .eval("[...document.querySelectorAll('#transcript .msg-call')].map(c => c.dataset.tool)")
        .await
        .unwrap();
    assert_eq!(ran, json!(["kanban_complete"]), "the worker ran no command");
    page.screenshot(&screenshots().join("worker-transcript.png"))
        .await
        .unwrap();
    page.eval("document.getElementById('transcript').close()")
        .await
        .unwrap();

    // The task's panel: its run links the same transcript.
    page.click("#tab-board").await.unwrap();
    page.click(&card).await.unwrap();
    let run_button = format!(
        ".run-transcripts[data-run=\"{}\"] button[data-transcript]",
        stored.run_id
    );
    page.wait_for(&format!("!!document.querySelector('{run_button}')"), STEP)
        .await
        .unwrap();
    page.click(&run_button).await.unwrap();
    page.wait_for(
        "document.getElementById('transcript')?.open && !!document.querySelector('#transcript .msg-call[data-tool=\"kanban_complete\"]')",
        STEP,
    )
    .await
    .unwrap();
    page.screenshot(&screenshots().join("task-run-transcript.png"))
        .await
        .unwrap();
    page.eval("document.getElementById('transcript').close()")
        .await
        .unwrap();

    // Signed in with the API token: the list says which token it needs.
    page.click("#task-panel .close").await.unwrap();
    page.click("#signout").await.unwrap();
    sign_in(&page, TOKEN).await;
    page.click("#tab-sessions").await.unwrap();
    page.wait_for(
        "document.querySelector('.stored-refused')?.dataset.code === 'dashboard_scope_required'",
        STEP,
    )
    .await
    .unwrap();
    page.screenshot(&screenshots().join("stored-sessions-api-token.png"))
        .await
        .unwrap();
    eprintln!("screenshots in {}", screenshots().display());
}
