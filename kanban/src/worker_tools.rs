//! The `kanban` toolset a worker's session sees: `kanban_show`, `kanban_heartbeat`,
//! `kanban_comment`, `kanban_complete`, `kanban_block`, `kanban_create` and `kanban_link`.
//!
//! Every handler is bound to one task through a [`TaskBinding`]: it may read and change only
//! that task, except that `kanban_create` makes children of it and `kanban_link` links only the
//! task and its own children. Writes first confirm the worker still holds the lease, and
//! children may be assigned only to the worker's own profile or the allowed ones. A
//! [`Worker`](crate::worker::Worker) takes its profile's shared tools, which find the task
//! through the calling session ([`crate::worker_catalog`]); [`task_tools`] makes them for one
//! task (a resumed session, tests). `kanban_complete`
//! and `kanban_block` tell it what they did with a [`TerminalNote`] message, which it folds
//! into its [`TerminalCall`].

use std::sync::Arc;
use std::time::Duration;

use actix::{Message, Recipient};
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_actors::session::SessionHandle;
use troupe_actors::usage::Spend;
use troupe_tools::clarify::CLARIFY_TOOL;
use troupe_tools::{
    CallContext, Registry, ToolDef, ToolHandler, ToolHints, ToolKind, ToolResult, ToolsetView,
};

use crate::domain::{BoardSlug, NewTask, Task, TaskId, WorkerId};
use crate::evidence::{EvidenceLog, with_evidence};
use crate::store::{BlockRequest, Completion, Store, StoreError};

/// The toolset name of the worker tools.
pub const KANBAN_TOOLSET: &str = "kanban";
/// Comments shown by `kanban_show`.
const SHOW_COMMENTS: usize = 10;
/// The block kind used when the model gives none.
const DEFAULT_BLOCK_KIND: &str = "needs_input";

/// The terminal board call a worker made, if any.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TerminalCall {
    /// None yet.
    #[default]
    None,
    /// A terminal call is being written; the board may already show it.
    Pending,
    /// `kanban_complete` succeeded.
    Completed(Box<Task>),
    /// `kanban_block` succeeded, with the reason.
    Blocked(Box<Task>, String),
}

impl TerminalCall {
    /// What the worker knows after `note`: a call being written is pending unless an earlier
    /// one already succeeded (that one stays what the worker did until a later call
    /// succeeds), and a refused call forgets only its own pending mark.
    pub fn after(self, note: TerminalNote) -> TerminalCall {
        match (self, note) {
            (TerminalCall::None, TerminalNote::Begun) => TerminalCall::Pending,
            (TerminalCall::Pending, TerminalNote::Refused) => TerminalCall::None,
            (_, TerminalNote::Completed(task)) => TerminalCall::Completed(task),
            (_, TerminalNote::Blocked(task, reason)) => TerminalCall::Blocked(task, reason),
            (current, TerminalNote::Begun | TerminalNote::Refused) => current,
        }
    }

    /// Whether a terminal call was made or is being made.
    pub fn is_made(&self) -> bool {
        !matches!(self, TerminalCall::None)
    }
}

/// What a terminal tool tells its worker, in the order it happens: `Begun` before the board is
/// written (so a board event that follows is known to be the worker's own), then `Completed`,
/// `Blocked` or `Refused`.
#[derive(Debug, Clone, PartialEq, Message)]
#[rtype(result = "()")]
pub enum TerminalNote {
    /// A terminal call is about to be written.
    Begun,
    /// `kanban_complete` succeeded; the task as it is now.
    Completed(Box<Task>),
    /// `kanban_block` succeeded; the task as it is now, and the reason.
    Blocked(Box<Task>, String),
    /// The board refused the call that began.
    Refused,
}

/// What the tools of one worker are bound to: one task, one lease holder.
pub struct TaskBinding {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) board: BoardSlug,
    pub(crate) task: TaskId,
    pub(crate) worker: WorkerId,
    pub(crate) author: String,
    lease_ttl: Duration,
    /// Profiles children may be assigned to; always holds `author` (the worker's own).
    assignable: Vec<String>,
    /// Where the terminal calls are reported: the worker.
    report_to: Recipient<TerminalNote>,
    /// The calls that ran in this run, as the session's hooks recorded them.
    evidence: Arc<EvidenceLog>,
    /// Whether a completion waits for review instead of going to `done`.
    review: bool,
    /// The session whose spend a completion writes on the run, once it is open.
    session: std::sync::OnceLock<SessionHandle>,
    /// The spend a successful completion wrote, so the worker writes it again only when the
    /// session spent more after it.
    written_spend: std::sync::Mutex<Option<Spend>>,
}

