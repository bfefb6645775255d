//! The descriptions and JSON Schemas the model reads for each built-in tool, in one place so
//! they can be reviewed together.

use serde_json::{Value, json};

/// (description, parameters) of a built-in tool.
pub(crate) fn schema(name: &str) -> (&'static str, Value) {
    match name {
        "terminal" => (
            "Run a shell command on the host and get its output and exit code. Commands run in the session's \
             working directory, and a `cd` carries over to the next command. Output beyond 50,000 characters \
             keeps its start and end. Foreground commands time out after 180 s by default (600 s at most); \
             set background=true for servers and long jobs, then follow them with the process tool. Risky \
             commands wait for the user's approval; destructive ones on the whole system are refused.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command."},
                    "background": {"type": "boolean", "description": "Start it and return at once with a process id (default false)."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Seconds before the command is stopped (default 180, foreground at most 600)."},
                    "workdir": {"type": "string", "description": "Run in this directory for this one command instead of the session's."},
                    "writable": {"type": "array", "items": {"type": "string"}, "description": "Existing directories or files outside the workspace and temp that this one command must write; the user is asked to approve them."},
                    "pty": {"type": "boolean", "description": "With background=true: run on a terminal (for REPLs, prompts, programs that need a tty); type into it with process submit/write, read the screen with process log."},
                    "rows": {"type": "integer", "minimum": 2, "maximum": 1000, "description": "Terminal height for pty (default 30)."},
                    "cols": {"type": "integer", "minimum": 2, "maximum": 1000, "description": "Terminal width for pty (default 120)."},
                    "notify_on_complete": {"type": "boolean", "description": "With background=true: you are told once, in this conversation, when the process ends (exit code and output tail); no polling needed."},
                    "watch_patterns": {"type": "array", "items": {"type": "string"}, "description": "With background=true: you are told when an output line contains one of these strings (at most one notice per 15 s; ignored with notify_on_complete)."}
                },
                "required": ["command"]
            }),
        ),
        "process" => (
            "Look after background processes started with terminal(background=true): list them, poll one for \
             its status and latest output, read its log by lines, wait for it to finish, kill it with \
             everything it started. A process started with pty=true takes input: write types data and named \
             keys, submit types a line and Enter, close sends end-of-input (Ctrl-D). A subagent can hand a \
             running process off to its parent. Ids may be shortened to a unique prefix of at least 4 \
             characters. Finished processes stay readable for 7 days.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "kill", "write", "submit", "close", "handoff"]},
                    "session_id": {"type": "string", "description": "The process id (proc_...); needed by every action but list."},
                    "data": {"type": "string", "description": "write: text typed as is; submit: the line to type before Enter; handoff: one sentence saying what the process is for."},
                    "keys": {"type": "array", "items": {"type": "string"}, "description": "write: named keys typed after data, e.g. [\"Enter\"], [\"Ctrl-C\"], [\"Ctrl-D\"], [\"Up\"], [\"Tab\"], [\"Escape\"]."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Seconds wait may block (default and maximum 180)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "First line for log (0 is the start); leave out for the last lines."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Lines for log (default 200)."}
                },
                "required": ["action"]
            }),
        ),
        "read_file" => (
            "Read a text file as numbered lines (`N|text`), a page at a time: offset is the first line \
             (from 1), limit the number of lines (default 500, at most 2000). UTF-16 files are converted to \
             UTF-8; binary files and files over 10 MiB are refused with the reason.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The file, absolute or relative to the working directory."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to show (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Lines to show (default 500)."}
                },
                "required": ["path"]
            }),
        ),
        "write_file" => (
            "Write a whole file, replacing what was there; missing parent directories are created. The write \
             is atomic: readers see the old content or the new, never half of it. Use patch to change part \
             of a file.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The file, absolute or relative to the working directory."},
                    "content": {"type": "string", "description": "The complete new content."}
                },
                "required": ["path", "content"]
            }),
        ),
        "patch" => (
            "Change part of a file by exact text replacement: old_string must appear exactly once (or set \
             replace_all=true to change every occurrence). For several files at once, send mode=\"patch\" \
             with a patch in the `*** Begin Patch` format (Update, Add, Delete and Move File sections with \
             ` `, `-` and `+` lines).",
            json!({
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["replace", "patch"], "description": "replace (default) or patch."},
                    "path": {"type": "string", "description": "The file to change (replace mode)."},
                    "old_string": {"type": "string", "description": "The exact text to find, with enough context to be unique."},
                    "new_string": {"type": "string", "description": "The text to put in its place."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring one (default false)."},
                    "patch": {"type": "string", "description": "The multi-file patch (patch mode)."}
                }
            }),
        ),
        "search_files" => (
            "Search file contents with a regular expression (target=\"content\") or find files by a glob on \
             their names (target=\"files\"). .git and target directories are skipped. Results come in pages \
             (limit, offset); output_mode content, files_only or count.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A regex for content, a glob like *.rs for files."},
                    "target": {"type": "string", "enum": ["content", "files"], "description": "What to search (default content)."},
                    "path": {"type": "string", "description": "Where to start (default the working directory)."},
                    "file_glob": {"type": "string", "description": "Only search files whose names match this glob."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Results per page (default 50)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Results to skip (default 0)."},
                    "output_mode": {"type": "string", "enum": ["content", "files_only", "count"]},
                    "context": {"type": "integer", "minimum": 0, "description": "Lines of context around each match (default 0)."}
                },
                "required": ["pattern"]
            }),
        ),
        "execute_code" => (
            "Run a Python script that calls tools itself, for work that needs several tool calls with logic \
             between them. In the script, `from troupe_tools import read_file, write_file, search_files, \
             patch, terminal, tool_search, tool_describe, tool_call` (each returns a dict), plus the helpers \
             json_parse, shell_quote and retry. Only what the script prints comes back. Limits: 300 s, 50 \
             tool calls, 50 KB of stdout. The script sees no API keys or tokens.",
            json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Python source."}
                },
                "required": ["code"]
            }),
        ),
        _ => ("", json!({"type": "object", "properties": {}})),
    }
}
