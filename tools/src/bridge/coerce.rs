//! Repairing argument types before validation: models often send `"42"` for an integer,
//! `"true"` for a boolean, a bare value for a one-item list or a JSON-encoded string for an
//! object. [`coerce_arguments`] fixes those by the top-level `properties` of the tool's schema,
//! and leaves every value it cannot convert without guessing as it was. Used by
//! [`validate`](super::validate) on the way to `tool_call`'s underlying tool.

use serde_json::{Map, Number, Value};

use crate::lenient::py_float;

/// A copy of `arguments` with each value whose key has a top-level property schema converted to
/// that schema's type where the conversion is unambiguous. Keys without a property schema, and
/// values that already have an allowed type, are kept unchanged.
pub fn coerce_arguments(parameters: &Value, arguments: &Map<String, Value>) -> Map<String, Value> {
    let Some(Value::Object(properties)) = parameters.get("properties") else {
        return arguments.clone();
    };
    arguments
        .iter()
        .map(|(key, value)| {
            let coerced = match properties.get(key) {
                Some(Value::Object(schema)) => coerce_value(value, schema),
                _ => None,
            };
            (key.clone(), coerced.unwrap_or_else(|| value.clone()))
        })
        .collect()
}

/// The converted value, or `None` when `value` should stay as it is.
pub fn coerce_value(value: &Value, schema: &Map<String, Value>) -> Option<Value> {
    let types = declared_types(schema);
    if types.is_empty() || types.iter().any(|t| has_type(value, t)) {
        return None;
    }
    // Exact conversions first, in the schema's order; wrapping a value in a list is the last
    // resort, so `["array", "integer"]` still turns "5" into 5 rather than ["5"].
    if let Value::String(text) = value
        && let Some(converted) = types.iter().find_map(|t| from_string(text, t, schema))
    {
        return Some(converted);
    }
    if types.contains(&"array") && !value.is_null() {
        return Some(Value::Array(vec![value.clone()]));
    }
    None
}

/// The JSON types a property schema allows, in its order: `type` (a name or a list), else the
/// `type`s of its `anyOf`/`oneOf` branches, plus `"null"` when it says `nullable: true`.
fn declared_types(schema: &Map<String, Value>) -> Vec<&str> {
    let mut types: Vec<&str> = Vec::new();
    push_types(schema.get("type"), &mut types);
    if types.is_empty() {
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = schema.get(key) {
                for branch in branches {
                    push_types(branch.get("type"), &mut types);
                }
            }
        }
    }
    if schema.get("nullable") == Some(&Value::Bool(true))
        && !types.is_empty()
        && !types.contains(&"null")
    {
        types.push("null");
    }
    types
}

fn push_types<'a>(declared: Option<&'a Value>, out: &mut Vec<&'a str>) {
    let mut push = |t: &'a str| {
        if !out.contains(&t) {
            out.push(t);
        }
    };
    match declared {
        Some(Value::String(t)) => push(t),
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).for_each(push),
        _ => {}
    }
}

/// Whether `value` already is of JSON Schema type `name`.
fn has_type(value: &Value, name: &str) -> bool {
    match (name, value) {
        ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("null", Value::Null)
        | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// `text` read as JSON Schema type `name`, or `None` when it does not read as one.
fn from_string(text: &str, name: &str, schema: &Map<String, Value>) -> Option<Value> {
    match name {
        "integer" => parse_integer(text),
        "number" => parse_number(text),
        "boolean" => match text.trim().to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        "object" => {
            if text.trim().is_empty() {
                // An empty object is only a safe reading when nothing inside is required.
                return (!has_required(schema)).then(|| Value::Object(Map::new()));
            }
            serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object)
        }
        "array" => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_array),
        "null" => text
            .trim()
            .eq_ignore_ascii_case("null")
            .then_some(Value::Null),
        _ => None,
    }
}

fn has_required(schema: &Map<String, Value>) -> bool {
    matches!(schema.get("required"), Some(Value::Array(names)) if !names.is_empty())
}

