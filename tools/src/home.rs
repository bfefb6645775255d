//! troupe's home directory, resolved once and handed down as a value ([`TroupeHome`]).
//!
//! `$TROUPE_HOME` when set and not empty, else `$HOME/.troupe`, else `troupe` under the system's
//! temporary directory. A relative `TROUPE_HOME` (or `HOME`) is taken against the directory troupe
//! was started in and kept absolute from then on, as a shell user expects of
//! `TROUPE_HOME=.troupe troupe chat`: receipts, logs and caches stay where the variable pointed
//! even when a session's working directory moves, and the paths handed to commands and scripts
//! mean the same thing in every folder. An empty variable counts as unset, as an empty `HOME`
//! does for most programs (`TROUPE_HOME= troupe …` is the shell's way to clear it), so nothing
//! ever lands in a relative `process-results` of whatever folder troupe ran in.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Background processes' receipts (`process-results/<id>.json`).
pub const PROCESS_RESULTS: &str = "process-results";
/// Logs: the chat log, and one stderr log per MCP server in `logs/mcp`.
pub const LOGS: &str = "logs";
/// Caches that can be rebuilt (`cache/tool-embeddings`).
pub const CACHE: &str = "cache";
/// State kept between runs (`state/tool_calls.json`, `state/chat_history`).
pub const STATE: &str = "state";
/// Each board task's workspace (`workspaces/<board>/<task>`).
pub const WORKSPACES: &str = "workspaces";
/// Each board task's git worktree (`worktrees/<board>/<task>`).
pub const WORKTREES: &str = "worktrees";
/// The boards' stores when nothing says otherwise (`kanban/`).
pub const KANBAN: &str = "kanban";
/// User plugins (`plugins/<name>/`).
pub const PLUGINS: &str = "plugins";
/// The disk-cleanup plugin's state.
pub const DISK_CLEANUP: &str = "disk-cleanup";

/// Every folder troupe keeps in its home: what a cleanup must never take for litter.
pub const FOLDERS: &[&str] = &[
    PROCESS_RESULTS,
    LOGS,
    CACHE,
    STATE,
    WORKSPACES,
    WORKTREES,
    KANBAN,
    PLUGINS,
    DISK_CLEANUP,
];

/// troupe's home directory. Absolute when found by [`TroupeHome::from_env`] (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TroupeHome(PathBuf);

impl TroupeHome {
    /// The home this process uses: `$TROUPE_HOME`, else `$HOME/.troupe`, else `troupe` under
    /// the temporary directory (see the module doc).
    pub fn from_env() -> TroupeHome {
        let cwd = std::env::current_dir();
        if let Err(e) = &cwd {
            tracing::debug!(error = %e, "troupe home: the current directory is unreadable");
        }
        TroupeHome::resolve(
            std::env::var_os("TROUPE_HOME"),
            std::env::var_os("HOME"),
            cwd.ok().as_deref(),
            &std::env::temp_dir(),
        )
    }

    /// The resolution of [`TroupeHome::from_env`] over given values, without reading the
    /// environment: `troupe_home` and `home` as the variables hold them, `cwd` the directory a
    /// relative one is taken against (`None` when it cannot be read: a relative path is then
    /// kept as given, the best that is left), `temp` the system's temporary directory.
    pub fn resolve(
        troupe_home: Option<OsString>,
        home: Option<OsString>,
        cwd: Option<&Path>,
        temp: &Path,
    ) -> TroupeHome {
        let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
        let chosen = set(troupe_home)
            .or_else(|| set(home).map(|h| h.join(".troupe")))
            .unwrap_or_else(|| temp.join("troupe"));
        match cwd {
            Some(cwd) if chosen.is_relative() => TroupeHome(cwd.join(chosen)),
            _ => TroupeHome(chosen),
        }
    }

    /// A home at `path`, as given (tests, or a caller that resolved it itself).
    pub fn at(path: impl Into<PathBuf>) -> TroupeHome {
        TroupeHome(path.into())
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the home (a file troupe keeps there: `serve.token`, `sessions.db`).
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }

    /// Receipts of finished background processes.
    pub fn process_results(&self) -> PathBuf {
        self.join(PROCESS_RESULTS)
    }

    /// Logs.
    pub fn logs(&self) -> PathBuf {
        self.join(LOGS)
    }

    /// The MCP servers' stderr logs (`logs/mcp`).
    pub fn mcp_logs(&self) -> PathBuf {
        self.logs().join("mcp")
    }

