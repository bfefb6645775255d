//! Scheduled jobs as people and models reach them: the fields a request sends (the same for
//! the `cronjob` tool, `troupe cron` and the HTTP API), their checks against the configured
//! profiles, and the JSON a job or a run is shown as. The jobs themselves live in the board
//! store (`troupe_kanban::schedule`); this module only translates.

mod tool;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_kanban::domain::{TaskId, Timestamp};
use troupe_kanban::schedule::{
    DEFAULT_ZONE, Job, JobAction, JobPatch, JobRun, Missed, NewJob, Timing,
};

pub use tool::{CRONJOB_TOOL, cronjob_tool};

/// A task template as requests write it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskTemplate {
    /// The title of each task the job makes.
    pub title: String,
    /// Its body: what to do, in full.
    #[serde(default)]
    pub body: String,
    /// The profile that runs it.
    #[serde(default)]
    pub assignee: Option<String>,
    /// Task ids (t_ and 8 hex digits) each made task waits for.
    #[serde(default)]
    pub parents: Vec<String>,
}

/// A job's fields as a request sends them; every one optional so one shape serves creating
/// (where `name`, `schedule` and `task` or `prompt` are needed) and updating (where only what
/// changes is sent).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct JobFields {
    /// A short unique name, such as "nightly-report".
    #[serde(default)]
    pub name: Option<String>,
    /// A cron expression ("0 9 * * 1-5"), an interval ("every 10m"; units s, m, h, d; at
    /// least 1 s) or one ISO-8601 instant ("2027-01-31T09:00:00Z").
    #[serde(default)]
    pub schedule: Option<String>,
    /// The IANA time zone cron expressions are read in (default UTC), such as "Europe/Paris".
    #[serde(default)]
    pub timezone: Option<String>,
    /// Make a board task from this template at each run.
    #[serde(default)]
    pub task: Option<TaskTemplate>,
    /// Or: ask this prompt at each run, answered by `profile`.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The profile that answers `prompt`.
    #[serde(default)]
    pub profile: Option<String>,
    /// Runs missed while nothing was running: "skip" (default) or "run_once" (one catch-up).
    #[serde(default)]
    pub missed: Option<String>,
    /// No run after this ISO-8601 instant.
    #[serde(default)]
    pub until: Option<String>,
    /// Stop after this many runs.
    #[serde(default)]
    pub max_runs: Option<u32>,
}

impl JobFields {
    /// The action the fields name, if they name one (`task`, or `prompt` with `profile`).
    fn action(&self) -> Result<Option<JobAction>, String> {
        match (&self.task, &self.prompt) {
            (Some(_), Some(_)) => Err("send either `task` or `prompt`, not both".into()),
            (Some(t), None) => {
                let parents = t
                    .parents
                    .iter()
                    .map(|p| TaskId::parse(p.trim()).map_err(|e| format!("task.parents: {e}")))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Some(JobAction::Task {
                    title: t.title.clone(),
                    body: t.body.clone(),
                    assignee: t.assignee.clone().filter(|a| !a.trim().is_empty()),
                    parents,
                }))
            }
            (None, Some(prompt)) => {
                let profile = self
                    .profile
                    .clone()
                    .filter(|p| !p.trim().is_empty())
                    .ok_or("`prompt` needs `profile`: the profile that answers it".to_string())?;
                Ok(Some(JobAction::Prompt {
                    prompt: prompt.clone(),
                    profile,
                }))
            }
            (None, None) => Ok(None),
        }
    }

    fn missed(&self) -> Result<Option<Missed>, String> {
        self.missed
            .as_deref()
            .map(|m| Missed::parse(m).map_err(|e| e.to_string()))
            .transpose()
    }

    fn until(&self) -> Result<Option<Timestamp>, String> {
        let zone = self.timezone.as_deref().unwrap_or(DEFAULT_ZONE);
        self.until
            .as_deref()
            .map(|u| parse_instant(u, zone))
            .transpose()
    }

    /// A new job owned by `owner`, checked against the configured profiles (`known`).
    pub fn into_new(self, owner: &str, known: &[String]) -> Result<NewJob, String> {
        let name = self
            .name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .ok_or("`name` is missing; send a short unique name such as \"nightly-report\"")?;
        let schedule = self
            .schedule
            .clone()
            .filter(|s| !s.trim().is_empty())
            .ok_or(
                "`schedule` is missing; send a cron expression (\"0 9 * * 1-5\"), an interval \
             (\"every 10m\") or an ISO-8601 instant",
            )?;
        let action = self.action()?.ok_or(
            "say what each run makes: `task` {title, body, assignee, parents} or `prompt` with \
             `profile`",
        )?;
        check_profile(known, &action)?;
        Ok(NewJob {
            name,
            owner: owner.to_string(),
            schedule,
            timezone: self.timezone.clone(),
            action,
            missed: self.missed()?.unwrap_or_default(),
            until: self.until()?,
            max_runs: self.max_runs,
            paused: false,
        })
    }

    /// The change the fields describe, checked against the configured profiles (`known`).
    pub fn into_patch(self, known: &[String]) -> Result<JobPatch, String> {
        let action = self.action()?;
        if let Some(action) = &action {
            check_profile(known, action)?;
        }
        Ok(JobPatch {
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            timezone: self.timezone.clone(),
            action,
            missed: self.missed()?,
            until: self.until()?.map(Some),
            max_runs: self.max_runs.map(Some),
            paused: None,
        })
    }
}

