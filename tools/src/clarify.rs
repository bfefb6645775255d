//! The `clarify` tool's question: what the model asks a person when a request is ambiguous,
//! with up to four choices and whether an answer of the person's own is welcome. The session
//! sends it to the supervisor, which routes it like an approval (`troupe_actors`); this module
//! reads and checks the arguments and words the answers the model reads.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::tool::{CallContext, ToolDef, ToolHandler, ToolHints, ToolResult};

/// The tool's name.
pub const CLARIFY_TOOL: &str = "clarify";
/// Choices a question offers at most.
pub const MAX_CHOICES: usize = 4;
/// Characters a question holds at most.
pub const MAX_QUESTION_CHARS: usize = 2_000;
/// Characters a choice holds at most.
pub const MAX_CHOICE_CHARS: usize = 200;

/// What the model reads when nobody can be asked (a headless run, a program with no answerer).
pub const NO_ONE_TO_ASK: &str = "No one to ask: nobody is watching this session, so the question was not shown. Decide for yourself, go on, and say in your answer what you assumed.";

/// A checked question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question.
    pub question: String,
    /// The choices offered, in order (none: a free answer).
    pub choices: Vec<String>,
    /// Whether the person may answer with something that is not a choice.
    pub allow_other: bool,
}

impl Question {
    /// Reads the tool's arguments, saying what to send instead when they are unusable.
    pub fn parse(arguments: &Map<String, Value>) -> Result<Question, String> {
        let question = match arguments.get("question") {
            Some(Value::String(q)) if !q.trim().is_empty() => q.trim().to_string(),
            _ => {
                return Err(
                    "'question' is missing: send the question for the person, in a sentence."
                        .into(),
                );
            }
        };
        if question.chars().count() > MAX_QUESTION_CHARS {
            return Err(format!(
                "the question is longer than {MAX_QUESTION_CHARS} characters; ask it in a few sentences."
            ));
        }
        let choices = match arguments.get("choices") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut choices = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(c) if !c.trim().is_empty() => {
                            if c.chars().count() > MAX_CHOICE_CHARS {
                                return Err(format!(
                                    "choices[{i}] is longer than {MAX_CHOICE_CHARS} characters; keep each choice short."
                                ));
                            }
                            choices.push(c.trim().to_string());
                        }
                        _ => return Err(format!("choices[{i}] must be a non-empty string.")),
                    }
                }
                choices
            }
            Some(_) => return Err("'choices' must be a list of strings (at most 4).".into()),
        };
        if choices.len() > MAX_CHOICES {
            return Err(format!(
                "{} choices were sent; offer at most {MAX_CHOICES}, or none for a free answer.",
                choices.len()
            ));
        }
        let allow_other = match arguments.get("allow_other") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("'allow_other' must be true or false.".into()),
        };
        if choices.is_empty() && !allow_other {
            return Err("with no choices the person must be allowed to answer freely: send choices, or allow_other=true.".into());
        }
        Ok(Question {
            question,
            choices,
            allow_other,
        })
    }

    /// The question as the arguments a pending request shows.
    pub fn to_arguments(&self) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("question".into(), json!(self.question));
        map.insert("choices".into(), json!(self.choices));
        map.insert("allow_other".into(), json!(self.allow_other));
        map
    }

    /// Reads a person's typed answer: a choice's number picks it, a choice's text as well;
    /// other text is the answer when free answers are allowed. `None`: not an answer here.
    pub fn read_answer(&self, typed: &str) -> Option<String> {
        let typed = typed.trim();
        if typed.is_empty() {
            return None;
        }
        if let Ok(n) = typed.parse::<usize>()
            && (1..=self.choices.len()).contains(&n)
        {
            return Some(self.choices[n - 1].clone());
        }
        if let Some(choice) = self.choices.iter().find(|c| c.eq_ignore_ascii_case(typed)) {
            return Some(choice.clone());
        }
        (self.allow_other || self.choices.is_empty()).then(|| typed.to_string())
    }

    /// The result the model reads for a person's answer.
    pub fn answered(&self, answer: &str) -> ToolResult {
        let mut out = json!({"question": self.question, "answer": answer});
        if let Some(i) = self.choices.iter().position(|c| c == answer) {
            out["choice"] = json!(i + 1);
        }
        ToolResult::json(out)
    }
}

/// The `clarify` tool's description and parameters.
pub fn clarify_schema() -> (&'static str, Value) {
    (
        "Ask the person a question when the request is ambiguous and a wrong guess would be costly. \
         Offer up to 4 choices, or none for a free answer; allow_other=true (the default) lets the \
         person answer in their own words. The call waits for the answer; other calls of the same \
         batch go on. When nobody can answer (a headless run) it returns at once: then decide, \
         and say what you assumed.",
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, in a sentence or two."},
                "choices": {"type": "array", "items": {"type": "string"}, "maxItems": 4, "description": "Up to 4 answers to pick from."},
                "allow_other": {"type": "boolean", "description": "Whether the person may answer with something else (default true)."}
            },
            "required": ["question"]
        }),
    )
}

/// The `clarify` tool to register (toolset `core`). A session routes it to its supervisor; the
/// handler here answers a call made outside any session, where nobody can be asked.
pub fn clarify_tool() -> ToolDef {
    let (description, parameters) = clarify_schema();
    ToolDef::new(CLARIFY_TOOL, description, parameters)
        .with_toolset("core")
        // Waiting on a person must not hold the batch's other calls.
        .with_hints(ToolHints {
            read_only: true,
            parallel_safe: true,
            ..ToolHints::default()
        })
        .with_handler(Arc::new(NobodyToAsk))
}

struct NobodyToAsk;

impl ToolHandler for NobodyToAsk {
    fn call(
        &self,
        arguments: Map<String, Value>,
        _ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        Box::pin(async move {
            match Question::parse(&arguments) {
                Ok(_) => ToolResult::text(NO_ONE_TO_ASK),
                Err(error) => ToolResult::error(error),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn questions_are_checked_and_answers_read() {
        let q = Question::parse(&args(json!({
            "question": "Which database?", "choices": ["SQLite", "PostgreSQL"], "allow_other": false
        })))
        .unwrap();
        assert_eq!(q.read_answer("2").as_deref(), Some("PostgreSQL"));
        assert_eq!(q.read_answer("sqlite").as_deref(), Some("SQLite"));
        assert_eq!(q.read_answer("MySQL"), None);
        assert_eq!(q.read_answer("7"), None);
        let free = Question::parse(&args(json!({"question": "Name?"}))).unwrap();
        assert_eq!(free.read_answer("Ada").as_deref(), Some("Ada"));
        for (bad, says) in [
            (json!({}), "'question'"),
            (
                json!({"question": "q", "choices": ["a", "b", "c", "d", "e"]}),
                "at most 4",
            ),
            (json!({"question": "q", "choices": [1]}), "non-empty string"),
            (
                json!({"question": "q", "allow_other": false}),
                "allow_other=true",
            ),
        ] {
            let err = Question::parse(&args(bad)).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }
}
