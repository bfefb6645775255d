//! Pseudo-terminals for `terminal(background=true, pty=true)`: a pty pair whose slave becomes
//! the command's stdin, stdout and stderr (and its controlling terminal), the master's two
//! halves as async streams, answers to the few queries a program asks its terminal, the named
//! keys `process` can type, and the screen's text a model reads (control sequences removed).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A terminal's window size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtySize {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl Default for PtySize {
    /// 30 lines of 120 columns.
    fn default() -> Self {
        PtySize {
            rows: 30,
            cols: 120,
        }
    }
}

/// A fresh pty pair: the master (troupe's side) and the slave (the command's).
pub(crate) struct PtyPair {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
}

/// Opens a pty pair of `size`; the master is non-blocking and neither end leaks into children.
pub(crate) fn open(size: PtySize) -> io::Result<PtyPair> {
    let winsize = nix::pty::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pair = nix::pty::openpty(Some(&winsize), None).map_err(io::Error::from)?;
    for fd in [&pair.master, &pair.slave] {
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: as above.
    let flags = unsafe { libc::fcntl(pair.master.as_raw_fd(), libc::F_GETFL) };
    if flags == -1
        || unsafe {
            libc::fcntl(
                pair.master.as_raw_fd(),
                libc::F_SETFL,
                flags | libc::O_NONBLOCK,
            )
        } == -1
    {
        return Err(io::Error::last_os_error());
    }
    Ok(PtyPair {
        master: pair.master,
        slave: pair.slave,
    })
}

/// Between fork and exec, in a process that just called `setsid`: makes its stdin (the slave)
/// its controlling terminal. Async-signal-safe.
pub(crate) fn take_controlling_terminal() -> io::Result<()> {
    // SAFETY: an ioctl on descriptor 0.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY as _, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Between fork and exec, in the command below a keeper that owns the terminal: a process
/// group of its own that the terminal treats as the foreground, so Ctrl-C reaches the command
/// and never the keeper. Async-signal-safe.
pub(crate) fn become_foreground() -> io::Result<()> {
    // SAFETY: setpgid, sigprocmask and tcsetpgrp are async-signal-safe.
    unsafe {
        // No keeper split off (it could not become a subreaper): this process leads the
        // session and already is the foreground.
        if libc::getsid(0) == libc::getpid() {
            return Ok(());
        }
        if libc::setpgid(0, 0) == -1 {
            return Err(io::Error::last_os_error());
        }
        // A background group that sets the foreground would get SIGTTOU; held back meanwhile.
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        let done = libc::tcsetpgrp(0, libc::getpid());
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if done == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The master side of a pty, shared by its reader and writer.
#[derive(Clone)]
pub(crate) struct PtyMaster {
    fd: Arc<AsyncFd<OwnedFd>>,
}

impl PtyMaster {
    /// Takes `master` (non-blocking) onto the current runtime.
    pub(crate) fn new(master: OwnedFd) -> io::Result<Self> {
        // SAFETY: the AsyncFd owns the descriptor; nothing else closes or replaces it while
        // it is registered.
        let fd = unsafe { AsyncFd::register(master) }.map_err(|e| e.into_parts().1)?;
        Ok(PtyMaster { fd: Arc::new(fd) })
    }

    /// The reading half: what the command prints. Queries the command asks its terminal are
    /// answered here and left out of what is read.
    pub(crate) fn reader(&self) -> PtyReader {
        PtyReader {
            master: self.clone(),
        }
    }

    /// The writing half: keystrokes to the command.
    pub(crate) fn writer(&self) -> PtyWriter {
        PtyWriter {
            master: self.clone(),
        }
    }

    fn raw(&self) -> i32 {
        self.fd.get_ref().as_raw_fd()
    }
}

/// What a program asks its terminal and the answer it waits for: device status, cursor
/// position (always the top-left corner; there is no real screen) and the window size.
fn answers(chunk: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let find = |needle: &[u8]| chunk.windows(needle.len()).filter(|w| *w == needle).count();
    for _ in 0..find(b"\x1b[5n") {
        out.extend_from_slice(b"\x1b[0n");
    }
    for _ in 0..find(b"\x1b[6n") {
        out.extend_from_slice(b"\x1b[1;1R");
    }
    out
}

/// See [`PtyMaster::reader`].
pub(crate) struct PtyReader {
    master: PtyMaster,
}

impl AsyncRead for PtyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.master.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            // SAFETY: reading into memory we own, at most its length.
            let n = unsafe {
                libc::read(
                    self.master.raw(),
                    unfilled.as_mut_ptr().cast(),
                    unfilled.len(),
                )
            };
            if n >= 0 {
                let n = n as usize;
                let reply = answers(&unfilled[..n]);
                if !reply.is_empty() {
                    // Short and rare; a full buffer only loses the answer.
                    // SAFETY: writing bytes we own.
                    unsafe { libc::write(self.master.raw(), reply.as_ptr().cast(), reply.len()) };
                }
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => guard.clear_ready(),
                Some(libc::EINTR) => continue,
                // Every slave descriptor is closed: the command and what it started are gone.
                Some(libc::EIO) => return Poll::Ready(Ok(())),
                _ => return Poll::Ready(Err(err)),
            }
        }
    }
}

/// See [`PtyMaster::writer`].
pub(crate) struct PtyWriter {
    master: PtyMaster,
}

impl AsyncWrite for PtyWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.master.fd.poll_write_ready(cx))?;
            // SAFETY: writing bytes we own.
            let n = unsafe { libc::write(self.master.raw(), data.as_ptr().cast(), data.len()) };
            if n >= 0 {
                return Poll::Ready(Ok(n as usize));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => guard.clear_ready(),
                Some(libc::EINTR) => continue,
                _ => return Poll::Ready(Err(err)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The keys `process(action="write", keys=[...])` can type, by name (case and `-`/`+`/space
/// between words do not matter): Enter, Tab, Escape, Backspace, Delete, Space, the arrows,
/// Home, End, PageUp, PageDown, and Ctrl-A to Ctrl-Z (Ctrl-C interrupts, Ctrl-D ends input).
pub(crate) fn key_bytes(name: &str) -> Option<&'static [u8]> {
    let norm: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '+' | ' ' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    const CTRL: [&[u8]; 26] = [
        b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x06", b"\x07", b"\x08", b"\x09", b"\x0a",
        b"\x0b", b"\x0c", b"\x0d", b"\x0e", b"\x0f", b"\x10", b"\x11", b"\x12", b"\x13", b"\x14",
        b"\x15", b"\x16", b"\x17", b"\x18", b"\x19", b"\x1a",
    ];
    let ctrl = norm
        .strip_prefix("ctrl")
        .or_else(|| norm.strip_prefix("control"))
        .or_else(|| norm.strip_prefix('^'));
    if let Some(letter) = ctrl {
        let mut chars = letter.chars();
        return match (chars.next(), chars.next()) {
            (Some(c @ 'a'..='z'), None) => Some(CTRL[(c as u8 - b'a') as usize]),
            _ => None,
        };
    }
    Some(match norm.as_str() {
        "enter" | "return" => b"\r",
        "tab" => b"\t",
        "escape" | "esc" => b"\x1b",
        "backspace" => b"\x7f",
        "delete" | "del" => b"\x1b[3~",
        "space" => b" ",
        "up" | "arrowup" => b"\x1b[A",
        "down" | "arrowdown" => b"\x1b[B",
        "right" | "arrowright" => b"\x1b[C",
        "left" | "arrowleft" => b"\x1b[D",
        "home" => b"\x1b[H",
        "end" => b"\x1b[F",
        "pageup" | "pgup" => b"\x1b[5~",
        "pagedown" | "pgdn" => b"\x1b[6~",
        _ => return None,
    })
}

/// The names [`key_bytes`] knows, for an error message.
pub(crate) const KEY_NAMES: &str = "Enter, Tab, Escape, Backspace, Delete, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, Ctrl-A … Ctrl-Z (Ctrl-C interrupts, Ctrl-D ends input)";

/// What a terminal shows for `raw`, as plain text: escape sequences removed, a carriage return
/// starts its line over (later characters overwrite earlier ones), a backspace steps back,
/// other control characters are dropped.
pub(crate) fn screen_text(raw: &str) -> String {
    let plain = super::capture::strip_ansi(raw);
    let mut out = String::with_capacity(plain.len());
    let mut line: Vec<char> = Vec::new();
    let mut col = 0usize;
    let mut chars = plain.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                out.extend(line.drain(..));
                out.push('\n');
                col = 0;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\r' => col = 0,
            '\u{8}' => col = col.saturating_sub(1),
            '\t' => {
                let next = (col / 8 + 1) * 8;
                while col < next {
                    put(&mut line, col, ' ');
                    col += 1;
                }
            }
            c if c.is_control() => {}
            c => {
                put(&mut line, col, c);
                col += 1;
            }
        }
    }
    out.extend(line);
    out
}

