//! A real local model for the opt-in tests and the bench: llama.cpp serving
//! Qwen2.5-Coder-1.5B through `scripts/llm/serve.py` (installed by `scripts/llm/setup.sh`), or
//! the server already running at `TROUPE_LLM_URL`. Not part of CI: too slow on small machines.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The variable that turns the real-model tests on.
pub(crate) const OPT_IN_VAR: &str = "TROUPE_LLM_TESTS";

/// A model server; the one this started stops when dropped.
pub(crate) struct LocalModel {
    /// The OpenAI-compatible base URL (`http://127.0.0.1:PORT/v1`).
    pub(crate) url: String,
    child: Option<Child>,
}

impl LocalModel {
    /// `TROUPE_LLM_URL` when set; else starts `scripts/llm/serve.py` with the venv's python
    /// (`TROUPE_LLM_PYTHON`, default `~/.cache/troupe-llm/venv/bin/python`) and waits for its
    /// URL line (loading takes a few seconds).
    pub(crate) fn start() -> Result<Self, String> {
        if let Ok(url) = std::env::var("TROUPE_LLM_URL")
            && !url.trim().is_empty()
        {
            return Ok(LocalModel {
                url: url.trim().to_string(),
                child: None,
            });
        }
        let python = std::env::var("TROUPE_LLM_PYTHON").map_or_else(
            |_| {
                PathBuf::from(std::env::var("HOME").unwrap_or_default())
                    .join(".cache/troupe-llm/venv/bin/python")
            },
            PathBuf::from,
        );
        let serve = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/llm/serve.py");
        let threads = std::env::var("TROUPE_LLM_THREADS").unwrap_or_else(|_| "2".into());
        let mut child = Command::new(&python)
            .arg(&serve)
            // Two slots, each with its own prompt cache: in `auto` one session asks with the
            // native tool list and then with the text one, and a single slot would read each
            // prefix again on every task. 16k context gives each slot 8k.
            .args(["--port", "0", "--threads", &threads])
            .args(["--parallel", "2", "--ctx", "16384"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} {} ({e}); run bash scripts/llm/setup.sh first",
                    python.display(),
                    serve.display()
                )
            })?;
        let stdout = child.stdout.take().ok_or("the server has no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("URL ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let mut model = LocalModel {
            url: String::new(),
            child: Some(child),
        };
        model.url = rx
            .recv_timeout(Duration::from_secs(300))
            .map_err(|_| "the model server printed no URL within 300 s".to_string())?;
        Ok(model)
    }
}

/// The tools the model gets: the file tools and the tool-search bridge to the MCP server
/// (shell, process, patch and code execution are blocked). Every tool's schema goes into each
/// prompt, and on 2 CPU cores the model reads only some 30 prompt tokens a second.
const NARROW_TOOLS: &str = "toolsets:\n  enabled: [core, mcp-everything]\n  blocked_tools: [terminal, process, patch, execute_code]\n";

impl LocalModel {
    /// A troupe.yaml for this model in tool-call `mode`, its context per slot, the narrow tool
    /// set and server-everything (at `everything`) behind tool search; greedy sampling, at most 512
    /// tokens a reply so a model that rambles cannot hold a run for minutes, and 30 minutes
    /// for an attempt (a cold prompt on a busy CPU took more than the default 10).
    pub(crate) fn troupe_yaml(&self, mode: &str, everything: &Path) -> String {
        format!(
            "model:\n  base_url: {}\n  model: qwen2.5-coder-1.5b-instruct\n{}  tool_calls: {mode}\n  request_timeout: 1800\n  request_fields: {{temperature: 0, max_tokens: 512}}\n{NARROW_TOOLS}mcp_servers:\n  everything:\n    command: {}\n    args: [stdio]\n    env: {{BENCH_MARKER: {BENCH_MARKER}}}\ntools:\n  tool_search:\n    enabled: on\n",
            self.url,
            context_line(),
            everything.display()
        )
    }
}

/// `context_length` for the config: what each of the server's slots holds (`--ctx 16384
/// --parallel 2` gives 8192); `TROUPE_LLM_CONTEXT` sets another
/// (for a server started by hand), `0` leaves it out.
fn context_line() -> String {
    match std::env::var("TROUPE_LLM_CONTEXT") {
        Ok(n) if n.trim() == "0" => String::new(),
        Ok(n) if n.trim().parse::<u32>().is_ok() => format!("  context_length: {}\n", n.trim()),
        _ => "  context_length: 8192\n".to_string(),
    }
}

/// A value only server-everything's `get-env` tool can tell (set in its environment).
pub(crate) const BENCH_MARKER: &str = "quartz-5521";

/// Where scripts/install-test-deps.sh puts server-everything.
pub(crate) fn everything_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp-servers/node_modules/.bin/mcp-server-everything")
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // SIGTERM lets serve.py exit by itself; wait for it so no server outlives the run.
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = child.wait();
        }
    }
}
