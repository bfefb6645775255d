//! A session's plan: the `todo` tool's list of items `{id, content, status}`. One list per
//! session, owned by the session (`troupe_actors` binds the tool to it); this module holds the
//! list, reads the tool's arguments, replaces or merges, and writes what the model and the
//! displays read. The list's latest state is also the `todos` of the tool's last successful
//! result, which is how a reopened session finds it again ([`TodoList::from_result`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::tool::{CallContext, ToolDef, ToolHandler, ToolResult};

/// The tool's name.
pub const TODO_TOOL: &str = "todo";
/// Items a list holds at most.
pub const MAX_ITEMS: usize = 100;
/// Characters an item's content holds at most.
pub const MAX_CONTENT_CHARS: usize = 500;
/// Characters an item's id holds at most.
pub const MAX_ID_CHARS: usize = 64;

/// Where an item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
    /// Given up or no longer needed.
    Cancelled,
}

impl TodoStatus {
    fn parse(text: &str) -> Option<TodoStatus> {
        match text
            .trim()
            .to_ascii_lowercase()
            .replace(['-', ' '], "_")
            .as_str()
        {
            "pending" => Some(TodoStatus::Pending),
            "in_progress" => Some(TodoStatus::InProgress),
            "completed" => Some(TodoStatus::Completed),
            "cancelled" | "canceled" => Some(TodoStatus::Cancelled),
            _ => None,
        }
    }

    /// The one-character mark displays put before an item.
    pub fn mark(self) -> &'static str {
        match self {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[>]",
            TodoStatus::Completed => "[x]",
            TodoStatus::Cancelled => "[-]",
        }
    }
}

/// One item of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// The model's id for it, unique in the list.
    pub id: String,
    /// What is to be done.
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
}

/// How far a list has come, for a parent or a display that shows one line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoSummary {
    /// Items in all.
    pub total: usize,
    /// Not started.
    pub pending: usize,
    /// Being worked on.
    pub in_progress: usize,
    /// Done.
    pub completed: usize,
    /// Given up.
    pub cancelled: usize,
}

/// A session's list. See the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoList {
    /// The items, in the model's order.
    pub items: Vec<TodoItem>,
}

impl TodoList {
    /// Whether the list has no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The counts by status.
    pub fn summary(&self) -> TodoSummary {
        let mut s = TodoSummary {
            total: self.items.len(),
            ..TodoSummary::default()
        };
        for item in &self.items {
            match item.status {
                TodoStatus::Pending => s.pending += 1,
                TodoStatus::InProgress => s.in_progress += 1,
                TodoStatus::Completed => s.completed += 1,
                TodoStatus::Cancelled => s.cancelled += 1,
            }
        }
        s
    }

    /// Runs one `todo` call: without `todos` it only reads; with them it replaces the list, or
    /// with `merge: true` updates the items of the same id and adds the others. Returns whether
    /// the list changed, or what was wrong with the arguments.
    pub fn apply(&mut self, arguments: &Map<String, Value>) -> Result<bool, String> {
        let merge = match arguments.get("merge") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("'merge' must be true or false.".into()),
        };
        let given = match arguments.get("todos") {
            None | Some(Value::Null) => return Ok(false),
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err("'todos' must be a list of items {id, content, status}; leave it out to read the list.".into());
            }
        };
        let mut next = if merge {
            self.items.clone()
        } else {
            Vec::new()
        };
        let mut seen = std::collections::HashSet::new();
        for (i, raw) in given.iter().enumerate() {
            let Value::Object(raw) = raw else {
                return Err(format!(
                    "todos[{i}] must be an object {{\"id\", \"content\", \"status\"}}."
                ));
            };
            let id = match raw.get("id") {
                Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => {
                    return Err(format!(
                        "todos[{i}] needs an 'id' (a short string such as \"1\" or \"tests\")."
                    ));
                }
            };
            if id.chars().count() > MAX_ID_CHARS {
                return Err(format!(
                    "todos[{i}]'s id is longer than {MAX_ID_CHARS} characters; use a short one."
                ));
            }
            if !seen.insert(id.clone()) {
                return Err(format!(
                    "the id {id:?} appears twice in 'todos'; give every item its own id."
                ));
            }
            let existing = next.iter().position(|item| item.id == id);
            let content = match raw.get("content") {
                Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
                None | Some(Value::Null) => None,
                _ => {
                    return Err(format!(
                        "todos[{i}]'s 'content' must be a non-empty string."
                    ));
                }
            };
            if let Some(c) = &content
                && c.chars().count() > MAX_CONTENT_CHARS
            {
                return Err(format!(
                    "todos[{i}]'s content is longer than {MAX_CONTENT_CHARS} characters; say it in a line."
                ));
            }
            let status = match raw.get("status") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(TodoStatus::parse(s).ok_or_else(|| {
                    format!("todos[{i}]'s status is {s:?}; send pending, in_progress, completed or cancelled.")
                })?),
                Some(_) => return Err(format!("todos[{i}]'s status must be a string: pending, in_progress, completed or cancelled.")),
            };
            match existing {
                // A merge may send only what changed: the id and a new status, say.
                Some(at) if merge => {
                    if let Some(content) = content {
                        next[at].content = content;
                    }
                    if let Some(status) = status {
                        next[at].status = status;
                    }
                }
                _ => {
                    let Some(content) = content else {
                        return Err(format!(
                            "todos[{i}] ({id:?}) is a new item and needs 'content'."
                        ));
                    };
                    next.push(TodoItem {
                        id,
                        content,
                        status: status.unwrap_or(TodoStatus::Pending),
                    });
                }
            }
        }
        if next.len() > MAX_ITEMS {
            return Err(format!(
                "a list holds at most {MAX_ITEMS} items; this one would hold {}. Group small steps into one item.",
                next.len()
            ));
        }
        let changed = next != self.items;
        self.items = next;
        Ok(changed)
    }

    /// The tool's result: the whole list and its counts.
    pub fn to_result(&self) -> Value {
        json!({"todos": self.items, "summary": self.summary()})
    }

    /// The list written from a `todo` result's text, when it is one.
    pub fn from_result(text: &str) -> Option<TodoList> {
        let value: Value = serde_json::from_str(text).ok()?;
        let items = value.get("todos")?;
        serde_json::from_value(items.clone())
            .ok()
            .map(|items| TodoList { items })
    }

    /// The list as lines for a person or a model: `[x] 1. content`.
    pub fn render(&self) -> String {
        self.items
            .iter()
            .map(|item| format!("{} {}. {}", item.status.mark(), item.id, item.content))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The `todo` tool's description and parameters.
pub fn todo_schema() -> (&'static str, Value) {
    (
        "Keep a plan for this session's work as a list of items {id, content, status} (pending, \
         in_progress, completed, cancelled). Call it without todos to read the list; with todos to \
         replace the list, or with merge=true to update items by id (send only what changed) and \
         add new ones. Use it for work of three steps or more: write the plan first, keep one item \
         in_progress, and mark items completed as soon as they are. The list survives when the \
         conversation is shortened; the person sees it.",
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "The items (replace the list, or update it with merge=true).",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "A short id unique in the list."},
                            "content": {"type": "string", "description": "What is to be done, in a line."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]}
                        },
                        "required": ["id"]
                    }
                },
                "merge": {"type": "boolean", "description": "Update items by id and add new ones instead of replacing the list (default false)."}
            }
        }),
    )
}

