//! Hook points plugins implement ([`Hook`]) and the [`HookRegistry`] the session and the tool
//! runner call them through. Tool hooks always see the underlying tool's name, even when the
//! model went through the `tool_call` bridge. A hook that panics is contained: a panicking
//! `pre_tool_call` blocks its call, any other panic is logged and ignored.
//!
//! `pre_tool_call` has an async form ([`Hook::pre_tool_call_async`]) for hooks that wait on
//! something outside the process (a command hook's child process); the runner awaits it, so a
//! slow hook never holds a tokio worker thread.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Map, Value};
use troupe_tools::ToolResult;

use crate::call::CallStatus;
use crate::model::{ModelRequest, ModelResponse};

/// What a hook sees of one tool call.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallInfo<'a> {
    /// The session making the call.
    pub session_id: &'a str,
    /// Session ids from the root session down to the one making the call (a subagent's path
    /// has more than one entry).
    pub agent_path: &'a [String],
    /// troupe's id for the call entry.
    pub call_id: &'a str,
    /// The tool the model named (`tool_call` when bridged).
    pub tool: &'a str,
    /// The tool that runs.
    pub underlying_tool: &'a str,
    /// The arguments the underlying tool gets.
    pub arguments: &'a Map<String, Value>,
}

/// What a `pre_tool_call` hook decides.
#[derive(Debug, Clone, PartialEq)]
pub enum PreToolDecision {
    /// Run the call as it is.
    Continue,
    /// Run the call with these arguments instead.
    Rewrite(Map<String, Value>),
    /// Do not run it; the model is told `reason`.
    Block {
        /// Why, in words the model reads.
        reason: String,
    },
    /// Run the call, with these arguments when given, and add `note` to its result.
    Amend {
        /// Replacement arguments, if any.
        arguments: Option<Map<String, Value>>,
        /// A line added to the result the model reads, if any.
        note: Option<String>,
    },
}

/// What the `pre_tool_call` hooks of a registry decided together, when none blocked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreToolOutcome {
    /// The final arguments when some hook rewrote them.
    pub arguments: Option<Map<String, Value>>,
    /// The hooks that rewrote the arguments, in order (named in schema errors).
    pub rewritten_by: Vec<String>,
    /// Notes to add to the result, in hook order.
    pub notes: Vec<String>,
}

/// What a hook sees of a subagent starting or ending.
#[derive(Debug, Clone, Copy)]
pub struct SubagentInfo<'a> {
    /// Session ids from the root down to the parent that delegated.
    pub parent_path: &'a [String],
    /// The subagent's id in its delegation (`sa-<index>-<hex>`).
    pub subagent_id: &'a str,
    /// The child's own session id.
    pub child_session_id: &'a str,
    /// The task it was given.
    pub goal: &'a str,
}

/// A plugin's hooks. Every method has a do-nothing default, so a hook implements only what it
/// needs. Hooks run on the tokio pool and must return quickly: they are called inline.
pub trait Hook: Send + Sync + 'static {
    /// A short name for logs and block messages.
    fn name(&self) -> &str;

    /// Before a tool runs (before approval): may block it or rewrite its arguments.
    fn pre_tool_call(&self, _call: &ToolCallInfo<'_>) -> PreToolDecision {
        PreToolDecision::Continue
    }

    /// The form of [`Hook::pre_tool_call`] the runner awaits; by default it calls the plain
    /// one. Override it when the decision waits on I/O.
    fn pre_tool_call_async<'a>(&'a self, call: ToolCallInfo<'a>) -> BoxFuture<'a, PreToolDecision> {
        let decision = self.pre_tool_call(&call);
        Box::pin(std::future::ready(decision))
    }

    /// After a call ended, exactly once per call, whatever the status.
    fn post_tool_call(&self, _call: &ToolCallInfo<'_>, _status: CallStatus, _result: &ToolResult) {}

    /// Before a model request; may add to or change it.
    fn pre_llm_call(&self, _session_id: &str, _request: &mut ModelRequest) {}

    /// After a model request succeeded.
    fn post_llm_call(&self, _session_id: &str, _response: &ModelResponse) {}

    /// When a session opens; `agent_path` runs from the root session down to this one.
    fn on_session_start(&self, _session_id: &str, _agent_path: &[String]) {}

    /// When a session closes.
    fn on_session_end(&self, _session_id: &str, _agent_path: &[String], _reason: &str) {}

    /// When a subagent's session has opened and is about to get its task.
    fn on_subagent_start(&self, _subagent: &SubagentInfo<'_>) {}

    /// When a subagent ended; `status` is its report's status (`completed`, `failed`,
    /// `interrupted`, `timeout`, `error`).
    fn on_subagent_end(&self, _subagent: &SubagentInfo<'_>, _status: &str, _summary: &str) {}
}

/// The hooks of a session, called in registration order. Cheap to clone.
#[derive(Clone, Default)]
pub struct HookRegistry {
    hooks: Arc<Vec<Arc<dyn Hook>>>,
}

impl std::fmt::Debug for HookRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.hooks.iter().map(|h| h.name()))
            .finish()
    }
}

