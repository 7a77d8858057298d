//! `fogbench`: command-line front end of the load generator.
#![forbid(unsafe_code)]

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use bench::proto::Protocol;
use bench::reproduce::{Experiment, ReproduceOptions};
use bench::run_report::series_csv;
use bench::runner::{Origin, RunConfig, SERVERS_MAX};
use bench::servers::Programs;
use bench::workload::{KeyDistribution, ValueSize};
use bench::{run_benchmark, BenchOptions};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "fogbench",
    version,
    about = "Load generator for memcached-compatible servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a load (optionally after a YCSB-style load phase) against one or more servers.
    Run(RunArgs),
    /// Re-run a seed paper's experiment: start every server it needs on loopback, run
    /// the load, stop them, and write a report directory (REPORT.md, SVG plots, raw JSON).
    Reproduce(ReproduceArgs),
    /// A delay line on loopback (the edge-cloud experiment's "cloud 1 ms away"): forwards
    /// to --target, holding every byte --one-way-us each way; prints its address, then
    /// runs until killed.
    DelayLine(DelayLineArgs),
}

#[derive(clap::Args, Debug)]
struct DelayLineArgs {
    /// Where to forward, host:port.
    #[arg(long)]
    target: std::net::SocketAddr,
    /// Delay of each direction, in microseconds.
    #[arg(long, default_value_t = 500)]
    one_way_us: u64,
}

fn delay_line(args: &DelayLineArgs) -> anyhow::Result<bool> {
    let proxy = delay_proxy::DelayProxy::start(
        args.target,
        std::time::Duration::from_micros(args.one_way_us),
    )?;
    println!("{}", proxy.addr());
    loop {
        std::thread::park();
    }
}

#[derive(clap::Args, Debug)]
struct ReproduceArgs {
    /// fogcached-latency (seed 000), ycsb (seed 004), edge-cloud (seeds 003/001),
    /// hmcached (seed 002), or all.
    experiment: String,
    /// Scaled down: each experiment takes a minute or two instead of many.
    #[arg(long)]
    quick: bool,
    /// Report directory; each experiment writes <out>/<experiment>/.
    #[arg(long, default_value = "fogbench-report")]
    out: PathBuf,
    /// Directory for the slow-tier pool files and memcached's extstore file (the "same
    /// medium" for both); a temporary directory when absent.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The fogcached binary (default: next to fogbench, else on PATH).
    #[arg(long)]
    fogcached: Option<PathBuf>,
    /// The memcached binary (default: /usr/bin/memcached, else on PATH).
    #[arg(long)]
    memcached: Option<PathBuf>,
    /// Emulated slow-tier cost of fogcached's slow tier (see fogcached --help)
    /// [default: hmcached for the hmcached experiment, optane for the others]
    #[arg(long)]
    slow_cost: Option<String>,
    /// Length of every run phase in seconds, instead of the experiment's own.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Client connections, instead of the experiment's own.
    #[arg(long)]
    connections: Option<usize>,
    /// Client threads.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Worker threads of every server (-t).
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
}

