//! What the registry tells a session about its background processes without being asked: one
//! notice when a process started with `notify_on_complete` ends, a notice per matched
//! `watch_patterns` line (rate-limited per process and across all of them), and the notice that
//! watching was turned off. Notices go to the listener of the process's owning session; a
//! session without one (closed) passes them to its parent, else they wait for it to listen.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::super::capture::last_chars;
use super::super::redact::redact;

/// One delivered watch notice per process per this window at most.
pub const WATCH_MIN_INTERVAL: Duration = Duration::from_secs(15);
/// This many windows in a row with dropped matches turn watching off.
pub const WATCH_STRIKE_LIMIT: u32 = 3;
/// Delivered watch notices per process before watching is turned off.
pub const WATCH_LIFETIME_MAX_HITS: u32 = 8;
/// Across all processes: more than this many watch notices within `WATCH_GLOBAL_WINDOW` ...
pub const WATCH_GLOBAL_MAX_PER_WINDOW: usize = 15;
/// ... (this long) ...
pub const WATCH_GLOBAL_WINDOW: Duration = Duration::from_secs(10);
/// ... hold all watch notices back this long.
pub const WATCH_GLOBAL_COOLDOWN: Duration = Duration::from_secs(30);
/// Matched lines and characters one watch notice carries.
const WATCH_MAX_LINES: usize = 20;
const WATCH_MAX_CHARS: usize = 2000;
/// Output a completion notice carries (the end of it).
pub const COMPLETION_OUTPUT_CHARS: usize = 2000;
/// Output a notice passed up to a parent session carries.
const PARENT_OUTPUT_CHARS: usize = 600;
/// Notices kept for a session that is not listening.
const UNDELIVERED_MAX: usize = 32;

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// A process ended.
    Completed,
    /// A watched pattern was printed.
    WatchMatch,
    /// Watching was turned off (too many matches); a completion notice follows at the end.
    WatchDisabled,
}

impl NoticeKind {
    /// `completed`, `watch_match` or `watch_disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Completed => "completed",
            NoticeKind::WatchMatch => "watch_match",
            NoticeKind::WatchDisabled => "watch_disabled",
        }
    }
}

/// A notice for a session's conversation.
#[derive(Debug, Clone)]
pub struct ProcessNotice {
    /// The session it is for.
    pub session: String,
    /// The process (`proc_...`).
    pub process_id: String,
    /// What happened.
    pub kind: NoticeKind,
    /// The exit code, for a completion.
    pub exit_code: Option<i32>,
    /// The text the model reads (redacted).
    pub text: String,
    /// One line for a person's screen.
    pub summary: String,
    /// The process's output in the text (trimmed further when passed to a parent).
    output: String,
}

/// Where notices go: each session's listener, the parent of each session, what waits.
#[derive(Default)]
pub(super) struct Mailboxes {
    listeners: HashMap<String, mpsc::UnboundedSender<ProcessNotice>>,
    parents: HashMap<String, String>,
    waiting: HashMap<String, Vec<ProcessNotice>>,
    /// Watch notices delivered lately, across all processes.
    recent: VecDeque<Instant>,
    /// Until when watch notices are held back, and how many were.
    cooldown: Option<(Instant, usize)>,
}

impl Mailboxes {
    /// `session` listens from now on; what waited for it is delivered at once.
    pub(super) fn listen(
        &mut self,
        session: &str,
        parent: Option<&str>,
        tx: mpsc::UnboundedSender<ProcessNotice>,
    ) {
        // Closed sessions' senders go; their parent links stay, for notices that come later.
        self.listeners.retain(|_, tx| !tx.is_closed());
        if let Some(parent) = parent.filter(|p| *p != session) {
            self.parents.insert(session.to_string(), parent.to_string());
        }
        for notice in self.waiting.remove(session).unwrap_or_default() {
            let _ = tx.send(notice);
        }
        self.listeners.insert(session.to_string(), tx);
    }

    /// Whether a notice for `session` would reach a conversation now.
    pub(super) fn reachable(&self, session: &str) -> bool {
        self.listeners
            .get(session)
            .is_some_and(|tx| !tx.is_closed())
    }

    /// The parent `session` was registered with.
    pub(super) fn parent(&self, session: &str) -> Option<&str> {
        self.parents.get(session).map(String::as_str)
    }

