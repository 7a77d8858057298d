#!/usr/bin/env bash
# Measurement (not a test): the CPU time of a read-through edge's threads (`--upstream`),
# upstream threads and workers apart, per client GET and per upstream fetch, for several
# worker / upstream thread counts.
#
#   scripts/upstream-cpu-per-fetch.sh
#   CONFIGS="2:1 2:2" DURATION_S=30 scripts/upstream-cpu-per-fetch.sh
#
# Each configuration starts a memcached origin holding every key, fogbench's delay line
# in front of it (0.5 ms each way: a cloud 1 ms away), and a DRAM-only fogcached edge
# with `-t W --upstream-threads U` filling its misses from the origin; then DURATION_S
# seconds of zipfian GETs over CONNECTIONS connections. The edge's threads' utime+stime
# (/proc/PID/task/*/stat) over the run are divided by the edge's `cmd_get` and by its
# `upstream_cmd_get`. Like cpu-per-request.sh, this does not depend on how much of a
# shared machine the other processes leave the edge; it says whether the upstream
# threads are a bottleneck (their share per GET against the workers') and what each
# added upstream thread costs (less batching per loop turn).
#
# Settings (environment variables, defaults in brackets):
#   CONFIGS ["2:1 2:2 4:1 4:2 4:4"] (workers:upstream threads)  DURATION_S [20]
#   CONNECTIONS [64]  CLIENT_THREADS [2]  KEYS [20000]  VALUE_BYTES [4096]
#   EDGE_DRAM_MIB [8]  ONE_WAY_US [500]
#   FOGCACHED, FOGBENCH [target/release/...]  MEMCACHED [/usr/bin/memcached]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGCACHED="${FOGCACHED:-$target_dir/release/fogcached}"
FOGBENCH="${FOGBENCH:-$target_dir/release/fogbench}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"
CONFIGS="${CONFIGS:-2:1 2:2 4:1 4:2 4:4}"
DURATION_S="${DURATION_S:-20}"
CONNECTIONS="${CONNECTIONS:-64}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
KEYS="${KEYS:-20000}"
VALUE_BYTES="${VALUE_BYTES:-4096}"
EDGE_DRAM_MIB="${EDGE_DRAM_MIB:-8}"
ONE_WAY_US="${ONE_WAY_US:-500}"

die() { printf 'upstream-cpu-per-fetch.sh: %b\n' "$*" >&2; exit 1; }
if [ ! -x "$FOGCACHED" ] || [ ! -x "$FOGBENCH" ]; then
    (cd "$repo_root" && cargo build --release -p server -p bench) >&2
fi
[ -x "$MEMCACHED" ] || die "$MEMCACHED missing (Debian package memcached)"

work_dir="$(mktemp -d)"
pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    pids=()
}
cleanup() { stop_all; rm -rf "$work_dir"; }
trap cleanup EXIT

# Servers start on a loopback port the kernel picks, read from their port file.
LAUNCH_TIMEOUT_S=10
. "$repo_root/scripts/launch.sh"
# `stats` of the server on port $1, as "name value" lines.
stats_of() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
reply = b""
while not reply.endswith(b"END\r\n"):
    reply += s.recv(65536)
for line in reply.decode().splitlines():
    if line.startswith("STAT "):
        print(*line.split()[1:3])
EOF
}
# utime+stime ticks of each thread of process $1, summed by kind: "upstream workers".
ticks_of() {
    local upstream=0 workers=0 task name ticks
    for task in /proc/"$1"/task/*; do
        name="$(cat "$task/comm")"
        ticks="$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$task/stat")"
        case "$name" in
            fogcached-upstr*) upstream=$((upstream + ticks)) ;;
            fogcached-worke*) workers=$((workers + ticks)) ;;
        esac
    done
    echo "$upstream $workers"
}

echo "==> load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
printf '%-8s %-9s %10s %10s %12s %12s %12s %10s\n' workers upstream gets fetches \
    upstream_us/get worker_us/get upstream_us/fetch gets/s
for config in $CONFIGS; do
    workers="${config%%:*}"
    upstream_threads="${config##*:}"
    launch_server "$work_dir/origin" "$MEMCACHED" -t 2 \
        -m $((KEYS * (VALUE_BYTES + 100) / 1048576 + 64)) || die "the origin did not start"
    pids+=("$launched_pid")
    origin_port="$launched_port"
    "$FOGBENCH" run --server "127.0.0.1:$origin_port" --keys "$KEYS" --load --duration-s 0.1 \
        --value-size "$VALUE_BYTES" --get-ratio 1 --connections 8 --threads 1 --quiet \
        --no-stats >/dev/null
    "$FOGBENCH" delay-line --target "127.0.0.1:$origin_port" --one-way-us "$ONE_WAY_US" \
        >"$work_dir/delay-line" &
    pids+=($!)
    until [ -s "$work_dir/delay-line" ]; do sleep 0.1; done
    launch_server "$work_dir/edge" "$FOGCACHED" -t "$workers" --dram "$EDGE_DRAM_MIB" \
        --slow-size 0 --upstream "$(cat "$work_dir/delay-line")" --upstream-ttl-max 0 \
        --upstream-threads "$upstream_threads" || die "the edge did not start"
    edge_pid="$launched_pid"
    pids+=("$edge_pid")
    edge_port="$launched_port"
    read -r up0 wk0 < <(ticks_of "$edge_pid")
    "$FOGBENCH" run --server "127.0.0.1:$edge_port" --keys "$KEYS" --value-size "$VALUE_BYTES" \
        --get-ratio 1 --distribution zipf --duration-s "$DURATION_S" \
        --connections "$CONNECTIONS" --threads "$CLIENT_THREADS" --quiet --no-stats \
        --json "$work_dir/run.json" >/dev/null
    read -r up1 wk1 < <(ticks_of "$edge_pid")
    stats_of "$edge_port" >"$work_dir/stats"
    stop_all
    python3 - "$work_dir/stats" "$work_dir/run.json" "$(getconf CLK_TCK)" \
        "$workers" "$upstream_threads" "$up0" "$wk0" "$up1" "$wk1" <<'EOF'
import json, sys
stats = dict(line.split() for line in open(sys.argv[1]))
run = json.load(open(sys.argv[2]))["run"]
tick_us = 1e6 / float(sys.argv[3])
workers, upstream, up0, wk0, up1, wk1 = sys.argv[4:10]
gets = int(stats["cmd_get"])
fetches = max(int(stats["upstream_cmd_get"]), 1)
up_us = (int(up1) - int(up0)) * tick_us
wk_us = (int(wk1) - int(wk0)) * tick_us
print(f"{workers:<8} {upstream:<9} {gets:>10} {fetches:>10} {up_us / gets:>12.2f} "
      f"{wk_us / gets:>12.2f} {up_us / fetches:>12.2f} {run['ops_per_s']:>10.0f}")
if int(stats.get("upstream_timeouts", 0)) or int(stats.get("upstream_errors", 0)):
    print(f"         (upstream_timeouts {stats['upstream_timeouts']}, "
          f"upstream_errors {stats['upstream_errors']})")
EOF
done
echo "==> load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
