//! Shared set-up for the built-in tool tests: a fresh directory per test, built-ins started on
//! it with short kill grace periods, and a way to call a tool by name and read its JSON.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};
use troupe_tools::{CallContext, ToolDef, ToolResult};

pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) builtins: Arc<Builtins>,
    pub(crate) tools: Vec<ToolDef>,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        Fixture::with(|_| {})
    }

    pub(crate) fn with(adjust: impl FnOnce(&mut BuiltinConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let mut config = BuiltinConfig {
            default_cwd: std::fs::canonicalize(&work).unwrap(),
            receipts_dir: dir.path().join("receipts"),
            ..BuiltinConfig::default()
        };
        config.terminal.kill_grace = Duration::from_millis(500);
        config.code.kill_grace = Duration::from_millis(500);
        adjust(&mut config);
        let builtins = Builtins::start(config).unwrap();
        let tools = core_tools(&builtins);
        Fixture {
            dir,
            builtins,
            tools,
        }
    }

    pub(crate) fn work(&self) -> PathBuf {
        self.builtins.config().default_cwd.clone()
    }

    pub(crate) fn tool(&self, name: &str) -> &ToolDef {
        self.tools.iter().find(|t| t.name == name).unwrap()
    }

    pub(crate) async fn call_ctx(&self, name: &str, args: Value, ctx: CallContext) -> ToolResult {
        let args: Map<String, Value> = args.as_object().cloned().unwrap();
        self.tool(name)
            .handler
            .as_ref()
            .unwrap()
            .call(args, ctx)
            .await
    }

    pub(crate) async fn call(&self, name: &str, args: Value) -> (Value, bool) {
        let r = self.call_ctx(name, args, ctx("s1")).await;
        (json_of(&r), r.is_error)
    }
}

pub(crate) fn ctx(session: &str) -> CallContext {
    CallContext::new(
        session,
        "call-1",
        tokio_util::sync::CancellationToken::new(),
    )
}

pub(crate) fn json_of(r: &ToolResult) -> Value {
    r.structured.clone().unwrap_or_else(|| {
        serde_json::from_str(&r.to_model_text()).unwrap_or(Value::String(r.to_model_text()))
    })
}

/// Waits (bounded) until `path` holds a pid, and returns it.
pub(crate) async fn read_pid(path: &Path) -> i32 {
    for _ in 0..500 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pid appeared in {}", path.display());
}

/// Set in a copy of this test binary that runs one test alone (see [`alone_with_env`]).
const ALONE_ENV: &str = "TROUPE_TEST_ALONE";

/// Runs the test at `path` (`module_path!()` and the test's name, as `concat!` gives them) alone
/// in a fresh copy of this test binary whose environment also holds `vars`: for a test that
/// needs process-wide state (environment variables) which the other tests of this binary, run
/// on other threads, must neither see nor race with. Returns `true` in that copy, where the
/// caller goes on with the test's body, and `false` in this process once the copy passed; a copy
/// that failed, or ran no test (a wrong path), fails the caller.
pub(crate) fn alone_with_env(path: &str, vars: &[(&str, &str)]) -> bool {
    // libtest names a test by its path below the crate.
    let name = path.split_once("::").map_or(path, |(_, rest)| rest);
    if std::env::var(ALONE_ENV).is_ok_and(|alone| alone == name) {
        return true;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE_ENV, name)
        .envs(vars.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "the copy of the test binary running {name} alone failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    false
}
