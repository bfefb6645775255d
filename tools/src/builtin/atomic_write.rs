//! Writing a file so that readers see either the old content or the new, never a mix: the bytes
//! go to a temporary file beside the target, are flushed to disk, and the temporary file is
//! renamed over the target. Used by `write_file`, `patch` and the receipt store.
//!
//! A writer killed before its rename leaves its temporary file behind, named
//! `.<file>.troupe-<pid>-<32 hex>.tmp`; the next write of the same file deletes those whose
//! writer has died (or that are a day old), so crashes never pile up partial copies.

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// A temporary file older than this is removed even if a process with its writer's pid runs:
/// that pid has almost surely been reused, as no single write takes a day.
const STALE_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// The start shared by every temporary file for the file called `name`.
fn temp_prefix(name: &OsStr) -> String {
    format!(".{}.troupe-", name.to_string_lossy())
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

/// Deletes the temporary files for `name` in `dir` left by writers that died before their
/// rename; returns how many went. Best effort: a file we cannot list or delete is left alone.
/// Deleting the file of a writer that is in fact alive (a pid from another pid namespace) costs
/// that writer its rename, which then fails with an error; the target is never touched.
fn remove_stale_temps(dir: &Path, name: &OsStr) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let prefix = temp_prefix(name);
    let own_pid = std::process::id();
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let entry_name = entry.file_name();
        let Some(pid) = temp_writer(&entry_name.to_string_lossy(), &prefix) else {
            continue;
        };
        // Our own process may be writing this file on another thread right now.
        if u32::try_from(pid).is_ok_and(|p| p == own_pid) {
            continue;
        }
        let old = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_AFTER);
        if process_exists(pid) && !old {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => {
                removed += 1;
                tracing::debug!(path = %entry.path().display(), pid, "removed a temporary file left by a dead writer");
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::debug!(path = %entry.path().display(), error = %e, "could not remove a stale temporary file");
            }
        }
    }
    removed
}

/// Replaces `path` with `bytes` atomically. The file gets `mode` when given, else the mode of the
/// file it replaces, else the default for new files (0644 less the umask). Temporary files an
/// earlier, crashed write of `path` left behind are deleted first.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    remove_stale_temps(dir, name);
    let tmp = dir.join(format!(
        "{}{}-{}.tmp",
        temp_prefix(name),
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let mode = mode.or_else(|| {
        fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    });
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode.unwrap_or(0o644))
            .open(&tmp)?;
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            // create_new applies the umask; an explicit or inherited mode must hold exactly.
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

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
