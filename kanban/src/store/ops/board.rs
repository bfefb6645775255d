//! Operations on a board's contents: the board row, tasks and their fields, links, comments,
//! events, runs and attachments.

use std::collections::HashSet;

use serde_json::Value;

use super::payload::payload;
use super::{cas, emit, ensure_live, non_empty, task};
use crate::domain::{
    ATTACHMENT_CAP_BYTES, Attachment, Board, BoardStats, Comment, Event, EventId, EventKind,
    InitialStatus, Link, ModelError, NewAttachment, NewBoard, NewTask, Run, RunId, Task,
    TaskFilter, TaskId, TaskLinks, TaskPatch, TaskStatus, Timestamp,
};
use crate::store::backend::{Backend, FileRow, Side};
use crate::store::rules;
use crate::store::{Created, StoreError, TaskContext};

// ---- boards ----

/// Writes the board row; `BoardExists` when one is already there.
pub(crate) async fn create_board<B: Backend>(b: &B, new: &NewBoard) -> Result<Board, B::Error> {
    let name = new
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(new.slug.as_str());
    if !b.insert_board(name, &new.description).await? {
        return Err(StoreError::BoardExists {
            slug: b.board().clone(),
        }
        .into());
    }
    emit(
        b,
        None,
        None,
        EventKind::BoardCreated,
        payload! {"slug": b.board().as_str()},
    )?;
    b.board_row().await
}

/// Marks the board archived (idempotent).
pub(crate) async fn archive_board<B: Backend>(b: &B) -> Result<Board, B::Error> {
    let board = b.board_row().await?;
    if board.archived_at.is_none() {
        b.mark_board_archived().await?;
        emit(
            b,
            None,
            None,
            EventKind::BoardArchived,
            payload! {"slug": b.board().as_str()},
        )?;
    }
    b.board_row().await
}

// ---- tasks ----

pub(crate) async fn create_task<B: Backend>(b: &B, new: &NewTask) -> Result<Created, B::Error> {
    ensure_live(b).await?;
    non_empty("title", &new.title, "a one-line title")?;
    if let Some(a) = &new.assignee {
        non_empty("assignee", a, "a profile name, or no assignee at all")?;
    }
    if let Some(key) = &new.idempotency_key {
        non_empty("idempotency_key", key, "a non-empty key, or none")?;
        if let Some(task) = b.task_by_key(key).await? {
            return Ok(Created {
                task,
                created: false,
            });
        }
    }
    let mut parents: Vec<TaskId> = Vec::new();
    for p in &new.parents {
        if !parents.contains(p) {
            parents.push(p.clone());
        }
    }
    let mut tenant = new.tenant.clone();
    let mut any_open = false;
    for p in &parents {
        let parent = task(b, p).await?;
        if tenant.is_none() {
            tenant = parent.tenant.clone();
        }
        any_open |= rules::is_open(parent.status);
    }
    let status = match new.initial {
        InitialStatus::Triage => TaskStatus::Triage,
        InitialStatus::Blocked => TaskStatus::Blocked,
        InitialStatus::Auto => rules::runnable_status(any_open, TaskStatus::Ready),
    };
    let id = fresh_id(b).await?;
    let row = new_task_row(id.clone(), new, status, tenant, b.now());
    b.insert_task(&row).await?;
    for p in &parents {
        b.insert_link(p, &id).await?;
    }
    let parent_ids: Vec<&str> = parents.iter().map(TaskId::as_str).collect();
    emit(
        b,
        Some(&id),
        None,
        EventKind::Created,
        payload! {"status": status.as_str(), "parents": parent_ids, "assignee": new.assignee},
    )?;
    Ok(Created {
        task: task(b, &id).await?,
        created: true,
    })
}

/// A new task as its creation writes it: the creator's fields (trimmed, and only a budget that
/// limits something and a well-formed `traceparent`), `status`, and nothing run yet.
pub(crate) fn new_task_row(
    id: TaskId,
    new: &NewTask,
    status: TaskStatus,
    tenant: Option<String>,
    now: Timestamp,
) -> Task {
    Task {
        id,
        title: new.title.trim().to_string(),
        body: new.body.clone(),
        assignee: new.assignee.as_deref().map(|a| a.trim().to_string()),
        status,
        priority: new.priority,
        tenant,
        idempotency_key: new.idempotency_key.clone(),
        created_by: new.created_by.clone(),
        created_at: now,
        updated_at: now,
        started_at: None,
        completed_at: None,
        workspace: new.workspace.clone(),
        max_runtime_seconds: new.max_runtime_seconds,
        max_retries: new.max_retries,
        result: None,
        consecutive_failures: 0,
        protocol_violations: 0,
        last_failure_error: None,
        block_kind: None,
        block_reason: None,
        block_recurrences: 0,
        lease: None,
        last_heartbeat_at: None,
        scheduled_until: None,
        budget: new.budget.filter(|budget| budget.is_limited()),
        traceparent: crate::store::kept_traceparent(new.traceparent.as_deref()),
    }
}

