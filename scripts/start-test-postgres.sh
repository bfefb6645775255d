#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster on 127.0.0.1 for the kanban store tests and writes
# its URL to target/test-postgres.env (TROUPE_TEST_POSTGRES_URL=...). Stop it with
# scripts/stop-test-postgres.sh. Never touches any other cluster on the machine.
# Usage: scripts/start-test-postgres.sh [env-file]   (then: source target/test-postgres.env)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
env_file="${1:-$root/target/test-postgres.env}"
mkdir -p "$(dirname "$env_file")"

if [ -f "$env_file" ]; then
    echo "start-test-postgres: $env_file exists; a test cluster may still be running." >&2
    echo "Run scripts/stop-test-postgres.sh first." >&2
    exit 1
fi

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "start-test-postgres: no initdb found; installing the postgresql package" >&2
    apt-get install -y postgresql >&2 || { apt-get update >&2 && apt-get install -y postgresql >&2; }
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

# The server refuses to run as root, so the data directory belongs to the postgres user.
as_pg() {
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

dir=$(mktemp -d /tmp/troupe-test-pg.XXXXXX)
chmod 755 "$dir"
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi

# A free port: ask the kernel for one, then hand it to the server.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
       || echo $((20000 + RANDOM % 20000)))

as_pg "'$bin/initdb' -D '$dir/data' -A trust -U postgres --no-sync >'$dir/initdb.log' 2>&1" || {
    cat "$dir/initdb.log" >&2; exit 1; }
# Throwaway data: durability settings off, more connections for the race tests.
as_pg "'$bin/pg_ctl' -D '$dir/data' -l '$dir/log' -w -t 60 start \
    -o \"-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
        -c full_page_writes=off -c max_connections=300\"" >/dev/null || {
    cat "$dir/log" >&2; exit 1; }

url="postgres://postgres@127.0.0.1:$port/postgres"
{
    echo "TROUPE_TEST_POSTGRES_URL=$url"
    echo "TROUPE_TEST_POSTGRES_DIR=$dir"
    echo "TROUPE_TEST_POSTGRES_BIN=$bin"
} >"$env_file"
echo "export TROUPE_TEST_POSTGRES_URL=$url"
