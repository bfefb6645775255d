//! The `terminal` tool: one shell command in the session's working directory, in a process
//! group of its own, with a timeout, a stop, and an output cap that keeps the head and the tail.
//! `cd` persists per session (the script reports its final directory after the command);
//! `background=true` hands the command to the process registry instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use super::Builtins;
use super::args::{flag, optional_int, optional_str, required_str};
use super::backend::{CommandReach as Reach, SpawnRequest, TerminalBackend};
use super::capture::{Captured, HeadTail, Utf8Stream, thousands};
use super::danger::CommandVerdict;
use super::exit_codes::{EXIT_INTERRUPTED, EXIT_TIMEOUT, exit_code_meaning};
use super::paths::expand_home;
use super::process_group::{KillOnDrop, terminate};
use super::process_registry::StartOptions;
use super::pty::PtySize;
use super::redact::redact;
use super::sandbox_env::{process_vars, terminal_env};
use crate::tool::{CallContext, ToolResult};

/// How long output may stay silent after the shell exited before we stop waiting for it (a
/// grandchild that escaped the group can hold the pipe open forever).
const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// How a foreground run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// The shell exited by itself.
    Exited,
    /// The timeout fired and the group was stopped.
    TimedOut,
    /// The call was cancelled and the group was stopped.
    Interrupted,
}

/// What a foreground run produced.
#[derive(Debug)]
pub(crate) struct RunOutcome {
    pub(crate) output: Captured,
    pub(crate) exit_code: i32,
    pub(crate) end: RunEnd,
    /// The directory the script ended in, when it got as far as reporting it.
    pub(crate) cwd: Option<PathBuf>,
    /// Processes the command left running after it exited had to be stopped.
    pub(crate) stopped_leftovers: bool,
}

/// The paths an approved command names as what it writes or removes, as the boundary must
/// grant them: an existing file itself; an existing directory and the folder holding it
/// (removing or renaming an entry is a write to its folder); for a path not there yet, the
/// folder it would be made in.
fn granted_targets(command: &str, base: &Path) -> Vec<PathBuf> {
    let mut granted = vec![];
    for target in super::danger::write_targets(command) {
        let path = expand_home(&target);
        let path = if path.is_absolute() {
            path
        } else {
            base.join(path)
        };
        let mut add = |p: &Path| {
            if !granted.iter().any(|g: &PathBuf| g == p) {
                granted.push(p.to_path_buf());
            }
        };
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                add(&path);
                if let Some(parent) = path.parent() {
                    add(parent);
                }
            }
            Ok(_) => add(&path),
            Err(_) => {
                if let Some(parent) = path.parent().filter(|p| p.is_dir()) {
                    add(parent);
                }
            }
        }
    }
    granted
}

/// Reads `writable`: existing paths (`~` expanded, relative ones against `base`), made
/// canonical; an error says what to send instead.
fn writable_paths(args: &Map<String, Value>, base: &Path) -> Result<Vec<PathBuf>, String> {
    let items = match args.get("writable") {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(items)) => items,
        Some(Value::String(one)) => {
            return writable_paths(
                &Map::from_iter([("writable".to_string(), json!([one]))]),
                base,
            );
        }
        Some(_) => {
            return Err("'writable' must be a list of paths, for example [\"/srv/out\"].".into());
        }
    };
    let mut paths = vec![];
    for item in items {
        let Some(text) = item.as_str().filter(|t| !t.trim().is_empty()) else {
            return Err(format!(
                "'writable' holds {item}, which is not a path; send a list of paths such as [\"/srv/out\"]."
            ));
        };
        let path = expand_home(text.trim());
        let path = if path.is_absolute() {
            path
        } else {
            base.join(path)
        };
        match std::fs::canonicalize(&path) {
            Ok(real) => paths.push(real),
            Err(_) => {
                return Err(format!(
                    "'writable' names {}, which does not exist. Ask for an existing directory (its parent, to create it).",
                    path.display()
                ));
            }
        }
    }
    Ok(paths)
}

