//! A small MCP server (stdio) that misbehaves on request, for troupe's MCP fault tests. Built
//! with rmcp's server macros. Run by the tests in `tests/tests/mcp/`, never by users:
//!
//! `fault_server [--state-dir DIR] [--refuse-start-if FILE] [--never-initialize] [--start-delay-ms N]`
//!
//! Tools: `echo`, `pid`, `crash` (exits mid-call), `slow` (waits; records a cancellation in
//! DIR), `add_tool` (reveals `bonus` and sends `tools/list_changed`), `fail` (an `isError`
//! result) and `rich` (image, resource and structured content).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ResourceContents, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt as _, schemars, tool, tool_handler,
    tool_router,
};
use serde::Deserialize;

/// Arguments of `echo`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

/// Arguments of `slow`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SlowArgs {
    /// How long to wait before answering.
    seconds: f64,
    /// Names the marker files this call writes (`started-<tag>`, `cancelled-<tag>`).
    tag: String,
}

/// Arguments of `crash`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct CrashArgs {
    /// Also create the `--refuse-start-if` file, so that the next start fails.
    #[serde(default)]
    refuse_restart: bool,
}

#[derive(Clone)]
struct FaultServer {
    /// Whether `bonus` is listed (after `add_tool`).
    bonus: Arc<AtomicBool>,
    /// Where marker files go.
    state_dir: Option<PathBuf>,
    /// The file whose presence makes the server refuse to start.
    refuse_file: Option<PathBuf>,
}

#[tool_router]
impl FaultServer {
    /// Sends `text` back.
    #[tool(
        description = "Send the given text straight back.",
        annotations(read_only_hint = true)
    )]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.text
    }

    /// The server's process id, so tests can tell one start from the next.
    #[tool(
        description = "Report this server's process id.",
        annotations(read_only_hint = true, idempotent_hint = true)
    )]
    async fn pid(&self) -> String {
        std::process::id().to_string()
    }

    /// Exits the whole process while the call is in flight.
    #[tool(
        description = "Exit the server process in the middle of the call.",
        annotations(destructive_hint = true)
    )]
    async fn crash(&self, Parameters(args): Parameters<CrashArgs>) -> String {
        if args.refuse_restart
            && let Some(file) = &self.refuse_file
        {
            let _ = std::fs::write(file, b"refuse");
        }
        std::process::exit(70);
    }

    /// Waits, unless the client cancels first; either way leaves a marker saying which.
    #[tool(description = "Wait for a number of seconds, or until the call is cancelled.")]
    async fn slow(
        &self,
        Parameters(args): Parameters<SlowArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> String {
        self.mark(&format!("started-{}", args.tag));
        let wait = Duration::from_secs_f64(args.seconds.clamp(0.0, 3600.0));
        tokio::select! {
            _ = tokio::time::sleep(wait) => "finished".to_string(),
            _ = ctx.ct.cancelled() => {
                self.mark(&format!("cancelled-{}", args.tag));
                "cancelled".to_string()
            }
        }
    }

    /// Reveals `bonus` and tells the client its tool list changed.
    #[tool(description = "Add the bonus tool to this server's tool list.")]
    async fn add_tool(&self, ctx: RequestContext<RoleServer>) -> Result<String, ErrorData> {
        self.bonus.store(true, Ordering::SeqCst);
        ctx.peer
            .notify_tool_list_changed()
            .await
            .map_err(|e| ErrorData::internal_error(format!("could not notify: {e}"), None))?;
        Ok("bonus added".to_string())
    }

    /// Only listed after `add_tool`.
    #[tool(
        description = "A tool that appears only after add_tool was called.",
        annotations(read_only_hint = true)
    )]
    async fn bonus(&self) -> String {
        "bonus tool here".to_string()
    }

    /// Always fails, as a tool result rather than a protocol error.
    #[tool(description = "Fail on purpose with an error result.")]
    async fn fail(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(
            "the fault server failed on purpose",
        )])
    }

    /// One of each kind of content, and structured content.
    #[tool(
        description = "Answer with an image, an embedded resource and structured content.",
        annotations(read_only_hint = true)
    )]
    async fn rich(&self) -> CallToolResult {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("rich answer"),
            ContentBlock::image("iVBORw0KGgo=", "image/png"),
            ContentBlock::resource(ResourceContents::text("resource body", "memo://fault/1")),
        ]);
        result.structured_content = Some(serde_json::json!({"answer": 42}));
        result
    }
}

impl FaultServer {
    fn mark(&self, name: &str) {
        if let Some(dir) = &self.state_dir {
            let _ = std::fs::write(dir.join(name), b"");
        }
    }

    /// The router as the client should see it now: `bonus` stays hidden until `add_tool`.
    fn current_router(&self) -> ToolRouter<Self> {
        let router = Self::tool_router();
        if self.bonus.load(Ordering::SeqCst) {
            router
        } else {
            router.with_disabled("bonus")
        }
    }
}

#[tool_handler(router = self.current_router())]
impl ServerHandler for FaultServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "troupe-fault-server",
            env!("CARGO_PKG_VERSION"),
        ))
    }
}

#[tokio::main]
async fn main() {
    let mut state_dir = None;
    let mut refuse_file = None;
    let mut never_initialize = false;
    let mut start_delay = Duration::ZERO;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--state-dir" => state_dir = args.next().map(PathBuf::from),
            "--refuse-start-if" => refuse_file = args.next().map(PathBuf::from),
            "--never-initialize" => never_initialize = true,
            // A slow start that costs no CPU, like a server that waits on a network or a disk.
            "--start-delay-ms" => {
                let ms = args.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                start_delay = Duration::from_millis(ms);
            }
            other => {
                eprintln!("fault_server: unknown argument {other}; see the file header for usage");
                std::process::exit(2);
            }
        }
    }
    if refuse_file.as_ref().is_some_and(|f| f.exists()) {
        eprintln!("fault_server: refusing to start because the refuse file exists");
        std::process::exit(3);
    }
    tokio::time::sleep(start_delay).await;
    if never_initialize {
        // Read and ignore everything until the client hangs up, answering nothing.
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut sink).await;
        return;
    }
    let server = FaultServer {
        bonus: Arc::new(AtomicBool::new(false)),
        state_dir,
        refuse_file,
    };
    match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => {
            eprintln!("fault_server: handshake failed: {e}");
            std::process::exit(1);
        }
    }
}
