//! Every store operation, written once: what may change, which events are written and what the
//! new state is. A [`Backend`] only carries the decision out, in its own SQL and inside the
//! transaction its store opened; the pure rules these operations ask come from `rules.rs`.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::domain::{
    ATTACHMENT_CAP_BYTES, Attachment, Board, BoardStats, Comment, Event, EventId, EventKind,
    InitialStatus, Lease, Link, ModelError, NewAttachment, NewBoard, NewTask, Run, RunId,
    RunOutcome, Task, TaskFilter, TaskId, TaskLinks, TaskPatch, TaskStatus, Timestamp, WorkerId,
};
use crate::store::backend::{Backend, FileRow, NewEvent, Pick, RunEnd, RunRow, Set, Side, sql_int};
use crate::store::rules;
use crate::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Created, Failure, FailureOutcome, Reclaimed,
    StoreError, TaskContext, Transitioned,
};

fn non_empty(field: &'static str, value: &str, example: &str) -> Result<(), ModelError> {
    if value.trim().is_empty() {
        Err(ModelError::BadField {
            field,
            why: format!("it is empty; send {example}"),
        })
    } else {
        Ok(())
    }
}

// ---- building blocks ----

/// Appends an event.
fn emit<B: Backend>(
    b: &B,
    task: Option<&TaskId>,
    run: Option<RunId>,
    kind: EventKind,
    payload: Value,
) -> Result<(), B::Error> {
    b.event(NewEvent {
        task,
        run,
        kind,
        payload,
    })
}

/// A task of this board; `TaskNotFound` otherwise.
pub(crate) async fn task<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    b.try_task(id).await?.ok_or_else(|| {
        StoreError::TaskNotFound {
            board: b.board().clone(),
            id: id.clone(),
        }
        .into()
    })
}

/// The board row, refused when the board is archived.
async fn ensure_live<B: Backend>(b: &B) -> Result<(), B::Error> {
    if b.board_row().await?.archived_at.is_some() {
        return Err(StoreError::BoardArchived {
            slug: b.board().clone(),
        }
        .into());
    }
    Ok(())
}

/// The compare-and-swap every status change goes through: the row changes only if it is still
/// in the status it was read in.
async fn cas<B: Backend>(
    b: &B,
    task: &Task,
    to: TaskStatus,
    sets: &[Set<'_>],
) -> Result<(), B::Error> {
    if b.swap_status(task, to, sets).await? {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            task: task.id.clone(),
        }
        .into())
    }
}

/// Refuses a worker that does not hold the task's lease.
fn check_holder(task: &Task, worker: Option<&WorkerId>) -> Result<(), StoreError> {
    let Some(worker) = worker else { return Ok(()) };
    let holds = task.status == TaskStatus::Running
        && task.lease.as_ref().is_some_and(|l| &l.worker == worker);
    if holds {
        Ok(())
    } else {
        Err(StoreError::LeaseNotHeld {
            task: task.id.clone(),
            worker: worker.to_string(),
            holder: task.lease.as_ref().map(|l| l.worker.to_string()),
        })
    }
}

/// The lease `worker` holds on `task`; `LeaseNotHeld` when it holds none.
fn held_lease(task: &Task, worker: &WorkerId) -> Result<Lease, StoreError> {
    check_holder(task, Some(worker))?;
    task.lease.clone().ok_or_else(|| StoreError::LeaseNotHeld {
        task: task.id.clone(),
        worker: worker.to_string(),
        holder: None,
    })
}

/// Ends the task's open run, if any.
async fn close_run<B: Backend>(
    b: &B,
    task: &Task,
    end: RunEnd<'_>,
) -> Result<Option<RunId>, B::Error> {
    let Some(lease) = &task.lease else {
        return Ok(None);
    };
    b.end_run(lease.run_id, end).await?;
    Ok(Some(lease.run_id))
}

/// The status the open run was claimed from (`ready` when there is none).
async fn source_status<B: Backend>(b: &B, task: &Task) -> Result<TaskStatus, B::Error> {
    let Some(lease) = &task.lease else {
        return Ok(TaskStatus::Ready);
    };
    match b.run_source(lease.run_id).await?.as_deref() {
        Some("review") => Ok(TaskStatus::Review),
        _ => Ok(TaskStatus::Ready),
    }
}