impl std::fmt::Debug for TaskBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskBinding")
            .field("board", &self.board)
            .field("task", &self.task)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl TaskBinding {
    /// Binds tools to `task` on `board`, acting as `worker` (which must hold the lease);
    /// comments are signed `author` (the profile name) and terminal calls are reported to
    /// `report_to` (the worker). Children it creates may be assigned only to `author`; see
    /// [`TaskBinding::with_assignable`] for more.
    pub fn new(
        store: Arc<dyn Store>,
        board: BoardSlug,
        task: TaskId,
        worker: WorkerId,
        author: impl Into<String>,
        lease_ttl: Duration,
        report_to: Recipient<TerminalNote>,
    ) -> TaskBinding {
        let author = author.into();
        TaskBinding {
            store,
            board,
            task,
            worker,
            assignable: vec![author.clone()],
            author,
            lease_ttl,
            report_to,
            evidence: EvidenceLog::new(),
            review: false,
            session: std::sync::OnceLock::new(),
            written_spend: std::sync::Mutex::new(None),
        }
    }

    /// Makes `kanban_complete` write what `session` (the worker's) has spent on the run, in
    /// the completion's own transaction. Set once; later calls change nothing.
    pub fn spends_of(&self, session: SessionHandle) {
        let _ = self.session.set(session);
    }

    /// What a successful completion wrote as the run's spend, if it wrote any.
    pub fn written_spend(&self) -> Option<Spend> {
        *troupe_tools::sync::lock(&self.written_spend)
    }

    /// Makes `kanban_complete` send the task to `review` instead of `done`.
    pub fn with_review(mut self, review: bool) -> TaskBinding {
        self.review = review;
        self
    }

    /// The log the run's calls are recorded in: give its recorder to the session's hooks
    /// ([`crate::evidence::EvidenceRecorder`]).
    pub fn evidence(&self) -> &Arc<EvidenceLog> {
        &self.evidence
    }

    /// Also lets the worker assign children to the profiles in `assignable` (the default
    /// assignee, `kanban.worker_assignable_profiles`). Any other assignee is refused, so a
    /// worker cannot hand work to a profile with more tools.
    pub fn with_assignable(mut self, assignable: Vec<String>) -> TaskBinding {
        for name in assignable {
            if !self.assignable.contains(&name) {
                self.assignable.push(name);
            }
        }
        self
    }

    /// Confirms this worker still holds the task's lease (renewing it) before a write, so a
    /// worker whose lease was taken back cannot change the board under the new run.
    pub(crate) async fn holds_lease(&self) -> Result<(), ToolResult> {
        match self
            .store
            .heartbeat(&self.board, &self.task, &self.worker, self.lease_ttl)
            .await
        {
            Ok(_) => Ok(()),
            Err(
                error @ (StoreError::LeaseNotHeld { .. }
                | StoreError::InvalidTransition { .. }
                | StoreError::TaskNotFound { .. }),
            ) => Err(ToolResult::error(format!(
                "Refused: this worker no longer holds task {} ({error}); another run may own it now. Make no more board changes: end your turn.",
                self.task
            ))),
            Err(error) => Err(ToolResult::error(format!(
                "Not done: the board could not confirm this worker still holds task {} ({error}). Try again shortly.",
                self.task
            ))),
        }
    }

    /// The task the tools are bound to.
    pub fn task(&self) -> &TaskId {
        &self.task
    }

    /// Tells the worker how its terminal call is going. A worker that has ended no longer
    /// listens, and then there is no one left to tell.
    pub(crate) fn tell(&self, note: TerminalNote) {
        self.report_to.do_send(note);
    }

    /// Refuses any task id but the bound one.
    fn own_task(&self, args: &Map<String, Value>) -> Result<(), ToolResult> {
        match args.get("task_id") {
            None | Some(Value::Null) => Ok(()),
            Some(Value::String(id)) if id.trim().eq_ignore_ascii_case(self.task.as_str()) => Ok(()),
            Some(other) => Err(ToolResult::error(format!(
                "Refused: this worker may act only on its own task {own}, not {given}. Leave task_id out (it defaults to {own}); to hand work to others, create child tasks with kanban_create.",
                own = self.task,
                given = display(other),
            ))),
        }
    }

    /// The bound task's children, the only other tasks this worker may name.
    async fn own_children(&self) -> Result<Vec<TaskId>, ToolResult> {
        self.store
            .links(&self.board, &self.task)
            .await
            .map(|l| l.children)
            .map_err(store_error)
    }
}

