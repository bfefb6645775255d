//! How a failed attempt at a completion is followed up: given up, tried again, asked again
//! after the server could not read the model's output, or sent again without `tools` or an
//! optional field the server refuses. Read from the status and the server's own words.

use std::time::Duration;

use serde_json::Value;

use crate::model::ModelError;

/// How one failed attempt should be followed up.
#[derive(Debug)]
pub(super) enum Next {
    /// Give up with this error.
    Fail(ModelError),
    /// Try again; the server may have said when.
    Retry(ModelError, Option<Duration>),
    /// The server could not parse what the model wrote (its tool-call parser failed).
    Unreadable(ModelError),
    /// The server does not take the `tools` field.
    RefusedTools(ModelError),
}

/// Whether an error message says the server's parser could not read what the model wrote
/// (llama.cpp: "The model produced output that does not match the expected ... format"; vLLM
/// and others: "failed to parse tool call ...").
pub(super) fn is_unreadable_output(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "does not match the expected",
        "model produced output",
        "failed to parse",
        "could not parse",
        "unable to parse",
        "error parsing",
        "parse tool call",
        "parsing tool call",
        "invalid tool call",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

/// Whether a 400 says the server takes no `tools` (or no tool calls for this model).
pub(super) fn refuses_tools(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    // A refused optional field is dropped instead (see `refused_optional_field`).
    let optional = ["stream_options", "parallel_tool_calls"]
        .iter()
        .any(|field| message.contains(field));
    !optional
        && message.contains("tool")
        && [
            "not support",
            "unsupported",
            "unknown",
            "unrecognized",
            "not allowed",
            "not permitted",
            "extra inputs",
        ]
        .iter()
        .any(|needle| message.contains(needle))
}

/// An error the server put in a 200 answer or a stream: a parse failure of the model's output,
/// or a passing failure worth a retry (unless text already reached the listener).
pub(super) fn stream_error(message: &str, forwarded: bool) -> Next {
    let error = ModelError::Protocol(format!(
        "the server reported an error instead of an answer: {message}"
    ));
    // Unreadable output is asked again even after text was shown: the retry notice tells the
    // listener that what it showed is not the answer (a chat on a terminal streams every
    // answer, and must recover from a parse error as a one-shot run does).
    if is_unreadable_output(message) {
        Next::Unreadable(error)
    } else {
        retry_unless_forwarded(error, forwarded)
    }
}

/// The optional field a 400 or 422 answer complains about, when the request carries it
/// (`stream_options` and `parallel_tool_calls` are unknown to some servers).
pub(super) fn refused_optional_field(error: &ModelError, body: &Value) -> Option<&'static str> {
    let ModelError::Status {
        status: 400 | 422,
        body: message,
    } = error
    else {
        return None;
    };
    ["stream_options", "parallel_tool_calls"]
        .into_iter()
        .find(|field| message.contains(field) && body.get(field).is_some())
}

pub(super) fn retry_unless_forwarded(error: ModelError, forwarded: bool) -> Next {
    if forwarded {
        Next::Fail(error)
    } else {
        Next::Retry(error, None)
    }
}

pub(super) fn gave_up(error: ModelError, attempts: u32) -> ModelError {
    with_note(error, &format!("gave up after {attempts} attempts"))
}

/// Adds a note to the error's text, keeping its kind.
pub(super) fn with_note(error: ModelError, note: &str) -> ModelError {
    match error {
        ModelError::Status { status, body } => ModelError::Status {
            status,
            body: format!("{body} ({note})"),
        },
        ModelError::Unreachable { url, reason } => ModelError::Unreachable {
            url,
            reason: format!("{reason} ({note})"),
        },
        ModelError::Protocol(text) => ModelError::Protocol(format!("{text} ({note})")),
        other => other,
    }
}
