//! `troupe kanban`: boards, tasks, links, comments, dispatch and a long-running worker from the
//! command line, over the store `--store` or `kanban.store` names (SQLite directory by default,
//! or `postgres://`). Tables come from `kanban_render`; the work is done by
//! [`crate::kanban_api::Kanban`] and the kanban crate's dispatcher.
//! Exit codes: 0 done, 1 the board refused or something failed, 2 bad input or config.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_kanban::dispatcher::{DispatchReport, DispatcherEvent, DispatcherHandle};
use troupe_kanban::domain::{
    BoardSlug, EventId, EventKind, InitialStatus, NewBoard, NewTask, TaskFilter, TaskId, TaskSort,
    TaskStatus,
};

use super::kanban_render as render;
use crate::api::Troupe;
use crate::config::Config;
use crate::kanban_api::Kanban;
use crate::kanban_config::{KanbanSettings, StoreLocation, parse_duration};
use crate::runtime::{Runtime, RuntimeOptions};

/// `troupe kanban`: boards of tasks run by worker agents.
#[derive(Debug, Args)]
pub struct KanbanArgs {
    /// The board store: a directory (SQLite) or a postgres:// URL. Overrides kanban.store.
    #[arg(
        long,
        global = true,
        env = "TROUPE_KANBAN_STORE",
        value_name = "URL|PATH"
    )]
    pub store: Option<String>,
    /// The board to work on (default: TROUPE_KANBAN_BOARD, else the switched-to board, else
    /// `default`).
    #[arg(long, global = true, value_name = "SLUG")]
    pub board: Option<String>,
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: KanbanCommand,
}

