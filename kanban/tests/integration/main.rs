//! troupe-kanban's integration tests, one binary (as ripgrep keeps its own): the store suite
//! on each backend with what only files, processes or a real server show, and the dispatcher
//! and its workers end to end, and the task-bound tools by hand. `support` holds what several
//! modules use, `models` the model providers the dispatcher tests script.
//!
//! Run one part with a filter on its module, e.g.
//! `cargo test -p troupe-kanban --test integration sqlite_store::`. The PostgreSQL modules need
//! a throwaway cluster (`scripts/start-test-postgres.sh`, then export `TROUPE_TEST_POSTGRES_URL`
//! from `target/test-postgres.env`); without one they skip loudly.

mod dispatcher;
mod dispatcher_postgres;
mod dispatcher_safety;
mod models;
mod postgres_store;
mod schedule_figures;
mod sqlite_store;
mod support;
mod worker_tools;
