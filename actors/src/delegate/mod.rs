//! `delegate_task`: a session hands tasks to subagents, each a [`crate::session::Session`]
//! actor of its own under the parent in the supervisor's tree, with a view no wider than the
//! parent's, running in parallel and reporting back in task order.
//!
//! - [`config`]: the operator's limits (`delegation:` in `troupe.yaml`).
//! - [`tool`]: the tool definition the model sees, with the live limits in its text.
//! - [`request`]: reading a call's arguments (spawn, list, steer, stop).
//! - [`run`]: spawning, driving, timing out and joining children; background delivery.
//! - [`tracker`]: the running subagents of a tree, for list, steer and stop.

pub mod config;
pub mod request;
pub mod run;
pub mod tool;
pub mod tracker;

pub use config::DelegationConfig;
pub use run::{DelegateContext, DelegationFinished, child_view, run_delegate_task};
pub use tool::{DELEGATE_TASK, delegate_task_def, register_delegate_task};
pub use tracker::SubagentTracker;
