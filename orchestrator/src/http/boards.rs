//! The kanban dashboard routes of the HTTP API, over `Arc<dyn Store>`: the board, tasks (list,
//! create, show, patch, bulk patch, delete), comments, links, dispatch, runs and terminating a
//! run. Every route takes `?board=<slug>` (the server's default board when absent). Status
//! changes go through the store's transition methods, so an impossible one is a 409 that says
//! which statuses would allow it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::dispatcher::DispatcherEvent;
use troupe_kanban::domain::{InitialStatus, RunId, TaskFilter, TaskPatch, TaskSort};
use troupe_kanban::store::{BlockRequest, Completion};
use troupe_kanban::{BoardSlug, DispatcherHandle, NewTask, Store, TaskId, TaskStatus};

use super::HttpState;
use super::errors::{ApiError, ApiJson, ApiPath, ApiQuery};

/// The block kind `POST /runs/{id}/terminate` records.
pub const TERMINATED_KIND: &str = "terminated";

/// What `POST /dispatch` runs: one dispatch round on a board.
pub trait DispatchPass: Send + Sync + 'static {
    /// Runs one round on `board`, claiming at most `max` tasks; with `dry_run` nothing changes.
    /// Answers with a JSON report of what was (or would be) done.
    fn dispatch<'a>(
        &'a self,
        board: &'a BoardSlug,
        max: Option<usize>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<Value, ApiError>>;

    /// Stops, hard, the worker this process runs for `task` on `board`, once the task's run
    /// has been ended in the store. A pass that runs no workers answers
    /// [`WorkerStop::NoLocalDispatcher`].
    fn stop_worker<'a>(
        &'a self,
        board: &'a BoardSlug,
        task: &'a TaskId,
    ) -> BoxFuture<'a, WorkerStop> {
        let _ = (board, task);
        Box::pin(async { WorkerStop::NoLocalDispatcher })
    }
}

/// What [`DispatchPass::stop_worker`] did, as `POST /runs/{id}/terminate` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerStop {
    /// No dispatcher runs in this server for the board; a worker elsewhere loses its lease and
    /// its own dispatcher stops it on its next round.
    NoLocalDispatcher,
    /// The local dispatcher runs no worker for the task (it ran elsewhere, or already ended).
    NotRunningHere,
    /// The local worker was stopped and has ended.
    Stopped,
    /// The local worker was told to stop but had not ended within [`STOP_WAIT`].
    Stopping,
}

impl WorkerStop {
    /// The token the API reports.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStop::NoLocalDispatcher => "no_local_dispatcher",
            WorkerStop::NotRunningHere => "not_running_here",
            WorkerStop::Stopped => "stopped",
            WorkerStop::Stopping => "stopping",
        }
    }
}

/// How long `POST /runs/{id}/terminate` waits for a local worker to end before answering.
pub const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the dispatch report of a server without a dispatcher says when profiles are missing.
pub const NO_DISPATCHER_NOTE: &str = "no dispatcher runs in this server, so nothing is claimed here: ready tasks wait for a `troupe kanban worker` process on the same store. To run them here, add a profiles: section to troupe.yaml (such as `profiles: {coder: {base_url: http://127.0.0.1:8080/v1, model: qwen}}`) and restart `troupe serve`";

/// The dispatch round of a server that runs no workers itself: it takes back lapsed leases and
/// promotes tasks whose parents are done, then reports the `ready` tasks that wait for a
/// worker process (`troupe kanban worker`) to claim them. It never claims, since a claim with
/// no worker behind it would only sit until its lease lapsed.
#[derive(Clone)]
pub struct PromotePass {
    store: Arc<dyn Store>,
    note: Arc<str>,
}

impl PromotePass {
    /// A pass over `store`, whose reports carry [`NO_DISPATCHER_NOTE`].
    pub fn new(store: Arc<dyn Store>) -> PromotePass {
        PromotePass {
            store,
            note: Arc::from(NO_DISPATCHER_NOTE),
        }
    }

