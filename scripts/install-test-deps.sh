#!/usr/bin/env bash
# Installs the MCP servers troupe's tests run against, at pinned versions, so that no test
# downloads anything: npm packages from tests/mcp-servers/package-lock.json into
# tests/mcp-servers/node_modules, and PyPI packages from tests/mcp-servers/requirements.txt into
# the virtual environment tests/.venv-mcp (with the `openai` package the /v1 tests drive troupe
# serve with). Safe to run again: it skips what is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

servers=tests/mcp-servers
venv=tests/.venv-mcp

if ! command -v npm >/dev/null 2>&1; then
  echo "install-test-deps: npm is missing; install Node.js 20 or newer" >&2
  exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "install-test-deps: python3 is missing; install Python 3.10 or newer" >&2
  exit 1
fi

# tmux: the interactive `troupe chat` tests drive the real binary in its terminal.
if ! command -v tmux >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: apt-get install tmux"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
  else
    echo "install-test-deps: tmux is missing; install it (apt-get install tmux)" >&2
    exit 1
  fi
fi

# Chromium: the dashboard tests drive Debian's browser, headless, over the DevTools protocol.
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: apt-get install chromium"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install-test-deps: chromium is missing; install it (apt-get install chromium)" >&2
    exit 1
  fi
fi

# npm: reinstall only when the lock file is newer than what was installed from it.
stamp="$servers/node_modules/.troupe-installed"
if [ ! -f "$stamp" ] || [ "$servers/package-lock.json" -nt "$stamp" ]; then
  echo "install-test-deps: npm ci in $servers"
  (cd "$servers" && npm ci --no-audit --no-fund --loglevel=error)
  touch "$stamp"
fi

# PyPI: a virtual environment with the pinned servers.
if [ ! -x "$venv/bin/python" ]; then
  echo "install-test-deps: creating $venv"
  python3 -m venv "$venv"
fi
pystamp="$venv/.troupe-installed"
if [ ! -f "$pystamp" ] || [ "$servers/requirements.txt" -nt "$pystamp" ]; then
  echo "install-test-deps: pip install -r $servers/requirements.txt"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$servers/requirements.txt"
  touch "$pystamp"
fi

for bin in "$servers/node_modules/.bin/mcp-server-everything" \
           "$servers/node_modules/.bin/mcp-server-filesystem" \
           "$servers/node_modules/.bin/mcp-server-memory" \
           "$venv/bin/mcp-server-time" \
           "$venv/bin/mcp-server-git"; do
  if [ ! -x "$bin" ]; then
    echo "install-test-deps: $bin is missing after the install" >&2
    exit 1
  fi
done
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  echo "install-test-deps: the openai package is missing from $venv after the install" >&2
  exit 1
fi
echo "install-test-deps: MCP test servers are ready"
