//! `GET /api/store/sessions`: every session in the store (chat, serve, board workers,
//! subagents), newest first, a page at a time, for the dashboard's Sessions tab and a task's
//! runs. It needs the dashboard scope ([`Scope::Dashboard`]): the API token is shared with
//! `/v1` clients, who must not read chats or board workers' conversations.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::HttpState;
use super::super::auth::{DASHBOARD_TOKEN_ENV, Scope};
use super::super::errors::{ApiError, ApiQuery};
use crate::sessions::{ListCursor, ListQuery, SessionSummary};

/// Rows in a page when the request does not say.
pub const DEFAULT_PAGE: usize = 50;

/// Most rows one page may hold.
pub const MAX_PAGE: usize = 500;

/// Rows listed for one task: its runs' sessions (a task is rarely run more often).
const TASK_RUNS_LISTED: usize = 100;

/// `GET /api/store/sessions` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredQuery {
    /// Rows in the page (1 to [`MAX_PAGE`], default [`DEFAULT_PAGE`]).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Only sessions of this origin (`chat`, `http`, `worker`, ...).
    #[serde(default)]
    pub origin: Option<String>,
    /// Subagents' sessions too (default true).
    #[serde(default)]
    pub subagents: Option<bool>,
    /// Only the board workers' sessions of this task, each with its run's number.
    #[serde(default)]
    pub task: Option<String>,
}

/// Refuses a request without the dashboard scope, saying how to get it.
pub(crate) fn require_dashboard(state: &HttpState, scope: Option<Scope>) -> Result<(), ApiError> {
    if scope == Some(Scope::Dashboard) {
        return Ok(());
    }
    let how = match state.dashboard_token {
        Some(_) => "send the dashboard token instead (troupe serve prints where it comes from)",
        None => {
            "this server has no dashboard token; start troupe serve with serve.dashboard_token or TROUPE_DASHBOARD_TOKEN set"
        }
    };
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "dashboard_scope_required",
        format!(
            "this route reads every stored session (chats, board workers), which the API token \
             (shared with /v1 clients) may not; {how} ({DASHBOARD_TOKEN_ENV})"
        ),
    ))
}

/// Handler of `GET /api/store/sessions`: `{"sessions": [...], "next": cursor or null}`.
pub async fn list(
    State(state): State<HttpState>,
    scope: Option<axum::Extension<Scope>>,
    ApiQuery(query): ApiQuery<StoredQuery>,
) -> Result<Json<Value>, ApiError> {
    require_dashboard(&state, scope.map(|s| s.0))?;
    let Some(store) = state.troupe.session_store() else {
        return Err(ApiError::not_found(
            "sessions_not_kept",
            "this server keeps no sessions (sessions.persist is false in its troupe.yaml)",
        ));
    };
    let limit = match query.limit {
        None => DEFAULT_PAGE,
        Some(n) if (1..=MAX_PAGE).contains(&n) => n,
        Some(n) => {
            return Err(ApiError::bad_request(
                "bad_limit",
                format!("limit {n} is out of range; send 1 to {MAX_PAGE}"),
            ));
        }
    };
    let before = match query.cursor.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(ListCursor::decode(text).ok_or_else(|| {
            ApiError::bad_request(
                "bad_cursor",
                format!("cursor {text:?} is not one this route gave; send the `next` of the previous page"),
            )
        })?),
    };
    let task = query
        .task
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    // One more row than asked says whether a next page exists.
    let wanted = if task.is_some() {
        TASK_RUNS_LISTED
    } else {
        limit
    };
    let listed = store
        .list(ListQuery {
            all: query.subagents.unwrap_or(true),
            origin: query.origin.filter(|o| !o.trim().is_empty()),
            open_only: false,
            limit: Some(wanted + 1),
            before,
            task: task.clone(),
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let more = listed.len() > wanted;
    let page: Vec<SessionSummary> = listed.into_iter().take(wanted).collect();
    let next = more
        .then(|| page.last().map(|s| ListCursor::after(s).encode()))
        .flatten();
    let mut sessions = Vec::with_capacity(page.len());
    for summary in &page {
        let mut row = summary_json(summary);
        if task.is_some() {
            // The run a worker's session belongs to is in its options.
            if let Ok(stored) = store.load(&summary.id).await {
                row["board"] = stored.options.get("board").cloned().unwrap_or(Value::Null);
                row["run"] = stored.options.get("run").cloned().unwrap_or(Value::Null);
            }
        }
        sessions.push(row);
    }
    Ok(Json(json!({ "sessions": sessions, "next": next })))
}

fn summary_json(s: &SessionSummary) -> Value {
    json!({
        "session_id": s.id,
        "parent_id": s.parent_id,
        "root_id": s.root_id,
        "depth": s.depth,
        "origin": s.origin,
        "model": s.model,
        "title": s.title,
        "status": s.status,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "messages": s.messages,
        "usage": s.usage,
    })
}
