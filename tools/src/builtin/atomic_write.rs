//! Writing a file so that readers see either the old content or the new, never a mix: the bytes
//! go to a temporary file beside the target, are flushed to disk, and the temporary file is
//! renamed over the target. Every step works relative to the opened directory that holds the
//! target ([`write_at`]), so the temporary file and the rename cannot be sent elsewhere by a path
//! that changes meanwhile. Used by `write_file` and `patch` (through [`super::beneath`]) and the
//! receipt store ([`write_atomic`]).
//!
//! A writer killed before its rename leaves its temporary file behind, named
//! `.<file>.troupe-<pid>-<32 hex>.tmp`; the next write of the same file deletes those whose
//! writer has died (or that are a day old), so crashes never pile up partial copies. A write that
//! fails removes its own temporary file.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat, renameat};
use nix::sys::signal::kill;
use nix::sys::stat::{Mode, SFlag, fstatat};
use nix::unistd::{Pid, UnlinkatFlags, unlinkat};

/// A temporary file older than this is removed even if a process with its writer's pid runs:
/// that pid has almost surely been reused, as no single write takes a day.
const STALE_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// The start shared by every temporary file for the file called `name`.
fn temp_prefix(name: &OsStr) -> String {
    format!(".{}.troupe-", name.to_string_lossy())
}

/// A fresh temporary file name for the file called `name`.
pub(crate) fn temp_name(name: &OsStr) -> OsString {
    OsString::from(format!(
        "{}{}-{}.tmp",
        temp_prefix(name),
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ))
}

/// The pid of the writer that made `entry`, if `entry` is one of our temporary files whose
/// names start with `prefix`.
fn temp_writer(entry: &str, prefix: &str) -> Option<i32> {
    let rest = entry.strip_prefix(prefix)?.strip_suffix(".tmp")?;
    let (pid, id) = rest.split_once('-')?;
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // Zero and negative values would address process groups in kill(2), never one writer.
    pid.parse::<i32>().ok().filter(|p| *p > 0)
}

/// Whether a process `pid` exists (one we may not signal still counts).
fn process_exists(pid: i32) -> bool {
    !matches!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH))
}

fn io_error(errno: Errno) -> io::Error {
    io::Error::from_raw_os_error(errno as i32)
}

/// Deletes the temporary files for `name` in the directory `dir` left by writers that died
/// before their rename; returns how many went. Best effort: a file we cannot list or delete is
/// left alone. Deleting the file of a writer that is in fact alive (a pid from another pid
/// namespace) costs that writer its rename, which then fails with an error; the target is never
/// touched.
pub(crate) fn remove_stale_temps_at(dir: BorrowedFd<'_>, name: &OsStr) -> usize {
    let Ok(mut listing) = Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let prefix = temp_prefix(name);
    let own_pid = std::process::id();
    let now = SystemTime::now();
    let mut stale = Vec::new();
    for entry in listing.iter().flatten() {
        let entry_name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
        let Some(pid) = temp_writer(&entry_name.to_string_lossy(), &prefix) else {
            continue;
        };
        // Our own process may be writing this file on another thread right now.
        if u32::try_from(pid).is_ok_and(|p| p == own_pid) {
            continue;
        }
        let old = fstatat(dir, entry_name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .ok()
            .and_then(|s| u64::try_from(s.st_mtime).ok())
            .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_AFTER);
        if process_exists(pid) && !old {
            continue;
        }
        stale.push((entry_name, pid));
    }
    let mut removed = 0;
    for (entry_name, pid) in stale {
        match unlinkat(dir, entry_name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) => {
                removed += 1;
                tracing::debug!(file = %entry_name.to_string_lossy(), pid, "removed a temporary file left by a dead writer");
            }
            Err(Errno::ENOENT) => {}
            Err(e) => {
                tracing::debug!(file = %entry_name.to_string_lossy(), error = %e, "could not remove a stale temporary file");
            }
        }
    }
    removed
}

