//! What a worker's model is told: the protocol guidance added to the profile's system prompt
//! ([`system_prompt`]) and the first message built from the task ([`build_worker_context`]):
//! its body, its parents' results, its attachments, its last comments and its prior attempts,
//! each within its own size cap (see the constants below) and all within [`TOTAL_CAP`]. The
//! [`Worker`](crate::worker::Worker) uses both.

use troupe_tools::text::byte_prefix;

use crate::domain::{BoardSlug, Run, Task};
use crate::store::{Store, StoreError};

/// Most bytes of the task body quoted.
pub const BODY_CAP: usize = 8 * 1024;
/// Most bytes of any other single field quoted (a result, a summary, an error).
pub const FIELD_CAP: usize = 4 * 1024;
/// Most bytes of one comment quoted.
pub const COMMENT_CAP: usize = 2 * 1024;
/// Most comments quoted (the newest).
pub const MAX_COMMENTS: usize = 30;
/// Most prior attempts listed (the newest).
pub const MAX_PRIOR_RUNS: usize = 10;

/// The guidance every worker gets after its profile's own prompt.
const GUIDANCE: &str = "You are a worker on a kanban board, running exactly one task. \
The task, its parents' results and its history are in the first message; kanban_show reads it again. \
Do the work with your tools. During long work call kanban_heartbeat now and then. \
You must end with exactly one board call: kanban_complete with a summary (and the full result when there is one) when the task is done, \
or kanban_block with the reason when you cannot go on. \
To split the work, create child tasks with kanban_create (they start once your task completes) and complete your own task with a summary of the plan. \
You can act only on your own task and on the children you create.";

/// The system prompt of a worker whose profile says `profile_prompt`.
pub fn system_prompt(profile_prompt: Option<&str>) -> String {
    match profile_prompt {
        Some(prompt) if !prompt.trim().is_empty() => format!("{prompt}\n\n{GUIDANCE}"),
        _ => GUIDANCE.to_string(),
    }
}

/// The reminder sent when the model ends its turn without a terminal board call.
pub fn nudge(task: &Task, left: u32) -> String {
    format!(
        "Your turn ended but task {} is still open on the board. Finish it now: call kanban_complete with a summary if the work is done, or kanban_block with the reason if it cannot be done. ({left} reminder(s) left before the run counts as failed.)",
        task.id
    )
}

/// Cuts `text` to at most `cap` bytes on a character boundary, saying how much was left out.
pub fn clip(text: &str, cap: usize) -> String {
    let head = byte_prefix(text, cap);
    if head.len() == text.len() {
        return text.to_string();
    }
    format!(
        "{head}\n[... {} more bytes not shown]",
        text.len() - head.len()
    )
}

/// Most bytes of the whole first message. A wide fan-in (say 50 parents with 4 KB results
/// each) would otherwise flood the model's context before the work starts.
pub const TOTAL_CAP: usize = 64 * 1024;
/// Most bytes the parents' results may take of [`TOTAL_CAP`], so attempts and comments keep
/// room too.
pub const PARENTS_CAP: usize = 40 * 1024;

/// Entries of one section, appended while they fit in a byte budget; the rest are counted so
/// the message can say what it left out.
struct Section {
    heading: &'static str,
    entries: Vec<String>,
    left_out: Vec<String>,
}

impl Section {
    fn new(heading: &'static str) -> Section {
        Section {
            heading,
            entries: Vec::new(),
            left_out: Vec::new(),
        }
    }

    /// Takes `entry` if it fits in `budget` (which it then reduces); otherwise notes `name`
    /// as left out.
    fn offer(&mut self, entry: String, name: String, budget: &mut usize) {
        if self.left_out.is_empty() && entry.len() <= *budget {
            *budget -= entry.len();
            self.entries.push(entry);
        } else {
            self.left_out.push(name);
        }
    }

    fn render(&self, out: &mut String, what: &str) {
        if self.entries.is_empty() && self.left_out.is_empty() {
            return;
        }
        out.push_str(self.heading);
        for entry in &self.entries {
            out.push_str(entry);
        }
        if !self.left_out.is_empty() {
            out.push_str(&format!(
                "[{} {what} left out to keep this message under {} KB: {}]\n",
                self.left_out.len(),
                TOTAL_CAP / 1024,
                clip(&self.left_out.join(", "), FIELD_CAP)
            ));
        }
    }
}

