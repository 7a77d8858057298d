#!/usr/bin/env bash
# The long soak: a bounded mixed load with --verify over both tiers with migrations
# active, for DURATION seconds, with the server's resident memory sampled all along.
#
#   DURATION=3600 scripts/soak.sh                  (defaults below; all optional)
#
# Environment:
#   DURATION    seconds of the run phase (default 3600)
#   OUT         output directory (default target/soak-<date>)
#   FOGCACHED   server binary (default target/release/fogcached)
#   FOGBENCH    load generator (default target/release/fogbench)
#   POLICY      --policy of the server (default: none given, so the server's default,
#               hotspot)
#   KEYS        distinct keys (default 40000: about 80 MB of values, more than the 8 MiB
#               DRAM tier and less than both tiers, so items live in both and move)
#   CONNECTIONS client connections (default 32)
#   SAMPLE_S    seconds between memory samples (default 10)
#
# The server runs with an 8 MiB DRAM tier and a 96 MiB slow tier in a pool file, under
# `nice -n 19` like the client. fogbench loads every key, then runs a zipfian 80/20
# get/set mix with values of 64 to 4096 bytes, checking every value it reads.
#
# Writes $OUT/report.json and series.csv (fogbench), rss.csv (time_s, VmRSS, RssAnon,
# RssFile in KiB), stats-start.txt and stats-end.txt (the server's `stats`), summary.txt,
# server/server.log (what the server printed).
# Exits non-zero when a value failed verification, a connection failed, the server did
# not stop cleanly, or its resident memory grew by more than 10 % between the end of the
# first quarter of the run and the end (memory must be flat once the cache is full).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

duration_s="${DURATION:-3600}"
out="${OUT:-target/soak-$(date -u +%Y%m%dT%H%M%S)}"
fogcached="${FOGCACHED:-target/release/fogcached}"
fogbench="${FOGBENCH:-target/release/fogbench}"
policy="${POLICY:-}"
policy_args=()
[ -n "$policy" ] && policy_args=(--policy "$policy")
keys="${KEYS:-40000}"
connections="${CONNECTIONS:-32}"
sample_s="${SAMPLE_S:-10}"

[ -x "$fogcached" ] || { echo "soak.sh: no $fogcached (cargo build --release -p server)" >&2; exit 1; }
[ -x "$fogbench" ] || { echo "soak.sh: no $fogbench (cargo build --release -p bench)" >&2; exit 1; }
mkdir -p "$out"
data_dir="$(mktemp -d /tmp/fogcached-soak-XXXXXX)"

server_pid=""
sampler_pid=""
cleanup() {
    [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    rm -rf "$data_dir"
}
trap cleanup EXIT

# On a loopback port the kernel picks, read from its port file; its output goes to
# $OUT/server/server.log.
. "$repo_root/scripts/launch.sh"
launch_server "$out/server" nice -n 19 "$fogcached" -t 2 --dram 8 --slow-size 96m \
    --data-dir "$data_dir" "${policy_args[@]}" || exit 1
server_pid="$launched_pid"
port="$launched_port"

stats() {
    python3 - "$port" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"stats\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.decode(errors="replace"), end="")
EOF
}

stats >"$out/stats-start.txt"

# Resident memory of the server, every SAMPLE_S seconds.
(
    echo "time_s,vm_rss_kib,rss_anon_kib,rss_file_kib"
    started=$SECONDS
    while kill -0 "$server_pid" 2>/dev/null; do
        awk -v t=$((SECONDS - started)) '
            /^VmRSS:/ {rss=$2} /^RssAnon:/ {anon=$2} /^RssFile:/ {file=$2}
            END {if (rss != "") printf "%d,%d,%d,%d\n", t, rss, anon, file}
        ' "/proc/$server_pid/status" 2>/dev/null || true
        sleep "$sample_s"
    done
) >"$out/rss.csv" &
sampler_pid=$!

echo "soak: ${duration_s}s, $keys keys, $connections connections, policy ${policy:-the default (hotspot)}, output $out"
status=0
nice -n 19 "$fogbench" run --server "127.0.0.1:$port" --load --verify --keys "$keys" \
    --value-size 64-4096 --distribution zipf --get-ratio 0.8 --duration-s "$duration_s" \
    --connections "$connections" --threads 2 --quiet \
    --json "$out/report.json" --csv "$out/series.csv" >"$out/fogbench.txt" 2>&1 || status=$?

stats >"$out/stats-end.txt" || true
kill "$sampler_pid" 2>/dev/null || true
sampler_pid=""
kill -TERM "$server_pid"
server_status=0
wait "$server_pid" || server_status=$?

python3 - "$out" "$status" "$server_status" <<'EOF' | tee "$out/summary.txt"
import csv, json, sys
out, bench_status, server_status = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
report = json.load(open(f"{out}/report.json"))
run = report["run"]
counts = run["counts"]
stats = dict(
    line.split()[1:3] for line in open(f"{out}/stats-end.txt") if line.startswith("STAT ")
)
rows = [r for r in csv.DictReader(open(f"{out}/rss.csv"))]
rss = [(int(r["time_s"]), int(r["vm_rss_kib"])) for r in rows]
end_s = rss[-1][0] if rss else 0
quarter = [kib for t, kib in rss if t >= end_s / 4]
settled_kib = quarter[0] if quarter else 0
last_kib = rss[-1][1] if rss else 0
peak_kib = max(kib for _, kib in rss) if rss else 0
growth = (last_kib - settled_kib) / settled_kib if settled_kib else 0.0
print(f"elapsed_s             {run.get('elapsed_s', 0):.0f}")
print(f"ops                   {run.get('ops', 0)}")
print(f"ops_per_s             {run.get('ops_per_s', 0):.0f}")
for key in ("gets", "sets", "hits", "misses", "not_stored", "error_replies", "verify_failures"):
    print(f"{key:<21} {counts.get(key, 0)}")
print(f"unanswered            {run.get('unanswered', 0)}")
print(f"connection_failures   {run.get('connection_failures', 0)}")
for key in ("promotions", "demotions", "evictions", "curr_items", "tier_dram_items",
            "tier_slow_items", "total_connections"):
    print(f"{key:<21} {stats.get(key, '?')}")
print(f"rss_samples           {len(rss)}")
print(f"rss_at_quarter_kib    {settled_kib}")
print(f"rss_last_kib          {last_kib}")
print(f"rss_peak_kib          {peak_kib}")
print(f"rss_growth_after_quarter {growth * 100:.2f} %")
print(f"fogbench_exit         {bench_status}")
print(f"server_exit           {server_status}")
failed = (
    counts.get("verify_failures", 0) != 0
    or counts.get("error_replies", 0) != 0
    or run.get("connection_failures", 0) != 0
    or bench_status != 0
    or server_status != 0
    or growth > 0.10
)
print("verdict               " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
EOF
