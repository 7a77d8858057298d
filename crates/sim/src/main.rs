//! `fogsim`: the tier-placement experiment of ISSUE 3 item 7, deterministic for a seed,
//! for one or more placement policies. Prints a table per policy and a comparison;
//! `--json`/`--csv` write the same numbers to files.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use sim::{report, Distribution, Policy, SimConfig};

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum DistributionArg {
    /// Scrambled zipfian with --theta (YCSB-style).
    Zipf,
    /// Seed 000: every other request from the hot range [--hot-first, +--hot-keys), the
    /// others uniform over all keys.
    Hotset,
    Uniform,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum PresetArg {
    /// fogbench's `reproduce fogcached-latency` (seed 000): 100 000 keys x 1024 B,
    /// DRAM 17 MiB, slow 125 MiB, hot set of 5 000 keys from key 50 000, 4 000 000
    /// requests.
    FogcachedLatency,
}

#[derive(Parser, Debug)]
#[command(
    name = "fogsim",
    about = "Drive the fogcached engine with a seeded workload (no network) and count where hits are served, per placement policy",
    long_about = "Drives the fogcached engine in one process, single-threaded, with a manual clock: a \
load phase writes every key once, then a run phase of reads (and optional updates) whose keys \
follow --distribution. The engine's own maintenance steps (per-tier LRU maintainer, migration, \
slab automover) run at a fixed cadence of simulated time. Reported per window, for the steady \
state (the last half of the windows) and for the whole run, for each --policy: share of get \
hits served from DRAM, slow-tier 64-byte lines read and written per request, promotions, \
demotions and promotions skipped per 1000 requests, evictions, misses."
)]
struct Cli {
    /// Start from a named setting; options given as well override it.
    #[arg(long, value_enum)]
    preset: Option<PresetArg>,
    /// Keys in the dataset [default: as many as fill 4x the DRAM tier]
    #[arg(long)]
    keys: Option<u64>,
    /// Bytes of every value [default: 1000]
    #[arg(long)]
    value_bytes: Option<usize>,
    /// DRAM tier size in MiB [default: 64]
    #[arg(long)]
    dram_mib: Option<u64>,
    /// Slow tier size in MiB [default: 5x the DRAM tier, room for the whole dataset]
    #[arg(long)]
    slow_mib: Option<u64>,
    /// Requests in the run phase, after the load phase [default: 8000000]
    #[arg(long)]
    ops: Option<u64>,
    /// Measurement windows the run phase is split into.
    #[arg(long, default_value_t = 10)]
    windows: u32,
    /// How the run phase picks keys [default: zipf]
    #[arg(long, value_enum)]
    distribution: Option<DistributionArg>,
    /// Zipf exponent of the key popularity (--distribution zipf).
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// First key of the hot range (--distribution hotset) [default: --keys / 2, away
    /// from the keys the load leaves in DRAM]
    #[arg(long)]
    hot_first: Option<u64>,
    /// Keys in the hot range (--distribution hotset) [default: 5000]
    #[arg(long)]
    hot_keys: Option<u64>,
    /// Share of run-phase requests that are updates (0..=1).
    #[arg(long, default_value_t = 0.0)]
    update_ratio: f64,
    /// Seed of the workload (key permutation and request stream).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Requests per simulated second.
    #[arg(long, default_value_t = 20_000)]
    ops_per_s: u64,
    /// Maintenance ticks (LRU maintainer passes + migration) per simulated second.
    #[arg(long, default_value_t = 20)]
    ticks_per_s: u32,
    /// Simulated seconds between LRU crawler passes; 0 = never (the workload sets no TTL).
    #[arg(long, default_value_t = 0)]
    crawler_interval_s: u32,
    /// Engine `promotion_margin` for every run [default: the engine's].
    #[arg(long)]
    promotion_margin: Option<u8>,
    /// Engine `access_period_requests` for every run (0 = automatic) [default: the engine's].
    #[arg(long)]
    access_period: Option<u64>,
    /// Placement policies to run, in order: repeat the option or give a comma list
    /// (dual-lru, no-migration) [default: dual-lru]
    #[arg(long, value_name = "NAME[,NAME...]")]
    policy: Vec<String>,
    /// Same as --policy dual-lru,no-migration.
    #[arg(long, conflicts_with = "policy")]
    policy_compare: bool,
    /// Same as --policy no-migration (the papers' "without dynamic relocation").
    #[arg(long, conflicts_with_all = ["policy", "policy_compare"])]
    no_migration: bool,
    /// Write the configuration and every window as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write every window as CSV to this file.
    #[arg(long, value_name = "PATH")]
    csv: Option<PathBuf>,
}