/// The `troupe kanban` subcommands.
#[derive(Debug, Subcommand)]
pub enum KanbanCommand {
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
pub enum BoardsCommand {
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
pub struct CreateArgs {
    /// The title.
    pub title: String,
    /// What to do, in full.
    #[arg(long, default_value = "")]
    pub body: String,
    /// The profile that runs it.
    #[arg(long)]
    pub assignee: Option<String>,
    /// A task it waits for (repeat for several).
    #[arg(long = "parent", value_name = "ID")]
    pub parents: Vec<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// A soft namespace.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Return the live task with this key instead of making a duplicate.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Longest a run may take: seconds, or 30m, 2h, 1d.
    #[arg(long, value_name = "DURATION")]
    pub max_runtime: Option<String>,
    /// Failed runs before it is given up (default: kanban.failure_limit).
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Most tokens one run may use (within its profile's budget).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Most dollars one run may spend (within its profile's budget).
    #[arg(long, value_name = "USD")]
    pub max_cost_usd: Option<f64>,
    /// Most seconds one run may work (within its profile's budget).
    #[arg(long, value_name = "SECONDS")]
    pub max_wall_seconds: Option<f64>,
    /// The W3C trace context its runs continue (00-TRACEID-SPANID-FLAGS, in hex), for a task
    /// made inside traced work; else a well-formed TRACEPARENT from the environment.
    #[arg(long, value_name = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// Start in `triage` (needs specifying first).
    #[arg(long)]
    pub triage: bool,
    /// Where the worker works: scratch (default), dir:/abs/path, worktree or worktree:PATH.
    #[arg(long, value_name = "WORKSPACE")]
    pub workspace: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `troupe kanban list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only these statuses (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub status: Vec<String>,
    /// Only this assignee.
    #[arg(long)]
    pub assignee: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Include archived tasks.
    #[arg(long)]
    pub archived: bool,
    /// Order: created, created-desc, priority, updated.
    #[arg(long, default_value = "created")]
    pub sort: String,
    /// At most this many.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `troupe kanban complete`.
#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// Task ids.
    #[arg(required = true)]
    pub ids: Vec<String>,
    /// The result text.
    #[arg(long)]
    pub result: Option<String>,
    /// A one-line summary (one task at a time).
    #[arg(long)]
    pub summary: Option<String>,
}

/// `troupe kanban dispatch`.
#[derive(Debug, Args)]
pub struct DispatchArgs {
    /// Show what would be claimed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Claim at most this many tasks in the first pass.
    #[arg(long)]
    pub max: Option<usize>,
    /// Failed runs before a task is given up, for tasks that set no max_retries (default:
    /// kanban.failure_limit).
    #[arg(long, value_name = "N")]
    pub failure_limit: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `troupe kanban watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Start after this event id (0 for the whole history); default: only new events.
    #[arg(long, value_name = "EVENT_ID")]
    pub since: Option<i64>,
    /// Only these kinds (comma-separated, e.g. completed,blocked).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// Print what is stored and exit instead of following.
    #[arg(long)]
    pub once: bool,
    /// How often to look for new events without a change notice: the poll on SQLite (default
    /// 200ms), the safety re-read on PostgreSQL (default 5s). Seconds, or 30s, 2m.
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// `troupe kanban worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Only run tasks of these profiles (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub profiles: Option<Vec<String>>,
    /// Most tasks this process runs at once (default: kanban.max_in_progress).
    #[arg(long)]
    pub max: Option<usize>,
    /// Exit once nothing is ready or running, instead of waiting for more work.
    #[arg(long)]
    pub until_idle: bool,
}

/// A failure with its exit code and the message for the person: the command line's one
/// error type.
pub(crate) use super::error::CliError as Failure;

type Outcome = Result<(), Failure>;

/// What every subcommand works with.
struct Ctx {
    kanban: Kanban,
    board: BoardSlug,
    config: Config,
}

/// Runs `troupe kanban`; returns the exit code.
pub async fn run(args: KanbanArgs) -> i32 {
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
        KanbanCommand::Unblock { ids } => {
            for id in task_ids(&ids)? {
                let task = ctx.kanban.unblock(&ctx.board, &id).await?;
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
) -> Result<(Config, KanbanSettings), Failure> {
    let config = Config::load_or_default(path.map(PathBuf::as_path))
        .map_err(|e| Failure::usage(e.to_string()))?;
    let mut settings =
        KanbanSettings::from_config(&config).map_err(|e| Failure::usage(e.to_string()))?;
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

async fn init(ctx: &Ctx) -> Outcome {
    let boards = ctx.kanban.boards(false).await?;
    println!(
        "kanban store ready: {}",
        ctx.kanban.settings().store.describe()
    );
    println!(
        "boards: {} (current: {})",
        boards
            .iter()
            .map(|b| b.slug.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ctx.board
    );
    println!("next: troupe kanban create \"<title>\" --assignee <profile>");
    Ok(())
}

async fn boards(ctx: &Ctx, cmd: BoardsCommand) -> Outcome {
    let k = &ctx.kanban;
    match cmd {
        BoardsCommand::List { archived, json } => {
            let boards = k.boards(archived).await?;
            if json {
                println!("{}", to_json(&boards));
            } else {
                print!("{}", render::board_table(&boards, ctx.board.as_str()));
            }
        }
        BoardsCommand::Create {
            slug,
            name,
            description,
            switch,
        } => {
            let slug = BoardSlug::parse(&slug).map_err(|e| Failure::usage(e.to_string()))?;
            let mut new = NewBoard::new(slug.clone()).with_description(description);
            if let Some(name) = name {
                new = new.with_name(name);
            }
            let board = k.create_board(&new).await?;
            println!("board {} created", board.slug);
            if switch {
                switch_to(k, &slug).await?;
            }
        }
        BoardsCommand::Switch { slug } => {
            let slug = BoardSlug::parse(&slug).map_err(|e| Failure::usage(e.to_string()))?;
            switch_to(k, &slug).await?;
        }
        BoardsCommand::Rm { slug, delete } => {
            let slug = BoardSlug::parse(&slug).map_err(|e| Failure::usage(e.to_string()))?;
            k.remove_board(&slug, delete).await?;
            println!(
                "board {slug} {}",
                if delete { "deleted" } else { "archived" }
            );
        }
    }
    Ok(())
}

async fn switch_to(k: &Kanban, slug: &BoardSlug) -> Outcome {
    match k.switch_board(slug).await {
        Ok(Some(path)) => {
            println!("current board: {slug} (remembered in {})", path.display());
            Ok(())
        }
        Ok(None) => {
            println!("current board: {slug}");
            Ok(())
        }
        Err(crate::kanban_api::SwitchError::Store(e)) => Err(e.into()),
        Err(e) => Err(Failure::failed(e.to_string())),
    }
}

async fn create(ctx: &Ctx, a: CreateArgs) -> Outcome {
    if a.title.trim().is_empty() {
        return Err(Failure::usage(
            "the title is empty; give the task a short title",
        ));
    }
    let mut new = NewTask::new(a.title.trim())
        .with_body(a.body)
        .with_priority(a.priority)
        .with_created_by("cli");
    if let Some(who) = a.assignee.filter(|s| !s.trim().is_empty()) {
        new = new.with_assignee(who.trim());
    }
    for raw in &a.parents {
        new = new.with_parent(task_id(raw)?);
    }
    if let Some(tenant) = a.tenant {
        if tenant.trim().is_empty() {
            return Err(Failure::usage(
                "--tenant is empty; give a namespace name or leave the flag out",
            ));
        }
        new = new.with_tenant(tenant.trim());
    }
    if let Some(key) = a.idempotency_key {
        if key.trim().is_empty() {
            return Err(Failure::usage(
                "--idempotency-key is empty; give a key that names this request, or leave the flag out",
            ));
        }
        new = new.with_idempotency_key(key);
    }
    if let Some(raw) = a.max_runtime {
        let d = parse_duration(&raw).map_err(|e| Failure::usage(format!("--max-runtime: {e}")))?;
        new = new.with_max_runtime(d);
    }
    if let Some(n) = a.max_retries {
        new = new.with_max_retries(n);
    }
    let budget = serde_json::json!({
        "max_tokens": a.max_tokens,
        "max_cost_usd": a.max_cost_usd,
        "max_wall_seconds": a.max_wall_seconds,
    });
    let budget = troupe_actors::usage::Budget::from_value("--max", &budget)
        .map_err(|e| Failure::usage(e.replace("--max.max_", "--max-").replace('_', "-")))?;
    new.budget = budget.is_limited().then_some(budget);
    if let Some(traceparent) = a.traceparent.as_deref().map(str::trim) {
        if !troupe_actors::trace::is_traceparent(traceparent) {
            return Err(Failure::usage(format!(
                "--traceparent {traceparent:?} is not a W3C trace context; write 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, or leave it out"
            )));
        }
        new.traceparent = Some(traceparent.to_string());
    } else if let Ok(inherited) = std::env::var("TRACEPARENT") {
        // From the environment it is a hint, not an instruction: a malformed one is dropped.
        new.traceparent = Some(inherited).filter(|t| troupe_actors::trace::is_traceparent(t));
    }
    if a.triage {
        new = new.with_initial(InitialStatus::Triage);
    }
    if let Some(raw) = &a.workspace {
        let workspace = crate::runtime::workspaces::parse_workspace(raw)
            .map_err(|e| Failure::usage(format!("--workspace: {e}")))?;
        new = new.with_workspace(workspace);
    }
    let created = ctx.kanban.create_task(&ctx.board, &new).await?;
    if a.json {
        println!(
            "{}",
            to_json(&json!({"task": created.task, "created": created.created}))
        );
    } else if created.created {
        println!(
            "{} created ({}) on board {}",
            created.task.id, created.task.status, ctx.board
        );
    } else {
        println!(
            "{} already holds that idempotency key ({}); nothing new was created",
            created.task.id, created.task.status
        );
    }
    Ok(())
}

async fn list(ctx: &Ctx, a: ListArgs) -> Outcome {
    let mut statuses = Vec::new();
    for raw in a.status.iter().filter(|s| !s.trim().is_empty()) {
        let status = TaskStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == raw.trim())
            .ok_or_else(|| {
                Failure::usage(format!(
                    "--status {raw:?} is not a status; use one of {}",
                    TaskStatus::ALL.map(|s| s.as_str()).join(", ")
                ))
            })?;
        statuses.push(status);
    }
    let sort = match a.sort.as_str() {
        "created" => TaskSort::Created,
        "created-desc" => TaskSort::CreatedDesc,
        "priority" => TaskSort::Priority,
        "updated" => TaskSort::Updated,
        other => {
            return Err(Failure::usage(format!(
                "--sort {other:?} is not an order; use created, created-desc, priority or updated"
            )));
        }
    };
    let filter = TaskFilter {
        statuses,
        include_archived: a.archived,
        assignee: a.assignee,
        tenant: a.tenant,
        sort,
        limit: a.limit,
    };
    let tasks = ctx.kanban.list(&ctx.board, &filter).await?;
    if a.json {
        println!("{}", to_json(&tasks));
    } else {
        print!("{}", render::task_table(&tasks));
    }
    Ok(())
}

async fn show(ctx: &Ctx, id: &str, json: bool) -> Outcome {
    let id = task_id(id)?;
    let detail = ctx.kanban.detail(&ctx.board, &id).await?;
    if json {
        println!("{}", to_json(&detail));
    } else {
        print!("{}", render::task_detail(&detail));
    }
    Ok(())
}

async fn complete(ctx: &Ctx, a: CompleteArgs) -> Outcome {
    if a.ids.len() > 1 && a.summary.is_some() {
        return Err(Failure::usage(
            "--summary describes one task; complete tasks one at a time to give each its own summary",
        ));
    }
    for id in task_ids(&a.ids)? {
        let task = ctx
            .kanban
            .complete(&ctx.board, &id, a.result.clone(), a.summary.clone())
            .await?;
        println!("{} is done", task.id);
    }
    Ok(())
}

async fn watch(ctx: &Ctx, a: WatchArgs) -> Outcome {
    let mut kinds = Vec::new();
    for raw in a.kinds.iter().filter(|k| !k.trim().is_empty()) {
        kinds.push(EventKind::parse(raw.trim()).ok_or_else(|| {
            Failure::usage(format!(
                "--kinds {raw:?} is not an event kind; use names such as created, claimed, completed, blocked"
            ))
        })?);
    }
    let cursor = match a.since {
        Some(n) if n < 0 => {
            return Err(Failure::usage("--since takes an event id of 0 or more"));
        }
        Some(n) => EventId(n),
        None => ctx.kanban.stats(&ctx.board).await?.last_event_id,
    };
    let interval = match &a.interval {
        Some(raw) => {
            Some(parse_duration(raw).map_err(|e| Failure::usage(format!("--interval: {e}")))?)
        }
        None => None,
    };
    let mut stop = std::pin::pin!(shutdown_signal());
    let mut feed = ctx.kanban.watch(ctx.board.clone(), cursor);
    if let Some(every) = interval {
        feed = feed
            .with_poll_interval(every)
            .with_safety_poll_interval(every);
    }
    if !a.once && !a.json {
        eprintln!(
            "watching board {} after event #{} (Ctrl-C to stop)",
            ctx.board, cursor.0
        );
    }
    loop {
        let event = if a.once {
            match feed.try_next().await? {
                Some(event) => event,
                None => return Ok(()),
            }
        } else {
            tokio::select! {
                event = feed.next() => event?,
                () = &mut stop => return Ok(()),
            }
        };
        if !kinds.is_empty() && !kinds.contains(&event.kind) {
            continue;
        }
        if a.json {
            match serde_json::to_string(&event) {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    return Err(Failure::failed(format!(
                        "event #{} could not be written as JSON: {e}",
                        event.id.0
                    )));
                }
            }
        } else {
            println!("{}", render::event_line(&event));
        }
    }
}

/// The pieces a process needs to run workers: the runtime (tools, MCP servers, troupe) and the
/// profiles it runs.
pub(crate) struct Engine {
    pub(crate) runtime: Runtime,
    pub(crate) troupe: Troupe,
    pub(crate) profiles: troupe_kanban::profiles::Profiles,
}

impl Engine {
    /// Starts the runtime of troupe.yaml (workers are unattended, so approval requests follow
    /// `approvals.unattended`) and builds the profiles of the settings.
    pub(crate) async fn start(config: &Config, only: Option<&[String]>) -> Result<Engine, Failure> {
        // Workers' tasks end with their turn: their delegations wait for their results.
        let runtime = Runtime::start(
            config.clone(),
            RuntimeOptions::default().with_background_delegation(false),
        )
        .await?;
        runtime.report_notices("troupe kanban");
        let profiles = match runtime.worker_profiles(only) {
            Ok(profiles) => profiles,
            Err(e) => {
                runtime.close().await;
                return Err(e.into());
            }
        };
        Ok(Engine {
            troupe: runtime.troupe().clone(),
            runtime,
            profiles,
        })
    }

    /// Refuses to go on without a profile: nothing could run the claimed tasks.
    fn require_profiles(&self) -> Result<(), Failure> {
        if self.profiles.is_empty() {
            return Err(Failure::usage(format!(
                "no worker profiles, so no task can run: {NO_PROFILES_HINT}"
            )));
        }
        Ok(())
    }
}

/// How to add a profile, for messages about having none.
const NO_PROFILES_HINT: &str = "add a profiles: section to troupe.yaml, such as\n  profiles:\n    coder: {base_url: http://127.0.0.1:8080/v1, model: qwen, toolsets: [core]}";

async fn dispatch(ctx: &Ctx, a: DispatchArgs) -> Outcome {
    if a.max == Some(0) {
        return Err(Failure::usage(
            "--max must be at least 1; leave it out to claim as many as the budgets allow",
        ));
    }
    let mut settings = ctx.kanban.settings().clone();
    if let Some(limit) = a.failure_limit {
        if limit == 0 {
            return Err(Failure::usage(
                "--failure-limit must be at least 1 (the failed runs a task may have before it is given up)",
            ));
        }
        settings.failure_limit = limit;
    }
    let stop = shutdown_signal();
    let engine = Engine::start(&ctx.config, None).await?;
    // A dry run claims nothing, so it works without profiles: every ready task is then
    // reported as having no runnable profile.
    if !a.dry_run
        && let Err(e) = engine.require_profiles()
    {
        engine.runtime.close().await;
        return Err(e);
    }
    let config = settings.dispatcher_config().with_auto_dispatch(false);
    let dispatcher = ctx
        .kanban
        .start_dispatcher(
            &engine.troupe,
            ctx.board.clone(),
            engine.profiles.clone(),
            config,
        )
        .await
        .map_err(|e| Failure::failed(e.to_string()))?;
    let mut events = dispatcher.subscribe();
    let outcome = async {
        let report = dispatcher
            .dispatch_once(a.max, a.dry_run)
            .await
            .map_err(|e| Failure::failed(e.to_string()))?;
        if a.json {
            println!("{}", to_json(&report));
        } else {
            print_report(&report, &engine.profiles);
        }
        if a.dry_run || report.claimed.is_empty() {
            return Ok(());
        }
        if a.max.is_some() {
            // `--max N` bounds the whole run: wait for the tasks this round claimed and claim
            // nothing more (automatic rounds are off, so nothing else is started).
            return wait_for_claimed(&dispatcher, &report, &mut events, a.json, stop).await;
        }
        // Run what was claimed (and what it makes ready) until the board is idle, with a line
        // per worker as it starts and ends.
        let idle = dispatcher.wait_idle();
        tokio::pin!(idle);
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                done = &mut idle => return done.map_err(|e| Failure::failed(e.to_string())),
                Ok(event) = events.recv() => if !a.json { progress_line(&event) },
                () = &mut stop => {
                    eprintln!("stopping: running tasks are handed back to the board");
                    return Ok(());
                }
            }
        }
    }
    .await;
    dispatcher.stop().await;
    engine.runtime.close().await;
    outcome
}

/// Waits until every worker `report` started has ended (or a stop signal), printing a line
/// per worker event unless `json`.
async fn wait_for_claimed(
    dispatcher: &DispatcherHandle,
    report: &DispatchReport,
    events: &mut tokio::sync::broadcast::Receiver<DispatcherEvent>,
    json: bool,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), Failure> {
    use tokio::sync::broadcast::error::RecvError;
    let mut waiting: Vec<(troupe_kanban::domain::WorkerId, TaskId)> = report
        .claimed
        .iter()
        .filter_map(|c| c.worker.clone().map(|w| (w, c.task_id.clone())))
        .collect();
    let mut stop = std::pin::pin!(stop);
    while !waiting.is_empty() {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    if !json {
                        progress_line(&event);
                    }
                    if let DispatcherEvent::WorkerFinished(done) = &event {
                        waiting.retain(|(worker, _)| *worker != done.worker);
                    }
                }
                // Some events were missed: ask which of ours still run.
                Err(RecvError::Lagged(_)) => {
                    let running = dispatcher
                        .running()
                        .await
                        .map_err(|e| Failure::failed(e.to_string()))?;
                    waiting.retain(|(_, task)| running.contains(task));
                }
                Err(RecvError::Closed) => {
                    return Err(Failure::failed(
                        "the dispatcher ended before its workers reported back",
                    ));
                }
            },
            () = &mut stop => {
                eprintln!("stopping: running tasks are handed back to the board");
                return Ok(());
            }
        }
    }
    Ok(())
}

