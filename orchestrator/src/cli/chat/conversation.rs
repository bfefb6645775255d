//! The conversation loop of `troupe chat` without `-q`: read a message (or a slash command),
//! run the turn while showing it live, ask for approvals inline as they come, and take
//! interrupts: Ctrl-C once stops softly (running calls finish, nothing new starts), twice
//! stops everything the turn started, a third time leaves. Ctrl-D at the prompt leaves.
//!
//! Leaving ends the session (its background processes with it) before the runtime closes, so
//! nothing it started outlives the command.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use tokio::signal::unix::{Signal, SignalKind, signal};
use troupe_actors::events::{EventKind, SessionEvent};
use troupe_actors::model::{ChatMessage, ModelProvider};
use troupe_actors::session::{SessionError, SessionHandle, TurnOutcome, TurnStatus};
use troupe_actors::supervisor::{ApprovalChoice, ApprovalKind, PendingApproval, SecretRequest};

use super::display::{Display, Style, TICK};
use super::input::{LineEditor, Names, Read, TurnInput, read_masked, read_piped_line};
use super::{ChatArgs, SessionChoice, session_options, summarise};
use crate::api::{ApprovalStream, EventStream};
use crate::cli::error::{CliError, EXIT_BUDGET, EXIT_DONE, EXIT_FAILED, EXIT_INTERRUPTED};
use crate::cli::status_line::AnswerClock;
use crate::cli::visible::{visible, visible_line};
use crate::runtime::Runtime;

/// The prompt for a message.
const PROMPT: &str = "› ";
/// How long leaving waits for a hard-stopped turn to wind down.
const LEAVE_WAIT: Duration = Duration::from_secs(5);
/// What the model reads when the conversation moves to another model or toolsets.
const SWITCH_NOTE: &str = "(troupe: the person switched the model or toolsets. The conversation goes on, but the shell starts again in the project directory and background processes started before were stopped; use absolute paths or cd again.)";
/// Where the line editor keeps its history, under the troupe home.
const HISTORY_FILE: &str = "state/chat_history";

/// The question of an approval.
const APPROVE_PROMPT: &str =
    "  approve? [y]es once / [a]ll like it this session / [n]o / [?] arguments: ";

/// What to do after a command or a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Read the next message.
    Continue,
    /// Leave the conversation.
    Leave,
    /// Leave because the person interrupted three times.
    LeaveInterrupted,
}

/// One conversation: its session, screen and input.
pub(super) struct Conversation<'a> {
    pub(super) args: &'a ChatArgs,
    pub(super) runtime: &'a Runtime,
    pub(super) script: Option<Arc<dyn ModelProvider>>,
    pub(super) choice: SessionChoice,
    pub(super) session: SessionHandle,
    pub(super) display: Display,
    pub(super) names: Arc<Mutex<Names>>,
    /// The model's description, from the session's start.
    pub(super) provider: String,
    events: EventStream,
    approvals: Option<ApprovalStream>,
    /// sudo passwords asked for, read at a masked prompt (only with a terminal).
    secrets: Option<tokio::sync::mpsc::UnboundedReceiver<SecretRequest>>,
    editor: Option<LineEditor>,
    interrupts: Signal,
    /// Messages typed while a turn ran, sent after it.
    queued: VecDeque<String>,
    /// The exit code the last turn calls for: leaving after a failed turn says so.
    last_turn: i32,
    /// The stored sessions `/resume` listed last, by their number in the list.
    pub(super) listed: Vec<String>,
    /// A read of the next message still waiting for the person, kept while a turn the
    /// session started by itself (a background notice) is shown.
    pending: Option<PendingRead>,
    /// Messages come from a terminal (the line editor), not a pipe.
    at_terminal: bool,
}

/// A read running on the blocking pool: the line editor comes back with the line.
type PendingRead = tokio::task::JoinHandle<(Option<LineEditor>, Read)>;

