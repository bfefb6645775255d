//! The dashboard shows a session's `todo` plan and takes the answer to a `clarify` question, in
//! a real headless Chromium against `troupe serve` and the mock model server. Skips without
//! Chromium unless `TROUPE_REQUIRE_BROWSER` is set.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::browser::{Browser, browser_available};
use crate::support::serve::{Served, TOKEN, TroupeDir};

const STEP: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_plan_and_answers_a_question() {
    if !browser_available("the_page_shows_the_plan_and_answers_a_question") {
        return;
    }
    let dir = TroupeDir::new(
        "model:\n  base_url: \"{{MODEL_URL}}\"\n  model: mock-model\nkanban:\n  store: \"{{STORE}}\"\n",
        "turns: []\n",
    )
    .await;
    let served = Served::start(&dir, &["--no-dispatch"]).await;
    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    page.sign_in(TOKEN).await.unwrap();
    page.wait_for("document.body.dataset.boardLoaded === 'default'", STEP)
        .await
        .unwrap();
    page.click("#tab-sessions").await.unwrap();

    let script = json!({"turns": [
        {"tool_calls": [
            {"name": "todo", "arguments": {"todos": [
                {"id": "1", "content": "Pick the database", "status": "in_progress"},
                {"id": "2", "content": "Write the schema"}]}},
            {"name": "clarify", "arguments": {"question": "Which database?", "choices": ["SQLite", "PostgreSQL"], "allow_other": false}}
        ]},
        {"text": "Going with the answer."}
    ]});
    let (status, created) = served
        .call(
            Method::POST,
            "/api/sessions",
            Some(json!({"script": script})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_string();
    let (status, _) = served
        .call(
            Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"text": "set it up"})),
        )
        .await;
    assert_eq!(status, 202);

    // The plan, read from the session's event stream.
    let plan = page
        .wait_for(
            &format!(
                "(() => {{ const rows = [...document.querySelectorAll('.session[data-session-id=\"{id}\"] .todo')]; \
                 return rows.length === 2 && rows.map(r => r.dataset.status + ':' + r.textContent); }})()"
            ),
            STEP,
        )
        .await
        .unwrap();
    assert_eq!(
        plan,
        json!([
            "in_progress:[>] Pick the database",
            "pending:[ ] Write the schema"
        ])
    );
    // The question, with a button per choice and no free field (allow_other is false).
    let card = page
        .wait_for(
            "(() => { const a = document.querySelector('.approval'); return a && a.querySelector('[data-answer]') && { \
             question: a.querySelector('.question').textContent, \
             answers: [...a.querySelectorAll('[data-answer]')].map(b => b.textContent) }; })()",
            STEP,
        )
        .await
        .unwrap();
    assert_eq!(card["question"], "Which database?");
    assert_eq!(card["answers"], json!(["SQLite", "PostgreSQL"]));
    page.click(".approval [data-answer=\"2\"]").await.unwrap();

    let deadline = Instant::now() + STEP;
    let shown = loop {
        let (_, shown) = served
            .call(Method::GET, &format!("/api/sessions/{id}"), None)
            .await;
        if shown["busy"] == false && shown["last_outcome"].is_object() {
            break shown;
        }
        assert!(Instant::now() < deadline, "the turn did not end: {shown}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        shown["last_outcome"]["text"], "Going with the answer.",
        "{shown}"
    );
    let (_, transcript) = served
        .call(Method::GET, &format!("/api/sessions/{id}/transcript"), None)
        .await;
    let answered = transcript.to_string();
    assert!(
        answered.contains(r#"\"answer\":\"PostgreSQL\""#),
        "{}",
        Value::String(answered)
    );
    drop(page);
    served.stop().await;
}
