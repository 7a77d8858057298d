#!/usr/bin/env bash
# Benchmark (not a test): latency at a fixed request rate (fogbench's open loop, which
# charges each request from its intended send time, so a server that stalls is not let
# off by a client that waits), fogcached and Debian's memcached side by side in
# alternating rounds, and the same for fogbench's closed loop (GET-only and 90/10).
#
#   scripts/bench-open-loop.sh
#   RATE=40000 ROUNDS=5 scripts/bench-open-loop.sh
#   SERVER_A="fogcached -t 2 --slow-size 0 --io-engine epoll" NAME_A=epoll \
#   SERVER_B="fogcached -t 2 --slow-size 0 --io-engine io-uring" NAME_B=io_uring \
#       scripts/bench-open-loop.sh
#
# Both servers run at once on loopback ports the kernel picks (scripts/launch.sh; each in
# its own temporary directory), get every key stored (`fogbench run --load`) and an
# uncounted warm-up, and are then measured in turn, A, B, A, B, ..., one fogbench run per round. Printed: every round's
# p50 / p99 / p99.9 / max (microseconds) and throughput, then the medians per server.
#
# Settings (environment variables, defaults in brackets):
#   SERVER_A ["fogcached -t 2 --slow-size 0"]  SERVER_B ["memcached -t 2 -m 1024"]
#   NAME_A [fogcached]  NAME_B [memcached]
#   MODES ["open closed-get closed-mix"]  which loads to run (each its own rounds):
#           open        --rate RATE, 90 % gets
#           closed-get  closed loop, gets only
#           closed-mix  closed loop, 90 % gets / 10 % sets
#   RATE [20000]  ROUNDS [5]  DURATION_S [10]  WARMUP_S [5]
#   KEYS [100000]  VALUE_BYTES [1024]  CONNECTIONS [64]  CLIENT_THREADS [2]
#   FOGCACHED, FOGBENCH [target/release/...], MEMCACHED [/usr/bin/memcached]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGCACHED="${FOGCACHED:-$target_dir/release/fogcached}"
FOGBENCH="${FOGBENCH:-$target_dir/release/fogbench}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"
SERVER_A="${SERVER_A:-fogcached -t 2 --slow-size 0}"
SERVER_B="${SERVER_B:-memcached -t 2 -m 1024}"
NAME_A="${NAME_A:-fogcached}"
NAME_B="${NAME_B:-memcached}"
MODES="${MODES:-open closed-get closed-mix}"
RATE="${RATE:-20000}"
ROUNDS="${ROUNDS:-5}"
DURATION_S="${DURATION_S:-10}"
WARMUP_S="${WARMUP_S:-5}"
KEYS="${KEYS:-100000}"
VALUE_BYTES="${VALUE_BYTES:-1024}"
CONNECTIONS="${CONNECTIONS:-64}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
LAUNCH_TIMEOUT_S=10
. "$repo_root/scripts/launch.sh"

die() { printf 'bench-open-loop.sh: %b\n' "$*" >&2; exit 1; }
if [ ! -x "$FOGCACHED" ] || [ ! -x "$FOGBENCH" ]; then
    (cd "$repo_root" && cargo build --release -p server -p bench) >&2
