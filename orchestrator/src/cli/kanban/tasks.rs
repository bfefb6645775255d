//! `troupe kanban`'s task and board commands: init, boards, create, list, show, complete and
//! watch. The one-line commands (assign, link, comment, block, ...) stay in the dispatch of
//! `mod.rs`.

use serde_json::json;
use troupe_kanban::domain::{
    BoardSlug, EventId, EventKind, InitialStatus, NewBoard, NewTask, TaskFilter, TaskSort,
    TaskStatus,
};

use super::render;
use super::{
    BoardsCommand, CompleteArgs, CreateArgs, Ctx, Failure, ListArgs, Outcome, WatchArgs,
    shutdown_signal, task_id, task_ids, to_json,
};
use crate::kanban_api::Kanban;
use crate::settings::parse_duration;

pub(super) async fn init(ctx: &Ctx) -> Outcome {
    let boards = ctx.kanban.boards(false).await?;
    println!(
        "kanban store ready: {}",
        ctx.kanban.settings().store.describe()
    );
    println!(
        "boards: {} (current: {})",
        boards
            .iter()
            .map(|b| b.slug.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ctx.board
    );
    println!("next: troupe kanban create \"<title>\" --assignee <profile>");
    Ok(())
}

pub(super) async fn boards(ctx: &Ctx, cmd: BoardsCommand) -> Outcome {
    let k = &ctx.kanban;
    match cmd {
        BoardsCommand::List { archived, json } => {
            let boards = k.boards(archived).await?;
            if json {
                println!("{}", to_json(&boards));
            } else {
                print!("{}", render::board_table(&boards, ctx.board.as_str()));
            }
        }
        BoardsCommand::Create {
            slug,
            name,
            description,
            switch,
        } => {
            let slug = BoardSlug::parse(&slug).map_err(|e| Failure::usage(e.to_string()))?;
            let mut new = NewBoard::new(slug.clone()).with_description(description);
            if let Some(name) = name {
                new = new.with_name(name);
            }
            let board = k.create_board(&new).await?;
            println!("board {} created", board.slug);
            if switch {
                switch_to(k, &slug).await?;
            }
        }
        BoardsCommand::Switch { slug } => {
            let slug = BoardSlug::parse(&slug).map_err(|e| Failure::usage(e.to_string()))?;
            switch_to(k, &slug).await?;
        }
        BoardsCommand::Rm { slug, delete } => {
            let slug = BoardSlug::parse(&slug).map_err(|e| Failure::usage(e.to_string()))?;
            k.remove_board(&slug, delete).await?;
            println!(
                "board {slug} {}",
                if delete { "deleted" } else { "archived" }
            );
        }
    }
    Ok(())
}

async fn switch_to(k: &Kanban, slug: &BoardSlug) -> Outcome {
    match k.switch_board(slug).await {
        Ok(Some(path)) => {
            println!("current board: {slug} (remembered in {})", path.display());
            Ok(())
        }
        Ok(None) => {
            println!("current board: {slug}");
            Ok(())
        }
        Err(crate::kanban_api::SwitchError::Store(e)) => Err(e.into()),
        Err(e) => Err(Failure::failed(e.to_string())),
    }
}

pub(super) async fn create(ctx: &Ctx, a: CreateArgs) -> Outcome {
    if a.title.trim().is_empty() {
        return Err(Failure::usage(
            "the title is empty; give the task a short title",
        ));
    }
    let mut new = NewTask::new(a.title.trim())
        .with_body(a.body)
        .with_priority(a.priority)
        .with_created_by("cli");
    if let Some(who) = a.assignee.filter(|s| !s.trim().is_empty()) {
        super::known_assignee(ctx, "--assignee", who.trim())?;
        new = new.with_assignee(who.trim());
    }
    for raw in &a.parents {
        new = new.with_parent(task_id(raw)?);
    }
    if let Some(tenant) = a.tenant {
        if tenant.trim().is_empty() {
            return Err(Failure::usage(
                "--tenant is empty; give a namespace name or leave the flag out",
            ));
        }
        new = new.with_tenant(tenant.trim());
    }
    if let Some(key) = a.idempotency_key {
        if key.trim().is_empty() {
            return Err(Failure::usage(
                "--idempotency-key is empty; give a key that names this request, or leave the flag out",
            ));
        }
        new = new.with_idempotency_key(key);
    }
    if let Some(raw) = a.max_runtime {
        let d = parse_duration(&raw).map_err(|e| Failure::usage(format!("--max-runtime: {e}")))?;
        new = new.with_max_runtime(d);
    }
    if let Some(n) = a.max_retries {
        new = new.with_max_retries(n);
    }
    let budget = serde_json::json!({
        "max_tokens": a.max_tokens,
        "max_cost_usd": a.max_cost_usd,
        "max_wall_seconds": a.max_wall_seconds,
    });
    let budget = troupe_actors::usage::Budget::from_value("--max", &budget)
        .map_err(|e| Failure::usage(e.replace("--max.max_", "--max-").replace('_', "-")))?;
    new.budget = budget.is_limited().then_some(budget);
    if let Some(traceparent) = a.traceparent.as_deref().map(str::trim) {
        if !troupe_actors::trace::is_traceparent(traceparent) {
            return Err(Failure::usage(format!(
                "--traceparent {traceparent:?} is not a W3C trace context; write 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, or leave it out"
            )));
        }
        new.traceparent = Some(traceparent.to_string());
    } else if let Ok(inherited) = std::env::var("TRACEPARENT") {
        // From the environment it is a hint, not an instruction: a malformed one is dropped.
        new.traceparent = Some(inherited).filter(|t| troupe_actors::trace::is_traceparent(t));
    }
    if a.triage {
        new = new.with_initial(InitialStatus::Triage);
    }
    if let Some(raw) = &a.workspace {
        let workspace = crate::runtime::workspaces::parse_workspace(raw)
            .map_err(|e| Failure::usage(format!("--workspace: {e}")))?;
        new = new.with_workspace(workspace);
    }
    let created = ctx.kanban.create_task(&ctx.board, &new).await?;
    if a.json {
        println!(
            "{}",
            to_json(&json!({"task": created.task, "created": created.created}))
        );
    } else if created.created {
        println!(
            "{} created ({}) on board {}",
            created.task.id, created.task.status, ctx.board
        );
    } else {
        println!(
            "{} already holds that idempotency key ({}); nothing new was created",
            created.task.id, created.task.status
        );
    }
    Ok(())
}

pub(super) async fn list(ctx: &Ctx, a: ListArgs) -> Outcome {
    let mut statuses = Vec::new();
    for raw in a.status.iter().filter(|s| !s.trim().is_empty()) {
        let status = TaskStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == raw.trim())
            .ok_or_else(|| {
                Failure::usage(format!(
                    "--status {raw:?} is not a status; use one of {}",
                    TaskStatus::ALL.map(|s| s.as_str()).join(", ")
                ))
            })?;
        statuses.push(status);
    }
    let sort = match a.sort.as_str() {
        "created" => TaskSort::Created,
        "created-desc" => TaskSort::CreatedDesc,
        "priority" => TaskSort::Priority,
        "updated" => TaskSort::Updated,
        other => {
            return Err(Failure::usage(format!(
                "--sort {other:?} is not an order; use created, created-desc, priority or updated"
            )));
        }
    };
    let filter = TaskFilter {
        statuses,
        include_archived: a.archived,
        assignee: a.assignee,
        tenant: a.tenant,
        sort,
        limit: a.limit,
    };
    let tasks = ctx.kanban.list(&ctx.board, &filter).await?;
    if a.json {
        println!("{}", to_json(&tasks));
    } else {
        print!("{}", render::task_table(&tasks));
    }
    Ok(())
}

