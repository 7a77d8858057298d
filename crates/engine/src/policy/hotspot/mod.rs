//! HMCached's hotspot-aware policy (seed 002 sections 3.2-3.5).
//!
//! - **Access counters.** Every GET and SET counts one access in a decayed counter
//!   (`access.rs`: halved per idle period, reset after three, periods counted in
//!   requests). A DRAM item keeps its counter in its header; a slow-tier item keeps it
//!   in its index descriptor, in DRAM, with its CLOCK reference bit: a hit on a
//!   slow-tier item writes nothing to the slow tier except, as memcached does, the
//!   first-fetch flag once and the last-access time at most once a minute
//!   (`ITEM_UPDATE_INTERVAL`). A slow-tier counter has no timestamp next to it, so one
//!   idle for a multiple of eight periods reads as recent again; it can cause one early
//!   promotion of an item that was hot before, nothing else.
//! - **Promotion.** A slow-tier item whose counter exceeds its slab class's migration
//!   threshold is offered to Move-to-DRAM. The migration thread takes a free DRAM chunk
//!   or demotes DRAM's multi-queue victim to make one (HMCached admits every item past
//!   the threshold; the threshold is what keeps promotions worth their cost).
//! - **Threshold tuning** (Algorithm 1), per class, every
//!   [`TUNE_REQUESTS`](thresholds::TUNE_REQUESTS) get hits of the class: while fewer
//!   items were promoted than half the class's free DRAM chunks, lower it (DRAM has
//!   room: use it); otherwise hill-climb on the benefit
//!   `(C_dreq - C_mig) / (C_dreq + C_nreq)`: repeat the last step if the benefit rose,
//!   reverse it if it fell.
//! - **Multi-queue replacement in DRAM.** A class's DRAM items sit in `--mq-queues` LRU
//!   lists; queue i holds counters in [2^i, 2^(i+1)) (0 and 1 in queue 0). A hit that
//!   moves the counter to another queue relinks the item there; otherwise it only marks
//!   the item ACTIVE (a second chance when it reaches its queue's tail, so a queue is
//!   LRU-like without a lock per hit). The victim is the first tail, from queue 0 up,
//!   that is neither ACTIVE nor due to move down a queue by decay (those are relinked
//!   on the way). The DRAM maintainer keeps a reserve of free chunks for new items by
//!   demoting victims, and moves decayed items down their queues.
//! - **CLOCK in the slow tier.** Slow-tier items are never relinked on a hit. When the
//!   slow tier must evict, a hand walks the class's list from the oldest item: an item
//!   whose reference bit is set (read since the hand last passed) gets its bit cleared
//!   and is passed over, the first one without it is evicted — or, bounded, the
//!   [`CLOCK_TRIES`](slow_clock::CLOCK_TRIES)th item looked at.
//! - **Benefit-aware DRAM reassignment** (section 3.5). Every access that changes an
//!   item's counter tells its class's histogram of this period (atomics, no lock): an
//!   item's first access of a period enters it at the count it starts from (decayed from
//!   earlier periods), a rise to a new value counts once at that value, and a saturated
//!   counter adds nothing. At the end of a period, `reached[c]` is the number of the
//!   class's items whose counter was at least c this period, each item counted once, so
//!   the sum of the counters of its k hottest items — the benefit of holding them in
//!   DRAM (equation 2, times the chunk size) — comes from the histogram alone. The dynamic program of equations 3-4 then splits DRAM's pages
//!   among the classes for the largest total benefit, and the automover moves one page a
//!   step toward that split (items of a page leaving DRAM are demoted, never lost). This
//!   is what fixes slab calcification when the item-size mix changes.
//! - **`--policy hyperbolic`** (HMCached's HM-HC baseline) is this policy with hyperbolic
//!   caching (Blankstein et al.) in DRAM instead of the multi-queue: a DRAM item counts
//!   its accesses since it entered DRAM (in its header, saturating at 255) and its
//!   descriptor keeps the period it entered in; the victim is the item of lowest
//!   accesses / (periods in DRAM + 1) among [`HYPERBOLIC_SAMPLES`](hyperbolic::HYPERBOLIC_SAMPLES) chunks of the class
//!   sampled at random. Counters, thresholds and CLOCK are shared; DRAM pages move by the
//!   automover's rules, as the header's byte holds the count since entry, not the
//!   decayed counter the reassignment plan reads.
//! - **New items** take a free DRAM chunk, else go to the slow tier (as under Dual-LRU: a
//!   store never waits for a demotion; the maintainer's reserve takes new items).
//!   An overwrite keeps the key's counter and adds one.
//!
//! This folder holds the two policies' structs and their [`Policy`] implementation
//! (`mod.rs`), and one file per mechanism: `thresholds.rs` (Algorithm 1),
//! `reassignment.rs` (the benefit-aware DRAM page split), `multi_queue.rs` (DRAM's
//! multi-queue replacement), `hyperbolic.rs` (HM-HC's DRAM replacement) and
//! `slow_clock.rs` (the slow tier's CLOCK).

