//! What an interactive `troupe chat` shows while a turn runs: the answer as it streams, one
//! live line per running tool call and subagent (a spinner and the time so far) that becomes a
//! status line when it ends, subagents indented under their parent, and a summary per turn.
//!
//! On a terminal the live lines sit in a region at the bottom that is redrawn in place; piped,
//! each call is one plain line when it ends and nothing moves. Colour only on a terminal and
//! never with `NO_COLOR` set. Everything a model or tool wrote goes through
//! [`visible`](super::super::visible) first, so it cannot move the cursor or clear the screen.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use troupe_actors::call::CallStatus;
use troupe_actors::events::{EventKind, SessionEvent};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use super::super::visible::{visible, visible_line};

/// Spinner frames, one per tick.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// Columns assumed when the terminal does not say.
const DEFAULT_WIDTH: usize = 80;

/// How output may look.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    /// stdout is a terminal: live lines are redrawn in place.
    pub(crate) live: bool,
    /// Colour escapes are allowed.
    pub(crate) color: bool,
}

impl Style {
    /// From stdout and the environment (`NO_COLOR`, `TERM=dumb`).
    pub(crate) fn detect() -> Style {
        let live =
            std::io::stdout().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
        let color = live && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Style { live, color }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub(crate) fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    pub(crate) fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    pub(crate) fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    pub(crate) fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    pub(crate) fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }
}

/// One running call or subagent.
#[derive(Debug)]
struct Live {
    key: String,
    depth: usize,
    label: String,
    started: Instant,
}

/// The model of the root session is working on an answer.
#[derive(Debug, Clone, Copy)]
struct Thinking {
    since: Instant,
    /// Answer tokens received so far (`ModelProgress`).
    tokens: u64,
    /// The count is characters / 4, not streamed chunks.
    estimated: bool,
}

/// Counts for a turn or a whole conversation.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) model_requests: u64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) tool_calls: u64,
    /// Dollars of the requests whose model has a price.
    pub(crate) cost_usd: f64,
}

impl Usage {
    fn add(&mut self, other: Usage) {
        self.model_requests += other.model_requests;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.tool_calls += other.tool_calls;
        self.cost_usd += other.cost_usd;
    }
}

/// The screen of one conversation.
pub(crate) struct Display {
    pub(crate) style: Style,
    live: Vec<Live>,
    /// Lines of the live region now on screen.
    drawn: usize,
    frame: usize,
    /// Depth of every session seen (0 for the conversation's own).
    depths: HashMap<String, usize>,
    /// The root session; its text is the answer.
    root: String,
    /// Streamed text left the cursor mid-line.
    text_open: bool,
    /// Text streamed in the current model round of the root session.
    streamed: String,
    /// While a question is asked, nothing is drawn.
    paused: bool,
    /// The root's model request in flight, drawn as the last live line until text or calls
    /// come.
    thinking: Option<Thinking>,
    /// The call each open approval request is for, so its live line restarts its clock
    /// once answered (the wait is not the call's run time).
    asked: HashMap<String, String>,
    turn: Usage,
    total: Usage,
    turn_started: Instant,
}

impl Display {
    pub(crate) fn new(style: Style, root: &str) -> Display {
        Display {
            style,
            live: Vec::new(),
            drawn: 0,
            frame: 0,
            depths: HashMap::new(),
            root: root.to_string(),
            text_open: false,
            streamed: String::new(),
            paused: false,
            thinking: None,
            asked: HashMap::new(),
            turn: Usage::default(),
            total: Usage::default(),
            turn_started: Instant::now(),
        }
    }

    /// Another session is the root now: a new conversation (`/new`, totals start again) or
    /// the same one on another model or toolsets (totals go on).
    pub(crate) fn reset(&mut self, root: &str, keep_totals: bool) {
        self.root = root.to_string();
        self.depths.clear();
        if !keep_totals {
            self.total = Usage::default();
        }
    }

