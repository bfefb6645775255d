//! The lean prompt for models with a small context: the same tools, with shorter words. Every
//! tool keeps its name, its parameters and which of them are required; descriptions shrink to
//! their first sentence, optional parameters lose theirs, and the bridge's `tool_search` says
//! in two sentences what it is for (with the listing, already cut to the listing budget).
//!
//! Chosen by [`PromptStyle`]: `lean` always, `full` never, `auto` when the model's context is
//! known and at most [`LEAN_CONTEXT_MAX`] tokens. Only what the model reads changes: calls are
//! still checked against the full schemas.

use serde_json::{Map, Value};

use crate::deferral::MANAGE_CONNECTIONS;
use crate::search::assemble::Assembly;
use crate::search::listing::short_desc;

/// Largest context (tokens) for which `auto` picks the lean prompt: one the full prompt's 2–4k
/// tokens would crowd. (At 8k, Qwen2.5-Coder-1.5B did a little better with the full prompt, see
/// docs/benchmarks.md.)
pub const LEAN_CONTEXT_MAX: i64 = 4_096;

/// Longest tool description in the lean prompt, in characters (its first sentence, cut at a
/// word when longer).
pub const LEAN_DESCRIPTION_MAX_CHARS: usize = 120;

/// Which prompt a session sends: the full one, the lean one, or the one its context calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptStyle {
    /// Lean when the context window is known and small ([`LEAN_CONTEXT_MAX`]), else full.
    #[default]
    Auto,
    /// Every description as written.
    Full,
    /// Short descriptions and a plain instruction to search before saying a tool is missing.
    Lean,
}

impl PromptStyle {
    /// The values a config may write.
    pub const ALLOWED: &'static [&'static str] = &["auto", "full", "lean"];

    /// `auto`, `full` or `lean` (any case, spaces trimmed); `None` for anything else.
    pub fn parse(text: &str) -> Option<PromptStyle> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(PromptStyle::Auto),
            "full" => Some(PromptStyle::Full),
            "lean" => Some(PromptStyle::Lean),
            _ => None,
        }
    }

    /// The word a config writes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptStyle::Auto => "auto",
            PromptStyle::Full => "full",
            PromptStyle::Lean => "lean",
        }
    }

    /// Whether a session with this style and `context_length` sends the lean prompt.
    pub fn is_lean(self, context_length: Option<i64>) -> bool {
        match self {
            PromptStyle::Lean => true,
            PromptStyle::Full => false,
            PromptStyle::Auto => context_length.is_some_and(|c| c > 0 && c <= LEAN_CONTEXT_MAX),
        }
    }
}

/// What the lean `tool_search` says after its opening sentence.
const LEAN_SEARCH_GUIDE: &str = "Call it first whenever none of your listed tools fits: never answer that a tool is missing before searching. \
Queries are keywords (app, action, object), several at once. Then run a match with `tool_call`.";

/// The lean note on hosted connectors.
const LEAN_CONNECTOR_NOTE: &str = "Connector tools are named `connectors__<app>__<tool>`; connect an app with `manage_connections` first.";

const LEAN_DESCRIBE: &str = "Gives the parameters of tools found with `tool_search`.";

const LEAN_CALL: &str =
    "Runs one tool found with `tool_search`: calls is [{\"name\": ..., \"arguments\": {...}}].";

/// The lean form of an assembly's tool list: direct tools shortened by [`lean_schema`], the
/// bridge tools rewritten with their short texts and the assembly's listing.
pub fn lean_tools(assembly: &Assembly) -> Vec<Value> {
    let connections = assembly.tool_names().contains(&MANAGE_CONNECTIONS);
    assembly
        .tools
        .iter()
        .map(|tool| match tool["function"]["name"].as_str() {
            Some("tool_search") => lean_search(tool, assembly.listing.as_deref(), connections),
            Some("tool_describe") => with_description(lean_schema(tool), LEAN_DESCRIBE),
            Some("tool_call") => with_description(lean_schema(tool), LEAN_CALL),
            _ => lean_schema(tool),
        })
        .collect()
}

/// `tool_search` in lean form: the opening sentence of its full description (how many tools
/// are behind it, or which servers are starting), the short guide, then the listing.
fn lean_search(tool: &Value, listing: Option<&str>, connections: bool) -> Value {
    let full = tool["function"]["description"].as_str().unwrap_or_default();
    let mut text = first_sentence(full).to_string();
    text.push(' ');
    text.push_str(LEAN_SEARCH_GUIDE);
    if connections {
        text.push(' ');
        text.push_str(LEAN_CONNECTOR_NOTE);
    }
    if let Some(listing) = listing.filter(|l| !l.is_empty()) {
        text.push_str("\n\n");
        text.push_str(listing);
    }
    with_description(lean_schema(tool), &text)
}

fn with_description(mut tool: Value, description: &str) -> Value {
    if let Some(function) = tool.get_mut("function").and_then(Value::as_object_mut) {
        function.insert("description".into(), Value::String(description.into()));
    }
    tool
}

