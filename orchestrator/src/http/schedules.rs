//! The schedules routes of the HTTP API (`/api/schedules`): list, create, show, change, remove,
//! pause, resume, run now, and a job's history. Every route takes `?board=<slug>` (the
//! server's default board when absent). A job's fields are those of the `cronjob` tool and
//! `troupe cron` ([`crate::schedules::JobFields`]); a profile a job names must be configured.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::BoardSlug;
use troupe_kanban::schedule::JobPatch;

use super::HttpState;
use super::errors::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::schedules::{JobFields, job_view, run_view, views_with_outcomes};

/// `?board=`, and `?limit=` for the history.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleQuery {
    /// The board's slug.
    #[serde(default)]
    pub board: Option<String>,
    /// Most runs a history returns (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The body of `POST /api/schedules`.
#[derive(Debug, Deserialize)]
pub struct CreateJob {
    /// Who owns the job (default `http`).
    #[serde(default)]
    pub owner: Option<String>,
    /// The job's fields.
    #[serde(flatten)]
    pub fields: JobFields,
}

fn board_of(state: &HttpState, raw: Option<&str>) -> Result<BoardSlug, ApiError> {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(state.default_board.clone()),
        Some(raw) => {
            BoardSlug::parse(raw).map_err(|e| ApiError::bad_request("bad_board", e.to_string()))
        }
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::bad_request("invalid_schedule", message)
}

/// `GET /api/schedules`.
pub async fn list(
    State(state): State<HttpState>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let jobs = state.store.jobs(&board).await?;
    let views = views_with_outcomes(state.store.as_ref(), &board, &jobs).await;
    Ok(Json(json!({"board": board, "jobs": views})))
}

/// `POST /api/schedules`.
pub async fn create(
    State(state): State<HttpState>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
    ApiJson(body): ApiJson<CreateJob>,
) -> Result<Response, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let owner = body
        .owner
        .filter(|o| !o.trim().is_empty())
        .unwrap_or_else(|| "http".into());
    let new = body
        .fields
        .into_new(&owner, &state.troupe.profile_names())
        .map_err(invalid)?;
    let job = state.store.create_job(&board, &new).await?;
    Ok((StatusCode::CREATED, Json(json!({"job": job_view(&job)}))).into_response())
}

/// `GET /api/schedules/{id}`.
pub async fn show(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let job = state.store.job(&board, &id).await?;
    let view = views_with_outcomes(state.store.as_ref(), &board, &[job]).await;
    Ok(Json(json!({"job": view.into_iter().next()})))
}

/// `PATCH /api/schedules/{id}`.
pub async fn update(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
    ApiJson(fields): ApiJson<JobFields>,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let patch = fields
        .into_patch(&state.troupe.profile_names())
        .map_err(invalid)?;
    let job = state.store.update_job(&board, &id, &patch).await?;
    Ok(Json(json!({"job": job_view(&job)})))
}

/// `DELETE /api/schedules/{id}`.
pub async fn remove(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let job = state.store.delete_job(&board, &id).await?;
    Ok(Json(json!({"removed": job.id, "name": job.name})))
}

async fn set_paused(
    state: &HttpState,
    id: &str,
    q: &ScheduleQuery,
    paused: bool,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(state, q.board.as_deref())?;
    let patch = JobPatch {
        paused: Some(paused),
        ..JobPatch::default()
    };
    let job = state.store.update_job(&board, id, &patch).await?;
    Ok(Json(json!({"job": job_view(&job)})))
}

/// `POST /api/schedules/{id}/pause`.
pub async fn pause(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    set_paused(&state, &id, &q, true).await
}

/// `POST /api/schedules/{id}/resume`.
pub async fn resume(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    set_paused(&state, &id, &q, false).await
}

/// `POST /api/schedules/{id}/run`.
pub async fn run_now(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let run = state.store.run_job_now(&board, &id).await?;
    Ok(Json(json!({"run": run_view(&run)})))
}

/// `GET /api/schedules/{id}/history`.
pub async fn history(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<Value>, ApiError> {
    let board = board_of(&state, q.board.as_deref())?;
    let runs = state
        .store
        .job_history(&board, &id, q.limit.unwrap_or(50))
        .await?;
    Ok(Json(
        json!({"runs": runs.iter().map(run_view).collect::<Vec<_>>()}),
    ))
}