/// An id not yet used on this board: the next of the process's sequence, or after a
/// collision the first of a new random range.
async fn fresh_id<B: Backend>(b: &B) -> Result<TaskId, B::Error> {
    for _ in 0..16 {
        let id = TaskId::generate();
        if !b.task_exists(&id).await? {
            return Ok(id);
        }
        TaskId::jump();
    }
    // 16 collisions in a row in a 32-bit space means the board is nearly full.
    Err(StoreError::Corrupt {
        board: b.board().clone(),
        what: "no free task id found after 16 tries".to_string(),
    }
    .into())
}

pub(crate) async fn list_tasks<B: Backend>(b: &B, f: &TaskFilter) -> Result<Vec<Task>, B::Error> {
    b.select_tasks(f).await
}

pub(crate) async fn patch_task<B: Backend>(
    b: &B,
    id: &TaskId,
    p: &TaskPatch,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    if p.is_empty() {
        return Ok(task);
    }
    if let Some(title) = &p.title {
        non_empty("title", title, "a one-line title")?;
    }
    let mut fields: Vec<&str> = Vec::new();
    let mut set = |name: &'static str, changed: bool| {
        if changed {
            fields.push(name);
        }
    };
    set("title", p.title.is_some());
    set("body", p.body.is_some());
    set("priority", p.priority.is_some());
    set("tenant", p.tenant.is_some());
    set("max_runtime_seconds", p.max_runtime_seconds.is_some());
    set("max_retries", p.max_retries.is_some());
    set("workspace", p.workspace.is_some());
    set("result", p.result.is_some());
    let mut patched = task.clone();
    if let Some(title) = &p.title {
        patched.title = title.trim().to_string();
    }
    if let Some(body) = &p.body {
        patched.body.clone_from(body);
    }
    patched.priority = p.priority.unwrap_or(task.priority);
    if let Some(tenant) = &p.tenant {
        patched.tenant.clone_from(tenant);
    }
    patched.max_runtime_seconds = p.max_runtime_seconds.unwrap_or(task.max_runtime_seconds);
    patched.max_retries = p.max_retries.unwrap_or(task.max_retries);
    if let Some(ws) = &p.workspace {
        patched.workspace = ws.clone();
    }
    if p.result.is_some() {
        patched.result.clone_from(&p.result);
    }
    b.write_fields(&patched).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Edited,
        payload! {"fields": fields},
    )?;
    if let Some(pr) = p.priority.filter(|pr| *pr != task.priority) {
        emit(
            b,
            Some(id),
            None,
            EventKind::Reprioritized,
            payload! {"from": task.priority, "to": pr},
        )?;
    }
    super::task(b, id).await
}

pub(crate) async fn assign_task<B: Backend>(
    b: &B,
    id: &TaskId,
    assignee: Option<&str>,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    let assignee = assignee.map(str::trim);
    if let Some(a) = assignee {
        non_empty("assignee", a, "a profile name, or none to unassign")?;
    }
    if task.assignee.as_deref() == assignee {
        return Ok(task);
    }
    // A different profile deserves its own attempts.
    b.write_assignee(id, assignee).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Assigned,
        payload! {"from": task.assignee, "to": assignee},
    )?;
    super::task(b, id).await
}

pub(crate) async fn stats<B: Backend>(b: &B) -> Result<BoardStats, B::Error> {
    let counts = b.counts().await?;
    let by_status = TaskStatus::ALL
        .into_iter()
        .map(|s| {
            let n = counts
                .by_status
                .iter()
                .find(|(c, _)| *c == s)
                .map_or(0, |(_, n)| *n);
            (s, u64::try_from(n).unwrap_or(0))
        })
        .collect();
    Ok(BoardStats {
        by_status,
        open_runs: u64::try_from(counts.open_runs).unwrap_or(0),
        last_event_id: EventId(counts.last_event.unwrap_or(0)),
    })
}

