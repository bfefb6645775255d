//! Slash commands of the conversation: troupe's own (`/help`, `/tools`, `/toolsets`, `/model`,
//! `/usage`, `/new`, `/stop`, `/steer`, `/resume`, `/quit`) and every plugin's, which go to the
//! plugin that registered them. None of them reaches the model.

use std::collections::BTreeMap;

use troupe_actors::session::SessionConfig;
use troupe_tools::ToolsetView;
use troupe_tools::deferral::is_deferrable;
use troupe_tools::search::assemble::assemble;
use troupe_tools::view::ViewSpec;

use super::conversation::{Conversation, Flow};
use super::display::{plural, thousands};
use super::session_options;
use crate::cli::error::CliError;
use crate::cli::visible::{visible, visible_line};
use crate::plugins::slash::parse;
use crate::sessions::ListQuery;

/// How many stored conversations `/resume` lists.
const RESUME_LISTED: usize = 10;

/// The first part of a session id, enough to tell sessions apart on screen.
fn short_id(id: &str) -> &str {
    id.get(..18).unwrap_or(id)
}

/// troupe's own commands and what each does.
pub(super) const BUILT_IN: &[(&str, &str)] = &[
    ("help", "this list"),
    ("tools", "the tools this conversation can use, by toolset"),
    (
        "toolsets",
        "show the toolsets; /toolsets a,b narrows or widens to those (within troupe.yaml)",
    ),
    (
        "model",
        "show the model; /model NAME asks the same server for another model",
    ),
    ("usage", "model requests, tokens and tool calls so far"),
    ("new", "start a new conversation (the same tools and model)"),
    (
        "stop",
        "stop everything running (also works while a turn runs)",
    ),
    (
        "steer",
        "/steer [subagent id] TEXT: a note for a running subagent (also while a turn runs)",
    ),
    (
        "resume",
        "list the stored conversations; /resume N (or an id) goes on with one",
    ),
    ("quit", "leave (as does Ctrl-D)"),
];

