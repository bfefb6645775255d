//! The keys troupe.yaml may hold, as one tree, and the check that warns of every other key at
//! any depth: with its place (`model.modle`) and the closest known key, so a typo inside a
//! section is seen instead of silently doing nothing.
//!
//! Each section declares its keys once, beside its reader (a `&[&str]` list such as
//! `terminal::TERMINAL_KEYS`), and `TOP` assembles them; a section read by another crate, or
//! whose keys are names the user picks (`profiles`, `mcp_servers`), is declared here. Sections
//! whose reader refuses an unknown key itself (`sessions`, `observability`) are left to it.

use serde_json::Value;
use troupe_actors::model::SETTINGS_KEYS;

/// The keys a part of the document may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keys {
    /// Any value: a leaf, or a part whose keys are not troupe's to check (request fields,
    /// headers, environment variables), or one whose reader checks its own keys.
    Any,
    /// A mapping of these keys, each any value.
    Names(&'static [&'static str]),
    /// A mapping of these keys, some with shapes of their own (the rest any value).
    Map(&'static [&'static str], &'static [(&'static str, Keys)]),
    /// A mapping of the keys of any of these lists (a section read by several readers).
    Union(&'static [&'static [&'static str]]),
    /// A mapping whose keys the user names (`pricing.<model>`), each shaped so.
    Named(&'static Keys),
}

/// The `model:` section's own keys; the provider's (`tool_calls`, ...) are
/// [`troupe_actors::model::SETTINGS_KEYS`].
const MODEL: &[&str] = &[
    "base_url",
    "api_key",
    "api_key_env",
    "model",
    "default",
    "context_length",
    "prompt_style",
];

/// A profile's own keys, besides the provider's; its `terminal:` checks its own keys.
const PROFILE: &[&str] = &[
    "base_url",
    "model",
    "api_key",
    "api_key_env",
    "toolsets",
    "blocked_tools",
    "max_iterations",
    "system_prompt",
    "script",
    "budget",
    "terminal",
    "review",
];

const APPROVALS: &[&str] = &[
    "mode",
    "timeout",
    "unattended",
    "require_approval",
    "allowlist",
];

const BUDGET: &[&str] = &["max_cost_usd", "max_tokens", "max_wall_seconds"];

const PRICE: &[&str] = &["input", "output", "cached_input"];

const TOOLS: &[&str] = &["tool_search", "connectors"];

const TOOLSETS: &[&str] = &["enabled", "disabled", "blocked_tools", "define"];

/// troupe.yaml as a whole.
pub(crate) const TOP: Keys = Keys::Map(
    super::KNOWN_TOP_LEVEL,
    &[
        ("model", Keys::Union(&[MODEL, SETTINGS_KEYS])),
        (
            "profiles",
            Keys::Named(&Keys::Union(&[PROFILE, SETTINGS_KEYS])),
        ),
        ("approvals", Keys::Names(APPROVALS)),
        ("toolsets", Keys::Names(TOOLSETS)),
        ("budget", Keys::Names(BUDGET)),
        ("pricing", Keys::Named(&Keys::Names(PRICE))),
        (
            "tools",
            Keys::Map(
                TOOLS,
                &[
                    ("connectors", Keys::Names(super::connectors::KEYS)),
                    // Read leniently by the tool search itself.
                    ("tool_search", Keys::Any),
                ],
            ),
        ),
        ("kanban", Keys::Names(super::kanban::KNOWN_KANBAN_KEYS)),
        (
            "terminal",
            Keys::Union(&[super::terminal::TERMINAL_KEYS, super::backend::BACKEND_KEYS]),
        ),
        ("serve", Keys::Names(super::serve::KEYS)),
        ("plugins", Keys::Names(super::plugins::KEYS)),
        ("code_execution", Keys::Names(super::terminal::CODE_KEYS)),
        ("execute_code", Keys::Names(super::terminal::CODE_KEYS)),
    ],
);

/// One key troupe does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// Where it is: the path of its mapping (`model`, `profiles.coder`), empty at the top.
    pub place: String,
    /// The key as written.
    pub key: String,
    /// The known key of that mapping closest to it, when one is close.
    pub closest: Option<String>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = if self.place.is_empty() {
            self.key.clone()
        } else {
            format!("{}.{}", self.place, self.key)
        };
        let place = if self.place.is_empty() {
            "at the top level".to_string()
        } else {
            format!("under {}", self.place)
        };
        write!(f, "unknown key `{full}` {place}: troupe does not read it")?;
        match &self.closest {
            Some(closest) => write!(f, "; did you mean `{closest}`?"),
            None => Ok(()),
        }
    }
}

/// Every key of `document` that `keys` does not name, depth first, in the document's order.
pub(crate) fn unknown_keys(document: &Value, keys: &Keys) -> Vec<UnknownKey> {
    let mut out = Vec::new();
    walk(document, keys, "", &mut out);
    out
}

