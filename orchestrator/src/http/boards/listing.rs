//! `GET /board` and `GET /tasks`: the board by status column and the task list, paged by cursor.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::domain::{TaskFilter, TaskSort};
use troupe_kanban::{TaskId, TaskStatus};

use super::super::HttpState;
use super::super::errors::{ApiError, ApiQuery};
use super::board_of;

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

pub(super) fn parse_status(raw: &str) -> Result<TaskStatus, ApiError> {
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
