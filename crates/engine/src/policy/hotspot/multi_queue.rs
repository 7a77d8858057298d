//! The hotspot policy's DRAM replacement: a class's DRAM items in `--mq-queues` LRU
//! lists by access count, the victim search over their tails, decay down the queues,
//! and the DRAM hit that moves an item between queues.

use super::super::engine_ops::EngineOps;
use super::super::engine_ops::SlabTier;
use crate::api::TierId;
use crate::item::{header_bytes, state, HeaderRead, NIL};
use crate::slab::ClassState;

use super::Hotspot;

/// Items a victim search looks at per queue before trying the next queue.
const VICTIM_TRIES: usize = 8;
/// Victim searches one DRAM allocation makes before it gives up: a search can come back
/// empty (every item it looked at was active) or with an item whose shard a request in
/// flight holds, and the next one starts from a changed tail.
const VICTIM_SEARCHES: usize = 5;
/// Items looked at per queue tail per maintainer pass for decay.
const DECAY_TRIES: usize = 16;

/// The multi-queue queue of a counter: i for counts in [2^i, 2^(i+1)), 0 for 0 and 1.
pub(crate) fn queue_of(count: u8, queues: usize) -> usize {
    let log2 = if count < 2 {
        0
    } else {
        7 - count.leading_zeros() as usize
    };
    log2.min(queues - 1)
}

