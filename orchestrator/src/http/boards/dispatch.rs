//! `POST /dispatch` and the runs: what a dispatch round is on a server with or without its own
//! dispatcher, showing a run and terminating it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::dispatcher::DispatcherEvent;
use troupe_kanban::domain::{RunId, TaskFilter, TaskSort};
use troupe_kanban::store::BlockRequest;
use troupe_kanban::{BoardSlug, DispatcherHandle, Store, TaskId, TaskStatus};

use super::super::HttpState;
use super::super::errors::{ApiError, ApiPath, ApiQuery};
use super::{BoardQuery, board_of};

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
