//! Text tool calls: for servers whose own tool-call parser fails on what a model writes (or
//! that take no `tools` at all), the tools are described in the system prompt and the calls are
//! read back from the reply's text.
//!
//! # The format troupe tells the model
//!
//! The system prompt gets a "Tools" part listing each tool on one line as a short signature
//! and its description (`read_file(path: string, offset?: integer): Read a text file ...`;
//! the full JSON Schema would cost a local model minutes of prompt reading on a small CPU),
//! and asks for one call per reply written as a bare JSON object:
//!
//! ```text
//! {"name": "read_file", "arguments": {"path": "README.md"}}
//! ```
//!
//! Calls troupe replays from earlier turns are written the same way. Results come back in the
//! next user message, one block per call in the order of the calls:
//!
//! ```text
//! <tool_response name="read_file">
//! ...the tool's result...
//! </tool_response>
//! ```
//!
//! # What is read as a call
//!
//! Models do not always write what they were told, so [`parse_reply`] also takes bare JSON
//! objects with `name` and `arguments` (or `parameters`), fenced code blocks holding such
//! objects (or a list of them), and `{"function": {...}}` wrappers; it forgives trailing
//! commas, single-quoted strings, Python's `True`/`False`/`None` and doubled braces
//! (`{{"name": ...}}`, which some chat templates teach). Everything that is not a call stays
//! the reply's text. A `<tool_response>` the model invents ends the reply there.

use serde_json::{Value, json};

use super::{ChatMessage, ToolCallRequest};

/// What text mode tells the model before its tool list. Small models write a bare JSON object
/// far more reliably than tags, so that is the form asked for (tags are still read), one call
/// per reply (parallel calls from small models tend to run on into an invented result).
const TOOLS_INTRO: &str = "\n\n# Tools\n\nYou can use the tools listed below. To use one, reply with only a JSON object that names the tool and its arguments, and nothing else:\n{\"name\": \"TOOL_NAME\", \"arguments\": {\"PARAMETER\": \"value\"}}\nUse one tool per reply. Its result comes back in the next message inside <tool_response name=\"TOOL_NAME\"></tool_response>. Use only the tools listed here. When you have the answer, or need no tool, reply in plain text.\n\nTools, as name(parameters): what it does (`?` marks an optional parameter):\n";

/// The instructions and tool list appended to the system prompt in text mode: one line per
/// tool, its parameters as a short signature rather than the full JSON Schema, so the prompt
/// stays small enough for a local model to read quickly.
pub(crate) fn tools_prompt(tools: &[Value]) -> String {
    let mut out = String::from(TOOLS_INTRO);
    for tool in tools {
        let function = tool.get("function").unwrap_or(tool);
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            continue;
        };
        out.push_str("- ");
        out.push_str(name);
        out.push('(');
        out.push_str(&parameters_signature(function.get("parameters")));
        out.push(')');
        if let Some(description) = function
            .get("description")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|d| !d.is_empty())
        {
            out.push_str(": ");
            // One line per tool: a description's own line breaks become spaces, except for
            // lists (a deferred-tool listing), which stay readable indented.
            let lines: Vec<&str> = description
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .collect();
            out.push_str(&lines.join("\n  "));
        }
        out.push('\n');
    }
    out
}

