#!/usr/bin/env bash
# The whole test suite of fogcached, the one command that CI (`.ci/run`) and people run.
#
#   scripts/test.sh
#
# On a fresh Debian machine it first installs what is missing (as root, or through sudo):
# the Rust toolchain (rustup, with rustfmt and clippy), Debian's memcached,
# libmemcached-tools (memccapable, memcaslap), sasl2-bin (memcached's SASL users),
# prometheus (promtool and the server, for the metrics endpoint's tests), nutcracker
# (twemproxy, for the proxy tests), and a Python virtualenv under target/ with pymemcache
# and pytest. Then it runs, in order:
#
#   1. cargo fmt --all -- --check
#   2. cargo clippy --workspace --all-targets -- -D warnings
#   3. cargo build --release -p server         (the binary the client and tool tests use)
#   4. the Rust tests of the workspace          (cargo nextest if installed, else cargo test)
#   5. the Python client tests                  (pytest tests/python)
#   6. memccapable and memcaslap --verify       (crates/server/tests/compat_*.rs)
#   7. Miri over the unit tests that exercise unsafe code (tier, engine, the io_uring
#      buffer ring): the nightly toolchain with its miri and rust-src components is
#      installed with rustup when missing; it builds in target/miri, apart from the rest
#
# Every server a test or benchmark starts binds a port the kernel picks and writes it to
# its port file (crates/launcher, scripts/launch.sh): suites can run side by side with
# each other and with anything else on the machine.
#
# Every suite that talks to a server over the wire runs under both event loops: steps 4-6
# run with `--io-engine`'s default (auto: io_uring where the kernel allows it, else epoll,
# which tests/io_engine.rs reports as a skip), and again with FOGCACHED_IO_ENGINE=epoll
# (the server's and fogbench's tests, the Python tests, the two tools; the other crates
# start no server). tests/io_engine.rs also checks the fallback itself: under a seccomp
# filter that forbids io_uring, auto runs epoll. The server's tests run a third time
# under io_uring set up as on Linux 5.19-6.0 (single-shot receives, cooperative task
# work: FOGCACHED_IO_URING_RECV=single FOGCACHED_IO_URING_TASKRUN=cooperative).
#
# Every step runs even if an earlier one failed (except when the build itself fails), so
# one run shows every problem; the exit status is non-zero if any step failed.
#
# A test that cannot check (all of) what it is for on this machine (no DAX mount, no NUMA
# node, ...) says so through testkit's skip report, which appends `SKIP <test>: <reason>`
# to $FOGCACHED_SKIP_LOG; the summary lists those lines, so a skip is never silent.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root" || exit 1

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-auto}"
# Python writes no bytecode into the source tree.
export PYTHONDONTWRITEBYTECODE=1

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# Prerequisites
# ---------------------------------------------------------------------------------------

# Runs a command as root: directly when we are root, through sudo otherwise.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "missing Debian packages ($*) and no apt-get here; install them by hand"
    # The package lists are refreshed only when something has to be installed, and once.
    if [ "$apt_updated" -eq 0 ]; then
        log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || die "apt-get update failed"
        apt_updated=1
    fi
    log "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" ||
        die "apt-get install $* failed"
}

