//! `tool_call`: unwrapping a bridge call into the deferred tool it names. [`resolve`] reads the
//! entries in every shape models send, applies the one-local-tool-per-call rule, refuses names
//! the view does not defer, and checks the arguments against the tool's schema. The actor
//! runtime calls it to learn the underlying tool (for the batch planner) and its final
//! arguments; it is pure and touches nothing outside the view.

use serde_json::{Map, Value};

use super::tool_error;
use super::validate::{ArgumentCheck, check_arguments};
use crate::config::ToolSearchConfig;
use crate::deferral::{is_bridge_name, is_core};
use crate::lenient::{py_str, py_truthy};
use crate::text::json_kind;
use crate::tool::ToolDef;
use crate::view::ToolsetView;

pub use crate::connectors::names::CONNECTOR_PREFIX;

/// Most connector entries one `tool_call` may carry.
pub const MAX_CALLS_PER_DISPATCH: usize = 10;

/// What a `tool_call` unwraps into.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// One deferred local tool, with coerced, validated arguments.
    Local(ResolvedCall),
    /// One or more hosted connector tools, run one request each, in this order.
    Connectors(Vec<CallEntry>),
}

/// Like [`resolve`], but a batch of `connectors__` entries in a view that grants connectors
/// resolves to its entries (at most [`MAX_CALLS_PER_DISPATCH`]) instead of being refused.
pub fn resolve_batch(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    args: &Value,
) -> Result<Resolution, Value> {
    let entries = normalize_entries(args).map_err(tool_error)?;
    let all_connectors = entries.iter().all(|e| e.name.starts_with(CONNECTOR_PREFIX));
    if !all_connectors || view.connectors().is_none() {
        return resolve(view, config, args).map(Resolution::Local);
    }
    if entries.len() > MAX_CALLS_PER_DISPATCH {
        return Err(tool_error(format!(
            "Too many calls: {} connector entries sent, at most {MAX_CALLS_PER_DISPATCH} per tool_call. Split them over several tool_call calls.",
            entries.len()
        )));
    }
    Ok(Resolution::Connectors(entries))
}

/// Longest first-entry argument echo in the one-local-tool error; longer ones show as `{...}`.
pub const ECHO_ARGS_MAX_CHARS: usize = 1500;

/// Most names suggested for a name that matches no tool.
const MAX_SUGGESTIONS: usize = 10;

/// A `tool_call` unwrapped: the deferred tool to run and the arguments to run it with.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCall {
    /// The underlying tool's name, as the view holds it.
    pub name: String,
    /// Its arguments: coerced and validated when they come from [`resolve`], as sent when they
    /// come from [`resolve_entry`].
    pub arguments: Map<String, Value>,
}

/// One entry of `calls` after normalisation.
#[derive(Debug, Clone, PartialEq)]
pub struct CallEntry {
    /// The trimmed tool name.
    pub name: String,
    /// The arguments as an object (`{}` when none were sent).
    pub arguments: Map<String, Value>,
}

/// Unwraps `args` (the arguments of a `tool_call`) into the deferred tool it names, with
/// arguments coerced to its schema and validated. `Err` is the `{"error": ...}` value the model
/// sees: malformed entries, a batch of local tools, a name the view does not defer, or
/// arguments that do not fit the schema (with `path`, `constraint`, `parameters`, `hint`).
pub fn resolve(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    args: &Value,
) -> Result<ResolvedCall, Value> {
    let call = resolve_entry(view, config, args)?;
    let check = validate(view, &call);
    match check.error {
        Some(error) => Err(error),
        None => Ok(ResolvedCall {
            name: call.name,
            arguments: check.arguments,
        }),
    }
}

