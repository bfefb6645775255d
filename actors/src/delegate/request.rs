//! Reading a `delegate_task` call: [`DelegateRequest::parse`] turns the model's arguments into
//! one action (spawn tasks, list, steer, stop), checking the task count against the operator's
//! limit and each task's goal and output schema. Every refusal says what to send instead.
//! Used by [`super::run`].

use serde_json::{Map, Value};
use troupe_tools::text::json_kind;

use super::config::DelegationConfig;

/// One task to hand to a subagent.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// What the subagent must achieve.
    pub goal: String,
    /// Facts it needs, when given.
    pub context: Option<String>,
    /// The JSON Schema its answer must match, when given.
    pub output_schema: Option<Value>,
}

/// What a `delegate_task` call asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum DelegateRequest {
    /// Start these tasks, one subagent each.
    Spawn(Vec<TaskSpec>),
    /// Show the running subagents of the caller's tree.
    List,
    /// Send a note to one subagent.
    Steer {
        /// The subagent.
        subagent_id: String,
        /// The note.
        message: String,
    },
    /// Stop one subagent and everything it started.
    Stop {
        /// The subagent.
        subagent_id: String,
    },
}

impl DelegateRequest {
    /// Reads the arguments. `tasks` may come as a list or as JSON text; a top-level `goal`
    /// (with `context`, `output_schema`) is taken as a one-task list, as older callers send.
    pub fn parse(
        arguments: &Map<String, Value>,
        config: &DelegationConfig,
    ) -> Result<DelegateRequest, String> {
        let action = match arguments.get("action") {
            None | Some(Value::Null) => "spawn".to_string(),
            Some(Value::String(s)) => s.trim().to_ascii_lowercase(),
            Some(other) => {
                return Err(format!(
                    "The action must be a word, not {other}. Use spawn (the default), list, steer or stop."
                ));
            }
        };
        match action.as_str() {
            "" | "spawn" => parse_tasks(arguments, config).map(DelegateRequest::Spawn),
            "list" => Ok(DelegateRequest::List),
            "steer" => Ok(DelegateRequest::Steer {
                subagent_id: required_text(arguments, "subagent_id", "steer")?,
                message: required_text(arguments, "message", "steer")?,
            }),
            "stop" => Ok(DelegateRequest::Stop {
                subagent_id: required_text(arguments, "subagent_id", "stop")?,
            }),
            other => Err(format!(
                "There is no action '{other}'. Use spawn (the default), list, steer or stop."
            )),
        }
    }
}

fn required_text(
    arguments: &Map<String, Value>,
    key: &str,
    action: &str,
) -> Result<String, String> {
    match arguments.get(key).and_then(Value::as_str).map(str::trim) {
        Some(text) if !text.is_empty() => Ok(text.to_string()),
        _ => Err(format!(
            "action={action} needs `{key}` as non-empty text{}.",
            if key == "subagent_id" {
                "; action=list shows the ids of running subagents"
            } else {
                ""
            }
        )),
    }
}

