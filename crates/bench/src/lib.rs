//! fogbench: a load generator for memcached-compatible servers. It talks to servers over
//! the wire only (text, meta and binary protocols), closed or open loop, spreads keys over
//! several servers with ketama consistent hashing, and reports latencies per operation
//! type from HdrHistograms plus a per-second time series that includes the servers' own
//! `stats` counters.

/// Ketama key placement (the `ketama` crate, shared with fogcached's `--upstream`).
pub use ketama;
pub mod plot;
pub mod proto;
pub mod reproduce;
pub mod run_report;
pub mod runner;
pub mod servers;
pub mod timer;
pub mod workload;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::run_report::{sum_samples, LookasideReport, PhaseReport, Report, ServerSample};
use crate::runner::{run_phase, Live, Phase, RunConfig, StatsPoller};

/// Options of a benchmark beyond the load itself.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// YCSB-style load phase (set every key once) before the run phase.
    pub load: bool,
    /// Poll the servers' `stats` once a second during the run phase.
    pub poll_stats: bool,
    /// Show a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

/// A progress bar on stderr with `template` (indicatif's syntax), or a hidden one.
fn progress_bar(show: bool, length: u64, template: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
    // The templates are constants; a bad one would only lose the styling.
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// One `stats` connection per server; a server whose poll fails is not polled again (a
/// reply cut by a timeout would desynchronise the connection), its samples are absent.
struct Pollers {
    servers: Vec<(SocketAddr, Option<StatsPoller>)>,
}

impl Pollers {
    fn connect(servers: &[SocketAddr]) -> Pollers {
        Pollers {
            servers: servers
                .iter()
                .map(|&server| (server, StatsPoller::connect(server).ok()))
                .collect(),
        }
    }

    /// Samples every server: the sum over the servers (absent unless all of them
    /// answered, so that a missing server never reads as a drop) and, with several
    /// servers, each one's sample keyed by address.
    fn sample(&mut self) -> (Option<ServerSample>, Option<BTreeMap<String, ServerSample>>) {
        let mut answered = BTreeMap::new();
        for (server, poller) in &mut self.servers {
            match poller.as_mut().map(StatsPoller::sample) {
                Some(Ok(sample)) => {
                    answered.insert(server.to_string(), sample);
                }
                Some(Err(_)) => *poller = None,
                None => {}
            }
        }
        let all = answered.len() == self.servers.len();
        if self.servers.len() == 1 {
            return (answered.into_values().next(), None);
        }
        let sum = all.then(|| sum_samples(answered.values()));
        (sum, Some(answered))
    }
}

/// Runs the optional load phase, then the run phase, and builds the report.
pub fn run_benchmark(config: &RunConfig, options: BenchOptions) -> anyhow::Result<Report> {
    let live = Live::default();
    let show = options.progress && std::io::stderr().is_terminal();
    let load = if options.load {
        // In look-aside mode the load phase fills the origin (the "database"); the edge
        // starts cold and is filled by the run's misses.
        let load_config = match &config.origin {
            Some(origin) => RunConfig {
                servers: vec![origin.server],
                origin: None,
                ..config.clone()
            },
            None => config.clone(),
        };
        let bar = progress_bar(
            show,
            config.distribution.keys(),
            "load {elapsed_precise} [{wide_bar}] {pos}/{len} keys",
        );
        let (measurements, elapsed) = run_phase(&load_config, Phase::Load, &live, |_, live| {
            bar.set_position(live.completed_ops.load(Ordering::Relaxed));
        })?;
        bar.set_position(measurements.counts.ops());
        bar.finish();
        Some(PhaseReport::build(
            &measurements,
            elapsed.as_secs_f64(),
            &[],
        )?)
    } else {
        None
    };

    let mut pollers = options
        .poll_stats
        .then(|| Pollers::connect(&config.servers));
    let mut samples: Vec<Option<ServerSample>> = Vec::new();
    let mut per_server: Vec<Option<BTreeMap<String, ServerSample>>> = Vec::new();
    let bar = progress_bar(
        show,
        config.duration.as_secs_f64().ceil() as u64,
        "run  {elapsed_precise} [{wide_bar}] {pos}/{len} s, {msg}",
    );
    let mut last_ops = 0;
    let (measurements, elapsed) = run_phase(config, Phase::Run, &live, |second, live| {
        // Sample `second` closes second index `second - 1`.
        let (sum, each) = match pollers.as_mut() {
            Some(pollers) => pollers.sample(),
            None => (None, None),
        };
        if samples.len() < second {
            samples.resize(second - 1, None);
            samples.push(sum);
            per_server.resize(second - 1, None);
            per_server.push(each);
        }
        let done = live.completed_ops.load(Ordering::Relaxed);
        bar.set_position(second as u64);
        bar.set_message(format!(
            "{} ops/s, {done} ops",
            done.saturating_sub(last_ops)
        ));
        last_ops = done;
    })?;
    bar.finish();
    let mut run = PhaseReport::build(&measurements, elapsed.as_secs_f64(), &samples)?;
    for (row, each) in run.series.iter_mut().zip(per_server) {
        row.servers = each;
    }
    if let Some(origin) = &config.origin {
        run.lookaside = Some(LookasideReport::build(
            &measurements,
            origin.server.to_string(),
            duration_us(origin.delay),
        ));
    }
    Ok(Report {
        tool: "fogbench",
        config: describe(config, options),
        load,
        run,
    })
}

fn describe(config: &RunConfig, options: BenchOptions) -> BTreeMap<String, serde_json::Value> {
    let mut map = BTreeMap::new();
    let (value_min, value_max) = config.value_size.bounds();
    let mut put = |k: &str, v: serde_json::Value| {
        map.insert(k.to_owned(), v);
    };
    let servers: Vec<String> = config.servers.iter().map(SocketAddr::to_string).collect();
    // One server: its address, as always; several: the comma-separated list, each
    // address also in "servers" (in the order that names ketama's server indexes).
    put("server", json!(servers.join(",")));
    if servers.len() > 1 {
        put("servers", json!(servers));
        put("key_placement", json!("ketama"));
    }
    put("protocol", json!(config.protocol.name()));
    put("connections", json!(config.connections));
    put("threads", json!(config.threads));
    put("duration_s", json!(config.duration.as_secs_f64()));
    put(
        "mode",
        json!(if config.rate_per_s.is_some() {
            "open"
        } else {
            "closed"
        }),
    );
    put("rate_per_s", json!(config.rate_per_s));
    put("distribution", json!(config.distribution.name()));
    if let workload::KeyDistribution::ScrambledZipfian(scrambled) = &config.distribution {
        put("zipf_theta", json!(scrambled.zipf().theta()));
    }
    if let workload::KeyDistribution::AlternatingHotSet {
        hot_first,
        hot_keys,
        ..
    } = &config.distribution
    {
        put("hot_first", json!(hot_first));
        put("hot_keys", json!(hot_keys));
    }
    put("keys", json!(config.distribution.keys()));
    put("value_size", json!(config.value_size.describe()));
    put("value_min_bytes", json!(value_min));
    put("value_max_bytes", json!(value_max));
    put("get_ratio", json!(config.get_ratio));
    put("ttl_s", json!(config.ttl_s));
    put("key_prefix", json!(config.key_prefix));
    put("verify", json!(config.verify));
    put("seed", json!(config.seed));
    put("pipeline_max", json!(config.pipeline_max));
    put("load_phase", json!(options.load));
    if let Some(origin) = &config.origin {
        put("origin", json!(origin.server.to_string()));
        put("origin_delay_us", json!(duration_us(origin.delay)));
    }
    map
}

fn duration_us(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