/// The first half of [`resolve`]: which tool the call names and the arguments as sent, without
/// looking at the schema.
pub fn resolve_entry(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    args: &Value,
) -> Result<ResolvedCall, Value> {
    let entries = normalize_entries(args).map_err(tool_error)?;
    let Some(first) = entries.first() else {
        // normalize_entries never returns an empty list; answer sensibly if it ever did.
        return Err(tool_error(NO_CALLS));
    };
    let connector = |e: &CallEntry| e.name.starts_with(CONNECTOR_PREFIX);
    if entries.len() > 1 && !entries.iter().all(connector) {
        return Err(tool_error(one_local_per_call(&entries)));
    }
    if connector(first) {
        return Err(tool_error(format!(
            "Hosted connector tools (connectors__...) are not available in this session, so '{}' cannot run. Use tool_search to find a tool you can call instead.",
            first.name
        )));
    }
    let Some(entry) = entries.into_iter().next() else {
        return Err(tool_error(NO_CALLS));
    };
    match view.get(&entry.name) {
        Some(def) if view.is_deferred(&entry.name, &config.defer) => Ok(ResolvedCall {
            name: def.name.clone(),
            arguments: entry.arguments,
        }),
        Some(_) => Err(tool_error(not_deferred_message(&entry.name))),
        None => Err(tool_error(unknown_name_message(view, config, &entry.name))),
    }
}

/// The second half of [`resolve`]: coerces the arguments of `call` by its tool's schema and
/// checks them. A tool the view does not hold has no schema to check against.
pub fn validate(view: &ToolsetView, call: &ResolvedCall) -> ArgumentCheck {
    match view.get(&call.name) {
        Some(def) => check_arguments(&def.name, def.parameters(), &call.arguments),
        None => ArgumentCheck {
            arguments: call.arguments.clone(),
            error: None,
        },
    }
}

const NO_CALLS: &str = "tool_call needs 'calls': a list of {\"name\": ..., \"arguments\": {...}} objects, for example {\"calls\": [{\"name\": \"mcp__github__create_issue\", \"arguments\": {\"title\": \"...\"}}]}.";

const CALLS_SHAPE: &str = "tool_call 'calls' must be a non-empty list of {\"name\": ..., \"arguments\": {...}} objects, for example {\"calls\": [{\"name\": \"mcp__github__create_issue\", \"arguments\": {\"title\": \"...\"}}]}.";

/// Reads the entries of a `tool_call` in every shape models send: `calls` as a list, a single
/// object or a JSON string of either, or the older `{"name", "arguments"}` shape without
/// `calls`. The error message names the entry that was wrong.
pub fn normalize_entries(args: &Value) -> Result<Vec<CallEntry>, String> {
    let empty = Map::new();
    let args = match args {
        Value::Object(map) => map,
        Value::Null => &empty,
        _ => {
            return Err(format!(
                "tool_call arguments must be an object, not {}. {NO_CALLS}",
                json_kind(args)
            ));
        }
    };
    let parsed;
    let calls = match args.get("calls") {
        None | Some(Value::Null) => return legacy_entry(args),
        Some(Value::String(text)) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|e| {
                format!("tool_call 'calls' is a string but not valid JSON ({e}). {CALLS_SHAPE}")
            })?;
            &parsed
        }
        Some(other) => other,
    };
    let items: Vec<&Value> = match calls {
        Value::Object(_) => vec![calls],
        Value::Array(items) if !items.is_empty() => items.iter().collect(),
        _ => return Err(CALLS_SHAPE.to_string()),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| normalize_entry(item, &format!(" calls[{i}]")))
        .collect()
}

/// The shape without `calls`: `{"name": ..., "arguments": ...}` at the top level.
fn legacy_entry(args: &Map<String, Value>) -> Result<Vec<CallEntry>, String> {
    let named = args
        .get("name")
        .is_some_and(|n| py_truthy(n) && !py_str(n).trim().is_empty());
    if !named {
        return Err(NO_CALLS.to_string());
    }
    let entry = normalize_entry(&Value::Object(args.clone()), "")?;
    Ok(vec![entry])
}

