//! The `patch` tool. Replace mode changes exact text in one file: `old_string` must occur once
//! (the error counts the matches and shows where) unless `replace_all` is set. Patch mode
//! applies a multi-file patch (`*** Begin Patch`, then Update/Add/Delete/Move File sections,
//! `*** End Patch`) all or nothing: every change is computed and checked before any file is
//! written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::args::{flag, optional_str};
use super::files::{FileKind, Files};
use super::{Builtins, PathAccess, authorize};
use crate::tool::{CallContext, ToolResult};

fn fail(message: impl Into<String>) -> ToolResult {
    ToolResult::error_json(json!({"error": message.into()}))
}

/// 1-based line numbers where each match of `needle` starts.
fn match_lines(haystack: &str, needle: &str) -> Vec<usize> {
    haystack
        .match_indices(needle)
        .map(|(at, _)| haystack[..at].matches('\n').count() + 1)
        .collect()
}

/// The result of replacing text in a file's content.
#[derive(Debug, PartialEq)]
pub(crate) enum Replaced {
    /// The new content and how many places changed.
    Changed(String, usize),
    /// The new text is already there and the old is gone: nothing to do.
    AlreadyApplied,
}

/// Applies one exact replacement to `content`, or says why it cannot.
pub(crate) fn replace_exact(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Replaced, String> {
    if old.is_empty() {
        return Err(
            "'old_string' is empty. Send the exact text to replace, copied from the file.".into(),
        );
    }
    if old.trim().is_empty() {
        return Err("'old_string' is only whitespace. Send text with visible characters so the place can be found.".into());
    }
    if old == new {
        return Err(
            "'old_string' and 'new_string' are the same, so there is nothing to change.".into(),
        );
    }
    // Files with CRLF line ends: match and replace with the file's own line ends.
    let crlf = content.contains("\r\n") && !old.contains("\r\n");
    let (old, new) = if crlf {
        (old.replace('\n', "\r\n"), new.replace('\n', "\r\n"))
    } else {
        (old.to_string(), new.to_string())
    };
    let lines = match_lines(content, &old);
    match lines.len() {
        0 => {
            if new.chars().filter(|c| !c.is_whitespace()).count() >= 8 && content.contains(&new) {
                return Ok(Replaced::AlreadyApplied);
            }
            Err("'old_string' was not found in the file. Read the file again (read_file) and copy the text exactly, including indentation and line ends.".into())
        }
        1 => Ok(Replaced::Changed(content.replacen(&old, &new, 1), 1)),
        n if replace_all => Ok(Replaced::Changed(content.replace(&old, &new), n)),
        n => {
            let places: Vec<String> = lines
                .iter()
                .take(5)
                .map(|l| {
                    format!(
                        "  L{l}: {}",
                        content
                            .lines()
                            .nth(l - 1)
                            .unwrap_or("")
                            .trim()
                            .chars()
                            .take(80)
                            .collect::<String>()
                    )
                })
                .collect();
            Err(format!(
                "'old_string' matches {n} places. Add surrounding lines to make it unique, or set replace_all=true to change all of them. Matches:\n{}",
                places.join("\n")
            ))
        }
    }
}

/// A short line-based diff between two texts: the changed region with a line of context.
pub(crate) fn diff(path: &str, before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let start = prefix.saturating_sub(1);
    let mut out = format!(
        "--- a/{path}\n+++ b/{path}\n@@ -{} +{} @@\n",
        start + 1,
        start + 1
    );
    for line in &a[start..prefix] {
        out.push_str(&format!(" {line}\n"));
    }
    for line in &a[prefix..a.len() - suffix] {
        out.push_str(&format!("-{line}\n"));
    }
    for line in &b[prefix..b.len() - suffix] {
        out.push_str(&format!("+{line}\n"));
    }
    if suffix > 0 {
        out.push_str(&format!(" {}\n", a[a.len() - suffix]));
    }
    out
}

/// One file's part of a multi-file patch.
#[derive(Debug, PartialEq)]
pub(crate) enum FileOp {
    Update { path: String, hunks: Vec<Hunk> },
    Add { path: String, content: String },
    Delete { path: String },
    Move { from: String, to: String },
}

/// One `@@` section of an update: lines before (context and removed) and after (context and
/// added).
#[derive(Debug, PartialEq, Default)]
pub(crate) struct Hunk {
    pub(crate) before: Vec<String>,
    pub(crate) after: Vec<String>,
}

/// Parses the multi-file patch format.
pub(crate) fn parse_patch(text: &str) -> Result<Vec<FileOp>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "*** Begin Patch")
        .ok_or("The patch must start with a line '*** Begin Patch'.")?;
    let mut ops = vec![];
    let mut i = start + 1;
    let header_path = |raw: &str| -> Result<String, String> {
        let p = raw.trim().to_string();
        if p.is_empty() {
            return Err("A file header names no path.".into());
        }
        if p.split('/').any(|part| part == "..") {
            return Err(format!(
                "The patch path '{p}' contains '..'; send paths inside the project without going up."
            ));
        }
        Ok(p)
    };
    let mut ended = false;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() == "*** End Patch" {
            ended = true;
            break;
        }
        if let Some(p) = line.strip_prefix("*** Add File:") {
            let path = header_path(p)?;
            let mut content = String::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("*** ") {
                let l = lines[i].strip_prefix('+').ok_or_else(|| {
                    format!(
                        "In '*** Add File: {path}', every line must start with '+' (line {}).",
                        i + 1
                    )
                })?;
                content.push_str(l);
                content.push('\n');
                i += 1;
            }
            ops.push(FileOp::Add { path, content });
            continue;
        }
        if let Some(p) = line.strip_prefix("*** Delete File:") {
            ops.push(FileOp::Delete {
                path: header_path(p)?,
            });
            i += 1;
            continue;
        }
        if let Some(p) = line.strip_prefix("*** Move File:") {
            let (from, to) = p
                .split_once("->")
                .ok_or("A move header must read '*** Move File: old/path -> new/path'.")?;
            ops.push(FileOp::Move {
                from: header_path(from)?,
                to: header_path(to)?,
            });
            i += 1;
            continue;
        }
        if let Some(p) = line.strip_prefix("*** Update File:") {
            let path = header_path(p)?;
            let mut hunks = vec![];
            let mut hunk = Hunk::default();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("*** ") {
                let l = lines[i];
                if l.starts_with("@@") {
                    if !hunk.before.is_empty() || !hunk.after.is_empty() {
                        hunks.push(std::mem::take(&mut hunk));
                    }
                } else if let Some(rest) = l.strip_prefix('-') {
                    hunk.before.push(rest.to_string());
                } else if let Some(rest) = l.strip_prefix('+') {
                    hunk.after.push(rest.to_string());
                } else {
                    let rest = l.strip_prefix(' ').unwrap_or(l);
                    hunk.before.push(rest.to_string());
                    hunk.after.push(rest.to_string());
                }
                i += 1;
            }
            if !hunk.before.is_empty() || !hunk.after.is_empty() {
                hunks.push(hunk);
            }
            if hunks.is_empty() {
                return Err(format!(
                    "'*** Update File: {path}' has no changes under it."
                ));
            }
            ops.push(FileOp::Update { path, hunks });
            continue;
        }
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        return Err(format!(
            "Line {} of the patch is not part of any file section: '{line}'. Sections start with '*** Update File:', '*** Add File:', '*** Delete File:' or '*** Move File:'.",
            i + 1
        ));
    }
    if !ended {
        return Err("The patch must end with a line '*** End Patch'.".into());
    }
    if ops.is_empty() {
        return Err("The patch changes no file.".into());
    }
    Ok(ops)
}

