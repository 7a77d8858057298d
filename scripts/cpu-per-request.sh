#!/usr/bin/env bash
# Measurement (not a test): the server's CPU time per request, user and system apart,
# under the same fogbench closed loop, for memcached and fogcached with each I/O engine,
# in alternating rounds.
#
#   scripts/cpu-per-request.sh
#   ROUNDS=5 CONNECTIONS=128 scripts/cpu-per-request.sh
#   SERVERS="io-uring-multishot io-uring-single" scripts/cpu-per-request.sh
#
# Each round starts every server afresh on a loopback port the kernel picks, stores the
# keys, runs DURATION_S seconds of 90 % gets / 10 % sets (1 KB values) over CONNECTIONS connections,
# and divides the server's utime and stime (/proc/PID/stat) over the run by the requests
# fogbench completed. Unlike throughput, this does not depend on how much of the machine
# the client and the other processes leave the server, so it compares the servers on a
# shared machine; it says how much of a request's cost is the server's own code (user)
# and how much the kernel's (system: TCP on loopback, wake-ups, the system calls).
#
# Settings (environment variables, defaults in brackets):
#   ROUNDS [3]  DURATION_S [8]  CONNECTIONS [64]  CLIENT_THREADS [2]  SERVER_THREADS [2]
#   SERVERS ["memcached io-uring epoll"]   (io-uring, epoll: fogcached --slow-size 0;
#                                          io-uring-multishot, io-uring-single: io-uring
#                                          with that receive, --io-uring-recv)
#   FOGCACHED, FOGBENCH [target/release/...]  MEMCACHED [/usr/bin/memcached]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGCACHED="${FOGCACHED:-$target_dir/release/fogcached}"
FOGBENCH="${FOGBENCH:-$target_dir/release/fogbench}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"
ROUNDS="${ROUNDS:-3}"
DURATION_S="${DURATION_S:-8}"
CONNECTIONS="${CONNECTIONS:-64}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
SERVER_THREADS="${SERVER_THREADS:-2}"
SERVERS="${SERVERS:-memcached io-uring epoll}"
KEYS=10000

die() { printf 'cpu-per-request.sh: %b\n' "$*" >&2; exit 1; }
if [ ! -x "$FOGCACHED" ] || [ ! -x "$FOGBENCH" ]; then
    (cd "$repo_root" && cargo build --release -p server -p bench) >&2
fi
[ -x "$MEMCACHED" ] || die "$MEMCACHED missing (Debian package memcached)"

work_dir="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work_dir"
}
trap cleanup EXIT

# Servers start on a loopback port the kernel picks, read from their port file.
LAUNCH_TIMEOUT_S=10
. "$repo_root/scripts/launch.sh"

# One round of server $1: prints "requests user_us_per_request system_us_per_request".
round() {
    local name="$1" port
    local -a cmd
    case "$name" in
        memcached) cmd=("$MEMCACHED" -m 1024) ;;
        io-uring | epoll) cmd=("$FOGCACHED" -m 1024 --slow-size 0 --io-engine "$name") ;;
        io-uring-multishot | io-uring-single)
            cmd=("$FOGCACHED" -m 1024 --slow-size 0 --io-engine io-uring --io-uring-recv "${name#io-uring-}") ;;
        *) die "unknown server $name (memcached, io-uring, epoll, io-uring-multishot, io-uring-single)" ;;
    esac
    launch_server "$work_dir/$name" "${cmd[@]}" -t "$SERVER_THREADS" || die "$name did not start"
    server_pid="$launched_pid"
    port="$launched_port"
    "$FOGBENCH" run --server "127.0.0.1:$port" --keys "$KEYS" --load --duration-s 1 \
        --connections 16 --threads 1 --quiet --no-stats >/dev/null
    local before after
    before="$(awk '{ print $14, $15 }' "/proc/$server_pid/stat")"
    "$FOGBENCH" run --server "127.0.0.1:$port" --keys "$KEYS" --duration-s "$DURATION_S" \
        --connections "$CONNECTIONS" --threads "$CLIENT_THREADS" --get-ratio 0.9 \
        --value-size 1024 --quiet --no-stats --json "$work_dir/run.json" >/dev/null
    after="$(awk '{ print $14, $15 }' "/proc/$server_pid/stat")"
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    python3 - "$work_dir/run.json" "$(getconf CLK_TCK)" $before $after <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["run"]
ticks = float(sys.argv[2])
u0, s0, u1, s1 = map(int, sys.argv[3:7])
n = max(run["ops"], 1)
print(n, f"{(u1 - u0) / ticks * 1e6 / n:.2f}", f"{(s1 - s0) / ticks * 1e6 / n:.2f}")
EOF
}

echo "==> load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
printf '%-6s %-18s %9s %9s %9s %9s\n' round server requests user_us sys_us total_us
declare -A rows
for r in $(seq 1 "$ROUNDS"); do
    for name in $SERVERS; do
        read -r n user sys < <(round "$name")
        total="$(python3 -c "print(f'{$user + $sys:.2f}')")"
        printf '%-6s %-18s %9s %9s %9s %9s\n' "$r" "$name" "$n" "$user" "$sys" "$total"
        rows[$name]="${rows[$name]:-} $user,$sys"
    done
done
for name in $SERVERS; do
    python3 - "$name" ${rows[$name]} <<'EOF'
import statistics, sys
name = sys.argv[1]
pairs = [tuple(map(float, p.split(","))) for p in sys.argv[2:]]
user = statistics.median(p[0] for p in pairs)
system = statistics.median(p[1] for p in pairs)
total = statistics.median(p[0] + p[1] for p in pairs)
print(f"median {name:<18} user {user:.2f} us, system {system:.2f} us, total {total:.2f} us per request")
EOF
done
echo "==> load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
