//! The process registry: background processes started by `terminal(background=true)`, as an
//! actor. One tokio task owns every process record; [`ProcessRegistry`] is the cheap, cloneable
//! handle with async methods that send it a command and await the reply (the mini-redis
//! pattern). A watcher task per process streams its output into the actor and reports its exit.
//!
//! Records outlive a session for their receipts, not for their processes: [`end_session`]
//! stops a session's processes unless they were handed over, and dropping the last handle stops
//! every process still running.
//!
//! [`end_session`]: ProcessRegistry::end_session

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::backend::{SpawnRequest, TerminalBackend};
use super::capture::{Utf8Stream, last_chars, strip_ansi};
use super::process_group::{KillOnDrop, ProcessGroup, terminate};
use super::receipts::{Receipt, ReceiptStore};
use super::redact::redact;

mod actor;
mod notices;
#[cfg(test)]
mod tests;

use actor::Actor;
pub use notices::{
    COMPLETION_OUTPUT_CHARS, NoticeKind, ProcessNotice, WATCH_GLOBAL_COOLDOWN,
    WATCH_GLOBAL_MAX_PER_WINDOW, WATCH_GLOBAL_WINDOW, WATCH_LIFETIME_MAX_HITS, WATCH_MIN_INTERVAL,
    WATCH_STRIKE_LIMIT,
};

/// Characters of output kept in memory per process (the end of it).
pub const MAX_OUTPUT_CHARS: usize = 200_000;
/// Running plus finished processes kept in memory.
pub const MAX_PROCESSES: usize = 64;
/// Finished processes leave memory this long after they started (their receipt stays).
pub const FINISHED_TTL: Duration = Duration::from_secs(30 * 60);
/// Shortest id prefix accepted.
pub const MIN_PREFIX: usize = 4;
/// Output a poll shows.
const PREVIEW_CHARS: usize = 1000;
/// Output a wait or kill result carries.
const SNAPSHOT_CHARS: usize = 2000;

/// Limits of a registry.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Grace between SIGTERM and SIGKILL when stopping a process group.
    pub kill_grace: Duration,
    /// Longest `wait`; longer requests are clamped with a note.
    pub max_wait: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            kill_grace: Duration::from_secs(2),
            max_wait: Duration::from_secs(180),
        }
    }
}

/// A process just started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedProcess {
    /// `proc_<12 hex>`.
    pub id: String,
    /// The leader's pid (also its process group id).
    pub pid: Option<u32>,
    /// Whether the owning session listens for notices (else none can reach it).
    pub notices_reach: bool,
}

/// How a background process runs and what it reports by itself.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Run on a pty of this size; only then is stdin open (`write`, `submit`, `close`).
    pub pty: Option<super::pty::PtySize>,
    /// One notice to the owning session when the process ends.
    pub notify_on_complete: bool,
    /// A notice per printed line holding one of these (rate-limited).
    pub watch_patterns: Vec<String>,
}

/// Most handoffs one session may make.
pub const MAX_HANDOFFS: usize = 3;

type StdinWrite = (Vec<u8>, oneshot::Sender<std::io::Result<()>>);

enum Msg {
    /// Replies whether the owner's notices reach a conversation.
    Register(Box<Proc>, oneshot::Sender<bool>),
    Output {
        id: String,
        text: String,
    },
    Finished {
        id: String,
        code: i32,
    },
    List {
        session: String,
        reply: oneshot::Sender<Value>,
    },
    Poll {
        session: String,
        id: String,
        reply: oneshot::Sender<Value>,
    },
    Log {
        session: String,
        id: String,
        offset: Option<usize>,
        limit: usize,
        reply: oneshot::Sender<Value>,
    },
    Wait {
        session: String,
        id: String,
        reply: oneshot::Sender<Result<Value, oneshot::Receiver<Value>>>,
    },
    Kill {
        session: String,
        id: String,
        source: &'static str,
        reply: oneshot::Sender<Result<Value, oneshot::Receiver<Value>>>,
    },
    Stdin {
        session: String,
        id: String,
        close: bool,
        reply: oneshot::Sender<Result<mpsc::Sender<StdinWrite>, Value>>,
    },
    EndSession {
        session: String,
        reply: oneshot::Sender<Vec<oneshot::Receiver<Value>>>,
    },
    Handover {
        session: String,
        id: String,
        to: String,
        reply: oneshot::Sender<Value>,
    },
    Link {
        previous: String,
        continuation: String,
    },
    Listen {
        session: String,
        parent: Option<String>,
        tx: mpsc::UnboundedSender<ProcessNotice>,
    },
    Handoff {
        session: String,
        id: String,
        purpose: String,
        reply: oneshot::Sender<Value>,
    },
    Shutdown,
}