/// Applies an update's hunks to `content`; each hunk's before-lines must occur exactly once
/// after the previous hunk.
pub(crate) fn apply_hunks(path: &str, content: &str, hunks: &[Hunk]) -> Result<String, String> {
    let crlf = content.contains("\r\n");
    let mut lines: Vec<String> = content.lines().map(str::to_string).collect();
    let trailing_newline = content.ends_with('\n');
    let mut from = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let positions: Vec<usize> = if hunk.before.is_empty() {
            vec![lines.len()]
        } else {
            (from..lines.len())
                .filter(|&at| {
                    lines
                        .get(at..at + hunk.before.len())
                        .is_some_and(|w| w == &hunk.before[..])
                })
                .collect()
        };
        let at = match positions.as_slice() {
            [one] => *one,
            [] => {
                return Err(format!(
                    "Section {} for '{path}' does not match the file: its context and '-' lines were not found (after line {from}). Read the file again and copy them exactly.",
                    n + 1
                ));
            }
            many => {
                return Err(format!(
                    "Section {} for '{path}' matches {} places; add context lines to make it unique.",
                    n + 1,
                    many.len()
                ));
            }
        };
        lines.splice(at..at + hunk.before.len(), hunk.after.iter().cloned());
        from = at + hunk.after.len();
    }
    let sep = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(sep);
    if trailing_newline || content.is_empty() {
        out.push_str(sep);
    }
    Ok(out)
}