ensure_debian_packages() {
    local missing=()
    # command -> Debian package that provides it
    command -v memcached >/dev/null 2>&1 || [ -x /usr/bin/memcached ] || missing+=(memcached)
    if ! command -v memccapable >/dev/null 2>&1 || ! command -v memcaslap >/dev/null 2>&1; then
        missing+=(libmemcached-tools)
    fi
    # The Prometheus endpoint's tests run promtool and a Prometheus server; the proxy
    # tests run twemproxy in front of three servers.
    if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
        missing+=(prometheus)
    fi
    command -v nutcracker >/dev/null 2>&1 || [ -x /usr/sbin/nutcracker ] || missing+=(nutcracker)
    command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv)
    # saslpasswd2 sets up memcached's SASL for the side-by-side SASL test (wire_auth.rs).
    command -v saslpasswd2 >/dev/null 2>&1 || missing+=(sasl2-bin)
    if ! command -v cargo >/dev/null 2>&1 && ! [ -x "$HOME/.cargo/bin/cargo" ]; then
        # rustup needs curl to download itself, and rustc needs a C linker.
        command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
        command -v cc >/dev/null 2>&1 || missing+=(build-essential)
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            log "installing the Rust toolchain with rustup"
            curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
                sh -s -- -y --profile minimal --component rustfmt,clippy ||
                die "rustup installation failed"
            export PATH="$HOME/.cargo/bin:$PATH"
        fi
    fi
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 || die "cargo fmt/clippy missing and no rustup to add them"
        log "rustup component add rustfmt clippy"
        rustup component add rustfmt clippy || die "could not add rustfmt and clippy"
    fi
}

# Sets $python to an interpreter that can import pymemcache and pytest. A virtualenv under
# target/ keeps the system Python untouched (Debian marks it "externally managed", PEP 668).
python=""
ensure_python_env() {
    local venv="$repo_root/target/pyvenv"
    if [ ! -x "$venv/bin/python" ]; then
        log "creating the Python virtualenv $venv"
        if ! python3 -m venv "$venv" >/dev/null 2>&1; then
            # Debian splits ensurepip (needed by venv) into python3-venv.
            rm -rf "$venv"
            apt_install python3-venv
            python3 -m venv "$venv" || die "python3 -m venv failed"
        fi
    fi
    if ! "$venv/bin/python" -c 'import pymemcache, pytest' >/dev/null 2>&1; then
        log "pip install pymemcache pytest (into $venv)"
        if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q pymemcache pytest; then
            # Offline: fall back to an interpreter that already has both.
            if python3 -c 'import pymemcache, pytest' >/dev/null 2>&1; then
                python="$(command -v python3)"
                return
            fi
            die "could not install pymemcache and pytest"
        fi
    fi
    python="$venv/bin/python"
}

ensure_debian_packages
ensure_rust

# ---------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------

failed_steps=()
step_summaries=()

# Tests append their skips here (testkit::report_skip); emptied for each run.
export FOGCACHED_SKIP_LOG="${CARGO_TARGET_DIR:-$repo_root/target}/test-skips.log"
mkdir -p "$(dirname "$FOGCACHED_SKIP_LOG")" || die "cannot create $(dirname "$FOGCACHED_SKIP_LOG")"
: > "$FOGCACHED_SKIP_LOG" || die "cannot write $FOGCACHED_SKIP_LOG"

# Runs one step, records its outcome and duration, never aborts the script.
run_step() {
    local name="$1"
    shift
    log "$name: $*"
    local started_s=$SECONDS
    "$@"
    local status=$?
    local took_s=$((SECONDS - started_s))
    if [ "$status" -eq 0 ]; then
        step_summaries+=("ok      ${took_s}s  $name")
    else
        step_summaries+=("FAILED  ${took_s}s  $name (exit $status)")
        failed_steps+=("$name")
    fi
    return "$status"
}

print_summary() {
    printf '\n==> summary\n'
    printf '  %s\n' "${step_summaries[@]}"
    local skips=()
    if [ -s "$FOGCACHED_SKIP_LOG" ]; then
        mapfile -t skips < "$FOGCACHED_SKIP_LOG"
    fi
    printf '\n  skipped: %s\n' "${#skips[@]}"
    local skip
    for skip in "${skips[@]}"; do
        printf '    %s\n' "${skip#SKIP }"
    done
    if [ "${#failed_steps[@]}" -gt 0 ]; then
        printf '\ntest.sh: FAILED: %s\n' "${failed_steps[*]}"
        exit 1
    fi
    printf '\ntest.sh: all steps passed in %ss\n' "$SECONDS"
}

