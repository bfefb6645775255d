//! The `kanban` tools a worker's session sees, bound to one task and driven by hand (no
//! dispatcher, no model): they refuse every other task, a worker that lost its lease, and
//! assignees outside the allowlist, and they tell the worker what their terminal calls did.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use troupe_kanban::domain::{BoardSlug, NewTask, Task, TaskStatus, WorkerId};
use troupe_kanban::store::{ClaimSpec, SqliteStore, Store};
use troupe_kanban::worker_tools::{task_tools, task_view};
use troupe_tools::{CallContext, Registry};

use crate::support::{Known, args, bind, text};

/// A SQLite board in a temporary directory.
struct Board {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    slug: BoardSlug,
}

async fn board() -> Board {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    Board {
        _dir: dir,
        store,
        slug: BoardSlug::default_board(),
    }
}

async fn create(b: &Board, task: NewTask) -> Task {
    b.store.create_task(&b.slug, &task).await.unwrap().task
}

#[actix_rt::test]
async fn task_bound_tools_refuse_every_other_task() {
    let b = board().await;
    let mine = create(&b, NewTask::new("mine")).await;
    let other = create(&b, NewTask::new("someone else's")).await;
    let worker = WorkerId::local();
    let claim = b
        .store
        .claim_task(&b.slug, &mine.id, &ClaimSpec::new(worker.clone()))
        .await
        .unwrap();
    let (binding, _notes) = bind(&b.store, &b.slug, &claim.task.id, worker, "coder");
    let view = task_view(&Registry::new().view_all(), task_tools(&Arc::new(binding)));
    let o = other.id.as_str();
    let attempts: Vec<(&str, Value)> = vec![
        ("kanban_show", json!({"task_id": o})),
        ("kanban_heartbeat", json!({"task_id": o})),
        ("kanban_comment", json!({"task_id": o, "body": "hi"})),
        ("kanban_complete", json!({"task_id": o, "summary": "x"})),
        ("kanban_block", json!({"task_id": o, "reason": "x"})),
        ("kanban_create", json!({"title": "sneaky", "parents": [o]})),
        (
            "kanban_link",
            json!({"parent_id": mine.id.as_str(), "child_id": o}),
        ),
        (
            "kanban_link",
            json!({"parent_id": o, "child_id": mine.id.as_str()}),
        ),
        (
            "kanban_complete",
            json!({"summary": "x", "created_cards": [o]}),
        ),
    ];
    for (tool, args) in attempts {
        let Value::Object(args) = args else {
            unreachable!()
        };
        let result = view.call(tool, args, CallContext::detached("c")).await;
        assert!(
            result.is_error,
            "{tool} must refuse another task: {}",
            text(&result)
        );
    }
    let after = b.store.task(&b.slug, &other.id).await.unwrap();
    assert_eq!(after.status, TaskStatus::Ready);
    assert!(
        b.store
            .comments(&b.slug, &other.id)
            .await
            .unwrap()
            .is_empty()
    );
    let links = b.store.links(&b.slug, &other.id).await.unwrap();
    assert!(links.parents.is_empty() && links.children.is_empty());
    assert_eq!(
        b.store.task(&b.slug, &mine.id).await.unwrap().status,
        TaskStatus::Running
    );

    // Bad arguments get a clear error; the own task works.
    let mut args = Map::new();
    args.insert("summary".into(), json!(42));
    let result = view
        .call("kanban_complete", args, CallContext::detached("c"))
        .await;
    assert!(result.is_error && text(&result).contains("must be a string"));
    let mut args = Map::new();
    args.insert("title".into(), json!("a child"));
    let result = view
        .call("kanban_create", args, CallContext::detached("c"))
        .await;
    assert!(!result.is_error, "{}", text(&result));
    let children = b.store.links(&b.slug, &mine.id).await.unwrap().children;
    assert_eq!(children.len(), 1);
}

