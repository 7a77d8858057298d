//! Figures derived from fogbench reports and servers' stats that the experiments quote:
//! DRAM's share of hits, miss ratios, slow-tier lines per GET, latency peaks,
//! percentiles and distributions, and per-second series from the stats samples.

use std::collections::BTreeMap;

use super::lab::{ConfigResult, MIB};
use crate::plot::Series;
use crate::run_report::{LatencySummary, PhaseReport, Report, ServerSample};

/// Share of GET hits that DRAM served over the whole run, in percent; None when the
/// server does not say (memcached DRAM-only: all of them, reported as 100).
pub(super) fn dram_hit_share_pct(result: &ConfigResult) -> Option<f64> {
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

pub(super) fn ratio_pct(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 * 100.0 / whole as f64)
}

pub(super) fn miss_ratio_pct(report: &Report) -> Option<f64> {
    let c = &report.run.counts;
    ratio_pct(c.misses, c.hits + c.misses)
}

/// Slow-tier 64-byte lines read per GET over the run (fogcached only).
pub(super) fn slow_lines_per_get(result: &ConfigResult) -> Option<f64> {
    let lines = *result.final_stats.get("slow_lines_read")?;
    let gets = result.report()?.run.counts.gets;
    (gets > 0).then(|| lines as f64 / gets as f64)
}

/// The fullest latency bucket: (lower bound, upper bound) in microseconds.
pub(super) fn peak_bucket(latency: &LatencySummary) -> Option<(f64, f64)> {
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

pub(super) fn peak_mid_us(latency: &LatencySummary) -> Option<f64> {
    peak_bucket(latency).map(|(lower, upper)| (lower + upper) / 2.0)
}

/// Latency at `percentile` from the summary's fixed points (exact for the listed ones).
pub(super) fn latency_at(latency: &LatencySummary, percentile: f64) -> Option<f64> {
    latency
        .distribution
        .iter()
        .find(|(p, _)| (*p - percentile).abs() < 1e-9)
        .map(|(_, us)| *us)
}

/// The latency distribution as a plot series: (bucket upper bound us, % of requests).
pub(super) fn distribution_series(label: &str, latency: &LatencySummary) -> Series {
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
pub(super) fn per_second(
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
pub(super) fn delta(
    sample: &ServerSample,
    previous: Option<&ServerSample>,
    field: &str,
) -> Option<u64> {
    let now = *sample.get(field)?;
    let before = previous.and_then(|p| p.get(field)).copied().unwrap_or(0);
    Some(now.saturating_sub(before))
}

/// DRAM's share of the GET hits of each second, in percent.
pub(super) fn dram_share_series(phase: &PhaseReport) -> Vec<(f64, f64)> {
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

pub(super) fn counter_rate_series(phase: &PhaseReport, field: &str) -> Vec<(f64, f64)> {
    per_second(phase, |sample, previous| {
        delta(sample, previous, field).map(|d| d as f64)
    })
}

pub(super) fn gauge_mib_series(phase: &PhaseReport, field: &str) -> Vec<(f64, f64)> {
    per_second(phase, |sample, _| {
        sample.get(field).map(|&bytes| bytes as f64 / MIB as f64)
    })
}

/// A figure with `decimals` decimals, or "–" where there is none (or it is not finite).
pub(super) fn fmt_opt(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "–".to_owned(),
    }
}

/// Percentiles of the union of two latency distributions (their buckets share bounds):
/// what a look-aside client saw over all its gets, edge hits and origin fetches alike.
pub(super) fn merged_percentiles(
    a: &LatencySummary,
    b: &LatencySummary,
    percentiles: &[f64],
) -> Vec<f64> {
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
pub(super) fn merged_buckets(a: &LatencySummary, b: &LatencySummary) -> Vec<(f64, u64)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            phase.series.push(crate::run_report::SecondReport {
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
        let mut histogram = crate::run_report::new_histogram(3).expect("histogram");
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
}
