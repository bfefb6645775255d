//! Evidence for a completion and review, as a user meets them: a troupe.yaml whose profile has
//! `review:`, scripted model servers over real HTTP, `troupe kanban worker --until-idle`, then
//! `troupe kanban show` / `review` and `troupe serve`'s `POST /tasks/{id}/review`.
//!
//! The worker is asked to count a file's lines with `wc -l`. The invented answer ("152" with no
//! tool call) lands in `review` with `evidence: none`, never in `done`; the honest one (the
//! terminal ran `wc -l`) carries that call in its evidence, taken from the session's own
//! record (the model's forged `metadata.evidence` is replaced).

use serde_json::{Value, json};
use troupe_actors::model::mock_server::MockServer;
use troupe_actors::model::{CursorMode, Script, ScriptTurn};

use crate::support::serve::{Served, TroupeDir};

const LINES: &str = "one\ntwo\nthree\n";

/// A workspace with notes.txt (three lines) and a troupe.yaml whose profile `counter` has
/// `review` as given; its model answers with `worker(path of notes.txt)`. `extra` is added
/// under `profiles:`, with `{{REVIEWER_URL}}` filled in when `reviewer` is given.
async fn workspace(
    review: &str,
    worker: impl FnOnce(&str) -> Script,
    extra: &str,
    reviewer: Option<&MockServer>,
) -> (TroupeDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, LINES).unwrap();
    let notes = notes.to_string_lossy().into_owned();
    let mut yaml = format!(
        "kanban:\n  store: \"{{{{STORE}}}}\"\n  default_assignee: counter\nprofiles:\n  counter:\n    model: mock\n    base_url: \"{{{{MODEL_URL}}}}\"\n    toolsets: [core]\n    review: {review}\n{extra}"
    );
    if let Some(reviewer) = reviewer {
        yaml = yaml.replace("{{REVIEWER_URL}}", &reviewer.url());
    }
    let dir = TroupeDir::with_script(dir, &yaml, worker(&notes)).await;
    (dir, notes)
}

/// The worker's invented completion: no tool call, a made-up count, and a forged evidence list.
fn invented() -> ScriptTurn {
    ScriptTurn::tool_call(
        "kanban_complete",
        json!({"summary": "counted the lines", "result": "152",
               "metadata": {"evidence": [{"call_id": "c_forged", "tool": "terminal", "args": "wc -l notes.txt", "status": "ok", "exit_code": 0}]}}),
    )
}

/// The honest run: `wc -l` in the terminal, then the count it printed.
fn honest(notes: &str) -> Vec<ScriptTurn> {
    vec![
        ScriptTurn::tool_call("terminal", json!({"command": format!("wc -l {notes}")})),
        ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "counted with wc -l", "result": "3"}),
        ),
        ScriptTurn::text("Done."),
    ]
}

async fn create(dir: &TroupeDir, notes: &str) -> String {
    let created = dir
        .run_json(&[
            "kanban",
            "create",
            "count the lines",
            "--body",
            &format!("Run `wc -l {notes}` and report the number of lines."),
        ])
        .await;
    created["task"]["id"].as_str().unwrap().to_string()
}

async fn work(dir: &TroupeDir) -> String {
    let (code, _, err) = dir.run(&["kanban", "worker", "--until-idle"]).await;
    assert_eq!(code, 0, "the worker failed: {err}");
    err
}

async fn show(dir: &TroupeDir, id: &str) -> Value {
    dir.run_json(&["kanban", "show", id]).await
}

