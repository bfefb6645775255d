//! Ten small agent tasks against a real local model (Qwen2.5-Coder-1.5B under llama.cpp,
//! `scripts/llm/`) through `troupe chat`, in each tool-call mode (`native`, `text`, `auto`):
//! the success rate and the median turn time per mode, as a Markdown table for
//! docs/benchmarks.md. Opt-in, not a CI bench:
//!
//! ```text
//! TROUPE_LLM_TESTS=1 cargo bench -p troupe --bench local_model
//! TROUPE_LLM_TESTS=1 TROUPE_BENCH_MODES=auto TROUPE_BENCH_TASKS=add,read cargo bench ...
//! ```
//!
//! `TROUPE_LLM_URL` points at a running server instead of starting `scripts/llm/serve.py`. The
//! MCP tasks need `scripts/install-test-deps.sh` (server-everything). A run that takes longer
//! than `TROUPE_BENCH_TIMEOUT` seconds (default 420) counts as a failure.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a bench program: it reports on the terminal and stops on broken setup"
)]

#[path = "../tests/support/local_model.rs"]
mod local_model;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use local_model::{LocalModel, OPT_IN_VAR};
use serde_json::Value;

/// One task: what to ask, what to set up first, how to tell it was done.
struct Task {
    name: &'static str,
    prompt: &'static str,
    files: &'static [(&'static str, &'static str)],
    check: fn(&Path, &str) -> bool,
}

fn contains(text: &str, wanted: &str) -> bool {
    text.replace(',', "")
        .to_lowercase()
        .contains(&wanted.to_lowercase())
}

fn file_has(dir: &Path, name: &str, wanted: &str) -> bool {
    std::fs::read_to_string(dir.join(name)).is_ok_and(|t| contains(&t, wanted))
}

const TASKS: &[Task] = &[
    Task {
        name: "add",
        prompt: "Add 1234 and 5678 with the MCP tool that sums two numbers. It is not loaded yet: find it with tool_search, then run it through tool_call. Reply with the sum.",
        files: &[],
        check: |_, answer| contains(answer, "6912"),
    },
    Task {
        name: "echo",
        prompt: "Use the MCP echo tool (find it with tool_search, run it with tool_call) to echo the message ping-77, and reply with what it returned.",
        files: &[],
        check: |_, answer| contains(answer, "ping-77"),
    },
    Task {
        name: "read",
        prompt: "What is the secret code written in notes.txt?",
        files: &[(
            "notes.txt",
            "Meeting moved to Friday.\nThe secret code is PLUM-42.\n",
        )],
        check: |_, answer| contains(answer, "PLUM-42"),
    },
    Task {
        name: "json",
        prompt: "Which port does config.json set? Reply with the number.",
        files: &[(
            "config.json",
            "{\"name\": \"web\", \"port\": 8123, \"debug\": false}\n",
        )],
        check: |_, answer| contains(answer, "8123"),
    },
    Task {
        name: "list",
        prompt: "List the files in the folder data.",
        files: &[
            ("data/alpha.txt", "a\n"),
            ("data/beta.txt", "b\n"),
            ("data/gamma.txt", "c\n"),
        ],
        check: |_, answer| {
            ["alpha", "beta", "gamma"]
                .iter()
                .all(|n| contains(answer, n))
        },
    },
    Task {
        name: "write",
        prompt: "Create a file named out.txt containing exactly: hello troupe",
        files: &[],
        check: |dir, _| file_has(dir, "out.txt", "hello troupe"),
    },
    Task {
        name: "read_then_write",
        prompt: "Read name.txt, then write a file greeting.txt that says Hello, followed by that name.",
        files: &[("name.txt", "Ada\n")],
        check: |dir, _| {
            file_has(dir, "greeting.txt", "hello") && file_has(dir, "greeting.txt", "ada")
        },
    },
    Task {
        name: "search",
        prompt: "Which file in the src folder mentions the word banana? Reply with its name.",
        files: &[
            ("src/a.rs", "fn apple() {}\n"),
            ("src/b.rs", "// banana bread\nfn bake() {}\n"),
            ("src/c.rs", "fn cherry() {}\n"),
        ],
        check: |_, answer| contains(answer, "b.rs"),
    },
    Task {
        name: "two_files",
        prompt: "Read first.txt and second.txt and reply with the two words they hold.",
        files: &[("first.txt", "lantern\n"), ("second.txt", "harbor\n")],
        check: |_, answer| contains(answer, "lantern") && contains(answer, "harbor"),
    },
    Task {
        name: "no_tool",
        prompt: "What is the capital of France? Answer in one word.",
        files: &[],
        check: |_, answer| contains(answer, "paris"),
    },
];

