//! Reading built-in tools' arguments as a model sends them. Numbers may arrive as strings and
//! booleans as `"true"`; anything that cannot be read becomes a message saying what to send.

use serde_json::{Map, Value};

use crate::lenient::{py_int, py_truthy};
use crate::text::json_kind;

/// A required string argument.
pub(crate) fn required_str<'a>(
    args: &'a Map<String, Value>,
    key: &str,
    example: &str,
) -> Result<&'a str, String> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(Value::Null) | None => Err(format!(
            "'{key}' is required. Send it as a string, for example {{\"{key}\": {example}}}."
        )),
        Some(other) => Err(format!(
            "'{key}' must be a string, not {}. Send it as a string, for example {{\"{key}\": {example}}}.",
            json_kind(other)
        )),
    }
}

/// An optional string argument; `null` counts as absent.
pub(crate) fn optional_str<'a>(
    args: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Null) | None => Ok(None),
        Some(other) => Err(format!(
            "'{key}' must be a string, not {}.",
            json_kind(other)
        )),
    }
}

/// An optional integer argument (`"3"` and `3.0` are read as 3); `null` counts as absent.
pub(crate) fn optional_int(args: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match args.get(key) {
        Some(Value::Null) | None => Ok(None),
        Some(value) => py_int(value).map(Some).ok_or_else(|| {
            format!(
                "'{key}' must be a whole number, not {value}. Send for example {{\"{key}\": 10}}."
            )
        }),
    }
}

/// An optional boolean argument (`"true"`, `1` and `true` are true); absent is `default`.
pub(crate) fn flag(args: &Map<String, Value>, key: &str, default: bool) -> bool {
    match args.get(key) {
        Some(Value::Null) | None => default,
        Some(Value::String(s)) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on"
        ),
        Some(value) => py_truthy(value),
    }
}
