//! `troupe kanban`: boards, tasks, links, comments, dispatch and a long-running worker from the
//! command line, over the store `--store` or `kanban.store` names (SQLite directory by default,
//! or `postgres://`). Tables come from `kanban_render`; the work is done by
//! [`crate::kanban_api::Kanban`] and the kanban crate's dispatcher.
//! Exit codes: 0 done, 1 the board refused or something failed, 2 bad input or config.
//!
//! This file holds the arguments and the dispatch of each subcommand (with the one-line ones);
//! `tasks.rs` the board and task commands, `worker.rs` the dispatch round and the
//! long-running worker process.

mod review;
mod tasks;
mod worker;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_kanban::domain::{BoardSlug, TaskId, TaskStatus};

use super::kanban_render as render;
use crate::kanban_api::Kanban;
use crate::settings::Settings;
use crate::settings::kanban::{KanbanSettings, StoreLocation};
use tasks::{boards, complete, create, init, list, show, watch};
use worker::{dispatch, worker};

/// `troupe kanban`: boards of tasks run by worker agents.
#[derive(Debug, Args)]
pub(crate) struct KanbanArgs {
    /// The board store: a directory (SQLite) or a postgres:// URL. Overrides kanban.store.
    #[arg(
        long,
        global = true,
        env = "TROUPE_KANBAN_STORE",
        value_name = "URL|PATH"
    )]
    pub(crate) store: Option<String>,
    /// The board to work on (default: TROUPE_KANBAN_BOARD, else the switched-to board, else
    /// `default`).
    #[arg(long, global = true, value_name = "SLUG")]
    pub(crate) board: Option<String>,
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: KanbanCommand,
}

