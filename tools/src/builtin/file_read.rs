//! The `read_file` tool: a text file as numbered lines, a page at a time. Binary files are
//! refused with what they look like; UTF-16 (by BOM, or by where the zero bytes fall) is
//! converted to UTF-8 with a note; files over 10 MiB and device files are refused.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::args::{optional_int, required_str};
use super::files::{FileKind, Files};
use super::{Builtins, PathAccess, authorize};
use crate::tool::{CallContext, ToolResult};

/// Largest file read.
pub(crate) const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Lines per page by default.
const DEFAULT_LIMIT: i64 = 500;
/// Most lines per page.
const MAX_LIMIT: i64 = 2000;
/// Longest line shown; longer ones are clipped.
const MAX_LINE_CHARS: usize = 2000;
/// Most characters one read returns.
const MAX_READ_CHARS: usize = 100_000;

/// What the bytes of a file are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Utf8,
    Utf16Le,
    Utf16Be,
    Binary,
}

/// Decides the encoding from the start of a file (`sample` holds up to the first 1000 bytes).
pub(crate) fn sniff(sample: &[u8], whole_file_len: usize) -> Encoding {
    if sample.starts_with(&[0xFF, 0xFE]) {
        return Encoding::Utf16Le;
    }
    if sample.starts_with(&[0xFE, 0xFF]) {
        return Encoding::Utf16Be;
    }
    let has_nul = sample.contains(&0);
    let utf8_ok = match std::str::from_utf8(sample) {
        Ok(_) => true,
        // An error in the last three bytes of a cut sample is a character cut in half.
        Err(e) => {
            e.error_len().is_none()
                && sample.len() < whole_file_len
                && e.valid_up_to() + 3 >= sample.len()
        }
    };
    if !has_nul && utf8_ok {
        return Encoding::Utf8;
    }
    // UTF-16 text of mostly Latin letters has zeros at every other byte; which parity they fall
    // on tells the byte order. Parity, not density, so mixed Latin and CJK text still counts.
    let probe = &sample[..sample.len().min(512)];
    let zeros_even = probe.iter().step_by(2).filter(|&&b| b == 0).count();
    let zeros_odd = probe.iter().skip(1).step_by(2).filter(|&&b| b == 0).count();
    if zeros_even == 0 && zeros_odd >= 2 {
        Encoding::Utf16Le
    } else if zeros_odd == 0 && zeros_even >= 2 {
        Encoding::Utf16Be
    } else {
        Encoding::Binary
    }
}

/// Decodes UTF-16 bytes (a BOM is dropped), replacing broken pairs.
pub(crate) fn decode_utf16(bytes: &[u8], big_endian: bool) -> String {
    let units = bytes.chunks_exact(2).map(|p| {
        if big_endian {
            u16::from_be_bytes([p[0], p[1]])
        } else {
            u16::from_le_bytes([p[0], p[1]])
        }
    });
    let text: String = char::decode_utf16(units)
        .map(|r| r.unwrap_or('\u{FFFD}'))
        .collect();
    text.strip_prefix('\u{FEFF}')
        .map(str::to_string)
        .unwrap_or(text)
}

/// What a binary file looks like, from its first bytes.
fn binary_kind(sample: &[u8]) -> &'static str {
    let starts = |magic: &[u8]| sample.starts_with(magic);
    if starts(b"\x89PNG") {
        "PNG image"
    } else if starts(b"\xFF\xD8\xFF") {
        "JPEG image"
    } else if starts(b"GIF8") {
        "GIF image"
    } else if starts(b"%PDF") {
        "PDF document"
    } else if starts(b"PK\x03\x04") {
        "ZIP archive"
    } else if starts(b"\x1F\x8B") {
        "gzip data"
    } else if starts(b"BZh") {
        "bzip2 data"
    } else if starts(b"\xFD7zXZ") {
        "xz data"
    } else if starts(b"7z\xBC\xAF") {
        "7z archive"
    } else if starts(b"\x7FELF") {
        "ELF executable"
    } else if starts(b"MZ") {
        "Windows executable"
    } else if starts(&[0xCF, 0xFA, 0xED, 0xFE]) || starts(&[0xCA, 0xFE, 0xBA, 0xBE]) {
        "Mach-O executable"
    } else if starts(b"SQLite format 3") {
        "SQLite database"
    } else if starts(b"RIFF") {
        "RIFF media (WAV/AVI/WebP)"
    } else if starts(b"OggS") {
        "Ogg media"
    } else if starts(b"fLaC") {
        "FLAC audio"
    } else if starts(b"ID3") {
        "MP3 audio"
    } else if sample.len() > 8 && &sample[4..8] == b"ftyp" {
        "MP4 media"
    } else if starts(b"BM") {
        "BMP image"
    } else if starts(b"II*\0") || starts(b"MM\0*") {
        "TIFF image"
    } else {
        "unknown binary data"
    }
}

/// `1234` as `1.2 KB` and the like.
fn human_size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    }
}

