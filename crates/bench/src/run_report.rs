//! The report of a fogbench run: per-thread measurements and their merge, the latency
//! summaries, per-second series and servers' stats samples built from them, and the
//! JSON / CSV renderings.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::workload::OpKind;

/// Largest latency a histogram tracks; slower replies are clamped to it (and still
/// counted), 60 s being far beyond any useful cache latency.
const LATENCY_MAX_NS: u64 = 60_000_000_000;
/// Significant figures of the whole-run histograms (0.1% resolution).
const RUN_SIGFIG: u8 = 3;
/// Per-second histograms are coarser (1%) to keep a long run's memory small.
const INTERVAL_SIGFIG: u8 = 2;

pub fn new_histogram(sigfig: u8) -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, LATENCY_MAX_NS, sigfig).context("creating a latency histogram")
}

/// Outcome counters of a phase (or one second of it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub gets: u64,
    pub sets: u64,
    pub hits: u64,
    pub misses: u64,
    pub not_stored: u64,
    /// ERROR / CLIENT_ERROR / SERVER_ERROR replies.
    pub error_replies: u64,
    /// Hits whose value was not the one fogbench writes for that key (only with --verify).
    pub verify_failures: u64,
}

impl Counts {
    pub fn ops(&self) -> u64 {
        self.gets + self.sets
    }

    pub fn add(&mut self, other: &Counts) {
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.misses += other.misses;
        self.not_stored += other.not_stored;
        self.error_replies += other.error_replies;
        self.verify_failures += other.verify_failures;
    }

    pub fn count_op(&mut self, op: OpKind) {
        match op {
            OpKind::Get => self.gets += 1,
            OpKind::Set => self.sets += 1,
        }
    }
}

/// Look-aside counters (only non-zero with `--origin`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LookasideCounts {
    /// Gets answered by the origin after an edge miss (hit or miss at the origin).
    pub origin_fetches: u64,
    pub origin_hits: u64,
    /// Origin misses: the client generated the value as the "database" would and set it
    /// in both the origin and the edge.
    pub origin_misses: u64,
    /// Sets of an origin miss's generated value into the origin that were stored.
    pub origin_fills: u64,
    /// Sets of the fetched (or generated) value into the edge that were stored.
    pub edge_fills: u64,
    /// Fill sets (edge or origin) refused or answered with an error.
    pub fill_failures: u64,
}

impl LookasideCounts {
    pub fn add(&mut self, other: &LookasideCounts) {
        self.origin_fetches += other.origin_fetches;
        self.origin_hits += other.origin_hits;
        self.origin_misses += other.origin_misses;
        self.origin_fills += other.origin_fills;
        self.edge_fills += other.edge_fills;
        self.fill_failures += other.fill_failures;
    }
}

/// One second of one thread (or, after merging, of the whole run).
#[derive(Debug, Clone)]
pub struct Interval {
    pub counts: Counts,
    pub latency: Histogram<u64>,
}

impl Interval {
    pub fn new() -> anyhow::Result<Interval> {
        Ok(Interval {
            counts: Counts::default(),
            latency: new_histogram(INTERVAL_SIGFIG)?,
        })
    }
}

/// Everything one worker thread measured in one phase.
#[derive(Debug, Clone)]
pub struct Measurements {
    pub counts: Counts,
    /// Indexed by [`OpKind::index`].
    pub latency: [Histogram<u64>; 2],
    pub series: Vec<Interval>,
    /// Connections lost to an I/O or protocol error.
    pub connection_failures: u64,
    /// Requests sent but never answered (lost connection or drain timeout).
    pub unanswered: u64,
    /// Open loop: sends that were due before the end but could not go out because the
    /// connection's pipeline was full. Non-zero means the server could not keep up.
    pub open_loop_unsent: u64,
    /// The first connection error, for the report.
    pub first_error: Option<String>,
    pub lookaside: LookasideCounts,
    /// Look-aside: gets answered by the edge.
    pub edge_hit_latency: Histogram<u64>,
    /// Look-aside: gets that missed at the edge and were answered via the origin (from
    /// the intended send of the edge get to the origin's reply, delay included).
    pub origin_served_latency: Histogram<u64>,
}

