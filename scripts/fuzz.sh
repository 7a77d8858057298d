#!/usr/bin/env bash
# Runs fogcached's cargo-fuzz targets for a bounded time each, under `nice -n 19`, then
# folds what they found into the committed, minimised corpora.
#
#   scripts/fuzz.sh [-t SECONDS] [-j JOBS] [--no-merge] TARGET...     (default: all targets)
#
# Targets (fuzz/fuzz_targets/): text, meta, binary (the parsers), dispatch (the three
# dispatchers over an engine), connection (a whole connection over a socket pair, reads
# split at random points, against an engine with both tiers and migrations), config (the
# command line). Each has a dictionary of protocol tokens in fuzz/dicts/.
#
# New inputs go to fuzz/work/<target>/ (not committed), seeded from fuzz/corpus/<target>/;
# crashes to fuzz/artifacts/<target>/ (once understood and fixed, a crash is kept in
# fuzz/regressions/<target>/, which the tests replay too and cmin never prunes). Afterwards (unless --no-merge) the new inputs are
# merged into fuzz/corpus/<target>/ and that corpus is minimised with `cargo fuzz cmin`;
# ordinary tests replay the committed corpora (crates/*/tests/fuzz_corpus_replay.rs).
# The run's statistics (executions, coverage, crashes) are in fuzz/work/<target>.log.
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly compiler: `cargo +nightly`
# when rustup has one, else the stable one with RUSTC_BOOTSTRAP=1. FUZZ_SANITIZER=none
# runs libFuzzer without AddressSanitizer (when ASan does not link).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

seconds=600
jobs=1
merge=1
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) seconds="$2"; shift 2 ;;
        -j) jobs="$2"; shift 2 ;;
        --no-merge) merge=0; shift ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 64 ;;
        *) targets+=("$1"); shift ;;
    esac
done
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(text meta binary dispatch connection config)
fi

cargo_fuzz=(cargo)
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    cargo_fuzz=(cargo +nightly)
else
    export RUSTC_BOOTSTRAP=1
fi
sanitizer="${FUZZ_SANITIZER:-address}"

for target in "${targets[@]}"; do
    [ -f "fuzz/fuzz_targets/$target.rs" ] || { echo "fuzz.sh: no target $target" >&2; exit 64; }
    work="fuzz/work/$target"
    corpus="fuzz/corpus/$target"
    mkdir -p "$work" "$corpus" "fuzz/artifacts/$target"
    dict=()
    [ -f "fuzz/dicts/$target.dict" ] && dict=("-dict=fuzz/dicts/$target.dict")
    echo "==> $target: ${seconds}s, $jobs job(s), log $work.log"
    # A connection input runs two engines with a prefilled DRAM page each: keep inputs
    # to a few requests' worth so that it stays fast.
    extra=()
    [ "$target" = connection ] && extra=("-max_len=16384")
    parallel=()
    # libFuzzer's -jobs writes each job's output to ./fuzz-N.log.
    [ "$jobs" -gt 1 ] && parallel=("-jobs=$jobs" "-workers=$jobs")
    # A crash ends the run with a non-zero status; the merge still happens.
    nice -n 19 "${cargo_fuzz[@]}" fuzz run -s "$sanitizer" "$target" "$work" "$corpus" -- \
        "${dict[@]}" "${extra[@]}" "${parallel[@]}" -max_total_time="$seconds" \
        -print_final_stats=1 -timeout=120 -rss_limit_mb=4096 >"$work.log" 2>&1 ||
        echo "fuzz.sh: $target stopped with status $? (see $work.log and fuzz/artifacts/$target)"
    grep -E '^(stat::|Done|#[0-9]+ *DONE)' "$work.log" | tail -5 || true
    if [ "$merge" -eq 1 ]; then
        cp -n "$work"/* "$corpus"/ 2>/dev/null || true
        nice -n 19 "${cargo_fuzz[@]}" fuzz cmin -s "$sanitizer" "$target" "$corpus" -- \
            "${dict[@]}" >"$work.cmin.log" 2>&1 || echo "fuzz.sh: cmin of $target failed ($work.cmin.log)"
        echo "    corpus: $(find "$corpus" -type f | wc -l) inputs"
    fi
done