mod hyperbolic;
mod multi_queue;
mod reassignment;
mod slow_clock;
mod thresholds;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use super::engine_ops::EngineOps;
use crate::lock::{Mutex, Rank};

use super::engine_ops::SlabTier;
use crate::api::TierId;
use crate::config::{EngineConfig, SLAB_CLASSES_MAX};
use crate::index::ShardEntry;
use crate::item::{header_bytes, state, HeaderRead, HeaderWrite};
use crate::lru::COLD;
use crate::moves::Direction;
use crate::slab::ClassState;

use super::access::{CountStep, Periods, COUNT_MAX};
use super::tiering;
use super::{Candidate, Destination, EvictionSearch, EvictionStep, Policy, Refusal, Registered};

use multi_queue::queue_of;
use reassignment::{Reassignment, COUNT_VALUES};
use thresholds::{ThresholdClimb, THRESHOLD_INITIAL};

/// memcached's `ITEM_UPDATE_INTERVAL`: a hit rewrites the last-access time at most
/// this often.
const ITEM_UPDATE_INTERVAL_S: u32 = 60;
/// Demotions the DRAM maintainer queues per class per pass.
const DEMOTIONS_PER_PASS: usize = 64;

struct Class {
    /// This period's histogram, in two halves: `started_at[c]`, items whose first access
    /// of the period found their counter at c; `rose_to[c]`, items whose counter rose to
    /// c in the period. Items at c or above: the started at c or above, and the risen to
    /// c (every rise to c + 1 started from c).
    started_at: [AtomicU32; COUNT_VALUES],
    rose_to: [AtomicU32; COUNT_VALUES],
    threshold: AtomicU8,
    /// Copies into or out of DRAM of the class's items (each an access of the slow
    /// tier caused by migration: C_mig), and promotions alone (C_N-to-D).
    migration_accesses: AtomicU64,
    promotions: AtomicU64,
    tuning: Mutex<ThresholdClimb>,
}

pub(crate) struct Hotspot {
    periods: Periods,
    queues: usize,
    classes: Box<[Class]>,
    benefit_reassign: bool,
    reassignment: Mutex<Reassignment>,
    /// HM-HC: hyperbolic caching replaces the multi-queue in DRAM.
    hyperbolic: bool,
    /// State of the sampling's xorshift generator.
    sample_state: AtomicU64,
}

impl Hotspot {
    pub fn new(config: &EngineConfig) -> Hotspot {
        Hotspot {
            periods: Periods::new(config.access_period_requests),
            queues: config.mq_queues,
            benefit_reassign: config.benefit_reassign,
            hyperbolic: config.policy == crate::config::PlacementPolicy::Hyperbolic,
            sample_state: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
            reassignment: Mutex::with_default(Rank::HotspotReassignment),
            classes: (0..=SLAB_CLASSES_MAX)
                .map(|_| Class {
                    started_at: std::array::from_fn(|_| AtomicU32::new(0)),
                    rose_to: std::array::from_fn(|_| AtomicU32::new(0)),
                    threshold: AtomicU8::new(THRESHOLD_INITIAL),
                    migration_accesses: AtomicU64::new(0),
                    promotions: AtomicU64::new(0),
                    tuning: Mutex::with_default(Rank::HotspotTuning),
                })
                .collect(),
        }
    }

    /// The count of a slow-tier item whose descriptor byte is `byte` (its descriptor keeps
    /// no timestamp: the period bits are trusted, so `now_s` stands for its last access).
    fn slow_count(&self, byte: u8, now_s: u32) -> u8 {
        self.periods.decayed(byte, now_s)
    }

    /// A DRAM item's access count as the counters see it.
    fn dram_count(&self, h: HeaderRead<'_>) -> u8 {
        if self.hyperbolic {
            h.access().min(COUNT_MAX)
        } else {
            self.periods.count_of(h)
        }
    }

