#!/usr/bin/env bash
# Stops the test backends started by scripts/start-test-backends.sh: its sshd, the dockerd if (and
# only if) that script started it, the containers the tests left behind; then removes its state
# directory and its env file. Does nothing if none is recorded, and never fails on what is
# already gone. The image troupe-test-base:1 is kept, so the next start does not build it again.
# Usage: scripts/stop-test-backends.sh [env-file]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
env_file="${1:-$root/target/test-backends.env}"
me=stop-test-backends
[ -f "$env_file" ] || { echo "$me: no $env_file; nothing to stop" >&2; exit 0; }

state=$(sed -n 's/^TROUPE_TEST_BACKENDS_STATE=//p' "$env_file")
# Only a directory our start script made is ever touched.
case "$state" in
    /tmp/troupe-test-backends.*) ;;
    *) echo "$me: $env_file names '$state', not a test backends directory; refusing" >&2; exit 1 ;;
esac

# Waits up to $2 tenths of a second for process $1 to exit.
wait_gone() {
    local i
    for ((i = 0; i < $2; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# Prints the pids of every descendant of process $1.
descendants() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null || true); do
        echo "$child"
        descendants "$child"
    done
}

# sshd: its open connections, and the commands the tests ran through them, are descendants of
# the listener and outlive it (a command without a terminal gets no hangup), so they go too.
if [ -f "$state/sshd.pid" ]; then
    pid=$(cat "$state/sshd.pid")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        tree=$(descendants "$pid")
        # shellcheck disable=SC2086  # one pid per word
        kill "$pid" $tree 2>/dev/null || true
        wait_gone "$pid" 50 || kill -9 "$pid" 2>/dev/null || true
        for p in $tree; do wait_gone "$p" 20 || kill -9 "$p" 2>/dev/null || true; done
    fi
fi

# Containers: those of the test image carry troupe.test=1, the backend names its own troupe-*.
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    ids=$( { docker ps -aq --filter label=troupe.test=1
             docker ps -a --format '{{.ID}} {{.Names}}' | awk '$2 ~ /^troupe-/ {print $1}'
           } 2>/dev/null | sort -u)
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086  # one id per word
        docker rm -f $ids >/dev/null 2>&1 || true
        echo "$me: removed $(echo "$ids" | wc -l) container(s)" >&2
    fi
fi

# dockerd: only the one start-test-backends.sh started (it left its pid here); a daemon that was
# already running belongs to someone else. Waited for, so that a next start finds it gone.
if [ -f "$state/dockerd.pid" ]; then
    pid=$(cat "$state/dockerd.pid")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 200 || kill -9 "$pid" 2>/dev/null || true
    fi
fi

rm -rf "$state"
rm -f "$env_file"
echo "$me: stopped and removed $state"