const DEVICES: &[&str] = &[
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/full",
    "/dev/stdin",
    "/dev/tty",
    "/dev/console",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/fd/0",
    "/dev/fd/1",
    "/dev/fd/2",
];

fn err(value: Value) -> ToolResult {
    ToolResult::error_json(value)
}

/// Up to five names in the same directory that look like `path`'s, for a "not found" answer.
fn similar_files(files: &dyn Files, path: &Path) -> Vec<String> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return vec![];
    };
    let wanted = name.to_lowercase();
    let stem = wanted.split('.').next().unwrap_or("").to_string();
    let Ok(entries) = files.read_dir(dir) else {
        return vec![];
    };
    let mut found: Vec<String> = entries
        .into_iter()
        .take(50)
        .map(|e| e.name)
        .filter(|n| {
            let l = n.to_lowercase();
            (!stem.is_empty() && l.contains(&stem))
                || wanted.contains(l.split('.').next().unwrap_or("\u{0}"))
        })
        .map(|n| dir.join(n).display().to_string())
        .collect();
    found.sort();
    found.truncate(5);
    found
}

/// Runs the `read_file` tool.
pub(crate) async fn call(
    builtins: Arc<Builtins>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let path_arg = match required_str(&args, "path", "\"src/main.rs\"") {
        Ok(p) => p.to_string(),
        Err(e) => return err(json!({"error": e})),
    };
    let offset = match optional_int(&args, "offset") {
        Ok(o) => o.unwrap_or(1).max(1) as usize,
        Err(e) => return err(json!({"error": e})),
    };
    let limit = match optional_int(&args, "limit") {
        Ok(l) => l.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT) as usize,
        Err(e) => return err(json!({"error": e})),
    };
    let path = match authorize(&builtins, &ctx, &path_arg, PathAccess::Read) {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    let files = builtins.files_of(&ctx.session_id);
    match tokio::task::spawn_blocking(move || read(files.as_ref(), &path_arg, &path, offset, limit))
        .await
    {
        Ok(result) => result,
        Err(e) => err(json!({"error": format!("Reading the file failed unexpectedly: {e}.")})),
    }
}

/// Most entries of a directory that `read_file` lists when asked to read one.
const DIRECTORY_ENTRIES: usize = 100;

/// The names in directory `path`, sorted, sub-directories with a trailing `/`, at most
/// [`DIRECTORY_ENTRIES`]; and how many more there are.
fn directory_entries(files: &dyn Files, path: &Path) -> (Vec<String>, usize) {
    let Ok(read) = files.read_dir(path) else {
        return (Vec::new(), 0);
    };
    let mut names: Vec<String> = read
        .into_iter()
        .map(|e| if e.is_dir { e.name + "/" } else { e.name })
        .collect();
    names.sort();
    let more = names.len().saturating_sub(DIRECTORY_ENTRIES);
    names.truncate(DIRECTORY_ENTRIES);
    (names, more)
}

