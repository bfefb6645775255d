//! What a subagent is told first, and what comes back from it: the opening message, the check
//! of its output against `output_schema`, and the report its parent reads.

use super::*;

/// The child's first message: the goal, the context, and the answer format.
pub(super) fn opening(task: &TaskSpec) -> String {
    let mut text = format!("Your task:\n{}", task.goal);
    if let Some(context) = &task.context {
        text.push_str("\n\nWhat you need to know:\n");
        text.push_str(context);
    }
    if let Some(schema) = &task.output_schema {
        text.push_str(&format!(
            "\n\nWhen you are done, answer with only a JSON value matching this JSON Schema (no prose, no code fence):\n{schema}"
        ));
    }
    text
}

/// Parses an answer as JSON (a code fence around it is forgiven) and checks it.
pub(super) fn check_output(schema: &Value, text: &str) -> Result<Value, Vec<String>> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let value: Value = serde_json::from_str(unfenced)
        .map_err(|error| vec![format!("the answer is not JSON ({error})")])?;
    let validator = jsonschema::options()
        .offline()
        .build(schema)
        .map_err(|error| vec![format!("the schema cannot be used ({error})")])?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// The last thing the child said, for a result that has no answer of its own.
pub(super) fn last_words(conversation: &[ChatMessage]) -> Option<String> {
    conversation.iter().rev().find_map(|message| match message {
        ChatMessage::Assistant {
            content: Some(text),
            ..
        } if !text.trim().is_empty() => Some(text.clone()),
        _ => None,
    })
}

pub(super) fn short_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// One task's result, filled in as the child runs.
pub(super) struct Report {
    pub(super) index: usize,
    pub(super) subagent_id: String,
    pub(super) child_session_id: Option<String>,
    pub(super) status: &'static str,
    pub(super) exit_reason: &'static str,
    pub(super) summary: String,
    pub(super) error: Option<String>,
    pub(super) extra: Map<String, Value>,
}

impl Report {
    pub(super) fn new(index: usize, subagent_id: &str) -> Self {
        Report {
            index,
            subagent_id: subagent_id.to_string(),
            child_session_id: None,
            status: "error",
            exit_reason: "error",
            summary: String::new(),
            error: None,
            extra: Map::new(),
        }
    }

    pub(super) fn status(&mut self, status: &'static str, exit_reason: &'static str) {
        self.status = status;
        self.exit_reason = exit_reason;
    }

    pub(super) fn schema_valid(&mut self, value: Value) {
        self.extra.insert("schema_valid".into(), Value::Bool(true));
        self.extra.insert("output".into(), value);
    }

    pub(super) fn schema_invalid(&mut self, errors: Vec<String>) {
        self.extra.insert("schema_valid".into(), Value::Bool(false));
        self.extra.insert("schema_errors".into(), json!(errors));
        self.extra.insert(
            "schema_note".into(),
            Value::String("The answer still did not match output_schema after one correction; the raw text is in summary.".into()),
        );
    }

    pub(super) fn read(&mut self, driven: &Driven, timeout: Option<Duration>) {
        match driven {
            Driven::Finished(outcome) => {
                self.summary = outcome.text.clone();
                match outcome.status {
                    TurnStatus::Completed => self.status("completed", "completed"),
                    TurnStatus::MaxIterations => self.status("completed", "max_iterations"),
                    TurnStatus::Interrupted => {
                        self.status("interrupted", "interrupted");
                        self.summary = String::new();
                    }
                    TurnStatus::Failed => {
                        self.status("failed", "error");
                        self.error = outcome.error.clone().or_else(|| Some(outcome.text.clone()));
                        self.summary = String::new();
                    }
                    // The summary is what the child had when its budget (or an ancestor's)
                    // ran out.
                    TurnStatus::BudgetExceeded => {
                        self.status("budget_exceeded", "budget_exceeded");
                        self.error = outcome.error.clone();
                    }
                }
            }
            Driven::Interrupted(partial) => {
                self.note_partial(partial.as_ref());
                self.status("interrupted", "interrupted");
                self.error = Some("The parent was stopped before this subagent finished.".into());
            }
            Driven::TimedOut(partial, idle) => {
                self.note_partial(partial.as_ref());
                self.status("timeout", "timeout");
                let limit = timeout.unwrap_or_default().as_secs_f64();
                self.extra
                    .insert("timeout_seconds".into(), json!(round2(limit)));
                self.extra.insert(
                    "timed_out_after_seconds".into(),
                    json!(round2(idle.as_secs_f64())),
                );
                self.error = Some(format!(
                    "The subagent showed no progress for {:.1} s (the limit is delegation.child_timeout_seconds) and was stopped.",
                    idle.as_secs_f64()
                ));
            }
            Driven::Lost(error) => {
                self.status("error", "error");
                self.error = Some(format!("The subagent could not be reached: {error}"));
            }
        }
    }

    /// Records which tools a stopped child had called in its last turn.
    pub(super) fn note_partial(&mut self, partial: Option<&TurnOutcome>) {
        if let Some(outcome) = partial {
            let tools: Vec<Value> = outcome
                .calls
                .iter()
                .map(|c| json!({"tool": c.underlying_tool, "status": c.status}))
                .collect();
            self.extra
                .insert("calls_before_stop".into(), Value::Array(tools));
        }
    }

    pub(super) fn finish(
        mut self,
        ctx: &DelegateContext,
        started: Instant,
        activity: Option<&Activity>,
    ) -> Value {
        let duration = round2(started.elapsed().as_secs_f64());
        let (api_calls, tool_calls, input, output) = activity
            .map(|a| {
                (
                    a.api_calls(),
                    a.tool_calls(),
                    a.input_tokens.load(Ordering::Relaxed),
                    a.output_tokens.load(Ordering::Relaxed),
                )
            })
            .unwrap_or_default();
        if self.status == "timeout" {
            let phase = if api_calls == 0 {
                "before_first_llm_call"
            } else {
                "after_llm_calls"
            };
            self.extra.insert("timeout_phase".into(), json!(phase));
        }
        let preview: String = self.summary.chars().take(PREVIEW_CHARS).collect();
        ctx.events.send(
            &ctx.parent_id,
            EventKind::SubagentCompleted {
                subagent_id: self.subagent_id.clone(),
                task_index: self.index,
                status: self.status.to_string(),
                duration_seconds: duration,
                api_calls,
                input_tokens: input,
                output_tokens: output,
                preview,
            },
        );
        let mut body = json!({
            "task_index": self.index,
            "subagent_id": self.subagent_id,
            "status": self.status,
            "summary": self.summary,
            "exit_reason": self.exit_reason,
            "truncated": self.exit_reason == "max_iterations",
            "api_calls": api_calls,
            "tool_calls": tool_calls,
            "duration_seconds": duration,
            "input_tokens": input,
            "output_tokens": output,
        });
        if let Some(error) = self.error {
            body["error"] = Value::String(error);
        }
        if let Some(id) = self.child_session_id {
            body["child_session_id"] = Value::String(id);
        }
        if let Value::Object(map) = &mut body {
            map.extend(self.extra);
        }
        body
    }
}
