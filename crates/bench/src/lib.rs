//! fogbench: a load generator for memcached-compatible servers. It talks to servers over
//! the wire only (text and meta protocols), closed or open loop, and reports latencies
//! per operation type from HdrHistograms plus a per-second time series that includes the
//! server's own `stats` counters.

pub mod plot;
pub mod proto;
pub mod report;
pub mod runner;
pub mod workload;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;

use serde_json::json;

use crate::report::{LookasideReport, PhaseReport, Report, ServerSample};
use crate::runner::{run_phase, Live, Phase, RunConfig, StatsPoller};

/// Options of a benchmark beyond the load itself.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// YCSB-style load phase (set every key once) before the run phase.
    pub load: bool,
    /// Poll the server's `stats` once a second during the run phase.
    pub poll_stats: bool,
    /// Print a progress line to stderr once a second (only when it is a terminal).
    pub progress: bool,
}

/// Runs the optional load phase, then the run phase, and builds the report.
pub fn run_benchmark(config: &RunConfig, options: BenchOptions) -> anyhow::Result<Report> {
    let live = Live::default();
    let progress = options.progress && std::io::stderr().is_terminal();
    let load = if options.load {
        // In look-aside mode the load phase fills the origin (the "database"); the edge
        // starts cold and is filled by the run's misses.
        let load_config = match &config.origin {
            Some(origin) => RunConfig {
                server: origin.server,
                origin: None,
                ..config.clone()
            },
            None => config.clone(),
        };
        let (measurements, elapsed) =
            run_phase(&load_config, Phase::Load, &live, |second, live| {
                if progress {
                    let done = live.completed_ops.load(Ordering::Relaxed);
                    eprint!(
                        "\rload {second:>4} s: {done}/{} keys",
                        config.distribution.keys()
                    );
                    let _ = std::io::stderr().flush();
                }
            })?;
        if progress {
            eprintln!();
        }
        Some(PhaseReport::build(
            &measurements,
            elapsed.as_secs_f64(),
            &[],
        )?)
    } else {
        None
    };

    // A failing stats connection must not stop the load: its samples are just absent.
    let mut poller = if options.poll_stats {
        StatsPoller::connect(config.server).ok()
    } else {
        None
    };
    let mut samples: Vec<Option<ServerSample>> = Vec::new();
    let duration_s = config.duration.as_secs_f64();
    let mut last_ops = 0;
    let (measurements, elapsed) = run_phase(config, Phase::Run, &live, |second, live| {
        // Sample `second` closes second index `second - 1`.
        let sample = match poller.as_mut().map(StatsPoller::sample) {
            Some(Ok(sample)) => Some(sample),
            Some(Err(_)) => {
                // A reply cut by a timeout would desynchronise the connection: stop
                // polling rather than misread later samples.
                poller = None;
                None
            }
            None => None,
        };
        if samples.len() < second {
            samples.resize(second - 1, None);
            samples.push(sample);
        }
        if progress {
            let done = live.completed_ops.load(Ordering::Relaxed);
            eprint!(
                "\rrun {second:>4}/{duration_s:.0} s: {} ops/s, {done} ops",
                done.saturating_sub(last_ops)
            );
            let _ = std::io::stderr().flush();
            last_ops = done;
        }
    })?;
    if progress {
        eprintln!();
    }
    let mut run = PhaseReport::build(&measurements, elapsed.as_secs_f64(), &samples)?;
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
    put("server", json!(config.server.to_string()));
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
    if let workload::KeyDistribution::ScrambledZipfian { zipf, .. } = &config.distribution {
        put("zipf_theta", json!(zipf.theta()));
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