# `cargo fmt --all`, and the policy files the registry declares (where rustfmt does not
# look).
run_step "format" scripts/fmt.sh --check
run_step "clippy" cargo clippy --workspace --all-targets -- -D warnings

if ! run_step "release build" cargo build --release -p server; then
    print_summary
fi

# Integration tests, the Python tests and the tool checks all drive this binary.
# Cargo puts binaries under $CARGO_TARGET_DIR when it is set (shared target dirs).
# One exception: crates/server/tests/panic_process.rs makes each kind of thread panic
# through a test hook the release binary must not carry, so it runs the test build
# cargo makes for the server's tests (CARGO_BIN_EXE_fogcached: target/debug/fogcached,
# with the `test-hooks` feature that the server's dev-dependency on itself turns on),
# whatever FOGCACHED_BIN says. The test steps below build it; it fails, never skips, if
# the hook is missing.
export FOGCACHED_BIN="${CARGO_TARGET_DIR:-$repo_root/target}/release/fogcached"

# Upper bounds for the test steps, so that a hung test fails the run instead of stalling
# it (CI gives 90 minutes; the whole suite takes a few).
tests_timeout_s=1800
tools_timeout_s=600
bounded() {
    local limit_s="$1"
    shift
    timeout --kill-after=30 "$limit_s" "$@"
    local status=$?
    [ "$status" -ne 124 ] || printf 'test.sh: timed out after %ss: %s\n' "$limit_s" "$*" >&2
    return "$status"
}

# The memccapable/memcaslap tests are named external_tool_* and run in their own step
# below, with their tools' output shown.
if cargo nextest --version >/dev/null 2>&1; then
    # scripts/nextest.toml ends any single test that hangs.
    run_step "rust tests (nextest)" bounded "$tests_timeout_s" cargo nextest run --workspace \
        --no-fail-fast --tool-config-file "fogcached-test:$repo_root/scripts/nextest.toml" \
        -E 'not test(/^external_tool_/)'
    # nextest does not run doctests.
    # The wire tests once more under the other event loop: the run above used
    # --io-engine's default (auto: io_uring where the kernel allows it, see
    # tests/io_engine.rs), this one epoll, so both loops pass every wire test: the
    # server's own and fogbench's (end to end, fog layer, ketama, nutcracker, soak,
    # reproduce), whose servers take the loop from FOGCACHED_IO_ENGINE.
    run_step "wire tests under --io-engine epoll (server, bench)" bounded "$tests_timeout_s" \
        env FOGCACHED_IO_ENGINE=epoll cargo nextest run -p server -p bench --no-fail-fast \
        --tool-config-file "fogcached-test:$repo_root/scripts/nextest.toml" \
        -E 'not test(/^external_tool_/)'
    # The server's tests a third time under io_uring as a kernel from 5.19 to 6.0 sets it
    # up (single-shot receives, cooperative task work), the paths the run above does not
    # take on a newer kernel; a kernel without io_uring skips them (tests/io_engine.rs).
    run_step "server tests under io_uring as on Linux 5.19-6.0" bounded "$tests_timeout_s" \
        env FOGCACHED_IO_URING_RECV=single FOGCACHED_IO_URING_TASKRUN=cooperative \
        cargo nextest run -p server --no-fail-fast \
        --tool-config-file "fogcached-test:$repo_root/scripts/nextest.toml" \
        -E 'not test(/^external_tool_/)'
    run_step "doctests" bounded "$tests_timeout_s" cargo test --workspace --doc
else
    run_step "rust tests" bounded "$tests_timeout_s" cargo test --workspace --no-fail-fast \
        -- --skip external_tool_
    run_step "wire tests under --io-engine epoll (server, bench)" bounded "$tests_timeout_s" \
        env FOGCACHED_IO_ENGINE=epoll cargo test -p server -p bench --no-fail-fast \
        -- --skip external_tool_
    run_step "server tests under io_uring as on Linux 5.19-6.0" bounded "$tests_timeout_s" \
        env FOGCACHED_IO_URING_RECV=single FOGCACHED_IO_URING_TASKRUN=cooperative \
        cargo test -p server --no-fail-fast -- --skip external_tool_
