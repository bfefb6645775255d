//! Checking `tool_call` arguments against the underlying tool's JSON Schema before it runs:
//! missing required keys first, then type coercion ([`coerce`](super::coerce)) and a full
//! `jsonschema` run. A failure becomes `{"error", "path", "constraint", "parameters", "hint"}`
//! so the model can fix its call. A schema that cannot be checked (a remote `$ref`, an invalid
//! schema) lets the call through: the tool itself is the last judge.

use std::panic::{AssertUnwindSafe, catch_unwind};

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::{Map, Value};

use super::coerce::coerce_arguments;
use super::tool_error;

/// Longest schema-error detail quoted to the model; longer ones end in `...`.
pub const DETAIL_MAX_CHARS: usize = 600;

/// Keywords whose value is a single subschema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "items",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
];

/// Keywords whose value is a list of subschemas.
const SCHEMA_LIST_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value maps names to subschemas.
const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// What checking one call's arguments found.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentCheck {
    /// The arguments after coercion: what the tool receives when `error` is `None`.
    pub arguments: Map<String, Value>,
    /// The error the model sees, when the arguments do not fit the schema.
    pub error: Option<Value>,
}

/// Coerces `arguments` by `parameters` and checks them: required keys, then the whole schema.
/// `tool` names the tool in the messages.
pub fn check_arguments(
    tool: &str,
    parameters: &Value,
    arguments: &Map<String, Value>,
) -> ArgumentCheck {
    let coerced = coerce_arguments(parameters, arguments);
    let error = find_error(tool, parameters, arguments, &coerced);
    ArgumentCheck {
        arguments: coerced,
        error,
    }
}

fn find_error(
    tool: &str,
    parameters: &Value,
    sent: &Map<String, Value>,
    coerced: &Map<String, Value>,
) -> Option<Value> {
    let Value::Object(schema) = parameters else {
        return None;
    };
    let missing: Vec<&str> = match schema.get("required") {
        Some(Value::Array(required)) => required
            .iter()
            .filter_map(Value::as_str)
            .filter(|key| !sent.contains_key(*key))
            .collect(),
        _ => Vec::new(),
    };
    if !missing.is_empty() {
        let message = format!(
            "'{tool}' needs argument(s) that were not sent: {}. The tool did not run.",
            missing.join(", ")
        );
        return Some(shaped_error(&message, "arguments", "required", parameters));
    }
    let normalized = normalize_schema(parameters)?;
    let instance = Value::Object(coerced.clone());
    // A third-party schema must never take the session down: a panic inside the validator is
    // treated like a schema we cannot check.
    let found = catch_unwind(AssertUnwindSafe(|| {
        schema_violation(&normalized, &instance)
    }));
    let (path, constraint, detail) = match found {
        Ok(found) => found?,
        Err(_) => {
            tracing::warn!(
                tool,
                "the schema validator panicked; letting the call through unchecked"
            );
            return None;
        }
    };
    let message = format!(
        "The arguments for '{tool}' do not fit its schema at {path} ({constraint}): {detail}. The tool did not run."
    );
    Some(shaped_error(&message, &path, &constraint, parameters))
}

fn shaped_error(message: &str, path: &str, constraint: &str, parameters: &Value) -> Value {
    let mut body = match tool_error(message) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    body.insert("path".into(), Value::String(path.to_string()));
    body.insert("constraint".into(), Value::String(constraint.to_string()));
    body.insert("parameters".into(), parameters.clone());
    body.insert(
        "hint".into(),
        Value::String(
            "Correct the arguments so they match the parameters schema above, then send the tool_call again."
                .into(),
        ),
    );
    Value::Object(body)
}

/// Runs the validator; `None` when the instance is valid or the schema cannot be compiled.
fn schema_violation(schema: &Value, instance: &Value) -> Option<(String, String, String)> {
    let validator: Validator = match jsonschema::options().offline().build(schema) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "tool schema is not a usable JSON Schema; skipping validation");
            return None;
        }
    };
    let errors: Vec<ValidationError<'_>> = validator.iter_errors(instance).collect();
    let best = best_error(&errors)?;
    let path = format_path(best.instance_path().as_str(), instance);
    let constraint = best.kind().keyword().to_string();
    Some((path, constraint, clip_detail(&best.to_string())))
}

/// How much an error says about what to fix: shallow errors first (the first thing wrong on
/// the way down), and a specific keyword over "none of the alternatives matched".
fn relevance(error: &ValidationError<'_>) -> (usize, bool) {
    let depth = error.instance_path().segments().count();
    (depth, is_alternatives(error.kind()))
}

fn is_alternatives(kind: &ValidationErrorKind) -> bool {
    matches!(
        kind,
        ValidationErrorKind::AnyOf { .. }
            | ValidationErrorKind::OneOfNotValid { .. }
            | ValidationErrorKind::OneOfMultipleValid { .. }
    )
}

