//! `plugins.enabled` / `plugins.disabled` in troupe.yaml: reading them, and editing the
//! `enabled` list in place for `troupe plugins enable|disable`. The edit touches only the lines
//! of that list (or adds the section at the end) so every other byte of the file stays as it
//! was; the result is parsed again and refused unless only that list changed.

use std::path::Path;

use serde_json::Value;
use troupe_tools::text::yaml_kind;

pub use crate::settings::plugins::Enablement;

/// Adds (`on`) or removes `name` in `plugins.enabled` of `text`; everything else is kept byte
/// for byte. Returns the new text (equal to `text` when nothing had to change).
pub fn edit(text: &str, name: &str, on: bool) -> Result<String, String> {
    let before = parse(text)?;
    let edited = edit_lines(text, name, on)?;
    if edited == text {
        return Ok(edited);
    }
    // The edit must change exactly the enabled list and nothing else.
    let after = parse(&edited).map_err(|e| {
        format!("the edited file would not parse ({e}); edit plugins.enabled by hand")
    })?;
    let expected = normalize(with_enabled(&normalize(before), name, on));
    if normalize(after) != expected {
        return Err(
            "could not edit plugins.enabled without changing something else in the file; edit it by hand"
                .into(),
        );
    }
    Ok(edited)
}

/// Edits `path` in place (atomically: a temporary file renamed over it); creates it when it
/// does not exist. Returns whether it changed.
pub fn edit_file(path: &Path, name: &str, on: bool) -> Result<bool, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let edited = edit(&text, name, on)?;
    if edited == text {
        return Ok(false);
    }
    replace_file(path, &edited)?;
    Ok(true)
}

/// Writes `edited` over `path` atomically (a temporary file renamed over it), keeping the
/// file's permissions. Shared with the other in-place edits of troupe.yaml.
pub(crate) fn replace_file(path: &Path, edited: &str) -> Result<(), String> {
    let tmp = path.with_extension("yaml.troupe-edit");
    std::fs::write(&tmp, edited)
        .and_then(|()| {
            if let Ok(meta) = std::fs::metadata(path) {
                std::fs::set_permissions(&tmp, meta.permissions())?;
            }
            std::fs::rename(&tmp, path)
        })
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })
}

pub(crate) fn parse(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    troupe_tools::input_limits::check_config_text(text, "troupe.yaml")
        .map_err(|e| e.to_string())?;
    match serde_norway::from_str::<Value>(text) {
        Ok(Value::Null) => Ok(Value::Object(Default::default())),
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => Err(format!(
            "troupe.yaml must be a mapping of sections, found {}",
            yaml_kind(&other)
        )),
        Err(e) => Err(format!("troupe.yaml is not valid YAML: {e}")),
    }
}

/// `doc` with `name` added to or removed from `plugins.enabled`.
fn with_enabled(doc: &Value, name: &str, on: bool) -> Value {
    let mut doc = doc.clone();
    let Value::Object(root) = &mut doc else {
        return doc;
    };
    let plugins = root
        .entry("plugins")
        .or_insert_with(|| Value::Object(Default::default()));
    if plugins.is_null() {
        *plugins = Value::Object(Default::default());
    }
    if let Value::Object(plugins) = plugins {
        let list = plugins
            .entry("enabled")
            .or_insert_with(|| Value::Array(Vec::new()));
        if list.is_null() {
            *list = Value::Array(Vec::new());
        }
        if let Value::Array(items) = list {
            let present = items.iter().any(|v| v.as_str() == Some(name));
            if on && !present {
                items.push(Value::String(name.to_string()));
            } else if !on {
                items.retain(|v| v.as_str() != Some(name));
            }
        }
    }
    doc
}

/// `doc` with an empty `plugins` or `plugins.enabled` written as `{}` / `[]`: removing the last
/// name leaves an empty block, which reads as null, and means the same.
fn normalize(mut doc: Value) -> Value {
    if let Value::Object(root) = &mut doc
        && let Some(plugins) = root.get_mut("plugins")
    {
        if plugins.is_null() {
            *plugins = Value::Object(Default::default());
        }
        if let Value::Object(plugins) = plugins
            && plugins.get("enabled").is_some_and(Value::is_null)
        {
            plugins.insert("enabled".into(), Value::Array(Vec::new()));
        }
    }
    doc
}

