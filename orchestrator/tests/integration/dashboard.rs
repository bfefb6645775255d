//! The web dashboard of `troupe serve` in a real headless Chromium, driven over the DevTools
//! protocol (`support::browser`), against the `troupe` binary with the mock model server:
//! - the page loads without the token and asks for it; a wrong one shows the sign-in again
//!   saying so, and every API route still refuses requests without it;
//! - a task created with `troupe kanban create` appears on the open page within a second; a
//!   card moves to `done` when a board worker completes its task, without a reload; a comment
//!   added in the page is in `troupe kanban show`;
//! - an approval raised by a subagent two levels down is answered in the page and the call
//!   runs; a hard stop from the page ends the session's turn;
//! - the page requests nothing from any host but the server.
//!
//! Screenshots of the board and of a task go to `target/tmp/dashboard/`. Without Chromium the
//! tests skip with a note, unless `TROUPE_REQUIRE_BROWSER` is set (CI), where they fail.
//! `dashboard_figures` (ignored) measures first paint at 5,000 tasks and event-to-card latency
//! for docs/benchmarks.md.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::browser::{Browser, browser_available, screenshots};
use crate::support::serve::{Served, TOKEN, TroupeDir};

/// The server's config: the mock model, a board store, approvals asked over HTTP for
/// `write_file`, delegation two levels deep, a `coder` profile its dispatcher runs, and the
/// feed polling every 5 ms.
const YAML: &str = r#"model:
  base_url: "{{MODEL_URL}}"
  model: mock-model
approvals:
  mode: manual
  unattended: deny
  require_approval: [write_file]
delegation:
  max_spawn_depth: 2
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

/// What the board worker's model does: complete the task it is given.
const WORKER_SCRIPT: &str = "cursor: conversation\nwhen_exhausted: Done.\nturns:\n  - match: WORKER-JOB\n    tool_calls:\n      - name: kanban_complete\n        arguments: {summary: finished by the worker}\n";

/// How long any one step may take before the test fails (the steps themselves are quick; this
/// only turns a hang into a failure on a loaded machine).
const STEP: Duration = Duration::from_secs(60);

/// Runs `troupe kanban create …` and returns the new task's id.
async fn cli_task(dir: &TroupeDir, args: &[&str]) -> String {
    let created = dir.run_json(args).await;
    created["task"]["id"]
        .as_str()
        .or_else(|| created["id"].as_str())
        .unwrap_or_else(|| panic!("no task id in {created}"))
        .to_string()
}

