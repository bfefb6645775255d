//! Background processes through `terminal(background=true)` and the `process` tool, against
//! real processes: ids and prefixes, poll, log, wait, kill of a whole tree, stdin, session end,
//! and receipts on disk (redaction, ownership across sessions, retention).

use std::time::{Duration, SystemTime};

use crate::support::{Fixture, ctx, json_of, read_pid};
use serde_json::{Value, json};
use troupe_tools::builtin::process_group::pid_running;
use troupe_tools::builtin::{Receipt, ReceiptStore};

async fn start(f: &Fixture, session: &str, command: &str) -> String {
    let r = f
        .call_ctx(
            "terminal",
            json!({"command": command, "background": true}),
            ctx(session),
        )
        .await;
    let v = json_of(&r);
    assert!(!r.is_error, "{v}");
    let id = v["session_id"].as_str().unwrap().to_string();
    assert!(
        id.starts_with("proc_") && id.len() == 17 && id[5..].chars().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert!(v["pid"].as_u64().is_some());
    assert_eq!(v["output"], "Background process started");
    id
}

/// Starts `command` on a pty (where stdin is open).
async fn start_pty(f: &Fixture, session: &str, command: &str) -> String {
    let r = f
        .call_ctx(
            "terminal",
            json!({"command": command, "background": true, "pty": true}),
            ctx(session),
        )
        .await;
    let v = json_of(&r);
    assert!(!r.is_error, "{v}");
    assert_eq!(v["pty"], json!({"rows": 30, "cols": 120}), "{v}");
    v["session_id"].as_str().unwrap().to_string()
}

async fn process(f: &Fixture, session: &str, args: Value) -> Value {
    json_of(&f.call_ctx("process", args, ctx(session)).await)
}

#[tokio::test]
async fn start_poll_log_wait() {
    let f = Fixture::new();
    let id = start(&f, "s1", "for i in $(seq 1 300); do echo line $i; done; echo OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123; exit 7").await;
    let done = process(
        &f,
        "s1",
        json!({"action": "wait", "session_id": id, "timeout": 30}),
    )
    .await;
    assert_eq!(done["status"], "exited", "{done}");
    assert_eq!(done["exit_code"], 7);
    assert!(
        !done["output"]
            .as_str()
            .unwrap()
            .contains("abcdefghijklmnopqrstuvwxyz0123"),
        "secrets are masked"
    );
    let poll = process(&f, "s1", json!({"action": "poll", "session_id": &id[..9]})).await;
    assert_eq!(poll["status"], "exited");
    assert_eq!(poll["completion_reason"], "exited");
    let log = process(
        &f,
        "s1",
        json!({"action": "log", "session_id": id, "limit": 5}),
    )
    .await;
    assert_eq!(log["total_lines"], 301);
    assert_eq!(log["showing"], "5 lines");
    assert!(log["output"].as_str().unwrap().starts_with("line 297"));
    let head = process(
        &f,
        "s1",
        json!({"action": "log", "session_id": id, "offset": 0, "limit": 2}),
    )
    .await;
    assert_eq!(head["output"], "line 1\nline 2");
    let list = process(&f, "s1", json!({"action": "list"})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 1);
    // Another session sees nothing of it.
    let other = process(&f, "s2", json!({"action": "poll", "session_id": id})).await;
    assert_eq!(other["status"], "not_found");
    assert_eq!(
        process(&f, "s2", json!({"action": "list"})).await["processes"],
        json!([])
    );
}

#[tokio::test]
async fn short_or_ambiguous_prefixes_are_refused() {
    let f = Fixture::new();
    let id = start(&f, "s1", "true").await;
    let short = process(&f, "s1", json!({"action": "poll", "session_id": &id[..8]})).await;
    assert_eq!(short["status"], "not_found");
    assert!(short["error"].as_str().unwrap().contains("too short"));
    let bare = process(
        &f,
        "s1",
        json!({"action": "poll", "session_id": &id[5..10]}),
    )
    .await;
    assert_eq!(bare["session_id"], id.as_str());
}

#[tokio::test]
async fn wait_times_out_without_error_and_kill_stops_the_tree() {
    let f = Fixture::new();
    let dir = f.work();
    let cmd = format!(
        "sleep 300 & echo $! > {d}/c.pid; sh -c 'sleep 300 & echo $! > {d}/g.pid; wait' & wait",
        d = dir.display()
    );
    let id = start(&f, "s1", &cmd).await;
    let child = read_pid(&dir.join("c.pid")).await;
    let grand = read_pid(&dir.join("g.pid")).await;
    let waited = process(
        &f,
        "s1",
        json!({"action": "wait", "session_id": id, "timeout": 1}),
    )
    .await;
    assert_eq!(waited["status"], "timeout");
    assert_eq!(waited["process_running"], true);
    let killed = process(&f, "s1", json!({"action": "kill", "session_id": id})).await;
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(killed["completion_reason"], "killed");
    assert_eq!(killed["termination_source"], "process.kill");
    assert!(!pid_running(child) && !pid_running(grand));
    let again = process(&f, "s1", json!({"action": "kill", "session_id": id})).await;
    assert_eq!(again["status"], "already_exited");
}

#[tokio::test]
async fn stdin_can_be_written_and_closed() {
    let f = Fixture::new();
    // Without a pty the process reads an empty input, and nothing can be typed.
    let piped = start(&f, "s1", "read a; echo got:[$a]").await;
    let refused = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": piped, "data": "hello\n"}),
    )
    .await;
    assert!(
        refused["error"].as_str().unwrap().contains("pty=true"),
        "{refused}"
    );
    let done = process(
        &f,
        "s1",
        json!({"action": "wait", "session_id": piped, "timeout": 30}),
    )
    .await;
    assert_eq!(done["output"], "got:[]\n");

    let id = start_pty(&f, "s1", "read a; echo got:$a; cat").await;
    let w = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "data": "hello\n"}),
    )
    .await;
    assert_eq!(w, json!({"status": "ok", "bytes_written": 6}));
    let s = process(
        &f,
        "s1",
        json!({"action": "submit", "session_id": id, "data": "more"}),
    )
    .await;
    assert_eq!(s["status"], "ok", "{s}");
    let c = process(&f, "s1", json!({"action": "close", "session_id": id})).await;
    assert_eq!(c, json!({"status": "ok", "message": "EOF sent"}));
    let done = process(
        &f,
        "s1",
        json!({"action": "wait", "session_id": id, "timeout": 30}),
    )
    .await;
    assert_eq!(done["exit_code"], 0, "{done}");
    // The screen: what was typed (echoed by the terminal) and what the command printed.
    let screen = done["output"].as_str().unwrap();
    assert!(screen.contains("got:hello\n"), "{screen:?}");
    // Typed ahead, so the order of echo and output varies; `more` is echoed and printed.
    assert_eq!(
        screen.lines().filter(|l| *l == "more").count(),
        2,
        "{screen:?}"
    );
    assert!(!screen.contains('\r'), "{screen:?}");
    let late = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "data": "x"}),
    )
    .await;
    assert_eq!(late["status"], "already_exited");
}