/// `path: string, offset?: integer` for an object schema's properties, required ones first as
/// written.
fn parameters_signature(schema: Option<&Value>) -> String {
    let Some(properties) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return String::new();
    };
    let required: Vec<&str> = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    properties
        .iter()
        .map(|(key, property)| {
            let mark = if required.contains(&key.as_str()) {
                ""
            } else {
                "?"
            };
            format!("{key}{mark}: {}", type_signature(property, 0))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A short type for one schema: `string`, `"a"|"b"`, `string[]`, `{name: string}`.
fn type_signature(schema: &Value, depth: usize) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("|");
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .filter(|k| *k != "null")
            .collect::<Vec<_>>()
            .join("|"),
        _ => String::new(),
    };
    match kind.as_str() {
        "array" => {
            let item = schema
                .get("items")
                .map_or_else(|| "any".to_string(), |i| type_signature(i, depth + 1));
            if item.contains('|') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        "object" if depth < 2 && schema.get("properties").is_some() => {
            format!("{{{}}}", parameters_signature(Some(schema)))
        }
        "" => "any".to_string(),
        other => other.to_string(),
    }
}

/// One call as the text form asks for it: a bare JSON object on its own line.
pub(crate) fn render_call(call: &ToolCallRequest) -> String {
    let arguments = serde_json::from_str::<Value>(&call.arguments)
        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
    json!({"name": call.name, "arguments": arguments}).to_string()
}

/// The conversation rewritten for text mode: the tool list joins the (first) system message,
/// assistant tool calls become JSON objects in their text, and each run of tool results
/// becomes one user message of `<tool_response>` blocks.
pub(crate) fn text_mode_messages(messages: &[ChatMessage], tools: &[Value]) -> Vec<ChatMessage> {
    let prompt = tools_prompt(tools);
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut told = false;
    let mut results: Vec<String> = Vec::new();
    let flush = |results: &mut Vec<String>, out: &mut Vec<ChatMessage>| {
        if !results.is_empty() {
            out.push(ChatMessage::User {
                content: results.join("\n"),
            });
            results.clear();
        }
    };
    for message in messages {
        if let ChatMessage::Tool { name, content, .. } = message {
            results.push(format!(
                "<tool_response name=\"{}\">\n{content}\n</tool_response>",
                name.replace('"', "'")
            ));
            continue;
        }
        flush(&mut results, &mut out);
        match message {
            ChatMessage::System { content } if !told => {
                told = true;
                out.push(ChatMessage::System {
                    content: format!("{content}{prompt}"),
                });
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
            } if !tool_calls.is_empty() => {
                let mut text = content.clone().unwrap_or_default();
                for call in tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&render_call(call));
                }
                out.push(ChatMessage::Assistant {
                    content: Some(text),
                    tool_calls: Vec::new(),
                });
            }
            other => out.push(other.clone()),
        }
    }
    flush(&mut results, &mut out);
    if !told {
        out.insert(
            0,
            ChatMessage::System {
                content: prompt.trim_start().to_string(),
            },
        );
    }
    out
}

/// A reply split into its text and the calls written in it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ParsedReply {
    /// What is left once the calls are taken out, trimmed.
    pub prose: String,
    /// (name, arguments text) per call, in order.
    pub calls: Vec<(String, String)>,
}

/// Reads the calls written in `text`. With `known`, only calls to those names count (a native
/// answer that wrote its calls as text); without, any well-formed call counts, and the session
/// answers unknown names with close ones.
pub(crate) fn parse_reply(text: &str, known: Option<&[String]>) -> ParsedReply {
    // A result the model wrote itself is invented: nothing from there on is real.
    let text = match text.find("<tool_response") {
        Some(cut) => &text[..cut],
        None => text,
    };
    let accept = |name: &str| known.is_none_or(|names| names.iter().any(|n| n == name));
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut found: Vec<(usize, Vec<(String, String)>)> = Vec::new();

    // 1. Tagged blocks; a block cut off at the end (max_tokens) runs to the end.
    let mut from = 0;
    while let Some(open) = text[from..].find("<tool_call>").map(|i| i + from) {
        let inner_start = open + "<tool_call>".len();
        let (inner_end, end) = match text[inner_start..].find("</tool_call>") {
            Some(close) => (
                inner_start + close,
                inner_start + close + "</tool_call>".len(),
            ),
            None => match text[inner_start..].find("<tool_call>") {
                Some(next) => (inner_start + next, inner_start + next),
                None => (text.len(), text.len()),
            },
        };
        let inner = strip_fence(text[inner_start..inner_end].trim());
        let calls = match parse_calls(inner) {
            Some(calls) => calls,
            // Unreadable: keep it as a call whose arguments fail to parse, so the model gets
            // the parse error back instead of silence.
            None => vec![(guess_name(inner), inner.to_string())],
        };
        let calls: Vec<_> = calls
            .into_iter()
            .filter(|(n, _)| accept(n.as_str()))
            .collect();
        if known.is_none() || !calls.is_empty() {
            spans.push((open, end));
            found.push((open, calls));
        }
        from = end.max(open + 1);
    }

    // 2. Fenced blocks holding calls.
    let mut from = 0;
    while let Some(open) = text[from..].find("```").map(|i| i + from) {
        let after = open + 3;
        let Some(close) = text[after..].find("```").map(|i| i + after) else {
            break;
        };
        let end = close + 3;
        if !overlaps(&spans, open, end) {
            let body = &text[after..close];
            // Skip the info string (```json).
            let body = match body.find('\n') {
                Some(line) if !body[..line].trim_start().starts_with(['{', '[']) => {
                    &body[line + 1..]
                }
                _ => body,
            };
            if let Some(calls) = parse_calls(body.trim())
                && calls.iter().all(|(n, _)| accept(n.as_str()))
            {
                spans.push((open, end));
                found.push((open, calls));
            }
        }
        from = end;
    }

    // 3. Bare objects anywhere else.
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'{' || overlaps(&spans, i, i + 1) {
            i += 1;
            continue;
        }
        let Some(end) = matching_brace(text, i) else {
            break;
        };
        if !overlaps(&spans, i, end)
            && let Some(calls) = parse_calls(&text[i..end])
            && calls.iter().all(|(n, _)| accept(n.as_str()))
        {
            spans.push((i, end));
            found.push((i, calls));
        }
        i = end;
    }

    found.sort_by_key(|(at, _)| *at);
    spans.sort_unstable();
    let mut prose = String::new();
    let mut at = 0;
    for (start, end) in &spans {
        if *start >= at {
            prose.push_str(&text[at..*start]);
            at = *end;
        }
    }
    prose.push_str(&text[at.min(text.len())..]);
    ParsedReply {
        prose: prose.trim().to_string(),
        calls: found.into_iter().flat_map(|(_, calls)| calls).collect(),
    }
}

