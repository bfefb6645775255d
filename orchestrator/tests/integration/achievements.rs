//! The bundled achievements tab over a real session store: 2,000 sessions (trees of a top
//! session and three subagents, with tool results, board tools, approvals asked in their event
//! logs and three models) written through the store's own journal before `troupe serve`
//! starts. The first scan runs in the background and the tab shows partial results (in the
//! API and in Chromium, screenshots in `target/tmp/dashboard/`) before the full set; a rescan
//! after 10 new sessions reads only those 10; the unlock history survives a restart and
//! `reset-state` clears it. One case runs on PostgreSQL (`TROUPE_TEST_POSTGRES_URL`).
//! `achievements_figures` (ignored) times a cold scan of 10,000 sessions and a warm rescan
//! for docs/benchmarks.md.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use troupe::sessions::SessionStore;
use troupe_actors::journal::{Journal, OpenedSession, Origin};
use troupe_actors::model::{ChatMessage, ToolCallRequest};
use troupe_actors::usage::Spend;

use crate::support::browser::{Browser, browser_available, screenshots};
use crate::support::serve::{Served, TOKEN, TroupeDir};

const STEP: Duration = Duration::from_secs(90);

fn yaml(store: &str) -> String {
    format!(
        "model:\n  base_url: \"{{{{MODEL_URL}}}}\"\n  model: mock-model\nkanban:\n  store: \"{{{{STORE}}}}\"\nsessions:\n  store: \"{store}\"\n"
    )
}

/// What the generated sessions hold, to check the badges' figures against.
#[derive(Debug, Default)]
struct Expected {
    sessions: u64,
    subagents: u64,
    tool_results: u64,
    kanban_complete: u64,
    approvals: u64,
}

const MODELS: [&str; 3] = ["openai/gpt-4o", "anthropic/claude-sonnet", "ollama:llama3"];

fn tool_turn(id: &str, tools: &[&str]) -> Vec<ChatMessage> {
    let calls: Vec<ToolCallRequest> = tools
        .iter()
        .enumerate()
        .map(|(i, name)| ToolCallRequest {
            id: format!("{id}-c{i}"),
            name: (*name).to_string(),
            arguments: "{}".into(),
        })
        .collect();
    let mut out = vec![ChatMessage::Assistant {
        content: None,
        tool_calls: calls.clone(),
    }];
    for call in calls {
        out.push(ChatMessage::Tool {
            tool_call_id: call.id,
            name: call.name,
            content: "ok".into(),
        });
    }
    out
}

/// Writes `count` sessions named `<prefix>-<tree>-<n>`, four to a tree (a top session, two
/// subagents, one grandchild), into `store`; returns what they hold.
async fn generate(store: &SessionStore, prefix: &str, count: usize) -> Expected {
    let mut expected = Expected::default();
    let lost = Arc::new(AtomicBool::new(false));
    for i in 0..count {
        let (tree, n) = (i / 4, i % 4);
        let id = |k: usize| format!("{prefix}-{tree}-{k}");
        let model = MODELS[tree % MODELS.len()];
        let (path, origin, tools): (Vec<String>, &str, Vec<&str>) = match n {
            0 => (
                vec![id(0)],
                if tree % 2 == 0 { "chat" } else { "http" },
                vec!["terminal", "read_file", "delegate_task"],
            ),
            1 => (vec![id(0), id(1)], "subagent", vec!["kanban_complete"]),
            2 => (
                vec![id(0), id(2)],
                "subagent",
                vec!["write_file", "terminal"],
            ),
            _ => (vec![id(0), id(1), id(3)], "subagent", vec![]),
        };
        let own = id(n);
        store.opened(OpenedSession {
            id: own.clone(),
            agent_path: path.clone(),
            model: model.to_string(),
            origin: Origin::new(origin),
        });
        let mut messages = vec![ChatMessage::User {
            content: format!("job {own}"),
        }];
        if !tools.is_empty() {
            messages.extend(tool_turn(&own, &tools));
        }
        messages.push(ChatMessage::Assistant {
            content: Some("done".into()),
            tool_calls: Vec::new(),
        });
        let spent = Spend {
            requests: 2,
            input_tokens: 300,
            output_tokens: 50,
            ..Spend::default()
        };
        // The future only says when it is durable; `flush` below waits for all of them.
        drop(store.step(&own, 0, messages, spent, &lost));
        expected.sessions += 1;
        if path.len() > 1 {
            expected.subagents += 1;
        }
        expected.tool_results += tools.len() as u64;
        expected.kanban_complete +=
            tools.iter().filter(|t| **t == "kanban_complete").count() as u64;
        // Every fifth top session asked for an approval over HTTP.
        if n == 0 && tree % 5 == 0 {
            let body = json!({"type": "approval_requested", "session_id": own, "tool": "terminal"});
            store.log_event(&own, 0, body.to_string(), || {});
            expected.approvals += 1;
        }
    }
    store.flush().await;
    expected
}