    /// Replaces the note the reports carry (why no dispatcher runs, what to do about it).
    pub fn with_note(mut self, note: impl Into<String>) -> PromotePass {
        self.note = Arc::from(note.into());
        self
    }
}

impl DispatchPass for PromotePass {
    fn dispatch<'a>(
        &'a self,
        board: &'a BoardSlug,
        max: Option<usize>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<Value, ApiError>> {
        Box::pin(async move {
            let (reclaimed, promoted) = if dry_run {
                (Vec::new(), Vec::new())
            } else {
                let reclaimed: Vec<TaskId> = self
                    .store
                    .reclaim_expired(board)
                    .await?
                    .into_iter()
                    .map(|r| r.task.id)
                    .collect();
                (reclaimed, self.store.promote(board).await?)
            };
            let filter = TaskFilter {
                statuses: vec![TaskStatus::Ready],
                sort: TaskSort::Priority,
                limit: max,
                ..TaskFilter::default()
            };
            let ready: Vec<TaskId> = self
                .store
                .list_tasks(board, &filter)
                .await?
                .into_iter()
                .map(|t| t.id)
                .collect();
            Ok(json!({
                "dispatcher": "none",
                "dry_run": dry_run,
                "reclaimed": reclaimed,
                "promoted": promoted,
                "claimed": [],
                "waiting_for_worker": ready,
                "note": &*self.note,
            }))
        })
    }
}

/// The dispatch round of a server that runs dispatchers in-process: `POST /dispatch` on a board
/// with one runs [`DispatcherHandle::dispatch_once`] (reclaim, promote, claim and start
/// workers) and answers with its report (`claimed`, `skipped_*`, ...) plus
/// `"dispatcher": "local"`; other boards get the [`PromotePass`].
#[derive(Clone)]
pub struct DispatcherPass {
    handles: Vec<DispatcherHandle>,
    fallback: PromotePass,
}

impl DispatcherPass {
    /// A pass over running dispatchers (one per board), falling back to promotion on `store`.
    pub fn new(handles: Vec<DispatcherHandle>, store: Arc<dyn Store>) -> DispatcherPass {
        DispatcherPass {
            handles,
            fallback: PromotePass::new(store),
        }
    }

    fn handle(&self, board: &BoardSlug) -> Option<&DispatcherHandle> {
        self.handles.iter().find(|h| h.board() == board)
    }
}

fn dispatcher_stopped(error: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "dispatcher_stopped",
        format!("{error}; restart `troupe serve` to dispatch again"),
    )
}

impl DispatchPass for DispatcherPass {
    fn dispatch<'a>(
        &'a self,
        board: &'a BoardSlug,
        max: Option<usize>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<Value, ApiError>> {
        Box::pin(async move {
            let Some(handle) = self.handle(board) else {
                return self.fallback.dispatch(board, max, dry_run).await;
            };
            let report = handle
                .dispatch_once(max, dry_run)
                .await
                .map_err(dispatcher_stopped)?;
            let mut value = serde_json::to_value(&report).map_err(|e| {
                ApiError::internal(format!("the dispatch report could not be encoded: {e}"))
            })?;
            if let Value::Object(map) = &mut value {
                map.insert("dispatcher".into(), json!("local"));
            }
            Ok(value)
        })
    }

    fn stop_worker<'a>(
        &'a self,
        board: &'a BoardSlug,
        task: &'a TaskId,
    ) -> BoxFuture<'a, WorkerStop> {
        Box::pin(async move {
            let Some(handle) = self.handle(board) else {
                return WorkerStop::NoLocalDispatcher;
            };
            // Subscribe before anything can end the worker, so its end is not missed.
            let mut events = handle.subscribe();
            match handle.running().await {
                Ok(running) if running.contains(task) => {}
                Ok(_) => return WorkerStop::NotRunningHere,
                Err(error) => {
                    tracing::warn!(%board, %task, %error, "cannot ask the dispatcher about its workers");
                    return WorkerStop::NoLocalDispatcher;
                }
            }
            // A round reads the event that ended the run and stops its worker hard; `max` 0
            // keeps that round from claiming anything.
            if let Err(error) = handle.dispatch_once(Some(0), false).await {
                tracing::warn!(%board, %task, %error, "the dispatcher could not run the round that stops the worker");
                return WorkerStop::Stopping;
            }
            let ended = async {
                loop {
                    match events.recv().await {
                        Ok(DispatcherEvent::WorkerFinished(report)) if report.task_id == *task => {
                            return true;
                        }
                        Ok(_) => {}
                        // Missed events: ask the dispatcher directly instead.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            if handle.running().await.is_ok_and(|r| !r.contains(task)) {
                                return true;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
                    }
                }
            };
            match tokio::time::timeout(STOP_WAIT, ended).await {
                Ok(true) => WorkerStop::Stopped,
                _ if handle.running().await.is_ok_and(|r| !r.contains(task)) => WorkerStop::Stopped,
                _ => WorkerStop::Stopping,
            }
        })
    }
}