/// Named keys: Ctrl-C interrupts what runs in the foreground of the terminal, not the
/// keeper above it; unknown names are refused with the list.
#[tokio::test]
async fn named_keys_reach_the_program() {
    let f = Fixture::new();
    let id = start_pty(
        &f,
        "s1",
        "trap 'echo caught-int' INT; while true; do sleep 0.1; done",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bad = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "keys": ["Hyper-X"]}),
    )
    .await;
    assert!(bad["error"].as_str().unwrap().contains("Ctrl-C"), "{bad}");
    let sent = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "keys": ["Ctrl-C"]}),
    )
    .await;
    assert_eq!(sent["status"], "ok", "{sent}");
    let mut seen = Value::Null;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = process(&f, "s1", json!({"action": "poll", "session_id": id})).await;
        if seen["output_preview"]
            .as_str()
            .unwrap_or("")
            .contains("caught-int")
        {
            break;
        }
    }
    assert!(
        seen["output_preview"]
            .as_str()
            .unwrap()
            .contains("caught-int"),
        "{seen}"
    );
    assert_eq!(
        seen["status"], "running",
        "the keeper passed nothing on: {seen}"
    );
    let killed = process(&f, "s1", json!({"action": "kill", "session_id": id})).await;
    assert_eq!(killed["status"], "killed", "{killed}");
}

#[tokio::test]
async fn session_end_stops_its_processes_unless_handed_over() {
    let f = Fixture::new();
    let dir = f.work();
    let mine = start(
        &f,
        "s1",
        &format!("sleep 300 & echo $! > {}/a.pid; wait", dir.display()),
    )
    .await;
    let kept = start(
        &f,
        "s1",
        &format!("sleep 300 & echo $! > {}/b.pid; wait", dir.display()),
    )
    .await;
    let a = read_pid(&dir.join("a.pid")).await;
    let b = read_pid(&dir.join("b.pid")).await;
    let handed = f.builtins.processes().handover("s1", &kept, "parent").await;
    assert_eq!(handed["status"], "handed_over");
    assert_eq!(f.builtins.end_session("s1").await, 1);
    assert!(!pid_running(a), "the ended session's process survived");
    assert!(pid_running(b), "the handed-over process was stopped");
    let receipt = process(&f, "s1", json!({"action": "poll", "session_id": mine})).await;
    assert_eq!(receipt["completion_reason"], "killed");
    assert_eq!(receipt["termination_source"], "session_end");
    assert_eq!(f.builtins.end_session("parent").await, 1);
    assert!(!pid_running(b));
}

