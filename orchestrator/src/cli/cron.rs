//! `troupe cron`: scheduled jobs on a board, from the command line (list, create, update,
//! pause, resume, run, rm, history; `--json` for scripts). Jobs live in the board store
//! (`--store` / `kanban.store`); a running `troupe kanban worker` (or `troupe serve` with
//! boards) fires them. Exit codes as `troupe kanban`: 0 done, 1 refused or failed, 2 bad input.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_kanban::BoardSlug;
use troupe_kanban::schedule::JobPatch;

use super::error::CliError as Failure;
use super::kanban::load_settings;
use crate::kanban_api::Kanban;
use crate::schedules::{
    JobFields, TaskTemplate, instant_text, job_view, run_view, views_with_outcomes,
};
use crate::settings::kanban::KanbanSettings;

/// `troupe cron`: jobs that make board work on a schedule.
#[derive(Debug, Args)]
pub(crate) struct CronArgs {
    /// The board store: a directory (SQLite) or a postgres:// URL. Overrides kanban.store.
    #[arg(
        long,
        global = true,
        env = "TROUPE_KANBAN_STORE",
        value_name = "URL|PATH"
    )]
    store: Option<String>,
    /// The board (default: TROUPE_KANBAN_BOARD, else the switched-to board, else `default`).
    #[arg(long, global = true, value_name = "SLUG")]
    board: Option<String>,
    /// The config file (default: ./troupe.yaml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: CronCommand,
}

