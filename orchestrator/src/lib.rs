//! troupe: an actor-based multi-agent orchestrator.
//!
//! Every session, subagent and kanban worker is an actor holding a scoped view of the tools it
//! may see and call. This crate is troupe's face: the programmatic API, `troupe.yaml`, and the
//! `troupe` command line. It re-exports what users need from the layers below, so programs and
//! examples import only `troupe::...`.
//!
//! # Layout
//! - [`api`]: [`Troupe`], the programmatic API (sessions, events, approvals, stop, close).
//! - [`config`]: `troupe.yaml`, read then checked.
//! - [`catalog`]: the bundled demo catalog and catalog files.
//! - [`cli`]: the `troupe` command line.
//! - [`tools`]: re-export of `troupe-tools` (tool model, views, tool search, bridge).

pub mod api;
pub mod catalog;
#[allow(clippy::print_stdout, reason = "the command line prints its results")]
pub mod cli;
pub mod config;

pub use troupe_tools as tools;

pub use api::{SessionOptions, Troupe, TroupeConfig, TroupeError};
/// The actor runtime: sessions, events, hooks, the supervisor, model providers.
pub use troupe_actors as actors;
