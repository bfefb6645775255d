//! Command hooks: a hook is a program that gets one JSON object on stdin (the point, the agent
//! path, the tool and its arguments or result, ...) and may print one JSON object back:
//! `{"decision": "allow" | "deny" | "rewrite", "reason": "...", "arguments": {...}, "note": "..."}`.
//!
//! [`CommandHooks`] holds one owner's commands (a plugin's, or troupe.yaml's `hooks:`) and
//! implements the session hooks ([`Hook`]) and the board hooks ([`KanbanHook`]) over them.
//! A `pre_tool_call` command is awaited and fails closed: a crash, a non-zero exit, a hang past
//! its timeout or an answer that is not such an object denies the call. Every other point is an
//! observer: it runs on its own thread, its answer is ignored, and a failure is logged (fail
//! open). [`Observers`] counts the ones still running so an exiting program can wait for them.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_actors::call::CallStatus;
use troupe_actors::hooks::{Hook, PreToolDecision, SubagentInfo, ToolCallInfo};
use troupe_actors::model::{ModelRequest, ModelResponse};
use troupe_kanban::domain::{BoardSlug, Run, Task};
use troupe_kanban::hooks::KanbanHook;
use troupe_tools::ToolResult;
use troupe_tools::builtin::sandbox_env::{minimal_env, process_vars};

use super::manifest::CommandSpec;

/// Most bytes of a hook's stdout that are read as its answer.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Most characters of a tool result put in a `post_tool_call` payload.
const MAX_RESULT_CHARS: usize = 64 * 1024;

/// Why a hook command gave no usable answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HookFailure {
    /// It could not be started.
    #[error("could not be started: {0}")]
    Spawn(String),
    /// It ran past its timeout and was killed.
    #[error("did not answer within {0:.1} s and was stopped")]
    Timeout(f64),
    /// It exited with a failure status.
    #[error("exited with {status}{}", stderr_suffix(.stderr))]
    Failed {
        /// The exit status, as text.
        status: String,
        /// The end of what it wrote on stderr.
        stderr: String,
    },
    /// It printed something that is not one JSON object of the documented shape.
    #[error(
        "answered something that is not a hook decision ({0}); print nothing, or one JSON object like {{\"decision\": \"deny\", \"reason\": \"...\"}}"
    )]
    Garbage(String),
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// Runs `spec` with `payload` on stdin; `Ok(None)` when it printed nothing, else the JSON
/// object it printed. Blocks the calling thread for at most the spec's timeout (plus a moment
/// to reap a killed process group).
pub fn run_command(
    spec: &CommandSpec,
    payload: &Value,
    env: &[(&str, &str)],
) -> Result<Option<Map<String, Value>>, HookFailure> {
    let stdout = run_raw(spec, &format!("{payload}\n"), env)?;
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(HookFailure::Garbage(format!(
            "a JSON {} instead of an object",
            troupe_tools::text::yaml_kind(&other)
        ))),
        Err(e) => Err(HookFailure::Garbage(format!("not JSON: {e}"))),
    }
}

