//! A task and what describes it: its status, workspace, fields, the edits and filters that
//! name it, its links and comments.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use std::time::Duration;

use super::{Lease, ModelError, TaskId, Timestamp};

/// Where a task stands. See the transitions table in the store's docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Needs a human or a decomposer to specify it before it can run.
    Triage,
    /// Waiting for its parents.
    Todo,
    /// Parked until a time.
    Scheduled,
    /// Every parent is done or archived; a dispatcher may claim it.
    Ready,
    /// Claimed by a worker holding a lease.
    Running,
    /// Stopped until someone unblocks it.
    Blocked,
    /// Waiting for a reviewer.
    Review,
    /// Finished.
    Done,
    /// Put away; counts as finished for its children.
    Archived,
}

impl TaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [TaskStatus; 9] = [
        TaskStatus::Triage,
        TaskStatus::Todo,
        TaskStatus::Scheduled,
        TaskStatus::Ready,
        TaskStatus::Running,
        TaskStatus::Blocked,
        TaskStatus::Review,
        TaskStatus::Done,
        TaskStatus::Archived,
    ];

    /// The status token as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Triage => "triage",
            TaskStatus::Todo => "todo",
            TaskStatus::Scheduled => "scheduled",
            TaskStatus::Ready => "ready",
            TaskStatus::Running => "running",
            TaskStatus::Blocked => "blocked",
            TaskStatus::Review => "review",
            TaskStatus::Done => "done",
            TaskStatus::Archived => "archived",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        TaskStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == t)
            .ok_or_else(|| ModelError::BadStatus {
                status: s.to_string(),
            })
    }
}

/// Where a worker does a task's work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum Workspace {
    /// A fresh scratch directory, removed after completion.
    Scratch,
    /// A git worktree, at the given path when one was named.
    Worktree(Option<String>),
    /// An existing absolute directory.
    Dir(String),
}

impl Workspace {
    /// The kind token as stored: `scratch`, `worktree` or `dir`.
    pub fn kind(&self) -> &'static str {
        match self {
            Workspace::Scratch => "scratch",
            Workspace::Worktree(_) => "worktree",
            Workspace::Dir(_) => "dir",
        }
    }

    /// The path, when the kind has one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Workspace::Scratch => None,
            Workspace::Worktree(p) => p.as_deref(),
            Workspace::Dir(p) => Some(p),
        }
    }

    /// Rebuilds a workspace from its stored kind and path.
    pub fn from_parts(kind: &str, path: Option<String>) -> Result<Workspace, ModelError> {
        match (kind, path) {
            ("scratch", _) => Ok(Workspace::Scratch),
            ("worktree", p) => Ok(Workspace::Worktree(p)),
            ("dir", Some(p)) => Workspace::dir(p),
            (other, _) => Err(ModelError::BadField {
                field: "workspace",
                why: format!(
                    "{other:?} is not a workspace kind; use scratch, worktree, worktree:<path> \
                     or dir:<absolute path>"
                ),
            }),
        }
    }

    /// A `dir` workspace; the path must be absolute.
    pub fn dir(path: impl Into<String>) -> Result<Workspace, ModelError> {
        let path = path.into();
        if !path.starts_with('/') {
            return Err(ModelError::BadField {
                field: "workspace",
                why: format!("dir workspace {path:?} is not an absolute path; send dir:/abs/path"),
            });
        }
        Ok(Workspace::Dir(path))
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Its id.
    pub id: TaskId,
    /// One-line title.
    pub title: String,
    /// What to do, in full.
    pub body: String,
    /// The profile that should run it; `None` is unassigned.
    pub assignee: Option<String>,
    /// Where it stands.
    pub status: TaskStatus,
    /// Higher runs first.
    pub priority: i64,
    /// Soft namespace, inherited from the first parent that has one.
    pub tenant: Option<String>,
    /// Creating again with this key returns this task instead of a duplicate.
    pub idempotency_key: Option<String>,
    /// Who created it (a profile, a user, a worker).
    pub created_by: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When its first run started.
    pub started_at: Option<Timestamp>,
    /// When it was completed.
    pub completed_at: Option<Timestamp>,
    /// Where the work happens.
    pub workspace: Workspace,
    /// Longest a run may take before the dispatcher stops it.
    pub max_runtime_seconds: Option<u64>,
    /// Failures allowed before it is given up; overrides the configured limit.
    pub max_retries: Option<u32>,
    /// The result written on completion.
    pub result: Option<String>,
    /// Failures (crash, timeout, spawn failure) since the last completion.
    pub consecutive_failures: u32,
    /// Clean exits without a terminal board call since the last completion.
    pub protocol_violations: u32,
    /// The error of the latest failure.
    pub last_failure_error: Option<String>,
    /// Kind of the latest block.
    pub block_kind: Option<String>,
    /// Reason given with the latest block.
    pub block_reason: Option<String>,
    /// How many times in a row the latest block kind has come back.
    pub block_recurrences: u32,
    /// The live claim, while `running`.
    pub lease: Option<Lease>,
    /// When the lease holder last showed signs of life.
    pub last_heartbeat_at: Option<Timestamp>,
    /// While `scheduled`: when it becomes dispatchable.
    pub scheduled_until: Option<Timestamp>,
    /// What one run may spend; the profile's budget still holds (the tighter of the two).
    #[serde(default)]
    pub budget: Option<troupe_actors::usage::Budget>,
    /// The W3C `traceparent` of whoever created it: its runs continue that trace, on any host.
    #[serde(default)]
    pub traceparent: Option<String>,
}

