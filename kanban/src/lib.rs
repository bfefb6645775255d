//! troupe-kanban: boards of work that fan tasks out to worker actors.
//!
//! A board holds tasks linked parent → child; a task becomes `ready` once every parent is done
//! or archived, a dispatcher claims it with a lease held by a [`WorkerId`], and the worker ends
//! it with a terminal call (complete, block, review). Everything a board keeps, and every state
//! change, goes through the [`Store`] trait, so the embedded SQLite store and the PostgreSQL
//! store behave the same.
//!
//! # Layout
//! - [`domain`]: the board's domain: boards, tasks, statuses, links, comments, events, runs, attachments, leases.
//! - [`store`]: the [`Store`] trait and its transitions table, [`StoreError`], and
//!   [`SqliteStore`] (one WAL-mode SQLite file per board). With the `test-suite` feature,
//!   `store::suite` holds the behaviour suite every implementation must pass.
//! - [`dispatcher`]: the [`Dispatcher`](dispatcher::Dispatcher) actor and its
//!   [`DispatcherHandle`]: rounds of reclaim, promote and claim, one worker per claim.
//! - [`dispatcher_config`]: the [`DispatcherConfig`] the dispatcher and its workers run by;
//!   [`reports`]: what they report to hooks and subscribers (a worker's end, a round).
//! - [`worker`]: the [`Worker`](worker::Worker) actor running one claimed task as a session.
//! - [`worker_tools`]: the `kanban` toolset bound to one task; [`worker_context`]: the
//!   worker's prompt and first message; [`worker_question`]: a worker's `clarify`, which
//!   parks its task until a comment answers and then resumes the session that asked.
//! - [`profiles`]: the named agent configurations tasks are assigned to; [`hooks`]: observers.
//! - [`workspace`]: where a worker does a task's work ([`workspace::Workspaces`]).
//! - [`run_history`]: the calls an earlier run left cut off, read back for the next run.
//! - [`schedule`]: jobs that make tasks by themselves on a cron, interval or one-time schedule,
//!   each due time exactly once across hosts.
//!
//! # Example
//!
//! ```
//! use troupe_kanban::domain::{BoardSlug, NewTask, TaskStatus, WorkerId};
//! use troupe_kanban::store::{ClaimSpec, Completion, SqliteStore, Store};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! tokio::runtime::Runtime::new()?.block_on(async {
//!     let store = SqliteStore::open(dir.path()).await?;
//!     let board = BoardSlug::default_board();
//!     let report = store.create_task(&board, &NewTask::new("write the report")).await?.task;
//!     let review = NewTask::new("review it").with_parent(report.id.clone());
//!     let review = store.create_task(&board, &review).await?.task;
//!     assert_eq!(review.status, TaskStatus::Todo); // waits for its parent
//!
//!     let claim = store.claim_next(&board, &ClaimSpec::new(WorkerId::local())).await?;
//!     let claim = claim.expect("the report is ready");
//!     let done = Completion { worker: Some(claim.lease.worker), ..Completion::default() };
//!     store.complete(&board, &claim.task.id, &done).await?;
//!     assert_eq!(store.task(&board, &review.id).await?.status, TaskStatus::Ready);
//!     Ok::<_, troupe_kanban::StoreError>(())
//! })?;
//! # Ok(())
//! # }
//! ```

pub mod dispatcher;
pub mod dispatcher_config;
pub mod domain;
pub mod evidence;
pub mod hooks;
pub mod profiles;
pub mod reports;
pub mod review;
pub mod review_agent;
pub mod run_history;
pub mod schedule;
pub mod store;
pub mod worker;
pub mod worker_catalog;
pub mod worker_context;
pub mod worker_question;
pub mod worker_tools;
pub mod workspace;

pub use dispatcher::{DispatchReport, DispatcherConfig, DispatcherEvent, DispatcherHandle};
pub use domain::{
    Board, BoardSlug, Event, EventId, EventKind, Lease, NewTask, Run, RunOutcome, Task, TaskId,
    TaskStatus, WorkerId,
};
pub use profiles::{Profiles, WorkerProfile};
pub use store::{SqliteStore, Store, StoreError};
