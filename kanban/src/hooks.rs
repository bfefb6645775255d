//! Hook points of the board runtime: [`KanbanHook`] (claimed, worker started and finished,
//! completed, blocked, dispatch round) and [`DispatcherHooks`], which also carries the actor
//! hooks every worker session runs with. The dispatcher and the workers call them, always
//! after the store committed the change they report; plugins and the orchestrator implement them.

use std::sync::Arc;

use troupe_actors::hooks::HookRegistry;

use crate::domain::{BoardSlug, Run, Task, TaskId, WorkerId};
use crate::reports::{DispatchReport, WorkerReport};

/// Observer of the board runtime. Every method has an empty default, so an implementation
/// overrides only what it needs. Methods run on an actor's thread: keep them short and hand
/// slow work to a task of your own.
pub trait KanbanHook: Send + Sync + 'static {
    /// The dispatcher claimed `task` (now `running`) and opened `run` for it.
    fn task_claimed(&self, board: &BoardSlug, task: &Task, run: &Run) {
        let _ = (board, task, run);
    }

    /// A worker started on `task` as `worker`.
    fn worker_started(&self, board: &BoardSlug, task: &TaskId, worker: &WorkerId) {
        let _ = (board, task, worker);
    }

    /// A worker ended, however it ended.
    fn worker_finished(&self, board: &BoardSlug, report: &WorkerReport) {
        let _ = (board, report);
    }

    /// A worker completed its task through `kanban_complete`.
    fn task_completed(&self, board: &BoardSlug, task: &Task) {
        let _ = (board, task);
    }

    /// A worker blocked its task through `kanban_block`.
    fn task_blocked(&self, board: &BoardSlug, task: &Task, reason: &str) {
        let _ = (board, task, reason);
    }

    /// A dispatch round ended.
    fn dispatch_round(&self, board: &BoardSlug, report: &DispatchReport) {
        let _ = (board, report);
    }
}

/// Everything the dispatcher calls out to: board hooks, and the session hooks each worker's
/// session runs with (tool and model calls).
#[derive(Clone, Default)]
pub struct DispatcherHooks {
    /// Hooks handed to every worker session.
    pub session: HookRegistry,
    /// Board observers, called in order.
    pub kanban: Vec<Arc<dyn KanbanHook>>,
    /// Makes task workspaces ready; workers run in the process's directory when `None`.
    pub workspaces: Option<Arc<dyn crate::workspace::Workspaces>>,
    /// Reads what an earlier run of a task left cut off, so the next run is told; nothing is
    /// told when `None`.
    pub history: Option<Arc<dyn crate::run_history::RunHistory>>,
}

impl std::fmt::Debug for DispatcherHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatcherHooks")
            .field("kanban", &self.kanban.len())
            .field("workspaces", &self.workspaces.is_some())
            .field("history", &self.history.is_some())
            .finish_non_exhaustive()
    }
}

impl DispatcherHooks {
    /// No hooks at all.
    pub fn new() -> DispatcherHooks {
        DispatcherHooks::default()
    }

    /// Uses `session` for the workers' sessions.
    pub fn with_session_hooks(mut self, session: HookRegistry) -> DispatcherHooks {
        self.session = session;
        self
    }

    /// Makes each claimed task's workspace ready with `workspaces` before its worker starts.
    pub fn with_workspaces(
        mut self,
        workspaces: Arc<dyn crate::workspace::Workspaces>,
    ) -> DispatcherHooks {
        self.workspaces = Some(workspaces);
        self
    }

    /// Reads earlier runs' cut-off calls from `history` for each run's first message.
    pub fn with_run_history(
        mut self,
        history: Arc<dyn crate::run_history::RunHistory>,
    ) -> DispatcherHooks {
        self.history = Some(history);
        self
    }

    /// Adds a board observer.
    pub fn with_kanban_hook(mut self, hook: Arc<dyn KanbanHook>) -> DispatcherHooks {
        self.kanban.push(hook);
        self
    }

    /// Calls `f` on every board observer.
    pub(crate) fn each(&self, f: impl Fn(&dyn KanbanHook)) {
        for hook in &self.kanban {
            f(hook.as_ref());
        }
    }
}
