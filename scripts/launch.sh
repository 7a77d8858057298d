# Sourced (not run) by the scripts that start servers for a measurement. One way to start
# a server, the shell twin of crates/launcher (which the tests and fogbench use): the
# server binds a loopback port the kernel picks and writes it to the port file named by
# MEMCACHED_PORT_FILENAME once it listens (whole: written aside and renamed). No port is
# probed free and then handed over, so two runs, or a run and a test suite, never
# collide, and nothing talks to a server that is not the one started.
#
#   launch_server DIR COMMAND...
#
# runs COMMAND in DIR (created; its stdout and stderr to DIR/server.log, its port file
# DIR/ports) with `-p 0 -l 127.0.0.1 -U 0` appended: `-p -1` when the command runs
# memcached, whose -p 0 turns TCP off, and memcached's `-u root` when root and no -u is
# given; a relative path to a program in COMMAND is made absolute. COMMAND may wrap the
# server (valgrind ..., nice ..., bash -c 'ulimit ...; exec "$@"' ...). Waits at most
# $LAUNCH_TIMEOUT_S seconds (default 60) for the port file; then sets launched_pid and
# launched_port. When the server exits first, or the wait ends, it prints what the
# server printed, kills it, and returns 1 (call it as `launch_server ... || die ...`).

launch_server() {
    local dir="$1"
    shift
    mkdir -p "$dir" || return 1
    dir="$(cd "$dir" && pwd)" || return 1
    local any_port=0 user_args=() command=() word
    for word in "$@"; do
        if [ "$(basename -- "$word")" = memcached ]; then
            any_port=-1
        fi
        # The server runs in DIR: a relative path to a program is made absolute.
        case "$word" in
        /* | -*) ;;
        */*) [ -f "$word" ] && [ -x "$word" ] && word="$PWD/$word" ;;
        esac
        command+=("$word")
    done
    if [ "$any_port" = -1 ] && [ "$(id -u)" -eq 0 ]; then
        user_args=(-u root)
        for word in "$@"; do
            if [ "$word" = -u ]; then user_args=(); fi
        done
    fi
    rm -f "$dir/ports" "$dir/ports.lck"
    (cd "$dir" && MEMCACHED_PORT_FILENAME="$dir/ports" exec "${command[@]}" "${user_args[@]}" \
        -p "$any_port" -l 127.0.0.1 -U 0) >"$dir/server.log" 2>&1 &
    launched_pid=$!
    launched_port=""
    local deadline=$((SECONDS + ${LAUNCH_TIMEOUT_S:-60}))
    until [ -e "$dir/ports" ]; do
        local reason=""
        if ! kill -0 "$launched_pid" 2>/dev/null; then
            reason="exited during start-up"
        elif [ "$SECONDS" -ge "$deadline" ]; then
            reason="wrote no port file within ${LAUNCH_TIMEOUT_S:-60} s"
            kill -9 "$launched_pid" 2>/dev/null || true
        fi
        if [ -n "$reason" ]; then
            wait "$launched_pid" 2>/dev/null || true
            printf 'launch_server: %s %s; it printed:\n' "$*" "$reason" >&2
            cat "$dir/server.log" >&2
            return 1
        fi
        sleep 0.05
    done
    launched_port="$(sed -n 's/^TCP INET6\{0,1\}: *//p' "$dir/ports" | head -n 1)"
    if [ -z "$launched_port" ]; then
        printf 'launch_server: %s listens on no TCP port (port file: %s)\n' "$*" \
            "$(cat "$dir/ports")" >&2
        return 1
    fi
}
