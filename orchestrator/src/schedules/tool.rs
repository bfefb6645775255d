//! `cronjob`: the core tool a model schedules work with. One tool, one `action` argument:
//! create, list, update, pause, resume, run, remove (and history). Jobs go to the board store
//! the configuration names (`kanban.store`), on its current board, so the board's workers fire
//! them and the person sees them in `troupe cron list` and the dashboard. A job a model makes
//! is owned by the profile of its session.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use troupe_tools::{CallContext, ToolDef};

use super::{JobFields, job_view, run_view, views_with_outcomes};
use crate::kanban_api::Kanban;
use crate::sessions::SessionStore;
use crate::settings::kanban::KanbanSettings;

/// The tool's name.
pub const CRONJOB_TOOL: &str = "cronjob";

/// What the tool is asked to do.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Action {
    Create,
    List,
    Update,
    Pause,
    Resume,
    Run,
    Remove,
    History,
}

/// The arguments of `cronjob`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Arguments {
    /// create, list, update, pause, resume, run (now, by hand), remove, or history.
    action: Action,
    /// The job's id (j_…) or name, for every action but create and list.
    #[serde(default)]
    job_id: Option<String>,
    #[serde(flatten)]
    fields: JobFields,
}

/// The board store, opened on first use.
struct Board {
    settings: KanbanSettings,
    kanban: OnceCell<Kanban>,
}

impl Board {
    fn known(&self) -> Vec<String> {
        self.settings.profiles.keys().cloned().collect()
    }

    async fn open(&self) -> Result<&Kanban, String> {
        self.kanban
            .get_or_try_init(|| async {
                Kanban::open(self.settings.clone()).await.map_err(|e| {
                    format!(
                        "the board store ({}) could not be opened: {e}",
                        self.settings.store.describe()
                    )
                })
            })
            .await
    }
}

/// The `cronjob` tool over the board store `settings` name; `sessions` tells which profile a
/// calling session runs as (the job's owner).
pub fn cronjob_tool(settings: KanbanSettings, sessions: Option<SessionStore>) -> ToolDef {
    let board = Arc::new(Board {
        settings,
        kanban: OnceCell::new(),
    });
    crate::tool_fn::tool_fn_with_context(
        CRONJOB_TOOL,
        "Schedule work that runs by itself: create, list, update, pause, resume, run (now), remove or history of jobs. A job has a `schedule` (cron \"0 9 * * 1-5\" with an optional IANA `timezone`, an interval \"every 10m\", or one ISO-8601 instant) and makes at each run either a board `task` {title, body, assignee, parents} or a `prompt` answered by `profile`. `missed`: \"skip\" or \"run_once\" for runs missed while nothing ran; `until` / `max_runs` end it.",
        move |args: Arguments, ctx: CallContext| {
            let board = Arc::clone(&board);
            let sessions = sessions.clone();
            async move {
                let kanban = board.open().await?;
                let slug = kanban
                    .resolve_board(None)
                    .await
                    .map_err(|e| e.to_string())?;
                let store = kanban.store().as_ref();
                let key = || {
                    args.job_id
                        .clone()
                        .filter(|k| !k.trim().is_empty())
                        .ok_or_else(|| "`job_id` is missing; send the job's id (j_…) or name, from action \"list\"".to_string())
                };
                let out: Value = match args.action {
                    Action::Create => {
                        let owner = owner_of(sessions.as_ref(), &ctx.session_id).await;
                        let new = args.fields.into_new(&owner, &board.known())?;
                        let job = store.create_job(&slug, &new).await.map_err(|e| e.to_string())?;
                        json!({"created": job_view(&job)})
                    }
                    Action::List => {
                        let jobs = store.jobs(&slug).await.map_err(|e| e.to_string())?;
                        json!({"jobs": views_with_outcomes(store, &slug, &jobs).await})
                    }
                    Action::Update => {
                        let patch = args.fields.clone().into_patch(&board.known())?;
                        let job = store.update_job(&slug, &key()?, &patch).await.map_err(|e| e.to_string())?;
                        json!({"updated": job_view(&job)})
                    }
                    Action::Pause | Action::Resume => {
                        let patch = troupe_kanban::schedule::JobPatch {
                            paused: Some(matches!(args.action, Action::Pause)),
                            ..Default::default()
                        };
                        let job = store.update_job(&slug, &key()?, &patch).await.map_err(|e| e.to_string())?;
                        json!({"job": job_view(&job)})
                    }
                    Action::Run => {
                        let run = store.run_job_now(&slug, &key()?).await.map_err(|e| e.to_string())?;
                        json!({"ran": run_view(&run)})
                    }
                    Action::Remove => {
                        let job = store.delete_job(&slug, &key()?).await.map_err(|e| e.to_string())?;
                        json!({"removed": job.id, "name": job.name})
                    }
                    Action::History => {
                        let runs = store.job_history(&slug, &key()?, 50).await.map_err(|e| e.to_string())?;
                        json!({"runs": runs.iter().map(run_view).collect::<Vec<_>>()})
                    }
                };
                Ok::<Value, String>(out)
            }
        },
    )
    .with_toolset("core")
}

/// The profile the calling session runs as, as recorded when it was opened; `default` for a
/// session opened without one.
async fn owner_of(sessions: Option<&SessionStore>, session_id: &str) -> String {
    let Some(store) = sessions else {
        return "default".into();
    };
    match store.load(session_id).await {
        Ok(stored) => stored
            .options
            .get("profile")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or("default")
            .to_string(),
        Err(_) => "default".into(),
    }
}
