//! The text of every statement the SQLite store runs on a board, fixed at compile time.
//!
//! rusqlite keeps prepared statements by their text, so a statement built with `format!` on
//! each call costs an allocation and a copy before the cache is even asked, and a text that
//! varies is a statement prepared again. Here every text is a constant, made with `concat!`
//! over the column lists of `rows.rs`. Where a query's shape does vary, it comes in fixed
//! variants: a task listing is one of [`LIST_TASKS`] (status filter × assignee/tenant filter ×
//! order, the limit bound), a list of statuses or assignees is bound as one JSON array and read
//! with `json_each`. The compare-and-swap of a status change, whose columns each operation
//! chooses, is built once per shape in the process and kept ([`swap`]).

use std::sync::{Arc, Mutex};

use troupe_tools::sync::lock;

use crate::domain::{TaskFilter, TaskSort};
use crate::store::backend::{self, Set};
use crate::store::rows::{
    attachment_cols, board_cols, comment_cols, event_cols, run_cols, task_cols,
};

// ---- reads ----

/// The board row.
pub(super) const BOARD_ROW: &str = concat!("SELECT ", board_cols!(), " FROM board WHERE id = 1");

/// Whether the board is archived (no row: no board).
pub(super) const BOARD_ARCHIVED: &str = "SELECT archived_at IS NOT NULL FROM board WHERE id = 1";

/// One task by id (?1).
pub(super) const TASK_BY_ID: &str = concat!("SELECT ", task_cols!(), " FROM tasks WHERE id = ?1");

/// Whether a task id (?1) is taken.
pub(super) const TASK_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?1)";

/// The newest live task holding an idempotency key (?1).
pub(super) const TASK_BY_KEY: &str = concat!(
    "SELECT ",
    task_cols!(),
    " FROM tasks WHERE idempotency_key = ?1 AND status <> 'archived' \
     ORDER BY created_at DESC LIMIT 1"
);

/// One task listing: `status_where` then `filter`, then the order, then `LIMIT ?4`.
macro_rules! listing {
    ($status_where:literal, $filter:literal, $order:literal) => {
        concat!(
            "SELECT ",
            task_cols!(),
            " FROM tasks WHERE ",
            $status_where,
            $filter,
            $order,
            " LIMIT ?4"
        )
    };
}

/// The four orders of a listing, in the order of [`sort_index`].
macro_rules! listing_orders {
    ($status_where:literal, $filter:literal) => {
        [
            listing!($status_where, $filter, " ORDER BY created_at, id"),
            listing!($status_where, $filter, " ORDER BY created_at DESC, id DESC"),
            listing!(
                $status_where,
                $filter,
                " ORDER BY priority DESC, created_at, id"
            ),
            listing!($status_where, $filter, " ORDER BY updated_at DESC, id"),
        ]
    };
}

/// The four assignee/tenant filters of a listing, in the order of [`filter_index`].
macro_rules! listing_filters {
    ($status_where:literal) => {
        [
            listing_orders!($status_where, ""),
            listing_orders!($status_where, " AND assignee = ?2"),
            listing_orders!($status_where, " AND tenant = ?3"),
            listing_orders!($status_where, " AND assignee = ?2 AND tenant = ?3"),
        ]
    };
}

/// Every task listing, by [`StatusWhere`], then filter, then order. Parameters: ?1 the status
/// (one status's name, or a JSON array of names), ?2 the assignee, ?3 the tenant, ?4 the limit
/// (`-1`: none); a variant that does not use one still has it bound.
pub(super) const LIST_TASKS: [[[&str; 4]; 4]; 4] = [
    listing_filters!("status <> 'archived'"),
    listing_filters!("1 = 1"),
    // One status is an equality, so the status index also gives the order.
    listing_filters!("status = ?1"),
    listing_filters!("status IN (SELECT value FROM json_each(?1))"),
];

/// Which statuses a listing takes: the first index of [`LIST_TASKS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StatusWhere {
    /// Every status but `archived`.
    Live = 0,
    /// Every status.
    All = 1,
    /// One status (?1 its name).
    One = 2,
    /// Several (?1 a JSON array of names).
    Many = 3,
}

impl StatusWhere {
    /// The statuses `f` asks for.
    pub(super) fn of(f: &TaskFilter) -> StatusWhere {
        match f.statuses.len() {
            0 if f.include_archived => StatusWhere::All,
            0 => StatusWhere::Live,
            1 => StatusWhere::One,
            _ => StatusWhere::Many,
        }
    }
}

