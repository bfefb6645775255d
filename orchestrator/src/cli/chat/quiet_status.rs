//! The status line of `troupe chat -q` on a terminal: what the turn is waiting for, from its
//! events. The model thinking shows the time since the request and the answer tokens received
//! so far (`ModelProgress`); a running tool shows its name and time. The line lives on stderr
//! (see [`StatusLine`]); the caller clears it before printing anything else.

use std::time::Instant;

use troupe_actors::events::{EventKind, SessionEvent};

use super::super::status_line::{SharedStatus, elapsed, mcp_starting};
use super::super::visible::visible_line;

/// What the turn waits for now.
#[derive(Debug)]
enum Phase {
    Idle,
    /// A model request is out.
    Thinking {
        since: Instant,
        tokens: u64,
        estimated: bool,
    },
    /// Tools are running (the last one started named).
    Tool {
        label: String,
        since: Instant,
    },
}

/// The `-q` status line and what it shows.
pub(super) struct QuietStatus {
    line: SharedStatus,
    phase: Phase,
    running: usize,
}

impl QuietStatus {
    pub(super) fn new(line: SharedStatus) -> QuietStatus {
        QuietStatus {
            line,
            phase: Phase::Idle,
            running: 0,
        }
    }

    /// Erases the line before other output.
    pub(super) fn clear(&self) {
        troupe_tools::sync::lock(&self.line).clear();
    }

    /// Takes one event into what is shown.
    pub(super) fn event(&mut self, event: &SessionEvent) {
        match &event.kind {
            EventKind::ModelRequest { .. } => {
                self.phase = Phase::Thinking {
                    since: Instant::now(),
                    tokens: 0,
                    estimated: false,
                };
            }
            EventKind::ModelProgress {
                tokens: now,
                estimated: guessed,
                ..
            } => {
                if let Phase::Thinking {
                    tokens, estimated, ..
                } = &mut self.phase
                {
                    *tokens = *now;
                    *estimated = *guessed;
                }
            }
            EventKind::ModelUsage { .. } => self.phase = Phase::Idle,
            EventKind::ToolCallStarted {
                tool,
                underlying_tool,
                ..
            } => {
                self.running += 1;
                let label = if tool == underlying_tool {
                    visible_line(tool)
                } else {
                    format!("{} → {}", visible_line(tool), visible_line(underlying_tool))
                };
                self.phase = Phase::Tool {
                    label,
                    since: Instant::now(),
                };
            }
            EventKind::ToolCallFinished { .. } => {
                self.running = self.running.saturating_sub(1);
                if self.running == 0 {
                    self.phase = Phase::Idle;
                }
            }
            EventKind::Final { .. } => self.phase = Phase::Idle,
            _ => {}
        }
    }

    /// Redraws (the line itself keeps to ten redraws a second).
    pub(super) fn tick(&self) {
        // Servers still starting after the runtime's grace are named while the turn goes on.
        let starting = mcp_starting();
        let mut line = troupe_tools::sync::lock(&self.line);
        match &self.phase {
            Phase::Idle => match starting {
                Some((text, time)) => line.show(&text, &time),
                None => line.clear(),
            },
            Phase::Thinking {
                since,
                tokens,
                estimated,
            } => {
                let about = if *estimated { "about " } else { "" };
                let mut time = format!(
                    "{} · {about}{tokens} token{} so far",
                    elapsed(since.elapsed()),
                    if *tokens == 1 { "" } else { "s" }
                );
                if let Some((text, took)) = starting {
                    time.push_str(&format!(" · {text} {took}"));
                }
                line.show("model thinking", &time);
            }
            Phase::Tool { label, since } => {
                let more = if self.running > 1 {
                    format!(" (+{} more)", self.running - 1)
                } else {
                    String::new()
                };
                let mut time = elapsed(since.elapsed());
                if let Some((text, took)) = starting {
                    time.push_str(&format!(" · {text} {took}"));
                }
                line.show(&format!("running {label}{more}"), &time);
            }
        }
    }
}
