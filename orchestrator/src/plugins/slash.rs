//! Slash commands: a message that starts with `/<command>` goes to the plugin that registered
//! the command, never to the model. `/help` lists them. A plugin command is a program that gets
//! `{"command", "args", "session_id"}` on stdin (and the arguments in `TROUPE_COMMAND_ARGS`)
//! and prints its reply; the bundled disk-cleanup answers in-process.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::command_hook::{hook_env, run_raw};
use super::disk_cleanup::DiskCleanup;
use super::manifest::CommandSpec;

/// Who answers a command.
#[derive(Clone)]
pub enum Handler {
    /// A program from a plugin's manifest.
    Program(CommandSpec),
    /// The bundled disk-cleanup plugin.
    DiskCleanup(Arc<DiskCleanup>),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handler::Program(spec) => f.debug_tuple("Program").field(&spec.command).finish(),
            Handler::DiskCleanup(_) => f.write_str("DiskCleanup"),
        }
    }
}

/// One registered command.
#[derive(Debug, Clone)]
pub struct SlashCommand {
    /// The plugin that registered it.
    pub owner: String,
    /// One line for `/help`.
    pub description: String,
    /// What answers it.
    pub handler: Handler,
}

/// The reply to a slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashReply {
    /// The command as typed (without `/`).
    pub command: String,
    /// The plugin that answered (`troupe` for `/help` and unknown commands).
    pub owner: String,
    /// The text to show.
    pub text: String,
    /// Whether the command ran and succeeded.
    pub ok: bool,
}

/// Every registered command, by name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SlashCommands {
    commands: Arc<BTreeMap<String, SlashCommand>>,
}

/// `/name rest` split into the name and the rest; `None` when the message is not a command
/// (no leading `/`, or a path such as `/etc/hosts`).
pub fn parse(message: &str) -> Option<(String, String)> {
    let body = message.trim_start().strip_prefix('/')?;
    let (name, rest) = match body.find(char::is_whitespace) {
        Some(at) => (&body[..at], body[at..].trim()),
        None => (body, ""),
    };
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    valid.then(|| (name.to_lowercase(), rest.to_string()))
}

impl SlashCommands {
    /// The commands in `table`. A later registration of a taken name is refused and logged.
    pub fn new(entries: Vec<(String, SlashCommand)>) -> SlashCommands {
        let mut map = BTreeMap::new();
        for (name, command) in entries {
            if let Some(existing) = map.get(&name) {
                let existing: &SlashCommand = existing;
                tracing::warn!(command = %name, kept = %existing.owner, refused = %command.owner, "two plugins register the same slash command; the first keeps it");
                continue;
            }
            map.insert(name, command);
        }
        SlashCommands {
            commands: Arc::new(map),
        }
    }

    /// Whether no plugin registered a command.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.commands.keys().cloned().collect()
    }

    /// Each command's name, description and owning plugin, sorted by name.
    pub fn described(&self) -> Vec<(String, String, String)> {
        self.commands
            .iter()
            .map(|(name, c)| (name.clone(), c.description.clone(), c.owner.clone()))
            .collect()
    }

    /// The `/help` text.
    pub fn help(&self) -> String {
        let mut out = String::from(
            "Commands (a message starting with one goes to its plugin, not to the model):\n  /help  this list",
        );
        for (name, command) in self.commands.iter() {
            out.push_str(&format!(
                "\n  /{name}  {} ({})",
                command.description, command.owner
            ));
        }
        out
    }

    /// Answers `message` when it is a slash command; `None` when it is an ordinary message for
    /// the model. Runs the plugin's program on a blocking thread.
    pub async fn dispatch(&self, message: &str, session_id: Option<&str>) -> Option<SlashReply> {
        let (name, args) = parse(message)?;
        if name == "help" {
            return Some(SlashReply {
                command: name,
                owner: "troupe".into(),
                text: self.help(),
                ok: true,
            });
        }
        let Some(command) = self.commands.get(&name).cloned() else {
            return Some(SlashReply {
                text: format!("Unknown command /{name}. {}", self.help()),
                command: name,
                owner: "troupe".into(),
                ok: false,
            });
        };
        let owner = command.owner.clone();
        let session = session_id.map(str::to_string);
        let reply_name = name.clone();
        let ran = tokio::task::spawn_blocking(move || match &command.handler {
            Handler::DiskCleanup(plugin) => Ok(plugin.command(&args)),
            Handler::Program(spec) => {
                let input = json!({"command": name, "args": args, "session_id": session});
                let mut env: Vec<(&str, String)> = hook_env(&command.owner, "command", spec).into();
                env.push(("TROUPE_COMMAND_ARGS", args.clone()));
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                run_raw(spec, &format!("{input}\n"), &env)
                    .map(|out| out.trim_end().to_string())
                    .map_err(|failure| {
                        format!("/{name} failed: its command `{}` {failure}", spec.command)
                    })
            }
        })
        .await
        .unwrap_or_else(|e| Err(format!("the command crashed: {e}")));
        Some(match ran {
            Ok(text) => SlashReply {
                command: reply_name,
                owner,
                text,
                ok: true,
            },
            Err(text) => SlashReply {
                command: reply_name,
                owner,
                text,
                ok: false,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_told_from_paths_and_prose() {
        assert_eq!(
            parse("/disk-cleanup track /x test"),
            Some(("disk-cleanup".into(), "track /x test".into()))
        );
        assert_eq!(parse("  /HELP"), Some(("help".into(), String::new())));
        assert_eq!(parse("/etc/hosts looks odd"), None);
        assert_eq!(parse("why / this"), None);
        assert_eq!(parse("/"), None);
    }
}
