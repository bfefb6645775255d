//! The `delegate_task` tool as the model sees it: [`delegate_task_def`] builds its definition
//! (schema and a description stating the live limits) and [`register_delegate_task`] puts it in
//! a registry. The definition's own handler only answers calls made outside a session; inside
//! one the session routes the call to [`super::run`], which knows the parent.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_tools::{CallContext, Registry, ToolDef, ToolHandler, ToolResult};

use super::config::DelegationConfig;

/// The tool's name.
pub const DELEGATE_TASK: &str = "delegate_task";
/// The toolset it belongs to.
pub const DELEGATION_TOOLSET: &str = "delegation";
/// Tools a child never gets, whatever its parent holds (`delegate_task` is added for leaves).
pub const BLOCKED_FOR_CHILDREN: &[&str] = &["send_message"];
/// Toolsets a child never gets.
pub const BLOCKED_TOOLSETS_FOR_CHILDREN: &[&str] = &["kanban"];

/// The definition of `delegate_task` for `config`'s limits.
pub fn delegate_task_def(config: &DelegationConfig) -> ToolDef {
    // Children of one call already run together; two calls in one turn stay apart, as they
    // may work in the same folder.
    ToolDef::new(DELEGATE_TASK, description(config), parameters(config))
        .with_toolset(DELEGATION_TOOLSET)
        .exclusive()
        .with_handler(Arc::new(NoParent))
}

/// Registers (or replaces) `delegate_task` in `registry` with `config`'s limits in its text.
pub fn register_delegate_task(registry: &Registry, config: &DelegationConfig) {
    registry.register(delegate_task_def(config));
}

fn description(config: &DelegationConfig) -> String {
    let timeout = match config.child_timeout {
        Some(t) => format!(
            " A subagent that shows no progress for {} s is stopped and reported as timeout.",
            t.as_secs()
        ),
        None => String::new(),
    };
    format!(
        "Hand work to subagents: each task gets a fresh agent with its own conversation and up to {iters} tool rounds, \
         running in parallel with the others (at most {max} tasks per call), and the results come back in task order. \
         Subagents know nothing of this conversation: put everything they need in `goal` and `context` (paths, \
         names, what done looks like). They get your tools minus send_message and the kanban tools; their \
         clarify questions reach the user as yours do, and each keeps its own todo list. In a session that can take later messages the call returns \
         a handle at once and the results arrive as a later message: do not wait or poll for them; elsewhere the \
         call waits for all tasks. A summary is the subagent's own report (a SELF-REPORT): check files or other \
         side effects yourself before relying on them. Use action=list to see running subagents, steer to send one \
         a note it reads on its next model turn, stop to end one (and everything it started). The user can end \
         everything with /stop. Prefer execute_code or a direct tool for small mechanical steps; delegate work \
         that needs its own reasoning.{timeout} Subagents at depth {depth} cannot delegate further.",
        iters = config.max_iterations,
        max = config.max_concurrent_children,
        depth = config.max_spawn_depth,
    )
}

fn parameters(config: &DelegationConfig) -> Value {
    json!({
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "minItems": 1,
                "description": format!(
                    "The task(s), up to {} in parallel; one entry per subagent (a single task is a one-entry list).",
                    config.max_concurrent_children
                ),
                "items": {
                    "type": "object",
                    "properties": {
                        "goal": {"type": "string", "description": "What the subagent must achieve, stated so it can work alone."},
                        "context": {"type": "string", "description": "Facts it needs: files, earlier findings, constraints."},
                        "output_schema": {"type": "object", "description": "A JSON Schema the subagent's answer must match; it is told to answer with JSON only, and gets one chance to fix a mismatch."}
                    },
                    "required": ["goal"]
                }
            },
            "action": {
                "type": "string",
                "enum": ["spawn", "list", "steer", "stop"],
                "description": "spawn (default) starts the tasks; list shows running subagents; steer sends one a message; stop ends one."
            },
            "subagent_id": {"type": "string", "description": "For steer and stop: the subagent, as spawn or list named it."},
            "message": {"type": "string", "description": "For steer: the note to send."}
        }
    })
}

/// Answers a call that reached the definition directly, outside any session.
struct NoParent;

impl ToolHandler for NoParent {
    fn call(
        &self,
        _arguments: Map<String, Value>,
        _ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        Box::pin(async {
            ToolResult::error(
                "delegate_task needs a parent agent: only a session can hand work to subagents. Call it from a chat session.",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_offers_no_operator_knobs_and_states_live_limits() {
        let config = DelegationConfig {
            max_concurrent_children: 7,
            max_iterations: 40,
            ..DelegationConfig::default()
        };
        let def = delegate_task_def(&config);
        let params = def.parameters();
        let props = params["properties"].as_object().unwrap();
        for knob in ["toolsets", "max_iterations", "model", "role", "background"] {
            assert!(!props.contains_key(knob), "{knob} must not be offered");
        }
        assert!(params["properties"]["tasks"].get("maxItems").is_none());
        assert!(
            props["tasks"]["description"]
                .as_str()
                .unwrap()
                .contains("up to 7")
        );
        assert!(def.description().contains("at most 7 tasks"));
        assert!(def.description().contains("40 tool rounds"));
        assert!(def.description().len() <= 2_200);
    }

    #[actix_rt::test]
    async fn outside_a_session_it_says_it_needs_a_parent() {
        let registry = Registry::new();
        register_delegate_task(&registry, &DelegationConfig::default());
        let view = registry.view_all();
        let result = view
            .call(DELEGATE_TASK, Map::new(), CallContext::detached("c"))
            .await;
        assert!(result.is_error);
        assert!(result.to_model_text().contains("parent agent"));
    }
}
