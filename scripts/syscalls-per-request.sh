#!/usr/bin/env bash
# Measurement (not a test): system calls per request of fogcached and of Debian's
# memcached under the same load, counted by `strace -c -f` attached to the running server.
#
#   scripts/syscalls-per-request.sh
#   SERVERS="memcached dram" LOADS=depth1 scripts/syscalls-per-request.sh
#   FOGCACHED_ARGS="--io-engine epoll" scripts/syscalls-per-request.sh
#   SERVERS="dram-multishot dram-single" scripts/syscalls-per-request.sh
#
# Each server is started, its keys stored, then strace attaches to every thread of it
# (so start-up and the preload are not counted), a bounded load runs, strace detaches,
# and the count of every system call made meanwhile is divided by the requests the
# server served in that window (the delta of `cmd_get + cmd_set` in its `stats`, read
# outside the window). Before that, the same load runs without strace and the server's
# CPU time (user + system, so the kernel's share of each call included) per request is
# taken from /proc (on a shared machine, other processes' load changes it less than
# throughput, but it is not an instruction count). Loads:
#   depth1  scripts/fixed-requests.py: REQUESTS `get` hits (100 B), one connection, each
#           request sent when the previous reply arrived
#   conns   fogbench closed loop: CONNECTIONS connections over 2 threads, 90 % get /
#           10 % set, 1 KB values, DURATION_S seconds
# strace stops the server at every system call, so batching under `conns` is not what it
# is without strace; the counts compare the servers under the same handicap.
#
# Settings (environment variables, defaults in brackets):
#   SERVERS ["memcached dram hybrid"]   as in scripts/callgrind-per-request.sh, and
#                           dram-multishot, dram-single: dram with the io_uring loop and
#                           that receive (--io-uring-recv)
#   LOADS ["depth1 conns"]  REQUESTS [5000]  CONNECTIONS [16]  DURATION_S [5]
#   SERVER_THREADS [2]  FOGCACHED_ARGS [""]  FOGCACHED [target/release/fogcached]
#   FOGBENCH [target/release/fogbench]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

SERVERS="${SERVERS:-memcached dram hybrid}"
LOADS="${LOADS:-depth1 conns}"
REQUESTS="${REQUESTS:-5000}"
CONNECTIONS="${CONNECTIONS:-16}"
DURATION_S="${DURATION_S:-5}"
SERVER_THREADS="${SERVER_THREADS:-2}"
FOGCACHED_ARGS="${FOGCACHED_ARGS:-}"
FOGCACHED="${FOGCACHED:-target/release/fogcached}"
FOGBENCH="${FOGBENCH:-target/release/fogbench}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"
BENCH_KEYS=10000
# Servers start on a loopback port the kernel picks, read from their port file.
LAUNCH_TIMEOUT_S=20
. "$repo_root/scripts/launch.sh"

die() { printf 'syscalls-per-request.sh: %b\n' "$*" >&2; exit 1; }
command -v strace >/dev/null 2>&1 || die "strace missing (Debian package strace)"
command -v python3 >/dev/null 2>&1 || die "python3 missing"
client="$repo_root/scripts/fixed-requests.py"
if { [ "$FOGCACHED" = target/release/fogcached ] && [ ! -x "$FOGCACHED" ]; } ||
    { [ "$FOGBENCH" = target/release/fogbench ] && [ ! -x "$FOGBENCH" ]; }; then
    cargo build --release -p server -p bench >&2
fi

# cmd_get + cmd_set of the server on port $1.
served() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
stats = dict(line.split(" ")[1:3] for line in buf.decode().splitlines() if line.startswith("STAT "))
print(int(stats["cmd_get"]) + int(stats["cmd_set"]))
EOF
}

# utime + stime of process $1, in clock ticks.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

