//! The `process` tool: the model's view of its background processes (list, poll, log, wait,
//! kill, write, close), over the [`ProcessRegistry`](super::ProcessRegistry) handle. Ids may be
//! given in full or as a unique prefix of at least four hex characters.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Builtins;
use super::args::{optional_int, optional_str};
use super::danger::CommandVerdict;
use crate::tool::{CallContext, ToolResult};

/// The actions `process` accepts.
pub(crate) const ACTIONS: &[&str] = &["list", "poll", "log", "wait", "kill", "write", "close"];

fn answer(value: Value) -> ToolResult {
    let failed = value.get("error").is_some_and(|e| !e.is_null())
        && value.get("status").and_then(Value::as_str) != Some("already_exited");
    if failed {
        ToolResult::error_json(value)
    } else {
        ToolResult::json(value)
    }
}

/// Holds text written to a process to the dangerous-command check, as `terminal` holds a
/// command: forbidden text is never written, flagged text only with a person's approval (or
/// on an isolated backend configured to waive it). `Ok` carries a note for the result.
fn gate(
    builtins: &Builtins,
    ctx: &CallContext,
    verdict: &CommandVerdict,
    what: &str,
) -> Result<Option<String>, ToolResult> {
    let blocked = |message: String| {
        ToolResult::error_json(json!({"status": "blocked", "error": message, "bytes_written": 0}))
    };
    match verdict {
        CommandVerdict::Allowed => Ok(None),
        CommandVerdict::Forbidden { reason, .. } => Err(blocked(format!(
            "Refused to {what}: a process runs what is typed into it, and this is never run: {reason}. Nothing was written."
        ))),
        CommandVerdict::NeedsApproval { reason, .. }
            if !ctx.approved && builtins.dangerous_commands_need_approval(&ctx.session_id) =>
        {
            Err(blocked(format!(
                "This needs approval first: a process runs what is typed into it, and {reason}. Nothing was written. Ask the user, or send something safer."
            )))
        }
        CommandVerdict::NeedsApproval { reason, .. } if !ctx.approved => Ok(Some(format!(
            "This text would need approval on this machine ({reason}); it was written without one inside the isolated backend, as configured."
        ))),
        CommandVerdict::NeedsApproval { reason, .. } => Ok(Some(format!(
            "This text needed approval ({reason}) and was approved."
        ))),
    }
}

/// Runs the `process` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let registry = &builtins.processes;
    let session = ctx.session_id.as_str();
    let action = match optional_str(&args, "action") {
        Ok(Some(a)) => a.trim().to_ascii_lowercase(),
        Ok(None) => {
            return ToolResult::error_json(
                json!({"error": format!("'action' is required: one of {}.", ACTIONS.join(", "))}),
            );
        }
        Err(e) => return ToolResult::error_json(json!({"error": e})),
    };
    if action == "list" {
        return answer(registry.list(session).await);
    }
    if !ACTIONS.contains(&action.as_str()) {
        return ToolResult::error_json(
            json!({"error": format!("Unknown action '{action}'. Use one of: {}.", ACTIONS.join(", "))}),
        );
    }
    let id = match args.get("session_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return ToolResult::error_json(
                json!({"error": format!("'session_id' is required for {action}: send the id terminal(background=true) returned, like \"proc_1a2b3c4d5e6f\".")}),
            );
        }
    };
    let int = |key: &str| optional_int(&args, key);
    match action.as_str() {
        "poll" => answer(registry.poll(session, &id).await),
        "log" => {
            let offset = match int("offset") {
                Ok(o) => o.map(|o| o.max(0) as usize),
                Err(e) => return ToolResult::error_json(json!({"error": e})),
            };
            let limit = match int("limit") {
                Ok(l) => l.unwrap_or(200).clamp(1, 10_000) as usize,
                Err(e) => return ToolResult::error_json(json!({"error": e})),
            };
            answer(registry.log(session, &id, offset, limit).await)
        }
        "wait" => {
            let timeout = match int("timeout") {
                Ok(None) => builtins.config.terminal.default_timeout_secs,
                Ok(Some(t)) if t > 0 => t as u64,
                Ok(Some(t)) => {
                    return ToolResult::error_json(
                        json!({"status": "error", "error": format!("'timeout' must be a positive number of seconds (got {t}).")}),
                    );
                }
                Err(e) => return ToolResult::error_json(json!({"error": e})),
            };
            tokio::select! {
                v = registry.wait(session, &id, Duration::from_secs(timeout)) => answer(v),
                _ = ctx.cancel.cancelled() => ToolResult::json(json!({"status": "interrupted", "session_id": id, "note": "The wait was stopped; the process keeps running."})),
            }
        }
        "kill" => answer(registry.kill(session, &id).await),
        "write" => match optional_str(&args, "data") {
            Ok(Some(data)) => {
                let check = builtins.check_process_write(session, &id, data, false);
                let note = match gate(&builtins, &ctx, &check.verdict, "write this text") {
                    Ok(note) => note,
                    Err(refused) => return refused,
                };
                let mut value = registry.write(session, &id, data).await;
                if value["status"] == "ok" {
                    registry.set_pending(&id, check.pending);
                }
                if let Some(note) = note {
                    value["approval"] = json!(note);
                }
                answer(value)
            }
            Ok(None) => ToolResult::error_json(
                json!({"error": "'data' is required for write: the text to send to the process's stdin (add \\n to end a line)."}),
            ),
            Err(e) => ToolResult::error_json(json!({"error": e})),
        },
        "close" => {
            // Closing stdin makes a shell run the line it was given without an end.
            let check = builtins.check_process_write(session, &id, "", true);
            let note = match gate(&builtins, &ctx, &check.verdict, "close its stdin") {
                Ok(note) => note,
                Err(refused) => return refused,
            };
            let mut value = registry.close_stdin(session, &id).await;
            if let Some(note) = note {
                value["approval"] = json!(note);
            }
            answer(value)
        }
        _ => ToolResult::error_json(json!({"error": format!("Unknown action '{action}'.")})),
    }
}
