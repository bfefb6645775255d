//! disk-cleanup's rules as data: which paths are in scope (the troupe home, `/tmp/troupe-*`),
//! which are refused (Windows mounts, symlinks leading out, the home's top-level state
//! folders), which category a new file gets, and when each category may go.

use std::path::{Component, Path, PathBuf};

/// Top-level entries of the troupe home that are never removed (even empty) and whose contents
/// are never tracked automatically (except `cron/output/`).
pub const PROTECTED_TOP_LEVEL: &[&str] = &[
    "logs",
    "memories",
    "sessions",
    "cron",
    "cronjobs",
    "cache",
    "skills",
    "plugins",
    "disk-cleanup",
    "kanban",
    "workspaces",
    "home",
    "backups",
    "profiles",
    "mcp-logs",
    "process-results",
    "state",
    "worktrees",
    "config-seals.json",
    ".git",
    "troupe.yaml",
    ".env",
    "auth.json",
];

/// Folders whose insides the empty-folder sweep leaves alone.
pub const SWEEP_SKIPS: &[&str] = &[
    ".git",
    "node_modules",
    "venv",
    ".venv",
    "site-packages",
    "__pycache__",
];

/// Categories `track` accepts.
pub const CATEGORIES: &[&str] = &[
    "test",
    "temp",
    "cron-output",
    "research",
    "chrome-profile",
    "download",
    "other",
];

/// One day in seconds.
pub const DAY: u64 = 86_400;

/// `temp` goes after this many seconds.
pub const TEMP_AFTER: u64 = 7 * DAY;
/// `cron-output` goes after this many seconds.
pub const CRON_OUTPUT_AFTER: u64 = 14 * DAY;
/// `chrome-profile` goes (deep mode, confirmed) after this many seconds.
pub const CHROME_PROFILE_AFTER: u64 = 14 * DAY;
/// `research` goes (deep mode, confirmed) after this many seconds ...
pub const RESEARCH_AFTER: u64 = 30 * DAY;
/// ... except the newest this many.
pub const RESEARCH_KEEP_NEWEST: usize = 10;
/// Files over this size are never removed automatically.
pub const LARGE_BYTES: u64 = 500 * 1024 * 1024;

/// Where cleaning may act.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The troupe home as given.
    home: PathBuf,
    /// The troupe home with symlinks resolved (when it exists).
    home_real: PathBuf,
    /// The folder holding `troupe-*` scratch folders (`/tmp`).
    tmp: PathBuf,
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl Scope {
    /// The scope of troupe home `home`, with scratch folders `/tmp/troupe-*`.
    pub fn new(home: &Path) -> Scope {
        Scope::with_tmp(home, Path::new("/tmp"))
    }

    /// As [`Scope::new`] with another scratch parent (tests).
    pub fn with_tmp(home: &Path, tmp: &Path) -> Scope {
        let home = absolute(home);
        Scope {
            home_real: std::fs::canonicalize(&home).unwrap_or_else(|_| home.clone()),
            home,
            tmp: std::fs::canonicalize(tmp).unwrap_or_else(|_| absolute(tmp)),
        }
    }

    /// The troupe home.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Checks `path` and returns its real location: absolute, `..` resolved, the folders
    /// leading to it resolved through symlinks (the last component itself is not followed, so
    /// a symlink is handled as a link, never as what it points to). Refused: Windows mounts,
    /// anything that lands outside the home and `/tmp/troupe-*`, the home itself, its
    /// protected top-level entries, and a scratch folder itself.
    pub fn check(&self, path: &Path) -> Result<PathBuf, Refusal> {
        let given = absolute(path);
        if is_windows_mount(&given) {
            return Err(Refusal(format!(
                "{} is on a Windows mount; disk-cleanup never touches /mnt/<drive>",
                given.display()
            )));
        }
        let normal = lexical(&given);
        let Some(name) = normal.file_name() else {
            return Err(Refusal(format!("{} names no file", given.display())));
        };
        let parent = normal.parent().unwrap_or(Path::new("/"));
        let parent_real = std::fs::canonicalize(parent).map_err(|e| {
            Refusal(format!(
                "the folder {} cannot be resolved ({e})",
                parent.display()
            ))
        })?;
        let real = parent_real.join(name);
        if is_windows_mount(&real) {
            return Err(Refusal(format!(
                "{} leads to a Windows mount ({}); refused",
                given.display(),
                real.display()
            )));
        }
        if let Ok(rest) = real.strip_prefix(&self.home_real) {
            let mut parts = rest.components();
            let Some(Component::Normal(top)) = parts.next() else {
                return Err(Refusal("the troupe home itself is never removed".into()));
            };
            let top = top.to_string_lossy();
            if parts.next().is_none() && PROTECTED_TOP_LEVEL.contains(&top.as_ref()) {
                return Err(Refusal(format!(
                    "{} is one of the troupe home's state folders, which are never removed",
                    real.display()
                )));
            }
            return Ok(real);
        }
        if let Ok(rest) = real.strip_prefix(&self.tmp) {
            let mut parts = rest.components();
            if let Some(Component::Normal(top)) = parts.next()
                && top.to_string_lossy().starts_with("troupe-")
            {
                if parts.next().is_some() {
                    return Ok(real);
                }
                return Err(Refusal(format!(
                    "{} is a scratch folder itself; only what is inside it may be cleaned",
                    real.display()
                )));
            }
        }
        Err(Refusal(format!(
            "{} is outside the troupe home ({}) and /tmp/troupe-*; disk-cleanup acts only there",
            real.display(),
            self.home.display()
        )))
    }

    /// The category a newly created file gets, or `None` when it is not tracked: inside a
    /// protected tree only `cron/output/<job>/...` counts (as `cron-output`); elsewhere
    /// `test_*` and `*.test.*` are `test`, `tmp_*` is `temp`.
    pub fn guess_category(&self, real: &Path) -> Option<&'static str> {
        if let Ok(rest) = real.strip_prefix(&self.home_real) {
            let parts: Vec<String> = rest
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let first = parts.first()?;
            if (first == "cron" || first == "cronjobs")
                && parts.get(1).is_some_and(|p| p == "output")
                && parts.len() >= 4
            {
                return Some("cron-output");
            }
            if PROTECTED_TOP_LEVEL.contains(&first.as_str()) {
                return None;
            }
        }
        let name = real.file_name()?.to_string_lossy();
        if name.starts_with("test_") || is_dot_test(&name) {
            Some("test")
        } else if name.starts_with("tmp_") {
            Some("temp")
        } else {
            None
        }
    }

    /// Whether `real` (already checked) is a folder the empty-folder sweep must keep: the
    /// home, its protected top-level folders and everything inside them.
    pub fn is_protected_tree(&self, real: &Path) -> bool {
        match real.strip_prefix(&self.home_real) {
            Ok(rest) => match rest.components().next() {
                None => true,
                Some(Component::Normal(top)) => {
                    PROTECTED_TOP_LEVEL.contains(&top.to_string_lossy().as_ref())
                }
                Some(_) => true,
            },
            Err(_) => true,
        }
    }

    /// The home with symlinks resolved.
    pub fn home_real(&self) -> &Path {
        &self.home_real
    }
}

