//! OpenAI-compatible routes under `/v1`, so any OpenAI client (the `openai` SDKs, chat
//! front-ends, evaluation harnesses) drives a troupe agent. Each request runs a turn of a troupe
//! session (the profile's model, tools, approvals, budgets and traces), in the same session
//! table as `POST /api/sessions`: listed, shown in the dashboard, stored, resumable. The bearer
//! key is the server's token.
//!
//! # Layout
//! - this file: [`OpenAiState`], what the routes keep between requests.
//! - [`models`]: `GET /v1/models` and what a model id names.
//! - [`chat`]: `POST /v1/chat/completions`; [`chunks`]: its streamed chunks.
//! - [`responses`]: `POST /v1/responses` and `GET /v1/responses/{id}`, with their events.
//! - [`turn`]: finding or opening the session and following its turn.
//! - [`continuation`]: the messages a client sends, and which session a history continues.
//! - [`client_tools`]: tools the client declares and runs itself.
//! - [`errors`]: OpenAI's error shape and the body extractor.

pub mod chat;
pub mod chunks;
pub mod client_tools;
pub mod continuation;
pub mod errors;
pub mod models;
pub mod responses;
pub mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use troupe_tools::sync::lock;

/// The header that names the session a request continues (and that every answer carries).
pub const SESSION_HEADER: &str = "x-troupe-session";

/// Sessions the `/v1` routes keep a record of before pruning those between turns.
const KEPT_SESSIONS: usize = 10_000;

/// What the `/v1` routes keep between requests.
#[derive(Debug, Default)]
pub struct OpenAiState {
    /// Conversations as clients saw them, and their sessions.
    pub conversations: continuation::Conversations,
    /// Per session: the client's tools and the running turn.
    sessions: Mutex<HashMap<String, Arc<turn::V1Session>>>,
    /// Response ids of `/v1/responses` and their sessions.
    pub responses: responses::Responses,
}

impl OpenAiState {
    /// The record of session `id` (an empty one for a session first driven here).
    pub fn session(&self, id: &str) -> Arc<turn::V1Session> {
        let mut sessions = lock(&self.sessions);
        if sessions.len() > KEPT_SESSIONS {
            sessions.retain(|_, s| s.is_running());
        }
        Arc::clone(sessions.entry(id.to_string()).or_default())
    }

    fn insert(&self, id: &str, session: Arc<turn::V1Session>) {
        lock(&self.sessions).insert(id.to_string(), session);
    }
}

/// A request's `X-Troupe-Session` header, when it has a usable one.
pub fn named_session(
    headers: &axum::http::HeaderMap,
) -> Result<Option<String>, errors::OpenAiError> {
    match headers.get(SESSION_HEADER) {
        None => Ok(None),
        Some(value) => match value.to_str().map(str::trim) {
            Ok(id) if !id.is_empty() => Ok(Some(id.to_string())),
            _ => Err(errors::OpenAiError::invalid_param(
                "X-Troupe-Session",
                "bad_session_header",
                "X-Troupe-Session must be the id of an open session (the value an earlier answer's X-Troupe-Session header gave)",
            )),
        },
    }
}
