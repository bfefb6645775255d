//! troupe-tools' integration tests: one test binary, a module per area, shared set-up in
//! [`support`]. Tests that need process-wide state run it in a copy of this binary
//! ([`support::alone_with_env`], the crash writer of [`builtin_write_crash`]); the boundary's
//! Landlock rules are applied in the commands' processes only, never in this one.
//!
//! - [`bridge_fuzz`]: property tests of the bridge tools over arbitrary JSON.
//! - [`view_scope`]: a tool outside a view is never found, described or called.
//! - [`conformance`]: every tool-search case recorded from the reference.
//! - `builtin_*`: the built-in tools against real files and processes (files, terminal,
//!   background processes, execute_code, the boundary, writes under a crash or a swap).

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

mod support;

mod bridge_fuzz;
mod builtin_confine;
mod builtin_execute_code;
mod builtin_files;
mod builtin_process;
mod builtin_terminal;
#[cfg(unix)]
mod builtin_write_crash;
#[cfg(target_os = "linux")]
mod builtin_write_swap;
mod conformance;
mod view_scope;
