//! The file system the file tools see: this machine's ([`LocalFiles`]) or the one inside a
//! terminal backend ([`ShellFiles`], for a container, a sandbox or a remote host), so that
//! `read_file`, `write_file`, `patch` and `search_files` act where `terminal` commands do.
//!
//! Every call is blocking: the file tools run them on tokio's blocking pool.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file of this many bytes.
    File(u64),
    /// A directory.
    Dir,
    /// Something else (a FIFO, a socket, a device).
    Other,
}

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name.
    pub name: String,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// Files below a directory, as [`Files::walk`] finds them.
#[derive(Debug, Default)]
pub struct Walk {
    /// The files, in a stable order.
    pub files: Vec<PathBuf>,
    /// The walk stopped at its limit.
    pub capped: bool,
}

/// A file system the file tools can use.
pub trait Files: Send + Sync + 'static {
    /// What `path` is (following links); `NotFound` when nothing is there.
    fn kind(&self, path: &Path) -> io::Result<FileKind>;
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The entries of a directory, sorted by name.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// Replaces `path` with `bytes` all at once, creating missing parent directories.
    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// The path with links and `..` resolved; an error when it does not exist.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
    /// Deletes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates `dir` and its missing ancestors.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The regular files below `root` (or `root` itself when it is a file), skipping
    /// directories named in `skip`, at most `max`.
    fn walk(&self, root: &Path, skip: &[&str], max: usize) -> Walk;
    /// The contents of several files of at most `max_bytes` each; `None` for one that could
    /// not be read or is larger. A remote file system reads them in one round trip.
    fn read_many(&self, paths: &[PathBuf], max_bytes: u64) -> Vec<Option<Vec<u8>>> {
        paths
            .iter()
            .map(|p| match self.kind(p) {
                Ok(FileKind::File(len)) if len <= max_bytes => self.read(p).ok(),
                _ => None,
            })
            .collect()
    }
    /// Whether this is the file system troupe itself runs on.
    fn is_local(&self) -> bool {
        false
    }
    /// The content of `path`, a checked path below `root` (the workspace or the allowed root it
    /// is under). This machine's file system opens it beneath `root` without following a link
    /// that appeared after the check; others read `path`.
    fn read_beneath(&self, root: &Path, path: &Path) -> io::Result<Vec<u8>> {
        let _ = root;
        self.read(path)
    }
    /// Replaces `path` (a checked path below `root`) with `bytes` all at once, creating missing
    /// directories, and reads it back. This machine's file system does every step relative to
    /// the directory opened beneath `root`, so a directory swapped for a link cannot redirect the
    /// write; others write `path` with [`Files::write`].
    fn write_beneath(&self, root: &Path, path: &Path, bytes: &[u8]) -> io::Result<Written> {
        let _ = root;
        let mut dirs_created = 0;
        let mut cur = path.parent();
        while let Some(dir) = cur {
            if dir.as_os_str().is_empty() || self.kind(dir).is_ok() {
                break;
            }
            dirs_created += 1;
            cur = dir.parent();
        }
        self.write(path, bytes)?;
        let verified = self.read(path).is_ok_and(|back| back == bytes);
        Ok(Written {
            dirs_created,
            verified,
        })
    }
    /// Deletes the file `path` (a checked path below `root`); this machine's file system
    /// deletes it relative to the directory opened beneath `root`.
    fn remove_beneath(&self, root: &Path, path: &Path) -> io::Result<()> {
        let _ = root;
        self.remove_file(path)
    }
}

pub use super::beneath::Written;

/// This machine's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalFiles;

