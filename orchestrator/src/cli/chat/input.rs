//! Where an interactive conversation's input comes from: a line editor at the prompt (history
//! under the troupe home, completion of command and tool names, a trailing `\` to go on to the
//! next line), plain lines when stdin is not a terminal, and lines typed while a turn runs.

use std::borrow::Cow;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Config, Context, Editor, Helper};
use tokio::sync::mpsc;

/// Most lines kept in the history file.
const HISTORY_LINES: usize = 1000;

/// What one read gave.
#[derive(Debug)]
pub(crate) enum Read {
    /// A line (a multi-line entry joined with newlines).
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D, or the end of piped input.
    End,
}

/// The names completion offers; shared so `/toolsets` and plugins can change them.
#[derive(Debug, Default)]
pub(crate) struct Names {
    pub(crate) commands: Vec<String>,
    pub(crate) tools: Vec<String>,
}

/// Completion and multi-line entry for the line editor.
pub(crate) struct ChatHelper {
    names: Arc<std::sync::Mutex<Names>>,
}

impl Completer for ChatHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = line.get(..pos).unwrap_or(line);
        let start = before
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace())
            .map_or(0, |(i, c)| i + c.len_utf8());
        let word = &before[start..];
        let names = troupe_tools::sync::lock(&self.names);
        let pool = if start == 0 && word.starts_with('/') {
            &names.commands
        } else {
            &names.tools
        };
        let candidates = pool
            .iter()
            .filter(|name| !word.is_empty() && name.starts_with(word))
            .map(|name| Pair {
                display: name.clone(),
                replacement: format!("{name} "),
            })
            .collect();
        Ok((start, candidates))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        _default: bool,
    ) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for ChatHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        // A line ending in `\` goes on: Enter adds a newline instead of sending.
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ChatHelper {}

/// The line editor, with its history file.
pub(crate) struct LineEditor {
    editor: Editor<ChatHelper, DefaultHistory>,
    history: Option<PathBuf>,
}

impl LineEditor {
    /// An editor keeping its history in `history` (loaded now when it exists).
    pub(crate) fn open(
        history: Option<PathBuf>,
        names: Arc<std::sync::Mutex<Names>>,
    ) -> Result<LineEditor, String> {
        let config = Config::builder()
            .max_history_size(HISTORY_LINES)
            .map_err(|e| e.to_string())?
            .auto_add_history(false)
            .build();
        let mut editor = Editor::with_config(config)
            .map_err(|e| format!("cannot open the terminal for line editing: {e}"))?;
        editor.set_helper(Some(ChatHelper { names }));
        if let Some(path) = &history
            && path.exists()
            && let Err(error) = editor.load_history(path)
        {
            tracing::warn!(path = %path.display(), %error, "could not read the chat history");
        }
        Ok(LineEditor { editor, history })
    }

    /// Reads one entry at `prompt`; `remember` keeps it in the history.
    pub(crate) fn read(&mut self, prompt: &str, remember: bool) -> Read {
        match self.editor.readline(prompt) {
            Ok(line) => {
                let line = join_continued(&line);
                if remember && !line.trim().is_empty() {
                    let _ = self.editor.add_history_entry(line.as_str());
                    self.save();
                }
                Read::Line(line)
            }
            Err(ReadlineError::Interrupted) => Read::Interrupted,
            Err(ReadlineError::Eof) => Read::End,
            Err(error) => {
                tracing::warn!(%error, "the terminal could not be read");
                Read::End
            }
        }
    }

    fn save(&mut self) {
        let Some(path) = &self.history else { return };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(error) = self.editor.save_history(path) {
            tracing::warn!(path = %path.display(), %error, "could not save the chat history");
        }
    }
}