    /// The conversation's totals so far.
    pub(crate) fn total(&self) -> Usage {
        let mut total = self.total;
        total.add(self.turn);
        total
    }

    /// A turn begins.
    pub(crate) fn start_turn(&mut self) {
        self.turn = Usage::default();
        self.turn_started = Instant::now();
        self.streamed.clear();
        self.text_open = false;
    }

    /// The indent of a session's call lines: two levels per depth, so a subagent's own line
    /// sits between its parent's calls and its own.
    fn depth_of(&self, session_id: &str) -> usize {
        2 * self.depths.get(session_id).copied().unwrap_or(0)
    }

    /// Takes one event into the screen.
    pub(crate) fn event(&mut self, event: &SessionEvent) {
        let depth = self.depth_of(&event.session_id);
        match &event.kind {
            EventKind::SessionStarted { agent_path, .. } => {
                let depth = agent_path.len().saturating_sub(1);
                self.depths.insert(event.session_id.clone(), depth);
            }
            EventKind::ModelRequest { .. } if event.session_id == self.root => {
                self.streamed.clear();
                self.thinking = Some(Thinking {
                    since: Instant::now(),
                    tokens: 0,
                    estimated: false,
                });
                self.redraw();
            }
            EventKind::ModelProgress {
                tokens, estimated, ..
            } if event.session_id == self.root => {
                if let Some(thinking) = &mut self.thinking {
                    thinking.tokens = *tokens;
                    thinking.estimated = *estimated;
                }
            }
            EventKind::TextDelta { text, .. } if event.session_id == self.root => {
                // The answer's own text shows the progress from here.
                if self.thinking.take().is_some() {
                    self.clear_region();
                }
                self.streamed.push_str(text);
                self.write_text(text);
            }
            EventKind::ApprovalRequested {
                request_id,
                call_id,
                ..
            } => {
                self.asked.insert(request_id.clone(), call_id.clone());
            }
            EventKind::ApprovalAnswered { request_id, .. } => {
                if let Some(call_id) = self.asked.remove(request_id)
                    && let Some(live) = self.live.iter_mut().find(|l| l.key == call_id)
                {
                    live.started = Instant::now();
                }
            }
            EventKind::ModelUsage {
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                if event.session_id == self.root {
                    self.thinking = None;
                }
                self.turn.model_requests += 1;
                self.turn.input_tokens += input_tokens;
                self.turn.output_tokens += output_tokens;
                self.turn.cost_usd += cost_usd.unwrap_or(0.0);
            }
            EventKind::ToolCallStarted {
                call_id,
                tool,
                underlying_tool,
                brief,
                ..
            } => {
                self.turn.tool_calls += 1;
                if event.session_id == self.root {
                    self.thinking = None;
                }
                if tool == "delegate_task" {
                    // Its subagents get lines of their own.
                    return;
                }
                self.add_live(call_id, depth, call_label(tool, underlying_tool, brief));
            }
            EventKind::ToolCallFinished {
                call_id,
                status,
                duration_ms,
                approval_wait_ms,
                tool,
                underlying_tool,
                ..
            } => {
                if tool == "delegate_task" {
                    return;
                }
                let label = self
                    .take_live(call_id)
                    .map(|l| l.label)
                    .unwrap_or_else(|| call_label(tool, underlying_tool, ""));
                let line =
                    self.status_line(depth, &label, *status, *duration_ms, *approval_wait_ms);
                self.permanent(&line);
            }
            EventKind::SubagentSpawned {
                subagent_id,
                task_index,
                goal,
                depth: child_depth,
                ..
            } => {
                let label = format!("↳ subagent {}: {}", task_index + 1, visible_line(goal));
                let level = (2 * *child_depth as usize).saturating_sub(1);
                self.add_live(subagent_id, level, label);
            }
            EventKind::SubagentStarted {
                child_session_id, ..
            } => {
                let parent = self.depths.get(&event.session_id).copied().unwrap_or(0);
                self.depths.insert(child_session_id.clone(), parent + 1);
            }
            EventKind::SubagentCompleted {
                subagent_id,
                task_index,
                status,
                duration_seconds,
                ..
            } => {
                let (depth, label) = match self.take_live(subagent_id) {
                    Some(live) => (live.depth, live.label),
                    None => (depth, format!("↳ subagent {}", task_index + 1)),
                };
                let mark = if status == "completed" {
                    self.style.green("✓")
                } else {
                    self.style.red("✗")
                };
                let line = format!(
                    "{}{mark} {} {}",
                    indent(depth),
                    label,
                    self.style
                        .dim(&format!("· {status} {}", seconds(*duration_seconds)))
                );
                self.permanent(&line);
            }
            EventKind::ProcessNotice { summary, .. } => {
                let line = format!(
                    "{}{} {}",
                    indent(depth),
                    self.style.yellow("⚑"),
                    visible_line(summary)
                );
                self.permanent(&line);
            }
            EventKind::TodoUpdated { todos, summary } => {
                let done = summary.completed + summary.cancelled;
                let head = format!(
                    "{}{} {}",
                    indent(depth),
                    self.style.dim("▤"),
                    self.style
                        .dim(&format!("plan · {done}/{} done", summary.total))
                );
                self.permanent(&head);
                // A subagent's plan is one line; the session's own is shown whole.
                if event.session_id == self.root {
                    for item in todos {
                        let line = format!(
                            "{}  {} {}",
                            indent(depth),
                            item.status.mark(),
                            visible_line(&item.content)
                        );
                        let line = match item.status {
                            troupe_tools::todo::TodoStatus::Completed
                            | troupe_tools::todo::TodoStatus::Cancelled => self.style.dim(&line),
                            _ => line,
                        };
                        self.permanent(&line);
                    }
                }
            }
            EventKind::ModelRetry { reason, .. } if event.session_id == self.root => {
                // Text streamed before the server gave up on the answer is not the answer.
                let dropped = !self.streamed.is_empty();
                self.streamed.clear();
                let line = self.style.dim(&format!(
                    "· model asked again ({}){}",
                    visible_line(reason),
                    if dropped {
                        "; the text above was not its answer"
                    } else {
                        ""
                    }
                ));
                self.permanent(&line);
            }
            EventKind::ToolCallsSwitched { reason, .. } if event.session_id == self.root => {
                let line = self.style.dim(&format!(
                    "· tool calls switched to text ({})",
                    visible_line(reason)
                ));
                self.permanent(&line);
            }
            _ => {}
        }
    }

