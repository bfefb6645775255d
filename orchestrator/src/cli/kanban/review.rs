//! `troupe kanban review ID --approve | --changes "…"`: a person's verdict on a task waiting
//! in `review` (a profile with `review:` sends its completions there), and the evidence lines
//! `troupe kanban show` prints.

use clap::Args;
use troupe_kanban::domain::Run;
use troupe_kanban::evidence;

use super::{Ctx, Failure, Outcome, task_id};

/// `troupe kanban review`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("verdict").required(true).args(["approve", "changes"])))]
pub(crate) struct ReviewArgs {
    /// The task id.
    pub(crate) id: String,
    /// The result is right: the task is done.
    #[arg(long)]
    pub(crate) approve: bool,
    /// Send it back with what must change; the next worker reads it.
    #[arg(long, value_name = "TEXT")]
    pub(crate) changes: Option<String>,
    /// A note kept on the task with an approval.
    #[arg(long, value_name = "TEXT", requires = "approve")]
    pub(crate) comment: Option<String>,
    /// Who reviews.
    #[arg(long, default_value = "operator")]
    pub(crate) author: String,
}

pub(super) async fn review(ctx: &Ctx, a: ReviewArgs) -> Outcome {
    let id = task_id(&a.id)?;
    let author = a.author.trim();
    if author.is_empty() {
        return Err(Failure::usage(
            "--author is empty; give a name, or leave the flag out to review as operator",
        ));
    }
    let store = ctx.kanban.store().as_ref();
    if let Some(changes) = &a.changes {
        if changes.trim().is_empty() {
            return Err(Failure::usage(
                "--changes is empty; say what must change, for the next worker to read",
            ));
        }
        let task =
            troupe_kanban::review::send_back(store, &ctx.board, &id, author, changes).await?;
        println!(
            "{} sent back ({}); the next worker reads: {}",
            task.id,
            task.status,
            changes.trim()
        );
        return Ok(());
    }
    let task = troupe_kanban::review::approve(store, &ctx.board, &id, author, a.comment.as_deref())
        .await?;
    println!("{} approved: it is {}", task.id, task.status);
    Ok(())
}

/// What `troupe kanban show` prints of the evidence of the task's latest completion: nothing
/// when no run kept any.
pub(super) fn evidence_lines(runs: &[Run]) -> Option<String> {
    let (run, calls) = evidence::latest(runs)?;
    Some(format!(
        "Latest completion (run {}), {}",
        run.id.0,
        evidence::describe(&calls)
    ))
}

/// The evidence for `troupe kanban show --json`: the calls, `"none"`, or null.
pub(super) fn evidence_json(runs: &[Run]) -> serde_json::Value {
    match evidence::latest(runs) {
        Some((_, calls)) if calls.is_empty() => serde_json::json!(evidence::NO_EVIDENCE),
        Some((_, calls)) => serde_json::to_value(calls).unwrap_or_default(),
        None => serde_json::Value::Null,
    }
}
