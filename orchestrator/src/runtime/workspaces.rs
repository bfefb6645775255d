//! Task workspaces made real ([`TaskWorkspaces`], the runtime's
//! [`troupe_kanban::workspace::Workspaces`]):
//! - `scratch`: a fresh directory per task, `<troupe home>/workspaces/<board>/<task>`, removed
//!   when the task is archived;
//! - `dir:/abs/path`: that directory, which must exist;
//! - `worktree` / `worktree:<path>`: a `git worktree` of the repository the worker runs in
//!   (its working directory), on the branch `troupe/<task>`, at `<path>` (relative to the
//!   repository's top) or `<troupe home>/worktrees/<board>/<task>`. A clean worktree is removed
//!   when the task is archived; one with changes is kept, and a comment on the task says where.
//!
//! The directory becomes the working directory and path-check root of the worker's session and
//! of the subagents it delegates to (a session hook binds each of them as it opens).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_actors::hooks::Hook;
use troupe_kanban::domain::{BoardSlug, Task, Workspace};
use troupe_kanban::workspace::Workspaces;
use troupe_tools::builtin::Builtins;

/// Reads a workspace as `troupe kanban create --workspace` and the HTTP API take it: `scratch`,
/// `dir:/abs/path`, `worktree` or `worktree:<path>`.
pub fn parse_workspace(text: &str) -> Result<Workspace, String> {
    let text = text.trim();
    let (kind, path) = match text.split_once(':') {
        Some((kind, path)) => (kind.trim(), Some(path.trim().to_string())),
        None => (text, None),
    };
    match (kind, path) {
        ("scratch", None) => Ok(Workspace::Scratch),
        ("worktree", None) => Ok(Workspace::Worktree(None)),
        ("worktree", Some(path)) if !path.is_empty() => Ok(Workspace::Worktree(Some(path))),
        ("dir", Some(path)) => Workspace::dir(path).map_err(|e| e.to_string()),
        _ => Err(format!(
            "{text:?} is not a workspace; write scratch, dir:/absolute/path, worktree or worktree:<path>"
        )),
    }
}

/// The scratch directory of a task.
pub fn scratch_dir(home: &Path, board: &BoardSlug, task: &str) -> PathBuf {
    home.join("workspaces").join(board.as_str()).join(task)
}

/// The branch a task's worktree is on.
pub fn worktree_branch(task: &str) -> String {
    format!("troupe/{task}")
}

