//! `fogbench reproduce hmcached`: seed 002 (HMCached, IEEE TPDS 2020) section 4 end to
//! end. HMCached's Uni-X-Y datasets (X million keys, values uniform from 1 byte to Y
//! KiB) at this machine's scale, zipf 0.99, 95/5 and 50/50 get/set, DRAM = 1/4 of the
//! data and the paper's emulated NVM (`--slow-cost hmcached`: 300 ns per 64-byte line
//! read, 1000 ns per line written, as HME injects them): the throughput of each placement policy relative to DRAM-only, and a sweep
//! of the slow tier's latency.
//!
//! Two shared cores make throughput of runs made one after another incomparable, so
//! every configuration's server is started, loaded and warmed up first, and then they
//! are measured in alternating rounds (A, B, C, ..., A, B, C, ...); the report quotes the
//! median of the per-round ratios to DRAM-only, as `scripts/bench-fogbench-ab.sh` does,
//! and the load average around the measurement. On a machine so loaded that even
//! alternating rounds scatter, the server's own CPU time per request (all its threads,
//! from `/proc`, emulated slow-tier waits included: they spin) is the steadier figure:
//! it does not depend on how much of the machine the server got, and its inverse is the
//! throughput the server would reach with the same CPU.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::lab::{base_run_config, Lab, BASE_SEED, MIB};
use super::machine::load_averages;
use super::markdown::{configuration_row, failed_list};
use super::metrics::{fmt_opt, ratio_pct};
use super::Experiment;
use crate::plot::{Chart, Scale, Series};
use crate::runner::RunConfig;
use crate::servers::{LaunchedServer, ServerSpec};
use crate::workload::{KeyDistribution, ValueSize};
use crate::{run_benchmark, BenchOptions};

/// One dataset and get/set mix of the throughput table.
#[derive(Debug, Clone, Copy)]
struct Case {
    /// HMCached's name of the dataset (`Uni-3-2K`).
    dataset: &'static str,
    /// Keys in the paper (millions).
    paper_millions: u64,
    /// The largest value in bytes (values are uniform in 1..=this).
    value_max_bytes: usize,
    get_ratio: f64,
}

impl Case {
    fn mix(&self) -> &'static str {
        if self.get_ratio >= 0.9 {
            "95/5"
        } else {
            "50/50"
        }
    }

    fn name(&self) -> String {
        format!("{} {}", self.dataset, self.mix())
    }

    fn file_stem(&self) -> String {
        format!(
            "{}-{}",
            self.dataset.to_ascii_lowercase(),
            self.mix().replace('/', "-")
        )
    }
}

const UNI_3_2K_95: Case = Case {
    dataset: "Uni-3-2K",
    paper_millions: 3,
    value_max_bytes: 2048,
    get_ratio: 0.95,
};
const UNI_3_2K_50: Case = Case {
    get_ratio: 0.5,
    ..UNI_3_2K_95
};
const UNI_3_8K_95: Case = Case {
    dataset: "Uni-3-8K",
    paper_millions: 3,
    value_max_bytes: 8192,
    get_ratio: 0.95,
};
const UNI_3_8K_50: Case = Case {
    get_ratio: 0.5,
    ..UNI_3_8K_95
};

/// The placement policies compared, in the report's order (`--policy` names), with the
/// paper's names.
const POLICIES: [(&str, &str); 5] = [
    ("hotspot", "HMCached"),
    ("hyperbolic", "HM-HC"),
    ("dual-lru", "Fogcached's Dual-LRU"),
    ("two-level", "HM-TLC"),
    ("uniform", "HM-UNI"),
];

/// Multipliers of the `hmcached` preset's NVM latencies (300 ns per line read, 1000 ns
/// per line written, of which 76 ns is the memory's own) in the latency sweep (the
/// paper's Fig. 7 raises both linearly).
const SWEEP_FULL: [u32; 4] = [1, 2, 4, 8];
const SWEEP_QUICK: [u32; 2] = [1, 4];
/// Seed 002 section 4.1's figures, as the server's `hmcached` preset has them
/// (`tier::cost`; fogbench talks to servers over the wire only, so it names them again).
const NVM_READ_NS: u32 = 300;
const NVM_WRITE_NS: u32 = 1000;
const NATIVE_DRAM_NS: u32 = 76;

/// The experiment's scale: keys are the paper's divided by this.
const KEY_DIVISOR_FULL: u64 = 60;
const KEY_DIVISOR_QUICK: u64 = 600;
/// Rounds of the alternation (each configuration measured once per round).
const ROUNDS_FULL: usize = 8;
const ROUNDS_QUICK: usize = 2;

/// Bytes of an item beyond its value: the engine's 56-byte header and a key of about 16
/// bytes (`fr<keys>:<id>`).
const ITEM_OVERHEAD_BYTES: f64 = 72.0;

/// Tier sizes of a case: DRAM = `dram_fraction` of the data, the slow tier room for all
/// of it with slab rounding, DRAM-only the two together.
#[derive(Debug, Clone, Copy)]
struct CaseSizes {
    data_mib: f64,
    dram_mib: u64,
    slow_mib: u64,
}

