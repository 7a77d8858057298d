#!/usr/bin/env bash
# Measurement (not a test): instructions per request of fogcached and of Debian's
# memcached, counted by `valgrind --tool=callgrind` over the whole server process.
#
#   scripts/callgrind-per-request.sh                 # all servers, all workloads
#   SERVERS="memcached dram" WORKLOADS="get-hit" scripts/callgrind-per-request.sh
#
# Each server runs under callgrind. scripts/fixed-requests.py stores the keys once, then
# for every workload (GET hit, GET miss, SET, 10-key multi-get; 100 B and 1 KB values)
# makes the server do N_SMALL and N_LARGE requests, with callgrind's
# counters zeroed before and dumped after each run (`callgrind_control -z/-d`). The
# per-request figure is
#
#     (I(N_LARGE) - I(N_SMALL)) / (N_LARGE - N_SMALL)
#
# with each count run REPEATS times and its least total taken (valgrind runs one thread
# at a time, so a lock holder descheduled in the middle makes the waiter spin, and a
# background thread's burst lands in one run or another: disturbances only add), which
# also removes what a run costs whatever its length (connect, accept, close). What the
# server's background threads do per second of wall time is not removed (it is small: a
# few hundred instructions per request here; callgrind slows the server ~50x, so it is
# inflated against a real run), and it is reported apart: the "serving" column counts only
# the threads that ran the connection code (the workers), the "process" column every
# thread (for both servers that includes the LRU maintainer's juggling, whose share of a
# run varies with when it wakes: the "serving" column is the stable one).
#
# Settings (environment variables, defaults in brackets):
#   SERVERS ["memcached dram hybrid"]   which servers; fogcached variants:
#                                       dram   = --slow-size 0 (DRAM only, like memcached)
#                                       hybrid = --slow-size 256m (pool file in a temp dir)
#   WORKLOADS ["get-hit get-miss set mget10"]
#   VALUE_SIZES ["100 1024"]
#   N_SMALL [500] N_LARGE [2500]        request counts that are differenced
#   REPEATS [3]                         runs of each count (the least is kept)
#   CONNECTIONS [1]                     client connections, used in turn (several spread
#                                       the requests over several workers: the -t scaling
#                                       check in docs/results/speed.md)
#   SERVER_THREADS [1]                  -t of every server: one worker, because valgrind
#                                       (3.19) runs one thread at a time and treats
#                                       io_uring_enter as non-blocking, so an idle second
#                                       io_uring worker would hold its lock in 5 ms slices
#                                       (see running_under_valgrind in worker/uring.rs)
#   FOGCACHED_ARGS [""]                 extra fogcached flags (e.g. --io-engine epoll)
#   FOGCACHED [target/release/fogcached] the binary (built with `cargo build --release`
#                                       when it is the default and missing)
#   OUT_DIR [target/callgrind]          callgrind's files, one directory per server
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