/// An ISO-8601 instant (an offset-less one read in `zone`).
pub fn parse_instant(text: &str, zone: &str) -> Result<Timestamp, String> {
    match Timing::parse(text, zone) {
        Ok(Timing::Once(at)) => Ok(at),
        Ok(_) | Err(_) => Err(format!(
            "{text:?} is not an ISO-8601 instant; write it like \"2027-01-31T09:00:00Z\""
        )),
    }
}

/// The profile a job's runs go to must be one of the configured profiles (`known`), which the
/// board's workers run.
pub fn check_profile(known: &[String], action: &JobAction) -> Result<(), String> {
    let Some(name) = action.profile() else {
        return Ok(());
    };
    if known.iter().any(|k| k == name) {
        return Ok(());
    }
    let listed = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    Err(format!(
        "there is no profile {name:?} under profiles: in troupe.yaml (known: {listed}); name one \
         of them, or add it there first"
    ))
}

/// A moment as RFC 3339 text (UTC).
pub fn instant_text(t: Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_millis(t.0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| t.0.to_string())
}

/// A run as JSON.
pub fn run_view(run: &JobRun) -> Value {
    json!({
        "job_id": run.job_id,
        "due_at": instant_text(run.due_at),
        "fired_at": instant_text(run.fired_at),
        "kind": run.kind.as_str(),
        "covers": run.covers,
        "task_id": run.task_id,
        "outcome": run.outcome,
    })
}

/// A job as JSON: what `troupe cron list --json`, the tool and the API print.
pub fn job_view(job: &Job) -> Value {
    let last_outcome = job.last.as_ref().map(|r| match (&r.outcome, &r.task_id) {
        (Some(o), _) => o.clone(),
        (None, Some(_)) => r.kind.as_str().to_string(),
        (None, None) => "skipped".to_string(),
    });
    json!({
        "id": job.id,
        "name": job.name,
        "owner": job.owner,
        "schedule": job.schedule,
        "timezone": job.timezone,
        "state": job.state(),
        "next_run": job.next_due.filter(|_| !job.paused).map(instant_text),
        "next_due": job.next_due.map(instant_text),
        "last_run": job.last.as_ref().map(run_view),
        "last_outcome": last_outcome,
        "runs": job.runs,
        "missed": job.missed.as_str(),
        "until": job.until.map(instant_text),
        "max_runs": job.max_runs,
        "action": job.action,
        "created_at": instant_text(job.created_at),
    })
}

/// Jobs as JSON, each job's last outcome read from its task now (`done`, `running`, …).
pub async fn views_with_outcomes(
    store: &dyn troupe_kanban::Store,
    board: &troupe_kanban::BoardSlug,
    jobs: &[Job],
) -> Vec<Value> {
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mut job = job.clone();
        if let Some(last) = job.last.as_mut()
            && let Some(task) = &last.task_id
        {
            last.outcome = Some(match store.task(board, task).await {
                Ok(t) => t.status.as_str().to_string(),
                Err(troupe_kanban::StoreError::TaskNotFound { .. }) => "removed".to_string(),
                Err(_) => "unknown".to_string(),
            });
        }
        out.push(job_view(&job));
    }
    out
}
