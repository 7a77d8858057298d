//! HM-HC (`--policy hyperbolic`): hyperbolic caching in DRAM instead of the
//! multi-queue, its victim the sampled item of fewest accesses per period in DRAM.

use std::sync::atomic::Ordering;

use super::super::engine_ops::EngineOps;
use crate::item::{header_bytes, state, HeaderRead};
use crate::slab::ClassState;

use super::Hotspot;

/// DRAM chunks a hyperbolic victim search samples (the hyperbolic caching paper's 64
/// needs a larger cache to pay off; 16 keeps a demotion's cost near the multi-queue's).
pub(crate) const HYPERBOLIC_SAMPLES: usize = 16;

impl Hotspot {
    /// The period number a hyperbolic DRAM item's descriptor records it entered in.
    pub(super) fn entry_period(&self) -> u8 {
        self.periods.current() as u8
    }

    pub(super) fn next_random(&self) -> u64 {
        // xorshift64: a data race between two threads only repeats a sample.
        let mut x = self.sample_state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.sample_state.store(x, Ordering::Relaxed);
        x
    }

    /// HM-HC's DRAM victim: among chunks of the class sampled at random, the live item
    /// with the fewest accesses per period spent in DRAM. Dead items met are reclaimed.
    /// The caller holds the class lock (shards are only tried).
    pub(super) fn hyperbolic_victim<'e>(
        &self,
        e: EngineOps<'e>,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        let dram = e.dram();
        let now_period = self.entry_period();
        let large = cs.id == e.geometry().large;
        let mut best: Option<(HeaderRead<'e>, u64, u64)> = None;
        for _ in 0..HYPERBOLIC_SAMPLES {
            if cs.pages.is_empty() {
                return None;
            }
            let random = self.next_random();
            let page = cs.pages[(random % cs.pages.len() as u64) as usize] as usize;
            let chunk = if large || cs.per_page == 0 {
                0
            } else {
                ((random >> 32) % cs.per_page as u64) as usize
            };
            let addr = dram
                .mem
                .addr_at(page * crate::config::SLAB_PAGE_SIZE_BYTES + chunk * cs.chunk_bytes);
            let h = dram.mem.read_header(addr, header_bytes::ALL);
            if !h.has(state::LINKED) || h.has(state::QUEUED) {
                continue;
            }
            if e.dead_reason(h, now_s).is_some() {
                e.reclaim_dead(dram, cs, h, false);
                continue;
            }
            let Ok(Some(entered)) = e.try_policy_bits(h.key_hash(), addr, |b, _| *b) else {
                // Its shard is busy, or it is not indexed (any more).
                continue;
            };
            let periods_in_dram = u64::from(now_period.wrapping_sub(entered)) + 1;
            let accesses = u64::from(h.access());
            // accesses / periods_in_dram, compared without division.
            let lower = best.is_none_or(|(_, best_accesses, best_periods)| {
                accesses * best_periods < best_accesses * periods_in_dram
            });
            if lower {
                best = Some((h, accesses, periods_in_dram));
            }
        }
        best.map(|(h, _, _)| h)
    }
}