/// Limits of one foreground run.
#[derive(Debug, Clone)]
pub(crate) struct RunLimits {
    pub(crate) timeout: Duration,
    pub(crate) max_output_chars: usize,
    pub(crate) kill_grace: Duration,
}

/// A foreground command: its text, and what troupe writes to its stdin (sudo's password) before
/// closing it; without `input` the command reads an empty stdin.
pub(crate) struct Foreground<'a> {
    pub(crate) command: &'a str,
    pub(crate) input: Option<String>,
}

/// Runs `command` in `cwd` to completion, timeout or cancellation. The whole process group is
/// gone when this returns (or, if the future is dropped, is killed by the drop).
pub(crate) async fn run_foreground(
    backend: &dyn TerminalBackend,
    Foreground { command, input }: Foreground<'_>,
    cwd: &Path,
    env: Vec<(String, String)>,
    reach: Reach,
    limits: &RunLimits,
    cancel: &CancellationToken,
) -> std::io::Result<RunOutcome> {
    let marker = format!("__troupe_cwd_{}__", uuid::Uuid::new_v4().simple());
    // The command sits on lines of its own so a trailing comment or heredoc cannot swallow the
    // report; `$PWD` needs no subshell.
    let script = format!(
        "{command}\n__troupe_status=$?\nprintf '\\n{marker}%s\\n' \"$PWD\"\nexit $__troupe_status\n"
    );
    let mut spawned = backend.spawn(SpawnRequest {
        workspace: reach.workspace,
        extra_writable: reach.extra_writable,
        stdin: input.is_some(),
        ..SpawnRequest::new(script, cwd, env)
    })?;
    // `input` (sudo's password) is written once, then stdin closes: nothing else reads it.
    if let (Some(input), Some(mut stdin)) = (input, spawned.stdin.take()) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = stdin.write_all(input.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
    let group = spawned.group.clone();
    let mut guard = KillOnDrop::new(group.clone());
    let mut output = spawned.output;
    let mut exit = spawned.exit;
    let mut decoder = Utf8Stream::default();
    let mut capture = HeadTail::new(limits.max_output_chars);
    let mut buf = vec![0u8; 16 * 1024];
    let mut exit_code: Option<i32> = None;
    let mut eof = false;
    let mut end = RunEnd::Exited;
    let deadline = tokio::time::Instant::now() + limits.timeout;
    while !(eof && exit_code.is_some()) {
        tokio::select! {
            read = output.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => capture.push(&decoder.push(&buf[..n])),
            },
            code = &mut exit, if exit_code.is_none() => exit_code = Some(code),
            _ = tokio::time::sleep_until(deadline), if exit_code.is_none() && end == RunEnd::Exited => {
                end = RunEnd::TimedOut;
                terminate(group.as_ref(), limits.kill_grace).await;
            }
            _ = cancel.cancelled(), if exit_code.is_none() && end == RunEnd::Exited => {
                end = RunEnd::Interrupted;
                terminate(group.as_ref(), limits.kill_grace).await;
            }
            _ = tokio::time::sleep(DRAIN_IDLE), if exit_code.is_some() && !eof => eof = true,
        }
    }
    capture.push(&decoder.finish());
    // Whatever the command started and left behind dies with it.
    let stopped_leftovers = group.alive();
    if stopped_leftovers {
        terminate(group.as_ref(), limits.kill_grace).await;
    }
    guard.disarm();

    let (head, tail, total) = capture.into_parts();
    let head_len = head.chars().count();
    let tail_len = tail.chars().count();
    let cut = total - head_len - tail_len;
    let shown = if cut == 0 {
        let (text, cwd) = take_marker(&format!("{head}{tail}"), &marker);
        let total_chars = text.chars().count();
        (
            Captured {
                text,
                total_chars,
                omitted: 0,
            },
            cwd,
        )
    } else {
        let (tail, cwd) = take_marker(&tail, &marker);
        let total_chars = total - (tail_len - tail.chars().count());
        let text = format!("{head}{}{tail}", truncation_marker(cut, total_chars));
        (
            Captured {
                text,
                total_chars,
                omitted: cut,
            },
            cwd,
        )
    };
    let (shown, reported_cwd) = shown;
    let exit_code = match end {
        RunEnd::Exited => exit_code.unwrap_or(-1),
        RunEnd::TimedOut => EXIT_TIMEOUT,
        RunEnd::Interrupted => EXIT_INTERRUPTED,
    };
    Ok(RunOutcome {
        output: shown,
        exit_code,
        end,
        cwd: if end == RunEnd::Exited {
            reported_cwd
        } else {
            None
        },
        stopped_leftovers,
    })
}

