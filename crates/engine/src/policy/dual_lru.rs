//! Fogcached's Dual-LRU (seed 000 section 4.3, seed 004 section 4.2): memcached's
//! segmented LRU kept per tier, joined by two Move queues.
//!
//! - **New items** take a free DRAM chunk (including the reserve the maintainer keeps
//!   free), else go to the slow tier (evicting there only when it is full), else to
//!   DRAM's COLD tail. A store never copies another item out of the way: making DRAM
//!   room is the maintainer's job, in the background.
//! - **Demotion.** The DRAM maintainer queues a class's DRAM COLD tail on Move-to-slow
//!   when the class has no free page and at most the reserve of free chunks, or when the
//!   tail has been idle longer than `--dram-residency-max-s` while DRAM is above its
//!   low-water mark (so age never drains DRAM, seed 001).
//! - **Promotion.** A slow-tier item read again while ACTIVE enters the Promote state and
//!   is offered to Move-to-DRAM at once (the read never waits); the slow tier's
//!   maintainer re-offers Promote items found at its HOT/WARM tails.
//! - **Admission** (what this implementation adds to the paper, so that promotions do
//!   not churn): while DRAM has room for the class beyond the reserve, a promotion takes
//!   a free chunk without question (DRAM never sits idle while hot items wait). Once it
//!   has none, a promotion must beat the item it would displace: its decayed access
//!   count (`access.rs`) must exceed that of DRAM's COLD-tail victim by
//!   `promotion_margin`. Equally cold items (the uniform half of seed 000's workload)
//!   then stay where they are; a hot one, read many times per period, wins. An admitted
//!   promotion takes a reserve chunk or demotes the victim itself. It never evicts.
//!   The read path does not even offer a candidate whose count could not beat an idle
//!   victim while DRAM is full, so equally cold items cost no queue traffic either.

use std::sync::atomic::{AtomicBool, Ordering};

use super::engine_ops::EngineOps;
use super::engine_ops::SlabTier;
use crate::api::TierId;
use crate::config::EngineConfig;
use crate::index::ShardEntry;
use crate::item::{header_bytes, state, HeaderRead};
use crate::moves::Direction;
use crate::slab::ClassState;

use super::access::Periods;
use super::slru::{self, TailHooks};
use super::tiering;
use super::{Candidate, Destination, Policy, Refusal, Registered};

pub(crate) struct DualLru {
    periods: Periods,
    /// A promotion must out-count DRAM's victim by this much (`promotion_margin`).
    margin: u8,
    /// Per DRAM class: room beyond the reserve at the maintainer's last pass (the read
    /// path's hint; the migration thread checks under the class lock).
    dram_spare: Box<[AtomicBool]>,
}

impl DualLru {
    pub fn new(config: &EngineConfig) -> DualLru {
        DualLru {
            periods: Periods::new(config.access_period_requests),
            margin: config.promotion_margin,
            dram_spare: (0..=crate::config::SLAB_CLASSES_MAX)
                .map(|_| AtomicBool::new(true))
                .collect(),
        }
    }

    fn spare_hint(&self, class_id: usize) -> bool {
        self.dram_spare
            .get(class_id)
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The admission test: does a candidate with count `candidate_count` beat the DRAM
    /// item with count `victim_count`?
    fn admits(&self, candidate_count: u8, victim_count: u8) -> bool {
        u16::from(candidate_count) >= u16::from(victim_count) + u16::from(self.margin)
    }
}

/// Dual-LRU's additions at the tails: Promote offers in the slow tier, demotions in DRAM.
pub(crate) struct Hooks;

impl TailHooks for Hooks {
    fn at_hot_or_warm_tail(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        cs: &mut ClassState,
        h: HeaderRead<'_>,
        _now_s: u32,
    ) -> bool {
        if tier.id != TierId::Slow
            || !h.has(state::PROMOTE)
            || h.has(state::QUEUED)
            || !e.migrating()
        {
            return false;
        }
        // A Promote item at the slow tier's HOT or WARM tail enters Move-to-DRAM (the
        // read that set Promote could not queue it). It stays readable in WARM until
        // the migration thread copies it. Queue mark, ACTIVE and links: one header write.
        let w = h.charge_write(header_bytes::LINKS);
        e.offer_move(Direction::ToDram, w, true, &*cs);
        w.clear(state::ACTIVE);
        cs.stats.moves_to_warm += 1;
        cs.lru.move_to(&tier.mem, w, crate::lru::WARM);
        true
    }

    fn at_cold_tail(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        cs: &mut ClassState,
        h: HeaderRead<'_>,
        now_s: u32,
    ) -> bool {
        // The DRAM COLD tail leaves for the slow tier (Move-to-slow) instead of being
        // evicted.
        tier.id == TierId::Dram
            && e.migrating()
            && tiering::wants_demotion(e, tier, cs, h, now_s)
            && e.offer_move_charged(Direction::ToSlow, h, true, &*cs)
    }
}

impl Registered for DualLru {
    const MOVES_ITEMS: bool = true;

