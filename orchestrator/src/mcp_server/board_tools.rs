//! The `kanban` toolset of `troupe mcp serve --toolsets kanban`: a client creates, lists, shows,
//! comments on and follows the tasks of one board. They are ordinary tools of the runtime's
//! registry (toolset `kanban`), so their calls pass the same hooks and approvals as every other.
//! Unlike a worker's task-bound tools (`troupe_kanban::worker_tools`), they act for the person
//! at the client on any task of the board; running tasks is left to the dispatcher that `mcp
//! serve` starts when troupe.yaml has profiles, or to `troupe kanban worker` processes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use troupe_kanban::domain::{BoardSlug, NewTask, Task, TaskFilter, TaskId, TaskStatus};
use troupe_tools::{CallContext, ToolDef, ToolHints, ToolResult};

use crate::kanban_api::Kanban;

/// The toolset name a client asks for.
pub(crate) const TOOLSET: &str = "kanban";
/// How long `kanban_follow` waits when not told.
const FOLLOW_DEFAULT: Duration = Duration::from_secs(300);
/// The longest `kanban_follow` waits: under the runner's deadline for one call
/// ([`troupe_actors::tool_runner::DEFAULT_BATCH_DEADLINE`], 420 s), so the follow answers with
/// the task as it stands instead of being cut off.
const FOLLOW_MAX: Duration = Duration::from_secs(400);
/// How often `kanban_follow` looks at the task.
const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// Most tasks `kanban_list` returns.
const LIST_MAX: usize = 200;

/// The board store of `settings` and the board to serve (the current one, else `default`),
/// created when it does not exist yet, so a client can start on an empty store.
pub(crate) async fn open_board(
    settings: &crate::settings::kanban::KanbanSettings,
) -> Result<(Kanban, BoardSlug), String> {
    let kanban = Kanban::open(settings.clone())
        .await
        .map_err(|e| format!("{}: {e}", settings.store.describe()))?;
    let slug = kanban
        .current_board()
        .await
        .map_err(|e| format!("cannot read the current board: {e}"))?;
    match kanban.store().board(&slug).await {
        Ok(_) => {}
        Err(troupe_kanban::store::StoreError::BoardNotFound { .. }) => {
            kanban
                .create_board(&troupe_kanban::domain::NewBoard::new(slug.clone()))
                .await
                .map_err(|e| format!("cannot create the board {}: {e}", slug.as_str()))?;
        }
        Err(e) => return Err(format!("board {}: {e}", slug.as_str())),
    }
    Ok((kanban, slug))
}

/// The board the tools work on.
#[derive(Clone)]
struct Board {
    kanban: Kanban,
    slug: BoardSlug,
}

/// The tools over `slug` of `kanban`.
pub(crate) fn board_tools(kanban: Kanban, slug: BoardSlug) -> Vec<ToolDef> {
    let board = Arc::new(Board { kanban, slug });
    let read = ToolHints {
        read_only: true,
        idempotent: true,
        ..ToolHints::default()
    };
    let write = ToolHints::default();
    vec![
        tool(
            &board,
            "kanban_create",
            "Create a task on the board. A task assigned to a profile of troupe.yaml is run by \
             that profile's worker; follow it with kanban_follow.",
            json!({"type": "object", "properties": {
                "title": {"type": "string", "description": "What is to be done, in a line."},
                "body": {"type": "string", "description": "Details the worker needs."},
                "assignee": {"type": "string", "description": "The profile that runs it."},
                "parents": {"type": "array", "items": {"type": "string"},
                            "description": "Ids of tasks that must finish first."},
                "priority": {"type": "integer", "description": "Higher runs first."}
            }, "required": ["title"]}),
            write.clone(),
            create,
        ),
        tool(
            &board,
            "kanban_list",
            "List the board's tasks, newest first, optionally only those with a status \
             (triage, todo, scheduled, ready, running, blocked, review, done, archived) or an \
             assignee.",
            json!({"type": "object", "properties": {
                "status": {"type": "string"},
                "assignee": {"type": "string"}
            }}),
            read.clone(),
            list,
        ),
        tool(
            &board,
            "kanban_show",
            "Show one task: its status, result, links, comments and runs.",
            json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
            read.clone(),
            show,
        ),
        tool(
            &board,
            "kanban_comment",
            "Add a comment to a task (its worker reads comments).",
            json!({"type": "object", "properties": {
                "id": {"type": "string"}, "body": {"type": "string"}
            }, "required": ["id", "body"]}),
            write,
            comment,
        ),
        tool(
            &board,
            "kanban_follow",
            "Wait until a task is done, blocked or archived (or timeout_seconds pass, 300 by \
             default, at most 400; call again to wait longer) and return it with its result. Reports progress while it \
             waits; cancel the call to stop waiting (the task goes on).",
            json!({"type": "object", "properties": {
                "id": {"type": "string"},
                "timeout_seconds": {"type": "number"}
            }, "required": ["id"]}),
            read,
            follow,
        ),
    ]
}