/// The note put where the middle of a long output was cut.
pub(crate) fn truncation_marker(omitted: usize, total: usize) -> String {
    format!(
        "\n\n... [output cut: {} of {} characters left out of the middle] ...\n\n",
        thousands(omitted),
        thousands(total)
    )
}

/// Removes the directory report from the output; returns the output and the directory.
fn take_marker(text: &str, marker: &str) -> (String, Option<PathBuf>) {
    let Some(at) = text.rfind(marker) else {
        return (text.to_string(), None);
    };
    let after = &text[at + marker.len()..];
    let line_end = after.find('\n').unwrap_or(after.len());
    let dir = PathBuf::from(&after[..line_end]);
    let start = if at > 0 && text.as_bytes()[at - 1] == b'\n' {
        at - 1
    } else {
        at
    };
    let mut out = text[..start].to_string();
    out.push_str(&after[(line_end + 1).min(after.len())..]);
    (out, Some(dir))
}

/// Characters `workdir` may contain: a plain path, nothing the shell would interpret.
fn workdir_problem(workdir: &str) -> Option<char> {
    workdir
        .chars()
        .find(|c| !(c.is_alphanumeric() || "/\\:_-.~ +@=,".contains(*c)))
}

/// `{output: "", exit_code: -1, error, status: "blocked"}`.
fn blocked(message: String) -> ToolResult {
    ToolResult::error_json(
        json!({"output": "", "exit_code": -1, "error": message, "status": "blocked"}),
    )
}

/// The nearest existing directory at or above `dir` (the session's directory may have been
/// deleted since).
pub(crate) fn existing_dir(dir: &Path) -> PathBuf {
    let mut cur = dir;
    loop {
        if cur.is_dir() {
            return cur.to_path_buf();
        }
        match cur.parent() {
            Some(parent) => cur = parent,
            None => return std::env::temp_dir(),
        }
    }
}