fn reproduce(args: &ReproduceArgs) -> anyhow::Result<bool> {
    let experiments = Experiment::parse(&args.experiment)?;
    if let Some(duration_s) = args.duration_s {
        if !(duration_s > 0.0 && duration_s <= 86_400.0) {
            bail!("--duration-s must be in (0, 86400]");
        }
    }
    if matches!(args.connections, Some(c) if c == 0 || c > 65_536) {
        bail!("--connections must be in [1, 65536]");
    }
    if !(1..=1024).contains(&args.client_threads) || !(1..=1024).contains(&args.server_threads) {
        bail!("--client-threads and --server-threads must be in [1, 1024]");
    }
    let options = ReproduceOptions {
        out_dir: args.out.clone(),
        data_dir: args.data_dir.clone(),
        programs: Programs::locate(args.fogcached.clone(), args.memcached.clone())?,
        quick: args.quick,
        slow_cost: args.slow_cost.clone(),
        duration_override: args.duration_s.map(Duration::from_secs_f64),
        connections_override: args.connections,
        client_threads: args.client_threads,
        server_threads: args.server_threads,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        progress: !args.quiet,
    };
    for dir in bench::reproduce::reproduce(&experiments, &options)? {
        println!("wrote {}", dir.join("REPORT.md").display());
    }
    Ok(true)
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum ProtocolArg {
    Text,
    Meta,
    Binary,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum DistributionArg {
    Uniform,
    /// Scrambled zipfian (YCSB-style) with --zipf-theta; --seed draws the scramble.
    Zipf,
    /// Every other request from the hot range [--hot-first, +--hot-keys) (seed 000, 5.2).
    Hotset,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Server address, host:port. Several servers: a comma-separated list and/or the
    /// option repeated; keys are then spread over them by ketama consistent hashing
    /// (MD5, 160 points per server, as libmemcached and twemproxy do).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:11211")]
    server: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    protocol: ProtocolArg,
    /// Connections, spread evenly over --threads.
    #[arg(long, default_value_t = 256)]
    connections: usize,
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Length of the run phase in seconds (fractions allowed).
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Open loop at this total request rate (per second); closed loop when absent.
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop: most requests in flight per connection.
    #[arg(long, default_value_t = 64)]
    pipeline_max: usize,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    #[arg(long, value_enum, default_value = "uniform")]
    distribution: DistributionArg,
    #[arg(long, default_value_t = 0.99)]
    zipf_theta: f64,
    #[arg(long, default_value_t = 0)]
    hot_first: u64,
    #[arg(long, default_value_t = 5000)]
    hot_keys: u64,
    /// Value size in bytes: "1024", a uniform range "64-4096", or "@path" for sizes
    /// drawn from a file (as --value-size-file).
    #[arg(long, default_value = "1024")]
    value_size: String,
    /// Draw value sizes from this file: one "size" or "size weight" per line (weights
    /// default to 1; "#" starts a comment), i.e. an empirical distribution.
    #[arg(long, conflicts_with = "value_size")]
    value_size_file: Option<PathBuf>,
    /// Share of gets in the run phase (the rest are sets). After --load every key
    /// exists, so the sets are what YCSB calls updates (e.g. workload A: --get-ratio 0.5,
    /// workload B: 0.95, workload C: 1).
    #[arg(long, default_value_t = 0.9)]
    get_ratio: f64,
    /// Expiry time of every set, in seconds (0: never).
    #[arg(long, default_value_t = 0)]
    ttl_s: u32,
    #[arg(long, default_value = "fb:")]
    key_prefix: String,
    /// Set every key once (closed loop) before the run phase.
    #[arg(long)]
    load: bool,
    /// Longest the load phase may take, in seconds.
    #[arg(long, default_value_t = 600)]
    load_timeout_s: u64,
    /// Check every value read against the pattern fogbench writes (so the keys under
    /// --key-prefix must have been written by fogbench, e.g. with --load).
    #[arg(long)]
    verify: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Do not poll the servers' stats once a second.
    #[arg(long)]
    no_stats: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Edge-cloud look-aside: --server is the edge (with several servers, each key's edge
    /// is its ketama server); a get that misses there is read from
    /// this origin (host:port) after --origin-delay-us, then set into the edge. With
    /// --load, the load phase fills the origin instead of the edge.
    #[arg(long)]
    origin: Option<String>,
    /// Delay added in the client before each origin fetch, in microseconds.
    #[arg(long, default_value_t = 1000, requires = "origin")]
    origin_delay_us: u64,
    /// Write the full report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the run phase's per-second series as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

fn resolve(server: &str) -> anyhow::Result<SocketAddr> {
    server
        .to_socket_addrs()
        .with_context(|| format!("resolving {server}"))?
        .next()
        .with_context(|| format!("{server} resolves to no address"))
}

fn config_from(args: &RunArgs) -> anyhow::Result<RunConfig> {
    if !(args.duration_s > 0.0 && args.duration_s <= 86_400.0) {
        bail!("--duration-s must be in (0, 86400]");
    }
    if args.load_timeout_s == 0 || args.load_timeout_s > 86_400 {
        bail!("--load-timeout-s must be in [1, 86400]");
    }
    if !(0.0..=1.0).contains(&args.get_ratio) {
        bail!("--get-ratio must be in [0, 1]");
    }
    if let Some(rate) = args.rate {
        if !(0.001..=1e9).contains(&rate) {
            bail!("--rate must be in [0.001, 1e9] requests per second");
        }
    }
    if args.connections == 0
        || args.connections > 65_536
        || args.threads == 0
        || args.threads > 1024
    {
        bail!("--connections must be in [1, 65536] and --threads in [1, 1024]");
    }
    if args.pipeline_max == 0 || args.pipeline_max > 65_536 {
        bail!("--pipeline-max must be in [1, 65536]");
    }
    if args.key_prefix.bytes().any(|b| b <= b' ' || b == 0x7f) || args.key_prefix.len() > 200 {
        bail!("--key-prefix must be at most 200 bytes without spaces or control characters");
    }
    let distribution = match args.distribution {
        DistributionArg::Uniform => KeyDistribution::uniform(args.keys)?,
        DistributionArg::Zipf => {
            KeyDistribution::scrambled_zipfian(args.keys, args.zipf_theta, args.seed)?
        }
        DistributionArg::Hotset => {
            KeyDistribution::alternating_hot_set(args.keys, args.hot_first, args.hot_keys)?
        }
    };
    if args.origin_delay_us > 60_000_000 {
        bail!("--origin-delay-us must be at most 60000000 (60 s)");
    }
    let origin = match &args.origin {
        Some(origin) => Some(Origin {
            server: resolve(origin)?,
            delay: Duration::from_micros(args.origin_delay_us),
        }),
        None => None,
    };
    let mut servers = Vec::with_capacity(args.server.len());
    for server in &args.server {
        let addr = resolve(server.trim())?;
        if servers.contains(&addr) {
            bail!("--server {server} is listed twice");
        }
        servers.push(addr);
    }
    if servers.is_empty() || servers.len() > SERVERS_MAX {
        bail!("--server takes between 1 and {SERVERS_MAX} servers");
    }
    let value_size = match (&args.value_size_file, args.value_size.strip_prefix('@')) {
        (Some(path), _) => ValueSize::from_file(path)?,
        (None, Some(path)) => ValueSize::from_file(path.as_ref())?,
        (None, None) => ValueSize::parse(&args.value_size)?,
    };
    Ok(RunConfig {
        servers,
        protocol: match args.protocol {
            ProtocolArg::Text => Protocol::Text,
            ProtocolArg::Meta => Protocol::Meta,
            ProtocolArg::Binary => Protocol::Binary,
        },
        connections: args.connections,
        threads: args.threads,
        duration: Duration::from_secs_f64(args.duration_s),
        rate_per_s: args.rate,
        distribution,
        value_size,
        get_ratio: args.get_ratio,
        ttl_s: args.ttl_s,
        key_prefix: args.key_prefix.clone(),
        verify: args.verify,
        seed: args.seed,
        pipeline_max: args.pipeline_max,
        load_timeout: Duration::from_secs(args.load_timeout_s),
        origin,
    })
}

fn run(args: &RunArgs) -> anyhow::Result<bool> {
    let config = config_from(args)?;
    let options = BenchOptions {
        load: args.load,
        poll_stats: !args.no_stats,
        progress: !args.quiet,
    };
    let report = run_benchmark(&config, options)?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).context("encoding the report")?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, series_csv(&report.run))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(load) = &report.load {
        println!(
            "load: {} sets in {:.2} s ({:.0} ops/s)",
            load.ops, load.elapsed_s, load.ops_per_s
        );
    }
    let run = &report.run;
    println!(
        "run: {} ops in {:.2} s ({:.0} ops/s), hits {} misses {} errors {} verify failures {} connection failures {}",
        run.ops,
        run.elapsed_s,
        run.ops_per_s,
        run.counts.hits,
        run.counts.misses,
        run.counts.error_replies,
        run.counts.verify_failures,
        run.connection_failures
    );
    for (op, latency) in &run.latency {
        println!(
            "  {op:<4} n={:<10} p50 {:>9.1} us  p90 {:>9.1} us  p99 {:>9.1} us  p99.9 {:>9.1} us  max {:>9.1} us",
            latency.count, latency.p50_us, latency.p90_us, latency.p99_us, latency.p999_us, latency.max_us
        );
    }
    if let Some(la) = &run.lookaside {
        let c = &la.counts;
        println!(
            "  look-aside via {} (origin delay {} us): edge hit ratio {:.4}, origin fetches {} (hits {} misses {}), edge fills {}, origin fills {}, fill failures {}",
            la.origin, la.origin_delay_us, la.edge_hit_ratio, c.origin_fetches, c.origin_hits,
            c.origin_misses, c.edge_fills, c.origin_fills, c.fill_failures
        );
        for (name, latency) in [
            ("edge hit", &la.edge_hit_latency),
            ("via origin", &la.origin_served_latency),
        ] {
            println!(
                "  {name:<10} n={:<10} p50 {:>9.1} us  p90 {:>9.1} us  p99 {:>9.1} us  p99.9 {:>9.1} us  max {:>9.1} us",
                latency.count, latency.p50_us, latency.p90_us, latency.p99_us, latency.p999_us, latency.max_us
            );
        }
    }
    if run.open_loop_unsent > 0 || run.unanswered > 0 {
        println!(
            "  open loop: {} sends held back (pipeline full: the server did not keep up), {} requests unanswered",
            run.open_loop_unsent, run.unanswered
        );
    }
    if let Some(error) = &run.first_error {
        println!("  first error: {error}");
    }
    // A run with broken values or lost connections is a failed run for scripts.
    Ok(run.counts.verify_failures == 0 && run.connection_failures == 0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(args) => run(args),
        Command::Reproduce(args) => reproduce(args),
        Command::DelayLine(args) => delay_line(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(error) => {
            eprintln!("fogbench: {error:#}");
            ExitCode::FAILURE
        }
    }
}