// ---- links ----

pub(crate) async fn link<B: Backend>(
    b: &B,
    parent: &TaskId,
    child: &TaskId,
) -> Result<(), B::Error> {
    if parent == child {
        return Err(StoreError::SelfLink {
            task: parent.clone(),
        }
        .into());
    }
    let parent_task = task(b, parent).await?;
    let child_task = task(b, child).await?;
    if b.has_link(parent, child).await? {
        return Ok(());
    }
    if is_descendant(b, child, parent).await? {
        return Err(StoreError::Cycle {
            parent: parent.clone(),
            child: child.clone(),
        }
        .into());
    }
    b.insert_link(parent, child).await?;
    // A ready child must wait again for an unfinished new parent.
    let demote = child_task.status == TaskStatus::Ready && rules::is_open(parent_task.status);
    if demote {
        cas(b, &child_task, TaskStatus::Todo, &[]).await?;
    }
    emit(
        b,
        Some(child),
        None,
        EventKind::Linked,
        payload! {"parent": parent.as_str(), "child": child.as_str(),
        "child_status": if demote { "todo" } else { child_task.status.as_str() }},
    )
}

/// Depth-first search down the child links from `from`, looking for `target`.
async fn is_descendant<B: Backend>(
    b: &B,
    from: &TaskId,
    target: &TaskId,
) -> Result<bool, B::Error> {
    let mut stack = vec![from.clone()];
    let mut seen: HashSet<TaskId> = HashSet::new();
    while let Some(node) = stack.pop() {
        if &node == target {
            return Ok(true);
        }
        if seen.insert(node.clone()) {
            stack.extend(b.linked(&node, Side::Children).await?);
        }
    }
    Ok(false)
}

pub(crate) async fn unlink<B: Backend>(
    b: &B,
    parent: &TaskId,
    child: &TaskId,
) -> Result<(), B::Error> {
    if !b.delete_link(parent, child).await? {
        return Err(StoreError::LinkNotFound {
            parent: parent.clone(),
            child: child.clone(),
        }
        .into());
    }
    emit(
        b,
        Some(child),
        None,
        EventKind::Unlinked,
        payload! {"parent": parent.as_str(), "child": child.as_str()},
    )?;
    let task = task(b, child).await?;
    if task.status == TaskStatus::Todo && b.open_parents(child).await?.is_empty() {
        cas(b, &task, TaskStatus::Ready, &[]).await?;
        emit(
            b,
            Some(child),
            None,
            EventKind::Promoted,
            payload! {"from": "todo", "to": "ready"},
        )?;
    }
    Ok(())
}

pub(crate) async fn board_links<B: Backend>(b: &B) -> Result<Vec<Link>, B::Error> {
    b.all_links().await
}

pub(crate) async fn links<B: Backend>(b: &B, id: &TaskId) -> Result<TaskLinks, B::Error> {
    task(b, id).await?;
    Ok(TaskLinks {
        parents: b.linked(id, Side::Parents).await?,
        children: b.linked(id, Side::Children).await?,
    })
}

/// What a worker is first told about its task, in this one transaction.
pub(crate) async fn task_context<B: Backend>(b: &B, id: &TaskId) -> Result<TaskContext, B::Error> {
    let links = links(b, id).await?;
    let mut parents = Vec::with_capacity(links.parents.len());
    for parent in &links.parents {
        parents.push((task(b, parent).await?, b.task_runs(parent).await?));
    }
    Ok(TaskContext {
        parents,
        attachments: b.task_attachments(id).await?,
        runs: b.task_runs(id).await?,
        comments: b.task_comments(id).await?,
        links,
    })
}

// ---- comments, events, runs, attachments ----

pub(crate) async fn add_comment<B: Backend>(
    b: &B,
    id: &TaskId,
    author: &str,
    body: &str,
) -> Result<Comment, B::Error> {
    let current = task(b, id).await?;
    non_empty("author", author, "who is writing (a profile or user name)")?;
    non_empty("body", body, "the comment's text")?;
    let cid = b.insert_comment(id, author, body).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Commented,
        payload! {"comment_id": cid, "author": author},
    )?;
    // A comment on a task parked by a worker's question is the answer: the task goes back to
    // the queue in the same transaction, from whichever door the comment came in by.
    if current.status == TaskStatus::Blocked
        && current.block_kind.as_deref() == Some(crate::store::BlockRequest::QUESTION)
    {
        super::lifecycle::unblock(b, id).await?;
    }
    Ok(Comment {
        id: cid,
        task_id: id.clone(),
        author: author.to_string(),
        body: body.to_string(),
        created_at: b.now(),
    })
}