/// A finished process's end.
#[derive(Debug, Clone)]
struct Ending {
    code: i32,
    reason: &'static str,
    source: Option<&'static str>,
    duration: Duration,
}

struct Proc {
    id: String,
    session: String,
    command: String,
    cwd: PathBuf,
    pid: Option<u32>,
    started_at: SystemTime,
    started: Instant,
    output: String,
    output_chars: usize,
    ending: Option<Ending>,
    /// Sends data to the task that owns the process's stdin; `None` once closed.
    stdin: Option<mpsc::Sender<StdinWrite>>,
    group: Arc<dyn ProcessGroup>,
    /// Kills the group if the record is dropped while the process runs (runtime shutdown).
    guard: KillOnDrop,
    /// Who asked for it to be stopped, once someone did.
    stop_source: Option<&'static str>,
    /// Waits and kills to answer when it finishes; each builds its own answer.
    on_finish: Vec<(oneshot::Sender<Value>, FinishAnswer)>,
    /// Runs on a pty: its output is a terminal's, its stdin a keyboard.
    pty: bool,
    /// Tell the owning session when it ends.
    notify: bool,
    /// Patterns watched for, while watching lasts.
    watch: Option<notices::Watch>,
    /// Why it was handed to this session, when it was.
    handed_off: Option<String>,
}

#[derive(Clone, Copy)]
enum FinishAnswer {
    Wait,
    Kill,
}

/// The cloneable handle to the registry actor.
#[derive(Clone)]
pub struct ProcessRegistry {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    tx: mpsc::UnboundedSender<Msg>,
    config: RegistryConfig,
    typed: Typed,
}

/// What has been typed into each live process, by id, for the dangerous-command check.
type Typed = Arc<Mutex<HashMap<String, StdinText>>>;

/// A live process's command and what was written to its stdin without ending a line.
#[derive(Debug, Clone)]
pub struct StdinText {
    /// The command the process runs.
    pub command: String,
    /// Where it runs.
    pub cwd: PathBuf,
    /// Text written since the last line end.
    pub pending: String,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Shutdown);
    }
}

impl std::fmt::Debug for ProcessRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessRegistry")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// Answer used when the actor is gone (the runtime is shutting down).
fn gone() -> Value {
    json!({"status": "error", "error": "The process registry has shut down; no process can be reached."})
}