    /// Sends `notice` to its session, or up to the nearest listening ancestor (with less
    /// output), or keeps it for when the session listens.
    pub(super) fn deliver(&mut self, mut notice: ProcessNotice) {
        for _ in 0..16 {
            if let Some(tx) = self.listeners.get(&notice.session) {
                match tx.send(notice) {
                    Ok(()) => return,
                    Err(mpsc::error::SendError(back)) => {
                        self.listeners.remove(&back.session);
                        notice = back;
                    }
                }
            }
            match self.parents.get(&notice.session) {
                Some(parent) => notice = notice.passed_up(parent.clone()),
                None => break,
            }
        }
        let waiting = self.waiting.entry(notice.session.clone()).or_default();
        if waiting.len() >= UNDELIVERED_MAX {
            waiting.remove(0);
        }
        waiting.push(notice);
    }

    /// Counts a watch notice against the breaker shared by all processes; `Err` holds it
    /// back (with the notice that the breaker tripped, the first time), `Ok` may carry the
    /// count held back during the last cooldown.
    pub(super) fn admit_watch(&mut self, now: Instant) -> Result<usize, Option<String>> {
        if let Some((until, held)) = self.cooldown.as_mut() {
            if now < *until {
                *held += 1;
                return Err(None);
            }
            let held = *held;
            self.cooldown = None;
            self.recent.clear();
            self.recent.push_back(now);
            return Ok(held);
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > WATCH_GLOBAL_WINDOW)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= WATCH_GLOBAL_MAX_PER_WINDOW {
            self.cooldown = Some((now + WATCH_GLOBAL_COOLDOWN, 1));
            return Err(Some(format!(
                "[troupe: more than {WATCH_GLOBAL_MAX_PER_WINDOW} watch-pattern notices came in {}s across all background processes, so they are held back for the next {}s.]",
                WATCH_GLOBAL_WINDOW.as_secs(),
                WATCH_GLOBAL_COOLDOWN.as_secs()
            )));
        }
        self.recent.push_back(now);
        Ok(0)
    }
}

impl ProcessNotice {
    /// The same notice for `parent`, with less output (a subagent's process, its session gone).
    fn passed_up(self, parent: String) -> ProcessNotice {
        let short = last_chars(&self.output, PARENT_OUTPUT_CHARS).to_string();
        let text = if short.len() < self.output.len() && !self.output.is_empty() {
            self.text.replace(&self.output, &short)
        } else {
            self.text
        };
        ProcessNotice {
            session: parent,
            text: text.replacen(
                "[troupe: ",
                "[troupe: (from a subagent whose session has ended) ",
                1,
            ),
            output: short,
            ..self
        }
    }
}

/// What a finished process's notice needs.
pub(super) struct Completion<'a> {
    pub(super) session: &'a str,
    pub(super) id: &'a str,
    pub(super) command: &'a str,
    pub(super) code: i32,
    pub(super) reason: &'a str,
    pub(super) source: Option<&'a str>,
    /// The process's output as the model reads it (screen text for a pty).
    pub(super) output: &'a str,
}

/// The notice for a finished process.
pub(super) fn completion(c: Completion<'_>) -> ProcessNotice {
    let how = match (c.reason, c.code) {
        ("killed", _) => format!("was stopped ({})", c.source.unwrap_or("by troupe")),
        (_, 0) => "finished successfully".to_string(),
        (_, code) if code < 0 => format!("was ended by signal {}", -code),
        _ => "finished with an error".to_string(),
    };
    let total = c.output.chars().count();
    let tail = redact(last_chars(c.output, COMPLETION_OUTPUT_CHARS));
    let cut = if total > COMPLETION_OUTPUT_CHARS {
        format!(
            "(the first {} characters are left out; process(action=\"log\", session_id=\"{}\") has them)\n",
            total - COMPLETION_OUTPUT_CHARS,
            c.id
        )
    } else {
        String::new()
    };
    let command = redact(c.command);
    ProcessNotice {
        session: c.session.to_string(),
        process_id: c.id.to_string(),
        kind: NoticeKind::Completed,
        exit_code: Some(c.code),
        text: format!(
            "[troupe: background process {} {how}, exit code {}.\nCommand: {command}\nOutput:\n{cut}{tail}]",
            c.id, c.code
        ),
        summary: format!(
            "background process {} {how} (exit code {}): {}",
            c.id,
            c.code,
            first_line(&command)
        ),
        output: tail,
    }
}

