//! The board's data: boards, tasks, statuses, links, comments, events, runs, attachments, and
//! the worker identities that own leases.
//!
//! These are plain values shared by every [`Store`](crate::store::Store) implementation, the
//! dispatcher and the CLI. Identifiers and slugs are parsed once here, so the rest of the crate
//! only ever holds valid ones.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Failure limit used when neither the task nor the configuration sets one.
pub const DEFAULT_FAILURE_LIMIT: u32 = 2;
/// How many times the same block kind may recur before the task goes to `triage`.
pub const BLOCK_RECURRENCE_LIMIT: u32 = 2;
/// Consecutive clean exits without a terminal board call before the task is given up.
pub const PROTOCOL_VIOLATION_LIMIT: u32 = 3;
/// Default lease length of a claim: 15 minutes.
pub const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(15 * 60);
/// Largest attachment a task may hold: 25 MiB.
pub const ATTACHMENT_CAP_BYTES: u64 = 25 * 1024 * 1024;
/// The `completed` event keeps at most this many characters of the summary's first line.
pub const COMPLETED_SUMMARY_CHARS: usize = 400;
/// The board that always exists.
pub const DEFAULT_BOARD: &str = "default";

/// A value from outside (a user, a model, a file) that does not fit the model's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A board slug broke the slug rules.
    #[error(
        "board slug {slug:?} is not valid: {why}; use 1-64 characters of lowercase letters, \
         digits, '-' or '_', starting with a letter or digit (for example \"research-2\")"
    )]
    BadSlug {
        /// What was sent.
        slug: String,
        /// Which rule it broke.
        why: &'static str,
    },
    /// A task id was not `t_` followed by 8 hex digits.
    #[error("{id:?} is not a task id; task ids look like \"t_1a2b3c4d\" (t_ and 8 hex digits)")]
    BadTaskId {
        /// What was sent.
        id: String,
    },
    /// A status token is not one of the nine statuses.
    #[error(
        "{status:?} is not a task status; use one of triage, todo, scheduled, ready, running, \
         blocked, review, done, archived"
    )]
    BadStatus {
        /// What was sent.
        status: String,
    },
    /// A worker identity string was not `host:pid:uuid`.
    #[error("{worker:?} is not a worker identity; expected \"host:pid:uuid\"")]
    BadWorkerId {
        /// What was sent.
        worker: String,
    },
    /// A field's value broke its rule.
    #[error("{field} is not valid: {why}")]
    BadField {
        /// The field's name as the caller knows it.
        field: &'static str,
        /// What was wrong and what to send instead.
        why: String,
    },
}

/// A moment, in milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current time of this machine's clock.
    pub fn now() -> Timestamp {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            // A clock set before 1970 is treated as the epoch rather than failing.
            .unwrap_or(0);
        Timestamp(millis)
    }

    /// This moment plus `d`, saturating instead of overflowing.
    pub fn plus(self, d: Duration) -> Timestamp {
        let add = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(add))
    }

    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A board's name in paths, URLs and the CLI: lowercase letters, digits, `-` and `_`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BoardSlug(String);

impl BoardSlug {
    /// Checks `raw` against the slug rules; uppercase letters are lowercased first.
    pub fn parse(raw: &str) -> Result<BoardSlug, ModelError> {
        let slug = raw.trim().to_lowercase();
        let bad = |why| ModelError::BadSlug {
            slug: raw.to_string(),
            why,
        };
        if slug.is_empty() {
            return Err(bad("it is empty"));
        }
        if slug.len() > 64 {
            return Err(bad("it is longer than 64 characters"));
        }
        if !slug.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(bad("it must start with a letter or digit"));
        }
        if !slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return Err(bad("it holds a character other than a-z, 0-9, '-' or '_'"));
        }
        Ok(BoardSlug(slug))
    }

    /// The board that always exists.
    pub fn default_board() -> BoardSlug {
        BoardSlug(DEFAULT_BOARD.to_string())
    }

    /// Whether this is the `default` board.
    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_BOARD
    }

    /// The slug as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BoardSlug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for BoardSlug {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BoardSlug::parse(s)
    }
}

