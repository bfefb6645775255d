"""An MCP client (the official `mcp` Python SDK) that drives `troupe mcp serve` the way an
editor or agent would, for troupe's integration tests (orchestrator/tests/integration/mcp_serve.rs).

    python troupe_mcp_client.py SCENARIO --stdio TROUPE_BIN ARGS...   # troupe started by us
    python troupe_mcp_client.py SCENARIO --http URL --token TOKEN      # a running --http server

It prints one JSON object on its last line: what it saw. The Rust test decides what is right.
Scenarios:
  list         the names of the tools offered
  bridge       list tools, tool_search QUERY, tool_call TOOL with ARGS (JSON), as given by env
               TROUPE_QUERY, TROUPE_TOOL, TROUPE_ARGS
  call         tool_call TOOL with ARGS (a call a hook may deny, one needing approval, a slow
               one), with progress; answers elicitations with TROUPE_ELICIT (once|always|deny)
               when set, noting the decisions the form offered
  direct       call the direct tool TROUPE_TOOL with TROUPE_ARGS (--toolsets), with progress
  cancel       start the direct tool TROUPE_TOOL with TROUPE_ARGS, collect progress, cancel it
               after TROUPE_CANCEL_AFTER seconds, then check the connection still answers
  list_changed list tools (then write the file TROUPE_LISTED when set), call the direct tool TROUPE_TOOL with TROUPE_ARGS when set, wait up
               to TROUPE_WAIT seconds for notifications/tools/list_changed and list again (on each
               notice until TROUPE_EXPECT is listed, when set), and tool_search TROUPE_QUERY
  kanban       (--toolsets kanban) create a task titled TROUPE_TITLE for `coder`, follow it to
               its end with progress, show it, list the done tasks
  agent        (--agent P) ask TROUPE_TOOL (run_P) TROUPE_PROMPT with progress, then continue
               the session with TROUPE_PROMPT2
  agent_hold   (--agent P) open a session, hand its id over in a file, wait, continue it
  agent_continue  try to continue another client's session TROUPE_SESSION
  timing       TROUPE_ROUNDS rounds of TROUPE_TOOL(TROUPE_ARGS) called directly (a plain MCP
               server) or through tool_call (troupe), and of tool_search TROUPE_QUERY; medians
"""

import json
import os
import statistics
import sys
import time
from contextlib import asynccontextmanager

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def result_json(result):
    return {"is_error": bool(result.is_error), "text": text_of(result), "structured": result.structured_content}


@asynccontextmanager
async def connect(target, **session_args):
    kind = target[0]
    if kind == "--stdio":
        params = StdioServerParameters(command=target[1], args=target[2:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, **session_args) as session:
                await session.initialize()
                yield session
    elif kind == "--http":
        url, token = target[1], target[3]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write, **session_args) as session:
                    await session.initialize()
                    yield session
    else:
        raise SystemExit(f"unknown target {kind}; use --stdio CMD ARGS... or --http URL --token T")


def env_json(name, default=None):
    raw = os.environ.get(name)
    return json.loads(raw) if raw else default


async def bridge(target):
    async with connect(target) as session:
        listed = await session.list_tools()
        tools = {
            t.name: {
                "read_only": t.annotations.read_only_hint if t.annotations else None,
                "description": t.description or "",
            }
            for t in listed.tools
        }
        query = os.environ["TROUPE_QUERY"]
        found = await session.call_tool("tool_search", {"queries": [query]})
        tool = os.environ["TROUPE_TOOL"]
        described = await session.call_tool("tool_describe", {"names": [tool]})
        args = env_json("TROUPE_ARGS", {})
        called = await session.call_tool("tool_call", {"calls": [{"name": tool, "arguments": args}]})
        return {
            "tools": tools,
            "search": result_json(found),
            "describe": result_json(described),
            "call": result_json(called),
        }


async def call(target):
    asked = []
    answer = os.environ.get("TROUPE_ELICIT")

    offered = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        schema = getattr(params, "requested_schema", None) or getattr(params, "requestedSchema", None) or {}
        offered.extend(schema.get("properties", {}).get("decision", {}).get("enum", []))
        if answer in ("once", "always", "session"):
            return types.ElicitResult(action="accept", content={"decision": answer})
        return types.ElicitResult(action="accept", content={"decision": "deny", "reason": "not today"})

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    extra = {"elicitation_callback": on_elicit} if answer else {}
    async with connect(target, **extra) as session:
        tool = os.environ["TROUPE_TOOL"]
        args = env_json("TROUPE_ARGS", {})
        called = await session.call_tool(
            "tool_call", {"calls": [{"name": tool, "arguments": args}]}, progress_callback=on_progress
        )
        out = result_json(called)
        out["asked"] = asked
        out["offered"] = offered
        out["progress"] = progress
        return out