struct Outcome {
    ok: bool,
    seconds: f64,
    requests: usize,
    retries: usize,
    switched: bool,
}

fn run(
    model: &LocalModel,
    mode: &str,
    task: &Task,
    everything: &Path,
    timeout: Duration,
) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in task.files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }
    std::fs::write(
        dir.path().join("troupe.yaml"),
        format!(
            "model:\n  base_url: {}\n  model: qwen2.5-coder-1.5b-instruct\n  tool_calls: {mode}\n  request_fields: {{temperature: 0}}\nmcp_servers:\n  everything:\n    command: {}\n    args: [stdio]\ntools:\n  tool_search:\n    enabled: on\n",
            model.url,
            everything.display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .args(["chat", "--json", "--max-iterations", "8", "-q", task.prompt])
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let timed_out = loop {
        if child.try_wait().ok().flatten().is_some() {
            break false;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break true;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let seconds = started.elapsed().as_secs_f64();
    let lines: Vec<Value> = reader
        .join()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let count = |kind: &str| lines.iter().filter(|l| l["type"] == kind).count();
    let last = lines.last().cloned().unwrap_or(Value::Null);
    let answer = last["text"].as_str().unwrap_or_default();
    let ok = !timed_out
        && last["type"] == "final"
        && last["status"] == "completed"
        && (task.check)(dir.path(), answer);
    Outcome {
        ok,
        seconds,
        requests: count("model_request"),
        retries: count("model_retry"),
        switched: count("tool_calls_switched") > 0,
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn main() {
    if std::env::var(OPT_IN_VAR).as_deref() != Ok("1") {
        eprintln!(
            "local_model bench: skipped; set {OPT_IN_VAR}=1 to run it against the real local model (scripts/llm/)"
        );
        return;
    }
    let everything = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp-servers/node_modules/.bin/mcp-server-everything");
    assert!(
        everything.exists(),
        "run scripts/install-test-deps.sh first"
    );
    let modes: Vec<String> = std::env::var("TROUPE_BENCH_MODES")
        .unwrap_or_else(|_| "native,text,auto".into())
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    let only: Option<Vec<String>> = std::env::var("TROUPE_BENCH_TASKS")
        .ok()
        .map(|t| t.split(',').map(|n| n.trim().to_string()).collect());
    let timeout = Duration::from_secs(
        std::env::var("TROUPE_BENCH_TIMEOUT")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(420),
    );
    let model = LocalModel::start().unwrap();
    eprintln!("model server at {}", model.url);
    let mut summary = Vec::new();
    for mode in &modes {
        let mut times = Vec::new();
        let mut passed = 0;
        let mut total = 0;
        for task in TASKS {
            if only
                .as_ref()
                .is_some_and(|o| !o.iter().any(|n| n == task.name))
            {
                continue;
            }
            let outcome = run(&model, mode, task, &everything, timeout);
            total += 1;
            if outcome.ok {
                passed += 1;
            }
            times.push(outcome.seconds);
            println!(
                "| {mode} | {} | {} | {:.1} | {} | {} | {} |",
                task.name,
                if outcome.ok { "ok" } else { "FAILED" },
                outcome.seconds,
                outcome.requests,
                outcome.retries,
                if outcome.switched { "yes" } else { "no" }
            );
        }
        summary.push(format!(
            "| {mode} | {passed}/{total} | {:.1} |",
            median(&mut times)
        ));
    }
    println!("\n| mode | tasks done | median turn time (s) |\n|---|---|---|");
    for line in summary {
        println!("{line}");
    }
}
