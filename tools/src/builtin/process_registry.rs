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
}

type StdinWrite = (Vec<u8>, oneshot::Sender<std::io::Result<()>>);

enum Msg {
    Register(Box<Proc>, oneshot::Sender<()>),
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
        };
        tokio::spawn(actor.run(rx));
        ProcessRegistry {
            inner: Arc::new(HandleInner { tx, config, typed }),
        }
    }

    fn send(&self, msg: Msg) {
        let _ = self.inner.tx.send(msg);
    }

    /// Starts `command` in the background for `session` and registers it.
    pub async fn start(
        &self,
        session: &str,
        command: &str,
        cwd: &Path,
        mut env: Vec<(String, String)>,
        reach: super::backend::CommandReach,
        backend: &dyn TerminalBackend,
    ) -> Result<StartedProcess, String> {
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
        let spawned = backend
            .spawn(SpawnRequest {
                script: command.to_string(),
                cwd: cwd.to_path_buf(),
                env,
                stdin: true,
                split_stderr: false,
                workspace: reach.workspace,
                extra_writable: reach.extra_writable,
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
        if registered.await.is_err() {
            return Err("The process registry has shut down.".into());
        }
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
        })
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
                    now["timeout_note"] = json!(format!(
                        "Waited {}s and the process is still running; that is not an error. Wait again, poll later, or kill it.",
                        timeout.as_secs()
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

    /// Closes the process's stdin so it reads end-of-file.
    pub async fn close_stdin(&self, session: &str, id: &str) -> Value {
        let (s, i) = (session.to_string(), id.to_string());
        match self
            .ask(|reply| Msg::Stdin {
                session: s,
                id: i,
                close: true,
                reply,
            })
            .await
        {
            None => gone(),
            Some(Err(answer)) => answer,
            Some(Ok(_)) => json!({"status": "ok", "message": "stdin closed"}),
        }
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

struct Actor {
    typed: Typed,
    procs: HashMap<String, Proc>,
    /// continuation session -> the session it continued.
    previous: HashMap<String, String>,
    receipts: ReceiptStore,
    config: RegistryConfig,
}

/// Where a looked-up process lives.
enum Found {
    Live(String),
    Receipt(Box<Receipt>),
    Missing(Value),
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn not_found(id: &str) -> Value {
    json!({"status": "not_found", "error": format!("No process with id {id} is visible to this session. Use process(action=\"list\") to see yours.")})
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        while let Some(msg) = rx.recv().await {
            if matches!(msg, Msg::Shutdown) {
                break;
            }
            self.handle(msg);
        }
        // Last handle gone: nothing may outlive troupe.
        let running: Vec<Arc<dyn ProcessGroup>> = self
            .procs
            .values()
            .filter(|p| p.ending.is_none())
            .map(|p| p.group.clone())
            .collect();
        for group in &running {
            terminate(group.as_ref(), self.config.kill_grace).await;
        }
        tracing::debug!(stopped = running.len(), "process registry shut down");
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Register(proc, reply) => {
                self.prune_memory();
                self.procs.insert(proc.id.clone(), *proc);
                let _ = reply.send(());
            }
            Msg::Output { id, text } => {
                if let Some(p) = self.procs.get_mut(&id) {
                    p.output_chars += text.chars().count();
                    p.output.push_str(&text);
                    if p.output_chars > MAX_OUTPUT_CHARS + MAX_OUTPUT_CHARS / 10 {
                        p.output = last_chars(&p.output, MAX_OUTPUT_CHARS).to_string();
                        p.output_chars = MAX_OUTPUT_CHARS;
                    }
                }
            }
            Msg::Finished { id, code } => self.finish(&id, code),
            Msg::List { session, reply } => {
                let _ = reply.send(self.list(&session));
            }
            Msg::Poll { session, id, reply } => {
                let _ = reply.send(match self.find(&session, &id) {
                    Found::Live(id) => self.poll_value(&self.procs[&id]),
                    Found::Receipt(r) => receipt_value(&r, PREVIEW_CHARS, "output_preview"),
                    Found::Missing(v) => v,
                });
            }
            Msg::Log {
                session,
                id,
                offset,
                limit,
                reply,
            } => {
                let _ = reply.send(match self.find(&session, &id) {
                    Found::Live(id) => {
                        let p = &self.procs[&id];
                        log_value(&p.id, &p.command, status_of(p), &p.output, offset, limit)
                    }
                    Found::Receipt(r) => {
                        log_value(&r.id, &r.command, "exited", &r.output, offset, limit)
                    }
                    Found::Missing(v) => v,
                });
            }
            Msg::Wait { session, id, reply } => {
                let _ = reply.send(match self.find(&session, &id) {
                    Found::Live(id) => {
                        let p = self.procs.get_mut(&id);
                        match p {
                            Some(p) if p.ending.is_none() => {
                                let (tx, rx) = oneshot::channel();
                                p.on_finish.push((tx, FinishAnswer::Wait));
                                Err(rx)
                            }
                            Some(p) => Ok(finish_value(p, FinishAnswer::Wait)),
                            None => Ok(not_found(&id)),
                        }
                    }
                    Found::Receipt(r) => Ok(receipt_value(&r, SNAPSHOT_CHARS, "output")),
                    Found::Missing(v) => Ok(v),
                });
            }
            Msg::Kill {
                session,
                id,
                source,
                reply,
            } => {
                let _ = reply.send(match self.find(&session, &id) {
                    Found::Live(id) => self.stop(&id, source, FinishAnswer::Kill),
                    Found::Receipt(r) => {
                        let mut v = receipt_value(&r, SNAPSHOT_CHARS, "output");
                        v["status"] = json!("already_exited");
                        Ok(v)
                    }
                    Found::Missing(v) => Ok(v),
                });
            }
            Msg::Stdin {
                session,
                id,
                close,
                reply,
            } => {
                let answer = match self.find(&session, &id) {
                    Found::Live(id) => match self.procs.get_mut(&id) {
                        Some(p) if p.ending.is_some() => Err(json!({"status": "already_exited", "error": "The process has already finished."})),
                        Some(p) if close => {
                            p.stdin = None;
                            self.typed
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .remove(&p.id);
                            Ok(mpsc::channel(1).0)
                        }
                        Some(p) => p.stdin.clone().ok_or_else(|| json!({"status": "error", "error": "The process's stdin was closed; nothing more can be written."})),
                        None => Err(not_found(&id)),
                    },
                    Found::Receipt(_) => Err(json!({"status": "already_exited", "error": "The process has already finished."})),
                    Found::Missing(v) => Err(v),
                };
                let _ = reply.send(answer);
            }
            Msg::EndSession { session, reply } => {
                let ids: Vec<String> = self
                    .procs
                    .values()
                    .filter(|p| p.session == session && p.ending.is_none())
                    .map(|p| p.id.clone())
                    .collect();
                let mut pending = vec![];
                for id in ids {
                    if let Err(rx) = self.stop(&id, "session_end", FinishAnswer::Kill) {
                        pending.push(rx);
                    }
                }
                let _ = reply.send(pending);
            }
            Msg::Handover {
                session,
                id,
                to,
                reply,
            } => {
                let answer = match self.find(&session, &id) {
                    Found::Live(id) => match self.procs.get_mut(&id) {
                        Some(p) if p.ending.is_none() => {
                            p.session = to.clone();
                            json!({"status": "handed_over", "session_id": p.id, "to_session": to})
                        }
                        _ => {
                            json!({"status": "already_exited", "error": "The process has already finished; there is nothing to hand over."})
                        }
                    },
                    Found::Receipt(_) => {
                        json!({"status": "already_exited", "error": "The process has already finished; there is nothing to hand over."})
                    }
                    Found::Missing(v) => v,
                };
                let _ = reply.send(answer);
            }
            Msg::Link {
                previous,
                continuation,
            } => {
                if previous != continuation {
                    self.previous.insert(continuation, previous);
                }
            }
            Msg::Shutdown => {}
        }
    }

    /// Whether `caller` may see what `owner` owns: the same session, or a continuation of it.
    fn may_read(&self, caller: &str, owner: &str) -> bool {
        may_read(&self.previous, caller, owner)
    }

    /// Resolves an exact id or a unique prefix (4+ hex characters, with or without `proc_`)
    /// among what `session` may see: live records first, then receipts.
    fn find(&self, session: &str, id: &str) -> Found {
        let id = id.trim();
        if let Some(p) = self.procs.get(id)
            && self.may_read(session, &p.session)
        {
            return Found::Live(p.id.clone());
        }
        let previous = &self.previous;
        let owner_ok = |owner: &str| may_read(previous, session, owner);
        if let Some(r) = self.receipts.load(id, &owner_ok) {
            return Found::Receipt(Box::new(r));
        }
        let hex = id.strip_prefix("proc_").unwrap_or(id);
        if hex.len() < MIN_PREFIX || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Found::Missing(if hex.len() < MIN_PREFIX {
                json!({"status": "not_found", "error": format!("'{id}' is too short to pick a process; send the full id or at least {MIN_PREFIX} of its hex characters.")})
            } else {
                not_found(id)
            });
        }
        let prefix = format!("proc_{hex}");
        let mut live: Vec<&Proc> = self
            .procs
            .values()
            .filter(|p| p.id.starts_with(&prefix) && self.may_read(session, &p.session))
            .collect();
        let mut stored: Vec<Receipt> = self
            .receipts
            .list(&owner_ok)
            .into_iter()
            .filter(|r| r.id.starts_with(&prefix) && !self.procs.contains_key(&r.id))
            .collect();
        match (live.len(), stored.len()) {
            (1, 0) => Found::Live(live.remove(0).id.clone()),
            (0, 1) => Found::Receipt(Box::new(stored.remove(0))),
            (0, 0) => Found::Missing(not_found(id)),
            (a, b) => Found::Missing(
                json!({"status": "not_found", "error": format!("'{id}' matches {} processes; send more of the id.", a + b)}),
            ),
        }
    }

    /// Signals a live process to stop; answers at once when it already finished.
    fn stop(
        &mut self,
        id: &str,
        source: &'static str,
        answer: FinishAnswer,
    ) -> Result<Value, oneshot::Receiver<Value>> {
        let grace = self.config.kill_grace;
        let Some(p) = self.procs.get_mut(id) else {
            return Ok(not_found(id));
        };
        if p.ending.is_some() {
            let mut v = finish_value(p, FinishAnswer::Wait);
            v["status"] = json!("already_exited");
            return Ok(v);
        }
        let (tx, rx) = oneshot::channel();
        p.on_finish.push((tx, answer));
        if p.stop_source.is_none() {
            p.stop_source = Some(source);
            let group = p.group.clone();
            tokio::spawn(async move { terminate(group.as_ref(), grace).await });
        }
        Err(rx)
    }

    fn finish(&mut self, id: &str, code: i32) {
        let Some(p) = self.procs.get_mut(id) else {
            return;
        };
        if p.ending.is_some() {
            return;
        }
        p.guard.disarm();
        p.stdin = None;
        self.typed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        let ending = Ending {
            code,
            reason: if p.stop_source.is_some() {
                "killed"
            } else {
                "exited"
            },
            source: p.stop_source,
            duration: p.started.elapsed(),
        };
        p.ending = Some(ending.clone());
        // The receipt is durable before anyone hears of the exit. Small and local, so written
        // inline rather than handed to a blocking pool.
        let receipt = Receipt {
            id: p.id.clone(),
            command: p.command.clone(),
            cwd: p.cwd.display().to_string(),
            session_id: p.session.clone(),
            started_at: unix_secs(p.started_at),
            duration_seconds: (ending.duration.as_secs_f64() * 100.0).round() / 100.0,
            exit_code: code,
            completion_reason: ending.reason.to_string(),
            termination_source: ending.source.map(str::to_string),
            output: p.output.clone(),
        };
        if let Err(err) = self.receipts.save(&receipt) {
            tracing::warn!(%err, id, "could not write a process receipt");
        }
        for (tx, answer) in std::mem::take(&mut p.on_finish) {
            let _ = tx.send(finish_value(p, answer));
        }
    }

    /// Drops finished records older than the TTL, then the oldest finished while over the cap.
    fn prune_memory(&mut self) {
        self.procs
            .retain(|_, p| p.ending.is_none() || p.started.elapsed() < FINISHED_TTL);
        while self.procs.len() >= MAX_PROCESSES {
            let oldest = self
                .procs
                .values()
                .filter(|p| p.ending.is_some())
                .min_by_key(|p| p.started)
                .map(|p| p.id.clone());
            match oldest {
                Some(id) => {
                    self.procs.remove(&id);
                }
                None => break,
            }
        }
    }

    fn poll_value(&self, p: &Proc) -> Value {
        let mut v = json!({
            "session_id": p.id,
            "command": redact(&p.command),
            "status": status_of(p),
            "pid": p.pid,
            "uptime_seconds": p.ending.as_ref().map(|e| e.duration).unwrap_or_else(|| p.started.elapsed()).as_secs(),
            "output_preview": redact(&strip_ansi(last_chars(&p.output, PREVIEW_CHARS))),
        });
        if let Some(e) = &p.ending {
            v["exit_code"] = json!(e.code);
            v["completion_reason"] = json!(e.reason);
            v["termination_source"] = json!(e.source);
        }
        v
    }

    fn list(&self, session: &str) -> Value {
        let mut out = vec![];
        let mut live: Vec<&Proc> = self
            .procs
            .values()
            .filter(|p| self.may_read(session, &p.session))
            .collect();
        live.sort_by_key(|p| p.started);
        for p in &live {
            let mut v = json!({
                "session_id": p.id,
                "command": redact(&p.command.chars().take(200).collect::<String>()),
                "cwd": p.cwd.display().to_string(),
                "pid": p.pid,
                "started_at": unix_secs(p.started_at),
                "uptime_seconds": p.started.elapsed().as_secs(),
                "status": status_of(p),
                "output_preview": redact(&strip_ansi(last_chars(&p.output, 200))),
            });
            if let Some(e) = &p.ending {
                v["exit_code"] = json!(e.code);
                v["completion_reason"] = json!(e.reason);
            }
            out.push(v);
        }
        let previous = &self.previous;
        for r in self
            .receipts
            .list(&|owner| may_read(previous, session, owner))
        {
            if self.procs.contains_key(&r.id) {
                continue;
            }
            out.push(json!({
                "session_id": r.id,
                "command": r.command.chars().take(200).collect::<String>(),
                "cwd": r.cwd,
                "started_at": r.started_at,
                "status": "exited",
                "exit_code": r.exit_code,
                "completion_reason": r.completion_reason,
                "output_preview": last_chars(&r.output, 200),
                "from_receipt": true,
            }));
        }
        json!({"processes": out})
    }
}

/// `caller` may read what `owner` owns: the same session, or a continuation of it (followed
/// back a bounded number of links).
fn may_read(previous: &HashMap<String, String>, caller: &str, owner: &str) -> bool {
    let mut cur = caller;
    for _ in 0..32 {
        if cur == owner {
            return true;
        }
        match previous.get(cur) {
            Some(prev) => cur = prev,
            None => return false,
        }
    }
    false
}

fn status_of(p: &Proc) -> &'static str {
    if p.ending.is_some() {
        "exited"
    } else {
        "running"
    }
}

fn finish_value(p: &Proc, answer: FinishAnswer) -> Value {
    let (code, reason, source) = p
        .ending
        .as_ref()
        .map(|e| (e.code, e.reason, e.source))
        .unwrap_or((-1, "exited", None));
    let status = match answer {
        FinishAnswer::Wait => "exited",
        FinishAnswer::Kill => "killed",
    };
    json!({
        "status": status,
        "session_id": p.id,
        "command": redact(&p.command),
        "exit_code": code,
        "completion_reason": reason,
        "termination_source": source,
        "output": redact(&strip_ansi(last_chars(&p.output, SNAPSHOT_CHARS))),
    })
}

fn receipt_value(r: &Receipt, chars: usize, key: &str) -> Value {
    let mut v = json!({
        "session_id": r.id,
        "command": r.command,
        "status": "exited",
        "exit_code": r.exit_code,
        "completion_reason": r.completion_reason,
        "termination_source": r.termination_source,
        "duration_seconds": r.duration_seconds,
        "from_receipt": true,
    });
    v[key] = json!(strip_ansi(last_chars(&r.output, chars)));
    v
}

fn log_value(
    id: &str,
    command: &str,
    status: &str,
    output: &str,
    offset: Option<usize>,
    limit: usize,
) -> Value {
    let lines: Vec<&str> = output.lines().collect();
    let total = lines.len();
    let limit = limit.max(1);
    let (start, end) = match offset {
        Some(o) => (o.min(total), o.saturating_add(limit).min(total)),
        None => (total.saturating_sub(limit), total),
    };
    let shown = lines[start..end].join("\n");
    json!({
        "session_id": id,
        "command": redact(command),
        "status": status,
        "output": redact(&strip_ansi(&shown)),
        "total_lines": total,
        "showing": format!("{} lines", end - start),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_see_their_predecessors() {
        let mut prev = HashMap::new();
        prev.insert("b".to_string(), "a".to_string());
        prev.insert("c".to_string(), "b".to_string());
        assert!(may_read(&prev, "c", "a"));
        assert!(may_read(&prev, "a", "a"));
        assert!(!may_read(&prev, "a", "c"));
        assert!(!may_read(&prev, "x", "a"));
    }

    #[test]
    fn log_pages_by_line() {
        let out: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let tail = log_value("p", "c", "exited", &out, None, 3);
        assert_eq!(tail["output"], "line 8\nline 9\nline 10");
        assert_eq!(tail["total_lines"], 10);
        assert_eq!(tail["showing"], "3 lines");
        let head = log_value("p", "c", "exited", &out, Some(0), 2);
        assert_eq!(head["output"], "line 1\nline 2");
    }
}
