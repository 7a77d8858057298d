#!/usr/bin/env bash
# Benchmark (not a test): two server command lines under the same fogbench closed loop,
# in alternating rounds, so that a drift of the (shared) machine affects both alike.
#
#   SERVER_A="fogcached -t 2 --dram 17 --slow-size 125m --slow-cost optane --policy dual-lru" \
#   SERVER_B="fogcached -t 2 --dram 17 --slow-size 125m --slow-cost optane --policy dual-lru --no-migration" \
#   NAME_A=hybrid NAME_B=no-migration scripts/bench-fogbench-ab.sh
#
# Both servers start at once (each in its own temporary directory, on a loopback port the
# kernel picks: scripts/launch.sh adds -p, -l 127.0.0.1 and -U 0; a leading `fogcached`
# word names the binary below).
# Each is loaded with every key (`fogbench run --load`) and given an uncounted warm-up;
# then ROUNDS rounds run A, B, A, B, ... of DURATION_S seconds each, with the servers idle
# but running while the other one is measured. The default load is seed 000's workload as
# `fogbench reproduce fogcached-latency` runs it: 100 000 keys × 1 KB, GET only, every
# other key from the hot range [50 000, 55 000), 256 connections, 2 client threads.
# It prints every round (GETs/s, and for a tiered server its promotions, promotions
# skipped by admission and demotions per second, the DRAM share of hits; for every server
# the CPU time of its threads by name, from /proc/PID/task/*/stat), the median GETs/s of
# each, and the median of the per-round ratios A / B.
#
# Settings (environment variables, defaults in brackets):
#   ROUNDS [5]  DURATION_S [20]  WARMUP_S [20]
#   KEYS [100000]  VALUE_BYTES [1024]  HOT_FIRST [50000]  HOT_KEYS [5000]
#   CONNECTIONS [256]  CLIENT_THREADS [2]
#   FOGBENCH_ARGS [unset]: replaces the key-choice arguments (--distribution hotset
#                          --hot-first .. --hot-keys .. --get-ratio 1)
#   FOGCACHED, FOGBENCH [target/release/...]: the binaries (build them first:
#   cargo build --release -p server -p bench)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGCACHED="${FOGCACHED:-$target_dir/release/fogcached}"
FOGBENCH="${FOGBENCH:-$target_dir/release/fogbench}"
ROUNDS="${ROUNDS:-5}"
DURATION_S="${DURATION_S:-20}"
WARMUP_S="${WARMUP_S:-20}"
KEYS="${KEYS:-100000}"
VALUE_BYTES="${VALUE_BYTES:-1024}"
HOT_FIRST="${HOT_FIRST:-50000}"
HOT_KEYS="${HOT_KEYS:-5000}"
CONNECTIONS="${CONNECTIONS:-256}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
LAUNCH_TIMEOUT_S=10
. "$repo_root/scripts/launch.sh"

die() { printf 'bench-fogbench-ab.sh: %b\n' "$*" >&2; exit 1; }
[ -n "${SERVER_A:-}" ] && [ -n "${SERVER_B:-}" ] || die "set SERVER_A and SERVER_B"
[ -x "$FOGBENCH" ] || die "$FOGBENCH missing (cargo build --release -p bench)"
case "$FOGCACHED" in /*) ;; *) FOGCACHED="$PWD/$FOGCACHED" ;; esac
names=("${NAME_A:-A}" "${NAME_B:-B}")
[ "${names[0]}" != "${names[1]}" ] || die "NAME_A and NAME_B must differ"

work_dir="$(mktemp -d)"
pids=()
cleanup() {
    # Stops only the servers this script started.
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

ports=()
for i in 0 1; do
    if [ "$i" = 0 ]; then read -r -a command <<<"$SERVER_A"; else read -r -a command <<<"$SERVER_B"; fi
    binary="${command[0]}"
    [ "$binary" = fogcached ] && binary="$FOGCACHED"
    case "$binary" in /*) ;; */*) binary="$PWD/$binary" ;; esac
    launch_server "$work_dir/${names[$i]}" "$binary" "${command[@]:1}" ||
        die "${names[$i]} did not start"
    pids+=("$launched_pid")
    ports+=("$launched_port")
done

if [ -n "${FOGBENCH_ARGS:-}" ]; then
    read -r -a key_args <<<"$FOGBENCH_ARGS"
else
    key_args=(--distribution hotset --hot-first "$HOT_FIRST" --hot-keys "$HOT_KEYS" --get-ratio 1)
fi
bench_args=(--keys "$KEYS" --value-size "$VALUE_BYTES" "${key_args[@]}"
    --connections "$CONNECTIONS" --threads "$CLIENT_THREADS" --verify --quiet --no-stats)

