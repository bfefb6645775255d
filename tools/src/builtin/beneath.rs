//! Reading, writing and deleting files beneath a root directory (the session's workspace or the
//! allowed root a path is under) without trusting the path a second time: the directory that
//! holds the file is opened relative to the root in one step, and every later step (the
//! temporary file, the rename, the read-back) works on that directory's descriptor. A directory
//! swapped for a symbolic link between the path check and the write therefore cannot send the
//! bytes anywhere else.
//!
//! The path given is the one the path check resolved (symbolic links already followed, see
//! [`super::paths::resolve_path`]), so it holds no link when it is opened: any link found then
//! appeared after the check and the open fails (`RESOLVE_NO_SYMLINKS`). That keeps links inside
//! the workspace working (the check went through them) while nothing can redirect the write.
//! `openat2` does it in one call; where the kernel lacks it (ENOSYS, before Linux 5.6) the
//! directory is walked one component at a time with `O_NOFOLLOW`, which refuses the same links.
//! Used by [`super::files::LocalFiles`].

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, open, openat, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Directories created for it.
    pub dirs_created: usize,
    /// The bytes read back from the file match the bytes written.
    pub verified: bool,
}

fn io_error(errno: Errno) -> io::Error {
    io::Error::from_raw_os_error(errno as i32)
}

/// The error for a link met where the checked path had none.
fn link_appeared(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "a part of {} became a symbolic link (or left the allowed directory) after the path was checked, so nothing was written there; check the directory and try again",
            path.display()
        ),
    )
}

/// `path`'s place below `root`: its parent's components and its file name.
fn split<'a>(root: &Path, path: &'a Path) -> io::Result<(Vec<&'a OsStr>, &'a OsStr)> {
    let rel = path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not below {}", path.display(), root.display()),
        )
    })?;
    let mut parts = Vec::new();
    for part in rel.components() {
        match part {
            Component::Normal(name) => parts.push(name),
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} must be a plain path below {} (no '..')",
                        path.display(),
                        root.display()
                    ),
                ));
            }
        }
    }
    let name = parts.pop().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file below {}", path.display(), root.display()),
        )
    })?;
    Ok((parts, name))
}

fn open_root(root: &Path) -> io::Result<OwnedFd> {
    open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_error)
}

/// Opens the directory `parts` below `root_fd` in one step; `None` when `openat2` is missing.
fn open_dir_at_once(root_fd: &OwnedFd, parts: &[&OsStr]) -> Option<Result<OwnedFd, Errno>> {
    let mut rel = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            rel.push(b'/');
        }
        rel.extend_from_slice(part.as_bytes());
    }
    if rel.is_empty() {
        rel.push(b'.');
    }
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    match openat2(root_fd, OsStr::from_bytes(&rel), how) {
        // ENOSYS: an older kernel; EPERM: a seccomp filter that does not know the call.
        Err(Errno::ENOSYS) | Err(Errno::EPERM) => None,
        other => Some(other),
    }
}

/// Opens the directory `parts` below `root_fd` one component at a time, never following a
/// link; creates missing directories when `create`. Returns it and how many were created.
fn walk_dir(root_fd: &OwnedFd, parts: &[&OsStr], create: bool) -> Result<(OwnedFd, usize), Errno> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current = openat(root_fd, ".", flags, Mode::empty())?;
    let mut created = 0;
    for part in parts {
        let next = match openat(&current, *part, flags, Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(&current, *part, Mode::from_bits_truncate(0o777)) {
                    Ok(()) => created += 1,
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                openat(&current, *part, flags, Mode::empty())?
            }
            // With O_NOFOLLOW a link may answer ENOTDIR: say which it was.
            Err(Errno::ENOTDIR) => {
                let stat = fstatat(&current, *part, AtFlags::AT_SYMLINK_NOFOLLOW)?;
                return Err(
                    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
                        Errno::ELOOP
                    } else {
                        Errno::ENOTDIR
                    },
                );
            }
            other => other?,
        };
        // O_PATH with O_NOFOLLOW opens a link itself instead of failing: refuse it here.
        if SFlag::from_bits_truncate(fstat_of(&next)?.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
            return Err(Errno::ELOOP);
        }
        current = next;
    }
    Ok((current, created))
}

fn fstat_of(fd: &OwnedFd) -> Result<FileStat, Errno> {
    nix::sys::stat::fstat(fd)
}