/// A file's content as UTF-8 text, read beneath `root`.
fn read_text(files: &dyn Files, root: &Path, path: &Path) -> std::io::Result<String> {
    String::from_utf8(files.read_beneath(root, path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}

/// Runs the `patch` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let mode = match optional_str(&args, "mode") {
        Ok(m) => m.unwrap_or("replace").to_string(),
        Err(e) => return fail(e),
    };
    match mode.as_str() {
        "replace" => replace_mode(builtins, args, ctx).await,
        "patch" => patch_mode(builtins, args, ctx).await,
        other => fail(format!(
            "Unknown mode '{other}'. Use \"replace\" (path, old_string, new_string) or \"patch\" (a multi-file patch)."
        )),
    }
}

async fn replace_mode(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let get = |key: &str| match args.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(format!(
            "'{key}' is required in replace mode and must be a string."
        )),
    };
    let (path_arg, old, new) = match (get("path"), get("old_string"), get("new_string")) {
        (Ok(p), Ok(o), Ok(n)) => (p, o, n),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            let hint = if args.contains_key("patch") {
                " To apply a multi-file patch, also send mode=\"patch\"."
            } else {
                ""
            };
            return fail(format!("{e}{hint}"));
        }
    };
    let replace_all = flag(&args, "replace_all", false);
    let path = match authorize(&builtins, &ctx, &path_arg, PathAccess::Write) {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    let files = builtins.files_of(&ctx.session_id);
    let root = builtins.root_beneath(&ctx.session_id, &path);
    let result = tokio::task::spawn_blocking(move || -> Result<Value, String> {
        let cannot_open = |e: std::io::Error| format!("Cannot open '{path_arg}': {e}. Check the path with search_files.");
        // On this machine the checked path is used as it is: resolving it again could follow a
        // link that appeared since the check.
        let target = if files.is_local() { path } else { files.canonicalize(&path).map_err(cannot_open)? };
        let before = read_text(files.as_ref(), &root, &target).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => cannot_open(e),
            _ => format!("Cannot read '{path_arg}' as UTF-8 text: {e}."),
        })?;
        match replace_exact(&before, &old, &new, replace_all)? {
            Replaced::AlreadyApplied => Ok(json!({
                "success": true,
                "no_change": true,
                "note": format!("'{path_arg}' already contains the new text and not the old, so the change looks applied already. Nothing was written; do not send it again."),
            })),
            Replaced::Changed(after, count) => {
                let written = files.write_beneath(&root, &target, after.as_bytes()).map_err(|e| format!("Could not write '{path_arg}': {e}. The file is unchanged."))?;
                Ok(json!({"success": true, "replacements": count, "diff": diff(&path_arg, &before, &after), "files_modified": [target.display().to_string()], "verified": written.verified}))
            }
        }
    })
    .await;
    match result {
        Ok(Ok(v)) => ToolResult::json(v),
        Ok(Err(e)) => fail(e),
        Err(e) => fail(format!("Patching failed unexpectedly: {e}.")),
    }
}