/// Whose task a worker tool acts on.
#[derive(Clone)]
pub(crate) enum Bound {
    /// One task's, fixed when the tool was made ([`task_tools`]).
    Task(Arc<TaskBinding>),
    /// The calling session's, looked up on every call: the tools a profile's workers share
    /// ([`crate::worker_catalog`]), built once instead of once per task.
    Session(Arc<SessionBindings>),
}

impl Bound {
    /// The binding the call of `session` acts for; a session with none is refused.
    pub(crate) fn resolve(&self, session: &str) -> Result<Arc<TaskBinding>, ToolResult> {
        match self {
            Bound::Task(binding) => Ok(Arc::clone(binding)),
            Bound::Session(bindings) => bindings.get(session).ok_or_else(|| {
                ToolResult::error(
                    "Refused: this session runs no board task, so the kanban tools have nothing to act on. Do the work with your other tools and answer in text.",
                )
            }),
        }
    }
}

/// Which task each live worker session acts on, for the tools shared by a profile's workers.
/// A worker adds its session when the session opens and the entry goes when the worker's
/// [`SessionBinding`] is dropped, so a call can only ever reach the task of the session that
/// made it.
#[derive(Default)]
pub(crate) struct SessionBindings {
    by_session: std::sync::Mutex<std::collections::HashMap<String, Arc<TaskBinding>>>,
}

impl SessionBindings {
    fn get(&self, session: &str) -> Option<Arc<TaskBinding>> {
        troupe_tools::sync::lock(&self.by_session)
            .get(session)
            .cloned()
    }

    /// Binds `session` to `binding` until the returned guard is dropped.
    pub(crate) fn bind(
        self: &Arc<Self>,
        session: &str,
        binding: Arc<TaskBinding>,
    ) -> SessionBinding {
        troupe_tools::sync::lock(&self.by_session)
            .insert(session.to_string(), Arc::clone(&binding));
        SessionBinding {
            bindings: Arc::clone(self),
            session: session.to_string(),
            binding,
        }
    }
}

/// A session's entry in [`SessionBindings`]; dropping it removes the entry (only its own: a
/// later binding of the same session id is left alone).
pub(crate) struct SessionBinding {
    bindings: Arc<SessionBindings>,
    session: String,
    binding: Arc<TaskBinding>,
}

impl Drop for SessionBinding {
    fn drop(&mut self) {
        let mut map = troupe_tools::sync::lock(&self.bindings.by_session);
        if map
            .get(&self.session)
            .is_some_and(|b| Arc::ptr_eq(b, &self.binding))
        {
            map.remove(&self.session);
        }
    }
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn store_error(error: StoreError) -> ToolResult {
    ToolResult::error(format!("The board refused: {error}"))
}

fn str_arg(args: &Map<String, Value>, name: &str) -> Result<Option<String>, ToolResult> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ToolResult::error(format!(
            "'{name}' must be a string; got {other}. Send it as text."
        ))),
    }
}

fn required_str(args: &Map<String, Value>, name: &str) -> Result<String, ToolResult> {
    match str_arg(args, name)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(ToolResult::error(format!(
            "'{name}' is required and must not be empty; send it as a non-empty string."
        ))),
    }
}

