//! `fogbench reproduce fogcached-latency`: seed 000 (Fogcached, IEICE 2021) section 5.2
//! and Fig. 5. GET latency distributions of memcached and fogcached in DRAM-only,
//! slow-only and hybrid configurations (with and without migration) and of memcached
//! with extstore, in a closed loop and then an open loop at a fixed rate.

use std::fmt::Write as _;

use super::lab::{base_run_config, footprint_mib, split_sizes, ConfigResult, Configuration, Lab};
use super::markdown::{configurations_table, failures_section, problems_section, relative_change};
use super::metrics::{
    distribution_series, dram_hit_share_pct, dram_share_series, fmt_opt, miss_ratio_pct,
    peak_bucket, peak_mid_us, slow_lines_per_get,
};
use super::Experiment;
use crate::plot::{Chart, Scale, Series};
use crate::run_report::LatencySummary;
use crate::runner::RunConfig;
use crate::workload::KeyDistribution;

/// fogcached-latency's second extstore configuration: every value in the file and under
/// 1 % of GETs missed, so that its latency row is one of file reads (the 1:7 row mixes
/// file reads with misses).
const EXTSTORE_FILE_READS: &str = "memcached-extstore-file-reads";

/// Its settings, found by trying them with this experiment's keys and load (100 000 keys
/// of 1 KB, 256 connections, 20 s of seed 000's GETs):
/// - `ext_item_age=0` flushes every value to the file at once (memcached's default flushes
///   only what the LRU pushes out, so with DRAM for all values almost none leaves it:
///   `-m 104` read 6.7 % of its hits from the file);
/// - `-m 48` holds the item headers extstore keeps in DRAM plus the write buffers (at
///   `-m 32` or less the headers of items already in the file are evicted: 89 % missed);
/// - a file four times the slow tier's, because extstore drops items while fewer than a
///   quarter of its pages are free and leaves pages fragmented (with the slow tier's
///   125 MiB, 3.8 % of GETs missed; with 512 MiB none, 99.9 % of hits from the file);
/// - `ext_threads=2` so that the flush keeps up with the load.
const EXTSTORE_FILE_READS_DRAM_MIB: u64 = 48;
const EXTSTORE_FILE_READS_FILE_FACTOR: u64 = 4;
const EXTSTORE_FILE_READS_OPTIONS: &str = "ext_item_age=0,ext_threads=2";