impl ProcessRegistry {
    /// Starts the actor on the current tokio runtime (it panics outside one). Receipts go to
    /// `receipts`.
    pub fn launch(receipts: ReceiptStore, config: RegistryConfig) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let typed = Typed::default();
        let actor = Actor {
            typed: typed.clone(),
            procs: HashMap::new(),
            previous: HashMap::new(),
            receipts,
            config: config.clone(),
            mail: notices::Mailboxes::default(),
            handoffs: HashMap::new(),
        };
        tokio::spawn(actor.run(rx));
        ProcessRegistry {
            inner: Arc::new(HandleInner { tx, config, typed }),
        }
    }

    fn send(&self, msg: Msg) {
        let _ = self.inner.tx.send(msg);
    }

    /// Starts `command` in the background for `session` and registers it, with no pty and no
    /// notices.
    pub async fn start(
        &self,
        session: &str,
        command: &str,
        cwd: &Path,
        env: Vec<(String, String)>,
        reach: super::backend::CommandReach,
        backend: &dyn TerminalBackend,
    ) -> Result<StartedProcess, String> {
        self.start_with(
            session,
            command,
            cwd,
            env,
            reach,
            backend,
            StartOptions::default(),
        )
        .await
    }

    /// [`ProcessRegistry::start`] with `options`.
    #[allow(clippy::too_many_arguments)]
    pub async fn start_with(
        &self,
        session: &str,
        command: &str,
        cwd: &Path,
        mut env: Vec<(String, String)>,
        reach: super::backend::CommandReach,
        backend: &dyn TerminalBackend,
        options: StartOptions,
    ) -> Result<StartedProcess, String> {
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
        if options.pty.is_some() {
            // A pager would wait for a key nobody presses.
            for (key, value) in [("PAGER", "cat"), ("GIT_PAGER", "cat")] {
                if !env.iter().any(|(k, _)| k == key) {
                    env.push((key.into(), value.into()));
                }
            }
            if !env.iter().any(|(k, _)| k == "TERM") {
                env.push(("TERM".into(), "xterm-256color".into()));
            }
        }
        let spawned = backend
            .spawn(SpawnRequest {
                script: command.to_string(),
                cwd: cwd.to_path_buf(),
                env,
                // Without a pty the process reads an empty input: a program waiting on stdin
                // would otherwise hang unseen.
                stdin: false,
                split_stderr: false,
                workspace: reach.workspace,
                extra_writable: reach.extra_writable,
                pty: options.pty,
            })
            .map_err(|e| format!("The command could not be started: {e}."))?;
        let id = format!("proc_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let (stdin_tx, stdin_rx) = mpsc::channel::<StdinWrite>(8);
        if let Some(stdin) = spawned.stdin {
            tokio::spawn(stdin_writer(stdin, stdin_rx));
        }
        let proc = Proc {
            id: id.clone(),
            session: session.to_string(),
            command: command.to_string(),
            cwd: cwd.to_path_buf(),
            pid: spawned.pid,
            started_at: SystemTime::now(),
            started: Instant::now(),
            output: String::new(),
            output_chars: 0,
            ending: None,
            stdin: Some(stdin_tx),
            group: spawned.group.clone(),
            guard: KillOnDrop::new(spawned.group.clone()),
            stop_source: None,
            on_finish: vec![],
            pty: options.pty.is_some(),
            notify: options.notify_on_complete,
            watch: (!options.watch_patterns.is_empty())
                .then(|| notices::Watch::new(options.watch_patterns.clone())),
            handed_off: None,
        };
        self.typed().insert(
            id.clone(),
            StdinText {
                command: command.to_string(),
                cwd: cwd.to_path_buf(),
                pending: String::new(),
            },
        );
        let (reply, registered) = oneshot::channel();
        self.send(Msg::Register(Box::new(proc), reply));
        let Ok(notices_reach) = registered.await else {
            return Err("The process registry has shut down.".into());
        };
        tokio::spawn(watch(
            id.clone(),
            spawned.output,
            spawned.exit,
            spawned.group,
            self.inner.tx.clone(),
            self.inner.config.kill_grace,
        ));
        Ok(StartedProcess {
            id,
            pid: spawned.pid,
            notices_reach,
        })
    }

    /// Notices for `session` (completions, watch matches of its processes) arrive on the
    /// returned channel from now on, those that waited for it first. `parent` is the session
    /// that gets them once this one stops listening (a subagent's), and where `handoff` sends
    /// a process.
    pub fn listen(
        &self,
        session: &str,
        parent: Option<&str>,
    ) -> mpsc::UnboundedReceiver<ProcessNotice> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.send(Msg::Listen {
            session: session.to_string(),
            parent: parent.map(str::to_string),
            tx,
        });
        rx
    }

    /// Gives a running process of `session` (a subagent) to its parent, which then gets its
    /// notices; `purpose` says why, for the parent. At most [`MAX_HANDOFFS`] per session.
    pub async fn handoff(&self, session: &str, id: &str, purpose: &str) -> Value {
        let (session, id, purpose) = (session.to_string(), id.to_string(), purpose.to_string());
        self.ask(|reply| Msg::Handoff {
            session,
            id,
            purpose,
            reply,
        })
        .await
        .unwrap_or_else(gone)
    }

    fn typed(&self) -> std::sync::MutexGuard<'_, HashMap<String, StdinText>> {
        self.inner.typed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A live process's command and what was typed into it without a line end, by its id or a
    /// unique prefix of it (as `write` takes it); `None` when no live process matches.
    pub fn stdin_text(&self, id: &str) -> Option<StdinText> {
        let typed = self.typed();
        let key = typed_key(&typed, id)?;
        typed.get(&key).cloned()
    }

    /// Records what a write left unfinished, for the check of the next one.
    pub fn set_pending(&self, id: &str, pending: String) {
        let mut typed = self.typed();
        if let Some(key) = typed_key(&typed, id)
            && let Some(entry) = typed.get_mut(&key)
        {
            entry.pending = pending;
        }
    }

    async fn ask<T>(&self, build: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.send(build(tx));
        rx.await.ok()
    }

    /// `{processes: [...]}`: the session's processes, live and from receipts.
    pub async fn list(&self, session: &str) -> Value {
        let session = session.to_string();
        self.ask(|reply| Msg::List { session, reply })
            .await
            .unwrap_or_else(gone)
    }

    /// A process's status and the end of its output.
    pub async fn poll(&self, session: &str, id: &str) -> Value {
        let (session, id) = (session.to_string(), id.to_string());
        self.ask(|reply| Msg::Poll { session, id, reply })
            .await
            .unwrap_or_else(gone)
    }

    /// Lines of output: the last `limit` without `offset`, else `limit` lines from line `offset`.
    pub async fn log(&self, session: &str, id: &str, offset: Option<usize>, limit: usize) -> Value {
        let (session, id) = (session.to_string(), id.to_string());
        self.ask(|reply| Msg::Log {
            session,
            id,
            offset,
            limit,
            reply,
        })
        .await
        .unwrap_or_else(gone)
    }

    /// Waits up to `timeout` (clamped to the configured maximum) for the process to finish.
    pub async fn wait(&self, session: &str, id: &str, timeout: Duration) -> Value {
        let max = self.inner.config.max_wait;
        let clamp_note = (timeout > max).then(|| {
            format!(
                "A wait of {}s was asked for; waits are limited to {}s.",
                timeout.as_secs(),
                max.as_secs()
            )
        });
        let timeout = timeout.min(max);
        let (s, i) = (session.to_string(), id.to_string());
        let mut value = match self
            .ask(|reply| Msg::Wait {
                session: s,
                id: i,
                reply,
            })
            .await
        {
            None => gone(),
            Some(Ok(done)) => done,
            Some(Err(pending)) => match tokio::time::timeout(timeout, pending).await {
                Ok(Ok(done)) => done,
                Ok(Err(_)) => gone(),
                Err(_) => {
                    let mut now = self.poll(session, id).await;
                    now["status"] = json!("timeout");
                    now["process_running"] = json!(true);
                    let told = now["notify_on_complete"] == true;
                    now["timeout_note"] = json!(format!(
                        "Waited {}s and the process is still running; that is not an error. {}",
                        timeout.as_secs(),
                        if told {
                            "You will be told when it ends (notify_on_complete), so there is no need to wait again: go on with other work."
                        } else {
                            "Wait again, poll later, or kill it."
                        }
                    ));
                    now
                }
            },
        };
        if let (Some(note), Some(obj)) = (clamp_note, value.as_object_mut()) {
            obj.insert("note".into(), json!(note));
        }
        value
    }

    /// Stops the process's whole group (SIGTERM, then SIGKILL after the grace period).
    pub async fn kill(&self, session: &str, id: &str) -> Value {
        let (s, i) = (session.to_string(), id.to_string());
        match self
            .ask(|reply| Msg::Kill {
                session: s,
                id: i,
                source: "process.kill",
                reply,
            })
            .await
        {
            None => gone(),
            Some(Ok(done)) => done,
            Some(Err(pending)) => {
                let limit = self.inner.config.kill_grace + Duration::from_secs(5);
                match tokio::time::timeout(limit, pending).await {
                    Ok(Ok(done)) => done,
                    _ => {
                        json!({"status": "error", "error": "The process was signalled but has not exited yet; poll it to see when it does."})
                    }
                }
            }
        }
    }

    /// Writes `data` to the process's stdin as is (add "\n" to submit a line).
    pub async fn write(&self, session: &str, id: &str, data: &str) -> Value {
        let (s, i) = (session.to_string(), id.to_string());
        let sender = match self
            .ask(|reply| Msg::Stdin {
                session: s,
                id: i,
                close: false,
                reply,
            })
            .await
        {
            None => return gone(),
            Some(Err(answer)) => return answer,
            Some(Ok(sender)) => sender,
        };
        let (done_tx, done_rx) = oneshot::channel();
        if sender
            .send((data.as_bytes().to_vec(), done_tx))
            .await
            .is_err()
        {
            return json!({"status": "error", "error": "The process's stdin is closed."});
        }
        match done_rx.await {
            Ok(Ok(())) => json!({"status": "ok", "bytes_written": data.len()}),
            Ok(Err(e)) => {
                json!({"status": "error", "error": format!("Writing to the process's stdin failed: {e}.")})
            }
            Err(_) => json!({"status": "error", "error": "The process's stdin is closed."}),
        }
    }

    /// Ends the process's input: on its pty, the end-of-file key (Ctrl-D at the start of a
    /// line), which leaves the terminal open.
    pub async fn close_stdin(&self, session: &str, id: &str) -> Value {
        let mut value = self.write(session, id, "\u{4}").await;
        if value["status"] == "ok"
            && let Some(obj) = value.as_object_mut()
        {
            obj.remove("bytes_written");
            obj.insert("message".into(), json!("EOF sent"));
        }
        value
    }

    /// Gives a running process of `session` to session `to`: it then survives `session`'s end
    /// and dies with `to`'s.
    pub async fn handover(&self, session: &str, id: &str, to: &str) -> Value {
        let (session, id, to) = (session.to_string(), id.to_string(), to.to_string());
        self.ask(|reply| Msg::Handover {
            session,
            id,
            to,
            reply,
        })
        .await
        .unwrap_or_else(gone)
    }

    /// Lets `continuation` (a session continued from `previous`, after compression say) see
    /// `previous`'s processes and receipts.
    pub fn link_sessions(&self, previous: &str, continuation: &str) {
        self.send(Msg::Link {
            previous: previous.to_string(),
            continuation: continuation.to_string(),
        });
    }

    /// Stops every running process `session` owns and waits until they are gone; returns how
    /// many were stopped. Their receipts stay.
    pub async fn end_session(&self, session: &str) -> usize {
        let session = session.to_string();
        let Some(pending) = self.ask(|reply| Msg::EndSession { session, reply }).await else {
            return 0;
        };
        let n = pending.len();
        let limit = self.inner.config.kill_grace + Duration::from_secs(5);
        for rx in pending {
            let _ = tokio::time::timeout(limit, rx).await;
        }
        n
    }
}