/// Where a task goes when it may run again: `preferred`, or `todo` while a parent is open.
async fn runnable<B: Backend>(
    b: &B,
    id: &TaskId,
    preferred: TaskStatus,
) -> Result<TaskStatus, B::Error> {
    let open = !b.open_parents(id).await?.is_empty();
    Ok(rules::runnable_status(open, preferred))
}

/// Makes every `todo` child of `parent` whose parents are now all finished `ready`.
async fn promote_children<B: Backend>(b: &B, parent: &TaskId) -> Result<(), B::Error> {
    for child in b.linked(parent, Side::Children).await? {
        let task = task(b, &child).await?;
        if task.status == TaskStatus::Todo && b.open_parents(&child).await?.is_empty() {
            cas(b, &task, TaskStatus::Ready, &[]).await?;
            emit(
                b,
                Some(&child),
                None,
                EventKind::Promoted,
                json!({"from": "todo", "to": "ready", "by": parent.as_str()}),
            )?;
        }
    }
    Ok(())
}

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
        json!({"slug": b.board().as_str()}),
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
            json!({"slug": b.board().as_str()}),
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
        json!({"status": status.as_str(), "parents": parent_ids, "assignee": new.assignee}),
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
        traceparent: super::kept_traceparent(new.traceparent.as_deref()),
    }
}

/// A random id not yet used on this board.
async fn fresh_id<B: Backend>(b: &B) -> Result<TaskId, B::Error> {
    for _ in 0..16 {
        let id = TaskId::generate();
        if b.try_task(&id).await?.is_none() {
            return Ok(id);
        }
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
        json!({"fields": fields}),
    )?;
    if let Some(pr) = p.priority.filter(|pr| *pr != task.priority) {
        emit(
            b,
            Some(id),
            None,
            EventKind::Reprioritized,
            json!({"from": task.priority, "to": pr}),
        )?;
    }
    self::task(b, id).await
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
        json!({"from": task.assignee, "to": assignee}),
    )?;
    self::task(b, id).await
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
        json!({"parent": parent.as_str(), "child": child.as_str(),
               "child_status": if demote { "todo" } else { child_task.status.as_str() }}),
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
        json!({"parent": parent.as_str(), "child": child.as_str()}),
    )?;
    let task = task(b, child).await?;
    if task.status == TaskStatus::Todo && b.open_parents(child).await?.is_empty() {
        cas(b, &task, TaskStatus::Ready, &[]).await?;
        emit(
            b,
            Some(child),
            None,
            EventKind::Promoted,
            json!({"from": "todo", "to": "ready"}),
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
    task(b, id).await?;
    non_empty("author", author, "who is writing (a profile or user name)")?;
    non_empty("body", body, "the comment's text")?;
    let cid = b.insert_comment(id, author, body).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Commented,
        json!({"comment_id": cid, "author": author}),
    )?;
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
        json!({"attachment_id": aid, "filename": name, "size": size}),
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
        json!({"attachment_id": attachment, "filename": found.filename}),
    )
}

// ---- lifecycle ----

pub(crate) async fn promote<B: Backend>(b: &B) -> Result<Vec<TaskId>, B::Error> {
    let mut promoted = Vec::new();
    for id in b.pick(Pick::Due).await? {
        let task = task(b, &id).await?;
        let to = runnable(b, &id, TaskStatus::Ready).await?;
        cas(b, &task, to, &[Set::Null("scheduled_until")]).await?;
        emit(
            b,
            Some(&id),
            None,
            EventKind::Promoted,
            json!({"from": "scheduled", "to": to.as_str()}),
        )?;
        if to == TaskStatus::Ready {
            promoted.push(id);
        }
    }
    for id in b.pick(Pick::Unblocked).await? {
        let task = task(b, &id).await?;
        cas(b, &task, TaskStatus::Ready, &[]).await?;
        emit(
            b,
            Some(&id),
            None,
            EventKind::Promoted,
            json!({"from": "todo", "to": "ready"}),
        )?;
        promoted.push(id);
    }
    Ok(promoted)
}