impl Files for LocalFiles {
    fn kind(&self, path: &Path) -> io::Result<FileKind> {
        let meta = std::fs::metadata(path)?;
        Ok(if meta.is_dir() {
            FileKind::Dir
        } else if meta.is_file() {
            FileKind::File(meta.len())
        } else {
            FileKind::Other
        })
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries: Vec<DirEntry> = std::fs::read_dir(path)?
            .flatten()
            .map(|e| DirEntry {
                name: e.file_name().to_string_lossy().into_owned(),
                is_dir: e.file_type().is_ok_and(|t| t.is_dir()),
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        super::atomic_write::write_atomic(path, bytes, None)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn walk(&self, root: &Path, skip: &[&str], max: usize) -> Walk {
        if root.is_file() {
            return Walk {
                files: vec![root.to_path_buf()],
                capped: false,
            };
        }
        let mut walk = Walk::default();
        let mut queue = std::collections::VecDeque::from([root.to_path_buf()]);
        while let Some(dir) = queue.pop_front() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let name = entry.file_name();
                if kind.is_dir() {
                    if !skip.iter().any(|s| name == *s) {
                        queue.push_back(entry.path());
                    }
                } else if kind.is_file() {
                    walk.files.push(entry.path());
                    if walk.files.len() >= max {
                        walk.capped = true;
                        return walk;
                    }
                }
            }
        }
        walk
    }

    fn is_local(&self) -> bool {
        true
    }

    fn read_beneath(&self, root: &Path, path: &Path) -> io::Result<Vec<u8>> {
        super::beneath::read(root, path)
    }

    fn write_beneath(&self, root: &Path, path: &Path, bytes: &[u8]) -> io::Result<Written> {
        super::beneath::write(root, path, bytes)
    }

    fn remove_beneath(&self, root: &Path, path: &Path) -> io::Result<()> {
        super::beneath::remove(root, path)
    }
}

/// Runs a short `sh` script inside a backend to completion: the primitive [`ShellFiles`] is
/// built on. `args` become the script's `$1`, `$2`, ...
pub trait ShellRunner: Send + Sync + 'static {
    /// Runs `script` with `args`, feeding it `stdin`; returns what it printed and its status.
    fn run_script(
        &self,
        script: &str,
        args: &[&str],
        stdin: &[u8],
    ) -> io::Result<std::process::Output>;
}

/// Files reached through a backend's shell (POSIX `sh` with GNU coreutils and findutils).
pub struct ShellFiles {
    runner: Arc<dyn ShellRunner>,
}

impl std::fmt::Debug for ShellFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellFiles").finish_non_exhaustive()
    }
}

/// Files per round trip in [`ShellFiles::read_many`].
const READ_BATCH: usize = 200;

impl ShellFiles {
    /// Files reached by running scripts through `runner`.
    pub fn new(runner: Arc<dyn ShellRunner>) -> Self {
        ShellFiles { runner }
    }

    /// Runs a script; a non-zero exit becomes an error carrying what it printed on stderr.
    fn run(&self, script: &str, args: &[&str], stdin: &[u8]) -> io::Result<Vec<u8>> {
        let out = self.runner.run_script(script, args, stdin)?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let kind = match out.status.code() {
            Some(3) => io::ErrorKind::NotFound,
            Some(4) => io::ErrorKind::PermissionDenied,
            _ => io::ErrorKind::Other,
        };
        Err(io::Error::new(
            kind,
            if message.is_empty() {
                format!("the backend's shell exited with {}", out.status)
            } else {
                message
            },
        ))
    }
}

fn text(path: &Path) -> io::Result<&str> {
    path.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not valid UTF-8", path.display()),
        )
    })
}

