//! What a tool is: its definition ([`ToolDef`]), how it runs ([`ToolHandler`]) and what it gives
//! back ([`ToolResult`]). Everything else in troupe refers to tools through these types.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

/// Where a tool comes from. It decides, with the toolset, whether a tool may be deferred behind
/// the tool-search bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// Built into troupe and always offered directly (terminal, read_file, ...).
    Core,
    /// Served by an MCP server; its toolset is `mcp-<server>`.
    Mcp,
    /// Provided by a plugin; its toolset is the plugin's name.
    Plugin,
    /// A hosted connector tool (`connectors__<connector>__<tool>`).
    Connector,
}

/// What the planner and the approval rules may assume about a tool. MCP servers fill these from
/// their tool annotations; built-in tools declare them. `ToolHints::default()` declares nothing,
/// so the planner runs such a tool alone; a tool written in code ([`ToolDef::new`]) starts from
/// [`ToolHints::parallel`] instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolHints {
    /// The tool only reads: it may run beside other readers.
    pub read_only: bool,
    /// The tool may destroy data: it needs approval unless the operator says otherwise.
    pub destructive: bool,
    /// Calling it twice with the same arguments has the same effect as once.
    pub idempotent: bool,
    /// Known to be safe to run in parallel with any other parallel-safe call.
    pub parallel_safe: bool,
    /// It talks to a human (clarify and friends), or must otherwise never share a run: always a
    /// barrier in a batch.
    pub interactive: bool,
    /// Must run alone in a batch, whatever else it declares: the opt-out for a tool written in
    /// code that is parallel by default.
    pub exclusive: bool,
    /// Argument names whose values name a resource a call touches (a record id, a queue, a
    /// branch): two calls naming the same value of the same argument do not run together,
    /// unless both only read. A call that gives none of them runs alone.
    pub resource_args: Vec<String>,
    /// Argument names that hold file paths the tool reads or writes, for path-scoped planning
    /// (it writes them unless `read_only`).
    pub path_args: Vec<String>,
    /// For a path-scoped tool: the path a call touches when it gives none of `path_args`
    /// (`"."`, the working directory, for a search that covers it). `None`: such a call cannot
    /// be placed and runs alone.
    pub default_path: Option<String>,
    /// For a tool that applies V4A patches: in patch mode, the files the patch names are the
    /// paths a call touches, instead of `path_args`.
    pub patch_paths: Option<PatchPaths>,
}

impl ToolHints {
    /// The hints of a tool written in code that declared nothing else: it may run beside any
    /// other call that may. Set [`ToolHints::exclusive`], declare path or resource arguments, or
    /// replace the hints with [`ToolDef::with_hints`] to say otherwise.
    pub fn parallel() -> ToolHints {
        ToolHints {
            parallel_safe: true,
            ..ToolHints::default()
        }
    }
}

/// Where a tool that applies V4A patches (`*** Update File: …` headers) finds them, for
/// path-scoped planning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchPaths {
    /// The argument that selects the mode (`mode`).
    pub mode_arg: String,
    /// Its value in patch mode (`patch`).
    pub mode_value: String,
    /// The argument that holds the patch (`patch`).
    pub body_arg: String,
}

/// One tool as the registry knows it.
///
/// `description` and `parameters` stay `None` when the definition had no such key, because the
/// size estimate of the deferred catalog counts the definition's JSON as written.
#[derive(Clone)]
pub struct ToolDef {
    /// The name the model calls it by.
    pub name: String,
    /// The description the model reads, if any.
    pub description: Option<String>,
    /// The JSON Schema of its arguments, if any.
    pub parameters: Option<Value>,
    /// The toolset it belongs to (`mcp-github`, `core`, a plugin name), or none when unregistered.
    pub toolset: Option<String>,
    /// Where it comes from.
    pub kind: ToolKind,
    /// The plugin that owns an unregistered tool, shown as its source; for a connector tool,
    /// the connector as the gateway wrote it.
    pub source_name: Option<String>,
    /// For a connector tool found by a search: the gateway's slug for it (`GMAIL_SEND_EMAIL`),
    /// which its index text is made of.
    pub vendor_slug: Option<String>,
    /// Planner and approval hints.
    pub hints: ToolHints,
    /// How to run it; `None` for catalog-only definitions (search, describe and dry runs).
    pub handler: Option<Arc<dyn ToolHandler>>,
}

impl fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.name)
            .field("toolset", &self.toolset)
            .field("kind", &self.kind)
            .field("hints", &self.hints)
            .field("callable", &self.handler.is_some())
            .finish_non_exhaustive()
    }
}

static EMPTY_OBJECT: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::Object(Map::new()));