fn id_list(args: &Map<String, Value>, name: &str) -> Result<Vec<TaskId>, ToolResult> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => TaskId::parse(s).map_err(|e| {
                    ToolResult::error(format!(
                        "'{name}' holds {s:?}, which is not a task id ({e}); ids look like t_1a2b3c4d."
                    ))
                }),
                other => Err(ToolResult::error(format!(
                    "'{name}' must be a list of task ids (strings); it holds {other}."
                ))),
            })
            .collect(),
        Some(other) => Err(ToolResult::error(format!(
            "'{name}' must be a list of task ids such as [\"t_1a2b3c4d\"]; got {other}."
        ))),
    }
}

fn id_arg(args: &Map<String, Value>, name: &str) -> Result<TaskId, ToolResult> {
    let raw = required_str(args, name)?;
    TaskId::parse(&raw).map_err(|e| {
        ToolResult::error(format!(
            "'{name}' is {raw:?}, which is not a task id ({e}); ids look like t_1a2b3c4d."
        ))
    })
}

fn task_json(task: &Task) -> Value {
    json!({
        "id": task.id,
        "title": task.title,
        "body": task.body,
        "status": task.status.as_str(),
        "assignee": task.assignee,
        "priority": task.priority,
        "result": task.result,
        "lease_expires_at": task.lease.as_ref().map(|l| l.expires_at.millis()),
    })
}

/// Which tool a handler runs.
#[derive(Debug, Clone, Copy)]
enum Op {
    Show,
    Heartbeat,
    Comment,
    Complete,
    Block,
    Create,
    Link,
}

struct Handler {
    op: Op,
    bound: Bound,
}

impl ToolHandler for Handler {
    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'static, ToolResult> {
        let binding = match self.bound.resolve(&ctx.session_id) {
            Ok(binding) => binding,
            Err(refused) => return Box::pin(std::future::ready(refused)),
        };
        let op = self.op;
        let session = ctx.session_id;
        Box::pin(async move {
            let result = match op {
                Op::Show => show(&binding, &args).await,
                Op::Heartbeat => heartbeat(&binding, &args).await,
                Op::Comment => comment(&binding, &args).await,
                Op::Complete => complete(&binding, &args, &session).await,
                Op::Block => block(&binding, &args).await,
                Op::Create => create(&binding, &args).await,
                Op::Link => link(&binding, &args).await,
            };
            result.unwrap_or_else(|error| error)
        })
    }
}

async fn show(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    b.own_task(args)?;
    let task = b.store.task(&b.board, &b.task).await.map_err(store_error)?;
    let links = b
        .store
        .links(&b.board, &b.task)
        .await
        .map_err(store_error)?;
    let comments = b
        .store
        .comments(&b.board, &b.task)
        .await
        .map_err(store_error)?;
    let skip = comments.len().saturating_sub(SHOW_COMMENTS);
    let comments: Vec<Value> = comments[skip..]
        .iter()
        .map(|c| json!({"author": c.author, "body": c.body}))
        .collect();
    let mut out = task_json(&task);
    if let Value::Object(map) = &mut out {
        map.insert("parents".into(), json!(links.parents));
        map.insert("children".into(), json!(links.children));
        map.insert("recent_comments".into(), Value::Array(comments));
    }
    Ok(ToolResult::json(out))
}

async fn heartbeat(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    b.own_task(args)?;
    let note = str_arg(args, "note")?;
    let lease = b
        .store
        .heartbeat(&b.board, &b.task, &b.worker, b.lease_ttl)
        .await
        .map_err(store_error)?;
    if let Some(note) = note.filter(|n| !n.trim().is_empty()) {
        b.store
            .add_comment(&b.board, &b.task, &b.author, &note)
            .await
            .map_err(store_error)?;
    }
    Ok(ToolResult::json(json!({
        "task_id": b.task,
        "lease_expires_at": lease.expires_at.millis(),
        "ok": true,
    })))
}

async fn comment(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    b.own_task(args)?;
    let body = required_str(args, "body")?;
    b.holds_lease().await?;
    let comment = b
        .store
        .add_comment(&b.board, &b.task, &b.author, &body)
        .await
        .map_err(store_error)?;
    Ok(ToolResult::json(
        json!({"task_id": b.task, "comment_id": comment.id, "ok": true}),
    ))
}