fn put(line: &mut Vec<char>, col: usize, c: char) {
    while line.len() < col {
        line.push(' ');
    }
    if col < line.len() {
        line[col] = c;
    } else {
        line.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_keys() {
        assert_eq!(key_bytes("Ctrl-C"), Some(&b"\x03"[..]));
        assert_eq!(key_bytes("ctrl+d"), Some(&b"\x04"[..]));
        assert_eq!(key_bytes("ENTER"), Some(&b"\r"[..]));
        assert_eq!(key_bytes("Up"), Some(&b"\x1b[A"[..]));
        assert_eq!(key_bytes("page down"), Some(&b"\x1b[6~"[..]));
        assert_eq!(key_bytes("Ctrl-1"), None);
        assert_eq!(key_bytes("Hyper"), None);
    }

    #[test]
    fn the_screen_shows_what_a_terminal_would() {
        assert_eq!(
            screen_text("\x1b[1mbold\x1b[0m line\r\nnext"),
            "bold line\nnext"
        );
        assert_eq!(screen_text("50%\r75%\r100%\n"), "100%\n");
        assert_eq!(screen_text("abc\u{8}\u{8}X\n"), "aXc\n");
        assert_eq!(screen_text(">>> \x1b[?2004h1+1\r\n2\r\n"), ">>> 1+1\n2\n");
    }

    #[test]
    fn terminal_queries_are_answered() {
        assert_eq!(answers(b"hi\x1b[6n"), b"\x1b[1;1R");
        assert!(answers(b"plain").is_empty());
    }
}
