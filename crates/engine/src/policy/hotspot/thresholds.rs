//! The hotspot policy's promotion thresholds (HMCached's Algorithm 1): per slab class,
//! the access count a slow-tier item must exceed to be promoted, tuned by hill-climbing
//! on the benefit of the class's DRAM hits over its migration cost.

use std::sync::atomic::Ordering;

use super::super::engine_ops::EngineOps;
use crate::counters::C;

use super::super::access::COUNT_MAX;
use super::Hotspot;

/// Get hits of a class between two threshold adjustments (HMCached: 10^5).
pub(crate) const TUNE_REQUESTS: u64 = 100_000;
/// The threshold a class starts at: promoted after its fifth access in a period.
pub(crate) const THRESHOLD_INITIAL: u8 = 4;

/// What the hill-climbing of one class remembers between adjustments.
#[derive(Default)]
pub(super) struct ThresholdClimb {
    /// Counters at the last adjustment: DRAM hits, slow hits, migration accesses,
    /// promotions.
    dram_hits: u64,
    slow_hits: u64,
    migration_accesses: u64,
    promotions: u64,
    /// Benefit at the last adjustment, and whether that adjustment raised the threshold.
    benefit: Option<f64>,
    raised: bool,
}

/// One step of Algorithm 1. `promotions` and `free_chunks` are this period's
/// C_N-to-D and the class's free DRAM chunks; `benefit` this period's, `last` the
/// previous one's and whether the previous step raised the threshold. Returns the new
/// threshold and whether this step raised it.
pub(crate) fn adjust_threshold(
    threshold: u8,
    promotions: u64,
    free_chunks: u64,
    benefit: f64,
    last: Option<(f64, bool)>,
) -> (u8, bool) {
    let lower = |t: u8| (t.saturating_sub(1), false);
    let raise = |t: u8| ((t + 1).min(COUNT_MAX - 1), true);
    if promotions < free_chunks / 2 {
        return lower(threshold);
    }
    match last {
        // No earlier benefit to compare with: try a step up (fewer, surer promotions).
        None => raise(threshold),
        Some((last_benefit, raised)) => {
            let repeat = benefit > last_benefit;
            if repeat == raised {
                raise(threshold)
            } else {
                lower(threshold)
            }
        }
    }
}

impl Hotspot {
    pub(super) fn threshold(&self, class_id: usize) -> u8 {
        self.classes
            .get(class_id)
            .map_or(THRESHOLD_INITIAL, |c| c.threshold.load(Ordering::Relaxed))
    }

    /// Algorithm 1 for one class, when it has served [`TUNE_REQUESTS`] get hits since
    /// its last adjustment (called by the DRAM maintainer).
    pub(super) fn tune(&self, e: EngineOps<'_>, class_id: usize) {
        let Some(class) = self.classes.get(class_id) else {
            return;
        };
        let mut t = class.tuning.lock();
        let dram_hits = e.class_counter(class_id, C::DramHits);
        let slow_hits = e.class_counter(class_id, C::SlowHits);
        if dram_hits < t.dram_hits || slow_hits < t.slow_hits {
            // `stats reset` zeroed the counters: start the period again.
            t.dram_hits = dram_hits;
            t.slow_hits = slow_hits;
            return;
        }
        let c_dreq = dram_hits - t.dram_hits;
        let c_nreq = slow_hits - t.slow_hits;
        if c_dreq + c_nreq < TUNE_REQUESTS {
            return;
        }
        let migration_accesses = class.migration_accesses.load(Ordering::Relaxed);
        let promotions = class.promotions.load(Ordering::Relaxed);
        debug_assert!(migration_accesses >= t.migration_accesses && promotions >= t.promotions);
        let c_mig = migration_accesses - t.migration_accesses;
        let c_n_to_d = promotions - t.promotions;
        let benefit = (c_dreq as f64 - c_mig as f64) / (c_dreq + c_nreq) as f64;
        let dram = e.dram();
        let free_chunks = {
            let cs = dram.classes[class_id].0.lock();
            let free_pages = dram.pool.lock().free_pages() as u64;
            cs.free_chunks + free_pages * cs.per_page as u64
        };
        let last = t.benefit.map(|b| (b, t.raised));
        let (threshold, raised) = adjust_threshold(
            class.threshold.load(Ordering::Relaxed),
            c_n_to_d,
            free_chunks,
            benefit,
            last,
        );
        class.threshold.store(threshold, Ordering::Relaxed);
        *t = ThresholdClimb {
            dram_hits,
            slow_hits,
            migration_accesses,
            promotions,
            benefit: Some(benefit),
            raised,
        };
    }
}
