#!/usr/bin/env bash
# Benchmark (not a test): what reading large slow-tier values costs the small GETs beside
# them. `Engine::read` copies a value and pays its emulated slow-tier wait while it holds
# the key's index shard lock (ARCHITECTURE.md, "Large values and the shard lock"), so a
# small GET whose key hashes to the same shard waits for that whole copy. This measures
# how often that shows in the small GETs' latency, for the default shard count and for
# fewer shards, by alternating two phases on one server:
#
#   alone     the small GETs by themselves (fogbench open loop at RATE requests/s);
#   beside    the same, while BIG_CONNECTIONS connections read BIG_KEYS values of
#             BIG_BYTES from the slow tier in a closed loop (a second fogbench).
#
#   scripts/bench-large-values.sh
#   HASHPOWERS=16 ROUNDS=5 SLOW_COSTS=optane scripts/bench-large-values.sh
#
# Placement: the small keys are stored first and fit in DRAM; the large values are stored
# after them and do not (-m is far below BIG_KEYS x BIG_BYTES), and `--no-migration`
# keeps every item where its first store put it, so the large reads are slow-tier reads.
# Each phase prints the server's tier hit deltas, which say where the reads were served.
#
# Printed per round and phase: the small GETs' p50 / p99 / p99.9 / max in microseconds,
# then the medians per phase.
#
# Settings (environment variables, defaults in brackets):
#   HASHPOWERS ["16 12"]  -o hashpower values to run (16: the default, 1024 shards;
#                         12: 64 shards)
#   ROUNDS [3]  DURATION_S [10]  RATE [5000]  SMALL_KEYS [10000]  SMALL_BYTES [100]
#   SMALL_CONNECTIONS [16]  BIG_KEYS [200]  BIG_BYTES [1048576]  BIG_CONNECTIONS [2]
#   DRAM_MB [16]  SLOW_MB [1024]  WORKERS [2]
#   SLOW_COSTS ["hmcached optane"]  --slow-cost presets to run (hmcached: 224 ns a line,
#                         no bandwidth term: 3.7 ms for 1 MiB; optane: 305 ns + bytes at
#                         39.4 GB/s: 27 us for 1 MiB)
#   EXTRA_ARGS [""]  more fogcached arguments
#   FOGCACHED, FOGBENCH [target/release/...]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGCACHED="${FOGCACHED:-$target_dir/release/fogcached}"
FOGBENCH="${FOGBENCH:-$target_dir/release/fogbench}"
HASHPOWERS="${HASHPOWERS:-16 12}"
ROUNDS="${ROUNDS:-3}"
DURATION_S="${DURATION_S:-10}"
RATE="${RATE:-5000}"
SMALL_KEYS="${SMALL_KEYS:-10000}"
SMALL_BYTES="${SMALL_BYTES:-100}"
SMALL_CONNECTIONS="${SMALL_CONNECTIONS:-16}"
BIG_KEYS="${BIG_KEYS:-200}"
BIG_BYTES="${BIG_BYTES:-1048576}"
BIG_CONNECTIONS="${BIG_CONNECTIONS:-2}"
DRAM_MB="${DRAM_MB:-16}"
SLOW_MB="${SLOW_MB:-1024}"
SLOW_COSTS="${SLOW_COSTS:-hmcached optane}"
WORKERS="${WORKERS:-2}"
EXTRA_ARGS="${EXTRA_ARGS:-}"

die() { printf 'bench-large-values.sh: %b\n' "$*" >&2; exit 1; }
if [ ! -x "$FOGCACHED" ] || [ ! -x "$FOGBENCH" ]; then
    (cd "$repo_root" && cargo build --release -p server -p bench) >&2
fi
command -v python3 >/dev/null || die "python3 missing"

work_dir="$(mktemp -d)"
server_pid=""
big_pid=""
cleanup() {
    for pid in $big_pid $server_pid; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work_dir"
}
trap cleanup EXIT

# shellcheck source=launch.sh
. "$repo_root/scripts/launch.sh"

# Starts fogcached with arguments "$@" in a fresh directory, on a port the kernel picks
# (launch.sh); sets `port`.
start_server() {
    rm -rf "$work_dir/server"
    launch_server "$work_dir/server" "$FOGCACHED" -c 4096 "$@" || die "fogcached $* did not start"
    server_pid="$launched_pid"
    port="$launched_port"
}

stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# Prints the named `stats` fields of the server, "name value" per line.
stats() {
    python3 - "$port" "$@" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
s.sendall(b"stats\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
fields = dict(l.split(" ", 2)[1:] for l in data.decode().splitlines() if l.startswith("STAT "))
for name in sys.argv[2:]:
    print(name, fields.get(name, "-"))
EOF
}

tier_fields=(tier_dram_get_hits tier_slow_get_hits slow_emulated_wait_us)
snapshot() { stats "${tier_fields[@]}" | awk '{print $2}' | paste -sd' '; }
# Prints the deltas between two snapshots, named.
deltas() {
    python3 - "$1" "$2" "${tier_fields[@]}" <<'EOF'
import sys
a, b, names = sys.argv[1].split(), sys.argv[2].split(), sys.argv[3:]
print("  ".join(f"{n}+{int(y) - int(x)}" for n, x, y in zip(names, a, b)))
EOF
}

small=(--server "127.0.0.1:PORT" --key-prefix small: --keys "$SMALL_KEYS"
    --value-size "$SMALL_BYTES" --connections "$SMALL_CONNECTIONS" --threads 1 --quiet --no-stats)
big=(--server "127.0.0.1:PORT" --key-prefix big: --keys "$BIG_KEYS" --value-size "$BIG_BYTES"
    --connections "$BIG_CONNECTIONS" --threads 1 --quiet --no-stats)
with_port() { local a; for a in "$@"; do printf '%s\n' "${a//PORT/$port}"; done; }

# One measured run of the small GETs; prints "p50 p99 p999 max ops_per_s".
small_round() {
    local json="$work_dir/small.json"
    mapfile -t args < <(with_port "${small[@]}")
    "$FOGBENCH" run "${args[@]}" --get-ratio 1 --rate "$RATE" --duration-s "$DURATION_S" \
        --json "$json" >/dev/null
    python3 - "$json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["run"]
s = run["latency"]["all"]
print(f"{s['p50_us']:.0f} {s['p99_us']:.0f} {s['p999_us']:.0f} {s['max_us']:.0f} {run['ops_per_s']:.0f}")
EOF
}

echo "==> load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
summary=()
for slow_cost in $SLOW_COSTS; do
for hashpower in $HASHPOWERS; do
    # shellcheck disable=SC2086 # EXTRA_ARGS is a word list.
    start_server -t "$WORKERS" -m "$DRAM_MB" -I 2m --slow-size "$SLOW_MB" \
        --slow-cost "$slow_cost" --no-migration -o "hashpower=$hashpower" $EXTRA_ARGS
    mapfile -t args < <(with_port "${small[@]}")
    "$FOGBENCH" run "${args[@]}" --load --get-ratio 1 --duration-s 1 >/dev/null
    mapfile -t args < <(with_port "${big[@]}")
    "$FOGBENCH" run "${args[@]}" --load --get-ratio 1 --duration-s 1 >/dev/null
    echo
    # The index's shard count (index.rs, Index::new): 2^(hashpower - 6), within 16..1024.
    shard_bits=$((hashpower - 6)); [ "$shard_bits" -ge 4 ] || shard_bits=4
    [ "$shard_bits" -le 10 ] || shard_bits=10
    echo "==> --slow-cost $slow_cost, -o hashpower=$hashpower ($((1 << shard_bits)) index shards)," \
        "$ROUNDS rounds of ${DURATION_S}s, small GETs at $RATE/s"
    stats tier_dram_items tier_slow_items | paste -sd' ' | sed 's/^/    placement: /'
    printf '%-6s %-7s %8s %8s %9s %8s %9s  %s\n' round phase p50_us p99_us p99.9_us max_us ops/s \
        "server counters during the phase"
    alone=()
    beside=()
    for r in $(seq 1 "$ROUNDS"); do
        before="$(snapshot)"
        line="$(small_round)"
        alone+=("$line")
        printf '%-6s %-7s %8s %8s %9s %8s %9s  %s\n' "$r" alone $line "$(deltas "$before" "$(snapshot)")"

        mapfile -t args < <(with_port "${big[@]}")
        "$FOGBENCH" run "${args[@]}" --get-ratio 1 --duration-s $((DURATION_S + 4)) >/dev/null &
        big_pid=$!
        sleep 1
        before="$(snapshot)"
        line="$(small_round)"
        after="$(snapshot)"
        wait "$big_pid" || die "the large-value reader failed"
        big_pid=""
        beside+=("$line")
        printf '%-6s %-7s %8s %8s %9s %8s %9s  %s\n' "$r" beside $line "$(deltas "$before" "$after")"
    done
    summary+=("$(python3 - "$slow_cost" "$hashpower" "${#alone[@]}" "${alone[@]}" "${beside[@]}" <<'EOF'
import statistics, sys
cost, hp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [list(map(float, r.split())) for r in sys.argv[4:]]
alone, beside = rows[:n], rows[n:]
med = lambda rs, i: statistics.median(r[i] for r in rs)
for name, rs in (("alone", alone), ("beside", beside)):
    print(f"{cost:<9} hashpower={hp:<3} {name:<7} p50 {med(rs,0):6.0f}  p99 {med(rs,1):6.0f}  "
          f"p99.9 {med(rs,2):7.0f}  max {med(rs,3):7.0f} us")
EOF
)")
    stop_server
done
done
echo
echo "==> medians (small GETs)"
printf '%s\n' "${summary[@]}"
echo "==> load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
