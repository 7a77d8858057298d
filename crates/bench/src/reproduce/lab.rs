//! The shared runner of every experiment: the [`Lab`] (the options, the data and report
//! directories), the server command lines it builds, one configuration's run (start a
//! fresh server, load, run, sample its stats, stop it, delete its data) and the raw JSON
//! of the results. The experiments (one file each) say what to run; this says how.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::ReproduceOptions;
use crate::proto::Protocol;
use crate::run_report::{LatencySummary, Report};
use crate::runner::RunConfig;
use crate::servers::{LaunchedServer, ServerKind, ServerSpec};
use crate::workload::{KeyDistribution, ValueSize};
use crate::{run_benchmark, BenchOptions};

/// What the report says about one configuration's run.
#[derive(Debug, Clone)]
pub(super) struct ConfigResult {
    pub(super) label: &'static str,
    pub(super) title: &'static str,
    pub(super) command: String,
    /// The fogbench report, or why the configuration could not run.
    pub(super) outcome: Result<Report, String>,
    /// `stats` at the end of the run (all numeric fields).
    pub(super) final_stats: BTreeMap<String, u64>,
    /// A second run on the same server after the first, when the experiment has one.
    pub(super) follow_up: Option<Report>,
}

impl ConfigResult {
    pub(super) fn report(&self) -> Option<&Report> {
        self.outcome.as_ref().ok()
    }

    pub(super) fn get_latency(&self) -> Option<&LatencySummary> {
        self.report().and_then(|r| r.run.latency.get("get"))
    }
}

/// One server configuration of an experiment.
pub(super) struct Configuration {
    pub(super) label: &'static str,
    pub(super) title: &'static str,
    pub(super) spec: ServerSpec,
}

/// Memory sizes in MiB.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    pub(super) total_mib: u64,
    pub(super) dram_mib: u64,
    pub(super) slow_mib: u64,
}

/// The shared context of one experiment's runs.
pub(super) struct Lab<'a> {
    pub(super) options: &'a ReproduceOptions,
    /// The slow-tier cost of this experiment's fogcached servers.
    pub(super) slow_cost: String,
    /// The placement policy of its tiered fogcached servers that name none.
    pub(super) policy: Option<&'static str>,
    pub(super) data_root: &'a Path,
    pub(super) report_dir: &'a Path,
    pub(super) logs_dir: PathBuf,
}

