//! Which tools hide behind the tool-search bridge and which the model sees directly.

use crate::config::DeferSet;
use crate::tool::{ToolDef, ToolKind};

/// The bridge tools' names: reserved, never deferred, never callable through `tool_call`.
pub const BRIDGE_TOOL_NAMES: [&str; 3] = ["tool_search", "tool_describe", "tool_call"];

/// Tool names that are core wherever they come from: they are always offered directly.
pub const CORE_TOOL_NAMES: &[&str] = &[
    "terminal",
    "read_file",
    "write_file",
    "patch",
    "search_files",
    "todo",
    "memory",
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "web_search",
    "web_extract",
    "session_search",
    "clarify",
    "execute_code",
    "delegate_task",
    "send_message",
    "vision_analyze",
    "image_generate",
    "text_to_speech",
    "cronjob",
    "skills_list",
    "skill_view",
    "process",
    "computer_use",
    "todo_list",
    "process_manage",
    "cronjob_manage",
];

/// Toolsets of session-bound GUI surfaces: shown directly unless named in `defer`.
pub const DIRECT_SURFACE_TOOLSETS: [&str; 3] = ["desktop_ui", "project", "setup"];

/// The name of the tool that grants hosted connectors.
pub const MANAGE_CONNECTIONS: &str = "manage_connections";

/// Whether `name` is one of the three bridge tools.
pub fn is_bridge_name(name: &str) -> bool {
    BRIDGE_TOOL_NAMES.contains(&name)
}

/// Whether a tool is core: a core kind, or a name on the core list.
pub fn is_core(def: &ToolDef) -> bool {
    def.kind == ToolKind::Core || CORE_TOOL_NAMES.contains(&def.name.as_str())
}

/// Whether `def` is deferred behind the bridge. The rules, in order: bridge names never; names
/// in `defer` always; core tools never; then the toolset decides (`mcp-*` and plugin toolsets
/// yes; GUI surfaces and unregistered tools no). `defer = None` skips the second rule.
pub fn is_deferrable(def: &ToolDef, defer: Option<&DeferSet>) -> bool {
    if is_bridge_name(&def.name) {
        return false;
    }
    if defer.is_some_and(|d| d.contains(&def.name)) {
        return true;
    }
    if is_core(def) {
        return false;
    }
    match def.toolset.as_deref() {
        None => false,
        Some(ts) if ts.starts_with("mcp-") => true,
        Some(ts) if DIRECT_SURFACE_TOOLSETS.contains(&ts) => false,
        Some(_) => true,
    }
}
