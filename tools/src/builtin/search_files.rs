//! The `search_files` tool: a regex over file contents, or a glob over file names, below a
//! directory. `.git` and `target` directories are skipped, as are binary and very large files;
//! results come in pages, and matched lines have secrets masked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::args::{optional_int, optional_str, required_str};
use super::files::Files;
use super::glob::Glob;
use super::redact::redact;
use super::{Builtins, PathAccess, authorize};
use crate::tool::{CallContext, ToolResult};

/// Directories never searched.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules", ".hg", ".svn"];
/// Files visited at most per search, so a search of `/` ends.
const MAX_FILES_VISITED: usize = 200_000;
/// Files larger than this are not searched for content.
const MAX_SEARCH_BYTES: u64 = 10 * 1024 * 1024;
/// Files read per batch.
const READ_BATCH: usize = 200;
/// Longest matched line shown.
const MAX_LINE_CHARS: usize = 500;

fn fail(message: impl Into<String>) -> ToolResult {
    ToolResult::error_json(json!({"error": message.into()}))
}

/// A search, checked and ready to run.
#[derive(Debug)]
pub(crate) struct Search {
    pub(crate) root: PathBuf,
    pub(crate) target_files: bool,
    pub(crate) content_re: Option<Regex>,
    pub(crate) name_glob: Option<Glob>,
    pub(crate) file_glob: Option<Glob>,
    pub(crate) limit: usize,
    pub(crate) offset: usize,
    pub(crate) mode: String,
    pub(crate) context: usize,
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Runs a search and builds the result.
pub(crate) fn run(fs: &dyn Files, search: &Search, shown_root: &str) -> Value {
    let walked = fs.walk(&search.root, SKIPPED_DIRS, MAX_FILES_VISITED);
    let (files, capped) = (walked.files, walked.capped);
    let in_scope = |p: &Path| {
        search
            .file_glob
            .as_ref()
            .is_none_or(|g| g.matches(&relative(&search.root, p)))
    };
    let display = |p: &Path| {
        let rel = relative(&search.root, p);
        if rel.is_empty() {
            shown_root.to_string()
        } else if shown_root == "." {
            rel
        } else {
            format!("{}/{rel}", shown_root.trim_end_matches('/'))
        }
    };
    let mut result = json!({});
    if search.target_files {
        let matched: Vec<String> = files
            .iter()
            .filter(|p| {
                in_scope(p)
                    && search
                        .name_glob
                        .as_ref()
                        .is_some_and(|g| g.matches(&relative(&search.root, p)))
            })
            .map(|p| display(p))
            .collect();
        let total = matched.len();
        let page: Vec<String> = matched
            .into_iter()
            .skip(search.offset)
            .take(search.limit)
            .collect();
        let truncated = search.offset.saturating_add(page.len()) < total;
        result["total_count"] = json!(total);
        result["files"] = json!(page);
        result["truncated"] = json!(truncated);
    } else {
        let Some(re) = &search.content_re else {
            return json!({"error": "no pattern"});
        };
        let mut matches = vec![];
        let mut counts = serde_json::Map::new();
        let mut total = 0usize;
        let scoped: Vec<PathBuf> = files.iter().filter(|p| in_scope(p)).cloned().collect();
        // A batch at a time: one round trip to a remote backend, little memory here.
        let read = scoped
            .chunks(READ_BATCH)
            .flat_map(|batch| batch.iter().zip(fs.read_many(batch, MAX_SEARCH_BYTES)));
        for (path, bytes) in read {
            let Some(bytes) = bytes else {
                continue;
            };
            if bytes[..bytes.len().min(1000)].contains(&0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let mut in_file = 0;
            for (n, line) in lines.iter().enumerate() {
                if !re.is_match(line) {
                    continue;
                }
                in_file += 1;
                total += 1;
                if search.mode == "content" && total > search.offset && matches.len() < search.limit
                {
                    let clip =
                        |l: &str| redact(&l.chars().take(MAX_LINE_CHARS).collect::<String>());
                    let mut entry =
                        json!({"path": display(path), "line": n + 1, "content": clip(line)});
                    if search.context > 0 {
                        let from = n.saturating_sub(search.context);
                        let to = (n + search.context + 1).min(lines.len());
                        entry["before"] =
                            json!(lines[from..n].iter().map(|l| clip(l)).collect::<Vec<_>>());
                        entry["after"] =
                            json!(lines[n + 1..to].iter().map(|l| clip(l)).collect::<Vec<_>>());
                    }
                    matches.push(entry);
                }
            }
            if in_file > 0 {
                counts.insert(display(path), json!(in_file));
            }
        }
        result["total_count"] = json!(total);
        match search.mode.as_str() {
            "files_only" => {
                let files: Vec<&String> = counts
                    .keys()
                    .skip(search.offset)
                    .take(search.limit)
                    .collect();
                result["truncated"] =
                    json!(search.offset.saturating_add(files.len()) < counts.len());
                result["files"] = json!(files);
            }
            "count" => {
                result["counts"] = Value::Object(counts);
                result["truncated"] = json!(false);
            }
            _ => {
                result["truncated"] = json!(search.offset.saturating_add(matches.len()) < total);
                result["matches"] = json!(matches);
            }
        }
    }
    if capped {
        result["total_count_is_lower_bound"] = json!(true);
        result["warning"] = json!(format!(
            "The search stopped after {MAX_FILES_VISITED} files; narrow 'path' or 'file_glob'."
        ));
    }
    if result["truncated"] == json!(true) {
        result["hint"] = json!(format!(
            "More results exist: send offset={} for the next page, or narrow the pattern or file_glob.",
            search.offset.saturating_add(search.limit)
        ));
    }
    result
}

/// Runs the `search_files` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let finding_files = matches!(
        args.get("target").and_then(Value::as_str),
        Some("files" | "find")
    );
    if finding_files && args.get("pattern").is_none_or(Value::is_null) {
        // Looking for files with no pattern: say which glob lists them all, on the same path.
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let list = json!({"pattern": "*", "target": "files", "path": path});
        return fail(format!(
            "'pattern' is required: a glob for the file names. To list every file under '{path}', send {list}."
        ));
    }
    let pattern = match required_str(&args, "pattern", "\"fn main\"") {
        Ok(p) if !p.is_empty() => p.to_string(),
        Ok(_) => {
            return fail(
                "'pattern' is empty. Send a regex to search contents, or a glob like \"*.rs\" with target=\"files\".",
            );
        }
        Err(e) => return fail(e),
    };
    let target = match optional_str(&args, "target") {
        Ok(t) => match t.unwrap_or("content") {
            "content" | "grep" => false,
            "files" | "find" => true,
            other => {
                return fail(format!(
                    "Unknown target '{other}'. Use \"content\" to search inside files or \"files\" to find files by name."
                ));
            }
        },
        Err(e) => return fail(e),
    };
    let mode = match optional_str(&args, "output_mode") {
        Ok(m) => match m.unwrap_or("content") {
            m @ ("content" | "files_only" | "count") => m.to_string(),
            other => {
                return fail(format!(
                    "Unknown output_mode '{other}'. Use content, files_only or count."
                ));
            }
        },
        Err(e) => return fail(e),
    };
    let int = |key: &str, default: i64, min: i64| {
        optional_int(&args, key).map(|v| v.unwrap_or(default).max(min) as usize)
    };
    let (limit, offset, context) = match (
        int("limit", 50, 1),
        int("offset", 0, 0),
        int("context", 0, 0),
    ) {
        (Ok(l), Ok(o), Ok(c)) => (l.min(1000), o, c.min(20)),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return fail(e),
    };
    let path_arg = match optional_str(&args, "path") {
        Ok(p) => p
            .filter(|p| !p.trim().is_empty())
            .unwrap_or(".")
            .to_string(),
        Err(e) => return fail(e),
    };
    let file_glob = match optional_str(&args, "file_glob") {
        Ok(Some(g)) if !g.trim().is_empty() => match Glob::new(g) {
            Ok(g) => Some(g),
            Err(e) => return fail(e),
        },
        Ok(_) => None,
        Err(e) => return fail(e),
    };
    let (content_re, name_glob) = if target {
        match Glob::new(&pattern) {
            Ok(g) => (None, Some(g)),
            Err(e) => return fail(e),
        }
    } else {
        match Regex::new(&pattern) {
            Ok(re) => (Some(re), None),
            Err(e) => {
                return fail(format!(
                    "'pattern' is not a valid regular expression: {e}. Escape special characters such as ( [ . * with a backslash."
                ));
            }
        }
    };
    let root = match authorize(&builtins, &ctx, &path_arg, PathAccess::Read) {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    if !root.exists() {
        return fail(format!(
            "'{path_arg}' does not exist. Send an existing directory or file to search."
        ));
    }
    let search = Search {
        root,
        target_files: target,
        content_re,
        name_glob,
        file_glob,
        limit,
        offset,
        mode,
        context,
    };
    let fs = builtins.files_of(&ctx.session_id);
    match tokio::task::spawn_blocking(move || run(fs.as_ref(), &search, &path_arg)).await {
        Ok(v) => ToolResult::json(v),
        Err(e) => fail(format!("The search failed unexpectedly: {e}.")),
    }
}