/// The text with surrounding whitespace, a leading `+` and digit separators removed, for an
/// exact integer parse.
fn plain_digits(text: &str) -> String {
    let cleaned: String = text.trim().chars().filter(|&c| c != '_').collect();
    cleaned
        .strip_prefix('+')
        .map(str::to_string)
        .unwrap_or(cleaned)
}

/// Largest integer an f64 holds exactly.
const F64_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// An integer from text such as `"42"`, `" -3 "`, `"1_000"`, `"4.0"` or `"1e3"`; `None` for
/// fractions (`"4.5"`), infinities, NaN, and integers too large to hold exactly.
fn parse_integer(text: &str) -> Option<Value> {
    let f = py_float(&Value::String(text.to_string()))?;
    if !f.is_finite() || f.fract() != 0.0 {
        return None;
    }
    let digits = plain_digits(text);
    if let Ok(i) = digits.parse::<i64>() {
        return Some(Value::from(i));
    }
    if let Ok(u) = digits.parse::<u64>() {
        return Some(Value::from(u));
    }
    // Written as a float ("4.0", "1e3"): exact only within the f64 integer range.
    (f.abs() <= F64_EXACT_INT).then(|| Value::from(f as i64))
}

/// A number from text: an integer when the text is one, else a float. Infinities and NaN are
/// refused: JSON cannot carry them and no tool means them.
fn parse_number(text: &str) -> Option<Value> {
    let f = py_float(&Value::String(text.to_string()))?;
    if !f.is_finite() {
        return None;
    }
    let digits = plain_digits(text);
    if let Ok(i) = digits.parse::<i64>() {
        return Some(Value::from(i));
    }
    Number::from_f64(f).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn coerce(value: Value, property: Value) -> Value {
        coerce_value(&value, &schema(property)).unwrap_or(value)
    }

    #[test]
    fn the_reference_example() {
        let params = json!({"type": "object", "properties": {
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "flag": {"type": "boolean"},
            "opts": {"type": "object", "properties": {}}
        }, "required": ["count"]});
        let args = schema(
            json!({"count": "42", "tags": "solo", "flag": "TRUE", "opts": "", "other": "7"}),
        );
        assert_eq!(
            Value::Object(coerce_arguments(&params, &args)),
            json!({"count": 42, "tags": ["solo"], "flag": true, "opts": {}, "other": "7"})
        );
    }

    #[test]
    fn integers() {
        let int = json!({"type": "integer"});
        assert_eq!(coerce(json!("42"), int.clone()), json!(42));
        assert_eq!(coerce(json!(" -3 "), int.clone()), json!(-3));
        assert_eq!(coerce(json!("+4"), int.clone()), json!(4));
        assert_eq!(coerce(json!("1_000"), int.clone()), json!(1000));
        assert_eq!(coerce(json!("4.0"), int.clone()), json!(4));
        assert_eq!(coerce(json!("1e3"), int.clone()), json!(1000));
        assert_eq!(
            coerce(json!("18446744073709551615"), int.clone()),
            json!(18446744073709551615u64)
        );
        // Fractions, words, infinities and unrepresentable magnitudes stay as sent.
        assert_eq!(coerce(json!("4.5"), int.clone()), json!("4.5"));
        assert_eq!(coerce(json!("four"), int.clone()), json!("four"));
        assert_eq!(coerce(json!("inf"), int.clone()), json!("inf"));
        assert_eq!(coerce(json!("nan"), int.clone()), json!("nan"));
        assert_eq!(coerce(json!("1e300"), int.clone()), json!("1e300"));
        assert_eq!(coerce(json!(""), int.clone()), json!(""));
        // Already a number: untouched.
        assert_eq!(coerce(json!(7), int), json!(7));
    }

    #[test]
    fn numbers() {
        let num = json!({"type": "number"});
        assert_eq!(coerce(json!("2.5"), num.clone()), json!(2.5));
        assert_eq!(coerce(json!("3"), num.clone()), json!(3));
        assert_eq!(coerce(json!("-1e2"), num.clone()), json!(-100.0));
        assert_eq!(coerce(json!("inf"), num.clone()), json!("inf"));
        assert_eq!(coerce(json!("-Infinity"), num.clone()), json!("-Infinity"));
        assert_eq!(coerce(json!("NaN"), num.clone()), json!("NaN"));
        assert_eq!(coerce(json!("1e999"), num.clone()), json!("1e999"));
        assert_eq!(coerce(json!("abc"), num), json!("abc"));
    }

    #[test]
    fn booleans() {
        let b = json!({"type": "boolean"});
        assert_eq!(coerce(json!("TRUE"), b.clone()), json!(true));
        assert_eq!(coerce(json!(" false "), b.clone()), json!(false));
        assert_eq!(coerce(json!("yes"), b.clone()), json!("yes"));
        assert_eq!(coerce(json!(1), b), json!(1));
    }

    #[test]
    fn objects() {
        let open = json!({"type": "object"});
        assert_eq!(coerce(json!("{\"a\": 1}"), open.clone()), json!({"a": 1}));
        assert_eq!(coerce(json!("  "), open.clone()), json!({}));
        assert_eq!(coerce(json!("[1]"), open.clone()), json!("[1]"));
        assert_eq!(coerce(json!("{broken"), open), json!("{broken"));
        // A blank string is not an empty object when the object has required keys.
        let strict = json!({"type": "object", "required": ["id"]});
        assert_eq!(coerce(json!(""), strict.clone()), json!(""));
        assert_eq!(coerce(json!("{\"id\": 1}"), strict), json!({"id": 1}));
    }

    #[test]
    fn arrays() {
        let arr = json!({"type": "array"});
        assert_eq!(coerce(json!("solo"), arr.clone()), json!(["solo"]));
        assert_eq!(coerce(json!("[1, 2]"), arr.clone()), json!([1, 2]));
        assert_eq!(coerce(json!("5"), arr.clone()), json!(["5"]));
        assert_eq!(coerce(json!(5), arr.clone()), json!([5]));
        assert_eq!(coerce(json!({"a": 1}), arr.clone()), json!([{"a": 1}]));
        assert_eq!(coerce(json!(null), arr.clone()), json!(null));
        assert_eq!(coerce(json!(["x"]), arr), json!(["x"]));
    }

    #[test]
    fn type_lists_in_order_and_wrapping_last() {
        assert_eq!(
            coerce(json!("5"), json!({"type": ["array", "integer"]})),
            json!(5)
        );
        assert_eq!(
            coerce(json!("true"), json!({"type": ["integer", "boolean"]})),
            json!(true)
        );
        // A string schema accepts the string as it is.
        assert_eq!(
            coerce(json!("42"), json!({"type": ["string", "integer"]})),
            json!("42")
        );
        assert_eq!(
            coerce(json!("x"), json!({"type": ["integer", "array"]})),
            json!(["x"])
        );
    }

    #[test]
    fn nulls() {
        assert_eq!(
            coerce(json!("null"), json!({"type": ["integer", "null"]})),
            json!(null)
        );
        assert_eq!(
            coerce(json!("null"), json!({"type": "array", "nullable": true})),
            json!(null)
        );
        assert_eq!(
            coerce(json!("NULL"), json!({"type": "integer", "nullable": true})),
            json!(null)
        );
        assert_eq!(
            coerce(
                json!("null"),
                json!({"anyOf": [{"type": "integer"}, {"type": "null"}]})
            ),
            json!(null)
        );
        // Without null allowed, "null" is not turned into null.
        assert_eq!(
            coerce(json!("null"), json!({"type": "integer"})),
            json!("null")
        );
    }

    #[test]
    fn branches_of_any_of() {
        assert_eq!(
            coerce(
                json!("7"),
                json!({"anyOf": [{"type": "integer"}, {"type": "null"}]})
            ),
            json!(7)
        );
    }

    #[test]
    fn schemas_without_types_and_unknown_keys_are_left_alone() {
        let params =
            json!({"type": "object", "properties": {"a": {"description": "no type"}, "b": true}});
        let args = schema(json!({"a": "1", "b": "2", "c": "3"}));
        assert_eq!(coerce_arguments(&params, &args), args);
        assert_eq!(coerce_arguments(&json!({}), &args), args);
        assert_eq!(coerce_arguments(&json!("not a schema"), &args), args);
    }
}
