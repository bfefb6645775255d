//! Exit codes explained for people. `terminal` adds the note to its result as
//! `exit_code_meaning`: a signal death is stated as fact for negative codes and hedged for
//! 128+N (a program may exit with 137 on its own); a few commands whose non-zero codes are
//! routine (grep finding nothing, diff finding differences) get a note saying so.

/// Exit code `terminal` reports when its timeout killed the command.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code `terminal` reports when a stop interrupted the command.
pub const EXIT_INTERRUPTED: i32 = 130;

/// What a signal usually means, for the signals worth explaining.
fn signal_note(signum: i32) -> Option<&'static str> {
    Some(match signum {
        3 => "SIGQUIT: asked to quit from the keyboard, usually with a core dump",
        4 => {
            "SIGILL: the CPU met an illegal instruction (a damaged binary or one built for another architecture)"
        }
        6 => {
            "SIGABRT: the program aborted itself, typically a failed assertion or a fatal runtime error"
        }
        7 => {
            "SIGBUS: a bus error, memory that is misaligned or no longer mapped (a truncated mmapped file, say)"
        }
        8 => "SIGFPE: an arithmetic fault such as an integer division by zero",
        9 => {
            "SIGKILL: killed outright; when nobody sent kill -9, the kernel's out-of-memory (OOM) killer is the usual cause"
        }
        11 => {
            "SIGSEGV: a segmentation fault, the program touched memory it does not own and crashed"
        }
        13 => {
            "SIGPIPE: it wrote into a pipe whose reader had already gone (head or grep -q ending early, for example)"
        }
        15 => "SIGTERM: asked to terminate, by a kill, a timeout or a shutdown",
        24 => "SIGXCPU: it used up its CPU-time limit",
        25 => "SIGXFSZ: it tried to grow a file beyond the file-size limit",
        _ => return None,
    })
}

/// The conventional name of a signal number, when it has one.
fn signal_name(signum: i32) -> Option<&'static str> {
    Some(match signum {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        17 => "SIGCHLD",
        18 => "SIGCONT",
        19 => "SIGSTOP",
        20 => "SIGTSTP",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        26 => "SIGVTALRM",
        27 => "SIGPROF",
        _ => return None,
    })
}

/// A note explaining `exit_code` of `command` for a person, or `None` when the code needs no
/// explanation (0, ordinary failures, 124 and 130 which carry their own markers).
///
/// Negative codes mean the process died of signal `-code`; codes above 128 usually mean a shell
/// reported a child killed by signal `code - 128`. A signal note wins over a command's own
/// meaning of the code.
pub fn exit_code_meaning(command: &str, exit_code: i32) -> Option<String> {
    if exit_code < 0 {
        let signum = exit_code.checked_neg()?;
        if signum == 2 {
            // An interrupt carries its own marker in the output.
            return None;
        }
        return Some(match (signal_note(signum), signal_name(signum)) {
            (Some(note), _) => format!("The command was killed by signal {signum}. {note}."),
            (None, Some(name)) => format!("The command was killed by {name} (signal {signum})."),
            (None, None) => format!("The command was killed by signal {signum}."),
        });
    }
    if exit_code > 128 && exit_code != EXIT_INTERRUPTED {
        if let Some(note) = signal_note(exit_code - 128) {
            return Some(format!(
                "Exit code {exit_code} usually means the command died of signal {}. {note}. \
                 (A program can also choose this code itself.)",
                exit_code - 128
            ));
        }
        return None;
    }
    command_note(command, exit_code).map(str::to_string)
}

/// Routine non-zero codes of well-known commands.
fn command_note(command: &str, exit_code: i32) -> Option<&'static str> {
    let base = base_command(command)?;
    match (base.as_str(), exit_code) {
        ("grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack", 1) => {
            Some("Nothing matched; for a search this is a normal outcome, not a failure.")
        }
        ("diff" | "colordiff", 1) => {
            Some("The inputs differ; that is what diff reports with 1, not a failure.")
        }
        ("test" | "[", 1) => Some("The condition was false; this is an answer, not a failure."),
        ("find", 1) => {
            Some("Some directories could not be read; the results printed may still be useful.")
        }
        ("curl", 6) => Some("curl could not resolve the host name."),
        ("curl", 7) => Some("curl could not connect to the host."),
        ("curl", 22) => {
            Some("The server answered with an HTTP error status (404, 500 and the like).")
        }
        ("curl", 28) => Some("curl gave up: the operation timed out."),
        ("git", 1) => Some(
            "git returned 1, which is often routine (git diff returns 1 when there are differences).",
        ),
        _ => None,
    }
}

