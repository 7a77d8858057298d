#!/usr/bin/env python3
"""Markdown tables of scripts/sim-hmcached.sh's JSON (fogsim --json), steady state
(the last half of each run's windows). Usage: sim-hmcached-tables.py DIR"""
import json
import os
import statistics
import sys

DATASETS = ["uni-3-2k", "uni-3-4k", "uni-3-8k", "uni-2-8k", "uni-1-8k"]
POLICIES = ["hotspot", "hyperbolic", "dual-lru", "two-level", "uniform", "kernel-tiering"]
MIXES = [("95-5", "95/5"), ("50-50", "50/50")]


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def runs_by_policy(doc):
    return {r["policy"]: r for r in doc["runs"]}


def rw(w):
    return w["slow_lines_per_request"] + w["slow_lines_written_per_request"]


def problems(doc):
    out = []
    for r in doc["runs"]:
        if r["wrong_values"] or r["failed_stores"] or r["total"]["misses"]:
            out.append(
                f"{r['policy']}: {r['wrong_values']} wrong values, {r['failed_stores']} failed "
                f"stores, {r['total']['misses']} misses"
            )
    return out


def main_tables(d):
    print("## DRAM = 1/4 of the data (the paper's Fig. 4 and 5)\n")
    shares = {p: {m: [] for m, _ in MIXES} for p in POLICIES}
    for dataset in DATASETS:
        for mix, label in MIXES:
            doc = load(os.path.join(d, f"{dataset}-{mix}-dram-1-4.json"))
            if doc is None:
                continue
            cfg = doc["config"]
            runs = runs_by_policy(doc)
            uni = rw(runs["uniform"]["steady"]) if "uniform" in runs else None
            load_ratio = next(iter(runs.values()))["load"]["dataset_to_dram_ratio"]
            print(
                f"### {dataset.upper()}, {label} get/set: {cfg['keys']} keys, values "
                f"{cfg['value_sizes']} B, DRAM {cfg['dram_mib']} MiB (data {load_ratio:.2f}x DRAM), "
                f"slow {cfg['slow_mib']} MiB\n"
            )
            print(
                "| policy | DRAM share of get hits | slow lines read + written / req | share of uniform "
                "| promotions / demotions per 1k |\n|---|---|---|---|---|"
            )
            for p in POLICIES:
                if p not in runs:
                    continue
                w = runs[p]["steady"]
                share = rw(w) / uni if uni else None
                if share is not None:
                    shares[p][mix].append(share)
                unit = " (pages)" if p == "kernel-tiering" else ""
                print(
                    f"| {p} | {w['dram_hit_share'] * 100:.1f} % | {w['slow_lines_per_request']:.3f} + "
                    f"{w['slow_lines_written_per_request']:.3f} | "
                    f"{'' if share is None or p == 'uniform' else f'{share * 100:.1f} %'} | "
                    f"{w['promotions_per_1k_requests']:.2f} / {w['demotions_per_1k_requests']:.2f}{unit} |"
                )
            for problem in problems(doc):
                print(f"\nProblem: {problem}")
            print()
    print("### Summary: slow-tier lines read + written per request, share of uniform's\n")
    print("| policy | 95/5, mean of 5 datasets (min-max) | 50/50, mean (min-max) |\n|---|---|---|")
    for p in POLICIES:
        if p == "uniform":
            continue
        cells = []
        for mix, _ in MIXES:
            v = shares[p][mix]
            cells.append(
                f"{statistics.mean(v) * 100:.1f} % ({min(v) * 100:.1f}-{max(v) * 100:.1f})" if v else "–"
            )
        print(f"| {p} | {cells[0]} | {cells[1]} |")
    print()


def sweep_table(d):
    print("## DRAM sweep, 95/5 (the paper's Fig. 6): share of uniform's slow lines read + written\n")
    fractions = [("1-16", "1/16"), ("1-8", "1/8"), ("1-4", "1/4"), ("1-2", "1/2")]
    shown = [p for p in POLICIES if p != "uniform"]
    print(
        "| dataset | DRAM / data | "
        + " | ".join(shown)
        + " | uniform (lines / req) | requests |\n|---|---|"
        + "---|" * (len(shown) + 2)
    )
    for dataset in DATASETS:
        for key, label in fractions:
            doc = load(os.path.join(d, f"{dataset}-95-5-dram-{key}.json"))
            if doc is None:
                continue
            runs = runs_by_policy(doc)
            uni = rw(runs["uniform"]["steady"])
            cells = []
            for p in shown:
                if p not in runs:
                    cells.append("–")
                    continue
                w = runs[p]["steady"]
                cells.append(f"{rw(w) / uni * 100:.1f} % ({w['dram_hit_share'] * 100:.0f} %)")
            ops = doc["config"]["ops"]
            print(
                f"| {dataset.upper()} | {label} | " + " | ".join(cells) + f" | {uni:.2f} | {ops / 1e6:.0f} M |"
            )
    print("\nEach cell: share of uniform (DRAM share of get hits); – : not run at that size.\n")


