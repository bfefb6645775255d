//! Property tests for the bridge tools: arbitrary JSON (nested values, JSON-encoded strings, the
//! real argument keys holding anything) thrown at `tool_search`, `tool_describe` and `tool_call`'s
//! `resolve` over a small registry of deferred, core, GUI and unregistered tools. Nothing may
//! panic, every answer is a JSON object, every error is `{"error": <string>, ...}`, and a tool
//! outside the view never shows up in an answer unless the caller named it.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};
use troupe_tools::bridge::{resolve, tool_describe, tool_search};
use troupe_tools::{Registry, ToolDef, ToolSearchConfig, ToolsetView, ViewSpec};

/// A name outside the narrowed view; it must never leak into an answer.
const HIDDEN: &str = "hidden_vault_secrets";

const NAMES: &[&str] = &[
    "gh_create_issue",
    "mcp__gh__create_issue",
    "create_issue",
    "typed_probe",
    "nullable_probe",
    "remote_ref_probe",
    "broken_schema_probe",
    "no_schema_probe",
    "terminal",
    "Terminal",
    "desk_panel",
    "loose_tool",
    HIDDEN,
    "tool_search",
    "tool_describe",
    "tool_call",
    "connectors__gmail__SEND_EMAIL",
    "connectors__",
    "",
    " ",
];

const KEYS: &[&str] = &["queries", "limit", "names", "calls", "name", "arguments"];

fn registry() -> Arc<Registry> {
    let issue = json!({"type": "object", "properties": {"title": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"}}}, "required": ["title"]});
    let typed = json!({"type": "object", "properties": {
        "count": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "opts": {"type": "object", "properties": {"deep": {"type": "integer"}}, "additionalProperties": false},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["a", "b"]},
        "either": {"type": ["integer", "array", "null"]},
        "alt": {"anyOf": [{"type": "object", "properties": {"n": {"type": "integer"}}}, {"type": "string", "pattern": "^x"}]}
    }});
    let nullable = json!({"type": "object", "properties": {"maybe": {"type": "string", "nullable": true}, "e": {"enum": ["x"], "nullable": true}}});
    let remote =
        json!({"type": "object", "properties": {"r": {"$ref": "https://example.com/s.json"}}});
    let broken = json!({"type": "object", "properties": {"b": {"type": 17}}, "required": "b"});
    let mut no_schema = ToolDef::new("no_schema_probe", "No schema.", json!({}));
    no_schema.parameters = None;
    no_schema.description = None;
    Registry::with_tools([
        ToolDef::new(
            "gh_create_issue",
            "Open an issue in a repository.",
            issue.clone(),
        )
        .with_toolset("mcp-gh"),
        ToolDef::new("mcp__gh__create_issue", "Open an issue (prefixed).", issue)
            .with_toolset("mcp-gh"),
        ToolDef::new("typed_probe", "Every type.", typed).with_toolset("probe-plugin"),
        ToolDef::new("nullable_probe", "Nullable fields.", nullable).with_toolset("probe-plugin"),
        ToolDef::new("remote_ref_probe", "Remote ref.", remote).with_toolset("mcp-probe"),
        ToolDef::new("broken_schema_probe", "Broken schema.", broken).with_toolset("mcp-probe"),
        no_schema.with_toolset("mcp-probe"),
        ToolDef::new(
            HIDDEN,
            "Secrets no subagent may see.",
            json!({"type": "object"}),
        )
        .with_toolset("mcp-vault"),
        ToolDef::new("terminal", "Run a command.", json!({"type": "object"})).with_toolset("core"),
        ToolDef::new("desk_panel", "A GUI surface.", json!({"type": "object"}))
            .with_toolset("desktop_ui"),
        ToolDef::new("loose_tool", "Unregistered.", json!({"type": "object"})),
    ])
}

fn views() -> (ToolsetView, ToolsetView) {
    let registry = registry();
    let all = registry.view_all();
    let narrowed = registry
        .view(ViewSpec::all().without_toolsets(["mcp-vault"]))
        .unwrap_or_else(|e| panic!("the narrowed view must build: {e}"));
    (all, narrowed)
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        ".{0,12}".prop_map(Value::String),
        "[ -~]{0,8}".prop_map(Value::String),
        prop::sample::select(NAMES).prop_map(|s| Value::String(s.to_string())),
        prop::sample::select(
            &[
                "42",
                "-1",
                "4.5",
                "true",
                "TRUE",
                "null",
                "",
                "  ",
                "inf",
                "nan",
                "1e999",
                "{",
                "[1,2]",
                "{\"a\":1}"
            ][..]
        )
        .prop_map(|s| Value::String(s.to_string())),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(KEYS).prop_map(str::to_string),
        prop::sample::select(
            &[
                "count", "ratio", "flag", "opts", "tags", "mode", "either", "alt", "maybe", "e",
                "title", "deep", "n"
            ][..]
        )
        .prop_map(str::to_string),
        "[a-z ]{0,6}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner.clone()), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
            // JSON-encoded strings, as models send them for calls, arguments and lists.
            inner.prop_map(|v| Value::String(v.to_string())),
        ]
    })
}

