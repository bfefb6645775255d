//! The `process` tool: the model's view of its background processes (list, poll, log, wait,
//! kill; write, submit and close for a process on a pty; handoff from a subagent to its
//! parent), over the [`ProcessRegistry`](super::ProcessRegistry) handle. Ids may be given in
//! full or as a unique prefix of at least four hex characters.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Builtins;
use super::args::{optional_int, optional_str};
use super::danger::CommandVerdict;
use crate::tool::{CallContext, ToolResult};

/// The actions `process` accepts.
pub(crate) const ACTIONS: &[&str] = &[
    "list", "poll", "log", "wait", "kill", "write", "submit", "close", "handoff",
];

/// The keystrokes a `process` call types, as `(process id, text, closes input)`, for the
/// dangerous-command check: `write` (its `data`, then its named `keys`), `submit` (`data`
/// and Enter), `close` (end of input). Enter counts as a line end. `None` for other actions
/// or arguments the tool itself refuses.
pub fn process_keystrokes(args: &Map<String, Value>) -> Option<(String, String, bool)> {
    let action = args.get("action")?.as_str()?.trim().to_ascii_lowercase();
    let id = match args.get("session_id") {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    match action.as_str() {
        "write" | "submit" => {
            let text = typed(args, action == "submit").ok()?;
            Some((id, text.replace('\r', "\n"), false))
        }
        "close" => Some((id, String::new(), true)),
        _ => None,
    }
}

/// What `write` or `submit` types: `data`, then each of `keys` by name, then Enter for
/// submit. An error says what was wrong.
fn typed(args: &Map<String, Value>, submit: bool) -> Result<String, String> {
    let mut text = optional_str(args, "data")?.unwrap_or_default().to_string();
    match args.get("keys") {
        None | Some(Value::Null) => {}
        Some(Value::Array(keys)) => {
            for key in keys {
                let name = key.as_str().unwrap_or_default();
                match super::pty::key_bytes(name) {
                    Some(bytes) => text.push_str(&String::from_utf8_lossy(bytes)),
                    None => {
                        return Err(format!(
                            "'keys' holds {key}, which is not a key troupe knows. Use: {}.",
                            super::pty::KEY_NAMES
                        ));
                    }
                }
            }
        }
        Some(other) => {
            return Err(format!(
                "'keys' must be a list of key names such as [\"Ctrl-C\"], not {other}."
            ));
        }
    }
    if submit {
        text.push('\r');
    } else if text.is_empty() {
        return Err("write needs 'data' (text typed as is) or 'keys' (named keys such as [\"Enter\"] or [\"Ctrl-C\"]).".into());
    }
    Ok(text)
}

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
        "write" | "submit" => {
            let data = match typed(&args, action == "submit") {
                Ok(data) => data,
                Err(e) => return ToolResult::error_json(json!({"error": e})),
            };
            // Enter on a terminal is a carriage return; the check reads it as a line end.
            let check =
                builtins.check_process_write(session, &id, &data.replace('\r', "\n"), false);
            let note = match gate(&builtins, &ctx, &check.verdict, "type this text") {
                Ok(note) => note,
                Err(refused) => return refused,
            };
            let mut value = registry.write(session, &id, &data).await;
            if value["status"] == "ok" {
                registry.set_pending(&id, check.pending);
            }
            if let Some(note) = note {
                value["approval"] = json!(note);
            }
            answer(value)
        }
        "close" => {
            // The end of input makes a shell run the line it was given without an end.
            let check = builtins.check_process_write(session, &id, "", true);
            let note = match gate(&builtins, &ctx, &check.verdict, "end its input") {
                Ok(note) => note,
                Err(refused) => return refused,
            };
            let mut value = registry.close_stdin(session, &id).await;
            if let Some(note) = note {
                value["approval"] = json!(note);
            }
            answer(value)
        }
        "handoff" => {
            let purpose = match optional_str(&args, "data") {
                Ok(Some(p)) => p.to_string(),
                Ok(None) => {
                    return ToolResult::error_json(
                        json!({"error": "'data' is required for handoff: one sentence saying what the process is for, for the agent that gave you this task."}),
                    );
                }
                Err(e) => return ToolResult::error_json(json!({"error": e})),
            };
            answer(registry.handoff(session, &id, &purpose).await)
        }
        _ => ToolResult::error_json(json!({"error": format!("Unknown action '{action}'.")})),
    }
}