/// The second index of [`LIST_TASKS`]: which of assignee and tenant the listing filters on.
pub(super) fn filter_index(assignee: bool, tenant: bool) -> usize {
    usize::from(assignee) + 2 * usize::from(tenant)
}

/// The third index of [`LIST_TASKS`]: the order ([`backend::task_order`]).
pub(super) fn sort_index(sort: TaskSort) -> usize {
    match sort {
        TaskSort::Created => 0,
        TaskSort::CreatedDesc => 1,
        TaskSort::Priority => 2,
        TaskSort::Updated => 3,
    }
}

/// The listing statement for `f`.
pub(super) fn list_tasks(f: &TaskFilter) -> &'static str {
    LIST_TASKS[StatusWhere::of(f) as usize][filter_index(f.assignee.is_some(), f.tenant.is_some())]
        [sort_index(f.sort)]
}

/// Running tasks whose lease lapsed by ?1, oldest lapse first.
pub(super) const PICK_LAPSED: &str = "SELECT id FROM tasks WHERE status = 'running' \
     AND claim_expires <= ?1 ORDER BY claim_expires, id";

/// Scheduled tasks due by ?1.
pub(super) const PICK_DUE: &str =
    "SELECT id FROM tasks WHERE status = 'scheduled' AND scheduled_until <= ?1 ORDER BY id";

/// `todo` tasks with no open parent, best first.
pub(super) const PICK_UNBLOCKED: &str = "SELECT t.id FROM tasks t WHERE t.status = 'todo' \
     AND NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id \
       WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived')) \
     ORDER BY t.priority DESC, t.created_at, t.id";

/// The best ready task.
pub(super) const NEXT_READY: &str =
    "SELECT id FROM tasks WHERE status = 'ready' ORDER BY priority DESC, created_at, id LIMIT 1";

/// The best ready task of one assignee (?1).
pub(super) const NEXT_READY_OF: &str = "SELECT id FROM tasks WHERE status = 'ready' \
     AND assignee = ?1 ORDER BY priority DESC, created_at, id LIMIT 1";

/// The best ready task of several assignees (?1 a JSON array of names).
pub(super) const NEXT_READY_AMONG: &str = "SELECT id FROM tasks WHERE status = 'ready' \
     AND assignee IN (SELECT value FROM json_each(?1)) \
     ORDER BY priority DESC, created_at, id LIMIT 1";

/// A task's (?1) parents, oldest link first.
pub(super) const PARENTS: &str =
    "SELECT parent_id FROM task_links WHERE child_id = ?1 ORDER BY created_at, parent_id";

/// A task's (?1) children, oldest link first.
pub(super) const CHILDREN: &str =
    "SELECT child_id FROM task_links WHERE parent_id = ?1 ORDER BY created_at, child_id";

/// A task's (?1) parents that are neither done nor archived.
pub(super) const OPEN_PARENTS: &str = "SELECT l.parent_id FROM task_links l \
     JOIN tasks p ON p.id = l.parent_id \
     WHERE l.child_id = ?1 AND p.status NOT IN ('done', 'archived') ORDER BY l.parent_id";

/// Whether the link ?1 → ?2 exists.
pub(super) const HAS_LINK: &str =
    "SELECT EXISTS (SELECT 1 FROM task_links WHERE parent_id = ?1 AND child_id = ?2)";

/// Every link.
pub(super) const ALL_LINKS: &str =
    "SELECT parent_id, child_id FROM task_links ORDER BY parent_id, child_id";

/// Tasks per status.
pub(super) const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM tasks GROUP BY status";

/// Open runs and the newest event id.
pub(super) const COUNT_OPEN: &str = "SELECT (SELECT COUNT(*) FROM task_runs WHERE ended_at IS NULL), \
     (SELECT MAX(id) FROM task_events)";

/// The status a run (?1) was claimed from.
pub(super) const RUN_SOURCE: &str = "SELECT source_status FROM task_runs WHERE id = ?1";

/// One run by id (?1).
pub(super) const RUN_BY_ID: &str = concat!("SELECT ", run_cols!(), " FROM task_runs WHERE id = ?1");

/// A task's (?1) runs, oldest first.
pub(super) const TASK_RUNS: &str = concat!(
    "SELECT ",
    run_cols!(),
    " FROM task_runs WHERE task_id = ?1 ORDER BY id"
);