/// The `troupe kanban` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum KanbanCommand {
    /// Create the store (and the `default` board) if missing, and say where it is.
    Init,
    /// List, create, switch or remove boards.
    #[command(subcommand)]
    Boards(BoardsCommand),
    /// Create a task.
    Create(CreateArgs),
    /// List tasks.
    List(ListArgs),
    /// Show one task with its links, comments, runs and events.
    Show {
        /// The task id (t_ and 8 hex digits).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Assign a task to a profile (`none` clears it).
    Assign {
        /// The task id.
        id: String,
        /// The profile, or `none`.
        profile: String,
    },
    /// Make CHILD wait for PARENT.
    Link {
        /// The task that must finish first.
        parent: String,
        /// The task that waits.
        child: String,
    },
    /// Remove a link.
    Unlink {
        /// The parent task.
        parent: String,
        /// The child task.
        child: String,
    },
    /// Comment on a task.
    Comment {
        /// The task id.
        id: String,
        /// The comment.
        body: String,
        /// Who is commenting.
        #[arg(long, default_value = "operator")]
        author: String,
    },
    /// Complete tasks.
    Complete(CompleteArgs),
    /// Decide on a task waiting in review: approve it (done) or send it back with what to
    /// change (ready; the next worker reads it).
    Review(review::ReviewArgs),
    /// Block a task (a running worker is stopped).
    Block {
        /// The task id.
        id: String,
        /// What is needed before it can go on.
        reason: String,
        /// The kind of block; `dependency` sends the task back to wait in `todo`.
        #[arg(long, default_value = "manual")]
        kind: String,
    },
    /// Unblock tasks.
    Unblock {
        /// Task ids.
        #[arg(required = true)]
        ids: Vec<String>,
        /// An answer to the worker's question, kept as a comment: the session that asked
        /// resumes with it.
        #[arg(long)]
        answer: Option<String>,
        /// Who answers (with --answer).
        #[arg(long, default_value = "operator")]
        author: String,
    },
    /// Archive tasks (a running worker is stopped).
    Archive {
        /// Task ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// One dispatch pass: promote, claim ready tasks and run them until the board is idle.
    Dispatch(DispatchArgs),
    /// Print the board's events as they happen.
    Watch(WatchArgs),
    /// A task's runs (attempts).
    Runs {
        /// The task id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Task counts per status.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a dispatcher and its workers against the board until SIGINT or SIGTERM.
    Worker(WorkerArgs),
}

/// `troupe kanban boards ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum BoardsCommand {
    /// List boards (the current one is starred).
    List {
        /// Include archived boards.
        #[arg(long)]
        archived: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a board.
    Create {
        /// Its slug: lowercase letters, digits, - and _, up to 64, starting with a letter or digit.
        slug: String,
        /// A display name.
        #[arg(long)]
        name: Option<String>,
        /// A description.
        #[arg(long, default_value = "")]
        description: String,
        /// Switch to it.
        #[arg(long)]
        switch: bool,
    },
    /// Make a board the one later commands use.
    Switch {
        /// The slug.
        slug: String,
    },
    /// Archive a board (`--delete`: and delete it with all its tasks).
    Rm {
        /// The slug.
        slug: String,
        /// Delete it for good.
        #[arg(long)]
        delete: bool,
    },
}

/// `troupe kanban create`.
#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The title.
    pub(crate) title: String,
    /// What to do, in full.
    #[arg(long, default_value = "")]
    pub(crate) body: String,
    /// The profile that runs it.
    #[arg(long)]
    pub(crate) assignee: Option<String>,
    /// A task it waits for (repeat for several).
    #[arg(long = "parent", value_name = "ID")]
    pub(crate) parents: Vec<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i64,
    /// A soft namespace.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Return the live task with this key instead of making a duplicate.
    #[arg(long)]
    pub(crate) idempotency_key: Option<String>,
    /// Longest a run may take: seconds, or 30m, 2h, 1d.
    #[arg(long, value_name = "DURATION")]
    pub(crate) max_runtime: Option<String>,
    /// Failed runs before it is given up (default: kanban.failure_limit).
    #[arg(long)]
    pub(crate) max_retries: Option<u32>,
    /// Most tokens one run may use (within its profile's budget).
    #[arg(long, value_name = "N")]
    pub(crate) max_tokens: Option<u64>,
    /// Most dollars one run may spend (within its profile's budget).
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost_usd: Option<f64>,
    /// Most seconds one run may work (within its profile's budget).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) max_wall_seconds: Option<f64>,
    /// The W3C trace context its runs continue (00-TRACEID-SPANID-FLAGS, in hex), for a task
    /// made inside traced work; else a well-formed TRACEPARENT from the environment.
    #[arg(long, value_name = "TRACEPARENT")]
    pub(crate) traceparent: Option<String>,
    /// Start in `triage` (needs specifying first).
    #[arg(long)]
    pub(crate) triage: bool,
    /// Where the worker works: scratch (default), dir:/abs/path, worktree or worktree:PATH.
    #[arg(long, value_name = "WORKSPACE")]
    pub(crate) workspace: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `troupe kanban list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only these statuses (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) status: Vec<String>,
    /// Only this assignee.
    #[arg(long)]
    pub(crate) assignee: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Include archived tasks.
    #[arg(long)]
    pub(crate) archived: bool,
    /// Order: created, created-desc, priority, updated.
    #[arg(long, default_value = "created")]
    pub(crate) sort: String,
    /// At most this many.
    #[arg(long)]
    pub(crate) limit: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `troupe kanban complete`.
#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    /// Task ids.
    #[arg(required = true)]
    pub(crate) ids: Vec<String>,
    /// The result text.
    #[arg(long)]
    pub(crate) result: Option<String>,
    /// A one-line summary (one task at a time).
    #[arg(long)]
    pub(crate) summary: Option<String>,
}

/// `troupe kanban dispatch`.
#[derive(Debug, Args)]
pub(crate) struct DispatchArgs {
    /// Show what would be claimed; change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Claim at most this many tasks in the first pass.
    #[arg(long)]
    pub(crate) max: Option<usize>,
    /// Failed runs before a task is given up, for tasks that set no max_retries (default:
    /// kanban.failure_limit).
    #[arg(long, value_name = "N")]
    pub(crate) failure_limit: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `troupe kanban watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Start after this event id (0 for the whole history); default: only new events.
    #[arg(long, value_name = "EVENT_ID")]
    pub(crate) since: Option<i64>,
    /// Only these kinds (comma-separated, e.g. completed,blocked).
    #[arg(long, value_delimiter = ',')]
    pub(crate) kinds: Vec<String>,
    /// Print what is stored and exit instead of following.
    #[arg(long)]
    pub(crate) once: bool,
    /// How often to look for new events without a change notice: the poll on SQLite (default
    /// 200ms), the safety re-read on PostgreSQL (default 5s). Seconds, or 30s, 2m.
    #[arg(long, value_name = "DURATION")]
    pub(crate) interval: Option<String>,
    /// Print JSON lines.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `troupe kanban worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// Only run tasks of these profiles (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) profiles: Option<Vec<String>>,
    /// Most tasks this process runs at once (default: kanban.max_in_progress).
    #[arg(long)]
    pub(crate) max: Option<usize>,
    /// Exit once nothing is ready or running, instead of waiting for more work.
    #[arg(long)]
    pub(crate) until_idle: bool,
}

/// A failure with its exit code and the message for the person: the command line's one
/// error type.
pub(crate) use super::error::CliError as Failure;

type Outcome = Result<(), Failure>;

/// What every subcommand works with.
struct Ctx {
    kanban: Kanban,
    board: BoardSlug,
    config: Settings,
}

/// A task for a profile troupe.yaml does not define would wait for ever: refused, with the
/// profiles that exist. Without any profile configured, assignees are free names (a worker
/// started with `--profile` or a script may take them).
fn known_assignee(ctx: &Ctx, flag: &str, who: &str) -> Result<(), Failure> {
    let profiles = &ctx.config.kanban.profiles;
    if profiles.is_empty() || profiles.contains_key(who) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "{flag} {who}: there is no profile {who:?} under profiles: in troupe.yaml, so no worker would ever take the task (profiles: {}); name one of them, or add {who} under profiles:",
        crate::settings::kanban::known(profiles)
    )))
}

