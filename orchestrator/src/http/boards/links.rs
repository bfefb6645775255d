//! Parent and child links between tasks: add, list and remove.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::HttpState;
use super::super::errors::{ApiError, ApiJson, ApiQuery};
use super::{BoardQuery, board_of, task_id};

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