    fn count_migration(&self, class_id: usize, direction: Direction) {
        if let Some(class) = self.classes.get(class_id) {
            class.migration_accesses.fetch_add(1, Ordering::Relaxed);
            if direction == Direction::ToDram {
                class.promotions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A hit on a hyperbolic DRAM item (its count since it entered DRAM, which does not
    /// feed the reassignment) or on a slow-tier item (its counter and reference bit in
    /// the index descriptor). Returns whether it charged a write of the header's access
    /// word.
    #[inline(never)]
    fn other_access(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        h: HeaderRead<'_>,
        class_id: usize,
        now_s: u32,
        entry: &mut ShardEntry<'_, '_>,
    ) -> bool {
        let addr = h.addr();
        // The hit's header writes, charged once (the access word) when the edit ends.
        let mut edit = h.edit(header_bytes::ACCESS);
        if tier.id == TierId::Dram {
            debug_assert!(self.hyperbolic, "a multi-queue DRAM hit takes dram_hit");
            let w = edit.write();
            w.set_access(h.access().saturating_add(1));
            w.set_last_access_s(now_s);
            w.set(state::FETCHED);
            return edit.finish();
        }
        // A slow-tier item: the counter and the reference bit live in DRAM.
        let step = entry.policy_bits(addr, |byte, referenced| {
            // No timestamp in the descriptor: the period bits are trusted.
            let (accessed, step) = self.periods.accessed_step(*byte, now_s);
            *byte = accessed;
            *referenced = true;
            step
        });
        let count = step.map_or(0, |s| s.after);
        if !h.has(state::FETCHED) {
            let w = edit.write();
            w.set(state::FETCHED);
            w.set_last_access_s(now_s);
        } else if now_s.saturating_sub(h.last_access_s()) >= ITEM_UPDATE_INTERVAL_S {
            edit.write().set_last_access_s(now_s);
        }
        if let Some(step) = step {
            self.record_reached(class_id, step);
        }
        if e.migrating() && !h.has(state::QUEUED) && count > self.threshold(class_id) {
            let w = edit.write();
            w.set(state::PROMOTE);
            e.offer_move(Direction::ToDram, w, false, &*entry);
        }
        edit.finish()
    }
}

impl Registered for Hotspot {
    const MOVES_ITEMS: bool = true;
    const LISTS_ARE_QUEUES: bool = true;

    fn new(config: &EngineConfig) -> Hotspot {
        Hotspot::new(config)
    }
}

impl Policy for Hotspot {
    fn new_item_access(&self, _now_s: u32) -> u8 {
        self.periods.fresh()
    }

    fn on_link(
        &self,
        e: EngineOps<'_>,
        entry: &mut ShardEntry<'_, '_>,
        tier: &SlabTier,
        item: HeaderWrite<'_>,
        old: Option<HeaderRead<'_>>,
    ) -> usize {
        let addr = item.addr();
        // A SET is an access: an overwrite carries the key's counter on.
        let first_access = |before: u8| CountStep {
            first_in_period: true,
            before,
            after: before.saturating_add(1).min(COUNT_MAX),
        };
        let step = match old {
            Some(h) if e.tier_of(h.addr()).id == TierId::Dram => {
                if self.hyperbolic {
                    first_access(self.dram_count(h))
                } else {
                    self.periods.accessed_step(h.access(), h.last_access_s()).1
                }
            }
            // The descriptor (kept by the index's `replace`) holds a slow item's counter.
            Some(_) => entry
                .policy_bits(addr, |byte, _| {
                    // Read only here: an overwrite of a DRAM item (the common one) needs no
                    // clock, and reading it cost a call.
                    self.periods.accessed_step(*byte, e.now_s()).1
                })
                .unwrap_or(first_access(0)),
            None => first_access(0),
        };
        let count = step.after;
        self.record_reached(tier.class_of(addr), step);
        let byte = self.periods.with_count(count);
        match tier.id {
            TierId::Dram if self.hyperbolic => {
                item.set_access(count);
                let entered = self.entry_period();
                entry.policy_bits(addr, |b, referenced| {
                    *b = entered;
                    *referenced = false;
                });
                0
            }
            TierId::Dram => {
                item.set_access(byte);
                entry.policy_bits(addr, |b, referenced| {
                    *b = 0;
                    *referenced = false;
                });
                queue_of(count, self.queues)
            }
            TierId::Slow => {
                // The SET counts in the counter, not in the reference bit: the hand
                // reaches new items last anyway, and a burst of stores must not make
                // every item look referenced.
                entry.policy_bits(addr, |b, referenced| {
                    *b = byte;
                    *referenced = false;
                });
                COLD
            }
        }
    }

    #[inline(always)]
    fn on_access(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        item: HeaderRead<'_>,
        class_id: usize,
        now_s: u32,
        entry: &mut ShardEntry<'_, '_>,
    ) -> bool {
        if tier.id == TierId::Dram && !self.hyperbolic {
            return self.dram_hit(tier, item, class_id, now_s);
        }
        self.other_access(e, tier, item, class_id, now_s, entry)
    }

    fn eviction_step<'t>(
        &self,
        e: EngineOps<'t>,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        now_s: u32,
        search: &mut EvictionSearch<'t>,
    ) -> EvictionStep<'t> {
        match tier.id {
            TierId::Slow => self.clock_eviction_step(e, tier, cs, now_s, search),
            TierId::Dram => self.dram_eviction_step(e, tier, cs, now_s, search),
        }
    }

    fn destination<'e>(
        &self,
        _e: EngineOps<'e>,
        direction: Direction,
        _class_id: usize,
        _total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Destination<'e>, Refusal> {
        // A promotion past the class's threshold is admitted (the threshold was its
        // test): DRAM's victim by the multi-queue (or hyperbolic sampling) goes.
        Ok(Destination::admitting_all(direction))
    }

    fn demotion_victim<'e>(
        &self,
        e: EngineOps<'e>,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        self.dram_victim(e, cs, now_s)
    }

