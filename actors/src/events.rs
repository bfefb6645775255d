//! What a session reports while it works: [`SessionEvent`] (turn started, model request, tool
//! call started and finished, approval asked and answered, stop, final answer, and the model
//! retries and tool-call fallbacks that make a turn take longer) and the
//! [`EventSink`] that fans events out to subscribers. The session, the tool runner and the
//! supervisor emit; the `troupe` API, the CLI's `--json` output and tests subscribe.

use std::sync::{Arc, Mutex};
use troupe_tools::sync::lock;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::call::CallStatus;

/// One event, tagged with the session that produced it. Serialised flat: the kind's fields sit
/// beside `session_id`, with `"type"` naming the kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionEvent {
    /// The session the event belongs to.
    pub session_id: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The kinds of event, with their fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The session is open and registered with the supervisor.
    SessionStarted {
        /// Session ids from the root down to this session.
        agent_path: Vec<String>,
        /// The provider's description.
        provider: String,
    },
    /// A user message started a turn.
    TurnStarted {
        /// The turn's id.
        turn_id: String,
    },
    /// A request is going to the model.
    ModelRequest {
        /// The turn's id.
        turn_id: String,
        /// 1 for the first request of the turn, then one more per tool round.
        iteration: u32,
        /// How many messages the request carries.
        messages: usize,
        /// How many tools the model is offered.
        tools: usize,
    },
    /// Text of the model's answer as it arrives (only for sessions that ask for it with
    /// `SessionConfig::stream_text`). The `Final` event still carries the whole answer.
    TextDelta {
        /// The turn's id.
        turn_id: String,
        /// The next piece of text.
        text: String,
    },
    /// How much of the model's answer has arrived while a request runs (only for sessions that
    /// ask for it with `SessionConfig::report_progress`; at most four a second).
    ModelProgress {
        /// The turn's id.
        turn_id: String,
        /// Answer tokens received so far in this request.
        tokens: u64,
        /// `true` when the count is characters / 4 (the server answered in one piece), not
        /// streamed chunks.
        estimated: bool,
        /// Milliseconds since the request went out.
        elapsed_ms: u64,
    },
    /// The model answered a request; the tokens it reported (0 when the server reports none).
    ModelUsage {
        /// The turn's id.
        turn_id: String,
        /// Prompt tokens of the request.
        input_tokens: u64,
        /// Tokens generated.
        output_tokens: u64,
        /// Prompt tokens served from the server's cache (part of `input_tokens`).
        cached_tokens: u64,
        /// The request's dollars by the price table; `None` when its model has no price.
        cost_usd: Option<f64>,
    },
    /// A model request failed and is being sent again (or the model's empty reply is answered
    /// with a nudge): the reason a turn takes longer.
    ModelRetry {
        /// The turn's id.
        turn_id: String,
        /// The attempt that failed (1 for the first of its request).
        attempt: u32,
        /// `transient`, `unreadable_output` or `empty_reply`.
        reason: String,
        /// What failed.
        error: String,
        /// Milliseconds waited before the next attempt.
        wait_ms: u64,
    },
    /// The session changed how tool calls travel (`auto` falling back to text tool calls).
    ToolCallsSwitched {
        /// The turn's id.
        turn_id: String,
        /// The mode from now on (`text`).
        mode: String,
        /// Why.
        reason: String,
    },
    /// The model asked again for calls that already ran with nothing changed since: they were
    /// answered with a note instead of running (see [`crate::repeats`]).
    RepeatedCalls {
        /// The turn's id.
        turn_id: String,
        /// The tools the model named, in its order.
        tools: Vec<String>,
        /// Whether the turn now asks for the answer with no tools offered.
        wrap_up: bool,
    },
    /// A tool call began (before approval and hooks).
    ToolCallStarted {
        /// The turn's id.
        turn_id: String,
        /// troupe's id for this call entry.
        call_id: String,
        /// The provider's id for the call.
        model_call_id: String,
        /// The tool the model named (`tool_call` for a bridged call).
        tool: String,
        /// The tool that actually runs.
        underlying_tool: String,
        /// The call's arguments in one short line (the command, the path, or compact JSON),
        /// for live displays; control characters are left for the display to make visible.
        brief: String,
    },
    /// A tool call ended, whatever the way.
    ToolCallFinished {
        /// The turn's id.
        turn_id: String,
        /// troupe's id for this call entry.
        call_id: String,
        /// The provider's id for the call.
        model_call_id: String,
        /// The tool the model named.
        tool: String,
        /// The tool that actually ran (or would have).
        underlying_tool: String,
        /// How it ended.
        status: CallStatus,
        /// Milliseconds from start to result, the time waiting for a person's approval left
        /// out: what the call itself took.
        duration_ms: u64,
        /// Milliseconds the call waited for a person's approval (0 when none was asked).
        approval_wait_ms: u64,
    },
    /// The session's `todo` list changed (the whole list after the change).
    TodoUpdated {
        /// The items, in the model's order.
        todos: Vec<troupe_tools::todo::TodoItem>,
        /// How far the list has come.
        summary: troupe_tools::todo::TodoSummary,
    },
    /// A background process of the session reported by itself: it ended
    /// (`notify_on_complete`), printed a watched line (`watch_patterns`), or its watching was
    /// turned off. The model reads `text` before its next request, or in a turn started for it.
    ProcessNotice {
        /// The process (`proc_...`).
        process_id: String,
        /// `completed`, `watch_match` or `watch_disabled`.
        kind: String,
        /// How it ended, for a completion.
        exit_code: Option<i32>,
        /// One line for a person's screen.
        summary: String,
        /// Whether the notice started a turn (the session was idle).
        started_turn: bool,
    },
    /// A person is asked to approve a call.
    ApprovalRequested {
        /// The request's id, to answer it by.
        request_id: String,
        /// The call entry waiting on it.
        call_id: String,
        /// The tool (the underlying one for bridged calls).
        tool: String,
        /// Why approval is needed.
        reason: String,
        /// Session ids from the root down to the asking session.
        agent_path: Vec<String>,
    },
    /// An approval request settled.
    ApprovalAnswered {
        /// The request's id.
        request_id: String,
        /// `once`, `session`, `always`, `deny`, `timeout` or `interrupted`.
        outcome: String,
    },
    /// A stop reached this session.
    Stop {
        /// `soft`, `hard`, or `drain` (running calls finish, nothing new starts).
        kind: String,
        /// The turn that was stopped, when one was running.
        turn_id: Option<String>,
    },
    /// The turn ended with an answer for the user.
    Final {
        /// The turn's id.
        turn_id: String,
        /// The answer (or what went wrong).
        text: String,
        /// `completed`, `interrupted`, `max_iterations`, `failed` or `budget_exceeded`.
        status: String,
        /// What the turn spent, its subagents included.
        usage: crate::usage::Spend,
    },
    /// `delegate_task` is about to start a subagent (emitted by the parent).
    SubagentSpawned {
        /// The `delegate_task` call's delegation id.
        delegation_id: String,
        /// The subagent's id, for `steer` and `stop`.
        subagent_id: String,
        /// Position of its task in the call.
        task_index: usize,
        /// The task's goal.
        goal: String,
        /// The child's depth (1 for a child of a top-level session).
        depth: u32,
    },
    /// A subagent's session is open and working on its task (emitted by the parent).
    SubagentStarted {
        /// The subagent's id.
        subagent_id: String,
        /// The child session's id.
        child_session_id: String,
        /// Position of its task in the call.
        task_index: usize,
    },
    /// A subagent started a tool call (emitted by the parent).
    SubagentToolCall {
        /// The subagent's id.
        subagent_id: String,
        /// The child session's id.
        child_session_id: String,
        /// The tool that runs.
        tool: String,
    },
    /// A subagent finished its task, whatever the way (emitted by the parent).
    SubagentCompleted {
        /// The subagent's id.
        subagent_id: String,
        /// Position of its task in the call.
        task_index: usize,
        /// `completed`, `interrupted`, `failed`, `error` or `timeout`.
        status: String,
        /// Seconds from spawn to result.
        duration_seconds: f64,
        /// Model answers it received.
        api_calls: u32,
        /// Prompt tokens over its requests, as the provider reported them.
        input_tokens: u64,
        /// Generated tokens over its requests.
        output_tokens: u64,
        /// The start of its summary.
        preview: String,
    },
    /// Results of a background delegation reached the session (emitted by the parent).
    DelegationDelivered {
        /// The delegation id the tool returned.
        delegation_id: String,
        /// Whether a new turn started to read them (false: queued for the next turn).
        started_turn: bool,
    },
    /// The session closed.
    SessionEnded {
        /// Why.
        reason: String,
    },
}