    /// Caches that can be rebuilt.
    pub fn cache(&self) -> PathBuf {
        self.join(CACHE)
    }

    /// The tool-search embedding cache (`cache/tool-embeddings`).
    pub fn tool_embeddings(&self) -> PathBuf {
        self.cache().join("tool-embeddings")
    }

    /// State kept between runs.
    pub fn state(&self) -> PathBuf {
        self.join(STATE)
    }

    /// Board tasks' workspaces.
    pub fn workspaces(&self) -> PathBuf {
        self.join(WORKSPACES)
    }

    /// Board tasks' git worktrees.
    pub fn worktrees(&self) -> PathBuf {
        self.join(WORKTREES)
    }

    /// The boards' default store folder.
    pub fn kanban(&self) -> PathBuf {
        self.join(KANBAN)
    }

    /// User plugins.
    pub fn plugins(&self) -> PathBuf {
        self.join(PLUGINS)
    }

    /// The disk-cleanup plugin's state.
    pub fn disk_cleanup(&self) -> PathBuf {
        self.join(DISK_CLEANUP)
    }
}

impl AsRef<Path> for TroupeHome {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl std::fmt::Display for TroupeHome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.display().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(troupe_home: Option<&str>, home: Option<&str>) -> PathBuf {
        TroupeHome::resolve(
            troupe_home.map(OsString::from),
            home.map(OsString::from),
            Some(Path::new("/work/project")),
            Path::new("/tmp"),
        )
        .path()
        .to_path_buf()
    }

    #[test]
    fn troupe_home_wins_when_set() {
        assert_eq!(
            resolve(Some("/srv/troupe"), Some("/home/me")),
            Path::new("/srv/troupe")
        );
    }

    #[test]
    fn an_empty_troupe_home_counts_as_unset() {
        assert_eq!(
            resolve(Some(""), Some("/home/me")),
            Path::new("/home/me/.troupe")
        );
        // Never a relative `process-results` in whatever folder troupe ran in.
        let home = TroupeHome::resolve(Some("".into()), None, None, Path::new("/tmp"));
        assert_eq!(
            home.process_results(),
            Path::new("/tmp/troupe/process-results")
        );
    }

    #[test]
    fn a_relative_troupe_home_is_taken_against_the_start_directory() {
        assert_eq!(
            resolve(Some(".troupe"), Some("/home/me")),
            Path::new("/work/project/.troupe")
        );
        assert_eq!(
            resolve(Some("../state/home"), None),
            Path::new("/work/project/../state/home")
        );
        // Without a readable current directory it is kept as given.
        let home = TroupeHome::resolve(Some("rel".into()), None, None, Path::new("/tmp"));
        assert_eq!(home.path(), Path::new("rel"));
    }

    #[test]
    fn unset_with_home_is_dot_troupe_there() {
        assert_eq!(
            resolve(None, Some("/home/me")),
            Path::new("/home/me/.troupe")
        );
    }

    #[test]
    fn unset_without_home_is_under_the_temp_directory() {
        assert_eq!(resolve(None, None), Path::new("/tmp/troupe"));
        assert_eq!(resolve(None, Some("")), Path::new("/tmp/troupe"));
    }

    #[test]
    fn folders_are_the_ones_troupe_uses() {
        let home = TroupeHome::at("/h");
        assert_eq!(home.process_results(), Path::new("/h/process-results"));
        assert_eq!(home.mcp_logs(), Path::new("/h/logs/mcp"));
        assert_eq!(
            home.tool_embeddings(),
            Path::new("/h/cache/tool-embeddings")
        );
        assert_eq!(home.state(), Path::new("/h/state"));
        assert_eq!(home.workspaces(), Path::new("/h/workspaces"));
        assert_eq!(home.worktrees(), Path::new("/h/worktrees"));
        assert_eq!(home.kanban(), Path::new("/h/kanban"));
        assert_eq!(home.plugins(), Path::new("/h/plugins"));
        assert_eq!(home.disk_cleanup(), Path::new("/h/disk-cleanup"));
        for folder in FOLDERS {
            assert!(!folder.contains('/'), "{folder}");
        }
    }

    #[test]
    fn from_env_is_absolute() {
        // Whatever this machine's variables hold, the answer is absolute (the current directory
        // of a test run is readable).
        assert!(TroupeHome::from_env().path().is_absolute());
    }
}
