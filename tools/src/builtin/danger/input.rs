//! Keystrokes into a background process (`process write`): text written to a shell's stdin runs
//! like a command, so it is checked like one. A line runs when it ends, so each write is
//! checked together with what earlier writes left unfinished: a command split across writes is
//! seen whole.

use std::path::Path;

use super::CommandVerdict;
use super::code::{code_reaches_out, is_interpreter};
use super::shell::{base_name, split_commands};
use super::walk::Walk;

/// The most unfinished text kept per process; past it the write needs approval.
pub(super) const MAX_PENDING_CHARS: usize = 64 * 1024;

const TOO_LONG: &str = "it writes a line longer than the check reads into a process, so what it runs cannot be checked";
const CODE: &str = "it types interpreter code that reaches files, the network or other programs into a process, which cannot be checked here";

/// What writing some text to a process amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeystrokeCheck {
    /// The verdict over every line the write completes.
    pub verdict: CommandVerdict,
    /// What stays unfinished after the write (to keep for the next one).
    pub pending: String,
}

/// Checks `data` written to the stdin of a process running `program`, after `pending` (what
/// earlier writes left without a line end). `closing` is true when stdin is being closed, which
/// runs an unfinished last line too. A line ends at `\n`, `\r` (a terminal's Enter) or `^D`.
pub fn check_keystrokes(
    pending: &str,
    data: &str,
    program: &str,
    cwd: Option<&Path>,
    closing: bool,
) -> KeystrokeCheck {
    let all = format!("{pending}{data}");
    let (complete, rest) = if closing {
        (all.as_str(), "")
    } else {
        match all.rfind(['\n', '\r', '\x04']) {
            Some(at) => (&all[..=at], &all[at + 1..]),
            None => ("", all.as_str()),
        }
    };
    let mut verdict = CommandVerdict::Allowed;
    if rest.chars().count() > MAX_PENDING_CHARS {
        verdict = verdict.and(CommandVerdict::NeedsApproval {
            key: "too_complex",
            reason: TOO_LONG,
        });
    }
    let complete = complete.replace(['\r', '\x04'], "\n");
    if !complete.trim().is_empty() {
        let check = |text: &str| Walk::run(text, cwd).verdict;
        verdict = verdict.and(check(&complete));
        for line in complete.lines().filter(|l| !l.trim().is_empty()) {
            verdict = verdict.and(check(line));
        }
        if runs_interpreter(program) && code_reaches_out(&complete) {
            verdict = verdict.and(CommandVerdict::NeedsApproval {
                key: "inline_code",
                reason: CODE,
            });
        }
    }
    KeystrokeCheck {
        verdict,
        pending: rest.to_string(),
    }
}

/// Whether a process's command runs an interpreter anywhere (`python3`, `sudo node`, ...).
fn runs_interpreter(program: &str) -> bool {
    match split_commands(program) {
        Ok(segments) => segments
            .iter()
            .flat_map(|s| s.words.iter())
            .any(|w| is_interpreter(&base_name(w))),
        Err(()) => true,
    }
}