impl Measurements {
    pub fn new() -> anyhow::Result<Measurements> {
        Ok(Measurements {
            counts: Counts::default(),
            latency: [new_histogram(RUN_SIGFIG)?, new_histogram(RUN_SIGFIG)?],
            series: Vec::new(),
            connection_failures: 0,
            unanswered: 0,
            open_loop_unsent: 0,
            first_error: None,
            lookaside: LookasideCounts::default(),
            edge_hit_latency: new_histogram(RUN_SIGFIG)?,
            origin_served_latency: new_histogram(RUN_SIGFIG)?,
        })
    }

    /// Records a completed operation `second` seconds into the phase; `series_max`
    /// bounds the series (later completions land in its last second).
    pub fn record(
        &mut self,
        op: OpKind,
        latency_ns: u64,
        second: usize,
        series_max: usize,
    ) -> anyhow::Result<()> {
        let latency_ns = latency_ns.max(1);
        self.latency[op.index()].saturating_record(latency_ns);
        let second = second.min(series_max.saturating_sub(1));
        while self.series.len() <= second {
            self.series.push(Interval::new()?);
        }
        let interval = &mut self.series[second];
        interval.counts.count_op(op);
        interval.latency.saturating_record(latency_ns);
        self.counts.count_op(op);
        Ok(())
    }

    /// Records an outcome counter in both the totals and the second's interval.
    pub fn note(
        &mut self,
        second: usize,
        series_max: usize,
        update: impl Fn(&mut Counts),
    ) -> anyhow::Result<()> {
        update(&mut self.counts);
        let second = second.min(series_max.saturating_sub(1));
        while self.series.len() <= second {
            self.series.push(Interval::new()?);
        }
        update(&mut self.series[second].counts);
        Ok(())
    }

    /// Folds another thread's measurements into these.
    pub fn merge(&mut self, other: &Measurements) -> anyhow::Result<()> {
        self.counts.add(&other.counts);
        for (mine, theirs) in self.latency.iter_mut().zip(other.latency.iter()) {
            mine.add(theirs).context("merging latency histograms")?;
        }
        while self.series.len() < other.series.len() {
            self.series.push(Interval::new()?);
        }
        for (mine, theirs) in self.series.iter_mut().zip(other.series.iter()) {
            mine.counts.add(&theirs.counts);
            mine.latency
                .add(&theirs.latency)
                .context("merging interval histograms")?;
        }
        self.connection_failures += other.connection_failures;
        self.unanswered += other.unanswered;
        self.open_loop_unsent += other.open_loop_unsent;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.lookaside.add(&other.lookaside);
        self.edge_hit_latency
            .add(&other.edge_hit_latency)
            .context("merging edge hit histograms")?;
        self.origin_served_latency
            .add(&other.origin_served_latency)
            .context("merging origin-served histograms")?;
        Ok(())
    }
}

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (percentile, latency_us) at fixed percentiles, for distribution plots.
    pub distribution: Vec<(f64, f64)>,
    /// The whole distribution: (bucket upper bound in us, requests in the bucket), for
    /// buckets growing by 10^(1/20) (20 per decade) from 1 us up to the maximum.
    pub buckets: Vec<(f64, u64)>,
}

/// First bucket of [`LatencySummary::buckets`]: latencies up to 1 us.
const BUCKET_FIRST_NS: u64 = 1_000;
/// Buckets per decade of latency.
const BUCKETS_PER_DECADE: f64 = 20.0;

const DISTRIBUTION_PERCENTILES: [f64; 14] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
];

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl LatencySummary {
    pub fn of(histogram: &Histogram<u64>) -> LatencySummary {
        let at = |q: f64| us(histogram.value_at_quantile(q));
        LatencySummary {
            count: histogram.len(),
            mean_us: histogram.mean() / 1000.0,
            p50_us: at(0.50),
            p90_us: at(0.90),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: us(histogram.max()),
            distribution: DISTRIBUTION_PERCENTILES
                .iter()
                .map(|&p| (p, us(histogram.value_at_percentile(p))))
                .collect(),
            buckets: log_buckets(histogram),
        }
    }
}

