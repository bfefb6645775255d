//! Calls a model makes again with nothing changed. A small model that already has what it needs
//! sometimes asks for it again, round after round (read a, read b, read a, read b, …; or the
//! same write three times), until the turn runs out of rounds and ends without an answer. The
//! guard answers such a batch without running it:
//! - every call is a read (a bridge lookup, or a tool whose hints say it only reads:
//!   [`is_pure_read`])
//!   identical to one already made in this turn, with nothing but reads run since; or
//! - the batch is identical to the one just before it, and every call of that one succeeded
//!   (a failed call may be retried as is: a server may answer the second time).
//!
//! Each call of such a batch gets [`REPEAT_NOTE`] as its result. The second time this happens in
//! a turn, the turn asks the model for its answer with no tools offered.

use std::collections::HashSet;

use serde_json::Value;

use troupe_tools::ToolHints;

/// What each call of a repeated batch gets instead of a result.
pub const REPEAT_NOTE: &str = "Not run again: this exact call already ran in this turn and nothing has changed since, so its result above still holds. Use that result: answer now, or make a different call.";

/// The turn's answer is asked for, with no tools, once this many batches were repeats.
pub const WRAP_UP_AFTER: u32 = 2;

/// One call as the guard sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallKey {
    /// The tool named and its arguments, normalised (`name`, NUL, canonical JSON).
    key: String,
    /// Whether the call only reads.
    read: bool,
}

impl CallKey {
    /// The key of a call to `name` with the model's raw `arguments`; `read` says whether the
    /// tool that runs only reads (see [`is_pure_read`]).
    pub fn new(name: &str, arguments: &str, read: bool) -> Self {
        // Parsed and written again, so neither spacing nor key order makes two calls differ; arguments that
        // are not JSON are kept as written.
        let args = serde_json::from_str::<Value>(arguments).map_or_else(
            |_| arguments.trim().to_string(),
            |mut v| {
                v.sort_all_objects();
                v.to_string()
            },
        );
        CallKey {
            key: format!("{name}\0{args}"),
            read,
        }
    }
}

/// Whether a call only reads: a bridge lookup (`tool_search`, `tool_describe`, answered from
/// the catalog), or a tool whose declared hints say `read_only` (a built-in's, an MCP
/// annotation). A name alone proves nothing: a server may call its tool `read_file`.
pub fn is_pure_read(bridge_lookup: bool, hints: Option<&ToolHints>) -> bool {
    bridge_lookup || hints.is_some_and(|h| h.read_only)
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Run,
    /// Do not run it: answer each call with [`REPEAT_NOTE`].
    Repeat {
        /// Whether the turn's answer is asked for next, with no tools.
        wrap_up: bool,
    },
}

/// One turn's memory of its calls. A new turn starts a new guard.
#[derive(Debug, Default)]
pub struct RepeatGuard {
    /// Reads made since the last call that was not a read.
    reads: HashSet<String>,
    /// The last batch that ran.
    last: Vec<String>,
    /// Whether every call of the last batch succeeded.
    last_ok: bool,
    /// Batches answered with the note so far.
    strikes: u32,
}

impl RepeatGuard {
    /// Decides about the batch `calls`, about to run.
    pub fn check(&mut self, calls: &[CallKey]) -> Decision {
        if calls.is_empty() {
            return Decision::Run;
        }
        let reads_again = calls.iter().all(|c| c.read && self.reads.contains(&c.key));
        let same_as_last = self.last_ok
            && self.last.len() == calls.len()
            && self.last.iter().eq(calls.iter().map(|c| &c.key));
        if !(reads_again || same_as_last) {
            return Decision::Run;
        }
        self.strikes += 1;
        Decision::Repeat {
            wrap_up: self.strikes >= WRAP_UP_AFTER,
        }
    }

    /// Records a batch that ran, with whether each call succeeded.
    pub fn ran(&mut self, calls: &[CallKey], ok: &[bool]) {
        if calls.iter().any(|c| !c.read) {
            // Something may have changed what a read would find.
            self.reads.clear();
        }
        self.reads
            .extend(calls.iter().filter(|c| c.read).map(|c| c.key.clone()));
        self.last = calls.iter().map(|c| c.key.clone()).collect();
        self.last_ok = ok.len() == calls.len() && ok.iter().all(|&ok| ok);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &str) -> CallKey {
        CallKey::new("read_file", &format!(r#"{{"path": "{path}"}}"#), true)
    }

    fn write(path: &str) -> CallKey {
        CallKey::new(
            "write_file",
            &format!(r#"{{"path": "{path}", "content": "x"}}"#),
            false,
        )
    }

    #[test]
    fn alternating_reads_are_answered_from_the_first_results() {
        let mut guard = RepeatGuard::default();
        for batch in [[read("a")], [read("b")]] {
            assert_eq!(guard.check(&batch), Decision::Run);
            guard.ran(&batch, &[true]);
        }
        assert_eq!(
            guard.check(&[read("a")]),
            Decision::Repeat { wrap_up: false }
        );
        assert_eq!(
            guard.check(&[read("b")]),
            Decision::Repeat { wrap_up: true }
        );
    }

    #[test]
    fn spacing_and_key_order_do_not_hide_a_repeat() {
        let a = CallKey::new("read_file", r#"{"path":"a","limit":5}"#, true);
        let b = CallKey::new("read_file", r#"{ "limit": 5, "path": "a" }"#, true);
        assert_eq!(a, b);
    }

    #[test]
    fn a_write_between_two_reads_makes_the_second_one_run() {
        let mut guard = RepeatGuard::default();
        guard.ran(&[read("a")], &[true]);
        guard.ran(&[write("a")], &[true]);
        assert_eq!(guard.check(&[read("a")]), Decision::Run);
    }

    #[test]
    fn a_batch_with_one_new_call_runs() {
        let mut guard = RepeatGuard::default();
        guard.ran(&[read("a")], &[true]);
        assert_eq!(guard.check(&[read("a"), read("b")]), Decision::Run);
    }

    #[test]
    fn the_same_write_right_after_a_successful_one_is_a_repeat() {
        let mut guard = RepeatGuard::default();
        guard.ran(&[write("a")], &[true]);
        assert_eq!(
            guard.check(&[write("a")]),
            Decision::Repeat { wrap_up: false }
        );
        // A different write is new work.
        assert_eq!(guard.check(&[write("b")]), Decision::Run);
    }

    #[test]
    fn a_failed_call_may_be_retried_as_is() {
        let mut guard = RepeatGuard::default();
        guard.ran(&[write("a")], &[false]);
        assert_eq!(guard.check(&[write("a")]), Decision::Run);
    }

    #[test]
    fn a_write_repeated_later_runs_again() {
        let mut guard = RepeatGuard::default();
        guard.ran(&[write("a")], &[true]);
        guard.ran(&[write("b")], &[true]);
        assert_eq!(guard.check(&[write("a")]), Decision::Run);
    }

    #[test]
    fn only_lookups_and_tools_declared_read_only_count_as_reads() {
        let read_only = ToolHints {
            read_only: true,
            ..ToolHints::default()
        };
        assert!(is_pure_read(true, None));
        assert!(is_pure_read(false, Some(&read_only)));
        // A tool that declares nothing is no reader, whatever it is called.
        assert!(!is_pure_read(false, Some(&ToolHints::default())));
        assert!(!is_pure_read(false, None));
    }
}
