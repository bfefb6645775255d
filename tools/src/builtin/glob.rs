//! Shell-style globs (`*.rs`, `src/**/*.toml`, `file?.{js,ts}`) compiled to regular
//! expressions, for `search_files`. A glob without `/` matches file names; one with `/`
//! matches paths relative to the search root.

use regex::Regex;

/// A compiled glob.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    re: Regex,
    /// Match the whole relative path rather than the file name.
    on_path: bool,
}

impl Glob {
    /// Compiles `pattern`, or says what is wrong with it.
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        let mut re = String::from("^");
        let chars: Vec<char> = pattern.chars().collect();
        let mut i = 0;
        let mut braces = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                '*' if chars.get(i + 1) == Some(&'*') => {
                    if chars.get(i + 2) == Some(&'/') {
                        re.push_str("(?:.*/)?");
                        i += 3;
                    } else {
                        re.push_str(".*");
                        i += 2;
                    }
                    continue;
                }
                '*' => re.push_str("[^/]*"),
                '?' => re.push_str("[^/]"),
                '[' => {
                    let end = chars[i + 1..]
                        .iter()
                        .position(|&x| x == ']')
                        .ok_or_else(|| {
                            format!("The glob '{pattern}' opens '[' without closing it.")
                        })?;
                    let body: String = chars[i + 1..i + 1 + end].iter().collect();
                    let body = body
                        .strip_prefix('!')
                        .map(|b| format!("^{b}"))
                        .unwrap_or(body);
                    re.push('[');
                    re.push_str(&body.replace('\\', "\\\\"));
                    re.push(']');
                    i += end + 2;
                    continue;
                }
                '{' => {
                    braces += 1;
                    re.push_str("(?:");
                }
                '}' if braces > 0 => {
                    braces -= 1;
                    re.push(')');
                }
                ',' if braces > 0 => re.push('|'),
                other => re.push_str(&regex::escape(&other.to_string())),
            }
            i += 1;
        }
        if braces > 0 {
            return Err(format!(
                "The glob '{pattern}' opens '{{' without closing it."
            ));
        }
        re.push('$');
        let re =
            Regex::new(&re).map_err(|e| format!("The glob '{pattern}' could not be used: {e}."))?;
        Ok(Glob {
            re,
            on_path: pattern.contains('/'),
        })
    }

    /// Whether the file at `relative` (with `/` separators) matches.
    pub(crate) fn matches(&self, relative: &str) -> bool {
        if self.on_path {
            self.re.is_match(relative)
        } else {
            self.re
                .is_match(relative.rsplit('/').next().unwrap_or(relative))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_and_paths() {
        let g = Glob::new("*.rs").unwrap();
        assert!(g.matches("src/lib.rs") && !g.matches("src/lib.rsx"));
        let g = Glob::new("src/**/*.toml").unwrap();
        assert!(
            g.matches("src/Cargo.toml")
                && g.matches("src/a/b/c.toml")
                && !g.matches("x/src/a.toml")
        );
        let g = Glob::new("file?.{js,ts}").unwrap();
        assert!(g.matches("file1.js") && g.matches("fileA.ts") && !g.matches("file12.js"));
        let g = Glob::new("[!a]*.txt").unwrap();
        assert!(g.matches("b.txt") && !g.matches("a.txt"));
        assert!(Glob::new("[abc").is_err());
        assert!(Glob::new("{a,b").is_err());
    }
}
