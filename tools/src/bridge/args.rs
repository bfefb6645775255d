//! Reading the bridge tools' arguments as a model sends them: lists that may arrive as a bare
//! string, items of any JSON type, limits of any JSON type.

use serde_json::{Map, Value};

use crate::config::ToolSearchConfig;
use crate::lenient::{py_int, py_str, py_truthy};

/// Why a list argument could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListArgError {
    /// Missing, or not a list (nor a single string).
    NotAList,
    /// A list, but nothing usable in it.
    NothingUsable,
}

impl ListArgError {
    /// The message the model reads, for the argument `key` with an example value.
    pub(crate) fn message(&self, key: &str, example: &str) -> String {
        match self {
            ListArgError::NotAList => format!(
                "'{key}' is missing or is not a list. Send it as an array of strings, for example {{\"{key}\": {example}}}."
            ),
            ListArgError::NothingUsable => format!(
                "'{key}' has no non-empty string in it. Send at least one, for example {{\"{key}\": {example}}}."
            ),
        }
    }
}

/// Reads `args[key]` as a list of trimmed, non-empty strings. A bare string is a one-item list;
/// falsy items (`null`, `0`, `false`, `""`) are dropped and other scalars are stringified.
/// Duplicates are kept unless `dedupe` (first occurrence wins).
pub(crate) fn string_list(
    args: &Map<String, Value>,
    key: &str,
    dedupe: bool,
) -> Result<Vec<String>, ListArgError> {
    let items: Vec<&Value> = match args.get(key) {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(single @ Value::String(_)) => vec![single],
        _ => return Err(ListArgError::NotAList),
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        if !py_truthy(item) {
            continue;
        }
        let text = py_str(item).trim().to_string();
        if text.is_empty() || (dedupe && out.contains(&text)) {
            continue;
        }
        out.push(text);
    }
    if out.is_empty() {
        return Err(ListArgError::NothingUsable);
    }
    Ok(out)
}

/// The effective `limit`: the configured default when absent or `null`, else the value read
/// as an integer (the default when it is not one), clamped to 1..=max_search_limit.
pub(crate) fn limit(args: &Map<String, Value>, config: &ToolSearchConfig) -> usize {
    let requested = match args.get("limit") {
        None | Some(Value::Null) => config.search_default_limit,
        Some(v) => py_int(v).unwrap_or(config.search_default_limit),
    };
    // The clamp keeps it in 1..=50, so the conversion cannot fail.
    usize::try_from(requested.clamp(1, config.max_search_limit.max(1))).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn lists() {
        assert_eq!(
            string_list(&obj(json!({"q": "a"})), "q", false),
            Ok(vec!["a".to_string()])
        );
        assert_eq!(
            string_list(
                &obj(json!({"q": [null, 0, false, "", " x ", 1, "x"]})),
                "q",
                false
            ),
            Ok(vec!["x".to_string(), "1".to_string(), "x".to_string()])
        );
        assert_eq!(
            string_list(&obj(json!({"q": ["x", "x"]})), "q", true),
            Ok(vec!["x".to_string()])
        );
        assert_eq!(
            string_list(&obj(json!({"q": 5})), "q", false),
            Err(ListArgError::NotAList)
        );
        assert_eq!(
            string_list(&obj(json!({})), "q", false),
            Err(ListArgError::NotAList)
        );
        assert_eq!(
            string_list(&obj(json!({"q": [" "]})), "q", false),
            Err(ListArgError::NothingUsable)
        );
    }

    #[test]
    fn limits() {
        let c = ToolSearchConfig::default();
        let cases = [
            (json!({}), 5),
            (json!({"limit": null}), 5),
            (json!({"limit": 0}), 1),
            (json!({"limit": -7}), 1),
            (json!({"limit": 100}), 25),
            (json!({"limit": "3"}), 3),
            (json!({"limit": "abc"}), 5),
            (json!({"limit": 2.9}), 2),
            (json!({"limit": true}), 1),
            (json!({"limit": false}), 1),
            (json!({"limit": "1_0"}), 10),
            (json!({"limit": " 7 "}), 7),
            (json!({"limit": "+4"}), 4),
            (json!({"limit": {"a": 1}}), 5),
            (json!({"limit": 1e3}), 25),
        ];
        for (args, want) in cases {
            assert_eq!(limit(&obj(args.clone()), &c), want, "{args}");
        }
    }
}