fn alternatives_context(kind: &ValidationErrorKind) -> Option<&[Vec<ValidationError<'static>>]> {
    match kind {
        ValidationErrorKind::AnyOf { context }
        | ValidationErrorKind::OneOfNotValid { context }
        | ValidationErrorKind::OneOfMultipleValid { context } => Some(context),
        _ => None,
    }
}

/// The most useful error: the most relevant one, and when that is "no alternative matched",
/// the single most relevant error inside the alternatives when one stands out.
fn best_error<'a, 'e>(errors: &'a [ValidationError<'e>]) -> Option<&'a ValidationError<'e>> {
    let mut best: &'a ValidationError<'e> = errors.iter().min_by_key(|e| relevance(e))?;
    while let Some(inner) = alternatives_context(best.kind()).and_then(single_best) {
        best = inner;
    }
    Some(best)
}

/// The most relevant error across all branches of an alternative, if exactly one is the most
/// relevant (a tie means no branch is clearly the one the caller meant).
fn single_best<'c>(
    context: &'c [Vec<ValidationError<'static>>],
) -> Option<&'c ValidationError<'static>> {
    let all: Vec<&ValidationError<'static>> = context.iter().flatten().collect();
    // Inside alternatives, the deepest error is the most specific about what went wrong.
    let key = |e: &ValidationError<'_>| {
        let (depth, weak) = relevance(e);
        (std::cmp::Reverse(depth), weak)
    };
    let best_key = all.iter().map(|e| key(e)).min()?;
    let mut at_best = all.iter().filter(|e| key(e) == best_key);
    let first = at_best.next()?;
    at_best.next().is_none().then_some(*first)
}

/// `arguments.a.b[0]["x y"]` for the JSON pointer `/a/b/0/x y`. The instance decides whether a
/// numeric segment is an index or a key.
pub fn format_path(pointer: &str, instance: &Value) -> String {
    let mut out = String::from("arguments");
    let mut current = Some(instance);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        let index = match current {
            Some(Value::Array(_)) => segment.parse::<usize>().ok(),
            _ => None,
        };
        match index {
            Some(index) => {
                out.push_str(&format!("[{index}]"));
                current = current.and_then(|v| v.get(index));
            }
            None => {
                if is_identifier(&segment) {
                    out.push('.');
                    out.push_str(&segment);
                } else {
                    let quoted = serde_json::to_string(&segment)
                        .unwrap_or_else(|_| format!("\"{segment}\""));
                    out.push_str(&format!("[{quoted}]"));
                }
                current = current.and_then(|v| v.get(&segment));
            }
        }
    }
    out
}

fn is_identifier(segment: &str) -> bool {
    let mut chars = segment.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whitespace runs collapsed to one space, cut to [`DETAIL_MAX_CHARS`].
fn clip_detail(detail: &str) -> String {
    let collapsed = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= DETAIL_MAX_CHARS {
        return collapsed;
    }
    let kept: String = collapsed.chars().take(DETAIL_MAX_CHARS - 3).collect();
    format!("{kept}...")
}

/// The schema as the validator should see it: `nullable: true` (OpenAPI style) becomes an
/// allowed `null`. `None` when the schema points outside itself (`$ref` not starting with `#`),
/// which we cannot resolve offline.
pub fn normalize_schema(schema: &Value) -> Option<Value> {
    match schema {
        Value::Object(map) => normalize_object(map).map(Value::Object),
        other => Some(other.clone()),
    }
}

fn normalize_object(map: &Map<String, Value>) -> Option<Map<String, Value>> {
    if let Some(reference) = map.get("$ref")
        && !reference.as_str().is_some_and(|r| r.starts_with('#'))
    {
        return None;
    }
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let key_str = key.as_str();
        let normalized = if SCHEMA_MAP_KEYWORDS.contains(&key_str) {
            match value {
                Value::Object(subs) => {
                    let mut mapped = Map::with_capacity(subs.len());
                    for (name, sub) in subs {
                        mapped.insert(name.clone(), normalize_schema(sub)?);
                    }
                    Value::Object(mapped)
                }
                other => other.clone(),
            }
        } else if SCHEMA_LIST_KEYWORDS.contains(&key_str) && value.is_array() {
            let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
            Value::Array(
                items
                    .iter()
                    .map(normalize_schema)
                    .collect::<Option<Vec<_>>>()?,
            )
        } else if SCHEMA_KEYWORDS.contains(&key_str) {
            normalize_schema(value)?
        } else {
            // const, default, enum, example(s), descriptions: data, copied as written.
            value.clone()
        };
        out.insert(key.clone(), normalized);
    }
    if out.get("nullable") == Some(&Value::Bool(true)) {
        allow_null(&mut out);
    }
    Some(out)
}

