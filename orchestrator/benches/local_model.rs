//! Fifteen small agent tasks against a real local model (Qwen2.5-Coder-1.5B under llama.cpp,
//! `scripts/llm/`) through `troupe chat`, in each tool-call mode (`native`, `text`, `auto`):
//! the success rate and the median turn time per mode, as a Markdown table for
//! docs/benchmarks.md. Opt-in, not a CI bench:
//!
//! ```text
//! TROUPE_LLM_TESTS=1 cargo bench -p troupe --profile dev --bench local_model
//! TROUPE_LLM_TESTS=1 TROUPE_BENCH_MODES=auto TROUPE_BENCH_TASKS=add,read cargo bench ...
//! ```
//!
//! `TROUPE_LLM_URL` points at a running server instead of starting `scripts/llm/serve.py`. The
//! model's time dwarfs troupe's, so the dev profile (no release build of the workspace)
//! measures the same thing. The MCP tasks need `scripts/install-test-deps.sh`
//! (server-everything). A run that takes longer than `TROUPE_BENCH_TIMEOUT` seconds (default
//! 420) counts as a failure. Run the modes that share a prompt (`native`, `auto`) one after
//! the other: the server then keeps the tool list's prefix cached between tasks. Each run's
//! `--json` events are kept in `target/tmp/local_model/MODE-TASK.jsonl`.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a bench program: it reports on the terminal and stops on broken setup"
)]

#[path = "../tests/integration/support/local_model.rs"]
mod local_model;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use local_model::{LocalModel, OPT_IN_VAR, everything_server};
use serde_json::Value;

/// One task: what to ask, what to set up first, how to tell it was done: from the outcome
/// (the answer holds what only the files or the tool could tell, the file written holds the
/// right text, the right tool ran), never from the model saying it is done.
struct Task {
    name: &'static str,
    prompt: &'static str,
    files: &'static [(&'static str, &'static str)],
    check: fn(&Outcome) -> bool,
}

/// What a run left behind, for the task's check.
struct Outcome<'a> {
    dir: &'a Path,
    answer: &'a str,
    events: &'a [Value],
}

impl Outcome<'_> {
    fn says(&self, wanted: &str) -> bool {
        contains(self.answer, wanted)
    }

    fn file_has(&self, name: &str, wanted: &str) -> bool {
        std::fs::read_to_string(self.dir.join(name)).is_ok_and(|t| contains(&t, wanted))
    }

    /// Whether `tool` ran and succeeded, called directly or through `tool_call`.
    fn ran(&self, tool: &str) -> bool {
        self.events.iter().any(|e| {
            e["type"] == "tool_call_finished" && e["underlying_tool"] == tool && e["status"] == "ok"
        })
    }

    /// Whether the answer holds `n` as a whole number (`7`, not the 7 inside `17`).
    fn says_number(&self, n: usize) -> bool {
        self.answer
            .replace(',', "")
            .split(|c: char| !c.is_ascii_digit())
            .any(|w| w == n.to_string())
    }

    fn ran_nothing(&self) -> bool {
        !self.events.iter().any(|e| e["type"] == "tool_call_started")
    }
}

fn contains(text: &str, wanted: &str) -> bool {
    text.replace(',', "")
        .to_lowercase()
        .contains(&wanted.to_lowercase())
}

/// 137 numbered log lines: a count the model can only get by reading the file.
const EVENTS_LOG_LINES: usize = 137;
const EVENTS_LOG: &str = include_str!("local_model_events.log");

