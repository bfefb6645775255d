//! The dangerous-command check: which shell commands are catastrophic (never run, whatever the
//! approval settings) and which need a person's approval first. The Supervisor calls
//! [`check_command_in`] before it lets `terminal` run, `terminal` calls it again so a
//! catastrophic command cannot slip through a caller that forgot, and text written to a
//! background process's stdin goes through [`check_keystrokes`] the same way.
//!
//! This is the second layer. The boundary is the confinement commands run in (they can write
//! only the workspace, temp and what was granted); the text check is what asks a person before a
//! command that reads as dangerous runs at all, and what stands alone where no confinement is
//! available. It therefore fails closed: what it cannot read needs approval, never a pass.
//!
//! How it reads a command (`shell.rs`): the text is normalised (ANSI-C `$'..'` strings decoded;
//! escapes, empty quotes and `$IFS` tricks removed), split into simple commands with brace
//! expansions expanded, and every simple command is held against the rule table (`rules.rs`).
//! Rules look at command position only, so prose inside quotes (`echo "rm -rf /"`) is not
//! mistaken for a command. Commands inside commands are checked too (`nested.rs`): whatever a
//! wrapper runs (`nice`, `timeout`, `env`, `xargs`, `sudo`, every later word being tried as the
//! command), `sh -c` and `eval` text, substitutions, `find -exec`, git aliases, `sed`'s `e`,
//! `trap`, aliases, variables the shell runs, and script files a shell or interpreter is told to
//! run, read from disk at check time. A program run by path is resolved to what it links to.
//!
//! What cannot be read is not guessed at: a command name built from expansions, `eval` of an
//! expansion, text piped into a shell or interpreter from anything but a plain literal, inline
//! interpreter code that reaches the filesystem, the network or other programs (`code.rs`), a
//! script that cannot be read or is written by the same command, writes to a path built from
//! variables that could name a protected file (`targets.rs`), and anything nested deeper than
//! [`MAX_DEPTH`] all need approval, with a reason saying why they could not be checked.

mod cmd;
mod code;
mod input;
mod nested;
mod rules;
mod shell;
mod targets;
mod walk;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use input::{KeystrokeCheck, check_keystrokes};

/// How many commands deep (a shell's `-c` text, `eval`, a substitution, a script file) the check
/// reads; deeper than that it asks instead of passing what it did not read.
pub const MAX_DEPTH: usize = 6;

/// What the rules say about a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandVerdict {
    /// Nothing matched.
    Allowed,
    /// A person must approve it first.
    NeedsApproval {
        /// A stable key for the rule, usable to remember an approval for the session.
        key: &'static str,
        /// Why, in a short phrase.
        reason: &'static str,
    },
    /// Never run, not even with approvals off.
    Forbidden {
        /// A stable key for the rule.
        key: &'static str,
        /// Why, in a short phrase.
        reason: &'static str,
    },
}

impl CommandVerdict {
    /// The reason, when the command is not simply allowed.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            CommandVerdict::Allowed => None,
            CommandVerdict::NeedsApproval { reason, .. }
            | CommandVerdict::Forbidden { reason, .. } => Some(reason),
        }
    }

    /// The rule's key, when the command is not simply allowed.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            CommandVerdict::Allowed => None,
            CommandVerdict::NeedsApproval { key, .. } | CommandVerdict::Forbidden { key, .. } => {
                Some(key)
            }
        }
    }

    /// The stricter of two verdicts (the first reason wins between equals).
    pub fn and(self, other: CommandVerdict) -> CommandVerdict {
        match (&self, &other) {
            (CommandVerdict::Forbidden { .. }, _) => self,
            (_, CommandVerdict::Forbidden { .. }) => other,
            (CommandVerdict::NeedsApproval { .. }, _) => self,
            _ => other,
        }
    }
}

/// Checks a command as if it ran in the current directory. Prefer [`check_command_in`] with
/// the directory it will really run in, so script files it names are read from there.
pub fn check_command(command: &str) -> CommandVerdict {
    let cwd = std::env::current_dir().ok();
    walk::Walk::run(command, cwd.as_deref()).verdict
}

/// Checks a command that runs in `cwd`: the strictest verdict of any rule that matches it or
/// any command inside it. Script files it runs are read from disk now, relative to `cwd`.
pub fn check_command_in(command: &str, cwd: &Path) -> CommandVerdict {
    walk::Walk::run(command, Some(cwd)).verdict
}

/// Checks a command that runs in `cwd`, or somewhere unknown (`None`: relative script files
/// then count as unreadable).
pub(crate) fn check_command_at(command: &str, cwd: Option<&Path>) -> CommandVerdict {
    walk::Walk::run(command, cwd).verdict
}

/// The reason a command must never run, if it must not.
pub fn forbidden_reason(command: &str) -> Option<&'static str> {
    match check_command(command) {
        CommandVerdict::Forbidden { reason, .. } => Some(reason),
        _ => None,
    }
}

/// The reason a command needs approval (or is forbidden outright), if it does.
pub fn approval_reason(command: &str) -> Option<&'static str> {
    check_command(command).reason()
}

/// The literal paths a command would delete or write to (`rm`, `mv`, `cp`, `dd of=`,
/// `truncate`, `tee`, `sed -i`, redirections, ..., also inside `sh -c` and behind wrappers), as
/// written: relative ones are relative to where it runs. Paths only known at run time are left
/// out, and when part of the command cannot be read at all the list is empty, so a grant made
/// from it never covers more than what the text shows.
pub fn write_targets(command: &str) -> Vec<String> {
    let walk = walk::Walk::run(command, None);
    if walk.unreadable {
        return vec![];
    }
    walk.targets
}