def phase_tables(d):
    print("## Phase change (the paper's section 4.6, Fig. 10)\n")
    for mix, label in MIXES:
        variants = [
            ("reassign", "hotspot"),
            ("automover", "hotspot"),
            ("calcific", "hotspot"),
            ("others", "dual-lru"),
            ("others", "kernel-tiering"),
        ]
        columns = []
        for file, policy in variants:
            doc = load(os.path.join(d, f"phase-{mix}-{file}.json"))
            if doc is None:
                continue
            runs = runs_by_policy(doc)
            if policy in runs:
                name = policy if file == "others" else f"hotspot, {file}"
                columns.append((name, runs[policy]))
        if not columns:
            continue
        print(f"### {label} get/set: DRAM share of get hits per window\n")
        print("| window | phase (dataset) | " + " | ".join(n for n, _ in columns) + " |")
        print("|---|---|" + "---|" * len(columns))
        windows = len(columns[0][1]["windows"])
        for i in range(windows):
            phase = columns[0][1]["windows"][i]["phase"]
            ds = "A" if phase % 2 == 1 else "B"
            cells = [f"{r['windows'][i]['dram_hit_share'] * 100:.1f} %" for _, r in columns]
            print(f"| {i + 1} | {phase} ({ds}) | " + " | ".join(cells) + " |")
        cells = [
            f"{r['total']['dram_hit_share'] * 100:.1f} %, {rw(r['total']):.2f} lines/req"
            for _, r in columns
        ]
        print("| all | | " + " | ".join(cells) + " |\n")
        for name, r in columns:
            if not r["windows"][0]["dram_pages_by_chunk_size"]:
                continue
            print(f"DRAM pages per class over time, {name} ({label}): chunk size: pages at the end of each window\n")
            print("| window | phase | pages in classes < 3 KiB | pages in classes >= 3 KiB | by class |\n|---|---|---|---|---|")
            for w in r["windows"]:
                pages = w["dram_pages_by_chunk_size"]
                small = sum(p for c, p in pages if c < 3072)
                big = sum(p for c, p in pages if c >= 3072)
                detail = " ".join(f"{c}:{p}" for c, p in pages if c >= 1024)
                print(f"| {w['window']} | {w['phase']} | {small} | {big} | {detail} |")
            print()


def kernel_table(d):
    rows = []
    for period in [1000, 10000, 60000]:
        for limit in [65536, 64, 8]:
            doc = load(os.path.join(d, f"kernel-uni-3-4k-95-5-scan-{period}-ms-limit-{limit}.json"))
            if doc is None:
                continue
            r = doc["runs"][0]
            rows.append((period, limit, r))
    if not rows:
        return
    main = load(os.path.join(d, "uni-3-4k-95-5-dram-1-4.json"))
    uni = rw(runs_by_policy(main)["uniform"]["steady"]) if main else None
    print("## kernel-tiering sensitivity, Uni-3-4K, 95/5, DRAM 1/4\n")
    print(
        "| scan period | rate limit MB/s | DRAM share of hits | slow lines R + W / req | share of uniform "
        "| hint faults / 1k | pages promoted / demoted per 1k | hot threshold at the end |\n|---|---|---|---|---|---|---|---|"
    )
    for period, limit, r in rows:
        w = r["steady"]
        k = r["kernel_tiering"]
        share = f"{rw(w) / uni * 100:.1f} %" if uni else "–"
        print(
            f"| {period / 1000:.0f} s | {limit} | {w['dram_hit_share'] * 100:.1f} % | "
            f"{w['slow_lines_per_request']:.3f} + {w['slow_lines_written_per_request']:.3f} | {share} | "
            f"{w['hint_faults'] * 1000 / w['requests']:.1f} | {w['promotions_per_1k_requests']:.2f} / "
            f"{w['demotions_per_1k_requests']:.2f} | {k['hot_threshold_ms']} ms |"
        )
    print()


def main():
    d = sys.argv[1]
    main_tables(d)
    sweep_table(d)
    phase_tables(d)
    kernel_table(d)


if __name__ == "__main__":
    main()
