//! One line at the bottom of a person's terminal saying what troupe is waiting for: the model
//! thinking (elapsed, tokens received so far), MCP servers starting, tool embeddings being
//! computed (a progress bar), a person's answer to an approval.
//!
//! Drawn on stderr, and only when stderr is a terminal (`TERM` not `dumb`): piped or written to
//! a file, nothing is drawn and no escape code is written. `NO_COLOR` leaves the line without
//! colour. The line is redrawn in place at most ten times a second and erased before any
//! other output, so answers, prompts and event lines never run into it.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use unicode_width::UnicodeWidthStr;

use crate::cli::chat::display::cut;

/// Spinner frames, one per redraw.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// The shortest time between two redraws (at most ten a second).
pub(crate) const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Cells of a progress bar.
const BAR_CELLS: usize = 20;

/// The status line of one command.
#[derive(Debug)]
pub(crate) struct StatusLine {
    /// stderr is a terminal: the line is drawn at all.
    enabled: bool,
    color: bool,
    /// A line is on screen now.
    drawn: bool,
    /// A prompt owns the screen: nothing is drawn until it is answered.
    paused: bool,
    last: Option<Instant>,
    frame: usize,
}

impl StatusLine {
    /// From stderr and the environment (`TERM=dumb`, `NO_COLOR`).
    pub(crate) fn detect() -> StatusLine {
        let enabled = status_terminal();
        StatusLine {
            enabled,
            color: enabled && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            drawn: false,
            paused: false,
            last: None,
            frame: 0,
        }
    }

    /// A line that is never drawn (`--json`, tests).
    pub(crate) fn detect_off() -> StatusLine {
        StatusLine {
            enabled: false,
            color: false,
            drawn: false,
            paused: false,
            last: None,
            frame: 0,
        }
    }

