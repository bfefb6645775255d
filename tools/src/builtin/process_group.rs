//! Process groups: every command troupe starts leads a group of its own (a new session via
//! `setsid`), so the command and everything it forked can be signalled at once. [`terminate`]
//! asks the group to stop (SIGTERM), waits a grace period, then kills what is left (SIGKILL);
//! `KillOnDrop` does the same without waiting when the code that owned the group goes away.
//! Used by `terminal`, the process registry and `execute_code`.
//!
//! A process can leave its group (`setsid`, a double fork), so on Linux every command gets a
//! keeper (`spawn_kept`): the group leader forks the command and stays behind as a child
//! subreaper, so whatever the command leaves behind, in any group or session, is re-parented
//! to the keeper instead of to init. The keeper reports the command's exit status as soon as
//! the command ends, stays while leftovers run, passes a stop signal on to all of them, kills
//! them all if troupe goes away, and exits with the command's status once none is left. A
//! SIGKILL of the group kills the keeper's whole tree first ([`LocalGroup`]).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::io::AsyncReadExt;

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
        if self.pgid <= 1 {
            return false;
        }
        if signal == Signal::SIGKILL {
            // What left the group lives on under the keeper (the group leader): kill that tree
            // first, while the keeper still holds it.
            kill_descendants(self.pgid);
        }
        killpg(Pid::from_raw(self.pgid), signal).is_ok()
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

/// Every process below `root`, from the `children` lists of `/proc/<pid>/task/<tid>`.
#[cfg(target_os = "linux")]
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let mut found: Vec<i32> = vec![];
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in text
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if child > 1 && child != root && !found.contains(&child) {
                    found.push(child);
                    stack.push(child);
                }
            }
        }
    }
    found
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn descendants(_root: i32) -> Vec<i32> {
    vec![]
}