# snapshot PORT PID FILE: counters from `stats` and the migration thread's CPU ticks.
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
wanted = ("cmd_get", "promotions", "promotions_skipped", "demotions", "tier_dram_get_hits",
          "tier_slow_get_hits", "get_misses")
values = {"time": time.monotonic()}
for line in buf.decode().splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[0] == "STAT" and parts[1] in wanted:
        values[parts[1]] = parts[2]
for tid in os.listdir(f"/proc/{pid}/task"):
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        text = f.read()
    # Threads by name (workers share one); utime and stime are fields 14 and 15 of stat(5).
    comm = text[text.index("(") + 1:text.rindex(")")].replace(" ", "_")
    fields = text[text.rindex(")") + 2:].split()
    key = f"ticks:{comm}"
    values[key] = values.get(key, 0) + int(fields[11]) + int(fields[12])
print(" ".join(f"{k}={v}" for k, v in values.items()))
PY
}

echo "==> A = ${names[0]}: $SERVER_A"
echo "==> B = ${names[1]}: $SERVER_B"
echo "==> fogbench run ${bench_args[*]}; $ROUNDS rounds of ${DURATION_S} s after load and ${WARMUP_S} s warm-up each"
for i in 0 1; do
    "$FOGBENCH" run --server "127.0.0.1:${ports[$i]}" "${bench_args[@]}" --load \
        --duration-s "$WARMUP_S" >"$work_dir/warmup-${names[$i]}.out" ||
        die "the warm-up of ${names[$i]} failed:\n$(cat "$work_dir/warmup-${names[$i]}.out")"
done

rows=()
for round in $(seq 1 "$ROUNDS"); do
    for i in 0 1; do
        out="$work_dir/round$round-${names[$i]}.out"
        snapshot "${ports[$i]}" "${pids[$i]}" "$work_dir/before.txt"
        "$FOGBENCH" run --server "127.0.0.1:${ports[$i]}" "${bench_args[@]}" \
            --duration-s "$DURATION_S" --seed "$((round + 1))" >"$out" ||
            die "round $round of ${names[$i]} failed:\n$(cat "$out")"
        snapshot "${ports[$i]}" "${pids[$i]}" "$work_dir/after.txt"
        ops_per_s="$(sed -n 's/^run: .*(\([0-9.]*\) ops\/s).*/\1/p' "$out")"
        [ -n "$ops_per_s" ] || die "could not read the throughput of:\n$(cat "$out")"
        rows+=("$round $i $ops_per_s")
        python3 - "$round" "${names[$i]}" "$ops_per_s" "$work_dir/before.txt" "$work_dir/after.txt" <<'PY'
import os, sys
round_, name, ops = sys.argv[1], sys.argv[2], float(sys.argv[3])
def read(path):
    return {k: float(v) for k, v in (item.split("=") for item in open(path).read().split())}
before, after = read(sys.argv[4]), read(sys.argv[5])
seconds = after["time"] - before["time"]
parts = [f"{ops:>9.0f} GETs/s"]
for key in ("promotions", "promotions_skipped", "demotions"):
    if key in after:
        parts.append(f"{key} {(after[key] - before[key]) / seconds:.0f}/s")
if "tier_dram_get_hits" in after:
    dram = after["tier_dram_get_hits"] - before["tier_dram_get_hits"]
    slow = after["tier_slow_get_hits"] - before["tier_slow_get_hits"]
    parts.append(f"DRAM share of hits {dram / max(dram + slow, 1):.3f}")
print(f"round {round_:<3} {name:<14} " + ", ".join(parts))
hz = os.sysconf("SC_CLK_TCK")
threads = []
for key in sorted(k for k in after if k.startswith("ticks:")):
    cpu = (after[key] - before.get(key, 0)) / hz * 100 / seconds
    if cpu > 0:
        threads.append(f"{key[len('ticks:'):]} {cpu:.1f}")
print("          server CPU, % of a core: " + ", ".join(threads))
PY
    done
done

for i in 0 1; do
    kill -0 "${pids[$i]}" 2>/dev/null || die "${names[$i]} died during the benchmark"
done

python3 - "${names[0]}" "${names[1]}" "${rows[@]}" <<'PY'
import statistics, sys
name_a, name_b = sys.argv[1], sys.argv[2]
by_round = {}
for row in sys.argv[3:]:
    round_, index, ops = row.split()
    by_round.setdefault(round_, [0.0, 0.0])[int(index)] = float(ops)
a = [v[0] for v in by_round.values()]
b = [v[1] for v in by_round.values()]
ratios = [x / y for x, y in zip(a, b)]
print(f"\nmedian GETs/s: {name_a} {statistics.median(a):.0f}, {name_b} {statistics.median(b):.0f}")
print(f"ratio {name_a} / {name_b} per round: {' '.join(f'{r:.3f}' for r in ratios)};"
      f" median {statistics.median(ratios):.3f}")
PY