impl HookRegistry {
    /// No hooks.
    pub fn new() -> Self {
        HookRegistry::default()
    }

    /// These hooks, in order.
    pub fn with_hooks(hooks: Vec<Arc<dyn Hook>>) -> Self {
        HookRegistry {
            hooks: Arc::new(hooks),
        }
    }

    /// A registry with `hook` added at the end.
    pub fn with(&self, hook: Arc<dyn Hook>) -> Self {
        let mut hooks: Vec<Arc<dyn Hook>> = self.hooks.as_ref().clone();
        hooks.push(hook);
        HookRegistry {
            hooks: Arc::new(hooks),
        }
    }

    /// Whether no hook is registered.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Runs every `pre_tool_call` in order, awaiting each. Rewrites accumulate (each hook sees
    /// the previous one's arguments); notes collect; the first block wins. Returns what the hooks
    /// decided together, or the block reason.
    pub async fn pre_tool_call(&self, call: &ToolCallInfo<'_>) -> Result<PreToolOutcome, String> {
        let mut outcome = PreToolOutcome::default();
        for hook in self.hooks.iter() {
            let arguments = outcome.arguments.as_ref().unwrap_or(call.arguments);
            let info = ToolCallInfo { arguments, ..*call };
            let decided = match catch_unwind(AssertUnwindSafe(|| hook.pre_tool_call_async(info))) {
                Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
                Err(panic) => Err(panic),
            };
            let (arguments, note) = match decided {
                Ok(PreToolDecision::Continue) => (None, None),
                Ok(PreToolDecision::Rewrite(arguments)) => (Some(arguments), None),
                Ok(PreToolDecision::Amend { arguments, note }) => (arguments, note),
                Ok(PreToolDecision::Block { reason }) => {
                    return Err(format!(
                        "The hook '{}' blocked this call: {reason}",
                        hook.name()
                    ));
                }
                Err(_) => {
                    tracing::error!(
                        hook = hook.name(),
                        tool = call.underlying_tool,
                        "pre_tool_call hook panicked"
                    );
                    return Err(format!(
                        "The hook '{}' failed while checking this call, so it was not run.",
                        hook.name()
                    ));
                }
            };
            if let Some(arguments) = arguments {
                outcome.arguments = Some(arguments);
                outcome.rewritten_by.push(hook.name().to_string());
            }
            if let Some(note) = note.filter(|n| !n.trim().is_empty()) {
                outcome.notes.push(note);
            }
        }
        Ok(outcome)
    }

