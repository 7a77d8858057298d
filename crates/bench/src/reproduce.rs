//! `fogbench reproduce <experiment>`: the seed papers' experiments, re-run at this
//! machine's scale against servers this module starts (fogcached in each configuration,
//! Debian's memcached with and without extstore), written up as a report directory:
//! `REPORT.md` (tables, plots, the differences from the paper), SVG plots and raw JSON.
//!
//! Each configuration gets a fresh server and a fresh data directory, so no run sees
//! another's items; servers are stopped (and their pool files deleted) before the next
//! one starts, so that runs do not compete for the two cores.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde_json::json;

use crate::plot::{line_chart, Chart, Scale, Series};
use crate::proto::Protocol;
use crate::report::{LatencySummary, PhaseReport, Report, ServerSample};
use crate::runner::{Origin, RunConfig};
use crate::servers::{LaunchedServer, Programs, ServerKind, ServerSpec};
use crate::workload::{KeyDistribution, ValueSize};
use crate::{run_benchmark, BenchOptions};
use delay_proxy::DelayProxy;

mod hmcached;

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

/// What the report says about one configuration's run.
#[derive(Debug, Clone)]
struct ConfigResult {
    label: &'static str,
    title: &'static str,
    command: String,
    /// The fogbench report, or why the configuration could not run.
    outcome: Result<Report, String>,
    /// `stats` at the end of the run (all numeric fields).
    final_stats: BTreeMap<String, u64>,
    /// A second run on the same server after the first, when the experiment has one.
    follow_up: Option<Report>,
}

impl ConfigResult {
    fn report(&self) -> Option<&Report> {
        self.outcome.as_ref().ok()
    }

    fn get_latency(&self) -> Option<&LatencySummary> {
        self.report().and_then(|r| r.run.latency.get("get"))
    }
}

/// One server configuration of an experiment.
struct Configuration {
    label: &'static str,
    title: &'static str,
    spec: ServerSpec,
}

/// Memory sizes in MiB.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    total_mib: u64,
    dram_mib: u64,
    slow_mib: u64,
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
        write_index(options, experiments)?;
    }
    Ok(written)
}

/// The shared context of one experiment's runs.
struct Lab<'a> {
    options: &'a ReproduceOptions,
    /// The slow-tier cost of this experiment's fogcached servers.
    slow_cost: String,
    /// The placement policy of its tiered fogcached servers that name none.
    policy: Option<&'static str>,
    data_root: &'a Path,
    report_dir: &'a Path,
    logs_dir: PathBuf,
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
        Experiment::FogcachedLatency => fogcached_latency(&ctx)?,
        Experiment::Ycsb => ycsb(&ctx)?,
        Experiment::EdgeCloud => edge_cloud(&ctx)?,
        Experiment::Hmcached => hmcached::hmcached(&ctx)?,
    };
    let path = report_dir.join("REPORT.md");
    std::fs::write(&path, markdown).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

