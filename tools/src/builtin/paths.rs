//! Which file paths need a person's approval: anything outside the session's allowed roots, and
//! writes to files that hold credentials or run at every shell start (ssh keys, shell rc files,
//! `.netrc`, cloud credentials, `.env` files, `/etc`, troupe's own settings). Reads of private
//! keys and credential stores need approval too. The Supervisor calls [`path_needs_approval`]
//! before a file tool runs; the file tools call it again and refuse when no approval was given.

use std::path::{Component, Path, PathBuf};

/// What a tool does with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathAccess {
    /// Reads it (read_file, search_files).
    Read,
    /// Creates, changes or deletes it (write_file, patch).
    Write,
}

/// Shell start-up files: whatever is written there runs in every new shell.
pub(crate) const SHELL_RC: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    "config.fish",
];
/// Files in the home directory that hold credentials.
pub(crate) const HOME_CREDENTIALS: &[&str] = &[
    ".netrc",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".docker/config.json",
    ".kube/config",
    ".config/gh/hosts.yml",
    ".aws/credentials",
    ".aws/config",
];
/// Directories in the home directory whose whole content is secret or security-relevant.
const HOME_SECRET_DIRS: &[&str] = &[".ssh", ".gnupg", ".troupe", ".aws"];

/// `~` and `~/x` against `$HOME`.
pub fn expand_home(path: &str) -> PathBuf {
    if let Some(rest) = path.strip_prefix("~")
        && (rest.is_empty() || rest.starts_with('/'))
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest.trim_start_matches('/'));
    }
    PathBuf::from(path)
}

/// `path` resolved against `cwd`: `~` expanded, `.` and `..` folded, symlinks of the existing
/// part followed (so a link inside the project cannot point a write at `~/.ssh`).
pub fn resolve_path(path: &str, cwd: &Path) -> PathBuf {
    let expanded = expand_home(path);
    let joined = if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    };
    let mut lexical = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    // Canonicalise the longest existing prefix, then put the missing rest back.
    let mut existing = lexical.clone();
    let mut rest = vec![];
    while !existing.exists() {
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return lexical,
        }
    }
    let mut out = std::fs::canonicalize(&existing).unwrap_or(existing);
    for name in rest.into_iter().rev() {
        out.push(name);
    }
    out
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .map(|h| std::fs::canonicalize(&h).unwrap_or(h))
}

/// Why writing `resolved` is sensitive, if it is.
fn sensitive_write(resolved: &Path, home: Option<&Path>) -> Option<String> {
    let name = resolved.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if resolved.starts_with("/etc") || resolved.starts_with("/private/etc") {
        return Some(format!(
            "{} is a system configuration file",
            resolved.display()
        ));
    }
    if SHELL_RC.contains(&name) {
        return Some(format!(
            "{} is a shell start-up file: what is written there runs in every new shell",
            resolved.display()
        ));
    }
    if name == ".env" || name.starts_with(".env.") {
        return Some(format!(
            "{} is an environment file that usually holds credentials",
            resolved.display()
        ));
    }
    if let Some(home) = home
        && let Ok(inner) = resolved.strip_prefix(home)
        && (HOME_SECRET_DIRS.iter().any(|d| inner.starts_with(d))
            || HOME_CREDENTIALS.iter().any(|f| inner == Path::new(f)))
    {
        return Some(format!("{} holds keys or credentials", resolved.display()));
    }
    None
}

/// Why reading `resolved` is sensitive, if it is: private keys and credential stores.
fn sensitive_read(resolved: &Path, home: Option<&Path>) -> Option<String> {
    let name = resolved.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let home = home?;
    let inner = resolved.strip_prefix(home).ok()?;
    let private_key =
        inner.starts_with(".ssh") && name.starts_with("id_") && !name.ends_with(".pub");
    let store = inner.starts_with(".gnupg")
        || inner.starts_with(".troupe")
        || HOME_CREDENTIALS.iter().any(|f| inner == Path::new(f));
    (private_key || store)
        .then(|| format!("{} holds private keys or credentials", resolved.display()))
}

/// Why accessing `path` needs approval, or `None` when it does not. `cwd` is the session's
/// working directory (relative paths resolve against it); `allowed_roots` are the directories
/// the session may use freely (none means only `cwd`).
pub fn path_needs_approval(
    path: &str,
    access: PathAccess,
    cwd: &Path,
    allowed_roots: &[PathBuf],
) -> Option<String> {
    resolved_needs_approval(&resolve_path(path, cwd), access, cwd, allowed_roots)
}

/// [`path_needs_approval`] for a path already resolved with [`resolve_path`]: a tool checks and
/// then uses the same resolved path, since resolving twice could give two answers when a link
/// changes in between.
pub fn resolved_needs_approval(
    resolved: &Path,
    access: PathAccess,
    cwd: &Path,
    allowed_roots: &[PathBuf],
) -> Option<String> {
    let resolved = resolved.to_path_buf();
    let home = home();
    let sensitive = match access {
        PathAccess::Write => sensitive_write(&resolved, home.as_deref()),
        PathAccess::Read => sensitive_read(&resolved, home.as_deref()),
    };
    if sensitive.is_some() {
        return sensitive;
    }
    let cwd_root = [cwd.to_path_buf()];
    let roots = if allowed_roots.is_empty() {
        &cwd_root[..]
    } else {
        allowed_roots
    };
    let inside = roots
        .iter()
        .any(|root| resolved.starts_with(resolve_path(&root.to_string_lossy(), cwd)));
    (!inside).then(|| {
        format!(
            "{} is outside the directories this session may use ({})",
            resolved.display(),
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_and_outside_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        assert_eq!(
            path_needs_approval("src/main.rs", PathAccess::Write, &root, &[]),
            None
        );
        assert!(path_needs_approval("../elsewhere.txt", PathAccess::Read, &root, &[]).is_some());
        assert!(
            path_needs_approval(
                "/usr/share/x",
                PathAccess::Read,
                &root,
                std::slice::from_ref(&root)
            )
            .is_some()
        );
        assert_eq!(
            path_needs_approval(
                "/usr/share/x",
                PathAccess::Read,
                &root,
                &[root.clone(), PathBuf::from("/usr")]
            ),
            None
        );
    }

    #[test]
    fn sensitive_writes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        for p in [".env", "config/.env.local", ".bashrc", "/etc/hosts"] {
            let reason = path_needs_approval(
                p,
                PathAccess::Write,
                &root,
                &[root.clone(), PathBuf::from("/etc")],
            );
            assert!(reason.is_some(), "{p}");
        }
        assert_eq!(
            path_needs_approval(".env", PathAccess::Read, &root, &[]),
            None
        );
    }

    #[test]
    fn a_symlink_cannot_hide_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        assert!(path_needs_approval("link/file", PathAccess::Write, dir.path(), &[]).is_some());
    }
}