/// Claims the best ready task; tasks found with an open parent go back to `todo`.
pub(crate) async fn claim_next<B: Backend>(
    b: &B,
    spec: &ClaimSpec,
) -> Result<Option<Claim>, B::Error> {
    ensure_live(b).await?;
    next_ready(b, spec).await
}

/// Claims the best ready task for each spec in turn, all in this one transaction; stops at the
/// first spec that finds nothing. One commit for many claims is what makes a dispatcher with
/// many free slots fast; each claim is decided exactly as [`claim_next`] decides it.
pub(crate) async fn claim_many<B: Backend>(
    b: &B,
    specs: &[ClaimSpec],
) -> Result<Vec<Claim>, B::Error> {
    ensure_live(b).await?;
    let mut claims = Vec::with_capacity(specs.len());
    for spec in specs {
        match next_ready(b, spec).await? {
            Some(claim) => claims.push(claim),
            None => break,
        }
    }
    Ok(claims)
}

/// [`claim_next`] on a board already known to be live.
async fn next_ready<B: Backend>(b: &B, spec: &ClaimSpec) -> Result<Option<Claim>, B::Error> {
    if spec.assignees.as_ref().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    loop {
        let next = b.pick(Pick::NextReady(spec.assignees.as_deref())).await?;
        let Some(id) = next.into_iter().next() else {
            return Ok(None);
        };
        let task = task(b, &id).await?;
        // Each pass either claims or moves one task out of `ready`, so this ends.
        if let Some(claim) = try_claim(b, &task, spec).await? {
            return Ok(Some(claim));
        }
    }
}

/// Claims one named task.
pub(crate) async fn claim_task<B: Backend>(
    b: &B,
    id: &TaskId,
    spec: &ClaimSpec,
) -> Result<Claim, B::Error> {
    ensure_live(b).await?;
    let task = task(b, id).await?;
    rules::CLAIM.check(&task)?;
    match try_claim(b, &task, spec).await? {
        Some(claim) => Ok(claim),
        None => Err(StoreError::ParentsOpen {
            task: id.clone(),
            action: "claimed",
            open_parents: b.open_parents(id).await?,
        }
        .into()),
    }
}

/// The claim itself: `None` (and the task back in `todo`) when a parent is still open.
async fn try_claim<B: Backend>(
    b: &B,
    task: &Task,
    spec: &ClaimSpec,
) -> Result<Option<Claim>, B::Error> {
    let open = b.open_parents(&task.id).await?;
    if !open.is_empty() && task.status == TaskStatus::Ready {
        cas(b, task, TaskStatus::Todo, &[]).await?;
        let ids: Vec<&str> = open.iter().map(TaskId::as_str).collect();
        emit(
            b,
            Some(&task.id),
            None,
            EventKind::ClaimRejected,
            json!({"open_parents": ids}),
        )?;
        return Ok(None);
    }
    let now = b.now();
    let expires = now.plus(spec.ttl);
    let lock = spec.worker.to_string();
    let run = RunRow {
        lock: Some(&lock),
        expires: Some(expires.0),
        max_runtime_seconds: task.max_runtime_seconds.map(sql_int),
        heartbeat: Some(now.0),
        ..RunRow::of(task, now)
    };
    let run_id = b.insert_run(&run).await?;
    cas(
        b,
        task,
        TaskStatus::Running,
        &[
            Set::Text("claim_lock", Some(&lock)),
            Set::Int("claim_expires", expires.0),
            Set::Int("current_run_id", run_id.0),
            Set::Int("last_heartbeat_at", now.0),
            Set::IntIfUnset("started_at", now.0),
        ],
    )
    .await?;
    emit(
        b,
        Some(&task.id),
        Some(run_id),
        EventKind::Claimed,
        json!({"lock": lock, "expires": expires.0, "run_id": run_id.0, "from": task.status.as_str()}),
    )?;
    Ok(Some(Claim {
        task: self::task(b, &task.id).await?,
        lease: Lease {
            worker: spec.worker.clone(),
            expires_at: expires,
            run_id,
        },
        run: self::run(b, run_id).await?,
    }))
}