type Handler = fn(
    Arc<Board>,
    Map<String, Value>,
    CallContext,
) -> futures::future::BoxFuture<'static, Result<Value, String>>;

fn tool(
    board: &Arc<Board>,
    name: &str,
    description: &str,
    parameters: Value,
    hints: ToolHints,
    handler: Handler,
) -> ToolDef {
    let board = Arc::clone(board);
    ToolDef::new(name, description, parameters)
        .with_toolset(TOOLSET)
        .with_hints(hints)
        .with_fn(move |arguments, ctx| {
            let run = handler(Arc::clone(&board), arguments, ctx);
            Box::pin(async move {
                match run.await {
                    Ok(value) => ToolResult::json(value),
                    Err(message) => ToolResult::error_json(json!({"error": message})),
                }
            })
        })
}

fn text(arguments: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(other) => Err(format!(
            "`{key}` must be a string, not {}; send e.g. \"{key}\": \"...\"",
            troupe_tools::text::json_kind(other)
        )),
    }
}

fn task_id(arguments: &Map<String, Value>) -> Result<TaskId, String> {
    let raw = text(arguments, "id")?
        .ok_or("`id` is missing: send the task's id, as kanban_create or kanban_list gave it")?;
    TaskId::parse(&raw)
        .map_err(|e| format!("`id` {raw:?} is not a task id ({e}); use one kanban_list shows"))
}

/// A task as a client reads it.
fn summary(task: &Task) -> Value {
    json!({
        "id": task.id.as_str(),
        "title": task.title,
        "status": task.status.as_str(),
        "assignee": task.assignee,
        "priority": task.priority,
        "result": task.result,
        "last_failure_error": task.last_failure_error,
    })
}

fn create(
    board: Arc<Board>,
    arguments: Map<String, Value>,
    _ctx: CallContext,
) -> futures::future::BoxFuture<'static, Result<Value, String>> {
    Box::pin(async move {
        let title = text(&arguments, "title")?
            .ok_or("`title` is missing: send a one-line title of what is to be done")?;
        let mut task = NewTask::new(title);
        task.body = text(&arguments, "body")?.unwrap_or_default();
        task.assignee = text(&arguments, "assignee")?;
        task.created_by = Some("mcp-client".to_string());
        if let Some(priority) = arguments.get("priority").filter(|v| !v.is_null()) {
            task.priority = priority
                .as_i64()
                .ok_or("`priority` must be a whole number, e.g. 1")?;
        }
        if let Some(parents) = arguments.get("parents").filter(|v| !v.is_null()) {
            let list = parents
                .as_array()
                .ok_or("`parents` must be a list of task ids, e.g. [\"t_…\"]")?;
            for parent in list {
                let raw = parent
                    .as_str()
                    .ok_or("each of `parents` must be a task id string")?;
                task.parents.push(
                    TaskId::parse(raw)
                        .map_err(|e| format!("parent {raw:?} is not a task id ({e})"))?,
                );
            }
        }
        let created = board
            .kanban
            .create_task(&board.slug, &task)
            .await
            .map_err(|e| format!("the board refused the task: {e}"))?;
        Ok(json!({"board": board.slug.as_str(), "task": summary(&created.task)}))
    })
}

