//! One task or many: create, show, patch (fields, then at most one status change), bulk patch,
//! archive, and comments.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::domain::{InitialStatus, TaskPatch};
use troupe_kanban::store::{BlockRequest, Completion};
use troupe_kanban::{BoardSlug, NewTask, Store, TaskId, TaskStatus};

use super::super::HttpState;
use super::super::errors::{ApiError, ApiJson, ApiPath, ApiQuery};
use super::listing::parse_status;
use super::{BoardQuery, board_of, task_id};

/// `POST /tasks` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    /// One-line title.
    pub title: String,
    /// What to do.
    #[serde(default)]
    pub body: Option<String>,
    /// The profile that should run it.
    #[serde(default)]
    pub assignee: Option<String>,
    /// Higher runs first.
    #[serde(default)]
    pub priority: Option<i64>,
    /// Soft namespace.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Returns the live task with this key instead of creating a duplicate.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Ids of tasks that must finish first.
    #[serde(default)]
    pub parents: Vec<String>,
    /// Start in `triage`.
    #[serde(default)]
    pub triage: bool,
    /// Who creates it.
    #[serde(default)]
    pub created_by: Option<String>,
    /// Longest a run may take, in seconds.
    #[serde(default)]
    pub max_runtime_seconds: Option<u64>,
    /// Failures allowed before it is given up.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Where the worker works: `scratch` (default), `dir:/abs/path`, `worktree` or
    /// `worktree:<path>`.
    #[serde(default)]
    pub workspace: Option<String>,
    /// What one run may spend (`max_tokens`, `max_cost_usd`, `max_wall_seconds`), within the
    /// profile's budget.
    #[serde(default)]
    pub budget: Option<Value>,
}

/// Longest `max_runtime_seconds` a task may ask for: a year. 0 would time every run out at
/// once, and larger values overflow the store's millisecond arithmetic.
pub const MAX_RUNTIME_SECONDS: u64 = 365 * 24 * 60 * 60;

/// Handler of `POST /tasks`: 201 with the new task, or 200 with the live task that already
/// holds the idempotency key.
pub async fn create_task(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<CreateTask>,
) -> Result<Response, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let mut task = NewTask::new(body.title)
        .with_created_by(body.created_by.unwrap_or_else(|| "http".to_string()));
    if let Some(text) = body.body {
        task = task.with_body(text);
    }
    if let Some(assignee) = body.assignee {
        task = task.with_assignee(assignee);
    }
    if let Some(priority) = body.priority {
        task = task.with_priority(priority);
    }
    if let Some(tenant) = body.tenant {
        task = task.with_tenant(tenant);
    }
    if let Some(key) = body.idempotency_key {
        task = task.with_idempotency_key(key);
    }
    for parent in &body.parents {
        task = task.with_parent(task_id(parent)?);
    }
    if body.triage {
        task = task.with_initial(InitialStatus::Triage);
    }
    if let Some(seconds) = body.max_runtime_seconds
        && !(1..=MAX_RUNTIME_SECONDS).contains(&seconds)
    {
        return Err(ApiError::bad_request(
            "bad_max_runtime",
            format!(
                "max_runtime_seconds {seconds} is out of range; send 1 to {MAX_RUNTIME_SECONDS} \
                 (a year), or leave it out for no limit"
            ),
        ));
    }
    task.max_runtime_seconds = body.max_runtime_seconds;
    task.max_retries = body.max_retries;
    // The caller's trace continues in the task's runs; a malformed header is ignored (W3C).
    task.traceparent = super::super::traceparent(&headers);
    if let Some(raw) = &body.budget {
        let budget = troupe_actors::usage::Budget::from_value("budget", raw)
            .map_err(|e| ApiError::bad_request("bad_budget", e))?;
        task.budget = budget.is_limited().then_some(budget);
    }
    if let Some(raw) = &body.workspace {
        let workspace = crate::runtime::workspaces::parse_workspace(raw)
            .map_err(|e| ApiError::bad_request("bad_workspace", e))?;
        task = task.with_workspace(workspace);
    }
    let created = state.store.create_task(&slug, &task).await?;
    let status = if created.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({"task": created.task, "created": created.created})),
    )
        .into_response())
}

