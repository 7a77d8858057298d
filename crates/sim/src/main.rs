//! `fogsim`: the tier-placement experiment of ISSUE 3 item 7, deterministic for a seed,
//! for one or more placement policies. Prints a table per policy and a comparison;
//! `--json`/`--csv` write the same numbers to files.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use sim::kernel_tiering::KernelTiering;
use sim::{output, Distribution, PhaseChange, PolicySetting, SimConfig, ValueSizes};

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
    #[arg(long, conflicts_with = "value_sizes")]
    value_bytes: Option<usize>,
    /// Value sizes: `1000` (fixed), `1-8192` (uniform, inclusive) or `normal:MEAN:DEV`
    /// (clamped to 1..=2 x MEAN); each key keeps its size.
    #[arg(long, value_name = "SPEC")]
    value_sizes: Option<String>,
    /// HMCached's dataset Uni-X-Y: X million keys (times --scale), values uniform from 1
    /// to Y KiB (e.g. uni-3-8k); sets --keys and --value-sizes, and the tier sizes from
    /// --dram-fraction unless given.
    #[arg(long, value_name = "uni-X-Y", conflicts_with_all = ["keys", "value_bytes", "value_sizes", "preset"])]
    dataset: Option<String>,
    /// Key counts of --dataset and --phase-change are the paper's times this.
    #[arg(long, default_value_t = 0.1)]
    scale: f64,
    /// DRAM as a fraction of the data (`1/4`, `0.25`) with --dataset [default: 1/4].
    #[arg(long, value_name = "FRACTION")]
    dram_fraction: Option<String>,
    /// HMCached section 4.6: two datasets of 1 million keys each (times --scale), A with
    /// values normal(4 KiB, 1 KiB), B uniform 1..8 KiB, the run in PHASES phases that
    /// request A, B, A, ... in turn; DRAM 1 GiB (times --scale) unless given.
    #[arg(long, value_name = "PHASES", conflicts_with_all = ["keys", "value_bytes", "value_sizes", "preset", "dataset"])]
    phase_change: Option<u32>,
    /// The hotspot policy's benefit-aware DRAM reassignment off (the engine's
    /// `--no-benefit-reassign`; HMCached-Calcific in section 4.6).
    #[arg(long)]
    no_benefit_reassign: bool,
    /// The engine's slab automover: 0 off (with --no-benefit-reassign no DRAM page ever
    /// changes class: HMCached-Calcific), 1 memcached's rules [default: the engine's]
    #[arg(long, value_name = "0|1|2")]
    slab_automove: Option<u32>,
    /// kernel-tiering: promotion rate limit in MB per simulated second
    /// (`numa_balancing_promote_rate_limit_MBps`).
    #[arg(long, default_value_t = KernelTiering::default().promote_rate_limit_mbps)]
    kernel_promote_mbps: u64,
    /// kernel-tiering: MB of address space the NUMA-balancing scanner unmaps per period.
    #[arg(long, default_value_t = KernelTiering::default().scan_mb)]
    kernel_scan_mb: u64,
    /// kernel-tiering: the scanner's period in simulated milliseconds.
    #[arg(long, default_value_t = KernelTiering::default().scan_period_ms)]
    kernel_scan_period_ms: u64,
    /// kernel-tiering: hint-fault latency below which a page is hot, in simulated ms.
    #[arg(long, default_value_t = KernelTiering::default().hot_threshold_ms)]
    kernel_hot_threshold_ms: u64,
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
    /// Placement policies to run, in order: repeat the option or give a comma list. Any
    /// engine policy (as fogcached's --policy names them), no-migration or kernel-tiering;
    /// an unknown name lists them all [default: dual-lru]
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
    /// A flash tier under the engine, of this size (`512M`, `2G`, or bytes): the
    /// engine's evictions go down to it and its misses are looked up there (issue 26's
    /// model). 0 = none, the run exactly as without this option. With it, --slow-mib 0
    /// is allowed (DRAM + flash).
    #[arg(long, value_name = "SIZE", default_value = "0")]
    flash_size: String,
    /// Bytes of a flash segment (and of the DRAM write buffer) [default: 4M]
    #[arg(long, value_name = "SIZE")]
    flash_segment_bytes: Option<String>,
    /// Which segment a full device reclaims: fifo (the oldest) or least-live (the
    /// fewest live bytes) [default: the chosen default, docs/results/sim-flash.md]
    #[arg(long, value_name = "fifo|least-live")]
    flash_reclaim: Option<String>,
    /// What the engine's evictions send down: all, or fetched (only items read since
    /// they were stored).
    #[arg(long, value_name = "all|fetched")]
    flash_admit: Option<String>,
    /// Which flash hits are copied up into the engine: always, second-hit (an item
    /// already read on flash since it was written), never.
    #[arg(long, value_name = "always|second-hit|never")]
    flash_recache: Option<String>,
    /// Live items of a reclaimed segment that go back to the log: hot (read since
    /// written) or never.
    #[arg(long, value_name = "hot|never")]
    flash_reinsert: Option<String>,
    /// Reinsertion fills at most this percentage of a new segment (write amplification
    /// from reinsertion is at most 100 / (100 - PCT)).
    #[arg(long, value_name = "PCT")]
    flash_reinsert_max_pct: Option<u64>,
}