impl ToolDef {
    /// A definition with a name, a description and a parameter schema; kind and toolset follow
    /// from the builder methods. Its hints are [`ToolHints::parallel`]: a tool written in code
    /// runs beside the other calls of a batch unless it says otherwise
    /// ([`ToolDef::exclusive`], [`ToolDef::with_hints`]).
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDef {
            name: name.into(),
            description: Some(description.into()),
            parameters: Some(parameters),
            toolset: None,
            kind: ToolKind::Plugin,
            source_name: None,
            vendor_slug: None,
            hints: ToolHints::parallel(),
            handler: None,
        }
    }

    /// Puts the tool in a toolset; `core` makes it a core tool and `mcp-*` an MCP tool.
    pub fn with_toolset(mut self, toolset: impl Into<String>) -> Self {
        let toolset = toolset.into();
        self.kind = kind_of_toolset(&toolset);
        self.toolset = Some(toolset);
        self
    }

    /// Overrides the kind.
    pub fn with_kind(mut self, kind: ToolKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the planner and approval hints.
    pub fn with_hints(mut self, hints: ToolHints) -> Self {
        self.hints = hints;
        self
    }

    /// Makes the tool run alone in every batch (a tool written in code is parallel by default).
    pub fn exclusive(mut self) -> Self {
        self.hints.exclusive = true;
        self
    }

    /// Attaches the code that runs the tool.
    pub fn with_handler(mut self, handler: Arc<dyn ToolHandler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// Sets the code to a closure ([`FnHandler`]): for tools written inline.
    pub fn with_fn<F>(self, f: F) -> Self
    where
        F: Fn(Map<String, Value>, CallContext) -> BoxFuture<'static, ToolResult>
            + Send
            + Sync
            + 'static,
    {
        self.with_handler(Arc::new(FnHandler(f)))
    }

    /// The description, or `""` when the definition has none.
    pub fn description(&self) -> &str {
        self.description.as_deref().unwrap_or("")
    }

    /// The parameter schema, or `{}` when the definition has none.
    pub fn parameters(&self) -> &Value {
        self.parameters.as_ref().unwrap_or(&EMPTY_OBJECT)
    }

    /// The OpenAI-style function definition the model sees, with only the keys the definition has.
    pub fn to_openai(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(description) = &self.description {
            function.insert("description".into(), Value::String(description.clone()));
        }
        if let Some(parameters) = &self.parameters {
            function.insert("parameters".into(), parameters.clone());
        }
        let mut def = Map::new();
        def.insert("type".into(), Value::String("function".into()));
        def.insert("function".into(), Value::Object(function));
        Value::Object(def)
    }
}

/// The kind a toolset name implies.
pub fn kind_of_toolset(toolset: &str) -> ToolKind {
    if toolset == "core" {
        ToolKind::Core
    } else if toolset.starts_with("mcp-") {
        ToolKind::Mcp
    } else if toolset == "connectors" {
        ToolKind::Connector
    } else {
        ToolKind::Plugin
    }
}

/// One part of a tool's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// An image, base64-encoded.
    Image {
        /// Base64 data.
        data: String,
        /// Its MIME type.
        mime_type: String,
    },
    /// A resource the tool refers to or embeds.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its text, when it is text.
        text: Option<String>,
        /// Its MIME type, when known.
        mime_type: Option<String>,
    },
}

/// What a tool run gave back. `is_error` results are shown to the model as errors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolResult {
    /// The output parts, in order.
    pub content: Vec<Content>,
    /// Machine-readable output, when the tool has any.
    pub structured: Option<Value>,
    /// The tool failed; the content says why.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::Text(text.into())],
            structured: None,
            is_error: false,
        }
    }

    /// A successful JSON result; the model sees it serialised.
    pub fn json(value: Value) -> Self {
        ToolResult {
            content: vec![Content::Text(value.to_string())],
            structured: Some(value),
            is_error: false,
        }
    }

    /// A failed result whose text says what went wrong and what to do instead.
    pub fn error(message: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::Text(message.into())],
            structured: None,
            is_error: true,
        }
    }

    /// A failed result shaped `{"error": ...}` with extra fields, as the bridge tools answer.
    pub fn error_json(value: Value) -> Self {
        ToolResult {
            content: vec![Content::Text(value.to_string())],
            structured: Some(value),
            is_error: true,
        }
    }

    /// The text the model reads: text parts joined by newlines; images and resources as short
    /// placeholders naming what they are.
    pub fn to_model_text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if !out.is_empty() {
                out.push('\n');
            }
            match part {
                Content::Text(text) => out.push_str(text),
                Content::Image { mime_type, data } => {
                    out.push_str(&format!("[image {mime_type}, {} base64 bytes]", data.len()))
                }
                Content::Resource { uri, text, .. } => match text {
                    Some(text) => out.push_str(text),
                    None => out.push_str(&format!("[resource {uri}]")),
                },
            }
        }
        out
    }
}

