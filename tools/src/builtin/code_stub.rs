//! The Python module `troupe_tools` that `execute_code` writes next to each script. Each
//! function sends one JSON line `{"tool", "args", "token"}` over the Unix socket named in
//! `TROUPE_RPC_SOCKET` and returns the parsed answer (a dict). One connection per script, one
//! request at a time under a lock, so threads in a script each get their own answer.

/// The module's name, as scripts import it.
pub(crate) const MODULE_NAME: &str = "troupe_tools";

/// The module's source.
pub(crate) const STUB_SOURCE: &str = r#""""Tools for scripts run by troupe's execute_code.

Every function returns a dict: the tool's answer. A failed call has an "error" key.
"""
import json as _json
import os as _os
import shlex as _shlex
import socket as _socket
import threading as _threading
import time as _time

__all__ = [
    "read_file", "write_file", "search_files", "patch", "terminal",
    "tool_search", "tool_describe", "tool_call",
    "json_parse", "shell_quote", "retry",
]

_lock = _threading.Lock()
_conn = None
_reader = None


def _connect():
    global _conn, _reader
    if _conn is None:
        path = _os.environ.get("TROUPE_RPC_SOCKET")
        if not path:
            raise RuntimeError("TROUPE_RPC_SOCKET is not set: this module only works inside execute_code")
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(600)
        sock.connect(path)
        _conn = sock
        _reader = sock.makefile("rb")
    return _conn, _reader


def _call(tool, args):
    clean = {k: v for k, v in args.items() if v is not None}
    line = _json.dumps({"tool": tool, "args": clean, "token": _os.environ.get("TROUPE_RPC_TOKEN", "")}) + "\n"
    with _lock:
        sock, reader = _connect()
        sock.sendall(line.encode("utf-8"))
        answer = reader.readline()
    if not answer:
        raise RuntimeError("troupe closed the tool connection")
    result = _json.loads(answer)
    if isinstance(result, str):
        try:
            result = _json.loads(result)
        except ValueError:
            pass
    return result


def read_file(path, offset=1, limit=500):
    """Numbered lines of a text file: {"content", "total_lines", ...}."""
    return _call("read_file", {"path": path, "offset": offset, "limit": limit})


def write_file(path, content):
    """Replaces a whole file atomically, creating parent directories."""
    return _call("write_file", {"path": path, "content": content})


def search_files(pattern, target="content", path=".", file_glob=None, limit=50, offset=0, output_mode="content", context=0):
    """Regex over file contents (target="content") or glob over names (target="files")."""
    return _call("search_files", {"pattern": pattern, "target": target, "path": path, "file_glob": file_glob,
                                  "limit": limit, "offset": offset, "output_mode": output_mode, "context": context})


def patch(path=None, old_string=None, new_string=None, replace_all=False, mode="replace", patch=None):
    """Exact replacement in one file, or a multi-file patch with mode="patch"."""
    return _call("patch", {"path": path, "old_string": old_string, "new_string": new_string,
                           "replace_all": replace_all, "mode": mode, "patch": patch})


def terminal(command, timeout=None, workdir=None):
    """Runs a shell command in the foreground: {"output", "exit_code", ...}."""
    return _call("terminal", {"command": command, "timeout": timeout, "workdir": workdir})


def tool_search(queries, limit=None):
    """Searches the tools loaded on demand."""
    if isinstance(queries, str):
        queries = [queries]
    return _call("tool_search", {"queries": queries, "limit": limit})


def tool_describe(names):
    """The full schemas of tools found with tool_search."""
    if isinstance(names, str):
        names = [names]
    return _call("tool_describe", {"names": names})


def tool_call(name=None, arguments=None, calls=None):
    """Calls a tool found with tool_search by its exact name."""
    return _call("tool_call", {"name": name, "arguments": arguments, "calls": calls})


def json_parse(text):
    """json.loads that tolerates control characters and a leading byte-order mark."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _json.loads(text.lstrip("\ufeff"), strict=False)


def shell_quote(value):
    """Quotes a string for safe use in a shell command."""
    return _shlex.quote(value)


def retry(fn, max_attempts=3, delay=2):
    """Calls fn() until it succeeds, waiting delay, 2*delay, ... between tries; re-raises the last error."""
    last = None
    for attempt in range(max_attempts):
        try:
            return fn()
        except Exception as exc:  # the caller decides what is worth retrying
            last = exc
            if attempt + 1 < max_attempts:
                _time.sleep(delay * (2 ** attempt))
    raise last
"#;
