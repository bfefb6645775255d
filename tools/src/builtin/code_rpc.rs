//! The socket side of `execute_code`: a Unix-socket server that reads one JSON request per line
//! from the script's `troupe_tools` module, checks the run's token, the allow-list and the call
//! budget, dispatches the call through [`Dispatch`](crate::Dispatch) (the same view, hooks and
//! approvals as the session's own calls) and writes the answer back as one line.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::tool::{CallContext, Content, ToolResult};

/// Tools a script may call.
pub const ALLOWED_IN_SCRIPTS: &[&str] = &[
    "read_file",
    "write_file",
    "search_files",
    "patch",
    "terminal",
    "tool_search",
    "tool_describe",
    "tool_call",
];
/// Tools a script may never reach, not even through `tool_call`.
const NEVER_IN_SCRIPTS: &[&str] = &["execute_code", "delegate_task", "process", "process_manage"];
/// `terminal` arguments a script may not use: scripts run commands in the foreground only.
const TERMINAL_ONLY_FOREGROUND: &[&str] = &[
    "background",
    "pty",
    "notify_on_complete",
    "watch_patterns",
    "persist_on_release",
];

/// One run's server state, shared by its connections.
pub(crate) struct RpcState {
    /// The run's secret; requests without it are refused.
    pub(crate) token: String,
    /// The calling tool's context (session, call id, cancellation, dispatcher).
    pub(crate) parent: CallContext,
    /// Tool calls dispatched so far.
    pub(crate) calls_made: AtomicUsize,
    /// Most calls a run may dispatch.
    pub(crate) max_calls: usize,
}

/// Compares two byte strings in time that depends only on their lengths.
fn same_token(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Accepts connections until `stop` fires.
pub(crate) async fn serve(listener: UnixListener, state: Arc<RpcState>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let state = state.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = connection(stream, state) => {}
                        }
                    });
                }
                Err(err) => {
                    tracing::warn!(%err, "execute_code socket accept failed");
                    return;
                }
            },
        }
    }
}

/// Serves one connection, one request at a time.
async fn connection(stream: UnixStream, state: Arc<RpcState>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let answer = handle(&line, &state).await;
        let mut out = answer.to_string();
        out.push('\n');
        if write.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn refuse(message: impl Into<String>) -> Value {
    json!({"error": message.into()})
}

/// Answers one request line.
pub(crate) async fn handle(line: &str, state: &RpcState) -> Value {
    let request: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return refuse(format!(
                "The request is not valid JSON ({e}); send one object per line."
            ));
        }
    };
    let token = request.get("token").and_then(Value::as_str).unwrap_or("");
    if !same_token(&state.token, token) {
        return refuse("Unauthorized request: the token does not match this run.");
    }
    let Some(tool) = request.get("tool").and_then(Value::as_str) else {
        return refuse(
            "The request names no tool; send {\"tool\": ..., \"args\": {...}, \"token\": ...}.",
        );
    };
    if !ALLOWED_IN_SCRIPTS.contains(&tool) {
        return refuse(format!(
            "'{tool}' cannot be called from execute_code. Available: {}.",
            ALLOWED_IN_SCRIPTS.join(", ")
        ));
    }
    let mut args: Map<String, Value> = match request.get("args") {
        Some(Value::Object(m)) => m.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return refuse("'args' must be an object of argument names and values."),
    };
    if tool == "terminal" {
        for key in TERMINAL_ONLY_FOREGROUND {
            args.remove(*key);
        }
    }
    if tool == "tool_call" {
        let mut names = vec![];
        if let Some(n) = args.get("name").and_then(Value::as_str) {
            names.push(n.to_string());
        }
        if let Some(Value::Array(calls)) = args.get("calls") {
            names.extend(
                calls
                    .iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str))
                    .map(str::to_string),
            );
        }
        if let Some(bad) = names
            .iter()
            .find(|n| NEVER_IN_SCRIPTS.contains(&n.as_str()))
        {
            return refuse(format!(
                "'{bad}' cannot be called from execute_code, not even through tool_call."
            ));
        }
    }
    let Some(dispatch) = state.parent.dispatch.clone() else {
        return refuse(
            "Tool calls are not available in this run: it has no dispatcher (it was started outside a session). Compute the result in plain Python instead.",
        );
    };
    // Take a slot of the budget before dispatching; refused requests above cost nothing.
    let taken = state
        .calls_made
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < state.max_calls).then_some(n + 1)
        });
    let n = match taken {
        Ok(n) => n + 1,
        Err(_) => {
            return refuse(format!(
                "Tool call limit reached ({}): no more tool calls in this run.",
                state.max_calls
            ));
        }
    };
    let ctx = CallContext::new(
        state.parent.session_id.clone(),
        format!("{}/script-{n}", state.parent.call_id),
        state.parent.cancel.child_token(),
    );
    let started = std::time::Instant::now();
    let result = dispatch.dispatch(tool.to_string(), args, ctx).await;
    tracing::debug!(
        tool,
        elapsed_us = started.elapsed().as_micros() as u64,
        "execute_code tool call"
    );
    answer_of(&result)
}

/// The JSON a script receives for a tool result.
fn answer_of(result: &ToolResult) -> Value {
    if let Some(v @ Value::Object(_)) = &result.structured {
        return v.clone();
    }
    let text = result.to_model_text();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&text) {
        return v;
    }
    let images = result
        .content
        .iter()
        .filter(|c| matches!(c, Content::Image { .. }))
        .count();
    let mut v = if result.is_error {
        json!({"error": text})
    } else {
        json!({"output": text})
    };
    if images > 0 {
        v["images"] = json!(images);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("", ""));
    }

    #[tokio::test]
    async fn refusals_come_before_dispatch() {
        let state = RpcState {
            token: "t0k3n".into(),
            parent: CallContext::detached("c"),
            calls_made: AtomicUsize::new(0),
            max_calls: 1,
        };
        let ask = |line: &'static str| handle(line, &state);
        assert!(
            ask("not json").await["error"]
                .as_str()
                .unwrap()
                .contains("not valid JSON")
        );
        assert!(
            ask(r#"{"tool":"read_file","args":{},"token":"nope"}"#).await["error"]
                .as_str()
                .unwrap()
                .contains("Unauthorized")
        );
        assert!(
            ask(r#"{"tool":"execute_code","args":{},"token":"t0k3n"}"#).await["error"]
                .as_str()
                .unwrap()
                .contains("cannot be called")
        );
        assert!(ask(r#"{"tool":"tool_call","args":{"name":"delegate_task"},"token":"t0k3n"}"#).await["error"].as_str().unwrap().contains("delegate_task"));
        assert!(
            ask(r#"{"tool":"read_file","args":{"path":"x"},"token":"t0k3n"}"#).await["error"]
                .as_str()
                .unwrap()
                .contains("no dispatcher")
        );
        assert_eq!(state.calls_made.load(Ordering::Acquire), 0);
    }
}
