//! The `execute_code` tool: runs a Python script that calls troupe tools. Each run gets a
//! private staging directory holding the script and the generated `troupe_tools` module, a Unix
//! socket for the module to call back on (see `code_rpc`), and a child process in its own
//! process group with a scrubbed environment. Limits: run time (SIGTERM, then SIGKILL after a
//! grace), stdout and stderr kept head and tail, and a budget of tool calls.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::Builtins;
use super::args::kind;
use super::capture::{HeadTail, Utf8Stream, thousands};
pub use super::code_rpc::ALLOWED_IN_SCRIPTS;
use super::code_rpc::{RpcState, serve};
use super::code_stub::{MODULE_NAME, STUB_SOURCE};
use super::process_group::{KillOnDrop, LocalGroup, ProcessGroup, exit_code_of, terminate};
use super::redact::redact;
use super::sandbox_env::code_env;
use crate::tool::{CallContext, ToolResult};

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
    fn create() -> std::io::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("troupe_code_{}", uuid::Uuid::new_v4().simple()));
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
async fn capture(mut stream: impl AsyncRead + Unpin, cap: usize) -> (String, usize) {
    let mut decoder = Utf8Stream::default();
    let mut kept = HeadTail::new(cap);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => kept.push(&decoder.push(&buf[..n])),
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
    (done.text, done.omitted)
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
                kind(other)
            ));
        }
    };
    let config = &builtins.config.code;
    let started = Instant::now();
    let staging = match Staging::create() {
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
    let stop_server = CancellationToken::new();
    let server = tokio::spawn(serve(listener, state.clone(), stop_server.clone()));
    let _stop_on_exit = stop_server.clone().drop_guard();

    let mut env = code_env(std::env::vars(), &config.env_passthrough);
    let python_path = match env.iter().find(|(k, _)| k == "PYTHONPATH") {
        Some((_, existing)) if !existing.is_empty() => {
            format!("{}:{existing}", staging.0.display())
        }
        _ => staging.0.display().to_string(),
    };
    env.retain(|(k, _)| k != "PYTHONPATH");
    env.extend([
        ("PYTHONPATH".to_string(), python_path),
        (
            "TROUPE_RPC_SOCKET".to_string(),
            socket_path.display().to_string(),
        ),
        ("TROUPE_RPC_TOKEN".to_string(), token),
        ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
        ("PYTHONIOENCODING".to_string(), "utf-8".to_string()),
        ("PYTHONUTF8".to_string(), "1".to_string()),
        ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
    ]);
    let cwd = match config.mode {
        CodeMode::Project => super::terminal::existing_dir(&builtins.session_cwd(&ctx.session_id)),
        CodeMode::Strict => staging.0.clone(),
    };
    let python = interpreter(config.mode, &config.python);
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(&script)
        .current_dir(&cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            return refuse(format!(
                "Could not start the Python interpreter '{}': {e}. Install python3 or set the interpreter in the code_execution settings.",
                python.display()
            ));
        }
    };
    drop(command);
    let group: Arc<dyn ProcessGroup> = Arc::new(LocalGroup {
        pgid: child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0),
    });
    let mut guard = KillOnDrop::new(group.clone());
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (out_cap, err_cap) = (config.max_stdout_bytes, config.max_stderr_bytes);
    let stdout_task = tokio::spawn(async move {
        match stdout {
            Some(s) => capture(s, out_cap).await,
            None => (String::new(), 0),
        }
    });
    let stderr_task = tokio::spawn(async move {
        match stderr {
            Some(s) => capture(s, err_cap).await,
            None => (String::new(), 0),
        }
    });

    enum End {
        Exited(i32),
        TimedOut,
        Interrupted,
    }
    let end = tokio::select! {
        status = child.wait() => End::Exited(status.map(exit_code_of).unwrap_or(-1)),
        _ = tokio::time::sleep(config.timeout) => End::TimedOut,
        _ = ctx.cancel.cancelled() => End::Interrupted,
    };
    if !matches!(end, End::Exited(_)) || group.alive() {
        terminate(group.as_ref(), config.kill_grace).await;
    }
    let _ = child.wait().await;
    guard.disarm();
    stop_server.cancel();
    let _ = server.await;
    // Readers end once every writer of the pipes is gone; a grandchild that escaped the group
    // could hold them open, so do not wait for ever.
    let grab = |task: tokio::task::JoinHandle<(String, usize)>| async move {
        match tokio::time::timeout(std::time::Duration::from_secs(3), task).await {
            Ok(Ok(v)) => v,
            _ => (String::new(), 0),
        }
    };
    let (stdout_text, stdout_cut) = grab(stdout_task).await;
    let (stderr_text, _) = grab(stderr_task).await;
    let calls = state.calls_made.load(Ordering::Acquire);
    let duration = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
    drop(staging);

    let mut output = stdout_text;
    let (status, error) = match end {
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