/// SIGKILLs every process below `root` (not `root` itself). Killing a process re-parents its
/// children to the keeper, so the tree is walked again until nothing is left below `root`.
fn kill_descendants(root: i32) {
    for _ in 0..8 {
        let below = descendants(root);
        if below.is_empty() {
            return;
        }
        for pid in below {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
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

/// Whether members of the group still run `within` after its command ended: members that are
/// only finishing their own exit (a sandbox tearing down its namespace) are given that long.
pub(crate) async fn outlives(group: &dyn ProcessGroup, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while group.alive() {
        if tokio::time::Instant::now() >= deadline {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
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

/// A child started with a keeper (see the module docs): the child process troupe waits on is
/// the keeper, which leads the group.
pub(crate) struct KeptChild {
    /// The keeper's process; its stdio are the command's.
    pub(crate) child: tokio::process::Child,
    /// Where the keeper writes the command's wait status when leftovers keep it running.
    status: Option<tokio::net::unix::pipe::Receiver>,
}

impl KeptChild {
    /// The group: the keeper's pid.
    pub(crate) fn group(&self) -> LocalGroup {
        LocalGroup {
            pgid: self
                .child
                .id()
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(0),
        }
    }

    /// The command's exit code once the command ends (leftovers may still run: see
    /// [`ProcessGroup::alive`]). The keeper is reaped in the background.
    pub(crate) fn exit(self) -> BoxFuture<'static, i32> {
        let KeptChild { mut child, status } = self;
        async move {
            if let Some(mut status) = status {
                let mut raw = [0u8; 4];
                if status.read_exact(&mut raw).await.is_ok() {
                    tokio::spawn(async move {
                        let _ = child.wait().await;
                    });
                    return code_of_wait_status(i32::from_ne_bytes(raw));
                }
            }
            match child.wait().await {
                Ok(status) => exit_code_of(status),
                Err(err) => {
                    tracing::warn!(%err, "could not wait for a child process");
                    -1
                }
            }
        }
        .boxed()
    }
}

/// Spawns `command` in a session of its own, without inspection capabilities, under a keeper
/// (Linux) that holds on to whatever it leaves behind.
/// With `confine`, the command (not its keeper) runs inside that Landlock ruleset.
/// With `pty`, stdin is a pty's slave: the keeper makes it the session's controlling terminal
/// and the command becomes its foreground group (so Ctrl-C reaches the command alone).
pub(crate) fn spawn_kept(
    command: &mut tokio::process::Command,
    confine: Option<&super::confine::Ruleset>,
    pty: bool,
) -> std::io::Result<KeptChild> {
    let (status_read, status_write) = std::io::pipe()?;
    let status_fd = status_write.as_raw_fd();
    let ruleset = confine.map(super::confine::Ruleset::raw_fd);
    let environ = environ_area();
    // SAFETY: child_setup, split_off_keeper and restrict_self only make async-signal-safe
    // system calls. The ruleset's descriptor outlives the spawn (the caller holds it).
    unsafe {
        command.pre_exec(move || {
            super::privileges::child_setup()?;
            if pty {
                super::pty::take_controlling_terminal()?;
            }
            split_off_keeper(status_fd, environ)?;
            if pty {
                super::pty::become_foreground()?;
            }
            // Only the command's branch gets here: the keeper stays outside the boundary.
            match ruleset {
                Some(fd) => super::confine::restrict_self(fd),
                None => Ok(()),
            }
        });
    }
    let child = command.spawn()?;
    drop(status_write);
    let status = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(status_read)).ok();
    Ok(KeptChild { child, status })
}

/// The set-up of an MCP server's process between fork and exec: no inspection capabilities,
/// a keeper (without a status pipe: the server's end is seen through its stdio), and the
/// server (not its keeper) inside the Landlock ruleset `confine` (a descriptor), if any.
/// `environ` is [`environ_area`], read before the fork.
pub(crate) fn mcp_child_setup(
    confine: Option<i32>,
    environ: (usize, usize),
) -> std::io::Result<()> {
    super::privileges::drop_inspection_capabilities()?;
    split_off_keeper(-1, environ)?;
    match confine {
        Some(fd) => super::confine::restrict_self(fd),
        None => Ok(()),
    }
}

/// Where troupe's initial environment strings lie in its memory (`env_start`, `env_end` of
/// `/proc/self/stat`), read once; what `/proc/<pid>/environ` of troupe, and of a keeper
/// forked from it, shows. `(0, 0)` when unknown.
pub(crate) fn environ_area() -> (usize, usize) {
    static AREA: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *AREA.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
                return (0, 0);
            };
            // Fields after the command name (in parentheses, maybe with spaces): the 3rd field
            // of the line is the first here, so env_start (50) and env_end (51) are at 47, 48.
            let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
                return (0, 0);
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |n: usize| fields.get(n).and_then(|f| f.parse::<usize>().ok());
            match (field(47), field(48)) {
                (Some(start), Some(end)) if start > 0 && end > start => (start, end),
                _ => (0, 0),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            (0, 0)
        }
    })
}

/// Most bytes of an environment area the keeper wipes (the kernel's limit on arguments and
/// environment together is far below this on any usual setup).
#[cfg(target_os = "linux")]
const MAX_ENVIRON_BYTES: usize = 64 << 20;

/// prctl's unsigned-long arguments (plain literals would be passed as 32-bit ints).
#[cfg(target_os = "linux")]
const ON: libc::c_ulong = 1;
#[cfg(target_os = "linux")]
const OFF: libc::c_ulong = 0;

/// The signal the keeper was asked to act on (0: none yet).
static KEEPER_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Stands for "troupe went away" where a signal number would be.
const PARENT_GONE: libc::c_int = -1;

extern "C" fn keeper_note_signal(signal: libc::c_int) {
    KEEPER_SIGNAL.store(signal, Ordering::SeqCst);
}

/// The keeper's once-a-second wake-up to see whether troupe is still there (a parent-death
/// signal would follow the thread that spawned it, not the process).
extern "C" fn keeper_tick(_signal: libc::c_int) {}

/// Between fork and exec: becomes a child subreaper and forks; the new child returns to exec
/// the command, this process becomes its keeper and never returns. Without subreapers (not
/// Linux) the command simply runs.
fn split_off_keeper(status_fd: RawFd, environ: (usize, usize)) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: only async-signal-safe system calls from here on.
        unsafe {
            let parent = libc::getppid();
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, ON, OFF, OFF, OFF) != 0 {
                return Ok(());
            }
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                // The command: not a subreaper (that is not inherited); the status pipe closes
                // at exec.
                0 => Ok(()),
                command => {
                    // The keeper is a copy of troupe that never execs: its environ (what
                    // /proc/<pid>/environ shows) would still be troupe's, keys and all. Zero
                    // it; the keeper reads no variable. (It is non-dumpable like troupe too.)
                    let (start, end) = environ;
                    if start > 0 && end > start && end - start <= MAX_ENVIRON_BYTES {
                        std::ptr::write_bytes(start as *mut u8, 0, end - start);
                    }
                    keep(command, parent, status_fd)
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (status_fd, environ);
        Ok(())
    }
}