/// A task's (?1) comments, oldest first.
pub(super) const TASK_COMMENTS: &str = concat!(
    "SELECT ",
    comment_cols!(),
    " FROM task_comments WHERE task_id = ?1 ORDER BY id"
);

/// Up to ?2 events after id ?1.
pub(super) const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_cols!(),
    " FROM task_events WHERE id > ?1 ORDER BY id LIMIT ?2"
);

/// A task's (?1) events, oldest first.
pub(super) const EVENTS_OF: &str = concat!(
    "SELECT ",
    event_cols!(),
    " FROM task_events WHERE task_id = ?1 ORDER BY id"
);

/// A task's (?1) attachments, without their bytes.
pub(super) const TASK_ATTACHMENTS: &str = concat!(
    "SELECT ",
    attachment_cols!(),
    " FROM task_attachments WHERE task_id = ?1 ORDER BY id"
);

/// One attachment (?1), without its bytes.
pub(super) const ATTACHMENT_BY_ID: &str = concat!(
    "SELECT ",
    attachment_cols!(),
    " FROM task_attachments WHERE id = ?1"
);

/// An attachment's (?1) bytes.
pub(super) const ATTACHMENT_BYTES: &str = "SELECT content FROM task_attachments WHERE id = ?1";

// ---- writes ----

/// Whether the board row exists.
pub(super) const BOARD_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM board WHERE id = 1)";

/// The board row: slug, name, description, creation time.
pub(super) const INSERT_BOARD: &str = "INSERT INTO board (id, slug, name, description, created_at) \
     VALUES (1, ?1, ?2, ?3, ?4)";

/// Stamps the board archived at ?1.
pub(super) const ARCHIVE_BOARD: &str = "UPDATE board SET archived_at = ?1 WHERE id = 1";

/// A new task row.
pub(super) const INSERT_TASK: &str = "INSERT INTO tasks (id, title, body, assignee, status, \
     priority, tenant, idempotency_key, created_by, created_at, updated_at, workspace_kind, \
     workspace_path, max_runtime_seconds, max_retries, budget, traceparent) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";

/// A task's (?11) editable fields.
pub(super) const WRITE_FIELDS: &str = "UPDATE tasks SET title = ?1, body = ?2, priority = ?3, \
     tenant = ?4, max_runtime_seconds = ?5, max_retries = ?6, workspace_kind = ?7, \
     workspace_path = ?8, result = ?9, updated_at = ?10 WHERE id = ?11";

/// A task's (?3) assignee (?1), its failure counters cleared, at ?2.
pub(super) const WRITE_ASSIGNEE: &str = "UPDATE tasks SET assignee = ?1, consecutive_failures = 0, \
     protocol_violations = 0, updated_at = ?2 WHERE id = ?3";

/// A run row.
pub(super) const INSERT_RUN: &str = "INSERT INTO task_runs (task_id, profile, source_status, \
     claim_lock, claim_expires, max_runtime_seconds, last_heartbeat_at, started_at, ended_at, \
     outcome, summary, metadata) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// Ends an open run (?6) at ?1.
pub(super) const END_RUN: &str = "UPDATE task_runs SET ended_at = ?1, outcome = ?2, summary = ?3, \
     metadata = ?4, error = ?5 WHERE id = ?6 AND ended_at IS NULL";

/// Extends a run's (?3) lease to ?1, heartbeat at ?2.
pub(super) const EXTEND_RUN: &str =
    "UPDATE task_runs SET claim_expires = ?1, last_heartbeat_at = ?2 WHERE id = ?3";

/// A run's (?2) usage (?1).
pub(super) const WRITE_USAGE: &str = "UPDATE task_runs SET usage = ?1 WHERE id = ?2";

/// A link ?1 → ?2 made at ?3.
pub(super) const INSERT_LINK: &str =
    "INSERT INTO task_links (parent_id, child_id, created_at) VALUES (?1, ?2, ?3)";

/// Removes the link ?1 → ?2.
pub(super) const DELETE_LINK: &str =
    "DELETE FROM task_links WHERE parent_id = ?1 AND child_id = ?2";

/// A comment.
pub(super) const INSERT_COMMENT: &str =
    "INSERT INTO task_comments (task_id, author, body, created_at) VALUES (?1, ?2, ?3, ?4)";

/// An attachment.
pub(super) const INSERT_ATTACHMENT: &str = "INSERT INTO task_attachments (task_id, filename, \
     content_type, size, content, uploaded_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Removes an attachment (?1).
