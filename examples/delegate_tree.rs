//! A `delegate_task` tree, through troupe's public API: a `lead` profile from a troupe.yaml with
//! `delegation.max_spawn_depth: 2`, asked to prepare release notes. The lead hands two jobs to
//! subagents in one `delegate_task` call, which run in parallel: one reads the changelog through
//! a grandchild of its own, the other lists the sources with `terminal`. Each level reports to
//! the one above. Delegation from an API session runs in the background: the lead's first turn
//! ends once the children are on their way, and their reports start its next turn, in which it
//! answers from both. The program follows the tree on the event stream (who spawned whom, at
//! which depth, with which tools) and prints it.
//!
//! Run with:
//!
//! ```sh
//! cargo run -p troupe-examples --example delegate_tree
//! ```
//!
//! You will see the tree as it grows and finishes, then the lead's answer.
//! `cargo test -p troupe-examples --example delegate_tree` runs it as a test. The model is
//! scripted, so it runs offline; point the profile at a real model (`model:` in the profile)
//! and the same tree is what a real model builds.

#![allow(clippy::print_stdout, reason = "an example shows its results")]

use std::path::Path;

use troupe::actors::events::EventKind;
use troupe::{SessionOptions, Troupe};

/// One script serves every level: each agent's turn is picked by what it was just given, so the
/// reports (matched first) never collide with the goals that may be quoted beside them.
fn script(dir: &Path) -> String {
    format!(
        r#"
cursor: conversation
turns:
  # The lead, once both reports are back.
  - match: NOTES-REPORT
    text: "Release 1.2 notes are ready. Changes: faster tool search, a cleaner stop. Sources: lib.rs and main.rs."
  # The notes child, once its grandchild reported.
  - match: LOG-REPORT
    text: "NOTES-REPORT: faster tool search; stop is cleaner."
  # The grandchild, once it has read the changelog.
  - match: "- faster tool search"
    text: "LOG-REPORT: two entries under 1.2: faster tool search, cleaner stop."
  # The checks child, once it has the listing.
  - match: main.rs
    text: "CHECKS-REPORT: src holds lib.rs and main.rs."
  # The lead splits the work in two.
  - match: PLAN-RELEASE
    tool_calls:
      - name: delegate_task
        arguments:
          tasks:
            - goal: "NOTES-TASK: write the release notes for 1.2 from the changelog."
              toolsets: [core, delegation]
            - goal: "CHECKS-TASK: list the source files that ship in 1.2."
              toolsets: [core]
  # The lead's first turn ends while the children work.
  - match: in the background
    text: "The subagents are on it."
  # The notes child hands the reading to a grandchild.
  - match: NOTES-TASK
    tool_calls:
      - name: delegate_task
        arguments:
          tasks:
            - goal: "LOG-TASK: read the changelog and report what 1.2 changed."
  - match: LOG-TASK
    tool_calls:
      - name: read_file
        arguments: {{path: "{changelog}"}}
  - match: CHECKS-TASK
    tool_calls:
      - name: terminal
        arguments: {{command: "ls src"}}
"#,
        changelog = dir.join("CHANGELOG.md").display()
    )
}

/// What the program saw of the tree.
#[derive(Default)]
struct Tree {
    /// The depth of every subagent spawned.
    depths: Vec<u32>,
    /// The tools the subagents called.
    tools: Vec<String>,
    /// How each subagent ended.
    completed: Vec<String>,
    /// Whether the children's reports reached the lead.
    delivered: bool,
    /// The lead's answer once they had: status and text.
    answer: Option<(String, String)>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("src"))?;
    std::fs::write(dir.path().join("src/lib.rs"), "// the library\n")?;
    std::fs::write(dir.path().join("src/main.rs"), "fn main() {}\n")?;
    std::fs::write(
        dir.path().join("CHANGELOG.md"),
        "# Changelog\n\n## 1.2\n- faster tool search\n- cleaner stop\n\n## 1.1\n- first board\n",
    )?;
    std::fs::write(dir.path().join("lead.yaml"), script(dir.path()))?;
    let config = dir.path().join("troupe.yaml");
    std::fs::write(
        &config,
        format!(
            "terminal: {{cwd: {cwd}}}\n\
             delegation: {{max_spawn_depth: 2, max_concurrent_children: 4}}\n\
             profiles:\n  lead:\n    script: {script}\n    toolsets: [core, delegation]\n    \
             system_prompt: You plan releases and hand work to subagents.\n",
            cwd = dir.path().display(),
            script = dir.path().join("lead.yaml").display()
        ),
    )?;
    let troupe = Troupe::from_file(&config).await?;

    let session = troupe
        .open_session(SessionOptions::from_profile("lead"))
        .await?;
    let lead = session.id().to_string();

    // The tree as the parents report it (spawns with their depth, the tools children run, how
    // each child ended), until the lead answers from its children's reports.
    let mut events = troupe.events();
    let watcher = tokio::spawn(async move {
        let mut tree = Tree::default();
        while let Some(event) = events.next().await {
            match event.kind {
                EventKind::SubagentSpawned { goal, depth, .. } => {
                    println!(
                        "{}spawned (depth {depth}): {goal}",
                        "  ".repeat(depth as usize)
                    );
                    tree.depths.push(depth);
                }
                EventKind::SubagentToolCall { tool, .. } => tree.tools.push(tool),
                EventKind::SubagentCompleted {
                    status, preview, ..
                } => {
                    println!("  finished ({status}): {preview}");
                    tree.completed.push(status);
                }
                EventKind::DelegationDelivered { .. } if event.session_id == lead => {
                    tree.delivered = true;
                }
                EventKind::Final { text, status, .. }
                    if event.session_id == lead && tree.delivered =>
                {
                    println!("answer ({status}): {text}");
                    tree.answer = Some((status, text));
                    return tree;
                }
                _ => {}
            }
        }
        tree
    });

    // Delegation runs in the background for API sessions: the lead's first turn ends as soon as
    // the children are on their way, and their reports start its next turn.
    let first = session
        .send("PLAN-RELEASE: prepare the notes for release 1.2.")
        .await?;
    println!("first turn ({}): {}", first.status.as_str(), first.text);
    let tree = tokio::time::timeout(std::time::Duration::from_secs(20), watcher).await??;
    troupe.close().await;

    let Some((status, answer)) = tree.answer else {
        anyhow::bail!("the lead never answered from its children's reports");
    };
    anyhow::ensure!(status == "completed", "the lead ended {status}: {answer}");
    anyhow::ensure!(
        answer.contains("faster tool search") && answer.contains("main.rs"),
        "the answer does not carry both reports: {answer}"
    );
    let mut depths = tree.depths;
    depths.sort_unstable();
    anyhow::ensure!(
        depths == [1, 1, 2],
        "expected two children and one grandchild, got depths {depths:?}"
    );
    anyhow::ensure!(
        tree.completed.len() == 3 && tree.completed.iter().all(|status| status == "completed"),
        "not every subagent completed: {:?}",
        tree.completed
    );
    anyhow::ensure!(
        tree.tools.iter().any(|t| t == "terminal")
            && tree.tools.iter().any(|t| t == "delegate_task"),
        "the children's tool calls were not seen: {:?}",
        tree.tools
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tree_reports_up_through_every_level() {
        super::main().unwrap();
    }
}