/// One OpenAI-style tool definition in lean form: the description cut to its first sentence
/// (at most [`LEAN_DESCRIPTION_MAX_CHARS`]), the parameters by [`lean_parameters`].
pub fn lean_schema(tool: &Value) -> Value {
    let mut tool = tool.clone();
    let Some(function) = tool.get_mut("function").and_then(Value::as_object_mut) else {
        return tool;
    };
    if let Some(Value::String(description)) = function.get("description") {
        let short = lean_description(description);
        function.insert("description".into(), Value::String(short));
    }
    if let Some(parameters) = function.get("parameters") {
        let lean = lean_parameters(parameters);
        function.insert("parameters".into(), lean);
    }
    tool
}

/// A tool description cut to its first sentence; when that is still longer than
/// [`LEAN_DESCRIPTION_MAX_CHARS`], cut at its last `;` or `:` within the limit (a whole
/// clause), else at a word.
pub fn lean_description(description: &str) -> String {
    let collapsed = description.split_whitespace().collect::<Vec<_>>().join(" ");
    let sentence = first_sentence(&collapsed);
    let Some((cut, _)) = sentence.char_indices().nth(LEAN_DESCRIPTION_MAX_CHARS) else {
        return sentence.to_string();
    };
    let head = &sentence[..cut];
    if let Some(clause) = head.rfind("; ").max(head.rfind(": ")).map(|i| &head[..i])
        && clause.chars().count() >= LEAN_DESCRIPTION_MAX_CHARS / 3
    {
        return format!("{clause}.");
    }
    let head = head.rfind(' ').map_or(head, |space| &head[..space]);
    format!("{}…", head.trim_end_matches([',', ';', ':', ' ']))
}

/// The first sentence of `text`: up to the first `.`, `!` or `?` followed by a space or the
/// end (a dot inside `1.5` or `a.b` does not end it).
fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?') {
            let end = i + c.len_utf8();
            if text[end..].chars().next().is_none_or(char::is_whitespace) {
                return &text[..end];
            }
        }
    }
    text
}

/// Keys of a JSON Schema the lean form keeps: what a call must look like. Titles, examples,
/// defaults and numeric bounds go (the call is still checked against the full schema).
const KEPT_KEYS: &[&str] = &[
    "type",
    "enum",
    "const",
    "items",
    "properties",
    "required",
    "anyOf",
    "oneOf",
    "allOf",
];

/// A parameters schema in lean form: every property and `required` list kept at every depth;
/// a required property keeps a one-line description, an optional one keeps none.
pub fn lean_parameters(schema: &Value) -> Value {
    lean_node(schema, true)
}

fn lean_node(schema: &Value, described: bool) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for key in KEPT_KEYS {
        let Some(value) = map.get(*key) else {
            continue;
        };
        let lean = match *key {
            "properties" => lean_properties(value, map.get("required")),
            "items" => lean_node(value, false),
            "anyOf" | "oneOf" | "allOf" => match value.as_array() {
                Some(options) => options.iter().map(|o| lean_node(o, false)).collect(),
                None => value.clone(),
            },
            _ => value.clone(),
        };
        out.insert((*key).to_string(), lean);
    }
    if described && let Some(Value::String(description)) = map.get("description") {
        let short = short_desc(description);
        if !short.is_empty() {
            out.insert("description".into(), Value::String(short));
        }
    }
    Value::Object(out)
}