pub(super) fn fogcached_latency(ctx: &Lab) -> anyhow::Result<String> {
    let quick = ctx.options.quick;
    let keys: u64 = if quick { 20_000 } else { 100_000 };
    let hot_keys: u64 = if quick { 1_000 } else { 5_000 };
    // The hot range sits in the middle of the key space: the load writes keys in order,
    // and the first ones would land in DRAM by the order of writing alone, which would
    // favour the configuration without migration.
    let hot_first = keys / 2;
    let value_bytes = 1024;
    let sizes = split_sizes(footprint_mib(keys, value_bytes), 1, 7, 4);
    let configs = vec![
        Configuration {
            label: "memcached-dram",
            title: "memcached, DRAM only (the paper's configuration 1)",
            spec: ctx.memcached(sizes.total_mib),
        },
        Configuration {
            label: "dram-only",
            title: "fogcached, DRAM only (`--slow-size 0`)",
            spec: ctx.fogcached("dram-only", sizes.total_mib, 0, &[]),
        },
        Configuration {
            label: "slow-only",
            title: "fogcached, slow tier only (configuration 2)",
            spec: ctx.fogcached("slow-only", 0, sizes.total_mib, &[]),
        },
        Configuration {
            label: "hybrid-nomig",
            title: "fogcached, DRAM:slow = 1:7, migration off (configuration 3)",
            spec: ctx.fogcached(
                "hybrid-nomig",
                sizes.dram_mib,
                sizes.slow_mib,
                &["--no-migration"],
            ),
        },
        Configuration {
            label: "hybrid",
            title: "fogcached, DRAM:slow = 1:7, Dual-LRU migration (configuration 4)",
            spec: ctx.fogcached("hybrid", sizes.dram_mib, sizes.slow_mib, &[]),
        },
        Configuration {
            label: "memcached-extstore",
            title: "memcached with extstore, DRAM:file = 1:7 (configuration 5)",
            spec: ctx.memcached_extstore("memcached-extstore", sizes.dram_mib, sizes.slow_mib),
        },
        Configuration {
            label: EXTSTORE_FILE_READS,
            title:
                "memcached with extstore, every value flushed to the file, under 1 % of GETs missed",
            spec: ctx.memcached_extstore_with(
                EXTSTORE_FILE_READS,
                EXTSTORE_FILE_READS_DRAM_MIB.min(sizes.dram_mib * 3),
                sizes.slow_mib * EXTSTORE_FILE_READS_FILE_FACTOR,
                EXTSTORE_FILE_READS_OPTIONS,
            ),
        },
    ];
    let duration = ctx.duration(10, 60);
    let template = RunConfig {
        duration,
        ..base_run_config(
            ctx,
            keys,
            KeyDistribution::alternating_hot_set(keys, hot_first, hot_keys)?,
        )
    };
    // A closed loop of 256 connections measures mostly queueing (latency = connections /
    // throughput); an open loop at a fixed rate well below every configuration's capacity
    // shows the service latency that the memory devices make.
    let open_rate_per_s = if quick { 10_000.0 } else { 20_000.0 };
    let open_duration = ctx.duration(5, 30);
    let open_loop = RunConfig {
        duration: open_duration,
        rate_per_s: Some(open_rate_per_s),
        connections: ctx.connections(64),
        seed: 2,
        ..template.clone()
    };
    let mut results = Vec::new();
    for (index, config) in configs.iter().enumerate() {
        ctx.progress(&format!(
            "fogcached-latency [{}/{}] {}: load {keys} keys, {:.0} s of GETs in a closed loop, then {:.0} s at {open_rate_per_s:.0}/s",
            index + 1,
            configs.len(),
            config.label,
            duration.as_secs_f64(),
            open_duration.as_secs_f64()
        ));
        results.push(ctx.run_config(config, &template, true, Some(&open_loop)));
    }
    ctx.write_raw("results", &results)?;

    let mut md = ctx.header(
        Experiment::FogcachedLatency,
        "Seed 000 (Fogcached, IEICE 2021), section 5.2 and Fig. 5: memaslap issued GETs for \
         1 KB values over 256 connections, every other key drawn from a fixed range of 5 000 \
         hot keys, against five configurations with 32 GB of memory (1:7 DRAM:DCPM for the \
         hybrids). Here fogbench does the same at this machine's scale; memcached DRAM-only \
         and fogcached DRAM-only are both shown.",
        &[
            ("Keys", format!("{keys} × {value_bytes} B values, loaded once (closed loop) before the run")),
            ("Run phase", format!("GET only, {:.0} s, closed loop, {} connections; every other key from the hot range [{hot_first}, {})", duration.as_secs_f64(), template.connections, hot_first + hot_keys)),
            ("Memory", format!("{} MiB in all; hybrids {} MiB DRAM + {} MiB slow tier (1:7)", sizes.total_mib, sizes.dram_mib, sizes.slow_mib)),
            ("Then, on the same server", format!("an open loop at {open_rate_per_s:.0} GETs/s for {:.0} s over {} connections, latency measured from each request's intended send time", open_duration.as_secs_f64(), open_loop.connections)),
        ],
    );
    configurations_table(&mut md, &configs);

    md.push_str("## Results\n\n| configuration | GETs/s | mean µs | peak bucket µs | p50 µs | p99 µs | p99.9 µs | miss % | DRAM share of hits % | slow lines per GET |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for result in &results {
        let Some(report) = result.report() else {
            let _ = writeln!(md, "| `{}` | did not run | | | | | | | | |", result.label);
            continue;
        };
        let latency = result.get_latency();
        let _ = writeln!(
            md,
            "| `{}` | {:.0} | {} | {} | {} | {} |",
            result.label,
            report.run.ops_per_s,
            latency_cells(latency),
            fmt_opt(miss_ratio_pct(report), 2),
            fmt_opt(dram_hit_share_pct(result), 1),
            fmt_opt(slow_lines_per_get(result), 2),
        );
    }
    md.push('\n');

    let _ = writeln!(
        md,
        "Open loop at {open_rate_per_s:.0} GETs/s on the same servers (service latency without \
         queueing in the client):\n\n| configuration | GETs answered | mean µs | peak bucket µs | p50 µs | p99 µs | p99.9 µs | sends held back |\n|---|---|---|---|---|---|---|---|"
    );
    for result in &results {
        let Some(open) = &result.follow_up else {
            let _ = writeln!(md, "| `{}` | did not run | | | | | | |", result.label);
            continue;
        };
        let latency = open.run.latency.get("get");
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} |",
            result.label,
            open.run.counts.gets,
            latency_cells(latency),
            open.run.open_loop_unsent,
        );
    }
    md.push('\n');

    let series: Vec<Series> = results
        .iter()
        .filter_map(|r| r.get_latency().map(|l| distribution_series(r.label, l)))
        .collect();
    let open_series: Vec<Series> = results
        .iter()
        .filter_map(|r| {
            let open = r.follow_up.as_ref()?;
            open.run
                .latency
                .get("get")
                .map(|l| distribution_series(r.label, l))
        })
        .collect();
    md.push_str("## Plots\n\n");
    md.push_str(&ctx.chart(
        "latency-distribution",
        &Chart {
            title: "GET latency distribution (as seed 000 Fig. 5)",
            x_label: "GET latency (µs, log scale; 20 buckets per decade)",
            y_label: "share of GETs (% per bucket)",
            x_scale: Scale::Log10,
            y_scale: Scale::Linear,
            series: &series,
        },
    )?);
    md.push('\n');
    md.push_str(&ctx.chart(
        "latency-distribution-open-loop",
        &Chart {
            title: "GET latency distribution, open loop at a fixed rate",
            x_label: "GET latency from intended send time (µs, log scale)",
            y_label: "share of GETs (% per bucket)",
            x_scale: Scale::Log10,
            y_scale: Scale::Linear,
            series: &open_series,
        },
    )?);
    let share: Vec<Series> = results
        .iter()
        .filter(|r| r.label.starts_with("hybrid") || r.label.starts_with("memcached-extstore"))
        .filter_map(|r| {
            r.report().map(|report| Series {
                label: r.label.to_owned(),
                points: dram_share_series(&report.run),
            })
        })
        .collect();
    md.push('\n');
    md.push_str(&ctx.chart(
        "dram-hit-share",
        &Chart {
            title: "Share of GET hits served from DRAM, per second",
            x_label: "time since the run phase began (s)",
            y_label: "DRAM share of GET hits (%)",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &share,
        },
    )?);
    md.push('\n');

    md.push_str("## Compared with the paper\n\n");
    let find = |label: &str| results.iter().find(|r| r.label == label);
    let peak = |label: &str| {
        find(label)
            .and_then(ConfigResult::get_latency)
            .and_then(peak_mid_us)
    };
    let mean = |label: &str| {
        find(label)
            .and_then(ConfigResult::get_latency)
            .map(|l| l.mean_us)
    };
    let open_latency = |label: &str| {
        find(label)
            .and_then(|r| r.follow_up.as_ref())
            .and_then(|open| open.run.latency.get("get"))
    };
    let open_peak = |label: &str| open_latency(label).and_then(peak_mid_us);
    let open_p50 = |label: &str| open_latency(label).map(|l| l.p50_us);
    let miss = |label: &str| {
        find(label)
            .and_then(ConfigResult::report)
            .and_then(miss_ratio_pct)
    };
    // extstore: the share of GET hits read from its file rather than from DRAM.
    let file_share_pct = |label: &str| find(label).and_then(dram_hit_share_pct).map(|d| 100.0 - d);
    let _ = writeln!(
        md,
        "| comparison | paper | here |\n|---|---|---|\n\
         | peak of the distribution, hybrid vs memcached extstore (closed loop) | 290–300 µs vs 470–480 µs: about 40 % lower | {} vs {} µs: {} |\n\
         | peak, hybrid vs memcached extstore (open loop, {open_rate_per_s:.0} GETs/s) | – | {} vs {} µs: {} |\n\
         | median, hybrid vs memcached extstore (open loop) | – | {} vs {} µs: {} |\n\
         | mean latency, hybrid vs memcached extstore (closed loop) | 311 µs vs 460 µs | {} vs {} µs |\n\
         | GETs that missed, memcached extstore (closed loop) | – (not reported) | {} % |\n\
         | peak, DRAM-only vs slow-only (closed loop) | 250–260 µs vs 330–340 µs | {} vs {} µs |\n\
         | peak, hybrid with vs without migration (closed loop) | 300 vs 310–320 µs (20 µs better) | {} vs {} µs |\n\
         | peak, hybrid vs memcached extstore reading every value from its file (closed loop) | – | {} vs {} µs: {} |\n\
         | median, hybrid vs memcached extstore reading every value from its file (open loop) | – | {} vs {} µs: {} |\n\
         | memcached extstore reading every value from its file: GETs that missed, GET hits read from the file (closed loop) | – | {} %, {} % |\n",
        fmt_opt(peak("hybrid"), 0),
        fmt_opt(peak("memcached-extstore"), 0),
        relative_change(peak("hybrid"), peak("memcached-extstore")),
        fmt_opt(open_peak("hybrid"), 0),
        fmt_opt(open_peak("memcached-extstore"), 0),
        relative_change(open_peak("hybrid"), open_peak("memcached-extstore")),
        fmt_opt(open_p50("hybrid"), 1),
        fmt_opt(open_p50("memcached-extstore"), 1),
        relative_change(open_p50("hybrid"), open_p50("memcached-extstore")),
        fmt_opt(mean("hybrid"), 0),
        fmt_opt(mean("memcached-extstore"), 0),
        fmt_opt(miss("memcached-extstore"), 1),
        fmt_opt(peak("memcached-dram"), 0),
        fmt_opt(peak("slow-only"), 0),
        fmt_opt(peak("hybrid"), 0),
        fmt_opt(peak("hybrid-nomig"), 0),
        fmt_opt(peak("hybrid"), 0),
        fmt_opt(peak(EXTSTORE_FILE_READS), 0),
        relative_change(peak("hybrid"), peak(EXTSTORE_FILE_READS)),
        fmt_opt(open_p50("hybrid"), 1),
        fmt_opt(open_p50(EXTSTORE_FILE_READS), 1),
        relative_change(open_p50("hybrid"), open_p50(EXTSTORE_FILE_READS)),
        fmt_opt(miss(EXTSTORE_FILE_READS), 2),
        fmt_opt(file_share_pct(EXTSTORE_FILE_READS), 1),
    );
    md.push_str(
        "Why the figures differ from the paper's:\n\n\
         - **Loopback and two shared cores** instead of a client host and a server host on \
         10 GbE: the client's own work and the scheduler dominate the latency. With 256 \
         connections in a closed loop, latency is mostly queueing (connections ÷ \
         throughput), so the peaks differ by less than the memory devices do.\n\
         - **Emulated, not real, persistent memory**: fogcached's slow tier is a pool file in \
         the page cache, with each read and write delayed by the cost model above. \
         memcached's extstore file sits in the same directory but is read with real file \
         I/O (syscalls and its I/O threads) and no emulated delay, so the comparison favours \
         extstore compared with the paper, where its file lived on DCPM behind a DAX file \
         system.\n\
         - **Scale**: tens of MiB instead of 32 GB, and a run of fixed length instead of 20 \
         million GETs.\n\
         - **memcached's extstore misses**: with the same 1:7 split as fogcached's tiers, \
         memcached keeps each item's header and key in DRAM, evicts when its DRAM or its \
         file pages run out (its `evictions` are in the final stats of `raw/results.json`), \
         and a miss is answered without touching the file. Its latency figures are those \
         of a mix of misses and file reads, not of the file reads alone.\n",
    );
    let stat_of =
        |label: &str, name: &str| find(label).and_then(|r| r.final_stats.get(name)).copied();
    if let (Some(evicted @ 1..), Some(pages_free @ 1..)) = (
        stat_of("memcached-extstore", "evictions"),
        stat_of("memcached-extstore", "extstore_pages_free"),
    ) {
        let _ = writeln!(
            md,
            "  At 1:7 it evicted {evicted} items while {pages_free} of its file's pages were \
             free: an item written to the file keeps a 96-byte header in DRAM, but DRAM's \
             pages stay with the 1 KB class that the load filled first, and memcached's \
             default slab automover moves too few of them to the header class, so headers \
             (and with them items already in the file) are evicted."
        );
    }
    let fogcached_misses: u64 = results
        .iter()
        .filter(|r| !r.label.starts_with("memcached"))
        .filter_map(ConfigResult::report)
        .map(|report| report.run.counts.misses)
        .sum();
    let _ = writeln!(
        md,
        "  GETs that missed in fogcached's configurations, all together: {fogcached_misses}."
    );
    let _ = writeln!(
        md,
        "- **`{EXTSTORE_FILE_READS}`** is memcached with extstore set up so that every \
         value lives in the file and under 1 % of GETs miss: `-o {EXTSTORE_FILE_READS_OPTIONS}` \
         flushes each value at once, `-m {}` holds the item headers extstore keeps in DRAM, \
         and the file is {EXTSTORE_FILE_READS_FILE_FACTOR}x the slow tier ({} MiB), because \
         extstore drops items while fewer than a quarter of its pages are free. {} % of its \
         GET hits were read from the file and {} % of GETs missed, so its latencies are \
         those of {}.",
        EXTSTORE_FILE_READS_DRAM_MIB.min(sizes.dram_mib * 3),
        sizes.slow_mib * EXTSTORE_FILE_READS_FILE_FACTOR,
        fmt_opt(file_share_pct(EXTSTORE_FILE_READS), 1),
        fmt_opt(miss(EXTSTORE_FILE_READS), 2),
        match file_share_pct(EXTSTORE_FILE_READS) {
            Some(pct) if pct < 50.0 => "DRAM reads more than file reads",
            Some(_) => "file reads",
            None => "– (it did not run)",
        },
    );
    md.push('\n');
    failures_section(&mut md, &results);
    problems_section(&mut md, &results);
    md.push_str("## Raw data\n\n`raw/results.json`: each configuration's full fogbench report (latency histograms per operation with every bucket, the per-second series with the server's stats) and its final `stats`. Server logs are in `logs/`.\n");
    Ok(md)
}

/// The cells "mean | peak bucket | p50 | p99 | p99.9" (µs) of both latency tables.
fn latency_cells(latency: Option<&LatencySummary>) -> String {
    format!(
        "{} | {} | {} | {} | {}",
        fmt_opt(latency.map(|l| l.mean_us), 1),
        latency
            .and_then(peak_bucket)
            .map(|(lo, hi)| format!("{lo:.0}–{hi:.0}"))
            .unwrap_or_else(|| "–".to_owned()),
        fmt_opt(latency.map(|l| l.p50_us), 1),
        fmt_opt(latency.map(|l| l.p99_us), 1),
        fmt_opt(latency.map(|l| l.p999_us), 1),
    )
}