fn case_sizes(keys: u64, value_max_bytes: usize, dram_fraction: f64) -> CaseSizes {
    let mean_value = (1 + value_max_bytes) as f64 / 2.0;
    let data_bytes = keys as f64 * (mean_value + ITEM_OVERHEAD_BYTES);
    let data_mib = data_bytes / MIB as f64;
    CaseSizes {
        data_mib,
        dram_mib: ((data_mib * dram_fraction).ceil() as u64).max(4),
        // Slab classes of factor 1.25 waste up to a fifth; a partial page per class.
        slow_mib: (data_mib * 1.3).ceil() as u64 + 64,
    }
}

/// One measured round of one configuration.
#[derive(Debug, Clone, serde::Serialize)]
struct Round {
    round: usize,
    ops_per_s: f64,
    gets: u64,
    sets: u64,
    hits: u64,
    misses: u64,
    problems: u64,
    get_p50_us: Option<f64>,
    get_p99_us: Option<f64>,
    /// CPU seconds the server's process (all threads) used during the round.
    server_cpu_s: Option<f64>,
    /// Increase of the server's counters over the round.
    stats_delta: BTreeMap<String, u64>,
}

/// A configuration under alternation: its server while it runs, then its rounds.
struct Arm {
    label: String,
    title: String,
    spec: ServerSpec,
    server: Option<LaunchedServer>,
    error: Option<String>,
    load_s: f64,
    rounds: Vec<Round>,
    final_stats: BTreeMap<String, u64>,
}

impl Arm {
    fn new(label: String, title: String, spec: ServerSpec) -> Arm {
        Arm {
            label,
            title,
            spec,
            server: None,
            error: None,
            load_s: 0.0,
            rounds: Vec::new(),
            final_stats: BTreeMap::new(),
        }
    }

    fn median_ops(&self) -> Option<f64> {
        median(self.rounds.iter().map(|r| r.ops_per_s).collect())
    }

    /// Sum of a counter's increase over the rounds.
    fn delta(&self, field: &str) -> u64 {
        self.rounds
            .iter()
            .map(|r| r.stats_delta.get(field).copied().unwrap_or(0))
            .sum()
    }

    /// Slow-tier lines read and written per request over the measured rounds.
    fn slow_lines_per_request(&self) -> Option<(f64, f64)> {
        let requests = self.delta("cmd_get") + self.delta("cmd_set");
        (requests > 0).then(|| {
            (
                self.delta("slow_lines_read") as f64 / requests as f64,
                self.delta("slow_lines_written") as f64 / requests as f64,
            )
        })
    }

    fn dram_hit_share_pct(&self) -> Option<f64> {
        let dram = self.delta("tier_dram_get_hits");
        ratio_pct(dram, dram + self.delta("tier_slow_get_hits"))
    }

    fn problems(&self) -> u64 {
        self.rounds.iter().map(|r| r.problems).sum()
    }

    /// Server CPU microseconds per request over the rounds (None if a round lacks it).
    fn cpu_us_per_request(&self) -> Option<f64> {
        let cpu_s: Option<f64> = self.rounds.iter().map(|r| r.server_cpu_s).sum();
        let requests: u64 = self.rounds.iter().map(|r| r.gets + r.sets).sum();
        (requests > 0).then_some(cpu_s? * 1e6 / requests as f64)
    }
}

/// `/proc` reports CPU times in USER_HZ ticks, 100 per second on Linux.
const PROC_TICKS_PER_S: f64 = 100.0;

/// CPU seconds (user + system, all threads) process `pid` has used.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it are fixed (proc(5)):
    // utime and stime are the 12th and 13th after the closing parenthesis.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / PROC_TICKS_PER_S)
}

/// DRAM-only's CPU per request over `arm`'s: the throughput `arm` reaches with the CPU
/// DRAM-only needs, as a share.
fn equal_cpu_ratio(arm: &Arm, reference: &Arm) -> Option<f64> {
    let (own, base) = (arm.cpu_us_per_request()?, reference.cpu_us_per_request()?);
    (own > 0.0).then(|| base / own)
}

