//! The fan-out plan of `troupe demo` ([`DemoPlan`], bundled as `orchestrator/data/demo_fanout.yaml`)
//! and [`DemoModel`], the offline model that follows it when no model endpoint is configured.
//! Unlike a fixed script, it reads the conversation: it passes the ids `kanban_create` returned
//! on to the final task's `parents`, and reports the real output of the commands it ran. Used by
//! `cli/demo.rs` and the demo's tests.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_actors::model::{
    ChatMessage, FinishReason, ModelError, ModelProvider, ModelRequest, ModelResponse,
    ToolCallRequest, Usage,
};

/// The bundled plan's text.
const BUNDLED_PLAN: &str = include_str!("../data/demo_fanout.yaml");

/// A task's title and body in the plan.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PlannedTask {
    /// The title.
    pub(crate) title: String,
    /// The body (the orchestrator's may hold `{checks}`, filled from the checks).
    pub(crate) body: String,
}

/// One child task: a check run with one command.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Check {
    /// What is checked, e.g. `Kernel`.
    pub(crate) title: String,
    /// The shell command that finds it out.
    pub(crate) command: String,
}

/// The demo's plan: an orchestrating task, its checks (children run in parallel) and a final
/// task that waits for all of them.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct DemoPlan {
    /// The task that splits the work.
    pub(crate) orchestrator: PlannedTask,
    /// The children.
    pub(crate) checks: Vec<Check>,
    /// The task that runs last.
    #[serde(rename = "final")]
    pub(crate) last: PlannedTask,
}

impl DemoPlan {
    /// The plan bundled with troupe.
    pub(crate) fn bundled() -> Result<DemoPlan, String> {
        DemoPlan::parse(BUNDLED_PLAN)
    }

    /// Reads a plan from YAML.
    pub(crate) fn parse(text: &str) -> Result<DemoPlan, String> {
        let plan: DemoPlan =
            serde_norway::from_str(text).map_err(|e| format!("the demo plan is not valid: {e}"))?;
        if plan.checks.is_empty() {
            return Err("the demo plan has no checks; list at least one under checks:".into());
        }
        Ok(plan)
    }

    /// The orchestrator's body with the checks written in.
    pub(crate) fn orchestrator_body(&self) -> String {
        let checks = self
            .checks
            .iter()
            .map(|c| format!("{} (`{}`)", c.title, c.command))
            .collect::<Vec<_>>()
            .join(", ");
        self.orchestrator.body.replace("{checks}", &checks)
    }

    /// A child's body.
    pub(crate) fn check_body(check: &Check) -> String {
        format!(
            "Run `{}` in the terminal and complete this task with its output as the result.",
            check.command
        )
    }
}

/// The offline model of the demo; see the module doc.
#[derive(Debug, Clone)]
pub(crate) struct DemoModel {
    plan: Arc<DemoPlan>,
}

/// Which task a conversation is about.
enum Role {
    Orchestrator,
    Child(String),
    Report,
    Other,
}

impl DemoModel {
    /// A model following `plan`.
    pub(crate) fn new(plan: DemoPlan) -> DemoModel {
        DemoModel {
            plan: Arc::new(plan),
        }
    }

    fn role(&self, first: &str) -> Role {
        let header = first.lines().next().unwrap_or("");
        if header.ends_with(&format!(": {}", self.plan.orchestrator.title)) {
            Role::Orchestrator
        } else if header.ends_with(&format!(": {}", self.plan.last.title)) {
            Role::Report
        } else if let Some(command) = between(first, "Run `", "`") {
            Role::Child(command.to_string())
        } else {
            Role::Other
        }
    }

