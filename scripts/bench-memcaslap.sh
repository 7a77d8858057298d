#!/usr/bin/env bash
# Benchmark (not a test): memcaslap against fogcached and against Debian's memcached 1.6,
# with the same memory, thread and connection settings, in one run on this machine.
#
#   scripts/bench-memcaslap.sh
#
# Rounds alternate between the two servers (fogcached, memcached, fogcached, ...) so that
# a drift of the machine affects both alike. Each round is one memcaslap run of a fixed
# duration; the servers keep running between rounds and each first gets a warm-up run
# that is not counted. It prints every round, then the median throughput of each
# server, the ratio fogcached / memcached, and the latencies memcaslap measured.
#
# Settings (environment variables, defaults in brackets):
#   ROUNDS [3]            counted rounds per server
#   DURATION [20s]        length of a round (memcaslap --time)
#   WARMUP [5s]           length of the uncounted warm-up run per server
#   SERVER_THREADS [2]    -t of both servers
#   MEMORY_MB [1024]      -m of both servers
#   MAX_CONNS [1024]      -c of both servers
#   CLIENT_THREADS [2]    memcaslap --threads
#   CONCURRENCY [64]      memcaslap --concurrency (connections)
#   KEY_BYTES [32]        key size
#   VALUE_BYTES [1024]    value size
#   GET_SHARE [0.9]       share of gets; the rest are sets
#   FOGCACHED [unset]     a fogcached binary to use instead of building this checkout
#
# The client and the servers share this machine's cores, so the figures compare the two
# servers with each other; they are not the servers' absolute capacity.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-20s}"
WARMUP="${WARMUP:-5s}"
SERVER_THREADS="${SERVER_THREADS:-2}"
MEMORY_MB="${MEMORY_MB:-1024}"
MAX_CONNS="${MAX_CONNS:-1024}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
CONCURRENCY="${CONCURRENCY:-64}"
KEY_BYTES="${KEY_BYTES:-32}"
VALUE_BYTES="${VALUE_BYTES:-1024}"
GET_SHARE="${GET_SHARE:-0.9}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"
# How long a server may take to accept connections after start.
STARTUP_TIMEOUT_S=10

die() { printf 'bench-memcaslap.sh: %b\n' "$*" >&2; exit 1; }

command -v memcaslap >/dev/null 2>&1 || die "memcaslap missing (Debian package libmemcached-tools)"
[ -x "$MEMCACHED" ] || die "$MEMCACHED missing (Debian package memcached)"
command -v python3 >/dev/null 2>&1 || die "python3 missing"

# FOGCACHED=/path/to/binary benchmarks that binary instead of building this checkout.
if [ -z "${FOGCACHED:-}" ]; then
    echo "==> cargo build --release -p server"
    cargo build --release -p server
    FOGCACHED="${CARGO_TARGET_DIR:-$repo_root/target}/release/fogcached"
fi