    /// The turn ended: the answer when it did not stream, then the summary line.
    pub(crate) fn finish_turn(&mut self, answer: &str, status: &str) {
        self.clear_region();
        self.live.clear();
        self.thinking = None;
        self.asked.clear();
        let mut out = std::io::stdout().lock();
        let streamed = self.streamed.trim();
        if streamed.is_empty() || streamed != answer.trim() {
            if self.text_open {
                let _ = writeln!(out);
            }
            let _ = writeln!(out, "{}", visible(answer.trim_end()));
        } else if self.text_open {
            let _ = writeln!(out);
        }
        self.text_open = false;
        self.streamed.clear();
        let _ = out.flush();
        drop(out);
        let summary = self.summary(status);
        self.chatter(&summary);
        self.total.add(self.turn);
        self.turn = Usage::default();
    }

    fn summary(&self, status: &str) -> String {
        let turn = self.turn;
        let mut parts = vec![format!(
            "{} model request{}",
            turn.model_requests,
            plural(turn.model_requests)
        )];
        if turn.input_tokens + turn.output_tokens > 0 {
            parts.push(format!(
                "{} in / {} out tokens",
                thousands(turn.input_tokens),
                thousands(turn.output_tokens)
            ));
        }
        if turn.cost_usd > 0.0 {
            parts.push(dollars(turn.cost_usd));
        }
        if turn.tool_calls > 0 {
            parts.push(format!(
                "{} tool call{}",
                turn.tool_calls,
                plural(turn.tool_calls)
            ));
        }
        parts.push(seconds(self.turn_started.elapsed().as_secs_f64()));
        if status != "completed" {
            parts.push(status.to_string());
        }
        self.style.dim(&format!("── {}", parts.join(" · ")))
    }

