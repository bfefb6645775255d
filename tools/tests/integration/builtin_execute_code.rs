//! `execute_code` with a real python3 and a real Unix socket: a script calling three tools in a
//! loop through a test `Dispatch`, each limit being hit (time, stdout, stderr, tool calls), a
//! stop, a script that looks for secrets in its environment, and calls that must be refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{Fixture, alone_with_env, json_of, read_pid};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use troupe_tools::builtin::process_group::pid_running;
use troupe_tools::{CallContext, Dispatch, ToolHandler, ToolResult};

/// Dispatches to the real built-in handlers and records what was called.
struct TestDispatch {
    handlers: HashMap<String, Arc<dyn ToolHandler>>,
    calls: Mutex<Vec<(String, String)>>,
}

impl Dispatch for TestDispatch {
    fn dispatch(
        &self,
        tool: String,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        self.calls
            .lock()
            .unwrap()
            .push((tool.clone(), ctx.call_id.clone()));
        match self.handlers.get(&tool) {
            Some(h) => h.call(arguments, ctx),
            None => {
                async move { ToolResult::error(format!("no tool {tool} in this view")) }.boxed()
            }
        }
    }
}

fn dispatch_for(f: &Fixture) -> Arc<TestDispatch> {
    let handlers = f
        .tools
        .iter()
        .filter_map(|t| Some((t.name.clone(), t.handler.clone()?)))
        .collect();
    Arc::new(TestDispatch {
        handlers,
        calls: Mutex::new(vec![]),
    })
}

async fn run(f: &Fixture, code: &str, dispatch: Option<Arc<TestDispatch>>) -> (Value, bool) {
    let mut ctx = CallContext::new("s1", "exec-1", tokio_util::sync::CancellationToken::new());
    if let Some(d) = dispatch {
        ctx = ctx.with_dispatch(d);
    }
    let r = f.call_ctx("execute_code", json!({"code": code}), ctx).await;
    (json_of(&r), r.is_error)
}

#[tokio::test]
async fn a_script_calls_three_tools_in_a_loop() {
    let f = Fixture::new();
    let d = dispatch_for(&f);
    let code = r#"
from troupe_tools import write_file, read_file, search_files
found = []
for i in range(3):
    w = write_file(f"out/n{i}.txt", f"value {i}\n")
    assert "error" not in w, w
    r = read_file(f"out/n{i}.txt")
    s = search_files("value", path="out")
    found.append((r["content"].strip(), s["total_count"]))
print(found)
"#;
    let (v, err) = run(&f, code, Some(d.clone())).await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "success");
    assert_eq!(v["tool_calls_made"], 9);
    assert_eq!(
        v["output"],
        "[('1|value 0', 1), ('1|value 1', 2), ('1|value 2', 3)]\n"
    );
    let calls = d.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 9);
    assert_eq!(
        calls[0],
        ("write_file".to_string(), "exec-1/script-1".to_string())
    );
    assert!(v["duration_seconds"].as_f64().is_some());
}

#[tokio::test]
async fn the_call_after_the_budget_gets_an_error() {
    let f = Fixture::with(|c| c.code.max_tool_calls = 5);
    let code = r#"
from troupe_tools import terminal
results = [terminal("echo hi") for _ in range(8)]
ok = sum(1 for r in results if r.get("exit_code") == 0)
refused = [r["error"] for r in results if "error" in r and r["error"]]
print(ok, len(refused), refused[0])
"#;
    let (v, _) = run(&f, code, Some(dispatch_for(&f))).await;
    assert_eq!(v["tool_calls_made"], 5);
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .starts_with("5 3 Tool call limit reached (5)"),
        "{v}"
    );
}

#[tokio::test]
async fn a_script_past_its_time_is_killed_with_its_children() {
    let f = Fixture::with(|c| c.code.timeout = Duration::from_secs(1));
    let pid_file = f.work().join("kid.pid");
    let code = format!(
        "import subprocess, time\np = subprocess.Popen(['sleep', '300'])\nopen({:?}, 'w').write(str(p.pid))\ntime.sleep(300)\n",
        pid_file.display().to_string()
    );
    let (v, err) = run(&f, &code, None).await;
    assert!(err);
    assert_eq!(v["status"], "timeout");
    assert!(v["error"].as_str().unwrap().contains("longer than 1s"));
    let kid = read_pid(&pid_file).await;
    assert!(!pid_running(kid), "the script's child {kid} survived");
}

#[tokio::test]
async fn stdout_and_stderr_keep_head_and_tail() {
    let f = Fixture::with(|c| {
        c.code.max_stdout_bytes = 1000;
        c.code.max_stderr_bytes = 500;
    });
    let (v, _) = run(&f, "print('S' + 'x' * 80000 + 'E')", None).await;
    let out = v["output"].as_str().unwrap();
    assert!(
        out.starts_with('S')
            && out.trim_end().ends_with('E')
            && out.contains("cut from the middle")
    );
    assert!(out.len() < 1200);
    assert_eq!(v["stdout_truncated"], true);
    let (v, err) = run(
        &f,
        "import sys\nsys.stderr.write('A' + 'y' * 10000 + 'Z')\nsys.exit(3)",
        None,
    )
    .await;
    assert!(err);
    assert_eq!(v["status"], "error");
    let out = v["output"].as_str().unwrap();
    let stderr = out.split("--- stderr ---\n").nth(1).unwrap();
    assert!(
        stderr.starts_with('A') && stderr.ends_with('Z') && stderr.len() < 700,
        "{}",
        stderr.len()
    );
}

