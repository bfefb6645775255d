//! A `delegate_task` tree through troupe's public API: a troupe started from a config value
//! (`delegation.max_spawn_depth: 2`), a root session that hands two branches to subagents, one
//! of which hands a leaf to a subagent of its own. The model is scripted, so it runs offline;
//! each subagent answers what it was asked, and the answers flow back up the tree.
//!
//! Run with:
//!
//! ```sh
//! cargo run -p troupe-examples --example delegate_tree
//! ```
//!
//! You will see each session start with its place in the tree, then the root's answer.
//! `cargo test -p troupe-examples --example delegate_tree` runs it as a test.

#![allow(clippy::print_stdout, reason = "an example shows its results")]

use std::sync::Arc;

use troupe::actors::events::EventKind;
use troupe::actors::model::{Script, ScriptedProvider};
use troupe::config::Config;
use troupe::{SessionOptions, Troupe};

/// Who answers what: each turn answers the first message that contains its `match`.
const MODEL: &str = r#"
cursor: conversation
turns:
  - match: "branch A:"
    text: "Root: both branches reported."
  - match: "leaf a1 found"
    text: "branch A: leaf a1 found 3 files"
  - match: ROOT-TASK
    tool_calls:
      - name: delegate_task
        arguments: {tasks: [{goal: "BRANCH-A: survey the sources"}, {goal: "BRANCH-B: survey the docs"}]}
  - match: BRANCH-A
    tool_calls:
      - name: delegate_task
        arguments: {tasks: [{goal: "LEAF-A1: count the source files"}]}
  - match: BRANCH-B
    text: "branch B done: the docs are current"
  - match: LEAF-A1
    text: "leaf a1 found 3 files"
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse(
        "delegation: {max_spawn_depth: 2, max_concurrent_children: 2}\napprovals: {mode: off}\n",
    )?;
    let troupe = Troupe::from_config(config).await?;
    let mut events = troupe.events();
    let model = Arc::new(ScriptedProvider::new(Script::from_yaml_str(MODEL)?));
    let session = troupe.open_session(SessionOptions::new(model)).await?;
    let outcome = session.send("ROOT-TASK: survey the project.").await?;

    let mut started = 0;
    while let Some(event) = events.try_next() {
        if let EventKind::SessionStarted { agent_path, .. } = &event.kind {
            started += 1;
            println!(
                "{}session {}",
                "  ".repeat(agent_path.len().saturating_sub(1)),
                event.session_id
            );
        }
    }
    println!("answer ({}): {}", outcome.status.as_str(), outcome.text);
    troupe.close().await;
    anyhow::ensure!(
        outcome.text == "Root: both branches reported.",
        "the root answered {:?}",
        outcome.text
    );
    anyhow::ensure!(
        started == 4,
        "expected the root and three subagents, saw {started} sessions"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tree_runs_and_answers() {
        super::main().unwrap();
    }
}