    /// A line that stays (a finished call, a notice), above the live region.
    pub(crate) fn permanent(&mut self, line: &str) {
        if self.text_open {
            let _ = writeln!(std::io::stdout());
            self.text_open = false;
        }
        self.clear_region();
        self.chatter(line);
        self.draw();
    }

    /// Writes one line where notices go: the terminal, else stderr so stdout holds answers.
    fn chatter(&self, line: &str) {
        if self.style.live {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        } else {
            eprintln!("{line}");
        }
    }

    fn write_text(&mut self, text: &str) {
        self.clear_region();
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{}", visible(text));
        let _ = out.flush();
        self.text_open = !text.ends_with('\n');
        drop(out);
        self.draw();
    }

    fn add_live(&mut self, key: &str, depth: usize, label: String) {
        self.live.push(Live {
            key: key.to_string(),
            depth,
            label,
            started: Instant::now(),
        });
        if self.text_open {
            let _ = writeln!(std::io::stdout());
            self.text_open = false;
        }
        self.redraw();
    }

    fn take_live(&mut self, key: &str) -> Option<Live> {
        let at = self.live.iter().position(|l| l.key == key)?;
        Some(self.live.remove(at))
    }

    fn status_line(
        &self,
        depth: usize,
        label: &str,
        status: CallStatus,
        ms: u64,
        waited_ms: u64,
    ) -> String {
        let ok = matches!(status, CallStatus::Ok);
        let mark = if ok {
            self.style.green("✓")
        } else {
            self.style.red("✗")
        };
        // The call's own time; the wait for the person's answer is said apart.
        let waited = if waited_ms > 0 {
            format!(" · waited {} for you", seconds(waited_ms as f64 / 1000.0))
        } else {
            String::new()
        };
        let tail = format!(
            "· {} {}{waited}",
            status.as_str(),
            seconds(ms as f64 / 1000.0)
        );
        let room = width().saturating_sub(depth * 2 + 3 + tail.width() + 1);
        format!(
            "{}{mark} {} {}",
            indent(depth),
            cut(label, room),
            self.style.dim(&tail)
        )
    }

    /// Stops drawing (a question is on screen) or starts again.
    pub(crate) fn pause(&mut self, paused: bool) {
        if paused {
            self.clear_region();
            if self.text_open {
                let _ = writeln!(std::io::stdout());
                self.text_open = false;
            }
        }
        self.paused = paused;
        if !paused {
            self.draw();
        }
    }

    /// Moves the spinners.
    pub(crate) fn tick(&mut self) {
        self.frame = self.frame.wrapping_add(1);
        self.redraw();
    }

    fn redraw(&mut self) {
        self.clear_region();
        self.draw();
    }

