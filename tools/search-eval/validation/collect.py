#!/usr/bin/env python3
"""Re-collect the validation catalog: install the MCP servers listed in SERVERS, run `tools/list`
on each over stdio with troupe's own CLI (`troupe mcp tools KEY --json`), and write catalog.json
in the format of the dev set's catalog (OpenAI tool definitions, `toolset` = `mcp-<key>`).

    python3 collect.py --scratch /tmp/valset-scratch --troupe target/debug/troupe [--install] [--out catalog.json]

--install puts the npm packages under SCRATCH/npm and each PyPI package in its own venv under
SCRATCH/venvs/NAME (the versions pinned below). Without it the script expects them there already.
Credentials are dummies: every server here lists its tools without a real account. Nothing a
server returns is edited; the tools keep their order within a server.
"""
import argparse
import json
import os
import subprocess
import sys

# key: (registry, package, version, entry, args, env). For npm, entry is the package's bin
# script (run with node); for PyPI, the console script in the package's own venv.
# Every credential is a dummy: each server here lists its tools without a real account.
SERVERS = {
    "atlassian": ("pypi", "mcp-atlassian", "0.23.1", "mcp-atlassian", [], {
        "JIRA_URL": "https://example.atlassian.net", "JIRA_USERNAME": "x@example.com",
        "JIRA_API_TOKEN": "x", "CONFLUENCE_URL": "https://example.atlassian.net/wiki",
        "CONFLUENCE_USERNAME": "x@example.com", "CONFLUENCE_API_TOKEN": "x"}),
    "jira": ("npm", "@aashari/mcp-server-atlassian-jira", "3.3.0", "dist/index.js", [], {
        "ATLASSIAN_SITE_NAME": "example", "ATLASSIAN_USER_EMAIL": "x@example.com",
        "ATLASSIAN_API_TOKEN": "x"}),
    "browserbase": ("npm", "@browserbasehq/mcp-server-browserbase", "2.4.3", "cli.js", [], {
        "BROWSERBASE_API_KEY": "x", "BROWSERBASE_PROJECT_ID": "x", "GEMINI_API_KEY": "x"}),
    "elasticsearch": ("npm", "@elastic/mcp-server-elasticsearch", "0.3.1", "dist/index.js", [], {
        "ES_URL": "http://127.0.0.1:9200", "ES_API_KEY": "x"}),
    "youtube-transcript": ("npm", "@kimtaeyoon83/mcp-server-youtube-transcript", "0.1.1",
                           "dist/index.js", [], {}),
    "mapbox": ("npm", "@mapbox/mcp-server", "0.2.0", "dist/index.js", [], {
        "MAPBOX_ACCESS_TOKEN": "pk.x"}),
    "everart": ("npm", "@modelcontextprotocol/server-everart", "0.6.2", "dist/index.js", [], {
        "EVERART_API_KEY": "x"}),
    "neon": ("npm", "@neondatabase/mcp-server-neon", "0.3.7", "dist/index.js", ["start", "x"], {}),
    "perplexity": ("npm", "@perplexity-ai/mcp-server", "1.2.1", "dist/index.js", [], {
        "PERPLEXITY_API_KEY": "x"}),
    "pinecone": ("npm", "@pinecone-database/mcp", "0.3.0", "dist/index.js", [], {
        "PINECONE_API_KEY": "x"}),
    "lara": ("npm", "@translated/lara-mcp", "1.0.6", "dist/index.js", [], {
        "LARA_ACCESS_KEY_ID": "x", "LARA_ACCESS_KEY_SECRET": "x"}),
    "desktop-commander": ("npm", "@wonderwhy-er/desktop-commander", "0.2.52", "dist/index.js",
                          [], {}),
    "airtable": ("npm", "airtable-mcp-server", "1.14.0", "dist/main.js", [], {
        "AIRTABLE_API_KEY": "x"}),
    "exa": ("npm", "exa-mcp-server", "3.4.1", "dist/stdio.cjs", [], {"EXA_API_KEY": "x"}),
    "figma": ("npm", "figma-developer-mcp", "0.13.2", "dist/bin.js",
              ["--figma-api-key=x", "--stdio"], {}),
    "firecrawl": ("npm", "firecrawl-mcp", "3.22.2", "dist/index.js", [], {
        "FIRECRAWL_API_KEY": "x"}),
    "discord": ("npm", "mcp-discord", "1.3.4", "build/index.js", [], {"DISCORD_TOKEN": "x"}),
    "tavily": ("npm", "tavily-mcp", "0.2.22", "build/index.js", [], {"TAVILY_API_KEY": "x"}),
    "todoist": ("npm", "todoist-mcp", "1.3.4", "dist/index.js", [], {
        "API_KEY": "x", "TODOIST_API_TOKEN": "x"}),
    "clickhouse": ("pypi", "mcp-clickhouse", "0.7.0", "mcp-clickhouse", [], {
        "CLICKHOUSE_HOST": "127.0.0.1", "CLICKHOUSE_USER": "x", "CLICKHOUSE_PASSWORD": "x"}),
    "arxiv": ("pypi", "arxiv-mcp-server", "0.8.2", "arxiv-mcp-server", [], {}),
    "neo4j": ("pypi", "mcp-neo4j-cypher", "0.6.0", "mcp-neo4j-cypher", [], {
        "NEO4J_URI": "bolt://127.0.0.1:7687", "NEO4J_USERNAME": "x", "NEO4J_PASSWORD": "x"}),
    "wikipedia": ("pypi", "wikipedia-mcp", "2.0.1", "wikipedia-mcp", [], {}),
    "duckduckgo": ("pypi", "duckduckgo-mcp-server", "0.7.0", "duckduckgo-mcp-server", [], {}),
    "obsidian": ("pypi", "mcp-obsidian", "0.2.3", "mcp-obsidian", [], {"OBSIDIAN_API_KEY": "x"}),
    "calculator": ("pypi", "mcp-server-calculator", "0.2.1", "mcp-server-calculator", [], {}),
}