fn print_report(report: &DispatchReport, profiles: &troupe_kanban::profiles::Profiles) {
    let verb = if report.dry_run {
        "would claim"
    } else {
        "claimed"
    };
    println!(
        "{verb} {} task(s); promoted {}, reclaimed {}",
        report.claimed.len(),
        report.promoted.len(),
        report.reclaimed.len()
    );
    for c in &report.claimed {
        println!(
            "  {}  {:<12} {}",
            c.task_id,
            render::clip(&c.assignee, 60),
            render::clip(&c.title, 60)
        );
    }
    let unassigned = match profiles.default_assignee() {
        Some(name) => format!(
            "it has no assignee, and kanban.default_assignee {name:?} is not a configured profile"
        ),
        None => "it has no assignee and kanban.default_assignee is not set".to_string(),
    };
    for id in &report.skipped_unassigned {
        println!("  {id}  no runnable profile: {unassigned}");
    }
    let known = if profiles.is_empty() {
        "none are configured".to_string()
    } else {
        format!("configured: {}", profiles.names().join(", "))
    };
    for (id, who) in &report.skipped_nonspawnable {
        println!(
            "  {id}  no runnable profile: {who:?} is not a profile this process may run ({known})"
        );
    }
    if report.skipped_capacity > 0 {
        println!(
            "  {} more ready task(s) wait for a free slot",
            report.skipped_capacity
        );
    }
    for e in &report.errors {
        println!("  error: {e}");
    }
    if report.dry_run && profiles.is_empty() {
        println!("no worker profiles, so nothing can be claimed yet: {NO_PROFILES_HINT}");
    }
}