pub(super) async fn show(ctx: &Ctx, id: &str, json: bool) -> Outcome {
    let id = task_id(id)?;
    let detail = ctx.kanban.detail(&ctx.board, &id).await?;
    let todos = task_todos(ctx, &id).await;
    if json {
        let mut out = serde_json::to_value(&detail).unwrap_or_default();
        if let Some(map) = out.as_object_mut() {
            map.insert("todos".into(), todos.unwrap_or(serde_json::Value::Null));
            map.insert(
                "evidence".into(),
                super::review::evidence_json(&detail.runs),
            );
        }
        println!("{}", to_json(&out));
    } else {
        print!("{}", render::task_detail(&detail));
        if let Some(lines) = super::review::evidence_lines(&detail.runs) {
            println!("\n{lines}");
        }
        if let Some(list) = todos
            .as_ref()
            .and_then(|t| troupe_tools::todo::TodoList::from_result(&t.to_string()))
            .filter(|list| !list.render().is_empty())
        {
            println!("\nPlan:\n{}", list.render());
        }
    }
    Ok(())
}

/// The plan the task's worker keeps (`todo`), read from the session store troupe.yaml names;
/// `None` when sessions are not kept, the store cannot be opened or no worker wrote one.
async fn task_todos(ctx: &Ctx, id: &troupe_kanban::domain::TaskId) -> Option<serde_json::Value> {
    let store = match crate::sessions::open_configured(&ctx.config.sessions).await {
        Ok(store) => store?,
        Err(error) => {
            tracing::debug!(%error, "could not open the session store to read the task's plan");
            return None;
        }
    };
    crate::sessions::StoredRunHistory::new(store)
        .task_todos(&ctx.board, id)
        .await
}