/// `?board=` alone.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
}

fn board_of(state: &HttpState, raw: Option<&str>) -> Result<BoardSlug, ApiError> {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(state.default_board.clone()),
        Some(raw) => {
            BoardSlug::parse(raw).map_err(|e| ApiError::bad_request("bad_board", e.to_string()))
        }
    }
}

fn task_id(raw: &str) -> Result<TaskId, ApiError> {
    TaskId::parse(raw.trim()).map_err(|e| ApiError::bad_request("bad_task_id", e.to_string()))
}

/// `GET /board` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardViewQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
    /// Only this tenant's tasks.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Show archived tasks too.
    #[serde(default)]
    pub include_archived: Option<bool>,
    /// Tasks per page ([`DEFAULT_PAGE`] when absent, at most [`MAX_PAGE`]).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Where the page starts: the `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Tasks per page of `GET /board` and `GET /tasks` when the client does not say.
pub const DEFAULT_PAGE: usize = 500;
/// The most tasks one page holds: a page of the largest board stays well under 1 MB.
pub const MAX_PAGE: usize = 1000;

/// The page size a client asked for, checked.
fn page_size(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(0) => Err(ApiError::bad_request(
            "bad_limit",
            format!("limit=0 asks for nothing; send a page size from 1 to {MAX_PAGE}"),
        )),
        Some(n) => Ok(n.min(MAX_PAGE)),
    }
}

/// A task's place in a listing order, as a cursor: `p.<priority>.<created>.<id>` for the
/// board (highest priority first, then oldest), `c.<created>.<id>` for the task list.
fn cursor_of(task: &troupe_kanban::Task, by_priority: bool) -> String {
    if by_priority {
        format!("p.{}.{}.{}", task.priority, task.created_at.0, task.id)
    } else {
        format!("c.{}.{}", task.created_at.0, task.id)
    }
}

/// A cursor's sort key: `(minus priority, created, id)`, priority 0 for the task list.
fn parse_cursor(raw: &str, by_priority: bool) -> Result<(i64, i64, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "bad_cursor",
            format!(
                "cursor {raw:?} is not one this listing gave out; send the next_cursor of the previous page, or leave cursor out to start at the beginning"
            ),
        )
    };
    let parts: Vec<&str> = raw.trim().split('.').collect();
    match (by_priority, parts.as_slice()) {
        (true, ["p", priority, created, id]) => Ok((
            priority
                .parse::<i64>()
                .ok()
                .and_then(i64::checked_neg)
                .ok_or_else(bad)?,
            created.parse().map_err(|_| bad())?,
            TaskId::parse(id).map_err(|_| bad())?.to_string(),
        )),
        (false, ["c", created, id]) => Ok((
            0,
            created.parse().map_err(|_| bad())?,
            TaskId::parse(id).map_err(|_| bad())?.to_string(),
        )),
        _ => Err(bad()),
    }
}

