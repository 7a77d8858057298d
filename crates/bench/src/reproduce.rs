//! `fogbench reproduce <experiment>`: the seed papers' experiments, re-run at this
//! machine's scale against servers this module starts (fogcached in each configuration,
//! Debian's memcached with and without extstore), written up as a report directory:
//! `REPORT.md` (tables, plots, the differences from the paper), SVG plots and raw JSON.
//!
//! Each configuration gets a fresh server and a fresh data directory, so no run sees
//! another's items; servers are stopped (and their pool files deleted) before the next
//! one starts, so that runs do not compete for the two cores.
//!
//! This file names the experiments and runs them one after another. Map: one file per
//! experiment (`fogcached_latency.rs`, `ycsb.rs`, `edge_cloud.rs`, `hmcached.rs`), each
//! saying what to run and what its report holds; `lab.rs` (the shared runner: server
//! command lines, one configuration's run, raw JSON), `metrics.rs` (figures derived from
//! reports and stats), `markdown.rs` (the parts every report shares), `machine.rs` (what
//! a report says about the machine and the date).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::servers::Programs;

mod edge_cloud;
mod fogcached_latency;
mod hmcached;
mod lab;
mod machine;
mod markdown;
mod metrics;
mod ycsb;

use lab::Lab;

/// The experiments of the brief's "Evaluation" table that fogbench reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experiment {
    /// Seed 000, Fig. 5: GET latency distributions of five configurations.
    FogcachedLatency,
    /// Seed 004: YCSB load then run; miss ratios, DRAM hit share and promotions over time.
    Ycsb,
    /// Seeds 003 and 001: an edge cache in front of a distant origin.
    EdgeCloud,
    /// Seed 002: HMCached's datasets; every placement policy's throughput relative to
    /// DRAM-only, and a slow-tier latency sweep.
    Hmcached,
}

impl Experiment {
    pub const ALL: [Experiment; 4] = [
        Experiment::FogcachedLatency,
        Experiment::Ycsb,
        Experiment::EdgeCloud,
        Experiment::Hmcached,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Experiment::FogcachedLatency => "fogcached-latency",
            Experiment::Ycsb => "ycsb",
            Experiment::EdgeCloud => "edge-cloud",
            Experiment::Hmcached => "hmcached",
        }
    }

    /// The `--policy` of a tiered fogcached when the configuration names none: the
    /// Fogcached papers' experiments reproduce Dual-LRU, whatever the server's default.
    pub fn paper_policy(self) -> Option<&'static str> {
        match self {
            Experiment::Hmcached => None,
            _ => Some("dual-lru"),
        }
    }

    /// The `--slow-cost` of fogcached's slow tier when the command line gives none: the
    /// emulation of the experiment's paper.
    pub fn default_slow_cost(self) -> &'static str {
        match self {
            Experiment::Hmcached => "hmcached",
            _ => "optane",
        }
    }

    pub fn parse(name: &str) -> anyhow::Result<Vec<Experiment>> {
        if name == "all" {
            return Ok(Experiment::ALL.to_vec());
        }
        match Experiment::ALL.iter().find(|e| e.name() == name) {
            Some(experiment) => Ok(vec![*experiment]),
            None => bail!(
                "unknown experiment {name:?}; known: fogcached-latency, ycsb, edge-cloud, hmcached, all"
            ),
        }
    }
}

/// Everything a reproduction needs beyond the experiment's own definition.
#[derive(Debug, Clone)]
pub struct ReproduceOptions {
    /// The report directory; each experiment writes `<out_dir>/<experiment>/`.
    pub out_dir: PathBuf,
    /// Where pool files (fogcached's slow tier, memcached's extstore file) go: the "same
    /// medium" for both. A fresh temporary directory when None.
    pub data_dir: Option<PathBuf>,
    pub programs: Programs,
    /// Scaled down so that every experiment finishes in about a minute.
    pub quick: bool,
    /// Emulated slow-tier cost of fogcached (`--slow-cost`); each experiment's own
    /// ([`Experiment::default_slow_cost`]) when None.
    pub slow_cost: Option<String>,
    /// Overrides of the run phase length and of the client's connections (for tests).
    pub duration_override: Option<Duration>,
    pub connections_override: Option<usize>,
    /// Client threads.
    pub client_threads: usize,
    /// Worker threads of every server (`-t`).
    pub server_threads: usize,
    /// The command line that made the report, quoted in it.
    pub command_line: String,
    /// Progress bars and a line per configuration on stderr.
    pub progress: bool,
}

/// Runs each experiment and writes its report directory; returns the directories.
pub fn reproduce(
    experiments: &[Experiment],
    options: &ReproduceOptions,
) -> anyhow::Result<Vec<PathBuf>> {
    if options.client_threads == 0 || options.server_threads == 0 {
        bail!("client and server threads must be at least 1");
    }
    std::fs::create_dir_all(&options.out_dir)
        .with_context(|| format!("creating {}", options.out_dir.display()))?;
    let (data_root, remove_data_root) = match &options.data_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("fogbench-reproduce-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&data_root)
        .with_context(|| format!("creating the data directory {}", data_root.display()))?;
    let mut written = Vec::new();
    let mut failure = None;
    for &experiment in experiments {
        let dir = options.out_dir.join(experiment.name());
        let result = run_experiment(experiment, options, &data_root, &dir);
        match result {
            Ok(()) => written.push(dir),
            Err(error) => {
                failure = Some(error.context(format!("experiment {}", experiment.name())));
                break;
            }
        }
    }
    if remove_data_root {
        let _ = std::fs::remove_dir_all(&data_root);
    }
    if let Some(error) = failure {
        return Err(error);
    }
    if experiments.len() > 1 {
        markdown::write_index(options, experiments)?;
    }
    Ok(written)
}

fn run_experiment(
    experiment: Experiment,
    options: &ReproduceOptions,
    data_root: &Path,
    report_dir: &Path,
) -> anyhow::Result<()> {
    let raw_dir = report_dir.join("raw");
    let logs_dir = report_dir.join("logs");
    for dir in [report_dir, &raw_dir, &logs_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let ctx = Lab {
        options,
        slow_cost: options
            .slow_cost
            .clone()
            .unwrap_or_else(|| experiment.default_slow_cost().to_owned()),
        policy: experiment.paper_policy(),
        data_root,
        report_dir,
        logs_dir,
    };
    let markdown = match experiment {
        Experiment::FogcachedLatency => fogcached_latency::fogcached_latency(&ctx)?,
        Experiment::Ycsb => ycsb::ycsb(&ctx)?,
        Experiment::EdgeCloud => edge_cloud::edge_cloud(&ctx)?,
        Experiment::Hmcached => hmcached::hmcached(&ctx)?,
    };
    let path = report_dir.join("REPORT.md");
    std::fs::write(&path, markdown).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experiments_parse_by_name_and_all() {
        assert_eq!(Experiment::parse("ycsb").ok(), Some(vec![Experiment::Ycsb]));
        assert_eq!(Experiment::parse("all").map(|v| v.len()).ok(), Some(4));
        assert_eq!(
            Experiment::parse("hmcached").ok(),
            Some(vec![Experiment::Hmcached])
        );
        assert!(Experiment::parse("nope").is_err());
    }
}
