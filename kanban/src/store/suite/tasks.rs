//! Suite cases on a board's shape: boards, creation, idempotency keys, parents and links, a
//! task's context, comments and attachments, edits and filters.

use crate::domain::{
    ATTACHMENT_CAP_BYTES, BoardSlug, EventKind, InitialStatus, Link, NewAttachment, NewBoard,
    NewTask, RunOutcome, TaskFilter, TaskId, TaskPatch, TaskSort, TaskStatus, Timestamp,
};
use crate::store::{BlockRequest, Completion, FailureKind, StoreError};

use super::{SuiteBackend, default_board, failure, kinds, long_ttl, new_task, status};

/// Slugs are checked and lowercased; `default` is protected; archived boards take no work.
pub async fn boards_follow_slug_rules_and_archive(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let boards = s.list_boards(false).await.unwrap();
    assert_eq!(
        boards.iter().map(|b| b.slug.as_str()).collect::<Vec<_>>(),
        ["default"]
    );

    let slug = BoardSlug::parse("Research-2").unwrap();
    assert_eq!(slug.as_str(), "research-2");
    let made = s
        .create_board(&NewBoard::new(slug.clone()).with_name("Research"))
        .await
        .unwrap();
    assert_eq!((made.name.as_str(), made.archived_at), ("Research", None));
    assert!(matches!(
        s.create_board(&NewBoard::new(slug.clone())).await,
        Err(StoreError::BoardExists { .. })
    ));
    assert!(BoardSlug::parse("no spaces").is_err());

    for action in [
        s.archive_board(&default_board()).await.err(),
        s.delete_board(&default_board()).await.err(),
    ] {
        assert!(
            matches!(action, Some(StoreError::DefaultBoardProtected { .. })),
            "{action:?}"
        );
    }
    assert!(matches!(
        s.delete_board(&slug).await,
        Err(StoreError::BoardNotArchived { .. })
    ));
    s.create_task(&slug, &NewTask::new("before archive"))
        .await
        .unwrap();
    let archived = s.archive_board(&slug).await.unwrap();
    assert!(archived.archived_at.is_some());
    assert_eq!(s.list_boards(false).await.unwrap().len(), 1);
    assert_eq!(s.list_boards(true).await.unwrap().len(), 2);
    assert!(matches!(
        s.create_task(&slug, &NewTask::new("after")).await,
        Err(StoreError::BoardArchived { .. })
    ));
    assert!(matches!(
        s.claim_next(&slug, &long_ttl()).await,
        Err(StoreError::BoardArchived { .. })
    ));
    s.delete_board(&slug).await.unwrap();
    assert!(matches!(
        s.board(&slug).await,
        Err(StoreError::BoardNotFound { .. })
    ));
    let ghost = BoardSlug::parse("never-made").unwrap();
    assert!(matches!(
        s.create_task(&ghost, &NewTask::new("x")).await,
        Err(StoreError::BoardNotFound { .. })
    ));
}