impl TryFrom<String> for BoardSlug {
    type Error = ModelError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        BoardSlug::parse(&s)
    }
}

impl From<BoardSlug> for String {
    fn from(s: BoardSlug) -> String {
        s.0
    }
}

/// A board: an independent queue of tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Board {
    /// Its slug, unique per store.
    pub slug: BoardSlug,
    /// A display name (the slug when none was given).
    pub name: String,
    /// Free text about what the board is for.
    pub description: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was archived; archived boards accept no new tasks and no claims.
    pub archived_at: Option<Timestamp>,
}

/// What a new board is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBoard {
    /// The slug.
    pub slug: BoardSlug,
    /// Display name; the slug when `None`.
    pub name: Option<String>,
    /// Free text about the board.
    pub description: String,
}

impl NewBoard {
    /// A board with only a slug.
    pub fn new(slug: BoardSlug) -> NewBoard {
        NewBoard {
            slug,
            name: None,
            description: String::new(),
        }
    }

    /// Sets the display name.
    pub fn with_name(mut self, name: impl Into<String>) -> NewBoard {
        self.name = Some(name.into());
        self
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> NewBoard {
        self.description = description.into();
        self
    }
}

/// A task's id: `t_` and 8 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

impl TaskId {
    /// A fresh random id.
    pub fn generate() -> TaskId {
        let bytes = Uuid::new_v4().into_bytes();
        TaskId(format!(
            "t_{:02x}{:02x}{:02x}{:02x}",
            bytes[0], bytes[1], bytes[2], bytes[3]
        ))
    }

    /// Checks `raw`; uppercase hex digits are accepted and lowercased.
    pub fn parse(raw: &str) -> Result<TaskId, ModelError> {
        let id = raw.trim().to_ascii_lowercase();
        let ok = id.len() == 10
            && id.starts_with("t_")
            && id[2..].chars().all(|c| c.is_ascii_hexdigit());
        if ok {
            Ok(TaskId(id))
        } else {
            Err(ModelError::BadTaskId {
                id: raw.to_string(),
            })
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TaskId {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::parse(s)
    }
}

impl TryFrom<String> for TaskId {
    type Error = ModelError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        TaskId::parse(&s)
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.0
    }
}

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

/// Who runs a worker: the host, the process and a uuid per worker actor.
///
/// A lease belongs to one of these rather than to a local PID, so dispatchers on several hosts
/// can share a board and tell their own leases from the others'.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorkerId {
    /// The host name of the machine the worker runs on.
    pub host: String,
    /// The operating-system process id of the worker's process on that host.
    pub pid: u32,
    /// Unique per worker actor.
    pub worker: Uuid,
}

impl WorkerId {
    /// An identity for a new worker in this process on this host.
    pub fn local() -> WorkerId {
        WorkerId {
            host: local_host_name(),
            pid: std::process::id(),
            worker: Uuid::new_v4(),
        }
    }

    /// An identity from its parts.
    pub fn new(host: impl Into<String>, pid: u32, worker: Uuid) -> WorkerId {
        WorkerId {
            host: host.into(),
            pid,
            worker,
        }
    }

    /// Parses the `host:pid:uuid` form written by [`fmt::Display`].
    pub fn parse(raw: &str) -> Result<WorkerId, ModelError> {
        let bad = || ModelError::BadWorkerId {
            worker: raw.to_string(),
        };
        // The host may itself hold ':' (an IPv6 literal), so split from the right.
        let mut parts = raw.rsplitn(3, ':');
        let uuid = parts
            .next()
            .and_then(|u| Uuid::parse_str(u).ok())
            .ok_or_else(bad)?;
        let pid = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let host = parts.next().filter(|h| !h.is_empty()).ok_or_else(bad)?;
        Ok(WorkerId {
            host: host.to_string(),
            pid,
            worker: uuid,
        })
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.host, self.pid, self.worker)
    }
}

