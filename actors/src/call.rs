//! A tool call as the session hands it to the planner and the runner ([`CallEntry`]), how a
//! call ended ([`CallStatus`], [`CallOutcome`]), and id minting. The actors' messages live with
//! the actor that receives them.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use troupe_tools::ToolResult;

/// A fresh time-ordered id (uuid v7) for sessions, turns, call entries and approval requests.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// How a tool call ended. Every call gets exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    /// The tool ran and succeeded.
    Ok,
    /// The tool ran and failed, or its arguments were unusable.
    Error,
    /// An approval, a hook or a safety rule refused it.
    Denied,
    /// It hit the batch deadline (or waited too long for a person).
    Timeout,
    /// A stop cancelled it while running or before it started.
    Interrupted,
}

impl CallStatus {
    /// The status word used in events and `--json` output.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Denied => "denied",
            CallStatus::Timeout => "timeout",
            CallStatus::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Work that answers a bridge lookup (`tool_search`, `tool_describe`) from the session's view
/// (and, with hosted connectors in scope, the tool gateway).
pub type LookupFn =
    Box<dyn FnOnce(Map<String, Value>) -> BoxFuture<'static, ToolResult> + Send + 'static>;

/// Work that runs in process for a session-owned tool (`delegate_task`): it gets the arguments
/// and the call's cancellation token, and may take as long as its own limits allow.
pub type TaskFn = Box<
    dyn FnOnce(Map<String, Value>, CancellationToken) -> BoxFuture<'static, ToolResult>
        + Send
        + 'static,
>;

/// What a call entry runs.
pub enum CallTarget {
    /// A tool in the session's view, with arguments that parsed as a JSON object.
    Tool {
        /// The underlying tool's name (already unwrapped from `tool_call`).
        name: String,
        /// Its arguments.
        arguments: Map<String, Value>,
    },
    /// A bridge lookup answered in process.
    Lookup {
        /// `tool_search` or `tool_describe`.
        name: String,
        /// Its arguments.
        arguments: Map<String, Value>,
        /// The code that answers it.
        run: LookupFn,
    },
    /// A tool the session itself answers because it needs the session's state (the parent's
    /// view, provider and place in the tree): `delegate_task`. No approval is asked for the
    /// call itself, and the batch deadline does not apply; what it starts has its own checks.
    Task {
        /// The tool's name.
        name: String,
        /// Its arguments.
        arguments: Map<String, Value>,
        /// The code that answers it.
        run: TaskFn,
    },
    /// A call that never runs: its arguments were unusable or the bridge could not resolve it.
    Invalid {
        /// The underlying tool, when known; otherwise the name the model used.
        name: String,
        /// The error result the model reads.
        result: ToolResult,
    },
}

impl fmt::Debug for CallTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallTarget::Tool { name, .. } => f
                .debug_struct("Tool")
                .field("name", name)
                .finish_non_exhaustive(),
            CallTarget::Lookup { name, .. } => f
                .debug_struct("Lookup")
                .field("name", name)
                .finish_non_exhaustive(),
            CallTarget::Task { name, .. } => f
                .debug_struct("Task")
                .field("name", name)
                .finish_non_exhaustive(),
            CallTarget::Invalid { name, .. } => f
                .debug_struct("Invalid")
                .field("name", name)
                .finish_non_exhaustive(),
        }
    }
}

impl CallTarget {
    /// The name of what runs.
    pub fn name(&self) -> &str {
        match self {
            CallTarget::Tool { name, .. }
            | CallTarget::Lookup { name, .. }
            | CallTarget::Task { name, .. }
            | CallTarget::Invalid { name, .. } => name,
        }
    }

    /// The arguments, when they parsed.
    pub fn arguments(&self) -> Option<&Map<String, Value>> {
        match self {
            CallTarget::Tool { arguments, .. }
            | CallTarget::Lookup { arguments, .. }
            | CallTarget::Task { arguments, .. } => Some(arguments),
            CallTarget::Invalid { .. } => None,
        }
    }
}

/// One tool call of a model turn, as the session prepared it.
#[derive(Debug)]
pub struct CallEntry {
    /// Position in the model's emission order; results come back in this order.
    pub index: usize,
    /// troupe's id for the entry (uuid v7).
    pub call_id: String,
    /// The provider's id, which the tool message answers.
    pub model_call_id: String,
    /// The tool the model named (`tool_call` for a bridged call).
    pub tool: String,
    /// What actually runs.
    pub target: CallTarget,
}

impl CallEntry {
    /// The underlying tool's name.
    pub fn underlying(&self) -> &str {
        self.target.name()
    }

    /// The arguments the underlying tool gets, when they parsed.
    pub fn arguments(&self) -> Option<&Map<String, Value>> {
        match &self.target {
            CallTarget::Tool { arguments, .. }
            | CallTarget::Lookup { arguments, .. }
            | CallTarget::Task { arguments, .. } => Some(arguments),
            CallTarget::Invalid { .. } => None,
        }
    }
}

/// The result slot of one call entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// Position in the model's emission order.
    pub index: usize,
    /// troupe's id for the entry.
    pub call_id: String,
    /// The provider's id.
    pub model_call_id: String,
    /// The tool the model named.
    pub tool: String,
    /// The tool that ran (or would have).
    pub underlying_tool: String,
    /// How it ended.
    pub status: CallStatus,
    /// What the model reads.
    pub result: ToolResult,
    /// From start to result, the wait for a person's approval left out.
    pub duration: Duration,
    /// How long the call waited for a person's approval (zero when none was asked).
    pub approval_wait: Duration,
}