/// The worker's first message for `task`. Reads the parents' latest completed runs, the
/// attachments, the comments and the task's earlier runs from `store`. Each field is clipped
/// to its cap and the whole message stays under [`TOTAL_CAP`]; what did not fit is named.
pub async fn build_worker_context(
    store: &dyn Store,
    board: &BoardSlug,
    task: &Task,
) -> Result<String, StoreError> {
    let mut out = String::new();
    out.push_str(&format!(
        "# Task {id}: {title}\nBoard: {board}. Status: {status}. Priority: {priority}.",
        id = task.id,
        title = clip(&task.title, FIELD_CAP),
        status = task.status.as_str(),
        priority = task.priority,
    ));
    if let Some(assignee) = &task.assignee {
        out.push_str(&format!(" Assignee: {assignee}."));
    }
    if let Some(tenant) = &task.tenant {
        out.push_str(&format!(" Tenant: {}.", clip(tenant, FIELD_CAP)));
    }
    if let Some(path) = task.workspace.path() {
        out.push_str(&format!(" Workspace: {}.", clip(path, FIELD_CAP)));
    }
    out.push_str("\n\n## What to do\n");
    if task.body.trim().is_empty() {
        out.push_str("(no description beyond the title)\n");
    } else {
        out.push_str(&clip(&task.body, BODY_CAP));
        out.push('\n');
    }
    let footer = format!(
        "\nWhen you are done, call kanban_complete (or kanban_block if you cannot finish) for {}.",
        task.id
    );
    // Room for the sections, less a margin for their headings and left-out notes.
    let mut budget = TOTAL_CAP.saturating_sub(out.len() + footer.len() + 4 * 1024);

    // One read for everything below: one consistent view, and one trip to the store.
    let context = store.task_context(board, &task.id).await?;
    let mut parents = Section::new("\n## Results of the tasks this one waited for\n");
    let mut parents_budget = budget.min(PARENTS_CAP);
    for (parent, runs) in &context.parents {
        let mut entry = format!(
            "\n### {} ({}): {}\n",
            parent.id,
            parent.status.as_str(),
            clip(&parent.title, FIELD_CAP)
        );
        let latest = runs
            .iter()
            .rev()
            .find(|r| r.outcome == Some(crate::domain::RunOutcome::Completed));
        if let Some(summary) = latest.and_then(|r| r.summary.as_deref()) {
            entry.push_str(&format!("Summary: {}\n", clip(summary, FIELD_CAP)));
        }
        if let Some(metadata) = latest.and_then(|r| r.metadata.as_ref()) {
            entry.push_str(&format!(
                "Details: {}\n",
                clip(&metadata.to_string(), FIELD_CAP)
            ));
        }
        if let Some(result) = &parent.result {
            entry.push_str(&format!("Result: {}\n", clip(result, FIELD_CAP)));
        }
        parents.offer(entry, parent.id.to_string(), &mut parents_budget);
    }
    budget = budget.saturating_sub(budget.min(PARENTS_CAP) - parents_budget);

    let attachments = &context.attachments;
    let mut files = Section::new(
        "\n## Files attached to this task\nTheir bytes are kept on the board, not in your workspace; your tools cannot open them, so if one is essential, block with kanban_block and say which.\n",
    );
    for file in attachments {
        let entry = format!(
            "- {} ({}, {} bytes, attachment id {})\n",
            clip(&file.filename, FIELD_CAP),
            file.content_type,
            file.size,
            file.id
        );
        files.offer(entry, file.filename.clone(), &mut budget);
    }

    // Attempts and comments: the newest matter most, so they are offered newest first.
    let runs = &context.runs;
    let prior: Vec<&Run> = runs.iter().filter(|r| r.ended_at.is_some()).collect();
    let mut attempts = Section::new("\n## Earlier attempts at this task\n");
    let skip = prior.len().saturating_sub(MAX_PRIOR_RUNS);
    for run in prior[skip..].iter().rev() {
        let outcome = run.outcome.map(|o| o.as_str()).unwrap_or("ended");
        let mut entry = format!(
            "- run {} by {}: {}",
            run.id.0,
            run.profile.as_deref().unwrap_or("(unknown)"),
            outcome
        );
        if let Some(error) = &run.error {
            entry.push_str(&format!(" ({})", clip(error, FIELD_CAP)));
        }
        if let Some(summary) = &run.summary {
            entry.push_str(&format!(" {}", clip(summary, FIELD_CAP)));
        }
        entry.push('\n');
        attempts.offer(entry, format!("run {}", run.id.0), &mut budget);
    }
    attempts.entries.reverse();

    let comments = &context.comments;
    let mut said = Section::new("\n## Comments (newest last)\n");
    let skip = comments.len().saturating_sub(MAX_COMMENTS);
    for comment in comments[skip..].iter().rev() {
        let entry = format!(
            "- {}: {}\n",
            comment.author,
            clip(&comment.body, COMMENT_CAP)
        );
        said.offer(entry, format!("comment {}", comment.id), &mut budget);
    }
    said.entries.reverse();

    parents.render(&mut out, "parent result(s)");
    files.render(&mut out, "attachment(s)");
    attempts.render(&mut out, "older attempt(s)");
    said.render(&mut out, "older comment(s)");
    out.push_str(&footer);
    Ok(out)
}