/// Runs a conversation on `runtime`; the caller closes the runtime.
pub(super) async fn run(
    args: &ChatArgs,
    runtime: &Runtime,
    script: Option<Arc<dyn ModelProvider>>,
) -> Result<i32, CliError> {
    let terminal = std::io::stdin().is_terminal();
    let interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CliError::failed(format!("cannot take Ctrl-C: {e}")))?;
    let names = Arc::new(Mutex::new(Names::default()));
    let editor = if terminal {
        let history = crate::settings::TroupeHome::from_env()
            .path()
            .join(HISTORY_FILE);
        Some(LineEditor::open(Some(history), Arc::clone(&names)).map_err(CliError::failed)?)
    } else {
        None
    };
    // Approvals are asked only when someone can answer; piped, the unattended policy decides.
    let approvals = if terminal {
        Some(runtime.troupe().approvals().await?)
    } else {
        None
    };
    // Only a person at this terminal can type a secret unseen; piped input never is asked.
    let secrets = if terminal {
        Some(runtime.troupe().secret_requests().await?)
    } else {
        None
    };
    let style = Style::detect();
    let choice = SessionChoice {
        stream_text: true,
        // The live region's "model thinking" line counts the tokens received.
        progress: style.live,
        ..SessionChoice::default()
    };
    let mut events = runtime.troupe().events();
    let options = session_options(args, runtime, script.clone(), &choice)?;
    let options = super::resumed(args, runtime, options).await?;
    let session = runtime.troupe().open_session(options).await?;
    let mut display = Display::new(style, session.id());
    let provider = started(&mut events, &mut display, session.id()).await;
    let mut chat = Conversation {
        args,
        runtime,
        script,
        choice,
        session,
        display,
        names,
        provider,
        events,
        approvals,
        secrets,
        editor,
        interrupts,
        queued: VecDeque::new(),
        last_turn: EXIT_DONE,
        listed: Vec::new(),
        pending: None,
        at_terminal: terminal,
    };
    chat.refresh_names();
    if terminal {
        chat.banner();
    }
    let result = chat.converse().await;
    chat.end_session().await;
    result
}

/// What woke the turn loop.
enum Step {
    Done(Result<TurnOutcome, SessionError>),
    Event(SessionEvent),
    Approval(PendingApproval),
    Secret(SecretRequest),
    Typed(String),
    Interrupt,
    Tick,
    GaveUp,
}