def command_of(scratch, registry, package, entry, args):
    if registry == "npm":
        return "node", [os.path.join(scratch, "npm", "node_modules", package, entry), *args]
    return os.path.join(scratch, "venvs", package, "bin", entry), args


def install(scratch):
    npm_specs = [f"{p}@{v}" for (r, p, v, *_rest) in SERVERS.values() if r == "npm"]
    if npm_specs:
        subprocess.run(["npm", "install", "--prefix", os.path.join(scratch, "npm"),
                        "--no-audit", "--no-fund", "--ignore-scripts", *npm_specs], check=True)
    for (r, p, v, *_rest) in SERVERS.values():
        if r != "pypi":
            continue
        venv = os.path.join(scratch, "venvs", p)
        if not os.path.exists(venv):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", f"{p}=={v}"], check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--troupe", required=True)
    ap.add_argument("--install", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "catalog.json"))
    ap.add_argument("--only", nargs="*", help="collect only these keys (for trying a server)")
    a = ap.parse_args()
    scratch = os.path.abspath(a.scratch)
    if a.install:
        install(scratch)
    keys = a.only or list(SERVERS)
    config = {"mcp_servers": {}}
    for k in keys:
        r, p, v, binary, args, env = SERVERS[k]
        command, argv = command_of(scratch, r, p, binary, args)
        config["mcp_servers"][k] = {"command": command, "args": argv, "env": env}
    cfg = os.path.join(scratch, "collect-troupe.yaml")  # JSON is YAML
    with open(cfg, "w") as f:
        json.dump(config, f, indent=1)
    catalog, failed = [], []
    for k in keys:
        try:
            out = subprocess.run([a.troupe, "mcp", "tools", k, "--config", cfg, "--json"],
                                 capture_output=True, text=True, timeout=180,
                                 stdin=subprocess.DEVNULL, cwd=scratch)
            tools = json.loads(out.stdout) if out.returncode == 0 else []
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            tools = []
        if not tools:
            failed.append(k)
            print(f"{k}: no tools listed", file=sys.stderr)
            continue
        print(f"{k}: {len(tools)} tools", file=sys.stderr)
        for t in tools:
            catalog.append({"type": "function", "toolset": f"mcp-{k}",
                            "function": {"name": t["name"], "description": t.get("description", ""),
                                         "parameters": t.get("parameters", {})}})
    with open(a.out, "w") as f:
        json.dump(catalog, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(catalog)} tools from {len(keys) - len(failed)} servers; failed: {failed}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