/// The command that decides the exit code: the first word of the last segment of a chain or
/// pipeline, after `NAME=value` prefixes, without its directory.
pub(crate) fn base_command(command: &str) -> Option<String> {
    let mut last = command;
    for sep in ["||", "&&", "|", ";", "\n"] {
        if let Some(at) = last.rfind(sep) {
            let tail = &last[at + sep.len()..];
            if !tail.trim().is_empty() {
                last = tail;
            }
        }
    }
    let word = last
        .split_whitespace()
        .find(|w| !(w.contains('=') && !w.starts_with('=') && !w.starts_with('-')))?;
    let word = word.trim_matches(|c| c == '(' || c == ')' || c == '{');
    let name = word.rsplit('/').next().unwrap_or(word);
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_codes_name_the_signal_as_fact() {
        for (code, word) in [
            (-9, "SIGKILL"),
            (-11, "SIGSEGV"),
            (-15, "SIGTERM"),
            (-6, "SIGABRT"),
            (-8, "SIGFPE"),
            (-13, "SIGPIPE"),
        ] {
            let note = exit_code_meaning("x", code).unwrap();
            assert!(note.contains(word), "{code}: {note}");
            assert!(note.contains("killed by"), "{code}: {note}");
        }
        assert!(exit_code_meaning("x", -9).unwrap().contains("OOM"));
        assert!(exit_code_meaning("x", -31).unwrap().contains("31"));
        assert!(exit_code_meaning("x", -10).unwrap().contains("SIGUSR1"));
    }

    #[test]
    fn high_codes_are_hedged() {
        for (code, word) in [
            (137, "SIGKILL"),
            (139, "SIGSEGV"),
            (143, "SIGTERM"),
            (134, "SIGABRT"),
            (141, "SIGPIPE"),
        ] {
            let note = exit_code_meaning("x", code).unwrap();
            assert!(
                note.contains(word) && note.contains("usually"),
                "{code}: {note}"
            );
        }
        assert_eq!(exit_code_meaning("x", 168), None);
        assert_eq!(exit_code_meaning("x", 129), None);
    }

    #[test]
    fn ordinary_codes_and_interrupts_get_nothing() {
        for code in [0, 1, 2, 42, 100, 127, 130, -2, 124] {
            assert_eq!(exit_code_meaning("make", code), None, "{code}");
        }
    }

    #[test]
    fn command_semantics_follow_the_last_segment() {
        assert!(
            exit_code_meaning("grep foo bar.txt", 1)
                .unwrap()
                .contains("Nothing matched")
        );
        assert_eq!(exit_code_meaning("grep foo bar.txt", 2), None);
        assert!(exit_code_meaning("cat x | /usr/bin/grep -q y", 1).is_some());
        assert_eq!(exit_code_meaning("grep x f | wc -l", 1), None);
        assert!(
            exit_code_meaning("LC_ALL=C diff a b", 1)
                .unwrap()
                .contains("differ")
        );
        assert!(exit_code_meaning("[ -f x ]", 1).is_some());
        assert!(
            exit_code_meaning("curl -sf http://x", 28)
                .unwrap()
                .contains("timed out")
        );
        assert!(exit_code_meaning("curl http://x", 7).is_some());
        assert!(exit_code_meaning("cd repo && git diff --quiet", 1).is_some());
        assert!(exit_code_meaning("find / -name x", 1).is_some());
        assert_eq!(exit_code_meaning("frobnicate", 1), None);
    }

    #[test]
    fn a_signal_beats_command_semantics() {
        assert!(
            exit_code_meaning("grep foo bar", 137)
                .unwrap()
                .contains("SIGKILL")
        );
    }
}