fn parse_tasks(
    arguments: &Map<String, Value>,
    config: &DelegationConfig,
) -> Result<Vec<TaskSpec>, String> {
    let mut items: Vec<Value> = match arguments.get("tasks") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items,
            Ok(Value::Object(one)) => vec![Value::Object(one)],
            _ => {
                return Err(
                    "`tasks` is text that is not a JSON list. Send a list such as [{\"goal\": \"...\", \"context\": \"...\"}]."
                        .into(),
                );
            }
        },
        Some(other) => {
            return Err(format!(
                "`tasks` must be a list of task objects, not {other}. Send [{{\"goal\": \"...\"}}], one entry per subagent."
            ));
        }
    };
    if items.is_empty() && arguments.contains_key("goal") {
        let mut single = Map::new();
        for key in ["goal", "context", "output_schema"] {
            if let Some(value) = arguments.get(key) {
                single.insert(key.to_string(), value.clone());
            }
        }
        items.push(Value::Object(single));
    }
    if items.is_empty() {
        return Err(
            "No tasks were given. Send tasks=[{\"goal\": \"...\", \"context\": \"...\"}], one entry per subagent (a single task is a one-entry list)."
                .into(),
        );
    }
    let limit = config.max_concurrent_children;
    if items.len() > limit {
        return Err(format!(
            "Too many tasks: {} were given but at most {limit} may run per call (delegation.max_concurrent_children is {limit}). Send fewer tasks, split them over several delegate_task calls, or ask the operator to raise delegation.max_concurrent_children.",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| parse_task(index, item))
        .collect()
}

fn parse_task(index: usize, item: &Value) -> Result<TaskSpec, String> {
    let Value::Object(task) = item else {
        return Err(format!(
            "Task {index} must be an object like {{\"goal\": \"...\"}}, not {}.",
            json_kind(item)
        ));
    };
    let goal = match task.get("goal").and_then(Value::as_str).map(str::trim) {
        Some(goal) if !goal.is_empty() => goal.to_string(),
        _ => {
            return Err(format!(
                "Task {index} has no `goal`. Give every task a goal that says what the subagent must achieve."
            ));
        }
    };
    let context = match task.get("context") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()).filter(|t| !t.trim().is_empty()),
        Some(other) => Some(other.to_string()),
    };
    let output_schema = match task.get("output_schema") {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => {
            if let Err(error) = jsonschema::options().offline().build(schema) {
                return Err(format!(
                    "Task {index} has an output_schema that is not a usable JSON Schema ({error}). Fix it or leave it out."
                ));
            }
            Some(schema.clone())
        }
        Some(other) => {
            return Err(format!(
                "Task {index} has an output_schema that is {}, not a JSON Schema object such as {{\"type\": \"object\"}}.",
                json_kind(other)
            ));
        }
    };
    Ok(TaskSpec {
        goal,
        context,
        output_schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<DelegateRequest, String> {
        DelegateRequest::parse(value.as_object().unwrap(), &DelegationConfig::default())
    }

    #[test]
    fn tasks_in_every_accepted_shape() {
        let DelegateRequest::Spawn(tasks) =
            parse(json!({"tasks": [{"goal": "a", "context": "c"}, {"goal": "b"}]})).unwrap()
        else {
            panic!("expected spawn")
        };
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks[0].context.as_deref(), Some("c"));
        let as_text = parse(json!({"tasks": "[{\"goal\": \"x\"}]"})).unwrap();
        assert!(matches!(as_text, DelegateRequest::Spawn(t) if t[0].goal == "x"));
        let legacy = parse(json!({"goal": "solo", "tasks": []})).unwrap();
        assert!(matches!(legacy, DelegateRequest::Spawn(t) if t[0].goal == "solo"));
    }

    #[test]
    fn too_many_tasks_names_the_limit() {
        let tasks: Vec<Value> = (0..11).map(|i| json!({"goal": format!("t{i}")})).collect();
        let error = parse(json!({"tasks": tasks})).unwrap_err();
        assert!(error.contains("11 were given"), "{error}");
        assert!(error.contains("max_concurrent_children is 10"), "{error}");
    }

    #[test]
    fn bad_tasks_and_actions_say_what_to_send() {
        assert!(parse(json!({})).unwrap_err().contains("No tasks"));
        assert!(
            parse(json!({"tasks": [{"context": "x"}]}))
                .unwrap_err()
                .contains("Task 0 has no `goal`")
        );
        assert!(
            parse(json!({"tasks": [3]}))
                .unwrap_err()
                .contains("must be an object")
        );
        assert!(
            parse(json!({"tasks": [{"goal": "g", "output_schema": {"type": 5}}]}))
                .unwrap_err()
                .contains("output_schema")
        );
        assert!(
            parse(json!({"action": "dance"}))
                .unwrap_err()
                .contains("spawn (the default), list, steer or stop")
        );
        assert!(
            parse(json!({"action": "steer", "subagent_id": "sa"}))
                .unwrap_err()
                .contains("`message`")
        );
        assert_eq!(
            parse(json!({"action": "stop", "subagent_id": "sa-0-1"})).unwrap(),
            DelegateRequest::Stop {
                subagent_id: "sa-0-1".into()
            }
        );
    }
}