impl Lab<'_> {
    pub(super) fn progress(&self, line: &str) {
        if self.options.progress {
            eprintln!("fogbench reproduce: {line}");
        }
    }

    pub(super) fn duration(&self, quick_s: u64, full_s: u64) -> Duration {
        self.options
            .duration_override
            .unwrap_or(Duration::from_secs(if self.options.quick {
                quick_s
            } else {
                full_s
            }))
    }

    pub(super) fn connections(&self, default: usize) -> usize {
        self.options.connections_override.unwrap_or(default)
    }

    fn threads(&self) -> String {
        self.options.server_threads.to_string()
    }

    pub(super) fn fogcached(
        &self,
        label: &str,
        sizes_dram_mib: u64,
        slow_mib: u64,
        extra: &[&str],
    ) -> ServerSpec {
        let data_dir = self.data_root.join(label);
        let mut args = vec![
            "-t".to_owned(),
            self.threads(),
            "--dram".to_owned(),
            sizes_dram_mib.to_string(),
            "--slow-size".to_owned(),
            format!("{slow_mib}m"),
        ];
        if slow_mib > 0 {
            args.extend([
                "--data-dir".to_owned(),
                data_dir.display().to_string(),
                "--slow-cost".to_owned(),
                self.slow_cost.clone(),
            ]);
            if let Some(policy) = self.policy.filter(|_| !extra.contains(&"--policy")) {
                args.extend(["--policy".to_owned(), policy.to_owned()]);
            }
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        ServerSpec {
            kind: ServerKind::Fogcached,
            args,
        }
    }

    pub(super) fn memcached(&self, dram_mib: u64) -> ServerSpec {
        ServerSpec {
            kind: ServerKind::Memcached,
            args: vec![
                "-t".to_owned(),
                self.threads(),
                "-m".to_owned(),
                dram_mib.to_string(),
            ],
        }
    }

    /// memcached with extstore: its file in the same directory as fogcached's pools.
    pub(super) fn memcached_extstore(
        &self,
        label: &str,
        dram_mib: u64,
        ext_mib: u64,
    ) -> ServerSpec {
        self.memcached_extstore_with(label, dram_mib, ext_mib, "")
    }

    /// [`Lab::memcached_extstore`] with more extstore options (`key=value,...`).
    pub(super) fn memcached_extstore_with(
        &self,
        label: &str,
        dram_mib: u64,
        ext_mib: u64,
        more_options: &str,
    ) -> ServerSpec {
        let path = self.data_root.join(label).join("extstore");
        // Pages of 8 MiB (the default is 64 MiB) so that small quick runs still get
        // several pages; the write buffer must fit in a page.
        let page_mib = 8.min(ext_mib.max(1));
        ServerSpec {
            kind: ServerKind::Memcached,
            args: vec![
                "-t".to_owned(),
                self.threads(),
                "-m".to_owned(),
                dram_mib.to_string(),
                "-o".to_owned(),
                // memcached reads the page size when it meets ext_path: it goes first.
                format!(
                    "ext_page_size={page_mib},ext_wbuf_size={},{more_options}{}ext_path={}:{ext_mib}m",
                    page_mib.min(4),
                    if more_options.is_empty() { "" } else { "," },
                    path.display()
                ),
            ],
        }
    }

    /// Starts the configuration's server, runs the load (if asked) and the run phase
    /// against it, samples its stats, stops it and deletes its data directory.
    /// With `follow_up`, a second run follows on the same server (after the stats
    /// sample, so that the sample describes the first run alone).
    pub(super) fn run_config(
        &self,
        config: &Configuration,
        template: &RunConfig,
        load: bool,
        follow_up: Option<&RunConfig>,
    ) -> ConfigResult {
        let data_dir = self.data_root.join(config.label);
        let mut final_stats = BTreeMap::new();
        let mut follow_up_report = None;
        let outcome = (|| -> anyhow::Result<Report> {
            std::fs::create_dir_all(&data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            make_writable_for_all(&data_dir);
            let server = LaunchedServer::start(
                &self.options.programs,
                &config.spec,
                config.label,
                &self.logs_dir,
            )?;
            let run_config = RunConfig {
                servers: vec![server.addr],
                ..template.clone()
            };
            let report = run_benchmark(
                &run_config,
                BenchOptions {
                    load,
                    poll_stats: true,
                    progress: self.options.progress,
                },
            )?;
            final_stats = server.stats().unwrap_or_default();
            if let Some(second) = follow_up {
                let second = RunConfig {
                    servers: vec![server.addr],
                    ..second.clone()
                };
                follow_up_report = Some(run_benchmark(
                    &second,
                    BenchOptions {
                        load: false,
                        poll_stats: true,
                        progress: self.options.progress,
                    },
                )?);
            }
            server.stop()?;
            Ok(report)
        })();
        let _ = std::fs::remove_dir_all(&data_dir);
        let result = ConfigResult {
            label: config.label,
            title: config.title,
            command: config.spec.display(),
            outcome: outcome.map_err(|e| format!("{e:#}")),
            final_stats,
            follow_up: follow_up_report,
        };
        if let Err(error) = &result.outcome {
            self.progress(&format!("{}: FAILED: {error}", config.label));
        }
        result
    }

    pub(super) fn write_raw(
        &self,
        name: &str,
        results: &[ConfigResult],
    ) -> anyhow::Result<PathBuf> {
        let raw: Vec<_> = results
            .iter()
            .map(|r| {
                json!({
                    "label": r.label,
                    "title": r.title,
                    "command": r.command,
                    "error": r.outcome.as_ref().err(),
                    "report": r.report(),
                    "final_stats": r.final_stats,
                    "follow_up_report": r.follow_up,
                })
            })
            .collect();
        let path = self.report_dir.join("raw").join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(&raw).context("encoding raw results")?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// memcached drops root to `-u root` here, but a non-root `-u` user must be able to
/// write its extstore file: make the per-configuration directory world-writable.
fn make_writable_for_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
}

/// Sizes of one experiment: the data's footprint in MiB and the DRAM:slow split.
pub(super) fn split_sizes(
    data_mib: u64,
    dram_parts: u64,
    slow_parts: u64,
    dram_min_mib: u64,
) -> Sizes {
    let total_mib = data_mib.max(16);
    let dram_mib = (total_mib * dram_parts / (dram_parts + slow_parts)).max(dram_min_mib);
    Sizes {
        total_mib,
        dram_mib,
        slow_mib: total_mib.saturating_sub(dram_mib).max(8),
    }
}

/// Memory an item of `value_bytes` takes in a slab server, with slack for the slab
/// class rounding (factor 1.25) and per-class partial pages.
pub(super) fn footprint_mib(keys: u64, value_bytes: u64) -> u64 {
    let item_bytes = value_bytes + 96;
    (keys * item_bytes * 5 / 4).div_ceil(MIB) + 8
}

pub(super) const MIB: u64 = 1024 * 1024;

/// The `--seed` of every experiment's closed-loop runs (it also draws the zipf scramble).
pub(super) const BASE_SEED: u64 = 1;

pub(super) fn base_run_config(ctx: &Lab, keys: u64, distribution: KeyDistribution) -> RunConfig {
    RunConfig {
        // Replaced by each configuration's server address.
        servers: Vec::new(),
        protocol: Protocol::Text,
        connections: ctx.connections(256),
        threads: ctx.options.client_threads,
        duration: Duration::from_secs(10),
        rate_per_s: None,
        distribution,
        value_size: ValueSize::Fixed(1024),
        get_ratio: 1.0,
        ttl_s: 0,
        key_prefix: format!("fr{keys}:"),
        verify: true,
        seed: BASE_SEED,
        pipeline_max: 64,
        load_timeout: Duration::from_secs(1800),
        origin: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_split_one_to_seven() {
        let sizes = split_sizes(160, 1, 7, 4);
        assert_eq!(
            (sizes.total_mib, sizes.dram_mib, sizes.slow_mib),
            (160, 20, 140)
        );
    }
}