pub(super) const DELETE_ATTACHMENT: &str = "DELETE FROM task_attachments WHERE id = ?1";

/// An event: task, run, kind, payload (JSON text), time.
pub(super) const INSERT_EVENT: &str = "INSERT INTO task_events (task_id, run_id, kind, payload, \
     created_at) VALUES (?1, ?2, ?3, ?4, ?5)";

/// Every fixed statement, for the test that prepares them all.
#[cfg(test)]
pub(super) const FIXED: &[&str] = &[
    BOARD_ROW,
    BOARD_ARCHIVED,
    TASK_BY_ID,
    TASK_EXISTS,
    TASK_BY_KEY,
    PICK_LAPSED,
    PICK_DUE,
    PICK_UNBLOCKED,
    NEXT_READY,
    NEXT_READY_OF,
    NEXT_READY_AMONG,
    PARENTS,
    CHILDREN,
    OPEN_PARENTS,
    HAS_LINK,
    ALL_LINKS,
    COUNT_BY_STATUS,
    COUNT_OPEN,
    RUN_SOURCE,
    RUN_BY_ID,
    TASK_RUNS,
    TASK_COMMENTS,
    EVENTS_AFTER,
    EVENTS_OF,
    TASK_ATTACHMENTS,
    ATTACHMENT_BY_ID,
    ATTACHMENT_BYTES,
    BOARD_EXISTS,
    INSERT_BOARD,
    ARCHIVE_BOARD,
    INSERT_TASK,
    WRITE_FIELDS,
    WRITE_ASSIGNEE,
    INSERT_RUN,
    END_RUN,
    EXTEND_RUN,
    WRITE_USAGE,
    INSERT_LINK,
    DELETE_LINK,
    INSERT_COMMENT,
    INSERT_ATTACHMENT,
    DELETE_ATTACHMENT,
    INSERT_EVENT,
];

// ---- status changes ----

/// The compare-and-swap head and tail: the new status and time (?1, ?2), then the row (?3) and
/// the status it was read in (?4); the columns an operation writes go between.
const SWAP_STATUS: (&str, &str) = (
    "UPDATE tasks SET status = ?1, updated_at = ?2",
    " WHERE id = ?3 AND status = ?4",
);

/// Most shapes of status change kept. The operations of `ops/` use about fifteen; were a bug to
/// make shapes without end, the ones past this are built on each call instead of kept forever.
const MOST_SWAPS: usize = 64;