pub(crate) async fn heartbeat<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: &WorkerId,
    ttl: std::time::Duration,
) -> Result<Lease, B::Error> {
    let task = task(b, id).await?;
    rules::HEARTBEAT.check(&task)?;
    let lease = held_lease(&task, worker)?;
    let now = b.now();
    let expires = now.plus(ttl);
    cas(
        b,
        &task,
        TaskStatus::Running,
        &[
            Set::Int("claim_expires", expires.0),
            Set::Int("last_heartbeat_at", now.0),
        ],
    )
    .await?;
    b.extend_run(lease.run_id, expires).await?;
    emit(
        b,
        Some(id),
        Some(lease.run_id),
        EventKind::Heartbeat,
        json!({"expires": expires.0}),
    )?;
    Ok(Lease {
        worker: worker.clone(),
        expires_at: expires,
        run_id: lease.run_id,
    })
}

pub(crate) async fn complete<B: Backend>(
    b: &B,
    id: &TaskId,
    done: &Completion,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::COMPLETE.check(&task)?;
    check_holder(&task, done.worker.as_ref())?;
    let open = b.open_parents(id).await?;
    if !open.is_empty() {
        return Err(StoreError::ParentsOpen {
            task: id.clone(),
            action: "completed",
            open_parents: open,
        }
        .into());
    }
    let summary = done.summary.as_deref();
    let end = RunEnd {
        summary,
        metadata: done.metadata.as_ref(),
        ..RunEnd::with(RunOutcome::Completed)
    };
    let run_id = match close_run(b, &task, end).await? {
        Some(run) => run,
        None => {
            // Never claimed: record a zero-length run so every completion has one.
            let metadata = done.metadata.as_ref().map(Value::to_string);
            let now = b.now();
            let run = RunRow {
                ended: Some(now.0),
                outcome: Some(RunOutcome::Completed.as_str()),
                summary,
                metadata: metadata.as_deref(),
                ..RunRow::of(&task, now)
            };
            b.insert_run(&run).await?
        }
    };
    cas(
        b,
        &task,
        TaskStatus::Done,
        &[
            Set::TextIfGiven("result", done.result.as_deref()),
            Set::Int("completed_at", b.now().0),
            Set::Zero("consecutive_failures"),
            Set::Zero("protocol_violations"),
            Set::Null("last_failure_error"),
            Set::Null("block_kind"),
            Set::Null("block_reason"),
            Set::Zero("block_recurrences"),
            Set::EndLease,
            Set::Null("scheduled_until"),
        ],
    )
    .await?;
    let result_len = done.result.as_ref().map_or(0, |r| r.chars().count());
    emit(
        b,
        Some(id),
        Some(run_id),
        EventKind::Completed,
        json!({"result_len": result_len, "summary": summary.map(rules::summary_line)}),
    )?;
    promote_children(b, id).await?;
    self::task(b, id).await
}

pub(crate) async fn block<B: Backend>(
    b: &B,
    id: &TaskId,
    req: &BlockRequest,
) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::BLOCK.check(&task)?;
    check_holder(&task, req.worker.as_ref())?;
    let d = rules::decide_block(&task, req)?;
    let end = RunEnd {
        summary: Some(&req.reason),
        ..RunEnd::with(RunOutcome::Blocked)
    };
    let run = close_run(b, &task, end).await?;
    cas(
        b,
        &task,
        d.target,
        &[
            Set::Text("block_kind", Some(&d.kind)),
            Set::Text("block_reason", Some(&req.reason)),
            Set::Int("block_recurrences", i64::from(d.recurrences)),
            Set::EndLease,
        ],
    )
    .await?;
    let mut payload = json!({"reason": req.reason, "kind": d.kind, "recurrences": d.recurrences,
                             "to": d.target.as_str()});
    if d.event == EventKind::BlockLoopDetected {
        payload["limit"] = json!(crate::domain::BLOCK_RECURRENCE_LIMIT);
    }
    emit(b, Some(id), run, d.event, payload)?;
    Ok(Transitioned {
        task: self::task(b, id).await?,
        ended_lease: task.lease,
    })
}

