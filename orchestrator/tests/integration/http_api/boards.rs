//! The board routes: tasks created, read, moved and commented over HTTP, a refused patch that
//! changes nothing, and the dashboard's board list, creation and links.

use reqwest::{Method, StatusCode};
use serde_json::json;
use troupe_kanban::BoardSlug;
use troupe_kanban::domain::WorkerId;
use troupe_kanban::store::ClaimSpec;

use super::server::{Server, error_code};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_routes_round_trip() {
    let server = Server::start().await;
    let tasks = "/api/plugins/kanban/tasks";
    let (status, parent) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "write", "assignee": "writer", "priority": 2, "idempotency_key": "k1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{parent}");
    let parent_id = parent["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(parent["task"]["status"], "ready");
    // The same idempotency key returns the same task with 200.
    let (status, again) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "write", "idempotency_key": "k1"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["task"]["id"], parent_id.as_str());
    assert_eq!(again["created"], false);

    let (status, child) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "review", "parents": [parent_id]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let child_id = child["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(child["task"]["status"], "todo");
    let (_, loose) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "loose end", "triage": true})),
        )
        .await;
    let loose_id = loose["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(loose["task"]["status"], "triage");

    // Links: add one, a cycle is refused, remove it.
    let (status, body) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/links",
            Some(json!({"parent_id": child_id, "child_id": loose_id})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/links",
            Some(json!({"parent_id": loose_id, "child_id": parent_id})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "link_cycle");
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!("/api/plugins/kanban/links?parent_id={child_id}&child_id={loose_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = server
        .call(
            Method::DELETE,
            &format!("/api/plugins/kanban/links?parent_id={child_id}&child_id={loose_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "link_not_found");

    // Field edits and a comment.
    let (status, patched) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{parent_id}"),
            Some(json!({"title": "write the report", "priority": 5, "assignee": "author"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["task"]["title"], "write the report");
    assert_eq!(patched["task"]["priority"], 5);
    assert_eq!(patched["task"]["assignee"], "author");
    let (status, comment) = server
        .call(
            Method::POST,
            &format!("{tasks}/{parent_id}/comments"),
            Some(json!({"body": "start with the summary", "author": "lead"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{comment}");

    // A run: a worker claims the parent through the store; the API shows and terminates it.
    let board = BoardSlug::default_board();
    let claim = server
        .store
        .claim_next(&board, &ClaimSpec::new(WorkerId::local()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.task.id.as_str(), parent_id);
    let run_id = claim.run.id.0;
    let (status, run) = server
        .call(
            Method::GET,
            &format!("/api/plugins/kanban/runs/{run_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["run"]["task_id"], parent_id.as_str());
    let (status, terminated) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{terminated}");
    assert_eq!(terminated["task"]["status"], "blocked");
    assert!(terminated["run"]["outcome"].is_string());
    let (status, body) = server
        .call(
            Method::POST,
            &format!("/api/plugins/kanban/runs/{run_id}/terminate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "run_not_open");

    // Bulk: unblock the parent and one bad id; each reports on its own.
    let (status, bulk) = server
        .call(
            Method::POST,
            &format!("{tasks}/bulk"),
            Some(json!({"ids": [parent_id, "t_ffffffff"], "patch": {"status": "ready"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk["results"][0]["ok"], true);
    assert_eq!(bulk["results"][0]["task"]["status"], "ready");
    assert_eq!(bulk["results"][1]["ok"], false);
    assert_eq!(bulk["results"][1]["error"]["code"], "task_not_found");

    // Completing the parent makes the child ready; dispatch reports it waiting for a worker.
    let (status, _) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{parent_id}"),
            Some(json!({"status": "done", "result": "the report", "metadata": {"pages": 3}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, report) = server
        .call(Method::POST, "/api/plugins/kanban/dispatch?max=5", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    // No profiles here, so no dispatcher: the report says so and how to add one.
    assert_eq!(report["dispatcher"], "none", "{report}");
    assert!(
        report["note"].as_str().unwrap().contains("profiles:"),
        "{report}"
    );
    assert!(
        report["waiting_for_worker"]
            .as_array()
            .unwrap()
            .iter()
            .any(|id| id == child_id.as_str()),
        "{report}"
    );

    // The whole task view.
    let (status, shown) = server
        .call(Method::GET, &format!("{tasks}/{parent_id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["task"]["status"], "done");
    assert_eq!(shown["task"]["result"], "the report");
    assert_eq!(shown["comments"][0]["body"], "start with the summary");
    assert_eq!(shown["links"]["children"][0], child_id.as_str());
    assert!(shown["runs"].as_array().unwrap().len() >= 2, "{shown}");
    assert!(shown["events"].as_array().unwrap().len() >= 4);

    // The board by columns, then removal (archive) with per-id results.
    let (status, board_view) = server
        .call(Method::GET, "/api/plugins/kanban/board", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(board_view["columns"]["done"][0]["id"], parent_id.as_str());
    assert_eq!(board_view["columns"]["ready"][0]["id"], child_id.as_str());
    let (status, removed) = server
        .call(
            Method::DELETE,
            tasks,
            Some(json!({"ids": [child_id, loose_id]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(removed["results"][1]["task"]["status"], "archived");
    let (_, listed) = server
        .call(Method::GET, &format!("{tasks}?status=archived"), None)
        .await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_patch_changes_nothing_and_a_zero_runtime_is_refused() {
    let server = Server::start().await;
    let tasks = "/api/plugins/kanban/tasks";

    let (status, body) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "never ends", "max_runtime_seconds": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "bad_max_runtime");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send 1 to"),
        "{body}"
    );
    // A budget is checked as the config's is, and kept with the task.
    let (status, body) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "costly", "budget": {"max_dollars": 5}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "bad_budget");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget.max_dollars: not a budget limit"),
        "{body}"
    );
    let (status, body) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "costly", "budget": {"max_cost_usd": 0.5}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["task"]["budget"]["max_cost_usd"], 0.5, "{body}");
    let (status, created) = server
        .call(
            Method::POST,
            tasks,
            Some(json!({"title": "original", "max_runtime_seconds": 60})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["task"]["max_runtime_seconds"], 60);
    let id = created["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(created["task"]["status"], "ready");

    // Each of these changes the title and assignee but asks for a status a ready task cannot
    // take: refused whole, nothing written.
    for status_asked in ["running", "todo", "triage"] {
        let (status, body) = server
            .call(
                Method::PATCH,
                &format!("{tasks}/{id}"),
                Some(json!({"title": "renamed", "assignee": "someone", "status": status_asked})),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{status_asked}: {body}");
        assert_eq!(error_code(&body), "invalid_transition");
        let (_, shown) = server
            .call(Method::GET, &format!("{tasks}/{id}"), None)
            .await;
        assert_eq!(
            shown["task"]["title"], "original",
            "{status_asked}: {shown}"
        );
        assert!(
            shown["task"]["assignee"].is_null(),
            "{status_asked}: {shown}"
        );
        assert_eq!(shown["task"]["status"], "ready");
    }
    // The same field changes with an allowed status go through together.
    let (status, body) = server
        .call(
            Method::PATCH,
            &format!("{tasks}/{id}"),
            Some(json!({"title": "renamed", "assignee": "someone", "status": "review"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["task"]["title"], "renamed");
    assert_eq!(body["task"]["assignee"], "someone");
    assert_eq!(body["task"]["status"], "review");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_board_list_creation_and_links_routes() {
    let server = Server::start().await;
    // Without the token: refused, like every API route.
    for path in ["/api/plugins/kanban/boards", "/api/plugins/kanban/links"] {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let (status, listed) = server
        .call(Method::GET, "/api/plugins/kanban/boards", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["default_board"], "default");
    assert!(
        listed["boards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["board"]["slug"] == "default"),
        "{listed}"
    );

    let (status, created) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": "ops", "name": "Operations"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["board"]["name"], "Operations");
    let (status, again) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": "ops"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(error_code(&again), "board_exists");
    let (status, bad) = server
        .call(
            Method::POST,
            "/api/plugins/kanban/boards",
            Some(json!({"slug": "../etc"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert_eq!(error_code(&bad), "bad_board");

    // A task on the new board is counted in the listing; a fan-out's links are listed.
    let tasks = "/api/plugins/kanban/tasks?board=ops";
    let (_, parent) = server
        .call(Method::POST, tasks, Some(json!({"title": "plan"})))
        .await;
    let parent_id = parent["task"]["id"].as_str().unwrap().to_string();
    let mut children = Vec::new();
    for title in ["a", "b"] {
        let (status, child) = server
            .call(
                Method::POST,
                tasks,
                Some(json!({"title": title, "parents": [parent_id]})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{child}");
        children.push(child["task"]["id"].as_str().unwrap().to_string());
    }
    let (status, links) = server
        .call(Method::GET, "/api/plugins/kanban/links?board=ops", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{links}");
    let mut pairs: Vec<(String, String)> = links["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["parent_id"].as_str().unwrap().to_string(),
                l["child_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    let mut expected: Vec<(String, String)> = children
        .iter()
        .map(|c| (parent_id.clone(), c.clone()))
        .collect();
    expected.sort();
    assert_eq!(pairs, expected);
    let (_, listed) = server
        .call(Method::GET, "/api/plugins/kanban/boards", None)
        .await;
    let ops = listed["boards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["board"]["slug"] == "ops")
        .unwrap()
        .clone();
    let total: u64 = ops["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(total, 3, "{ops}");
    let (status, missing) = server
        .call(Method::GET, "/api/plugins/kanban/links?board=nope", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");

    // The dashboard's page and assets need no token and carry the content policy.
    for path in ["/", "/dashboard/app.js", "/dashboard/style.css"] {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .unwrap();
        assert!(policy.contains("default-src 'none'"), "{policy}");
    }
    let response = server
        .client
        .get(format!("{}/dashboard/nope.js", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}