/// `label` is `" calls[i]"` for an entry of `calls` and `""` for the shape without `calls`,
/// so messages read "tool_call calls[1] ..." or "tool_call ...".
fn normalize_entry(item: &Value, label: &str) -> Result<CallEntry, String> {
    let Value::Object(entry) = item else {
        return Err(format!(
            "tool_call{label} is {}, but each entry must be an object like {{\"name\": \"...\", \"arguments\": {{...}}}}.",
            json_kind(item)
        ));
    };
    let name = match entry.get("name") {
        Some(n) if py_truthy(n) => py_str(n).trim().to_string(),
        _ => String::new(),
    };
    if name.is_empty() {
        return Err(format!(
            "tool_call{label} has no 'name'. Give the exact tool name that tool_search returned."
        ));
    }
    if is_bridge_name(&name) {
        return Err(format!(
            "tool_call cannot run '{name}': it is one of the bridge tools itself. Call {name} directly."
        ));
    }
    let arguments = match entry.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::String(text)) if text.trim().is_empty() => Map::new(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(other) => return Err(arguments_not_object(label, &other)),
            Err(e) => {
                return Err(format!(
                    "tool_call{label} 'arguments' is a string but not valid JSON ({e}). Send the arguments as a JSON object."
                ));
            }
        },
        Some(Value::Object(map)) => map.clone(),
        Some(other) => return Err(arguments_not_object(label, other)),
    };
    Ok(CallEntry { name, arguments })
}

fn arguments_not_object(label: &str, value: &Value) -> String {
    format!(
        "tool_call{label} 'arguments' is {}, but it must be an object mapping parameter names to values, for example {{\"title\": \"...\"}}.",
        json_kind(value)
    )
}

/// The refusal of a batch that holds a local tool, with the first entry echoed ready to send.
fn one_local_per_call(entries: &[CallEntry]) -> String {
    let n = entries.len();
    let first = &entries[0];
    let args_json = serde_json::to_string(&first.arguments).unwrap_or_else(|_| "{}".into());
    let args_echo = if args_json.chars().count() > ECHO_ARGS_MAX_CHARS {
        "{...}".to_string()
    } else {
        args_json
    };
    let name_json = serde_json::to_string(&first.name).unwrap_or_else(|_| "\"\"".into());
    format!(
        "tool_call runs one local tool per call, and this call holds {n} entries. Send the first one on its own: {{\"calls\":[{{\"name\":{name_json},\"arguments\":{args_echo}}}]}} and then the other {} as separate tool_call calls. Only connectors__ tools may share one call.",
        n - 1
    )
}

/// The refusal of a tool the model sees directly (core tools, GUI surfaces).
pub(crate) fn not_deferred_message(name: &str) -> String {
    format!(
        "'{name}' is offered to you directly, not through the bridge. Call '{name}' as its own tool instead of through tool_call."
    )
}

/// The name as a model might have meant it: trimmed, lowercased, `-` and spaces as `_`.
fn normalized_name(name: &str) -> String {
    name.trim()
        .to_lowercase()
        .chars()
        .map(|c| if c == '-' || c == ' ' { '_' } else { c })
        .collect()
}

/// The answer for a name the view does not hold. Only the view is consulted, so a tool outside
/// it reads exactly like one that does not exist.
fn unknown_name_message(view: &ToolsetView, config: &ToolSearchConfig, name: &str) -> String {
    let wanted = normalized_name(name);
    if let Some(def) = view.get(&wanted)
        && !view.is_deferred(&def.name, &config.defer)
    {
        return not_deferred_message(&def.name);
    }
    // "_x" also covers "__x": one suffix test finds both server-prefixed and plain names. The
    // cheap name test runs first; the deferral rule only for the few names that pass it.
    let suffix = format!("_{wanted}");
    let mut suggestions: Vec<&str> = view
        .tools()
        .iter()
        .map(|d| d.name.as_str())
        .filter(|candidate| {
            candidate.eq_ignore_ascii_case(&wanted)
                || ends_with_ignore_ascii_case(candidate, &suffix)
        })
        .filter(|candidate| view.is_deferred(candidate, &config.defer))
        .collect();
    suggestions.sort_unstable();
    suggestions.dedup();
    let mut message = format!(
        "There is no deferred tool called '{name}'. tool_call needs the exact name that tool_search returns (for example mcp__<server>__<tool>)."
    );
    if suggestions.is_empty() {
        message.push_str(" Search for it with tool_search to get the exact name.");
    } else {
        let shown: Vec<String> = suggestions
            .iter()
            .take(MAX_SUGGESTIONS)
            .map(|s| format!("'{s}'"))
            .collect();
        message.push_str(&format!(" Perhaps you meant {}?", shown.join(", ")));
    }
    message
}