/// The settings a preset gives to the options left out.
struct Preset {
    keys: Option<u64>,
    value_bytes: usize,
    dram_mib: u64,
    slow_mib: Option<u64>,
    ops: u64,
    distribution: DistributionArg,
    hot_keys: u64,
}

/// Without `--preset`: the zipf experiment of docs/results/sim-dual-lru.md.
const DEFAULTS: Preset = Preset {
    keys: None,
    value_bytes: 1000,
    dram_mib: 64,
    slow_mib: None,
    ops: 8_000_000,
    distribution: DistributionArg::Zipf,
    hot_keys: 5000,
};

/// fogbench's `fogcached-latency` (crates/bench/src/reproduce.rs): 100 000 keys of
/// 1 KiB, the hot range [keys / 2, +5 000) (the `--hot-first` default, so it follows
/// `--keys`), and its hybrid servers' tier sizes, a 1:7 split of the footprint estimate
/// (17 + 125 MiB).
const FOGCACHED_LATENCY: Preset = Preset {
    keys: Some(100_000),
    value_bytes: 1024,
    dram_mib: 17,
    slow_mib: Some(125),
    ops: 4_000_000,
    distribution: DistributionArg::Hotset,
    hot_keys: 5000,
};

/// The dataset is this many times the DRAM tier by default (ISSUE 3 item 7).
const DATASET_TO_DRAM_DEFAULT: u64 = 4;
/// Default slow tier: one DRAM size more than the dataset, so that slab-class rounding
/// never forces slow-tier evictions and misses do not blur the placement numbers.
const SLOW_TO_DRAM_DEFAULT: u64 = DATASET_TO_DRAM_DEFAULT + 1;

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fogsim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn config_from(cli: &Cli) -> SimConfig {
    let preset = match cli.preset {
        None => &DEFAULTS,
        Some(PresetArg::FogcachedLatency) => &FOGCACHED_LATENCY,
    };
    let value_bytes = cli.value_bytes.unwrap_or(preset.value_bytes);
    let dram_mib = cli.dram_mib.unwrap_or(preset.dram_mib);
    let keys = cli.keys.or(preset.keys).unwrap_or_else(|| {
        SimConfig::keys_for_dram_ratio(dram_mib, value_bytes, DATASET_TO_DRAM_DEFAULT)
    });
    let distribution = match cli.distribution.unwrap_or(preset.distribution) {
        DistributionArg::Zipf => Distribution::Zipf { theta: cli.theta },
        DistributionArg::Hotset => Distribution::HotSet {
            hot_first: cli.hot_first.unwrap_or(keys / 2),
            hot_keys: cli.hot_keys.unwrap_or(preset.hot_keys),
        },
        DistributionArg::Uniform => Distribution::Uniform,
    };
    SimConfig {
        keys,
        value_bytes,
        dram_mib,
        slow_mib: cli
            .slow_mib
            .or(preset.slow_mib)
            .unwrap_or(dram_mib.saturating_mul(SLOW_TO_DRAM_DEFAULT)),
        ops: cli.ops.unwrap_or(preset.ops),
        windows: cli.windows,
        distribution,
        update_ratio: cli.update_ratio,
        seed: cli.seed,
        ops_per_s: cli.ops_per_s,
        ticks_per_s: cli.ticks_per_s,
        crawler_interval_s: cli.crawler_interval_s,
        tuning: sim::Tuning {
            promotion_margin: cli.promotion_margin,
            access_period_requests: cli.access_period,
        },
    }
}

fn policies_from(cli: &Cli) -> anyhow::Result<Vec<Policy>> {
    let names: Vec<&str> = if cli.policy_compare {
        sim::policy::COMPARE.to_vec()
    } else if cli.no_migration {
        vec!["no-migration"]
    } else if cli.policy.is_empty() {
        vec!["dual-lru"]
    } else {
        cli.policy.iter().map(String::as_str).collect()
    };
    let policies = Policy::parse_list(&names)?;
    anyhow::ensure!(!policies.is_empty(), "--policy names no policy");
    Ok(policies)
}

fn real_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = config_from(&cli);
    let policies = policies_from(&cli)?;
    println!("{}", report::header(&config, &policies));
    let runs = sim::run_policies(&config, &policies)?;
    for run in &runs {
        println!("{}", report::table(run));
    }
    print!("{}", report::comparison(&config, &runs));
    if let Some(path) = &cli.json {
        std::fs::write(path, report::json(&config, &runs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &cli.csv {
        std::fs::write(path, report::csv(&runs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
