//! The dashboard's running card in Chromium, with the module the server ships: a lease's worker
//! comes from the API as an object ({host, pid, worker}) and the card reads `running ·
//! host:pid`, never `running · [object Object]`; the Sessions view's worker column the same.

use serde_json::json;

use crate::support::browser::{Browser, browser_available};
use crate::support::serve::{Served, TroupeDir};

const YAML: &str = r#"model:
  base_url: "{{MODEL_URL}}"
  model: mock-model
kanban:
  store: "{{STORE}}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_card_names_its_worker_by_host_and_pid() {
    if !browser_available("a_running_card_names_its_worker_by_host_and_pid") {
        return;
    }
    let dir = TroupeDir::new(YAML, "turns:\n  - text: Done.\n").await;
    let served = Served::start(&dir, &[]).await;
    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    // A task as `GET /api/plugins/kanban/board` sends a running one.
    let task = json!({"id": "t_1", "status": "running", "title": "count lines",
        "lease": {"worker": {"host": "build-1", "pid": 4242,
            "worker": "0192f3a4-1b2c-7d00-8000-000000000000"},
            "expires_at": 0, "run_id": 7}});
    let shown = page
        .eval(&format!(
            "import('/dashboard/board.js').then(m => [m.runState({task}).text, m.workerLabel({worker}), m.workerLabel('host-a:12'), m.workerLabel(null)])",
            worker = task["lease"]["worker"]
        ))
        .await
        .unwrap();
    assert_eq!(
        shown,
        json!(["running · build-1:4242", "build-1:4242", "host-a:12", ""]),
        "console: {:?}",
        page.console()
    );
    assert!(!shown.to_string().contains("[object Object]"));
}
