#!/usr/bin/env bash
# The side-by-side bench: troupe (through its programmatic API), the OpenAI Agents SDK and
# LangGraph's create_react_agent run the same four workloads against one mock model server over
# real HTTP, three rounds with the order rotated, and the medians print with troupe's ratios.
#
#   bash examples/peers/run.sh [ROUNDS]
#
# Makes its own venv (target/peers-venv) with the peers at pinned versions. Not a test: it
# prints figures for docs/benchmarks.md and never fails on a timing.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
venv=target/peers-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import agents, langgraph' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "openai-agents==0.24.0" "langgraph==1.2.22" "langchain-openai==1.7.4"
fi
cargo build --quiet --release -p troupe-examples --example peer_workloads
troupe_bin=target/release/examples/peer_workloads

out="$(mktemp -d)"
python3 examples/peers/mock_model.py >"$out/port" &
mock=$!
trap 'kill $mock 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 50); do [ -s "$out/port" ] && break; sleep 0.1; done
url="http://127.0.0.1:$(head -1 "$out/port")/v1"

frameworks=(troupe agents_sdk langgraph)
for round in $(seq "$rounds"); do
  for i in 0 1 2; do
    framework="${frameworks[$(( (i + round) % 3 ))]}"
    echo "round $round: $framework" >&2
    if [ "$framework" = troupe ]; then
      "$troupe_bin" "$url" >>"$out/results.jsonl"
    else
      "$venv/bin/python" examples/peers/peers.py "$url" "$framework" >>"$out/results.jsonl"
    fi
  done
done
python3 examples/peers/report.py "$out/results.jsonl"
