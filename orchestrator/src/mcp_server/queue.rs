//! The approval queue of `troupe mcp serve`: where a call waits for a person when the client
//! that made it cannot ask one (no elicitation). It is served on the `--http` listener, or with
//! stdio on the listener of `--queue ADDR`, behind the server's token, with the same routes and
//! bodies as `troupe serve`'s: `GET /api/approvals` lists what waits, `POST
//! /api/approvals/{request_id}` answers it. A request nobody answers within `approvals.timeout`
//! follows `approvals.unattended`.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use crate::api::Troupe;
use crate::http::errors::{ApiError, ApiJson, ApiPath};
use crate::http::sessions::{AnswerRequest, answer_pending, list_pending};

/// The path pending requests are listed at.
pub(crate) const QUEUE_PATH: &str = "/api/approvals";

/// The queue's routes over `troupe`'s supervisor (the caller puts the token check in front).
pub(super) fn router(troupe: Troupe) -> Router {
    Router::new()
        .route(QUEUE_PATH, get(list))
        .route("/api/approvals/{request_id}", post(answer))
        .with_state(troupe)
}

async fn list(State(troupe): State<Troupe>) -> Result<Json<Value>, ApiError> {
    list_pending(&troupe).await
}

async fn answer(
    State(troupe): State<Troupe>,
    ApiPath(request_id): ApiPath<String>,
    ApiJson(body): ApiJson<AnswerRequest>,
) -> Result<Json<Value>, ApiError> {
    answer_pending(&troupe, &request_id, body).await
}