fn overlaps(spans: &[(usize, usize)], start: usize, end: usize) -> bool {
    spans.iter().any(|(s, e)| start < *e && *s < end)
}

/// A fenced block's body, when the whole text is one.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.strip_suffix("```").unwrap_or(rest);
    match rest.find('\n') {
        Some(line) if !rest[..line].trim_start().starts_with(['{', '[']) => rest[line + 1..].trim(),
        _ => rest.trim(),
    }
}

/// The name in an unreadable call, if one can be seen (`"name": "x"`).
fn guess_name(text: &str) -> String {
    let Some(at) = text.find("name") else {
        return String::new();
    };
    let rest = text[at + 4..].trim_start_matches(['"', '\'', ' ', ':']);
    rest.chars()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .collect()
}

/// The end (exclusive) of the object opening at `start`, skipping braces inside strings of
/// either quote; `None` when it never closes.
fn matching_brace(text: &str, start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (offset, c) in text[start..].char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(start + offset + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The calls in one piece of JSON-ish text: an object, or a list of objects that are all calls.
fn parse_calls(text: &str) -> Option<Vec<(String, String)>> {
    let value = lenient_json(text)?;
    match value {
        Value::Array(items) if !items.is_empty() => items.iter().map(as_call).collect(),
        other => as_call(&other).map(|call| vec![call]),
    }
}

/// A `{name, arguments}` object (or `parameters`, or a `function` wrapper) as (name, args).
fn as_call(value: &Value) -> Option<(String, String)> {
    let object = value.as_object()?;
    if let Some(function) = object.get("function").filter(|f| f.is_object()) {
        return as_call(function);
    }
    let name = object.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = ["arguments", "parameters", "args"]
        .iter()
        .find_map(|key| object.get(*key))?;
    let text = match arguments {
        Value::Null => "{}".to_string(),
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    Some((name.to_string(), text))
}

/// Parses JSON as written, else after repairs: single quotes, trailing commas, Python
/// literals, and one layer of doubled braces.
pub(crate) fn lenient_json(text: &str) -> Option<Value> {
    let text = text.trim();
    if !text.starts_with(['{', '[']) {
        return None;
    }
    if let Ok(value) = serde_json::from_str(text) {
        return Some(value);
    }
    if let Ok(value) = serde_json::from_str(&repair(text)) {
        return Some(value);
    }
    if text.contains("{{") || text.contains("}}") {
        let single = text.replace("{{", "{").replace("}}", "}");
        if let Ok(value) = serde_json::from_str(&repair(&single)) {
            return Some(value);
        }
    }
    None
}

/// Rewrites single-quoted strings as JSON strings, drops commas before `}` or `]`, and turns
/// `True`/`False`/`None` outside strings into JSON.
fn repair(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                out.push('"');
                i += 1;
                while i < chars.len() {
                    let d = chars[i];
                    if d == '\\' && i + 1 < chars.len() {
                        let next = chars[i + 1];
                        if next == '\'' {
                            out.push('\'');
                        } else {
                            out.push('\\');
                            out.push(next);
                        }
                        i += 2;
                        continue;
                    }
                    if d == c {
                        break;
                    }
                    if d == '"' {
                        out.push_str("\\\"");
                    } else if d == '\n' {
                        out.push_str("\\n");
                    } else {
                        out.push(d);
                    }
                    i += 1;
                }
                out.push('"');
                i += 1;
            }
            ',' => {
                let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
                if !matches!(next, Some('}' | ']')) {
                    out.push(',');
                }
                i += 1;
            }
            c if c.is_ascii_alphabetic() => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    _ => &word,
                });
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(text: &str) -> Vec<(String, Value)> {
        parse_reply(text, None)
            .calls
            .into_iter()
            .map(|(n, a)| (n, serde_json::from_str(&a).unwrap_or(Value::String(a))))
            .collect()
    }

    fn one(name: &str, args: Value) -> Vec<(String, Value)> {
        vec![(name.to_string(), args)]
    }

    #[test]
    fn tagged_bare_and_fenced_calls() {
        let args = json!({"path": "README.md"});
        for text in [
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}\n</tool_call>",
            "{\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}",
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}\n```",
            "```\n[{\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}]\n```",
            "<tool_call>```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}\n```</tool_call>",
            "{\"function\": {\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"README.md\\\"}\"}}",
            "{\"name\": \"read_file\", \"parameters\": {\"path\": \"README.md\"}}",
            // Cut off by the token limit before the closing tag.
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}",
        ] {
            assert_eq!(calls(text), one("read_file", args.clone()), "{text}");
        }
    }

    #[test]
    fn sloppy_json_is_forgiven() {
        let args = json!({"a": 2, "b": 3, "ok": true, "none": null});
        for text in [
            "{{\"name\": \"add\", \"arguments\": {{\"a\": 2, \"b\": 3, \"ok\": true, \"none\": null}}}}",
            "{'name': 'add', 'arguments': {'a': 2, 'b': 3, 'ok': True, 'none': None}}",
            "{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3, \"ok\": true, \"none\": null,},}",
            "<tool_call>{{'name': 'add', 'arguments': {{'a': 2, 'b': 3, 'ok': True, 'none': None,}}}}</tool_call>",
        ] {
            assert_eq!(calls(text), one("add", args.clone()), "{text}");
        }
        // Quotes of the other kind inside strings survive.
        assert_eq!(
            calls("{'name': 'echo', 'arguments': {'text': 'say \"hi\" and it\\'s done'}}"),
            one("echo", json!({"text": "say \"hi\" and it's done"}))
        );
    }

    #[test]
    fn several_calls_and_prose_around_them() {
        let reply = parse_reply(
            "I will read both files.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}\n</tool_call>",
            None,
        );
        assert_eq!(reply.prose, "I will read both files.");
        assert_eq!(reply.calls.len(), 2);
        assert_eq!(reply.calls[1].1, "{\"path\":\"b\"}");

        let reply = parse_reply(
            "First {\"name\": \"a\", \"arguments\": {}} then\n```json\n{\"name\": \"b\", \"arguments\": {\"x\": \"}\"}}\n```\ndone.",
            None,
        );
        let names: Vec<&str> = reply.calls.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(reply.prose, "First  then\n\ndone.");
    }

    #[test]
    fn plain_answers_and_other_json_stay_text() {
        for text in [
            "The sum is 5.",
            "Here is the config: {\"port\": 8080, \"name\": \"web\"}",
            "```json\n{\"result\": 4}\n```",
            "A brace { that never closes",
            "",
        ] {
            let reply = parse_reply(text, None);
            assert!(reply.calls.is_empty(), "{text}");
            assert_eq!(reply.prose, text.trim());
        }
    }

    #[test]
    fn invented_results_are_cut_and_unreadable_blocks_become_bad_calls() {
        let reply = parse_reply(
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n<tool_response>\n{\"temp\": 18}\n</tool_response>\nIt is 18 degrees.",
            None,
        );
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.prose, "");

        let reply = parse_reply(
            "<tool_call>{\"name\": \"read_file\", \"arguments\": {path: }</tool_call>",
            None,
        );
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].0, "read_file");
        assert!(serde_json::from_str::<Value>(&reply.calls[0].1).is_err());
    }

    #[test]
    fn known_names_filter_native_answers() {
        let known = vec!["read_file".to_string()];
        let text = "{\"name\": \"read_file\", \"arguments\": {}} and {\"name\": \"web\", \"arguments\": {}}";
        let reply = parse_reply(text, Some(&known));
        assert_eq!(reply.calls, vec![("read_file".into(), "{}".into())]);
        assert!(reply.prose.contains("web"));
    }

    #[test]
    fn tools_are_listed_as_short_signatures() {
        let tools = vec![
            json!({"type": "function", "function": {"name": "read_file",
                "description": "Reads a file.",
                "parameters": {"type": "object", "properties": {
                    "path": {"type": "string", "description": "The file."},
                    "limit": {"type": ["integer", "null"]}}, "required": ["path"]}}}),
            json!({"name": "process", "description": "Looks after processes.\n\nActions:\n- list\n",
                "parameters": {"type": "object", "properties": {
                    "action": {"enum": ["list", "kill"]}}, "required": ["action"]}}),
            json!({"name": "tool_call", "parameters": {"type": "object", "properties": {
                "calls": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "arguments": {"type": "object"}},
                    "required": ["name", "arguments"]}}}}}),
            json!({"description": "no name: skipped"}),
        ];
        let prompt = tools_prompt(&tools);
        let listed: Vec<&str> = prompt
            .lines()
            .skip_while(|l| !l.starts_with("- "))
            .collect();
        assert_eq!(
            listed,
            vec![
                "- read_file(path: string, limit?: integer): Reads a file.",
                "- process(action: \"list\"|\"kill\"): Looks after processes.",
                "  Actions:",
                "  - list",
                "- tool_call(calls?: {name: string, arguments: object}[])",
            ]
        );
        // The example call in the instructions is itself readable as a call.
        assert_eq!(parse_reply(&prompt, None).calls.len(), 1);
    }

    #[test]
    fn conversations_are_rewritten_in_the_told_form() {
        let messages = vec![
            ChatMessage::System {
                content: "Be brief.".into(),
            },
            ChatMessage::User {
                content: "read a and b".into(),
            },
            ChatMessage::Assistant {
                content: Some("Reading.".into()),
                tool_calls: vec![
                    ToolCallRequest {
                        id: "1".into(),
                        name: "read_file".into(),
                        arguments: "{\"path\":\"a\"}".into(),
                    },
                    ToolCallRequest {
                        id: "2".into(),
                        name: "read_file".into(),
                        arguments: "not json".into(),
                    },
                ],
            },
            ChatMessage::Tool {
                tool_call_id: "1".into(),
                name: "read_file".into(),
                content: "A".into(),
            },
            ChatMessage::Tool {
                tool_call_id: "2".into(),
                name: "read_file".into(),
                content: "B".into(),
            },
        ];
        let tools = vec![json!({"type": "function", "function": {"name": "read_file",
            "description": "Reads a file.", "parameters": {"type": "object"}}})];
        let out = text_mode_messages(&messages, &tools);
        assert_eq!(out.len(), 4);
        let ChatMessage::System { content } = &out[0] else {
            panic!("{out:?}")
        };
        assert!(content.starts_with("Be brief.\n\n# Tools"));
        assert!(
            content.contains("\n- read_file(): Reads a file.\n"),
            "{content}"
        );
        let ChatMessage::Assistant {
            content,
            tool_calls,
        } = &out[2]
        else {
            panic!("{out:?}")
        };
        assert!(tool_calls.is_empty());
        let text = content.as_deref().unwrap_or_default();
        // What troupe writes back, it reads back.
        let reread = parse_reply(text, None);
        assert_eq!(reread.prose, "Reading.");
        assert_eq!(
            reread.calls[0],
            ("read_file".into(), "{\"path\":\"a\"}".into())
        );
        assert_eq!(reread.calls[1], ("read_file".into(), "not json".into()));
        assert_eq!(
            out[3],
            ChatMessage::User {
                content: "<tool_response name=\"read_file\">\nA\n</tool_response>\n<tool_response name=\"read_file\">\nB\n</tool_response>".into()
            }
        );
        // No system message: one is made for the tools.
        let out = text_mode_messages(&messages[1..2], &tools);
        assert!(
            matches!(&out[0], ChatMessage::System { content } if content.starts_with("# Tools"))
        );
    }
}