fn list(
    board: Arc<Board>,
    arguments: Map<String, Value>,
    _ctx: CallContext,
) -> futures::future::BoxFuture<'static, Result<Value, String>> {
    Box::pin(async move {
        let mut filter = TaskFilter {
            limit: Some(LIST_MAX),
            assignee: text(&arguments, "assignee")?,
            ..TaskFilter::default()
        };
        if let Some(status) = text(&arguments, "status")? {
            let status: TaskStatus = status.parse().map_err(|_| {
                format!("`status` {status:?} is not one; use triage, todo, scheduled, ready, running, blocked, review, done or archived")
            })?;
            filter.include_archived = status == TaskStatus::Archived;
            filter.statuses = vec![status];
        }
        let tasks = board
            .kanban
            .list(&board.slug, &filter)
            .await
            .map_err(|e| format!("cannot list the board: {e}"))?;
        let tasks: Vec<Value> = tasks.iter().map(summary).collect();
        Ok(json!({"board": board.slug.as_str(), "tasks": tasks}))
    })
}

fn show(
    board: Arc<Board>,
    arguments: Map<String, Value>,
    _ctx: CallContext,
) -> futures::future::BoxFuture<'static, Result<Value, String>> {
    Box::pin(async move {
        let id = task_id(&arguments)?;
        let detail = board
            .kanban
            .detail(&board.slug, &id)
            .await
            .map_err(|e| format!("cannot show task {}: {e}", id.as_str()))?;
        let mut value = serde_json::to_value(&detail).map_err(|e| e.to_string())?;
        // The full event log can be long; the count is enough here.
        if let Some(map) = value.as_object_mut() {
            map.insert("events".into(), json!(detail.events.len()));
        }
        Ok(value)
    })
}

fn comment(
    board: Arc<Board>,
    arguments: Map<String, Value>,
    _ctx: CallContext,
) -> futures::future::BoxFuture<'static, Result<Value, String>> {
    Box::pin(async move {
        let id = task_id(&arguments)?;
        let body = text(&arguments, "body")?.ok_or("`body` is missing: send the comment's text")?;
        let comment = board
            .kanban
            .comment(&board.slug, &id, "mcp-client", &body)
            .await
            .map_err(|e| format!("cannot comment on task {}: {e}", id.as_str()))?;
        serde_json::to_value(&comment).map_err(|e| e.to_string())
    })
}

/// How long `kanban_follow` waits for `timeout_seconds` (absent: the default; at most
/// [`FOLLOW_MAX`]).
fn follow_limit(timeout_seconds: Option<&Value>) -> Result<Duration, String> {
    match timeout_seconds.filter(|v| !v.is_null()) {
        None => Ok(FOLLOW_DEFAULT),
        Some(v) => match v.as_f64() {
            // Clamped before the conversion, which panics on huge values.
            Some(s) if s > 0.0 && s.is_finite() => {
                Ok(Duration::from_secs_f64(s.min(FOLLOW_MAX.as_secs_f64())))
            }
            _ => Err(format!(
                "`timeout_seconds` must be a positive number of seconds, at most {}, e.g. 300",
                FOLLOW_MAX.as_secs()
            )),
        },
    }
}

