//! The tools a profile's workers share: the profile's own tools and the `kanban` tools, cut
//! into one [`ToolsetView`] once per state of the profile's tools instead of once per task.
//!
//! The kanban tools in it do not carry a task: each call finds its task through the calling
//! session (`SessionBindings` in `worker_tools`), which the worker binds when its session
//! opens and unbinds when it ends. A session of another profile, a subagent (its toolsets
//! never hold `kanban`) or a session whose worker has ended finds no task and is refused.
//! What a worker sees is what [`task_view`] gives for a single task: the profile's grant, its
//! `clarify` swapped for the board's, and the kanban tools.

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use actix::prelude::*;
    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;
    use troupe_tools::{CallContext, Registry, ToolDef};

    use super::*;
    use crate::domain::{BoardSlug, NewTask, WorkerId};
    use crate::store::{ClaimSpec, SqliteStore, Store};
    use crate::worker_tools::TerminalNote;

    struct Sink;
    impl Actor for Sink {
        type Context = Context<Self>;
    }
    impl Handler<TerminalNote> for Sink {
        type Result = ();
        fn handle(&mut self, _note: TerminalNote, _ctx: &mut Self::Context) {}
    }

    async fn shown(view: &ToolsetView, session: &str) -> (bool, Value) {
        let ctx = CallContext::new(session, "call", CancellationToken::new());
        let result = view.call("kanban_show", Default::default(), ctx).await;
        let text = result.to_model_text();
        (
            result.is_error,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    #[actix_rt::test]
    async fn shared_tools_act_on_the_calling_sessions_task_only() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
        let board = BoardSlug::default_board();
        let sink = Sink.start().recipient();
        let mut bindings = Vec::new();
        for title in ["first", "second"] {
            let task = store
                .create_task(&board, &NewTask::new(title))
                .await
                .unwrap()
                .task;
            let worker = WorkerId::local();
            store
                .claim_task(&board, &task.id, &ClaimSpec::new(worker.clone()))
                .await
                .unwrap();
            bindings.push(Arc::new(TaskBinding::new(
                Arc::clone(&store),
                board.clone(),
                task.id,
                worker,
                "coder",
                Duration::from_secs(60),
                sink.clone(),
            )));
        }
        let registry = Registry::with_tools([ToolDef::new("echo", "Echo.", json!({}))]);
        let catalog = WorkerCatalog::default();
        let view = catalog.view_for(&registry.view_all());
        // Made once: the second worker gets the very same definitions.
        let again = catalog.view_for(&registry.view_all());
        assert!(Arc::ptr_eq(
            view.get("kanban_show").unwrap(),
            again.get("kanban_show").unwrap()
        ));
        assert!(view.contains("echo") && view.contains("kanban_complete"));

        let one = catalog.bind("session-1", Arc::clone(&bindings[0]));
        let _two = catalog.bind("session-2", Arc::clone(&bindings[1]));
        let (error, task) = shown(&view, "session-1").await;
        assert!(!error, "{task}");
        assert_eq!(task["id"], json!(bindings[0].task()), "{task}");
        let (_, task) = shown(&again, "session-2").await;
        assert_eq!(task["id"], json!(bindings[1].task()), "{task}");
        // A session bound to no task reaches none, nor does one whose worker has ended.
        let (error, text) = shown(&view, "session-3").await;
        assert!(error, "{text}");
        assert!(text.to_string().contains("runs no board task"), "{text}");
        drop(one);
        let (error, text) = shown(&view, "session-1").await;
        assert!(error, "an ended worker's session reaches nothing: {text}");

        // A changed registry gives a new view with the new tool; the old one is not reused.
        registry.register(ToolDef::new("later", "Came later.", json!({})));
        let fresh = catalog.view_for(&registry.view_all());
        assert!(fresh.contains("later") && fresh.contains("kanban_show"));
        assert!(!view.contains("later"));
    }
}