/// `troupe serve` in `dir`, its scan resting `pause_ms` between batches.
async fn serve(dir: &TroupeDir, pause_ms: u64) -> Served {
    let (code, _, err) = dir.run(&["kanban", "init"]).await;
    assert_eq!(code, 0, "{err}");
    let mut command = dir.troupe();
    command
        .args(["serve", "--port", "0", "--no-dispatch"])
        .env("TROUPE_ACHIEVEMENTS_SCAN_PAUSE_MS", pause_ms.to_string());
    Served::spawn(command, Some(TOKEN)).await
}

async fn get(served: &Served, route: &str) -> Value {
    let (status, body) = served
        .call(
            Method::GET,
            &format!("/api/plugins/achievements/{route}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{route}: {body}");
    body
}

/// Polls until `scans_completed` reaches `n`; returns the scan status.
async fn scans_done(served: &Served, n: u64) -> Value {
    let deadline = Instant::now() + STEP;
    loop {
        let status = get(served, "scan-status").await;
        if status["scans_completed"].as_u64() >= Some(n) && status["state"] == "idle" {
            return status;
        }
        assert!(Instant::now() < deadline, "no scan {n} finished: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn card<'a>(achievements: &'a Value, id: &str) -> &'a Value {
    achievements["badges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id)
        .unwrap_or_else(|| panic!("no badge {id}"))
}

/// The full set matches what was written.
fn check_full(achievements: &Value, expected: &Expected) {
    assert_eq!(
        achievements["scan"]["partial"], false,
        "{}",
        achievements["scan"]
    );
    assert_eq!(achievements["scan"]["sessions_counted"], expected.sessions);
    assert!(achievements["counts"]["total"].as_u64().unwrap() >= 40);
    let value = |id: &str| card(achievements, id)["value"].as_u64().unwrap();
    assert_eq!(value("tool-time"), expected.tool_results);
    assert_eq!(value("team-lead"), expected.subagents);
    assert_eq!(value("closer"), expected.kanban_complete);
    assert_eq!(value("gatekeeper"), expected.approvals);
    assert_eq!(value("chain-of-command"), 2);
    assert_eq!(value("full-house"), 4);
    assert_eq!(value("polyglot"), 3);
    assert_eq!(value("provider-hopper"), 3);
    assert_eq!(card(achievements, "team-lead")["state"], "unlocked");
    // A secret badge earned shows its card; one not earned keeps it hidden.
    assert_eq!(card(achievements, "hydra")["state"], "unlocked");
    assert_eq!(card(achievements, "hydra")["name"], "Hydra");
    for badge in achievements["badges"].as_array().unwrap() {
        assert!(
            badge["how"].as_str().is_some_and(|h| !h.is_empty()),
            "{badge}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_scan_shows_partial_results_then_the_full_set_and_rescans_only_what_changed() {
    let dir = TroupeDir::new(&yaml("{{DIR}}/state/sessions.db"), "turns: []\n").await;
    let store = SessionStore::open_sqlite(&dir.path().join("state/sessions.db")).unwrap();
    let expected = generate(&store, "s", 2_000).await;
    assert_eq!(expected.sessions, 2_000);

    // The browser starts first, so it is ready while the scan runs: 8 batches 1 s apart, slow
    // enough for a person (and this test) to watch the tab fill in.
    let page = match browser_available("achievements") {
        true => Some(Browser::launch().await.unwrap()),
        false => None,
    };
    let served = serve(&dir, 1_000).await;

    // Partial results come while the scan runs: some sessions counted, not all.
    let api = async {
        let deadline = Instant::now() + STEP;
        let mut partial_counts = Vec::new();
        let full = loop {
            let now = get(&served, "achievements").await;
            let counted = now["scan"]["sessions_counted"].as_u64().unwrap();
            if now["scan"]["partial"] == true && counted > 0 {
                assert_eq!(counted % 250, 0, "published every 250 sessions: {counted}");
                if partial_counts.last() != Some(&counted) {
                    partial_counts.push(counted);
                }
            }
            if now["scan"]["partial"] == false && now["scan"]["state"] == "idle" && counted > 0 {
                break now;
            }
            assert!(Instant::now() < deadline, "the scan did not finish: {now}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        (partial_counts, full)
    };
    // The page shows the partial state, then the full set, without a reload.
    let view = "document.getElementById('view-plugin-achievements')";
    let in_page = async {
        let Some(page) = &page else { return None };
        std::fs::create_dir_all(screenshots()).unwrap();
        page.navigate(&format!("{}/", served.base)).await.unwrap();
        page.sign_in(TOKEN).await.unwrap();
        page.wait_for("!!document.getElementById('tab-plugin-achievements')", STEP)
            .await
            .unwrap();
        page.click("#tab-plugin-achievements").await.unwrap();
        let partial = page
            .wait_for(
                &format!("{view}.dataset.partial === 'true' && Number({view}.dataset.counted) > 0 && {view}.dataset.counted"),
                STEP,
            )
            .await
            .unwrap();
        let progress = page
            .eval("document.getElementById('ach-progress').textContent")
            .await
            .unwrap();
        page.screenshot(&screenshots().join("achievements-partial.png"))
            .await
            .unwrap();
        page.wait_for(
            &format!("{view}.dataset.counted === '2000' && {view}.dataset.partial === 'false'"),
            STEP,
        )
        .await
        .unwrap();
        let unlocked = page
            .eval("document.querySelectorAll('#ach-grid .ach-card[data-state=unlocked]').length")
            .await
            .unwrap();
        let how = page
            .eval("document.querySelector('[data-badge=team-lead] .ach-how').textContent")
            .await
            .unwrap();
        page.screenshot(&screenshots().join("achievements.png"))
            .await
            .unwrap();
        Some((partial, progress, unlocked, how))
    };
    let ((partial_counts, full), seen) = tokio::join!(api, in_page);
    assert!(
        partial_counts.len() >= 2 && partial_counts.iter().all(|c| *c < 2_000),
        "partial results seen: {partial_counts:?}"
    );
    check_full(&full, &expected);
    let status = scans_done(&served, 1).await;
    assert_eq!(status["last_scan"]["sessions_read"], 2_000);
    assert_eq!(status["last_scan"]["publications"], 8);
    if let Some((partial, progress, unlocked, how)) = seen {
        let partial: u64 = partial.as_str().unwrap().parse().unwrap();
        assert!(
            partial < 2_000,
            "the page showed {partial} sessions as partial"
        );
        assert!(
            progress
                .as_str()
                .unwrap()
                .starts_with("Scanning… partial results from"),
            "{progress}"
        );
        assert_eq!(unlocked, full["counts"]["unlocked"], "cards drawn");
        assert_eq!(how, card(&full, "team-lead")["how"]);
    }

    // Ten new sessions: a rescan reads those ten and reuses the rest.
    generate(&store, "new", 10).await;
    let (status, started) = served
        .call(Method::POST, "/api/plugins/achievements/rescan", None)
        .await;
    assert_eq!(status, 202, "{started}");
    let status = scans_done(&served, 2).await;
    assert_eq!(status["last_scan"]["sessions_read"], 10, "{status}");
    assert_eq!(status["last_scan"]["sessions_reused"], 2_000, "{status}");
    assert_eq!(status["sessions_counted"], 2_010);
    let one = get(&served, "sessions/new-0-0/badges").await;
    let ids: Vec<&str> = one["badges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"tool-time") && ids.contains(&"first-steps"),
        "{one}"
    );
    let (status, _) = served
        .call(
            Method::GET,
            "/api/plugins/achievements/sessions/no-such/badges",
            None,
        )
        .await;
    assert_eq!(status, 404);

    // The unlock history is kept across a restart, unchanged; the restart reads nothing new.
    let before = get(&served, "recent-unlocks?limit=500").await;
    assert!(before["total"].as_u64().unwrap() > 10, "{before}");
    assert!(dir.home().join("achievements/unlocks.json").is_file());
    served.stop().await;
    let served = serve(&dir, 0).await;
    let after = get(&served, "recent-unlocks?limit=500").await;
    assert_eq!(after, before);
    let status = scans_done(&served, 1).await;
    assert_eq!(status["last_scan"]["sessions_read"], 0, "{status}");
    assert_eq!(get(&served, "recent-unlocks?limit=500").await, before);

    // reset-state forgets it, on disk too.
    let (status, body) = served
        .call(Method::POST, "/api/plugins/achievements/reset-state", None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(&served, "recent-unlocks").await["total"], 0);
    assert!(!dir.home().join("achievements/unlocks.json").exists());
    let (status, _) = served
        .call(
            Method::GET,
            "/api/plugins/achievements/recent-unlocks?limit=zero",
            None,
        )
        .await;
    assert_eq!(status, 400);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn achievements_count_a_postgres_session_store() {
    let Some(cluster) =
        troupe_kanban::store::test_cluster::cluster_url("achievements on PostgreSQL")
    else {
        return;
    };
    let db = troupe_kanban::store::test_cluster::fresh_database(&cluster, "achievements").await;
    let dir = TroupeDir::new(&yaml(&db.url), "turns: []\n").await;
    let store = SessionStore::connect_postgres(&db.url).await.unwrap();
    let expected = generate(&store, "pg", 600).await;
    let served = serve(&dir, 0).await;
    let status = scans_done(&served, 1).await;
    assert_eq!(status["last_scan"]["sessions_read"], 600, "{status}");
    check_full(&get(&served, "achievements").await, &expected);
    generate(&store, "pg-more", 4).await;
    served
        .call(Method::POST, "/api/plugins/achievements/rescan", None)
        .await;
    let status = scans_done(&served, 2).await;
    assert_eq!(status["last_scan"]["sessions_read"], 4, "{status}");
    served.stop().await;
}

/// Times a cold scan of 10,000 sessions and a warm rescan after 10 more, for
/// docs/benchmarks.md. Prints the figures; asserts only that the scans read what they should.
///
/// `cargo test -p troupe --release --test integration -- --ignored --nocapture achievements::achievements_figures`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for docs/benchmarks.md, not a check"]
async fn achievements_figures() {
    let dir = TroupeDir::new(&yaml("{{DIR}}/state/sessions.db"), "turns: []\n").await;
    let store = SessionStore::open_sqlite(&dir.path().join("state/sessions.db")).unwrap();
    let written = Instant::now();
    generate(&store, "b", 10_000).await;
    let written = written.elapsed();
    let served = serve(&dir, 0).await;
    // The first answer comes before the scan is done: the page never waits for it.
    let asked = Instant::now();
    let first = get(&served, "achievements").await;
    let first_answer = asked.elapsed();
    let cold = scans_done(&served, 1).await;
    assert_eq!(cold["last_scan"]["sessions_read"], 10_000);
    generate(&store, "w", 10).await;
    let asked = Instant::now();
    served
        .call(Method::POST, "/api/plugins/achievements/rescan", None)
        .await;
    let warm = scans_done(&served, 2).await;
    let warm_wall = asked.elapsed();
    assert_eq!(warm["last_scan"]["sessions_read"], 10);
    println!(
        "achievements figures: wrote 10,000 sessions in {:.1} s; first GET achievements answered in {:.1} ms (counted {} so far); cold scan {} ms (store {} ms, saving stats {} ms, {} publications); warm rescan {} ms (store {} ms, saving stats {} ms) reading {} and reusing {} ({:.0} ms from POST to idle, polling every 20 ms)",
        written.as_secs_f64(),
        first_answer.as_secs_f64() * 1000.0,
        first["scan"]["sessions_counted"],
        cold["last_scan"]["took_ms"],
        cold["last_scan"]["store_ms"],
        cold["last_scan"]["save_ms"],
        cold["last_scan"]["publications"],
        warm["last_scan"]["took_ms"],
        warm["last_scan"]["store_ms"],
        warm["last_scan"]["save_ms"],
        warm["last_scan"]["sessions_read"],
        warm["last_scan"]["sessions_reused"],
        warm_wall.as_secs_f64() * 1000.0,
    );
    served.stop().await;
}