fn pct_of(ratio: Option<f64>) -> String {
    ratio.map_or("–".to_owned(), |r| format!("{:.1} %", r * 100.0))
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// Per-round ratios of `arm`'s throughput to `reference`'s, and their median.
fn ratios(arm: &Arm, reference: &Arm) -> (Vec<f64>, Option<f64>) {
    let ratios: Vec<f64> = arm
        .rounds
        .iter()
        .filter_map(|r| {
            let base = reference.rounds.iter().find(|b| b.round == r.round)?;
            (base.ops_per_s > 0.0).then(|| r.ops_per_s / base.ops_per_s)
        })
        .collect();
    let m = median(ratios.clone());
    (ratios, m)
}

/// Starts, loads and warms up every arm, then measures them in alternating rounds; the
/// servers are stopped and their data deleted at the end. Returns the load average
/// before and after the rounds.
fn alternate(
    ctx: &Lab,
    what: &str,
    arms: &mut [Arm],
    template: &RunConfig,
    warm_up: Duration,
    rounds: usize,
) -> (String, String) {
    let n = arms.len();
    for (index, arm) in arms.iter_mut().enumerate() {
        ctx.progress(&format!(
            "hmcached {what} [{}/{n}] {}: start, load {} keys, warm up {:.0} s",
            index + 1,
            arm.label,
            template.distribution.keys(),
            warm_up.as_secs_f64()
        ));
        let data_dir = ctx.data_root.join(&arm.label);
        let started = (|| -> anyhow::Result<(LaunchedServer, f64)> {
            std::fs::create_dir_all(&data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            let server =
                LaunchedServer::start(&ctx.options.programs, &arm.spec, &arm.label, &ctx.logs_dir)?;
            let warm = RunConfig {
                servers: vec![server.addr],
                duration: warm_up,
                ..template.clone()
            };
            let report = run_benchmark(
                &warm,
                BenchOptions {
                    load: true,
                    poll_stats: false,
                    progress: ctx.options.progress,
                },
            )?;
            let load_s = report.load.as_ref().map_or(0.0, |l| l.elapsed_s);
            Ok((server, load_s))
        })();
        match started {
            Ok((server, load_s)) => {
                arm.server = Some(server);
                arm.load_s = load_s;
            }
            Err(error) => {
                arm.error = Some(format!("{error:#}"));
                ctx.progress(&format!("{}: FAILED: {error:#}", arm.label));
            }
        }
    }
    let before = load_averages();
    for round in 1..=rounds {
        ctx.progress(&format!(
            "hmcached {what}: round {round}/{rounds}, {n} configurations of {:.0} s each",
            template.duration.as_secs_f64()
        ));
        for arm in arms.iter_mut() {
            let Some(server) = &arm.server else {
                continue;
            };
            let measured = (|| -> anyhow::Result<Round> {
                let stats_before = server.stats()?;
                let cpu_before = process_cpu_s(server.pid());
                let config = RunConfig {
                    servers: vec![server.addr],
                    seed: BASE_SEED + round as u64,
                    ..template.clone()
                };
                let report = run_benchmark(
                    &config,
                    BenchOptions {
                        load: false,
                        poll_stats: false,
                        progress: false,
                    },
                )?;
                let cpu_after = process_cpu_s(server.pid());
                let stats_after = server.stats()?;
                let run = &report.run;
                let latency = run.latency.get("get");
                Ok(Round {
                    round,
                    ops_per_s: run.ops_per_s,
                    gets: run.counts.gets,
                    sets: run.counts.sets,
                    hits: run.counts.hits,
                    misses: run.counts.misses,
                    problems: run.counts.verify_failures
                        + run.counts.error_replies
                        + run.connection_failures,
                    get_p50_us: latency.map(|l| l.p50_us),
                    get_p99_us: latency.map(|l| l.p99_us),
                    server_cpu_s: cpu_after.zip(cpu_before).map(|(a, b)| a - b),
                    stats_delta: stats_after
                        .iter()
                        .map(|(k, &v)| {
                            (
                                k.clone(),
                                v.saturating_sub(*stats_before.get(k).unwrap_or(&0)),
                            )
                        })
                        .collect(),
                })
            })();
            match measured {
                Ok(r) => arm.rounds.push(r),
                Err(error) => {
                    arm.error = Some(format!("round {round}: {error:#}"));
                    ctx.progress(&format!("{}: FAILED: {error:#}", arm.label));
                }
            }
        }
    }
    let after = load_averages();
    for arm in arms.iter_mut() {
        if let Some(server) = arm.server.take() {
            arm.final_stats = server.stats().unwrap_or_default();
            let _ = server.stop();
        }
        let _ = std::fs::remove_dir_all(ctx.data_root.join(&arm.label));
    }
    (before, after)
}

fn write_raw(ctx: &Lab, name: &str, arms: &[Arm]) -> anyhow::Result<()> {
    let raw: Vec<_> = arms
        .iter()
        .map(|a| {
            json!({
                "label": a.label,
                "title": a.title,
                "command": a.spec.display(),
                "error": a.error,
                "load_s": a.load_s,
                "rounds": a.rounds,
                "final_stats": a.final_stats,
            })
        })
        .collect();
    let path = ctx.report_dir.join("raw").join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(&raw).context("encoding raw results")?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

fn arms_table(md: &mut String, arms: &[Arm]) {
    for arm in arms {
        configuration_row(md, &arm.label, &arm.title, &arm.spec.display());
    }
}

/// One case's sizes, its configurations after the rounds, and the load average before
/// and after them.
type Measured = (Case, CaseSizes, Vec<Arm>, (String, String));

/// Labels of the throughput arms: `dram-only` and one per policy.
const DRAM_ONLY: &str = "dram-only";

fn throughput_arms(ctx: &Lab, sizes: CaseSizes, slow_cost: &str) -> Vec<Arm> {
    let mut arms = vec![Arm::new(
        DRAM_ONLY.to_owned(),
        "fogcached, DRAM only (`--slow-size 0`): the reference".to_owned(),
        ctx.fogcached(DRAM_ONLY, sizes.dram_mib + sizes.slow_mib, 0, &[]),
    )];
    // HM-UNI homes keys in DRAM by "the ratio of the DRAM size to the dataset size"
    // (seed 002 section 4.1), not by the tiers' sizes: the slow tier here has room to
    // spare for slab rounding, which would shrink uniform's DRAM share below the data's.
    let uniform_share = format!("{:.6}", (sizes.dram_mib as f64 / sizes.data_mib).min(1.0));
    for (policy, paper) in POLICIES {
        let mut args = vec!["--policy", policy];
        if policy == "uniform" {
            args.extend(["--uniform-dram-share", uniform_share.as_str()]);
        }
        let mut spec = ctx.fogcached(policy, sizes.dram_mib, sizes.slow_mib, &args);
        set_slow_cost(&mut spec, slow_cost);
        arms.push(Arm::new(
            policy.to_owned(),
            format!("fogcached `--policy {policy}` ({paper}), DRAM = 1/4 of the data"),
            spec,
        ));
    }
    arms
}

/// Replaces the `--slow-cost` of a fogcached command line.
fn set_slow_cost(spec: &mut ServerSpec, cost: &str) {
    if let Some(i) = spec.args.iter().position(|a| a == "--slow-cost") {
        if let Some(value) = spec.args.get_mut(i + 1) {
            *value = cost.to_owned();
        }
    }
}

pub(super) fn hmcached(ctx: &Lab) -> anyhow::Result<String> {
    let quick = ctx.options.quick;
    let divisor = if quick {
        KEY_DIVISOR_QUICK
    } else {
        KEY_DIVISOR_FULL
    };
    let rounds = if quick { ROUNDS_QUICK } else { ROUNDS_FULL };
    let cases: Vec<Case> = if quick {
        vec![UNI_3_2K_95]
    } else {
        vec![UNI_3_2K_95, UNI_3_2K_50, UNI_3_8K_95, UNI_3_8K_50]
    };
    let sweep: &[u32] = if quick { &SWEEP_QUICK } else { &SWEEP_FULL };
    let duration = ctx.duration(3, 5);
    // The paper measured after 50 requests per key; the placement policies need some
    // ten requests per key to settle (fogsim's steady state starts after about 13), which
    // 10 s did not give a loaded machine here.
    let warm_up = ctx.duration(2, 30);
    let slow_cost = ctx.slow_cost.clone();
    let connections = ctx.connections(32);

    let template_for = |case: &Case| -> anyhow::Result<RunConfig> {
        let keys = case.paper_millions * 1_000_000 / divisor;
        Ok(RunConfig {
            duration,
            get_ratio: case.get_ratio,
            connections,
            value_size: ValueSize::Uniform {
                min: 1,
                max: case.value_max_bytes,
            },
            ..base_run_config(
                ctx,
                keys,
                KeyDistribution::scrambled_zipfian(keys, 0.99, BASE_SEED)?,
            )
        })
    };

    // Throughput relative to DRAM-only, per case.
    let mut measured: Vec<Measured> = Vec::new();
    for case in &cases {
        let template = template_for(case)?;
        let keys = template.distribution.keys();
        let sizes = case_sizes(keys, case.value_max_bytes, 0.25);
        let mut arms = throughput_arms(ctx, sizes, &slow_cost);
        let loads = alternate(ctx, &case.name(), &mut arms, &template, warm_up, rounds);
        write_raw(ctx, &case.file_stem(), &arms)?;
        measured.push((*case, sizes, arms, loads));
    }

    // The latency sweep: hotspot and Dual-LRU at rising slow-tier latencies, against
    // DRAM-only, on the first case.
    let sweep_case = cases[0];
    let template = template_for(&sweep_case)?;
    let sweep_sizes = case_sizes(
        template.distribution.keys(),
        sweep_case.value_max_bytes,
        0.25,
    );
    let mut sweep_arms = vec![Arm::new(
        DRAM_ONLY.to_owned(),
        "fogcached, DRAM only: the reference".to_owned(),
        ctx.fogcached(
            DRAM_ONLY,
            sweep_sizes.dram_mib + sweep_sizes.slow_mib,
            0,
            &[],
        ),
    )];
    for &factor in sweep {
        // The injected delay per line is the NVM latency less the memory's own, as
        // HME injects it (and as the `hmcached` preset charges at factor 1).
        let cost = format!(
            "read_line_ns={},write_line_ns={}",
            NVM_READ_NS * factor - NATIVE_DRAM_NS,
            NVM_WRITE_NS * factor - NATIVE_DRAM_NS
        );
        for policy in ["hotspot", "dual-lru"] {
            let label = format!("{policy}-x{factor}");
            let mut spec = ctx.fogcached(
                &label,
                sweep_sizes.dram_mib,
                sweep_sizes.slow_mib,
                &["--policy", policy],
            );
            set_slow_cost(&mut spec, &cost);
            sweep_arms.push(Arm::new(
                label,
                format!("`--policy {policy}`, `--slow-cost {cost}`"),
                spec,
            ));
        }
    }
    let sweep_loads = alternate(
        ctx,
        "latency sweep",
        &mut sweep_arms,
        &template,
        warm_up,
        rounds,
    );
    write_raw(ctx, "latency-sweep", &sweep_arms)?;

    // The report.
    let (first_case, first_sizes, _, _) = &measured[0];
    let mut md = ctx.header(
        Experiment::Hmcached,
        "Seed 002 (HMCached, IEEE TPDS 2020), section 4: datasets Uni-X-Y (X million \
         objects, values uniform from 1 byte to Y KB), YCSB-style zipfian requests \
         (skewness 0.99), 95/5 and 50/50 GET/SET, DRAM = 1/4 of the data, NVM emulated at \
         300 ns per 64-byte line read and 1000 ns per line written; Fig. 4 compares the throughput of HMCached \
         with HM-UNI, HM-TLC, HM-HC and DRAM-only, Fig. 7 raises the NVM latencies. Here \
         the same with fogcached's placement policies, at this machine's scale.",
        &[
            (
                "Datasets",
                format!(
                    "the paper's key counts divided by {divisor} (Uni-3-Y: {} keys), values \
                     uniform in 1..=Y bytes, keys `{}<id>`",
                    first_case.paper_millions * 1_000_000 / divisor,
                    template.key_prefix
                ),
            ),
            (
                "Memory",
                format!(
                    "DRAM = 1/4 of the data (the first case: {:.0} MiB of items, {} MiB DRAM + \
                     {} MiB slow tier; DRAM-only gets both)",
                    first_sizes.data_mib, first_sizes.dram_mib, first_sizes.slow_mib
                ),
            ),
            (
                "Measurement",
                format!(
                    "every configuration's server is started, loaded and warmed up ({:.0} s of \
                     the case's requests) first; then {rounds} rounds of {:.0} s each, the \
                     configurations one after another in every round, closed loop, {} \
                     connections; the ratio to DRAM-only is taken per round and its median \
                     quoted (the machine drifts between rounds, not within one)",
                    warm_up.as_secs_f64(),
                    duration.as_secs_f64(),
                    connections
                ),
            ),
            (
                "Slow-tier cost of the throughput table",
                format!("`--slow-cost {slow_cost}`"),
            ),
        ],
    );
    md.push_str("## Configurations\n\n| label | configuration | server command (port flags left out) |\n|---|---|---|\n");
    arms_table(&mut md, &measured[0].2);
    arms_table(&mut md, &sweep_arms[1..]);
    md.push('\n');

    md.push_str("## Throughput relative to DRAM-only (as the paper's Fig. 4)\n\n");
    for (case, sizes, arms, (load_before, load_after)) in &measured {
        let _ = writeln!(
            md,
            "### {}: {} keys, {:.0} MiB of items, DRAM {} MiB, slow tier {} MiB\n\n\
             Load average (1, 5, 15 min) before the rounds: {load_before}; after: {load_after}.\n",
            case.name(),
            case.paper_millions * 1_000_000 / divisor,
            sizes.data_mib,
            sizes.dram_mib,
            sizes.slow_mib
        );
        md.push_str("| configuration | median ops/s | ratio to DRAM-only per round | median ratio | server CPU µs per request | throughput at DRAM-only's CPU | DRAM share of GET hits | GETs missed | slow lines read + written per request | promotions / demotions per 1k requests |\n|---|---|---|---|---|---|---|---|---|---|\n");
        let reference = &arms[0];
        for arm in arms.iter() {
            if arm.rounds.is_empty() {
                let _ = writeln!(md, "| `{}` | did not run | | | | | | | | |", arm.label);
                continue;
            }
            let (per_round, median_ratio) = ratios(arm, reference);
            let requests = (arm.delta("cmd_get") + arm.delta("cmd_set")).max(1) as f64;
            let per_1k = |field: &str| arm.delta(field) as f64 * 1000.0 / requests;
            let gets: u64 = arm.rounds.iter().map(|r| r.gets).sum();
            let misses: u64 = arm.rounds.iter().map(|r| r.misses).sum();
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                arm.label,
                fmt_opt(arm.median_ops(), 0),
                per_round
                    .iter()
                    .map(|r| format!("{r:.3}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                pct_of(median_ratio),
                fmt_opt(arm.cpu_us_per_request(), 2),
                pct_of(equal_cpu_ratio(arm, reference)),
                if arm.label == DRAM_ONLY {
                    "100 %".to_owned()
                } else {
                    fmt_opt(arm.dram_hit_share_pct(), 1) + " %"
                },
                fmt_opt(ratio_pct(misses, gets), 2) + " %",
                arm.slow_lines_per_request()
                    .map_or("–".to_owned(), |(r, w)| format!("{r:.2} + {w:.2}")),
                if arm.label == DRAM_ONLY {
                    "–".to_owned()
                } else {
                    format!("{:.2} / {:.2}", per_1k("promotions"), per_1k("demotions"))
                },
            );
        }
        md.push('\n');
    }

    let (sweep_before, sweep_after) = &sweep_loads;
    let _ = writeln!(
        md,
        "## Slow-tier latency sweep (as the paper's Fig. 7), {}\n\n\
         Load average before the rounds: {sweep_before}; after: {sweep_after}.\n\n\
         | slow-tier read / write latency | hotspot: median ratio to DRAM-only | dual-lru: median ratio to DRAM-only | hotspot / dual-lru throughput at DRAM-only's CPU | hotspot slow lines R + W per request |\n|---|---|---|---|---|",
        sweep_case.name()
    );
    let sweep_reference = &sweep_arms[0];
    let sweep_ratio = |label: &str| {
        sweep_arms
            .iter()
            .find(|a| a.label == label)
            .and_then(|a| ratios(a, sweep_reference).1)
    };
    let equal_cpu = |label: &str| {
        sweep_arms
            .iter()
            .find(|a| a.label == label)
            .and_then(|a| equal_cpu_ratio(a, sweep_reference))
    };
    // The steady figure (at DRAM-only's server CPU) and the measured median of each.
    let mut sweep_series: Vec<Series> = Vec::new();
    for policy in ["hotspot", "dual-lru"] {
        let points = |of: &dyn Fn(&str) -> Option<f64>| -> Vec<(f64, f64)> {
            sweep
                .iter()
                .filter_map(|&f| {
                    of(&format!("{policy}-x{f}")).map(|r| (f64::from(NVM_READ_NS * f), r * 100.0))
                })
                .collect()
        };
        sweep_series.push(Series {
            label: format!("{policy}, at DRAM-only's server CPU"),
            points: points(&equal_cpu),
        });
        sweep_series.push(Series {
            label: format!("{policy}, measured median"),
            points: points(&sweep_ratio),
        });
    }
    for &factor in sweep {
        let hotspot = sweep_arms
            .iter()
            .find(|a| a.label == format!("hotspot-x{factor}"));
        let _ = writeln!(
            md,
            "| {} / {} ns | {} | {} | {} / {} | {} |",
            NVM_READ_NS * factor,
            NVM_WRITE_NS * factor,
            pct_of(sweep_ratio(&format!("hotspot-x{factor}"))),
            pct_of(sweep_ratio(&format!("dual-lru-x{factor}"))),
            pct_of(equal_cpu(&format!("hotspot-x{factor}"))),
            pct_of(equal_cpu(&format!("dual-lru-x{factor}"))),
            hotspot
                .and_then(Arm::slow_lines_per_request)
                .map_or("–".to_owned(), |(r, w)| format!("{r:.2} + {w:.2}")),
        );
    }
    md.push('\n');

    // Plots.
    let ratio_series: Vec<Series> = POLICIES
        .iter()
        .map(|(policy, _)| Series {
            label: (*policy).to_owned(),
            points: measured
                .iter()
                .enumerate()
                .filter_map(|(i, (_, _, arms, _))| {
                    let arm = arms.iter().find(|a| a.label == *policy)?;
                    equal_cpu_ratio(arm, &arms[0]).map(|r| ((i + 1) as f64, r * 100.0))
                })
                .collect(),
        })
        .collect();
    let lines_series: Vec<Series> = POLICIES
        .iter()
        .map(|(policy, _)| Series {
            label: (*policy).to_owned(),
            points: measured
                .iter()
                .enumerate()
                .filter_map(|(i, (_, _, arms, _))| {
                    let arm = arms.iter().find(|a| a.label == *policy)?;
                    arm.slow_lines_per_request()
                        .map(|(r, w)| ((i + 1) as f64, r + w))
                })
                .collect(),
        })
        .collect();
    let case_legend = measured
        .iter()
        .enumerate()
        .map(|(i, (case, _, _, _))| format!("{} = {}", i + 1, case.name()))
        .collect::<Vec<_>>()
        .join(", ");
    md.push_str("## Plots\n\n");
    let _ = writeln!(md, "Cases on the x axis: {case_legend}.\n");
    md.push_str(&ctx.chart(
        "throughput-ratio",
        &Chart {
            title: "Throughput at DRAM-only's server CPU, % of DRAM-only",
            x_label: "case (see above)",
            y_label: "DRAM-only's server CPU per request / this one's (%)",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &ratio_series,
        },
    )?);
    md.push('\n');
    md.push_str(&ctx.chart(
        "slow-lines-per-request",
        &Chart {
            title: "Slow-tier lines read + written per request (as the paper's Fig. 5)",
            x_label: "case (see above)",
            y_label: "64-byte slow-tier lines per request",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &lines_series,
        },
    )?);
    md.push('\n');
    md.push_str(&ctx.chart(
        "latency-sweep",
        &Chart {
            title: "Throughput against the slow tier's latency (as the paper's Fig. 7)",
            x_label: "slow-tier read latency (ns; writes 10/3 of it)",
            y_label: "throughput, % of DRAM-only",
            x_scale: Scale::Log10,
            y_scale: Scale::Linear,
            series: &sweep_series,
        },
    )?);
    md.push('\n');

    // Compared with the paper.
    let mean_ratio = |policy: &str, get_ratio_min: f64, get_ratio_max: f64| -> Option<f64> {
        let values: Vec<f64> = measured
            .iter()
            .filter(|(c, _, _, _)| (get_ratio_min..=get_ratio_max).contains(&c.get_ratio))
            .filter_map(|(_, _, arms, _)| {
                let arm = arms.iter().find(|a| a.label == policy)?;
                ratios(arm, &arms[0]).1
            })
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let mean_equal_cpu = |policy: &str, lo: f64, hi: f64| -> Option<f64> {
        let values: Vec<f64> = measured
            .iter()
            .filter(|(c, _, _, _)| (lo..=hi).contains(&c.get_ratio))
            .filter_map(|(_, _, arms, _)| {
                let arm = arms.iter().find(|a| a.label == policy)?;
                equal_cpu_ratio(arm, &arms[0])
            })
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    // hotspot over another policy: by measured throughput, then at equal server CPU.
    let gain = |policy: &str, lo: f64, hi: f64| -> String {
        let one = |of: &dyn Fn(&str, f64, f64) -> Option<f64>| match (
            of("hotspot", lo, hi),
            of(policy, lo, hi),
        ) {
            (Some(h), Some(o)) if o > 0.0 => format!("{:+.0} %", (h / o - 1.0) * 100.0),
            _ => "–".to_owned(),
        };
        format!("{} ({})", one(&mean_ratio), one(&mean_equal_cpu))
    };
    let lines_vs_uniform = |lo: f64, hi: f64| -> String {
        let values: Vec<f64> = measured
            .iter()
            .filter(|(c, _, _, _)| (lo..=hi).contains(&c.get_ratio))
            .filter_map(|(_, _, arms, _)| {
                let lines = |label: &str| {
                    arms.iter()
                        .find(|a| a.label == label)
                        .and_then(Arm::slow_lines_per_request)
                        .map(|(r, w)| r + w)
                };
                let (h, u) = (lines("hotspot")?, lines("uniform")?);
                (u > 0.0).then(|| h / u)
            })
            .collect();
        if values.is_empty() {
            "–".to_owned()
        } else {
            format!(
                "{:.0} % of uniform's",
                values.iter().sum::<f64>() / values.len() as f64 * 100.0
            )
        }
    };
    let pct_or_dash =
        |v: Option<f64>| v.map_or("–".to_owned(), |r| format!("{:.1} %", r * 100.0));
    md.push_str("## Compared with the paper\n\n");
    let _ = writeln!(
        md,
        "| figure | paper | here (mean over the cases of that mix) |\n|---|---|---|\n\
         | hotspot throughput, % of DRAM-only, 95/5 | 88 % (\"as low as 12 %\" gap) | {} measured; {} at DRAM-only's server CPU |\n\
         | hotspot throughput, % of DRAM-only, 50/50 | 74 % (26 % gap) | {} measured; {} at DRAM-only's server CPU |\n\
         | hotspot over HM-UNI / HM-TLC / HM-HC, 95/5: measured (at equal server CPU) | +36 % / +18 % / +5 % | {} / {} / {} |\n\
         | hotspot over HM-UNI / HM-TLC / HM-HC, 50/50: measured (at equal server CPU) | +68 % / +21 % / +4 % | {} / {} / {} |\n\
         | hotspot slow-tier accesses against HM-UNI, 95/5 | -70 % | {} |\n\
         | hotspot slow-tier accesses against HM-UNI, 50/50 | -72 % | {} |\n\
         | throughput against NVM latency | falls roughly linearly, faster for larger objects | see the sweep |\n\
         | Dual-LRU throughput, % of DRAM-only, 95/5 / 50/50 | – (not in the paper) | {} / {} measured; {} / {} at DRAM-only's server CPU |\n",
        pct_or_dash(mean_ratio("hotspot", 0.9, 1.0)),
        pct_or_dash(mean_equal_cpu("hotspot", 0.9, 1.0)),
        pct_or_dash(mean_ratio("hotspot", 0.0, 0.9)),
        pct_or_dash(mean_equal_cpu("hotspot", 0.0, 0.9)),
        gain("uniform", 0.9, 1.0),
        gain("two-level", 0.9, 1.0),
        gain("hyperbolic", 0.9, 1.0),
        gain("uniform", 0.0, 0.9),
        gain("two-level", 0.0, 0.9),
        gain("hyperbolic", 0.0, 0.9),
        lines_vs_uniform(0.9, 1.0),
        lines_vs_uniform(0.0, 0.9),
        pct_or_dash(mean_ratio("dual-lru", 0.9, 1.0)),
        pct_or_dash(mean_ratio("dual-lru", 0.0, 0.9)),
        pct_or_dash(mean_equal_cpu("dual-lru", 0.9, 1.0)),
        pct_or_dash(mean_equal_cpu("dual-lru", 0.0, 0.9)),
    );
    md.push_str(
        "Why the figures differ from the paper's:\n\n\
         - **Where the time goes.** The paper's server had the machine's cores to itself, \
         with YCSB on other cores; its throughput was bound by memory accesses. Here \
         client and servers share two cores over loopback, and a DRAM-only request costs \
         a few microseconds of system calls and protocol work (its server CPU per request \
         is in the tables); the emulated waits add to that for every slow-tier line a \
         request touches, so a configuration's gap to DRAM-only follows its slow-tier \
         lines per request.\n\
         - **The emulation.** HME injects its delay per 64-byte NVM access counted by the \
         PMU (cache misses that reach the remote node); fogcached's `hmcached` cost model \
         waits the same per line for every 64-byte line the engine reads or writes in the \
         slow tier (a header, a value, a link). Those lines are counted by the engine, \
         not by a PMU, so CPU caches filter nothing here: a line read twice in a row is \
         charged twice, which errs against the slow tier.\n\
         - **Scale.** The paper's datasets had millions of objects and 150 million \
         requests; here the key counts are divided as stated above and each configuration \
         runs for the rounds above. The seeded, counted comparison at a larger scale and \
         with every dataset is `fogsim` (`docs/results/sim-hmcached.md`).\n\
         - **DRAM-only** is fogcached with `--slow-size 0` (the same code and protocol \
         path), where the paper's was vanilla memcached.\n\
         - **The load of this machine.** Other work shared the two cores (the load \
         averages are given per table); measured throughput then scatters from round to \
         round even when alternating, which the per-round ratios show. The server's CPU \
         time per request does not depend on the share of the machine it got: \
         \"throughput at DRAM-only's CPU\" (DRAM-only's CPU per request over the \
         configuration's) is what the configuration would reach on the CPU that \
         DRAM-only needs, the emulated slow-tier waits included (they spin).\n\n",
    );
    let all: Vec<&Arm> = measured
        .iter()
        .flat_map(|(_, _, arms, _)| arms.iter())
        .chain(sweep_arms.iter())
        .collect();
    failed_list(
        &mut md,
        all.iter()
            .filter_map(|a| Some((a.label.as_str(), a.error.as_deref()?))),
    );
    if measured.iter().any(|(_, _, arms, _)| {
        arms.iter()
            .any(|a| a.label == "uniform" && a.rounds.iter().any(|r| r.misses > 0))
    }) {
        md.push_str(
            "`uniform` (HM-UNI) misses because it never moves an item: a key hashed to DRAM \
             whose slab class got no DRAM page (DRAM is a few pages shared by some twenty \
             classes at this scale) cannot be stored there.\n\n",
        );
    }
    md.push_str("## Integrity\n\n");
    let problems: u64 = all.iter().map(|a| a.problems()).sum();
    let misses: u64 = all
        .iter()
        .flat_map(|a| a.rounds.iter())
        .map(|r| r.misses)
        .sum();
    if problems == 0 {
        let _ = writeln!(
            md,
            "Every value read was checked (`--verify`): no verify failures, no error replies \
             and no lost connections in any configuration. GETs that missed, all \
             configurations together: {misses}.\n"
        );
    } else {
        let _ = writeln!(
            md,
            "{problems} verify failures, error replies or lost connections in all (see the \
             raw rounds). GETs that missed: {misses}.\n"
        );
    }
    md.push_str("## Raw data\n\n");
    for (case, _, _, _) in &measured {
        let _ = write!(md, "`raw/{}.json`, ", case.file_stem());
    }
    md.push_str(
        "`raw/latency-sweep.json`: each configuration's command, load time, every round \
         (throughput, counts, GET p50/p99, the increase of every server counter) and its \
         final `stats`. Server logs are in `logs/`.\n",
    );
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servers::ServerKind;

    #[test]
    fn the_cpu_time_of_a_process_is_read_from_proc_and_grows_while_it_works() {
        let start_cpu_s = process_cpu_s(std::process::id()).expect("/proc/self/stat");
        // Work until the next 10 ms tick lands (bounded: a loaded machine may take a
        // while to give this thread that much CPU).
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut now_cpu_s = start_cpu_s;
        while now_cpu_s <= start_cpu_s && start.elapsed() < Duration::from_secs(60) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            now_cpu_s = process_cpu_s(std::process::id()).expect("/proc/self/stat");
        }
        assert!(
            now_cpu_s >= start_cpu_s + 0.01,
            "{start_cpu_s} -> {now_cpu_s}"
        );
        assert_eq!(process_cpu_s(u32::MAX), None);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }

    #[test]
    fn ratios_pair_rounds_by_number() {
        let arm = |ops: &[f64]| {
            let mut a = Arm::new(
                "a".into(),
                "a".into(),
                ServerSpec::new(ServerKind::Fogcached, &[]),
            );
            for (i, &o) in ops.iter().enumerate() {
                a.rounds.push(Round {
                    round: i + 1,
                    ops_per_s: o,
                    gets: 0,
                    sets: 0,
                    hits: 0,
                    misses: 0,
                    problems: 0,
                    get_p50_us: None,
                    get_p99_us: None,
                    server_cpu_s: None,
                    stats_delta: BTreeMap::new(),
                });
            }
            a
        };
        let reference = arm(&[100.0, 200.0, 100.0]);
        let (per_round, median_ratio) = ratios(&arm(&[90.0, 100.0, 95.0]), &reference);
        assert_eq!(per_round, vec![0.9, 0.5, 0.95]);
        assert_eq!(median_ratio, Some(0.9));
    }

    #[test]
    fn sizes_put_a_quarter_of_the_data_in_dram() {
        // 50 000 keys of 1..=2048-byte values: 50 000 x (1024.5 + 72) bytes = 52.3 MiB.
        let sizes = case_sizes(50_000, 2048, 0.25);
        assert!((52.0..52.5).contains(&sizes.data_mib), "{sizes:?}");
        assert_eq!(sizes.dram_mib, 14);
        assert_eq!(sizes.slow_mib, 68 + 64);
    }
}