/// `name.test.ext`: a `.test.` part followed by an extension.
fn is_dot_test(name: &str) -> bool {
    name.find(".test.")
        .is_some_and(|at| at > 0 && name.len() > at + ".test.".len())
}

/// `/mnt/<drive letter>` and below (WSL's view of Windows drives).
pub fn is_windows_mount(path: &Path) -> bool {
    let mut parts = path.components();
    matches!(parts.next(), Some(Component::RootDir))
        && matches!(parts.next(), Some(Component::Normal(m)) if m == "mnt")
        && matches!(parts.next(), Some(Component::Normal(d)) if {
            let d = d.to_string_lossy();
            d.len() == 1 && d.chars().all(|c| c.is_ascii_alphabetic())
        })
}

fn absolute(path: &Path) -> PathBuf {
    let expanded = match path.to_str().and_then(|p| p.strip_prefix("~/")) {
        Some(rest) => std::env::var_os("HOME")
            .map_or_else(|| path.to_path_buf(), |h| PathBuf::from(h).join(rest)),
        None => path.to_path_buf(),
    };
    if expanded.is_absolute() {
        expanded
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(expanded)
    }
}

/// Removes `.` and resolves `..` without touching the disk.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_troupe_keeps_in_its_home_are_protected() {
        // What the runtime, the built-in tools and the board create under the home; an empty
        // one of them must never be swept.
        // Every folder troupe's home knows of (one list, in troupe-tools), and the seal record.
        for name in troupe_tools::home::FOLDERS
            .iter()
            .copied()
            .chain(["config-seals.json"])
        {
            assert!(
                PROTECTED_TOP_LEVEL.contains(&name),
                "{name} is not protected"
            );
        }
    }

    #[test]
    fn categories_follow_the_name_and_the_tree() {
        let home = tempfile::tempdir().unwrap();
        let scope = Scope::new(home.path());
        let h = scope.home_real().to_path_buf();
        assert_eq!(scope.guess_category(&h.join("test_x.py")), Some("test"));
        assert_eq!(scope.guess_category(&h.join("a/tmp_out.txt")), Some("temp"));
        assert_eq!(scope.guess_category(&h.join("w/app.test.js")), Some("test"));
        assert_eq!(scope.guess_category(&h.join("logs/test_log.txt")), None);
        assert_eq!(
            scope.guess_category(&h.join("cron/output/job/run.md")),
            Some("cron-output")
        );
        assert_eq!(scope.guess_category(&h.join("cron/jobs.json")), None);
        assert_eq!(scope.guess_category(&h.join("notes.md")), None);
        assert_eq!(scope.guess_category(&h.join(".test.")), None);
    }

    #[test]
    fn escapes_are_refused() {
        let home = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let scope = Scope::with_tmp(home.path(), outside.path());
        std::fs::create_dir(home.path().join("work")).unwrap();
        std::os::unix::fs::symlink(outside.path(), home.path().join("work/out")).unwrap();
        assert!(scope.check(&home.path().join("work/test_a")).is_ok());
        assert!(scope.check(&home.path().join("work/out/test_a")).is_err());
        assert!(scope.check(&home.path().join("work/../../test_a")).is_err());
        assert!(scope.check(Path::new("/mnt/c/Users/x/test_a")).is_err());
        assert!(scope.check(&home.path().join("logs")).is_err());
        assert!(scope.check(home.path()).is_err());
        assert!(is_windows_mount(Path::new("/mnt/d")));
        assert!(!is_windows_mount(Path::new("/mnt/data/x")));
    }
}