pub(crate) fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

pub(crate) fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The value after `key:` on a line, without a trailing comment.
pub(crate) fn value_after_colon(line: &str) -> &str {
    let rest = line.split_once(':').map_or("", |(_, r)| r);
    let rest = match rest.find(" #") {
        Some(at) => &rest[..at],
        None => rest,
    };
    rest.trim()
}

pub(crate) fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .or_else(|| s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
        .unwrap_or(s)
}

/// A YAML scalar for a plugin name: plain when safe, else double-quoted JSON.
fn scalar(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && !name.starts_with(['-', '.']);
    if plain {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}

fn edit_lines(text: &str, name: &str, on: bool) -> Result<String, String> {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let Some(top) = lines
        .iter()
        .position(|l| l.starts_with("plugins:") || l.starts_with("plugins :"))
    else {
        if !on {
            return Ok(text.to_string());
        }
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(newline);
        }
        out.push_str(&format!(
            "plugins:{newline}  enabled:{newline}    - {}{newline}",
            scalar(name)
        ));
        return Ok(out);
    };
    let top_value = value_after_colon(&lines[top]);
    if !top_value.is_empty() {
        // A flow mapping (`plugins: {enabled: [a]}`): rewrite that one line.
        return rewrite_flow_line(&mut lines, top, "plugins", |value| {
            with_enabled(
                &Value::Object([("plugins".to_string(), value)].into_iter().collect()),
                name,
                on,
            )["plugins"]
                .clone()
        });
    }
    // The block: following lines that are blank, comments or indented.
    let mut end = top + 1;
    while end < lines.len() && (is_blank_or_comment(&lines[end]) || indent_of(&lines[end]) > 0) {
        end += 1;
    }
    // Trailing blank/comment lines belong to what follows.
    while end > top + 1 && is_blank_or_comment(&lines[end - 1]) && indent_of(&lines[end - 1]) == 0 {
        end -= 1;
    }
    let child_indent = lines[top + 1..end]
        .iter()
        .find(|l| !is_blank_or_comment(l))
        .map_or(2, |l| indent_of(l));
    let enabled_at = (top + 1..end).find(|&i| {
        indent_of(&lines[i]) == child_indent
            && lines[i].trim_start().starts_with("enabled")
            && lines[i].trim_start()["enabled".len()..]
                .trim_start()
                .starts_with(':')
    });
    let Some(at) = enabled_at else {
        if !on {
            return Ok(text.to_string());
        }
        let pad = " ".repeat(child_indent);
        let insert = format!("{pad}enabled:{newline}{pad}  - {}{newline}", scalar(name));
        lines.insert(top + 1, insert);
        return Ok(lines.concat());
    };
    let value = value_after_colon(&lines[at]);
    if !value.is_empty() && value != "~" && value != "null" {
        return rewrite_flow_line(&mut lines, at, "enabled", |v| {
            let mut items = match v {
                Value::Array(items) => items,
                _ => Vec::new(),
            };
            let present = items.iter().any(|x| x.as_str() == Some(name));
            if on && !present {
                items.push(Value::String(name.to_string()));
            } else if !on {
                items.retain(|x| x.as_str() != Some(name));
            }
            Value::Array(items)
        });
    }
    if value == "~" || value == "null" {
        let pad = " ".repeat(indent_of(&lines[at]));
        lines[at] = format!("{pad}enabled:{newline}");
    }
    // Block list items: lines after `enabled:` indented deeper (or `- ` at the same indent).
    let key_indent = indent_of(&lines[at]);
    let mut items: Vec<usize> = Vec::new();
    let mut i = at + 1;
    while i < end {
        let line = &lines[i];
        if is_blank_or_comment(line) {
            i += 1;
            continue;
        }
        let ind = indent_of(line);
        let is_item = line.trim_start().starts_with("- ") || line.trim() == "-";
        if ind > key_indent || (ind == key_indent && is_item) {
            if is_item {
                items.push(i);
            }
            i += 1;
        } else {
            break;
        }
    }
    let matches_name = |line: &str| {
        let item = line.trim_start().trim_start_matches('-');
        let item = match item.find(" #") {
            Some(at) => &item[..at],
            None => item,
        };
        unquote(item) == name
    };
    if on {
        if items.iter().any(|&i| matches_name(&lines[i])) {
            return Ok(text.to_string());
        }
        let (pad, after) = match items.last() {
            Some(&last) => (" ".repeat(indent_of(&lines[last])), last + 1),
            None => (" ".repeat(key_indent + 2), at + 1),
        };
        if let Some(prev) = lines.get_mut(after - 1)
            && !prev.ends_with('\n')
        {
            prev.push_str(newline);
        }
        lines.insert(after, format!("{pad}- {}{newline}", scalar(name)));
    } else {
        let drop: Vec<usize> = items
            .into_iter()
            .filter(|&i| matches_name(&lines[i]))
            .collect();
        if drop.is_empty() {
            return Ok(text.to_string());
        }
        for i in drop.into_iter().rev() {
            lines.remove(i);
        }
    }
    Ok(lines.concat())
}

