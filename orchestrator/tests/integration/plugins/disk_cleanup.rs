//! The bundled disk-cleanup plugin through `troupe chat`: files the tools create are tracked
//! and the session's end removes the test files; every rule with faked ages (tracked.json
//! written with old timestamps); and escapes (a symlink out, `..`, `/mnt/c`, a folder swapped
//! for a symlink after tracking, a hand-edited entry outside the scope) that must not work.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::plugin_world::{World, assert_success};

const DAY: u64 = 86_400;

fn enabled_world() -> World {
    let w = World::new();
    w.config("plugins:\n  enabled: [disk-cleanup]\napprovals: {mode: off}\n");
    w
}

fn tracked(w: &World) -> Vec<Value> {
    let text = std::fs::read_to_string(w.home().join("disk-cleanup/tracked.json"))
        .unwrap_or_else(|_| "[]".into());
    serde_json::from_str::<Vec<Value>>(&text).unwrap()
}

fn log(w: &World) -> String {
    std::fs::read_to_string(w.home().join("disk-cleanup/cleanup.log")).unwrap_or_default()
}

/// `/disk-cleanup <args>` through the chat; its reply.
fn command(w: &World, args: &str) -> String {
    let out = w.run(&["chat", "-q", &format!("/disk-cleanup {args}")]);
    assert_success(&out);
    String::from_utf8(out.stdout).unwrap()
}

fn iso_days_ago(days: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let secs = now - days * DAY - 60;
    // Hand-rolled like the plugin's, so the test does not trust the code under test.
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn entry(path: &Path, category: &str, days: u64) -> Value {
    json!({"path": path, "timestamp": iso_days_ago(days), "category": category, "size": 1})
}

fn touch(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, "x").unwrap();
    path.to_path_buf()
}

/// `target` written as a path that starts inside `home` and climbs out with `..`.
fn dotdot(home: &Path, target: &Path) -> String {
    let ups = "/..".repeat(home.components().count());
    format!("{}/a{ups}/..{}", home.display(), target.display())
}

