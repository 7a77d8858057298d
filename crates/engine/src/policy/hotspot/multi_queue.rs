//! The hotspot policy's DRAM replacement: a class's DRAM items in `--mq-queues` LRU
//! lists by access count, the victim search over their tails, decay down the queues,
//! and the DRAM hit that moves an item between queues.

use super::super::engine_ops::EngineOps;
use super::super::engine_ops::SlabTier;
use crate::api::TierId;
use crate::item::{header_bytes, state, HeaderRead, NIL};
use crate::slab::ClassState;

use super::super::{EvictionSearch, EvictionStep};
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

    /// Room in a full DRAM class, one step of an eviction search
    /// ([`super::super::Policy::eviction_step`]): the multi-queue (or hyperbolic)
    /// victim, a few searches over; then, bounded as the slow tier's CLOCK is, the
    /// first item from the lowest queue's tail not on its way out. The caller holds the
    /// class lock.
    pub(super) fn dram_eviction_step<'t>(
        &self,
        e: EngineOps<'t>,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        now_s: u32,
        search: &mut EvictionSearch<'t>,
    ) -> EvictionStep<'t> {
        /// Phases of the search (`search.phase`).
        const SEARCHES: u8 = 0;
        const LOWEST_TAIL: u8 = 1;
        debug_assert_eq!(tier.id, TierId::Dram);
        if !search.started {
            if !e.config().evictions_enabled {
                return EvictionStep::Done(0);
            }
            search.started = true;
            // The victim search reclaims dead items it passes: that is room too.
            search.noted = cs.free_chunks;
        }
        let busy = search.busy.take();
        if search.phase == SEARCHES {
            if let Some(h) = busy {
                // Its shard is locked by a request in flight (a hot key's, most
                // likely): as memcached passes over a tail item in use, bump it to its
                // queue's head so that the next search finds another. (Hyperbolic
                // sampling draws another by itself.)
                if !self.hyperbolic {
                    let count = self.periods.count_of(h);
                    super::super::slru::move_to(tier, cs, h, queue_of(count, self.queues));
                }
                if cs.free_chunks > search.noted {
                    return EvictionStep::Done(1);
                }
                search.tries += 1;
            }
            while search.tries < VICTIM_SEARCHES {
                // None: every item looked at was active or belonged to a lower queue,
                // and was moved there (its ACTIVE bit cleared): the next search starts
                // from a different tail.
                if let Some(h) = self.dram_victim(e, cs, now_s) {
                    return EvictionStep::Evict(h);
                }
                if cs.free_chunks > search.noted {
                    return EvictionStep::Done(1);
                }
                search.tries += 1;
            }
            // When every item the searches saw was just read, the oldest of the lowest
            // queue goes anyway, so a store never fails because everything is hot.
            let Some(tail) = cs.lru.tail.iter().copied().find(|&t| t != NIL) else {
                return EvictionStep::Done(0);
            };
            search.phase = LOWEST_TAIL;
            search.cursor = tail;
            search.tries = VICTIM_TRIES;
        }
        debug_assert_eq!(search.phase, LOWEST_TAIL);
        // A busy victim here: the search goes on from the item before it (`cursor`).
        while search.tries > 0 {
            search.tries -= 1;
            if search.cursor == NIL {
                return EvictionStep::Done(0);
            }
            let h = tier.mem.read_header(search.cursor, header_bytes::ALL);
            search.cursor = h.prev();
            if !h.has(state::QUEUED) {
                return EvictionStep::Evict(h);
            }
        }
        EvictionStep::Done(0)
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
