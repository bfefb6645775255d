//! What an earlier run of a task left cut off: the tool calls its session had started and had
//! no result for when its worker died (a `kill -9`, a lost machine), whose effect is therefore
//! unknown. A worker's session is kept in the session store with its board, task and run in its
//! origin ([`origin_options`]); a [`RunHistory`] (the orchestrator's, over that store) reads it
//! back, and the next run's first message names those calls (see
//! [`crate::worker_context::cut_off_section`]) so the model checks before repeating them, as a
//! reopened chat is told.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};

use crate::domain::{BoardSlug, RunId, TaskId};

/// A call an earlier run started and never got a result for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutOffCall {
    /// The tool.
    pub tool: String,
    /// Its arguments as the model sent them (JSON text).
    pub arguments: String,
    /// Whether it may have run: false when it was known never to have started (it waited for a
    /// person's approval).
    pub may_have_run: bool,
}

/// Where the sessions of earlier runs are read from.
pub trait RunHistory: Send + Sync + 'static {
    /// The calls the session of run `run` (of `task` on `board`) had started and had no result
    /// for, in the order the model made them; empty when there is none or the session is not
    /// kept.
    fn cut_off_calls<'a>(
        &'a self,
        board: &'a BoardSlug,
        task: &'a TaskId,
        run: RunId,
    ) -> Pin<Box<dyn Future<Output = Vec<CutOffCall>> + Send + 'a>>;

    /// The newest stored session of a worker on `task` (any run), to reopen when the task's
    /// last run parked it with a question that has been answered since; `None` when none is
    /// kept (the run then starts a new session).
    fn latest_session<'a>(
        &'a self,
        board: &'a BoardSlug,
        task: &'a TaskId,
    ) -> Pin<Box<dyn Future<Output = Option<troupe_actors::journal::Restore>> + Send + 'a>> {
        let _ = (board, task);
        Box::pin(async { None })
    }
}

/// Whether a worker session's origin `options` name `task` on `board` (any run).
pub fn options_name_task(options: &Value, board: &BoardSlug, task: &TaskId) -> bool {
    options.get("board").and_then(Value::as_str) == Some(board.to_string().as_str())
        && options.get("task").and_then(Value::as_str) == Some(task.to_string().as_str())
}

/// The origin options of a worker session for `run` of `task` on `board`, added to what the
/// profile's own persistence set (`base`, an object or null).
pub fn origin_options(base: &Value, board: &BoardSlug, task: &TaskId, run: RunId) -> Value {
    let mut options = match base {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    options.insert("board".into(), json!(board.to_string()));
    options.insert("task".into(), json!(task.to_string()));
    options.insert("run".into(), json!(run.0));
    Value::Object(options)
}

/// Whether a worker session's origin `options` name `run` of `task` on `board`.
pub fn options_name_run(options: &Value, board: &BoardSlug, task: &TaskId, run: RunId) -> bool {
    options.get("board").and_then(Value::as_str) == Some(board.to_string().as_str())
        && options.get("task").and_then(Value::as_str) == Some(task.to_string().as_str())
        && options.get("run").and_then(Value::as_i64) == Some(run.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_carry_the_run_and_keep_the_profile() {
        let board = BoardSlug::default_board();
        let task = TaskId::generate();
        let options = origin_options(&json!({"profile": "dev"}), &board, &task, RunId(7));
        assert_eq!(options["profile"], "dev");
        assert!(options_name_run(&options, &board, &task, RunId(7)));
        assert!(!options_name_run(&options, &board, &task, RunId(8)));
        assert!(!options_name_run(
            &json!({"profile": "dev"}),
            &board,
            &task,
            RunId(7)
        ));
    }
}