/// Handler of `GET /tasks/{id}`: the task with its comments, events, links and runs, and its
/// worker's plan (`todos`: `{todos, summary}`, or null).
pub async fn show_task(
    State(state): State<HttpState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<BoardQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let id = task_id(&raw)?;
    let task = state.store.task(&slug, &id).await?;
    let comments = state.store.comments(&slug, &id).await?;
    let events = state.store.task_events(&slug, &id).await?;
    let links = state.store.links(&slug, &id).await?;
    let runs = state.store.runs(&slug, &id).await?;
    // The plan its worker keeps with `todo`, read from the worker's stored session.
    let todos = match state.troupe.session_store() {
        Some(sessions) => {
            crate::sessions::StoredRunHistory::new(sessions.clone())
                .task_todos(&slug, &id)
                .await
        }
        None => None,
    };
    Ok(Json(json!({
        "task": task,
        "comments": comments,
        "events": events,
        "links": links,
        "runs": runs,
        "todos": todos,
    })))
}

/// `PATCH /tasks/{id}` body: field edits, then at most one status change.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchTask {
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New body.
    #[serde(default)]
    pub body: Option<String>,
    /// New priority.
    #[serde(default)]
    pub priority: Option<i64>,
    /// New tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// New result text (with `status: "done"`, the completion's result).
    #[serde(default)]
    pub result: Option<String>,
    /// New assignee; `""` unassigns.
    #[serde(default)]
    pub assignee: Option<String>,
    /// The status to move to: `done`, `blocked`, `ready`, `todo`, `review` or `archived`.
    #[serde(default)]
    pub status: Option<String>,
    /// With `done` or `review`: a short summary for the run.
    #[serde(default)]
    pub summary: Option<String>,
    /// With `done`: structured details for the run.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// With `blocked` (or `ready` from `review`): why.
    #[serde(default)]
    pub reason: Option<String>,
    /// With `blocked`: the kind of block (`dependency` waits for other tasks); `human` by
    /// default.
    #[serde(default)]
    pub block_kind: Option<String>,
}

/// Handler of `PATCH /tasks/{id}`.
pub async fn patch_task(
    State(state): State<HttpState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    ApiJson(patch): ApiJson<PatchTask>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let id = task_id(&raw)?;
    let task = apply_patch(state.store.as_ref(), &slug, &id, &patch).await?;
    Ok(Json(json!({ "task": task })))
}