/// One page of `tasks` (sorted in the listing's order) after `cursor`, and the next cursor.
fn page_of(
    tasks: Vec<troupe_kanban::Task>,
    cursor: Option<&(i64, i64, String)>,
    limit: usize,
    by_priority: bool,
) -> (Vec<troupe_kanban::Task>, Option<String>) {
    let key = |t: &troupe_kanban::Task| {
        (
            if by_priority { -t.priority } else { 0 },
            t.created_at.0,
            t.id.to_string(),
        )
    };
    let start = match cursor {
        Some(after) => tasks.partition_point(|t| key(t) <= *after),
        None => 0,
    };
    let more = tasks.len() > start + limit;
    let page: Vec<troupe_kanban::Task> = tasks.into_iter().skip(start).take(limit).collect();
    let next = if more {
        page.last().map(|t| cursor_of(t, by_priority))
    } else {
        None
    };
    (page, next)
}

/// Handler of `GET /board`: the board, its counts and its tasks by status column.
pub async fn board(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardViewQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let board = state.store.board(&slug).await?;
    let stats = state.store.stats(&slug).await?;
    let include_archived = query.include_archived.unwrap_or(false);
    let limit = page_size(query.limit)?;
    let cursor = query
        .cursor
        .as_deref()
        .map(|c| parse_cursor(c, true))
        .transpose()?;
    let filter = TaskFilter {
        include_archived,
        tenant: query.tenant,
        sort: TaskSort::Priority,
        // The first page needs only its own tasks (and one more, to know there are more).
        limit: cursor.is_none().then_some(limit + 1),
        ..TaskFilter::default()
    };
    let all = state.store.list_tasks(&slug, &filter).await?;
    let (tasks, next_cursor) = page_of(all, cursor.as_ref(), limit, true);
    let mut columns = serde_json::Map::new();
    for status in TaskStatus::ALL {
        if status == TaskStatus::Archived && !include_archived {
            continue;
        }
        let column: Vec<&troupe_kanban::Task> =
            tasks.iter().filter(|t| t.status == status).collect();
        columns.insert(status.as_str().to_string(), json!(column));
    }
    Ok(Json(json!({
        "board": board,
        "counts": stats.by_status.iter().map(|(s, n)| (s.as_str().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "open_runs": stats.open_runs,
        "last_event_id": stats.last_event_id,
        "columns": columns,
        "next_cursor": next_cursor,
    })))
}

/// `GET /tasks` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskListQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
    /// Only this status.
    #[serde(default)]
    pub status: Option<String>,
    /// Only this assignee.
    #[serde(default)]
    pub assignee: Option<String>,
    /// Only this tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Archived tasks too.
    #[serde(default)]
    pub include_archived: Option<bool>,
    /// Tasks per page ([`DEFAULT_PAGE`] when absent, at most [`MAX_PAGE`]).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Where the page starts: the `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Handler of `GET /tasks`.
pub async fn list_tasks(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<TaskListQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let statuses = match query.status.as_deref() {
        None => Vec::new(),
        Some(raw) => vec![parse_status(raw)?],
    };
    let limit = page_size(query.limit)?;
    let cursor = query
        .cursor
        .as_deref()
        .map(|c| parse_cursor(c, false))
        .transpose()?;
    let filter = TaskFilter {
        statuses,
        include_archived: query.include_archived.unwrap_or(false),
        assignee: query.assignee,
        tenant: query.tenant,
        sort: TaskSort::Created,
        limit: cursor.is_none().then_some(limit + 1),
    };
    let all = state.store.list_tasks(&slug, &filter).await?;
    let (tasks, next_cursor) = page_of(all, cursor.as_ref(), limit, false);
    Ok(Json(json!({ "tasks": tasks, "next_cursor": next_cursor })))
}

fn parse_status(raw: &str) -> Result<TaskStatus, ApiError> {
    raw.trim().parse::<TaskStatus>().map_err(|_| {
        ApiError::bad_request(
            "bad_status",
            format!(
                "{raw:?} is not a status; use one of {}",
                TaskStatus::ALL.map(TaskStatus::as_str).join(", ")
            ),
        )
    })
}

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
    task.traceparent = super::traceparent(&headers);
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

/// Handler of `GET /tasks/{id}`: the task with its comments, events, links and runs.
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
    Ok(Json(json!({
        "task": task,
        "comments": comments,
        "events": events,
        "links": links,
        "runs": runs,
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

/// `POST /links` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkBody {
    /// The task that must finish first.
    pub parent_id: String,
    /// The task that waits.
    pub child_id: String,
}

/// Handler of `POST /links`.
pub async fn link(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    ApiJson(body): ApiJson<LinkBody>,
) -> Result<Response, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let parent = task_id(&body.parent_id)?;
    let child = task_id(&body.child_id)?;
    state.store.link(&slug, &parent, &child).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"parent_id": parent, "child_id": child, "linked": true})),
    )
        .into_response())
}

