//! Capturing a child's output: an incremental UTF-8 decoder (a character split across reads is
//! put back together; invalid bytes become U+FFFD) and a head-and-tail capture that keeps memory
//! bounded however much a command prints. Used by `terminal`, the process registry and
//! `execute_code`.

use std::collections::VecDeque;

/// Decodes a byte stream into text chunk by chunk.
#[derive(Debug, Default)]
pub(crate) struct Utf8Stream {
    /// Bytes of a character that the last chunk cut in half (at most 3).
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Decodes `bytes`, holding back an incomplete character at the end for the next call.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut rest: &[u8] = &buf;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    break;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    // The prefix was just checked, so this cannot fail; stay total anyway.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match err.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &after[bad..];
                        }
                        None => {
                            self.pending = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// Ends the stream: a character cut off at the very end becomes one U+FFFD.
    pub(crate) fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            "\u{FFFD}".to_string()
        }
    }
}

/// Keeps the first `head_cap` and the last `tail_cap` characters of a stream, counting the rest.
#[derive(Debug)]
pub(crate) struct HeadTail {
    head: String,
    head_chars: usize,
    head_cap: usize,
    tail: VecDeque<char>,
    tail_cap: usize,
    total: usize,
}

/// A finished capture.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Captured {
    /// The text to show, with a marker where the middle was cut.
    pub(crate) text: String,
    /// Characters the stream had in all.
    pub(crate) total_chars: usize,
    /// Characters left out.
    pub(crate) omitted: usize,
}

impl HeadTail {
    /// A capture holding at most `cap` characters: 40 % from the start, 60 % from the end.
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap * 2 / 5;
        HeadTail {
            head: String::new(),
            head_chars: 0,
            head_cap,
            tail: VecDeque::new(),
            tail_cap: cap - head_cap,
            total: 0,
        }
    }

    /// Adds text.
    pub(crate) fn push(&mut self, text: &str) {
        for c in text.chars() {
            self.total += 1;
            if self.head_chars < self.head_cap {
                self.head.push(c);
                self.head_chars += 1;
            } else {
                if self.tail.len() == self.tail_cap {
                    self.tail.pop_front();
                }
                self.tail.push_back(c);
            }
        }
    }

    /// The kept start, the kept end, and the number of characters seen in all.
    pub(crate) fn into_parts(self) -> (String, String, usize) {
        (self.head, self.tail.into_iter().collect(), self.total)
    }

    /// The captured text; `marker` builds the note put where the middle was cut from
    /// (omitted, total).
    pub(crate) fn finish(self, marker: impl Fn(usize, usize) -> String) -> Captured {
        let kept = self.head_chars + self.tail.len();
        let omitted = self.total - kept;
        let mut text = self.head;
        if omitted > 0 {
            text.push_str(&marker(omitted, self.total));
        }
        text.extend(self.tail);
        Captured {
            text,
            total_chars: self.total,
            omitted,
        }
    }
}

/// `12345678` as `12,345,678`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

static ANSI_ESCAPE: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
        .ok()
});

/// `text` without terminal colour and cursor escape sequences.
pub(crate) fn strip_ansi(text: &str) -> String {
    match ANSI_ESCAPE.as_ref() {
        Some(re) => re.replace_all(text, "").into_owned(),
        None => text.to_string(),
    }
}

/// Keeps the last `max` characters of `text` (whole characters only).
pub(crate) fn last_chars(text: &str, max: usize) -> &str {
    let count = text.chars().count();
    if count <= max {
        return text;
    }
    let skip = count - max;
    match text.char_indices().nth(skip) {
        Some((at, _)) => &text[at..],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_multibyte_characters_are_joined() {
        let bytes = "héllo → 世界 😀".as_bytes();
        let mut stream = Utf8Stream::default();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&stream.push(std::slice::from_ref(b)));
        }
        out.push_str(&stream.finish());
        assert_eq!(out, "héllo → 世界 😀");
    }

    #[test]
    fn invalid_bytes_and_cut_tail_become_replacement_characters() {
        let mut stream = Utf8Stream::default();
        let mut out = stream.push(b"a\xffb\xe4\xb8");
        out.push_str(&stream.finish());
        assert_eq!(out, "a\u{FFFD}b\u{FFFD}");
    }

    #[test]
    fn head_and_tail_are_kept_with_a_marker() {
        let mut cap = HeadTail::new(10);
        cap.push("0123456789abcdefghij");
        let got = cap.finish(|omitted, total| format!("[{omitted}/{total}]"));
        assert_eq!(got.text, "0123[10/20]efghij");
        assert_eq!(got.omitted, 10);
        let mut small = HeadTail::new(10);
        small.push("short");
        assert_eq!(small.finish(|_, _| "X".into()).text, "short");
    }

    #[test]
    fn ansi_sequences_are_removed() {
        assert_eq!(strip_ansi("\x1b[1;31mred\x1b[0m plain"), "red plain");
    }

    #[test]
    fn thousands_and_last_chars() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234), "1,234");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(last_chars("héllo", 3), "llo");
        assert_eq!(last_chars("hi", 3), "hi");
    }
}
