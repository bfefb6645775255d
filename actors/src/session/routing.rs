//! Routing the model's calls. Each call is routed once, when the model's answer comes in
//! ([`route`]): its arguments parsed, a `tool_call` resolved through the bridge to the tool it
//! names, `tool_search`/`tool_describe` marked as lookups. The repeat guard, the wait for
//! still-starting servers, the planner and the runner all read that one [`Route`]; nothing
//! resolves a call again, except a call the view could not route before a wait for starting
//! servers, routed again on the tools they brought.

use std::sync::Arc;

use actix::WeakAddr;
use actix::prelude::*;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use troupe_tools::bridge::ResolvedCall;
use troupe_tools::bridge::tool_call::Resolution;
use troupe_tools::text::json_kind;
use troupe_tools::{CallContext, ToolKind, ToolResult, ToolSearchConfig, ToolsetView, bridge};

use super::Session;
use crate::call::{CallEntry, CallTarget, new_id};
use crate::events::EventKind;
use crate::script_calls::bridge_lookup;
use crate::supervisor::{AskQuestion, Supervisor, Ticket, Verdict, WithdrawApproval};
use troupe_tools::clarify::{CLARIFY_TOOL, Question};
use troupe_tools::connectors::manage::{
    CONNECTED_CHOICE, SKIP_CHOICE, connect_checked, connect_question, connect_skipped,
};
use troupe_tools::deferral::MANAGE_CONNECTIONS;
use troupe_tools::memory::MEMORY_TOOL;
use troupe_tools::todo::TODO_TOOL;

use crate::delegate::{DELEGATE_TASK, DelegateContext, run_delegate_task};
use crate::model::ToolCallRequest;
use crate::repeats::{CallKey, is_pure_read};

/// How long a call that may need a tool from a still-starting MCP server waits for it. Servers
/// that are not ready by then are left out of that batch; the bridge names them.
pub(super) const STARTING_SOURCES_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Where one of the model's calls goes, decided once.
#[derive(Debug)]
pub(super) enum Route {
    /// A tool of the view with its arguments: called directly, or named by a `tool_call` (the
    /// bridge then coerced its arguments to the tool's schema and checked them).
    Tool(ResolvedCall),
    /// `tool_search` or `tool_describe` with its arguments, answered from the view when the
    /// batch runs.
    Lookup(ResolvedCall),
    /// A `tool_call` batch of hosted connector tools: each entry runs as its own call (its own
    /// hooks, approval, trace span and event, under its `connectors__` name), one after
    /// another in this order, and their results go back to the model as one answer.
    Connectors(Vec<bridge::tool_call::CallEntry>),
    /// Never runs, its arguments not being a JSON object: the name the model used, and the
    /// error it reads.
    Invalid(String, ToolResult),
    /// Never runs as things stand (the view has no such tool, or the bridge refused the
    /// `tool_call`), so it is routed again after a wait for still-starting servers: the tool
    /// the model meant when a `tool_call` entry names it (else the name it used), and the
    /// error it reads.
    Unresolved(String, ToolResult),
}

/// One of the model's calls with its route.
#[derive(Debug)]
pub(super) struct RoutedCall {
    /// The call as the model made it.
    pub(super) call: ToolCallRequest,
    /// Where it goes.
    pub(super) route: Route,
}