async fn patch_mode(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let text = match optional_str(&args, "patch") {
        Ok(Some(t)) => t.to_string(),
        Ok(None) => {
            return fail(
                "'patch' is required in patch mode: send the text from '*** Begin Patch' to '*** End Patch'.",
            );
        }
        Err(e) => return fail(e),
    };
    let ops = match parse_patch(&text) {
        Ok(ops) => ops,
        Err(e) => return fail(e),
    };
    // Every path is checked before anything is touched.
    let mut resolved: BTreeMap<String, (PathBuf, PathBuf)> = BTreeMap::new();
    for op in &ops {
        let names: Vec<&String> = match op {
            FileOp::Update { path, .. } | FileOp::Add { path, .. } | FileOp::Delete { path } => {
                vec![path]
            }
            FileOp::Move { from, to } => vec![from, to],
        };
        for name in names {
            match authorize(&builtins, &ctx, name, PathAccess::Write) {
                Ok(p) => {
                    let root = builtins.root_beneath(&ctx.session_id, &p);
                    resolved.insert(name.clone(), (root, p));
                }
                Err(refusal) => return refusal,
            }
        }
    }
    let files = builtins.files_of(&ctx.session_id);
    let result = tokio::task::spawn_blocking(move || -> Result<Value, String> {
        let exists = |p: &Path| files.kind(p).is_ok();
        enum Change {
            Write(PathBuf, PathBuf, Vec<u8>),
            Remove(PathBuf, PathBuf),
        }
        let mut changes = vec![];
        let mut diffs = vec![];
        for op in &ops {
            match op {
                FileOp::Update { path, hunks } => {
                    let (root, p) = &resolved[path];
                    let before = read_text(files.as_ref(), root, p)
                        .map_err(|e| format!("Cannot read '{path}': {e}."))?;
                    let after = apply_hunks(path, &before, hunks)?;
                    diffs.push(diff(path, &before, &after));
                    changes.push(Change::Write(root.clone(), p.clone(), after.into_bytes()));
                }
                FileOp::Add { path, content } => {
                    let (root, p) = &resolved[path];
                    if exists(p) {
                        return Err(format!(
                            "'{path}' already exists; use '*** Update File:' to change it."
                        ));
                    }
                    diffs.push(diff(path, "", content));
                    changes.push(Change::Write(
                        root.clone(),
                        p.clone(),
                        content.clone().into_bytes(),
                    ));
                }
                FileOp::Delete { path } => {
                    let (root, p) = &resolved[path];
                    if !matches!(files.kind(p), Ok(FileKind::File(_))) {
                        return Err(format!("'{path}' is not a file, so it cannot be deleted."));
                    }
                    changes.push(Change::Remove(root.clone(), p.clone()));
                }
                FileOp::Move { from, to } => {
                    let ((root_a, a), (root_b, b)) = (&resolved[from], &resolved[to]);
                    let bytes = files
                        .read_beneath(root_a, a)
                        .map_err(|e| format!("Cannot read '{from}' to move it: {e}."))?;
                    if exists(b) {
                        return Err(format!(
                            "'{to}' already exists; a move will not overwrite it."
                        ));
                    }
                    changes.push(Change::Write(root_b.clone(), b.clone(), bytes));
                    changes.push(Change::Remove(root_a.clone(), a.clone()));
                }
            }
        }
        let mut modified = vec![];
        let mut verified = true;
        for change in changes {
            match change {
                Change::Write(root, p, bytes) => {
                    let written = files
                        .write_beneath(&root, &p, &bytes)
                        .map_err(|e| format!("Could not write {}: {e}.", p.display()))?;
                    verified &= written.verified;
                    modified.push(p.display().to_string());
                }
                Change::Remove(root, p) => {
                    files
                        .remove_beneath(&root, &p)
                        .map_err(|e| format!("Could not delete {}: {e}.", p.display()))?;
                    modified.push(p.display().to_string());
                }
            }
        }
        Ok(json!({"success": true, "diff": diffs.join(""), "files_modified": modified, "verified": verified}))
    })
    .await;
    match result {
        Ok(Ok(v)) => ToolResult::json(v),
        Ok(Err(e)) => fail(e),
        Err(e) => fail(format!("Patching failed unexpectedly: {e}.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_match_rule() {
        assert_eq!(
            replace_exact("a b a", "b", "c", false),
            Ok(Replaced::Changed("a c a".into(), 1))
        );
        let err = replace_exact("x\ny\nx\n", "x", "z", false).unwrap_err();
        assert!(
            err.contains("matches 2 places") && err.contains("L1:") && err.contains("L3:"),
            "{err}"
        );
        assert_eq!(
            replace_exact("x\ny\nx\n", "x", "z", true),
            Ok(Replaced::Changed("z\ny\nz\n".into(), 2))
        );
        assert!(replace_exact("abc", "", "x", false).is_err());
        assert!(replace_exact("abc", "  ", "x", false).is_err());
        assert!(replace_exact("abc", "a", "a", false).is_err());
        assert!(
            replace_exact("abc", "zzz", "y", false)
                .unwrap_err()
                .contains("not found")
        );
        assert_eq!(
            replace_exact("let value = 2;", "let value = 1;", "let value = 2;", false),
            Ok(Replaced::AlreadyApplied)
        );
        assert_eq!(
            replace_exact("a\r\nb\r\n", "a\nb", "c\nd", false),
            Ok(Replaced::Changed("c\r\nd\r\n".into(), 1))
        );
    }

    #[test]
    fn multi_file_patch_parses_and_applies() {
        let text = "*** Begin Patch\n*** Update File: src/a.txt\n@@ fn\n one\n-two\n+TWO\n three\n*** Add File: b.txt\n+hello\n*** Delete File: c.txt\n*** Move File: d.txt -> e/d.txt\n*** End Patch\n";
        let ops = parse_patch(text).unwrap();
        assert_eq!(ops.len(), 4);
        let FileOp::Update { hunks, .. } = &ops[0] else {
            panic!("update first")
        };
        assert_eq!(
            apply_hunks("a", "zero\none\ntwo\nthree\n", hunks).unwrap(),
            "zero\none\nTWO\nthree\n"
        );
        assert!(apply_hunks("a", "nothing here\n", hunks).is_err());
        assert!(
            parse_patch("*** Begin Patch\n*** Delete File: ../x\n*** End Patch")
                .unwrap_err()
                .contains("..")
        );
        assert!(
            parse_patch("*** Begin Patch\n*** Delete File: x\n")
                .unwrap_err()
                .contains("End Patch")
        );
    }

    #[test]
    fn diff_shows_the_change() {
        let d = diff("f", "a\nb\nc\n", "a\nB\nc\n");
        assert!(d.contains("-b\n+B\n"), "{d}");
    }

    proptest::proptest! {
        #[test]
        fn any_patch_text_parses_or_errs(text in "(\\*\\*\\* (Begin Patch|End Patch|Update File: a|Add File: b|Delete File: c|Move File: a -> d)|@@|[ +-]x|\\n){0,30}") {
            if let Ok(ops) = parse_patch(&text) {
                for op in ops {
                    if let FileOp::Update { hunks, .. } = op {
                        let _ = apply_hunks("a", "x\nx\n", &hunks);
                        let _ = apply_hunks("a", "", &hunks);
                    }
                }
            }
        }
    }
}
