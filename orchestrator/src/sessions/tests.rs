//! The session store's behaviour, the same on SQLite and on the test PostgreSQL cluster.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use troupe_actors::journal::{CallPhase, DelegationState, Journal, OpenedSession, Origin};
use troupe_actors::model::{ChatMessage, ToolCallRequest};
use troupe_actors::usage::Spend;

use super::{ListQuery, SearchScope, SessionStore, SessionStoreError, Write};

fn opened(store: &SessionStore, path: &[&str], origin: &str) {
    store.opened(OpenedSession {
        id: (*path.last().unwrap()).to_string(),
        agent_path: path.iter().map(|s| (*s).to_string()).collect(),
        model: "m".into(),
        origin: Origin::new(origin),
    });
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User {
        content: text.into(),
    }
}

fn spent(tokens: u64) -> Spend {
    Spend {
        requests: 1,
        input_tokens: tokens,
        ..Spend::default()
    }
}

async fn suite(store: SessionStore) {
    let lost = Arc::new(AtomicBool::new(false));
    // A chat tree (root with a child), an HTTP session, another chat.
    opened(&store, &["root-a"], "chat");
    opened(&store, &["root-a", "child-a"], "subagent");
    opened(&store, &["http-b"], "http");
    opened(&store, &["root-c"], "chat");
    let call = ToolCallRequest {
        id: "call-1".into(),
        name: "terminal".into(),
        arguments: r#"{"command":"deploy --token sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"}"#
            .into(),
    };
    store
        .step(
            "root-a",
            0,
            vec![
                user("Deploy the staging cluster\nand report"),
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![call],
                },
            ],
            spent(10),
            &lost,
        )
        .await;
    store
        .step(
            "child-a",
            0,
            vec![
                user("count the herons"),
                ChatMessage::Tool {
                    tool_call_id: "x".into(),
                    name: "read_file".into(),
                    content: "seven herons were deploying nests".into(),
                },
            ],
            spent(3),
            &lost,
        )
        .await;
    store
        .step(
            "http-b",
            0,
            vec![user("deploy production")],
            spent(1),
            &lost,
        )
        .await;
    store
        .step("root-c", 0, vec![user("nothing to see")], spent(1), &lost)
        .await;
    store
        .call_phase("root-a", "call-1", CallPhase::AwaitingApproval)
        .await;
    store.delegation("root-a", "d-1", DelegationState::Running);
    store.delegation(
        "root-a",
        "d-2",
        DelegationState::Arrived("results of d-2".into()),
    );
    store.delegation("root-a", "d-3", DelegationState::Delivered);
    store.flush().await;

    // Listing: top-level sessions, newest first; `all` adds subagents; by origin.
    let top = store.list(ListQuery::default()).await.unwrap();
    let ids: Vec<&str> = top.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(!ids.contains(&"child-a"));
    let all = store
        .list(ListQuery {
            all: true,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
    let chats = store
        .list(ListQuery {
            origin: Some("chat".into()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(chats.len(), 2);

    // A whole session: title, count, usage, secrets masked, phases, delegations.
    let root = store.load("root-a").await.unwrap();
    assert_eq!(root.summary.title, "Deploy the staging cluster");
    assert_eq!(root.summary.messages, 2);
    assert_eq!(root.summary.usage.input_tokens, 10);
    let stored = serde_json::to_string(&root.messages).unwrap();
    assert!(
        !stored.contains("abcdefghijklmnopqrstuvwxyz0123456789"),
        "{stored}"
    );
    assert_eq!(
        root.phases.get("call-1"),
        Some(&CallPhase::AwaitingApproval)
    );
    assert_eq!(root.delegations_running, ["d-1"]);
    assert_eq!(
        root.delegations_arrived,
        [("d-2".to_string(), "results of d-2".to_string())]
    );
    let restore = root.restore(true);
    assert!(restore.awaiting_approval.contains("call-1"));
    assert_eq!(restore.id, "root-a");

    // A conversation written again from position 1 replaces what followed.
    store
        .step("root-a", 1, vec![user("replaced")], spent(12), &lost)
        .await;
    let root = store.load("root-a").await.unwrap();
    assert_eq!(root.messages.len(), 2);
    assert_eq!(root.messages[1], user("replaced"));
    // Once a call has its result, how far it got is forgotten (providers reuse call ids).
    store
        .step(
            "root-a",
            2,
            vec![ChatMessage::Tool {
                tool_call_id: "call-1".into(),
                name: "terminal".into(),
                content: "done".into(),
            }],
            spent(12),
            &lost,
        )
        .await;
    assert!(store.load("root-a").await.unwrap().phases.is_empty());
    assert!(!lost.load(Ordering::SeqCst), "no write failed");

    // Ids by prefix; a prefix of two is ambiguous; none is not found.
    assert_eq!(store.load("http").await.unwrap().summary.id, "http-b");
    assert!(matches!(
        store.load("root").await,
        Err(SessionStoreError::Ambiguous { count: 2, .. })
    ));
    assert!(matches!(
        store.load("zzzz").await,
        Err(SessionStoreError::NotFound(_))
    ));
    // Wildcards are plain characters, and a prefix must say enough.
    assert!(matches!(
        store.load("%%%%").await,
        Err(SessionStoreError::NotFound(_))
    ));
    assert!(matches!(
        store.load("_").await,
        Err(SessionStoreError::TooShort(_))
    ));
    let tree = store.transcript("root-a", true).await.unwrap();
    assert_eq!(tree.len(), 2);
    assert_eq!(tree[1].summary.parent_id.as_deref(), Some("root-a"));

    // Search: stemmed words, all of them; a scope keeps to what the caller may see.
    let hits = store.search("deploy", None, 10).await.unwrap();
    let found: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
    assert!(
        found.contains(&"child-a") && found.contains(&"http-b"),
        "{found:?}"
    );
    let own = SearchScope {
        root: "http-b".into(),
        origin: None,
    };
    let hits = store.search("deploy", Some(own), 10).await.unwrap();
    assert!(hits.iter().all(|h| h.root_id == "http-b"), "{hits:?}");
    assert_eq!(hits.len(), 1);
    let chat = store.scope_of("child-a").await.unwrap();
    assert_eq!(chat.root, "root-a");
    assert_eq!(chat.origin.as_deref(), Some("chat"));
    let hits = store.search("herons nests", Some(chat), 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].role, "tool");
    assert!(hits[0].snippet.contains("herons"), "{hits:?}");
    assert!(store.search("  ", None, 10).await.unwrap().is_empty());
    assert_eq!(
        store.scope_of("http-b").await.unwrap().origin,
        None,
        "an HTTP session sees only its own tree"
    );

    // Closing keeps the session; removing takes the tree; pruning takes old trees.
    store.mark_closed("http-b");
    store.flush().await;
    let open = store
        .list(ListQuery {
            open_only: true,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert!(open.iter().all(|s| s.id != "http-b"));
    assert_eq!(store.delete("root-a").await.unwrap(), 2);
    assert!(store.load("child-a").await.is_err());
    assert!(store.search("herons", None, 10).await.unwrap().is_empty());
    store.write(Write::Opened {
        session: OpenedSession {
            id: "ancient".into(),
            agent_path: vec!["ancient".into()],
            model: "m".into(),
            origin: Origin::new("chat"),
        },
        at: 1_000,
    });
    assert_eq!(store.prune(30).await.unwrap(), 1);
    assert_eq!(store.list(ListQuery::default()).await.unwrap().len(), 2);
}

#[tokio::test]
async fn the_sqlite_store_keeps_finds_and_removes_sessions() {
    let dir = tempfile::tempdir().unwrap();
    suite(SessionStore::open_sqlite(&dir.path().join("s.db")).unwrap()).await;
}

#[tokio::test]
async fn the_postgres_store_keeps_finds_and_removes_sessions() {
    let Some(cluster) = troupe_kanban::store::test_cluster::cluster_url("session store suite")
    else {
        return;
    };
    let db = troupe_kanban::store::test_cluster::fresh_database(&cluster, "sessions_suite").await;
    suite(SessionStore::connect_postgres(&db.url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_connecting_to_a_new_database_at_once_all_get_the_tables() {
    let Some(cluster) = troupe_kanban::store::test_cluster::cluster_url("session store race")
    else {
        return;
    };
    let db = troupe_kanban::store::test_cluster::fresh_database(&cluster, "sessions_race").await;
    let connects: Vec<_> = (0..8)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { SessionStore::connect_postgres(&url).await })
        })
        .collect();
    for connect in connects {
        let store = connect.await.unwrap().unwrap();
        assert!(store.list(ListQuery::default()).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn openers_of_the_same_file_at_once_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || SessionStore::open_sqlite(&path).map(|_| ()))
        })
        .collect();
    for handle in handles {
        handle.join().unwrap().unwrap();
    }
}

#[test]
fn sessions_settings_read_the_section_and_name_what_is_wrong() {
    let config = |yaml: &str| crate::settings::Settings::parse(yaml).unwrap();
    let check = |yaml: &str| crate::settings::Settings::parse(yaml).map(|s| s.sessions);
    let settings = config("sessions: {keep_days: 7}").sessions;
    assert!(settings.persist);
    assert_eq!(settings.keep_days, Some(7));
    let pg = config("kanban: {store: 'postgres://u@h/boards'}").sessions;
    assert!(matches!(
        pg.store,
        crate::settings::kanban::StoreLocation::Postgres(_)
    ));
    for (yaml, needle) in [
        ("sessions: {keep_days: 0}", "sessions.keep_days"),
        ("sessions: {persist: maybe}", "true or false"),
        ("sessions: {store: 'mysql://x'}", "sessions.store"),
        ("sessions: {colour: red}", "persist, store and keep_days"),
        ("sessions: [1]", "expected a mapping"),
    ] {
        let error = check(yaml).unwrap_err().to_string();
        assert!(error.contains(needle), "{yaml}: {error}");
    }
}

/// `count` top-level sessions (every tenth a board worker's run of task `t_paged`), then every
/// page of the newest-first list walked with the cursor: each page holds at most `page` rows,
/// no row comes twice, every session comes once; the task filter finds the worker runs.
async fn paging_suite(store: SessionStore, count: usize, page: usize) {
    use super::ListCursor;
    for i in 0..count {
        let (kind, options) = if i % 10 == 0 {
            (
                "worker",
                serde_json::json!({"board": "default", "task": "t_paged", "run": i / 10}),
            )
        } else {
            ("chat", serde_json::Value::Null)
        };
        store.opened(OpenedSession {
            id: format!("s-{i:05}"),
            agent_path: vec![format!("s-{i:05}")],
            model: "m".into(),
            origin: Origin {
                kind: kind.into(),
                options,
            },
        });
    }
    store.flush().await;
    let mut seen = std::collections::HashSet::new();
    let mut before: Option<ListCursor> = None;
    let mut pages = 0;
    loop {
        let rows = store
            .list(ListQuery {
                limit: Some(page),
                before: before.clone(),
                ..ListQuery::default()
            })
            .await
            .unwrap();
        assert!(rows.len() <= page);
        pages += 1;
        for row in &rows {
            assert!(seen.insert(row.id.clone()), "{} listed twice", row.id);
        }
        match rows.last() {
            Some(last) if rows.len() == page => before = Some(ListCursor::after(last)),
            _ => break,
        }
    }
    assert_eq!(seen.len(), count);
    assert!(pages >= count / page, "{pages} pages");
    let runs = store
        .list(ListQuery {
            task: Some("t_paged".into()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.len(), count.div_ceil(10));
    assert!(runs.iter().all(|s| s.origin == "worker"));
    let none = store
        .list(ListQuery {
            task: Some("t_other".into()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    // The cursor's text form comes back as it went.
    let cursor = ListCursor {
        updated_at: 1_700_000_000_000,
        id: "a.b".into(),
    };
    assert_eq!(ListCursor::decode(&cursor.encode()), Some(cursor));
    assert_eq!(ListCursor::decode("nonsense"), None);
    assert_eq!(ListCursor::decode("12."), None);
}

#[tokio::test]
async fn ten_thousand_sqlite_sessions_are_listed_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    paging_suite(
        SessionStore::open_sqlite(&dir.path().join("s.db")).unwrap(),
        10_000,
        500,
    )
    .await;
}

#[tokio::test]
async fn postgres_sessions_are_listed_a_page_at_a_time() {
    let Some(cluster) = troupe_kanban::store::test_cluster::cluster_url("session paging") else {
        return;
    };
    let db = troupe_kanban::store::test_cluster::fresh_database(&cluster, "sessions_paging").await;
    paging_suite(
        SessionStore::connect_postgres(&db.url).await.unwrap(),
        1_000,
        70,
    )
    .await;
}
