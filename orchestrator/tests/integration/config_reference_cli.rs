//! `troupe config reference` as a person runs it: the markdown tables of every key on stdout
//! (and `| head -1` ends it without a panic), `--update FILE` rewriting a page's stale
//! generated tables while keeping its prose, and a page missing a block refused with what to
//! add.

use std::process::Stdio;

use tokio::io::AsyncReadExt;

const BEGIN_SERVE: &str = "<!-- generated from orchestrator/src/settings/reference.rs by `troupe config reference`: serve -->";
const END: &str = "<!-- end of generated table -->";

fn troupe() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
    command.stdin(Stdio::null()).kill_on_drop(true);
    command
}

#[tokio::test]
async fn the_reference_prints_every_key_and_updates_a_page_in_place() {
    let output = troupe()
        .args(["config", "reference"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("| `serve.port` | port | 8642 |"), "{text}");
    assert!(text.contains("| `serve.dashboard_token` |"), "{text}");
    assert!(
        text.contains("| `kanban.max_in_progress` | integer | 8 |"),
        "{text}"
    );

    // A reader that stops early (as `| head -1` does): the command still exits 0, no panic.
    let mut child = troupe()
        .args(["config", "reference"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 8];
    stdout.read_exact(&mut first).await.unwrap();
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // --update: the stale table is replaced, the prose around it kept.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("config.md");
    let mut doc =
        format!("# keys\n\nProse before.\n\n{BEGIN_SERVE}\n| stale |\n{END}\n\nProse after.\n");
    for section in [
        "model",
        "toolsets",
        "tools",
        "approvals",
        "delegation",
        "kanban",
        "profiles",
        "terminal",
        "code_execution",
        "plugins",
        "budget",
        "observability",
    ] {
        doc.push_str(&format!(
            "{}\n{END}\n",
            BEGIN_SERVE.replace(": serve -->", &format!(": {section} -->"))
        ));
    }
    std::fs::write(&page, &doc).unwrap();
    let output = troupe()
        .args(["config", "reference", "--update"])
        .arg(&page)
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let updated = std::fs::read_to_string(&page).unwrap();
    assert!(
        updated.starts_with("# keys\n\nProse before.\n"),
        "{updated}"
    );
    assert!(updated.contains("\nProse after.\n"), "{updated}");
    assert!(!updated.contains("| stale |"), "{updated}");
    assert!(
        updated.contains("| `serve.max_sessions` | integer | 1000 |"),
        "{updated}"
    );

    // A page without a block for a section is refused, saying what to add.
    std::fs::write(&page, "# nothing generated here\n").unwrap();
    let output = troupe()
        .args(["config", "reference", "--update"])
        .arg(&page)
        .output()
        .await
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no generated block for `model`"),
        "{stderr}"
    );
    assert!(stderr.contains(END), "{stderr}");
}