fn write_tracked(w: &World, entries: &[Value]) {
    let dir = w.home().join("disk-cleanup");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tracked.json"),
        Value::Array(entries.to_vec()).to_string(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn files_tools_create_are_tracked_and_tests_removed_at_session_end() {
    let w = enabled_world();
    let home = std::fs::canonicalize(w.home()).unwrap();
    let scratch = tempfile::Builder::new()
        .prefix("troupe-")
        .tempdir_in("/tmp")
        .unwrap();
    let scratch = std::fs::canonicalize(scratch.path()).unwrap();
    let existing = touch(&home.join("work/test_existing.py"));
    let script = format!(
        r#"
turns:
  - tool_calls:
      - {{id: w1, name: write_file, arguments: {{path: "{home}/work/test_scratch.py", content: "print(1)"}}}}
      - {{id: w2, name: write_file, arguments: {{path: "{home}/work/keep.md", content: "notes"}}}}
      - {{id: w3, name: write_file, arguments: {{path: "{home}/work/test_existing.py", content: "changed"}}}}
      - {{id: w4, name: read_file, arguments: {{path: "{home}/work/keep.md"}}}}
      - {{id: t1, name: terminal, arguments: {{command: "touch {scratch}/tmp_out.txt {scratch}/app.test.js"}}}}
  - text: done
"#,
        home = home.display(),
        scratch = scratch.display()
    );
    let (out, _) = w.chat("make some files", &script).await;
    assert_success(&out);
    let statuses = crate::support::plugin_world::statuses(&out);
    assert!(statuses.values().all(|s| s == "ok"), "{statuses:?}");
    // Session end: the test files went, the temp file stays (7 days), the rest untouched.
    assert!(!home.join("work/test_scratch.py").exists());
    assert!(!scratch.join("app.test.js").exists());
    // (Commands cannot write troupe's home: the boundary keeps them out, so what a command
    // leaves is tracked where it can write, under /tmp/troupe-*.)
    assert!(scratch.join("tmp_out.txt").exists());
    assert!(home.join("work/keep.md").exists());
    assert!(
        existing.exists(),
        "a file that existed before the call is not the call's to clean"
    );
    let left: Vec<String> = tracked(&w)
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["category"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        left,
        vec![format!("temp:{}", scratch.join("tmp_out.txt").display())]
    );
    let log = log(&w);
    assert!(
        log.contains(&format!(
            "TRACKED test 8 {}",
            home.join("work/test_scratch.py").display()
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "DELETED test 8 {}",
            home.join("work/test_scratch.py").display()
        )),
        "{log}"
    );
    assert!(
        log.contains("AUTO_QUICK (session_end) [disk-cleanup] Cleaned 2 files"),
        "{log}"
    );
    assert!(w.home().join("disk-cleanup/tracked.json.bak").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_tracked_nothing_leaves_everything_alone() {
    let w = enabled_world();
    let home = std::fs::canonicalize(w.home()).unwrap();
    std::fs::create_dir_all(home.join("empty/inside")).unwrap();
    let (out, _) = w.chat("hi", "- text: hello\n").await;
    assert_success(&out);
    assert!(home.join("empty/inside").exists());
    assert_eq!(log(&w), "");
}

#[test]
fn the_plugin_is_off_until_enabled() {
    let w = World::new();
    let out = w.run(&["chat", "-q", "/disk-cleanup status"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unknown command /disk-cleanup"));
    let help = w.ok(&["chat", "-q", "/help"]);
    assert!(!help.contains("/disk-cleanup"), "{help}");
    let w = enabled_world();
    let help = w.ok(&["chat", "-q", "/help"]);
    assert!(help.contains("/disk-cleanup"), "{help}");
    let unknown = command(&w, "shred");
    assert!(unknown.contains("Unknown subcommand: shred"), "{unknown}");
}

#[test]
fn every_rule_with_faked_ages() {
    let w = enabled_world();
    let home = std::fs::canonicalize(w.home()).unwrap();
    let test_now = touch(&home.join("a/test_now.py"));
    let temp_old = touch(&home.join("a/tmp_old.txt"));
    let temp_new = touch(&home.join("a/tmp_new.txt"));
    let cron_old = touch(&home.join("cron/output/job/run-old.md"));
    let cron_new = touch(&home.join("cron/output/job/run-new.md"));
    let cron_jobs = touch(&home.join("cron/jobs.json"));
    let chrome_old = home.join("profiles-scratch/chrome-old");
    touch(&chrome_old.join("Default/Cookies"));
    let chrome_new = home.join("profiles-scratch/chrome-new");
    touch(&chrome_new.join("Default/Cookies"));
    let big = home.join("a/test_big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(600 * 1024 * 1024)
        .unwrap();
    let mut entries = vec![
        entry(&test_now, "test", 0),
        entry(&temp_old, "temp", 8),
        entry(&temp_new, "temp", 6),
        entry(&cron_old, "cron-output", 15),
        entry(&cron_new, "cron-output", 13),
        // A stale cron entry for the jobs file: never deleted, dropped from the list.
        entry(&cron_jobs, "cron-output", 40),
        entry(&chrome_old, "chrome-profile", 15),
        entry(&chrome_new, "chrome-profile", 13),
        entry(&big, "test", 1),
    ];
    let mut research = Vec::new();
    for i in 0..11 {
        let path = touch(&home.join(format!("papers/old-{i:02}.md")));
        entries.push(entry(&path, "research", 40 + i));
        research.push(path);
    }
    let newest = touch(&home.join("papers/new.md"));
    entries.push(entry(&newest, "research", 1));
    write_tracked(&w, &entries);
    std::fs::create_dir_all(home.join("scratch/empty/deeper")).unwrap();
    std::fs::create_dir_all(home.join("logs")).unwrap();
    std::fs::create_dir_all(home.join("sessions")).unwrap();
    std::fs::create_dir_all(home.join("project/.git/refs")).unwrap();

    let dry = command(&w, "dry-run");
    assert!(
        dry.contains("quick would remove 3 path(s); 4 need confirmation"),
        "{dry}"
    );
    assert!(
        test_now.exists() && temp_old.exists(),
        "a dry run removes nothing"
    );

    let quick = command(&w, "quick");
    assert!(quick.contains("Cleaned 3 files + "), "{quick}");
    for gone in [&test_now, &temp_old, &cron_old] {
        assert!(!gone.exists(), "{}", gone.display());
    }
    for kept in [&temp_new, &cron_new, &cron_jobs, &big, &newest] {
        assert!(kept.exists(), "{}", kept.display());
    }
    assert!(chrome_old.exists() && chrome_new.exists());
    assert!(research.iter().all(|p| p.exists()));
    assert!(!home.join("scratch").exists(), "empty folders go");
    assert!(
        home.join("logs").is_dir() && home.join("sessions").is_dir(),
        "state folders stay even empty"
    );
    assert!(
        home.join("project/.git/refs").is_dir(),
        "insides of .git are left alone"
    );
    let names: Vec<String> = tracked(&w)
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !names.contains(&cron_jobs.display().to_string()),
        "the stale entry is dropped"
    );
    assert!(log(&w).contains(&format!("STALE cron-output {}", cron_jobs.display())));

    let deep = command(&w, "deep");
    assert!(deep.contains("4 path(s) need your confirmation"), "{deep}");
    assert!(
        deep.contains(&chrome_old.display().to_string())
            && deep.contains(&big.display().to_string())
    );
    assert!(
        deep.contains(&research[10].display().to_string())
            && deep.contains(&research[9].display().to_string())
    );
    assert!(
        !deep.contains(&research[8].display().to_string()),
        "the newest 10 stay: {deep}"
    );
    assert!(
        chrome_old.exists() && big.exists(),
        "nothing goes without confirmation"
    );

    let confirmed = command(&w, "deep --yes");
    assert!(confirmed.contains("Cleaned 4 files"), "{confirmed}");
    assert!(!chrome_old.exists() && !big.exists());
    assert!(!research[10].exists() && !research[9].exists() && research[8].exists());
    assert!(chrome_new.exists() && newest.exists());
}

#[test]
fn track_forget_and_status() {
    let w = enabled_world();
    let home = std::fs::canonicalize(w.home()).unwrap();
    let report = touch(&home.join("notes/report.md"));
    let reply = command(&w, &format!("track {} research", report.display()));
    assert!(reply.contains("Tracking"), "{reply}");
    let status = command(&w, "status");
    assert!(
        status.contains("research") && status.contains("1 tracked"),
        "{status}"
    );
    let bad = command(&w, &format!("track {} junk", report.display()));
    assert!(bad.contains("'junk' is not a category"), "{bad}");
    let forgot = command(&w, &format!("forget {}", report.display()));
    assert!(forgot.contains("Stopped tracking"), "{forgot}");
    assert!(report.exists(), "forget never deletes");
    assert!(tracked(&w).is_empty());
    let log = log(&w);
    assert!(
        log.contains("TRACKED research") && log.contains("FORGOT"),
        "{log}"
    );
}

#[test]
fn escapes_are_refused_and_nothing_outside_is_touched() {
    let w = enabled_world();
    let home = std::fs::canonicalize(w.home()).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    let victim = touch(&outside.join("test_victim.py"));

    // A symlink folder leading out: what is behind it cannot be tracked.
    std::os::unix::fs::symlink(&outside, home.join("out")).unwrap();
    let reply = command(
        &w,
        &format!("track {}/out/test_victim.py test", home.display()),
    );
    assert!(
        reply.contains("Not tracked") && reply.contains("outside the troupe home"),
        "{reply}"
    );
    // `..` out of the home.
    let reply = command(&w, &format!("track {} test", dotdot(&home, &victim)));
    assert!(reply.contains("Not tracked"), "{reply}");
    let reply = command(&w, "track /mnt/c/Users/me/test_a.py test");
    assert!(reply.contains("Windows mount"), "{reply}");
    let reply = command(&w, &format!("track {}/logs test", home.display()));
    assert!(reply.contains("Not tracked"), "{reply}");

    // A symlink inside the home is removed as a link; its target stays.
    std::os::unix::fs::symlink(&victim, home.join("test_link.py")).unwrap();
    command(&w, &format!("track {}/test_link.py test", home.display()));
    // A folder swapped for a symlink after its file was tracked.
    let swapped = touch(&home.join("swap/test_a.py"));
    command(&w, &format!("track {} test", swapped.display()));
    std::fs::remove_dir_all(home.join("swap")).unwrap();
    std::os::unix::fs::symlink(&outside, home.join("swap")).unwrap();
    let decoy = touch(&outside.join("test_a.py"));
    // Entries written by hand that point outside, directly or through `..`.
    let mut entries = tracked(&w);
    entries.push(entry(&victim, "test", 0));
    entries.push(entry(Path::new(&dotdot(&home, &victim)), "test", 0));
    write_tracked(&w, &entries);

    let quick = command(&w, "quick");
    assert!(quick.contains("Cleaned 1 files"), "{quick}");
    assert!(
        !home.join("test_link.py").exists()
            && std::fs::symlink_metadata(home.join("test_link.py")).is_err()
    );
    assert!(victim.exists(), "the link's target stays");
    assert!(
        decoy.exists(),
        "nothing behind a swapped-in symlink is removed"
    );
    let log = log(&w);
    assert!(log.contains("REFUSED track"), "{log}");
    assert!(log.matches("STALE").count() >= 3, "{log}");
    assert!(tracked(&w).is_empty(), "refused entries are dropped");
}

#[test]
fn a_damaged_tracked_list_is_restored_from_its_backup() {
    let w = enabled_world();
    let home = std::fs::canonicalize(w.home()).unwrap();
    let a = touch(&home.join("w/tmp_a.txt"));
    let b = touch(&home.join("w/tmp_b.txt"));
    command(&w, &format!("track {} temp", a.display()));
    command(&w, &format!("track {} temp", b.display()));
    std::fs::write(w.home().join("disk-cleanup/tracked.json"), "[{\"path\": ").unwrap();
    let status = command(&w, "status");
    assert!(
        status.contains("1 tracked"),
        "the backup holds the list before the last write: {status}"
    );
    assert!(log(&w).contains("RESTORED"));
}