/// Handler of `GET /links`: every link of the board, as `{parent_id, child_id}` pairs, so a
/// dashboard can show fan-out progress on each card without asking task by task. Archived
/// tasks' links are included (an archived child counts as finished).
pub async fn list_links(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let links: Vec<Value> = state
        .store
        .board_links(&slug)
        .await?
        .into_iter()
        .map(|link| json!({"parent_id": link.parent, "child_id": link.child}))
        .collect();
    Ok(Json(json!({ "links": links })))
}

/// `DELETE /links` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlinkQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
    /// The parent of the link.
    pub parent_id: String,
    /// The child of the link.
    pub child_id: String,
}

/// Handler of `DELETE /links?parent_id=&child_id=`.
pub async fn unlink(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<UnlinkQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let parent = task_id(&query.parent_id)?;
    let child = task_id(&query.child_id)?;
    state.store.unlink(&slug, &parent, &child).await?;
    Ok(Json(
        json!({"parent_id": parent, "child_id": child, "linked": false}),
    ))
}

/// `POST /dispatch` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
    /// Claim at most this many tasks.
    #[serde(default)]
    pub max: Option<usize>,
    /// Change nothing; report what would be done.
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// Handler of `POST /dispatch?max=&dry_run=`.
pub async fn dispatch(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<DispatchQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    state.store.board(&slug).await?;
    let report = state
        .dispatcher
        .dispatch(&slug, query.max, query.dry_run.unwrap_or(false))
        .await?;
    Ok(Json(report))
}

/// Handler of `GET /runs/{id}`.
pub async fn show_run(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<BoardQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let run = state.store.run(&slug, RunId(id)).await?;
    Ok(Json(json!({ "run": run })))
}

/// Handler of `POST /runs/{id}/terminate`: ends an open run by blocking its task (kind
/// `terminated`), which takes the lease away, so the worker holding it is refused from then
/// on. When this server's own dispatcher runs that worker it is stopped hard before the answer
/// (`"worker": "stopped"`); a worker in another process is stopped by its dispatcher's next
/// round (`"worker": "no_local_dispatcher"` or `"not_running_here"`). The task waits for a
/// person to unblock it.
pub async fn terminate_run(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<BoardQuery>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let run = state.store.run(&slug, RunId(id)).await?;
    if let Some(outcome) = run.outcome {
        return Err(ApiError::conflict(
            "run_not_open",
            format!("run {id} already ended ({outcome}); only an open run can be terminated"),
        ));
    }
    let task = state.store.task(&slug, &run.task_id).await?;
    let current = task.lease.as_ref().map(|lease| lease.run_id);
    if current != Some(RunId(id)) {
        return Err(ApiError::conflict(
            "run_not_open",
            format!(
                "run {id} is not the live run of {} (status {}); nothing to terminate",
                task.id, task.status
            ),
        ));
    }
    let block = BlockRequest::new(
        TERMINATED_KIND,
        format!("run {id} terminated over the HTTP API"),
    );
    let changed = state.store.block(&slug, &run.task_id, &block).await?;
    // With the lease gone the worker can no longer write to the task; when it runs in this
    // process, stop it now rather than let it spend its model's time until the next round.
    let worker = state.dispatcher.stop_worker(&slug, &run.task_id).await;
    let run = state.store.run(&slug, RunId(id)).await?;
    Ok(Json(json!({
        "run": run,
        "task": changed.task,
        "ended_lease": changed.ended_lease,
        "worker": worker.as_str(),
    })))
}