impl Conversation<'_> {
    /// Runs a slash command and says what it did.
    pub(super) async fn command(&mut self, line: &str) -> Flow {
        let Some((name, rest)) = parse(line) else {
            self.note("a command is / and a name, such as /help");
            return Flow::Continue;
        };
        let rest = rest.trim().to_string();
        let result = match name.as_str() {
            "help" => Ok(self.help()),
            "tools" => self.tools(),
            "toolsets" => self.toolsets(&rest).await,
            "model" => self.model(&rest).await,
            "usage" => Ok(self.usage()),
            "new" => self
                .reopen(false)
                .await
                .map(|()| "a new conversation: the model remembers nothing from before".into()),
            "stop" => Ok(self.stop_all().await),
            "steer" => Ok(self.steer(&rest).await),
            "resume" => self.resume(&rest).await,
            "quit" | "exit" => return Flow::Leave,
            _ => self.plugin(&name, line).await,
        };
        match result {
            Ok(text) => self.note(&text),
            Err(error) => self.note(&self.display.style.red(&error.to_string())),
        }
        Flow::Continue
    }

    fn help(&self) -> String {
        let style = self.display.style;
        let mut out = String::from("Commands (they go to troupe or a plugin, never to the model):");
        for (name, what) in BUILT_IN {
            out.push_str(&format!("\n  {}  {what}", style.bold(&format!("/{name}"))));
        }
        for (name, what, owner) in self.runtime.plugins().commands().described() {
            out.push_str(&format!(
                "\n  {}  {} {}",
                style.bold(&format!("/{}", visible_line(&name))),
                visible_line(&what),
                style.dim(&format!("(plugin {})", visible_line(&owner)))
            ));
        }
        out.push_str(
            "\nEnd a line with \\ to go on to the next. Ctrl-C stops a turn softly, twice stops it hard, three times leaves.",
        );
        out
    }

    /// The session's tools and settings as it was opened.
    pub(super) fn current(&self) -> Result<(ToolsetView, SessionConfig), CliError> {
        let options = session_options(self.args, self.runtime, self.script.clone(), &self.choice)?;
        let config = options
            .config
            .unwrap_or_else(|| self.runtime.session_defaults());
        let view = match (options.view, &options.profile) {
            (Some(view), _) => view,
            (None, Some(name)) => match self.runtime.troupe().profile(name) {
                Some(profile) => profile.view.clone(),
                None => self.runtime.view(None)?,
            },
            (None, None) => self.runtime.view(None)?,
        };
        Ok((view, config))
    }

    pub(super) fn view(&self) -> Option<ToolsetView> {
        self.current().ok().map(|(view, _)| view)
    }

    fn tools(&self) -> Result<String, CliError> {
        let (view, config) = self.current()?;
        let assembly = assemble(&view, config.context_length, &config.tool_search);
        let mut groups: BTreeMap<String, (Vec<String>, usize)> = BTreeMap::new();
        for tool in view.tools() {
            let toolset = tool.toolset.clone().unwrap_or_else(|| "(none)".into());
            let group = groups.entry(toolset).or_default();
            group.0.push(tool.name.clone());
            if assembly.activated && is_deferrable(tool, Some(&config.tool_search.defer)) {
                group.1 += 1;
            }
        }
        let style = self.display.style;
        let mut out = format!(
            "{} tool{} in {} toolset{}",
            view.len(),
            plural(view.len() as u64),
            groups.len(),
            plural(groups.len() as u64)
        );
        if assembly.activated {
            out.push_str(&format!(
                "; {} deferred: the model finds them with tool_search and runs them with tool_call",
                assembly.deferred_count
            ));
        }
        let width = super::display::width();
        for (toolset, (names, deferred)) in groups {
            let tools = if names.len() == 1 { "tool" } else { "tools" };
            let count = if deferred > 0 {
                format!("{} {tools}, {deferred} deferred", names.len())
            } else {
                format!("{} {tools}", names.len())
            };
            out.push_str(&format!(
                "\n  {} {}",
                style.bold(&visible_line(&toolset)),
                style.dim(&format!("({count})"))
            ));
            let names: Vec<String> = names.iter().map(|n| visible_line(n)).collect();
            for line in super::display::wrap(&names, width.saturating_sub(4)) {
                out.push_str(&format!("\n    {line}"));
            }
        }
        Ok(out)
    }

    async fn toolsets(&mut self, rest: &str) -> Result<String, CliError> {
        let allowed = self.allowed_toolsets()?;
        if rest.is_empty() {
            let (view, _) = self.current()?;
            let mut now: Vec<String> = view
                .tools()
                .iter()
                .filter_map(|t| t.toolset.clone())
                .collect();
            now.sort();
            now.dedup();
            return Ok(format!(
                "toolsets now: {}\nallowed by troupe.yaml: {}\n/toolsets a,b switches to those (the conversation goes on)",
                visible_line(&now.join(", ")),
                visible_line(&allowed.join(", "))
            ));
        }
        let names: Vec<String> = rest
            .split([',', ' '])
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        let refused: Vec<&String> = names.iter().filter(|n| !allowed.contains(n)).collect();
        if !refused.is_empty() {
            return Err(CliError::usage(format!(
                "/toolsets: {} {} not allowed here (allowed: {})",
                visible_line(
                    &refused
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                if refused.len() == 1 { "is" } else { "are" },
                visible_line(&allowed.join(", "))
            )));
        }
        let previous = self.choice.toolsets.replace(names.clone());
        if let Err(error) = self.reopen(true).await {
            self.choice.toolsets = previous;
            return Err(error);
        }
        let count = self.view().map_or(0, |v| v.len());
        Ok(format!(
            "toolsets now: {} ({count} tools); the conversation goes on",
            visible_line(&names.join(", "))
        ))
    }

    /// The toolsets troupe.yaml lets this conversation use: those of its configured view.
    fn allowed_toolsets(&self) -> Result<Vec<String>, CliError> {
        let base = match &self.args.profile {
            Some(name) => match self.runtime.troupe().profile(name) {
                Some(profile) => profile.view.clone(),
                None => self.runtime.view(None)?,
            },
            None => self.runtime.view(None)?,
        };
        let mut names: Vec<String> = base
            .narrow(ViewSpec::all())
            .map_err(|e| CliError::failed(e.to_string()))?
            .tools()
            .iter()
            .filter_map(|t| t.toolset.clone())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn model(&mut self, rest: &str) -> Result<String, CliError> {
        if rest.is_empty() {
            return Ok(format!(
                "model: {}\n/model NAME asks the same server for another model (the conversation goes on)",
                visible_line(&self.provider)
            ));
        }
        if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(CliError::usage(
                "/model takes one model name, such as /model qwen2.5-coder-1.5b",
            ));
        }
        let previous = self.choice.model.replace(rest.to_string());
        if let Err(error) = self.reopen(true).await {
            self.choice.model = previous;
            return Err(error);
        }
        Ok(format!(
            "model now: {} (from the next message on)",
            visible_line(rest)
        ))
    }

    /// `/resume`: the latest stored chat sessions, numbered (the ones `troupe sessions list`
    /// shows and `--continue` picks from); `/resume N` or `/resume ID` goes on with one.
    async fn resume(&mut self, rest: &str) -> Result<String, CliError> {
        let Some(store) = self.runtime.troupe().session_store() else {
            return Err(CliError::usage(
                "sessions are not kept (sessions.persist is false in troupe.yaml), so there is none to resume",
            ));
        };
        if rest.is_empty() {
            let query = ListQuery {
                origin: Some("chat".into()),
                limit: Some(RESUME_LISTED + 1),
                ..Default::default()
            };
            let sessions = store
                .list(query)
                .await
                .map_err(|e| CliError::failed(e.to_string()))?;
            let sessions: Vec<_> = sessions
                .into_iter()
                .filter(|s| s.id != self.session.id() && s.messages > 0)
                .take(RESUME_LISTED)
                .collect();
            if sessions.is_empty() {
                return Ok("no earlier chat session is stored; this conversation is kept as you go, and /resume or troupe chat --continue finds it later".into());
            }
            let now = crate::sessions::now_ms();
            let mut out = String::from("stored conversations, newest first:");
            for (i, s) in sessions.iter().enumerate() {
                out.push_str(&format!(
                    "\n  {:>2}. {}  {:>4} ago  {:>3} message{}  {}",
                    i + 1,
                    short_id(&s.id),
                    crate::cli::sessions::age(now - s.updated_at),
                    s.messages,
                    plural(s.messages),
                    crate::cli::sessions::one_line(&s.title, 40)
                ));
            }
            out.push_str(
                "\n/resume N goes on with one (or /resume ID, an id from troupe sessions list)",
            );
            self.listed = sessions.into_iter().map(|s| s.id).collect();
            return Ok(out);
        }
        let id = match rest.parse::<usize>() {
            Ok(n) if (1..=self.listed.len()).contains(&n) => self.listed[n - 1].clone(),
            Ok(n) if n <= RESUME_LISTED && rest.len() <= 2 => {
                return Err(CliError::usage(format!(
                    "/resume {n}: there is no conversation {n} in the last list; /resume lists them"
                )));
            }
            _ => rest.to_string(),
        };
        if id == self.session.id() {
            return Ok("that is this conversation; it goes on".into());
        }
        let stored = store.load(&id).await.map_err(|e| match e {
            crate::sessions::SessionStoreError::Database { .. } => CliError::failed(e.to_string()),
            other => CliError::usage(format!("/resume: {other}; /resume lists them")),
        })?;
        let (resumed, messages) = (stored.summary.id.clone(), stored.summary.messages);
        self.resume_stored(stored).await?;
        Ok(format!(
            "going on with session {} ({messages} message{}); the model remembers it",
            short_id(&resumed),
            plural(messages)
        ))
    }

    fn usage(&self) -> String {
        let total = self.display.total();
        format!(
            "{} model request{} · {} tokens in, {} out · {} · {} tool call{}",
            total.model_requests,
            plural(total.model_requests),
            thousands(total.input_tokens),
            thousands(total.output_tokens),
            super::display::dollars(total.cost_usd),
            total.tool_calls,
            plural(total.tool_calls)
        )
    }

    async fn stop_all(&self) -> String {
        let troupe = self.runtime.troupe();
        let turns = troupe.stop(self.session.id(), true).await.unwrap_or(0);
        let processes = self.runtime.builtins().end_session(self.session.id()).await;
        match (turns, processes) {
            (0, 0) => "nothing was running".into(),
            (_, 0) => "stopped".into(),
            (_, n) => format!(
                "stopped, with {n} background process{}",
                if n == 1 { "" } else { "es" }
            ),
        }
    }

    async fn plugin(&self, name: &str, line: &str) -> Result<String, CliError> {
        let commands = self.runtime.plugins().commands();
        if !commands.names().iter().any(|n| n == name) {
            return Err(CliError::usage(format!(
                "there is no command /{}; /help lists them",
                visible_line(name)
            )));
        }
        match commands.dispatch(line, Some(self.session.id())).await {
            Some(reply) if reply.ok => Ok(visible(&reply.text)),
            Some(reply) => Err(CliError::failed(visible(&reply.text))),
            None => Err(CliError::usage("that is not a command; /help lists them")),
        }
    }
}
