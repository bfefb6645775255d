//! Small text helpers shared by every crate's messages: the kind of a value a message complains
//! about, text cut to fit a line or a budget, and control characters made visible.

use serde_json::Value;

/// What kind of JSON value `value` is, in JSON's words ("a string", "an array"): for messages
/// about what a model or a client sent.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What kind of value a configuration entry is, in YAML's words ("a list", "a mapping"): for
/// messages about a file a person wrote.
pub fn yaml_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
pub fn byte_prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to at most `max` bytes on a character boundary, with `…` after a cut: for budgets
/// counted in bytes (wire payloads, logs).
pub fn clip_bytes(text: &str, max: usize) -> String {
    let head = byte_prefix(text, max);
    if head.len() == text.len() {
        text.to_string()
    } else {
        format!("{head}…")
    }
}

/// `text` cut to at most `max` characters, the `…` that marks a cut included: for columns and
/// lines a person reads.
pub fn clip_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` on one line with every control character (escape sequences, bell, carriage return,
/// newline) and every invisible reordering mark shown as an escape (`\x1b`, `\u{202e}`): for
/// text from a remote server (a model server's error) that ends up on a terminal or in a log,
/// where it must not retitle the window, clear the screen or forge a line.
pub fn escape_controls(text: &str) -> String {
    escape_controls_except(text, |_| false)
}

/// [`escape_controls`], but the control characters `keep` accepts stay as they are (newline and
/// tab, for text printed over several lines). Invisible reordering marks are always escaped.
pub fn escape_controls_except(text: &str, keep: impl Fn(char) -> bool) -> String {
    use std::fmt::Write as _;
    let escaped = |c: char| c.is_control() && !keep(c);
    if !text.chars().any(|c| escaped(c) || is_invisible_format(c)) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else if is_invisible_format(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that reorder or hide text without being control characters.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_use_the_words_of_their_format() {
        assert_eq!(json_kind(&json!([1])), "an array");
        assert_eq!(json_kind(&json!(null)), "null");
        assert_eq!(yaml_kind(&json!([1])), "a list");
        assert_eq!(yaml_kind(&json!({})), "a mapping");
    }

    #[test]
    fn byte_cuts_land_on_character_boundaries() {
        assert_eq!(byte_prefix("héllo", 2), "h");
        assert_eq!(byte_prefix("héllo", 3), "hé");
        assert_eq!(clip_bytes("héllo", 2), "h…");
        assert_eq!(clip_bytes("short", 10), "short");
    }

    #[test]
    fn character_cuts_count_the_ellipsis() {
        assert_eq!(clip_chars("abcdef", 4), "abc…");
        assert_eq!(clip_chars("abcd", 4), "abcd");
        assert_eq!(clip_chars("日本語テキスト", 3), "日本…");
        assert_eq!(clip_chars("abc", 0), "…");
    }

    #[test]
    fn control_characters_are_escaped() {
        let body = "boom\x1b]0;owned\x07\x1b[2J\r\nnext\u{202e}";
        let shown = escape_controls(body);
        assert_eq!(
            shown,
            "boom\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x0anext\\u{202e}"
        );
        assert_eq!(escape_controls("plain ü"), "plain ü");
    }

    #[test]
    fn kept_controls_stay_and_marks_never_do() {
        let multi_line = |c: char| c == '\n' || c == '\t';
        assert_eq!(
            escape_controls_except("one\n\ttwo\r\x1b[2J", multi_line),
            "one\n\ttwo\\x0d\\x1b[2J"
        );
        // A reordering mark is escaped whatever the predicate keeps.
        assert_eq!(
            escape_controls_except("a\u{202e}b\u{feff}", |_| true),
            "a\\u{202e}b\\u{feff}"
        );
        assert_eq!(escape_controls_except("plain\n", multi_line), "plain\n");
    }
}