    /// Whether anything can be drawn.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Draws `text` (a spinner before it, `dim` after it in grey), unless the last redraw was
    /// less than [`REDRAW_EVERY`] ago or a prompt is on screen.
    pub(crate) fn show(&mut self, text: &str, dim: &str) {
        if !self.enabled || self.paused {
            return;
        }
        if self.last.is_some_and(|at| at.elapsed() < REDRAW_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        self.frame = self.frame.wrapping_add(1);
        let spinner = SPINNER[self.frame % SPINNER.len()];
        let width = stderr_width();
        let text = cut(text, width.saturating_sub(3 + dim.width()).max(10));
        let dim = if dim.is_empty() {
            String::new()
        } else if self.color {
            format!(" \x1b[2m{dim}\x1b[0m")
        } else {
            format!(" {dim}")
        };
        // One write: the line is replaced whole, with wrapping off so it stays one row.
        let line = format!("\r\x1b[2K\x1b[?7l{spinner} {text}{dim}\x1b[?7h");
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
        self.drawn = true;
    }

    /// Erases the line (before other output); the next `show` draws at once.
    pub(crate) fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(b"\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
        self.last = None;
    }

    /// Erases the line and draws nothing until `resume` (a prompt is on screen).
    pub(crate) fn pause(&mut self) {
        self.clear();
        self.paused = true;
    }

    /// Drawing may go on.
    pub(crate) fn resume(&mut self) {
        self.paused = false;
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A status line shared by the tasks of one command (the event loop draws, the approval
/// prompt pauses it).
pub(crate) type SharedStatus = Arc<Mutex<StatusLine>>;

/// Whether stderr is a terminal a status line may be drawn on.
pub(crate) fn status_terminal() -> bool {
    std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// `embedding tools ███░░ 1234/3309`: a bar of `done` out of `total`.
pub(crate) fn progress_bar(label: &str, done: usize, total: usize) -> String {
    let filled = (done.min(total) * BAR_CELLS)
        .checked_div(total)
        .unwrap_or(0);
    format!(
        "{label} {}{} {done}/{total}",
        "█".repeat(filled),
        "░".repeat(BAR_CELLS - filled)
    )
}

/// `1.5 s`, `12 s`, `2 min 05 s`.
pub(crate) fn elapsed(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else if secs < 60.0 {
        format!("{secs:.0} s")
    } else {
        let whole = duration.as_secs();
        format!("{} min {:02} s", whole / 60, whole % 60)
    }
}

/// `starting MCP servers: github, files` while any is starting in this process.
pub(crate) fn mcp_starting() -> Option<(String, String)> {
    let starting = troupe_tools::mcp::starting::starting_now();
    let longest = starting.first()?.1;
    let names: Vec<String> = starting
        .iter()
        .map(|(name, _)| super::visible::visible_line(name))
        .collect();
    Some((
        format!("starting MCP servers: {}", names.join(", ")),
        elapsed(longest),
    ))
}

/// Shows the MCP servers starting (which ones, for how long) until `work` is done; the line
/// is erased after. For the start of a runtime or a live catalog.
pub(crate) async fn while_starting<T>(work: impl std::future::Future<Output = T>) -> T {
    let mut line = StatusLine::detect();
    if !line.enabled() {
        return work.await;
    }
    tokio::pin!(work);
    let mut ticker = tokio::time::interval(REDRAW_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            done = &mut work => {
                line.clear();
                return done;
            }
            _ = ticker.tick() => match mcp_starting() {
                Some((text, dim)) => line.show(&text, &dim),
                None => line.clear(),
            },
        }
    }
}

/// `waiting for your answer… 4.2 s` on the row above an approval prompt, kept current while
/// the person reads and types. The prompt is read line by line with the cursor on its row; the
/// status row is redrawn with the cursor saved and restored in one write, so typing is never
/// disturbed. When the answer is in, both rows are written once more (the status row says how
/// long the wait was).
pub(crate) struct AnswerClock {
    started: Instant,
    stop: Arc<AtomicBool>,
    drawer: Option<std::thread::JoinHandle<()>>,
    color: bool,
}

/// Prompt rows narrower than this leave room for the answer on the same row.
const ANSWER_ROOM: usize = 4;

impl AnswerClock {
    /// Writes the status row and starts keeping it current; `None` when stderr is not a
    /// terminal or too narrow for `prompt` to stay on one row. The caller then writes its
    /// prompt on the next row (the cursor is at its start).
    pub(crate) fn start(prompt: &str) -> Option<AnswerClock> {
        if !status_terminal() || prompt.width() + ANSWER_ROOM > stderr_width() {
            return None;
        }
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let started = Instant::now();
        {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{}\r\n", waiting_text(0, Duration::ZERO, color));
            let _ = err.flush();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let drawer = std::thread::Builder::new()
            .name("answer-clock".into())
            .spawn(move || {
                let mut frame = 0usize;
                while !flag.load(Ordering::Acquire) {
                    std::thread::sleep(REDRAW_EVERY);
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    frame = frame.wrapping_add(1);
                    let line = waiting_text(frame, started.elapsed(), color);
                    // Save the cursor, go up to the status row, replace it, come back.
                    let redraw = format!("\x1b7\x1b[1A\r\x1b[2K{line}\x1b8");
                    let mut err = std::io::stderr().lock();
                    let _ = err.write_all(redraw.as_bytes());
                    let _ = err.flush();
                }
            })
            .ok();
        Some(AnswerClock {
            started,
            stop,
            drawer,
            color,
        })
    }

    /// The answer is in (the cursor is on the row after the prompt's): stops the redraws,
    /// writes the status row as a record of the wait and the prompt row as it was answered.
    /// Returns how long the person took.
    pub(crate) fn finish(mut self, prompt: &str, answer: &str) -> Duration {
        let waited = self.started.elapsed();
        self.stop_drawing();
        let said = format!("answered after {}", elapsed(waited));
        let said = if self.color {
            format!("\x1b[2m  {said}\x1b[0m")
        } else {
            format!("  {said}")
        };
        let answer = super::visible::visible_line(answer.trim_end_matches(['\r', '\n']));
        let mut rows = format!("\x1b7\x1b[2A\r\x1b[2K{said}");
        // A redraw may have landed on the prompt's row as Enter was pressed: write it again.
        if prompt.width() + answer.width() < stderr_width() {
            rows.push_str(&format!("\x1b[1B\r\x1b[2K{prompt}{answer}"));
        }
        rows.push_str("\x1b8");
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(rows.as_bytes());
        let _ = err.flush();
        waited
    }

    fn stop_drawing(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(drawer) = self.drawer.take() {
            let _ = drawer.join();
        }
    }
}

impl Drop for AnswerClock {
    fn drop(&mut self) {
        self.stop_drawing();
    }
}

fn waiting_text(frame: usize, waited: Duration, color: bool) -> String {
    let spinner = SPINNER[frame % SPINNER.len()];
    let time = elapsed(waited);
    if color {
        format!("\x1b[33m{spinner}\x1b[0m waiting for your answer… \x1b[2m{time}\x1b[0m")
    } else {
        format!("{spinner} waiting for your answer… {time}")
    }
}

/// The columns of the terminal stderr is on (80 when it does not say).
fn stderr_width() -> usize {
    // SAFETY: TIOCGWINSZ fills the winsize we own; a failure leaves it zeroed.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        usize::from(size.ws_col).max(20)
    } else {
        80
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_fills_in_proportion() {
        assert_eq!(
            progress_bar("embedding tools", 0, 10),
            format!("embedding tools {} 0/10", "░".repeat(20))
        );
        assert_eq!(
            progress_bar("embedding tools", 1234, 3309),
            format!(
                "embedding tools {}{} 1234/3309",
                "█".repeat(7),
                "░".repeat(13)
            )
        );
        assert_eq!(progress_bar("x", 5, 5), format!("x {} 5/5", "█".repeat(20)));
        assert_eq!(progress_bar("x", 0, 0), format!("x {} 0/0", "░".repeat(20)));
    }

    #[test]
    fn times_read_as_a_person_says_them() {
        assert_eq!(elapsed(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(elapsed(Duration::from_secs(12)), "12 s");
        assert_eq!(elapsed(Duration::from_secs(125)), "2 min 05 s");
    }

    #[test]
    fn a_line_off_writes_nothing_and_forgets_nothing() {
        let mut line = StatusLine::detect_off();
        line.show("thinking", "1.0 s");
        assert!(!line.drawn);
        line.pause();
        line.resume();
        line.clear();
        assert!(!line.drawn);
    }
}
