//! What the docker and ssh backends share. A command there is started by a local client
//! (`docker exec`, `ssh`) that cannot signal what it started, so the command runs under a small
//! wrapper that makes it lead a session of its own inside the backend and writes its group id
//! to a file; [`RemoteGroup`] signals the group with a `kill` run in the backend that reads
//! that file (one round trip per signal). Stopping the local client alone would leave the command running.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use nix::sys::signal::Signal;
use tokio::io::AsyncWrite;

use super::super::files::ShellRunner;
use super::super::process_group::ProcessGroup;
use super::{SpawnRequest, SpawnedCommand, wire_output};

/// Where the wrapper writes group ids inside the backend; a backend shared with others (a
/// remote host) uses a directory of its own below it.
pub(crate) const GROUPS_DIR: &str = "/tmp/.troupe-groups";

/// Variables that describe this machine, not the backend: a container or a remote host has
/// its own.
const HOST_ONLY_VARS: &[&str] = &[
    "HOME", "PATH", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "MAIL", "HOSTNAME",
];

/// `$1` the group file, `$2` the directory, `$3` the script. The script leads a session of
/// its own (`setsid` in a background job keeps its pid, so `$!` is the group id) and keeps the
/// wrapper's stdin (a background job would otherwise read /dev/null).
const WRAPPER: &str = r#"gf=$1; dir=$2; script=$3
mkdir -p "${gf%/*}" 2>/dev/null
cd -- "$dir" 2>/dev/null || { echo 0 > "$gf"; echo "troupe: the directory $dir does not exist in the backend" >&2; exit 126; }
if command -v bash >/dev/null 2>&1; then sh=bash; else sh=sh; fi
exec 3<&0
setsid "$sh" -c "$script" <&3 3<&- &
p=$!
exec 3<&-
echo "$p" > "$gf"
wait "$p""#;

/// A backend reached through a local client program.
pub(crate) trait RemoteShell: Send + Sync + 'static {
    /// The directory inside the backend for this backend's group files.
    fn groups_dir(&self) -> String {
        GROUPS_DIR.to_string()
    }

    /// The local command that runs `sh -c script sh args...` inside the backend with `env`
    /// set; its stdin is passed on when `stdin` is true.
    fn command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
        stdin: bool,
    ) -> io::Result<std::process::Command>;

    /// Like [`RemoteShell::command`] with stdin passed on, asking the backend for a terminal
    /// of its own (`ssh -tt`, `docker exec -t`); the local client runs on a local pty.
    fn tty_command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> io::Result<std::process::Command> {
        let _ = (script, args, env);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this backend cannot give a command a terminal",
        ))
    }
}

/// A helper script runs through the same client as a command, to completion.
impl<T: RemoteShell + ?Sized> ShellRunner for T {
    fn run_script(
        &self,
        script: &str,
        args: &[&str],
        stdin: &[u8],
    ) -> io::Result<std::process::Output> {
        let command = self.command(script, args, &[], !stdin.is_empty())?;
        run_to_end(command, stdin)
    }
}

/// The environment a command gets inside a backend: the request's, without what only makes
/// sense on this machine.
pub(crate) fn backend_env(env: &[(String, String)]) -> Vec<(String, String)> {
    env.iter()
        .filter(|(k, _)| {
            !HOST_ONLY_VARS.contains(&k.as_str())
                && !k.starts_with("XDG_")
                && !k.starts_with("SSH_")
        })
        .cloned()
        .collect()
}