work_dir="$(mktemp -d)"
server_pids=()
cleanup() {
    # Stops only the servers this script started.
    local pid
    for pid in "${server_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${server_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work_dir"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {
    local port="$1" pid="$2" deadline=$((SECONDS + STARTUP_TIMEOUT_S))
    while [ "$SECONDS" -lt "$deadline" ]; do
        kill -0 "$pid" 2>/dev/null || return 1
        if python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2)' \
            "$port" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# start_server NAME BINARY [EXTRA_ARGS...]: starts it on a free port, sets $started_port.
start_server() {
    local name="$1" binary="$2"
    shift 2
    started_port="$(free_port)"
    "$binary" -p "$started_port" -l 127.0.0.1 -U 0 -m "$MEMORY_MB" -t "$SERVER_THREADS" \
        -c "$MAX_CONNS" "$@" >"$work_dir/$name.log" 2>&1 &
    local pid=$!
    server_pids+=("$pid")
    wait_for_port "$started_port" "$pid" ||
        die "$name did not start; its log:\n$(cat "$work_dir/$name.log")"
}

run_as_root_args=()
[ "$(id -u)" -eq 0 ] && run_as_root_args=(-u root) # memcached refuses root without -u

# DRAM only (`--slow-size 0`): the like-for-like comparison with memcached.
start_server fogcached "$FOGCACHED" --slow-size 0
fog_port="$started_port"
start_server memcached "$MEMCACHED" "${run_as_root_args[@]}"
mc_port="$started_port"

workload="$work_dir/workload.cnf"
cat >"$workload" <<EOF
key
$KEY_BYTES $KEY_BYTES 1
value
$VALUE_BYTES $VALUE_BYTES 1
cmd
0 $(python3 -c "print(round(1 - $GET_SHARE, 3))")
1 $GET_SHARE
EOF

# run_memcaslap PORT DURATION OUTPUT_FILE
run_memcaslap() {
    # --stat_freq equal to the duration makes memcaslap print its latency summary once.
    memcaslap --servers "127.0.0.1:$1" --cfg_cmd "$workload" --time "$2" --stat_freq "$2" \
        --threads "$CLIENT_THREADS" --concurrency "$CONCURRENCY" </dev/null >"$3" 2>&1 ||
        die "memcaslap failed: $(cat "$3")"
}

# Prints "tps avg_us geo_us std_us max_us p50_us p99_us" from a memcaslap output: the
# throughput of its last line and the latencies of its "Total Statistics (N events)"
# block. p50/p99 are upper bounds of memcaslap's power-of-two latency buckets.
parse_run() {
    awk '
        /^Run time:/ { for (i = 1; i <= NF; i++) if ($i == "TPS:") tps = $(i + 1) }
        /^Total Statistics \(/ { total = 1; next }
        total && /^ *Min:/ { min = $2 }
        total && /^ *Max:/ { max = $2 }
        total && /^ *Avg:/ { avg = $2 }
        total && /^ *Geo:/ { geo = $2 }
        total && /^ *Std:/ { std = $2 }
        total && /^ *[0-9]+:/ {
            first = $1; sub(":", "", first)
            for (i = 2; i <= NF; i++) { bucket[first + i - 2] = $i; events += $i; if (first + i - 2 > top) top = first + i - 2 }
        }
        total && /^$/ && events > 0 { total = 0 }
        END {
            if (tps == "") { print "parse-error"; exit }
            p50 = "?"; p99 = "?"; seen = 0
            for (b = 0; b <= top; b++) {
                seen += bucket[b]
                if (p50 == "?" && seen >= 0.50 * events) p50 = 2 ^ (b + 1)
                if (p99 == "?" && seen >= 0.99 * events) p99 = 2 ^ (b + 1)
            }
            printf "%s %s %s %s %s %s %s\n", tps, avg, geo, std, max, p50, p99
        }' "$1"
}

echo "==> settings: -m $MEMORY_MB -t $SERVER_THREADS -c $MAX_CONNS on both servers;" \
    "memcaslap --threads $CLIENT_THREADS --concurrency $CONCURRENCY, key $KEY_BYTES B," \
    "value $VALUE_BYTES B, get share $GET_SHARE, $ROUNDS rounds of $DURATION"
# The version each server reports over the protocol.
server_version() {
    python3 -c '
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5) as s:
    s.sendall(b"version\r\n")
    print(s.recv(200).decode(errors="replace").strip())' "$1"
}
echo "==> fogcached: $(server_version "$fog_port") on port $fog_port;" \
    "memcached: $(server_version "$mc_port") on port $mc_port"

echo "==> warm-up ($WARMUP each, not counted)"
run_memcaslap "$fog_port" "$WARMUP" "$work_dir/warmup-fogcached.out"
run_memcaslap "$mc_port" "$WARMUP" "$work_dir/warmup-memcached.out"

printf '\n%-6s %-10s %10s %9s %9s %9s %9s %9s %9s\n' round server "TPS" "avg_us" "geo_us" \
    "std_us" "p50<=us" "p99<=us" "max_us"
fog_results=()
mc_results=()
for round in $(seq 1 "$ROUNDS"); do
    for server in fogcached memcached; do
        port="$fog_port"
        [ "$server" = memcached ] && port="$mc_port"
        out="$work_dir/round$round-$server.out"
        run_memcaslap "$port" "$DURATION" "$out"
        # memcaslap prints "<fd ..." for every error reply; throughput of a server that
        # refuses requests means nothing.
        if grep -q '^<' "$out"; then
            die "$server sent error replies to memcaslap, e.g.:\n$(grep -m3 '^<' "$out")"
        fi
        result="$(parse_run "$out")"
        [ "$result" != parse-error ] || die "could not parse memcaslap output:\n$(cat "$out")"
        read -r tps avg geo std max p50 p99 <<<"$result"
        printf '%-6s %-10s %10s %9s %9s %9s %9s %9s %9s\n' "$round" "$server" "$tps" "$avg" \
            "$geo" "$std" "$p50" "$p99" "$max"
        if [ "$server" = fogcached ]; then
            fog_results+=("$result")
        else
            mc_results+=("$result")
        fi
    done
done

# Both servers must still be alive: a crash during the run makes the figures meaningless.
for pid in "${server_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || die "a server died during the benchmark (pid $pid)"
done

python3 - "${#fog_results[@]}" "${fog_results[@]}" "${mc_results[@]}" <<'EOF'
import statistics
import sys

count = int(sys.argv[1])
rows = [line.split() for line in sys.argv[2:]]
fog, mc = rows[:count], rows[count:]

def median(rows, column):
    return statistics.median(float(row[column]) for row in rows)

print()
print(f"{'median':<17} {'TPS':>10} {'avg_us':>9} {'geo_us':>9} {'p99<=us':>9}")
for name, result in (("fogcached", fog), ("memcached", mc)):
    print(f"{name:<17} {median(result, 0):>10.0f} {median(result, 1):>9.0f} "
          f"{median(result, 2):>9.2f} {median(result, 6):>9.0f}")
ratio = median(fog, 0) / median(mc, 0)
print(f"\nthroughput ratio fogcached / memcached (median TPS): {ratio:.3f}")
print(f"average latency ratio fogcached / memcached (median): "
      f"{median(fog, 1) / median(mc, 1):.3f}")
EOF