/// `512M`, `4m`, `2G`, `65536`: bytes, with a binary K/M/G suffix.
fn parse_size(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| anyhow::anyhow!("a size is bytes with an optional K, M or G, got {text:?}"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| anyhow::anyhow!("size {text:?} is too large"))
}

fn flash_from(cli: &Cli) -> anyhow::Result<Option<sim::flash::FlashConfig>> {
    use sim::flash::{Admit, FlashConfig, Recache, Reclaim, Reinsert};
    let size_bytes = parse_size(&cli.flash_size)?;
    if size_bytes == 0 {
        anyhow::ensure!(
            cli.flash_segment_bytes.is_none()
                && cli.flash_reclaim.is_none()
                && cli.flash_admit.is_none()
                && cli.flash_recache.is_none()
                && cli.flash_reinsert.is_none()
                && cli.flash_reinsert_max_pct.is_none(),
            "--flash-* options need --flash-size"
        );
        return Ok(None);
    }
    let mut config = FlashConfig::new(size_bytes);
    if let Some(s) = &cli.flash_segment_bytes {
        config.segment_bytes = parse_size(s)?;
    }
    let err = anyhow::Error::msg;
    if let Some(s) = &cli.flash_reclaim {
        config.reclaim = Reclaim::parse(s).map_err(err)?;
    }
    if let Some(s) = &cli.flash_admit {
        config.admit = Admit::parse(s).map_err(err)?;
    }
    if let Some(s) = &cli.flash_recache {
        config.recache = Recache::parse(s).map_err(err)?;
    }
    if let Some(s) = &cli.flash_reinsert {
        config.reinsert = Reinsert::parse(s).map_err(err)?;
    }
    if let Some(pct) = cli.flash_reinsert_max_pct {
        config.reinsert_max_pct = pct;
    }
    Ok(Some(config))
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

/// fogbench's `fogcached-latency` (crates/bench/src/reproduce/fogcached_latency.rs): 100 000 keys of
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

/// `1/4`, `0.25`: a fraction in (0, 1].
fn parse_fraction(text: &str) -> anyhow::Result<f64> {
    engine::parse_fraction(text)
        .ok_or_else(|| anyhow::anyhow!("--dram-fraction must be in (0, 1], got {text:?}"))
}

/// `uni-3-8k`: (keys in millions, largest value in bytes).
fn parse_uni(name: &str) -> anyhow::Result<(f64, usize)> {
    let lower = name.to_ascii_lowercase();
    let parts: Vec<&str> = lower.split('-').collect();
    let parsed = match parts.as_slice() {
        ["uni", millions, kib] => kib
            .strip_suffix('k')
            .and_then(|k| k.parse::<usize>().ok())
            .zip(millions.parse::<f64>().ok()),
        _ => None,
    };
    let Some((kib, millions)) = parsed else {
        anyhow::bail!(
            "--dataset must be uni-X-Yk (X million keys, values 1 to Y KiB), got {name:?}"
        );
    };
    anyhow::ensure!(millions > 0.0 && kib > 0, "--dataset {name:?} is empty");
    Ok((millions, kib * 1024))
}

/// MiB that hold `bytes`, rounded up.
fn mib_of(bytes: f64) -> u64 {
    (bytes / MIB as f64).ceil() as u64
}

const MIB: u64 = 1024 * 1024;

/// Slow tier for a dataset of `data_bytes`: room for all of it with slab-class rounding
/// (up to 25 % for factor 1.25) and a partial page per class, so that nothing is evicted.
fn slow_mib_for(data_bytes: f64) -> u64 {
    mib_of(data_bytes * 1.3) + 64
}

fn config_from(cli: &Cli) -> anyhow::Result<SimConfig> {
    let preset = match cli.preset {
        None => &DEFAULTS,
        Some(PresetArg::FogcachedLatency) => &FOGCACHED_LATENCY,
    };
    anyhow::ensure!(cli.scale > 0.0, "--scale must be above 0");
    let mut value_sizes = match (&cli.value_sizes, cli.value_bytes) {
        (Some(spec), _) => ValueSizes::parse(spec).map_err(anyhow::Error::msg)?,
        (None, Some(n)) => ValueSizes::Fixed(n),
        (None, None) => ValueSizes::Fixed(preset.value_bytes),
    };
    let mut keys = cli.keys.or(preset.keys);
    let mut dram_mib = cli.dram_mib;
    let mut slow_mib = cli.slow_mib.or(preset.slow_mib);
    let mut phase_change = None;
    let scaled = |millions: f64| ((millions * 1e6 * cli.scale).round() as u64).max(1);
    if let Some(name) = &cli.dataset {
        let (millions, max_bytes) = parse_uni(name)?;
        let n = scaled(millions);
        value_sizes = ValueSizes::Uniform {
            min: 1,
            max: max_bytes,
        };
        let data = SimConfig::dataset_bytes_estimate(n, &value_sizes) as f64;
        let fraction = parse_fraction(cli.dram_fraction.as_deref().unwrap_or("1/4"))?;
        keys = Some(n);
        dram_mib = dram_mib.or(Some(mib_of(data * fraction)));
        slow_mib = slow_mib.or(Some(slow_mib_for(data)));
    } else if let Some(phases) = cli.phase_change {
        anyhow::ensure!(phases > 0, "--phase-change needs at least one phase");
        let n = scaled(1.0);
        value_sizes = ValueSizes::parse("normal:4096:1024").map_err(anyhow::Error::msg)?;
        let second = ValueSizes::Uniform { min: 1, max: 8192 };
        let data = (SimConfig::dataset_bytes_estimate(n, &value_sizes)
            + SimConfig::dataset_bytes_estimate(n, &second)) as f64;
        keys = Some(n);
        dram_mib = dram_mib.or(Some(mib_of(1024.0 * MIB as f64 * cli.scale)));
        slow_mib = slow_mib.or(Some(slow_mib_for(data)));
        phase_change = Some(PhaseChange {
            keys: n,
            value_sizes: second,
            phases,
        });
    } else {
        anyhow::ensure!(
            cli.dram_fraction.is_none(),
            "--dram-fraction goes with --dataset"
        );
    }
    let dram_mib = dram_mib.unwrap_or(preset.dram_mib);
    let keys = keys.unwrap_or_else(|| {
        SimConfig::keys_for_dram_ratio(
            dram_mib,
            value_sizes.mean_bytes() as usize,
            DATASET_TO_DRAM_DEFAULT,
        )
    });
    let distribution = match cli.distribution.unwrap_or(preset.distribution) {
        DistributionArg::Zipf => Distribution::Zipf { theta: cli.theta },
        DistributionArg::Hotset => Distribution::HotSet {
            hot_first: cli.hot_first.unwrap_or(keys / 2),
            hot_keys: cli.hot_keys.unwrap_or(preset.hot_keys),
        },
        DistributionArg::Uniform => Distribution::Uniform,
    };
    Ok(SimConfig {
        keys,
        value_sizes,
        phase_change,
        dram_mib,
        slow_mib: slow_mib.unwrap_or(dram_mib.saturating_mul(SLOW_TO_DRAM_DEFAULT)),
        ops: cli.ops.unwrap_or(preset.ops),
        windows: cli.windows,
        distribution,
        update_ratio: cli.update_ratio,
        seed: cli.seed,
        ops_per_s: cli.ops_per_s,
        ticks_per_s: cli.ticks_per_s,
        crawler_interval_s: cli.crawler_interval_s,
        engine_overrides: sim::EngineOverrides {
            promotion_margin: cli.promotion_margin,
            access_period_requests: cli.access_period,
            benefit_reassign: cli.no_benefit_reassign.then_some(false),
            slab_automove: cli.slab_automove,
        },
        kernel: KernelTiering {
            scan_period_ms: cli.kernel_scan_period_ms,
            scan_mb: cli.kernel_scan_mb,
            hot_threshold_ms: cli.kernel_hot_threshold_ms,
            promote_rate_limit_mbps: cli.kernel_promote_mbps,
        },
        flash: flash_from(cli)?,
    })
}

fn policies_from(cli: &Cli) -> anyhow::Result<Vec<PolicySetting>> {
    let names: Vec<&str> = if cli.policy_compare {
        sim::policy::COMPARE.to_vec()
    } else if cli.no_migration {
        vec!["no-migration"]
    } else if cli.policy.is_empty() {
        vec!["dual-lru"]
    } else {
        cli.policy.iter().map(String::as_str).collect()
    };
    let policies = PolicySetting::parse_list(&names)?;
    anyhow::ensure!(!policies.is_empty(), "--policy names no policy");
    Ok(policies)
}

fn real_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = config_from(&cli)?;
    let policies = policies_from(&cli)?;
    println!("{}", output::header(&config, &policies));
    let runs = sim::run_policies(&config, &policies)?;
    for run in &runs {
        println!("{}", output::table(run));
    }
    print!("{}", output::comparison(&config, &runs));
    if let Some(path) = &cli.json {
        std::fs::write(path, output::json(&config, &runs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &cli.csv {
        std::fs::write(path, output::csv(&runs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
