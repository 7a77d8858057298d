#!/usr/bin/env bash
# Measurement (not a test): what a worker does under memcaslap's load, counted, for the
# tail investigation in docs/results/speed.md. For each round and each server (fogcached
# with io_uring, fogcached with epoll, Debian's memcached; alternating), it starts the
# server (-t 2 -m 1024; fogcached --slow-size 0), warms it up with memcaslap, then runs
# memcaslap for DURATION_S seconds while counting, per thread group, the voluntary context
# switches (sleeps) and involuntary ones (preemptions) from /proc/PID/task/*/status, and
# takes the server's `conn_yields` and request counts from `stats`. It prints, per run,
# memcaslap's throughput, p99 and p99.9 (upper bounds of its power-of-two buckets), the
# share of requests slower than 16 ms, the count slower than 65 ms, and the counts.
#
#   ROUNDS=3 DURATION_S=5 scripts/tail-counts.sh
#
# Settings: ROUNDS [3], DURATION_S [5], WARMUP_S [2], CONCURRENCY [64], CLIENT_THREADS [2],
# FOGCACHED [target/release/fogcached], MEMCACHED [/usr/bin/memcached].
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
ROUNDS="${ROUNDS:-3}"
DURATION_S="${DURATION_S:-5}"
WARMUP_S="${WARMUP_S:-2}"
CONCURRENCY="${CONCURRENCY:-64}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
FOGCACHED="${FOGCACHED:-target/release/fogcached}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"

die() { printf 'tail-counts.sh: %b\n' "$*" >&2; exit 1; }
command -v memcaslap >/dev/null 2>&1 || die "memcaslap missing (Debian package libmemcached-tools)"
[ -x "$FOGCACHED" ] || die "$FOGCACHED missing: cargo build --release -p server"

work_dir="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work_dir"
}
trap cleanup EXIT

cat >"$work_dir/workload.cnf" <<CNF
key
32 32 1
value
1024 1024 1
cmd
0 0.1
1 0.9
CNF

# Servers start on a loopback port the kernel picks, read from their port file.
LAUNCH_TIMEOUT_S=10
. "$repo_root/scripts/launch.sh"

# stats PORT: the server's `stats` lines.
stats() {
    python3 - "$1" <<'PY'
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5) as s:
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("the server closed the connection during stats")
        buf += chunk
print(buf.decode())
PY
}

# threads PID: one line per thread, "name voluntary involuntary".
threads() {
    local task
    for task in /proc/"$1"/task/*; do
        printf '%s %s %s\n' "$(tr ' ' _ <"$task/comm")" \
            "$(awk '/^voluntary_ctxt_switches/ { print $2 }' "$task/status")" \
            "$(awk '/^nonvoluntary_ctxt_switches/ { print $2 }' "$task/status")"
    done
}

run_one() {
    local name="$1"
    shift
    local port
    launch_server "$work_dir/$name" "$@" -c 1024 || die "$name did not start"
    server_pid="$launched_pid"
    port="$launched_port"
    memcaslap --servers "127.0.0.1:$port" --cfg_cmd "$work_dir/workload.cnf" --time "${WARMUP_S}s" \
        --threads "$CLIENT_THREADS" --concurrency "$CONCURRENCY" </dev/null >/dev/null 2>&1
    stats "$port" >"$work_dir/before.stats"
    threads "$server_pid" >"$work_dir/before.threads"
    local started_s
    started_s="$(date +%s.%N)"
    memcaslap --servers "127.0.0.1:$port" --cfg_cmd "$work_dir/workload.cnf" --time "${DURATION_S}s" \
        --stat_freq "${DURATION_S}s" --threads "$CLIENT_THREADS" --concurrency "$CONCURRENCY" \
        </dev/null >"$work_dir/memcaslap.out" 2>&1 || die "memcaslap failed: $(cat "$work_dir/memcaslap.out")"
    threads "$server_pid" >"$work_dir/after.threads"
    # Rates are per second of the window between the two snapshots (memcaslap's start-up
    # and wind-down included), not per second of DURATION_S.
    local window_s
    window_s="$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$started_s" "$(date +%s.%N)")"
    stats "$port" >"$work_dir/after.stats"
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    python3 - "$name" "$window_s" "$work_dir" <<'PY'
import re, sys
name, seconds, d = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def stats(path):
    out = {}
    for line in open(path):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT":
            try:
                out[parts[1]] = float(parts[2])
            except ValueError:
                pass
    return out
def threads(path):
    out = {}
    for line in open(path):
        comm, vol, invol = line.split()
        group = re.sub(r"-\d+$", "", comm)
        v, i, n = out.get(group, (0, 0, 0))
        out[group] = (v + int(vol), i + int(invol), n + 1)
    return out
a, b = stats(f"{d}/before.stats"), stats(f"{d}/after.stats")
requests = (b["cmd_get"] - a["cmd_get"]) + (b["cmd_set"] - a["cmd_set"])
yields = b.get("conn_yields", 0) - a.get("conn_yields", 0)
text = open(f"{d}/memcaslap.out").read()
tps = re.findall(r"TPS: (\d+)", text)[-1]
block = text[text.index("Total Statistics ("):]
events = int(re.search(r"\((\d+) events\)", block).group(1))
buckets = {}
for m in re.finditer(r"^\s+(\d+):((?:\s+\d+)+)\s*$", block, re.M):
    for i, v in enumerate(m.group(2).split()):
        buckets[int(m.group(1)) + i] = int(v)
seen, p99, p999 = 0, None, None
for k in sorted(buckets):
    seen += buckets[k]
    if p99 is None and seen >= 0.99 * events:
        p99 = 2 ** (k + 1)
    if p999 is None and seen >= 0.999 * events:
        p999 = 2 ** (k + 1)
slow16 = sum(v for k, v in buckets.items() if k >= 14) / events * 100
slow65 = sum(v for k, v in buckets.items() if k >= 16)
print(f"{name:10s} TPS {tps:>7}  p99<={p99}us p99.9<={p999}us  >=16ms {slow16:.2f}%  "
      f">=65ms {slow65}  requests {requests:.0f}  conn_yields {yields:.0f}")
ta, tb = threads(f"{d}/before.threads"), threads(f"{d}/after.threads")
for group, (v, i, n) in sorted(tb.items()):
    v0, i0, _ = ta.get(group, (0, 0, 0))
    if v - v0 or i - i0:
        print(f"    {group:24s} x{n}  sleeps/s {(v - v0) / seconds:9.1f}  preempted/s {(i - i0) / seconds:9.1f}")
PY
}

for round in $(seq 1 "$ROUNDS"); do
    echo "==> round $round"
    run_one fc-uring "$FOGCACHED" -t 2 -m 1024 --slow-size 0 --io-engine io-uring
    run_one fc-epoll "$FOGCACHED" -t 2 -m 1024 --slow-size 0 --io-engine epoll
    run_one memcached "$MEMCACHED" -u root -t 2 -m 1024
done
