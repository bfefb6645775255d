//! The board's view of workers' stored sessions: which calls an earlier run of a task left cut
//! off ([`troupe_kanban::run_history::RunHistory`]), the session to resume once a worker's
//! question is answered, and a task's plan (its worker's `todo` list), read from the session
//! store the worker's session was written to. A worker killed mid-call leaves its session open with the model's
//! last calls and no results; the next run of the task is told about them.

use std::future::Future;
use std::pin::Pin;

use troupe_actors::journal::Restore;
use troupe_kanban::domain::{BoardSlug, RunId, TaskId};
use troupe_kanban::run_history::{CutOffCall, RunHistory, options_name_run, options_name_task};

use serde_json::Value;
use troupe_actors::model::ChatMessage;
use troupe_tools::todo::{TODO_TOOL, TodoList};

use super::{ListQuery, SessionStore, StoredSession};

/// Open worker sessions looked through for a run's session, newest first. A worker that died
/// left its session open; finished ones are closed and have nothing cut off.
const OPEN_SESSIONS_SEARCHED: usize = 200;

/// Workers' sessions, open or closed, looked through for a task's newest one, newest first.
const SESSIONS_SEARCHED: usize = 500;

/// Cut-off calls read from a [`SessionStore`].
#[derive(Debug, Clone)]
pub struct StoredRunHistory {
    store: SessionStore,
}

impl StoredRunHistory {
    /// Reads workers' sessions from `store`.
    pub fn new(store: SessionStore) -> StoredRunHistory {
        StoredRunHistory { store }
    }

    async fn find(&self, board: &BoardSlug, task: &TaskId, run: RunId) -> Vec<CutOffCall> {
        let query = ListQuery {
            all: false,
            origin: Some("worker".into()),
            open_only: true,
            limit: Some(OPEN_SESSIONS_SEARCHED),
            ..ListQuery::default()
        };
        let listed = match self.store.list(query).await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, task = %task, "could not list workers' sessions to find calls a run left cut off");
                return Vec::new();
            }
        };
        for summary in listed {
            let stored = match self.store.load(&summary.id).await {
                Ok(stored) => stored,
                Err(error) => {
                    tracing::debug!(%error, session = %summary.id, "could not read a worker's session");
                    continue;
                }
            };
            if !options_name_run(&stored.options, board, task, run) {
                continue;
            }
            let restore = stored.restore(false);
            return troupe_actors::journal::unanswered_calls(&stored.messages)
                .into_iter()
                .map(|call| CutOffCall {
                    may_have_run: !restore.awaiting_approval.contains(&call.id)
                        && !restore.never_started.contains(&call.id),
                    tool: call.name,
                    arguments: call.arguments,
                })
                .collect();
        }
        Vec::new()
    }
}

impl StoredRunHistory {
    /// The newest session a worker kept for `task` (the one that asked, when its question
    /// parked the task: a resumed run reopens the same session, so no newer one exists).
    async fn latest(&self, board: &BoardSlug, task: &TaskId) -> Option<Restore> {
        self.latest_stored(board, task)
            .await
            .map(|stored| stored.restore(false))
    }

    /// The plan (the `todo` list) of the newest session a worker kept for `task`, as the
    /// `todo` tool states it (`{todos, summary}`); `None` when no worker session of the task
    /// is kept or it never wrote a plan.
    pub async fn task_todos(&self, board: &BoardSlug, task: &TaskId) -> Option<Value> {
        let stored = self.latest_stored(board, task).await?;
        stored
            .messages
            .iter()
            .rev()
            .find_map(|message| match message {
                ChatMessage::Tool { name, content, .. } if name == TODO_TOOL => {
                    TodoList::from_result(content)
                }
                _ => None,
            })
            .map(|list| list.to_result())
    }

    async fn latest_stored(&self, board: &BoardSlug, task: &TaskId) -> Option<StoredSession> {
        let query = ListQuery {
            all: false,
            origin: Some("worker".into()),
            open_only: false,
            limit: Some(SESSIONS_SEARCHED),
            ..ListQuery::default()
        };
        let listed = match self.store.list(query).await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, task = %task, "could not list workers' sessions to resume the one that asked");
                return None;
            }
        };
        for summary in listed {
            match self.store.load(&summary.id).await {
                Ok(stored) if options_name_task(&stored.options, board, task) => {
                    return Some(stored);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, session = %summary.id, "could not read a worker's session")
                }
            }
        }
        None
    }
}

impl RunHistory for StoredRunHistory {
    fn latest_session<'a>(
        &'a self,
        board: &'a BoardSlug,
        task: &'a TaskId,
    ) -> Pin<Box<dyn Future<Output = Option<Restore>> + Send + 'a>> {
        Box::pin(self.latest(board, task))
    }

    fn cut_off_calls<'a>(
        &'a self,
        board: &'a BoardSlug,
        task: &'a TaskId,
        run: RunId,
    ) -> Pin<Box<dyn Future<Output = Vec<CutOffCall>> + Send + 'a>> {
        Box::pin(self.find(board, task, run))
    }
}