fn read(files: &dyn Files, shown: &str, path: &Path, offset: usize, limit: usize) -> ToolResult {
    if DEVICES.iter().any(|d| Path::new(d) == path) {
        return err(
            json!({"error": format!("Cannot read '{shown}': it is a device that never ends or waits for input.")}),
        );
    }
    let kind = match files.kind(path) {
        Ok(k) => k,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return err(
                json!({"error": format!("File not found: {shown}"), "similar_files": similar_files(files, path)}),
            );
        }
        Err(e) => return err(json!({"error": format!("Cannot read '{shown}': {e}.")})),
    };
    if kind == FileKind::Dir {
        // Asked to read a directory, the caller most likely wants what is in it: answer with
        // its entries. Only when there is more below does the hint name the call that lists it
        // all, written out (small models copy an example far better than they follow an
        // instruction, and repeat a hint they do not need).
        let (entries, more) = directory_entries(files, path);
        let deeper = more > 0 || entries.iter().any(|e| e.ends_with('/'));
        let mut hint = format!("'{shown}' is a directory, not a file: these are its entries.");
        if deeper {
            let list = json!({"pattern": "*", "target": "files", "path": shown});
            hint.push_str(&format!(
                " To list every file below it, call search_files with {list}."
            ));
        }
        let mut answer =
            json!({"path": shown, "directory": true, "entries": entries, "hint": hint});
        if more > 0 {
            answer["more_entries"] = json!(more);
        }
        return ToolResult::json(answer);
    }
    let FileKind::File(size) = kind else {
        return err(json!({
            "error": format!("Cannot read '{shown}': it is not a regular file (a FIFO, socket or device could block)."),
        }));
    };
    if size > MAX_FILE_BYTES {
        return err(json!({
            "error": format!("'{shown}' is {}, more than the 10 MiB read_file handles. Use search_files to find the part you need, or terminal with head, tail or sed -n to print a range.", human_size(size)),
            "file_size": size,
        }));
    }
    let bytes = match files.read(path) {
        Ok(bytes) => bytes,
        Err(e) => return err(json!({"error": format!("Cannot read '{shown}': {e}.")})),
    };
    let sample = &bytes[..bytes.len().min(1000)];
    let (text, note) = match sniff(sample, bytes.len()) {
        Encoding::Utf8 => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            (
                text.strip_prefix('\u{FEFF}')
                    .map(str::to_string)
                    .unwrap_or(text),
                None,
            )
        }
        Encoding::Utf16Le => (
            decode_utf16(&bytes, false).replace("\r\n", "\n"),
            Some(
                "The file is UTF-16-LE; it was converted to UTF-8 for display. write_file and patch would save it back as UTF-8.",
            ),
        ),
        Encoding::Utf16Be => (
            decode_utf16(&bytes, true).replace("\r\n", "\n"),
            Some(
                "The file is UTF-16-BE; it was converted to UTF-8 for display. write_file and patch would save it back as UTF-8.",
            ),
        ),
        Encoding::Binary => {
            return err(json!({
                "is_binary": true,
                "file_size": size,
                "error": format!("'{shown}' is binary ({}, {}) and cannot be shown as text. Use terminal (file, xxd, strings) to inspect it.", binary_kind(sample), human_size(size)),
            }));
        }
    };
    if text.is_empty() {
        return ToolResult::json(
            json!({"content": "", "path": shown, "total_lines": 0, "file_size": size, "hint": "The file is empty (0 bytes)."}),
        );
    }
    let lines: Vec<&str> = text
        .split_inclusive('\n')
        .map(|l| l.strip_suffix('\n').unwrap_or(l))
        .collect();
    let total = lines.len();
    if offset > total {
        return ToolResult::json(
            json!({"content": "", "path": shown, "total_lines": total, "file_size": size, "hint": format!("Line {offset} is past the end: the file has {total} lines. Send an offset of {total} or less.")}),
        );
    }
    let end = (offset - 1 + limit).min(total);
    let mut content = String::new();
    for (i, line) in lines[offset - 1..end].iter().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        content.push_str(&(offset + i).to_string());
        content.push('|');
        if line.chars().count() > MAX_LINE_CHARS {
            content.extend(line.chars().take(MAX_LINE_CHARS));
            content.push_str("... [line clipped]");
        } else {
            content.push_str(line);
        }
        content.push('\n');
    }
    if content.chars().count() > MAX_READ_CHARS {
        return err(json!({
            "error": format!("These lines come to more than {MAX_READ_CHARS} characters. Ask for fewer lines with offset and limit; the file has {total} lines."),
            "path": shown, "total_lines": total, "file_size": size,
        }));
    }
    let mut result =
        json!({"content": content, "path": shown, "total_lines": total, "file_size": size});
    let mut hints = vec![];
    if let Some(note) = note {
        hints.push(note.to_string());
    }
    if end < total {
        hints.push(format!(
            "Showing lines {offset}-{end} of {total}; send offset={} to read on.",
            end + 1
        ));
    }
    if !hints.is_empty() {
        result["hint"] = json!(hints.join(" "));
    }
    ToolResult::json(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(text: &str, big: bool, bom: bool) -> Vec<u8> {
        let mut out = vec![];
        if bom {
            out.extend(if big { [0xFE, 0xFF] } else { [0xFF, 0xFE] });
        }
        for u in text.encode_utf16() {
            out.extend(if big {
                u.to_be_bytes()
            } else {
                u.to_le_bytes()
            });
        }
        out
    }

    #[test]
    fn utf16_is_recognised_in_both_orders_with_and_without_bom() {
        for big in [false, true] {
            for bom in [false, true] {
                let bytes = utf16("hello\nwörld 世界\n", big, bom);
                let enc = sniff(&bytes, bytes.len());
                assert_eq!(
                    enc,
                    if big {
                        Encoding::Utf16Be
                    } else {
                        Encoding::Utf16Le
                    },
                    "big={big} bom={bom}"
                );
                assert_eq!(decode_utf16(&bytes, big), "hello\nwörld 世界\n");
            }
        }
    }

    #[test]
    fn binary_and_text() {
        assert_eq!(sniff(b"plain text\n", 11), Encoding::Utf8);
        assert_eq!(
            sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0", 17),
            Encoding::Binary
        );
        assert_eq!(sniff("caf\u{e9}".as_bytes(), 5), Encoding::Utf8);
        assert_eq!(
            sniff(&[0x61, 0xC3], 10),
            Encoding::Utf8,
            "a character cut by the sample is fine"
        );
        assert_eq!(sniff(&[0x61, 0xFF, 0x62], 3), Encoding::Binary);
        assert_eq!(
            sniff(&[0, 0, 1, 0, 0, 0, 1, 0], 8),
            Encoding::Binary,
            "zeros at both parities"
        );
        assert_eq!(binary_kind(b"\x7FELF\x02"), "ELF executable");
        assert_eq!(human_size(4198), "4.1 KB");
    }
}
