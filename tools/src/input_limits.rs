//! Limits on configuration text checked before it is parsed: troupe.yaml, plugin.yaml,
//! scripted model files, tool catalogs. The YAML parser's time grows with the square of the
//! nesting depth, so a file nested 100,000 deep would hold a core for a minute before being
//! refused; [`check_config_text`] measures size and nesting in one linear pass first and refuses
//! such a file at once, naming it, the limit and what to do.
//!
//! The depth is an estimate that never undercounts a real nesting: block nesting from the
//! indentation (and `- ` markers opening a sequence inside a sequence on one line), flow nesting
//! from `[` and `{` where a value can start. Text in quotes, comments and block scalars (`|`,
//! `>`) does not count.

use std::fmt;

/// Largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: usize = 4 * 1024 * 1024;
/// Deepest nesting of mappings and lists accepted in a configuration file.
pub const MAX_CONFIG_DEPTH: usize = 128;

/// A configuration text past a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputTooLarge {
    /// The file (or where the text came from).
    pub origin: String,
    /// What was too large.
    pub what: Excess,
}

/// Which limit a configuration text passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excess {
    /// Its size in bytes.
    Size(usize),
    /// Its nesting passed [`MAX_CONFIG_DEPTH`] on this line (1-based).
    Depth {
        /// The line.
        line: usize,
    },
}

impl fmt::Display for InputTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.what {
            Excess::Size(bytes) => write!(
                f,
                "{}: the file is {bytes} bytes, more than the {} MiB troupe reads as configuration; keep large data in separate files and refer to them",
                self.origin,
                MAX_CONFIG_BYTES / (1024 * 1024)
            ),
            Excess::Depth { line } => write!(
                f,
                "{}: at line {line} mappings and lists are nested more than {MAX_CONFIG_DEPTH} deep, which troupe does not read as configuration; flatten the structure",
                self.origin
            ),
        }
    }
}

impl std::error::Error for InputTooLarge {}

/// Refuses `text`, read from `origin`, when it is larger than [`MAX_CONFIG_BYTES`] or nested
/// deeper than [`MAX_CONFIG_DEPTH`]. Linear in the length of `text`; works for YAML and JSON.
pub fn check_config_text(text: &str, origin: &str) -> Result<(), InputTooLarge> {
    let refuse = |what| InputTooLarge {
        origin: origin.to_string(),
        what,
    };
    if text.len() > MAX_CONFIG_BYTES {
        return Err(refuse(Excess::Size(text.len())));
    }
    let mut scan = Scan::default();
    for (n, line) in text.lines().enumerate() {
        if scan.line(line.as_bytes()) > MAX_CONFIG_DEPTH {
            return Err(refuse(Excess::Depth { line: n + 1 }));
        }
    }
    Ok(())
}

/// The state of the depth scan between lines.
#[derive(Default)]
struct Scan {
    /// Indentations of the open block levels, increasing.
    indents: Vec<usize>,
    /// Open `[` and `{`.
    flow: usize,
    /// Inside a quoted scalar that goes on past the line end: its quote.
    quote: Option<u8>,
    /// Inside a block scalar (`|`, `>`) whose header line had this indentation.
    block_scalar: Option<usize>,
}