async fn complete(
    b: &TaskBinding,
    args: &Map<String, Value>,
    session: &str,
) -> Result<ToolResult, ToolResult> {
    b.own_task(args)?;
    let summary = str_arg(args, "summary")?;
    let result = str_arg(args, "result")?;
    let metadata = match args.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(Value::Object(m.clone())),
        Some(other) => {
            return Err(ToolResult::error(format!(
                "'metadata' must be a JSON object of details; got {other}."
            )));
        }
    };
    let created = id_list(args, "created_cards")?;
    if !created.is_empty() {
        let children = b.own_children().await?;
        let phantom: Vec<String> = created
            .iter()
            .filter(|id| !children.contains(id))
            .map(|id| id.to_string())
            .collect();
        if !phantom.is_empty() {
            return Err(ToolResult::error(format!(
                "Not completed: created_cards names tasks that are not children of {} made by this worker: {}. List only ids kanban_create returned, or leave created_cards out.",
                b.task,
                phantom.join(", ")
            )));
        }
    }
    if summary.is_none() && result.is_none() {
        return Err(ToolResult::error(
            "Send a 'summary' (one or two lines on what was done) or a 'result' (the full output) so the next tasks can use it.",
        ));
    }
    // What the result rests on comes from the session's own record of calls, never from
    // the model's arguments; the session is named so its transcript can be found.
    let mut metadata = with_evidence(metadata, &b.evidence);
    if let Value::Object(map) = &mut metadata {
        map.insert("session".into(), Value::String(session.to_string()));
    }
    // The spend so far is the run's whole spend: the session ends its turn after this call
    // without asking the model again (`SessionConfig::end_turn_after`).
    let spent = b.session.get().map(SessionHandle::spent);
    let done = Completion {
        result: result.or_else(|| summary.clone()),
        summary,
        metadata: Some(metadata),
        worker: Some(b.worker.clone()),
        usage: spent.and_then(|s| serde_json::to_value(s).ok()),
    };
    b.tell(TerminalNote::Begun);
    let written = if b.review {
        b.store.submit_for_review(&b.board, &b.task, &done).await
    } else {
        b.store.complete(&b.board, &b.task, &done).await
    };
    match written {
        Ok(task) => {
            if let Some(spent) = spent {
                *troupe_tools::sync::lock(&b.written_spend) = Some(spent);
            }
            b.tell(TerminalNote::Completed(Box::new(task.clone())));
            let next = if b.review {
                "The task was sent for review: it is done once a reviewer approves. End your turn now with a one-line note."
            } else {
                "The task is done. End your turn now with a one-line note."
            };
            Ok(ToolResult::json(json!({
                "task_id": task.id,
                "status": task.status.as_str(),
                "ok": true,
                "next": next,
            })))
        }
        Err(error) => {
            b.tell(TerminalNote::Refused);
            Err(store_error(error))
        }
    }
}

async fn block(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    b.own_task(args)?;
    let reason = required_str(args, "reason")?;
    let kind = str_arg(args, "kind")?
        .filter(|k| !k.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_BLOCK_KIND.to_string());
    let request = BlockRequest::new(kind, reason.clone()).by_worker(b.worker.clone());
    b.tell(TerminalNote::Begun);
    match b.store.block(&b.board, &b.task, &request).await {
        Ok(done) => {
            let task = done.task;
            b.tell(TerminalNote::Blocked(Box::new(task.clone()), reason));
            Ok(ToolResult::json(json!({
                "task_id": task.id,
                "status": task.status.as_str(),
                "ok": true,
                "next": "The task is parked. End your turn now.",
            })))
        }
        Err(error) => {
            b.tell(TerminalNote::Refused);
            Err(store_error(error))
        }
    }
}