/// Runs `troupe kanban`; returns the exit code.
pub(crate) async fn run(args: KanbanArgs) -> i32 {
    super::error::report("kanban", run_inner(args).await.map(|()| 0))
}

async fn run_inner(args: KanbanArgs) -> Outcome {
    let (config, settings) = load_settings(args.config.as_ref(), args.store.as_deref())?;
    let kanban = Kanban::open(settings.clone()).await.map_err(|e| {
        Failure::failed(format!(
            "cannot open the {}: {e}",
            settings.store.describe()
        ))
    })?;
    let board = kanban.resolve_board(args.board.as_deref()).await?;
    let ctx = Ctx {
        kanban,
        board,
        config,
    };
    match args.command {
        KanbanCommand::Init => init(&ctx).await,
        KanbanCommand::Boards(cmd) => boards(&ctx, cmd).await,
        KanbanCommand::Create(a) => create(&ctx, a).await,
        KanbanCommand::List(a) => list(&ctx, a).await,
        KanbanCommand::Show { id, json } => show(&ctx, &id, json).await,
        KanbanCommand::Assign { id, profile } => {
            let id = task_id(&id)?;
            let profile = profile.trim();
            if profile.is_empty() {
                return Err(Failure::usage(
                    "the profile is empty; give a profile name, or `none` to clear the assignee",
                ));
            }
            let who = (!profile.eq_ignore_ascii_case("none")).then_some(profile);
            if let Some(who) = who {
                known_assignee(&ctx, "assign", who)?;
            }
            let task = ctx.kanban.assign(&ctx.board, &id, who).await?;
            println!(
                "{} assigned to {}",
                task.id,
                task.assignee.as_deref().unwrap_or("nobody")
            );
            Ok(())
        }
        KanbanCommand::Link { parent, child } => {
            let (p, c) = (task_id(&parent)?, task_id(&child)?);
            ctx.kanban.link(&ctx.board, &p, &c).await?;
            println!("{c} now waits for {p}");
            Ok(())
        }
        KanbanCommand::Unlink { parent, child } => {
            let (p, c) = (task_id(&parent)?, task_id(&child)?);
            ctx.kanban.unlink(&ctx.board, &p, &c).await?;
            println!("{c} no longer waits for {p}");
            Ok(())
        }
        KanbanCommand::Comment { id, body, author } => {
            let id = task_id(&id)?;
            if body.trim().is_empty() {
                return Err(Failure::usage("the comment is empty; give the text to add"));
            }
            if author.trim().is_empty() {
                return Err(Failure::usage(
                    "--author is empty; give a name, or leave the flag out to comment as operator",
                ));
            }
            let author = author.trim();
            let c = ctx.kanban.comment(&ctx.board, &id, author, &body).await?;
            println!("comment {} added to {id}", c.id);
            Ok(())
        }
        KanbanCommand::Complete(a) => complete(&ctx, a).await,
        KanbanCommand::Review(a) => review::review(&ctx, a).await,
        KanbanCommand::Block { id, reason, kind } => {
            let id = task_id(&id)?;
            if reason.trim().is_empty() {
                return Err(Failure::usage(
                    "the reason is empty; say what is needed before the task can go on",
                ));
            }
            let t = ctx.kanban.block(&ctx.board, &id, &kind, &reason).await?;
            let stopped = if t.ended_lease.is_some() {
                " (its worker is told to stop)"
            } else {
                ""
            };
            println!("{} is now {}{stopped}", t.task.id, t.task.status);
            Ok(())
        }
        KanbanCommand::Unblock {
            ids,
            answer,
            author,
        } => {
            let answer = answer.filter(|a| !a.trim().is_empty());
            if answer.is_some() && author.trim().is_empty() {
                return Err(Failure::usage(
                    "--author is empty; give a name, or leave the flag out to answer as operator",
                ));
            }
            for id in task_ids(&ids)? {
                let task = match &answer {
                    Some(answer) => {
                        ctx.kanban
                            .unblock_with_answer(&ctx.board, &id, author.trim(), answer)
                            .await?
                    }
                    None => ctx.kanban.unblock(&ctx.board, &id).await?,
                };
                println!("{} is now {}", task.id, task.status);
            }
            Ok(())
        }
        KanbanCommand::Archive { ids } => {
            for id in task_ids(&ids)? {
                let t = ctx.kanban.archive(&ctx.board, &id).await?;
                let stopped = if t.ended_lease.is_some() {
                    " (its worker is told to stop)"
                } else {
                    ""
                };
                println!("{} archived{stopped}", t.task.id);
            }
            Ok(())
        }
        KanbanCommand::Dispatch(a) => dispatch(&ctx, a).await,
        KanbanCommand::Watch(a) => watch(&ctx, a).await,
        KanbanCommand::Runs { id, json } => {
            let id = task_id(&id)?;
            let runs = ctx.kanban.runs(&ctx.board, &id).await?;
            if json {
                println!("{}", to_json(&runs));
            } else {
                print!("{}", render::run_table(&runs));
            }
            Ok(())
        }
        KanbanCommand::Stats { json } => {
            let stats = ctx.kanban.stats(&ctx.board).await?;
            if json {
                let counts: serde_json::Map<String, serde_json::Value> = TaskStatus::ALL
                    .iter()
                    .map(|s| (s.as_str().to_string(), json!(stats.count(*s))))
                    .collect();
                println!(
                    "{}",
                    json!({"board": ctx.board, "counts": counts, "open_runs": stats.open_runs, "last_event_id": stats.last_event_id})
                );
            } else {
                print!("{}", render::stats_table(ctx.board.as_str(), &stats));
            }
            Ok(())
        }
        KanbanCommand::Worker(a) => worker(&ctx, a).await,
    }
}