/// This machine's host name, or `localhost` when the system does not say.
fn local_host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// The right to run a task until `expires_at`, held by one worker for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it.
    pub worker: WorkerId,
    /// When it lapses unless a heartbeat extends it.
    pub expires_at: Timestamp,
    /// The run it belongs to.
    pub run_id: RunId,
}

/// A run's id, unique and increasing within a board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub i64);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run {}", self.0)
    }
}

/// An event's id: strictly increasing within a board; the live feed's cursor.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct EventId(pub i64);

impl EventId {
    /// The cursor before the first event.
    pub const START: EventId = EventId(0);
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

/// What happened, as recorded in the event log. The token is stored and shown as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "each variant is named by its spec token, shown by as_str"
)]
pub enum EventKind {
    Created,
    Promoted,
    Claimed,
    ClaimRejected,
    ClaimExtended,
    Completed,
    Blocked,
    DependencyWait,
    BlockLoopDetected,
    Unblocked,
    Archived,
    ReviewRequested,
    ChangesRequested,
    Scheduled,
    Specified,
    Assigned,
    Edited,
    Reprioritized,
    Linked,
    Unlinked,
    Commented,
    Attached,
    AttachmentRemoved,
    Heartbeat,
    Reclaimed,
    Crashed,
    TimedOut,
    SpawnFailed,
    ProtocolViolation,
    GaveUp,
    RateLimited,
    BoardCreated,
    BoardArchived,
}

impl EventKind {
    /// Every kind the store writes.
    pub const ALL: [EventKind; 33] = [
        EventKind::Created,
        EventKind::Promoted,
        EventKind::Claimed,
        EventKind::ClaimRejected,
        EventKind::ClaimExtended,
        EventKind::Completed,
        EventKind::Blocked,
        EventKind::DependencyWait,
        EventKind::BlockLoopDetected,
        EventKind::Unblocked,
        EventKind::Archived,
        EventKind::ReviewRequested,
        EventKind::ChangesRequested,
        EventKind::Scheduled,
        EventKind::Specified,
        EventKind::Assigned,
        EventKind::Edited,
        EventKind::Reprioritized,
        EventKind::Linked,
        EventKind::Unlinked,
        EventKind::Commented,
        EventKind::Attached,
        EventKind::AttachmentRemoved,
        EventKind::Heartbeat,
        EventKind::Reclaimed,
        EventKind::Crashed,
        EventKind::TimedOut,
        EventKind::SpawnFailed,
        EventKind::ProtocolViolation,
        EventKind::GaveUp,
        EventKind::RateLimited,
        EventKind::BoardCreated,
        EventKind::BoardArchived,
    ];

