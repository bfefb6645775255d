//! One simple command as the rules see it ([`Cmd`]), and the shape of a rule.

use super::code::{inline_code, is_interpreter};
use super::shell::{Segment, is_shell};

/// One simple command as the rules see it: a segment of the text, or the command a wrapper
/// (`nice`, `timeout`, `xargs`, `find -exec`, ...) runs.
pub(super) struct Cmd<'a> {
    /// The simple command with its raw words and redirections.
    pub(super) seg: &'a Segment,
    /// The simple command after it, if any.
    pub(super) next: Option<&'a Segment>,
    /// The command word as written (after wrappers and assignments).
    pub(super) word: &'a str,
    /// The program's name, lower-cased without its directory ("" when there is none); the
    /// program a link points at when the word is a link to another program.
    pub(super) name: String,
    /// The words after the command word.
    pub(super) args: Vec<&'a str>,
    /// The program this one's output is fed to (`| sh`, `> >(sh)`), named like `name`, with
    /// its arguments.
    pub(super) fed: Option<(String, Vec<String>)>,
    /// The word before the command word is an option, so the command word may be its value
    /// (`nice -n $N make`), not a program.
    pub(super) after_option: bool,
}

impl Cmd<'_> {
    pub(super) fn flags(&self) -> impl Iterator<Item = &str> {
        self.args.iter().copied().filter(|a| a.starts_with('-'))
    }
    pub(super) fn operands(&self) -> Vec<&str> {
        self.args
            .iter()
            .copied()
            .filter(|a| !a.starts_with('-'))
            .collect()
    }
    /// The operands, leaving out the values of the options listed.
    pub(super) fn operands_after_values(&self, valued: &[&str]) -> Vec<&str> {
        let mut out = vec![];
        let mut skip = false;
        let mut ended = false;
        for a in &self.args {
            if skip {
                skip = false;
            } else if ended || !a.starts_with('-') {
                out.push(*a);
            } else if *a == "--" {
                ended = true;
            } else if valued.contains(a) {
                skip = true;
            }
        }
        out
    }
    pub(super) fn first_operand(&self) -> &str {
        self.args
            .iter()
            .copied()
            .find(|a| !a.starts_with('-'))
            .unwrap_or("")
    }
    pub(super) fn short_flag(&self, c: char) -> bool {
        self.flags().any(|f| !f.starts_with("--") && f.contains(c))
    }
    pub(super) fn long_flag(&self, l: &str) -> bool {
        self.flags()
            .any(|f| f == l || f.strip_prefix(l).is_some_and(|r| r.starts_with('=')))
    }
    pub(super) fn has(&self, arg: &str) -> bool {
        self.args.contains(&arg)
    }
    pub(super) fn any_word(&self, f: impl Fn(&str) -> bool) -> bool {
        self.seg.words.iter().any(|w| f(w))
    }
    pub(super) fn is(&self, names: &[&str]) -> bool {
        names.contains(&self.name.as_str())
    }
    pub(super) fn recursive(&self) -> bool {
        self.short_flag('r') || self.short_flag('R') || self.long_flag("--recursive")
    }
    /// The operands of a recursive `rm`, without trailing `/` and `*`.
    pub(super) fn rm_targets(&self) -> Vec<&str> {
        if self.name != "rm" || !self.recursive() {
            return vec![];
        }
        self.operands()
            .into_iter()
            .map(|o| {
                if o == "/*" {
                    ""
                } else {
                    o.trim_end_matches('*').trim_end_matches('/')
                }
            })
            .collect()
    }
    /// The program fed this one's output is a shell or an interpreter.
    pub(super) fn piped_into_shell(&self) -> bool {
        self.fed
            .as_ref()
            .is_some_and(|(n, _)| is_shell(n) || is_interpreter(n) || n == "at" || n == "batch")
    }
    /// The program fed this one's output reads it as its program (not as data for a script
    /// or inline code it was given).
    pub(super) fn feeds_a_program(&self) -> bool {
        if !self.piped_into_shell() {
            return false;
        }
        let Some((name, rest)) = &self.fed else {
            return false;
        };
        let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
        if inline_code(name, &rest).is_some() {
            return false;
        }
        if is_shell(name)
            && rest
                .iter()
                .take_while(|a| a.starts_with('-'))
                .any(|a| !a.starts_with("--") && a.contains('c'))
        {
            return false;
        }
        let operands = rest.iter().filter(|a| !a.starts_with('-')).count();
        operands == 0 || rest.iter().any(|a| ["-", "-s", "/dev/stdin"].contains(a))
    }
    /// `echo`/`printf` of plain text, which the check reads as the program it feeds.
    pub(super) fn plain_literal(&self) -> bool {
        self.is(&["echo", "printf"])
            && !self
                .args
                .iter()
                .any(|a| a.contains(['\\', '$', '`', '%']) || *a == "-e")
    }
}

/// How strict a rule is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    /// Never run.
    Forbid,
    /// Run only with a person's approval.
    Ask,
}

/// What a rule looks at.
pub(super) enum Test {
    /// The whole command text, normalised.
    Text(fn(&str) -> bool),
    /// One simple command with its redirections and its neighbour.
    Command(fn(&Cmd) -> bool),
}

/// One rule of the check.
pub(super) struct Rule {
    /// A stable key, usable to remember an approval for the session.
    pub(super) key: &'static str,
    /// Forbidden, or approval needed.
    pub(super) level: Level,
    /// Why, in a short phrase that follows "This command needs approval first: ".
    pub(super) reason: &'static str,
    /// Whether the rule matches.
    pub(super) test: Test,
    /// Commands the rule must catch with this key; the tests walk them.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) catches: &'static [&'static str],
}
