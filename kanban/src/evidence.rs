//! What a worker's completion rests on: the tool calls that really ran in its run.
//!
//! The worker adds an [`EvidenceRecorder`] to its session's hooks; the tool runner calls it
//! after every call it ran (the session's own record, not anything the model says), and
//! `kanban_complete` writes the calls recorded so far into the run's metadata under
//! [`EVIDENCE_KEY`]. The model cannot add or change an entry: the recorder is not a tool, and a
//! value the model puts under that key in its own `metadata` is replaced. A completion resting
//! on no call is written as the string `"none"`, so a person (or a reviewer profile) sees at
//! once that the result was not produced by anything that ran.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use troupe_actors::call::CallStatus;
use troupe_actors::hooks::{Hook, ToolCallInfo};
use troupe_tools::ToolResult;
use troupe_tools::text::byte_prefix;

/// The key of a run's metadata that holds its evidence.
pub const EVIDENCE_KEY: &str = "evidence";
/// The key of a run's metadata that counts the earlier calls left out of its evidence.
pub const LEFT_OUT_KEY: &str = "evidence_left_out";
/// Written under [`EVIDENCE_KEY`] when the completion rests on no tool call.
pub const NO_EVIDENCE: &str = "none";
/// Most bytes of an argument summary.
const ARGS_CAP: usize = 160;
/// Most calls kept; a run making more keeps the last ones (the ones a result most likely
/// rests on) and says how many went before.
const MAX_CALLS: usize = 50;

/// One tool call that ran in the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceCall {
    /// troupe's id for the call.
    pub call_id: String,
    /// The tool that ran.
    pub tool: String,
    /// What it was asked: the command, the path, or the first text argument, cut short.
    pub args: String,
    /// `ok`, `error`, `denied`, `timeout` or `interrupted`.
    pub status: String,
    /// A command's exit status, when the tool reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl EvidenceCall {
    /// One line for people: `terminal `wc -l notes.txt` → ok, exit 0 (call c_1)`.
    pub fn line(&self) -> String {
        let exit = self
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default();
        format!(
            "{} `{}` → {}{exit} (call {})",
            self.tool, self.args, self.status, self.call_id
        )
    }
}

/// The calls recorded in one run, shared by the recorder hook and the task's tools.
#[derive(Debug, Default)]
pub struct EvidenceLog {
    calls: Mutex<Vec<EvidenceCall>>,
    dropped: Mutex<usize>,
}

impl EvidenceLog {
    /// An empty log.
    pub fn new() -> Arc<EvidenceLog> {
        Arc::new(EvidenceLog::default())
    }

    fn push(&self, call: EvidenceCall) {
        if let Ok(mut calls) = self.calls.lock() {
            if calls.len() >= MAX_CALLS {
                calls.remove(0);
                if let Ok(mut dropped) = self.dropped.lock() {
                    *dropped += 1;
                }
            }
            calls.push(call);
        }
    }

    /// The calls recorded so far, oldest first.
    pub fn calls(&self) -> Vec<EvidenceCall> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The value kept under [`EVIDENCE_KEY`]: the list of calls, or `"none"`.
    pub fn value(&self) -> Value {
        let calls = self.calls();
        if calls.is_empty() {
            return Value::String(NO_EVIDENCE.into());
        }
        serde_json::to_value(calls).unwrap_or(Value::String(NO_EVIDENCE.into()))
    }

    /// How many earlier calls were left out to keep the list short.
    pub fn dropped(&self) -> usize {
        self.dropped.lock().map(|d| *d).unwrap_or(0)
    }
}

