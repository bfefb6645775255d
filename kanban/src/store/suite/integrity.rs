//! Suite cases on what races and crashes must not break: the event log, concurrent claims and
//! creates, abandoned operations, and a reopened store.

use std::collections::HashSet;
use std::sync::Arc;

use crate::domain::{EventKind, NewTask, TaskStatus};
use crate::store::Completion;

use super::{SuiteBackend, assert_consistent, default_board, long_ttl, new_task};

/// Event ids strictly increase; paging with a cursor sees every event once; each state change
/// left its event.
pub async fn events_are_monotonic_and_complete(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let start = s.stats(&board).await.unwrap().last_event_id;
    let a = new_task(&*s, "a").await;
    let c = s
        .create_task(&board, &NewTask::new("c").with_parent(a.clone()))
        .await
        .unwrap()
        .task
        .id;
    let spec = long_ttl();
    s.claim_task(&board, &a, &spec).await.unwrap();
    s.add_comment(&board, &a, "coder", "halfway").await.unwrap();
    s.complete(&board, &a, &Completion::default())
        .await
        .unwrap();
    s.archive(&board, &c).await.unwrap();

    let mut paged = Vec::new();
    let mut cursor = start;
    loop {
        let page = s.events_since(&board, cursor, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        cursor = last.id;
        paged.extend(page);
    }
    let whole = s.events_since(&board, start, 10_000).await.unwrap();
    assert_eq!(paged, whole);
    assert!(whole.windows(2).all(|w| w[0].id < w[1].id));
    let seen: Vec<(String, EventKind)> = whole
        .iter()
        .map(|e| (e.task_id.clone().unwrap().to_string(), e.kind))
        .collect();
    let expect = [
        (a.to_string(), EventKind::Created),
        (c.to_string(), EventKind::Created),
        (a.to_string(), EventKind::Claimed),
        (a.to_string(), EventKind::Commented),
        (a.to_string(), EventKind::Completed),
        (c.to_string(), EventKind::Promoted),
        (c.to_string(), EventKind::Archived),
    ];
    assert_eq!(seen, expect);
    assert_eq!(
        s.stats(&board).await.unwrap().last_event_id,
        whole.last().unwrap().id
    );
    assert!(s.events_since(&board, cursor, 10).await.unwrap().is_empty());
}

/// Two handles (separate connections) and four claimers race for the same ready tasks: every
/// task is claimed exactly once.
pub async fn concurrent_claims_are_exclusive(b: &dyn SuiteBackend) {
    const TASKS: usize = 120;
    let first = b.open().await.unwrap();
    let second = b.open().await.unwrap();
    let board = default_board();
    for i in 0..TASKS {
        first
            .create_task(&board, &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
    }
    let mut claimers = tokio::task::JoinSet::new();
    for n in 0..4 {
        let store = if n % 2 == 0 {
            Arc::clone(&first)
        } else {
            Arc::clone(&second)
        };
        let board = board.clone();
        claimers.spawn(async move {
            let spec = long_ttl();
            let mut mine = Vec::new();
            loop {
                match store.claim_next(&board, &spec).await {
                    Ok(Some(claim)) => mine.push(claim.task.id),
                    Ok(None) => return mine,
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("claim failed: {e}"),
                }
            }
        });
    }
    let mut claimed = Vec::new();
    while let Some(part) = claimers.join_next().await {
        claimed.extend(part.unwrap());
    }
    let unique: HashSet<_> = claimed.iter().cloned().collect();
    assert_eq!(claimed.len(), TASKS, "every task claimed once, none twice");
    assert_eq!(unique.len(), TASKS);
    assert_eq!(
        first
            .stats(&board)
            .await
            .unwrap()
            .count(TaskStatus::Running),
        TASKS as u64
    );
    assert_consistent(&*second, &board).await;
}

/// Two handles create with the same idempotency key at once: one task results.
pub async fn concurrent_idempotent_creates_make_one_task(b: &dyn SuiteBackend) {
    let first = b.open().await.unwrap();
    let second = b.open().await.unwrap();
    let board = default_board();
    let mut set = tokio::task::JoinSet::new();
    for n in 0..8 {
        let store = if n % 2 == 0 {
            Arc::clone(&first)
        } else {
            Arc::clone(&second)
        };
        let board = board.clone();
        set.spawn(async move {
            loop {
                let new = NewTask::new(format!("attempt {n}")).with_idempotency_key("once");
                match store.create_task(&board, &new).await {
                    Ok(c) => return c,
                    Err(e) if e.is_transient() => tokio::task::yield_now().await,
                    Err(e) => panic!("create failed: {e}"),
                }
            }
        });
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    while let Some(c) = set.join_next().await {
        let c = c.unwrap();
        created += usize::from(c.created);
        ids.insert(c.task.id);
    }
    assert_eq!((ids.len(), created), (1, 1));
}

/// Operations abandoned mid-flight (their futures dropped) leave each change whole or absent.
pub async fn cancelled_operations_leave_no_half_change(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    for i in 0..40 {
        s.create_task(&board, &NewTask::new(format!("job {i}")))
            .await
            .unwrap();
    }
    let mut handles = Vec::new();
    for _ in 0..40 {
        let store = Arc::clone(&s);
        let board = board.clone();
        handles.push(tokio::spawn(async move {
            let _ = store.claim_next(&board, &long_ttl()).await;
        }));
    }
    for (i, h) in handles.iter().enumerate() {
        if i % 2 == 0 {
            h.abort();
        }
    }
    for h in handles {
        let _ = h.await;
    }
    assert_consistent(&*s, &board).await;
    // The abandoned ones are either claimed whole or still ready; the board keeps working.
    let again = b.open().await.unwrap();
    while again
        .claim_next(&board, &long_ttl())
        .await
        .unwrap()
        .is_some()
    {}
    assert_eq!(
        again
            .stats(&board)
            .await
            .unwrap()
            .count(TaskStatus::Running),
        40
    );
    assert_consistent(&*again, &board).await;
}

/// A new handle sees everything committed through an old one, which is then dropped.
pub async fn reopening_sees_every_commit(b: &dyn SuiteBackend) {
    let board = default_board();
    let (id, run) = {
        let s = b.open().await.unwrap();
        let id = new_task(&*s, "survives").await;
        let claim = s.claim_task(&board, &id, &long_ttl()).await.unwrap();
        s.add_comment(&board, &id, "me", "still here")
            .await
            .unwrap();
        (id, claim.run.id)
    };
    let s = b.open().await.unwrap();
    let t = s.task(&board, &id).await.unwrap();
    assert_eq!(t.status, TaskStatus::Running);
    assert_eq!(t.lease.map(|l| l.run_id), Some(run));
    assert_eq!(s.comments(&board, &id).await.unwrap().len(), 1);
    assert_consistent(&*s, &board).await;
}
