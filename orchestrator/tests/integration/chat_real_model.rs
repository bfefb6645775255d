//! Opt-in (`TROUPE_LLM_TESTS=1`, not in CI: minutes on 2 cores): a real local model
//! (Qwen2.5-Coder-1.5B under llama.cpp, `scripts/llm/`) through `troupe chat` with a real MCP
//! server. The model must find the deferred tool with `tool_search`, call it through the
//! `tool_call` bridge, and answer with its result. Set `TROUPE_LLM_URL` to use a server that is
//! already running; otherwise `scripts/llm/serve.py` is started and stopped here.

use std::process::{Command, Stdio};

use crate::support::local_model::{LocalModel, OPT_IN_VAR, everything_server};
use serde_json::Value;

#[test]
fn a_local_model_finds_an_mcp_tool_with_tool_search_and_answers_with_its_result() {
    if std::env::var(OPT_IN_VAR).as_deref() != Ok("1") {
        eprintln!("skipped: set {OPT_IN_VAR}=1 to run the real local model (see scripts/llm/)");
        return;
    }
    let everything = everything_server();
    assert!(
        everything.exists(),
        "{} is missing; run scripts/install-test-deps.sh",
        everything.display()
    );
    let model = LocalModel::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("troupe.yaml"),
        // Without the listing of deferred names the model has to search for the tool.
        format!(
            "{}    listing: off\n",
            model.troupe_yaml("auto", &everything)
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .args([
            "chat",
            "--json",
            "--max-iterations",
            "8",
            "-q",
            "Add 1234 and 5678 with the MCP tool that sums two numbers. It is not loaded yet: find it with tool_search, then run it through tool_call. Reply with the sum.",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(0));
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let finished = |tool: &str, underlying: &str| {
        lines.iter().any(|l| {
            l["type"] == "tool_call_finished"
                && l["tool"] == tool
                && l["underlying_tool"] == underlying
                && l["status"] == "ok"
        })
    };
    assert!(finished("tool_search", "tool_search"), "no tool_search");
    assert!(
        finished("tool_call", "mcp_everything_get-sum"),
        "the sum tool did not run through the bridge"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["status"], "completed");
    assert!(
        last["text"]
            .as_str()
            .unwrap()
            .replace(',', "")
            .contains("6912"),
        "{last}"
    );
}
