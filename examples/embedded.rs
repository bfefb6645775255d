//! troupe embedded in a plain `#[tokio::main]` program: it writes a troupe.yaml (a profile with
//! its model, toolsets and prompt; manual approvals), starts troupe from the file with
//! `Troupe::from_file`, opens a session of the profile, and answers the session's approval
//! requests itself: it allows removing a build directory once and refuses anything else.
//!
//! Run with:
//!
//! ```sh
//! cargo run -p troupe-examples --example embedded
//! ```
//!
//! You will see the approval requests and the program's answers, then the session's answer.
//! `cargo test -p troupe-examples --example embedded` runs it as a test.

#![allow(clippy::print_stdout, reason = "an example shows its results")]

use troupe::actors::supervisor::ApprovalChoice;
use troupe::{SessionOptions, Troupe};

/// The assistant's (scripted) model: two commands that need approval, then an answer.
const MODEL: &str = r#"
cursor: conversation
turns:
  - tool_calls:
      - name: terminal
        arguments: {command: "rm -rf ./build"}
  - tool_calls:
      - name: terminal
        arguments: {command: "rm -rf ./src"}
  - text: The build directory is gone; removing the sources was refused.
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("build"))?;
    std::fs::create_dir_all(dir.path().join("src"))?;
    std::fs::write(dir.path().join("assistant.yaml"), MODEL)?;
    let config = dir.path().join("troupe.yaml");
    std::fs::write(
        &config,
        format!(
            "approvals: {{mode: manual}}\nterminal: {{cwd: {}}}\nprofiles:\n  assistant:\n    script: {}\n    toolsets: [core]\n    system_prompt: You keep the workspace tidy.\n",
            dir.path().display(),
            dir.path().join("assistant.yaml").display()
        ),
    )?;
    let troupe = Troupe::from_file(&config).await?;

    // This program is the person who answers: it allows removing ./build, once.
    let mut requests = troupe.approvals().await?;
    let answerer = troupe.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let command = request
                .arguments
                .get("command")
                .and_then(|c| c.as_str())
                .unwrap_or_default()
                .to_string();
            let choice = if command.ends_with("./build") {
                ApprovalChoice::Once
            } else {
                ApprovalChoice::Deny {
                    reason: Some("only the build directory may be removed".into()),
                }
            };
            println!("approval for {command:?}: {choice:?}");
            let _ = answerer.answer(&request.request_id, choice).await;
        }
    });

    let session = troupe
        .open_session(SessionOptions::from_profile("assistant"))
        .await?;
    let outcome = session.send("Clean up the workspace.").await?;
    println!("answer ({}): {}", outcome.status.as_str(), outcome.text);
    troupe.close().await;
    anyhow::ensure!(
        !dir.path().join("build").exists(),
        "./build was not removed"
    );
    anyhow::ensure!(
        dir.path().join("src").exists(),
        "./src was removed without approval"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_program_answers_the_approvals() {
        super::main().unwrap();
    }
}