/// Runs `spec` with `input` on stdin and returns what it printed on stdout (at most 1 MiB),
/// or why it failed: not started, killed at its timeout, a failure exit.
pub fn run_raw(
    spec: &CommandSpec,
    input: &str,
    env: &[(&str, &str)],
) -> Result<String, HookFailure> {
    let mut command = Command::new("/bin/sh");
    // The basics, what the entry passes through, and the hook's own variables: never troupe's
    // keys (a hook could hand them on, and while it runs a command could read its environ).
    command
        .env_clear()
        .envs(minimal_env(
            process_vars(),
            &spec.env_passthrough,
            &spec.secrets,
        ))
        .arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills what it started too.
        .process_group(0);
    // Without the capabilities that read another process's memory (troupe's, for one).
    // SAFETY: it only makes system calls, which are async-signal-safe.
    unsafe {
        command.pre_exec(troupe_tools::builtin::privileges::drop_inspection_capabilities);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    // Inside troupe's boundary, with its own folder readable; a hook that cannot be confined
    // does not run (a pre_tool_call hook then denies, as for any failure).
    let ruleset =
        troupe_tools::builtin::confine::service_ruleset(Some(&spec.dir)).map_err(|e| {
            HookFailure::Spawn(format!(
                "`{}`: troupe's boundary could not be set up: {e}",
                spec.command
            ))
        })?;
    if let Some(fd) = ruleset
        .as_ref()
        .map(troupe_tools::builtin::confine::Ruleset::raw_fd)
    {
        // SAFETY: restrict_self only makes system calls (async-signal-safe); the ruleset
        // outlives the spawn.
        unsafe {
            command.pre_exec(move || troupe_tools::builtin::confine::restrict_self(fd));
        }
    }
    let mut child = command.spawn().map_err(|e| {
        HookFailure::Spawn(format!("`{}` in {}: {e}", spec.command, spec.dir.display()))
    })?;
    drop(ruleset);
    let pid = child.id();
    let input = input.to_string();
    let stdin = child.stdin.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // A hook that does not read its stdin must not block us: write on a side thread and
        // ignore a broken pipe.
        let writer = stdin.map(|mut stdin| {
            std::thread::spawn(move || {
                let _ = stdin.write_all(input.as_bytes());
            })
        });
        let output = child.wait_with_output();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        let _ = tx.send(output);
    });
    let output = match rx.recv_timeout(spec.timeout) {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(HookFailure::Spawn(e.to_string())),
        Err(_) => {
            kill_group(pid);
            let _ = rx.recv_timeout(Duration::from_secs(2));
            return Err(HookFailure::Timeout(spec.timeout.as_secs_f64()));
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let chars: Vec<char> = stderr.trim().chars().collect();
        let tail: String = chars[chars.len().saturating_sub(300)..].iter().collect();
        return Err(HookFailure::Failed {
            status: output.status.to_string(),
            stderr: tail,
        });
    }
    let stdout = &output.stdout[..output.stdout.len().min(MAX_ANSWER_BYTES)];
    Ok(String::from_utf8_lossy(stdout).into_owned())
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Turns a `pre_tool_call` answer into a decision; anything unexpected denies (fail closed).
pub fn decide(answer: Option<Map<String, Value>>) -> Result<PreToolDecision, HookFailure> {
    let Some(answer) = answer else {
        return Ok(PreToolDecision::Continue);
    };
    let note = match answer.get("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) => Some(n.clone()),
        Some(_) => return Err(HookFailure::Garbage("`note` is not text".into())),
    };
    let decision = match answer.get("decision") {
        None | Some(Value::Null) => "allow",
        Some(Value::String(d)) => d.as_str(),
        Some(_) => return Err(HookFailure::Garbage("`decision` is not text".into())),
    };
    match decision {
        "allow" => Ok(match note {
            None => PreToolDecision::Continue,
            Some(note) => PreToolDecision::Amend {
                arguments: None,
                note: Some(note),
            },
        }),
        "deny" => {
            let reason = match answer.get("reason") {
                Some(Value::String(r)) if !r.trim().is_empty() => r.clone(),
                _ => "no reason was given".to_string(),
            };
            Ok(PreToolDecision::Block { reason })
        }
        "rewrite" => match answer.get("arguments") {
            Some(Value::Object(arguments)) => Ok(PreToolDecision::Amend {
                arguments: Some(arguments.clone()),
                note,
            }),
            _ => Err(HookFailure::Garbage(
                "a rewrite without an `arguments` object".into(),
            )),
        },
        other => Err(HookFailure::Garbage(format!(
            "unknown decision '{other}' (use allow, deny or rewrite)"
        ))),
    }
}

/// Counts observer commands still running, so a program can wait for them before it exits.
#[derive(Debug, Clone, Default)]
pub struct Observers {
    running: Arc<AtomicUsize>,
}

impl Observers {
    /// A fresh counter.
    pub fn new() -> Observers {
        Observers::default()
    }

    /// How many observer commands are running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Waits until none is running, or `limit` passed; returns whether all finished.
    pub async fn drain(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.running() > 0 {
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    fn spawn(&self, owner: String, point: &'static str, spec: CommandSpec, payload: Value) {
        self.running.fetch_add(1, Ordering::SeqCst);
        let running = Arc::clone(&self.running);
        let started = std::thread::Builder::new()
            .name(format!("hook-{point}"))
            .spawn(move || {
                let env = hook_env(&owner, point, &spec);
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                if let Err(failure) = run_command(&spec, &payload, &env) {
                    tracing::warn!(plugin = %owner, point, command = %spec.command, %failure, "observer hook failed; carrying on");
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(error) = started {
            self.running.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(point, %error, "could not start an observer hook thread");
        }
    }
}

pub(crate) fn hook_env(
    owner: &str,
    point: &str,
    spec: &CommandSpec,
) -> [(&'static str, String); 3] {
    [
        ("TROUPE_HOOK_POINT", point.to_string()),
        ("TROUPE_PLUGIN", owner.to_string()),
        ("TROUPE_PLUGIN_DIR", spec.dir.display().to_string()),
    ]
}

/// One owner's hook commands, by point.
#[derive(Debug, Clone)]
pub struct CommandHooks {
    owner: String,
    table: std::collections::BTreeMap<String, Vec<CommandSpec>>,
    observers: Observers,
}

impl CommandHooks {
    /// `owner`'s commands (`table`: point -> commands); observers are counted in `observers`.
    pub fn new(
        owner: impl Into<String>,
        table: std::collections::BTreeMap<String, Vec<CommandSpec>>,
        observers: Observers,
    ) -> CommandHooks {
        CommandHooks {
            owner: owner.into(),
            table,
            observers,
        }
    }

    /// Whether any command is attached to `point`.
    pub fn has(&self, point: &str) -> bool {
        self.table.get(point).is_some_and(|s| !s.is_empty())
    }

    fn specs<'a>(
        &'a self,
        point: &'static str,
        tool: Option<&'a str>,
    ) -> impl Iterator<Item = &'a CommandSpec> + 'a {
        self.table
            .get(point)
            .into_iter()
            .flatten()
            .filter(move |spec| match tool {
                Some(tool) => spec.tools.is_empty() || spec.tools.iter().any(|t| t == tool),
                None => true,
            })
    }

    fn observe(&self, point: &'static str, tool: Option<&str>, payload: impl FnOnce() -> Value) {
        let specs: Vec<CommandSpec> = self.specs(point, tool).cloned().collect();
        if specs.is_empty() {
            return;
        }
        let mut payload = payload();
        if let Value::Object(map) = &mut payload {
            map.insert("hook".into(), Value::String(point.into()));
            map.insert("plugin".into(), Value::String(self.owner.clone()));
        }
        for spec in specs {
            self.observers
                .spawn(self.owner.clone(), point, spec, payload.clone());
        }
    }
}

fn tool_payload(call: &ToolCallInfo<'_>) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("session_id".into(), json!(call.session_id));
    map.insert("agent_path".into(), json!(call.agent_path));
    map.insert(
        "depth".into(),
        json!(call.agent_path.len().saturating_sub(1)),
    );
    map.insert("call_id".into(), json!(call.call_id));
    map.insert("tool".into(), json!(call.underlying_tool));
    map.insert("called_as".into(), json!(call.tool));
    map.insert("arguments".into(), Value::Object(call.arguments.clone()));
    map
}

impl Hook for CommandHooks {
    fn name(&self) -> &str {
        &self.owner
    }

    fn pre_tool_call_async<'a>(&'a self, call: ToolCallInfo<'a>) -> BoxFuture<'a, PreToolDecision> {
        let specs: Vec<CommandSpec> = self
            .specs("pre_tool_call", Some(call.underlying_tool))
            .cloned()
            .collect();
        if specs.is_empty() {
            return Box::pin(std::future::ready(PreToolDecision::Continue));
        }
        let mut payload = tool_payload(&call);
        payload.insert("hook".into(), json!("pre_tool_call"));
        payload.insert("plugin".into(), json!(self.owner));
        let owner = self.owner.clone();
        let tool = call.underlying_tool.to_string();
        Box::pin(async move {
            let mut arguments: Option<Map<String, Value>> = None;
            let mut notes: Vec<String> = Vec::new();
            for spec in specs {
                let mut payload = payload.clone();
                if let Some(args) = &arguments {
                    payload.insert("arguments".into(), Value::Object(args.clone()));
                }
                let payload = Value::Object(payload);
                let owner_for_env = owner.clone();
                let command = spec.command.clone();
                let ran = tokio::task::spawn_blocking(move || {
                    let env = hook_env(&owner_for_env, "pre_tool_call", &spec);
                    let env: Vec<(&str, &str)> =
                        env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    run_command(&spec, &payload, &env)
                })
                .await
                .unwrap_or_else(|e| Err(HookFailure::Spawn(e.to_string())));
                match ran.and_then(decide) {
                    Ok(PreToolDecision::Continue) => {}
                    Ok(PreToolDecision::Rewrite(args)) => arguments = Some(args),
                    Ok(PreToolDecision::Amend { arguments: a, note }) => {
                        if let Some(a) = a {
                            arguments = Some(a);
                        }
                        notes.extend(note);
                    }
                    Ok(block @ PreToolDecision::Block { .. }) => return block,
                    Err(failure) => {
                        tracing::warn!(plugin = %owner, %tool, %command, %failure, "pre_tool_call hook failed; denying the call");
                        return PreToolDecision::Block {
                            reason: format!(
                                "its check `{command}` {failure}, so the call was refused (hooks that cannot decide deny)"
                            ),
                        };
                    }
                }
            }
            if arguments.is_none() && notes.is_empty() {
                PreToolDecision::Continue
            } else {
                PreToolDecision::Amend {
                    arguments,
                    note: (!notes.is_empty()).then(|| notes.join(" ")),
                }
            }
        })
    }

    fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, result: &ToolResult) {
        self.observe("post_tool_call", Some(call.underlying_tool), || {
            let mut map = tool_payload(call);
            let text = result.to_model_text();
            let text: String = text.chars().take(MAX_RESULT_CHARS).collect();
            map.insert("status".into(), json!(status.as_str()));
            map.insert("is_error".into(), json!(result.is_error));
            map.insert("result".into(), json!(text));
            Value::Object(map)
        });
    }

    fn pre_llm_call(&self, session_id: &str, request: &mut ModelRequest) {
        self.observe("pre_llm_call", None, || {
            json!({
                "session_id": session_id,
                "model": request.model,
                "messages": request.messages.len(),
                "tools": request.tools.len(),
            })
        });
    }

    fn post_llm_call(&self, session_id: &str, response: &ModelResponse) {
        self.observe("post_llm_call", None, || {
            let calls: Vec<&str> = response
                .tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            json!({
                "session_id": session_id,
                "text": response.content,
                "tool_calls": calls,
            })
        });
    }

    fn on_session_start(&self, session_id: &str, agent_path: &[String]) {
        self.observe("on_session_start", None, || {
            json!({"session_id": session_id, "agent_path": agent_path, "depth": agent_path.len().saturating_sub(1)})
        });
    }

    fn on_session_end(&self, session_id: &str, agent_path: &[String], reason: &str) {
        self.observe("on_session_end", None, || {
            json!({"session_id": session_id, "agent_path": agent_path, "depth": agent_path.len().saturating_sub(1), "reason": reason})
        });
    }

    fn on_subagent_start(&self, subagent: &SubagentInfo<'_>) {
        self.observe("on_subagent_start", None, || subagent_payload(subagent));
    }

    fn on_subagent_end(&self, subagent: &SubagentInfo<'_>, status: &str, summary: &str) {
        self.observe("on_subagent_end", None, || {
            let mut payload = subagent_payload(subagent);
            payload["status"] = json!(status);
            payload["summary"] = json!(summary);
            payload
        });
    }
}

fn subagent_payload(subagent: &SubagentInfo<'_>) -> Value {
    let mut path = subagent.parent_path.to_vec();
    path.push(subagent.child_session_id.to_string());
    json!({
        "parent_path": subagent.parent_path,
        "agent_path": path,
        "depth": path.len().saturating_sub(1),
        "subagent_id": subagent.subagent_id,
        "session_id": subagent.child_session_id,
        "goal": subagent.goal,
    })
}

impl KanbanHook for CommandHooks {
    fn task_claimed(&self, board: &BoardSlug, task: &Task, run: &Run) {
        self.observe(
            "on_task_claimed",
            None,
            || json!({"board": board.as_str(), "task": task, "run": run}),
        );
    }

    fn task_completed(&self, board: &BoardSlug, task: &Task) {
        self.observe(
            "on_task_completed",
            None,
            || json!({"board": board.as_str(), "task": task}),
        );
    }

    fn task_blocked(&self, board: &BoardSlug, task: &Task, reason: &str) {
        self.observe(
            "on_task_blocked",
            None,
            || json!({"board": board.as_str(), "task": task, "reason": reason}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_decisions_and_garbage_is_refused() {
        assert_eq!(decide(None).unwrap(), PreToolDecision::Continue);
        let deny = serde_json::from_str(r#"{"decision":"deny","reason":"no"}"#).unwrap();
        assert_eq!(
            decide(Some(deny)).unwrap(),
            PreToolDecision::Block {
                reason: "no".into()
            }
        );
        let bad = serde_json::from_str(r#"{"decision":"maybe"}"#).unwrap();
        assert!(decide(Some(bad)).is_err());
        let rewrite = serde_json::from_str(r#"{"decision":"rewrite"}"#).unwrap();
        assert!(decide(Some(rewrite)).is_err());
    }
}