/// Runs the `terminal` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let command = match required_str(&args, "command", "\"ls -la\"") {
        Ok(c) if !c.trim().is_empty() => c.to_string(),
        Ok(_) => {
            return ToolResult::error_json(
                json!({"error": "'command' is empty. Send the shell command to run, for example {\"command\": \"ls -la\"}."}),
            );
        }
        Err(e) => {
            let hint = if args.contains_key("code") {
                " To run Python source, use execute_code(code=...) instead."
            } else {
                ""
            };
            return ToolResult::error_json(json!({"error": format!("{e}{hint}")}));
        }
    };
    let config = &builtins.config.terminal;
    let background = flag(&args, "background", false);
    let timeout = match optional_int(&args, "timeout") {
        Ok(None) => config.default_timeout_secs,
        Ok(Some(t)) if t >= 1 => t as u64,
        Ok(Some(t)) => {
            return ToolResult::error_json(
                json!({"error": format!("'timeout' must be at least 1 second (got {t}). Leave it out for the default of {}s.", config.default_timeout_secs)}),
            );
        }
        Err(e) => return ToolResult::error_json(json!({"error": e})),
    };
    if !background && timeout > config.max_foreground_timeout_secs {
        return ToolResult::error_json(json!({"error": format!(
            "A foreground command may run for at most {}s; {timeout}s was asked for. Start long-running commands with background=true and check on them with the process tool.",
            config.max_foreground_timeout_secs
        )}));
    }
    let workdir = match optional_str(&args, "workdir") {
        Ok(w) => w.filter(|w| !w.trim().is_empty()),
        Err(e) => return ToolResult::error_json(json!({"error": e})),
    };
    if let Some(bad) = workdir.and_then(workdir_problem) {
        return blocked(format!(
            "'workdir' contains the character '{bad}', which is not allowed. Send a plain directory path without shell syntax."
        ));
    }

    let backend = builtins.backend_of(&ctx.session_id);
    let session_dir = builtins.session_cwd(&ctx.session_id);
    let mut extra_writable = match writable_paths(&args, &session_dir) {
        Ok(paths) => paths,
        Err(e) => {
            return ToolResult::error_json(json!({"output": "", "exit_code": -1, "error": e}));
        }
    };
    if !extra_writable.is_empty() {
        if !backend.confined() {
            return blocked(format!(
                "'writable' widens troupe's boundary, and commands on the {} backend do not run inside one here. Leave 'writable' out.",
                backend.name()
            ));
        }
        if let Some(hidden) = extra_writable.iter().find(|p| backend.out_of_reach(p)) {
            return blocked(format!(
                "'writable' names {}, which is or holds troupe's home or a config file troupe read; no approval grants that.",
                hidden.display()
            ));
        }
        if !ctx.approved_by_person {
            return blocked(format!(
                "Writing {} needs a person's yes for this call (approvals switched off or an unattended policy do not widen troupe's boundary). It was not run.",
                extra_writable
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let mut approval_note = None;
    match builtins.check_terminal_command(&ctx.session_id, &command, workdir) {
        CommandVerdict::Forbidden { reason, .. } => {
            return blocked(format!(
                "This command is never run: {reason}. No approval can allow it; find a narrower command."
            ));
        }
        CommandVerdict::NeedsApproval { reason, .. }
            if !ctx.approved && !builtins.dangerous_commands_need_approval(&ctx.session_id) =>
        {
            approval_note = Some(format!(
                "This command would need approval on this machine ({reason}); it runs without one inside the isolated {} backend, as configured.",
                backend.name()
            ));
        }
        CommandVerdict::NeedsApproval { reason, .. } if !ctx.approved => {
            return blocked(format!(
                "This command needs approval first: {reason}. It was not run. Ask the user, or choose a safer command."
            ));
        }
        CommandVerdict::NeedsApproval { reason, .. } => {
            approval_note = Some(format!(
                "This command needed approval ({reason}) and was approved."
            ));
            // What the person saw and said yes to is what the command names: those paths are
            // granted for this call (never troupe's home or its config).
            if backend.confined() && ctx.approved_by_person {
                let base = workdir.map_or_else(|| session_dir.clone(), |w| session_dir.join(w));
                for path in granted_targets(&command, &base) {
                    if !backend.out_of_reach(&path) && !extra_writable.contains(&path) {
                        extra_writable.push(path);
                    }
                }
            }
        }
        CommandVerdict::Allowed => {}
    }
    // sudo gets its password from troupe, on its stdin, never from the command text.
    let sudo = match super::sudo::prepare(&builtins, &ctx, &command, background).await {
        Ok(run) => run,
        Err(message) => return blocked(message),
    };

    let cwd = match workdir {
        Some(w) => {
            let p = expand_home(w);
            let p = if p.is_absolute() {
                p
            } else {
                session_dir.join(p)
            };
            if backend.shares_host_paths() && !p.is_dir() {
                return ToolResult::error_json(
                    json!({"output": "", "exit_code": -1, "error": format!("'workdir' {} is not an existing directory. Send an existing directory, or leave it out to use the session's.", p.display())}),
                );
            }
            p
        }
        None if backend.shares_host_paths() => existing_dir(&session_dir),
        None => session_dir.clone(),
    };
    let env = terminal_env(
        process_vars(),
        &config.env_passthrough,
        &builtins.config().secrets,
    );

    if background {
        let reach = Reach {
            workspace: builtins.writable_roots(&ctx.session_id),
            extra_writable: extra_writable.clone(),
        };
        let flags = match BackgroundFlags::read(&args, &command) {
            Ok(flags) => flags,
            Err(e) => {
                return ToolResult::error_json(json!({"output": "", "exit_code": -1, "error": e}));
            }
        };
        return match builtins
            .processes
            .start_with(
                &ctx.session_id,
                &command,
                &cwd,
                env,
                reach,
                backend.as_ref(),
                flags.options.clone(),
            )
            .await
        {
            Ok(started) => {
                let mut result = json!({
                    "output": "Background process started",
                    "session_id": started.id,
                    "pid": started.pid,
                    "exit_code": 0,
                    "error": null,
                });
                if let Some(note) = approval_note {
                    result["approval"] = json!(note);
                }
                flags.annotate(&mut result, &command, started.notices_reach);
                ToolResult::json(result)
            }
            Err(e) => ToolResult::error_json(json!({"output": "", "exit_code": -1, "error": e})),
        };
    }
    let pty_note = flag(&args, "pty", false).then_some(
        "pty applies to background processes only; this foreground command ran without one. Use background=true with pty=true for an interactive program.",
    );

    let limits = RunLimits {
        timeout: Duration::from_secs(timeout),
        max_output_chars: config.max_output_chars,
        kill_grace: config.kill_grace,
    };
    let reach = Reach {
        workspace: builtins.writable_roots(&ctx.session_id),
        extra_writable,
    };
    let outcome = match run_foreground(
        backend.as_ref(),
        Foreground {
            command: &sudo.command,
            input: sudo.input.clone(),
        },
        &cwd,
        env,
        reach,
        &limits,
        &ctx.cancel,
    )
    .await
    {
        Ok(o) => o,
        Err(err) => {
            return ToolResult::error_json(
                json!({"output": "", "exit_code": -1, "error": format!("The command could not be started: {err}.")}),
            );
        }
    };
    let mut output = outcome.output.text.clone();
    match outcome.end {
        RunEnd::TimedOut => output.push_str(&format!(
            "\n[timed out after {timeout}s; the command and everything it started were stopped]"
        )),
        RunEnd::Interrupted => output.push_str(
            "\n[interrupted by a stop; the command and everything it started were stopped]",
        ),
        RunEnd::Exited => {}
    }
    let mut result =
        json!({"output": redact(&output), "exit_code": outcome.exit_code, "error": null});
    if let Some(dir) = &outcome.cwd
        && workdir.is_none()
    {
        if *dir != session_dir {
            result["cwd"] = json!(dir.display().to_string());
        }
        builtins.set_session_cwd(&ctx.session_id, dir.clone());
    }
    if outcome.output.omitted > 0 {
        result["output_total_chars"] = json!(outcome.output.total_chars);
        result["truncation_note"] = json!(
            "The output was longer than the cap, so only its start and end are shown. Re-run with a narrower command (grep, head, tail, or a redirect to a file you then page with read_file)."
        );
    }
    if let Some(note) = approval_note {
        result["approval"] = json!(match outcome.end {
            RunEnd::Interrupted => format!("{note} It was then interrupted."),
            _ => note,
        });
    }
    if outcome.end == RunEnd::Exited
        && let Some(meaning) = exit_code_meaning(&command, outcome.exit_code)
    {
        result["exit_code_meaning"] = json!(meaning);
    }
    // Only a failure is scanned, and only inside a boundary.
    if outcome.end == RunEnd::Exited
        && outcome.exit_code != 0
        && backend.confined()
        && let Some(note) = super::confine::boundary_note(&outcome.output.text)
    {
        result["boundary"] = json!(note);
    }
    if let Some(note) = pty_note {
        result["pty_note"] = json!(note);
    }
    if outcome.stopped_leftovers {
        result["hint"] = json!(
            "The command left processes running after it finished; they were stopped. Start long-lived processes with background=true."
        );
    }
    super::sudo::finish(&builtins, &ctx, &sudo, &mut result);
    ToolResult::json(result)
}

/// What `terminal(background=true)` asked for beyond the command: a pty and its size, and the
/// notices (`notify_on_complete`, `watch_patterns`), with the notes the result carries.
struct BackgroundFlags {
    options: StartOptions,
    pty_note: Option<&'static str>,
    watch_ignored: bool,
}

/// Most patterns one process may watch for, and the longest one.
const MAX_WATCH_PATTERNS: usize = 16;
const MAX_WATCH_PATTERN_CHARS: usize = 200;

impl BackgroundFlags {
    fn read(args: &Map<String, Value>, command: &str) -> Result<Self, String> {
        let mut pty_note = None;
        let pty = if flag(args, "pty", false) {
            if needs_piped_stdin(command) {
                pty_note = Some(
                    "No pty for this command: it reads a token from piped stdin until end-of-file (gh auth login --with-token). Pipe the token in the command itself, for example `gh auth login --with-token < token.txt`.",
                );
                None
            } else {
                let size = |key: &str, default: u16| -> Result<u16, String> {
                    match optional_int(args, key)? {
                        None => Ok(default),
                        Some(n) if (2..=1000).contains(&n) => Ok(n as u16),
                        Some(n) => Err(format!(
                            "'{key}' must be between 2 and 1000 (got {n}); leave it out for {default}."
                        )),
                    }
                };
                let default = PtySize::default();
                Some(PtySize {
                    rows: size("rows", default.rows)?,
                    cols: size("cols", default.cols)?,
                })
            }
        } else {
            None
        };
        let notify = flag(args, "notify_on_complete", false);
        let patterns = match args.get("watch_patterns") {
            None | Some(Value::Null) => vec![],
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Array(items)) => {
                let mut patterns = vec![];
                for item in items {
                    match item.as_str() {
                        Some(p)
                            if !p.trim().is_empty()
                                && p.chars().count() <= MAX_WATCH_PATTERN_CHARS =>
                        {
                            patterns.push(p.to_string())
                        }
                        _ => {
                            return Err(format!(
                                "'watch_patterns' holds {item}; each pattern must be non-empty text of at most {MAX_WATCH_PATTERN_CHARS} characters, matched as a plain substring of an output line, like [\"READY\", \"ERROR\"]."
                            ));
                        }
                    }
                }
                patterns
            }
            Some(other) => {
                return Err(format!(
                    "'watch_patterns' must be a list of text, like [\"READY\"], not {other}."
                ));
            }
        };
        if patterns.len() > MAX_WATCH_PATTERNS {
            return Err(format!(
                "'watch_patterns' has {} patterns; at most {MAX_WATCH_PATTERNS} are watched. Keep the ones that matter.",
                patterns.len()
            ));
        }
        // Both would report the same end twice: completion wins.
        let watch_ignored = notify && !patterns.is_empty();
        Ok(BackgroundFlags {
            options: StartOptions {
                pty,
                notify_on_complete: notify,
                watch_patterns: if notify { vec![] } else { patterns },
            },
            pty_note,
            watch_ignored,
        })
    }

    /// Adds the notes of the flags to a start result.
    fn annotate(&self, result: &mut Value, command: &str, notices_reach: bool) {
        let o = &self.options;
        if let Some(note) = self.pty_note {
            result["pty_note"] = json!(note);
        }
        if let Some(size) = o.pty {
            result["pty"] = json!({"rows": size.rows, "cols": size.cols});
        }
        let asked = o.notify_on_complete || !o.watch_patterns.is_empty();
        if asked && !notices_reach {
            result["notify_unsupported"] = json!(
                "This session cannot be told about the process by itself (nothing listens for its notices here); check on it with process(action=\"poll\") or process(action=\"wait\")."
            );
        }
        if o.notify_on_complete {
            result["notify_on_complete"] = json!(true);
        }
        if self.watch_ignored {
            result["watch_patterns_ignored"] = json!(
                "watch_patterns was left out because notify_on_complete is set: the two together would report the same end twice."
            );
        }
        if !o.watch_patterns.is_empty() {
            result["watch_patterns"] = json!(o.watch_patterns);
        }
        let mut hints = vec![];
        if !asked {
            hints.push("This process runs silently: you will not be told when it ends or what it prints. Start it with notify_on_complete=true (or watch_patterns for a line you wait for) to be told, or check it with process(action=\"poll\").".to_string());
        }
        if looks_like_ci_poller(command) {
            hints.push("This looks like a loop that polls CI status. Start the check once with notify_on_complete=true instead of polling in a loop.".to_string());
        }
        if o.pty.is_some() {
            hints.push("It runs on a terminal: type with process(action=\"submit\", data=...) (a line and Enter) or process(action=\"write\", keys=[\"Ctrl-C\"]); process(action=\"log\") shows the screen.".to_string());
        }
        if hints.is_empty() {
            hints.push(
                "Use process(action=\"poll\" or \"log\", session_id=...) to see how it is doing."
                    .into(),
            );
        }
        result["hint"] = json!(hints.join(" "));
    }
}

/// Whether the command reads piped stdin to its end, which a terminal never gives
/// (`gh auth login --with-token`).
fn needs_piped_stdin(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .windows(3)
        .any(|w| w[0].ends_with("gh") && w[1] == "auth" && w[2] == "login")
        && words.iter().any(|w| w.starts_with("--with-token"))
}

/// A home-made CI poller: `statusCheckRollup`, or `gh pr view`/`gh pr checks` with `jq`.
fn looks_like_ci_poller(command: &str) -> bool {
    command.contains("statusCheckRollup")
        || ((command.contains("gh pr view") || command.contains("gh pr checks"))
            && command.contains("jq"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piped_token_logins_get_no_pty() {
        assert!(needs_piped_stdin("gh auth login --with-token < t"));
        assert!(needs_piped_stdin(
            "echo x | /usr/bin/gh auth login --hostname h --with-token"
        ));
        assert!(!needs_piped_stdin("gh auth login"));
        assert!(!needs_piped_stdin("python3 -i"));
    }

    #[test]
    fn flags_are_read_with_their_rules() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        let both = BackgroundFlags::read(
            &args(json!({"notify_on_complete": true, "watch_patterns": ["READY"]})),
            "serve",
        )
        .expect("valid");
        assert!(both.watch_ignored && both.options.watch_patterns.is_empty());
        let pty =
            BackgroundFlags::read(&args(json!({"pty": true, "rows": 40})), "bash").expect("valid");
        assert_eq!(
            pty.options.pty,
            Some(PtySize {
                rows: 40,
                cols: 120
            })
        );
        assert!(BackgroundFlags::read(&args(json!({"watch_patterns": [""]})), "x").is_err());
        assert!(BackgroundFlags::read(&args(json!({"pty": true, "cols": 1})), "x").is_err());
    }

    #[test]
    fn the_directory_report_is_removed() {
        let (out, dir) = take_marker("hello\n\n__m__/tmp/x\n", "__m__");
        assert_eq!(out, "hello\n");
        assert_eq!(dir, Some(PathBuf::from("/tmp/x")));
        let (out, dir) = take_marker("no report", "__m__");
        assert_eq!((out.as_str(), dir), ("no report", None));
    }

    #[test]
    fn workdir_characters() {
        assert_eq!(workdir_problem("/home/me/my project"), None);
        assert_eq!(workdir_problem("/tmp; rm -rf /"), Some(';'));
        assert_eq!(workdir_problem("$(id)"), Some('$'));
    }
}