/// Routes each call on `view` (see the module doc).
pub(super) fn route_all(
    calls: Vec<ToolCallRequest>,
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> Vec<RoutedCall> {
    calls
        .into_iter()
        .map(|call| RoutedCall {
            route: route(&call, view, config),
            call,
        })
        .collect()
}

/// Routes again, on a view that may hold more tools, the calls `view`'s predecessor could not
/// route; the others keep their route.
pub(super) fn reroute_unresolved(
    routed: Vec<RoutedCall>,
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> Vec<RoutedCall> {
    routed
        .into_iter()
        .map(|mut routed| {
            if matches!(routed.route, Route::Unresolved(..)) {
                routed.route = route(&routed.call, view, config);
            }
            routed
        })
        .collect()
}

/// Where `call` goes on `view`. The one place a `tool_call` is resolved.
pub(super) fn route(
    call: &ToolCallRequest,
    view: &ToolsetView,
    config: &ToolSearchConfig,
) -> Route {
    let arguments = match parse_arguments(&call.arguments) {
        Ok(arguments) => arguments,
        Err(result) => return Route::Invalid(call.name.clone(), result),
    };
    match call.name.as_str() {
        "tool_call" => {
            let arguments = Value::Object(arguments);
            match bridge::tool_call::resolve_batch(view, config, &arguments) {
                Ok(Resolution::Local(resolved)) => Route::Tool(resolved),
                Ok(Resolution::Connectors(entries)) => Route::Connectors(entries),
                Err(error) => Route::Unresolved(
                    // Name the tool the model meant, when the entry says, so hooks and events
                    // see it; otherwise the bridge itself.
                    bridge::tool_call::normalize_entries(&arguments)
                        .ok()
                        .and_then(|entries| entries.into_iter().next())
                        .map(|entry| entry.name)
                        .filter(|name| !name.is_empty())
                        .unwrap_or_else(|| "tool_call".to_string()),
                    ToolResult::error_json(error),
                ),
            }
        }
        "tool_search" | "tool_describe" => Route::Lookup(ResolvedCall {
            name: call.name.clone(),
            arguments,
        }),
        name if !view.contains(name) => Route::Unresolved(
            call.name.clone(),
            ToolResult::error(crate::model::unknown_tool_message(name, view, config)),
        ),
        _ => Route::Tool(ResolvedCall {
            name: call.name.clone(),
            arguments,
        }),
    }
}

/// How the repeat guard sees a routed call: what the model named, with what, and whether what
/// would run only reads (a lookup, or a tool whose hints say so).
pub(super) fn call_key(routed: &RoutedCall, view: &ToolsetView) -> CallKey {
    let read = match &routed.route {
        Route::Lookup(_) => is_pure_read(true, None),
        Route::Tool(tool) => is_pure_read(false, view.get(&tool.name).map(|def| &def.hints)),
        Route::Connectors(_) | Route::Invalid(..) | Route::Unresolved(..) => false,
    };
    CallKey::new(&routed.call.name, &routed.call.arguments, read)
}

/// Whether a batch may need tools that a still-starting source brings: a search or describe,
/// a `tool_call` the bridge could not resolve, or a direct call to a tool the view lacks.
pub(super) fn needs_starting_sources(routed: &[RoutedCall], view: &ToolsetView) -> bool {
    if view.sources_starting().is_empty() {
        return false;
    }
    routed.iter().any(|routed| match routed.call.name.as_str() {
        "tool_search" | "tool_describe" => true,
        "tool_call" => matches!(routed.route, Route::Unresolved(..)),
        name => !view.contains(name),
    })
}

/// What runs for `route`, bound to `view`, apart from `delegate_task` (which the session binds
/// to its own state). It takes the route, never the model's call: nothing is resolved here.
pub(super) fn target_of(route: Route, view: &ToolsetView, config: &ToolSearchConfig) -> CallTarget {
    match route {
        Route::Tool(ResolvedCall { name, arguments }) => CallTarget::Tool { name, arguments },
        Route::Lookup(ResolvedCall { name, arguments }) => {
            let view = view.clone();
            let config = config.clone();
            let lookup = name.clone();
            CallTarget::Lookup {
                name,
                arguments,
                run: Box::new(move |arguments| {
                    Box::pin(async move { bridge_lookup(&lookup, &view, &config, arguments).await })
                }),
            }
        }
        // Expanded into one entry per connector call before binding (`Session::entries`).
        Route::Connectors(_) => CallTarget::Invalid {
            name: "tool_call".to_string(),
            result: ToolResult::error(
                "A connector batch could not be run; send its entries again.",
            ),
        },
        Route::Invalid(name, result) | Route::Unresolved(name, result) => {
            CallTarget::Invalid { name, result }
        }
    }
}

impl Session {
    /// Turns routed calls into call entries, bound to the session's current view. A connector
    /// batch becomes one entry per connector call, all answering the same model call: the
    /// planner, hooks, approvals and events see each under its own name.
    pub(super) fn entries(&self, routed: Vec<RoutedCall>) -> Vec<CallEntry> {
        let mut entries = Vec::with_capacity(routed.len());
        for routed in routed {
            match routed.route {
                Route::Connectors(calls) => {
                    for call in calls {
                        entries.push(CallEntry {
                            index: entries.len(),
                            call_id: new_id(),
                            model_call_id: routed.call.id.clone(),
                            tool: routed.call.name.clone(),
                            target: CallTarget::Tool {
                                name: call.name,
                                arguments: call.arguments,
                            },
                        });
                    }
                }
                route => entries.push(CallEntry {
                    index: entries.len(),
                    call_id: new_id(),
                    model_call_id: routed.call.id,
                    tool: routed.call.name,
                    target: self.bind(route),
                }),
            }
        }
        entries
    }

    fn bind(&self, route: Route) -> CallTarget {
        match route {
            Route::Tool(ResolvedCall { name, arguments }) if name == DELEGATE_TASK => {
                self.delegate_target(name, arguments)
            }
            Route::Tool(ResolvedCall { name, arguments })
                if name == CLARIFY_TOOL && self.owns_core_tool(&name) =>
            {
                self.clarify_target(name, arguments)
            }
            Route::Tool(ResolvedCall { name, arguments })
                if name == MANAGE_CONNECTIONS && is_connect(&arguments) =>
            {
                self.connect_target(name, arguments)
            }
            Route::Tool(ResolvedCall { name, arguments })
                if name == TODO_TOOL && self.owns_core_tool(&name) =>
            {
                self.todo_target(name, arguments)
            }
            Route::Tool(ResolvedCall { name, arguments })
                if name == MEMORY_TOOL && self.owns_core_tool(&name) =>
            {
                self.memory_target(name, arguments)
            }
            route => target_of(route, &self.view, &self.config.tool_search),
        }
    }

    /// Whether the view's tool called `name` is troupe's own (toolset `core`), not a tool of
    /// another source that happens to share its name.
    fn owns_core_tool(&self, name: &str) -> bool {
        self.view
            .get(name)
            .is_some_and(|def| def.toolset.as_deref() == Some("core"))
    }

    /// `clarify` goes to the supervisor, which asks whoever answers approvals (or nobody: it
    /// then answers at once). A stop withdraws the question.
    fn clarify_target(&self, name: String, arguments: Map<String, Value>) -> CallTarget {
        let supervisor = self.supervisor.clone();
        let session_id = self.id.clone();
        CallTarget::Task {
            name,
            arguments,
            run: Box::new(move |arguments, cancel| {
                Box::pin(async move {
                    let question = match Question::parse(&arguments) {
                        Ok(question) => question,
                        Err(error) => return ToolResult::error(error),
                    };
                    let verdict = match ask_person(
                        &supervisor,
                        session_id,
                        CLARIFY_TOOL,
                        &question,
                        &cancel,
                    )
                    .await
                    {
                        Ok(verdict) => verdict,
                        Err(error) => {
                            return ToolResult::error(format!(
                                "The question could not be asked ({error}). Decide for yourself and say what you assumed."
                            ));
                        }
                    };
                    match verdict {
                        Verdict::Answered(answer) => question.answered(&answer),
                        Verdict::Denied(text) | Verdict::TimedOut(text) => ToolResult::text(text),
                        Verdict::Interrupted => ToolResult::error(
                            "[The question was withdrawn: the turn was stopped before anyone answered.]",
                        ),
                        Verdict::Allowed | Verdict::Approved => {
                            ToolResult::text(troupe_tools::clarify::NO_ONE_TO_ASK)
                        }
                    }
                })
            }),
        }
    }

    /// `manage_connections` with action `connect`: the registered tool starts the authorization;
    /// when someone can answer, the call shows them the link and waits until they say the app
    /// is connected (then reads its state from the gateway) or skip it. With nobody to ask, or
    /// no link to show, the tool's own result goes back at once. A stop withdraws the question.
    fn connect_target(&self, name: String, arguments: Map<String, Value>) -> CallTarget {
        let Some(handler) = self
            .view
            .get(&name)
            .filter(|def| def.kind == ToolKind::Core)
            .and_then(|def| def.handler.clone())
        else {
            return CallTarget::Tool { name, arguments };
        };
        let supervisor = self.supervisor.clone();
        let session_id = self.id.clone();
        CallTarget::Task {
            name,
            arguments,
            run: Box::new(move |arguments, cancel| {
                Box::pin(async move {
                    let context = || CallContext::new(&session_id, new_id(), cancel.clone());
                    let started = handler.call(arguments, context()).await;
                    let Some((connector, question)) = connect_question(&started) else {
                        return started;
                    };
                    let verdict = match ask_person(
                        &supervisor,
                        session_id.clone(),
                        MANAGE_CONNECTIONS,
                        &question,
                        &cancel,
                    )
                    .await
                    {
                        Ok(verdict) => verdict,
                        // The link still works: the model passes it on.
                        Err(_) => return started,
                    };
                    match verdict {
                        Verdict::Answered(answer) if answer == CONNECTED_CHOICE => {
                            let mut list = Map::new();
                            list.insert("action".into(), json!("list"));
                            let listed = handler.call(list, context()).await;
                            connect_checked(&connector, &listed)
                        }
                        Verdict::Answered(answer) if answer == SKIP_CHOICE => {
                            connect_skipped(&connector)
                        }
                        Verdict::Interrupted => ToolResult::error(
                            "[The connect question was withdrawn: the turn was stopped before anyone answered.]",
                        ),
                        // Nobody to ask, no answer in time, or no choice made: the link as the
                        // tool gave it.
                        _ => started,
                    }
                })
            }),
        }
    }

    /// `todo` reads or changes the session's own list; a change goes out as an event.
    fn todo_target(&self, name: String, arguments: Map<String, Value>) -> CallTarget {
        let todos = Arc::clone(&self.todos);
        let events = self.events.clone();
        let session_id = self.id.clone();
        CallTarget::Task {
            name,
            arguments,
            run: Box::new(move |arguments, _cancel| {
                Box::pin(async move {
                    let (changed, list) = {
                        let mut list = troupe_tools::sync::lock(&todos);
                        match list.apply(&arguments) {
                            Ok(changed) => (changed, list.clone()),
                            Err(error) => {
                                return ToolResult::error_json(json!({
                                    "error": format!("{error} The list was left as it was."),
                                    "todos": list.items,
                                }));
                            }
                        }
                    };
                    if changed {
                        events.send(
                            &session_id,
                            EventKind::TodoUpdated {
                                todos: list.items.clone(),
                                summary: list.summary(),
                            },
                        );
                    }
                    ToolResult::json(list.to_result())
                })
            }),
        }
    }

    /// `memory` writes to the session's own stores (its profile's); without any, the
    /// registered tool answers.
    fn memory_target(&self, name: String, arguments: Map<String, Value>) -> CallTarget {
        let Some(store) = self.config.memory.clone() else {
            return CallTarget::Tool { name, arguments };
        };
        CallTarget::Task {
            name,
            arguments,
            run: Box::new(move |arguments, _cancel| {
                Box::pin(troupe_tools::memory::run_memory_call(store, arguments))
            }),
        }
    }

    /// `delegate_task` (direct or through `tool_call`) runs here, with the session's state;
    /// a view without it (a leaf subagent) leaves the call to fail as an unknown tool.
    fn delegate_target(&self, name: String, arguments: Map<String, Value>) -> CallTarget {
        let Some(arbiter) = self.arbiter.clone().filter(|_| self.view.contains(&name)) else {
            return CallTarget::Tool { name, arguments };
        };
        let background = if self.delegates_in_background() {
            self.me
                .as_ref()
                .and_then(WeakAddr::upgrade)
                .map(Addr::recipient)
        } else {
            None
        };
        let context = DelegateContext {
            parent_id: self.id.clone(),
            parent_path: self.path.clone(),
            provider: Arc::clone(&self.provider),
            view: self.view.clone(),
            config: self.config.clone(),
            hooks: self.hooks.clone(),
            supervisor: self.supervisor.clone(),
            events: self.events.clone(),
            tracker: Arc::clone(&self.subagents),
            arbiter,
            lifetime: self.delegations.clone(),
            slots: Arc::clone(&self.slots),
            background,
            meter: Arc::clone(&self.meter),
        };
        CallTarget::Task {
            name,
            arguments,
            run: Box::new(move |arguments, cancel| {
                Box::pin(run_delegate_task(context, arguments, cancel))
            }),
        }
    }
}

/// Whether a `manage_connections` call starts an authorization.
fn is_connect(arguments: &Map<String, Value>) -> bool {
    arguments
        .get("action")
        .and_then(Value::as_str)
        .is_some_and(|action| action.trim() == "connect")
}

/// Asks the session's person `question` through the supervisor and waits for the verdict; a
/// stop withdraws the question. `Err`: the supervisor could not be reached.
async fn ask_person(
    supervisor: &Addr<Supervisor>,
    session_id: String,
    tool: &str,
    question: &Question,
    cancel: &CancellationToken,
) -> Result<Verdict, MailboxError> {
    let ticket = supervisor
        .send(AskQuestion {
            session_id,
            tool: tool.to_string(),
            call_id: new_id(),
            question: question.clone(),
        })
        .await?;
    Ok(match ticket {
        Ticket::Settled(verdict) => verdict,
        Ticket::Pending {
            request_id,
            verdict,
        } => tokio::select! {
            answer = verdict => answer.unwrap_or(Verdict::Interrupted),
            _ = cancel.cancelled() => {
                supervisor.do_send(WithdrawApproval { request_id });
                Verdict::Interrupted
            }
        },
    })
}

/// Parses a model's raw argument text: empty means `{}`; anything but a JSON object is refused.
fn parse_arguments(raw: &str) -> Result<Map<String, Value>, ToolResult> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ToolResult::error_json(json!({
            "error": "Invalid tool arguments",
            "message": format!("The arguments must be a JSON object, but this was {}. The tool was not run; send an object such as {{\"path\": \"README.md\"}}.", json_kind(&other)),
        }))),
        Err(error) => Err(ToolResult::error_json(json!({
            "error": "Invalid tool arguments",
            "message": format!("The arguments are not valid JSON ({error}). The tool was not run; send one JSON object."),
        }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_tools::{Registry, ToolDef, ToolHints, ViewSpec};

    fn call(id: &str, name: &str, arguments: Value) -> ToolCallRequest {
        ToolCallRequest {
            id: id.to_string(),
            name: name.to_string(),
            arguments: arguments.to_string(),
        }
    }

    /// A view holding a deferred MCP tool that takes an integer `count`, and `local`.
    fn view_with_the_tool() -> ToolsetView {
        Registry::with_tools([
            ToolDef::new(
                "mcp_github_list_issues",
                "List the issues of a repository.",
                json!({"type": "object", "properties": {"count": {"type": "integer"}}}),
            )
            .with_toolset("mcp-github")
            .with_hints(ToolHints {
                read_only: true,
                ..ToolHints::default()
            }),
            ToolDef::new("local", "A local tool.", json!({"type": "object"})).with_toolset("core"),
        ])
        .view(ViewSpec::all())
        .unwrap()
    }

    /// The same catalog after the MCP server went away.
    fn view_without_it() -> ToolsetView {
        Registry::with_tools([
            ToolDef::new("local", "A local tool.", json!({"type": "object"})).with_toolset("core"),
        ])
        .view(ViewSpec::all())
        .unwrap()
    }

    fn bridged() -> ToolCallRequest {
        call(
            "m0",
            "tool_call",
            json!({"calls": [{"name": "mcp_github_list_issues", "arguments": {"count": "3"}}]}),
        )
    }

    #[test]
    fn a_tool_call_is_resolved_once_and_every_later_step_reads_that_resolution() {
        let config = ToolSearchConfig::default();
        let routed = route_all(vec![bridged()], &view_with_the_tool(), &config);
        let [routed] = <[RoutedCall; 1]>::try_from(routed).unwrap();
        // Resolved through the bridge: the underlying tool, arguments coerced to its schema.
        match &routed.route {
            Route::Tool(tool) => {
                assert_eq!(tool.name, "mcp_github_list_issues");
                assert_eq!(tool.arguments.get("count"), Some(&json!(3)));
            }
            other => panic!("not resolved: {other:?}"),
        }
        // The tool disappears before the later steps look. Resolving again would now fail...
        let gone = view_without_it();
        assert!(matches!(
            route(&bridged(), &gone, &config),
            Route::Unresolved(..)
        ));
        // ...but no later step resolves: the wait for starting servers, the reroute after it
        // and the binding all keep the first resolution.
        assert!(!needs_starting_sources(
            std::slice::from_ref(&routed),
            &gone
        ));
        let [routed] =
            <[RoutedCall; 1]>::try_from(reroute_unresolved(vec![routed], &gone, &config)).unwrap();
        match target_of(routed.route, &gone, &config) {
            CallTarget::Tool { name, arguments } => {
                assert_eq!(name, "mcp_github_list_issues");
                assert_eq!(arguments.get("count"), Some(&json!(3)));
            }
            other => panic!("resolved again: {other:?}"),
        }
    }

    #[test]
    fn only_the_calls_a_view_could_not_route_are_routed_again_on_a_newer_one() {
        let config = ToolSearchConfig::default();
        let before = view_without_it();
        let routed = route_all(
            vec![bridged(), call("m1", "local", json!({}))],
            &before,
            &config,
        );
        assert!(
            matches!(routed[0].route, Route::Unresolved(ref name, _) if name == "mcp_github_list_issues")
        );
        assert!(matches!(routed[1].route, Route::Tool(ref tool) if tool.name == "local"));
        // The server came up; `local` went (a newer view of another shape): only the
        // unresolved call is looked at again.
        let after = Registry::with_tools([ToolDef::new(
            "mcp_github_list_issues",
            "List the issues of a repository.",
            json!({"type": "object", "properties": {"count": {"type": "integer"}}}),
        )
        .with_toolset("mcp-github")])
        .view(ViewSpec::all())
        .unwrap();
        let routed = reroute_unresolved(routed, &after, &config);
        assert!(
            matches!(routed[0].route, Route::Tool(ref tool) if tool.name == "mcp_github_list_issues")
        );
        assert!(matches!(routed[1].route, Route::Tool(ref tool) if tool.name == "local"));
    }

    #[test]
    fn the_repeat_guard_counts_lookups_and_declared_readers_as_reads_not_names() {
        let config = ToolSearchConfig::default();
        let view = view_with_the_tool();
        let key = |c: ToolCallRequest, read: bool| {
            let routed = RoutedCall {
                route: route(&c, &view, &config),
                call: c.clone(),
            };
            (
                call_key(&routed, &view),
                CallKey::new(&c.name, &c.arguments, read),
            )
        };
        let (got, want) = key(call("a", "tool_search", json!({"query": "x"})), true);
        assert_eq!(got, want);
        let (got, want) = key(bridged(), true);
        assert_eq!(got, want);
        // `local` declares nothing, and a `read_file` the view lacks is no reader either.
        let (got, want) = key(call("b", "local", json!({})), false);
        assert_eq!(got, want);
        let (got, want) = key(call("c", "read_file", json!({"path": "a"})), false);
        assert_eq!(got, want);
    }

    #[test]
    fn bad_arguments_and_unknown_tools_route_to_errors_that_say_so() {
        let config = ToolSearchConfig::default();
        let view = view_with_the_tool();
        let bad = ToolCallRequest {
            id: "x".into(),
            name: "local".into(),
            arguments: "[1, 2]".into(),
        };
        match route(&bad, &view, &config) {
            Route::Invalid(name, result) => {
                assert_eq!(name, "local");
                assert!(result.to_model_text().contains("JSON object"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            route(&call("y", "nope", json!({})), &view, &config),
            Route::Unresolved(ref name, _) if name == "nope"
        ));
        assert!(matches!(
            route(
                &call("z", "tool_describe", json!({"name": "local"})),
                &view,
                &config
            ),
            Route::Lookup(_)
        ));
    }
}
