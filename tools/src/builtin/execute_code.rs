//! The `execute_code` tool: runs a Python script that calls troupe tools. Each run gets a
//! private staging directory holding the script and the generated `troupe_tools` module, a Unix
//! socket for the module to call back on (see `code_rpc`), and a child process in its own
//! process group with a scrubbed environment. Limits: run time (SIGTERM, then SIGKILL after a
//! grace), stdout and stderr kept head and tail, and a budget of tool calls.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::Builtins;
use super::backend::SpawnRequest;
use super::backend::remote::shell_quote;
use super::capture::{HeadTail, Utf8Stream, thousands};
pub use super::code_rpc::ALLOWED_IN_SCRIPTS;
use super::code_rpc::{RpcState, serve};
use super::code_stub::{MODULE_NAME, STUB_SOURCE};
use super::process_group::{KillOnDrop, ProcessGroup, outlives, terminate};
use super::redact::redact;
use super::sandbox_env::{code_env, process_vars};
use crate::text::json_kind;
use crate::tool::{CallContext, ToolResult};

/// How long a script's group may take to finish exiting before what remains counts as left
/// running.
const EXIT_SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Where scripts run and with which Python.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeMode {
    /// In the session's working directory, with the active virtualenv's (or conda env's)
    /// python when there is one; relative paths and project imports work as in `terminal`.
    Project,
    /// In the run's scratch directory, always with the configured python.
    Strict,
}

impl CodeMode {
    /// Reads `project` or `strict` (case-insensitive); anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "project" => Some(CodeMode::Project),
            "strict" => Some(CodeMode::Strict),
            _ => None,
        }
    }
}

/// The run's private directory, removed when the run ends.
struct Staging(PathBuf);

impl Staging {
    /// A new directory below `root` (the system's temporary directory when `None`).
    fn create(root: Option<PathBuf>) -> std::io::Result<Self> {
        let dir = root
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("troupe_code_{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Staging(dir))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(err) = std::fs::remove_dir_all(&self.0) {
            tracing::debug!(%err, dir = %self.0.display(), "could not remove an execute_code staging directory");
        }
    }
}

/// Runs a backend's release of a scratch directory when the run ends, however it ends.
struct Release(Option<Box<dyn FnOnce() + Send>>);

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            release();
        }
    }
}

/// An executable file at `path`.
fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The interpreter for a run: in project mode the active virtualenv's or conda env's python,
/// else the configured one.
fn interpreter(mode: CodeMode, configured: &Path) -> PathBuf {
    if mode == CodeMode::Project {
        for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
            if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                for name in ["bin/python3", "bin/python"] {
                    let candidate = PathBuf::from(&root).join(name);
                    if executable(&candidate) {
                        return candidate;
                    }
                }
            }
        }
    }
    configured.to_path_buf()
}

/// Reads a stream into a head-and-tail capture of `cap` characters.
/// What a reader kept of one stream.
#[derive(Debug, Default)]
struct Captured {
    /// The text, head and tail when it was long.
    text: String,
    /// Characters cut from the middle.
    omitted: usize,
    /// The reader gave up before end-of-file (something held the stream open).
    cut_short: bool,
}

/// Reads a stream to its end, or until `give_up`, keeping its head and tail within `cap`.
async fn capture(
    stream: Option<impl AsyncRead + Unpin>,
    cap: usize,
    give_up: CancellationToken,
) -> Captured {
    let Some(mut stream) = stream else {
        return Captured::default();
    };
    let mut decoder = Utf8Stream::default();
    let mut kept = HeadTail::new(cap);
    let mut buf = vec![0u8; 16 * 1024];
    let mut cut_short = false;
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => kept.push(&decoder.push(&buf[..n])),
            },
            _ = give_up.cancelled() => {
                cut_short = true;
                break;
            }
        }
    }
    kept.push(&decoder.finish());
    let done = kept.finish(|omitted, total| {
        format!(
            "\n\n... [{} of {} characters cut from the middle] ...\n\n",
            thousands(omitted),
            thousands(total)
        )
    });
    Captured {
        text: done.text,
        omitted: done.omitted,
        cut_short,
    }
}

fn refuse(message: impl Into<String>) -> ToolResult {
    ToolResult::error_json(
        json!({"status": "error", "error": message.into(), "tool_calls_made": 0, "duration_seconds": 0.0}),
    )
}

