//! `terminal` against real processes: output, `cd` that persists, the output cap, exit-code
//! notes, the environment, refusals, and the process group being killed on timeout and on stop
//! (child and grandchild both gone, checked with kill -0).

use crate::support::{Fixture, alone_with_env, ctx, json_of, read_pid};
use serde_json::json;
use troupe_tools::builtin::process_group::pid_running;

#[tokio::test]
async fn runs_a_command_and_reports_the_exit_code() {
    let f = Fixture::new();
    let (v, err) = f
        .call(
            "terminal",
            json!({"command": "echo hello; echo oops >&2; exit 3"}),
        )
        .await;
    assert!(!err);
    assert_eq!(v["output"], "hello\noops\n");
    assert_eq!(v["exit_code"], 3);
    assert!(v["error"].is_null());
    let (v, _) = f
        .call("terminal", json!({"command": "grep nothing /dev/null"}))
        .await;
    assert_eq!(v["exit_code"], 1);
    assert!(
        v["exit_code_meaning"]
            .as_str()
            .unwrap()
            .contains("Nothing matched")
    );
    // A child killed by a signal: the shell reports 128+N, hedged.
    let (v, _) = f
        .call("terminal", json!({"command": "sh -c 'kill -SEGV $$'"}))
        .await;
    assert_eq!(v["exit_code"], 139);
    let note = v["exit_code_meaning"].as_str().unwrap();
    assert!(
        note.contains("SIGSEGV") && note.contains("usually"),
        "{note}"
    );
    // The shell itself killed by a signal: a negative code, stated as fact.
    let (v, _) = f
        .call("terminal", json!({"command": "kill -KILL $$"}))
        .await;
    assert_eq!(v["exit_code"], -9);
    assert!(
        v["exit_code_meaning"]
            .as_str()
            .unwrap()
            .contains("killed by signal 9")
    );
}

#[tokio::test]
async fn cd_persists_per_session() {
    let f = Fixture::new();
    std::fs::create_dir(f.work().join("sub")).unwrap();
    let (v, _) = f
        .call("terminal", json!({"command": "cd sub && pwd"}))
        .await;
    assert_eq!(v["cwd"], f.work().join("sub").display().to_string());
    let (v, _) = f.call("terminal", json!({"command": "pwd"})).await;
    assert_eq!(
        v["output"].as_str().unwrap().trim(),
        f.work().join("sub").display().to_string()
    );
    // Another session still starts from the default directory.
    let other = f
        .call_ctx("terminal", json!({"command": "pwd"}), ctx("s2"))
        .await;
    assert_eq!(
        json_of(&other)["output"].as_str().unwrap().trim(),
        f.work().display().to_string()
    );
    // A one-off workdir does not move the session.
    let (v, _) = f
        .call("terminal", json!({"command": "pwd", "workdir": "/"}))
        .await;
    assert_eq!(v["output"], "/\n");
    let (v, _) = f.call("terminal", json!({"command": "pwd"})).await;
    assert!(v["output"].as_str().unwrap().ends_with("sub\n"));
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let f = Fixture::new();
    let (v, _) = f.call("terminal", json!({"command": "seq 1 200000"})).await;
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("1\n2\n3\n"));
    assert!(out.trim_end().ends_with("199999\n200000"));
    assert!(out.contains("characters left out of the middle"));
    assert!(out.chars().count() < 50_200);
    assert!(v["output_total_chars"].as_u64().unwrap() > 1_000_000);
}

#[tokio::test]
async fn troupe_credentials_are_not_passed_on() {
    // troupe's own environment holds the keys: set in a copy of this binary, not in this one.
    if !alone_with_env(
        concat!(module_path!(), "::troupe_credentials_are_not_passed_on"),
        &[
            ("OPENAI_API_KEY", "sk-test-not-for-children-0000"),
            ("TROUPE_API_KEY", "troupe-secret"),
        ],
    ) {
        return;
    }
    let f = Fixture::new();
    let (v, _) = f
        .call(
            "terminal",
            json!({"command": "echo \"[$OPENAI_API_KEY][$TROUPE_API_KEY][$HOME]\""}),
        )
        .await;
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("[][]["), "{out}");
}