    /// Erases the live region (the cursor ends where it began).
    fn clear_region(&mut self) {
        if !self.style.live || self.drawn == 0 {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[{}F\x1b[J", self.drawn);
        let _ = out.flush();
        self.drawn = 0;
    }

    fn draw(&mut self) {
        if !self.style.live
            || self.paused
            || self.text_open
            || (self.live.is_empty() && self.thinking.is_none())
        {
            return;
        }
        let width = width();
        let spinner = SPINNER[self.frame % SPINNER.len()];
        let mut out = std::io::stdout().lock();
        // No wrapping while the live lines are drawn: one line each, however narrow the
        // terminal, so erasing them moves up exactly as many lines.
        let _ = write!(out, "\x1b[?7l");
        for live in &self.live {
            let elapsed = seconds(live.started.elapsed().as_secs_f64());
            let room = width.saturating_sub(live.depth * 2 + 3 + elapsed.width() + 1);
            let _ = writeln!(
                out,
                "{}{} {} {}",
                indent(live.depth),
                self.style.yellow(&spinner.to_string()),
                cut(&live.label, room),
                self.style.dim(&elapsed)
            );
        }
        if let Some(thinking) = self.thinking {
            let about = if thinking.estimated { "about " } else { "" };
            let tail = format!(
                "{} · {about}{} token{} so far",
                seconds(thinking.since.elapsed().as_secs_f64()),
                thinking.tokens,
                plural(thinking.tokens)
            );
            let _ = writeln!(
                out,
                "{} {} {}",
                self.style.yellow(&spinner.to_string()),
                cut("model thinking", width.saturating_sub(3 + tail.width())),
                self.style.dim(&tail)
            );
        }
        let _ = write!(out, "\x1b[?7h");
        let _ = out.flush();
        self.drawn = self.live.len() + usize::from(self.thinking.is_some());
    }
}

/// `tool → underlying  brief`, made safe to print.
fn call_label(tool: &str, underlying: &str, brief: &str) -> String {
    let name = if tool == underlying || underlying.is_empty() {
        visible_line(tool)
    } else {
        format!("{} → {}", visible_line(tool), visible_line(underlying))
    };
    if brief.is_empty() {
        name
    } else {
        format!("{name}  {}", visible_line(brief))
    }
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

/// The terminal's columns (80 when it does not say, or when piped).
pub(crate) fn width() -> usize {
    terminal_width().unwrap_or(DEFAULT_WIDTH).max(20)
}

/// `words` joined with `, ` into lines of at most `room` characters (a longer word stands alone).
pub(crate) fn wrap(words: &[String], room: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for (i, word) in words.iter().enumerate() {
        let piece = if i + 1 < words.len() {
            format!("{word},")
        } else {
            word.clone()
        };
        let needed = line.width() + usize::from(!line.is_empty()) + piece.width();
        if !line.is_empty() && needed > room {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&piece);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `text` cut to `room` terminal columns (wide characters count two), with `…` when cut.
pub(crate) fn cut(text: &str, room: usize) -> String {
    if text.width() <= room {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > room {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

fn seconds(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.1} s")
    } else {
        format!("{value:.0} s")
    }
}

pub(crate) fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// 12345 → `12,345`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The terminal's columns, from stdout.
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills the winsize we own; a failure leaves it zeroed.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// How long the spinner waits between frames.
pub(crate) const TICK: Duration = Duration::from_millis(120);

/// Dollars as a person reads them: cents, or more places below a cent.
pub(crate) fn dollars(usd: f64) -> String {
    if usd >= 0.01 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_are_cut_to_the_room_left() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }

    #[test]
    fn wide_characters_count_two_columns() {
        assert_eq!(cut("日本語のテキスト", 7), "日本語…");
        assert_eq!(cut("日本", 4), "日本");
    }

    #[test]
    fn names_wrap_to_the_room_given() {
        let words: Vec<String> = ["alpha", "beta", "gamma", "delta"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(wrap(&words, 12), vec!["alpha, beta,", "gamma, delta"]);
        assert_eq!(wrap(&words, 11), vec!["alpha,", "beta,", "gamma,", "delta"]);
        assert_eq!(wrap(&words, 80), vec!["alpha, beta, gamma, delta"]);
        assert!(wrap(&[], 10).is_empty());
    }

    #[test]
    fn a_label_cannot_carry_escape_sequences() {
        let label = call_label("tool_call", "mcp_x\x1b[2J", "rm -rf /\x1b]0;hi\x07");
        assert!(!label.chars().any(|c| c.is_control()), "{label}");
        assert!(label.starts_with("tool_call → mcp_x"), "{label}");
    }
}
