//! A board worker's `clarify`: the question goes on the task as a comment (its choices listed)
//! and the task is blocked with kind [`BlockRequest::QUESTION`], which ends the run and frees
//! the worker's slot. The next comment on the task is the answer (the store unblocks such a
//! task in the comment's own transaction, whichever door the comment came in by: `troupe
//! kanban comment`, the HTTP API, the dashboard, `troupe kanban unblock --answer`). The next
//! run reopens the session that asked, with its conversation, and tells it the answer in a
//! message naming the question ([`resume_message`]): the call itself returned when the task
//! was parked, since holding it open would hold a worker for as long as the person takes.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_tools::clarify::{CLARIFY_TOOL, Question, clarify_schema};
use troupe_tools::{CallContext, ToolDef, ToolHandler, ToolKind, ToolResult};

use crate::domain::{Comment, Run, RunOutcome, Task, TaskStatus};
use crate::store::BlockRequest;
use crate::worker_context::{COMMENT_CAP, clip};
use crate::worker_tools::{Bound, KANBAN_TOOLSET, TaskBinding, TerminalNote, store_error};

/// How a worker's question comment begins; the answer is what is written after it.
pub const QUESTION_HEADING: &str = "Question from the worker";

/// The board's `clarify`, acting for `bound`'s task.
pub(crate) fn clarify_tool(bound: &Bound) -> ToolDef {
    let (_, parameters) = clarify_schema();
    ToolDef::new(
        CLARIFY_TOOL,
        "Ask a person a question when the task is ambiguous and a wrong guess would be costly. \
         Offer up to 4 choices, or none for a free answer. On the board the question is posted \
         on your task as a comment and the task is parked until someone answers: end your turn \
         after the call. When the answer comes, this conversation goes on with it.",
        parameters,
    )
    .with_toolset(KANBAN_TOOLSET)
    .with_kind(ToolKind::Core)
    .with_handler(Arc::new(Ask {
        bound: bound.clone(),
    }))
}

struct Ask {
    bound: Bound,
}

impl ToolHandler for Ask {
    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'static, ToolResult> {
        let binding = match self.bound.resolve(&ctx.session_id) {
            Ok(binding) => binding,
            Err(refused) => return Box::pin(std::future::ready(refused)),
        };
        Box::pin(async move { ask(&binding, &args).await.unwrap_or_else(|error| error) })
    }
}

/// The comment that puts `question` to the people watching the board.
pub fn question_comment(question: &Question) -> String {
    let mut text = format!("{QUESTION_HEADING}: {}\n", question.question);
    for (i, choice) in question.choices.iter().enumerate() {
        text.push_str(&format!("  {}. {choice}\n", i + 1));
    }
    text.push_str(match (question.choices.is_empty(), question.allow_other) {
        (true, _) => "Answer with a comment on this task; the work resumes with it.",
        (false, true) => {
            "Answer with a comment on this task (a choice's number or text, or your own words); the work resumes with it."
        }
        (false, false) => {
            "Answer with a comment on this task (a choice's number or text); the work resumes with it."
        }
    });
    text
}

async fn ask(b: &TaskBinding, args: &Map<String, Value>) -> Result<ToolResult, ToolResult> {
    let question = Question::parse(args).map_err(ToolResult::error)?;
    b.holds_lease().await?;
    b.store
        .add_comment(&b.board, &b.task, &b.author, &question_comment(&question))
        .await
        .map_err(store_error)?;
    let request = BlockRequest::new(BlockRequest::QUESTION, question.question.clone())
        .by_worker(b.worker.clone());
    b.tell(TerminalNote::Begun);
    match b.store.block(&b.board, &b.task, &request).await {
        Ok(done) => {
            let task = done.task;
            let reason = format!("waiting for an answer: {}", question.question);
            b.tell(TerminalNote::Blocked(Box::new(task.clone()), reason));
            Ok(ToolResult::json(json!({
                "task_id": task.id,
                "status": task.status.as_str(),
                "asked": question.question,
                "next": "The question is on the task and the task is parked until someone answers. End your turn now; this conversation goes on with the answer.",
            })))
        }
        Err(error) => {
            b.tell(TerminalNote::Refused);
            Err(store_error(error))
        }
    }
}

/// Whether the run before `current` ended with the worker's question: the task was parked by
/// `clarify` and has been answered since. Such a run resumes the session that asked.
pub fn answered_question(task: &Task, runs: &[Run], current: crate::domain::RunId) -> bool {
    let last = runs
        .iter()
        .filter(|r| r.id != current)
        .max_by_key(|r| r.id.0);
    task.status != TaskStatus::Blocked
        && task.block_kind.as_deref() == Some(BlockRequest::QUESTION)
        && last.is_some_and(|r| r.outcome == Some(RunOutcome::Blocked))
}

/// The message a resumed session reads: the question it asked and the comments written after
/// it (the answer), or `None` when the question comment cannot be found.
pub fn resume_message(task: &Task, comments: &[Comment]) -> Option<String> {
    let asked = comments
        .iter()
        .rposition(|c| c.body.starts_with(QUESTION_HEADING))?;
    let question = task
        .block_reason
        .clone()
        .unwrap_or_else(|| comments[asked].body.clone());
    let answers: Vec<&Comment> = comments[asked + 1..].iter().collect();
    let mut text = format!(
        "Your question on task {} was answered.\nYou asked: {}\n",
        task.id,
        clip(&question, COMMENT_CAP)
    );
    if answers.is_empty() {
        text.push_str(
            "The task was unblocked without a written answer: decide for yourself and say what you assumed.\n",
        );
    }
    for comment in answers {
        text.push_str(&format!(
            "Answer from {}: {}\n",
            comment.author,
            clip(&comment.body, COMMENT_CAP)
        ));
    }
    text.push_str(
        "Go on with the task from where you stopped, and end with kanban_complete or kanban_block as before.",
    );
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comment_lists_the_choices() {
        let args = json!({"question": "Which database?", "choices": ["SQLite", "PostgreSQL"], "allow_other": false});
        let question = Question::parse(args.as_object().unwrap()).unwrap();
        let text = question_comment(&question);
        assert!(
            text.starts_with("Question from the worker: Which database?"),
            "{text}"
        );
        assert!(text.contains("  1. SQLite\n  2. PostgreSQL\n"), "{text}");
        assert!(!text.contains("own words"), "{text}");
    }
}
