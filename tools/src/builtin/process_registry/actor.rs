//! The registry's actor: the one task that owns every process's state, answering the
//! handle's messages in order.

use super::*;

pub(super) struct Actor {
    pub(super) typed: Typed,
    pub(super) procs: HashMap<String, Proc>,
    /// continuation session -> the session it continued.
    pub(super) previous: HashMap<String, String>,
    pub(super) receipts: ReceiptStore,
    pub(super) config: RegistryConfig,
    pub(super) mail: notices::Mailboxes,
    /// session -> how many processes it handed off.
    pub(super) handoffs: HashMap<String, usize>,
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
    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
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
                let reach = self.mail.reachable(&proc.session);
                self.procs.insert(proc.id.clone(), *proc);
                let _ = reply.send(reach);
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
                self.watch_output(&id, &text);
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
                        if p.pty {
                            let mut v = log_value(
                                &p.id,
                                &p.command,
                                status_of(p),
                                &super::super::pty::screen_text(&p.output),
                                offset,
                                limit,
                            );
                            v["raw_tail"] = json!(redact(last_chars(&p.output, RAW_TAIL_CHARS)));
                            v
                        } else {
                            log_value(&p.id, &p.command, status_of(p), &p.output, offset, limit)
                        }
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
                        Some(p) if !p.pty => Err(json!({"status": "error", "error": "This process has no stdin: background processes without a pty read an empty input. Start it with terminal(background=true, pty=true) to type into it."})),
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
            Msg::Listen {
                session,
                parent,
                tx,
            } => self.mail.listen(&session, parent.as_deref(), tx),
            Msg::Handoff {
                session,
                id,
                purpose,
                reply,
            } => {
                let _ = reply.send(self.handoff(&session, &id, &purpose));
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
        if p.notify {
            let shown = shown_output(p, usize::MAX);
            self.mail.deliver(notices::completion(notices::Completion {
                session: &p.session,
                id: &p.id,
                command: &p.command,
                code,
                reason: ending.reason,
                source: ending.source,
                output: &shown,
            }));
        }
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

    /// Feeds a process's new output to its watch and sends what it has to say.
    fn watch_output(&mut self, id: &str, text: &str) {
        let Some(p) = self.procs.get_mut(id) else {
            return;
        };
        let Some(watch) = p.watch.as_mut() else {
            return;
        };
        let plain = if p.pty {
            super::super::pty::screen_text(text)
        } else {
            strip_ansi(text)
        };
        let now = Instant::now();
        let (outcome, pattern) = watch.feed(&plain, now);
        let hits = watch.hits;
        let (session, command) = (p.session.clone(), p.command.clone());
        let disable = |actor: &mut Actor, why: String| {
            if let Some(p) = actor.procs.get_mut(id) {
                p.watch = None;
                p.notify = true;
            }
            actor
                .mail
                .deliver(notices::watch_disabled(&session, id, &why));
        };
        match outcome {
            notices::WatchOutcome::Quiet => {}
            notices::WatchOutcome::Disable(why) => disable(self, why),
            notices::WatchOutcome::Notice(lines, held) => {
                match self.mail.admit_watch(now) {
                    Err(tripped) => {
                        if let Some(text) = tripped {
                            self.mail
                                .deliver(notices::registry_note(&session, id, text));
                        }
                        return;
                    }
                    Ok(0) => {}
                    Ok(before) => self.mail.deliver(notices::registry_note(
                        &session,
                        id,
                        format!("[troupe: watch-pattern notices flow again; {before} were held back meanwhile.]"),
                    )),
                }
                let pattern = pattern.unwrap_or_default();
                self.mail.deliver(notices::watch_match(
                    &session, id, &command, &pattern, &lines, held,
                ));
                if hits >= notices::WATCH_LIFETIME_MAX_HITS {
                    disable(
                        self,
                        format!(
                            "it has sent the most watch notices one process may ({}). ",
                            notices::WATCH_LIFETIME_MAX_HITS
                        ),
                    );
                }
            }
        }
    }

    /// `handoff`: a subagent's running process goes to its parent with its notices.
    fn handoff(&mut self, session: &str, id: &str, purpose: &str) -> Value {
        let Some(parent) = self.mail.parent(session).map(str::to_string) else {
            return json!({"status": "error", "error": "Only a subagent can hand a process off (to the agent that started it); this session has no parent. Keep the process, or kill it when it is no longer needed."});
        };
        let purpose = purpose.trim();
        if purpose.is_empty() || purpose.lines().count() > 1 || purpose.chars().count() > 300 {
            return json!({"status": "error", "error": "'data' must be one sentence saying what the process is for (at most 300 characters), for the parent to read."});
        }
        let done = self.handoffs.get(session).copied().unwrap_or(0);
        if done >= MAX_HANDOFFS {
            return json!({"status": "error", "error": format!("This session has already handed off {MAX_HANDOFFS} processes, the most allowed. Kill processes the parent does not need.")});
        }
        let id = match self.find(session, id) {
            Found::Live(id) => id,
            Found::Receipt(_) => {
                return json!({"status": "already_exited", "error": "The process has already finished; there is nothing to hand off. Report its result in your answer instead."});
            }
            Found::Missing(v) => return v,
        };
        let Some(p) = self.procs.get_mut(&id) else {
            return not_found(&id);
        };
        if p.ending.is_some() {
            return json!({"status": "already_exited", "error": "The process has already finished; there is nothing to hand off. Report its result in your answer instead."});
        }
        if p.session != session {
            return json!({"status": "error", "error": "Only the session that started a process can hand it off."});
        }
        p.session = parent;
        p.handed_off = Some(purpose.to_string());
        // The parent is told when it ends, whatever the subagent asked for.
        if p.watch.is_none() {
            p.notify = true;
        }
        *self.handoffs.entry(session.to_string()).or_default() += 1;
        json!({
            "status": "handed_off",
            "session_id": p.id,
            "command": redact(&p.command),
            "note": "The agent that gave you this task owns this process now and will get its notices; you will not. Say in your final answer that you handed it off and why.",
        })
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
            "output_preview": redact(&shown_output(p, PREVIEW_CHARS)),
        });
        if let Some(e) = &p.ending {
            v["exit_code"] = json!(e.code);
            v["completion_reason"] = json!(e.reason);
            v["termination_source"] = json!(e.source);
        }
        if p.pty {
            v["pty"] = json!(true);
            v["raw_tail"] = json!(redact(last_chars(&p.output, RAW_TAIL_CHARS)));
        }
        if p.notify {
            v["notify_on_complete"] = json!(true);
        }
        if let Some(w) = &p.watch {
            v["watch_patterns"] = json!(w.patterns);
            v["watch_hits"] = json!(w.hits);
        }
        if let Some(purpose) = &p.handed_off {
            v["handed_off"] = json!(purpose);
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
            if p.pty {
                v["pty"] = json!(true);
            }
            if p.notify {
                v["notify_on_complete"] = json!(true);
            }
            if let Some(w) = &p.watch {
                v["watch_patterns"] = json!(w.patterns);
            }
            if let Some(purpose) = &p.handed_off {
                v["handed_off"] = json!(purpose);
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
pub(super) fn may_read(previous: &HashMap<String, String>, caller: &str, owner: &str) -> bool {
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

/// Raw output a pty process's poll and log carry beside the screen text.
const RAW_TAIL_CHARS: usize = 500;

/// The end of a process's output as the model reads it: a pty's as screen text, other
/// output without escape sequences.
fn shown_output(p: &Proc, chars: usize) -> String {
    if p.pty {
        // Twice the room: escapes and overwritten text shrink on the way.
        let raw = last_chars(&p.output, chars.saturating_mul(2));
        last_chars(&super::super::pty::screen_text(raw), chars).to_string()
    } else {
        strip_ansi(last_chars(&p.output, chars))
    }
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
        "output": redact(&shown_output(p, SNAPSHOT_CHARS)),
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

pub(super) fn log_value(
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
