//! `troupe sessions`: the stored sessions (list, show with their subagents, search, remove,
//! prune), read from the session store troupe.yaml names.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_actors::model::ChatMessage;

use super::error::{CliError, EXIT_DONE, report};
use crate::sessions::{ListQuery, SessionStore, SessionStoreError, SessionSummary};
use crate::settings::Settings;

/// `troupe sessions`.
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    /// The config file naming the store (`sessions.store`).
    #[arg(long, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    command: SessionsCommand,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// The stored sessions, newest first (top-level ones; `--all` adds subagents).
    List {
        /// Subagents too.
        #[arg(long)]
        all: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One session: its messages (`--tree`: and its subagents').
    Show {
        /// Its id, or the start of it.
        id: String,
        /// Its subagents' conversations too.
        #[arg(long)]
        tree: bool,
    },
    /// Messages that contain all these words.
    Search {
        /// The words.
        query: String,
        /// At most this many matches.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Removes a session with its subagents.
    Rm {
        /// Its id, or the start of it.
        id: String,
    },
    /// Removes sessions not written to for `--keep-days` days (else `sessions.keep_days`).
    Prune {
        /// Days to keep.
        #[arg(long)]
        keep_days: Option<u32>,
    },
}

/// Runs `troupe sessions`; returns the exit code.
pub(crate) async fn run(args: SessionsArgs) -> i32 {
    report("sessions", run_inner(args).await)
}

async fn run_inner(args: SessionsArgs) -> Result<i32, CliError> {
    let config = Settings::load_or_default(args.config.as_deref())?;
    let settings = config.sessions.clone();
    let store = SessionStore::open(&settings.store).await.map_err(failed)?;
    match args.command {
        SessionsCommand::List { all, limit } => {
            let query = ListQuery {
                all,
                limit: Some(limit),
                ..Default::default()
            };
            let sessions = store.list(query).await.map_err(failed)?;
            if args.json {
                println!("{}", json!({ "sessions": sessions }));
            } else if sessions.is_empty() {
                println!("No sessions are stored in the {}.", store.describe());
            } else {
                print_table(&sessions);
            }
        }
        SessionsCommand::Show { id, tree } => {
            let shown = store.transcript(&id, tree).await.map_err(failed)?;
            if args.json {
                let sessions: Vec<_> = shown.iter().map(|s| s.to_json()).collect();
                println!("{}", json!({ "sessions": sessions }));
            } else {
                for session in &shown {
                    print_session(&session.summary, &session.messages);
                }
            }
        }
        SessionsCommand::Search { query, limit } => {
            let hits = store.search(&query, None, limit).await.map_err(failed)?;
            if args.json {
                println!("{}", json!({ "matches": hits }));
            } else if hits.is_empty() {
                println!("No stored message contains all of: {query}");
            } else {
                for hit in hits {
                    println!(
                        "{}  #{:<4} {:<9} {}",
                        hit.session_id,
                        hit.seq,
                        hit.role,
                        one_line(&hit.snippet, 100)
                    );
                }
            }
        }
        SessionsCommand::Rm { id } => {
            let removed = store.delete(&id).await.map_err(failed)?;
            if args.json {
                println!("{}", json!({ "removed": removed }));
            } else {
                println!("Removed {removed} session(s).");
            }
        }
        SessionsCommand::Prune { keep_days } => {
            let Some(days) = keep_days.or(settings.keep_days) else {
                return Err(CliError::usage(
                    "prune needs --keep-days N, or sessions.keep_days in troupe.yaml",
                ));
            };
            if days == 0 {
                return Err(CliError::usage("--keep-days must be 1 or more"));
            }
            let removed = store.prune(days).await.map_err(failed)?;
            if args.json {
                println!("{}", json!({ "removed": removed, "keep_days": days }));
            } else {
                println!("Removed {removed} session(s) older than {days} day(s).");
            }
        }
    }
    Ok(EXIT_DONE)
}

fn failed(error: SessionStoreError) -> CliError {
    match error {
        SessionStoreError::Database { .. } => CliError::failed(error.to_string()),
        other => CliError::usage(other.to_string()),
    }
}

fn print_table(sessions: &[SessionSummary]) {
    let now = crate::sessions::now_ms();
    println!(
        "{:<36}  {:>7}  {:<8}  {:<6}  {:>8}  {:>9}  TITLE",
        "ID", "UPDATED", "ORIGIN", "STATUS", "MESSAGES", "TOKENS"
    );
    for s in sessions {
        println!(
            "{:<36}  {:>7}  {:<8}  {:<6}  {:>8}  {:>9}  {}",
            s.id,
            age(now - s.updated_at),
            s.origin,
            s.status,
            s.messages,
            s.usage.tokens(),
            one_line(&s.title, 60)
        );
    }
}

/// How long ago, in the largest whole unit: `40s`, `12m`, `3h`, `9d`.
pub(crate) fn age(ms: i64) -> String {
    let seconds = ms.max(0) / 1000;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3_600 => format!("{}m", seconds / 60),
        3_600..86_400 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn print_session(summary: &SessionSummary, messages: &[ChatMessage]) {
    let indent = "  ".repeat(summary.depth as usize);
    println!(
        "{indent}session {} ({}, {}, {} messages, {} tokens)",
        summary.id,
        summary.origin,
        summary.status,
        summary.messages,
        summary.usage.tokens()
    );
    for message in messages {
        let line = match message {
            ChatMessage::System { content } => format!("system: {}", one_line(content, 100)),
            ChatMessage::User { content } => format!("user: {}", one_line(content, 100)),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut line = format!(
                    "assistant: {}",
                    one_line(content.as_deref().unwrap_or(""), 100)
                );
                for call in tool_calls {
                    line.push_str(&format!(
                        " [{} {}]",
                        call.name,
                        one_line(&call.arguments, 60)
                    ));
                }
                line
            }
            ChatMessage::Tool { name, content, .. } => {
                format!("tool {name}: {}", one_line(content, 100))
            }
        };
        println!("{indent}  {line}");
    }
}

/// `text` on one line, cut to `max` characters; control characters made visible.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' { '⏎' } else { c })
        .take(max + 1)
        .collect();
    let mut line = super::visible::visible_line(&flat.chars().take(max).collect::<String>());
    if flat.chars().count() > max {
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn ages_are_shown_in_their_largest_whole_unit() {
        assert_eq!(super::age(-5), "0s");
        assert_eq!(super::age(59_999), "59s");
        assert_eq!(super::age(60_000), "1m");
        assert_eq!(super::age(7_200_000), "2h");
        assert_eq!(super::age(3 * 86_400_000), "3d");
    }
}