/// Replaces `name` in the opened directory `dir` with `bytes` atomically: a temporary file
/// created there (never following a link), flushed, given `mode` when set (else 0644 less the
/// umask), and renamed over `name` relative to `dir`. On any failure the temporary file is
/// removed. Temporary files an earlier, crashed write of `name` left behind are deleted first.
pub(crate) fn write_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    bytes: &[u8],
    mode: Option<u32>,
) -> io::Result<()> {
    remove_stale_temps_at(dir, name);
    let tmp = temp_name(name);
    let result = (|| -> io::Result<()> {
        let fd = openat(
            dir,
            tmp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode.unwrap_or(0o644)),
        )
        .map_err(io_error)?;
        let mut file = File::from(fd);
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            // O_CREAT applies the umask; an explicit or inherited mode must hold exactly.
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()?;
        renameat(dir, tmp.as_os_str(), dir, name).map_err(io_error)
    })();
    if result.is_err() {
        match unlinkat(dir, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => {
                tracing::warn!(file = %tmp.to_string_lossy(), error = %e, "could not remove the temporary file of a failed write");
            }
        }
    }
    result
}

/// The permission bits of the regular file `name` in `dir`, if there is one.
pub(crate) fn mode_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<u32> {
    let stat = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    (SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG)
        .then_some(stat.st_mode & 0o7777)
}

/// Replaces `path` with `bytes` atomically. The file gets `mode` when given, else the mode of the
/// file it replaces, else the default for new files (0644 less the umask). For troupe's own
/// files (receipts), whose directory is not in a session's reach.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let dir = open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_error)?;
    let mode = mode.or_else(|| mode_at(dir.as_fd(), name));
    write_at(dir.as_fd(), name, bytes, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn replaces_content_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        write_atomic(&path, b"one", None).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&path, b"two", None).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        write_atomic(&path, b"three", Some(0o600)).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file may remain");
    }
}

#[cfg(test)]
mod stale_temp_tests {
    use super::*;
    use std::fs;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    /// The pid of a process that has exited and been reaped.
    fn dead_pid() -> i32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        pid
    }

    #[test]
    fn names_are_recognised_only_in_our_shape() {
        let prefix = temp_prefix(OsStr::new("f.txt"));
        assert_eq!(
            temp_writer(&format!(".f.txt.troupe-42-{ID}.tmp"), &prefix),
            Some(42)
        );
        assert_eq!(
            temp_writer(&format!(".g.txt.troupe-42-{ID}.tmp"), &prefix),
            None
        );
        assert_eq!(
            temp_writer(&format!(".f.txt.troupe-0-{ID}.tmp"), &prefix),
            None
        );
        assert_eq!(
            temp_writer(&format!(".f.txt.troupe--1-{ID}.tmp"), &prefix),
            None
        );
        assert_eq!(temp_writer(".f.txt.troupe-42-xyz.tmp", &prefix), None);
        assert_eq!(
            temp_writer(&format!(".f.txt.troupe-{ID}.tmp"), &prefix),
            None
        );
        assert_eq!(temp_writer("f.txt", &prefix), None);
    }

    #[test]
    fn temps_of_dead_writers_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        let dead = dead_pid();
        let name = |pid: i32, file: &str| dir.path().join(format!(".{file}.troupe-{pid}-{ID}.tmp"));
        let of_dead = name(dead, "f.txt");
        let of_live = name(1, "f.txt");
        let of_ours = name(std::process::id() as i32, "f.txt");
        let old_of_live = dir
            .path()
            .join(format!(".f.txt.troupe-1-{}.tmp", "f".repeat(32)));
        let other_file = name(dead, "g.txt");
        for p in [&of_dead, &of_live, &of_ours, &old_of_live, &other_file] {
            fs::write(p, b"partial").unwrap();
        }
        let two_days_ago = SystemTime::now() - Duration::from_secs(2 * 24 * 60 * 60);
        fs::File::options()
            .write(true)
            .open(&old_of_live)
            .unwrap()
            .set_modified(two_days_ago)
            .unwrap();
        write_atomic(&path, b"whole", None).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"whole");
        assert!(!of_dead.exists(), "a dead writer's temporary file must go");
        assert!(!old_of_live.exists(), "a day-old temporary file must go");
        assert!(of_live.exists(), "a live writer's temporary file must stay");
        assert!(of_ours.exists(), "this process may still be writing it");
        assert!(
            other_file.exists(),
            "another file's temporary files are not ours to judge"
        );
    }
}