impl Hotspot {
    /// The DRAM victim of `cs`'s class under the multi-queue: from queue 0 up, the first
    /// tail item that is live, not queued for a move, not ACTIVE and not due to move
    /// down a queue. ACTIVE items get a second chance at their queue's head; decayed
    /// ones move down; dead ones met on the way are reclaimed (the caller finds their
    /// chunks free). Charges what it reads (DRAM); the victim's header comes back as the
    /// view of that read. The caller holds the class lock.
    pub(super) fn dram_victim<'e>(
        &self,
        e: EngineOps<'e>,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        if self.hyperbolic {
            return self.hyperbolic_victim(e, cs, now_s);
        }
        let dram = e.dram();
        let mut fallback = None;
        for queue in 0..self.queues {
            let mut search = cs.lru.tail[queue];
            // Items already queued for demotion wait at the tail until the migration
            // thread moves them: they are passed over without using up a try (bounded
            // by the move queue's capacity), or a burst of demotions would reach into
            // the next queue up.
            let mut tries = VICTIM_TRIES;
            let mut queued_passed = 0;
            while tries > 0 && queued_passed <= e.config().move_queue_max {
                if search == NIL {
                    break;
                }
                let h = dram.mem.read_header(search, header_bytes::ALL);
                let prev = h.prev();
                if !h.has(state::LINKED) {
                    search = prev;
                    continue;
                }
                if e.dead_reason(h, now_s).is_some() {
                    // Expired or flushed: its chunk is room already, no demotion needed.
                    e.reclaim_dead(dram, cs, h, false);
                    search = prev;
                    continue;
                }
                if h.has(state::QUEUED) {
                    // Already on its way out (the demotion the maintainer queued): the
                    // same move, done now, if nothing better is found.
                    fallback.get_or_insert(h);
                    queued_passed += 1;
                    search = prev;
                    continue;
                }
                tries -= 1;
                let due = queue_of(self.periods.count_of(h), self.queues);
                if h.has(state::ACTIVE) || due < queue {
                    let w = h.charge_write(header_bytes::LINKS);
                    w.clear(state::ACTIVE);
                    cs.lru.move_to(&dram.mem, w, due.min(queue));
                    search = prev;
                    continue;
                }
                return Some(h);
            }
        }
        fallback
    }

    /// Evicts the first item, from the tail of the lowest non-empty DRAM queue, whose
    /// shard is free and that is not on its way out; false when a few tries found none.
    /// The caller holds the class lock.
    pub(super) fn evict_lowest_tail(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        cs: &mut ClassState,
        now_s: u32,
    ) -> bool {
        let Some(mut addr) = cs.lru.tail.iter().copied().find(|&t| t != NIL) else {
            return false;
        };
        for _ in 0..VICTIM_TRIES {
            if addr == NIL {
                return false;
            }
            let h = tier.mem.read_header(addr, header_bytes::ALL);
            let prev = h.prev();
            if !h.has(state::QUEUED) && e.evict_item(tier, cs, h, now_s) {
                return true;
            }
            addr = prev;
        }
        false
    }

    /// Moves items whose counters decayed below their queue down to the queue they
    /// belong in (from each queue's tail, a few per pass). The caller holds the lock.
    pub(super) fn decay_queues(&self, e: EngineOps<'_>, cs: &mut ClassState) {
        if self.hyperbolic {
            return;
        }
        let dram = e.dram();
        for queue in 1..self.queues {
            let mut search = cs.lru.tail[queue];
            for _ in 0..DECAY_TRIES {
                if search == NIL {
                    break;
                }
                let h = dram.mem.read_header(search, header_bytes::ALL);
                let prev = h.prev();
                let due = queue_of(self.periods.count_of(h), self.queues);
                if due >= queue {
                    // The tail is still hot enough for its queue: so is most of the rest.
                    break;
                }
                super::super::slru::move_to(dram, cs, h, due);
                search = prev;
            }
        }
    }

    /// Room in a full DRAM class: evicts the multi-queue (or hyperbolic) victim, passing
    /// over victims whose shard is locked. Returns the items removed. The caller holds
    /// the class lock.
    pub(super) fn make_dram_room(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        cs: &mut ClassState,
        now_s: u32,
    ) -> usize {
        debug_assert_eq!(tier.id, TierId::Dram);
        if !e.config().evictions_enabled {
            return 0;
        }
        // The victim search reclaims dead items it passes: that is room too.
        let free_before = cs.free_chunks;
        for _ in 0..VICTIM_SEARCHES {
            // None: every item looked at was active or belonged to a lower
            // queue, and was moved there (its ACTIVE bit cleared): the next
            // search starts from a different tail.
            if let Some(h) = self.dram_victim(e, cs, now_s) {
                if e.evict_item(tier, cs, h, now_s) {
                    return 1;
                }
                // Its shard is locked by a request in flight (a hot key's, most
                // likely): as memcached passes over a tail item in use, bump it
                // to its queue's head so that the next search finds another.
                // (Hyperbolic sampling draws another by itself.)
                if !self.hyperbolic {
                    let count = self.periods.count_of(h);
                    super::super::slru::move_to(tier, cs, h, queue_of(count, self.queues));
                }
            }
            if cs.free_chunks > free_before {
                return 1;
            }
        }
        // Bounded, as the slow tier's CLOCK is: when every item the searches saw
        // was just read, the oldest of the lowest queue goes anyway, so a store
        // never fails because everything is hot.
        usize::from(self.evict_lowest_tail(e, tier, cs, now_s))
    }

    /// A hit on a DRAM item under the multi-queue (the common GET): the counter and the
    /// access time, the queue the counter now belongs in (relinked there if the class
    /// lock is free: the maintainer's victim search fixes it otherwise), ACTIVE and
    /// FETCHED, the reassignment histogram, and the header write charged once. Returns
    /// whether the header's access word changed.
    ///
    /// Inlined into the read path (`Engine::read`): out of line, the call, its argument
    /// set-up and its saved registers are paid on every hit. One load of the state word
    /// serves the queue, ACTIVE and FETCHED checks (a relink changes only the queue
    /// bits). Hyperbolic DRAM and slow-tier
    /// items take [`Hotspot::other_access`].
    #[inline(always)]
    pub(super) fn dram_hit(
        &self,
        tier: &SlabTier,
        h: HeaderRead<'_>,
        class_id: usize,
        now_s: u32,
    ) -> bool {
        // The hit's header writes, charged once (the access word) when the edit ends.
        let mut edit = h.edit(header_bytes::ACCESS);
        // The step's `after` is the count now (reading it back would decay the byte
        // twice more, on every hit).
        let (_, step) = self.periods.record_step(&mut edit, now_s);
        let bits = h.state();
        let segment = usize::from((bits & state::SEG_MASK) >> state::SEG_SHIFT);
        let due = queue_of(step.after, self.queues);
        let mut set = 0;
        if due != segment {
            self.relink_hit(tier, h, class_id, due);
        } else if bits & state::ACTIVE == 0 {
            set |= state::ACTIVE;
        }
        if bits & state::FETCHED == 0 {
            set |= state::FETCHED;
        }
        if set != 0 {
            edit.write().set(set);
        }
        self.record_reached(class_id, step);
        edit.finish()
    }

    /// A hit moved a DRAM item's counter to queue `due`: relinks it there if the class
    /// lock is free (out of line: most hits stay in their queue), charging the links.
    #[inline(never)]
    pub(super) fn relink_hit(
        &self,
        tier: &SlabTier,
        h: HeaderRead<'_>,
        class_id: usize,
        due: usize,
    ) {
        if let Some(mut cs) = tier.classes[class_id].0.try_lock() {
            if h.has(state::LINKED) {
                super::super::slru::move_to(tier, &mut cs, h, due);
            }
        }
    }
}