pub(super) async fn complete(ctx: &Ctx, a: CompleteArgs) -> Outcome {
    if a.ids.len() > 1 && a.summary.is_some() {
        return Err(Failure::usage(
            "--summary describes one task; complete tasks one at a time to give each its own summary",
        ));
    }
    for id in task_ids(&a.ids)? {
        let task = ctx
            .kanban
            .complete(&ctx.board, &id, a.result.clone(), a.summary.clone())
            .await?;
        println!("{} is done", task.id);
    }
    Ok(())
}

pub(super) async fn watch(ctx: &Ctx, a: WatchArgs) -> Outcome {
    let mut kinds = Vec::new();
    for raw in a.kinds.iter().filter(|k| !k.trim().is_empty()) {
        kinds.push(EventKind::parse(raw.trim()).ok_or_else(|| {
            Failure::usage(format!(
                "--kinds {raw:?} is not an event kind; use names such as created, claimed, completed, blocked"
            ))
        })?);
    }
    let cursor = match a.since {
        Some(n) if n < 0 => {
            return Err(Failure::usage("--since takes an event id of 0 or more"));
        }
        Some(n) => EventId(n),
        None => ctx.kanban.stats(&ctx.board).await?.last_event_id,
    };
    let interval = match &a.interval {
        Some(raw) => {
            Some(parse_duration(raw).map_err(|e| Failure::usage(format!("--interval: {e}")))?)
        }
        None => None,
    };
    let mut stop = std::pin::pin!(shutdown_signal());
    let mut feed = ctx.kanban.watch(ctx.board.clone(), cursor);
    if let Some(every) = interval {
        feed = feed
            .with_poll_interval(every)
            .with_safety_poll_interval(every);
    }
    if !a.once && !a.json {
        eprintln!(
            "watching board {} after event #{} (Ctrl-C to stop)",
            ctx.board, cursor.0
        );
    }
    loop {
        let event = if a.once {
            match feed.try_next().await? {
                Some(event) => event,
                None => return Ok(()),
            }
        } else {
            tokio::select! {
                event = feed.next() => event?,
                () = &mut stop => return Ok(()),
            }
        };
        if !kinds.is_empty() && !kinds.contains(&event.kind) {
            continue;
        }
        if a.json {
            match serde_json::to_string(&event) {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    return Err(Failure::failed(format!(
                        "event #{} could not be written as JSON: {e}",
                        event.id.0
                    )));
                }
            }
        } else {
            println!("{}", render::event_line(&event));
        }
    }
}