#[actix_rt::test]
async fn a_failed_terminal_call_after_a_block_keeps_the_block() {
    use troupe_kanban::worker_tools::TerminalCall;
    let b = board().await;
    let task = create(&b, NewTask::new("parked then poked")).await;
    let worker = WorkerId::local();
    b.store
        .claim_task(&b.slug, &task.id, &ClaimSpec::new(worker.clone()))
        .await
        .unwrap();
    let (binding, notes) = bind(&b.store, &b.slug, &task.id, worker, "coder");
    let view = task_view(&Registry::new().view_all(), task_tools(&Arc::new(binding)));
    // What the worker would know: every note the tools sent before the question is in.
    let known = || async { notes.send(Known).await.unwrap() };
    let call = |tool: &'static str, args: Value| {
        let view = view.clone();
        async move {
            let Value::Object(args) = args else {
                unreachable!()
            };
            view.call(tool, args, CallContext::detached("c")).await
        }
    };
    let blocked = call("kanban_block", json!({"reason": "need the API key"})).await;
    assert!(!blocked.is_error, "{}", text(&blocked));
    assert!(matches!(known().await, TerminalCall::Blocked(_, _)));
    // One more terminal call after the block: the board refuses it (the task is blocked) ...
    let late = call("kanban_complete", json!({"summary": "done after all"})).await;
    assert!(late.is_error, "{}", text(&late));
    // ... and the worker still knows it blocked the task.
    match known().await {
        TerminalCall::Blocked(task, reason) => {
            assert_eq!(task.status, TaskStatus::Blocked);
            assert_eq!(reason, "need the API key");
        }
        other => panic!("the block was forgotten: {other:?}"),
    }
    assert!(known().await.is_made());
    let late = call("kanban_block", json!({"reason": "again"})).await;
    assert!(late.is_error, "{}", text(&late));
    assert!(matches!(known().await, TerminalCall::Blocked(_, r) if r == "need the API key"));
}

#[actix_rt::test]
async fn a_stale_worker_cannot_write_after_its_lease_was_taken_back() {
    let b = board().await;
    let task = create(&b, NewTask::new("mine")).await;
    let old = WorkerId::local();
    b.store
        .claim_task(&b.slug, &task.id, &ClaimSpec::new(old.clone()))
        .await
        .unwrap();
    let child = create(&b, NewTask::new("sub").with_parent(task.id.clone())).await;
    // The lease lapses and another run takes the task.
    b.store
        .heartbeat(&b.slug, &task.id, &old, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(b.store.reclaim_expired(&b.slug).await.unwrap().len(), 1);
    b.store
        .claim_task(&b.slug, &task.id, &ClaimSpec::new(WorkerId::local()))
        .await
        .unwrap();
    let (binding, _notes) = bind(&b.store, &b.slug, &task.id, old, "coder");
    let view = task_view(&Registry::new().view_all(), task_tools(&Arc::new(binding)));
    let comments_before = b.store.comments(&b.slug, &task.id).await.unwrap().len();
    let children_before = b.store.links(&b.slug, &task.id).await.unwrap().children;
    let attempts = [
        ("kanban_comment", json!({"body": "still here"})),
        ("kanban_create", json!({"title": "late child"})),
        (
            "kanban_link",
            json!({"parent_id": task.id.as_str(), "child_id": child.id.as_str()}),
        ),
    ];
    for (tool, a) in attempts {
        let result = view.call(tool, args(a), CallContext::detached("c")).await;
        assert!(result.is_error, "{tool} must refuse: {}", text(&result));
        assert!(
            text(&result).contains("no longer holds"),
            "{}",
            text(&result)
        );
    }
    assert_eq!(
        b.store.comments(&b.slug, &task.id).await.unwrap().len(),
        comments_before
    );
    assert_eq!(
        b.store.links(&b.slug, &task.id).await.unwrap().children,
        children_before
    );
}

#[actix_rt::test]
async fn a_worker_may_assign_children_only_to_allowed_profiles() {
    let b = board().await;
    let task = create(&b, NewTask::new("plan")).await;
    let worker = WorkerId::local();
    b.store
        .claim_task(&b.slug, &task.id, &ClaimSpec::new(worker.clone()))
        .await
        .unwrap();
    let (binding, _notes) = bind(&b.store, &b.slug, &task.id, worker, "reader");
    let binding = binding.with_assignable(vec!["writer".into()]);
    let view = task_view(&Registry::new().view_all(), task_tools(&Arc::new(binding)));
    let refused = view
        .call(
            "kanban_create",
            args(json!({"title": "run a shell", "assignee": "admin"})),
            CallContext::detached("c"),
        )
        .await;
    assert!(refused.is_error);
    let why = text(&refused);
    assert!(
        why.contains("\"admin\"") && why.contains("\"reader\"") && why.contains("\"writer\""),
        "{why}"
    );
    assert!(
        b.store
            .links(&b.slug, &task.id)
            .await
            .unwrap()
            .children
            .is_empty()
    );
    for assignee in [json!("reader"), json!("writer"), Value::Null] {
        let ok = view
            .call(
                "kanban_create",
                args(json!({"title": format!("for {assignee}"), "assignee": assignee})),
                CallContext::detached("c"),
            )
            .await;
        assert!(!ok.is_error, "{}", text(&ok));
    }
    assert_eq!(
        b.store
            .links(&b.slug, &task.id)
            .await
            .unwrap()
            .children
            .len(),
        3
    );
}