/// The runtime's workspaces: see the module doc.
pub struct TaskWorkspaces {
    builtins: Arc<Builtins>,
    home: PathBuf,
    /// `git worktree add` runs one at a time: it updates the repository's shared files.
    git: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for TaskWorkspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskWorkspaces")
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

impl TaskWorkspaces {
    /// Workspaces under `home`, binding sessions through `builtins`; worktrees come from the
    /// repository the built-in tools start in.
    pub fn new(builtins: Arc<Builtins>, home: PathBuf) -> TaskWorkspaces {
        TaskWorkspaces {
            builtins,
            home,
            git: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

impl Workspaces for TaskWorkspaces {
    fn prepare(
        &self,
        board: &BoardSlug,
        task: &Task,
    ) -> BoxFuture<'static, Result<PathBuf, String>> {
        let home = self.home.clone();
        let repo_dir = self.builtins.config().default_cwd.clone();
        let git = Arc::clone(&self.git);
        let board = board.clone();
        let task_id = task.id.to_string();
        let workspace = task.workspace.clone();
        Box::pin(async move {
            match workspace {
                Workspace::Scratch => {
                    let dir = scratch_dir(&home, &board, &task_id);
                    tokio::fs::create_dir_all(&dir).await.map_err(|e| {
                        format!("cannot create the scratch directory {}: {e}", dir.display())
                    })?;
                    Ok(dir)
                }
                Workspace::Dir(path) => {
                    let dir = PathBuf::from(&path);
                    if dir.is_dir() {
                        Ok(dir)
                    } else {
                        Err(format!(
                            "the directory {path} does not exist; create it, or change the task's workspace (scratch, dir:/abs/path, worktree) and unblock it"
                        ))
                    }
                }
                Workspace::Worktree(path) => {
                    let _one_at_a_time = git.lock().await;
                    add_worktree(&home, &repo_dir, &board, &task_id, path.as_deref()).await
                }
            }
        })
    }

    fn session_hook(&self, dir: &Path, profile: &str) -> Arc<dyn Hook> {
        Arc::new(WorkspaceHook {
            builtins: Arc::clone(&self.builtins),
            dir: dir.to_path_buf(),
            profile: profile.to_string(),
        })
    }
}

/// Binds every session it runs in to one workspace, and to its profile's backend if the
/// profile has one.
struct WorkspaceHook {
    builtins: Arc<Builtins>,
    dir: PathBuf,
    profile: String,
}

impl Hook for WorkspaceHook {
    fn name(&self) -> &str {
        "workspace"
    }

    fn on_session_start(&self, session_id: &str, _agent_path: &[String]) {
        self.builtins
            .set_session_workspace(session_id, self.dir.clone());
        self.builtins.set_session_backend(session_id, &self.profile);
    }

    fn on_session_end(&self, session_id: &str, _agent_path: &[String], _reason: &str) {
        self.builtins.clear_session_workspace(session_id);
    }
}

/// Runs git; its stdout on success, else a message with its stderr.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let output = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run git ({e}); install git to use worktree workspaces"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    }
}

/// The worktree's directory for a task.
fn worktree_dir(
    home: &Path,
    top: &Path,
    board: &BoardSlug,
    task: &str,
    path: Option<&str>,
) -> PathBuf {
    match path {
        Some(path) if Path::new(path).is_absolute() => PathBuf::from(path),
        Some(path) => top.join(path),
        None => home
            .join(troupe_tools::home::WORKTREES)
            .join(board.as_str())
            .join(task),
    }
}

async fn add_worktree(
    home: &Path,
    repo_dir: &Path,
    board: &BoardSlug,
    task: &str,
    path: Option<&str>,
) -> Result<PathBuf, String> {
    let top = git(repo_dir, &["rev-parse", "--show-toplevel"])
        .await
        .map_err(|_| {
            format!(
                "the worker runs in {}, which is not inside a git repository, so no worktree can be made; run the worker from a repository (or set terminal.cwd to one), or give the task a scratch or dir: workspace",
                repo_dir.display()
            )
        })?;
    let top = PathBuf::from(top);
    let dir = worktree_dir(home, &top, board, task, path);
    let branch = worktree_branch(task);
    if dir.exists() {
        // A later run of the same task reuses its worktree.
        return match git(&dir, &["rev-parse", "--abbrev-ref", "HEAD"]).await {
            Ok(head) if head == branch => Ok(dir),
            _ => Err(format!(
                "{} already exists and is not this task's worktree (branch {branch}); remove it, or give the task another path with worktree:<path>",
                dir.display()
            )),
        };
    }
    let exists = git(
        &top,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .await
    .is_ok();
    if exists {
        return Err(format!(
            "the branch {branch} already exists in {}; delete it (git branch -D {branch}) or merge it, then unblock the task",
            top.display()
        ));
    }
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let shown = dir.to_string_lossy().into_owned();
    git(
        &top,
        &["worktree", "add", "--quiet", "-b", &branch, &shown, "HEAD"],
    )
    .await
    .map_err(|e| {
        format!(
            "git could not add a worktree at {shown} on branch {branch} in {}: {e}",
            top.display()
        )
    })?;
    Ok(dir)
}

/// Cleans up an archived task's workspace: a scratch directory is removed, a clean worktree is
/// removed (its branch stays), a worktree with changes is kept. Returns a note for the task's
/// events when something was kept.
pub async fn cleanup_workspace(home: &Path, board: &BoardSlug, task: &Task) -> Option<String> {
    let id = task.id.to_string();
    match &task.workspace {
        Workspace::Scratch => {
            let dir = scratch_dir(home, board, &id);
            if dir.is_dir()
                && let Err(e) = tokio::fs::remove_dir_all(&dir).await
            {
                return Some(format!(
                    "the scratch directory {} could not be removed: {e}",
                    dir.display()
                ));
            }
            None
        }
        Workspace::Dir(_) => None,
        Workspace::Worktree(path) => {
            // A relative path was taken from the worker's repository; look for it from here.
            let here = std::env::current_dir().unwrap_or_default();
            let top = git(&here, &["rev-parse", "--show-toplevel"])
                .await
                .map(PathBuf::from)
                .unwrap_or(here);
            let dir = worktree_dir(home, &top, board, &id, path.as_deref());
            if !dir.is_dir() {
                return None;
            }
            let status = git(&dir, &["status", "--porcelain"]).await;
            match status {
                Ok(changes) if changes.is_empty() => {
                    let common = git(
                        &dir,
                        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
                    )
                    .await;
                    let repo = common
                        .ok()
                        .map(PathBuf::from)
                        .and_then(|c| c.parent().map(Path::to_path_buf))
                        .unwrap_or(top);
                    let shown = dir.to_string_lossy().into_owned();
                    match git(&repo, &["worktree", "remove", &shown]).await {
                        Ok(_) => None,
                        Err(e) => Some(format!(
                            "the worktree {shown} was kept: git could not remove it ({e})"
                        )),
                    }
                }
                Ok(_) => Some(format!(
                    "the worktree {} (branch {}) was kept: it has uncommitted changes; commit or discard them, then remove it with git worktree remove",
                    dir.display(),
                    worktree_branch(&id)
                )),
                Err(e) => Some(format!("the worktree {} was kept: {e}", dir.display())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspaces_are_parsed() {
        assert_eq!(parse_workspace("scratch").unwrap(), Workspace::Scratch);
        assert_eq!(
            parse_workspace("worktree").unwrap(),
            Workspace::Worktree(None)
        );
        assert_eq!(
            parse_workspace("worktree:trees/a").unwrap(),
            Workspace::Worktree(Some("trees/a".into()))
        );
        assert_eq!(
            parse_workspace("dir:/tmp").unwrap(),
            Workspace::Dir("/tmp".into())
        );
        assert!(parse_workspace("dir:relative").is_err());
        assert!(parse_workspace("cloud").unwrap_err().contains("scratch"));
    }
}