/// One column of a status change as its statement text sees it: how it is written, and which.
type SetShape = (u8, &'static str);

fn shape(set: &Set<'_>) -> SetShape {
    match *set {
        Set::Null(col) => (0, col),
        Set::Zero(col) => (1, col),
        Set::Int(col, _) => (2, col),
        Set::Text(col, _) => (3, col),
        Set::TextIfGiven(col, _) => (4, col),
        Set::IntIfUnset(col, _) => (5, col),
        Set::EndLease => (6, ""),
    }
}

/// A status change's shape and its statement.
type KeptSwap = (Box<[SetShape]>, Arc<str>);

/// The status changes built so far, by shape.
static SWAPS: Mutex<Vec<KeptSwap>> = Mutex::new(Vec::new());

/// The compare-and-swap statement writing `sets` (see [`backend::swap_statement`]; their
/// values are bound from ?5 on): built the first time its shape is asked for, then the same
/// text every time.
pub(super) fn swap(sets: &[Set<'_>]) -> Arc<str> {
    let same = |kept: &[SetShape]| {
        kept.len() == sets.len() && kept.iter().zip(sets).all(|(k, s)| *k == shape(s))
    };
    let mut swaps = lock(&SWAPS);
    if let Some((_, sql)) = swaps.iter().find(|(kept, _)| same(kept)) {
        return Arc::clone(sql);
    }
    let sql: Arc<str> = backend::swap_statement(SWAP_STATUS, sets, 5, '?').into();
    if swaps.len() < MOST_SWAPS {
        swaps.push((sets.iter().map(shape).collect(), Arc::clone(&sql)));
    }
    sql
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, StatementStatus};

    use super::*;
    use crate::domain::TaskStatus;

    /// A fresh board file at the newest schema, as the store opens it.
    fn fresh() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Connection::open(dir.path().join("kanban.db")).unwrap();
        crate::store::sqlite::tune(&c, false).unwrap();
        crate::store::sqlite_schema::migrate(&mut c).unwrap();
        (dir, c)
    }

    /// Every listing variant.
    fn listings() -> impl Iterator<Item = &'static str> {
        LIST_TASKS.iter().flatten().flatten().copied()
    }

    #[test]
    fn every_fixed_statement_prepares_on_a_fresh_schema() {
        let (_dir, c) = fresh();
        for sql in FIXED.iter().copied().chain(listings()) {
            if let Err(e) = c.prepare(sql) {
                panic!("{sql}\n  does not prepare: {e}");
            }
        }
    }

    #[test]
    fn every_listing_binds_the_same_four_parameters() {
        let (_dir, c) = fresh();
        for sql in listings() {
            let stmt = c.prepare(sql).unwrap();
            assert_eq!(stmt.parameter_count(), 4, "{sql}");
        }
    }

    #[test]
    fn the_listing_picked_matches_the_filter() {
        let mut f = TaskFilter {
            statuses: vec![TaskStatus::Ready],
            sort: TaskSort::Priority,
            ..TaskFilter::default()
        };
        assert_eq!(
            list_tasks(&f),
            concat!(
                "SELECT ",
                task_cols!(),
                " FROM tasks WHERE status = ?1 ORDER BY priority DESC, created_at, id LIMIT ?4"
            )
        );
        f.statuses.push(TaskStatus::Running);
        f.assignee = Some("coder".into());
        f.tenant = Some("acme".into());
        let sql = list_tasks(&f);
        assert!(
            sql.contains("status IN (SELECT value FROM json_each(?1))"),
            "{sql}"
        );
        assert!(sql.contains(" AND assignee = ?2 AND tenant = ?3"), "{sql}");
        // Each order is the one every backend uses.
        for sort in [
            TaskSort::Created,
            TaskSort::CreatedDesc,
            TaskSort::Priority,
            TaskSort::Updated,
        ] {
            f.sort = sort;
            let tail = format!("{} LIMIT ?4", backend::task_order(sort));
            assert!(list_tasks(&f).ends_with(&tail), "{sort:?}");
        }
        f.statuses.clear();
        f.include_archived = true;
        assert!(list_tasks(&f).contains("WHERE 1 = 1"));
        f.include_archived = false;
        assert!(list_tasks(&f).contains("WHERE status <> 'archived'"));
    }

    #[test]
    fn a_status_change_is_built_once_per_shape() {
        let first = swap(&[Set::Int("claim_expires", 1), Set::EndLease]);
        let again = swap(&[Set::Int("claim_expires", 2), Set::EndLease]);
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same shape is the same text"
        );
        assert_eq!(
            &*first,
            "UPDATE tasks SET status = ?1, updated_at = ?2, claim_expires = ?5, \
             claim_lock = NULL, claim_expires = NULL, current_run_id = NULL \
             WHERE id = ?3 AND status = ?4"
        );
        let other = swap(&[Set::IntIfUnset("claim_expires", 1), Set::EndLease]);
        assert_ne!(
            &*first, &*other,
            "another way of writing a column is another text"
        );
        let (_dir, c) = fresh();
        c.prepare(&other).unwrap();
    }

    /// A statement kept in rusqlite's cache runs again as it was planned: SQLite re-plans a
    /// statement on every use when a bound value may change its plan (it does for an equality
    /// on a column it filters by, with a value that might be 0 or 1), and rusqlite's cache
    /// clears the bindings of each statement it takes back, which counts as such a change. The
    /// store turns that off for its connections ([`crate::store::sqlite::tune`]).
    #[test]
    fn a_cached_statement_is_not_planned_again_on_reuse() {
        let (_dir, c) = fresh();
        let args = [
            (TASK_RUNS, "t1"),
            (PARENTS, "t1"),
            (OPEN_PARENTS, "t1"),
            (TASK_COMMENTS, "t1"),
            (EVENTS_AFTER, "0"),
        ];
        for (sql, arg) in args {
            for round in 0..3 {
                let mut stmt = c.prepare_cached(sql).unwrap();
                let count = stmt.parameter_count();
                let mut rows = if count == 2 {
                    stmt.query(rusqlite::params![arg, 10]).unwrap()
                } else {
                    stmt.query([arg]).unwrap()
                };
                while rows.next().unwrap().is_some() {}
                drop(rows);
                assert_eq!(
                    stmt.get_status(StatementStatus::RePrepare),
                    0,
                    "{sql} planned again on use {round}"
                );
            }
        }
    }
}
