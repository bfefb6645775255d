//! The tools a profile's workers share: the profile's own tools and the `kanban` tools, cut
//! into one [`ToolsetView`] once per state of the profile's tools instead of once per task.
//!
//! The kanban tools in it do not carry a task: each call finds its task through the calling
//! session ([`SessionBindings`]), which the worker binds when its session opens and unbinds
//! when it ends. A session of another profile, a subagent (its toolsets never hold `kanban`)
//! or a session whose worker has ended finds no task and is refused. What a worker sees is
//! what [`task_view`] gives for a single task: the profile's grant, its `clarify` swapped for
//! the board's, and the kanban tools.

use std::sync::{Arc, Mutex};

use troupe_tools::ToolsetView;

use crate::worker_tools::{
    Bound, SessionBinding, SessionBindings, TaskBinding, task_view, tool_defs,
};

/// How many states of a profile's tools are kept (a registry that changed makes a new one).
const KEPT: usize = 4;

/// One profile's shared worker view, per state of the profile's tools, and the sessions
/// bound to tasks. Cheap to clone; clones share everything.
#[derive(Clone, Default)]
pub struct WorkerCatalog {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    bindings: Arc<SessionBindings>,
    /// (the profile's view it was made from, the worker view), most recent last.
    views: Mutex<Vec<(ToolsetView, ToolsetView)>>,
}

impl std::fmt::Debug for WorkerCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCatalog").finish_non_exhaustive()
    }
}

impl WorkerCatalog {
    /// The worker view over `profile_view` (a current view, as [`ToolsetView::refreshed`]
    /// gives): the one already made when the profile's tools are the same, else a new one.
    pub fn view_for(&self, profile_view: &ToolsetView) -> ToolsetView {
        let mut views = troupe_tools::sync::lock(&self.inner.views);
        // A view made from a registry that changed since may hold tools (or their handlers)
        // that are gone: dropped, never reused.
        views.retain(|(from, _)| !from.is_stale());
        if let Some((_, view)) = views
            .iter()
            .find(|(from, _)| same_tools(from, profile_view))
        {
            return view.clone();
        }
        let view = task_view(
            profile_view,
            tool_defs(&Bound::Session(Arc::clone(&self.inner.bindings))),
        );
        if views.len() >= KEPT {
            views.remove(0);
        }
        views.push((profile_view.clone(), view.clone()));
        view
    }

    /// Makes the kanban tools of this catalog's views act on `binding`'s task when `session`
    /// calls them, until the returned guard is dropped. Bind before the session's first turn.
    pub(crate) fn bind(&self, session: &str, binding: Arc<TaskBinding>) -> SessionBinding {
        self.inner.bindings.bind(session, binding)
    }
}

/// Whether two current views of one registry hold the same tools and grant the same
/// connector gateway: then the worker views made from them are the same.
fn same_tools(a: &ToolsetView, b: &ToolsetView) -> bool {
    let gateway = match (a.connectors(), b.connectors()) {
        (None, None) => true,
        (Some(x), Some(y)) => Arc::ptr_eq(&x, &y),
        _ => false,
    };
    Arc::ptr_eq(a.registry(), b.registry())
        && !b.is_stale()
        && a.fingerprint() == b.fingerprint()
        && a.len() == b.len()
        && gateway
}
