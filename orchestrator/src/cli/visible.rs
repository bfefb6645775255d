//! Text from stored or remote data (task fields, comments, a model's words, tool output, MCP
//! server names and errors) made safe to print on a terminal: control characters and the
//! invisible reordering marks become visible escapes (`\x1b`, `\u{202e}`), so a task title
//! cannot clear the screen, retitle the window, plant a hyperlink or hide text behind
//! backspaces and carriage returns.

use troupe_tools::text::{escape_controls, escape_controls_except};

/// `text` with every control character but newline and tab shown as an escape.
pub(crate) fn visible(text: &str) -> String {
    escape_controls_except(text, |c| c == '\n' || c == '\t')
}

/// `text` on one line: newlines and tabs are shown as escapes too.
pub(crate) fn visible_line(text: &str) -> String {
    escape_controls(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_become_visible() {
        let title = "ok\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://x\x1b\\link\x08\x08\rX\u{202e}";
        let shown = visible_line(title);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(shown.starts_with("ok\\x1b[2J\\x1b]0;pwned\\x07"), "{shown}");
        assert!(shown.ends_with("\\x08\\x08\\x0dX\\u{202e}"), "{shown}");
        assert_eq!(visible("line one\n\tline two"), "line one\n\tline two");
        assert_eq!(visible_line("a\nb"), "a\\x0ab");
        assert_eq!(visible("plain ünïcode"), "plain ünïcode");
    }
}