impl Conversation<'_> {
    async fn converse(&mut self) -> Result<i32, CliError> {
        let mut interrupted_at_prompt = false;
        loop {
            let read = match self.queued.pop_front() {
                Some(line) => Read::Line(line),
                None => self.read(PROMPT).await,
            };
            let line = match read {
                Read::End => return Ok(self.last_turn),
                Read::Interrupted if interrupted_at_prompt => return Ok(self.last_turn),
                Read::Interrupted => {
                    interrupted_at_prompt = true;
                    self.note("(Ctrl-C again or Ctrl-D to leave)");
                    continue;
                }
                Read::Line(line) => line,
            };
            interrupted_at_prompt = false;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            // `/etc/hosts …` is a message that starts with a path, not a command.
            let flow = if crate::plugins::slash::parse(text).is_some() {
                self.command(text).await
            } else {
                self.turn(text.to_string()).await
            };
            match flow {
                Flow::Continue => {}
                Flow::Leave => return Ok(self.last_turn),
                Flow::LeaveInterrupted => return Ok(EXIT_INTERRUPTED),
            }
        }
    }

    /// Reads a message at `prompt`: the line editor on a terminal (kept in the history), else
    /// the next piped line (Ctrl-C leaves). A turn the session starts by itself meanwhile (a
    /// background process reported) is shown as it runs; the read goes on.
    async fn read(&mut self, prompt: &str) -> Read {
        loop {
            let piped = !self.at_terminal;
            let mut handle = match self.pending.take() {
                Some(handle) => handle,
                None => match self.editor.take() {
                    Some(mut editor) => {
                        let prompt = prompt.to_string();
                        tokio::task::spawn_blocking(move || {
                            let read = editor.read(&prompt, true);
                            (Some(editor), read)
                        })
                    }
                    None => tokio::task::spawn_blocking(|| (None, read_piped_line())),
                },
            };
            let woke = tokio::select! {
                done = &mut handle => Ok(done),
                Some(event) = self.events.next() => Err(Some(event)),
                Some(()) = self.interrupts.recv(), if piped => Err(None),
            };
            match woke {
                Ok(Ok((editor, read))) => {
                    if editor.is_some() {
                        self.editor = editor;
                    }
                    return read;
                }
                Ok(Err(_)) => return Read::End,
                // Ctrl-C while reading piped input leaves.
                Err(None) => return Read::End,
                Err(Some(event)) => {
                    self.pending = Some(handle);
                    self.between_turns(event).await;
                }
            }
        }
    }

    /// An event while the person is at the prompt: a background notice is shown as a line,
    /// and a turn it started is shown until its answer.
    async fn between_turns(&mut self, event: SessionEvent) {
        let root = self.session.id().to_string();
        match &event.kind {
            EventKind::ProcessNotice { .. } | EventKind::SessionStarted { .. } => {
                self.display.event(&event);
            }
            EventKind::TurnStarted { .. } if event.session_id == root => {
                self.display.start_turn();
                self.display.event(&event);
                let mut ticker = tokio::time::interval(TICK);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tokio::select! {
                        Some(event) = self.events.next() => {
                            self.display.event(&event);
                            if let EventKind::Final { text, status, .. } = &event.kind
                                && event.session_id == root
                            {
                                self.display.finish_turn(text, status);
                                return;
                            }
                        }
                        Some(()) = self.interrupts.recv() => {
                            let _ = self.runtime.troupe().stop(&root, true).await;
                            self.note_live("stopping the turn a background notice started");
                        }
                        _ = ticker.tick(), if self.display.style.live => self.display.tick(),
                    }
                }
            }
            _ => {}
        }
    }

    /// Reads an answer to a question (not kept in the history).
    async fn read_answer(&mut self, prompt: &str) -> Read {
        self.edit(prompt, false).await
    }

    async fn edit(&mut self, prompt: &str, remember: bool) -> Read {
        match self.editor.take() {
            Some(mut editor) => {
                let prompt = prompt.to_string();
                let read = tokio::task::spawn_blocking(move || {
                    let read = editor.read(&prompt, remember);
                    (editor, read)
                })
                .await;
                match read {
                    Ok((editor, read)) => {
                        self.editor = Some(editor);
                        read
                    }
                    Err(_) => Read::End,
                }
            }
            None => Read::End,
        }
    }

    /// One message to the model, shown live until its answer.
    async fn turn(&mut self, text: String) -> Flow {
        // What is left from before belongs to no turn: a Ctrl-C pressed while no turn ran,
        // events of a stopped tree that came after its answer.
        while let Some(Some(())) = self.interrupts.recv().now_or_never() {}
        while let Some(event) = self.events.try_next() {
            if matches!(event.kind, EventKind::SessionStarted { .. }) {
                self.display.event(&event);
            }
        }
        self.display.start_turn();
        let session = self.session.clone();
        let send = async move { session.send(text).await };
        tokio::pin!(send);
        let mut typing = self.start_typing();
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut interrupts = 0u32;
        let mut leave_by: Option<tokio::time::Instant> = None;
        let outcome = loop {
            let step = tokio::select! {
                outcome = &mut send => Step::Done(outcome),
                Some(event) = self.events.next() => Step::Event(event),
                Some(request) = next_approval(&mut self.approvals) => Step::Approval(request),
                Some(request) = next_secret(&mut self.secrets) => Step::Secret(request),
                Some(line) = next_typed(&mut typing) => Step::Typed(line),
                Some(()) = self.interrupts.recv() => Step::Interrupt,
                _ = ticker.tick(), if self.display.style.live => Step::Tick,
                () = sleep_until(leave_by) => Step::GaveUp,
            };
            match step {
                Step::Done(outcome) => break Some(outcome),
                Step::Event(event) => self.display.event(&event),
                Step::Tick => self.display.tick(),
                Step::GaveUp => break None,
                Step::Interrupt => {
                    interrupts += 1;
                    if self.interrupt(interrupts).await {
                        leave_by.get_or_insert(tokio::time::Instant::now() + LEAVE_WAIT);
                    }
                }
                Step::Typed(line) => self.typed(line).await,
                Step::Secret(request) => {
                    self.stop_typing(&mut typing).await;
                    self.ask_secret(request).await;
                    typing = self.start_typing();
                }
                Step::Approval(request) => {
                    self.stop_typing(&mut typing).await;
                    if self.ask(request).await {
                        interrupts += 1;
                        if self.interrupt(interrupts).await {
                            leave_by.get_or_insert(tokio::time::Instant::now() + LEAVE_WAIT);
                        }
                    }
                    typing = self.start_typing();
                }
            }
        };
        self.stop_typing(&mut typing).await;
        // Events sent before the answer are queued: show them before it.
        while let Some(event) = self.events.try_next() {
            self.display.event(&event);
        }
        match outcome {
            Some(Ok(outcome)) => {
                self.last_turn = match outcome.status {
                    TurnStatus::Failed => EXIT_FAILED,
                    TurnStatus::BudgetExceeded => EXIT_BUDGET,
                    _ => EXIT_DONE,
                };
                self.display
                    .finish_turn(&outcome.text, outcome.status.as_str());
            }
            Some(Err(error)) => {
                self.last_turn = EXIT_FAILED;
                self.display.finish_turn("", "failed");
                self.note(&self.display.style.red(&format!("the turn failed: {error}")));
            }
            None => {}
        }
        if leave_by.is_some() {
            Flow::LeaveInterrupted
        } else {
            Flow::Continue
        }
    }

    /// The `n`th Ctrl-C of a turn; true when it is time to leave.
    async fn interrupt(&mut self, n: u32) -> bool {
        let troupe = self.runtime.troupe();
        let id = self.session.id().to_string();
        // A person who stops a turn has not confirmed what they typed ahead.
        if !self.queued.is_empty() {
            let dropped = self.queued.len();
            self.queued.clear();
            self.note_live(&format!(
                "dropped {dropped} message{} typed during the turn",
                super::display::plural(dropped as u64)
            ));
        }
        match n {
            1 => {
                let _ = self.session.drain().await;
                self.note_live("stopping: running calls finish, nothing new starts (Ctrl-C again stops them now)");
                false
            }
            2 => {
                let _ = troupe.stop(&id, true).await;
                self.note_live("stopping everything this turn started (Ctrl-C again to leave)");
                false
            }
            _ => {
                let _ = troupe.stop(&id, true).await;
                true
            }
        }
    }

    /// A line typed while the turn runs: `/stop` and `/steer` act now, the rest waits.
    async fn typed(&mut self, line: String) {
        let text = line.trim();
        let shown = self.display.style.dim(&format!("› {}", visible_line(text)));
        self.display.permanent(&shown);
        if text == "/stop" {
            let _ = self.runtime.troupe().stop(self.session.id(), true).await;
            self.note_live("stopping everything this turn started");
        } else if let Some(rest) = text.strip_prefix("/steer") {
            let reply = self.steer(rest.trim()).await;
            self.note_live(&reply);
        } else {
            self.note_live(&format!(
                "queued for when this turn ends: {}",
                visible_line(text)
            ));
            self.queued.push_back(text.to_string());
        }
    }

    /// `/steer [subagent id] text`: a note for a running subagent (the only one, or the one
    /// named), else for this session's running turn.
    pub(super) async fn steer(&self, rest: &str) -> String {
        if rest.is_empty() {
            return "/steer needs the note: /steer [subagent id] TEXT".into();
        }
        let running = self.session.running_subagents();
        let (first, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let named = running.iter().find(|(id, _)| id == first);
        let (target, text) = match (named, running.len()) {
            (Some((id, _)), _) if !after.trim().is_empty() => (Some(id.clone()), after.trim()),
            (_, 1) => (Some(running[0].0.clone()), rest),
            (_, 0) => (None, rest),
            _ => {
                let ids: Vec<String> = running
                    .iter()
                    .map(|(id, goal)| format!("{id} ({})", visible_line(goal)))
                    .collect();
                return format!(
                    "several subagents are running; name one: /steer ID TEXT (running: {})",
                    ids.join(", ")
                );
            }
        };
        match target {
            Some(id) => match self.session.steer_subagent(&id, text).await {
                Ok(true) => format!("steered {id}: it reads the note before its next step"),
                _ => format!("{id} has finished; the note was not delivered"),
            },
            None => match self.session.steer(text).await {
                Ok(true) => "noted: the model reads it before its next step".into(),
                _ => "nothing is running to steer; send it as a message instead".into(),
            },
        }
    }

    /// Asks one `clarify` question: the person types a choice's number or their own answer;
    /// true when they pressed Ctrl-C instead (the question is then declined).
    async fn ask_question(&mut self, request: &PendingApproval) -> bool {
        let style = self.display.style;
        let Ok(question) = troupe_tools::clarify::Question::parse(&request.arguments) else {
            return false;
        };
        let depth = request.agent_path.len().saturating_sub(1);
        let from = if depth > 0 {
            format!(" (a subagent, depth {depth})")
        } else {
            String::new()
        };
        self.note(&format!(
            "{} the agent{from} asks: {}",
            style.yellow("?"),
            style.bold(&visible_line(&question.question))
        ));
        for (i, choice) in question.choices.iter().enumerate() {
            self.note(&format!("  {}. {}", i + 1, visible_line(choice)));
        }
        let prompt = match (question.choices.is_empty(), question.allow_other) {
            (true, _) => "  your answer: ",
            (false, true) => "  pick a number or type your own answer: ",
            (false, false) => "  pick a number: ",
        };
        let mut interrupted = false;
        let choice = loop {
            match self.read_answer(prompt).await {
                Read::Line(typed) => match question.read_answer(&typed) {
                    Some(text) => break ApprovalChoice::Answer { text },
                    None => self.note("  that is not one of the answers offered; try again"),
                },
                Read::Interrupted => {
                    interrupted = true;
                    break ApprovalChoice::Deny { reason: None };
                }
                Read::End => break ApprovalChoice::Deny { reason: None },
            }
        };
        let said = match &choice {
            ApprovalChoice::Answer { text } => format!("  answered: {}", visible_line(text)),
            _ => "  declined".to_string(),
        };
        match self
            .runtime
            .troupe()
            .answer(&request.request_id, choice)
            .await
        {
            Ok(true) => self.note(&style.dim(&said)),
            _ => {
                self.note(&style.dim("  that question was already settled (timed out or stopped)"))
            }
        }
        interrupted
    }

    /// Asks for a secret (sudo's password) at a masked prompt: nothing typed is shown, kept or
    /// sent anywhere but to the tool that asked. An empty line or Ctrl-D declines.
    async fn ask_secret(&mut self, request: SecretRequest) {
        self.display.pause(true);
        let style = self.display.style;
        self.note(&format!(
            "{} {}",
            style.yellow("?"),
            visible_line(&request.prompt)
        ));
        let typed = tokio::task::spawn_blocking(|| read_masked("  password (not shown): "))
            .await
            .ok()
            .flatten()
            .filter(|p| !p.is_empty());
        let given = typed.is_some();
        match self
            .runtime
            .troupe()
            .answer_secret(&request.request_id, typed)
            .await
        {
            Ok(true) if given => self.note(&style.dim("  given to sudo")),
            Ok(true) => self.note(&style.dim("  declined")),
            _ => self.note(&style.dim("  that request was already settled (timed out or stopped)")),
        }
        self.display.pause(false);
    }

    /// Asks about one approval; true when the person pressed Ctrl-C instead of answering.
    async fn ask(&mut self, request: PendingApproval) -> bool {
        // A request settled since it was queued (a stop, a timeout) is not asked about.
        let pending = self.runtime.troupe().pending_approvals().await;
        if !pending.is_ok_and(|p| p.iter().any(|r| r.request_id == request.request_id)) {
            return false;
        }
        self.display.pause(true);
        if request.kind == ApprovalKind::Question {
            let interrupted = self.ask_question(&request).await;
            self.display.pause(false);
            return interrupted;
        }
        let style = self.display.style;
        let depth = request.agent_path.len().saturating_sub(1);
        let from = if depth > 0 {
            format!(" (a subagent, depth {depth})")
        } else {
            String::new()
        };
        let what = match request.kind {
            ApprovalKind::Call => format!(
                "{}{from} wants to run: {}",
                style.bold(&visible_line(&request.tool)),
                visible_line(&summarise(&request.arguments))
            ),
            ApprovalKind::BudgetExtension => format!("the session{from} wants more budget"),
            // Asked by `ask_question` above; never reaches here.
            ApprovalKind::Question => format!("the agent{from} asks a question"),
        };
        self.note(&format!("{} {what}", style.yellow("⚠")));
        self.note(&format!("  why: {}", visible_line(&request.reason)));
        let mut interrupted = false;
        let choice = loop {
            // The row above the prompt counts the time the call has waited for the answer.
            let clock = AnswerClock::start(APPROVE_PROMPT);
            let read = self.read_answer(APPROVE_PROMPT).await;
            if let (Some(clock), Read::Line(answer)) = (clock, &read) {
                clock.finish(APPROVE_PROMPT, answer);
            }
            match read {
                Read::Line(answer) => match answer.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" | "o" | "once" => break ApprovalChoice::Once,
                    "a" | "s" | "session" => break ApprovalChoice::Session,
                    "n" | "no" | "d" | "deny" => break ApprovalChoice::Deny { reason: None },
                    "?" => {
                        let full =
                            serde_json::to_string_pretty(&Value::Object(request.arguments.clone()))
                                .unwrap_or_default();
                        self.note(&visible(&full));
                    }
                    _ => self.note("  answer y, a, n or ? (nothing is run until you do)"),
                },
                Read::Interrupted => {
                    interrupted = true;
                    break ApprovalChoice::Deny { reason: None };
                }
                Read::End => break ApprovalChoice::Deny { reason: None },
            }
        };
        let word = match &choice {
            ApprovalChoice::Once => "approved once",
            ApprovalChoice::Session => "approved for this session",
            ApprovalChoice::Always => "approved",
            ApprovalChoice::Deny { .. } | ApprovalChoice::Answer { .. } => "denied",
        };
        match self
            .runtime
            .troupe()
            .answer(&request.request_id, choice)
            .await
        {
            Ok(true) => self.note(&style.dim(&format!("  {word}"))),
            _ => self.note(&style.dim("  that request was already settled (timed out or stopped)")),
        }
        self.display.pause(false);
        interrupted
    }

    fn start_typing(&self) -> Option<(TurnInput, tokio::sync::mpsc::UnboundedReceiver<String>)> {
        self.editor.is_some().then(TurnInput::start)
    }

    /// Stops reading lines typed during the turn; those already read are still handled.
    async fn stop_typing(
        &mut self,
        typing: &mut Option<(TurnInput, tokio::sync::mpsc::UnboundedReceiver<String>)>,
    ) {
        let Some((input, mut lines)) = typing.take() else {
            return;
        };
        input.finish().await;
        while let Ok(line) = lines.try_recv() {
            self.typed(line).await;
        }
    }

    /// A line for the person (not the answer), on the terminal or stderr.
    pub(super) fn note(&self, line: &str) {
        if self.display.style.live {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        } else {
            eprintln!("{line}");
        }
    }

    /// A note while live lines are on screen.
    fn note_live(&mut self, line: &str) {
        let line = self.display.style.yellow(line);
        self.display.permanent(&line);
    }

    fn banner(&self) {
        let style = self.display.style;
        let count = troupe_tools::sync::lock(&self.names).tools.len();
        let model = super::display::cut(&visible_line(&self.provider), 66);
        self.note(&format!(
            "{} {}",
            style.bold("troupe chat"),
            style.dim(&model)
        ));
        self.note(&style.dim(&format!(
            "{count} tools · /help for commands · Ctrl-D to leave"
        )));
    }

    /// Completion names: the built-in and plugin commands, the session's tools.
    pub(super) fn refresh_names(&self) {
        let mut commands: Vec<String> = super::commands::BUILT_IN
            .iter()
            .map(|(name, _)| format!("/{name}"))
            .collect();
        commands.extend(
            self.runtime
                .plugins()
                .commands()
                .names()
                .into_iter()
                .map(|n| format!("/{n}")),
        );
        let tools = self
            .view()
            .map(|view| view.tools().iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default();
        let mut names = troupe_tools::sync::lock(&self.names);
        names.commands = commands;
        names.tools = tools;
    }

    /// Opens a new session with the current choices, carrying the conversation when asked.
    pub(super) async fn reopen(&mut self, keep_messages: bool) -> Result<(), CliError> {
        let options = session_options(self.args, self.runtime, self.script.clone(), &self.choice)?;
        let troupe = self.runtime.troupe();
        let session = troupe.open_session(options).await?;
        if keep_messages {
            let mut messages = self.session.conversation().await.unwrap_or_default();
            // The tools' per-session state (working directory, background processes) does not
            // move to the new session: the model is told, so it does not act on a stale cwd.
            messages.push(ChatMessage::User {
                content: SWITCH_NOTE.to_string(),
            });
            let _ = session.load_conversation(messages).await;
        }
        self.end_session().await;
        self.session = session;
        self.display.reset(self.session.id(), keep_messages);
        self.provider = started(&mut self.events, &mut self.display, self.session.id()).await;
        self.refresh_names();
        Ok(())
    }

    /// Goes on with a stored session in place of this one: its messages come back, and the
    /// calls that were running when its process stopped get a note (none is run again).
    pub(super) async fn resume_stored(
        &mut self,
        stored: crate::sessions::StoredSession,
    ) -> Result<(), CliError> {
        let options = session_options(self.args, self.runtime, self.script.clone(), &self.choice)?
            .resuming(stored.restore(false));
        let session = self.runtime.troupe().open_session(options).await?;
        self.end_session().await;
        self.session = session;
        self.display.reset(self.session.id(), true);
        self.provider = started(&mut self.events, &mut self.display, self.session.id()).await;
        self.refresh_names();
        Ok(())
    }

    /// Ends the session: its turn, its processes, its actor.
    async fn end_session(&self) {
        let troupe = self.runtime.troupe();
        let id = self.session.id().to_string();
        let _ = troupe.stop(&id, true).await;
        self.runtime.builtins().end_session(&id).await;
        let _ = troupe.close_session(&id).await;
    }
}

/// Shows the events of a session's start; the model it was opened on.
async fn started(events: &mut EventStream, display: &mut Display, session_id: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.next()).await {
        display.event(&event);
        if let EventKind::SessionStarted { provider, .. } = &event.kind
            && event.session_id == session_id
        {
            return provider.clone();
        }
    }
    String::new()
}

async fn next_secret(
    secrets: &mut Option<tokio::sync::mpsc::UnboundedReceiver<SecretRequest>>,
) -> Option<SecretRequest> {
    match secrets {
        Some(stream) => stream.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_approval(approvals: &mut Option<ApprovalStream>) -> Option<PendingApproval> {
    match approvals {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

async fn next_typed(
    typing: &mut Option<(TurnInput, tokio::sync::mpsc::UnboundedReceiver<String>)>,
) -> Option<String> {
    match typing {
        Some((_, lines)) => lines.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