impl Files for ShellFiles {
    fn kind(&self, path: &Path) -> io::Result<FileKind> {
        let out = self.run(
            r#"if [ -d "$1" ]; then echo d; elif [ -f "$1" ]; then stat -L -c 'f %s' -- "$1"; elif [ -e "$1" ]; then echo o; else echo "No such file or directory: $1" >&2; exit 3; fi"#,
            &[text(path)?],
            &[],
        )?;
        let out = String::from_utf8_lossy(&out);
        let out = out.trim();
        Ok(match out {
            "d" => FileKind::Dir,
            "o" => FileKind::Other,
            _ => FileKind::File(
                out.strip_prefix("f ")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| {
                        io::Error::other(format!("unexpected answer from the backend: {out:?}"))
                    })?,
            ),
        })
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.run(
            r#"[ -e "$1" ] || { echo "No such file or directory: $1" >&2; exit 3; }; cat -- "$1""#,
            &[text(path)?],
            &[],
        )
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let out = self.run(
            r#"[ -d "$1" ] || { echo "Not a directory: $1" >&2; exit 3; }; find "$1" -mindepth 1 -maxdepth 1 -printf '%y%f\0'"#,
            &[text(path)?],
            &[],
        )?;
        let mut entries: Vec<DirEntry> = out
            .split(|b| *b == 0)
            .filter(|e| e.len() > 1)
            .map(|e| DirEntry {
                is_dir: e[0] == b'd',
                name: String::from_utf8_lossy(&e[1..]).into_owned(),
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        // A temporary file beside the target, renamed over it: readers never see half.
        self.run(
            r#"d=$(dirname -- "$1") && mkdir -p -- "$d" || exit 1
t="$d/.$(basename -- "$1").troupe-$$.tmp"
if cat > "$t"; then
  [ -e "$1" ] && chmod --reference="$1" -- "$t" 2>/dev/null
  mv -f -- "$t" "$1" && exit 0
fi
rm -f -- "$t"; exit 1"#,
            &[text(path)?],
            bytes,
        )
        .map(drop)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        let out = self.run(
            r#"realpath -e -- "$1" 2>/dev/null || { echo "No such file or directory: $1" >&2; exit 3; }"#,
            &[text(path)?],
            &[],
        )?;
        let out = String::from_utf8_lossy(&out);
        Ok(PathBuf::from(out.trim_end_matches('\n')))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.run(r#"rm -- "$1""#, &[text(path)?], &[]).map(drop)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.run(r#"mkdir -p -- "$1""#, &[text(dir)?], &[])
            .map(drop)
    }

    fn walk(&self, root: &Path, skip: &[&str], max: usize) -> Walk {
        let Ok(root_text) = text(root) else {
            return Walk::default();
        };
        // `$1` the root, `$2` the limit, then the names to prune, turned into find's
        // `( -name a -o -name b )` in place of the arguments.
        let script = r#"root=$1; max=$2; shift 2
if [ -f "$root" ]; then printf '%s\0' "$root"; exit 0; fi
if [ $# -eq 0 ]; then find "$root" -type f -print0 2>/dev/null | head -z -n "$max"; exit 0; fi
first=1
for n; do
  shift
  if [ $first = 1 ]; then set -- "$@" -name "$n"; first=0; else set -- "$@" -o -name "$n"; fi
done
find "$root" \( "$@" \) -prune -o -type f -print0 2>/dev/null | head -z -n "$max""#;
        let max_text = (max + 1).to_string();
        let mut args = vec![root_text, max_text.as_str()];
        args.extend(skip.iter().copied());
        let Ok(out) = self.run(script, &args, &[]) else {
            return Walk::default();
        };
        let mut files: Vec<PathBuf> = out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect();
        let capped = files.len() > max;
        files.truncate(max);
        files.sort();
        Walk { files, capped }
    }

    fn read_many(&self, paths: &[PathBuf], max_bytes: u64) -> Vec<Option<Vec<u8>>> {
        let mut found = Vec::with_capacity(paths.len());
        for batch in paths.chunks(READ_BATCH) {
            let texts: Vec<&str> = batch.iter().filter_map(|p| p.to_str()).collect();
            if texts.len() != batch.len() {
                found.extend(batch.iter().map(|p| {
                    p.to_str()
                        .and_then(|_| self.read(p).ok())
                        .filter(|b| b.len() as u64 <= max_bytes)
                }));
                continue;
            }
            // Each file as "<size>\n<bytes>", or "-\n" when skipped: one round trip per batch.
            let script = r#"max=$1; shift
for f; do
  if [ -f "$f" ] && s=$(stat -L -c %s -- "$f" 2>/dev/null) && [ "$s" -le "$max" ] && [ -r "$f" ]; then
    printf '%s\n' "$s"; head -c "$s" -- "$f"
  else printf -- '-\n'; fi
done"#;
            let max_text = max_bytes.to_string();
            let mut args = vec![max_text.as_str()];
            args.extend(texts.iter().copied());
            let parsed = self
                .run(script, &args, &[])
                .ok()
                .and_then(|out| split_sized(&out, batch.len()));
            match parsed {
                Some(contents) => found.extend(contents),
                // A file that changed size mid-read spoils the framing: read one by one.
                None => found.extend(batch.iter().map(|p| match self.kind(p) {
                    Ok(FileKind::File(len)) if len <= max_bytes => self.read(p).ok(),
                    _ => None,
                })),
            }
        }
        found
    }
}

/// Splits `count` records of `<size>\n<bytes>` or `-\n`; `None` when the framing is off.
fn split_sized(mut out: &[u8], count: usize) -> Option<Vec<Option<Vec<u8>>>> {
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let newline = out.iter().position(|b| *b == b'\n')?;
        let head = std::str::from_utf8(&out[..newline]).ok()?;
        out = &out[newline + 1..];
        if head == "-" {
            records.push(None);
            continue;
        }
        let size: usize = head.parse().ok()?;
        if out.len() < size {
            return None;
        }
        records.push(Some(out[..size].to_vec()));
        out = &out[size..];
    }
    out.is_empty().then_some(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs scripts with this machine's `sh`: the shell file system against a real shell.
    struct LocalShell;

    impl ShellRunner for LocalShell {
        fn run_script(
            &self,
            script: &str,
            args: &[&str],
            stdin: &[u8],
        ) -> io::Result<std::process::Output> {
            use std::io::Write;
            let mut child = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg("sh")
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            if let Some(mut input) = child.stdin.take() {
                input.write_all(stdin)?;
            }
            child.wait_with_output()
        }
    }

    #[test]
    fn shell_files_match_local_files() {
        let dir = tempfile::tempdir().unwrap();
        let shell = ShellFiles::new(Arc::new(LocalShell));
        let file = dir.path().join("a b/it's.txt");
        shell.write(&file, b"one\ntwo\n").unwrap();
        assert_eq!(LocalFiles.read(&file).unwrap(), b"one\ntwo\n");
        assert_eq!(shell.read(&file).unwrap(), b"one\ntwo\n");
        assert_eq!(shell.kind(&file).unwrap(), FileKind::File(8));
        assert_eq!(shell.kind(dir.path()).unwrap(), FileKind::Dir);
        let missing = shell.kind(&dir.path().join("nope")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            shell.read_dir(dir.path()).unwrap(),
            LocalFiles.read_dir(dir.path()).unwrap()
        );
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/x"), "x").unwrap();
        std::fs::write(dir.path().join("z"), [0u8, 1, 2]).unwrap();
        let walked = shell.walk(dir.path(), &[".git"], 100);
        // The same files; the local walk goes breadth first, the shell's in path order.
        let mut local = LocalFiles.walk(dir.path(), &[".git"], 100).files;
        local.sort();
        assert_eq!(walked.files, local);
        assert!(!walked.capped);
        assert!(shell.walk(dir.path(), &[".git"], 1).capped);
        let many = shell.read_many(&walked.files, 1 << 20);
        assert_eq!(
            many,
            vec![Some(b"one\ntwo\n".to_vec()), Some(vec![0, 1, 2])]
        );
        assert_eq!(shell.read_many(&walked.files, 3)[0], None);
        assert_eq!(
            shell
                .canonicalize(&dir.path().join("a b/../a b/it's.txt"))
                .unwrap(),
            std::fs::canonicalize(&file).unwrap()
        );
        shell.remove_file(&file).unwrap();
        assert!(!file.exists());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("a b")).unwrap().collect();
        assert!(leftovers.is_empty(), "no temporary file is left behind");
    }
}
