"""What `troupe mcp serve` costs an MCP client, measured with the official `mcp` Python SDK client
(figures in docs/benchmarks.md, "troupe as an MCP server").

    python bench_mcp_serve.py TROUPE_BIN [ROUNDS]

Run from the repository root after scripts/install-test-deps.sh. In one process, one client:
1. per-call overhead: server-everything's `echo` called directly (the client starts the server
   over stdio) and the same tool through `troupe mcp serve` (`tool_call`, which passes hooks,
   approvals and the runner), alternating call by call so both see the same machine load;
2. `tool_search` latency through the protocol on the 3,309-tool catalog
   (orchestrator/data/catalog_3309.json), served by four real MCP servers
   (tests/mcp-clients/catalog_server.py) behind one `troupe mcp serve`: first while the tool
   embeddings are computed in the background (the lexical legs answer alone), then, once they
   are in the cache under the troupe home, with the whole hybrid ranking.
Prints one JSON object with medians and 95th percentiles in milliseconds.
"""

import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable
EVERYTHING = os.path.join(REPO, "tests/mcp-servers/node_modules/.bin/mcp-server-everything")
CATALOG = os.path.join(REPO, "orchestrator/data/catalog_3309.json")
# How long to wait for the catalog's embeddings before giving up on the hybrid measurement.
EMBEDDING_WAIT = 600
QUERIES = [
    "cloudflare dns record create",
    "list workers scripts",
    "github create issue",
    "linear update issue state",
    "sentry resolve issue",
    "zero trust access application",
    "r2 bucket delete",
    "purge cache zone",
]


def summary(xs):
    xs = sorted(xs)
    return {
        "median_ms": round(statistics.median(xs) * 1000, 3),
        "p95_ms": round(xs[max(int(len(xs) * 0.95) - 1, 0)] * 1000, 3),
        "n": len(xs),
    }


async def open_session(stack, command, args, env):
    params = StdioServerParameters(command=command, args=args, env=env)
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def timed(call):
    started = time.perf_counter()
    result = await call()
    took = time.perf_counter() - started
    if result.is_error:
        raise SystemExit(f"a measured call failed: {result.content}")
    return took


async def main(troupe, rounds):
    work = tempfile.mkdtemp(prefix="troupe-mcp-bench-")
    env = dict(os.environ, TROUPE_HOME=os.path.join(work, "home"))
    direct_yaml = os.path.join(work, "everything.yaml")
    with open(direct_yaml, "w") as f:
        f.write(f"mcp_servers:\n  everything:\n    command: {EVERYTHING}\n    args: [stdio]\n")
    catalog_yaml = os.path.join(work, "catalog.yaml")
    with open(catalog_yaml, "w") as f:
        f.write("mcp_servers:\n")
        for name in ["cloudflare", "github", "linear", "sentry"]:
            script = os.path.join(HERE, "catalog_server.py")
            f.write(
                f"  {name}:\n    command: {PYTHON}\n"
                f"    args: [{script}, {CATALOG}, mcp-{name}, mcp__{name}__]\n"
            )

    async with AsyncExitStack() as stack:
        direct = await open_session(stack, EVERYTHING, ["stdio"], env)
        bridged = await open_session(stack, troupe, ["mcp", "serve", "--config", direct_yaml], env)
        # A home of its own, so its embedding cache holds only the catalog's.
        catalog_env = dict(env, TROUPE_HOME=os.path.join(work, "catalog-home"))
        catalog = await open_session(
            stack, troupe, ["mcp", "serve", "--config", catalog_yaml], catalog_env
        )

        # Wait until every catalog server is in (the first search waits for starting ones).
        await catalog.call_tool("tool_search", {"queries": ["warm up"]})
        listed = await catalog.list_tools()
        search_description = next(t.description for t in listed.tools if t.name == "tool_search")

        direct_times, bridged_times = [], []
        message = {"message": "hello from the benchmark"}
        bridged_args = {"calls": [{"name": "mcp_everything_echo", "arguments": message}]}
        for i in range(rounds + 5):
            d = await timed(lambda: direct.call_tool("echo", message))
            b = await timed(lambda: bridged.call_tool("tool_call", bridged_args))
            if i >= 5:  # warm-up
                direct_times.append(d)
                bridged_times.append(b)

        async def searches():
            times = []
            for i in range(rounds + len(QUERIES)):
                query = QUERIES[i % len(QUERIES)]
                took = await timed(lambda: catalog.call_tool("tool_search", {"queries": [query]}))
                if i >= len(QUERIES):
                    times.append(took)
            return summary(times)

        # First while the tool embeddings are still being computed (the lexical legs answer
        # alone), then once they are written to the cache (the whole hybrid ranking).
        cold = await searches()
        cache = os.path.join(catalog_env["TROUPE_HOME"], "cache", "tool-embeddings")

        def cached_bytes():
            if not os.path.isdir(cache):
                return 0
            return sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))

        # 3,309 vectors of 384 floats are about 5 MB; the cache is written once they are all in.
        waited = time.monotonic()
        while time.monotonic() - waited < EMBEDDING_WAIT and cached_bytes() < 4_000_000:
            await anyio.sleep(1)
        embedded = cached_bytes() >= 4_000_000
        await anyio.sleep(2)
        warm = await searches() if embedded else None

        d, b = summary(direct_times), summary(bridged_times)
        return {
            "rounds": rounds,
            "direct_call": d,
            "through_troupe_tool_call": b,
            "overhead_median_ms": round(b["median_ms"] - d["median_ms"], 3),
            "catalog_tools_in_description": search_description.split(" more")[0],
            "tool_search_3309_lexical_while_embedding": cold,
            "tool_search_3309_hybrid": warm,
            "embeddings_ready_after_s": round(time.monotonic() - waited, 1) if embedded else None,
        }


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(f"usage: {sys.argv[0]} TROUPE_BIN [ROUNDS]")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    print(json.dumps(anyio.run(main, sys.argv[1], rounds)))