    fn after_move(
        &self,
        entry: &mut ShardEntry<'_, '_>,
        direction: Direction,
        dst_tier: &SlabTier,
        h: HeaderWrite<'_>,
        now_s: u32,
    ) -> usize {
        let dst_addr = h.addr();
        let class_id = dst_tier.class_of(dst_addr);
        self.count_migration(class_id, direction);
        match direction {
            Direction::ToDram => {
                // The counter moves from the descriptor into the DRAM header.
                // The access that made the item hot was just now; the slow copy's time
                // may be a minute old (written at most once a minute), and a counter
                // read against it would look idle.
                h.set_last_access_s(now_s);
                let entered = self.entry_period();
                let hyperbolic = self.hyperbolic;
                let byte = entry
                    .policy_bits(dst_addr, |b, referenced| {
                        *referenced = false;
                        let counter = *b;
                        *b = if hyperbolic { entered } else { 0 };
                        counter
                    })
                    .unwrap_or(0);
                if self.hyperbolic {
                    h.set_access(self.slow_count(byte, now_s));
                    return 0;
                }
                h.set_access(byte);
                queue_of(self.periods.count_of(h.read()), self.queues)
            }
            Direction::ToSlow => {
                // ... and back: the copy's header holds the DRAM counter.
                let byte = if self.hyperbolic {
                    self.periods.with_count(h.access().min(COUNT_MAX))
                } else {
                    h.access()
                };
                entry.policy_bits(dst_addr, |b, referenced| {
                    *b = byte;
                    *referenced = false;
                });
                COLD
            }
        }
    }

    fn begin_pass(&self, e: EngineOps<'_>, tier: &SlabTier) {
        if tier.id == TierId::Dram && self.periods.advance(e) > 0 {
            self.close_period();
        }
    }

    fn maintain_class(&self, e: EngineOps<'_>, tier: &SlabTier, class_id: usize) -> usize {
        if tier.id != TierId::Dram {
            // The slow tier has nothing to maintain: CLOCK works at eviction time.
            return 0;
        }
        self.tune(e, class_id);
        let now_s = e.now_s();
        let mut cs = tier.classes[class_id].0.lock();
        self.decay_queues(e, &mut cs);
        if !e.migrating() {
            return 0;
        }
        // Demotions already waiting free their chunks soon: only the rest of the reserve
        // is queued now, so passes that run before the migration thread do not demote
        // the same shortfall twice.
        let pending = e.move_queue_len(Direction::ToSlow);
        let reserve = (cs.pages.len() * cs.per_page) as u64 / tiering::RESERVE_DIVISOR + 1;
        let wanted = reserve
            .saturating_sub(cs.free_chunks)
            .saturating_sub(pending as u64)
            .min(DEMOTIONS_PER_PASS as u64);
        let mut queued = 0;
        while queued < wanted && tiering::dram_needs_room(tier, &cs) {
            let Some(victim) = self.dram_victim(e, &mut cs, now_s) else {
                break;
            };
            if victim.has(state::QUEUED)
                || !e.offer_move_charged(Direction::ToSlow, victim, true, &*cs)
            {
                break;
            }
            queued += 1;
        }
        usize::from(queued > 0)
    }

    fn class_need(&self, _tier: &SlabTier, cs: &ClassState) -> u64 {
        cs.stats.evicted + cs.dram_pressure
    }

    fn migration_threshold(&self, class_id: usize) -> Option<u8> {
        Some(self.threshold(class_id))
    }

    fn plan_page_move(&self, e: EngineOps<'_>) -> Option<Option<(usize, usize)>> {
        self.benefit_page_move(e)
    }
}

#[cfg(test)]
mod tests;