/// The histogram in log-spaced buckets (empty for an empty histogram).
fn log_buckets(histogram: &Histogram<u64>) -> Vec<(f64, u64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    histogram
        .iter_log(BUCKET_FIRST_NS, 10f64.powf(1.0 / BUCKETS_PER_DECADE))
        .map(|bucket| {
            (
                us(bucket.value_iterated_to()),
                bucket.count_since_last_iteration(),
            )
        })
        .collect()
}

/// One server `stats` sample: the selected fields that the server reported.
pub type ServerSample = BTreeMap<String, u64>;

/// The field-wise sum of several servers' samples (a field any of them reported).
pub fn sum_samples<'a>(samples: impl IntoIterator<Item = &'a ServerSample>) -> ServerSample {
    let mut sum = ServerSample::new();
    for sample in samples {
        for (name, value) in sample {
            let total = sum.entry(name.clone()).or_insert(0);
            *total = total.saturating_add(*value);
        }
    }
    sum
}

/// The `stats` fields recorded in the time series, when the server has them (the
/// `tier_*`, `slow_*`, promotion and demotion fields are fogcached's own; memcached
/// reports only the first four, plus `get_extstore` and `extstore_objects_written` when
/// it runs with extstore).
pub const SERVER_FIELDS: &[&str] = &[
    "curr_items",
    "evictions",
    "get_hits",
    "get_misses",
    "tier_dram_items",
    "tier_slow_items",
    "tier_dram_bytes",
    "tier_slow_bytes",
    "tier_dram_limit_bytes",
    "tier_slow_limit_bytes",
    "tier_dram_get_hits",
    "tier_slow_get_hits",
    "slow_lines_read",
    "slow_lines_written",
    "promotions",
    "demotions",
    "promotions_failed",
    "promotions_skipped",
    "demotions_failed",
    "migrations_raced",
    "move_to_dram_queue_len",
    "move_to_slow_queue_len",
    // memcached with extstore: hits read back from its file, and items written to it.
    "get_extstore",
    "extstore_objects_written",
];

#[derive(Debug, Clone, Serialize)]
pub struct SecondReport {
    pub second: usize,
    pub ops: u64,
    pub counts: Counts,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// The server's counters sampled at the end of this second (absent if the poll
    /// failed). With several servers: their sum (absent unless every server answered).
    pub server: Option<ServerSample>,
    /// With several servers only: each server's sample, keyed by `host:port` (a server
    /// whose poll failed is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<BTreeMap<String, ServerSample>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub elapsed_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub counts: Counts,
    pub connection_failures: u64,
    pub unanswered: u64,
    pub open_loop_unsent: u64,
    pub first_error: Option<String>,
    /// Keyed by operation ("get", "set") plus "all".
    pub latency: BTreeMap<String, LatencySummary>,
    pub series: Vec<SecondReport>,
    /// Present with `--origin` (run phase only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookaside: Option<LookasideReport>,
}

/// What the edge-cloud look-aside mode measured.
#[derive(Debug, Clone, Serialize)]
pub struct LookasideReport {
    pub origin: String,
    /// Delay added by the client before each origin fetch.
    pub origin_delay_us: u64,
    /// Edge hits over edge gets (hits + misses); 0 when there were no gets.
    pub edge_hit_ratio: f64,
    pub edge_hits: u64,
    pub edge_misses: u64,
    #[serde(flatten)]
    pub counts: LookasideCounts,
    /// Latency seen by the client for gets the edge answered.
    pub edge_hit_latency: LatencySummary,
    /// Latency seen by the client for gets that missed at the edge and were served via
    /// the origin (the added delay included).
    pub origin_served_latency: LatencySummary,
}