/// The status a new task starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialStatus {
    /// `ready` when every parent is done or archived (or there are none), else `todo`.
    #[default]
    Auto,
    /// `triage`: needs specifying first.
    Triage,
    /// `blocked`: parked by a human.
    Blocked,
}

/// What a new task is made from. Build it with [`NewTask::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    /// One-line title; must not be empty.
    pub title: String,
    /// What to do.
    pub body: String,
    /// The profile that should run it.
    pub assignee: Option<String>,
    /// Higher runs first.
    pub priority: i64,
    /// Soft namespace; inherited from the first parent with one when `None`.
    pub tenant: Option<String>,
    /// Deduplicates creation: an existing non-archived task with this key is returned instead.
    pub idempotency_key: Option<String>,
    /// Tasks that must be done (or archived) before this one is ready.
    pub parents: Vec<TaskId>,
    /// Who creates it.
    pub created_by: Option<String>,
    /// Where the work happens.
    pub workspace: Workspace,
    /// Longest a run may take.
    pub max_runtime_seconds: Option<u64>,
    /// Failures allowed before it is given up.
    pub max_retries: Option<u32>,
    /// What one run may spend, within the profile's budget.
    pub budget: Option<troupe_actors::usage::Budget>,
    /// The creator's W3C `traceparent`; kept only when well-formed.
    pub traceparent: Option<String>,
    /// The status to start in.
    pub initial: InitialStatus,
}

impl NewTask {
    /// A task with a title and defaults for everything else.
    pub fn new(title: impl Into<String>) -> NewTask {
        NewTask {
            title: title.into(),
            body: String::new(),
            assignee: None,
            priority: 0,
            tenant: None,
            idempotency_key: None,
            parents: Vec::new(),
            created_by: None,
            workspace: Workspace::Scratch,
            max_runtime_seconds: None,
            max_retries: None,
            budget: None,
            traceparent: None,
            initial: InitialStatus::Auto,
        }
    }

    /// Sets the body.
    pub fn with_body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the assignee profile.
    pub fn with_assignee(mut self, assignee: impl Into<String>) -> Self {
        self.assignee = Some(assignee.into());
        self
    }

    /// Sets the priority.
    pub fn with_priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the tenant.
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Sets the idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Adds a parent.
    pub fn with_parent(mut self, parent: TaskId) -> Self {
        self.parents.push(parent);
        self
    }

    /// Sets who creates it.
    pub fn with_created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }

    /// Sets the workspace.
    pub fn with_workspace(mut self, workspace: Workspace) -> Self {
        self.workspace = workspace;
        self
    }

    /// Sets the longest a run may take.
    pub fn with_max_runtime(mut self, d: Duration) -> Self {
        self.max_runtime_seconds = Some(d.as_secs());
        self
    }

    /// Sets the failures allowed before it is given up.
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = Some(n);
        self
    }

    /// Sets the starting status.
    pub fn with_initial(mut self, initial: InitialStatus) -> Self {
        self.initial = initial;
        self
    }
}

/// Field edits to a task; `None` leaves a field as it is. Status changes go through the
/// transition methods of the store instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskPatch {
    /// New title.
    pub title: Option<String>,
    /// New body.
    pub body: Option<String>,
    /// New priority.
    pub priority: Option<i64>,
    /// New tenant; `Some(None)` clears it.
    pub tenant: Option<Option<String>>,
    /// New longest run time; `Some(None)` clears it.
    pub max_runtime_seconds: Option<Option<u64>>,
    /// New failure allowance; `Some(None)` clears it.
    pub max_retries: Option<Option<u32>>,
    /// New workspace.
    pub workspace: Option<Workspace>,
    /// New result text.
    pub result: Option<String>,
}

impl TaskPatch {
    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == TaskPatch::default()
    }
}

/// Order of [`TaskFilter`] results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSort {
    /// Oldest first.
    #[default]
    Created,
    /// Newest first.
    CreatedDesc,
    /// Highest priority first, then oldest.
    Priority,
    /// Most recently changed first.
    Updated,
}

/// Which tasks [`Store::list_tasks`](crate::store::Store::list_tasks) returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only these statuses; empty means every status except `archived`.
    pub statuses: Vec<TaskStatus>,
    /// Include archived tasks when `statuses` is empty.
    pub include_archived: bool,
    /// Only this assignee.
    pub assignee: Option<String>,
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Order.
    pub sort: TaskSort,
    /// At most this many.
    pub limit: Option<usize>,
}

/// A dependency: `child` waits for `parent`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Link {
    /// The task that must finish first.
    pub parent: TaskId,
    /// The task that waits.
    pub child: TaskId,
}

/// A task's parents and children.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLinks {
    /// Tasks this one waits for.
    pub parents: Vec<TaskId>,
    /// Tasks that wait for this one.
    pub children: Vec<TaskId>,
}

/// A note on a task; the protocol agents use to talk to each other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// Increasing within a board.
    pub id: i64,
    /// The task it is on.
    pub task_id: TaskId,
    /// Who wrote it.
    pub author: String,
    /// What it says.
    pub body: String,
    /// When it was written.
    pub created_at: Timestamp,
}