fn progress_line(event: &DispatcherEvent) {
    match event {
        DispatcherEvent::WorkerStarted {
            task_id, assignee, ..
        } => {
            eprintln!("▶ {task_id} started ({})", render::clip(assignee, 60));
        }
        DispatcherEvent::WorkerFinished(r) => {
            let detail = r
                .detail
                .as_deref()
                .map(|d| format!(": {}", render::clip(d, 80)))
                .unwrap_or_default();
            eprintln!("■ {} {}{detail}", r.task_id, r.outcome.as_str());
        }
        DispatcherEvent::RoundFinished(_) => {}
    }
}

async fn worker(ctx: &Ctx, a: WorkerArgs) -> Outcome {
    let mut settings = ctx.kanban.settings().clone();
    if let Some(max) = a.max {
        if max == 0 {
            return Err(Failure::usage("--max must be at least 1"));
        }
        settings.max_in_progress = Some(max);
    }
    let stop = shutdown_signal();
    let engine = Engine::start(&ctx.config, a.profiles.as_deref()).await?;
    if let Err(e) = engine.require_profiles() {
        engine.runtime.close().await;
        return Err(e);
    }
    let mut config = settings.dispatcher_config();
    if let Some(only) = &a.profiles {
        config = config.with_dispatch_profiles(only.clone());
    }
    let dispatcher: DispatcherHandle = ctx
        .kanban
        .start_dispatcher(
            &engine.troupe,
            ctx.board.clone(),
            engine.profiles.clone(),
            config,
        )
        .await
        .map_err(|e| Failure::failed(e.to_string()))?;
    eprintln!(
        "worker on board {} of the {}: profiles {}, up to {} at once; SIGINT or SIGTERM stops it",
        ctx.board,
        settings.store.describe(),
        engine.profiles.names().join(", "),
        settings
            .max_in_progress
            .unwrap_or(troupe_kanban::dispatcher::DEFAULT_MAX_IN_PROGRESS)
    );
    let mut events = dispatcher.subscribe();
    // The first round runs at once rather than after the first tick.
    if let Err(e) = dispatcher.dispatch_once(None, false).await {
        eprintln!("the first dispatch round failed ({e}); the worker keeps trying on its own");
    }
    let mut stop = std::pin::pin!(stop);
    let idle = async {
        if a.until_idle {
            dispatcher.wait_idle().await
        } else {
            std::future::pending().await
        }
    };
    tokio::pin!(idle);
    let result = loop {
        tokio::select! {
            Ok(event) = events.recv() => progress_line(&event),
            done = &mut idle => break done.map_err(|e| Failure::failed(e.to_string())),
            () = &mut stop => {
                eprintln!("stopping: no new claims; running tasks are handed back to the board for another worker");
                break Ok(());
            }
        }
    };
    dispatcher.stop().await;
    let stats = dispatcher.stats();
    eprintln!(
        "worker done: {} claimed, {} completed, {} blocked, {} failed",
        stats.claimed, stats.completed, stats.blocked, stats.failed
    );
    engine.runtime.close().await;
    result
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