async def direct(target):
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    async with connect(target) as session:
        called = await session.call_tool(
            os.environ["TROUPE_TOOL"], env_json("TROUPE_ARGS", {}), progress_callback=on_progress
        )
        out = result_json(called)
        out["progress"] = progress
        return out


def processes_with(marker):
    """Process ids whose command line holds `marker` (this client's own excepted)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry))
    return found


async def cancel(target):
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    after = float(os.environ.get("TROUPE_CANCEL_AFTER", "3"))
    marker = os.environ["TROUPE_MARKER"]
    before = []
    async with connect(target) as session:
        started = time.monotonic()
        finished = None

        async def look():
            await anyio.sleep(max(after - 0.7, 0.1))
            before.extend(processes_with(marker))

        with anyio.move_on_after(after) as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(look)
                finished = await session.call_tool(
                    os.environ["TROUPE_TOOL"], env_json("TROUPE_ARGS", {}), progress_callback=on_progress
                )
        cancelled = scope.cancelled_caught
        elapsed = time.monotonic() - started
        # The server stops the call's process group; give it a moment, with the connection open.
        gone_after = None
        for _ in range(50):
            await anyio.sleep(0.1)
            if not processes_with(marker):
                gone_after = time.monotonic() - started - elapsed
                break
        listed = await session.list_tools()
        return {
            "cancelled": cancelled,
            "finished": result_json(finished) if finished else None,
            "elapsed": elapsed,
            "progress": progress,
            "running_before": before,
            "left_after": processes_with(marker),
            "gone_after_seconds": gone_after,
            "still_answers": len(listed.tools) > 0,
        }


async def list_changed(target):
    changed = anyio.Event()
    seen = []

    async def on_message(message):
        # A notification (possibly wrapped in a root model) or a transport exception.
        method = getattr(getattr(message, "root", message), "method", None)
        seen.append(str(method))
        if method == "notifications/tools/list_changed":
            changed.set()

    wait = float(os.environ.get("TROUPE_WAIT", "30"))
    async with connect(target, message_handler=on_message) as session:
        before = await session.list_tools()
        search_before = next(t.description for t in before.tools if t.name == "tool_search")
        started = time.monotonic()
        # With TROUPE_LISTED, a file that says the first listing is done (a test's late server
        # waits for it).
        if os.environ.get("TROUPE_LISTED"):
            with open(os.environ["TROUPE_LISTED"], "w") as listed:
                listed.write("listed\n")
        # With TROUPE_TOOL, a direct call that changes the catalog (switching a server on).
        called = None
        if os.environ.get("TROUPE_TOOL"):
            called = result_json(await session.call_tool(os.environ["TROUPE_TOOL"], env_json("TROUPE_ARGS", {})))
        # Each notice makes the client list again; with TROUPE_EXPECT it keeps listing on each
        # notice until that tool shows (other changes may come first on a busy machine).
        expect = os.environ.get("TROUPE_EXPECT")
        notices = 0
        search_after = search_before
        with anyio.move_on_after(wait):
            while True:
                await changed.wait()
                changed = anyio.Event()
                notices += 1
                after = await session.list_tools()
                search_after = next(t.description for t in after.tools if t.name == "tool_search")
                if not expect or expect in search_after:
                    break
        found = None
        if os.environ.get("TROUPE_QUERY"):
            found = result_json(await session.call_tool("tool_search", {"queries": [os.environ["TROUPE_QUERY"]]}))
        return {
            "changed": notices > 0,
            "notices": notices,
            "after_seconds": time.monotonic() - started,
            "seen": seen,
            "search_before": search_before,
            "search_after": search_after,
            "called": called,
            "found": found,
        }


async def timing(target):
    rounds = int(os.environ.get("TROUPE_ROUNDS", "50"))
    tool = os.environ["TROUPE_TOOL"]
    args = env_json("TROUPE_ARGS", {})
    bridged = os.environ.get("TROUPE_BRIDGED") == "1"
    query = os.environ.get("TROUPE_QUERY")
    async with connect(target) as session:
        calls, searches = [], []
        for i in range(rounds + 3):
            started = time.perf_counter()
            if bridged:
                result = await session.call_tool("tool_call", {"calls": [{"name": tool, "arguments": args}]})
            else:
                result = await session.call_tool(tool, args)
            took = time.perf_counter() - started
            if result.is_error:
                raise SystemExit(f"the call failed: {text_of(result)}")
            if i >= 3:  # the first calls warm up
                calls.append(took)
            if query:
                started = time.perf_counter()
                found = await session.call_tool("tool_search", {"queries": [query]})
                took = time.perf_counter() - started
                if found.is_error:
                    raise SystemExit(f"the search failed: {text_of(found)}")
                if i >= 3:
                    searches.append(took)
        ms = lambda xs: round(statistics.median(xs) * 1000, 3) if xs else None
        p95 = lambda xs: round(sorted(xs)[int(len(xs) * 0.95) - 1] * 1000, 3) if xs else None
        return {
            "rounds": rounds,
            "call_median_ms": ms(calls),
            "call_p95_ms": p95(calls),
            "search_median_ms": ms(searches),
            "search_p95_ms": p95(searches),
        }


async def kanban(target):
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    async with connect(target) as session:
        listed = await session.list_tools()
        tools = {
            t.name: (t.annotations.read_only_hint if t.annotations else None)
            for t in listed.tools
            if t.name.startswith("kanban_")
        }
        created = await session.call_tool(
            "kanban_create",
            {"title": os.environ["TROUPE_TITLE"], "body": "asked from an MCP client", "assignee": "coder"},
        )
        if created.is_error:
            return {"tools": tools, "created": result_json(created)}
        task = json.loads(text_of(created))["task"]
        followed = await session.call_tool(
            "kanban_follow", {"id": task["id"], "timeout_seconds": 90}, progress_callback=on_progress
        )
        shown = await session.call_tool("kanban_show", {"id": task["id"]})
        listed_done = await session.call_tool("kanban_list", {"status": "done"})
        bad = await session.call_tool("kanban_show", {"id": "not a task"})
        return {
            "tools": tools,
            "created": task,
            "followed": json.loads(text_of(followed)),
            "shown": json.loads(text_of(shown)),
            "done": json.loads(text_of(listed_done)),
            "bad": result_json(bad),
            "progress": progress,
        }


async def agent(target):
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    tool = os.environ["TROUPE_TOOL"]
    async with connect(target) as session:
        listed = await session.list_tools()
        offered = [t.name for t in listed.tools]
        first = await session.call_tool(tool, {"prompt": os.environ["TROUPE_PROMPT"]}, progress_callback=on_progress)
        first_out = result_json(first)
        first_out["structured"] = first.structured_content
        follow_up = {"prompt": os.environ["TROUPE_PROMPT2"]}
        if first.structured_content:
            follow_up["session"] = first.structured_content.get("session")
        second = await session.call_tool(tool, follow_up)
        second_out = result_json(second)
        second_out["structured"] = second.structured_content
        stranger = await session.call_tool(tool, {"prompt": "hello", "session": "not-a-session-of-ours"})
        return {
            "offered": offered,
            "first": first_out,
            "second": second_out,
            "stranger": result_json(stranger),
            "progress": progress,
        }


async def list_only(target):
    """The names of the tools offered."""
    async with connect(target) as session:
        listed = await session.list_tools()
        return {"tools": [t.name for t in listed.tools]}


async def wait_for_file(path, seconds):
    for _ in range(int(seconds * 10)):
        if os.path.exists(path):
            return True
        await anyio.sleep(0.1)
    return False


async def agent_hold(target):
    """Opens a session with TROUPE_TOOL, writes its id to TROUPE_SESSION_FILE, keeps the
    connection open until TROUPE_DONE_FILE exists, then continues it (TROUPE_PROMPT2) and tries
    it with TROUPE_OTHER_TOOL (another profile)."""
    tool = os.environ["TROUPE_TOOL"]
    async with connect(target) as session:
        first = await session.call_tool(tool, {"prompt": os.environ["TROUPE_PROMPT"]})
        sid = (first.structured_content or {}).get("session")
        with open(os.environ["TROUPE_SESSION_FILE"] + ".part", "w") as f:
            f.write(sid or "")
        os.rename(os.environ["TROUPE_SESSION_FILE"] + ".part", os.environ["TROUPE_SESSION_FILE"])
        waited = await wait_for_file(os.environ["TROUPE_DONE_FILE"], 90)
        second = await session.call_tool(tool, {"prompt": os.environ["TROUPE_PROMPT2"], "session": sid})
        other = await session.call_tool(os.environ["TROUPE_OTHER_TOOL"], {"prompt": "hello", "session": sid})
        return {
            "session": sid,
            "first": result_json(first),
            "waited": waited,
            "second": result_json(second),
            "other_profile": result_json(other),
        }


async def agent_continue(target):
    """Continues TROUPE_SESSION (opened by another client) with TROUPE_TOOL."""
    async with connect(target) as session:
        called = await session.call_tool(
            os.environ["TROUPE_TOOL"], {"prompt": "let me in", "session": os.environ["TROUPE_SESSION"]}
        )
        return result_json(called)


SCENARIOS = {
    "list": list_only,
    "agent_hold": agent_hold,
    "agent_continue": agent_continue,
    "agent": agent,
    "kanban": kanban,
    "bridge": bridge,
    "call": call,
    "direct": direct,
    "cancel": cancel,
    "list_changed": list_changed,
    "timing": timing,
}


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in SCENARIOS:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(SCENARIOS)} --stdio CMD ARGS... | --http URL --token T")
    scenario = SCENARIOS[sys.argv[1]]
    out = anyio.run(scenario, sys.argv[2:])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
