//! troupe's integration tests, in one binary (as ripgrep keeps its own): the `troupe` binary
//! and the programmatic API driven as a user drives them, against the mock model server over
//! real HTTP, real MCP servers, a real headless browser and real databases. One module per
//! subject; what several share lives in [`support`]. Select a subject with its module path:
//! `cargo test -p troupe --test integration http_api::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

mod support;

mod achievements;
mod agent_clarify;
mod agent_memory;
mod agent_processes;
mod agent_subagents;
mod agent_todo;
mod backends;
mod chat_cli;
mod chat_models;
mod chat_real_model;
mod chat_status_line;
mod chat_sudo;
mod chat_terminal;
mod chat_terminal_recovery;
mod config_check_cli;
mod config_reference_cli;
mod confine_cli;
mod connectors_api;
mod connectors_chat;
mod connectors_cli;
mod connectors_connect_wait;
mod danger_cli;
mod dashboard;
mod dashboard_agent_tools;
mod dashboard_running_card;
mod dashboard_sessions;
mod doctor_cli;
mod durable_sessions;
mod entry_points;
mod first_hour_cli;
mod hardening_cli;
mod hardening_http;
mod hostile_input_cli;
mod http_api;
mod kanban_agent_tools;
mod kanban_api;
mod kanban_cli;
mod kanban_multihost;
mod kanban_reclaim;
mod kanban_review;
mod lean_prompt;
mod mcp_serve;
mod openai_api;
mod plugin_tabs;
mod plugins;
mod schedules_chat;
mod schedules_dashboard;
mod schedules_multihost;
mod secrets_cli;
mod tools_phrasings_cli;
mod tools_search_cli;
mod traces;
mod troupe_api;