/// A new task is `ready` only when every parent is finished; `triage` and `blocked` on request;
/// the tenant comes from the first parent that has one.
pub async fn creation_picks_ready_todo_triage_or_blocked(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let root = s
        .create_task(
            &board,
            &NewTask::new("root")
                .with_tenant("acme")
                .with_created_by("tester"),
        )
        .await
        .unwrap();
    assert!(root.created);
    let root = root.task;
    assert!(TaskId::parse(root.id.as_str()).is_ok());
    assert_eq!(root.status, TaskStatus::Ready);
    assert_eq!(root.created_by.as_deref(), Some("tester"));

    let child = s
        .create_task(&board, &NewTask::new("child").with_parent(root.id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(child.status, TaskStatus::Todo);
    assert_eq!(child.tenant.as_deref(), Some("acme"));
    assert_eq!(
        s.links(&board, &child.id).await.unwrap().parents,
        vec![root.id.clone()]
    );

    s.complete(&board, &root.id, &Completion::default())
        .await
        .unwrap();
    let late = s
        .create_task(&board, &NewTask::new("late").with_parent(root.id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(late.status, TaskStatus::Ready);

    let triage = s
        .create_task(
            &board,
            &NewTask::new("vague").with_initial(InitialStatus::Triage),
        )
        .await
        .unwrap()
        .task;
    assert_eq!(triage.status, TaskStatus::Triage);
    let parked = s
        .create_task(
            &board,
            &NewTask::new("parked").with_initial(InitialStatus::Blocked),
        )
        .await
        .unwrap()
        .task;
    assert_eq!(parked.status, TaskStatus::Blocked);

    let err = s
        .create_task(&board, &NewTask::new("   "))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("title"), "{err}");
    let missing = TaskId::parse("t_00000000").unwrap();
    assert!(matches!(
        s.create_task(&board, &NewTask::new("orphan").with_parent(missing))
            .await,
        Err(StoreError::TaskNotFound { .. })
    ));
    assert_eq!(kinds(&*s, &child.id).await[0], EventKind::Created);
}

/// The same idempotency key returns the live task; after archiving it a new one is made.
pub async fn idempotency_keys_return_the_live_task(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let first = s
        .create_task(&board, &NewTask::new("a").with_idempotency_key("k1"))
        .await
        .unwrap();
    let again = s
        .create_task(&board, &NewTask::new("b").with_idempotency_key("k1"))
        .await
        .unwrap();
    assert!(first.created && !again.created);
    assert_eq!(first.task.id, again.task.id);
    assert_eq!(again.task.title, "a");
    s.archive(&board, &first.task.id).await.unwrap();
    let fresh = s
        .create_task(&board, &NewTask::new("c").with_idempotency_key("k1"))
        .await
        .unwrap();
    assert!(fresh.created);
    assert_ne!(fresh.task.id, first.task.id);
    let other = BoardSlug::parse("other").unwrap();
    s.create_board(&NewBoard::new(other.clone())).await.unwrap();
    assert!(
        s.create_task(&other, &NewTask::new("d").with_idempotency_key("k1"))
            .await
            .unwrap()
            .created
    );
}

/// Fan-in: the child becomes `ready` when its last parent completes, never before; a task cannot complete before its parents.
pub async fn completing_parents_promotes_children(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let a = new_task(&*s, "a").await;
    let p = new_task(&*s, "p").await;
    let c = s
        .create_task(
            &board,
            &NewTask::new("c")
                .with_parent(a.clone())
                .with_parent(p.clone()),
        )
        .await
        .unwrap()
        .task
        .id;
    let err = s
        .complete(&board, &c, &Completion::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    s.block(&board, &c, &BlockRequest::new("x", "y"))
        .await
        .unwrap_err();

    s.complete(
        &board,
        &a,
        &Completion {
            result: Some("A".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(status(&*s, &c).await, TaskStatus::Todo);
    assert!(s.promote(&board).await.unwrap().is_empty());
    s.complete(&board, &p, &Completion::default())
        .await
        .unwrap();
    assert_eq!(
        status(&*s, &c).await,
        TaskStatus::Ready,
        "the last parent's completion promotes"
    );
    assert!(kinds(&*s, &c).await.contains(&EventKind::Promoted));

    let err = s
        .complete(&board, &a, &Completion::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{a} is done; only running, ready, blocked or review tasks can be completed")
    );
    let done = s.task(&board, &a).await.unwrap();
    assert_eq!(done.result.as_deref(), Some("A"));
    assert!(done.completed_at.is_some());
    // Never claimed, still one run: a zero-length one synthesized at completion.
    let runs = s.runs(&board, &a).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, Some(RunOutcome::Completed));

    // A parent that is not finished holds completion back, and a due task keeps waiting.
    let q = new_task(&*s, "q").await;
    let parked = NewTask::new("parked")
        .with_parent(q.clone())
        .with_initial(InitialStatus::Blocked);
    let parked = s.create_task(&board, &parked).await.unwrap().task.id;
    let err = s
        .complete(&board, &parked, &Completion::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ParentsOpen { .. }), "{err}");
    assert!(err.to_string().contains(q.as_str()), "{err}");
    let d = s
        .create_task(&board, &NewTask::new("d").with_parent(q.clone()))
        .await
        .unwrap()
        .task
        .id;
    assert_eq!(
        s.schedule(&board, &d, Timestamp(0)).await.unwrap().status,
        TaskStatus::Scheduled
    );
    s.promote(&board).await.unwrap();
    assert_eq!(
        status(&*s, &d).await,
        TaskStatus::Todo,
        "a due task with an open parent waits"
    );
    let err = s.claim_task(&board, &d, &long_ttl()).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    assert_eq!(
        s.unblock(&board, &parked).await.unwrap().status,
        TaskStatus::Todo
    );
}

/// Links: no self-links, no cycles, no other board's tasks; an open parent sends a ready
/// child back to `todo`, and unlinking it brings the child back.
pub async fn links_refuse_self_cycles_and_other_boards(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let a = new_task(&*s, "a").await;
    let bb = new_task(&*s, "b").await;
    let c = new_task(&*s, "c").await;
    assert!(matches!(
        s.link(&board, &a, &a).await,
        Err(StoreError::SelfLink { .. })
    ));
    s.link(&board, &a, &bb).await.unwrap();
    s.link(&board, &bb, &c).await.unwrap();
    s.link(&board, &a, &bb).await.unwrap(); // linking twice changes nothing
    let err = s.link(&board, &c, &a).await.unwrap_err();
    assert!(matches!(err, StoreError::Cycle { .. }), "{err}");
    assert!(err.to_string().contains("cycle"));
    assert_eq!(status(&*s, &bb).await, TaskStatus::Todo);
    assert_eq!(status(&*s, &c).await, TaskStatus::Todo);
    assert_eq!(
        s.links(&board, &bb).await.unwrap().children,
        vec![c.clone()]
    );
    let mut expected = vec![
        Link {
            parent: a.clone(),
            child: bb.clone(),
        },
        Link {
            parent: bb.clone(),
            child: c.clone(),
        },
    ];
    expected.sort_by(|x, y| (&x.parent, &x.child).cmp(&(&y.parent, &y.child)));
    assert_eq!(s.board_links(&board).await.unwrap(), expected);

    s.unlink(&board, &a, &bb).await.unwrap();
    assert_eq!(status(&*s, &bb).await, TaskStatus::Ready);
    assert!(matches!(
        s.unlink(&board, &a, &bb).await,
        Err(StoreError::LinkNotFound { .. })
    ));

    let other = BoardSlug::parse("elsewhere").unwrap();
    s.create_board(&NewBoard::new(other.clone())).await.unwrap();
    let foreign = s
        .create_task(&other, &NewTask::new("foreign"))
        .await
        .unwrap()
        .task
        .id;
    let err = s.link(&board, &foreign, &a).await.unwrap_err();
    assert!(matches!(err, StoreError::CrossBoardLink { .. }), "{err}");
    let err = s
        .create_task(&board, &NewTask::new("x").with_parent(foreign.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::CrossBoardLink { .. }), "{err}");
    assert!(s.links(&board, &a).await.unwrap().children.is_empty());
}

/// `task_context` gives what `links`, `task`, `runs`, `attachments` and `comments` give one by
/// one; a task that does not exist is `TaskNotFound`.
pub async fn task_context_is_what_its_parts_say(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let parent = new_task(&*s, "parent").await;
    let claim = s.claim_next(&board, &long_ttl()).await.unwrap().unwrap();
    s.complete(
        &board,
        &parent,
        &Completion {
            summary: Some("parent done".into()),
            worker: Some(claim.lease.worker.clone()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    let child = s
        .create_task(&board, &NewTask::new("child").with_parent(parent.clone()))
        .await
        .unwrap()
        .task
        .id;
    s.add_comment(&board, &child, "alice", "mind the edge cases")
        .await
        .unwrap();
    let file = NewAttachment {
        filename: "notes.txt".into(),
        content_type: "text/plain".into(),
        content: b"notes".to_vec(),
        uploaded_by: None,
    };
    s.attach(&board, &child, &file).await.unwrap();
    let claim = s.claim_next(&board, &long_ttl()).await.unwrap().unwrap();
    assert_eq!(claim.task.id, child);

    let context = s.task_context(&board, &child).await.unwrap();
    assert_eq!(context.links, s.links(&board, &child).await.unwrap());
    assert_eq!(context.links.parents, vec![parent.clone()]);
    assert_eq!(
        context.parents,
        vec![(
            s.task(&board, &parent).await.unwrap(),
            s.runs(&board, &parent).await.unwrap()
        )]
    );
    assert_eq!(
        context.attachments,
        s.attachments(&board, &child).await.unwrap()
    );
    assert_eq!(context.attachments.len(), 1);
    assert_eq!(context.runs, s.runs(&board, &child).await.unwrap());
    assert_eq!(context.runs.len(), 1);
    assert_eq!(context.comments, s.comments(&board, &child).await.unwrap());
    assert_eq!(context.comments.len(), 1);
    let ghost = TaskId::parse("t_00000000").unwrap();
    assert!(matches!(
        s.task_context(&board, &ghost).await,
        Err(StoreError::TaskNotFound { .. })
    ));
}

/// Comments keep their order; attachments keep their bytes, within the size cap.
pub async fn comments_and_attachments(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "notes").await;
    s.add_comment(&board, &id, "alice", "first").await.unwrap();
    s.add_comment(&board, &id, "bob", "second").await.unwrap();
    let comments = s.comments(&board, &id).await.unwrap();
    assert_eq!(
        comments.iter().map(|c| c.body.as_str()).collect::<Vec<_>>(),
        ["first", "second"]
    );
    assert!(matches!(
        s.add_comment(&board, &id, "alice", " ").await,
        Err(StoreError::Invalid(_))
    ));

    let file = NewAttachment {
        filename: "report.txt".into(),
        content_type: "text/plain".into(),
        content: b"hello".to_vec(),
        uploaded_by: Some("alice".into()),
    };
    let att = s.attach(&board, &id, &file).await.unwrap();
    assert_eq!((att.size, att.filename.as_str()), (5, "report.txt"));
    assert_eq!(
        s.attachment_content(&board, att.id).await.unwrap(),
        b"hello"
    );
    assert_eq!(s.attachments(&board, &id).await.unwrap(), vec![att.clone()]);
    let big = NewAttachment {
        content: vec![0; ATTACHMENT_CAP_BYTES as usize + 1],
        ..file.clone()
    };
    assert!(matches!(
        s.attach(&board, &id, &big).await,
        Err(StoreError::AttachmentTooLarge { .. })
    ));
    let sneaky = NewAttachment {
        filename: "../etc/passwd".into(),
        ..file
    };
    assert!(matches!(
        s.attach(&board, &id, &sneaky).await,
        Err(StoreError::Invalid(_))
    ));
    s.remove_attachment(&board, att.id).await.unwrap();
    assert!(s.attachments(&board, &id).await.unwrap().is_empty());
    assert!(matches!(
        s.attachment_content(&board, att.id).await,
        Err(StoreError::AttachmentNotFound { .. })
    ));
    let k = kinds(&*s, &id).await;
    assert!(k.contains(&EventKind::Attached) && k.contains(&EventKind::AttachmentRemoved));
}

/// Field edits, assignment (a new assignee clears the failure count) and list filters.
pub async fn patches_assignments_and_filters(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let id = new_task(&*s, "draft").await;
    let patch = TaskPatch {
        title: Some("final".into()),
        priority: Some(9),
        ..TaskPatch::default()
    };
    let t = s.patch_task(&board, &id, &patch).await.unwrap();
    assert_eq!(
        (t.title.as_str(), t.priority, t.status),
        ("final", 9, TaskStatus::Ready)
    );
    let k = kinds(&*s, &id).await;
    assert!(k.contains(&EventKind::Edited) && k.contains(&EventKind::Reprioritized));
    let blank = TaskPatch {
        title: Some("".into()),
        ..TaskPatch::default()
    };
    assert!(matches!(
        s.patch_task(&board, &id, &blank).await,
        Err(StoreError::Invalid(_))
    ));

    s.claim_task(&board, &id, &long_ttl()).await.unwrap();
    s.record_failure(&board, &id, &failure(FailureKind::Crashed, "x", Some(5)))
        .await
        .unwrap();
    let t = s.assign_task(&board, &id, Some("writer")).await.unwrap();
    assert_eq!(
        (t.assignee.as_deref(), t.consecutive_failures),
        (Some("writer"), 0)
    );
    assert!(kinds(&*s, &id).await.contains(&EventKind::Assigned));

    s.create_task(
        &board,
        &NewTask::new("t1").with_tenant("acme").with_priority(1),
    )
    .await
    .unwrap();
    s.create_task(
        &board,
        &NewTask::new("t2").with_tenant("acme").with_priority(3),
    )
    .await
    .unwrap();
    let acme = TaskFilter {
        tenant: Some("acme".into()),
        sort: TaskSort::Priority,
        ..TaskFilter::default()
    };
    let got: Vec<_> = s
        .list_tasks(&board, &acme)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.title)
        .collect();
    assert_eq!(got, ["t2", "t1"]);
    let writer = TaskFilter {
        assignee: Some("writer".into()),
        ..TaskFilter::default()
    };
    assert_eq!(s.list_tasks(&board, &writer).await.unwrap().len(), 1);
    let ready = TaskFilter {
        statuses: vec![TaskStatus::Ready],
        limit: Some(1),
        ..TaskFilter::default()
    };
    assert_eq!(s.list_tasks(&board, &ready).await.unwrap().len(), 1);
    let stats = s.stats(&board).await.unwrap();
    assert_eq!(stats.count(TaskStatus::Ready), 3);
}