/// `a\` + newline + `b` → `a` + newline + `b`: the continuation marks go.
fn join_continued(text: &str) -> String {
    text.split('\n')
        .map(|line| line.strip_suffix('\\').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lines of piped input, one message each.
pub(crate) fn read_piped_line() -> Read {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => Read::End,
        Ok(_) => Read::Line(line.trim_end_matches(['\n', '\r']).to_string()),
    }
}

/// Reads lines typed while a turn runs (the terminal is in its normal line mode then), until
/// stopped. It polls so it can let go of stdin before the line editor takes it back. Echo is
/// off meanwhile (typed characters would land among the live lines being redrawn); the
/// conversation shows each line once Enter is pressed.
pub(crate) struct TurnInput {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The terminal's settings before echo was turned off, to put back.
    saved: Option<libc::termios>,
}

impl TurnInput {
    /// Starts reading; lines arrive on the returned channel.
    pub(crate) fn start() -> (TurnInput, mpsc::UnboundedReceiver<String>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let saved = echo_off();
        let thread = std::thread::Builder::new()
            .name("chat-turn-input".into())
            .spawn(move || read_while_running(&flag, &sender))
            .ok();
        (
            TurnInput {
                stop,
                thread,
                saved,
            },
            receiver,
        )
    }

    /// Stops reading and waits until stdin is free.
    pub(crate) async fn finish(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.restore();
    }

    fn restore(&mut self) {
        if let Some(saved) = self.saved.take() {
            // SAFETY: puts back settings read from the same descriptor.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
        }
    }
}

impl Drop for TurnInput {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.restore();
    }
}

/// Turns the terminal's echo off (line mode and Ctrl-C stay); the settings before, to restore.
fn echo_off() -> Option<libc::termios> {
    // SAFETY: tcgetattr fills the termios we own; a failure (not a terminal) leaves it unused.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
        return None;
    }
    let mut quiet = saved;
    quiet.c_lflag &= !libc::ECHO;
    // SAFETY: sets the copy we just read, with echo cleared.
    (unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &quiet) } == 0).then_some(saved)
}

fn read_while_running(stop: &AtomicBool, lines: &mpsc::UnboundedSender<String>) {
    let mut pending = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let mut poll = libc::pollfd {
            fd: libc::STDIN_FILENO,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, for 100 ms.
        let ready = unsafe { libc::poll(&mut poll, 1, 100) };
        if ready <= 0 || poll.revents & libc::POLLIN == 0 {
            if poll.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                return;
            }
            continue;
        }
        let mut buffer = [0u8; 1024];
        // SAFETY: reads into the buffer we own, at most its length.
        let read =
            unsafe { libc::read(libc::STDIN_FILENO, buffer.as_mut_ptr().cast(), buffer.len()) };
        if read <= 0 {
            // Ctrl-D on an empty line while a turn runs: nothing to send.
            continue;
        }
        pending.extend_from_slice(&buffer[..read as usize]);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            if !text.is_empty() && lines.send(text).is_err() {
                return;
            }
        }
    }
}

/// Reads one line from the terminal with echo off (a password): `prompt` is shown, nothing
/// typed is. `None` at end of input or when stdin is not a terminal. The line is read straight
/// from the descriptor, a byte at a time, so nothing of it stays in a buffer.
pub(crate) fn read_masked(prompt: &str) -> Option<String> {
    use std::io::Write;
    let saved = echo_off()?;
    let mut out = std::io::stdout();
    let _ = write!(out, "{prompt}");
    let _ = out.flush();
    let mut line = Vec::new();
    let ended = loop {
        let mut byte = 0u8;
        // SAFETY: reads one byte into a byte we own.
        let n = unsafe { libc::read(libc::STDIN_FILENO, (&raw mut byte).cast(), 1) };
        match n {
            1 if byte == b'\n' || byte == b'\r' => break false,
            1 => line.push(byte),
            0 => break true,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => break true,
        }
    };
    // SAFETY: puts back the settings read from the same descriptor.
    unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
    let _ = writeln!(out);
    let _ = out.flush();
    if ended && line.is_empty() {
        return None;
    }
    String::from_utf8(line).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continued_lines_lose_their_marks() {
        assert_eq!(join_continued("one\\\ntwo"), "one\ntwo");
        assert_eq!(join_continued("single"), "single");
    }
}
