#!/usr/bin/env bash
# Starts real backends for the tests of troupe's terminal backends and writes how to reach them
# to target/test-backends.env:
#   docker:     a running dockerd and a local image troupe-test-base:1, built from the host's own
#               binaries (no registry is needed, so it works on machines that cannot pull images);
#   ssh:        a throwaway sshd on 127.0.0.1 with its own host key, a client key made here and a
#               known_hosts file, so the tests connect with strict host key checking;
#   bubblewrap: checked to work (it needs no daemon).
# Installs the Debian packages it needs when they are missing. Stop everything with
# scripts/stop-test-backends.sh. Never touches another sshd, nor a dockerd it did not start.
# Usage: scripts/start-test-backends.sh [env-file]   (then: set -a; . target/test-backends.env)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
env_file="${1:-$root/target/test-backends.env}"
mkdir -p "$(dirname "$env_file")"
image=troupe-test-base:1
me=start-test-backends

say() { echo "$me: $*" >&2; }
die() { say "$*"; exit 1; }

if [ -f "$env_file" ]; then
    say "$env_file exists; test backends may still be running."
    echo "Run scripts/stop-test-backends.sh first." >&2
    exit 1
fi

# --- packages ----------------------------------------------------------------------------------
# Each command and the Debian package that brings it.
need=()
for pair in dockerd:docker.io docker:docker.io bwrap:bubblewrap sshd:openssh-server \
            ssh:openssh-client ssh-keygen:openssh-client; do
    cmd=${pair%%:*} pkg=${pair#*:}
    # sshd lives in /usr/sbin, which a non-login root shell may not have on its PATH.
    if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
        case " ${need[*]-} " in *" $pkg "*) ;; *) need+=("$pkg") ;; esac
    fi
done
# The image carries Debian's own python3 (/usr/local/bin/python3 may be a pyenv build whose
# files live elsewhere); the other tools of the image are in every Debian install.
[ -x /usr/bin/python3 ] || need+=(python3)
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        die "missing packages: ${need[*]}; install them (apt-get install ${need[*]})"
    fi
    say "apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
sshd_bin=/usr/sbin/sshd   # sshd refuses to start unless given by its absolute path
[ -x "$sshd_bin" ] || sshd_bin=$(command -v sshd)

# --- state directory, removed again if this script fails half way -------------------------------
state=$(mktemp -d /tmp/troupe-test-backends.XXXXXX)
chmod 700 "$state"
started=0
cleanup_on_failure() {
    [ "$started" = 1 ] && return
    say "failed; stopping what this run started"
    if [ -f "$state/sshd.pid" ]; then kill "$(cat "$state/sshd.pid")" 2>/dev/null || true; fi
    if [ -f "$state/dockerd.pid" ]; then kill "$(cat "$state/dockerd.pid")" 2>/dev/null || true; fi
    rm -rf "$state"
}
trap cleanup_on_failure EXIT

# --- bubblewrap ---------------------------------------------------------------------------------
# The same namespaces the bubblewrap backend asks for; fails where user namespaces are disabled.
if ! out=$(bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-net --unshare-pid \
                 --die-with-parent true 2>&1); then
    die "bwrap does not work on this machine: $out"
fi

# --- docker -------------------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
    # Its own session, so that Ctrl-C on the test run does not take it down before the tests'
    # containers are removed; stop-test-backends.sh stops it by the pid recorded here.
    say "no docker daemon answers; starting dockerd (log: $state/dockerd.log)"
    setsid dockerd --pidfile "$state/dockerd.pid" </dev/null >"$state/dockerd.log" 2>&1 &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    if ! docker info >/dev/null 2>&1; then
        tail -n 20 "$state/dockerd.log" >&2 || true
        die "dockerd did not answer within 30 s"
    fi
fi

# Copies a file of the host to the same path under the rootfs $1 (dereferencing symlinks), and
# every shared library ldd names for it, with the dynamic loader.
copy_with_libs() {
    local rootfs=$1 file=$2 lib
    mkdir -p "$rootfs$(dirname "$file")"
    cp -L "$file" "$rootfs$file"
    # ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)"
    for lib in $(ldd "$file" 2>/dev/null | grep -o '/[^ ]*' || true); do
        [ -e "$rootfs$lib" ] && continue
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
}