impl Scan {
    /// Takes one line; returns the deepest nesting seen on it.
    fn line(&mut self, line: &[u8]) -> usize {
        let indent = line.iter().take_while(|b| **b == b' ').count();
        let blank = line[indent..].iter().all(|b| b.is_ascii_whitespace());
        if let Some(header) = self.block_scalar {
            if blank || indent > header {
                return 0;
            }
            self.block_scalar = None;
        }
        if blank && self.quote.is_none() {
            return 0;
        }
        let mut at = indent;
        let mut block = 0;
        if self.flow == 0 && self.quote.is_none() {
            while self.indents.last().is_some_and(|top| *top > indent) {
                self.indents.pop();
            }
            if self.indents.last() != Some(&indent) {
                self.indents.push(indent);
            }
            // `- - - x`: each marker opens a sequence inside the one before.
            while line.get(at) == Some(&b'-') && matches!(line.get(at + 1), None | Some(b' ')) {
                block += 1;
                at += 2;
                while line.get(at) == Some(&b' ') {
                    at += 1;
                }
            }
        }
        let base = self.indents.len() + block;
        let mut deepest = base + self.flow;
        // Whether a value may start here (so `[`, `{` and quotes open something).
        let mut value_start = true;
        while at < line.len() {
            let b = line[at];
            if let Some(q) = self.quote {
                if b == b'\\' && q == b'"' {
                    at += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && line.get(at + 1) == Some(&b'\'') {
                        at += 2;
                        continue;
                    }
                    self.quote = None;
                    value_start = false;
                }
                at += 1;
                continue;
            }
            match b {
                b'#' if at == 0 || line[at - 1] == b' ' || line[at - 1] == b'\t' => break,
                // In flow (and so in JSON) a double quote always opens a string.
                b'"' if value_start || self.flow > 0 => self.quote = Some(b),
                b'\'' if value_start => self.quote = Some(b),
                b'[' | b'{' if value_start || self.flow > 0 => {
                    self.flow += 1;
                    deepest = deepest.max(base + self.flow);
                    value_start = true;
                    at += 1;
                    continue;
                }
                b']' | b'}' if self.flow > 0 => {
                    self.flow -= 1;
                    value_start = false;
                }
                b',' if self.flow > 0 => value_start = true,
                b':' | b'-' | b'?' if matches!(line.get(at + 1), None | Some(b' ')) => {
                    value_start = true;
                    // `key: |` or `key: >-` opens a block scalar on the next lines.
                    if b == b':' && self.flow == 0 {
                        let rest = std::str::from_utf8(&line[at + 1..]).unwrap_or("").trim();
                        let rest = rest.split(" #").next().unwrap_or("").trim();
                        if rest.starts_with(['|', '>'])
                            && rest[1..]
                                .chars()
                                .all(|c| c.is_ascii_digit() || c == '-' || c == '+')
                        {
                            self.block_scalar = Some(indent);
                            break;
                        }
                    }
                }
                b' ' | b'\t' => {}
                _ => value_start = false,
            }
            at += 1;
        }
        deepest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(text: &str) -> usize {
        let mut scan = Scan::default();
        text.lines()
            .map(|l| scan.line(l.as_bytes()))
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn ordinary_configs_pass() {
        let config = "model:\n  name: x # [not counted\n  list: [a, [b, {c: d}]]\nhooks:\n  on_start:\n    - command: |\n        if [ -f x ]; then\n          echo '{'\n        fi\n    - \"[quoted\"\ntitle: don't [stop\n";
        assert!(depth(config) <= 5, "{}", depth(config));
        assert!(check_config_text(config, "troupe.yaml").is_ok());
        assert!(check_config_text("{\"a\": [1, {\"b\": [2]}]}", "c.json").is_ok());
    }

    #[test]
    fn deep_nesting_of_every_kind_is_refused() {
        let flow = format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = check_config_text(&flow, "troupe.yaml").unwrap_err();
        assert_eq!(err.what, Excess::Depth { line: 1 });
        let text = err.to_string();
        assert!(
            text.contains("troupe.yaml") && text.contains("128") && text.contains("flatten"),
            "{text}"
        );
        let dashes = "- ".repeat(200) + "x";
        assert!(check_config_text(&dashes, "f").is_err());
        let indented: String = (0..200).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert!(check_config_text(&indented, "f").is_err());
        let json = "{\"a\":".repeat(200);
        assert!(check_config_text(&json, "f.json").is_err());
    }

    #[test]
    fn size_is_capped() {
        let big = "a".repeat(MAX_CONFIG_BYTES + 1);
        let err = check_config_text(&big, "plugin.yaml").unwrap_err();
        assert!(matches!(err.what, Excess::Size(_)));
        assert!(err.to_string().contains("4 MiB"), "{err}");
    }
}
