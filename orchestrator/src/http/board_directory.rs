//! The store's boards as the dashboard needs them: `GET /api/plugins/kanban/boards` lists them
//! (with their counts, so a board switcher can show how busy each is) and
//! `POST /api/plugins/kanban/boards` creates one. The routes inside a board live in
//! [`super::boards`].

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::BoardSlug;
use troupe_kanban::domain::NewBoard;

use super::HttpState;
use super::errors::{ApiError, ApiJson, ApiQuery};

/// `GET /boards` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardListQuery {
    /// Archived boards too.
    #[serde(default)]
    pub include_archived: Option<bool>,
}

/// Handler of `GET /boards`: every board, with its task counts by status, and which one a
/// request without `?board=` uses.
pub async fn list(
    State(state): State<HttpState>,
    ApiQuery(query): ApiQuery<BoardListQuery>,
) -> Result<Json<Value>, ApiError> {
    let boards = state
        .store
        .list_boards(query.include_archived.unwrap_or(false))
        .await?;
    let mut listed = Vec::with_capacity(boards.len());
    for board in boards {
        let stats = state.store.stats(&board.slug).await?;
        let counts: serde_json::Map<String, Value> = stats
            .by_status
            .iter()
            .map(|(s, n)| (s.as_str().to_string(), json!(n)))
            .collect();
        listed.push(json!({"board": board, "counts": counts}));
    }
    Ok(Json(
        json!({"boards": listed, "default_board": state.default_board}),
    ))
}

/// `POST /boards` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBoard {
    /// The slug: lower case letters, digits and dashes.
    pub slug: String,
    /// A display name; the slug when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// What the board is for.
    #[serde(default)]
    pub description: Option<String>,
}

/// Handler of `POST /boards`: 201 with the new board, 409 when the slug is taken.
pub async fn create(
    State(state): State<HttpState>,
    ApiJson(body): ApiJson<CreateBoard>,
) -> Result<Response, ApiError> {
    let slug = BoardSlug::parse(&body.slug)
        .map_err(|e| ApiError::bad_request("bad_board", e.to_string()))?;
    let mut board = NewBoard::new(slug);
    board.name = body
        .name
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    board.description = body.description.unwrap_or_default();
    let created = state.store.create_board(&board).await?;
    Ok((StatusCode::CREATED, Json(json!({ "board": created }))).into_response())
}
