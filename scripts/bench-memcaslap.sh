#!/usr/bin/env bash
# Benchmark (not a test): memcaslap against fogcached and against Debian's memcached 1.6,
# with the same memory, thread and connection settings, in one run on this machine.
#
#   scripts/bench-memcaslap.sh
#
# Rounds alternate between the two servers (fogcached, memcached, fogcached, ...) so that
# a drift of the machine affects both alike. Each round is one memcaslap run of a fixed
# duration; the servers keep running between rounds and each first gets a warm-up run
# that is not counted. It prints every round (throughput and memcaslap's latencies, p99
# included, of both servers), then the median of each server, and the comparison:
#
#   headline: the ratio of the median throughputs (fogcached / memcached), and the ratio
#             of the median p99s (above 1: fogcached's tail is worse);
#   each round's throughput and p99 ratios, and their medians (the rounds alternate, so
#             the two runs of a round saw about the same machine; these show the spread).
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
#   FOGCACHED_ARGS ["--slow-size 0"] fogcached's flags beyond -m and -t: by default DRAM
#                         only, like memcached; FOGCACHED_ARGS="" runs fogcached's default
#                         configuration (a slow tier, hotspot policy). The flags are printed
#                         with the results.
#
#   SERVER_A, SERVER_B [unset] two server command lines to compare instead (both must be
#                         set); a leading `fogcached` or `memcached` word names the binary
#                         above. The script adds -p, -l 127.0.0.1, -U 0 and -c MAX_CONNS;
#                         everything else (-t, memory, -u root for memcached as root) is
#                         the caller's. Each server runs in its own temporary directory, so
#                         fogcached's default --data-dir lands there.
#   NAME_A, NAME_B [A, B] their names in the output
#
# For example, the hybrid against itself without migration:
#   SERVER_A="fogcached --dram 48 --slow-size 976m --slow-cost optane -t 2 --policy dual-lru" \
#   SERVER_B="fogcached --dram 48 --slow-size 976m --slow-cost optane -t 2 --policy dual-lru --no-migration" \
#   NAME_A=hybrid NAME_B=no-migration scripts/bench-memcaslap.sh
#
# After each round the script also prints, for a server that reports them, the round's
# promotions, promotions skipped by admission and demotions per second (from `stats`), and
# the CPU time of its migration thread (fc-migrate, from /proc/PID/task/*/stat).
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
FOGCACHED_ARGS="${FOGCACHED_ARGS-"--slow-size 0"}"
# How long a server may take to accept connections after start.
LAUNCH_TIMEOUT_S=10
. "$repo_root/scripts/launch.sh"

die() { printf 'bench-memcaslap.sh: %b\n' "$*" >&2; exit 1; }

command -v memcaslap >/dev/null 2>&1 || die "memcaslap missing (Debian package libmemcached-tools)"
TIME_BIN=/usr/bin/time
[ -x "$TIME_BIN" ] || die "$TIME_BIN missing (Debian package time): it measures the client's CPU time"
[ -x "$MEMCACHED" ] || die "$MEMCACHED missing (Debian package memcached)"
command -v python3 >/dev/null 2>&1 || die "python3 missing"

if [ -n "${SERVER_A:-}" ] || [ -n "${SERVER_B:-}" ]; then
    [ -n "${SERVER_A:-}" ] && [ -n "${SERVER_B:-}" ] || die "set both SERVER_A and SERVER_B"
    compare_mode=1
else
    compare_mode=0
fi
needs_fogcached=1
if [ "$compare_mode" = 1 ]; then
    case "$SERVER_A $SERVER_B" in
    fogcached* | *" fogcached"*) ;;
    *) needs_fogcached=0 ;;
    esac
fi

# FOGCACHED=/path/to/binary benchmarks that binary instead of building this checkout.
if [ -z "${FOGCACHED:-}" ] && [ "$needs_fogcached" = 1 ]; then
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

# start_server NAME BINARY [ARGS...]: starts it in its own directory under $work_dir on a
# loopback port the kernel picks (scripts/launch.sh), sets $started_port and $started_pid.
start_server() {
    local name="$1" binary="$2"
    shift 2
    # The server starts in its own directory: a relative binary path is made absolute.
    case "$binary" in
    /*) ;;
    */*) binary="$PWD/$binary" ;;
    esac
    launch_server "$work_dir/$name" "$binary" -c "$MAX_CONNS" "$@" || die "$name did not start"
    started_port="$launched_port"
    started_pid="$launched_pid"
    server_pids+=("$started_pid")
}

run_as_root_args=()
[ "$(id -u)" -eq 0 ] && run_as_root_args=(-u root) # memcached refuses root without -u

# binary_of WORD: the binary a command line's first word names.
binary_of() {
    case "$1" in
    fogcached) echo "$FOGCACHED" ;;
    memcached) echo "$MEMCACHED" ;;
    *) echo "$1" ;;
    esac
}