build_image() {
    local rootfs=$state/rootfs cmd path py pyver
    say "building $image from the host's binaries (no registry needed)"
    mkdir -p "$rootfs"/usr/{bin,sbin,lib,lib64} "$rootfs"/{etc,root,workspace,proc,dev,sys,tmp}
    chmod 1777 "$rootfs/tmp"
    chmod 700 "$rootfs/root"
    # Debian's merged /usr: /bin, /lib... are links into /usr, so the paths ldd prints
    # (/lib/x86_64-linux-gnu/..., /lib64/ld-linux-x86-64.so.2) land in the right place.
    for d in bin sbin lib lib64; do ln -s "usr/$d" "$rootfs/$d"; done

    # What the backends' shell snippets and the tests run inside a container. Every binary goes
    # to /usr/bin under its command name, whatever path (or symlink) the host has it at.
    for cmd in sh bash dash cat mv cp rm ln ls mkdir rmdir chmod touch stat realpath readlink \
               dirname basename sleep env sort head tail base64 true false echo printf test \
               wc tr cut tee mktemp date id uname nproc timeout nohup xargs find setsid tar grep \
               sed ps kill pkill pgrep; do
        # type -P: the file on the PATH, also for commands that are shell builtins too (echo).
        path=$(PATH=/usr/bin:/usr/sbin:/bin:/sbin type -P "$cmd") \
            || die "$cmd is not installed on this machine; the test image needs it"
        copy_with_libs "$rootfs" "$path"
        [ "$path" = "/usr/bin/$cmd" ] || cp -L "$path" "$rootfs/usr/bin/$cmd"
    done

    # Debian's python3 with its standard library, without what no test imports (tests of
    # CPython itself, IDLE, Tk, the static library under config-*) to keep the image small.
    py=$(readlink -f /usr/bin/python3)            # /usr/bin/python3.11
    pyver=${py##*/}                               # python3.11
    [ -d "/usr/lib/$pyver/json" ] || die "/usr/lib/$pyver has no standard library (apt-get install python3)"
    copy_with_libs "$rootfs" "$py"
    ln -s "$pyver" "$rootfs/usr/bin/python3"
    tar -C /usr/lib -c --exclude="$pyver/test" --exclude="$pyver/idlelib" \
        --exclude="$pyver/tkinter" --exclude="$pyver/turtledemo" --exclude="$pyver/ensurepip" \
        --exclude="$pyver/lib2to3" --exclude="$pyver/config-*" --exclude="$pyver/site-packages" \
        --exclude="$pyver/dist-packages" --exclude="$pyver/lib-dynload/_test*" \
        --exclude="$pyver/lib-dynload/xx*" --exclude="$pyver/lib-dynload/_ctypes_test*" \
        "$pyver" | tar -C "$rootfs/usr/lib" -x
    for so in "$rootfs/usr/lib/$pyver"/lib-dynload/*.so; do
        copy_with_libs "$rootfs" "${so#"$rootfs"}"
    done

    cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
    cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
    # The loader finds the multiarch directories through its cache, as on the host.
    printf '%s\n' /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu "/lib/$(uname -m)-linux-gnu" \
        "/usr/lib/$(uname -m)-linux-gnu" | sort -u >"$rootfs/etc/ld.so.conf"
    ldconfig_bin=$(PATH=$PATH:/sbin:/usr/sbin type -P ldconfig || true)
    if [ -n "$ldconfig_bin" ]; then "$ldconfig_bin" -r "$rootfs" 2>/dev/null || true; fi

    # The label makes every container of this image carry troupe.test=1, so that
    # stop-test-backends.sh removes leftovers whatever name a test gave them.
    tar -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'LABEL troupe.test=1' \
        --change 'CMD ["/bin/sh"]' - "$image" >/dev/null
    rm -rf "$rootfs"
    say "built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
}

if ! docker image inspect "$image" >/dev/null 2>&1; then
    build_image
fi
# Checked on every start (a second or so): it also proves that containers run on this daemon.
check='bash -c "echo ok" && python3 -c "import json,socket,sys; print(1)" && setsid -w true && find / -maxdepth 0 && stat -c %s /etc/passwd && realpath / && ps -e >/dev/null && tar --version >/dev/null'
if ! out=$(docker run --rm --network none "$image" sh -c "$check" 2>&1); then
    say "$image does not work: $out"
    docker run --rm --network none "$image" sh -c \
        'for c in bash python3 setsid find stat realpath ps tar grep sed sort head tail base64 env; do
             command -v "$c" >/dev/null || echo "missing: $c"
         done; python3 -c "import json,socket,sys" 2>&1 | tail -n 1' >&2 || true
    # Removed so that the next run builds it again.
    docker rmi -f "$image" >/dev/null 2>&1 || true
    die "the test image is broken (removed it; see above for what is missing)"
fi
say "docker: $image runs ($(echo "$out" | tr '\n' ' '))"

# --- sshd ---------------------------------------------------------------------------------------
ssh-keygen -q -t ed25519 -N '' -C troupe-test-host -f "$state/ssh_host_ed25519_key"
ssh-keygen -q -t ed25519 -N '' -C troupe-test-client -f "$state/client_key"
install -m 600 "$state/client_key.pub" "$state/authorized_keys"
# The privilege separation directory, normally made by the openssh-server service.
mkdir -p /run/sshd
chmod 755 /run/sshd

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
       || echo $((20000 + RANDOM % 20000)))

sftp=
for f in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server; do
    if [ -x "$f" ]; then sftp=$f; break; fi
done
# StrictModes no: the authorized keys live under /tmp, which is world-writable, and sshd would
# refuse them otherwise. MaxStartups/MaxSessions: the tests connect many times in parallel and
# sshd's default (10:30:100) drops unauthenticated connections at random beyond 10.
cat >"$state/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $port
HostKey $state/ssh_host_ed25519_key
PidFile $state/sshd.pid
AuthorizedKeysFile $state/authorized_keys
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
MaxStartups 200
MaxSessions 100
PrintMotd no
${sftp:+Subsystem sftp $sftp}
EOF
if ! out=$("$sshd_bin" -t -f "$state/sshd_config" 2>&1); then
    die "sshd rejects its configuration: $out"
fi
# sshd daemonises itself and writes its pid to the PidFile.
"$sshd_bin" -f "$state/sshd_config" -E "$state/sshd.log" \
    || { cat "$state/sshd.log" >&2 || true; die "sshd did not start"; }

printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$state/ssh_host_ed25519_key.pub")" \
    >"$state/known_hosts"

ssh_ok=0
for _ in $(seq 20); do
    if ssh -q -i "$state/client_key" -p "$port" -o BatchMode=yes -o StrictHostKeyChecking=yes \
           -o UserKnownHostsFile="$state/known_hosts" -o ConnectTimeout=5 root@127.0.0.1 true \
           </dev/null 2>"$state/ssh-check.err"; then
        ssh_ok=1
        break
    fi
    sleep 0.5
done
if [ "$ssh_ok" != 1 ]; then
    cat "$state/ssh-check.err" >&2 || true
    tail -n 20 "$state/sshd.log" >&2 || true
    die "cannot log in to the test sshd on 127.0.0.1:$port within 10 s"
fi

# --- env file -----------------------------------------------------------------------------------
{
    echo "TROUPE_TEST_DOCKER_IMAGE=$image"
    echo "TROUPE_TEST_SSH_HOST=127.0.0.1"
    echo "TROUPE_TEST_SSH_PORT=$port"
    echo "TROUPE_TEST_SSH_USER=root"
    echo "TROUPE_TEST_SSH_KEY=$state/client_key"
    echo "TROUPE_TEST_SSH_KNOWN_HOSTS=$state/known_hosts"
    echo "TROUPE_TEST_BACKENDS_STATE=$state"
} >"$env_file"
started=1
echo "$me: docker ($image), sshd on 127.0.0.1:$port, bwrap ready; state in $state, env in $env_file"
