//! `POST /tasks/{id}/review`: a person's verdict on a task waiting in `review`, the HTTP door
//! of `troupe kanban review` (the dashboard's Approve / Send back buttons call it).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::HttpState;
use super::super::errors::{ApiError, ApiJson, ApiPath, ApiQuery};
use super::{BoardQuery, board_of, task_id};

/// `POST /tasks/{id}/review` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewVerdict {
    /// `approve` (the task is done) or `changes` (it goes back to work).
    pub verdict: String,
    /// With `changes`, what must change (required); with `approve`, a note kept on the task.
    #[serde(default)]
    pub comment: Option<String>,
    /// Who reviews (`http` when absent).
    #[serde(default)]
    pub author: Option<String>,
}

/// Handler of `POST /tasks/{id}/review`: 200 with the task as the verdict left it.
pub async fn review_task(
    State(state): State<HttpState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(query): ApiQuery<BoardQuery>,
    ApiJson(body): ApiJson<ReviewVerdict>,
) -> Result<Json<Value>, ApiError> {
    let slug = board_of(&state, query.board.as_deref())?;
    let id = task_id(&raw)?;
    let author = body
        .author
        .as_deref()
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("http");
    let comment = body
        .comment
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty());
    let store = state.store.as_ref();
    let task = match body.verdict.trim() {
        "approve" => troupe_kanban::review::approve(store, &slug, &id, author, comment).await?,
        "changes" => {
            let Some(reason) = comment else {
                return Err(ApiError::bad_request(
                    "empty_review_comment",
                    "`comment` is empty; with verdict `changes`, say what must change (the next worker reads it)",
                ));
            };
            troupe_kanban::review::send_back(store, &slug, &id, author, reason).await?
        }
        other => {
            return Err(ApiError::bad_request(
                "bad_verdict",
                format!("`verdict` is {other:?}; send `approve` or `changes`"),
            ));
        }
    };
    Ok(Json(json!({ "task": task })))
}
