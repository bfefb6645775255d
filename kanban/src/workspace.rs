//! Task workspaces: where a worker does a task's work. The dispatcher's [`Workspaces`] (set
//! through [`DispatcherHooks::with_workspaces`](crate::hooks::DispatcherHooks::with_workspaces))
//! makes a claimed task's workspace ready before its worker's session opens; the directory then
//! becomes the working directory and path-check root of the session and of every subagent it
//! delegates to (through the session hook it hands out). A workspace that cannot be made ready
//! blocks the task with the reason, and counts as no failure of the worker. Without a
//! [`Workspaces`], workers run in the process's directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_actors::hooks::Hook;

use crate::domain::{BoardSlug, Task};

/// The block kind of a task whose workspace could not be made ready.
pub const WORKSPACE_BLOCK_KIND: &str = "workspace";

/// Makes task workspaces ready and binds sessions to them. Implemented by the orchestrator
/// (scratch directories, `dir:` paths, git worktrees).
pub trait Workspaces: Send + Sync + 'static {
    /// Makes `task`'s workspace ready and returns its directory; `Err` is a reason a person
    /// can act on (the task is then blocked with it).
    fn prepare(
        &self,
        board: &BoardSlug,
        task: &Task,
    ) -> BoxFuture<'static, Result<PathBuf, String>>;

    /// A session hook that puts every session it runs in (the worker's and its subagents')
    /// in `dir`: working directory and the root of its path checks; and on the terminal
    /// backend of `profile` (the worker's), when it has one of its own.
    fn session_hook(&self, dir: &Path, profile: &str) -> Arc<dyn Hook>;
}
