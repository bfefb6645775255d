//! The kanban dashboard routes of the HTTP API, over `Arc<dyn Store>`: the board, tasks (list,
//! create, show, patch, bulk patch, delete), comments, links, dispatch, runs and terminating a
//! run. Every route takes `?board=<slug>` (the server's default board when absent). Status
//! changes go through the store's transition methods, so an impossible one is a 409 that says
//! which statuses would allow it.
//!
//! This file holds what every route shares (`?board=`, the task id); `listing.rs` the board and
//! the task list, `tasks.rs` one task or many and their comments, `links.rs` the links, and
//! `dispatch.rs` the dispatch round and the runs.

use serde::Deserialize;
use troupe_kanban::{BoardSlug, TaskId};

use super::HttpState;
use super::errors::ApiError;

mod dispatch;
mod links;
mod listing;
mod review;
mod tasks;

pub use dispatch::*;
pub use links::*;
pub use listing::*;
pub use review::*;
pub use tasks::*;

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