/// The id in `typed` that `id` names: itself, or the one id a 4+ hex prefix starts.
fn typed_key(typed: &HashMap<String, StdinText>, id: &str) -> Option<String> {
    let id = id.trim();
    if typed.contains_key(id) {
        return Some(id.to_string());
    }
    let hex = id.strip_prefix("proc_").unwrap_or(id);
    if hex.len() < MIN_PREFIX || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let prefix = format!("proc_{hex}");
    let mut matches = typed.keys().filter(|k| k.starts_with(&prefix));
    match (matches.next(), matches.next()) {
        (Some(one), None) => Some(one.clone()),
        _ => None,
    }
}

/// Owns a process's stdin and writes what the actor forwards; dropping the channel closes it.
async fn stdin_writer(
    mut stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    mut rx: mpsc::Receiver<StdinWrite>,
) {
    while let Some((data, done)) = rx.recv().await {
        let result = async {
            stdin.write_all(&data).await?;
            stdin.flush().await
        }
        .await;
        let _ = done.send(result);
    }
}

/// Streams a process's output to the actor and reports its exit. Once the leader exits, output
/// still arriving is read until it pauses, then whatever the leader left running is stopped.
async fn watch(
    id: String,
    mut output: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    mut exit: futures::future::BoxFuture<'static, i32>,
    group: Arc<dyn ProcessGroup>,
    tx: mpsc::UnboundedSender<Msg>,
    grace: Duration,
) {
    let mut decoder = Utf8Stream::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut code = None;
    let mut eof = false;
    while !(eof && code.is_some()) {
        tokio::select! {
            read = output.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    let text = decoder.push(&buf[..n]);
                    if !text.is_empty() {
                        let _ = tx.send(Msg::Output { id: id.clone(), text });
                    }
                }
            },
            c = &mut exit, if code.is_none() => code = Some(c),
            _ = tokio::time::sleep(Duration::from_millis(200)), if code.is_some() && !eof => eof = true,
        }
    }
    let tail = decoder.finish();
    if !tail.is_empty() {
        let _ = tx.send(Msg::Output {
            id: id.clone(),
            text: tail,
        });
    }
    if group.alive() {
        terminate(group.as_ref(), grace).await;
    }
    let _ = tx.send(Msg::Finished {
        id,
        code: code.unwrap_or(-1),
    });
}
