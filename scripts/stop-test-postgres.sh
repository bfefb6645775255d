#!/usr/bin/env bash
# Stops the throwaway cluster started by scripts/start-test-postgres.sh, removes its
# directory and its env file. Does nothing if none is recorded.
# Usage: scripts/stop-test-postgres.sh [env-file]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
env_file="${1:-$root/target/test-postgres.env}"
[ -f "$env_file" ] || { echo "stop-test-postgres: no $env_file; nothing to stop" >&2; exit 0; }

dir=$(sed -n 's/^TROUPE_TEST_POSTGRES_DIR=//p' "$env_file")
bin=$(sed -n 's/^TROUPE_TEST_POSTGRES_BIN=//p' "$env_file")
# Only a directory our start script made is ever touched.
case "$dir" in
    /tmp/troupe-test-pg.*) ;;
    *) echo "stop-test-postgres: $env_file names $dir, not a test cluster; refusing" >&2; exit 1 ;;
esac
if [ -d "$dir/data" ]; then
    if [ "$(id -u)" = 0 ]; then
        su postgres -s /bin/sh -c "'$bin/pg_ctl' -D '$dir/data' -w -m fast stop" >/dev/null || true
    else
        "$bin/pg_ctl" -D "$dir/data" -w -m fast stop >/dev/null || true
    fi
fi
rm -rf "$dir"
rm -f "$env_file"
echo "stop-test-postgres: stopped and removed $dir"