#[tokio::test]
async fn secrets_are_not_in_the_script_environment() {
    // troupe's own environment holds the secrets: set in a copy of this binary, not in this one.
    if !alone_with_env(
        concat!(
            module_path!(),
            "::secrets_are_not_in_the_script_environment"
        ),
        &[
            ("MY_SERVICE_TOKEN", "tok-should-not-leak"),
            ("OPENAI_API_KEY", "sk-should-not-leak-either"),
            ("DB_PASSWORD", "hunter2"),
        ],
    ) {
        return;
    }
    let f = Fixture::new();
    let code = "import os\nprint([os.environ.get(k) for k in ('MY_SERVICE_TOKEN', 'OPENAI_API_KEY', 'DB_PASSWORD')], 'PATH' in os.environ)";
    let (v, _) = run(&f, code, None).await;
    assert_eq!(v["output"], "[None, None, None] True\n");
    let passthrough = Fixture::with(|c| c.code.env_passthrough = vec!["MY_SERVICE_TOKEN".into()]);
    let (v, _) = run(
        &passthrough,
        "import os\nprint(os.environ.get('MY_SERVICE_TOKEN') == 'tok-should-not-leak')\nprint(os.environ.get('MY_SERVICE_TOKEN'))",
        None,
    )
    .await;
    // The script gets the passed-through value; printed back, it is masked like every secret
    // troupe holds.
    assert_eq!(v["output"], "True\n[redacted: one of troupe's secrets]\n");
}

#[tokio::test]
async fn a_stop_interrupts_the_script() {
    let f = Arc::new(Fixture::new());
    let flag = f.work().join("started.pid");
    let code = format!(
        "import os, time\nopen({:?}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n",
        flag.display().to_string()
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let ctx = CallContext::new("s1", "exec-2", cancel.clone());
    let f2 = f.clone();
    let task = tokio::spawn(async move {
        json_of(
            &f2.call_ctx("execute_code", json!({"code": code}), ctx)
                .await,
        )
    });
    let pid = read_pid(&flag).await;
    cancel.cancel();
    let v = task.await.unwrap();
    assert_eq!(v["status"], "interrupted");
    assert!(v["output"].as_str().unwrap().contains("interrupted"));
    assert!(!pid_running(pid));
}

#[tokio::test]
async fn refused_calls_and_bad_input() {
    let f = Fixture::new();
    let code = r#"
from troupe_tools import _call, read_file, terminal
print(_call("execute_code", {"code": "1"})["error"][:40])
print(_call("tool_call", {"name": "delegate_task"})["error"][:40])
r = terminal("echo bg", timeout=5)
print(r["output"].strip())
"#;
    let (v, _) = run(&f, code, Some(dispatch_for(&f))).await;
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("'execute_code' cannot be called"), "{out}");
    assert!(out.contains("'delegate_task' cannot be called"), "{out}");
    assert!(out.ends_with("bg\n"));
    assert_eq!(v["tool_calls_made"], 1);
    // Without a dispatcher, tool calls are refused with a reason.
    let (v, _) = run(
        &f,
        "from troupe_tools import read_file\nprint(read_file('x')['error'][:40])",
        None,
    )
    .await;
    assert!(
        v["output"].as_str().unwrap().contains("no dispatcher")
            || v["output"].as_str().unwrap().contains("not available"),
        "{v}"
    );
    let (v, err) = run(&f, "raise RuntimeError('boom')", None).await;
    assert!(err && v["status"] == "error");
    assert!(v["error"].as_str().unwrap().contains("RuntimeError: boom"));
    let r = f
        .call_ctx(
            "execute_code",
            json!({"command": "ls"}),
            crate::support::ctx("s1"),
        )
        .await;
    assert!(
        r.is_error
            && json_of(&r)["error"]
                .as_str()
                .unwrap()
                .contains("terminal(command")
    );
    let r = f
        .call_ctx(
            "execute_code",
            json!({"code": 5}),
            crate::support::ctx("s1"),
        )
        .await;
    assert!(r.is_error);
}

#[tokio::test]
async fn project_mode_runs_in_the_session_directory_and_strict_mode_in_scratch() {
    let f = Fixture::new();
    let (v, _) = run(&f, "import os\nprint(os.getcwd())", None).await;
    assert_eq!(
        v["output"].as_str().unwrap().trim(),
        f.work().display().to_string()
    );
    let strict = Fixture::with(|c| c.code.mode = troupe_tools::builtin::CodeMode::Strict);
    let (v, _) = run(&strict, "import os\nprint(os.getcwd())", None).await;
    let dir = v["output"].as_str().unwrap().trim().to_string();
    assert!(dir.contains("troupe_code_"), "{dir}");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "the scratch directory was left behind"
    );
}

#[tokio::test]
async fn a_child_holding_stdout_open_does_not_lose_the_output() {
    let f = Fixture::new();
    let pid_file = f.work().join("holder.pid");
    // The child inherits stdout and outlives the script, in a session of its own.
    let code = format!(
        "import subprocess\nprint('before the child', flush=True)\np = subprocess.Popen(['sleep', '300'], start_new_session=True)\nopen({:?}, 'w').write(str(p.pid))\nprint('after the child', flush=True)\n",
        pid_file.display().to_string()
    );
    let (v, err) = run(&f, &code, None).await;
    let output = v["output"].as_str().unwrap();
    assert!(
        output.contains("before the child") && output.contains("after the child"),
        "{v}"
    );
    assert!(
        err,
        "a script that left a process holding its output is not a success: {v}"
    );
    assert_eq!(v["status"], "incomplete", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("left processes running")
            || v["error"]
                .as_str()
                .unwrap()
                .contains("kept its output open"),
        "{v}"
    );
    let holder = read_pid(&pid_file).await;
    assert!(!pid_running(holder), "the child {holder} survived");
}