/// A `tool_call` entry with a real or near-real name and arbitrary arguments.
fn entry() -> impl Strategy<Value = Value> {
    (prop::sample::select(NAMES), value(), any::<bool>()).prop_map(|(name, arguments, encode)| {
        let arguments = if encode {
            Value::String(arguments.to_string())
        } else {
            arguments
        };
        json!({"name": name, "arguments": arguments})
    })
}

/// Arguments as a bridge tool receives them: anything at all, or objects with the real keys.
fn args() -> impl Strategy<Value = Value> {
    prop_oneof![
        value(),
        prop::collection::vec(
            (prop::sample::select(KEYS).prop_map(str::to_string), value()),
            0..5
        )
        .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        prop::collection::vec(entry(), 0..4).prop_map(|calls| json!({"calls": calls})),
        prop::collection::vec(entry(), 1..3)
            .prop_map(|calls| json!({"calls": Value::Array(calls).to_string()})),
        entry(),
        prop::collection::vec(
            prop::sample::select(NAMES).prop_map(|s| Value::String(s.into())),
            0..14
        )
        .prop_map(|names| json!({"names": names, "queries": names})),
    ]
}

/// Every answer is an object, and an error answer carries a string `error`.
fn check_answer(out: &Value) -> Result<(), TestCaseError> {
    let map = out
        .as_object()
        .ok_or_else(|| TestCaseError::fail(format!("not an object: {out}")))?;
    if let Some(error) = map.get("error") {
        prop_assert!(error.is_string(), "error is not a string: {}", out);
    }
    Ok(())
}

/// The hidden tool appears in an answer only when the caller named it.
fn check_no_leak(input: &Value, out: &Value) -> Result<(), TestCaseError> {
    if !input.to_string().contains(HIDDEN) {
        prop_assert!(
            !out.to_string().contains(HIDDEN),
            "hidden tool leaked: {}",
            out
        );
    }
    Ok(())
}

fn check_resolve(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    input: &Value,
) -> Result<Value, TestCaseError> {
    match resolve(view, config, input) {
        Ok(call) => {
            prop_assert!(
                view.is_deferred(&call.name, &config.defer),
                "resolved to a non-deferred tool {}",
                call.name
            );
            Ok(json!({"name": call.name, "arguments": call.arguments}))
        }
        Err(error) => {
            prop_assert!(
                error.get("error").is_some_and(Value::is_string),
                "bad error: {}",
                error
            );
            check_answer(&error)?;
            Ok(error)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn bridge_tools_answer_anything_with_an_object(input in args()) {
        let (all, narrowed) = views();
        let config = ToolSearchConfig::default();
        for view in [&all, &narrowed] {
            check_answer(&tool_describe(view, &config, &input))?;
            check_answer(&tool_search(view, &config, &input))?;
            check_resolve(view, &config, &input)?;
        }
        check_no_leak(&input, &tool_describe(&narrowed, &config, &input))?;
        check_no_leak(&input, &tool_search(&narrowed, &config, &input))?;
        let resolved = check_resolve(&narrowed, &config, &input)?;
        check_no_leak(&input, &resolved)?;
    }

    #[test]
    fn typed_arguments_never_break_validation(arguments in prop::collection::vec((key(), value()), 0..8)) {
        let (all, _) = views();
        let config = ToolSearchConfig::default();
        let arguments: Map<String, Value> = arguments.into_iter().collect();
        for name in ["typed_probe", "nullable_probe", "remote_ref_probe", "broken_schema_probe", "no_schema_probe", "gh_create_issue"] {
            let input = json!({"calls": [{"name": name, "arguments": arguments.clone()}]});
            let out = check_resolve(&all, &config, &input)?;
            if out.get("error").is_none() {
                prop_assert_eq!(&out["name"], &json!(name));
                prop_assert_eq!(out["arguments"].as_object().map(Map::len), Some(arguments.len()));
            }
        }
    }
}

#[test]
fn hidden_tool_is_indistinguishable_from_a_missing_one() {
    let (_, narrowed) = views();
    let config = ToolSearchConfig::default();
    let twin = "hidden_vault_secretz";
    let describe_hidden = tool_describe(&narrowed, &config, &json!({"names": [HIDDEN]}));
    let describe_twin = tool_describe(&narrowed, &config, &json!({"names": [twin]}));
    assert_eq!(
        describe_hidden.to_string().replace(HIDDEN, "X"),
        describe_twin.to_string().replace(twin, "X")
    );
    let call_hidden = resolve(&narrowed, &config, &json!({"name": HIDDEN})).unwrap_err();
    let call_twin = resolve(&narrowed, &config, &json!({"name": twin})).unwrap_err();
    assert_eq!(
        call_hidden.to_string().replace(HIDDEN, "X"),
        call_twin.to_string().replace(twin, "X")
    );
    let search = tool_search(
        &narrowed,
        &config,
        &json!({"queries": ["vault secrets", HIDDEN]}),
    );
    // The queries are echoed back; the matches and the tool records must not name it.
    let matches: Vec<&Value> = search["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|group| &group["matches"])
        .collect();
    assert_eq!(matches.len(), 2, "{search}");
    assert!(
        matches.iter().all(|m| !m.to_string().contains(HIDDEN)),
        "{search}"
    );
    assert!(!search["tools"].to_string().contains(HIDDEN), "{search}");
}