const TASKS: &[Task] = &[
    Task {
        name: "add",
        prompt: "Add 1234 and 5678 with the MCP tool that sums two numbers. It is not loaded yet: find it with tool_search, then run it through tool_call. Reply with the sum.",
        files: &[],
        check: |o| o.ran("mcp_everything_get-sum") && o.says("6912"),
    },
    Task {
        name: "echo",
        prompt: "Use the MCP echo tool (find it with tool_search, run it with tool_call) to echo the message ping-77, and reply with what it returned.",
        files: &[],
        check: |o| o.ran("mcp_everything_echo") && o.says("ping-77"),
    },
    Task {
        name: "read",
        prompt: "What is the secret code written in notes.txt?",
        files: &[(
            "notes.txt",
            "Meeting moved to Friday.\nThe secret code is PLUM-42.\n",
        )],
        check: |o| o.says("PLUM-42"),
    },
    Task {
        name: "json",
        prompt: "Which port does config.json set? Reply with the number.",
        files: &[(
            "config.json",
            "{\"name\": \"web\", \"port\": 8123, \"debug\": false}\n",
        )],
        check: |o| o.says("8123"),
    },
    Task {
        name: "list",
        prompt: "List the files in the folder data.",
        files: &[
            ("data/alpha.txt", "a\n"),
            ("data/beta.txt", "b\n"),
            ("data/gamma.txt", "c\n"),
        ],
        check: |o| ["alpha", "beta", "gamma"].iter().all(|n| o.says(n)),
    },
    Task {
        name: "write",
        prompt: "Create a file named out.txt containing exactly: hello troupe",
        files: &[],
        check: |o| o.file_has("out.txt", "hello troupe"),
    },
    Task {
        name: "read_then_write",
        prompt: "Read name.txt, then write a file greeting.txt that says Hello, followed by that name.",
        files: &[("name.txt", "Ada\n")],
        check: |o| o.file_has("greeting.txt", "hello") && o.file_has("greeting.txt", "ada"),
    },
    Task {
        name: "search",
        prompt: "Which file in the src folder mentions the word banana? Reply with its name.",
        files: &[
            ("src/a.rs", "fn apple() {}\n"),
            ("src/b.rs", "// banana bread\nfn bake() {}\n"),
            ("src/c.rs", "fn cherry() {}\n"),
        ],
        check: |o| o.says("b.rs"),
    },
    Task {
        name: "two_files",
        prompt: "Read first.txt and second.txt and reply with the two words they hold.",
        files: &[("first.txt", "lantern\n"), ("second.txt", "harbor\n")],
        check: |o| o.says("lantern") && o.says("harbor"),
    },
    // Five tasks whose answer only a tool can give: a count of lines or files, a file found by
    // name, and two MCP tools named by what they do, not by `tool_search` (a model that says
    // "no tool found" without searching fails them).
    Task {
        name: "count_lines",
        prompt: "How many lines does events.log have? Reply with the number.",
        files: &[("events.log", EVENTS_LOG)],
        check: |o| o.says_number(EVENTS_LOG_LINES),
    },
    Task {
        name: "count_files",
        prompt: "How many .log files are in the logs folder? Reply with the number.",
        files: &[
            ("logs/api.log", "x\n"),
            ("logs/auth.log", "x\n"),
            ("logs/cache.log", "x\n"),
            ("logs/db.log", "x\n"),
            ("logs/edge.log", "x\n"),
            ("logs/feed.log", "x\n"),
            ("logs/gate.log", "x\n"),
            ("logs/readme.txt", "these are logs\n"),
            ("logs/notes.md", "# notes\n"),
        ],
        check: |o| o.says_number(7),
    },
    Task {
        name: "find_file",
        prompt: "Somewhere under the docs folder there is a file named needle.md. What word is written on its first line?",
        files: &[
            ("docs/intro.md", "welcome\n"),
            ("docs/guide/setup.md", "install\n"),
            ("docs/guide/deep/needle.md", "marigold\nthe rest\n"),
        ],
        check: |o| o.says("marigold"),
    },
    Task {
        name: "mcp_sum",
        prompt: "Add 48213 and 91907 with the MCP server's tool for sums, and reply with its result.",
        files: &[],
        check: |o| o.ran("mcp_everything_get-sum") && o.says("140120"),
    },
    Task {
        name: "mcp_env",
        prompt: "What value does the environment variable BENCH_MARKER have inside the MCP server? Reply with the value.",
        files: &[],
        check: |o| o.ran("mcp_everything_get-env") && o.says(local_model::BENCH_MARKER),
    },
    Task {
        name: "no_tool",
        prompt: "What is the capital of France? Answer in one word.",
        files: &[],
        check: |o| o.ran_nothing() && o.says("paris"),
    },
];

struct Measured {
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
    home: &Path,
    timeout: Duration,
) -> Measured {
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
        model.troupe_yaml(mode, everything),
    )
    .unwrap();
    let started = Instant::now();
    let mut child = Command::new(troupe_binary())
        .current_dir(dir.path())
        .env("TROUPE_HOME", home)
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
    let output = reader.join().unwrap_or_default();
    // Every run's events stay on disk, so a failure can be read after the table is printed.
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("local_model");
    if std::fs::create_dir_all(&kept).is_ok() {
        let _ = std::fs::write(kept.join(format!("{mode}-{}.jsonl", task.name)), &output);
    }
    let lines: Vec<Value> = output
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let count = |kind: &str| lines.iter().filter(|l| l["type"] == kind).count();
    let last = lines.last().cloned().unwrap_or(Value::Null);
    let answer = last["text"].as_str().unwrap_or_default();
    let ok = !timed_out
        && last["type"] == "final"
        && last["status"] == "completed"
        && (task.check)(&Outcome {
            dir: dir.path(),
            answer,
            events: &lines,
        });
    Measured {
        ok,
        seconds,
        requests: count("model_request"),
        retries: count("model_retry"),
        switched: count("tool_calls_switched") > 0,
    }
}

/// The troupe binary to measure: `TROUPE_BENCH_BIN` when set (to compare a saved build with
/// the current one while the workspace is rebuilt), else the one cargo built for this bench.
fn troupe_binary() -> std::path::PathBuf {
    std::env::var_os("TROUPE_BENCH_BIN")
        .filter(|b| !b.is_empty())
        .map_or_else(|| env!("CARGO_BIN_EXE_troupe").into(), Into::into)
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
    let everything = everything_server();
    assert!(
        everything.exists(),
        "run scripts/install-test-deps.sh first"
    );
    let modes: Vec<String> = std::env::var("TROUPE_BENCH_MODES")
        .unwrap_or_else(|_| "native,auto,text".into())
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
        // One troupe home per mode, shared by its tasks, as one user's runs share theirs: what
        // `auto` learns about the server in one task holds for the next.
        let home = tempfile::tempdir().unwrap();
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
            let outcome = run(&model, mode, task, &everything, home.path(), timeout);
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
