#!/usr/bin/env bash
# Runs every test of troupe on a fresh machine: installs what the tests need (MCP servers from
# npm and PyPI, PostgreSQL, docker, openssh and bubblewrap from Debian), starts a throwaway
# PostgreSQL and the terminal backends' test backends, checks formatting, lints and the API docs,
# then runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "troupe tests need a Rust toolchain (cargo); install it with rustup first" >&2
  exit 1
fi

if [ -x scripts/install-test-deps.sh ] || [ -f scripts/install-test-deps.sh ]; then
  bash scripts/install-test-deps.sh
fi
# Tests that need the installed servers or the browser fail (rather than skip) when missing.
export TROUPE_REQUIRE_MCP_SERVERS=1
export TROUPE_REQUIRE_BROWSER=1

# A throwaway PostgreSQL on 127.0.0.1 for the kanban store tests, removed however we exit.
bash scripts/stop-test-postgres.sh >/dev/null 2>&1 || true   # a cluster left by an interrupted run
bash scripts/start-test-postgres.sh
trap 'bash scripts/stop-test-postgres.sh' EXIT
set -a; . target/test-postgres.env; set +a
export TROUPE_REQUIRE_POSTGRES=1

# Real backends for the terminal backends' tests (dockerd and a local image, a throwaway sshd on
# 127.0.0.1, bubblewrap), removed however we exit, together with the PostgreSQL cluster.
bash scripts/stop-test-backends.sh >/dev/null 2>&1 || true   # left by an interrupted run
bash scripts/start-test-backends.sh
trap 'bash scripts/stop-test-backends.sh; bash scripts/stop-test-postgres.sh' EXIT
set -a; . target/test-backends.env; set +a
export TROUPE_REQUIRE_BACKENDS=1

# A run from a clean checkout gains nothing from incremental caches; they only take disk (GBs).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . | tail -n 1 | awk '{print "test.sh: " $4 " free on the disk of the build"}'

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked
cargo test --workspace --locked
