//! `fogsim`: the Dual-LRU placement experiment of ISSUE 3 item 7, deterministic for a
//! seed. Prints a table per run; `--json`/`--csv` write the same numbers to files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sim::report;
use sim::SimConfig;

#[derive(Parser, Debug)]
#[command(
    name = "fogsim",
    about = "Drive the fogcached engine with a seeded zipfian workload (no network) and count where hits are served",
    long_about = "Drives the fogcached engine in one process, single-threaded, with a manual clock: a \
load phase writes every key once, then a run phase of scrambled-zipfian reads (and optional \
updates). The engine's own maintenance steps (per-tier LRU maintainer, migration, slab automover) \
run at a fixed cadence of simulated time. Reported per window: share of get hits served from \
DRAM, slow-tier 64-byte lines read per request, promotions, demotions."
)]
struct Cli {
    /// Keys in the dataset [default: as many as fill 4x the DRAM tier]
    #[arg(long)]
    keys: Option<u64>,
    /// Bytes of every value.
    #[arg(long, default_value_t = 1000)]
    value_bytes: usize,
    /// DRAM tier size in MiB.
    #[arg(long, default_value_t = 64)]
    dram_mib: u64,
    /// Slow tier size in MiB [default: 5x the DRAM tier, room for the whole dataset]
    #[arg(long)]
    slow_mib: Option<u64>,
    /// Requests in the run phase (after the load phase).
    #[arg(long, default_value_t = 8_000_000)]
    ops: u64,
    /// Measurement windows the run phase is split into.
    #[arg(long, default_value_t = 10)]
    windows: u32,
    /// Zipf exponent of the key popularity.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
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
    /// Run the workload twice: with migration and with `--no-migration`.
    #[arg(long)]
    policy_compare: bool,
    /// Run only with migration off (the papers' "without dynamic relocation").
    #[arg(long, conflicts_with = "policy_compare")]
    no_migration: bool,
    /// Write the configuration and every window as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write every window as CSV to this file.
    #[arg(long, value_name = "PATH")]
    csv: Option<PathBuf>,
}

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

fn real_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = SimConfig {
        keys: cli.keys.unwrap_or_else(|| {
            SimConfig::keys_for_dram_ratio(cli.dram_mib, cli.value_bytes, DATASET_TO_DRAM_DEFAULT)
        }),
        value_bytes: cli.value_bytes,
        dram_mib: cli.dram_mib,
        slow_mib: cli
            .slow_mib
            .unwrap_or(cli.dram_mib.saturating_mul(SLOW_TO_DRAM_DEFAULT)),
        ops: cli.ops,
        windows: cli.windows,
        theta: cli.theta,
        update_ratio: cli.update_ratio,
        seed: cli.seed,
        ops_per_s: cli.ops_per_s,
        ticks_per_s: cli.ticks_per_s,
        crawler_interval_s: cli.crawler_interval_s,
    };
    println!(
        "fogsim: {} keys x {} B values, DRAM {} MiB, slow {} MiB, {} requests in {} windows, zipf theta {}, update ratio {}, seed {}, {} requests/simulated s, {} ticks/s",
        config.keys,
        config.value_bytes,
        config.dram_mib,
        config.slow_mib,
        config.ops,
        config.windows,
        config.theta,
        config.update_ratio,
        config.seed,
        config.ops_per_s,
        config.ticks_per_s,
    );
    let mut runs = Vec::new();
    if cli.policy_compare {
        let c = sim::compare(&config)?;
        runs.push(c.with_migration);
        runs.push(c.without_migration);
    } else {
        runs.push(sim::run(&config, !cli.no_migration)?);
    }
    for run in &runs {
        println!("{}", report::table(run));
    }
    let with = runs.iter().find(|r| r.migration_enabled);
    let without = runs.iter().find(|r| !r.migration_enabled);
    if let Some(with) = with {
        print!("{}", report::summary(&config, with, without));
    }
    let refs: Vec<&sim::RunReport> = runs.iter().collect();
    if let Some(path) = &cli.json {
        std::fs::write(path, report::json(&config, &refs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &cli.csv {
        std::fs::write(path, report::csv(&refs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