fn lean_properties(properties: &Value, required: Option<&Value>) -> Value {
    let Some(properties) = properties.as_object() else {
        return properties.clone();
    };
    let required: Vec<&str> = required
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Value::Object(
        properties
            .iter()
            .map(|(name, schema)| {
                let lean = lean_node(schema, required.contains(&name.as_str()));
                (name.clone(), lean)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ToolSearchConfig;
    use crate::search::assemble::assemble_defs;
    use crate::search::listing::estimate_tokens;
    use crate::tool::ToolDef;
    use serde_json::json;

    /// Two direct tools written like the built-ins, and 300 MCP tools behind the bridge.
    fn defs() -> Vec<Arc<ToolDef>> {
        let mut defs = vec![
            Arc::new(
                ToolDef::new(
                    "read_file",
                    "Read a text file as numbered lines, a page at a time: offset is the first line \
                     (from 1), limit the number of lines (default 500, at most 2000). Binary files are \
                     refused with the reason.",
                    json!({"type": "object", "properties": {
                        "path": {"type": "string", "description": "The file, absolute or relative to the working directory."},
                        "offset": {"type": "integer", "minimum": 1, "description": "First line to show (default 1)."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Lines to show (default 500)."}
                    }, "required": ["path"]}),
                )
                .with_toolset("core"),
            ),
            Arc::new(
                ToolDef::new(
                    "write_file",
                    "Write a whole file, replacing what was there; missing parent directories are \
                     created. The write is atomic. Use patch to change part of a file.",
                    json!({"type": "object", "properties": {
                        "path": {"type": "string", "description": "The file, absolute or relative to the working directory."},
                        "content": {"type": "string", "description": "The complete new content."}
                    }, "required": ["path", "content"]}),
                )
                .with_toolset("core"),
            ),
        ];
        for i in 0..300 {
            defs.push(Arc::new(
                ToolDef::new(
                    format!("svc{}_update_record_{i}", i % 7),
                    "Updates one record of the remote service. Fields left out keep their value.",
                    json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
                )
                .with_toolset(format!("mcp-svc{}", i % 7)),
            ));
        }
        defs
    }

    #[test]
    fn the_lean_list_is_smaller_and_keeps_every_name_required_parameter_and_the_listing_budget() {
        let config = ToolSearchConfig::default();
        let assembly = assemble_defs(&defs(), Some(8192), &config);
        assert!(assembly.activated);
        let lean = lean_tools(&assembly);
        let chars = |tools: &[Value]| tools.iter().map(|t| t.to_string().len()).sum::<usize>();
        // Measured: the lean list is about half; held to at most 70%.
        assert!(
            chars(&lean) * 10 <= chars(&assembly.tools) * 7,
            "lean {} vs full {}",
            chars(&lean),
            chars(&assembly.tools)
        );
        assert_eq!(lean.len(), assembly.tools.len());
        for (full, short) in assembly.tools.iter().zip(&lean) {
            let (f, s) = (&full["function"], &short["function"]);
            assert_eq!(f["name"], s["name"]);
            assert_eq!(f["parameters"]["required"], s["parameters"]["required"]);
            let keys = |v: &Value| {
                v["parameters"]["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect::<Vec<_>>())
            };
            assert_eq!(keys(f), keys(s), "{}", f["name"]);
        }
        // The listing is cut to 5% of the 8192-token context, and the lean search carries it.
        let budget = config.listing_budget(Some(8192));
        assert_eq!(budget, 409);
        let listing = assembly.listing.as_deref().unwrap();
        assert!(estimate_tokens(listing.chars().count()) <= budget);
        let search = lean
            .iter()
            .find(|t| t["function"]["name"] == "tool_search")
            .unwrap();
        let text = search["function"]["description"].as_str().unwrap();
        assert!(text.starts_with("Finds tools among 300 more"), "{text}");
        assert!(text.contains("never answer that a tool is missing before searching"));
        assert!(text.ends_with(listing));
    }

    #[test]
    fn styles_parse_and_choose_by_context() {
        assert_eq!(PromptStyle::parse(" Lean "), Some(PromptStyle::Lean));
        assert_eq!(PromptStyle::parse("tiny"), None);
        assert!(PromptStyle::Auto.is_lean(Some(4096)));
        assert!(!PromptStyle::Auto.is_lean(Some(8192)));
        assert!(PromptStyle::Auto.is_lean(Some(LEAN_CONTEXT_MAX)));
        assert!(!PromptStyle::Auto.is_lean(Some(LEAN_CONTEXT_MAX + 1)));
        assert!(!PromptStyle::Auto.is_lean(None));
        assert!(!PromptStyle::Auto.is_lean(Some(0)));
        assert!(PromptStyle::Lean.is_lean(None));
        assert!(!PromptStyle::Full.is_lean(Some(2048)));
    }

    #[test]
    fn descriptions_keep_their_first_sentence() {
        assert_eq!(
            lean_description("Read a file.  Pages of 500 lines; v1.5 works."),
            "Read a file."
        );
        assert_eq!(
            lean_description(
                "Read a text file as numbered lines, a page at a time: offset is the first line (from 1), limit the number of lines to show."
            ),
            "Read a text file as numbered lines, a page at a time."
        );
        let long = "word ".repeat(60);
        let cut = lean_description(&long);
        assert!(cut.ends_with('…') && cut.chars().count() <= LEAN_DESCRIPTION_MAX_CHARS + 1);
    }

    #[test]
    fn parameters_keep_names_types_and_required_at_every_depth() {
        let schema = json!({
            "type": "object",
            "title": "Args",
            "properties": {
                "path": {"type": "string", "description": "The file. Relative paths resolve against the cwd."},
                "limit": {"type": "integer", "minimum": 1, "default": 500, "description": "Lines to show."},
                "calls": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "Exact name."}},
                    "required": ["name"]
                }}
            },
            "required": ["path"]
        });
        let lean = lean_parameters(&schema);
        assert_eq!(lean["required"], json!(["path"]));
        assert_eq!(lean["properties"]["path"]["description"], "The file.");
        assert_eq!(lean["properties"]["limit"], json!({"type": "integer"}));
        assert!(lean.get("title").is_none());
        let item = &lean["properties"]["calls"]["items"];
        assert_eq!(item["required"], json!(["name"]));
        assert_eq!(item["properties"]["name"]["description"], "Exact name.");
    }
}