/// Runs the `execute_code` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let code = match args.get("code") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) if args.contains_key("command") => {
            return refuse(
                "execute_code takes Python source in 'code', not a 'command'. For a shell command use terminal(command=...); for Python send execute_code(code=...).",
            );
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return refuse(
                "'code' is empty. Send the Python source to run in 'code'; for shell commands use terminal(command=...).",
            );
        }
        Some(other) => {
            return refuse(format!(
                "'code' must be Python source as a string, not {}. Send execute_code(code=\"...\").",
                json_kind(other)
            ));
        }
    };
    let config = &builtins.config.code;
    let started = Instant::now();
    let backend = builtins.backend_of(&ctx.session_id);
    let staging = match Staging::create(backend.scratch_root()) {
        Ok(s) => s,
        Err(e) => {
            return refuse(format!(
                "Could not create a scratch directory for the script: {e}."
            ));
        }
    };
    let script = staging.0.join("script.py");
    let written = std::fs::write(staging.0.join(format!("{MODULE_NAME}.py")), STUB_SOURCE)
        .and_then(|_| std::fs::write(&script, &code));
    if let Err(e) = written {
        return refuse(format!(
            "Could not write the script to its scratch directory: {e}."
        ));
    }
    let socket_path = staging.0.join("rpc.sock");
    let listener = match tokio::net::UnixListener::bind(&socket_path) {
        Ok(l) => l,
        Err(e) => {
            return refuse(format!(
                "Could not open the tool socket for the script: {e}."
            ));
        }
    };
    let _ = std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o600));
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let state = Arc::new(RpcState {
        token: token.clone(),
        parent: ctx.clone(),
        calls_made: AtomicUsize::new(0),
        max_calls: config.max_tool_calls,
    });
    // The backend reaches the directory (a mount, an upload) and the socket (a forward).
    let exposed = {
        let (backend, dir, socket) = (backend.clone(), staging.0.clone(), socket_path.clone());
        tokio::task::spawn_blocking(move || backend.expose_scratch(&dir, &socket)).await
    };
    let exposed = match exposed {
        Ok(Ok(exposed)) => exposed,
        Ok(Err(e)) => {
            return refuse(format!(
                "Could not give the {} backend the script and its tool socket: {e}.",
                backend.name()
            ));
        }
        Err(e) => return refuse(format!("Preparing the script failed unexpectedly: {e}.")),
    };
    let _release = Release(exposed.release);
    let stop_server = CancellationToken::new();
    let server = tokio::spawn(serve(listener, state.clone(), stop_server.clone()));
    let _stop_on_exit = stop_server.clone().drop_guard();

    // What the person lets through to commands (`terminal.env_passthrough`) reaches scripts
    // too, with what `code_execution.env_passthrough` adds.
    let passthrough: Vec<String> = builtins
        .config()
        .terminal
        .env_passthrough
        .iter()
        .chain(&config.env_passthrough)
        .cloned()
        .collect();
    let mut env = code_env(process_vars(), &passthrough, &builtins.config().secrets);
    let python_path = match env.iter().find(|(k, _)| k == "PYTHONPATH") {
        Some((_, existing)) if !existing.is_empty() => {
            format!("{}:{existing}", exposed.dir.display())
        }
        _ => exposed.dir.display().to_string(),
    };
    env.retain(|(k, _)| k != "PYTHONPATH");
    env.extend([
        ("PYTHONPATH".to_string(), python_path),
        (
            "TROUPE_RPC_SOCKET".to_string(),
            exposed.socket.display().to_string(),
        ),
        ("TROUPE_RPC_TOKEN".to_string(), token),
        ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
        ("PYTHONIOENCODING".to_string(), "utf-8".to_string()),
        ("PYTHONUTF8".to_string(), "1".to_string()),
        ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
    ]);
    let session_dir = builtins.session_cwd(&ctx.session_id);
    let cwd = match config.mode {
        CodeMode::Project if backend.shares_host_paths() => {
            super::terminal::existing_dir(&session_dir)
        }
        CodeMode::Project => session_dir,
        CodeMode::Strict => exposed.dir.clone(),
    };
    // A virtualenv on this machine means nothing inside a container or on a remote host.
    let python = if backend.shares_host_paths() {
        interpreter(config.mode, &config.python)
    } else {
        config.python.clone()
    };
    let run = format!(
        "exec {} {}",
        shell_quote(&python.to_string_lossy()),
        shell_quote(&exposed.dir.join("script.py").to_string_lossy())
    );
    // The scratch directory is the script's own: writable under a boundary too.
    let mut workspace = builtins.writable_roots(&ctx.session_id);
    workspace.push(exposed.dir.clone());
    let spawned = match backend.spawn(SpawnRequest {
        split_stderr: true,
        workspace,
        ..SpawnRequest::new(run, cwd, env)
    }) {
        Ok(spawned) => spawned,
        Err(e) => {
            return refuse(format!(
                "Could not start the Python interpreter '{}' on the {} backend: {e}. Install python3 or set the interpreter in the code_execution settings.",
                python.display(),
                backend.name()
            ));
        }
    };
    let group: Arc<dyn ProcessGroup> = spawned.group.clone();
    let mut guard = KillOnDrop::new(group.clone());
    let stdout = Some(spawned.output);
    let stderr = spawned.stderr;
    let (out_cap, err_cap) = (config.max_stdout_bytes, config.max_stderr_bytes);
    // Readers end at end-of-file, or when told to give up and keep what they have.
    let give_up = CancellationToken::new();
    let stdout_task = tokio::spawn(capture(stdout, out_cap, give_up.clone()));
    let stderr_task = tokio::spawn(capture(stderr, err_cap, give_up.clone()));
    let mut exit = spawned.exit;

    enum End {
        Exited(i32),
        TimedOut,
        Interrupted,
    }
    let end = tokio::select! {
        code = &mut exit => End::Exited(code),
        _ = tokio::time::sleep(config.timeout) => End::TimedOut,
        _ = ctx.cancel.cancelled() => End::Interrupted,
    };
    // Processes the script started and left running (in its group or escaped from it) are
    // what keeps its output open; they end with the script.
    let left_running = matches!(end, End::Exited(_)) && outlives(group.as_ref(), EXIT_SETTLE).await;
    if !matches!(end, End::Exited(_)) || left_running {
        terminate(group.as_ref(), config.kill_grace).await;
    }
    if !matches!(end, End::Exited(_)) {
        let _ = exit.await;
    }
    guard.disarm();
    stop_server.cancel();
    let _ = server.await;
    // Whatever still holds the pipes open (nothing should, once the group is gone) does not
    // hold the result hostage: after a short wait the readers keep what they have.
    let give_up_later = {
        let give_up = give_up.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            give_up.cancel();
        })
    };
    let grab =
        |task: tokio::task::JoinHandle<Captured>| async move { task.await.unwrap_or_default() };
    let stdout_got = grab(stdout_task).await;
    let stderr_got = grab(stderr_task).await;
    give_up_later.abort();
    let held_open = stdout_got.cut_short || stderr_got.cut_short;
    let (stdout_text, stdout_cut) = (stdout_got.text, stdout_got.omitted);
    let stderr_text = stderr_got.text;
    let calls = state.calls_made.load(Ordering::Acquire);
    let duration = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
    drop(staging);

    let mut output = stdout_text;
    let (status, error) = match end {
        End::Exited(0) if left_running || held_open => {
            let note = if held_open {
                "The script exited, but processes it started kept its output open; they were stopped and the output captured until then is shown."
            } else {
                "The script exited, but left processes running; they were stopped."
            };
            output.push_str(&format!("\n\n[{note}]"));
            ("incomplete", Some(note.to_string()))
        }
        End::Exited(0) => ("success", None),
        End::Exited(code) => {
            if !stderr_text.is_empty() {
                output.push_str("\n--- stderr ---\n");
                output.push_str(&stderr_text);
            }
            let last = stderr_text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string);
            (
                "error",
                Some(last.unwrap_or_else(|| format!("The script exited with code {code}."))),
            )
        }
        End::TimedOut => {
            let msg = format!(
                "The script ran longer than {}s and was stopped.",
                config.timeout.as_secs()
            );
            output.push_str(&format!("\n\n[{msg}]"));
            ("timeout", Some(msg))
        }
        End::Interrupted => {
            output.push_str("\n[execution interrupted: the call was stopped]");
            ("interrupted", None)
        }
    };
    let mut result = json!({
        "status": status,
        "output": redact(&output),
        "tool_calls_made": calls,
        "duration_seconds": duration,
    });
    if let Some(e) = error {
        result["error"] = json!(redact(&e));
    }
    if stdout_cut > 0 {
        result["stdout_truncated"] = json!(true);
        result["warning"] = json!(
            "The script printed more than the output cap; its start and end are shown. Print less, or write the data to a file and page it with read_file."
        );
    }
    if status == "success" || status == "interrupted" {
        ToolResult::json(result)
    } else {
        ToolResult::error_json(result)
    }
}