/// Fans events out to every live subscriber. Cloning shares the subscriber list; subscribers
/// whose receiver is gone are dropped on the next emit.
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<SessionEvent>>>>,
    /// Another sink that receives every event too (the troupe-wide stream).
    upstream: Option<Arc<EventSink>>,
}

impl EventSink {
    /// A sink with no subscribers.
    pub fn new() -> Self {
        EventSink::default()
    }

    /// A sink that also forwards every event to `upstream`.
    pub fn forwarding_to(upstream: EventSink) -> Self {
        EventSink {
            subscribers: Arc::default(),
            upstream: Some(Arc::new(upstream)),
        }
    }

    /// A new receiver of every event emitted from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<SessionEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.subscribers).push(tx);
        rx
    }

    /// Sends `event` to every subscriber.
    pub fn emit(&self, event: SessionEvent) {
        tracing::debug!(session_id = %event.session_id, ?event.kind, "event");
        if let Some(upstream) = &self.upstream {
            upstream.emit(event.clone());
        }
        let mut subscribers = lock(&self.subscribers);
        subscribers.retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// Shorthand for `emit` with a session id and a kind.
    pub fn send(&self, session_id: &str, kind: EventKind) {
        self.emit(SessionEvent {
            session_id: session_id.to_string(),
            kind,
        });
    }
}