if [ "$compare_mode" = 1 ]; then
    names=("${NAME_A:-A}" "${NAME_B:-B}")
    [ "${names[0]}" != "${names[1]}" ] || die "NAME_A and NAME_B must differ"
    read -r -a command_a <<<"$SERVER_A"
    read -r -a command_b <<<"$SERVER_B"
    start_server "${names[0]}" "$(binary_of "${command_a[0]}")" "${command_a[@]:1}"
    ports=("$started_port")
    pids=("$started_pid")
    start_server "${names[1]}" "$(binary_of "${command_b[0]}")" "${command_b[@]:1}"
    ports+=("$started_port")
    pids+=("$started_pid")
    settings="A: $SERVER_A; B: $SERVER_B"
else
    names=(fogcached memcached)
    # By default DRAM only (`--slow-size 0`): the like-for-like comparison with memcached.
    read -r -a fogcached_args <<<"$FOGCACHED_ARGS"
    start_server fogcached "$FOGCACHED" -m "$MEMORY_MB" -t "$SERVER_THREADS" \
        "${fogcached_args[@]}"
    ports=("$started_port")
    pids=("$started_pid")
    start_server memcached "$MEMCACHED" -m "$MEMORY_MB" -t "$SERVER_THREADS" \
        "${run_as_root_args[@]}"
    ports+=("$started_port")
    pids+=("$started_pid")
    settings="-m $MEMORY_MB -t $SERVER_THREADS -c $MAX_CONNS on both servers;"
    settings+=" fogcached ${FOGCACHED_ARGS:-(its defaults)}"
fi

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
    # GNU time records memcaslap's own CPU time ("user system", seconds) in OUTPUT_FILE.cpu.
    "$TIME_BIN" -f "%U %S" -o "$3.cpu" \
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

echo "==> settings: $settings;" \
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
for i in 0 1; do
    echo "==> ${names[$i]}: $(server_version "${ports[$i]}") on port ${ports[$i]}, pid ${pids[$i]}"
done

# snapshot PORT PID FILE: the counters of `stats` that say what a tiered server did, the
# CPU ticks of its migration thread and of the whole server, as one line "name=value ...".
snapshot() {
    python3 - "$1" "$2" >"$3" <<'PY'
import os, socket, sys, time
port, pid = int(sys.argv[1]), sys.argv[2]
with socket.create_connection(("127.0.0.1", port), 5) as s:
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("the server closed the connection during stats")
        buf += chunk
wanted = ("cmd_get", "cmd_set", "promotions", "promotions_skipped", "demotions", "tier_dram_get_hits",
          "tier_slow_get_hits", "evictions", "get_misses")
values = {"time": time.monotonic()}
for line in buf.decode().splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[0] == "STAT" and parts[1] in wanted:
        values[parts[1]] = parts[2]
migrate_ticks = None
server_ticks = 0
for tid in os.listdir(f"/proc/{pid}/task"):
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    # utime and stime, fields 14 and 15 of stat(5).
    ticks = int(fields[11]) + int(fields[12])
    server_ticks += ticks
    if text[text.index("(") + 1:text.rindex(")")] == "fc-migrate":
        migrate_ticks = (migrate_ticks or 0) + ticks
values["server_ticks"] = server_ticks
if migrate_ticks is not None:
    values["migrate_ticks"] = migrate_ticks
print(" ".join(f"{k}={v}" for k, v in values.items()))
PY
}

# round_counters BEFORE AFTER: what the server did during the round, per second.
round_counters() {
    python3 - "$1" "$2" "$3" <<'PY'
import os, sys
def read(path):
    return {k: float(v) for k, v in (item.split("=") for item in open(path).read().split())}
before, after = read(sys.argv[1]), read(sys.argv[2])
client_user_s, client_system_s = (float(x) for x in open(sys.argv[3]).read().split()[-2:])
seconds = after["time"] - before["time"]
def rate(name):
    return (after[name] - before[name]) / seconds
parts = []
for name in ("promotions", "promotions_skipped", "demotions"):
    if name in after:
        parts.append(f"{name} {rate(name):.0f}/s")
if "tier_dram_get_hits" in after:
    dram = after["tier_dram_get_hits"] - before["tier_dram_get_hits"]
    slow = after["tier_slow_get_hits"] - before["tier_slow_get_hits"]
    parts.append(f"DRAM share of hits {dram / max(dram + slow, 1):.3f}")
if "get_misses" in after:
    misses = after["get_misses"] - before["get_misses"]
    gets = after["cmd_get"] - before["cmd_get"]
    parts.append(f"misses {misses / max(gets, 1) * 100:.1f} % of gets")
if "migrate_ticks" in after:
    cpu = (after["migrate_ticks"] - before["migrate_ticks"]) / os.sysconf("SC_CLK_TCK")
    parts.append(f"fc-migrate CPU {cpu * 100 / seconds:.1f} % of a core")
requests = (after["cmd_get"] - before["cmd_get"]) + (after["cmd_set"] - before["cmd_set"])
if requests > 0:
    # Threads that exited during the round are not counted (the server's do not).
    cpu_s = (after["server_ticks"] - before["server_ticks"]) / os.sysconf("SC_CLK_TCK")
    parts.append(f"server CPU {cpu_s * 1e6 / requests:.2f} us/request")
    # The client's share of the two cores: what the server leaves it decides the rate.
    parts.append(f"client CPU {(client_user_s + client_system_s) * 1e6 / requests:.2f} us/request "
                 f"(user {client_user_s * 1e6 / requests:.2f})")
print(("       " + ", ".join(parts)) if parts else "")
PY
}

