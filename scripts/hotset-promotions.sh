#!/usr/bin/env bash
# Measurement (not a test): how many promotions a hybrid fogcached makes on seed 000's
# workload, counted the way a new user would count them: from the server's `stats`.
#
#   scripts/hotset-promotions.sh [FOGCACHED_ARGS...]
#
# Starts `fogcached --dram 17m --slow-size 125m --policy dual-lru` (or the arguments given; port, listen
# address and data directory are added), loads KEYS × VALUE_BYTES values with fogbench,
# runs an uncounted warm-up of GETs, then a counted run. Every other GET is drawn from the
# hot range [HOT_FIRST, HOT_FIRST + HOT_KEYS), the rest uniformly from all keys
# (`fogbench run --distribution hotset`). It prints, over the counted run: GETs,
# promotions, promotions skipped by admission and demotions per 1 000 GETs and per second,
# the DRAM share of GET hits next to the share expected when the hot range is served from
# DRAM (0.5 + 0.5 × DRAM's share of all items), and the CPU time of each server thread.
#
# Settings (environment variables, defaults in brackets):
#   KEYS [100000]  VALUE_BYTES [1024]  HOT_FIRST [50000]  HOT_KEYS [5000]
#   WARMUP_S [20]  RUN_S [60]  CONNECTIONS [256]  CLIENT_THREADS [2]
#   FOGCACHED, FOGBENCH [target/release/...]: the binaries (build them first:
#   cargo build --release -p server -p bench)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGCACHED="${FOGCACHED:-$target_dir/release/fogcached}"
FOGBENCH="${FOGBENCH:-$target_dir/release/fogbench}"
KEYS="${KEYS:-100000}"
VALUE_BYTES="${VALUE_BYTES:-1024}"
HOT_FIRST="${HOT_FIRST:-50000}"
HOT_KEYS="${HOT_KEYS:-5000}"
WARMUP_S="${WARMUP_S:-20}"
RUN_S="${RUN_S:-60}"
CONNECTIONS="${CONNECTIONS:-256}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
STARTUP_TIMEOUT_S=10

die() { printf 'hotset-promotions.sh: %b\n' "$*" >&2; exit 1; }
[ -x "$FOGCACHED" ] || die "$FOGCACHED missing (cargo build --release -p server)"
[ -x "$FOGBENCH" ] || die "$FOGBENCH missing (cargo build --release -p bench)"

server_args=("$@")
[ "${#server_args[@]}" -gt 0 ] || server_args=(--dram 17m --slow-size 125m --policy dual-lru)

work_dir="$(mktemp -d)"
server_pid=""
cleanup() {
    # Stops only the server this script started.
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work_dir"
}
trap cleanup EXIT

# On a loopback port the kernel picks, read from its port file.
LAUNCH_TIMEOUT_S="$STARTUP_TIMEOUT_S"
. "$repo_root/scripts/launch.sh"
launch_server "$work_dir/server" "$FOGCACHED" --data-dir "$work_dir/data" "${server_args[@]}" ||
    die "fogcached did not start"
server_pid="$launched_pid"
port="$launched_port"

# snapshot FILE: the server's stats and the CPU ticks of each of its threads, as JSON.
snapshot() {
    python3 - "$port" "$server_pid" "$1" <<'EOF'
import json, os, socket, sys, time
port, pid, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with socket.create_connection(("127.0.0.1", port), 5) as s:
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("the server closed the connection during stats")
        buf += chunk
stats = {}
for line in buf.decode().splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[0] == "STAT":
        try:
            stats[parts[1]] = float(parts[2])
        except ValueError:
            pass
threads = {}
for tid in os.listdir(f"/proc/{pid}/task"):
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        text = f.read()
    # comm is in parentheses and may hold spaces; utime and stime are fields 14 and 15.
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])
    threads[f"{comm}/{tid}"] = ticks
json.dump({"time": time.monotonic(), "stats": stats, "threads": threads}, open(out, "w"))
EOF
}

bench_args=(--server "127.0.0.1:$port" --keys "$KEYS" --value-size "$VALUE_BYTES"
    --distribution hotset --hot-first "$HOT_FIRST" --hot-keys "$HOT_KEYS" --get-ratio 1
    --connections "$CONNECTIONS" --threads "$CLIENT_THREADS" --verify --quiet --no-stats)
echo "==> fogcached ${server_args[*]} (port $port); $KEYS keys × $VALUE_BYTES B," \
    "hot range [$HOT_FIRST, $((HOT_FIRST + HOT_KEYS))), load + ${WARMUP_S} s warm-up, then ${RUN_S} s counted"
"$FOGBENCH" run "${bench_args[@]}" --load --duration-s "$WARMUP_S" | sed 's/^/warm-up /'
snapshot "$work_dir/before.json"
"$FOGBENCH" run "${bench_args[@]}" --duration-s "$RUN_S" --seed 2 | sed 's/^/counted /'
snapshot "$work_dir/after.json"
kill -0 "$server_pid" 2>/dev/null || die "fogcached died during the run"

python3 - "$work_dir/before.json" "$work_dir/after.json" <<'EOF'
import json, os, sys
before, after = (json.load(open(p)) for p in sys.argv[1:3])
seconds = after["time"] - before["time"]
def delta(name):
    return after["stats"].get(name, 0) - before["stats"].get(name, 0)
gets = delta("cmd_get")
if gets <= 0:
    sys.exit("no GETs counted")
print(f"\ncounted: {gets:.0f} GETs in {seconds:.1f} s ({gets / seconds:.0f}/s),"
      f" misses {delta('get_misses'):.0f}")
for name in ("promotions", "promotions_skipped", "promotions_failed", "demotions",
             "move_queue_dropped", "evictions"):
    d = delta(name)
    print(f"{name:<20} {d:>10.0f}  {d * 1000 / gets:>8.2f} per 1k GETs  {d / seconds:>9.1f}/s")
dram_hits, slow_hits = delta("tier_dram_get_hits"), delta("tier_slow_get_hits")
share = dram_hits / max(dram_hits + slow_hits, 1)
items_dram = after["stats"].get("tier_dram_items", 0)
items_all = items_dram + after["stats"].get("tier_slow_items", 0)
rest = items_dram / max(items_all, 1)
print(f"DRAM share of GET hits {share:.3f}; items in DRAM {items_dram:.0f} of {items_all:.0f}"
      f" ({rest:.3f}); expected with the hot range in DRAM: 0.5 + 0.5 × {rest:.3f} = {0.5 + 0.5 * rest:.3f}")
print(f"slow lines read per GET {delta('slow_lines_read') / gets:.2f},"
      f" written per GET {delta('slow_lines_written') / gets:.3f}")
hz = os.sysconf("SC_CLK_TCK")
print("server thread CPU over the counted run (% of one core):")
for name, ticks in sorted(after["threads"].items()):
    used = (ticks - before["threads"].get(name, 0)) / hz
    if used > 0:
        print(f"  {name:<28} {used * 100 / seconds:6.1f} %")
EOF
