//! What several test modules use: the approval-free supervisor, a worker profile over a
//! scripted model, quick dispatcher settings, an in-flight counter for model calls, and a
//! stand-in for the worker that receives a task's terminal notes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix::{Actor, Addr, Context, Handler, Message};
use serde_json::{Map, Value, json};
use troupe_actors::model::{ModelProvider, Script, ScriptTurn};
use troupe_actors::supervisor::{ApprovalConfig, ApprovalMode, DefaultRules, Supervisor};
use troupe_kanban::dispatcher::DispatcherConfig;
use troupe_kanban::domain::{BoardSlug, TaskId, WorkerId};
use troupe_kanban::profiles::WorkerProfile;
use troupe_kanban::store::Store;
use troupe_kanban::worker_tools::{TaskBinding, TerminalCall, TerminalNote};
use troupe_tools::{Registry, ToolResult};

/// How long a test waits for a board to settle before it fails: a guard against a hung test,
/// not a timing assertion.
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);

/// A supervisor that asks for no approvals (on the current actix system).
pub(crate) fn supervisor() -> Addr<Supervisor> {
    let config = ApprovalConfig {
        mode: ApprovalMode::Off,
        ..ApprovalConfig::default()
    };
    Supervisor::new(config, Arc::new(DefaultRules::new(Vec::new()))).start()
}

/// A profile named `name` running `provider` with no tools but the kanban ones.
pub(crate) fn profile(name: &str, provider: Arc<dyn ModelProvider>) -> WorkerProfile {
    WorkerProfile::new(name, provider, Registry::new().view_all())
}

/// A worker that completes its task at once.
pub(crate) fn completes() -> Script {
    Script::new()
        .turn(ScriptTurn::tool_call(
            "kanban_complete",
            json!({"summary": "did the work", "result": "the output"}),
        ))
        .turn(ScriptTurn::text("done"))
}

/// Dispatcher settings with short ticks, polls and stop grace.
pub(crate) fn fast() -> DispatcherConfig {
    DispatcherConfig::default()
        .with_interval(Duration::from_millis(50))
        .with_poll_interval(Duration::from_millis(20))
        .with_stop_grace(Duration::from_millis(200))
}

/// A tool call's arguments from a JSON object (anything else is no arguments).
pub(crate) fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// What a tool result says to the model.
pub(crate) fn text(result: &ToolResult) -> String {
    result.to_model_text()
}

/// Lowers an in-flight count when a model call ends, however it ends.
pub(crate) struct CallGuard(Arc<AtomicUsize>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a model call in flight in `now` and keeps the most seen at once in `most`, until the
/// guard is dropped.
pub(crate) fn enter(now: &Arc<AtomicUsize>, most: &AtomicUsize) -> CallGuard {
    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(n, Ordering::SeqCst);
    CallGuard(Arc::clone(now))
}

/// Stands in for the worker a task's tools report to: folds their terminal notes as the worker
/// does, and answers what it knows after every note sent before the question.
pub(crate) struct Notes {
    known: TerminalCall,
}

impl Actor for Notes {
    type Context = Context<Self>;
}

impl Handler<TerminalNote> for Notes {
    type Result = ();

    fn handle(&mut self, note: TerminalNote, _ctx: &mut Self::Context) {
        self.known = std::mem::take(&mut self.known).after(note);
    }
}

/// Asks [`Notes`] what it knows.
#[derive(Message)]
#[rtype(result = "TerminalCall")]
pub(crate) struct Known;

impl Handler<Known> for Notes {
    type Result = actix::MessageResult<Known>;

    fn handle(&mut self, _: Known, _ctx: &mut Self::Context) -> Self::Result {
        actix::MessageResult(self.known.clone())
    }
}

/// Tools bound to `task` as `worker` would have them (signed `author`, a 60 s lease), reporting
/// to a [`Notes`] (on the current actix system) instead of a worker.
pub(crate) fn bind(
    store: &Arc<dyn Store>,
    board: &BoardSlug,
    task: &TaskId,
    worker: WorkerId,
    author: &str,
) -> (TaskBinding, Addr<Notes>) {
    let notes = Notes {
        known: TerminalCall::None,
    }
    .start();
    let binding = TaskBinding::new(
        Arc::clone(store),
        board.clone(),
        task.clone(),
        worker,
        author,
        Duration::from_secs(60),
        notes.clone().recipient(),
    );
    (binding, notes)
}