/// Applies one patch to one task: checks the status change against the task's current
/// status first (so a refused transition writes nothing), then the fields, the assignee and
/// the status change. Should the store still refuse a later step, the error names the parts
/// already written.
async fn apply_patch(
    store: &dyn Store,
    board: &BoardSlug,
    id: &TaskId,
    patch: &PatchTask,
) -> Result<troupe_kanban::Task, ApiError> {
    let target = patch.status.as_deref().map(parse_status).transpose()?;
    let completing = target == Some(TaskStatus::Done);
    let fields = TaskPatch {
        title: patch.title.clone(),
        body: patch.body.clone(),
        priority: patch.priority,
        tenant: patch.tenant.clone().map(Some),
        // A result given with `done` belongs to the completion.
        result: if completing {
            None
        } else {
            patch.result.clone()
        },
        ..TaskPatch::default()
    };
    let mut task = store.task(board, id).await?;
    if let Some(target) = target {
        check_transition(id, task.status, target)?;
    }
    let mut applied: Vec<&'static str> = Vec::new();
    if !fields.is_empty() {
        task = store.patch_task(board, id, &fields).await?;
        applied.extend(
            [
                ("title", patch.title.is_some()),
                ("body", patch.body.is_some()),
                ("priority", patch.priority.is_some()),
                ("tenant", patch.tenant.is_some()),
                ("result", fields.result.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, set)| set.then_some(name)),
        );
    }
    if let Some(assignee) = &patch.assignee {
        let assignee = Some(assignee.trim()).filter(|a| !a.is_empty());
        task = store
            .assign_task(board, id, assignee)
            .await
            .map_err(|e| partly_applied(ApiError::from(e), &applied))?;
        applied.push("assignee");
    }
    let Some(target) = target else {
        return Ok(task);
    };
    let changed = match target {
        TaskStatus::Done => {
            let done = Completion {
                result: patch.result.clone(),
                summary: patch.summary.clone(),
                metadata: patch.metadata.clone(),
                worker: None,
                usage: None,
            };
            store.complete(board, id, &done).await
        }
        TaskStatus::Blocked => {
            let kind = patch.block_kind.as_deref().unwrap_or("human");
            let reason = patch
                .reason
                .as_deref()
                .unwrap_or("blocked over the HTTP API");
            store
                .block(board, id, &BlockRequest::new(kind, reason))
                .await
                .map(|blocked| blocked.task)
        }
        TaskStatus::Archived => match store.archive(board, id).await {
            Ok(archived) => {
                crate::kanban_api::archive_workspace(store, board, &archived.task).await;
                Ok(archived.task)
            }
            Err(e) => Err(e),
        },
        TaskStatus::Review => {
            store
                .request_review(board, id, patch.summary.as_deref(), None)
                .await
        }
        TaskStatus::Ready | TaskStatus::Todo => match task.status {
            s if s == target => return Ok(task),
            TaskStatus::Blocked | TaskStatus::Scheduled => store.unblock(board, id).await,
            TaskStatus::Triage => store.specify(board, id).await,
            TaskStatus::Review => {
                let reason = patch
                    .reason
                    .as_deref()
                    .unwrap_or("changes requested over the HTTP API");
                store.request_changes(board, id, reason).await
            }
            // check_transition refused the rest before anything was written.
            other => {
                return Err(partly_applied(
                    transition_refused(id, other, "cannot go back to ready or todo"),
                    &applied,
                ));
            }
        },
        // check_transition refused these before anything was written.
        TaskStatus::Running | TaskStatus::Triage | TaskStatus::Scheduled => {
            return Err(partly_applied(
                transition_refused(id, task.status, "cannot be set by a patch"),
                &applied,
            ));
        }
    };
    changed.map_err(|e| partly_applied(ApiError::from(e), &applied))
}

/// Statuses a patch may move a task from, per target status; the store's own rules, checked
/// here too so that a refused change is refused before any field is written.
fn allowed_from(target: TaskStatus) -> Result<(&'static [TaskStatus], &'static str), &'static str> {
    use TaskStatus::{Archived, Blocked, Done, Ready, Review, Running, Scheduled, Todo, Triage};
    Ok(match target {
        Done => (
            &[Running, Ready, Blocked, Review],
            "running, ready, blocked or review",
        ),
        Blocked => (&[Running, Ready], "running or ready"),
        Archived => (
            &[
                Triage, Todo, Scheduled, Ready, Running, Blocked, Review, Done,
            ],
            "not yet archived",
        ),
        Review => (&[Running, Ready], "running or ready"),
        Ready | Todo => (
            &[Blocked, Scheduled, Triage, Review],
            "blocked, scheduled, triage or review",
        ),
        Running => {
            return Err(
                "tasks start running only when a worker claims them; POST /dispatch to start a round",
            );
        }
        Triage | Scheduled => {
            return Err(
                "a patch can set done, blocked, ready, todo, review or archived; triage and scheduled are set by `troupe kanban`",
            );
        }
    })
}

/// Refuses a status change the task's current status does not allow, before anything is
/// written.
fn check_transition(id: &TaskId, current: TaskStatus, target: TaskStatus) -> Result<(), ApiError> {
    let (from, prose) = allowed_from(target).map_err(|why| transition_refused(id, current, why))?;
    // Asking for ready or todo on a task already there changes nothing.
    let no_op = current == target && matches!(target, TaskStatus::Ready | TaskStatus::Todo);
    if no_op || from.contains(&current) {
        return Ok(());
    }
    Err(transition_refused(
        id,
        current,
        &format!("it can become {target} only from {prose}"),
    ))
}