fn walk(value: &Value, keys: &Keys, place: &str, out: &mut Vec<UnknownKey>) {
    let Value::Object(map) = value else {
        return;
    };
    let (names, shaped): (Vec<&str>, &[(&str, Keys)]) = match keys {
        Keys::Any => return,
        Keys::Names(names) => (names.to_vec(), &[]),
        Keys::Union(lists) => (lists.iter().flat_map(|l| l.iter().copied()).collect(), &[]),
        Keys::Map(names, shaped) => (names.to_vec(), shaped),
        Keys::Named(each) => {
            for (name, inner) in map {
                walk(inner, each, &join(place, name), out);
            }
            return;
        }
    };
    for (key, inner) in map {
        if let Some((_, shape)) = shaped.iter().find(|(name, _)| name == key) {
            walk(inner, shape, &join(place, key), out);
        } else if !names.contains(&key.as_str()) {
            out.push(UnknownKey {
                place: place.to_string(),
                key: key.clone(),
                closest: closest(key, &names),
            });
        }
    }
}

fn join(place: &str, key: &str) -> String {
    if place.is_empty() {
        key.to_string()
    } else {
        format!("{place}.{key}")
    }
}

/// The known name nearest to `key` by edit distance, when it is near enough to be a typo
/// (or one contains the other: `timeout_s` for `timeout`).
fn closest(key: &str, names: &[&str]) -> Option<String> {
    let key = key.to_ascii_lowercase();
    let limit = (key.chars().count() / 3).max(2);
    names
        .iter()
        .map(|name| (edit_distance(&key, name), *name))
        .filter(|(distance, name)| {
            *distance <= limit || (key.len() > 3 && (name.contains(&key) || key.contains(name)))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.to_string())
}

/// Levenshtein distance, counting an adjacent swap as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// Every key path the tree names (`model.base_url`, `pricing.<name>.input`), for the
/// reference in docs/config.md.
#[cfg(test)]
pub(crate) fn key_paths(keys: &Keys) -> Vec<String> {
    fn walk(keys: &Keys, place: &str, out: &mut Vec<String>) {
        let (names, shaped): (Vec<&str>, &[(&str, Keys)]) = match keys {
            Keys::Any => return,
            Keys::Names(names) => (names.to_vec(), &[]),
            Keys::Union(lists) => (lists.iter().flat_map(|l| l.iter().copied()).collect(), &[]),
            Keys::Map(names, shaped) => (names.to_vec(), shaped),
            Keys::Named(each) => return walk(each, &join(place, "<name>"), out),
        };
        for name in names {
            let path = join(place, name);
            if !out.contains(&path) {
                out.push(path.clone());
            }
            if let Some((_, shape)) = shaped.iter().find(|(n, _)| *n == name) {
                walk(shape, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(keys, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_config_reference_names_every_key() {
        let doc = include_str!("../../../docs/config.md");
        let paths = key_paths(&TOP);
        let missing: Vec<&String> = paths
            .iter()
            .filter(|p| !doc.contains(&format!("`{p}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/config.md does not name: {missing:?}"
        );
    }

    #[test]
    fn a_typo_inside_a_section_is_found_with_its_place_and_closest_key() {
        let found = unknown_keys(
            &json!({"model": {"modle": "qwen", "base_url": "http://h/v1"},
                    "pricing": {"qwen": {"inptu": 1}},
                    "kanbann": {}}),
            &TOP,
        );
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(
            shown.contains(
                &"unknown key `model.modle` under model: troupe does not read it; did you mean `model`?"
                    .to_string()
            ),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.contains("`pricing.qwen.inptu`") && s.contains("`input`")),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.contains("`kanbann` at the top level") && s.contains("`kanban`")),
            "{shown:?}"
        );
        assert_eq!(found.len(), 3);
    }

    #[test]
    fn known_keys_and_free_parts_pass() {
        let found = unknown_keys(
            &json!({"model": {"request_fields": {"anything": 1}},
                    "mcp_servers": {"mine": {"whatever": true}},
                    "tools": {"tool_search": {"enabled": "auto"}, "connectors": {"url": "x"}}}),
            &TOP,
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn far_keys_have_no_suggestion() {
        assert_eq!(closest("zzzzzz", MODEL), None);
        assert_eq!(closest("modle", MODEL).as_deref(), Some("model"));
        let found = unknown_keys(
            &json!({"profiles": {"coder": {"modle": "m", "tool_calls": "text", "budget": {}}}}),
            &TOP,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].place, "profiles.coder");
        assert_eq!(found[0].closest.as_deref(), Some("model"));
        assert_eq!(
            closest("api_key_evn", MODEL).as_deref(),
            Some("api_key_env")
        );
    }
}