/// Everything a handler knows about the call it is running. Build it with [`CallContext::new`]
/// and the `with_*` methods: fields may be added, and struct literals would then break.
#[derive(Clone)]
#[non_exhaustive]
pub struct CallContext {
    /// The session the call belongs to.
    pub session_id: String,
    /// The call entry's id (unique across parallel branches).
    pub call_id: String,
    /// Fires when the call is stopped or timed out; handlers stop their work and return.
    pub cancel: CancellationToken,
    /// How a tool that calls other tools (execute_code) dispatches them: through the same view,
    /// hooks and approvals as the session's own calls. `None` outside a session.
    pub dispatch: Option<Arc<dyn Dispatch>>,
    /// Whoever routes approvals (the Supervisor) granted this call what it needed: a command or
    /// a path that requires a person's approval. Built-in tools refuse such calls when this is
    /// false. `false` by default; approvals switched off means the Supervisor sets it.
    pub approved: bool,
    /// A person answered yes to this very call (not the mode, an allowlist or an unattended
    /// policy): only then may a tool widen what the call reaches (troupe's boundary).
    pub approved_by_person: bool,
    /// How a tool asks the person at the terminal for a secret (sudo's password): `Some` only
    /// for a root session with a person at an interactive prompt; subagents and headless
    /// sessions never get one.
    pub secrets: Option<Arc<dyn AskSecret>>,
}

/// Asks the session's person for a secret at a masked prompt. The answer goes to the tool
/// only: it is never stored, traced, logged or shown to the model.
pub trait AskSecret: Send + Sync + 'static {
    /// Asks with `prompt`; `None` when the person declined, nobody answered in time, or the
    /// call was stopped (`cancel`).
    fn ask_secret(
        &self,
        prompt: String,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Option<String>>;
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("session_id", &self.session_id)
            .field("call_id", &self.call_id)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("dispatch", &self.dispatch.is_some())
            .field("approved", &self.approved)
            .field("approved_by_person", &self.approved_by_person)
            .field("secrets", &self.secrets.is_some())
            .finish()
    }
}

impl CallContext {
    /// A context for one call of one session.
    pub fn new(
        session_id: impl Into<String>,
        call_id: impl Into<String>,
        cancel: CancellationToken,
    ) -> Self {
        CallContext {
            session_id: session_id.into(),
            call_id: call_id.into(),
            cancel,
            dispatch: None,
            approved: false,
            approved_by_person: false,
            secrets: None,
        }
    }

    /// A context for a call outside any session (CLI, tests).
    pub fn detached(call_id: impl Into<String>) -> Self {
        CallContext::new("", call_id, CancellationToken::new())
    }

    /// Marks the call as approved (or not) by whoever routes approvals.
    pub fn with_approval(mut self, approved: bool) -> Self {
        self.approved = approved;
        self
    }

    /// Marks the call as approved by a person who was asked about it (which implies approved).
    pub fn with_person_approval(mut self, approved: bool) -> Self {
        self.approved_by_person = approved;
        self.approved |= approved;
        self
    }

    /// Lets the handler ask the person for a secret (see [`AskSecret`]).
    pub fn with_secrets(mut self, secrets: Option<Arc<dyn AskSecret>>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Lets the handler call other tools through `dispatch`.
    pub fn with_dispatch(mut self, dispatch: Arc<dyn Dispatch>) -> Self {
        self.dispatch = Some(dispatch);
        self
    }
}

/// Runs a tool call on behalf of another tool (execute_code's stubs), through the same path as
/// a model's own calls: same view, hooks and approvals. Implemented by the actor runtime.
pub trait Dispatch: Send + Sync + 'static {
    /// Runs `tool` with `arguments`; `ctx` is the nested call's context.
    fn dispatch(
        &self,
        tool: String,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult>;
}

/// The code behind a tool. Handlers run on the tokio pool, never on an actor's thread.
pub trait ToolHandler: Send + Sync + 'static {
    /// Runs the tool with arguments that already passed the schema.
    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult>;
}

/// A [`ToolHandler`] that is a closure, for tools written inline (tests, small programs); see
/// [`ToolDef::with_fn`].
pub struct FnHandler<F>(pub F);

impl<F> ToolHandler for FnHandler<F>
where
    F: Fn(Map<String, Value>, CallContext) -> BoxFuture<'static, ToolResult>
        + Send
        + Sync
        + 'static,
{
    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: CallContext,
    ) -> BoxFuture<'static, ToolResult> {
        (self.0)(arguments, ctx)
    }
}