/// Replaces the value of a flow-style `key: value` line by `change(value)` written as JSON
/// (valid YAML), keeping the line's indent and trailing comment.
fn rewrite_flow_line(
    lines: &mut [String],
    at: usize,
    key: &str,
    change: impl FnOnce(Value) -> Value,
) -> Result<String, String> {
    let line = lines[at].clone();
    let pad = " ".repeat(indent_of(&line));
    let value = value_after_colon(&line);
    let parsed: Value = serde_norway::from_str(value).map_err(|e| {
        format!("`{key}:` holds a value troupe cannot edit ({e}); edit plugins.enabled by hand")
    })?;
    let comment = line
        .split_once(':')
        .and_then(|(_, r)| r.find(" #").map(|at| r[at..].trim_end().to_string()))
        .unwrap_or_default();
    let ending = if line.ends_with("\r\n") {
        "\r\n"
    } else if line.ends_with('\n') {
        "\n"
    } else {
        ""
    };
    let changed = change(parsed);
    lines[at] = format!("{pad}{key}: {changed}{comment}{ending}");
    Ok(lines.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_lists_gain_and_lose_one_line() {
        let text = "# my config\nmodel:\n  model: m # keep\nplugins:\n  enabled:\n    - a\n    - 'b'\n  disabled: [c]\n\n# tail\nserve: {port: 1}\n";
        let on = edit(text, "disk-cleanup", true).unwrap();
        assert_eq!(
            on,
            text.replace("    - 'b'\n", "    - 'b'\n    - disk-cleanup\n")
        );
        let off = edit(&on, "b", false).unwrap();
        assert_eq!(off, on.replace("    - 'b'\n", ""));
        assert_eq!(edit(&on, "disk-cleanup", true).unwrap(), on);
    }

    #[test]
    fn missing_sections_and_flow_lists() {
        assert_eq!(
            edit("model: {model: m}", "x", true).unwrap(),
            "model: {model: m}\nplugins:\n  enabled:\n    - x\n"
        );
        assert_eq!(
            edit("plugins:\n  disabled: [y]\n", "x", true).unwrap(),
            "plugins:\n  enabled:\n    - x\n  disabled: [y]\n"
        );
        assert_eq!(
            edit("plugins:\n  enabled: [a, x] # on\n", "x", false).unwrap(),
            "plugins:\n  enabled: [\"a\"] # on\n"
        );
        assert_eq!(
            edit("a: 1\nplugins: {enabled: [a]}\nb: 2\n", "x", true).unwrap(),
            "a: 1\nplugins: {\"enabled\":[\"a\",\"x\"]}\nb: 2\n"
        );
        assert_eq!(edit("", "x", false).unwrap(), "");
    }
}