#[tokio::test]
async fn refusals() {
    let f = Fixture::new();
    let (v, err) = f.call("terminal", json!({"command": "rm -rf /"})).await;
    assert!(err && v["status"] == "blocked" && v["error"].as_str().unwrap().contains("never run"));
    let (v, err) = f
        .call("terminal", json!({"command": "git push --force"}))
        .await;
    assert!(err && v["error"].as_str().unwrap().contains("approval"));
    let approved = f
        .call_ctx(
            "terminal",
            json!({"command": "touch x && rm -r x; echo done"}),
            ctx("s1").with_approval(true),
        )
        .await;
    let v = json_of(&approved);
    assert_eq!(v["output"], "done\n");
    assert!(v["approval"].as_str().unwrap().contains("approved"));
    let (v, err) = f
        .call("terminal", json!({"command": "sleep 1", "timeout": 601}))
        .await;
    assert!(err && v["error"].as_str().unwrap().contains("background=true"));
    let (v, err) = f
        .call("terminal", json!({"command": "ls", "workdir": "/tmp; id"}))
        .await;
    assert!(err && v["status"] == "blocked");
    let (_, err) = f.call("terminal", json!({"code": "print(1)"})).await;
    assert!(err);
}

/// A command that leaves a child and a grandchild sleeping, writing their pids.
fn sleepers(dir: &std::path::Path) -> String {
    format!(
        "sleep 300 & echo $! > {d}/child.pid; sh -c 'sleep 300 & echo $! > {d}/grand.pid; wait' & wait",
        d = dir.display()
    )
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let f = Fixture::new();
    let (v, _) = f
        .call(
            "terminal",
            json!({"command": sleepers(&f.work()), "timeout": 1}),
        )
        .await;
    assert_eq!(v["exit_code"], 124);
    assert!(v["output"].as_str().unwrap().contains("timed out after 1s"));
    let child = read_pid(&f.work().join("child.pid")).await;
    let grand = read_pid(&f.work().join("grand.pid")).await;
    assert!(!pid_running(child), "child {child} survived");
    assert!(!pid_running(grand), "grandchild {grand} survived");
}

#[tokio::test]
async fn a_stop_kills_the_whole_group() {
    let f = std::sync::Arc::new(Fixture::new());
    let cancel = tokio_util::sync::CancellationToken::new();
    let c = troupe_tools::CallContext::new("s1", "call-9", cancel.clone());
    let f2 = f.clone();
    let run = tokio::spawn(async move {
        json_of(
            &f2.call_ctx("terminal", json!({"command": sleepers(&f2.work())}), c)
                .await,
        )
    });
    let child = read_pid(&f.work().join("child.pid")).await;
    let grand = read_pid(&f.work().join("grand.pid")).await;
    assert!(pid_running(child) && pid_running(grand));
    cancel.cancel();
    let v = run.await.unwrap();
    assert_eq!(v["exit_code"], 130);
    assert!(v["output"].as_str().unwrap().contains("interrupted"));
    assert!(!pid_running(child), "child {child} survived");
    assert!(!pid_running(grand), "grandchild {grand} survived");
}

#[tokio::test]
async fn leftovers_of_a_finished_command_are_stopped() {
    let f = Fixture::new();
    let cmd = format!(
        "(sleep 300 >/dev/null 2>&1 & echo $! > {}/left.pid); echo started",
        f.work().display()
    );
    let (v, _) = f.call("terminal", json!({"command": cmd})).await;
    assert_eq!(v["output"], "started\n");
    assert!(v["hint"].as_str().unwrap().contains("background=true"));
    let left = read_pid(&f.work().join("left.pid")).await;
    assert!(!pid_running(left));
}