/// The part of a run's first message that names the calls the task's last run (`run`) started
/// and never finished, because its worker stopped: their effect is unknown, so the model is
/// asked to check before doing them again. Empty when there are none.
pub fn cut_off_section(
    run: crate::domain::RunId,
    calls: &[crate::run_history::CutOffCall],
) -> String {
    if calls.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n\n## Calls cut off in the last run\nRun {} stopped (its worker was killed or lost) while these tool calls were under way:\n",
        run.0
    );
    let mut budget = FIELD_CAP * 2;
    for (n, call) in calls.iter().enumerate() {
        let state = if call.may_have_run {
            "cut off before its result came back: whether it ran, partly ran or had any effect is unknown"
        } else {
            "never started (it was waiting for approval)"
        };
        let line = format!(
            "- {} {}: {state}\n",
            call.tool,
            clip(&call.arguments, COMMENT_CAP)
        );
        if line.len() > budget {
            out.push_str(&format!("[{} more call(s) not shown]\n", calls.len() - n));
            break;
        }
        budget -= line.len();
        out.push_str(&line);
    }
    out.push_str("Before doing any of them again, check what they did (look at the files, processes or board state they touch); repeat one only once you know it is needed and safe to run twice.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_off_calls_are_named_with_their_unknown_effect() {
        use crate::run_history::CutOffCall;
        assert_eq!(cut_off_section(crate::domain::RunId(3), &[]), "");
        let text = cut_off_section(
            crate::domain::RunId(3),
            &[
                CutOffCall {
                    tool: "terminal".into(),
                    arguments: r#"{"command":"sleep 30"}"#.into(),
                    may_have_run: true,
                },
                CutOffCall {
                    tool: "write_file".into(),
                    arguments: "{}".into(),
                    may_have_run: false,
                },
            ],
        );
        assert!(text.contains("Run 3"), "{text}");
        assert!(
            text.contains(r#"terminal {"command":"sleep 30"}"#) && text.contains("unknown"),
            "{text}"
        );
        assert!(text.contains("write_file {}: never started"), "{text}");
    }

    #[test]
    fn clip_keeps_short_text_and_cuts_on_char_boundaries() {
        assert_eq!(clip("short", 10), "short");
        let long = "é".repeat(10); // 20 bytes
        let cut = clip(&long, 5);
        assert!(cut.starts_with("éé"));
        assert!(cut.contains("[... 16 more bytes not shown]"), "{cut}");
    }

    #[test]
    fn guidance_follows_the_profile_prompt() {
        let prompt = system_prompt(Some("You write Rust."));
        assert!(prompt.starts_with("You write Rust.\n\n"));
        assert!(prompt.contains("kanban_complete"));
        assert_eq!(system_prompt(None), system_prompt(Some("  ")));
    }
}