fi
case "$FOGCACHED" in /*) ;; *) FOGCACHED="$PWD/$FOGCACHED" ;; esac
[ -x "$MEMCACHED" ] || die "$MEMCACHED missing (Debian package memcached)"
[ "$NAME_A" != "$NAME_B" ] || die "NAME_A and NAME_B must differ"

work_dir="$(mktemp -d)"
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work_dir"
}
trap cleanup EXIT

# Starts server command line $1 in its own directory, on a loopback port the kernel picks
# (scripts/launch.sh), and sets `started_port` to its port.
# Not called in a command substitution: that subshell would keep the server's pid, and
# `cleanup` would leave the server running.
start_server() {
    local line="$1" index="$2"
    local -a words
    read -r -a words <<<"$line"
    case "${words[0]}" in
        fogcached) words[0]="$FOGCACHED" ;;
        memcached) words[0]="$MEMCACHED" ;;
    esac
    launch_server "$work_dir/server$index" "${words[@]}" -c 4096 || die "server did not start: $line"
    pids+=("$launched_pid")
    started_port="$launched_port"
}

start_server "$SERVER_A" a
port_a="$started_port"
start_server "$SERVER_B" b
port_b="$started_port"
echo "==> $NAME_A: $SERVER_A (port $port_a)"
echo "==> $NAME_B: $SERVER_B (port $port_b)"
echo "==> load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"

common=(--keys "$KEYS" --value-size "$VALUE_BYTES" --connections "$CONNECTIONS"
    --threads "$CLIENT_THREADS" --quiet --no-stats)
for port in "$port_a" "$port_b"; do
    "$FOGBENCH" run --server "127.0.0.1:$port" "${common[@]}" --load --duration-s "$WARMUP_S" \
        --get-ratio 0.9 >/dev/null
done

# One round: prints "ops_per_s p50 p99 p999 max" of all requests.
round() {
    local port="$1" mode="$2" json="$work_dir/round.json"
    local -a load
    case "$mode" in
        open) load=(--rate "$RATE" --get-ratio 0.9) ;;
        closed-get) load=(--get-ratio 1) ;;
        closed-mix) load=(--get-ratio 0.9) ;;
        *) die "unknown mode $mode (open, closed-get, closed-mix)" ;;
    esac
    "$FOGBENCH" run --server "127.0.0.1:$port" "${common[@]}" "${load[@]}" \
        --duration-s "$DURATION_S" --json "$json" >/dev/null
    python3 - "$json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["run"]
s = run["latency"]["all"]
print(f"{run['ops_per_s']:.0f} {s['p50_us']:.0f} {s['p99_us']:.0f} {s['p999_us']:.0f} {s['max_us']:.0f}")
EOF
}

for mode in $MODES; do
    echo
    echo "==> $mode$([ "$mode" = open ] && echo " at $RATE requests/s"), $ROUNDS rounds of ${DURATION_S}s"
    printf '%-6s %-12s %10s %9s %9s %9s %9s\n' round server ops/s p50_us p99_us p99.9_us max_us
    results_a=()
    results_b=()
    for r in $(seq 1 "$ROUNDS"); do
        line="$(round "$port_a" "$mode")"
        results_a+=("$line")
        printf '%-6s %-12s %10s %9s %9s %9s %9s\n' "$r" "$NAME_A" $line
        line="$(round "$port_b" "$mode")"
        results_b+=("$line")
        printf '%-6s %-12s %10s %9s %9s %9s %9s\n' "$r" "$NAME_B" $line
    done
    python3 - "$NAME_A" "$NAME_B" "${#results_a[@]}" "${results_a[@]}" "${results_b[@]}" <<'EOF'
import statistics, sys
name_a, name_b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [list(map(float, r.split())) for r in sys.argv[4:]]
a, b = rows[:n], rows[n:]
med = lambda rs, i: statistics.median(r[i] for r in rs)
print(f"median {name_a:<12} {med(a,0):10.0f} {med(a,1):9.0f} {med(a,2):9.0f} {med(a,3):9.0f} {med(a,4):9.0f}")
print(f"median {name_b:<12} {med(b,0):10.0f} {med(b,1):9.0f} {med(b,2):9.0f} {med(b,3):9.0f} {med(b,4):9.0f}")
ratios = [x[0] / y[0] for x, y in zip(a, b) if y[0]]
print(f"throughput ratio {name_a}/{name_b} per round: " + " ".join(f"{r:.3f}" for r in ratios)
      + f"; median {statistics.median(ratios):.3f}")
print(f"p99 ratio {name_a}/{name_b} (medians): {med(a,2) / med(b,2):.2f}")
EOF
done
echo
echo "==> load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