pub(crate) async fn unblock<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::UNBLOCK.check(&task)?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    // An explicit unblock is a fresh chance: failure counters start again. The block kind
    // stays, so the same block coming straight back is still caught as a loop.
    let sets = [
        Set::Null("scheduled_until"),
        Set::Zero("consecutive_failures"),
        Set::Zero("protocol_violations"),
    ];
    cas(b, &task, to, &sets).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Unblocked,
        json!({"from": task.status.as_str(), "to": to.as_str()}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn archive<B: Backend>(b: &B, id: &TaskId) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::ARCHIVE.check(&task)?;
    let end = RunEnd {
        error: Some("task archived"),
        ..RunEnd::with(RunOutcome::Reclaimed)
    };
    let run = close_run(b, &task, end).await?;
    let sets = [Set::EndLease, Set::Null("scheduled_until")];
    cas(b, &task, TaskStatus::Archived, &sets).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::Archived,
        json!({"from": task.status.as_str()}),
    )?;
    promote_children(b, id).await?;
    Ok(Transitioned {
        task: self::task(b, id).await?,
        ended_lease: task.lease,
    })
}

pub(crate) async fn schedule<B: Backend>(
    b: &B,
    id: &TaskId,
    until: Timestamp,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::SCHEDULE.check(&task)?;
    let sets = [Set::Int("scheduled_until", until.0)];
    cas(b, &task, TaskStatus::Scheduled, &sets).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Scheduled,
        json!({"from": task.status.as_str(), "until": until.0}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn specify<B: Backend>(b: &B, id: &TaskId) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::SPECIFY.check(&task)?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    cas(b, &task, to, &[]).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::Specified,
        json!({"to": to.as_str()}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn request_review<B: Backend>(
    b: &B,
    id: &TaskId,
    summary: Option<&str>,
    worker: Option<&WorkerId>,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::REQUEST_REVIEW.check(&task)?;
    check_holder(&task, worker)?;
    let end = RunEnd {
        summary,
        ..RunEnd::with(RunOutcome::ReviewRequested)
    };
    let run = close_run(b, &task, end).await?;
    cas(b, &task, TaskStatus::Review, &[Set::EndLease]).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::ReviewRequested,
        json!({"summary": summary.map(rules::summary_line)}),
    )?;
    self::task(b, id).await
}

pub(crate) async fn request_changes<B: Backend>(
    b: &B,
    id: &TaskId,
    reason: &str,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::REQUEST_CHANGES.check(&task)?;
    non_empty("reason", reason, "what should change")?;
    let to = runnable(b, id, TaskStatus::Ready).await?;
    cas(b, &task, to, &[]).await?;
    emit(
        b,
        Some(id),
        None,
        EventKind::ChangesRequested,
        json!({"reason": reason, "to": to.as_str()}),
    )?;
    self::task(b, id).await
}

/// Takes a running task's lease back: its run ends as `reclaimed` with `why`, the task returns
/// to the status the run was claimed from (or `todo` while a parent is open), and `reclaimed`
/// is recorded (marked `released` when its own worker handed it back). Not a failure.
async fn take_back<B: Backend>(
    b: &B,
    task: &Task,
    lease: &Lease,
    why: &str,
    released: bool,
) -> Result<Task, B::Error> {
    let id = &task.id;
    let source = source_status(b, task).await?;
    let to = runnable(b, id, source).await?;
    let end = RunEnd {
        error: Some(why),
        ..RunEnd::with(RunOutcome::Reclaimed)
    };
    close_run(b, task, end).await?;
    cas(b, task, to, &[Set::EndLease]).await?;
    let mut payload = json!({"lock": lease.worker.to_string(), "claim_expires": lease.expires_at.0,
                             "last_heartbeat_at": task.last_heartbeat_at.map(|t| t.0),
                             "to": to.as_str()});
    if released {
        payload["released"] = Value::Bool(true);
    }
    emit(
        b,
        Some(id),
        Some(lease.run_id),
        EventKind::Reclaimed,
        payload,
    )?;
    self::task(b, id).await
}

/// Takes back lapsed leases (a backend that can skips rows another reclaimer holds).
pub(crate) async fn reclaim_expired<B: Backend>(b: &B) -> Result<Vec<Reclaimed>, B::Error> {
    let mut out = Vec::new();
    for id in b.pick(Pick::Lapsed).await? {
        let task = task(b, &id).await?;
        let Some(lease) = task.lease.clone() else {
            continue;
        };
        out.push(Reclaimed {
            task: take_back(b, &task, &lease, "lease lapsed", false).await?,
            lapsed: lease,
        });
    }
    Ok(out)
}

/// Hands `worker`'s lease on a task back at once, as a lapse would but without waiting for it:
/// refused (and nothing changed) when the task is not running or another worker holds it.
pub(crate) async fn release<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: &WorkerId,
) -> Result<Transitioned, B::Error> {
    let task = task(b, id).await?;
    rules::RELEASE.check(&task)?;
    let lease = held_lease(&task, worker)?;
    let task = take_back(b, &task, &lease, "the worker handed its lease back", true).await?;
    Ok(Transitioned {
        task,
        ended_lease: Some(lease),
    })
}

pub(crate) async fn record_failure<B: Backend>(
    b: &B,
    id: &TaskId,
    f: &Failure,
) -> Result<FailureOutcome, B::Error> {
    let task = task(b, id).await?;
    rules::FAIL.check(&task)?;
    check_holder(&task, f.worker.as_ref())?;
    let d = rules::decide_failure(&task, f.kind, f.configured_limit);
    let source = source_status(b, &task).await?;
    let end = RunEnd {
        error: Some(&f.error),
        ..RunEnd::with(d.outcome)
    };
    let run = close_run(b, &task, end).await?;
    let counter = if d.event == EventKind::ProtocolViolation {
        "protocol_violations"
    } else {
        "consecutive_failures"
    };
    let to = if d.gave_up {
        TaskStatus::Blocked
    } else {
        runnable(b, id, source).await?
    };
    let block_reason = if d.gave_up {
        Some(f.error.as_str())
    } else {
        task.block_reason.as_deref()
    };
    let sets = [
        Set::Int(counter, i64::from(d.failures)),
        Set::Text("last_failure_error", Some(&f.error)),
        Set::Text("block_reason", block_reason),
        Set::EndLease,
    ];
    cas(b, &task, to, &sets).await?;
    emit(
        b,
        Some(id),
        run,
        d.event,
        json!({"error": f.error, "failures": d.failures, "limit": d.limit, "to": to.as_str()}),
    )?;
    if d.gave_up {
        emit(
            b,
            Some(id),
            run,
            EventKind::GaveUp,
            json!({"failures": d.failures, "effective_limit": d.limit,
                   "limit_source": d.limit_source, "error": f.error}),
        )?;
    }
    Ok(FailureOutcome {
        task: self::task(b, id).await?,
        failures: d.failures,
        limit: d.limit,
        limit_source: d.limit_source,
        gave_up: d.gave_up,
    })
}

pub(crate) async fn requeue_rate_limited<B: Backend>(
    b: &B,
    id: &TaskId,
    worker: Option<&WorkerId>,
    error: &str,
) -> Result<Task, B::Error> {
    let task = task(b, id).await?;
    rules::RATE_LIMIT.check(&task)?;
    check_holder(&task, worker)?;
    let source = source_status(b, &task).await?;
    let to = runnable(b, id, source).await?;
    let end = RunEnd {
        error: Some(error),
        ..RunEnd::with(RunOutcome::RateLimited)
    };
    let run = close_run(b, &task, end).await?;
    cas(b, &task, to, &[Set::EndLease]).await?;
    emit(
        b,
        Some(id),
        run,
        EventKind::RateLimited,
        json!({"error": error, "to": to.as_str()}),
    )?;
    self::task(b, id).await
}