/// The `todo` tool to register (toolset `core`). A session answers it with its own list; the
/// handler here only answers a call made outside any session.
pub fn todo_tool() -> ToolDef {
    let (description, parameters) = todo_schema();
    ToolDef::new(TODO_TOOL, description, parameters)
        .with_toolset("core")
        .with_handler(Arc::new(OutsideSession))
}

struct OutsideSession;

impl ToolHandler for OutsideSession {
    fn call(
        &self,
        _arguments: Map<String, Value>,
        _ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        Box::pin(async {
            ToolResult::error(
                "todo keeps a session's plan, and this call belongs to no session; nothing was kept.",
            )
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
    fn replace_merge_and_read() {
        let mut list = TodoList::default();
        assert_eq!(list.apply(&args(json!({}))), Ok(false));
        let plan = json!({"todos": [
            {"id": "1", "content": "Read the code", "status": "in_progress"},
            {"id": "2", "content": "Write the test"}
        ]});
        assert_eq!(list.apply(&args(plan)), Ok(true));
        assert_eq!(list.items[1].status, TodoStatus::Pending);
        let update = json!({"merge": true, "todos": [
            {"id": "1", "status": "completed"},
            {"id": 3, "content": "Run it", "status": "In Progress"}
        ]});
        assert_eq!(list.apply(&args(update)), Ok(true));
        assert_eq!(list.items[0].content, "Read the code");
        assert_eq!(list.items[0].status, TodoStatus::Completed);
        assert_eq!(list.items[2].id, "3");
        assert_eq!(list.summary().completed, 1);
        assert_eq!(list.summary().in_progress, 1);
        assert_eq!(
            list.render(),
            "[x] 1. Read the code\n[ ] 2. Write the test\n[>] 3. Run it"
        );
        let back = TodoList::from_result(&list.to_result().to_string()).unwrap();
        assert_eq!(back, list);
        // Replacing drops what is not sent.
        list.apply(&args(
            json!({"todos": [{"id": "a", "content": "Only this"}]}),
        ))
        .unwrap();
        assert_eq!(list.items.len(), 1);
    }

    #[test]
    fn bad_items_say_what_to_send_and_change_nothing() {
        let mut list = TodoList::default();
        for (bad, says) in [
            (json!({"todos": "x"}), "list of items"),
            (json!({"todos": [1]}), "must be an object"),
            (json!({"todos": [{"content": "x"}]}), "needs an 'id'"),
            (json!({"todos": [{"id": "1"}]}), "needs 'content'"),
            (
                json!({"todos": [{"id": "1", "content": "x", "status": "done"}]}),
                "pending, in_progress",
            ),
            (
                json!({"todos": [{"id": "1", "content": "x"}, {"id": "1", "content": "y"}]}),
                "twice",
            ),
            (json!({"merge": "yes", "todos": []}), "'merge'"),
        ] {
            let err = list.apply(&args(bad)).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
        assert!(list.is_empty());
        let many: Vec<Value> = (0..=MAX_ITEMS)
            .map(|i| json!({"id": i.to_string(), "content": "x"}))
            .collect();
        assert!(
            list.apply(&args(json!({"todos": many})))
                .unwrap_err()
                .contains("at most")
        );
    }
}