fn ends_with_ignore_ascii_case(text: &str, suffix: &str) -> bool {
    text.len() >= suffix.len()
        && text.as_bytes()[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// Whether `def` is a tool the model is offered directly, rather than one that simply is not
/// known (an unregistered definition with no toolset).
pub(crate) fn is_direct_tool(def: &ToolDef) -> bool {
    def.toolset.is_some() || is_core(def)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::view::ViewSpec;
    use serde_json::json;

    fn registry() -> std::sync::Arc<Registry> {
        let params = json!({"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"}}, "required": ["title"]});
        Registry::with_tools([
            ToolDef::new("github_create_issue", "Open an issue", params.clone())
                .with_toolset("mcp-github"),
            ToolDef::new("mcp__github__create_issue", "Open an issue", params.clone())
                .with_toolset("mcp-github"),
            ToolDef::new("secret_tool", "Hidden", params.clone()).with_toolset("mcp-secret"),
            ToolDef::new("terminal", "Run a command", params).with_toolset("core"),
        ])
    }

    fn run(view: &ToolsetView, args: Value) -> Result<ResolvedCall, Value> {
        resolve(view, &ToolSearchConfig::default(), &args)
    }

    fn error_text(result: Result<ResolvedCall, Value>) -> String {
        match result {
            Err(v) => v["error"].as_str().unwrap_or_default().to_string(),
            Ok(call) => panic!("expected an error, resolved {call:?}"),
        }
    }

    #[test]
    fn every_calls_shape_resolves() {
        let view = registry().view_all();
        let want = ResolvedCall {
            name: "github_create_issue".into(),
            arguments: json!({"title": "t", "n": 3}).as_object().unwrap().clone(),
        };
        let shapes = [
            json!({"calls": [{"name": "github_create_issue", "arguments": {"title": "t", "n": "3"}}]}),
            json!({"calls": {"name": " github_create_issue ", "arguments": "{\"title\": \"t\", \"n\": 3}"}}),
            json!({"calls": "[{\"name\": \"github_create_issue\", \"arguments\": {\"title\": \"t\", \"n\": 3}}]"}),
            json!({"name": "github_create_issue", "arguments": {"title": "t", "n": 3}}),
        ];
        for shape in shapes {
            assert_eq!(run(&view, shape.clone()), Ok(want.clone()), "{shape}");
        }
    }

    #[test]
    fn blank_arguments_are_empty_and_then_miss_required_keys() {
        let view = registry().view_all();
        let error = run(
            &view,
            json!({"calls": [{"name": "github_create_issue", "arguments": "  "}]}),
        )
        .unwrap_err();
        assert_eq!(error["constraint"], "required");
        let entry = resolve_entry(
            &view,
            &ToolSearchConfig::default(),
            &json!({"calls": [{"name": "github_create_issue"}]}),
        );
        assert_eq!(entry.map(|c| c.arguments), Ok(Map::new()));
    }

    #[test]
    fn malformed_entries_name_their_index() {
        let view = registry().view_all();
        assert!(error_text(run(&view, json!({}))).contains("calls"));
        assert!(error_text(run(&view, json!({"calls": []}))).contains("non-empty"));
        assert!(error_text(run(&view, json!({"calls": 5}))).contains("non-empty"));
        assert!(error_text(run(&view, json!({"calls": "[{"}))).contains("not valid JSON"));
        assert!(error_text(run(&view, json!({"calls": ["x"]}))).contains("calls[0]"));
        assert!(
            error_text(run(
                &view,
                json!({"calls": [{"name": "github_create_issue"}, {"name": " "}]})
            ))
            .contains("calls[1]")
        );
        assert!(
            error_text(run(
                &view,
                json!({"calls": [{"name": "x", "arguments": "{oops"}]})
            ))
            .contains("calls[0]")
        );
        assert!(
            error_text(run(
                &view,
                json!({"calls": [{"name": "x", "arguments": [1]}]})
            ))
            .contains("must be an object")
        );
        assert!(
            error_text(run(&view, json!({"calls": [{"name": "tool_describe"}]})))
                .contains("bridge")
        );
        assert!(error_text(run(&view, json!("text"))).contains("must be an object"));
        let legacy = error_text(run(&view, json!({"name": "x", "arguments": "{oops"})));
        assert!(
            legacy.starts_with("tool_call 'arguments' is a string but not valid JSON"),
            "{legacy}"
        );
    }

    #[test]
    fn batches_of_local_tools_echo_the_first_entry() {
        let view = registry().view_all();
        let text = error_text(run(
            &view,
            json!({"calls": [
                {"name": "github_create_issue", "arguments": {"title": "a"}},
                {"name": "connectors__gmail__SEND", "arguments": {}},
                {"name": "terminal", "arguments": {}}
            ]}),
        ));
        assert!(
            text.contains(
                r#"{"calls":[{"name":"github_create_issue","arguments":{"title":"a"}}]}"#
            ),
            "{text}"
        );
        assert!(text.contains("other 2"), "{text}");
        let long = "x".repeat(2000);
        let text = error_text(run(
            &view,
            json!({"calls": [{"name": "a", "arguments": {"t": long}}, {"name": "b"}]}),
        ));
        assert!(text.contains(r#""arguments":{...}"#), "{text}");
    }

    #[test]
    fn connectors_are_not_available_yet() {
        let view = registry().view_all();
        let text = error_text(run(
            &view,
            json!({"calls": [{"name": "connectors__gmail__SEND_EMAIL"}, {"name": "connectors__x__Y"}]}),
        ));
        assert!(text.contains("not available"), "{text}");
    }

    #[test]
    fn direct_tools_are_refused_with_their_normalised_name() {
        let view = registry().view_all();
        assert!(
            error_text(run(&view, json!({"name": "terminal"})))
                .contains("'terminal' is offered to you directly")
        );
        assert!(
            error_text(run(&view, json!({"name": "Terminal"})))
                .contains("'terminal' is offered to you directly")
        );
    }

    #[test]
    fn unknown_names_get_suffix_suggestions_from_the_view_only() {
        let view = registry().view_all();
        let text = error_text(run(&view, json!({"name": "create_issue"})));
        assert!(
            text.ends_with("Perhaps you meant 'github_create_issue', 'mcp__github__create_issue'?"),
            "{text}"
        );
        let text = error_text(run(&view, json!({"name": "nothing_like_it"})));
        assert!(text.contains("tool_search"), "{text}");

        // A tool outside the view reads exactly like one that does not exist.
        let narrow = registry()
            .view(ViewSpec::all().without_toolsets(["mcp-secret"]))
            .unwrap();
        let hidden = error_text(run(&narrow, json!({"name": "secret_tool"})));
        let missing = error_text(run(&narrow, json!({"name": "secret_toal"})));
        assert_eq!(
            hidden.replace("secret_tool", "NAME"),
            missing.replace("secret_toal", "NAME")
        );
        let text = error_text(run(&narrow, json!({"name": "tool"})));
        assert!(!text.contains("secret"), "{text}");
    }
}