impl Lab<'_> {
    fn progress(&self, line: &str) {
        if self.options.progress {
            eprintln!("fogbench reproduce: {line}");
        }
    }

    fn duration(&self, quick_s: u64, full_s: u64) -> Duration {
        self.options
            .duration_override
            .unwrap_or(Duration::from_secs(if self.options.quick {
                quick_s
            } else {
                full_s
            }))
    }

    fn connections(&self, default: usize) -> usize {
        self.options.connections_override.unwrap_or(default)
    }

    fn threads(&self) -> String {
        self.options.server_threads.to_string()
    }

    fn fogcached(
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

    fn memcached(&self, dram_mib: u64) -> ServerSpec {
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
    fn memcached_extstore(&self, label: &str, dram_mib: u64, ext_mib: u64) -> ServerSpec {
        self.memcached_extstore_with(label, dram_mib, ext_mib, "")
    }

    /// [`Lab::memcached_extstore`] with more extstore options (`key=value,...`).
    fn memcached_extstore_with(
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
    fn run_config(
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

    fn write_raw(&self, name: &str, results: &[ConfigResult]) -> anyhow::Result<PathBuf> {
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

    /// Draws a chart into the report directory; returns the markdown that shows it.
    fn chart(&self, stem: &str, chart: &Chart) -> anyhow::Result<String> {
        let written = line_chart(chart, &self.report_dir.join(stem))
            .with_context(|| format!("plotting {stem}"))?;
        let svg = written
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "svg"))
            .or(written.first())
            .and_then(|p| p.file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("{stem}.svg"));
        Ok(format!("![{}]({svg})\n", chart.title))
    }

    fn header(
        &self,
        experiment: Experiment,
        source: &str,
        parameters: &[(&str, String)],
    ) -> String {
        let options = self.options;
        let mut md = String::new();
        let _ = writeln!(md, "# fogbench reproduce {}\n", experiment.name());
        let _ = writeln!(md, "{source}\n");
        let _ = writeln!(md, "## How this report was made\n");
        let _ = writeln!(md, "- Command: `{}`", options.command_line);
        let _ = writeln!(md, "- Date: {}", utc_now());
        let _ = writeln!(md, "- Machine: {}", describe_machine());
        let _ = writeln!(
            md,
            "- Servers: {}; {}",
            options.programs.version(ServerKind::Fogcached),
            options.programs.version(ServerKind::Memcached)
        );
        let _ = writeln!(
            md,
            "- Scale: {}{}",
            if options.quick { "quick" } else { "full" },
            if options.duration_override.is_some() || options.connections_override.is_some() {
                " (with overridden duration/connections)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            md,
            "- Slow medium: pool files in `{}` ({}). fogcached maps its pool there with an \
             emulated slow-tier cost `{}`; memcached's extstore file is in the same directory \
             (no emulated cost: extstore does real file I/O).",
            self.data_root.display(),
            filesystem_of(self.data_root),
            self.slow_cost
        );
        let _ = writeln!(
            md,
            "- Client and servers share this machine and talk over loopback; each server has \
             `-t {}`, the client {} threads.",
            options.server_threads, options.client_threads
        );
        for (name, value) in parameters {
            let _ = writeln!(md, "- {name}: {value}");
        }
        md.push('\n');
        md
    }
}

/// memcached drops root to `-u root` here, but a non-root `-u` user must be able to
/// write its extstore file: make the per-configuration directory world-writable.
fn make_writable_for_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
}

fn configurations_table(md: &mut String, configs: &[Configuration]) {
    configurations_table_of(md, &configs.iter().collect::<Vec<_>>());
}

fn configurations_table_of(md: &mut String, configs: &[&Configuration]) {
    md.push_str("## Configurations\n\n| label | configuration | server command (port flags left out) |\n|---|---|---|\n");
    for config in configs {
        let _ = writeln!(
            md,
            "| `{}` | {} | `{}` |",
            config.label,
            config.title,
            config.spec.display()
        );
    }
    md.push('\n');
}

// ---------------------------------------------------------------------------------------
// Derived figures.

/// Share of GET hits that DRAM served over the whole run, in percent; None when the
/// server does not say (memcached DRAM-only: all of them, reported as 100).
fn dram_hit_share_pct(result: &ConfigResult) -> Option<f64> {
    let stats = &result.final_stats;
    if let (Some(&dram), Some(&slow)) = (
        stats.get("tier_dram_get_hits"),
        stats.get("tier_slow_get_hits"),
    ) {
        return ratio_pct(dram, dram + slow);
    }
    let hits = *stats.get("get_hits")?;
    match stats.get("get_extstore") {
        // extstore: a hit read from the file counts in get_extstore.
        Some(&from_file) => ratio_pct(hits.saturating_sub(from_file), hits),
        None => ratio_pct(hits, hits),
    }
}

fn ratio_pct(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 * 100.0 / whole as f64)
}

fn miss_ratio_pct(report: &Report) -> Option<f64> {
    let c = &report.run.counts;
    ratio_pct(c.misses, c.hits + c.misses)
}

/// Slow-tier 64-byte lines read per GET over the run (fogcached only).
fn slow_lines_per_get(result: &ConfigResult) -> Option<f64> {
    let lines = *result.final_stats.get("slow_lines_read")?;
    let gets = result.report()?.run.counts.gets;
    (gets > 0).then(|| lines as f64 / gets as f64)
}

/// The fullest latency bucket: (lower bound, upper bound) in microseconds.
fn peak_bucket(latency: &LatencySummary) -> Option<(f64, f64)> {
    let (index, _) = latency
        .buckets
        .iter()
        .enumerate()
        .max_by_key(|(_, (_, count))| *count)?;
    let upper = latency.buckets[index].0;
    let lower = if index == 0 {
        0.0
    } else {
        latency.buckets[index - 1].0
    };
    Some((lower, upper))
}

fn peak_mid_us(latency: &LatencySummary) -> Option<f64> {
    peak_bucket(latency).map(|(lower, upper)| (lower + upper) / 2.0)
}

/// "23 % lower" / "12 % higher" / "the same": `value` against `reference`.
fn relative_change(value: Option<f64>, reference: Option<f64>) -> String {
    match (value, reference) {
        (Some(value), Some(reference)) if reference > 0.0 => {
            let change_pct = (value / reference - 1.0) * 100.0;
            if change_pct.abs() < 0.5 {
                "the same".to_owned()
            } else if change_pct < 0.0 {
                format!("{:.0} % lower", -change_pct)
            } else {
                format!("{change_pct:.0} % higher")
            }
        }
        _ => "–".to_owned(),
    }
}

/// Latency at `percentile` from the summary's fixed points (exact for the listed ones).
fn latency_at(latency: &LatencySummary, percentile: f64) -> Option<f64> {
    latency
        .distribution
        .iter()
        .find(|(p, _)| (*p - percentile).abs() < 1e-9)
        .map(|(_, us)| *us)
}

/// The latency distribution as a plot series: (bucket upper bound us, % of requests).
fn distribution_series(label: &str, latency: &LatencySummary) -> Series {
    let total: u64 = latency.buckets.iter().map(|(_, count)| count).sum();
    let points = latency
        .buckets
        .iter()
        .map(|&(upper_us, count)| {
            let share = if total > 0 {
                count as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            (upper_us, share)
        })
        .collect();
    Series {
        label: label.to_owned(),
        points,
    }
}

/// Per-second values of one derived quantity, from the run's server samples.
fn per_second(
    phase: &PhaseReport,
    mut value: impl FnMut(&ServerSample, Option<&ServerSample>) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    let mut previous: Option<&ServerSample> = None;
    for second in &phase.series {
        if let Some(sample) = &second.server {
            if let Some(v) = value(sample, previous) {
                points.push(((second.second + 1) as f64, v));
            }
            previous = Some(sample);
        }
    }
    points
}

/// Increase of a counter since the previous sample (from zero for the first: the run
/// phase's counters of gets and promotions start at zero, as a load phase only sets).
fn delta(sample: &ServerSample, previous: Option<&ServerSample>, field: &str) -> Option<u64> {
    let now = *sample.get(field)?;
    let before = previous.and_then(|p| p.get(field)).copied().unwrap_or(0);
    Some(now.saturating_sub(before))
}

/// DRAM's share of the GET hits of each second, in percent.
fn dram_share_series(phase: &PhaseReport) -> Vec<(f64, f64)> {
    per_second(phase, |sample, previous| {
        if sample.contains_key("tier_dram_get_hits") {
            let dram = delta(sample, previous, "tier_dram_get_hits")?;
            let slow = delta(sample, previous, "tier_slow_get_hits")?;
            ratio_pct(dram, dram + slow)
        } else {
            let hits = delta(sample, previous, "get_hits")?;
            let from_file = delta(sample, previous, "get_extstore").unwrap_or(0);
            ratio_pct(hits.saturating_sub(from_file), hits)
        }
    })
}

fn counter_rate_series(phase: &PhaseReport, field: &str) -> Vec<(f64, f64)> {
    per_second(phase, |sample, previous| {
        delta(sample, previous, field).map(|d| d as f64)
    })
}

fn gauge_mib_series(phase: &PhaseReport, field: &str) -> Vec<(f64, f64)> {
    per_second(phase, |sample, _| {
        sample.get(field).map(|&bytes| bytes as f64 / MIB as f64)
    })
}

const MIB: u64 = 1024 * 1024;

fn fmt_opt(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "–".to_owned(),
    }
}

fn failures_section(md: &mut String, results: &[ConfigResult]) {
    let failed: Vec<_> = results.iter().filter(|r| r.outcome.is_err()).collect();
    if failed.is_empty() {
        return;
    }
    md.push_str("## Configurations that did not run\n\n");
    for result in failed {
        let _ = writeln!(
            md,
            "- `{}`: {}",
            result.label,
            result.outcome.as_ref().err().map_or("", String::as_str)
        );
    }
    md.push('\n');
}

fn run_problems(results: &[ConfigResult]) -> Vec<String> {
    let mut problems = Vec::new();
    for result in results {
        if let Some(report) = result.report() {
            let run = &report.run;
            if run.counts.verify_failures > 0
                || run.connection_failures > 0
                || run.counts.error_replies > 0
            {
                problems.push(format!(
                    "`{}`: {} verify failures, {} connection failures, {} error replies{}",
                    result.label,
                    run.counts.verify_failures,
                    run.connection_failures,
                    run.counts.error_replies,
                    run.first_error
                        .as_ref()
                        .map(|e| format!(" (first: {e})"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    problems
}

fn problems_section(md: &mut String, results: &[ConfigResult]) {
    let problems = run_problems(results);
    md.push_str("## Integrity\n\n");
    if problems.is_empty() {
        md.push_str(
            "Every value read was checked (`--verify`): no verify failures, no error replies \
             and no lost connections in any configuration.\n\n",
        );
    } else {
        for problem in problems {
            let _ = writeln!(md, "- {problem}");
        }
        md.push('\n');
    }
}

/// Sizes of one experiment: the data's footprint in MiB and the DRAM:slow split.
fn split_sizes(data_mib: u64, dram_parts: u64, slow_parts: u64, dram_min_mib: u64) -> Sizes {
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
fn footprint_mib(keys: u64, value_bytes: u64) -> u64 {
    let item_bytes = value_bytes + 96;
    (keys * item_bytes * 5 / 4).div_ceil(MIB) + 8
}

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

/// The `--seed` of every experiment's closed-loop runs (it also draws the zipf scramble).
const BASE_SEED: u64 = 1;

fn base_run_config(ctx: &Lab, keys: u64, distribution: KeyDistribution) -> RunConfig {
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

// ---------------------------------------------------------------------------------------
// Experiment 000: latency distributions.

fn fogcached_latency(ctx: &Lab) -> anyhow::Result<String> {
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
            "| `{}` | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
            result.label,
            report.run.ops_per_s,
            fmt_opt(latency.map(|l| l.mean_us), 1),
            latency
                .and_then(peak_bucket)
                .map(|(lo, hi)| format!("{lo:.0}–{hi:.0}"))
                .unwrap_or_else(|| "–".to_owned()),
            fmt_opt(latency.map(|l| l.p50_us), 1),
            fmt_opt(latency.map(|l| l.p99_us), 1),
            fmt_opt(latency.map(|l| l.p999_us), 1),
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
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            result.label,
            open.run.counts.gets,
            fmt_opt(latency.map(|l| l.mean_us), 1),
            latency
                .and_then(peak_bucket)
                .map(|(lo, hi)| format!("{lo:.0}–{hi:.0}"))
                .unwrap_or_else(|| "–".to_owned()),
            fmt_opt(latency.map(|l| l.p50_us), 1),
            fmt_opt(latency.map(|l| l.p99_us), 1),
            fmt_opt(latency.map(|l| l.p999_us), 1),
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

// ---------------------------------------------------------------------------------------
// Experiment 004: YCSB.

fn ycsb(ctx: &Lab) -> anyhow::Result<String> {
    let quick = ctx.options.quick;
    let keys: u64 = if quick { 50_000 } else { 500_000 };
    let value_bytes = 1024;
    // The paper: DRAMONLY 1280 MB; hybrids and extstore 128 MB DRAM + 1280 MB second tier.
    let (dram_mib, slow_mib) = if quick { (16, 128) } else { (128, 1280) };
    let data_mib = footprint_mib(keys, value_bytes);
    let configs = vec![
        Configuration {
            label: "memcached-dram",
            title: "memcached, DRAM only (DRAMONLY)",
            spec: ctx.memcached(slow_mib),
        },
        Configuration {
            label: "dram-only",
            title: "fogcached, DRAM only",
            spec: ctx.fogcached("dram-only", slow_mib, 0, &[]),
        },
        Configuration {
            label: "slow-only",
            title: "fogcached, slow tier only",
            spec: ctx.fogcached("slow-only", 0, slow_mib, &[]),
        },
        Configuration {
            label: "hybrid-nomig",
            title: "fogcached, small DRAM + slow tier, no migration (EXTNVMM-NOMIG)",
            spec: ctx.fogcached("hybrid-nomig", dram_mib, slow_mib, &["--no-migration"]),
        },
        Configuration {
            label: "hybrid",
            title: "fogcached, small DRAM + slow tier, Dual-LRU (EXTNVMM)",
            spec: ctx.fogcached("hybrid", dram_mib, slow_mib, &[]),
        },
        Configuration {
            label: "memcached-extstore",
            title: "memcached, small DRAM + extstore file (EXTSTORE)",
            spec: ctx.memcached_extstore("memcached-extstore", dram_mib, slow_mib),
        },
    ];
    let duration = ctx.duration(8, 40);
    let workloads = [("read-write", 0.9), ("read-only", 1.0)];
    let mut all: Vec<(&str, Vec<ConfigResult>)> = Vec::new();
    for (workload, get_ratio) in workloads {
        let template = RunConfig {
            duration,
            get_ratio,
            connections: ctx.connections(32),
            ..base_run_config(
                ctx,
                keys,
                KeyDistribution::scrambled_zipfian(keys, 0.99, BASE_SEED)?,
            )
        };
        let mut results = Vec::new();
        for (index, config) in configs.iter().enumerate() {
            ctx.progress(&format!(
                "ycsb {workload} [{}/{}] {}: load {keys} keys, then {:.0} s",
                index + 1,
                configs.len(),
                config.label,
                duration.as_secs_f64()
            ));
            results.push(ctx.run_config(config, &template, true, None));
        }
        ctx.write_raw(workload, &results)?;
        all.push((workload, results));
    }

    let mut md = ctx.header(
        Experiment::Ycsb,
        "Seed 004 (Fogcached, ComSys 2019), section 6: YCSB loaded 500 000 × 1 KB items, then \
         ran 5 million operations, 90/10 read/update (ReadWrite) and read-only (ReadOnly), \
         zipfian keys, against DRAMONLY (1280 MB), EXTSTORE (128 MB DRAM + 1280 MB SSD), \
         EXTNVMM (128 MB DRAM + 1280 MB DCPM) and EXTNVMM-NOMIG. Here the load is fogbench's \
         YCSB-style load phase, then a run phase of fixed length with scrambled zipfian \
         (θ = 0.99) keys; every update rewrites a loaded key.",
        &[
            ("Keys", format!("{keys} × {value_bytes} B (about {data_mib} MiB in a slab server)")),
            ("Run phase", format!("{:.0} s per workload, closed loop, {} connections", duration.as_secs_f64(), ctx.connections(32))),
            ("Memory", format!("DRAM-only {slow_mib} MiB; hybrids and extstore {dram_mib} MiB DRAM + {slow_mib} MiB second tier")),
        ],
    );
    configurations_table(&mut md, &configs);

    md.push_str("## Miss ratio (the paper's Table 1) and throughput\n\n| configuration |");
    for (workload, _) in &all {
        let _ = write!(
            md,
            " {workload} miss % | {workload} ops/s | {workload} GET p95 µs |"
        );
    }
    md.push_str(" read-only DRAM share of hits % | read-only slow lines per GET | read-only promotions (skipped by admission) |\n|---|");
    for _ in &all {
        md.push_str("---|---|---|");
    }
    md.push_str("---|---|---|\n");
    for (index, config) in configs.iter().enumerate() {
        let _ = write!(md, "| `{}` |", config.label);
        for (_, results) in &all {
            let result = &results[index];
            match result.report() {
                Some(report) => {
                    let _ = write!(
                        md,
                        " {} | {:.0} | {} |",
                        fmt_opt(miss_ratio_pct(report), 2),
                        report.run.ops_per_s,
                        fmt_opt(result.get_latency().and_then(|l| latency_at(l, 95.0)), 1)
                    );
                }
                None => md.push_str(" did not run | | |"),
            }
        }
        let read_only = &all[all.len() - 1].1[index];
        let _ = writeln!(
            md,
            " {} | {} | {} |",
            fmt_opt(dram_hit_share_pct(read_only), 1),
            fmt_opt(slow_lines_per_get(read_only), 2),
            match (
                read_only.final_stats.get("promotions"),
                read_only.final_stats.get("promotions_skipped"),
            ) {
                (Some(done), Some(skipped)) => format!("{done} ({skipped})"),
                (Some(done), None) => done.to_string(),
                _ => "–".to_owned(),
            }
        );
    }
    md.push('\n');

    let read_only = &all[all.len() - 1].1;
    let hit_share: Vec<Series> = read_only
        .iter()
        .filter(|r| matches!(r.label, "hybrid" | "hybrid-nomig" | "memcached-extstore"))
        .filter_map(|r| {
            r.report().map(|report| Series {
                label: r.label.to_owned(),
                points: dram_share_series(&report.run),
            })
        })
        .collect();
    let promotions: Vec<Series> = all
        .iter()
        .filter_map(|(workload, results)| {
            let hybrid = results.iter().find(|r| r.label == "hybrid")?;
            Some(Series {
                label: format!("hybrid, {workload}"),
                points: counter_rate_series(&hybrid.report()?.run, "promotions"),
            })
        })
        .collect();
    let latency: Vec<Series> = all[0]
        .1
        .iter()
        .filter_map(|r| r.get_latency().map(|l| distribution_series(r.label, l)))
        .collect();
    md.push_str("## Plots\n\n");
    md.push_str(&ctx.chart(
        "dram-hit-share",
        &Chart {
            title: "Read-only: share of GET hits served from DRAM (as seed 004 Fig. 8)",
            x_label: "time since the run phase began (s)",
            y_label: "DRAM share of GET hits (%)",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &hit_share,
        },
    )?);
    md.push('\n');
    md.push_str(&ctx.chart(
        "promotions",
        &Chart {
            title: "Promotions from the slow tier to DRAM (as seed 004 Fig. 9)",
            x_label: "time since the run phase began (s)",
            y_label: "promotions per second",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &promotions,
        },
    )?);
    md.push('\n');
    md.push_str(&ctx.chart(
        "latency-distribution-read-write",
        &Chart {
            title: "Read-write: GET latency distribution",
            x_label: "GET latency (µs, log scale; 20 buckets per decade)",
            y_label: "share of GETs (% per bucket)",
            x_scale: Scale::Log10,
            y_scale: Scale::Linear,
            series: &latency,
        },
    )?);
    md.push('\n');

    md.push_str("## Compared with the paper\n\n");
    let miss = |workload: usize, label: &str| {
        all[workload]
            .1
            .iter()
            .find(|r| r.label == label)
            .and_then(ConfigResult::report)
            .and_then(miss_ratio_pct)
    };
    let growth = read_only
        .iter()
        .find(|r| r.label == "hybrid")
        .and_then(ConfigResult::report)
        .map(|report| dram_share_series(&report.run))
        .and_then(|points| {
            let first = points.first()?.1;
            let last = points.last()?.1;
            (first > 0.0).then(|| (first, last, last / first))
        });
    let _ = writeln!(
        md,
        "| figure | paper | here |\n|---|---|---|\n\
         | read-write miss ratio: DRAMONLY / EXTNVMM / EXTNVMM-NOMIG / EXTSTORE | 0 % / ~1 % / ~7 % / ~80 % | {} / {} / {} / {} % |\n\
         | read-only DRAM share of hits, first to last second (hybrid) | ×2.4 | {} |\n",
        fmt_opt(miss(0, "memcached-dram"), 2),
        fmt_opt(miss(0, "hybrid"), 2),
        fmt_opt(miss(0, "hybrid-nomig"), 2),
        fmt_opt(miss(0, "memcached-extstore"), 2),
        growth.map_or("–".to_owned(), |(first, last, factor)| format!(
            "{first:.1} % → {last:.1} % (×{factor:.2})"
        )),
    );
    md.push_str(
        "Why the figures differ from the paper's:\n\n\
         - **Misses**: the paper's hybrids lost 1–7 % of items to memcached's slab automover \
         and its EXTSTORE lost ~80 % because the SSD writes could not keep up with the load. \
         fogcached demotes instead of evicting when DRAM is full and its automover moves a \
         page by demoting its items, so a data set that fits in DRAM + slow tier is kept \
         whole. extstore's file here is in the page cache, so its flusher keeps up better \
         than on the paper's SSD.\n\
         - **Hit share over time**: the paper's ×2.4 is a wall-clock series on real DCPM \
         with one YCSB thread; here the client is much faster and promotion converges within \
         the first seconds, so the first sample already shows most of the gain.\n\
         - **Loopback, two shared cores, emulated slow tier**, as in the other reports.\n\n",
    );
    for (_, results) in &all {
        failures_section(&mut md, results);
    }
    let flat: Vec<ConfigResult> = all.iter().flat_map(|(_, r)| r.iter().cloned()).collect();
    problems_section(&mut md, &flat);
    md.push_str("## Raw data\n\n`raw/read-write.json` and `raw/read-only.json`: each configuration's full fogbench report and final `stats`. Server logs are in `logs/`.\n");
    Ok(md)
}

// ---------------------------------------------------------------------------------------
// Experiments 003 and 001: edge and cloud.

/// Time added between the client (look-aside) or the edge (read-through) and the origin.
const ORIGIN_DELAY: Duration = Duration::from_millis(1);

/// The 1-minute load average (`/proc/loadavg`), to say how busy the shared machine was.
fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Percentiles of the union of two latency distributions (their buckets share bounds):
/// what a look-aside client saw over all its gets, edge hits and origin fetches alike.
fn merged_percentiles(a: &LatencySummary, b: &LatencySummary, percentiles: &[f64]) -> Vec<f64> {
    let buckets = merged_buckets(a, b);
    let total: u64 = buckets.iter().map(|(_, count)| count).sum();
    percentiles
        .iter()
        .map(|p| {
            let wanted = (total as f64 * p / 100.0).ceil() as u64;
            let mut seen = 0;
            for &(upper_us, count) in &buckets {
                seen += count;
                if seen >= wanted.max(1) {
                    return upper_us;
                }
            }
            f64::NAN
        })
        .collect()
}

/// The buckets of two latency distributions added up (the bounds are the same in both).
fn merged_buckets(a: &LatencySummary, b: &LatencySummary) -> Vec<(f64, u64)> {
    let mut buckets: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    for &(upper_us, count) in a.buckets.iter().chain(&b.buckets) {
        // Keyed by the bound in nanoseconds, so equal bounds meet.
        let entry = buckets
            .entry((upper_us * 1000.0).round() as u64)
            .or_insert((upper_us, 0));
        entry.1 += count;
    }
    buckets.into_values().collect()
}

/// What the client saw over all its GETs, as a plot series: a read-through run's GET
/// latency, or a look-aside run's edge hits and origin fetches together.
fn client_latency_series(result: &ConfigResult) -> Option<Series> {
    let report = result.report()?;
    let buckets = match &report.run.lookaside {
        Some(l) => merged_buckets(&l.edge_hit_latency, &l.origin_served_latency),
        None => report.run.latency.get("get")?.buckets.clone(),
    };
    let total: u64 = buckets.iter().map(|(_, count)| count).sum();
    let points = buckets
        .iter()
        .map(|&(upper_us, count)| (upper_us, ratio_pct(count, total).unwrap_or(0.0)))
        .collect();
    Some(Series {
        label: result.label.to_owned(),
        points,
    })
}

/// The read-through table: what the client saw (every GET a single round trip to the
/// edge) beside what the edge and the origin did, for every configuration.
fn read_through_table(
    md: &mut String,
    results: &[ConfigResult],
    origin_gets: &[Option<u64>],
    warm_up_s: f64,
) {
    md.push_str(
        "### Client-seen latency and origin traffic, look-aside beside read-through\n\n\
         Look-aside (`edge-*`): the client asks the edge, and on a miss the origin (after \
         1 ms), then sets the edge: its latency is the union of edge hits and origin fetches \
         (bucket bounds, so within 12 %). Read-through (`rt-*`): the edge does the fill, the \
         client sees one round trip; the edge hit ratio is the edge's own (`get_hits` over \
         its gets); a miss seen by its client is a fetch that failed (`upstream_timeouts`, \
         `upstream_errors`: the edge answers a miss rather than an error), and the edge's \
         mean fetch time is `upstream_latency_sum_us` over `upstream_latency_count`. Origin \
         gets are counted by the origin memcached itself.\n\n\
         | edge | GETs/s | edge hit ratio % | client GET latency p50 / p90 / p99 / p99.9 µs | misses seen by the client | origin gets per client GET | edge's mean origin fetch µs (timeouts, errors) | DRAM share of edge hits % | DRAM MiB at the end (min after warm-up) |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (result, origin_gets) in results.iter().zip(origin_gets) {
        let Some(report) = result.report() else {
            let _ = writeln!(md, "| `{}` | did not run | | | | | | | |", result.label);
            continue;
        };
        let percentiles = [50.0, 90.0, 99.0, 99.9];
        let stat = |name: &str| result.final_stats.get(name).copied();
        let fetch = match (
            stat("upstream_latency_sum_us"),
            stat("upstream_latency_count"),
        ) {
            (Some(sum_us), Some(count)) if count > 0 => format!(
                "{:.0} ({}, {})",
                sum_us as f64 / count as f64,
                stat("upstream_timeouts").unwrap_or(0),
                stat("upstream_errors").unwrap_or(0)
            ),
            _ => "–".to_owned(),
        };
        let (latency, hit_ratio, client_misses) = match &report.run.lookaside {
            Some(lookaside) => (
                merged_percentiles(
                    &lookaside.edge_hit_latency,
                    &lookaside.origin_served_latency,
                    &percentiles,
                ),
                Some(lookaside.edge_hit_ratio * 100.0),
                // A look-aside miss is served by the origin: the client sees none.
                0,
            ),
            None => {
                let latency = report.run.latency.get("get");
                let stats = &result.final_stats;
                let hits = stats.get("get_hits").copied().unwrap_or(0);
                let misses = stats.get("get_misses").copied().unwrap_or(0);
                (
                    latency
                        .map_or_else(Vec::new, |l| vec![l.p50_us, l.p90_us, l.p99_us, l.p999_us]),
                    ratio_pct(hits, hits + misses),
                    report.run.counts.misses,
                )
            }
        };
        let per_get = origin_gets_per_client_get(report, *origin_gets);
        let dram = gauge_mib_series(&report.run, "tier_dram_bytes");
        let min_after_warm_up = dram
            .iter()
            .filter(|(t, _)| *t > warm_up_s)
            .map(|(_, mib)| *mib)
            .reduce(f64::min);
        let _ = writeln!(
            md,
            "| `{}` | {:.0} | {} | {} / {} / {} / {} | {} | {} | {} | {} | {} ({}) |",
            result.label,
            report.run.ops_per_s,
            fmt_opt(hit_ratio, 2),
            fmt_opt(latency.first().copied(), 1),
            fmt_opt(latency.get(1).copied(), 1),
            fmt_opt(latency.get(2).copied(), 1),
            fmt_opt(latency.get(3).copied(), 1),
            client_misses,
            fmt_opt(per_get, 3),
            fetch,
            fmt_opt(dram_hit_share_pct(result), 1),
            fmt_opt(dram.last().map(|(_, mib)| *mib), 1),
            fmt_opt(min_after_warm_up, 1),
        );
    }
    md.push('\n');
}

/// Origin gets (counted by the origin) per GET the client made.
fn origin_gets_per_client_get(report: &Report, origin_gets: Option<u64>) -> Option<f64> {
    let client_gets = report.run.counts.gets;
    origin_gets.and_then(|gets| (client_gets > 0).then(|| gets as f64 / client_gets as f64))
}

/// Seed 003's comparison made by hit *ratio* (hits per GET), DRAM-only edge → edge with a
/// slow tier: `×<gain> (<dram> % → <hybrid> %)`. Not by hit counts: runs of equal length
/// answer different numbers of GETs, so a count mixes the hit ratio with the edge's speed.
fn hit_ratio_gain(dram_pct: Option<f64>, hybrid_pct: Option<f64>) -> String {
    match (dram_pct, hybrid_pct) {
        (Some(dram), Some(hybrid)) if dram > 0.0 => {
            format!("×{:.2} ({dram:.1} % → {hybrid:.1} %)", hybrid / dram)
        }
        _ => "–".to_owned(),
    }
}

/// Origin gets per client GET, DRAM-only edge → edge with a slow tier:
/// `<dram> → <hybrid> (×<n> fewer)`.
fn origin_traffic_change(dram: Option<f64>, hybrid: Option<f64>) -> String {
    match (dram, hybrid) {
        (Some(dram), Some(hybrid)) if hybrid > 0.0 => {
            format!("{dram:.3} → {hybrid:.3} (×{:.2} fewer)", dram / hybrid)
        }
        (dram, hybrid) => format!("{} → {}", fmt_opt(dram, 3), fmt_opt(hybrid, 3)),
    }
}

/// The edge's own hit ratio per second (read-through runs: the client sees no misses).
fn edge_hit_ratio_series(phase: &PhaseReport) -> Vec<(f64, f64)> {
    per_second(phase, |sample, previous| {
        let hits = delta(sample, previous, "get_hits")?;
        let misses = delta(sample, previous, "get_misses")?;
        ratio_pct(hits, hits + misses)
    })
}

fn edge_cloud(ctx: &Lab) -> anyhow::Result<String> {
    let quick = ctx.options.quick;
    let load_at_start = load_average();
    let keys: u64 = if quick { 20_000 } else { 100_000 };
    let value_bytes: u64 = if quick { 4096 } else { 8192 };
    let (edge_dram_mib, edge_slow_mib) = if quick { (8, 64) } else { (32, 256) };
    let residency_s = if quick { "5" } else { "30" };
    let origin_mib = footprint_mib(keys, value_bytes) + 64;
    let configs = [
        Configuration {
            label: "edge-memcached",
            title: "memcached at the edge, DRAM only",
            spec: ctx.memcached(edge_dram_mib),
        },
        Configuration {
            label: "edge-dram",
            title: "fogcached at the edge, DRAM only",
            spec: ctx.fogcached("edge-dram", edge_dram_mib, 0, &[]),
        },
        Configuration {
            label: "edge-hybrid",
            title:
                "fogcached at the edge, DRAM + slow tier, DRAM age limit on (seed 001's setting)",
            spec: ctx.fogcached(
                "edge-hybrid",
                edge_dram_mib,
                edge_slow_mib,
                &["--dram-residency-max-s", residency_s],
            ),
        },
    ];
    let origin_spec = ctx.memcached(origin_mib);
    ctx.progress(&format!(
        "edge-cloud: origin memcached -m {origin_mib}, loading {keys} keys"
    ));
    let origin =
        LaunchedServer::start(&ctx.options.programs, &origin_spec, "origin", &ctx.logs_dir)?;
    // Read-through edges reach the origin through a delay line: half of the 1 ms each
    // way, as the look-aside client waits 1 ms before each origin read.
    let proxy = DelayProxy::start(origin.addr, ORIGIN_DELAY / 2)?;
    let upstream = proxy.addr().to_string();
    let read_through_args = |extra: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        // Edge copies live as long as the origin's (which never expire), as the
        // look-aside edges' do.
        args.extend(["--upstream".to_owned(), upstream.clone()]);
        args.extend(["--upstream-ttl-max".to_owned(), "0".to_owned()]);
        args
    };
    let rt_dram_args = read_through_args(&[]);
    let rt_hybrid_args = read_through_args(&["--dram-residency-max-s", residency_s]);
    let read_through_configs = [
        Configuration {
            label: "rt-dram",
            title: "fogcached at the edge, DRAM only, filling its misses itself (--upstream)",
            spec: ctx.fogcached("rt-dram", edge_dram_mib, 0, &as_strs(&rt_dram_args)),
        },
        Configuration {
            label: "rt-hybrid",
            title: "fogcached at the edge, DRAM + slow tier, DRAM age limit on, filling its \
                    misses itself (--upstream)",
            spec: ctx.fogcached(
                "rt-hybrid",
                edge_dram_mib,
                edge_slow_mib,
                &as_strs(&rt_hybrid_args),
            ),
        },
    ];
    let duration = ctx.duration(10, 180);
    let template = RunConfig {
        duration,
        connections: ctx.connections(64),
        value_size: ValueSize::Fixed(value_bytes as usize),
        origin: Some(Origin {
            server: origin.addr,
            delay: ORIGIN_DELAY,
        }),
        ..base_run_config(
            ctx,
            keys,
            KeyDistribution::scrambled_zipfian(keys, 0.99, BASE_SEED)?,
        )
    };
    let mut results = Vec::new();
    // Origin gets made during each configuration's run phase.
    let mut origin_gets = Vec::new();
    let total = configs.len() + read_through_configs.len();
    let origin_cmd_get = || origin.stats().ok().and_then(|s| s.get("cmd_get").copied());
    for (index, config) in configs.iter().enumerate() {
        ctx.progress(&format!(
            "edge-cloud [{}/{total}] {}: {:.0} s of look-aside GETs",
            index + 1,
            config.label,
            duration.as_secs_f64()
        ));
        // The first run's load phase fills the origin (the "cloud"); it keeps the data
        // for the later configurations, whose edges all start empty.
        let before = origin_cmd_get();
        results.push(ctx.run_config(config, &template, index == 0, None));
        origin_gets.push(
            before
                .zip(origin_cmd_get())
                .map(|(b, a)| a.saturating_sub(b)),
        );
    }
    // The same GETs against edges that fill their misses themselves: the client sees
    // one round trip to the edge; the edge asks the origin through the delay line.
    let read_through_template = RunConfig {
        origin: None,
        ..template.clone()
    };
    for (index, config) in read_through_configs.iter().enumerate() {
        ctx.progress(&format!(
            "edge-cloud [{}/{total}] {}: {:.0} s of read-through GETs",
            configs.len() + index + 1,
            config.label,
            duration.as_secs_f64()
        ));
        let before = origin_cmd_get();
        results.push(ctx.run_config(config, &read_through_template, false, None));
        origin_gets.push(
            before
                .zip(origin_cmd_get())
                .map(|(b, a)| a.saturating_sub(b)),
        );
    }
    let origin_stats = origin.stats().unwrap_or_default();
    drop(proxy);
    origin.stop()?;
    ctx.write_raw("results", &results)?;
    let all_configs: Vec<&Configuration> = configs.iter().chain(&read_through_configs).collect();

    let mut md = ctx.header(
        Experiment::EdgeCloud,
        "Seeds 003 and 001: a client asks an edge cache first and, on a miss, a cloud server \
         with 1 ms added between client and cloud, then fills the edge. 003 found that a slow \
         tier at the edge gave about 5× more edge hits; 001 ran such an edge for about 2000 s \
         and saw Fogcached's age-based demotion drain DRAM to 0 MB while nothing was promoted \
         (its Fig. 3). Here the edge is fogcached (or memcached), the cloud is a memcached \
         holding every key, and fogbench's look-aside mode adds the delay in the client.",
        &[
            ("Keys", format!("{keys} × {value_bytes} B values, all in the origin (memcached -m {origin_mib})")),
            ("Run phase", format!("GET only, zipfian θ = 0.99, {:.0} s per edge, closed loop, {} connections, origin delay 1 ms before each origin read", duration.as_secs_f64(), template.connections)),
            ("Edge memory", format!("{edge_dram_mib} MiB DRAM; the hybrid edge adds a {edge_slow_mib} MiB slow tier and demotes DRAM items idle for {residency_s} s")),
            ("Read-through (`rt-*`)", "the same GETs sent to an edge started with `--upstream`: on a miss the edge asks the origin itself, through a delay line (a TCP proxy in fogbench) that holds every byte 0.5 ms each way, stores the item and answers; `--upstream-ttl-max 0` keeps the origin's TTL (none)".to_owned()),
            ("Load on this machine", format!("2 cores shared with other jobs: 1-minute load average {} at the start of this experiment, {} at its end", load_at_start, load_average())),
        ],
    );
    configurations_table_of(&mut md, &all_configs);
    md.push_str("## Results\n\n| edge | GETs/s | edge hit ratio % | edge hits | latency of edge hits p50 / p99 µs | latency via origin p50 / p99 µs | DRAM share of edge hits % | DRAM MiB at the end (min after warm-up) |\n|---|---|---|---|---|---|---|---|\n");
    let warm_up_s = (duration.as_secs_f64() / 10.0).max(1.0);
    // The look-aside runs (the read-through ones follow in their own table).
    for result in results.iter().filter(|r| !r.label.starts_with("rt-")) {
        let Some(report) = result.report() else {
            let _ = writeln!(md, "| `{}` | did not run | | | | | | |", result.label);
            continue;
        };
        let lookaside = report.run.lookaside.as_ref();
        let dram = gauge_mib_series(&report.run, "tier_dram_bytes");
        let min_after_warm_up = dram
            .iter()
            .filter(|(t, _)| *t > warm_up_s)
            .map(|(_, mib)| *mib)
            .reduce(f64::min);
        let _ = writeln!(
            md,
            "| `{}` | {:.0} | {} | {} | {} / {} | {} / {} | {} | {} ({}) |",
            result.label,
            report.run.ops_per_s,
            fmt_opt(lookaside.map(|l| l.edge_hit_ratio * 100.0), 2),
            lookaside.map_or("–".to_owned(), |l| l.edge_hits.to_string()),
            fmt_opt(lookaside.map(|l| l.edge_hit_latency.p50_us), 1),
            fmt_opt(lookaside.map(|l| l.edge_hit_latency.p99_us), 1),
            fmt_opt(lookaside.map(|l| l.origin_served_latency.p50_us), 1),
            fmt_opt(lookaside.map(|l| l.origin_served_latency.p99_us), 1),
            fmt_opt(dram_hit_share_pct(result), 1),
            fmt_opt(dram.last().map(|(_, mib)| *mib), 1),
            fmt_opt(min_after_warm_up, 1),
        );
    }
    let _ = writeln!(
        md,
        "\nThe origin served {} gets ({} hits) in all.\n",
        origin_stats.get("cmd_get").copied().unwrap_or(0),
        origin_stats.get("get_hits").copied().unwrap_or(0)
    );
    read_through_table(&mut md, &results, &origin_gets, warm_up_s);

    let occupancy: Vec<Series> = results
        .iter()
        .filter_map(|r| {
            let report = r.report()?;
            let mut series = vec![Series {
                label: format!("{}: DRAM", r.label),
                points: gauge_mib_series(&report.run, "tier_dram_bytes"),
            }];
            if r.label.ends_with("hybrid") {
                series.push(Series {
                    label: format!("{}: slow tier", r.label),
                    points: gauge_mib_series(&report.run, "tier_slow_bytes"),
                });
            }
            Some(series)
        })
        .flatten()
        .filter(|s| !s.points.is_empty())
        .collect();
    let hit_ratio: Vec<Series> = results
        .iter()
        .filter_map(|r| {
            let report = r.report()?;
            if report.run.lookaside.is_none() {
                // Read-through: the client sees no misses; the edge's own ratio counts.
                return Some(Series {
                    label: r.label.to_owned(),
                    points: edge_hit_ratio_series(&report.run),
                });
            }
            let points = report
                .run
                .series
                .iter()
                .filter_map(|s| {
                    ratio_pct(s.counts.hits, s.counts.hits + s.counts.misses)
                        .map(|pct| ((s.second + 1) as f64, pct))
                })
                .collect();
            Some(Series {
                label: r.label.to_owned(),
                points,
            })
        })
        .collect();
    md.push_str("## Plots\n\n");
    md.push_str(&ctx.chart(
        "dram-occupancy",
        &Chart {
            title: "Edge memory in use over a long run (as seed 001 Fig. 3)",
            x_label: "time since the run phase began (s)",
            y_label: "item bytes held (MiB)",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &occupancy,
        },
    )?);
    md.push('\n');
    md.push_str(&ctx.chart(
        "edge-hit-ratio",
        &Chart {
            title: "Edge hit ratio per second",
            x_label: "time since the run phase began (s)",
            y_label: "GETs answered by the edge (%)",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: &hit_ratio,
        },
    )?);
    md.push('\n');
    let client_latency: Vec<Series> = results.iter().filter_map(client_latency_series).collect();
    md.push_str(&ctx.chart(
        "client-latency",
        &Chart {
            title: "GET latency the client saw: look-aside vs read-through",
            x_label: "latency (µs)",
            y_label: "GETs (%)",
            x_scale: Scale::Log10,
            y_scale: Scale::Linear,
            series: &client_latency,
        },
    )?);
    md.push('\n');

    // Hit ratios and origin gets per client GET do not depend on how fast each run went
    // (hit counts do: a faster edge answers more GETs in the same time).
    let ratio = |label: &str| {
        let result = results.iter().find(|r| r.label == label)?;
        match &result.report()?.run.lookaside {
            Some(lookaside) => Some(lookaside.edge_hit_ratio * 100.0),
            None => {
                let hits = *result.final_stats.get("get_hits")?;
                let misses = *result.final_stats.get("get_misses")?;
                ratio_pct(hits, hits + misses)
            }
        }
    };
    let origin_per_get = |label: &str| {
        let index = results.iter().position(|r| r.label == label)?;
        origin_gets_per_client_get(results[index].report()?, *origin_gets.get(index)?)
    };
    md.push_str("## Compared with the papers\n\n");
    let _ = writeln!(
        md,
        "| figure | paper | here |\n|---|---|---|\n\
         | edge hit ratio with a slow tier vs DRAM only | about ×5 more edge hits (003) | {} look-aside, {} read-through |\n\
         | origin gets per client GET, DRAM only → with a slow tier | – | {} look-aside, {} read-through |\n\
         | DRAM occupancy of the hybrid edge over a long run | fell to 0 MB after ~2000 s (001, the defect) | see the plot and the minimum after warm-up in the table |\n",
        hit_ratio_gain(ratio("edge-dram"), ratio("edge-hybrid")),
        hit_ratio_gain(ratio("rt-dram"), ratio("rt-hybrid")),
        origin_traffic_change(origin_per_get("edge-dram"), origin_per_get("edge-hybrid")),
        origin_traffic_change(origin_per_get("rt-dram"), origin_per_get("rt-hybrid")),
    );
    md.push_str(
        "Why the figures differ from the papers':\n\n\
         - The edge-hit gain depends on how much more of the zipfian working set the slow tier \
         holds; 003 does not give its data set or key distribution, so only the direction is \
         comparable. It is given here as the ratio of hit ratios (hits per GET), not of hit \
         counts: the runs are of equal length but not of equal speed, so a count would also \
         credit the faster edge for answering more GETs. The origin's load follows the miss \
         ratio: origin gets per client GET.\n\
         - 001 used 1 MB items, 256 MB DRAM and a 50 GB cloud data set over about 2000 s; here \
         the items, memories and run are smaller, and the DRAM age limit is short so that \
         age-based demotion happens many times within the run. fogcached demotes only the \
         COLD tail past the limit and promotes slow-tier items that are accessed again, so \
         DRAM holds the hot items instead of draining.\n\
         - The 1 ms is added in the client before each origin read, on loopback and two \
         shared cores.\n\
         - Read-through edges (`rt-*`) are the same edges started with `--upstream`: the edge \
         fetches a miss from the origin itself (single flight, pipelined over its upstream \
         threads' connections), stores it and answers, so the application needs no fall-back \
         code and the client makes one request per GET. Their origin is reached through \
         fogbench's delay line (0.5 ms each way, a thread per direction sleeping until each \
         chunk is due), which on two shared cores adds its own scheduling delay to each \
         fetch.\n\n",
    );
    failures_section(&mut md, &results);
    problems_section(&mut md, &results);
    md.push_str("## Raw data\n\n`raw/results.json`: each edge's full fogbench report (with the look-aside counts and latencies) and final `stats` (a read-through edge's include its `upstream_*` counters). Server logs are in `logs/`.\n");
    Ok(md)
}

fn write_index(options: &ReproduceOptions, experiments: &[Experiment]) -> anyhow::Result<()> {
    let mut md = String::from("# fogbench reproduce: reports\n\n");
    let _ = writeln!(md, "Made by `{}` on {}.\n", options.command_line, utc_now());
    for experiment in experiments {
        let _ = writeln!(
            md,
            "- [{}]({}/REPORT.md)",
            experiment.name(),
            experiment.name()
        );
    }
    let path = options.out_dir.join("README.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))
}

// ---------------------------------------------------------------------------------------
// The machine, for the report.

fn describe_machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map(|kib| kib / (1024.0 * 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("PRETTY_NAME="))
                .map(|l| l["PRETTY_NAME=".len()..].trim_matches('"').to_owned())
        })
        .unwrap_or_default();
    format!(
        "{model}, {cpus} CPUs available, {} GiB memory; {os}, Linux {kernel}",
        fmt_opt(memory_gib, 1)
    )
}

/// The file system type of the mount that holds `path` (longest mount-point prefix).
fn filesystem_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _device = fields.next()?;
            let mount_point = fields.next()?;
            let fs_type = fields.next()?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), fs_type.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(
            || "file system unknown".to_owned(),
            |(_, fs)| format!("file system {fs}"),
        )
}

/// The current time as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slow_tier_gain_is_a_ratio_of_hit_ratios_not_of_hit_counts() {
        // 003's "×5 more edge hits" compared by hits per GET: a hybrid edge that answered
        // twice the GETs of the DRAM-only one in the same time is not credited for that.
        let dram = ratio_pct(650, 1000);
        let hybrid = ratio_pct(1740, 2000);
        assert_eq!(hit_ratio_gain(dram, hybrid), "×1.34 (65.0 % → 87.0 %)");
        assert_eq!(hit_ratio_gain(None, hybrid), "–");
        assert_eq!(
            origin_traffic_change(Some(0.351), Some(0.133)),
            "0.351 → 0.133 (×2.64 fewer)"
        );
        assert_eq!(origin_traffic_change(None, Some(0.133)), "– → 0.133");
    }

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
    }

    #[test]
    fn a_comparison_says_lower_or_higher_by_the_sign_of_the_change() {
        // The previous wording printed "-26 % lower" for a value above its reference.
        assert_eq!(relative_change(Some(2117.0), Some(1682.0)), "26 % higher");
        assert_eq!(relative_change(Some(290.0), Some(480.0)), "40 % lower");
        assert_eq!(relative_change(Some(95.0), Some(95.2)), "the same");
        assert_eq!(relative_change(None, Some(1.0)), "–");
        assert_eq!(relative_change(Some(1.0), Some(0.0)), "–");
    }

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

    #[test]
    fn dram_share_per_second_uses_counter_deltas() {
        let mut phase = PhaseReport {
            elapsed_s: 2.0,
            ops: 0,
            ops_per_s: 0.0,
            counts: Default::default(),
            connection_failures: 0,
            unanswered: 0,
            open_loop_unsent: 0,
            first_error: None,
            latency: BTreeMap::new(),
            series: Vec::new(),
            lookaside: None,
        };
        let sample = |dram: u64, slow: u64| {
            let mut s = ServerSample::new();
            s.insert("tier_dram_get_hits".to_owned(), dram);
            s.insert("tier_slow_get_hits".to_owned(), slow);
            s
        };
        for (second, server) in [
            (0, Some(sample(25, 75))),
            (1, None),
            (2, Some(sample(125, 100))),
        ] {
            phase.series.push(crate::report::SecondReport {
                second,
                ops: 0,
                counts: Default::default(),
                p50_us: 0.0,
                p99_us: 0.0,
                max_us: 0.0,
                server,
                servers: None,
            });
        }
        // Second 1: 25 of 100 hits from DRAM; the missing sample is skipped; then 100 of
        // the next 125 hits.
        assert_eq!(dram_share_series(&phase), vec![(1.0, 25.0), (3.0, 80.0)]);
    }

    #[test]
    fn peak_bucket_is_the_fullest_one() {
        let mut histogram = crate::report::new_histogram(3).expect("histogram");
        for _ in 0..10 {
            histogram.record(300_000).expect("record");
        }
        histogram.record(50_000).expect("record");
        let summary = LatencySummary::of(&histogram);
        let (lower, upper) = peak_bucket(&summary).expect("a peak");
        assert!(lower < 300.0 && 300.0 <= upper * 1.001, "{lower}..{upper}");
        let total: u64 = summary.buckets.iter().map(|(_, c)| c).sum();
        assert_eq!(total, 11);
    }

    #[test]
    fn sizes_split_one_to_seven() {
        let sizes = split_sizes(160, 1, 7, 4);
        assert_eq!(
            (sizes.total_mib, sizes.dram_mib, sizes.slow_mib),
            (160, 20, 140)
        );
    }
}