#[tokio::test]
async fn receipts_outlive_memory_and_stay_with_their_session() {
    let f = Fixture::new();
    let id = start(
        &f,
        "owner",
        "echo token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789; echo done",
    )
    .await;
    process(
        &f,
        "owner",
        json!({"action": "wait", "session_id": id, "timeout": 30}),
    )
    .await;
    let file = f.dir.path().join("receipts").join(format!("{id}.json"));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
        "the receipt holds a raw token"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );

    // A fresh registry (as after a restart) reads it back, for the owner only.
    let g = Fixture::with(|c| c.receipts_dir = f.dir.path().join("receipts"));
    let polled = json_of(
        &g.call_ctx(
            "process",
            json!({"action": "poll", "session_id": id}),
            ctx("owner"),
        )
        .await,
    );
    assert_eq!(polled["from_receipt"], true, "{polled}");
    assert!(polled["output_preview"].as_str().unwrap().contains("done"));
    let stranger = json_of(
        &g.call_ctx(
            "process",
            json!({"action": "poll", "session_id": id}),
            ctx("stranger"),
        )
        .await,
    );
    assert_eq!(stranger["status"], "not_found");
    // A continuation of the owner's session may read it.
    g.builtins
        .processes()
        .link_sessions("owner", "owner-continued");
    let cont = json_of(
        &g.call_ctx(
            "process",
            json!({"action": "log", "session_id": &id[..10]}),
            ctx("owner-continued"),
        )
        .await,
    );
    assert!(cont["output"].as_str().unwrap().contains("done"), "{cont}");
}

fn receipt(id: &str) -> Receipt {
    Receipt {
        id: id.into(),
        command: "echo".into(),
        cwd: "/".into(),
        session_id: "s".into(),
        started_at: 0,
        duration_seconds: 0.1,
        exit_code: 0,
        completion_reason: "exited".into(),
        termination_source: None,
        output: "out".into(),
    }
}

#[test]
fn receipt_retention_keeps_the_newest_64_young_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReceiptStore::new(dir.path());
    let now = SystemTime::now();
    for i in 0..70u32 {
        let id = format!("proc_{i:012x}");
        store.save(&receipt(&id)).unwrap();
        let age = if i < 5 {
            Duration::from_secs(8 * 24 * 3600)
        } else {
            Duration::from_secs(u64::from(1000 - i))
        };
        let file = std::fs::File::options()
            .write(true)
            .open(dir.path().join(format!("{id}.json")))
            .unwrap();
        file.set_modified(now - age).unwrap();
    }
    store.save(&receipt("proc_ffffffffffff")).unwrap();
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left.len(), 64);
    assert!(left.contains(&"proc_ffffffffffff.json".to_string()));
    for old in 0..5u32 {
        assert!(
            !left.contains(&format!("proc_{old:012x}.json")),
            "an 8-day-old receipt survived"
        );
    }
    // The oldest young ones went to make room.
    assert!(!left.contains(&format!("proc_{:012x}.json", 5)));
    assert!(left.contains(&format!("proc_{:012x}.json", 69)));
    // A receipt whose id does not match its file name is ignored.
    std::fs::copy(
        dir.path().join("proc_ffffffffffff.json"),
        dir.path().join("proc_aaaaaaaaaaaa.json"),
    )
    .unwrap();
    assert!(store.load("proc_aaaaaaaaaaaa", &|_| true).is_none());
    assert!(store.load("proc_ffffffffffff", &|s| s == "s").is_some());
    assert!(store.load("proc_ffffffffffff", &|s| s == "other").is_none());
}

/// Keystrokes into a shell are checked like a command, with earlier unfinished writes: a
/// command split across writes is refused whole and never reaches the shell.
#[tokio::test]
async fn keystrokes_into_a_shell_need_approval() {
    let f = Fixture::new();
    let victim = f.work().join("victim");
    std::fs::create_dir_all(victim.join("inner")).unwrap();
    let id = start_pty(&f, "s1", "bash").await;
    let first = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "data": "rm -r"}),
    )
    .await;
    assert_eq!(first["status"], "ok", "{first}");
    let second = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "data": format!("f {}\n", victim.display())}),
    )
    .await;
    assert_eq!(second["status"], "blocked", "{second}");
    assert!(
        second["error"].as_str().unwrap().contains("needs approval"),
        "{second}"
    );
    let whole = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "data": format!("\nrm -rf {}\n", victim.display())}),
    )
    .await;
    assert_eq!(whole["status"], "blocked", "{whole}");
    // Closing stdin would run the unfinished `rm -r`: refused too.
    let close = process(&f, "s1", json!({"action": "close", "session_id": id})).await;
    assert_eq!(close["status"], "blocked", "{close}");
    let fine = process(
        &f,
        "s1",
        json!({"action": "write", "session_id": id, "data": "\necho still-here\n"}),
    )
    .await;
    assert_eq!(
        fine["status"], "blocked",
        "the pending `rm -r` line ends here: {fine}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(victim.join("inner").is_dir());
    process(&f, "s1", json!({"action": "kill", "session_id": id})).await;
}