echo "==> warm-up ($WARMUP each, not counted)"
for i in 0 1; do
    run_memcaslap "${ports[$i]}" "$WARMUP" "$work_dir/warmup-${names[$i]}.out"
done

printf '\n%-6s %-14s %10s %9s %9s %9s %9s %9s %9s\n' round server "TPS" "avg_us" "geo_us" \
    "std_us" "p50<=us" "p99<=us" "max_us"
results_a=()
results_b=()
for round in $(seq 1 "$ROUNDS"); do
    for i in 0 1; do
        server="${names[$i]}"
        out="$work_dir/round$round-$server.out"
        snapshot "${ports[$i]}" "${pids[$i]}" "$work_dir/before.txt"
        run_memcaslap "${ports[$i]}" "$DURATION" "$out"
        snapshot "${ports[$i]}" "${pids[$i]}" "$work_dir/after.txt"
        # memcaslap prints "<fd ..." for every error reply; throughput of a server that
        # refuses requests means nothing.
        if grep -q '^<' "$out"; then
            die "$server sent error replies to memcaslap, e.g.:\n$(grep -m3 '^<' "$out")"
        fi
        result="$(parse_run "$out")"
        [ "$result" != parse-error ] || die "could not parse memcaslap output:\n$(cat "$out")"
        read -r tps avg geo std max p50 p99 <<<"$result"
        printf '%-6s %-14s %10s %9s %9s %9s %9s %9s %9s\n' "$round" "$server" "$tps" "$avg" \
            "$geo" "$std" "$p50" "$p99" "$max"
        counters="$(round_counters "$work_dir/before.txt" "$work_dir/after.txt" "$out.cpu")"
        [ -z "$counters" ] || echo "$counters"
        if [ "$i" = 0 ]; then
            results_a+=("$result")
        else
            results_b+=("$result")
        fi
    done
done

# Both servers must still be alive: a crash during the run makes the figures meaningless.
for pid in "${server_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || die "a server died during the benchmark (pid $pid)"
done

python3 - "${names[0]}" "${names[1]}" "${#results_a[@]}" "${results_a[@]}" "${results_b[@]}" <<'EOF'
import statistics
import sys

name_a, name_b, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [line.split() for line in sys.argv[4:]]
a, b = rows[:count], rows[count:]

def median(rows, column):
    return statistics.median(float(row[column]) for row in rows)

print()
print(f"{'median':<17} {'TPS':>10} {'avg_us':>9} {'geo_us':>9} {'p99<=us':>9}")
for name, result in ((name_a, a), (name_b, b)):
    print(f"{name:<17} {median(result, 0):>10.0f} {median(result, 1):>9.0f} "
          f"{median(result, 2):>9.2f} {median(result, 6):>9.0f}")
# The headline: ratios of the medians (each server's typical round), not the median of
# the per-round ratios, which a single lopsided round moves less visibly.
ratio = median(a, 0) / median(b, 0)
p99_ratio = median(a, 6) / median(b, 6)
print(f"\nheadline: throughput ratio {name_a} / {name_b} (ratio of median TPS): {ratio:.3f}")
print(f"headline: p99 ratio {name_a} / {name_b} (ratio of median p99 buckets): {p99_ratio:.3f}"
      f"  ({name_a} {median(a, 6):.0f} us, {name_b} {median(b, 6):.0f} us; above 1: "
      f"{name_a}'s tail is worse)")
# Rounds alternate, so the two runs of a round saw about the same state of the machine.
per_round = [float(x[0]) / float(y[0]) for x, y in zip(a, b)]
print(f"throughput ratio per round: {' '.join(f'{r:.3f}' for r in per_round)}; "
      f"median of these {statistics.median(per_round):.3f}")
p99_rounds = [float(x[6]) / float(y[6]) for x, y in zip(a, b)]
print(f"p99 ratio per round: {' '.join(f'{r:.2f}' for r in p99_rounds)}")
print(f"average latency ratio {name_a} / {name_b} (median): "
      f"{median(a, 1) / median(b, 1):.3f}")
EOF