fn follow(
    board: Arc<Board>,
    arguments: Map<String, Value>,
    ctx: CallContext,
) -> futures::future::BoxFuture<'static, Result<Value, String>> {
    Box::pin(async move {
        let id = task_id(&arguments)?;
        let limit = follow_limit(arguments.get("timeout_seconds"))?;
        let started = tokio::time::Instant::now();
        let mut seen = Vec::new();
        loop {
            let task = board
                .kanban
                .task(&board.slug, &id)
                .await
                .map_err(|e| format!("cannot read task {}: {e}", id.as_str()))?;
            if seen.last() != Some(&task.status) {
                seen.push(task.status);
            }
            let settled = matches!(
                task.status,
                TaskStatus::Done | TaskStatus::Blocked | TaskStatus::Archived
            );
            if settled || started.elapsed() >= limit {
                let statuses: Vec<&str> = seen.iter().map(|s| s.as_str()).collect();
                return Ok(json!({
                    "task": summary(&task),
                    "settled": settled,
                    "statuses_seen": statuses,
                    "waited_seconds": started.elapsed().as_secs_f64(),
                }));
            }
            tokio::select! {
                _ = ctx.cancel.cancelled() => {
                    return Err(format!("stopped following task {} (it goes on)", id.as_str()));
                }
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn bad_arguments_say_what_to_send() {
        let error = task_id(&args(json!({}))).unwrap_err();
        assert!(error.contains("`id` is missing"), "{error}");
        let error = task_id(&args(json!({"id": "not a task"}))).unwrap_err();
        assert!(error.contains("not a task id"), "{error}");
        let error = text(&args(json!({"title": 3})), "title").unwrap_err();
        assert!(error.contains("must be a string"), "{error}");
        assert_eq!(text(&args(json!({"title": "  "})), "title"), Ok(None));
        assert_eq!(
            text(&args(json!({"title": " fix it "})), "title"),
            Ok(Some("fix it".to_string()))
        );
    }

    #[tokio::test]
    async fn the_tools_create_list_show_comment_and_follow_on_a_real_store() {
        let dir = tempfile::tempdir().unwrap();
        let location = crate::settings::kanban::StoreLocation::Sqlite(dir.path().join("boards"));
        let home = crate::settings::TroupeHome::at(dir.path().join("home"));
        let settings = crate::settings::kanban::KanbanSettings {
            store: location,
            ..crate::settings::kanban::KanbanSettings::defaults(&home)
        };
        let (kanban, slug) = open_board(&settings).await.unwrap();
        let tools = board_tools(kanban.clone(), slug.clone());
        let call = |name: &str, arguments: Value| {
            let def = tools.iter().find(|t| t.name == name).unwrap().clone();
            let ctx = CallContext::detached("c1");
            async move {
                let handler = def.handler.clone().unwrap();
                handler.call(args(arguments), ctx).await
            }
        };
        let created = call(
            "kanban_create",
            json!({"title": "write docs", "priority": 2}),
        )
        .await;
        assert!(!created.is_error, "{created:?}");
        let id = created.structured.as_ref().unwrap()["task"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let listed = call("kanban_list", json!({})).await;
        assert!(listed.to_model_text().contains(&id), "{listed:?}");
        let bad = call("kanban_list", json!({"status": "sleeping"})).await;
        assert!(
            bad.is_error && bad.to_model_text().contains("triage"),
            "{bad:?}"
        );
        let commented = call("kanban_comment", json!({"id": id, "body": "mind the tone"})).await;
        assert!(!commented.is_error, "{commented:?}");
        let shown = call("kanban_show", json!({"id": id})).await;
        assert!(shown.to_model_text().contains("mind the tone"), "{shown:?}");
        // Nothing runs it here, so following gives up after its timeout, unsettled.
        let followed = call("kanban_follow", json!({"id": id, "timeout_seconds": 0.3})).await;
        let value = followed.structured.unwrap();
        assert_eq!(value["settled"], json!(false), "{value}");
        assert_eq!(value["task"]["status"], json!("ready"), "{value}");
    }

    #[test]
    fn a_follow_waits_within_the_runners_deadline_whatever_it_is_asked() {
        let deadline = troupe_actors::tool_runner::DEFAULT_BATCH_DEADLINE;
        assert!(follow_limit(None).unwrap() < deadline);
        for huge in [json!(1e30), json!(f64::MAX), json!(u64::MAX)] {
            let limit = follow_limit(Some(&huge)).unwrap();
            assert_eq!(limit, FOLLOW_MAX, "{huge}");
            assert!(limit < deadline);
        }
        assert_eq!(
            follow_limit(Some(&json!(2.5))).unwrap(),
            Duration::from_millis(2500)
        );
        for bad in [json!(0), json!(-3), json!("soon")] {
            assert!(follow_limit(Some(&bad)).is_err(), "{bad}");
        }
    }
}