/// A process's watch state.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    pub(super) patterns: Vec<String>,
    /// When the last notice went out.
    last_sent: Option<Instant>,
    /// Matches held back since it.
    held: usize,
    /// Whether the current window dropped a match.
    window_dropped: bool,
    /// Windows in a row that dropped matches.
    strikes: u32,
    /// Notices delivered.
    pub(super) hits: u32,
    /// The text of an unfinished line, carried to the next chunk.
    partial: String,
}

/// What a chunk of output did to a watch.
pub(super) enum WatchOutcome {
    /// Nothing to say.
    Quiet,
    /// A notice for these matched lines (with the count held back before it).
    Notice(String, usize),
    /// Watching is over, for this reason.
    Disable(String),
}

impl Watch {
    pub(super) fn new(patterns: Vec<String>) -> Self {
        Watch {
            patterns,
            last_sent: None,
            held: 0,
            window_dropped: false,
            strikes: 0,
            hits: 0,
            partial: String::new(),
        }
    }

    /// Reads `text` (plain text, no escapes) line by line; the first pattern matched names
    /// the notice.
    pub(super) fn feed(&mut self, text: &str, now: Instant) -> (WatchOutcome, Option<String>) {
        self.partial.push_str(text);
        let mut matched: Vec<String> = vec![];
        let mut pattern = None;
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(p) = self.patterns.iter().find(|p| line.contains(p.as_str())) {
                pattern.get_or_insert_with(|| p.clone());
                matched.push(line.to_string());
            }
        }
        // A very long line without an end is read as it is, not kept growing.
        if self.partial.len() > 8192 {
            self.partial.clear();
        }
        if matched.is_empty() {
            return (WatchOutcome::Quiet, None);
        }
        let in_window = self
            .last_sent
            .is_some_and(|t| now.duration_since(t) < WATCH_MIN_INTERVAL);
        if in_window {
            self.held += matched.len();
            if !self.window_dropped {
                self.window_dropped = true;
                self.strikes += 1;
                if self.strikes >= WATCH_STRIKE_LIMIT {
                    return (
                        WatchOutcome::Disable(format!(
                            "its patterns matched faster than one notice per {}s in {WATCH_STRIKE_LIMIT} windows in a row. ",
                            WATCH_MIN_INTERVAL.as_secs()
                        )),
                        pattern,
                    );
                }
            }
            return (WatchOutcome::Quiet, pattern);
        }
        if !self.window_dropped {
            self.strikes = 0;
        }
        self.window_dropped = false;
        self.last_sent = Some(now);
        self.hits += 1;
        let held = std::mem::take(&mut self.held);
        let mut shown = String::new();
        for line in matched.iter().take(WATCH_MAX_LINES) {
            shown.push_str(line);
            shown.push('\n');
        }
        let mut shown = last_chars(&shown, WATCH_MAX_CHARS).trim_end().to_string();
        if matched.len() > WATCH_MAX_LINES || shown.len() < matched.iter().map(String::len).sum() {
            shown.push_str("\n...(more matched lines left out)");
        }
        (WatchOutcome::Notice(shown, held), pattern)
    }
}

/// The notice for matched lines.
pub(super) fn watch_match(
    session: &str,
    id: &str,
    command: &str,
    pattern: &str,
    lines: &str,
    held: usize,
) -> ProcessNotice {
    let held_note = if held > 0 {
        format!("\n({held} earlier matches were held back by the rate limit)")
    } else {
        String::new()
    };
    let lines = redact(lines);
    let command = redact(command);
    ProcessNotice {
        session: session.to_string(),
        process_id: id.to_string(),
        kind: NoticeKind::WatchMatch,
        exit_code: None,
        text: format!(
            "[troupe: background process {id} printed a line matching the watch pattern \"{pattern}\".\nCommand: {command}\nMatched output:\n{lines}{held_note}]"
        ),
        summary: format!("background process {id} matched \"{pattern}\""),
        output: lines,
    }
}