/// `metadata` (the model's, if any) with the run's evidence under [`EVIDENCE_KEY`], replacing
/// whatever the model put there.
pub fn with_evidence(metadata: Option<Value>, log: &EvidenceLog) -> Value {
    let mut map = match metadata {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    map.insert(EVIDENCE_KEY.into(), log.value());
    // The count of calls left out is the recorder's too: a model's own value is dropped.
    map.remove(LEFT_OUT_KEY);
    let dropped = log.dropped();
    if dropped > 0 {
        map.insert(LEFT_OUT_KEY.into(), Value::from(dropped));
    }
    Value::Object(map)
}

/// The evidence a run's metadata holds: `None` when the run kept none at all (it was not a
/// worker's completion), `Some(vec![])` when it rests on no call.
pub fn read(metadata: Option<&Value>) -> Option<Vec<EvidenceCall>> {
    match metadata?.get(EVIDENCE_KEY)? {
        Value::String(s) if s == NO_EVIDENCE => Some(Vec::new()),
        calls @ Value::Array(_) => serde_json::from_value(calls.clone()).ok(),
        _ => None,
    }
}

/// The evidence of a task's latest run that kept any (a worker's completion), with that run.
pub fn latest(runs: &[crate::domain::Run]) -> Option<(&crate::domain::Run, Vec<EvidenceCall>)> {
    runs.iter()
        .filter_map(|run| read(run.metadata.as_ref()).map(|calls| (run, calls)))
        .max_by_key(|(run, _)| run.id.0)
}

/// The evidence as lines for people and reviewers: `evidence: none (...)` or one line a call.
pub fn describe(calls: &[EvidenceCall]) -> String {
    if calls.is_empty() {
        return "evidence: none (no tool call ran in this run before it completed; the result rests on nothing that ran)".into();
    }
    let mut out = format!("evidence: {} tool call(s) that ran", calls.len());
    for call in calls {
        out.push_str("\n- ");
        out.push_str(&call.line());
    }
    out
}

/// The session hook that records each call the tool runner ran into an [`EvidenceLog`].
/// The board's own bookkeeping tools (`kanban_*`) are left out: reading or commenting on
/// the task is no evidence for its result.
pub struct EvidenceRecorder {
    log: Arc<EvidenceLog>,
}

impl EvidenceRecorder {
    /// A recorder writing into `log`.
    pub fn new(log: Arc<EvidenceLog>) -> EvidenceRecorder {
        EvidenceRecorder { log }
    }
}

impl Hook for EvidenceRecorder {
    fn name(&self) -> &str {
        "kanban-evidence"
    }

    fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, result: &ToolResult) {
        let tool = call.underlying_tool;
        if tool.starts_with("kanban_") {
            return;
        }
        let exit_code = result
            .structured
            .as_ref()
            .and_then(|v| v.get("exit_code"))
            .and_then(Value::as_i64);
        self.log.push(EvidenceCall {
            call_id: call.call_id.to_string(),
            tool: tool.to_string(),
            args: args_summary(call.arguments),
            status: status.as_str().to_string(),
            exit_code,
        });
    }
}

/// The argument a person recognises a call by: its command, path, url, query or code, else
/// the first text argument, else the arguments' names.
fn args_summary(args: &Map<String, Value>) -> String {
    const NAMED: &[&str] = &[
        "command",
        "path",
        "file_path",
        "url",
        "query",
        "pattern",
        "code",
        "name",
    ];
    let text = NAMED
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str))
        .or_else(|| args.values().find_map(Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| args.keys().cloned().collect::<Vec<_>>().join(", "));
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let head = byte_prefix(&one_line, ARGS_CAP);
    if head.len() < one_line.len() {
        format!("{head}…")
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info<'a>(tool: &'a str, args: &'a Map<String, Value>) -> ToolCallInfo<'a> {
        ToolCallInfo {
            session_id: "s",
            agent_path: &[],
            call_id: "c_1",
            tool,
            underlying_tool: tool,
            arguments: args,
        }
    }

    #[test]
    fn records_calls_that_ran_and_leaves_out_the_boards_own() {
        let log = EvidenceLog::new();
        let hook = EvidenceRecorder::new(Arc::clone(&log));
        assert_eq!(log.value(), json!("none"));
        let args = json!({"command": "wc -l\n notes.txt"});
        let args = args.as_object().unwrap();
        let result = ToolResult::json(json!({"output": "152 notes.txt", "exit_code": 0}));
        hook.post_tool_call(&info("kanban_show", args), CallStatus::Ok, &result);
        assert_eq!(log.value(), json!("none"), "kanban tools are no evidence");
        hook.post_tool_call(&info("terminal", args), CallStatus::Ok, &result);
        let calls = log.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].args, "wc -l notes.txt");
        assert_eq!(calls[0].exit_code, Some(0));
        assert_eq!(calls[0].status, "ok");
        assert_eq!(read(Some(&with_evidence(None, &log))), Some(calls));
    }

    #[test]
    fn the_models_own_evidence_key_is_replaced() {
        let log = EvidenceLog::new();
        let forged = json!({"evidence": [{"call_id": "x", "tool": "terminal", "args": "wc -l", "status": "ok"}], "evidence_left_out": 40, "lines": 152});
        let metadata = with_evidence(Some(forged), &log);
        assert_eq!(metadata["evidence"], json!("none"));
        assert!(metadata.get(LEFT_OUT_KEY).is_none(), "{metadata}");
        assert_eq!(metadata["lines"], json!(152));
        assert_eq!(read(Some(&metadata)), Some(Vec::new()));
        assert!(describe(&[]).starts_with("evidence: none"));
        assert_eq!(read(Some(&json!({"other": 1}))), None);
    }

    #[test]
    fn long_runs_keep_the_last_calls() {
        let log = EvidenceLog::new();
        let hook = EvidenceRecorder::new(Arc::clone(&log));
        let args = Map::new();
        for _ in 0..(MAX_CALLS + 3) {
            hook.post_tool_call(
                &info("read_file", &args),
                CallStatus::Error,
                &ToolResult::text("x"),
            );
        }
        assert_eq!(log.calls().len(), MAX_CALLS);
        assert_eq!(log.dropped(), 3);
        assert_eq!(with_evidence(None, &log)["evidence_left_out"], json!(3));
    }
}