fn outcomes(shown: &Value) -> Vec<String> {
    shown["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["outcome"].as_str().map(str::to_string))
        .collect()
}

/// The evidence of the honest run names the `wc -l` call as it ran.
fn assert_honest_evidence(shown: &Value, notes: &str) {
    let calls = shown["evidence"]
        .as_array()
        .unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(calls.len(), 1, "{shown}");
    assert_eq!(calls[0]["tool"], "terminal", "{shown}");
    assert_eq!(calls[0]["args"], format!("wc -l {notes}"), "{shown}");
    assert_eq!(calls[0]["status"], "ok", "{shown}");
    assert_eq!(calls[0]["exit_code"], 0, "{shown}");
    assert_ne!(calls[0]["call_id"], "c_forged", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_person_review_an_invented_count_waits_with_no_evidence_and_is_sent_back() {
    let (dir, notes) = workspace(
        "person",
        |notes| {
            let mut script = Script::new()
                .with_cursor(CursorMode::Sequential)
                .turn(invented())
                .turn(ScriptTurn::text("Done."));
            for turn in honest(notes) {
                script = script.turn(turn);
            }
            script.when_exhausted("Finished.")
        },
        "",
        None,
    )
    .await;
    let id = create(&dir, &notes).await;

    let log = work(&dir).await;
    let shown = show(&dir, &id).await;
    assert_eq!(shown["task"]["status"], "review", "{shown}\n{log}");
    assert_eq!(shown["task"]["result"], "152", "{shown}");
    assert_eq!(
        shown["evidence"], "none",
        "a forged list is not evidence: {shown}"
    );
    assert_eq!(outcomes(&shown), ["review_requested"], "{shown}");
    let (code, text, err) = dir.run(&["kanban", "show", &id]).await;
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("evidence: none"), "{text}");

    // The CLI refuses a verdict without its text, then sends it back with the reason.
    let (code, _, err) = dir.run(&["kanban", "review", &id, "--changes", " "]).await;
    assert_eq!(code, 2, "{err}");
    let (code, out, err) = dir
        .run(&[
            "kanban",
            "review",
            &id,
            "--changes",
            "152 was never counted: run wc -l on the file",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sent back"), "{out}");
    let shown = show(&dir, &id).await;
    assert_eq!(shown["task"]["status"], "ready", "{shown}");

    // The next worker reads the reason, runs the command, and its evidence shows the call.
    let log = work(&dir).await;
    assert!(
        dir.model_saw("152 was never counted"),
        "the next worker was told why: {:?}",
        dir.requests()
    );
    let shown = show(&dir, &id).await;
    assert_eq!(shown["task"]["status"], "review", "{shown}\n{log}");
    assert_eq!(shown["task"]["result"], "3", "{shown}");
    assert_honest_evidence(&shown, &notes);
    let (code, out, err) = dir
        .run(&[
            "kanban",
            "review",
            &id,
            "--approve",
            "--comment",
            "wc -l ran",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("approved"), "{out}");
    let shown = show(&dir, &id).await;
    assert_eq!(shown["task"]["status"], "done", "{shown}");
    assert_eq!(shown["task"]["result"], "3", "{shown}");
    // A done task is not reviewed again.
    let (code, _, err) = dir.run(&["kanban", "review", &id, "--approve"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("review"), "{err}");
}

/// The reviewer profile `checker` on its own model server, reviewing for `counter`.
const CHECKER: &str = "  checker:\n    model: mock\n    base_url: \"{{REVIEWER_URL}}\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_profile_sends_an_invented_count_back_and_approves_the_honest_one() {
    let reviewer = MockServer::start(
        Script::new()
            .with_cursor(CursorMode::Sequential)
            .turn(ScriptTurn::tool_call(
                "review_request_changes",
                json!({"reason": "evidence: none; nothing counted the lines. Run wc -l on the file."}),
            ))
            .turn(ScriptTurn::text("Sent back."))
            .turn(ScriptTurn::tool_call(
                "review_approve",
                json!({"comment": "wc -l ran and printed 3"}),
            ))
            .turn(ScriptTurn::text("Approved."))
            .when_exhausted("No more reviews."),
    )
    .await
    .unwrap();
    let (dir, notes) = workspace(
        "{by: agent, profile: checker, max_rounds: 2}",
        |notes| {
            let mut script = Script::new()
                .with_cursor(CursorMode::Sequential)
                .turn(invented())
                .turn(ScriptTurn::text("Done."));
            for turn in honest(notes) {
                script = script.turn(turn);
            }
            script.when_exhausted("Finished.")
        },
        CHECKER,
        Some(&reviewer),
    )
    .await;
    let id = create(&dir, &notes).await;

    // One worker process: the invented run, its review, the honest run, its review.
    let log = work(&dir).await;
    let shown = show(&dir, &id).await;
    assert_eq!(shown["task"]["status"], "done", "{shown}\n{log}");
    assert_eq!(shown["task"]["result"], "3", "{shown}");
    assert_eq!(
        outcomes(&shown),
        ["review_requested", "review_requested", "completed"],
        "{shown}"
    );
    assert_honest_evidence(&shown, &notes);

    // What the reviewer was shown: first no evidence, then the call that ran.
    let reviews: Vec<String> = reviewer
        .requests()
        .iter()
        .map(|r| Value::Array(r.messages()).to_string())
        .collect();
    let first = reviews.first().unwrap();
    assert!(
        first.contains("152") && first.contains("evidence: none"),
        "{first}"
    );
    let last = reviews.last().unwrap();
    assert!(
        last.contains("evidence: 1 tool call") && last.contains(&format!("wc -l {notes}")),
        "{last}"
    );
    // The sent-back reason reached the second run of the worker, and the verdicts are kept.
    assert!(
        dir.model_saw("nothing counted the lines"),
        "{:?}",
        dir.requests()
    );
    let comments = shown["comments"].to_string();
    assert!(
        comments.contains("reviewer checker") && comments.contains("Run wc -l on the file"),
        "{comments}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_that_keeps_sending_back_hands_the_task_to_a_person() {
    let reviewer = MockServer::start(
        Script::new()
            .with_cursor(CursorMode::Sequential)
            .turn(ScriptTurn::tool_call(
                "review_request_changes",
                json!({"reason": "still no evidence"}),
            ))
            .turn(ScriptTurn::text("Sent back."))
            .when_exhausted("No more reviews."),
    )
    .await
    .unwrap();
    let (dir, notes) = workspace(
        "{by: agent, profile: checker, max_rounds: 1}",
        |_| {
            Script::new()
                .with_cursor(CursorMode::Sequential)
                .turn(invented())
                .turn(ScriptTurn::text("Done."))
                .turn(invented())
                .turn(ScriptTurn::text("Done."))
                .when_exhausted("Finished.")
        },
        CHECKER,
        Some(&reviewer),
    )
    .await;
    let id = create(&dir, &notes).await;
    let log = work(&dir).await;
    let shown = show(&dir, &id).await;
    // Round 1: sent back. Round 2 is past max_rounds: no reviewer, a person decides.
    assert_eq!(shown["task"]["status"], "review", "{shown}\n{log}");
    assert_eq!(
        outcomes(&shown),
        ["review_requested", "review_requested"],
        "{shown}"
    );
    assert_eq!(
        reviewer.requests().len(),
        2,
        "one review, one turn after its verdict"
    );
    let comments = shown["comments"].to_string();
    assert!(
        comments.contains("Waiting in review for a person") && comments.contains("its limit"),
        "{comments}"
    );
    assert_eq!(shown["evidence"], "none", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_reviews_over_the_http_api() {
    let (dir, notes) = workspace(
        "person",
        |notes| {
            let mut script = Script::new()
                .with_cursor(CursorMode::Sequential)
                .turn(invented())
                .turn(ScriptTurn::text("Done."));
            for turn in honest(notes) {
                script = script.turn(turn);
            }
            script.when_exhausted("Finished.")
        },
        "",
        None,
    )
    .await;
    let id = create(&dir, &notes).await;
    work(&dir).await;
    let served = Served::start(&dir, &[]).await;
    let task = format!("/api/plugins/kanban/tasks/{id}");
    let review = format!("{task}/review");
    let (status, shown) = served.call(reqwest::Method::GET, &task, None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["task"]["status"], "review", "{shown}");
    let runs = shown["runs"].as_array().unwrap();
    assert_eq!(runs[0]["metadata"]["evidence"], "none", "{shown}");

    for (body, code) in [
        (json!({"verdict": "changes"}), "empty_review_comment"),
        (
            json!({"verdict": "changes", "comment": "  "}),
            "empty_review_comment",
        ),
        (json!({"verdict": "maybe"}), "bad_verdict"),
    ] {
        let (status, answer) = served
            .call(reqwest::Method::POST, &review, Some(body))
            .await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains(code), "{answer}");
    }
    let (status, answer) = served
        .call(
            reqwest::Method::POST,
            &review,
            Some(json!({"verdict": "changes", "comment": "count it with wc -l", "author": "ana"})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["task"]["status"], "ready", "{answer}");
    // A task that is not in review takes no verdict.
    let (status, answer) = served
        .call(
            reqwest::Method::POST,
            &review,
            Some(json!({"verdict": "approve"})),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    served.stop().await;

    work(&dir).await;
    assert!(dir.model_saw("count it with wc -l"), "{:?}", dir.requests());
    let served = Served::start(&dir, &[]).await;
    let (status, shown) = served.call(reqwest::Method::GET, &task, None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["task"]["status"], "review", "{shown}");
    let last = shown["runs"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["metadata"]["evidence"][0]["tool"], "terminal",
        "{last}"
    );
    let (status, answer) = served
        .call(
            reqwest::Method::POST,
            &review,
            Some(json!({"verdict": "approve", "comment": "checked", "author": "ana"})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["task"]["status"], "done", "{answer}");
    assert_eq!(answer["task"]["result"], "3", "{answer}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_panel_shows_no_evidence_and_approves_in_chromium() {
    use crate::support::browser::{Browser, browser_available};
    if !browser_available("the_task_panel_shows_no_evidence_and_approves_in_chromium") {
        return;
    }
    let step = std::time::Duration::from_secs(20);
    let (dir, notes) = workspace(
        "person",
        |_| {
            Script::new()
                .with_cursor(CursorMode::Sequential)
                .turn(invented())
                .turn(ScriptTurn::text("Done."))
                .when_exhausted("Finished.")
        },
        "",
        None,
    )
    .await;
    let id = create(&dir, &notes).await;
    work(&dir).await;
    let served = Served::start(&dir, &[]).await;
    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    page.sign_in(crate::support::serve::TOKEN).await.unwrap();
    let card = format!(".card[data-task-id=\"{id}\"]");
    page.wait_for(&format!("!!document.querySelector('{card}')"), step)
        .await
        .unwrap();
    page.click(&card).await.unwrap();
    let warning = page
        .wait_for(
            "document.querySelector('#task-panel .evidence-none')?.textContent",
            step,
        )
        .await
        .unwrap();
    assert!(
        warning.as_str().unwrap().contains("evidence: none"),
        "{warning}"
    );
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kanban_review");
    std::fs::create_dir_all(&shots).unwrap();
    page.screenshot(&shots.join("review-no-evidence.png"))
        .await
        .unwrap();
    page.click("#task-panel .actions button.review-approve")
        .await
        .unwrap();
    page.wait_for(
        "[...document.querySelectorAll('#task-panel .task-meta .kv')].some(k => k.textContent === 'status done')",
        step,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; console: {:?}", page.console()));
    let shown = show(&dir, &id).await;
    assert_eq!(shown["task"]["status"], "done", "{shown}");
    assert!(
        shown["runs"].to_string().contains("approved by dashboard"),
        "{shown}"
    );
    served.stop().await;
}
