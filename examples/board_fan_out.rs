//! A board that fans work out to workers and gathers it, through troupe's public API: a
//! runtime from a config value, three tasks for a `counter` profile and a `gather` task that
//! waits for them, a dispatcher that runs them as worker sessions (the three in parallel), and
//! the program reading every result back from the board. The model is scripted, so it runs
//! offline.
//!
//! Run with:
//!
//! ```sh
//! cargo run -p troupe-examples --example board_fan_out
//! ```
//!
//! You will see each task's result, then what the gathering task was given.
//! `cargo test -p troupe-examples --example board_fan_out` runs it as a test.

#![allow(clippy::print_stdout, reason = "an example shows its results")]

use std::sync::Arc;

use troupe::actors::model::{Script, ScriptedProvider};
use troupe::kanban::dispatcher::DispatcherConfig;
use troupe::kanban::profiles::{Profiles, WorkerProfile};
use troupe::kanban::{BoardSlug, NewTask, TaskStatus};
use troupe::kanban_api::Kanban;
use troupe::settings::Settings;
use troupe::settings::kanban::StoreLocation;
use troupe::{Runtime, RuntimeOptions};

/// Each worker completes its task with what its task asked for.
const MODEL: &str = r#"
cursor: conversation
turns:
  - match: COUNT-alpha
    tool_calls: [{name: kanban_complete, arguments: {summary: "alpha has 5 lines"}}]
  - match: COUNT-beta
    tool_calls: [{name: kanban_complete, arguments: {summary: "beta has 8 lines"}}]
  - match: COUNT-gamma
    tool_calls: [{name: kanban_complete, arguments: {summary: "gamma has 13 lines"}}]
  - match: GATHER
    tool_calls: [{name: kanban_complete, arguments: {summary: "gathered three counts"}}]
  - text: Done.
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = Settings::parse("approvals: {mode: manual, unattended: deny}\n")?;
    let runtime = Runtime::start(config, RuntimeOptions::default()).await?;
    let kanban = Kanban::open_at(StoreLocation::Sqlite(dir.path().join("boards"))).await?;
    let board = BoardSlug::default_board();

    let model = Arc::new(ScriptedProvider::new(Script::from_yaml_str(MODEL)?));
    let view = runtime.view(Some(&["core".to_string()][..]))?;
    let profiles = Profiles::new()
        .with_profile(WorkerProfile::new("counter", model.clone(), view.clone()))
        .with_profile(WorkerProfile::new("gatherer", model, view));

    let mut children = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let task = NewTask::new(format!("count {name}"))
            .with_body(format!("COUNT-{name}: count the lines of {name}."))
            .with_assignee("counter");
        children.push(kanban.create_task(&board, &task).await?.task.id);
    }
    let mut gather = NewTask::new("gather the counts")
        .with_body("GATHER: sum up what the counters found.")
        .with_assignee("gatherer");
    for id in &children {
        gather = gather.with_parent(id.clone());
    }
    let gather = kanban.create_task(&board, &gather).await?.task.id;

    let dispatcher = kanban
        .start_dispatcher(
            runtime.troupe(),
            board.clone(),
            profiles,
            DispatcherConfig::default(),
        )
        .await?;
    dispatcher.dispatch_once(None, false).await?;
    dispatcher.wait_idle().await?;
    dispatcher.stop().await;

    let mut gathered = Vec::new();
    for id in &children {
        let task = kanban.task(&board, id).await?;
        println!(
            "{}: {}",
            task.title,
            task.result.clone().unwrap_or_default()
        );
        anyhow::ensure!(
            task.status == TaskStatus::Done,
            "{} is {}",
            task.title,
            task.status
        );
        gathered.push(task.result.unwrap_or_default());
    }
    let last = kanban.task(&board, &gather).await?;
    println!(
        "{}: {}",
        last.title,
        last.result.clone().unwrap_or_default()
    );
    runtime.close().await;
    anyhow::ensure!(
        last.status == TaskStatus::Done,
        "the gathering task is {}",
        last.status
    );
    anyhow::ensure!(
        gathered
            == [
                "alpha has 5 lines",
                "beta has 8 lines",
                "gamma has 13 lines"
            ],
        "gathered {gathered:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_board_fans_out_and_gathers() {
        super::main().unwrap();
    }
}