/// The status column a card is shown in, or null.
fn column_of(id: &str) -> String {
    format!(
        "(() => {{ const c = document.querySelector('.card[data-task-id=\"{id}\"]'); \
         return c ? c.closest('.column').dataset.status : null; }})()"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_signs_in_follows_the_cli_and_workers_and_takes_comments() {
    if !browser_available("the_board_signs_in_follows_the_cli_and_workers_and_takes_comments") {
        return;
    }
    let dir = TroupeDir::new(YAML, WORKER_SCRIPT).await;
    let served = Served::start(&dir, &[]).await;
    let base = served.base.clone();

    // The page and its assets load without the token, under a strict policy; the API does not.
    let page_response = reqwest::get(format!("{base}/")).await.unwrap();
    assert_eq!(page_response.status(), 200);
    let policy = page_response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("script-src 'self'"), "{policy}");
    let host = base.trim_start_matches("http://").to_string();
    assert!(
        policy.contains(&format!("connect-src 'self' ws://{host} wss://{host};")),
        "{policy}"
    );
    for path in [
        "/api/plugins/kanban/board",
        "/api/plugins/kanban/boards",
        "/api/sessions",
    ] {
        let status = reqwest::get(format!("{base}{path}"))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401, "{path} answered without the token");
    }

    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{base}/")).await.unwrap();

    // A wrong token: the sign-in comes back, saying the token was refused.
    page.sign_in("not-the-token-0123456789").await.unwrap();
    let error = page
        .wait_for(
            "(() => { const e = document.getElementById('signin-error'); \
             return !e.hidden && e.textContent; })()",
            STEP,
        )
        .await
        .unwrap();
    assert!(
        error.as_str().unwrap().contains("refused the token"),
        "{error}"
    );
    assert_eq!(
        page.eval("sessionStorage.getItem('troupe.token')")
            .await
            .unwrap(),
        Value::Null,
        "a refused token is not kept"
    );

    // The right one: the board loads and the feed goes live.
    page.sign_in(TOKEN).await.unwrap();
    page.wait_for("document.body.dataset.boardLoaded === 'default'", STEP)
        .await
        .unwrap();
    page.wait_for("document.body.dataset.feed === 'live'", STEP)
        .await
        .unwrap();
    // Marks this page load: still there at the end means nothing reloaded the page.
    page.eval("window.__sameLoad = true").await.unwrap();

    // A task created through the CLI appears within a second.
    let created = dir
        .run_json(&[
            "kanban",
            "create",
            "CLI-MADE task",
            "--body",
            "made on the command line",
        ])
        .await;
    let cli_id = created["task"]["id"]
        .as_str()
        .or_else(|| created["id"].as_str())
        .unwrap()
        .to_string();
    let made = Instant::now();
    let appeared = page
        .wait_for(&column_of(&cli_id), Duration::from_secs(1))
        .await;
    let took = made.elapsed();
    assert!(
        appeared.is_ok(),
        "the CLI task was not on the page within a second: {appeared:?}"
    );
    eprintln!("CLI task on the page after {took:?}");

    // A board worker completes a task: its card moves to done, live.
    let created = dir
        .run_json(&[
            "kanban",
            "create",
            "WORKER-JOB for the coder",
            "--body",
            "WORKER-JOB: finish it",
            "--assignee",
            "coder",
        ])
        .await;
    let worker_id = created["task"]["id"]
        .as_str()
        .or_else(|| created["id"].as_str())
        .unwrap()
        .to_string();
    page.wait_for(&format!("{} === 'done'", column_of(&worker_id)), STEP)
        .await
        .unwrap();
    page.screenshot(&screenshots().join("board.png"))
        .await
        .unwrap();

    // A comment added in the page is in `troupe kanban show`.
    page.click(&format!(".card[data-task-id=\"{cli_id}\"]"))
        .await
        .unwrap();
    page.wait_for(
        &format!("document.getElementById('task-panel').dataset.taskId === '{cli_id}' && document.querySelector('.task-title').textContent === 'CLI-MADE task'"),
        STEP,
    )
    .await
    .unwrap();
    page.click(".comment-form textarea").await.unwrap();
    page.type_text("COMMENT-FROM-THE-PAGE").await.unwrap();
    page.click(".comment-form button").await.unwrap();
    page.wait_for(
        "[...document.querySelectorAll('.comment-body')].some(c => c.textContent === 'COMMENT-FROM-THE-PAGE')",
        STEP,
    )
    .await
    .unwrap();
    let shown = dir.run_json(&["kanban", "show", &cli_id]).await;
    let comments = shown["comments"].as_array().unwrap();
    assert!(
        comments
            .iter()
            .any(|c| c["body"] == "COMMENT-FROM-THE-PAGE"),
        "{shown}"
    );
    page.screenshot(&screenshots().join("task.png"))
        .await
        .unwrap();

    // A fan-out: the parent's card counts its finished children. Completing the parent in its
    // panel lets the children run; a bulk action completes both; the mark reaches 2/2.
    let fan_parent = cli_task(&dir, &["kanban", "create", "FAN-OUT plan"]).await;
    let mut kids = Vec::new();
    for title in ["FAN-OUT part one", "FAN-OUT part two"] {
        kids.push(cli_task(&dir, &["kanban", "create", title, "--parent", &fan_parent]).await);
    }
    let progress = |id: &str| {
        format!(
            "document.querySelector('.card[data-task-id=\"{id}\"] .progress-text')?.textContent"
        )
    };
    page.wait_for(&format!("{} === '0/2'", progress(&fan_parent)), STEP)
        .await
        .unwrap();
    page.press("Escape").await.unwrap();
    page.click(&format!(".card[data-task-id=\"{fan_parent}\"]"))
        .await
        .unwrap();
    page.wait_for(
        "[...document.querySelectorAll('#task-panel .tree-node')].length === 2",
        STEP,
    )
    .await
    .unwrap();
    page.eval("[...document.querySelectorAll('#task-panel .actions button')].find(b => b.textContent === 'Complete').click()")
        .await
        .unwrap();
    for kid in &kids {
        page.wait_for(&format!("{} === 'ready'", column_of(kid)), STEP)
            .await
            .unwrap();
        page.click(&format!(".card[data-task-id=\"{kid}\"] .pick"))
            .await
            .unwrap();
        page.wait_for(
            &format!("!!document.querySelector('.card.selected[data-task-id=\"{kid}\"]')"),
            STEP,
        )
        .await
        .unwrap();
    }
    page.wait_for(
        "document.getElementById('bulk-count').textContent === '2 selected'",
        STEP,
    )
    .await
    .unwrap();
    page.eval("document.getElementById('bulk-action').value = 'done'")
        .await
        .unwrap();
    page.click("#bulk-apply").await.unwrap();
    let reached = page
        .wait_for(&format!("{} === '2/2'", progress(&fan_parent)), STEP)
        .await;
    if let Err(error) = reached {
        let state = page
            .eval(&format!(
                "JSON.stringify({{toast: document.getElementById('toast').textContent,                  kids: {kids:?}.map(k => window.troupeDashboard.board.tasks.get(k)?.status),                  children: [...(window.troupeDashboard.board.children.get('{fan_parent}') || [])]}})"
            ))
            .await;
        panic!("{error}; page state: {state:?}");
    }
    for kid in &kids {
        assert_eq!(
            dir.run_json(&["kanban", "show", kid]).await["task"]["status"],
            "done"
        );
    }

    // The feed drops: the page reconnects from the last event it saw and misses nothing.
    let last_seen = page
        .eval("window.troupeDashboard.state.lastEventId")
        .await
        .unwrap();
    page.eval("window.troupeDashboard.state.socket.close()")
        .await
        .unwrap();
    let while_away = cli_task(&dir, &["kanban", "create", "MADE-WHILE-AWAY"]).await;
    page.wait_for(&column_of(&while_away), STEP).await.unwrap();
    let resumed = format!("since={last_seen}");
    assert!(
        page.requests()
            .iter()
            .any(|u| u.contains("/api/plugins/kanban/events") && u.contains(&resumed)),
        "no reconnect with {resumed}: {:?}",
        page.requests()
    );

    // Keyboard: Esc closes the task, `/` goes to the filter, which narrows the board.
    page.press("Escape").await.unwrap();
    page.wait_for("document.getElementById('task-panel').hidden", STEP)
        .await
        .unwrap();
    page.press("/").await.unwrap();
    page.wait_for("document.activeElement.id === 'filter-text'", STEP)
        .await
        .unwrap();
    page.type_text("WORKER-JOB").await.unwrap();
    page.wait_for(
        &format!("!document.querySelector('.card[data-task-id=\"{cli_id}\"]') && !!document.querySelector('.card[data-task-id=\"{worker_id}\"]')"),
        STEP,
    )
    .await
    .unwrap();
    assert_eq!(page.eval("window.__sameLoad").await.unwrap(), json!(true));

    // `Esc` leaves the filter; clearing it brings every card back; `j` puts the cursor on one.
    page.press("Escape").await.unwrap();
    page.eval("const f = document.getElementById('filter-text'); f.value = ''; f.dispatchEvent(new Event('input'))")
        .await
        .unwrap();
    page.wait_for(&column_of(&cli_id), STEP).await.unwrap();
    page.press("j").await.unwrap();
    page.wait_for("!!document.querySelector('.card.cursor')", STEP)
        .await
        .unwrap();
    // `n` asks for a new task; Enter in its title creates it, and its card opens.
    page.press("n").await.unwrap();
    page.wait_for(
        "document.getElementById('dialog').open && document.activeElement.name === 'title'",
        STEP,
    )
    .await
    .unwrap();
    page.type_text("MADE-IN-THE-PAGE").await.unwrap();
    page.press("Enter").await.unwrap();
    page.wait_for(
        "!document.getElementById('dialog').open && document.querySelector('.task-title')?.textContent === 'MADE-IN-THE-PAGE'",
        STEP,
    )
    .await
    .unwrap();
    let listed = dir.run_json(&["kanban", "list"]).await.to_string();
    assert!(listed.contains("MADE-IN-THE-PAGE"), "{listed}");

    // The theme toggle switches the colours, whatever the system prefers.
    let before = page
        .eval("getComputedStyle(document.body).backgroundColor")
        .await
        .unwrap();
    page.click("#theme-toggle").await.unwrap();
    let after = page
        .wait_for(
            &format!("(() => {{ const c = getComputedStyle(document.body).backgroundColor; return c !== {before} && c; }})()"),
            STEP,
        )
        .await
        .unwrap();
    assert_ne!(before, after);
    page.press("Escape").await.unwrap();
    page.wait_for("document.getElementById('task-panel').hidden", STEP)
        .await
        .unwrap();
    page.screenshot(&screenshots().join("board-other-theme.png"))
        .await
        .unwrap();

    // A board made in the page becomes the one shown, empty, and the CLI sees it.
    page.click("#board-new").await.unwrap();
    page.wait_for("document.getElementById('dialog').open", STEP)
        .await
        .unwrap();
    page.type_text("made-in-page").await.unwrap();
    page.press("Enter").await.unwrap();
    page.wait_for(
        "document.body.dataset.boardLoaded === 'made-in-page' && document.getElementById('board-select').value === 'made-in-page' && document.querySelectorAll('.card').length === 0",
        STEP,
    )
    .await
    .unwrap();
    let (code, boards, err) = dir.run(&["kanban", "boards", "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(boards.contains("made-in-page"), "{boards}");

    // A token that stops working (changed on the server, say) brings the sign-in back.
    page.eval(
        "sessionStorage.setItem('troupe.token', 'a-stale-token-0123456789'); location.reload()",
    )
    .await
    .unwrap();
    page.wait_for(
        "document.readyState === 'complete' && !document.getElementById('signin').hidden && document.getElementById('signin-error').textContent.includes('refused')",
        STEP,
    )
    .await
    .unwrap();

    // Nothing but the server was asked for anything, and the policy blocked nothing.
    let requests = page.requests();
    let blocked: Vec<String> = page
        .console()
        .into_iter()
        .filter(|line| line.contains("Content Security Policy"))
        .collect();
    assert!(blocked.is_empty(), "{blocked:?}");
    assert!(!requests.is_empty());
    let foreign: Vec<&String> = requests
        .iter()
        .filter(|url| {
            !(url.starts_with(&format!("http://{host}/"))
                || url.starts_with(&format!("ws://{host}/"))
                || url.as_str() == "about:blank")
        })
        .collect();
    assert!(foreign.is_empty(), "requests to other hosts: {foreign:?}");
    assert!(
        !requests
            .iter()
            .any(|u| u.contains(TOKEN) && !u.contains("/api/plugins/kanban/events")),
        "the token went into a URL other than the feed's: {requests:?}"
    );
    drop(page);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_from_two_levels_down_and_a_hard_stop_are_answered_in_the_page() {
    if !browser_available("approvals_from_two_levels_down_and_a_hard_stop_are_answered_in_the_page")
    {
        return;
    }
    let dir = TroupeDir::new(YAML, WORKER_SCRIPT).await;
    let served = Served::start(&dir, &["--no-dispatch"]).await;
    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    page.sign_in(TOKEN).await.unwrap();
    page.wait_for("document.body.dataset.boardLoaded === 'default'", STEP)
        .await
        .unwrap();
    page.click("#tab-sessions").await.unwrap();

    // The root delegates, its child delegates, and the grandchild's write needs approval.
    let script = json!({"cursor": "conversation", "when_exhausted": "Done.", "turns": [
        {"match": "ROOT-GO", "tool_calls": [{"name": "delegate_task",
            "arguments": {"tasks": [{"goal": "MIDDLE-STEP: hand the job down"}]}}]},
        {"match": "MIDDLE-STEP", "tool_calls": [{"name": "delegate_task",
            "arguments": {"tasks": [{"goal": "LEAF-STEP: write the file"}]}}]},
        {"match": "LEAF-STEP", "tool_calls": [{"name": "write_file",
            "arguments": {"path": "approved.txt", "content": "written after approval"}}]}
    ]});
    let (status, created) = served
        .call(
            Method::POST,
            "/api/sessions",
            Some(json!({"script": script})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let root = created["session_id"].as_str().unwrap().to_string();
    let (status, sent) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{root}/messages"),
            Some(json!({"text": "ROOT-GO"})),
        )
        .await;
    assert_eq!(status, 202, "{sent}");

    // One queue: the request shows the whole agent path, the tool and its arguments.
    let card = page
        .wait_for(
            "(() => { const a = document.querySelector('.approval'); return a && { \
             id: a.dataset.requestId, path: [...a.querySelectorAll('.agent-path code')].map(c => c.textContent), \
             tool: a.querySelector('.approval-tool').textContent, args: a.querySelector('.args').textContent }; })()",
            STEP,
        )
        .await
        .unwrap();
    let path = card["path"].as_array().unwrap();
    assert_eq!(path.len(), 3, "root, child, grandchild: {card}");
    assert_eq!(path[0], root.as_str(), "{card}");
    assert_eq!(card["tool"], "write_file", "{card}");
    assert!(
        card["args"].as_str().unwrap().contains("approved.txt"),
        "{card}"
    );
    assert!(!dir.path().join("approved.txt").exists());
    // The session's tree shows the three levels, read from its event stream.
    page.wait_for(
        &format!("!!document.querySelector('.session[data-session-id=\"{root}\"] .agent-tree .agent-tree .agent-tree')"),
        STEP,
    )
    .await
    .unwrap();
    page.screenshot(&screenshots().join("approvals.png"))
        .await
        .unwrap();

    page.click(&format!(
        "[data-request-id=\"{}\"] button[data-choice=\"once\"]",
        card["id"].as_str().unwrap()
    ))
    .await
    .unwrap();
    // The call runs: the file is written, and the queue empties.
    let deadline = Instant::now() + STEP;
    while !dir.path().join("approved.txt").exists() {
        assert!(Instant::now() < deadline, "the approved write never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("approved.txt")).unwrap(),
        "written after approval"
    );

    // A session stuck in a slow turn: the page's hard stop ends it.
    let slow = json!({"turns": [{"match": "SLOW-GO", "delay_ms": 600000, "text": "too late"}]});
    let (status, created) = served
        .call(Method::POST, "/api/sessions", Some(json!({"script": slow})))
        .await;
    assert_eq!(status, 201, "{created}");
    let stuck = created["session_id"].as_str().unwrap().to_string();
    let (status, sent) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{stuck}/messages"),
            Some(json!({"text": "SLOW-GO"})),
        )
        .await;
    assert_eq!(status, 202, "{sent}");
    let session = format!(".session[data-session-id=\"{stuck}\"]");
    page.wait_for(
        &format!("document.querySelector('{session} .state')?.textContent === 'working'"),
        STEP,
    )
    .await
    .unwrap();
    page.click(&format!("{session} button[data-stop=\"hard\"]"))
        .await
        .unwrap();
    let deadline = Instant::now() + STEP;
    let ended = loop {
        let (_, shown) = served
            .call(Method::GET, &format!("/api/sessions/{stuck}"), None)
            .await;
        if shown["busy"] == false {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "the hard stop did not end the turn: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(ended["last_outcome"]["text"], "too late", "{ended}");
    assert_ne!(ended["last_outcome"]["status"], "completed", "{ended}");
    page.wait_for(
        &format!("document.querySelector('{session} .state')?.textContent === 'idle'"),
        STEP,
    )
    .await
    .unwrap();
    drop(page);
    served.stop().await;
}

/// The figures of docs/benchmarks.md ("Dashboard (issue 21)"): first paint of a board of
/// 5,000 tasks, and the time from a task's event being committed to its card moving in the
/// page. Runs on SQLite, or on the PostgreSQL at `TROUPE_DASHBOARD_POSTGRES_URL` (for example
/// from scripts/start-test-postgres.sh). Prints the figures; asserts nothing about time.
///
/// `cargo test -p troupe --release --test integration -- --ignored --nocapture dashboard::dashboard_figures`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for docs/benchmarks.md, not a check"]
async fn dashboard_figures() {
    if !browser_available("dashboard_figures") {
        return;
    }
    const TASKS: usize = 5_000;
    const MOVES: usize = 30;
    let postgres = std::env::var("TROUPE_DASHBOARD_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    let yaml = match &postgres {
        Some(url) => YAML.replace("\"{{STORE}}\"", &format!("\"{url}\"")),
        None => YAML.to_string(),
    };
    let dir = TroupeDir::new(&yaml, WORKER_SCRIPT).await;
    let served = Served::start(&dir, &["--no-dispatch"]).await;
    // A board of its own, so a shared PostgreSQL database starts empty for it.
    let slug = format!("bench-{}", std::process::id());
    let (status, created) = served
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": slug})),
        )
        .await;
    assert_eq!(status, 201, "{created}");

    // 5,000 tasks across assignees and priorities, as 500 fan-outs: a parent (ready) and nine
    // children waiting for it (todo). The last MOVES parents get the highest priority, so
    // their cards sit at the top of the done column, in view, once moved.
    let started = Instant::now();
    let tasks_path = format!("{}/api/plugins/kanban/tasks?board={slug}", served.base);
    let client = reqwest::Client::new();
    let create = |i: usize, parent: Option<String>| {
        let top = parent.is_none() && i >= TASKS - 10 * MOVES;
        let assignee = ["coder", "writer", "reviewer", "tester"][i % 4];
        let mut body = json!({
            "title": format!("task {i}: something to do"),
            "body": "a body of a few words",
            "assignee": assignee,
            "priority": if top { 1000 + i as i64 } else { (i % 7) as i64 },
        });
        if let Some(parent) = parent {
            body["parents"] = json!([parent]);
        }
        let request = client
            .post(&tasks_path)
            .bearer_auth(TOKEN)
            .json(&body)
            .send();
        async move {
            let response = request.await.unwrap();
            assert_eq!(response.status(), 201);
            let created: Value = response.json().await.unwrap();
            (top, created["task"]["id"].as_str().unwrap().to_string())
        }
    };
    let mut parents = Vec::new();
    for chunk in (0..TASKS).step_by(10).collect::<Vec<_>>().chunks(50) {
        let batch = chunk.iter().map(|&i| create(i, None));
        parents.extend(futures::future::join_all(batch).await);
    }
    let children: Vec<(usize, String)> = parents
        .iter()
        .enumerate()
        .flat_map(|(n, (_, id))| (1..10).map(move |k| (n * 10 + k, id.clone())))
        .collect();
    for chunk in children.chunks(50) {
        let batch = chunk.iter().map(|(i, p)| create(*i, Some(p.clone())));
        futures::future::join_all(batch).await;
    }
    let moved: Vec<String> = parents
        .into_iter()
        .filter_map(|(top, id)| top.then_some(id))
        .collect();
    assert_eq!(moved.len(), MOVES);
    eprintln!("created {TASKS} tasks in {:?}", started.elapsed());

    // What the page asks for behind the first paint: the board's links, for fan-out marks.
    let asked = Instant::now();
    let (status, links) = served
        .call(
            Method::GET,
            &format!("/api/plugins/kanban/links?board={slug}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{links}");
    let links_ms = asked.elapsed().as_secs_f64() * 1000.0;

    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    page.eval(&format!(
        "sessionStorage.setItem('troupe.token', '{TOKEN}'); sessionStorage.setItem('troupe.board', '{slug}')"
    ))
    .await
    .unwrap();
    let mut paints = Vec::new();
    let mut loads = Vec::new();
    for _ in 0..5 {
        page.navigate(&format!("{}/", served.base)).await.unwrap();
        page.wait_for(
            &format!("document.body.dataset.boardLoaded === '{slug}'"),
            STEP,
        )
        .await
        .unwrap();
        let marks = page.eval("window.troupeDashboard.marks").await.unwrap();
        paints.push(marks["firstPaintAt"].as_f64().unwrap());
        loads.push(marks["fullLoadMs"].as_f64().unwrap());
    }
    let rendered = page
        .eval("document.querySelectorAll('.card').length")
        .await
        .unwrap();
    eprintln!("cards in the DOM at once: {rendered} of {TASKS}");
    page.wait_for("document.body.dataset.feed === 'live'", STEP)
        .await
        .unwrap();

    // Each move: watch the target column for the card, change the task over HTTP, and take
    // the time from its event (stamped when its transaction starts, so this errs long) to the
    // card's arrival. First a block (a short transaction), then completing the blocked parent,
    // which promotes its nine children in the same transaction.
    let mut blocked = Vec::new();
    for id in &moved {
        let patch = json!({"status": "blocked", "reason": "bench"});
        blocked.push(time_move(&page, &served, &slug, id, patch, "blocked").await);
    }
    let mut completed = Vec::new();
    for id in &moved {
        let patch = json!({"status": "done"});
        completed.push(time_move(&page, &served, &slug, id, patch, "done").await);
    }
    let store = if postgres.is_some() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    eprintln!(
        "FIGURES store={store} tasks={TASKS} first_paint_ms(median of 5)={:.0} \
         full_load_ms(median)={:.0} links_ms={links_ms:.0}",
        median(&mut paints),
        median(&mut loads),
    );
    for (what, times) in [("block", blocked), ("complete+promote 9", completed)] {
        let (mut from_event, mut from_answer): (Vec<f64>, Vec<f64>) = times.into_iter().unzip();
        eprintln!(
            "FIGURES store={store} {what}: event_to_card_ms median={:.1} p90={:.1} max={:.1}; \
             answer_to_card_ms median={:.1} (n={MOVES})",
            median(&mut from_event),
            percentile(&mut from_event, 0.9),
            from_event.iter().cloned().fold(f64::MIN, f64::max),
            median(&mut from_answer),
        );
    }
    drop(page);
    served.stop().await;
}

/// Patches task `id` and waits for its card to arrive in `column`: (ms from the task's newest
/// event's timestamp, ms from the PATCH's answer; negative when the card came first).
async fn time_move(
    page: &Browser,
    served: &Served,
    slug: &str,
    id: &str,
    patch: Value,
    column: &str,
) -> (f64, f64) {
    page.eval(&format!(
        "window.__arrived = null; (() => {{ const col = document.querySelector('.column[data-status=\"{column}\"] .spacer'); \
         const seen = () => col.querySelector('.card[data-task-id=\"{id}\"]'); \
         const obs = new MutationObserver(() => {{ if (seen() && !window.__arrived) {{ \
         window.__arrived = performance.timeOrigin + performance.now(); obs.disconnect(); }} }}); \
         obs.observe(col, {{childList: true}}); }})()"
    ))
    .await
    .unwrap();
    let path = format!("/api/plugins/kanban/tasks/{id}?board={slug}");
    let (status, changed) = served.call(Method::PATCH, &path, Some(patch)).await;
    let answered = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0;
    assert_eq!(status, 200, "{changed}");
    let arrived = page
        .wait_for("window.__arrived", STEP)
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    let (_, detail) = served.call(Method::GET, &path, None).await;
    let stamped = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] != "heartbeat")
        .map(|e| e["created_at"].as_f64().unwrap())
        .fold(f64::MIN, f64::max);
    (arrived - stamped, arrived - answered)
}

fn median(values: &mut [f64]) -> f64 {
    percentile(values, 0.5)
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let i = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[i]
}
