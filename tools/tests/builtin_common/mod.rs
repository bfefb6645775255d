//! Shared set-up for the built-in tool tests: a fresh directory per test, built-ins started on
//! it with short kill grace periods, and a way to call a tool by name and read its JSON.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};
use troupe_tools::{CallContext, ToolDef, ToolResult};

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub builtins: Arc<Builtins>,
    pub tools: Vec<ToolDef>,
}

impl Fixture {
    pub fn new() -> Self {
        Fixture::with(|_| {})
    }

    pub fn with(adjust: impl FnOnce(&mut BuiltinConfig)) -> Self {
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

    pub fn work(&self) -> PathBuf {
        self.builtins.config().default_cwd.clone()
    }

    pub fn tool(&self, name: &str) -> &ToolDef {
        self.tools.iter().find(|t| t.name == name).unwrap()
    }

    pub async fn call_ctx(&self, name: &str, args: Value, ctx: CallContext) -> ToolResult {
        let args: Map<String, Value> = args.as_object().cloned().unwrap();
        self.tool(name)
            .handler
            .as_ref()
            .unwrap()
            .call(args, ctx)
            .await
    }

    pub async fn call(&self, name: &str, args: Value) -> (Value, bool) {
        let r = self.call_ctx(name, args, ctx("s1")).await;
        (json_of(&r), r.is_error)
    }
}

pub fn ctx(session: &str) -> CallContext {
    CallContext::new(
        session,
        "call-1",
        tokio_util::sync::CancellationToken::new(),
    )
}

pub fn json_of(r: &ToolResult) -> Value {
    r.structured.clone().unwrap_or_else(|| {
        serde_json::from_str(&r.to_model_text()).unwrap_or(Value::String(r.to_model_text()))
    })
}

/// Waits (bounded) until `path` holds a pid, and returns it.
pub async fn read_pid(path: &Path) -> i32 {
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