fn transition_refused(id: &TaskId, current: TaskStatus, why: &str) -> ApiError {
    ApiError::conflict("invalid_transition", format!("{id} is {current}; {why}"))
}

/// Adds to an error which parts of the patch were already written before it failed.
fn partly_applied(mut error: ApiError, applied: &[&str]) -> ApiError {
    if !applied.is_empty() {
        error.message = format!(
            "{} (already applied before this failed: {}; the status is unchanged)",
            error.message,
            applied.join(", ")
        );
    }
    error
}

/// `POST /tasks/bulk` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkPatch {
    /// The tasks to change.
    pub ids: Vec<String>,
    /// The change, as for `PATCH /tasks/{id}`.
    pub patch: PatchTask,
}

/// Handler of `POST /tasks/bulk`: the patch applied to each id in turn; each id reports its
/// own success or error, and one failure does not stop the rest.
pub async fn bulk_patch(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    ApiJson(body): ApiJson<BulkPatch>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    if body.ids.is_empty() {
        return Err(ApiError::bad_request(
            "no_ids",
            "`ids` is empty; list the tasks to change",
        ));
    }
    if body.patch.status.as_deref() == Some("done")
        && body.patch.summary.is_some()
        && body.ids.len() > 1
    {
        return Err(ApiError::bad_request(
            "bulk_summary",
            "one summary cannot describe several completions; complete them one by one, or drop `summary`",
        ));
    }
    let mut results = Vec::with_capacity(body.ids.len());
    for raw in &body.ids {
        let outcome = match task_id(raw) {
            Ok(id) => apply_patch(state.store.as_ref(), &slug, &id, &body.patch).await,
            Err(error) => Err(error),
        };
        results.push(per_id(raw, outcome));
    }
    Ok(Json(json!({ "results": results })))
}

fn per_id(raw: &str, outcome: Result<troupe_kanban::Task, ApiError>) -> Value {
    match outcome {
        Ok(task) => json!({"id": raw, "ok": true, "task": task}),
        Err(error) => {
            json!({"id": raw, "ok": false, "error": {"code": error.code, "message": error.message}})
        }
    }
}

/// `DELETE /tasks` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteTasks {
    /// The tasks to remove.
    pub ids: Vec<String>,
}

/// Handler of `DELETE /tasks`: archives each task (the event log is append-only, so a task is
/// never erased over the API), reporting each id on its own.
pub async fn delete_tasks(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    ApiJson(body): ApiJson<DeleteTasks>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    if body.ids.is_empty() {
        return Err(ApiError::bad_request(
            "no_ids",
            "`ids` is empty; list the tasks to remove",
        ));
    }
    let mut results = Vec::with_capacity(body.ids.len());
    for raw in &body.ids {
        let outcome = match task_id(raw) {
            Ok(id) => state
                .store
                .archive(&slug, &id)
                .await
                .map(|t| t.task)
                .map_err(ApiError::from),
            Err(error) => Err(error),
        };
        results.push(per_id(raw, outcome));
    }
    Ok(Json(json!({ "results": results })))
}

/// `POST /tasks/{id}/comments` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewComment {
    /// What it says.
    pub body: String,
    /// Who writes it; `http` when absent.
    #[serde(default)]
    pub author: Option<String>,
}

/// Handler of `POST /tasks/{id}/comments`.
pub async fn add_comment(
    State(state): State<HttpState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    ApiJson(body): ApiJson<NewComment>,
) -> Result<Response, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let id = task_id(&raw)?;
    if body.body.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_comment",
            "`body` is empty; write the comment",
        ));
    }
    let author = body
        .author
        .as_deref()
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("http");
    let comment = state
        .store
        .add_comment(&slug, &id, author, &body.body)
        .await?;
    Ok((StatusCode::CREATED, Json(json!({ "comment": comment }))).into_response())
}