/// Adds `null` to what a `nullable` schema accepts.
fn allow_null(schema: &mut Map<String, Value>) {
    let null_type = Value::String("null".into());
    match schema.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let single = Value::String(std::mem::take(t));
            schema.insert("type".into(), Value::Array(vec![single, null_type]));
        }
        Some(Value::Array(types)) if !types.contains(&null_type) => types.push(null_type),
        Some(_) => {}
        None => {
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(branches)) = schema.get_mut(key) {
                    branches.push(serde_json::json!({"type": "null"}));
                    return;
                }
            }
        }
    }
    if let Some(Value::Array(options)) = schema.get_mut("enum")
        && !options.contains(&Value::Null)
    {
        options.push(Value::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn missing_required_comes_first() {
        let params = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a", "b", 7]});
        let check = check_arguments("t", &params, &args(json!({"b": "x"})));
        let error = check.error.unwrap();
        assert_eq!(error["path"], "arguments");
        assert_eq!(error["constraint"], "required");
        assert_eq!(error["parameters"], params);
        assert!(error["error"].as_str().unwrap().contains(": a."), "{error}");
        assert!(error["hint"].is_string());
    }

    #[test]
    fn valid_arguments_come_back_coerced() {
        let params =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let check = check_arguments("t", &params, &args(json!({"n": "5"})));
        assert_eq!(check.error, None);
        assert_eq!(Value::Object(check.arguments), json!({"n": 5}));
    }

    #[test]
    fn type_errors_name_path_and_keyword() {
        let params = json!({"type": "object", "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"x y": {"type": "integer"}}}}
        }});
        let check = check_arguments("t", &params, &args(json!({"list": [{"x y": "nope"}]})));
        let error = check.error.unwrap();
        assert_eq!(error["path"], "arguments.list[0][\"x y\"]");
        assert_eq!(error["constraint"], "type");
    }

    #[test]
    fn enum_and_additional_properties() {
        let params = json!({"type": "object", "properties": {"p": {"enum": ["low", "high"]}}, "additionalProperties": false});
        let enum_error = check_arguments("t", &params, &args(json!({"p": "urgent"})))
            .error
            .unwrap();
        assert_eq!(
            (
                enum_error["path"].as_str(),
                enum_error["constraint"].as_str()
            ),
            (Some("arguments.p"), Some("enum"))
        );
        let extra = check_arguments("t", &params, &args(json!({"q": 1})))
            .error
            .unwrap();
        assert_eq!(
            (extra["path"].as_str(), extra["constraint"].as_str()),
            (Some("arguments"), Some("additionalProperties"))
        );
    }

    #[test]
    fn nullable_accepts_null() {
        let params = json!({"type": "object", "properties": {
            "a": {"type": "string", "nullable": true},
            "b": {"enum": ["x"], "nullable": true},
            "c": {"anyOf": [{"type": "integer"}], "nullable": true}
        }});
        let check = check_arguments(
            "t",
            &params,
            &args(json!({"a": null, "b": null, "c": null})),
        );
        assert_eq!(check.error, None);
        let check = check_arguments("t", &params, &args(json!({"a": 5})));
        assert_eq!(check.error.unwrap()["constraint"], "type");
    }

    #[test]
    fn unusable_schemas_fail_open() {
        let remote =
            json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}});
        assert_eq!(
            check_arguments("t", &remote, &args(json!({"a": 1}))).error,
            None
        );
        let broken = json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}});
        assert_eq!(
            check_arguments("t", &broken, &args(json!({"a": 1}))).error,
            None
        );
        assert_eq!(
            check_arguments("t", &json!("nope"), &args(json!({"a": 1}))).error,
            None
        );
        // A local $ref still validates.
        let local = json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "$defs": {"n": {"type": "integer"}}});
        assert_eq!(
            check_arguments("t", &local, &args(json!({"a": "x"})))
                .error
                .unwrap()["constraint"],
            "type"
        );
    }

    #[test]
    fn alternatives_point_at_the_branch_that_stands_out() {
        let params = json!({"type": "object", "properties": {"o": {"anyOf": [
            {"type": "object", "properties": {"n": {"type": "integer"}}},
            {"type": "string"}
        ]}}});
        let error = check_arguments("t", &params, &args(json!({"o": {"n": "x"}})))
            .error
            .unwrap();
        assert_eq!(
            (error["path"].as_str(), error["constraint"].as_str()),
            (Some("arguments.o.n"), Some("type"))
        );
    }

    #[test]
    fn details_are_collapsed_and_clipped() {
        assert_eq!(clip_detail("a \n\t b"), "a b");
        let long = "x".repeat(700);
        let clipped = clip_detail(&long);
        assert_eq!(clipped.chars().count(), DETAIL_MAX_CHARS);
        assert!(clipped.ends_with("..."));
    }

    #[test]
    fn paths() {
        let instance = json!({"a": {"b": [{"x y": 1}]}, "0": [5], "we/ird~": 1});
        assert_eq!(format_path("", &instance), "arguments");
        assert_eq!(
            format_path("/a/b/0/x y", &instance),
            "arguments.a.b[0][\"x y\"]"
        );
        assert_eq!(format_path("/0/0", &instance), "arguments[\"0\"][0]");
        assert_eq!(
            format_path("/we~1ird~0", &instance),
            "arguments[\"we/ird~\"]"
        );
    }
}