SERVERS="${SERVERS:-memcached dram hybrid}"
WORKLOADS="${WORKLOADS:-get-hit get-miss set mget10}"
VALUE_SIZES="${VALUE_SIZES:-100 1024}"
N_SMALL="${N_SMALL:-500}"
N_LARGE="${N_LARGE:-2500}"
REPEATS="${REPEATS:-3}"
CONNECTIONS="${CONNECTIONS:-1}"
SERVER_THREADS="${SERVER_THREADS:-1}"
FOGCACHED_ARGS="${FOGCACHED_ARGS:-}"
FOGCACHED="${FOGCACHED:-target/release/fogcached}"
MEMCACHED="${MEMCACHED:-/usr/bin/memcached}"
OUT_DIR="${OUT_DIR:-target/callgrind}"
# A relative OUT_DIR is the repository's; an absolute one is taken as it is.
case "$OUT_DIR" in /*) ;; *) OUT_DIR="$repo_root/$OUT_DIR" ;; esac
# memcached sets its open-file limit to exactly -c, and valgrind allows that only when it
# equals the hard limit valgrind keeps for the program (the hard limit less 12 fds of its
# own): so both servers get -c 1024 under a hard limit of 1036.
MAX_CONNS=1024
VALGRIND_RESERVED_FDS=12
# Servers start on a loopback port the kernel picks, read from their port file (valgrind
# makes the start slow).
LAUNCH_TIMEOUT_S=60
. "$repo_root/scripts/launch.sh"

die() { printf 'callgrind-per-request.sh: %b\n' "$*" >&2; exit 1; }
command -v valgrind >/dev/null 2>&1 || die "valgrind missing (Debian package valgrind)"
command -v callgrind_control >/dev/null 2>&1 || die "callgrind_control missing (valgrind)"
command -v python3 >/dev/null 2>&1 || die "python3 missing"
client="$repo_root/scripts/fixed-requests.py"

if [ "$FOGCACHED" = target/release/fogcached ] && [ ! -x "$FOGCACHED" ]; then
    cargo build --release -p server >&2
fi
# The servers run in their own directories.
FOGCACHED="$(cd "$(dirname "$FOGCACHED")" && pwd)/$(basename "$FOGCACHED")"

server_pid=""
tmp_dir="$(mktemp -d)"
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$tmp_dir"
}
trap cleanup EXIT

# Sums the `summary:` lines of the dump files of dump number $2 in directory $1; prints
# "<all threads> <serving threads>". A serving thread is one that ran the connection
# code: fogcached's `Connection::service`, or memcached's `sendmsg` (its binary has no
# symbols of its own, but its workers are the only threads that send).
dump_totals() {
    local dir="$1" n="$2" file all=0 serving=0 count
    for file in "$dir"/cg.out.*."$n"-*; do
        [ -e "$file" ] || die "no callgrind dump $n in $dir"
        count="$(awk '/^summary:/ { print $2 }' "$file")"
        all=$((all + ${count:-0}))
        if grep -qE 'Connection::service|[^a-z_]sendmsg' "$file"; then
            serving=$((serving + ${count:-0}))
        fi
    done
    echo "$all $serving"
}

# run_server NAME DIR: starts server NAME under callgrind in DIR; sets server_pid and port.
run_server() {
    local name="$1" dir="$2"
    local -a cmd
    case "$name" in
        memcached) cmd=("$MEMCACHED" -u root -m 64) ;;
        dram) cmd=("$FOGCACHED" -m 64 --slow-size 0) ;;
        hybrid) cmd=("$FOGCACHED" -m 64 --slow-size 256m --data-dir "$tmp_dir/$name-data") ;;
        *) die "unknown server $name (memcached, dram, hybrid)" ;;
    esac
    if [ "$name" != memcached ] && [ -n "$FOGCACHED_ARGS" ]; then
        # shellcheck disable=SC2206
        cmd+=($FOGCACHED_ARGS)
    fi
    cmd+=(-t "$SERVER_THREADS" -c "$MAX_CONNS")
    rm -rf "$dir"
    # The shell raises the open-file limit, then becomes valgrind (the same pid).
    # shellcheck disable=SC2016
    launch_server "$dir" bash -c 'ulimit -n "$1"; shift; exec "$@"' limit \
        $((MAX_CONNS + VALGRIND_RESERVED_FDS)) \
        valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/cg.out.%p" \
        "${cmd[@]}" || die "$name did not start: ${cmd[*]}"
    server_pid="$launched_pid"
    port="$launched_port"
    echo "# $name: ${cmd[*]} (port $port)" >&2
}

printf '%-10s %-9s %6s %12s %12s\n' server workload bytes process/req serving/req
for server in $SERVERS; do
    dir="$OUT_DIR/$server"
    run_server "$server" "$dir"
    dumps=0
    for size in $VALUE_SIZES; do
        python3 "$client" --port "$port" --workload preload --value-bytes "$size"
        for workload in $WORKLOADS; do
            # One untimed run so that every buffer and table the workload uses exists.
            python3 "$client" --port "$port" --workload "$workload" --value-bytes "$size" --requests "$N_SMALL" --connections "$CONNECTIONS"
            declare -A process=() serving=()
            for _ in $(seq "$REPEATS"); do
                for count in "$N_SMALL" "$N_LARGE"; do
                    callgrind_control -z "$server_pid" >/dev/null 2>&1
                    python3 "$client" --port "$port" --workload "$workload" --value-bytes "$size" --requests "$count" --connections "$CONNECTIONS"
                    callgrind_control -d "$server_pid" >/dev/null 2>&1
                    dumps=$((dumps + 1))
                    read -r all in_workers < <(dump_totals "$dir" "$dumps")
                    # The least of the repeats: what disturbs a count only adds to it.
                    if [ -z "${process[$count]:-}" ] || [ "$all" -lt "${process[$count]}" ]; then
                        process[$count]=$all
                    fi
                    if [ -z "${serving[$count]:-}" ] || [ "$in_workers" -lt "${serving[$count]}" ]; then
                        serving[$count]=$in_workers
                    fi
                done
            done
            span=$(( N_LARGE - N_SMALL ))
            printf '%-10s %-9s %6s %12d %12d\n' "$server" "$workload" "$size" \
                $(( (process[$N_LARGE] - process[$N_SMALL]) / span )) \
                $(( (serving[$N_LARGE] - serving[$N_SMALL]) / span ))
            unset process serving
        done
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
done