/// Reads troupe.yaml's kanban settings; `store` (the flag or TROUPE_KANBAN_STORE) wins.
pub(crate) fn load_settings(
    path: Option<&PathBuf>,
    store: Option<&str>,
) -> Result<(Settings, KanbanSettings), Failure> {
    let config = Settings::load_or_default(path.map(PathBuf::as_path))
        .map_err(|e| Failure::usage(e.to_string()))?;
    let mut settings = config.kanban.clone();
    if let Some(raw) = store {
        settings.store =
            StoreLocation::parse(raw).map_err(|e| Failure::usage(format!("--store: {e}")))?;
    }
    Ok((config, settings))
}

fn task_id(raw: &str) -> Result<TaskId, Failure> {
    TaskId::parse(raw.trim()).map_err(|e| {
        Failure::usage(format!(
            "{e}; task ids look like t_1a2b3c4d (see `troupe kanban list`)"
        ))
    })
}

/// Checks every id before any task is touched, so a typo in the third id does not leave the
/// first two changed.
fn task_ids(raw: &[String]) -> Result<Vec<TaskId>, Failure> {
    raw.iter().map(|r| task_id(r)).collect()
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| json!({"error": e.to_string()}).to_string())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is called, not
/// when the future is first polled, so a signal that arrives in between is not lost (and does
/// not kill the process).
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    async move {
        let term = async {
            match term.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let int = async {
            match int.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = term => {}
            () = int => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_checked() {
        assert!(task_id("t_0123abcd").is_ok());
        let bad = task_id("42").err().map(|f| (f.code, f.message)).unwrap();
        assert_eq!(bad.0, super::super::error::EXIT_BAD_INPUT);
        assert!(bad.1.contains("t_1a2b3c4d"), "{}", bad.1);
    }
}
