//! troupe-actors' integration tests, one binary with shared support (as ripgrep keeps its own):
//! - `runtime`: a session end to end on a scripted model, through the planner, the
//!   supervisor, the hooks and the runner;
//! - `delegate`: `delegate_task` trees, limits, steering and stops;
//! - `model_openai`, `model_failures` (feature `mock-server`): the OpenAI-compatible provider
//!   against the mock server, and every failure it reproduces.
//!
//! Run all with `cargo test -p troupe-actors --features mock-server --test integration`; one
//! part with its name as a filter, e.g. `cargo test -p troupe-actors --test integration
//! runtime::`. No test here changes process-wide state (environment, working directory), so
//! they run in parallel in one process.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

mod delegate;
#[cfg(feature = "mock-server")]
mod model_failures;
#[cfg(feature = "mock-server")]
mod model_openai;
mod runtime;
mod support;