/// The notice that watching ended and a completion notice will come instead.
pub(super) fn watch_disabled(session: &str, id: &str, why: &str) -> ProcessNotice {
    ProcessNotice {
        session: session.to_string(),
        process_id: id.to_string(),
        kind: NoticeKind::WatchDisabled,
        exit_code: None,
        text: format!(
            "[troupe: watch patterns are now off for background process {id}: {why}You will get one notice when it ends instead.]"
        ),
        summary: format!("watching background process {id} stopped; it will notify on exit"),
        output: String::new(),
    }
}

/// A notice of the registry itself (the shared breaker).
pub(super) fn registry_note(session: &str, id: &str, text: String) -> ProcessNotice {
    ProcessNotice {
        session: session.to_string(),
        process_id: id.to_string(),
        kind: NoticeKind::WatchDisabled,
        exit_code: None,
        summary: "watch-pattern notices are held back for a while".into(),
        text,
        output: String::new(),
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(80).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_notices_once_per_window_and_gives_up_on_floods() {
        let mut w = Watch::new(vec!["READY".into()]);
        let t0 = Instant::now();
        let (first, p) = w.feed("booting\nREADY on 8080\n", t0);
        assert!(matches!(first, WatchOutcome::Notice(ref l, 0) if l == "READY on 8080"));
        assert_eq!(p.as_deref(), Some("READY"));
        // A line split across chunks is matched once whole.
        let (held, _) = w.feed("REA", t0 + Duration::from_secs(1));
        assert!(matches!(held, WatchOutcome::Quiet));
        let (held, _) = w.feed("DY again\n", t0 + Duration::from_secs(1));
        assert!(matches!(held, WatchOutcome::Quiet));
        let (next, _) = w.feed("READY 3\n", t0 + Duration::from_secs(16));
        assert!(matches!(next, WatchOutcome::Notice(_, 1)));
        // Second window in a row with a dropped match.
        let (held, _) = w.feed("READY\n", t0 + Duration::from_secs(17));
        assert!(matches!(held, WatchOutcome::Quiet));
        let (next, _) = w.feed("READY\n", t0 + Duration::from_secs(32));
        assert!(matches!(next, WatchOutcome::Notice(_, 1)));
        // The third turns watching off.
        let (off, _) = w.feed("READY\n", t0 + Duration::from_secs(33));
        assert!(matches!(off, WatchOutcome::Disable(_)));
        // A quiet window in between starts the count again.
        let mut w = Watch::new(vec!["x".into()]);
        for (i, at) in [0u64, 1, 20, 40, 41, 60, 80, 81].iter().enumerate() {
            let (o, _) = w.feed("x\n", t0 + Duration::from_secs(*at));
            assert!(!matches!(o, WatchOutcome::Disable(_)), "step {i}");
        }
    }

    #[test]
    fn the_shared_breaker_holds_floods_back() {
        let mut m = Mailboxes::default();
        let t0 = Instant::now();
        for _ in 0..WATCH_GLOBAL_MAX_PER_WINDOW {
            assert_eq!(m.admit_watch(t0), Ok(0));
        }
        assert!(matches!(m.admit_watch(t0), Err(Some(_))));
        assert_eq!(m.admit_watch(t0 + Duration::from_secs(5)), Err(None));
        assert_eq!(m.admit_watch(t0 + Duration::from_secs(31)), Ok(2));
    }

    #[test]
    fn notices_go_up_to_a_listening_parent() {
        let mut m = Mailboxes::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        m.listen("parent", None, tx);
        let (child_tx, child_rx) = mpsc::unbounded_channel();
        m.listen("child", Some("parent"), child_tx);
        drop(child_rx);
        let output = "x".repeat(1500);
        m.deliver(completion(Completion {
            session: "child",
            id: "proc_1",
            command: "make",
            code: 0,
            reason: "exited",
            source: None,
            output: &output,
        }));
        let got = rx.try_recv().expect("the parent hears of it");
        assert_eq!(got.session, "parent");
        assert!(got.text.contains("from a subagent"));
        assert!(got.text.len() < 1000, "{}", got.text.len());
        // Nobody listening: it waits.
        m.deliver(completion(Completion {
            session: "other",
            id: "proc_2",
            command: "true",
            code: 0,
            reason: "exited",
            source: None,
            output: "",
        }));
        let (tx, mut rx) = mpsc::unbounded_channel();
        m.listen("other", None, tx);
        assert_eq!(
            rx.try_recv().map(|n| n.process_id).ok().as_deref(),
            Some("proc_2")
        );
    }
}