/// The keeper's life; see the module docs. Async-signal-safe system calls only (it runs in a
/// forked copy of a multi-threaded process).
#[cfg(target_os = "linux")]
unsafe fn keep(command: libc::pid_t, parent: libc::pid_t, status_fd: RawFd) -> ! {
    unsafe {
        // Hold nothing of troupe's but the status pipe: the command's output must end when the
        // command's side closes it, and troupe's spawn waits for its exec-error pipe to close.
        close_all_but(status_fd);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = keeper_note_signal as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        // No SA_RESTART: a signal interrupts the wait so the loop can act on it.
        action.sa_flags = 0;
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
        action.sa_sigaction = keeper_tick as *const () as usize;
        libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
        let second = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        let timer = libc::itimerval {
            it_interval: second,
            it_value: second,
        };
        libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut());
        for signal in [libc::SIGPIPE, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            libc::signal(signal, libc::SIG_IGN);
        }
        let mut command_status: Option<libc::c_int> = None;
        let mut reported = false;
        loop {
            if libc::getppid() != parent {
                KEEPER_SIGNAL.store(PARENT_GONE, Ordering::SeqCst);
            }
            let asked = KEEPER_SIGNAL.load(Ordering::SeqCst);
            if asked != 0 {
                // Stopping: pass the signal on to everything below, again as new orphans
                // arrive, until nothing is left. troupe gone means kill.
                let signal = if asked == PARENT_GONE {
                    libc::SIGKILL
                } else {
                    asked
                };
                for_each_child(|child| {
                    libc::kill(-child, signal);
                    libc::kill(child, signal);
                    if signal != libc::SIGKILL {
                        libc::kill(child, libc::SIGCONT);
                    }
                });
                loop {
                    let mut status = 0;
                    let reaped = libc::waitpid(-1, &mut status, libc::WNOHANG);
                    if reaped == command {
                        command_status = Some(status);
                    }
                    if reaped <= 0 {
                        break;
                    }
                }
                if no_children() {
                    break;
                }
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
                continue;
            }
            if command_status.is_some() {
                if no_children() {
                    break;
                }
                if !reported && status_fd >= 0 {
                    // Leftovers run on: tell troupe how the command ended now.
                    if let Some(status) = command_status {
                        let bytes = status.to_ne_bytes();
                        libc::write(status_fd, bytes.as_ptr().cast(), bytes.len());
                    }
                    reported = true;
                }
            }
            let mut status = 0;
            let reaped = libc::waitpid(-1, &mut status, 0);
            if reaped == command {
                command_status = Some(status);
            } else if reaped == -1 && *libc::__errno_location() == libc::ECHILD {
                break;
            }
        }
        exit_as(command_status)
    }
}

/// Whether the keeper has no child left (none running and none to reap).
#[cfg(target_os = "linux")]
unsafe fn no_children() -> bool {
    // SAFETY: waitid with P_ALL and WNOWAIT only reports; it changes nothing.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let found = libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        found == -1 && *libc::__errno_location() == libc::ECHILD
    }
}

/// Calls `f` with the pid of each of the keeper's children (from `/proc/thread-self/children`;
/// the keeper has one thread).
#[cfg(target_os = "linux")]
unsafe fn for_each_child(mut f: impl FnMut(libc::pid_t)) {
    let mut buf = [0u8; 16 * 1024];
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let mut len = 0usize;
        loop {
            let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
            if n <= 0 {
                break;
            }
            len += n as usize;
            if len == buf.len() {
                break;
            }
        }
        libc::close(fd);
        let mut pid: libc::pid_t = 0;
        let mut digits = false;
        for &b in &buf[..len] {
            if b.is_ascii_digit() {
                pid = pid
                    .saturating_mul(10)
                    .saturating_add(libc::pid_t::from(b - b'0'));
                digits = true;
            } else {
                if digits && pid > 1 {
                    f(pid);
                }
                pid = 0;
                digits = false;
            }
        }
        if digits && pid > 1 {
            f(pid);
        }
    }
}

/// Closes every descriptor but `keep` (every one, when `keep` is negative).
#[cfg(target_os = "linux")]
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: close_range and close only close descriptors.
    unsafe {
        if keep < 0 {
            if libc::syscall(libc::SYS_close_range, 0u32, libc::c_uint::MAX, 0u32) != 0 {
                for fd in 0..4096 {
                    libc::close(fd);
                }
            }
            return;
        }
        let keep = keep as libc::c_uint;
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32) == 0;
        let above = libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0u32) == 0;
        if !(below && above) {
            for fd in 0..4096 {
                if fd != keep as libc::c_int {
                    libc::close(fd);
                }
            }
        }
    }
}

/// Ends the keeper the way the command ended: the same exit code, or the same signal.
#[cfg(target_os = "linux")]
unsafe fn exit_as(status: Option<libc::c_int>) -> ! {
    unsafe {
        match status {
            Some(s) if libc::WIFEXITED(s) => libc::_exit(libc::WEXITSTATUS(s)),
            Some(s) if libc::WIFSIGNALED(s) => {
                let signal = libc::WTERMSIG(s);
                libc::signal(signal, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, signal);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal)
            }
            _ => libc::_exit(255),
        }
    }
}

/// The exit code for a raw wait status: its code, or minus the signal that ended it.
fn code_of_wait_status(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        -libc::WTERMSIG(status)
    } else {
        -1
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