pub(crate) async fn comments<B: Backend>(b: &B, id: &TaskId) -> Result<Vec<Comment>, B::Error> {
    task(b, id).await?;
    b.task_comments(id).await
}

pub(crate) async fn events_since<B: Backend>(
    b: &B,
    cursor: EventId,
    limit: usize,
) -> Result<Vec<Event>, B::Error> {
    b.events_after(cursor, limit).await
}

pub(crate) async fn task_events<B: Backend>(b: &B, id: &TaskId) -> Result<Vec<Event>, B::Error> {
    task(b, id).await?;
    b.events_of(id).await
}

pub(crate) async fn runs<B: Backend>(b: &B, id: &TaskId) -> Result<Vec<Run>, B::Error> {
    task(b, id).await?;
    b.task_runs(id).await
}

pub(crate) async fn run<B: Backend>(b: &B, id: RunId) -> Result<Run, B::Error> {
    b.try_run(id).await?.ok_or_else(|| {
        StoreError::RunNotFound {
            board: b.board().clone(),
            id: id.0,
        }
        .into()
    })
}

pub(crate) async fn record_run_usage<B: Backend>(
    b: &B,
    id: RunId,
    usage: &Value,
) -> Result<(), B::Error> {
    if !b.write_run_usage(id, usage).await? {
        return Err(StoreError::RunNotFound {
            board: b.board().clone(),
            id: id.0,
        }
        .into());
    }
    Ok(())
}

pub(crate) async fn attach<B: Backend>(
    b: &B,
    id: &TaskId,
    file: &NewAttachment,
) -> Result<Attachment, B::Error> {
    task(b, id).await?;
    let name = file.filename.trim();
    let plain = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0']);
    if !plain {
        return Err(ModelError::BadField {
            field: "filename",
            why: format!(
                "{:?} is not a plain file name; send a name of 1-255 characters without \
                 '/' or '\\'",
                file.filename
            ),
        }
        .into());
    }
    let size = file.content.len() as u64;
    if size > ATTACHMENT_CAP_BYTES {
        return Err(StoreError::AttachmentTooLarge {
            filename: name.to_string(),
            size,
            cap: ATTACHMENT_CAP_BYTES,
        }
        .into());
    }
    let content_type = if file.content_type.trim().is_empty() {
        "application/octet-stream"
    } else {
        file.content_type.trim()
    };
    let row = FileRow {
        task: id,
        filename: name,
        content_type,
        content: &file.content,
        uploaded_by: file.uploaded_by.as_deref(),
    };
    let aid = b.insert_attachment(&row).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Attached,
        payload! {"attachment_id": aid, "filename": name, "size": size},
    )?;
    Ok(Attachment {
        id: aid,
        task_id: id.clone(),
        filename: name.to_string(),
        content_type: content_type.to_string(),
        size,
        uploaded_by: file.uploaded_by.clone(),
        created_at: b.now(),
    })
}

pub(crate) async fn attachments<B: Backend>(
    b: &B,
    id: &TaskId,
) -> Result<Vec<Attachment>, B::Error> {
    task(b, id).await?;
    b.task_attachments(id).await
}

pub(crate) async fn attachment_content<B: Backend>(
    b: &B,
    attachment: i64,
) -> Result<Vec<u8>, B::Error> {
    b.attachment_bytes(attachment).await?.ok_or_else(|| {
        StoreError::AttachmentNotFound {
            board: b.board().clone(),
            id: attachment,
        }
        .into()
    })
}

pub(crate) async fn remove_attachment<B: Backend>(b: &B, attachment: i64) -> Result<(), B::Error> {
    let found =
        b.delete_attachment(attachment)
            .await?
            .ok_or_else(|| StoreError::AttachmentNotFound {
                board: b.board().clone(),
                id: attachment,
            })?;
    emit(
        b,
        Some(&found.task_id),
        None,
        EventKind::AttachmentRemoved,
        payload! {"attachment_id": attachment, "filename": found.filename},
    )
}