    /// The token as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Promoted => "promoted",
            EventKind::Claimed => "claimed",
            EventKind::ClaimRejected => "claim_rejected",
            EventKind::ClaimExtended => "claim_extended",
            EventKind::Completed => "completed",
            EventKind::Blocked => "blocked",
            EventKind::DependencyWait => "dependency_wait",
            EventKind::BlockLoopDetected => "block_loop_detected",
            EventKind::Unblocked => "unblocked",
            EventKind::Archived => "archived",
            EventKind::ReviewRequested => "review_requested",
            EventKind::ChangesRequested => "changes_requested",
            EventKind::Scheduled => "scheduled",
            EventKind::Specified => "specified",
            EventKind::Assigned => "assigned",
            EventKind::Edited => "edited",
            EventKind::Reprioritized => "reprioritized",
            EventKind::Linked => "linked",
            EventKind::Unlinked => "unlinked",
            EventKind::Commented => "commented",
            EventKind::Attached => "attached",
            EventKind::AttachmentRemoved => "attachment_removed",
            EventKind::Heartbeat => "heartbeat",
            EventKind::Reclaimed => "reclaimed",
            EventKind::Crashed => "crashed",
            EventKind::TimedOut => "timed_out",
            EventKind::SpawnFailed => "spawn_failed",
            EventKind::ProtocolViolation => "protocol_violation",
            EventKind::GaveUp => "gave_up",
            EventKind::RateLimited => "rate_limited",
            EventKind::BoardCreated => "board_created",
            EventKind::BoardArchived => "board_archived",
        }
    }

    /// Reads a stored token.
    pub fn parse(token: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == token)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a board's append-only event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Strictly increasing within the board; pass the last one seen to `events_since`.
    pub id: EventId,
    /// The task it is about; `None` for board-level events.
    pub task_id: Option<TaskId>,
    /// The run it is about, when there is one.
    pub run_id: Option<RunId>,
    /// What happened.
    pub kind: EventKind,
    /// Details, as a JSON object.
    pub payload: serde_json::Value,
    /// When it was recorded.
    pub created_at: Timestamp,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunOutcome {
    /// The worker completed the task.
    Completed,
    /// The worker (or an operator) blocked the task.
    Blocked,
    /// The worker process or actor died.
    Crashed,
    /// The run exceeded the task's max runtime.
    TimedOut,
    /// The worker could not be started.
    SpawnFailed,
    /// The worker ended without a terminal board call.
    ProtocolViolation,
    /// The failure limit was reached on this run.
    GaveUp,
    /// The lease lapsed, or the task was archived, and the claim was taken back.
    Reclaimed,
    /// The provider rate-limited the worker; requeued without counting a failure.
    RateLimited,
    /// The worker asked for a review.
    ReviewRequested,
}

impl RunOutcome {
    /// The token as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Completed => "completed",
            RunOutcome::Blocked => "blocked",
            RunOutcome::Crashed => "crashed",
            RunOutcome::TimedOut => "timed_out",
            RunOutcome::SpawnFailed => "spawn_failed",
            RunOutcome::ProtocolViolation => "protocol_violation",
            RunOutcome::GaveUp => "gave_up",
            RunOutcome::Reclaimed => "reclaimed",
            RunOutcome::RateLimited => "rate_limited",
            RunOutcome::ReviewRequested => "review_requested",
        }
    }

    /// Reads a stored token.
    pub fn parse(token: &str) -> Option<RunOutcome> {
        [
            RunOutcome::Completed,
            RunOutcome::Blocked,
            RunOutcome::Crashed,
            RunOutcome::TimedOut,
            RunOutcome::SpawnFailed,
            RunOutcome::ProtocolViolation,
            RunOutcome::GaveUp,
            RunOutcome::Reclaimed,
            RunOutcome::RateLimited,
            RunOutcome::ReviewRequested,
        ]
        .into_iter()
        .find(|o| o.as_str() == token)
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt at a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Its id.
    pub id: RunId,
    /// The task attempted.
    pub task_id: TaskId,
    /// The assignee profile at claim time.
    pub profile: Option<String>,
    /// The status the task was claimed from (`ready` or `review`); a reclaim returns there.
    pub source_status: TaskStatus,
    /// Who held the lease; `None` for a run synthesized at completion of an unclaimed task.
    pub worker: Option<WorkerId>,
    /// When the lease lapses (last value while open).
    pub lease_expires_at: Option<Timestamp>,
    /// The task's max runtime when the run began.
    pub max_runtime_seconds: Option<u64>,
    /// Latest heartbeat.
    pub last_heartbeat_at: Option<Timestamp>,
    /// When it began.
    pub started_at: Timestamp,
    /// When it ended; `None` while open.
    pub ended_at: Option<Timestamp>,
    /// How it ended; `None` while open.
    pub outcome: Option<RunOutcome>,
    /// Short summary given at the end.
    pub summary: Option<String>,
    /// Structured details given at the end.
    pub metadata: Option<serde_json::Value>,
    /// The error, for failed runs.
    pub error: Option<String>,
    /// What the run's model requests used and cost (tokens, dollars, working seconds), as
    /// the worker recorded it when the run ended; `None` for runs no worker drove.
    #[serde(default)]
    pub usage: Option<serde_json::Value>,
}

