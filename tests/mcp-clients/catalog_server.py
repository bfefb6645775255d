"""A stdio MCP server (the official `mcp` Python SDK's low-level server) that offers the tools of
one toolset of a catalog file, for measuring `troupe mcp serve` on a large catalog
(docs/benchmarks.md). A call answers at once with the tool's name and arguments.

    python catalog_server.py CATALOG.json TOOLSET PREFIX

CATALOG.json is troupe's catalog form (orchestrator/data/catalog_3309.json: OpenAI function
definitions with a `toolset`); TOOLSET picks the entries (e.g. mcp-cloudflare); PREFIX is
removed from their names (e.g. mcp__cloudflare__), since troupe prefixes the server's key itself.
"""

import json
import sys

import anyio
from mcp import types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server


def load(path, toolset, prefix):
    with open(path, encoding="utf-8") as f:
        entries = json.load(f)
    tools = []
    for entry in entries:
        if entry.get("toolset") != toolset:
            continue
        function = entry["function"]
        name = function["name"]
        if name.startswith(prefix):
            name = name[len(prefix):]
        tools.append(
            types.Tool(
                name=name,
                description=function.get("description", ""),
                input_schema=function.get("parameters") or {"type": "object"},
            )
        )
    return tools


def main():
    if len(sys.argv) != 4:
        raise SystemExit(f"usage: {sys.argv[0]} CATALOG.json TOOLSET PREFIX")
    tools = load(*sys.argv[1:])
    if not tools:
        raise SystemExit(f"no tools of toolset {sys.argv[2]} in {sys.argv[1]}")

    async def on_list_tools(ctx, params):
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx, params):
        text = json.dumps({"tool": params.name, "arguments": params.arguments or {}})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("troupe-catalog", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

    async def run():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