run_load() {
    local load="$1" port="$2"
    case "$load" in
        depth1) python3 "$client" --port "$port" --workload get-hit --value-bytes 100 --requests "$REQUESTS" ;;
        conns) "$FOGBENCH" run --server "127.0.0.1:$port" --keys "$BENCH_KEYS" \
            --duration-s "$DURATION_S" --connections "$CONNECTIONS" --threads 2 \
            --get-ratio 0.9 --value-size 1024 --quiet --no-stats >/dev/null ;;
    esac
}

server_pid=""
strace_pid=""
tmp_dir="$(mktemp -d)"
cleanup() {
    [ -n "$strace_pid" ] && kill "$strace_pid" 2>/dev/null || true
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$tmp_dir"
}
trap cleanup EXIT

# start_server NAME: sets server_pid and port.
start_server() {
    local name="$1"
    local -a cmd
    case "$name" in
        memcached) cmd=("$MEMCACHED" -u root -m 64) ;;
        dram) cmd=("$FOGCACHED" -m 64 --slow-size 0) ;;
        dram-multishot | dram-single)
            cmd=("$FOGCACHED" -m 64 --slow-size 0 --io-engine io-uring --io-uring-recv "${name#dram-}") ;;
        hybrid) cmd=("$FOGCACHED" -m 64 --slow-size 256m --data-dir "$tmp_dir/$name-data") ;;
        *) die "unknown server $name (memcached, dram, hybrid, dram-multishot, dram-single)" ;;
    esac
    if [ "$name" != memcached ] && [ -n "$FOGCACHED_ARGS" ]; then
        # shellcheck disable=SC2206
        cmd+=($FOGCACHED_ARGS)
    fi
    cmd+=(-t "$SERVER_THREADS")
    launch_server "$tmp_dir/$name" "${cmd[@]}" || die "$name did not start: ${cmd[*]}"
    server_pid="$launched_pid"
    port="$launched_port"
    echo "# $name: ${cmd[*]}" >&2
}

printf '%-14s %-7s %9s %9s %10s  %s\n' server load requests calls/req cpu_us/req "top calls per request"
for server in $SERVERS; do
    for load in $LOADS; do
        start_server "$server"
        case "$load" in
            depth1) python3 "$client" --port "$port" --workload preload --value-bytes 100 ;;
            conns) "$FOGBENCH" run --server "127.0.0.1:$port" --keys "$BENCH_KEYS" --load \
                --duration-s 0.1 --connections 4 --threads 1 --quiet --no-stats >/dev/null ;;
            *) die "unknown load $load (depth1, conns)" ;;
        esac
        # First the load alone: the server's CPU time (user + system, from /proc) per
        # request, which counts the kernel's side of each system call too.
        before="$(served "$port")"
        cpu_before="$(cpu_ticks "$server_pid")"
        run_load "$load" "$port"
        cpu_after="$(cpu_ticks "$server_pid")"
        after="$(served "$port")"
        cpu_us_per_request="$(python3 -c "print(f'{($cpu_after - $cpu_before) * 1e6 / $(getconf CLK_TCK) / max($after - $before, 1):.2f}')")"
        before="$(served "$port")"
        trace="$tmp_dir/strace.$server.$load"
        strace -c -f -q -o "$trace" -p "$server_pid" &
        strace_pid=$!
        sleep 1 # strace attaches every thread before the load starts
        run_load "$load" "$port"
        sleep 0.5
        kill -INT "$strace_pid"
        wait "$strace_pid" 2>/dev/null || true
        strace_pid=""
        after="$(served "$port")"
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
        requests=$((after - before))
        python3 - "$trace" "$requests" "$server" "$load" "$cpu_us_per_request" <<'EOF'
import sys
path, requests, server, load, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
calls = {}
for line in open(path):
    parts = line.split()
    # "% time seconds usecs/call calls [errors] syscall"
    if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
        calls[parts[-1]] = int(parts[3])
total = sum(calls.values())
top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
print(f"{server:<14} {load:<7} {requests:>9} {total / max(requests, 1):>9.2f} {cpu:>10}  "
      + " ".join(f"{name}={n / max(requests, 1):.2f}" for name, n in top))
EOF
    done
done