    /// The next answer for a conversation.
    fn answer(&self, messages: &[ChatMessage]) -> ModelResponse {
        let first = messages
            .iter()
            .find_map(|m| match m {
                ChatMessage::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("");
        let turn = messages
            .iter()
            .filter(|m| matches!(m, ChatMessage::Assistant { .. }))
            .count();
        let results: Vec<(&str, &str)> = messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::Tool { name, content, .. } => Some((name.as_str(), content.as_str())),
                _ => None,
            })
            .collect();
        match (self.role(first), turn) {
            (Role::Orchestrator, 0) => calls(
                "I will split this into one task per check and a report that waits for them.",
                self.plan
                    .checks
                    .iter()
                    .map(|c| {
                        (
                            "kanban_create",
                            json!({"title": format!("Check: {}", c.title), "body": DemoPlan::check_body(c), "assignee": "worker"}),
                        )
                    })
                    .collect(),
            ),
            (Role::Orchestrator, 1) => {
                let ids: Vec<String> = results
                    .iter()
                    .filter(|(name, _)| *name == "kanban_create")
                    .filter_map(|(_, content)| {
                        serde_json::from_str::<Value>(content)
                            .ok()?
                            .get("task_id")?
                            .as_str()
                            .map(String::from)
                    })
                    .collect();
                calls(
                    "Now the report, waiting for every check.",
                    vec![(
                        "kanban_create",
                        json!({"title": self.plan.last.title, "body": self.plan.last.body, "assignee": "worker", "parents": ids}),
                    )],
                )
            }
            (Role::Orchestrator, 2) => calls(
                "",
                vec![(
                    "kanban_complete",
                    json!({"summary": format!("Split into {} checks run in parallel and a final report.", self.plan.checks.len())}),
                )],
            ),
            (Role::Child(command), 0) => calls(
                "",
                vec![("terminal", json!({"command": command}))],
            ),
            (Role::Child(_), 1) => {
                let output = results
                    .iter()
                    .rev()
                    .find(|(name, _)| *name == "terminal")
                    .map(|(_, content)| terminal_output(content))
                    .unwrap_or_else(|| "the command gave no result".to_string());
                let summary = output
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("(no output)")
                    .trim()
                    .chars()
                    .take(200)
                    .collect::<String>();
                calls(
                    "",
                    vec![("kanban_complete", json!({"summary": summary, "result": output}))],
                )
            }
            (Role::Report, 0) => {
                let report = report_lines(first);
                calls(
                    "",
                    vec![(
                        "kanban_complete",
                        json!({"summary": format!("Machine report from {} checks.", report.lines().count()), "result": report}),
                    )],
                )
            }
            (Role::Other, 0) => calls(
                "",
                vec![(
                    "kanban_block",
                    json!({"reason": "the demo model only knows the demo's tasks; give this task to a real model", "kind": "needs_input"}),
                )],
            ),
            _ => text("Done; the board has my result."),
        }
    }
}

impl ModelProvider for DemoModel {
    fn describe(&self) -> String {
        "the bundled demo model (offline, follows orchestrator/data/demo_fanout.yaml)".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let answer = self.answer(&request.messages);
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(ModelError::Cancelled);
            }
            Ok(answer)
        })
    }
}