impl LookasideReport {
    pub fn build(measurements: &Measurements, origin: String, delay_us: u64) -> LookasideReport {
        let hits = measurements.counts.hits;
        let misses = measurements.counts.misses;
        let gets = hits + misses;
        LookasideReport {
            origin,
            origin_delay_us: delay_us,
            edge_hit_ratio: if gets == 0 {
                0.0
            } else {
                hits as f64 / gets as f64
            },
            edge_hits: hits,
            edge_misses: misses,
            counts: measurements.lookaside.clone(),
            edge_hit_latency: LatencySummary::of(&measurements.edge_hit_latency),
            origin_served_latency: LatencySummary::of(&measurements.origin_served_latency),
        }
    }
}

impl PhaseReport {
    pub fn build(
        measurements: &Measurements,
        elapsed_s: f64,
        samples: &[Option<ServerSample>],
    ) -> anyhow::Result<PhaseReport> {
        let mut latency = BTreeMap::new();
        let mut all = new_histogram(RUN_SIGFIG)?;
        for op in OpKind::ALL {
            let histogram = &measurements.latency[op.index()];
            all.add(histogram).context("merging per-op histograms")?;
            if !histogram.is_empty() {
                latency.insert(op.name().to_owned(), LatencySummary::of(histogram));
            }
        }
        latency.insert("all".to_owned(), LatencySummary::of(&all));
        let seconds = measurements.series.len().max(samples.len());
        let mut series = Vec::with_capacity(seconds);
        for second in 0..seconds {
            let interval = measurements.series.get(second);
            let counts = interval.map(|i| i.counts.clone()).unwrap_or_default();
            let at = |q: f64| interval.map_or(0.0, |i| us(i.latency.value_at_quantile(q)));
            series.push(SecondReport {
                second,
                ops: counts.ops(),
                counts,
                p50_us: at(0.5),
                p99_us: at(0.99),
                max_us: interval.map_or(0.0, |i| us(i.latency.max())),
                server: samples.get(second).cloned().flatten(),
                servers: None,
            });
        }
        let ops = measurements.counts.ops();
        Ok(PhaseReport {
            elapsed_s,
            ops,
            ops_per_s: if elapsed_s > 0.0 {
                ops as f64 / elapsed_s
            } else {
                0.0
            },
            counts: measurements.counts.clone(),
            connection_failures: measurements.connection_failures,
            unanswered: measurements.unanswered,
            open_loop_unsent: measurements.open_loop_unsent,
            first_error: measurements.first_error.clone(),
            latency,
            series,
            lookaside: None,
        })
    }
}

/// The whole run, as written to `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub config: BTreeMap<String, serde_json::Value>,
    pub load: Option<PhaseReport>,
    pub run: PhaseReport,
}