async fn create(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    let title = required_str(args, "title")?;
    let body = str_arg(args, "body")?.unwrap_or_default();
    let assignee = str_arg(args, "assignee")?
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty());
    if let Some(name) = &assignee
        && !b.assignable.contains(name)
    {
        return Err(ToolResult::error(format!(
            "Refused: a worker may assign the tasks it creates only to {}; {name:?} is not one of them. Leave 'assignee' out (the task then goes to the default assignee) or name one of those.",
            b.assignable
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let priority = match args.get("priority") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().ok_or_else(|| {
            ToolResult::error(format!("'priority' must be a whole number; got {v}."))
        })?,
    };
    let extra = id_list(args, "parents")?;
    if !extra.is_empty() {
        let children = b.own_children().await?;
        let foreign: Vec<String> = extra
            .iter()
            .filter(|id| **id != b.task && !children.contains(id))
            .map(|id| id.to_string())
            .collect();
        if !foreign.is_empty() {
            return Err(ToolResult::error(format!(
                "Refused: 'parents' may name only {} or tasks you created under it; {} are not. Create those tasks first with kanban_create and use the ids it returns.",
                b.task,
                foreign.join(", ")
            )));
        }
    }
    let mut new = NewTask::new(title)
        .with_body(body)
        .with_priority(priority)
        .with_parent(b.task.clone())
        .with_created_by(b.author.clone());
    // The child's runs continue this run's trace (the call's span is current here).
    new.traceparent = troupe_actors::trace::TraceSpan::current().traceparent();
    if let Some(assignee) = assignee {
        new = new.with_assignee(assignee);
    }
    if let Some(key) = str_arg(args, "idempotency_key")? {
        new = new.with_idempotency_key(key);
    }
    for parent in extra {
        if parent != b.task && !new.parents.contains(&parent) {
            new = new.with_parent(parent);
        }
    }
    b.holds_lease().await?;
    let created = b
        .store
        .create_task(&b.board, &new)
        .await
        .map_err(store_error)?;
    Ok(ToolResult::json(json!({
        "task_id": created.task.id,
        "status": created.task.status.as_str(),
        "parents": new.parents,
        "created": created.created,
    })))
}

async fn link(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    let parent = id_arg(args, "parent_id")?;
    let child = id_arg(args, "child_id")?;
    let children = b.own_children().await?;
    let mine = |id: &TaskId| *id == b.task || children.contains(id);
    if !mine(&parent) || !mine(&child) {
        return Err(ToolResult::error(format!(
            "Refused: kanban_link may only link {} and the tasks you created under it; {} is not one of them.",
            b.task,
            if mine(&parent) { &child } else { &parent }
        )));
    }
    b.holds_lease().await?;
    b.store
        .link(&b.board, &parent, &child)
        .await
        .map_err(store_error)?;
    Ok(ToolResult::json(
        json!({"parent_id": parent, "child_id": child, "ok": true}),
    ))
}

fn def(name: &str, description: &str, parameters: Value, op: Op, bound: &Bound) -> ToolDef {
    let hints = ToolHints {
        read_only: matches!(op, Op::Show),
        parallel_safe: matches!(op, Op::Show),
        idempotent: matches!(op, Op::Show | Op::Heartbeat),
        ..ToolHints::default()
    };
    ToolDef::new(name, description, parameters)
        .with_toolset(KANBAN_TOOLSET)
        // Always offered directly, never deferred behind tool search: the protocol needs them.
        .with_kind(ToolKind::Core)
        .with_hints(hints)
        .with_handler(Arc::new(Handler {
            op,
            bound: bound.clone(),
        }))
}

fn own_task_param() -> Value {
    json!({
        "type": "string",
        "description": "Your task's id. Optional: it can only be your own task."
    })
}

/// The worker tools bound to `binding`'s task: the seven `kanban_*` tools, and the board's
/// `clarify`, which [`task_view`] keeps only when the profile offers `clarify`.
pub fn task_tools(binding: &Arc<TaskBinding>) -> Vec<ToolDef> {
    tool_defs(&Bound::Task(Arc::clone(binding)))
}

/// The worker tools acting for `bound`.
pub(crate) fn tool_defs(binding: &Bound) -> Vec<ToolDef> {
    vec![
        crate::worker_question::clarify_tool(binding),
        def(
            "kanban_show",
            "Read your task: title, body, status, parents, children and recent comments.",
            json!({"type": "object", "properties": {"task_id": own_task_param()}}),
            Op::Show,
            binding,
        ),
        def(
            "kanban_heartbeat",
            "Tell the board you are still working, which renews your claim on the task. Call it now and then during long work. An optional note is kept as a comment.",
            json!({"type": "object", "properties": {
                "task_id": own_task_param(),
                "note": {"type": "string", "description": "A short progress note (optional)."}
            }}),
            Op::Heartbeat,
            binding,
        ),
        def(
            "kanban_comment",
            "Leave a comment on your task, for people and for the agents that read the task later.",
            json!({"type": "object", "properties": {
                "task_id": own_task_param(),
                "body": {"type": "string", "description": "The comment text."}
            }, "required": ["body"]}),
            Op::Comment,
            binding,
        ),
        def(
            "kanban_complete",
            "Finish your task. Give a summary (one or two lines) and/or the full result; the tasks that depend on yours will read them. This ends your work on the board.",
            json!({"type": "object", "properties": {
                "task_id": own_task_param(),
                "summary": {"type": "string", "description": "What was done, in one or two lines."},
                "result": {"type": "string", "description": "The full output of the task (defaults to the summary)."},
                "metadata": {"type": "object", "description": "Structured details worth keeping (optional)."},
                "created_cards": {"type": "array", "items": {"type": "string"}, "description": "Ids of the child tasks you created, to be checked (optional)."}
            }}),
            Op::Complete,
            binding,
        ),
        def(
            "kanban_block",
            "Stop work on your task because something is missing: a decision, access, or another task (kind 'dependency'). Say exactly what is needed. This ends your work on the board.",
            json!({"type": "object", "properties": {
                "task_id": own_task_param(),
                "reason": {"type": "string", "description": "What is needed before the task can go on."},
                "kind": {"type": "string", "description": "The kind of block: 'dependency' to wait for other tasks, or a word such as 'needs_input' (the default)."}
            }, "required": ["reason"]}),
            Op::Block,
            binding,
        ),
        def(
            "kanban_create",
            "Create a child task of your task (it waits until yours is complete). Use 'parents' to make it also wait for other children you created, e.g. a final task that needs all of them. Returns the new task's id.",
            json!({"type": "object", "properties": {
                "title": {"type": "string", "description": "A short title."},
                "body": {"type": "string", "description": "What to do, with everything the worker needs."},
                "assignee": {"type": "string", "description": "The profile that should run it (optional): your own profile, the default assignee or one the board allows workers to assign to."},
                "priority": {"type": "integer", "description": "Higher runs first (default 0)."},
                "parents": {"type": "array", "items": {"type": "string"}, "description": "Other tasks you created that it must wait for (optional)."},
                "idempotency_key": {"type": "string", "description": "If a live task already has this key, it is returned instead of a new one (optional)."}
            }, "required": ["title"]}),
            Op::Create,
            binding,
        ),
        def(
            "kanban_link",
            "Make one of your child tasks wait for another (parent_id must finish before child_id). Only your task and the tasks you created under it can be linked.",
            json!({"type": "object", "properties": {
                "parent_id": {"type": "string", "description": "The task that must finish first."},
                "child_id": {"type": "string", "description": "The task that waits."}
            }, "required": ["parent_id", "child_id"]}),
            Op::Link,
            binding,
        ),
    ]
}

/// A view holding the tools of `profile_view` (minus any other `kanban` tools) and the
/// task-bound `tools`: a small registry of its own per worker, so no other session can see
/// these handlers. The connector gateway follows when the profile's view grants connectors.
/// When the profile offers troupe's `clarify`, the worker gets the board's `clarify` in its
/// place ([`crate::worker_question`]): a worker's question parks its task.
pub fn task_view(profile_view: &ToolsetView, tools: Vec<ToolDef>) -> ToolsetView {
    let registry = Registry::new();
    let mut asks = false;
    for def in profile_view.tools() {
        let is_kanban =
            def.toolset.as_deref() == Some(KANBAN_TOOLSET) || def.name.starts_with("kanban_");
        if def.name == CLARIFY_TOOL && def.toolset.as_deref() == Some("core") {
            asks = true;
            continue;
        }
        if !is_kanban {
            registry.register(def.as_ref().clone());
        }
    }
    for def in tools {
        if def.name == CLARIFY_TOOL && !asks {
            continue;
        }
        registry.register(def);
    }
    // Hosted connectors go with the copy when the profile's view grants them.
    registry.set_connectors(profile_view.connectors());
    registry.view_all()
}
