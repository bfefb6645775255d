//! Reading a catalog of tool definitions from JSON, for the CLI's `--catalog`, the demo and the
//! tests. Two shapes are accepted per entry:
//!
//! - OpenAI style: `{"type": "function", "function": {"name", "description", "parameters"},
//!   "toolset": "mcp-github" | "core" | "<plugin>" | null, "source_name": "<owning plugin>"}`;
//! - flat: `{"name", "description", "parameters", "source": <toolset or null>, "core": true,
//!   "source_name_key": "<owning plugin>"}`.

use serde_json::{Map, Value};

use crate::error::ToolsError;
use crate::tool::{ToolDef, ToolKind, kind_of_toolset};

/// Parses a catalog: a JSON array of tool definitions, in catalog order.
pub fn parse_catalog(json: &Value) -> Result<Vec<ToolDef>, ToolsError> {
    let Value::Array(items) = json else {
        return Err(ToolsError::BadCatalogEntry {
            index: 0,
            reason: "a catalog must be a JSON array of tool definitions".into(),
        });
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            parse_entry(item).map_err(|reason| ToolsError::BadCatalogEntry { index, reason })
        })
        .collect()
}

fn parse_entry(item: &Value) -> Result<ToolDef, String> {
    let Value::Object(entry) = item else {
        return Err("each entry must be an object describing one tool".into());
    };
    let (function, toolset, source_name) = match entry.get("function") {
        Some(Value::Object(function)) => (function, entry.get("toolset"), entry.get("source_name")),
        Some(_) => {
            return Err(
                "\"function\" must be an object with name, description and parameters".into(),
            );
        }
        None => (entry, entry.get("source"), entry.get("source_name_key")),
    };
    let name = match function.get("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.clone(),
        _ => return Err("every tool needs a non-empty string \"name\"".into()),
    };
    let description =
        optional_string(function, "description").map_err(|e| format!("tool '{name}': {e}"))?;
    let parameters = function.get("parameters").filter(|v| !v.is_null()).cloned();
    let toolset = match toolset {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(format!(
                "tool '{name}': the toolset must be a string or null"
            ));
        }
    };
    let source_name = match source_name {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let core = entry.get("core") == Some(&Value::Bool(true));
    let kind = if core {
        ToolKind::Core
    } else if name.starts_with("connectors__") {
        ToolKind::Connector
    } else {
        toolset
            .as_deref()
            .map(kind_of_toolset)
            .unwrap_or(ToolKind::Plugin)
    };
    Ok(ToolDef {
        name,
        description,
        parameters,
        toolset,
        kind,
        source_name,
        vendor_slug: None,
        hints: Default::default(),
        handler: None,
    })
}

fn optional_string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("\"{key}\" must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_shapes() {
        let defs = parse_catalog(&json!([
            {"type": "function", "function": {"name": "a", "description": "A", "parameters": {}}, "toolset": "mcp-x"},
            {"name": "b", "source": null, "source_name_key": "honcho"},
            {"name": "terminal", "source": "core"}
        ]))
        .expect("valid catalog");
        assert_eq!(defs[0].kind, ToolKind::Mcp);
        assert_eq!(defs[1].source_name.as_deref(), Some("honcho"));
        assert!(defs[1].description.is_none());
        assert_eq!(defs[2].kind, ToolKind::Core);
    }

    #[test]
    fn bad_entries_say_where() {
        let err = parse_catalog(&json!([{"name": "ok"}, {"description": "x"}])).unwrap_err();
        assert!(err.to_string().contains("entry 1"), "{err}");
        assert!(parse_catalog(&json!({"name": "x"})).is_err());
    }
}