fi

# The Python tests and the tools, once under each loop (a few seconds and about a minute
# a pass): "default" is --io-engine's default (auto: io_uring where the kernel allows it,
# or whatever FOGCACHED_IO_ENGINE the caller set), then epoll. Each takes the `env` prefix
# that sets the loop for the servers it starts.
# A subshell, so that a failed installation fails this step rather than ending the script.
python_tests() (
    ensure_python_env
    bounded "$tools_timeout_s" "$@" "$python" -m pytest -q -p no:cacheprovider tests/python
)
tool_tests() {
    bounded "$tools_timeout_s" "$@" cargo test -p server --no-fail-fast \
        --test compat_memccapable --test compat_memcaslap -- --nocapture --test-threads=1
}
for engine in default epoll; do
    if [ "$engine" = default ]; then
        engine_env=(env)
    else
        engine_env=(env FOGCACHED_IO_ENGINE="$engine")
    fi
    run_step "python client tests (pymemcache), $engine loop" python_tests "${engine_env[@]}"
    run_step "memccapable and memcaslap, $engine loop" tool_tests "${engine_env[@]}"
done

# Miri checks the unsafe code the way the compiler cannot: every pointer stays inside its
# allocation, no reference is used after its memory was handed elsewhere (Stacked
# Borrows), no data race between the threads a test starts. It interprets, so only the
# unit tests that exercise unsafe code and run in seconds there are chosen:
# - tier: every unit test Miri can run (the region's page arithmetic over heap memory,
#   the flash tier's aligned I/O buffers,
#   the access accounting across threads, the cost model); the tests that mmap a file,
#   fallocate, mbind or read a DAX device are #[cfg(not(miri))]: Miri has none of it;
# - engine: item memory (headers, keys and values through their proofs, refusals at the
#   region's edges), the index's item proofs end to end, the slab pages' free lists, and
#   one whole engine moving an item between tiers (under Miri a region that would be
#   anonymous memory is heap memory: tier::Region::anonymous);
# - server: the io_uring buffer ring, its kernel's writes made through the addresses the
#   descriptors name (no ring is set up: Miri has no io_uring).
# Not covered: file-backed pools and recovery from them (mmap of files), NUMA binding,
# cache-line flushes, the event loops' system calls, the index's large-table tests (too
# slow interpreted), and the engine's integration tests.
miri_filters=(
    accounting:: cost:: numa:: region:: time:: flash::aligned::
    item::
    index::tests::descriptors index::tests::an_item index::tests::keys_are_equal
    slab::
    crawler::tests::a_moved_item
)
miri_tests() (
    if ! cargo +nightly miri --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 || die "no rustup to install the nightly toolchain for Miri"
        log "rustup toolchain install nightly --profile minimal --component miri,rust-src"
        rustup toolchain install nightly --profile minimal --component miri,rust-src ||
            die "could not install Miri"
    fi
    # Isolation off: the tests read the clock and /sys (NUMA nodes), as they do natively.
    # Permissive provenance: the buffer ring hands the kernel addresses as integers, and a
    # test writes through them as the kernel does (Miri would warn at each such cast).
    export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-permissive-provenance}"
    bounded "$miri_timeout_s" cargo +nightly miri test -p tier -p engine --lib -- \
        "${miri_filters[@]}" &&
        bounded "$miri_timeout_s" cargo +nightly miri test -p server --lib -- \
            worker::uring::tests::the_buffer_ring
)
miri_timeout_s=1200
run_step "miri (unsafe code of tier, engine, the io_uring buffer ring)" miri_tests

print_summary