/// Runs a helper script to completion through `shell`'s client.
pub(crate) fn run_to_end(
    mut command: std::process::Command,
    stdin: &[u8],
) -> io::Result<std::process::Output> {
    command
        .stdin(if stdin.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    if let Some(mut input) = child.stdin.take() {
        // A script that stops reading early closes the pipe; its status tells what happened.
        let _ = input.write_all(stdin);
    }
    child.wait_with_output()
}

/// Starts `request` inside the backend behind `shell`.
pub(crate) fn spawn_remote(
    shell: Arc<dyn RemoteShell>,
    request: SpawnRequest,
) -> io::Result<SpawnedCommand> {
    let group_file = format!("{}/{}", shell.groups_dir(), uuid::Uuid::new_v4().simple());
    let cwd = request.cwd.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the working directory is not valid UTF-8",
        )
    })?;
    let env = backend_env(&request.env);
    let args = [group_file.as_str(), cwd, &request.script];
    let (mut child, output, stderr, stdin) = match request.pty {
        Some(size) => {
            let std_command = shell.tty_command(WRAPPER, &args, &env)?;
            let pair = super::super::pty::open(size)?;
            let master = super::super::pty::PtyMaster::new(pair.master)?;
            let mut command = tokio::process::Command::from(std_command);
            command.kill_on_drop(false);
            super::attach_slave(&mut command, &pair.slave)?;
            // SAFETY: setsid and the ioctl are async-signal-safe.
            unsafe {
                command.pre_exec(|| {
                    if libc::setsid() == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    super::super::pty::take_controlling_terminal()
                });
            }
            let child = command.spawn()?;
            drop(command);
            drop(pair.slave);
            let output: Box<dyn tokio::io::AsyncRead + Send + Unpin> = Box::new(master.reader());
            let stdin: Box<dyn AsyncWrite + Send + Unpin> = Box::new(master.writer());
            (child, output, None, Some(stdin))
        }
        None => {
            let std_command = shell.command(WRAPPER, &args, &env, request.stdin)?;
            let mut command = tokio::process::Command::from(std_command);
            command
                .stdin(if request.stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .kill_on_drop(false);
            let (output, stderr) = wire_output(&mut command, request.split_stderr)?;
            let mut child = command.spawn()?;
            drop(command);
            let stdin = child
                .stdin
                .take()
                .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>);
            (child, output, stderr, stdin)
        }
    };
    let pid = child.id();
    let group = Arc::new(RemoteGroup { shell, group_file });
    let exit = async move {
        match child.wait().await {
            Ok(status) => status.code().unwrap_or(-1),
            Err(err) => {
                tracing::warn!(%err, "could not wait for a backend client");
                -1
            }
        }
    }
    .boxed();
    Ok(SpawnedCommand {
        pid,
        output,
        stderr,
        stdin,
        exit,
        group,
    })
}

/// A command's process group inside a backend.
pub(crate) struct RemoteGroup {
    shell: Arc<dyn RemoteShell>,
    group_file: String,
}

impl RemoteGroup {
    /// Sends `signal` (a name, or `0` to probe) to the group in one round trip: the group file
    /// is read and the group signalled by the same script. A file not written yet (the command
    /// has just started) is waited for, briefly; `0` in it means the command never started.
    fn kill(&self, signal: &str) -> bool {
        const SCRIPT: &str = r#"[ -s "$1" ] || exit 3
p=$(cat -- "$1"); [ "$p" -gt 1 ] 2>/dev/null || exit 4
kill -s "$2" -- "-$p" 2>/dev/null"#;
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match self
                .shell
                .run_script(SCRIPT, &[&self.group_file, signal], &[])
            {
                Ok(out) if out.status.code() == Some(3) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(out) => return out.status.success(),
                Err(err) => {
                    tracing::warn!(%err, "could not reach the backend to signal a command");
                    return false;
                }
            }
        }
    }
}

impl ProcessGroup for RemoteGroup {
    fn signal(&self, signal: Signal) -> bool {
        let name = signal.as_str().trim_start_matches("SIG");
        self.kill(name)
    }

    fn alive(&self) -> bool {
        self.kill("0")
    }
}

/// Quotes `text` for a POSIX shell.
pub(crate) fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-=:,@%+".contains(&b))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A private directory on this machine that a backend mounts at the same path: the scratch
/// directories of `execute_code` runs go there.
pub(crate) fn host_scratch(kind: &str) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!(
        "troupe-{kind}-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Removes a directory made by [`host_scratch`].
pub(crate) fn remove_scratch(dir: &Path) {
    if let Err(err) = std::fs::remove_dir_all(dir)
        && err.kind() != io::ErrorKind::NotFound
    {
        tracing::debug!(%err, dir = %dir.display(), "could not remove a backend scratch directory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_a_shell() {
        for text in ["plain", "", "a b", "it's", "$(id)", "`x`", "a\nb", "\\"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {}", shell_quote(text)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), text);
        }
    }

    #[test]
    fn host_variables_stay_home() {
        let env = vec![
            ("HOME".to_string(), "/home/me".to_string()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            ("XDG_RUNTIME_DIR".to_string(), "/run/user/1".to_string()),
        ];
        assert_eq!(
            backend_env(&env),
            vec![("LANG".to_string(), "C.UTF-8".to_string())]
        );
    }
}