/// A command that starts a process in a session of its own (`setsid`) and one through a
/// double fork, writing their pids; neither is in the command's process group.
fn escapees(dir: &std::path::Path) -> String {
    format!(
        "setsid sh -c 'echo $$ > {d}/setsid.pid; exec sleep 300' >/dev/null 2>&1 < /dev/null & \
         sh -c '(sleep 300 & echo $! > {d}/double.pid) &' ; \
         while [ ! -s {d}/setsid.pid ] || [ ! -s {d}/double.pid ]; do sleep 0.01; done; echo started",
        d = dir.display()
    )
}

#[tokio::test]
async fn processes_that_left_the_group_end_with_the_command() {
    let f = Fixture::new();
    let (v, _) = f
        .call("terminal", json!({"command": escapees(&f.work())}))
        .await;
    assert!(v["output"].as_str().unwrap().contains("started"), "{v}");
    let escaped = read_pid(&f.work().join("setsid.pid")).await;
    let double = read_pid(&f.work().join("double.pid")).await;
    assert!(
        !pid_running(escaped),
        "the setsid process {escaped} survived"
    );
    assert!(
        !pid_running(double),
        "the double-forked process {double} survived"
    );
}

#[tokio::test]
async fn a_stop_ends_processes_that_left_the_group() {
    let f = std::sync::Arc::new(Fixture::new());
    let cancel = tokio_util::sync::CancellationToken::new();
    let c = troupe_tools::CallContext::new("s1", "call-10", cancel.clone());
    let f2 = f.clone();
    let command = format!("{}; sleep 300", escapees(&f.work()));
    let run = tokio::spawn(async move {
        json_of(
            &f2.call_ctx("terminal", json!({"command": command}), c)
                .await,
        )
    });
    let escaped = read_pid(&f.work().join("setsid.pid")).await;
    let double = read_pid(&f.work().join("double.pid")).await;
    assert!(pid_running(escaped) && pid_running(double));
    cancel.cancel();
    let v = run.await.unwrap();
    assert_eq!(v["exit_code"], 130, "{v}");
    assert!(
        !pid_running(escaped),
        "the setsid process {escaped} survived"
    );
    assert!(
        !pid_running(double),
        "the double-forked process {double} survived"
    );
}

/// Obfuscated destructive commands as a model sends them (split variables, substitutions,
/// escapes, base64 through eval, busybox): none runs without approval.
#[tokio::test]
async fn obfuscated_commands_are_not_run_without_approval() {
    let f = Fixture::new();
    let victim = f.work().join("victim");
    let home = f.work().join("fakehome");
    std::fs::create_dir_all(&home).unwrap();
    for cmd in [
        format!("a=r;b=m;$a$b -rf {}", victim.display()),
        format!("\"$(printf rm)\" -rf {}", victim.display()),
        format!("$'\\x72\\x6d' -rf {}", victim.display()),
        format!(
            "eval \"$(echo 'rm -rf {}' | base64 | base64 -d)\"",
            victim.display()
        ),
        format!("busybox rm -rf {}", victim.display()),
        format!(
            "python3 -c \"import shutil; shutil.rmtree('{}')\"",
            victim.display()
        ),
        format!("H={}; F=.bash; echo x >> $H/${{F}}rc", home.display()),
    ] {
        std::fs::create_dir_all(victim.join("inner")).unwrap();
        let (v, err) = f.call("terminal", json!({"command": cmd})).await;
        assert!(err && v["status"] == "blocked", "{cmd}: {v}");
        let error = v["error"].as_str().unwrap();
        assert!(
            error.contains("approval") || error.contains("never run"),
            "{cmd}: {error}"
        );
        assert!(victim.join("inner").exists(), "{cmd} deleted the directory");
        assert!(!home.join(".bashrc").exists(), "{cmd} wrote the rc file");
    }
    let (v, _) = f
        .call("terminal", json!({"command": "X=rm; $X -rf nothing-here"}))
        .await;
    assert!(
        v["error"].as_str().unwrap().contains("cannot be checked")
            || v["error"].as_str().unwrap().contains("recursively"),
        "{v}"
    );
}