#[derive(Debug, Subcommand)]
enum CronCommand {
    /// List jobs: id, name, schedule, next run, last outcome.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a job.
    Create(JobArgs),
    /// Change a job (only what is given).
    Update {
        /// The job's id or name.
        job: String,
        #[command(flatten)]
        fields: JobArgs,
    },
    /// Stop a job from firing until resumed.
    Pause {
        /// The job's id or name.
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Let a paused job fire again, counting from now.
    Resume {
        /// The job's id or name.
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a job now, by hand (its schedule is not moved).
    Run {
        /// The job's id or name.
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a job and its history (the tasks it made stay).
    Rm {
        /// The job's id or name.
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A job's runs, newest first, with their tasks and outcomes.
    History {
        /// The job's id or name.
        job: String,
        /// At most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A job's fields on the command line (all optional for `update`).
#[derive(Debug, Args)]
struct JobArgs {
    /// A short unique name (needed by `create`).
    #[arg(long)]
    name: Option<String>,
    /// Cron ("0 9 * * 1-5"), interval ("every 10m") or ISO-8601 instant.
    #[arg(long)]
    schedule: Option<String>,
    /// IANA time zone for cron expressions (default UTC).
    #[arg(long)]
    timezone: Option<String>,
    /// Each run makes a task with this title.
    #[arg(long)]
    title: Option<String>,
    /// The task's body.
    #[arg(long)]
    body: Option<String>,
    /// The profile that runs the task.
    #[arg(long)]
    assignee: Option<String>,
    /// A task each made task waits for (repeat for several).
    #[arg(long = "parent", value_name = "ID")]
    parents: Vec<String>,
    /// Or: each run asks this prompt…
    #[arg(long)]
    prompt: Option<String>,
    /// …answered by this profile.
    #[arg(long)]
    profile: Option<String>,
    /// Runs missed while nothing ran: skip (default) or run_once.
    #[arg(long)]
    missed: Option<String>,
    /// No run after this ISO-8601 instant.
    #[arg(long)]
    until: Option<String>,
    /// Stop after this many runs.
    #[arg(long)]
    max_runs: Option<u32>,
    /// Who owns it (default: $USER).
    #[arg(long)]
    owner: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl JobArgs {
    fn fields(&self) -> JobFields {
        let task = self.title.as_ref().map(|title| TaskTemplate {
            title: title.clone(),
            body: self.body.clone().unwrap_or_default(),
            assignee: self.assignee.clone(),
            parents: self.parents.clone(),
        });
        JobFields {
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            timezone: self.timezone.clone(),
            task,
            prompt: self.prompt.clone(),
            profile: self.profile.clone(),
            missed: self.missed.clone(),
            until: self.until.clone(),
            max_runs: self.max_runs,
        }
    }
}

/// Runs `troupe cron`; returns the exit code.
pub(crate) async fn run(args: CronArgs) -> i32 {
    super::error::report("cron", run_inner(args).await.map(|()| 0))
}

async fn run_inner(args: CronArgs) -> Result<(), Failure> {
    let (_config, settings) = load_settings(args.config.as_ref(), args.store.as_deref())?;
    let kanban = Kanban::open(settings.clone()).await.map_err(|e| {
        Failure::failed(format!(
            "cannot open the {}: {e}",
            settings.store.describe()
        ))
    })?;
    let board = kanban.resolve_board(args.board.as_deref()).await?;
    let store = kanban.store().as_ref();
    match args.command {
        CronCommand::List { json } => {
            let jobs = store.jobs(&board).await?;
            let views = views_with_outcomes(store, &board, &jobs).await;
            if json {
                println!("{}", pretty(&json!(views)));
            } else {
                print!("{}", table(&board, &views));
            }
        }
        CronCommand::Create(a) => {
            let owner = a
                .owner
                .clone()
                .unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "operator".into()));
            let new = a
                .fields()
                .into_new(&owner, &known(&settings))
                .map_err(Failure::usage)?;
            let job = store
                .create_job(&board, &new)
                .await
                .map_err(usage_if_invalid)?;
            say(a.json, &job_view(&job), || {
                format!(
                    "job {} ({}) created; next run {}",
                    job.id,
                    job.name,
                    job.next_due
                        .map(instant_text)
                        .unwrap_or_else(|| "never".into())
                )
            });
        }
        CronCommand::Update { job, fields } => {
            let patch = patch_of(&fields, &settings)?;
            let updated = store
                .update_job(&board, &job, &patch)
                .await
                .map_err(usage_if_invalid)?;
            say(fields.json, &job_view(&updated), || {
                format!("job {} updated ({})", updated.id, updated.state())
            });
        }
        CronCommand::Pause { job, json } => pause(store, &board, &job, true, json).await?,
        CronCommand::Resume { job, json } => pause(store, &board, &job, false, json).await?,
        CronCommand::Run { job, json } => {
            let run = store.run_job_now(&board, &job).await?;
            say(json, &run_view(&run), || {
                format!(
                    "job {} ran now: task {}",
                    run.job_id,
                    run.task_id.as_ref().map(|t| t.as_str()).unwrap_or("-")
                )
            });
        }
        CronCommand::Rm { job, json } => {
            let gone = store.delete_job(&board, &job).await?;
            say(
                json,
                &json!({"removed": gone.id, "name": gone.name}),
                || format!("job {} ({}) removed", gone.id, gone.name),
            );
        }
        CronCommand::History { job, limit, json } => {
            let runs = store.job_history(&board, &job, limit).await?;
            if json {
                println!(
                    "{}",
                    pretty(&json!(runs.iter().map(run_view).collect::<Vec<_>>()))
                );
            } else if runs.is_empty() {
                println!("no runs yet");
            } else {
                println!(
                    "{:<22} {:<22} {:<9} {:>6} {:<12} OUTCOME",
                    "DUE", "FIRED", "KIND", "COVERS", "TASK"
                );
                for r in &runs {
                    println!(
                        "{:<22} {:<22} {:<9} {:>6} {:<12} {}",
                        instant_text(r.due_at),
                        instant_text(r.fired_at),
                        r.kind.as_str(),
                        r.covers,
                        r.task_id.as_ref().map(|t| t.as_str()).unwrap_or("-"),
                        r.outcome.as_deref().unwrap_or("-")
                    );
                }
            }
        }
    }
    Ok(())
}

async fn pause(
    store: &dyn troupe_kanban::Store,
    board: &BoardSlug,
    job: &str,
    paused: bool,
    json: bool,
) -> Result<(), Failure> {
    let patch = JobPatch {
        paused: Some(paused),
        ..JobPatch::default()
    };
    let job = store.update_job(board, job, &patch).await?;
    say(json, &job_view(&job), || {
        format!("job {} is {}", job.id, job.state())
    });
    Ok(())
}

fn patch_of(a: &JobArgs, settings: &KanbanSettings) -> Result<JobPatch, Failure> {
    if a.owner.is_some() {
        return Err(Failure::usage(
            "a job's owner does not change; remove it and create it again under the new owner",
        ));
    }
    a.fields()
        .into_patch(&known(settings))
        .map_err(Failure::usage)
}

/// Refused definitions are bad input (exit 2), not failures.
fn usage_if_invalid(e: troupe_kanban::StoreError) -> Failure {
    use troupe_kanban::StoreError;
    match e {
        StoreError::Schedule(_)
        | StoreError::JobNameTaken { .. }
        | StoreError::Invalid(_)
        | StoreError::TaskNotFound { .. } => Failure::usage(e.to_string()),
        other => other.into(),
    }
}

fn known(settings: &KanbanSettings) -> Vec<String> {
    settings.profiles.keys().cloned().collect()
}

fn say(json: bool, value: &serde_json::Value, text: impl FnOnce() -> String) {
    if json {
        println!("{}", pretty(value));
    } else {
        println!("{}", text());
    }
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn table(board: &BoardSlug, views: &[serde_json::Value]) -> String {
    use std::fmt::Write as _;
    if views.is_empty() {
        return format!("no scheduled jobs on board {board}; add one with `troupe cron create`\n");
    }
    let text = |v: &serde_json::Value, k: &str| {
        v.get(k).and_then(|x| x.as_str()).unwrap_or("-").to_string()
    };
    let mut out = format!(
        "{:<11} {:<20} {:<20} {:<7} {:<22} LAST\n",
        "ID", "NAME", "SCHEDULE", "STATE", "NEXT RUN"
    );
    for v in views {
        let _ = writeln!(
            out,
            "{:<11} {:<20} {:<20} {:<7} {:<22} {}",
            text(v, "id"),
            text(v, "name"),
            text(v, "schedule"),
            text(v, "state"),
            text(v, "next_run"),
            text(v, "last_outcome")
        );
    }
    out
}