    fn new(config: &EngineConfig) -> DualLru {
        DualLru::new(config)
    }
}

impl Policy for DualLru {
    fn new_item_access(&self, _now_s: u32) -> u8 {
        self.periods.fresh()
    }

    /// Always inlined (into `Engine::read`, through `AnyPolicy`): the hit's header view
    /// and edit then stay in registers (a call costs a GET more: measured in
    /// docs/results/engine-hot-path-figures.md).
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
        let h = item;
        // The hit's header writes, charged once when the edit ends: the access word, or
        // links, state and access word if the item was relinked.
        let mut edit = h.edit(header_bytes::ACCESS);
        let was_active = h.has(state::ACTIVE);
        self.periods.record(&mut edit, now_s);
        if was_active {
            // Fogcached's Promote state: a slow-tier item referenced again while ACTIVE
            // is offered to Move-to-DRAM at once (never waiting for the queue's lock);
            // the slow maintainer offers it again at its HOT/WARM tails if the queue
            // was busy. While DRAM is full, only an item that could beat even an idle
            // victim is offered at all.
            if tier.id == TierId::Slow
                && !h.has(state::QUEUED)
                && e.migrating()
                && (self.spare_hint(class_id) || self.admits(self.periods.count_of(h), 0))
            {
                let w = edit.write();
                w.set(state::PROMOTE);
                e.offer_move(Direction::ToDram, w, false, &*entry);
            }
        } else {
            // The slow tier's LRU order is kept lazily (see `maintain_class`).
            let may_move = tier.id != TierId::Slow || !tiering::slow_has_room(tier);
            slru::hit(tier, &mut edit, may_move);
        }
        edit.finish()
    }

    fn destination<'e>(
        &self,
        e: EngineOps<'e>,
        direction: Direction,
        class_id: usize,
        total_bytes: usize,
        candidate: Candidate,
    ) -> Result<Destination<'e>, Refusal> {
        match direction {
            Direction::ToSlow => Ok(Destination::SlowTier),
            Direction::ToDram => {
                let dram = e.dram();
                {
                    let mut cs = dram.classes[class_id].0.lock();
                    if tiering::dram_has_spare(dram, &cs) {
                        // DRAM never sits idle while hot items wait in the slow tier.
                        return e
                            .take_chunk(dram, &mut cs, total_bytes)
                            .map(Destination::Chunk)
                            .ok_or(Refusal::NoSpace);
                    }
                }
                let candidate_count = self
                    .periods
                    .decayed(candidate.access, candidate.last_access_s);
                // Admitted against the COLD-tail victim first, even when a reserve chunk
                // is free: the reserve is for new items, not for promotions.
                {
                    let mut cs = dram.classes[class_id].0.lock();
                    let now = e.now_s();
                    let victim_count = tiering::dram_victim(e, &mut cs, now)
                        .map_or(0, |v| self.periods.count_of(v));
                    if !self.admits(candidate_count, victim_count) {
                        // Demand the class could not meet: the automover may give it a
                        // page from a class whose items are colder.
                        cs.dram_pressure += 1;
                        return Err(Refusal::NotAdmitted);
                    }
                }
                // Each victim the demotions would take is tested again
                // (`admits_promotion`).
                Ok(Destination::DramByDemoting {
                    score: candidate_count,
                })
            }
        }
    }

    fn admits_promotion(&self, score: u8, victim: HeaderRead<'_>) -> bool {
        self.admits(score, self.periods.count_of(victim))
    }

    fn begin_pass(&self, e: EngineOps<'_>, tier: &SlabTier) {
        if tier.id == TierId::Dram {
            self.periods.advance(e);
        }
    }

    fn maintain_class(&self, e: EngineOps<'_>, tier: &SlabTier, class_id: usize) -> usize {
        if tier.id == TierId::Slow && tiering::slow_has_room(tier) {
            // The slow tier's segments order its evictions, and it evicts only when
            // full: while it has room, its maintainer leaves them alone (each juggle
            // reads a slow-tier header and rewrites neighbours' links). Promote items
            // are offered by the read that makes them so, and again by the next read if
            // the queue was full then.
            return 0;
        }
        let rounds = slru::juggle_class(e, tier, class_id, &Hooks);
        if tier.id == TierId::Dram {
            let cs = tier.classes[class_id].0.lock();
            if let Some(spare) = self.dram_spare.get(class_id) {
                spare.store(tiering::dram_has_spare(tier, &cs), Ordering::Relaxed);
            }
        }
        rounds
    }

    fn class_need(&self, _tier: &SlabTier, cs: &ClassState) -> u64 {
        cs.stats.evicted + cs.dram_pressure
    }
}
