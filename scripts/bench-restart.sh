#!/usr/bin/env bash
# Restart measurements (not a test; docs/results/restart.md quotes its output):
#
#   scripts/bench-restart.sh
#
# 1. Recovery rate: for each (item count, value size), load the items into a fogcached
#    whose slow tier is a pool file, stop it cleanly (SIGTERM), start it again on the same
#    pool, and read the recovery it reports (`pool_items_recovered`, `pool_recovery_us`).
# 2. What durability costs a set: fogcached with `--slow-durability power` and `crash`,
#    slow tier only (every overwrite invalidates a slow-tier record, the worst case), then
#    with a 16 MiB DRAM tier; a fogbench set-only load against each, alternating, ROUNDS
#    times; the median of the power/crash throughput ratios.
#
# Environment: ROUNDS (3), DURATION_S (10), CONNECTIONS (32), RECOVERY_CASES
# ("100000:100 1000000:100 200000:1000 1000000:1000 50000:10000").
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
ROUNDS="${ROUNDS:-3}"
DURATION_S="${DURATION_S:-10}"
CONNECTIONS="${CONNECTIONS:-32}"
RECOVERY_CASES="${RECOVERY_CASES:-100000:100 1000000:100 200000:1000 1000000:1000 50000:10000}"

cargo build --release -q -p server -p bench
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}/release"
fogcached="$target_dir/fogcached"
fogbench="$target_dir/fogbench"

work="$(mktemp -d /tmp/fogcached-bench-restart.XXXXXX)"
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Servers start on a loopback port the kernel picks, read from their port file.
. "$repo_root/scripts/launch.sh"

stat_of() {
    local port="$1" name="$2"
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'stats\r\nquit\r\n' >&3
    awk -v n="$name" '$2 == n { sub("\r", "", $3); print $3 }' <&3
    exec 3<&-
}

echo "## Recovery after a clean stop"
echo
echo "| items | value bytes | pool | recovered | recovery ms | items/s |"
echo "|---|---|---|---|---|---|"
for case in $RECOVERY_CASES; do
    keys="${case%%:*}"
    value_bytes="${case##*:}"
    # Room for every item with half again to spare (chunk rounding, the load's sets).
    pool_mib=$(( (keys * (value_bytes + 100) * 3 / 2) / 1048576 + 16 ))
    dir="$work/recovery-$keys-$value_bytes"
    mkdir -p "$dir"
    args=(--data-dir "$dir" --dram 16 --slow-size "${pool_mib}m" -t 2)
    launch_server "$dir-first" "$fogcached" "${args[@]}"
    server_pid="$launched_pid"
    port="$launched_port"
    "$fogbench" run --server "127.0.0.1:$port" --keys "$keys" --value-size "$value_bytes" \
        --load --get-ratio 1 --connections 16 --threads 2 --duration-s 1 --quiet >/dev/null
    kill -TERM "$server_pid"
    wait "$server_pid" || true
    launch_server "$dir-second" "$fogcached" "${args[@]}"
    server_pid="$launched_pid"
    port="$launched_port"
    recovered="$(stat_of "$port" pool_items_recovered)"
    us="$(stat_of "$port" pool_recovery_us)"
    kill -TERM "$server_pid"
    wait "$server_pid" || true
    server_pid=""
    rate=$(awk -v n="$recovered" -v us="$us" 'BEGIN { if (us > 0) printf "%.0f", n / (us / 1e6); else print "-" }')
    echo "| $keys | $value_bytes | ${pool_mib} MiB | $recovered | $(awk -v us="$us" 'BEGIN { printf "%.1f", us / 1000 }') | $rate |"
    rm -rf "$dir" "$dir-first" "$dir-second"
done
echo

run_sets() {
    local durability="$1" dram="$2" dir="$3"
    local port
    rm -rf "$dir" "$dir-server"
    mkdir -p "$dir"
    launch_server "$dir-server" "$fogcached" --data-dir "$dir" --dram "$dram" --slow-size 512m \
        -t 2 --slow-durability "$durability"
    server_pid="$launched_pid"
    port="$launched_port"
    local out
    out="$("$fogbench" run --server "127.0.0.1:$port" --keys 100000 --value-size 1000 --load \
        --get-ratio 0 --connections "$CONNECTIONS" --threads 2 --duration-s "$DURATION_S" --quiet 2>&1)"
    kill -TERM "$server_pid"
    wait "$server_pid" || true
    server_pid=""
    echo "$out" | awk '/^run:/ { gsub("[(]", "", $7); print $7; exit }'
}

echo "## What durability costs a set (100 000 keys x 1000 B, set-only, $CONNECTIONS connections, ${DURATION_S} s per run)"
echo
echo "| DRAM | round | power sets/s | crash sets/s | power / crash |"
echo "|---|---|---|---|---|"
for dram in 0 16; do
    ratios=()
    for round in $(seq 1 "$ROUNDS"); do
        power="$(run_sets power "$dram" "$work/power")"
        crash="$(run_sets crash "$dram" "$work/crash")"
        ratio=$(awk -v p="$power" -v c="$crash" 'BEGIN { printf "%.3f", p / c }')
        ratios+=("$ratio")
        echo "| ${dram} MiB | $round | $power | $crash | $ratio |"
    done
    median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    echo "| ${dram} MiB | median | | | **$median** |"
done