/// The directory holding `path` (below `root`), opened without following any link, and the
/// file's name; with how many directories were created for it.
fn parent_dir<'a>(
    root: &Path,
    path: &'a Path,
    create: bool,
) -> io::Result<(OwnedFd, &'a OsStr, usize)> {
    let (parts, name) = split(root, path)?;
    let root_fd = open_root(root)?;
    let opened = match open_dir_at_once(&root_fd, &parts) {
        Some(Ok(fd)) => Ok((fd, 0)),
        Some(Err(Errno::ENOENT)) if create => walk_dir(&root_fd, &parts, true),
        Some(Err(e)) => Err(e),
        None => walk_dir(&root_fd, &parts, create),
    };
    match opened {
        Ok((fd, created)) => Ok((fd, name, created)),
        // ELOOP: a link where the check saw none; EXDEV: the walk left the root.
        Err(Errno::ELOOP) | Err(Errno::EXDEV) => Err(link_appeared(path)),
        Err(Errno::ENOTDIR) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!(
                "a part of {} is a file, not a directory; send a path whose directories are directories",
                path.display()
            ),
        )),
        Err(e) => Err(io_error(e)),
    }
}

/// What `name` in `dir` is, without following a link; `None` when nothing is there.
fn entry_kind(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<(SFlag, FileStat)>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some((
            SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT,
            stat,
        ))),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(io_error(e)),
    }
}

/// Reads `name` in `dir` whole, refusing a link.
fn read_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Vec<u8>> {
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .map_err(io_error)?;
    let mut file = File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The content of `path` (below `root`), read without following a link that appeared after
/// the path was checked.
pub(crate) fn read(root: &Path, path: &Path) -> io::Result<Vec<u8>> {
    let (dir, name, _) = parent_dir(root, path, false)?;
    read_at(dir.as_fd(), name).map_err(|e| match e.raw_os_error() {
        Some(code) if code == Errno::ELOOP as i32 => link_appeared(path),
        _ => e,
    })
}

/// Replaces `path` (below `root`) with `bytes` atomically, creating missing directories: a
/// temporary file in the same opened directory, renamed over the name relative to it, then
/// read back through it. The file keeps the mode of the one it replaces. On every failure the
/// temporary file is removed.
pub(crate) fn write(root: &Path, path: &Path, bytes: &[u8]) -> io::Result<Written> {
    let (dir, name, dirs_created) = parent_dir(root, path, true)?;
    let mode = match entry_kind(dir.as_fd(), name)? {
        Some((kind, _)) if kind == SFlag::S_IFDIR => {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", path.display()),
            ));
        }
        Some((kind, stat)) if kind == SFlag::S_IFREG => Some(stat.st_mode & 0o7777),
        // A link (or other entry) under that name is replaced by the file, never followed.
        _ => None,
    };
    super::atomic_write::write_at(dir.as_fd(), name, bytes, mode)?;
    let verified = read_at(dir.as_fd(), name).is_ok_and(|back| back == bytes);
    Ok(Written {
        dirs_created,
        verified,
    })
}

/// Deletes the file `path` (below `root`), relative to its opened directory.
pub(crate) fn remove(root: &Path, path: &Path) -> io::Result<()> {
    let (dir, name, _) = parent_dir(root, path, false)?;
    match entry_kind(dir.as_fd(), name)? {
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} does not exist", path.display()),
        )),
        Some((kind, _)) if kind == SFlag::S_IFDIR => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            format!("{} is a directory", path.display()),
        )),
        Some(_) => unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir).map_err(io_error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_reads_and_removes_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let file = root.join("a/b/c.txt");
        let written = write(&root, &file, b"hello").unwrap();
        assert_eq!(
            written,
            Written {
                dirs_created: 2,
                verified: true
            }
        );
        assert_eq!(read(&root, &file).unwrap(), b"hello");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        write(&root, &file, b"again").unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        remove(&root, &file).unwrap();
        assert!(!file.exists());
        let left: Vec<_> = std::fs::read_dir(root.join("a/b")).unwrap().collect();
        assert!(left.is_empty(), "no temporary file is left");
    }

    #[test]
    fn a_link_in_the_path_is_refused_and_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("sub")).unwrap();
        let err = write(&root, &root.join("sub/x.txt"), b"x").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(read(&root, &root.join("sub/x.txt")).is_err());
        // The walk used without openat2 refuses the same link.
        let root_fd = open_root(&root).unwrap();
        assert_eq!(
            walk_dir(&root_fd, &[OsStr::new("sub")], true).err(),
            Some(Errno::ELOOP)
        );
        std::fs::write(root.join("file"), b"x").unwrap();
        let err = write(&root, &root.join("file/x.txt"), b"x").unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(write(&root, Path::new("/etc/passwd"), b"x").is_err());
    }

    #[test]
    fn the_walk_creates_directories_like_openat2() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let root_fd = open_root(&root).unwrap();
        let parts = [OsStr::new("x"), OsStr::new("y")];
        let (_, created) = walk_dir(&root_fd, &parts, true).unwrap();
        assert_eq!(created, 2);
        assert!(root.join("x/y").is_dir());
        assert_eq!(walk_dir(&root_fd, &parts, false).unwrap().1, 0);
    }

    #[test]
    fn a_link_as_the_file_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let target = outside.path().join("t.txt");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, root.join("f.txt")).unwrap();
        assert!(read(&root, &root.join("f.txt")).is_err());
        write(&root, &root.join("f.txt"), b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"new");
    }
}
