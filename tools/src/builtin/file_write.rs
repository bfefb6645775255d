//! The `write_file` tool: replaces a whole file atomically (temporary file, then rename),
//! creating missing parent directories. A file that used CRLF line ends or a UTF-8 BOM keeps
//! them; JSON files must parse; text that is really `read_file` output (numbered lines) is
//! refused, since writing it would corrupt the file.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::args::required_str;
use super::files::FileKind;
use super::{Builtins, PathAccess, authorize};
use crate::text::json_kind;
use crate::tool::{CallContext, ToolResult};

/// Whether most lines look like `read_file`'s `N|text` display.
pub(crate) fn looks_like_read_output(content: &str) -> bool {
    let lines: Vec<&str> = content.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() < 3 {
        return false;
    }
    let numbered = lines
        .iter()
        .filter(|l| {
            l.split_once('|')
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .count();
    numbered * 10 >= lines.len() * 6
}

/// The bytes to write for `content` given the file it replaces: CRLF and BOM carried over.
pub(crate) fn match_conventions(content: &str, previous: Option<&[u8]>) -> Vec<u8> {
    let mut text = content.to_string();
    if let Some(prev) = previous {
        let prev_text = String::from_utf8_lossy(prev);
        let uses_crlf = prev_text.contains("\r\n") && !prev_text.replace("\r\n", "").contains('\n');
        if uses_crlf && !text.contains("\r\n") {
            text = text.replace('\n', "\r\n");
        }
        if prev.starts_with(&[0xEF, 0xBB, 0xBF]) && !text.starts_with('\u{FEFF}') {
            text.insert(0, '\u{FEFF}');
        }
    }
    text.into_bytes()
}

/// Runs the `write_file` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let path_arg = match required_str(&args, "path", "\"notes/todo.md\"") {
        Ok(p) => p.to_string(),
        Err(e) => return ToolResult::error_json(json!({"error": e})),
    };
    let content = match args.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return ToolResult::error_json(
                json!({"error": "'content' is missing: send the complete new text of the file as a string. To change only part of a file, use patch."}),
            );
        }
        Some(other) => {
            return ToolResult::error_json(
                json!({"error": format!("'content' must be a string, not {}. Send the file's text; JSON data must be serialised into a string first.", json_kind(other))}),
            );
        }
    };
    let path = match authorize(&builtins, &ctx, &path_arg, PathAccess::Write) {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    if looks_like_read_output(&content) {
        return ToolResult::error_json(
            json!({"error": format!("Refusing to write '{path_arg}': the content looks like read_file output with its `N|` line numbers. Remove the numbers and send the file's real text. Nothing was written.")}),
        );
    }
    if path.extension().is_some_and(|e| e == "json")
        && let Err(e) = serde_json::from_str::<Value>(&content)
    {
        return ToolResult::error_json(
            json!({"error": format!("Refusing to write '{path_arg}': the content is not valid JSON ({e}). Fix it and send it again. Nothing was written.")}),
        );
    }
    let files = builtins.files_of(&ctx.session_id);
    let root = builtins.root_beneath(&ctx.session_id, &path);
    let result = tokio::task::spawn_blocking(move || -> Result<Value, String> {
        // This machine's path was resolved by the check (links followed, so a link to a file
        // inside the workspace is written through); a backend's own file system resolves it
        // there.
        let target = if files.is_local() {
            path
        } else {
            files.canonicalize(&path).unwrap_or(path)
        };
        let previous = match files.kind(&target) {
            Ok(FileKind::Dir) => {
                return Err(format!("'{path_arg}' is a directory; send a file path."));
            }
            Ok(_) => files.read_beneath(&root, &target).ok(),
            Err(_) => None,
        };
        let bytes = match_conventions(&content, previous.as_deref());
        let written = files
            .write_beneath(&root, &target, &bytes)
            .map_err(|e| format!("Could not write '{path_arg}': {e}. Nothing was changed."))?;
        Ok(json!({"bytes_written": bytes.len(), "dirs_created": written.dirs_created, "verified": written.verified, "resolved_path": target.display().to_string()}))
    })
    .await;
    match result {
        Ok(Ok(v)) => ToolResult::json(v),
        Ok(Err(e)) => ToolResult::error_json(json!({"error": e})),
        Err(e) => {
            ToolResult::error_json(json!({"error": format!("Writing failed unexpectedly: {e}.")}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_output_is_recognised() {
        assert!(looks_like_read_output("1|fn main() {\n2|    hi();\n3|}\n"));
        assert!(!looks_like_read_output("a|b\nc|d\nplain\n"));
    }

    #[test]
    fn crlf_and_bom_are_kept() {
        let prev = b"\xEF\xBB\xBFa\r\nb\r\n";
        assert_eq!(
            match_conventions("x\ny\n", Some(prev)),
            "\u{FEFF}x\r\ny\r\n".as_bytes()
        );
        assert_eq!(match_conventions("x\ny\n", Some(b"a\nb\n")), b"x\ny\n");
        assert_eq!(match_conventions("x\n", None), b"x\n");
    }
}
