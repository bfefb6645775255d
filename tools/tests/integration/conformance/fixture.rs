//! Loading the recorded cases and turning their inputs into troupe values.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use troupe_tools::catalog_file::parse_catalog;
use troupe_tools::{Ranking, Registry, ToolSearchConfig};

/// What a checker concluded about one case.
#[derive(Debug)]
pub(crate) enum Outcome {
    Pass,
    Skip(String),
    Fail(String),
}

/// One recorded case.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) raw: Value,
}

impl Case {
    /// The case's field `key`, or `null`.
    pub(crate) fn get(&self, key: &str) -> &Value {
        self.raw.get(key).unwrap_or(&Value::Null)
    }

    /// What the reference returned.
    pub(crate) fn expected(&self) -> &Value {
        self.get("expected")
    }

    /// The registry of the case's catalog (inline or `catalog_file`) plus `extra_tool_defs`.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        let mut entries = match self.get("catalog_file") {
            Value::String(file) => read_json(&fixtures_dir().join(file)),
            _ => self.get("catalog").clone(),
        };
        if let (Value::Array(entries), Value::Array(extra)) =
            (&mut entries, self.get("extra_tool_defs"))
        {
            entries.extend(extra.iter().cloned());
        }
        if entries.is_null() {
            entries = Value::Array(Vec::new());
        }
        let defs = parse_catalog(&entries)
            .unwrap_or_else(|e| panic!("case {}: bad catalog: {e}", self.name));
        Registry::with_tools(defs)
    }

    /// The case's `tools.tool_search` config (defaults when absent), ranking the reference way.
    pub(crate) fn config(&self) -> ToolSearchConfig {
        // The cases were recorded from the reference ranking.
        ToolSearchConfig {
            ranking: Ranking::Reference,
            ..ToolSearchConfig::from_raw(self.get("config"))
        }
    }
}

/// Where the fixtures live.
pub(crate) fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tool_search")
}

/// Reads a JSON file of the fixtures; a broken fixture is a broken test, so it panics.
pub(crate) fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every case, sorted by name.
pub(crate) fn load_all() -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap_or_else(|e| panic!("fixtures: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let raw = read_json(p);
            Case {
                name: raw["name"].as_str().unwrap_or_default().to_string(),
                kind: raw["kind"].as_str().unwrap_or_default().to_string(),
                raw,
            }
        })
        .collect()
}

/// Compares two JSON values where `"<own words>"` in `want` matches any string.
pub(crate) fn matches_with_marker(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::String(_), Value::String(w)) if w == "<own words>" => true,
        (Value::Array(g), Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(g, w)| matches_with_marker(g, w))
        }
        (Value::Object(g), Value::Object(w)) => {
            g.len() == w.len()
                && w.iter()
                    .all(|(k, wv)| g.get(k).is_some_and(|gv| matches_with_marker(gv, wv)))
        }
        (Value::Number(g), Value::Number(w)) => g.as_f64() == w.as_f64(),
        _ => got == want,
    }
}
