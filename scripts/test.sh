#!/usr/bin/env bash
# Runs every test of troupe on a fresh machine: installs what the tests need (MCP servers from
# npm and PyPI), checks formatting and lints, then runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "troupe tests need a Rust toolchain (cargo); install it with rustup first" >&2
  exit 1
fi

if [ -x scripts/install-test-deps.sh ] || [ -f scripts/install-test-deps.sh ]; then
  bash scripts/install-test-deps.sh
fi
# Tests that need the installed servers fail (rather than skip) when they are missing.
export TROUPE_REQUIRE_MCP_SERVERS=1

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