    /// Runs every `post_tool_call`.
    pub fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, result: &ToolResult) {
        self.each("post_tool_call", |h| h.post_tool_call(call, status, result));
    }

    /// Runs every `pre_llm_call`.
    pub fn pre_llm_call(&self, session_id: &str, request: &mut ModelRequest) {
        for hook in self.hooks.iter() {
            if catch_unwind(AssertUnwindSafe(|| hook.pre_llm_call(session_id, request))).is_err() {
                tracing::error!(hook = hook.name(), "pre_llm_call hook panicked");
            }
        }
    }

    /// Runs every `post_llm_call`.
    pub fn post_llm_call(&self, session_id: &str, response: &ModelResponse) {
        self.each("post_llm_call", |h| h.post_llm_call(session_id, response));
    }

    /// Runs every `on_session_start`.
    pub fn on_session_start(&self, session_id: &str, agent_path: &[String]) {
        self.each("on_session_start", |h| {
            h.on_session_start(session_id, agent_path)
        });
    }

    /// Runs every `on_session_end`.
    pub fn on_session_end(&self, session_id: &str, agent_path: &[String], reason: &str) {
        self.each("on_session_end", |h| {
            h.on_session_end(session_id, agent_path, reason)
        });
    }

    /// Runs every `on_subagent_start`.
    pub fn on_subagent_start(&self, subagent: &SubagentInfo<'_>) {
        self.each("on_subagent_start", |h| h.on_subagent_start(subagent));
    }

    /// Runs every `on_subagent_end`.
    pub fn on_subagent_end(&self, subagent: &SubagentInfo<'_>, status: &str, summary: &str) {
        self.each("on_subagent_end", |h| {
            h.on_subagent_end(subagent, status, summary)
        });
    }

    fn each(&self, point: &'static str, f: impl Fn(&dyn Hook)) {
        for hook in self.hooks.iter() {
            if catch_unwind(AssertUnwindSafe(|| f(hook.as_ref()))).is_err() {
                tracing::error!(hook = hook.name(), point, "hook panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Rewriter;
    impl Hook for Rewriter {
        fn name(&self) -> &str {
            "rewriter"
        }
        fn pre_tool_call(&self, call: &ToolCallInfo<'_>) -> PreToolDecision {
            let mut args = call.arguments.clone();
            args.insert("touched".into(), json!(true));
            PreToolDecision::Rewrite(args)
        }
    }

    struct BlockTerminal;
    impl Hook for BlockTerminal {
        fn name(&self) -> &str {
            "policy"
        }
        fn pre_tool_call(&self, call: &ToolCallInfo<'_>) -> PreToolDecision {
            if call.underlying_tool == "terminal" {
                PreToolDecision::Block {
                    reason: "no shells here".into(),
                }
            } else {
                PreToolDecision::Continue
            }
        }
    }

    struct Panics;
    impl Hook for Panics {
        fn name(&self) -> &str {
            "panics"
        }
        fn pre_tool_call(&self, _call: &ToolCallInfo<'_>) -> PreToolDecision {
            panic!("hook bug")
        }
    }

    fn info<'a>(tool: &'a str, args: &'a Map<String, Value>) -> ToolCallInfo<'a> {
        ToolCallInfo {
            session_id: "s",
            agent_path: &[],
            call_id: "c",
            tool: "tool_call",
            underlying_tool: tool,
            arguments: args,
        }
    }

    #[tokio::test]
    async fn rewrites_accumulate_and_blocks_name_the_hook() {
        let hooks = HookRegistry::with_hooks(vec![Arc::new(Rewriter), Arc::new(BlockTerminal)]);
        let args = Map::new();
        let outcome = hooks
            .pre_tool_call(&info("read_file", &args))
            .await
            .unwrap();
        assert_eq!(outcome.arguments.unwrap()["touched"], json!(true));
        assert_eq!(outcome.rewritten_by, vec!["rewriter".to_string()]);
        let blocked = hooks
            .pre_tool_call(&info("terminal", &args))
            .await
            .unwrap_err();
        assert!(blocked.contains("policy") && blocked.contains("no shells here"));
    }

    #[tokio::test]
    async fn a_panicking_pre_hook_blocks_instead_of_crashing() {
        let hooks = HookRegistry::new().with(Arc::new(Panics));
        let args = Map::new();
        assert!(
            hooks
                .pre_tool_call(&info("read_file", &args))
                .await
                .is_err()
        );
    }
}