/// The run phase's time series as CSV: one row per second.
pub fn series_csv(phase: &PhaseReport) -> String {
    let mut csv = String::from(
        "second,ops,gets,sets,hits,misses,not_stored,error_replies,verify_failures,p50_us,p99_us,max_us",
    );
    for &field in SERVER_FIELDS {
        csv.push(',');
        csv.push_str(field);
    }
    csv.push('\n');
    for row in &phase.series {
        let c = &row.counts;
        // Writing to a String cannot fail.
        let _ = write!(
            csv,
            "{},{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1}",
            row.second,
            row.ops,
            c.gets,
            c.sets,
            c.hits,
            c.misses,
            c.not_stored,
            c.error_replies,
            c.verify_failures,
            row.p50_us,
            row.p99_us,
            row.max_us
        );
        for &field in SERVER_FIELDS {
            csv.push(',');
            if let Some(value) = row.server.as_ref().and_then(|s| s.get(field)) {
                let _ = write!(csv, "{value}");
            }
        }
        csv.push('\n');
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_from_threads_merge_into_one_distribution() {
        let mut first = Measurements::new().unwrap();
        let mut second = Measurements::new().unwrap();
        for i in 1..=1000u64 {
            first.record(OpKind::Get, i * 1000, 0, 10).unwrap();
        }
        for i in 1001..=2000u64 {
            second.record(OpKind::Get, i * 1000, 2, 10).unwrap();
        }
        second.record(OpKind::Set, 5_000_000, 2, 10).unwrap();
        second.note(2, 10, |c| c.verify_failures += 1).unwrap();
        first.merge(&second).unwrap();

        assert_eq!(first.counts.gets, 2000);
        assert_eq!(first.counts.sets, 1);
        assert_eq!(first.counts.verify_failures, 1);
        let gets = LatencySummary::of(&first.latency[OpKind::Get.index()]);
        assert_eq!(gets.count, 2000);
        // 1..2000 µs uniformly: the median is ~1000 µs, the max 2000 µs (0.1% precision).
        assert!((gets.p50_us - 1000.0).abs() <= 2.0, "{}", gets.p50_us);
        assert!((gets.max_us - 2000.0).abs() <= 2.0, "{}", gets.max_us);
        assert_eq!(first.series.len(), 3);
        assert_eq!(first.series[0].counts.gets, 1000);
        assert_eq!(first.series[1].counts.ops(), 0);
        assert_eq!(first.series[2].counts.ops(), 1001);
        assert_eq!(first.series[2].counts.verify_failures, 1);

        let phase = PhaseReport::build(&first, 3.0, &[]).unwrap();
        assert_eq!(phase.ops, 2001);
        assert_eq!(phase.latency["all"].count, 2001);
        assert_eq!(phase.latency["set"].count, 1);
        let csv = series_csv(&phase);
        assert_eq!(csv.lines().count(), 4);
        assert!(csv
            .lines()
            .nth(3)
            .unwrap()
            .starts_with("2,1001,1000,1,0,0,0,0,1,"));
    }

    #[test]
    fn merging_two_threads_equals_one_histogram_of_all_values() {
        // Skewed latencies (a long tail), split between two "threads" unevenly.
        let latencies_ns: Vec<u64> = (0..20_000u64)
            .map(|i| 20_000 + (i * i) % 9_000_000 + if i % 97 == 0 { 40_000_000 } else { 0 })
            .collect();
        let mut single = Measurements::new().unwrap();
        let mut first = Measurements::new().unwrap();
        let mut second = Measurements::new().unwrap();
        for (i, &ns) in latencies_ns.iter().enumerate() {
            let op = if i % 5 == 0 { OpKind::Set } else { OpKind::Get };
            let at_second = i % 4;
            single.record(op, ns, at_second, 10).unwrap();
            let thread = if i % 3 == 0 { &mut first } else { &mut second };
            thread.record(op, ns, at_second, 10).unwrap();
            if i % 7 == 0 {
                single.note(at_second, 10, |c| c.hits += 1).unwrap();
                thread.note(at_second, 10, |c| c.hits += 1).unwrap();
            }
        }
        first.merge(&second).unwrap();
        assert_eq!(first.counts, single.counts);
        for op in OpKind::ALL {
            assert_eq!(
                LatencySummary::of(&first.latency[op.index()]),
                LatencySummary::of(&single.latency[op.index()]),
                "{op:?}"
            );
        }
        let merged = PhaseReport::build(&first, 4.0, &[]).unwrap();
        let whole = PhaseReport::build(&single, 4.0, &[]).unwrap();
        assert_eq!(merged.latency, whole.latency);
        assert_eq!(merged.latency["all"].count, 20_000);
        assert_eq!(merged.series.len(), 4);
        for (a, b) in merged.series.iter().zip(&whole.series) {
            assert_eq!(a.counts, b.counts);
            assert_eq!(
                (a.p50_us, a.p99_us, a.max_us),
                (b.p50_us, b.p99_us, b.max_us)
            );
        }
    }

    #[test]
    fn samples_of_several_servers_sum_field_by_field() {
        let a: ServerSample = [("curr_items".to_owned(), 3), ("promotions".to_owned(), 1)]
            .into_iter()
            .collect();
        let b: ServerSample = [("curr_items".to_owned(), 4)].into_iter().collect();
        let sum = sum_samples([&a, &b]);
        assert_eq!(sum.len(), 2);
        assert_eq!(sum["curr_items"], 7);
        assert_eq!(sum["promotions"], 1);
    }

    #[test]
    fn the_series_is_bounded() {
        let mut m = Measurements::new().unwrap();
        m.record(OpKind::Get, 10, 1_000_000, 5).unwrap();
        assert_eq!(m.series.len(), 5);
    }
}
