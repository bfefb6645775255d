//! troupe-actors: who calls what, when, and with whose permission.
//!
//! A [`session::Session`] actor runs one conversation: it asks the model, hands each turn's
//! tool calls to the [`batch_planner::BatchPlanner`] (parallel and sequential segments, judged
//! on the underlying tool), and the [`tool_runner::ToolRunner`] runs them, asking the
//! [`supervisor::Supervisor`] before anything flagged and calling the [`hooks`] around each call.
//! The supervisor also owns the tree of sessions and carries `/stop` down it.
//!
//! # Layout
//! - [`session`]: the agent loop, [`session::SessionHandle`] for callers.
//! - [`batch_planner`], [`tool_runner`]: planning and running a turn's calls.
//! - [`supervisor`]: approvals, stops, the session tree.
//! - [`delegate`]: `delegate_task`, subagent trees.
//! - [`hooks`]: the hook points; [`events`]: what sessions report; [`call`]: a call entry, how
//!   a call ended, and ids.
//! - [`model`]: the provider trait, the OpenAI-compatible and scripted providers.
//! - [`journal`]: durable sessions (what a session writes, what it reopens from).
//! - [`usage`]: token counts, prices, budgets; [`trace`]: OpenTelemetry spans.

pub mod batch_planner;
pub mod call;
pub mod delegate;
pub mod events;
pub mod hooks;
pub mod journal;
pub mod model;
pub mod repeats;
mod script_calls;
pub mod session;
pub mod supervisor;
pub mod tool_runner;
pub mod trace;
pub mod usage;
