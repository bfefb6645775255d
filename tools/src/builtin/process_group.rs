//! Process groups: every command troupe starts leads a group of its own (a new session via
//! `setsid`), so the command and everything it forked can be signalled at once. [`terminate`]
//! asks the group to stop (SIGTERM), waits a grace period, then kills what is left (SIGKILL);
//! [`KillOnDrop`] does the same without waiting when the code that owned the group goes away.
//! Used by `terminal`, the process registry and `execute_code`.

use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A running group of processes that can be signalled.
pub trait ProcessGroup: Send + Sync + 'static {
    /// Sends `signal` to every member; false when the group no longer exists.
    fn signal(&self, signal: Signal) -> bool;
    /// Whether any member is still running (finished but unreaped members do not count).
    fn alive(&self) -> bool;
}

/// A process group on this machine, identified by its leader's pid.
#[derive(Debug, Clone, Copy)]
pub struct LocalGroup {
    /// The group id (the leader's pid).
    pub pgid: i32,
}

impl ProcessGroup for LocalGroup {
    fn signal(&self, signal: Signal) -> bool {
        self.pgid > 1 && killpg(Pid::from_raw(self.pgid), signal).is_ok()
    }

    fn alive(&self) -> bool {
        if self.pgid <= 1 {
            return false;
        }
        match killpg(Pid::from_raw(self.pgid), None) {
            Err(Errno::ESRCH) => false,
            Err(_) => true,
            // The group exists, but its members may all be zombies waiting for a parent that
            // does not reap them (PID 1 in some containers): those run nothing.
            Ok(()) => group_has_running_member(self.pgid),
        }
    }
}

/// Whether a live (not zombie) process belongs to group `pgid`.
#[cfg(target_os = "linux")]
fn group_has_running_member(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some((state, pgrp)) = proc_state(pid)
            && pgrp == pgid
            && state != 'Z'
            && state != 'X'
        {
            return true;
        }
    }
    false
}

#[cfg(not(target_os = "linux"))]
fn group_has_running_member(_pgid: i32) -> bool {
    true
}

/// A process's state letter and process group, from `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
pub(crate) fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces; fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether process `pid` is running: it exists (`kill -0`) and is not a zombie.
pub fn pid_running(pid: i32) -> bool {
    if pid <= 1 || nix::sys::signal::kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        !matches!(proc_state(pid), Some(('Z', _)) | Some(('X', _)) | None)
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// Stops a group: SIGTERM, up to `grace` for it to go, then SIGKILL. Returns when no member
/// runs any more (or shortly after the SIGKILL, which cannot be refused).
pub async fn terminate(group: &dyn ProcessGroup, grace: Duration) {
    if !group.signal(Signal::SIGTERM) {
        return;
    }
    // A stopped process cannot act on SIGTERM until it is continued.
    group.signal(Signal::SIGCONT);
    let deadline = tokio::time::Instant::now() + grace;
    let mut pause = Duration::from_millis(2);
    while tokio::time::Instant::now() < deadline {
        if !group.alive() {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    group.signal(Signal::SIGKILL);
    for _ in 0..100 {
        if !group.alive() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::warn!("a process group survived SIGKILL for a second; it may be stuck in the kernel");
}

/// Kills a group (SIGKILL, no grace) when dropped while still armed: the owning future was
/// dropped mid-run, and nothing else would ever stop the group.
pub(crate) struct KillOnDrop {
    group: Option<Arc<dyn ProcessGroup>>,
}

impl KillOnDrop {
    /// Guards `group`.
    pub(crate) fn new(group: Arc<dyn ProcessGroup>) -> Self {
        KillOnDrop { group: Some(group) }
    }

    /// The group is taken care of; dropping the guard does nothing.
    pub(crate) fn disarm(&mut self) {
        self.group = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(group) = self.group.take()
            && group.signal(Signal::SIGKILL)
        {
            tracing::debug!("killed a process group whose owner went away");
        }
    }
}

/// The exit code of a finished process: its own code, or minus the signal that killed it.
pub(crate) fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => -sig,
        (None, None) => -1,
    }
}
