#!/usr/bin/env bash
# Simulation (not a test): HMCached's experiments (seed 002 section 4) with fogsim,
# seeded and counted, no timing. Writes one JSON per setting under OUT_DIR and prints
# the Markdown tables of docs/results/sim-hmcached.md (scripts/sim-hmcached-tables.py).
#
#   scripts/sim-hmcached.sh [main|sweep|phase|kernel|all]
#
# - main:   Uni-3-2K, Uni-3-4K, Uni-3-8K, Uni-2-8K, Uni-1-8K (keys x SCALE), zipf 0.99,
#           95/5 and 50/50 get/set, DRAM = 1/4 of the data, every policy and the
#           kernel-tiering model;
# - sweep:  the same datasets at 95/5 with DRAM = 1/16, 1/8 and 1/2 of the data;
# - phase:  section 4.6's two datasets in five phases, hotspot with benefit-aware
#           reassignment, with memcached's automover instead (--no-benefit-reassign) and
#           with no page moves at all (--slab-automove 0: HMCached-Calcific);
# - kernel: the kernel-tiering model's sensitivity to its scanner and rate limit.
#
# Settings (environment, defaults in brackets): OPS [10000000] requests per run,
# PHASE_OPS [20000000], SCALE [0.1], SEED [42], OUT_DIR [docs/results/sim-hmcached],
# FORCE [unset: settings whose JSON exists are kept], SWEEP_DATASETS [all five],
# SWEEP_POLICIES [all six], SWEEP_OPS [OPS],
# FOGSIM [target/release/fogsim] (build it first: cargo build --release -p sim).
# Runs under `nice -n 19`, one at a time.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
FOGSIM="${FOGSIM:-$target_dir/release/fogsim}"
OPS="${OPS:-10000000}"
PHASE_OPS="${PHASE_OPS:-20000000}"
SCALE="${SCALE:-0.1}"
SEED="${SEED:-42}"
OUT_DIR="${OUT_DIR:-$repo_root/docs/results/sim-hmcached}"
POLICIES="hotspot,dual-lru,uniform,two-level,hyperbolic,kernel-tiering"
DATASETS=(uni-3-2k uni-3-4k uni-3-8k uni-2-8k uni-1-8k)
read -r -a SWEEP_DATASETS <<<"${SWEEP_DATASETS:-${DATASETS[*]}}"
SWEEP_POLICIES="${SWEEP_POLICIES:-$POLICIES}"
SWEEP_OPS="${SWEEP_OPS:-$OPS}"
what="${1:-all}"

[ -x "$FOGSIM" ] || { echo "sim-hmcached.sh: $FOGSIM missing (cargo build --release -p sim)" >&2; exit 1; }
mkdir -p "$OUT_DIR"

fogsim() {
    local out="$1"
    shift
    # A setting already measured is kept (delete its JSON, or set FORCE=1, to redo it),
    # so an interrupted run resumes where it stopped.
    if [ -e "$out" ] && [ -z "${FORCE:-}" ]; then
        echo "==> kept $out" >&2
        return
    fi
    echo "==> fogsim $* --json $out" >&2
    nice -n 19 "$FOGSIM" --seed "$SEED" --scale "$SCALE" "$@" --json "$out.tmp" >"${out%.json}.txt"
    mv "$out.tmp" "$out"
}

mix_name() { if [ "$1" = 0.05 ]; then echo 95-5; else echo 50-50; fi; }

if [ "$what" = main ] || [ "$what" = all ]; then
    for dataset in "${DATASETS[@]}"; do
        for update in 0.05 0.5; do
            fogsim "$OUT_DIR/$dataset-$(mix_name $update)-dram-1-4.json" --dataset "$dataset" \
                --dram-fraction 1/4 --update-ratio "$update" --ops "$OPS" --policy "$POLICIES"
        done
    done
fi

if [ "$what" = sweep ] || [ "$what" = all ]; then
    for dataset in "${SWEEP_DATASETS[@]}"; do
        for fraction in 1/16 1/8 1/2; do
            fogsim "$OUT_DIR/$dataset-95-5-dram-${fraction/\//-}.json" --dataset "$dataset" \
                --dram-fraction "$fraction" --update-ratio 0.05 --ops "$SWEEP_OPS" \
                --policy "$SWEEP_POLICIES"
        done
    done
fi

if [ "$what" = phase ] || [ "$what" = all ]; then
    for update in 0.05 0.5; do
        mix="$(mix_name $update)"
        common=(--phase-change 5 --windows 20 --update-ratio "$update" --ops "$PHASE_OPS")
        fogsim "$OUT_DIR/phase-$mix-reassign.json" "${common[@]}" --policy hotspot
        fogsim "$OUT_DIR/phase-$mix-automover.json" "${common[@]}" --policy hotspot --no-benefit-reassign
        fogsim "$OUT_DIR/phase-$mix-calcific.json" "${common[@]}" --policy hotspot \
            --no-benefit-reassign --slab-automove 0
        fogsim "$OUT_DIR/phase-$mix-others.json" "${common[@]}" --policy dual-lru,kernel-tiering
    done
fi

if [ "$what" = kernel ] || [ "$what" = all ]; then
    for period in 1000 10000 60000; do
        for limit in 65536 64 8; do
            fogsim "$OUT_DIR/kernel-uni-3-4k-95-5-scan-$period-ms-limit-$limit.json" \
                --dataset uni-3-4k --dram-fraction 1/4 --update-ratio 0.05 --ops "$OPS" \
                --policy kernel-tiering --kernel-scan-period-ms "$period" \
                --kernel-promote-mbps "$limit"
        done
    done
fi

python3 "$repo_root/scripts/sim-hmcached-tables.py" "$OUT_DIR"