/// The longest [`brief_arguments`] line, in characters.
pub const BRIEF_CHARS: usize = 72;

/// A call's arguments in one short line: the `command` or `path` when there is one, else the
/// object as compact JSON; line breaks shown as `⏎`, cut to [`BRIEF_CHARS`] with `…`.
pub fn brief_arguments(arguments: &serde_json::Map<String, serde_json::Value>) -> String {
    let text = ["command", "path", "query", "url", "name"]
        .iter()
        .find_map(|key| arguments.get(*key).and_then(serde_json::Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| serde_json::Value::Object(arguments.clone()).to_string());
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == BRIEF_CHARS {
            out.push('…');
            break;
        }
        out.push(if c == '\n' { '⏎' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialise_flat_with_a_type() {
        let event = SessionEvent {
            session_id: "s1".into(),
            kind: EventKind::ToolCallFinished {
                turn_id: "t".into(),
                call_id: "c".into(),
                model_call_id: "m".into(),
                tool: "tool_call".into(),
                underlying_tool: "read_file".into(),
                status: CallStatus::Denied,
                duration_ms: 7,
                approval_wait_ms: 1200,
            },
        };
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(value["type"], "tool_call_finished");
        assert_eq!(value["session_id"], "s1");
        assert_eq!(value["status"], "denied");
        assert_eq!(value["underlying_tool"], "read_file");
        assert_eq!(value["duration_ms"], 7);
        assert_eq!(value["approval_wait_ms"], 1200);
    }

    #[test]
    fn closed_subscribers_are_dropped_and_upstream_sees_everything() {
        let upstream = EventSink::new();
        let mut all = upstream.subscribe();
        let sink = EventSink::forwarding_to(upstream);
        let mut first = sink.subscribe();
        let second = sink.subscribe();
        drop(second);
        sink.send(
            "s",
            EventKind::SessionEnded {
                reason: "done".into(),
            },
        );
        assert!(first.try_recv().is_ok());
        assert!(all.try_recv().is_ok());
        assert_eq!(lock(&sink.subscribers).len(), 1);
    }

    #[test]
    fn a_brief_is_one_short_line() {
        let args = serde_json::json!({"command": "echo a\necho b", "timeout": 5});
        assert_eq!(brief_arguments(args.as_object().unwrap()), "echo a⏎echo b");
        let long = serde_json::json!({"path": "x".repeat(200)});
        let brief = brief_arguments(long.as_object().unwrap());
        assert_eq!(brief.chars().count(), BRIEF_CHARS + 1);
        assert!(brief.ends_with('…'));
        let other = serde_json::json!({"n": 1});
        assert_eq!(brief_arguments(other.as_object().unwrap()), r#"{"n":1}"#);
    }
}