fn calls(text: &str, calls: Vec<(&str, Value)>) -> ModelResponse {
    ModelResponse {
        content: (!text.is_empty()).then(|| text.to_string()),
        tool_calls: calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCallRequest {
                id: format!("demo_{}_{i}", uuid::Uuid::new_v4().simple()),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        finish_reason: FinishReason::ToolCalls,
        usage: Usage::default(),
    }
}

fn text(text: &str) -> ModelResponse {
    ModelResponse {
        content: Some(text.to_string()),
        tool_calls: Vec::new(),
        finish_reason: FinishReason::Stop,
        usage: Usage::default(),
    }
}

/// The text between the first `start` and the next `end`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

/// What a terminal call printed (its `output` field), or its error.
fn terminal_output(content: &str) -> String {
    match serde_json::from_str::<Value>(content) {
        Ok(v) => match (
            v.get("output").and_then(Value::as_str),
            v.get("error").and_then(Value::as_str),
        ) {
            (Some(out), _) if !out.trim().is_empty() => out.trim_end().to_string(),
            (_, Some(error)) => format!("the command failed: {error}"),
            _ => "(no output)".to_string(),
        },
        Err(_) => content.trim_end().to_string(),
    }
}

/// One line per parent of the report task: `Kernel: Linux 6.1`, from the parents' summaries in
/// the worker context.
fn report_lines(context: &str) -> String {
    let mut lines = Vec::new();
    for section in context.split("\n### ").skip(1) {
        let header = section.lines().next().unwrap_or("");
        let title = header.split_once("): ").map_or(header, |(_, t)| t);
        // The orchestrating parent is not a check.
        let Some(title) = title.strip_prefix("Check: ") else {
            continue;
        };
        let summary = section
            .lines()
            .find_map(|l| l.strip_prefix("Summary: "))
            .unwrap_or("(no summary)");
        lines.push(format!("{title}: {summary}"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> ChatMessage {
        ChatMessage::User {
            content: text.into(),
        }
    }

    #[test]
    fn bundled_plan_reads() {
        let plan = DemoPlan::bundled().unwrap();
        assert!(plan.checks.len() >= 3);
        assert!(plan.orchestrator_body().contains("uname -sr"));
    }

    #[test]
    fn orchestrator_passes_created_ids_to_the_report() {
        let plan = DemoPlan::bundled().unwrap();
        let model = DemoModel::new(plan.clone());
        let first = user(&format!(
            "# Task t_00000001: {}\n...",
            plan.orchestrator.title
        ));
        let step1 = model.answer(std::slice::from_ref(&first));
        assert_eq!(step1.tool_calls.len(), plan.checks.len());
        let mut history = vec![
            first,
            ChatMessage::Assistant {
                content: None,
                tool_calls: step1.tool_calls.clone(),
            },
        ];
        for (i, call) in step1.tool_calls.iter().enumerate() {
            history.push(ChatMessage::Tool {
                tool_call_id: call.id.clone(),
                name: "kanban_create".into(),
                content: json!({"task_id": format!("t_0000000{}", i + 2)}).to_string(),
            });
        }
        let step2 = model.answer(&history);
        let args: Value = serde_json::from_str(&step2.tool_calls[0].arguments).unwrap();
        assert_eq!(args["parents"].as_array().unwrap().len(), plan.checks.len());
        assert_eq!(args["parents"][0], "t_00000002");
    }

    #[test]
    fn child_reports_the_command_output() {
        let model = DemoModel::new(DemoPlan::bundled().unwrap());
        let first = user(
            "# Task t_00000002: Check: Kernel\n\n## What to do\nRun `uname -sr` in the terminal and complete this task with its output as the result.",
        );
        let step1 = model.answer(std::slice::from_ref(&first));
        assert_eq!(step1.tool_calls[0].name, "terminal");
        let history = vec![
            first,
            ChatMessage::Assistant {
                content: None,
                tool_calls: step1.tool_calls.clone(),
            },
            ChatMessage::Tool {
                tool_call_id: step1.tool_calls[0].id.clone(),
                name: "terminal".into(),
                content: json!({"output": "Linux 6.1.0\n", "exit_code": 0}).to_string(),
            },
        ];
        let step2 = model.answer(&history);
        let args: Value = serde_json::from_str(&step2.tool_calls[0].arguments).unwrap();
        assert_eq!(args["summary"], "Linux 6.1.0");
    }

    #[test]
    fn report_has_a_line_per_parent() {
        let context = "# Task t_00000009: Write the machine report\n\n## Results of the tasks this one waited for\n\n### t_00000001 (done): Survey this machine\nSummary: planned\n\n### t_00000002 (done): Check: Kernel\nSummary: Linux 6.1\nResult: Linux 6.1\n\n### t_00000003 (done): Check: Processors\nSummary: 2\n";
        assert_eq!(report_lines(context), "Kernel: Linux 6.1\nProcessors: 2");
    }
}
