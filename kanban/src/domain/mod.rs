//! The board's data: boards, tasks, statuses, links, comments, events, runs, attachments, and
//! the worker identities that own leases.
//!
//! These are plain values shared by every [`Store`](crate::store::Store) implementation, the
//! dispatcher and the CLI. Identifiers and slugs are parsed once here, so the rest of the crate
//! only ever holds valid ones.
//!
//! This file holds the limits, the identifiers (boards, tasks, workers, runs, events) and the
//! lease; `task.rs` a task and what describes it; `history.rs` events, runs, attachments and
//! the board's counts. All of it is named from here.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod history;
mod task;

pub use history::{Attachment, BoardStats, Event, EventKind, NewAttachment, Run, RunOutcome};
pub use task::{
    Comment, InitialStatus, Link, NewTask, Task, TaskFilter, TaskLinks, TaskPatch, TaskSort,
    TaskStatus, Workspace,
};

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

/// The next task id this process hands out (see [`TaskId::generate`]).
fn id_sequence() -> &'static AtomicU32 {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    NEXT.get_or_init(|| AtomicU32::new(random_u32()))
}

fn random_u32() -> u32 {
    let b = Uuid::new_v4().into_bytes();
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A task's id: `t_` and 8 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

impl TaskId {
    /// A fresh id: the next one of this process's sequence.
    ///
    /// The sequence starts at a random point, so processes writing to one board mostly draw
    /// from ranges of their own. Consecutive ids matter for speed: tasks are mostly worked in
    /// the order they were made, so the indexes keyed by task id (its events, its runs) grow at
    /// one end instead of touching a random page for each task, which on a board of 100,000
    /// tasks made every commit write several scattered pages.
    pub fn generate() -> TaskId {
        TaskId(format!(
            "t_{:08x}",
            id_sequence().fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Moves the sequence to a new random point, after [`TaskId::generate`] gave an id that
    /// was taken (another process drawing from the same range): drawing on from there would
    /// collide with each id that process made after it.
    pub(crate) fn jump() {
        id_sequence().store(random_u32(), Ordering::Relaxed);
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

    fn id_number(id: &TaskId) -> u32 {
        u32::from_str_radix(&id.as_str()[2..], 16).unwrap()
    }

    #[test]
    fn task_ids_follow_each_other_until_a_jump() {
        // Other tests draw ids on other threads at the same time, so "next" means "soon after"
        // (fewer than 10,000 drawn in between); a jump lands that close by chance once in
        // 400,000 runs.
        let a = id_number(&TaskId::generate());
        let b = id_number(&TaskId::generate());
        assert!(
            b.wrapping_sub(a) >= 1 && b.wrapping_sub(a) < 10_000,
            "{a:x} then {b:x}"
        );
        TaskId::jump();
        let c = id_number(&TaskId::generate());
        assert!(
            c.wrapping_sub(b) >= 10_000,
            "a jump from {b:x} landed at {c:x}"
        );
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