/// A file kept with a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Increasing within a board.
    pub id: i64,
    /// The task it belongs to.
    pub task_id: TaskId,
    /// Its name (no directories).
    pub filename: String,
    /// Its MIME type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Who uploaded it.
    pub uploaded_by: Option<String>,
    /// When.
    pub created_at: Timestamp,
}

/// A file to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAttachment {
    /// Its name; directories are refused.
    pub filename: String,
    /// Its MIME type.
    pub content_type: String,
    /// The bytes, at most [`ATTACHMENT_CAP_BYTES`].
    pub content: Vec<u8>,
    /// Who uploads it.
    pub uploaded_by: Option<String>,
}

/// Counts of a board's tasks per status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardStats {
    /// `(status, count)` for every status, in lifecycle order.
    pub by_status: Vec<(TaskStatus, u64)>,
    /// Open runs.
    pub open_runs: u64,
    /// The newest event id (the cursor a live feed would start after).
    pub last_event_id: EventId,
}

impl BoardStats {
    /// The count for one status.
    pub fn count(&self, status: TaskStatus) -> u64 {
        self.by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_the_rules() {
        assert_eq!(
            BoardSlug::parse("Research-2").unwrap().as_str(),
            "research-2"
        );
        assert_eq!(BoardSlug::parse("a_b").unwrap().as_str(), "a_b");
        assert!(BoardSlug::parse("").is_err());
        assert!(BoardSlug::parse("-lead").is_err());
        assert!(BoardSlug::parse("_lead").is_err());
        assert!(BoardSlug::parse("has space").is_err());
        assert!(BoardSlug::parse("dots.no").is_err());
        assert!(BoardSlug::parse("ünï").is_err());
        assert!(BoardSlug::parse(&"a".repeat(64)).is_ok());
        assert!(BoardSlug::parse(&"a".repeat(65)).is_err());
        let msg = BoardSlug::parse("x/y").unwrap_err().to_string();
        assert!(msg.contains("x/y") && msg.contains("lowercase"), "{msg}");
    }

    #[test]
    fn task_ids_round_trip() {
        for _ in 0..100 {
            let id = TaskId::generate();
            assert_eq!(TaskId::parse(id.as_str()).unwrap(), id);
        }
        assert_eq!(TaskId::parse("T_1A2B3C4D").unwrap().as_str(), "t_1a2b3c4d");
        assert!(TaskId::parse("t_1a2b3c4").is_err());
        assert!(TaskId::parse("t_1a2b3c4g").is_err());
        assert!(TaskId::parse("x_1a2b3c4d").is_err());
    }

    #[test]
    fn statuses_and_kinds_round_trip() {
        for s in TaskStatus::ALL {
            assert_eq!(s.as_str().parse::<TaskStatus>().unwrap(), s);
        }
        assert!("finished".parse::<TaskStatus>().is_err());
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
    }

    #[test]
    fn worker_ids_round_trip_even_with_colons_in_the_host() {
        let w = WorkerId::new("fe80::1", 42, Uuid::new_v4());
        assert_eq!(WorkerId::parse(&w.to_string()).unwrap(), w);
        assert!(WorkerId::parse("host:notapid:x").is_err());
        assert!(WorkerId::local().pid > 0);
    }

    #[test]
    fn dir_workspaces_must_be_absolute() {
        assert!(Workspace::dir("relative/path").is_err());
        assert_eq!(Workspace::dir("/abs").unwrap().path(), Some("/abs"));
    }
}
