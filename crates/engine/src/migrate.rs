//! Dual-LRU migration (Fogcached, seed 000 section 4.3; seed 004 section 4.2): the two
//! bounded Move queues that join the DRAM and slow-tier LRUs, and the copy that moves
//! one item between the tiers.
//!
//! Feeding the queues:
//! - Move-to-slow: the DRAM maintainer, at a class's DRAM COLD tail, when DRAM is
//!   (nearly) out of chunks for the class, or when the tail item was not accessed for
//!   `dram_residency_max_s` and DRAM holds more than `dram_low_water_pct` of its size.
//! - Move-to-DRAM: an item in the slow tier that is read again while ACTIVE gets the
//!   Promote state; the read offers it to the queue at once (try-lock, never waits) and
//!   the slow tier's maintainer offers it again when it reaches a HOT or WARM tail.
//!
//! A queue entry is `(address, CAS, key hash)`; the item stays linked in its LRU and
//! readable while it waits (its `QUEUED` bit keeps it from being queued twice). A full
//! queue refuses the entry and counts it: the migration threads shed work, never grow.
//!
//! One migration ([`Engine::migrate`]):
//! 1. under the key's shard lock, check the index still maps the key hash to the
//!    address and the item's CAS is the queued one; read its size; unlock;
//! 2. allocate in the destination tier with no lock held (a promotion may demote the
//!    DRAM COLD tail to make room, but never evicts: with no room it gives up and the
//!    item stays in the slow tier; a demotion into a full slow tier evicts the slow
//!    tier's own COLD tail, the only place a hybrid cache loses items);
//! 3. lock the shard again and re-check as in 1 (a `set`, `delete`, `incr`, `append`,
//!    `touch`-with-expiry that ran in between changed the CAS or the address: the
//!    migration gives up and frees its chunk, so the request wins); copy key, value
//!    and header; swap the index entry; link the copy (DRAM HOT head, or slow COLD
//!    head); unlink and free the source; unlock.
//!
//! So the only lock held during the copy is the key's shard lock: a client request on
//! that key waits at most for one item copy, and no LRU (class) lock is held during a
//! copy. Lock order stays shard -> class -> pool; on the client path (a store that
//! needs DRAM room, which may already hold its own shard lock) shards are only
//! `try_lock`ed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::api::{MigrationCounts, TierId};
use crate::config::SLAB_PAGE_SIZE_BYTES;
use crate::engine::{Engine, Pull, Tier};
use crate::index::{Index, ShardGuard};
use crate::item::{state, ItemAddr, ItemMemory, NIL};
use crate::lru::{COLD, HOT, WARM};
use crate::slab::Geometry;

/// Entries a migration step takes from each queue before returning (bounds the time a
/// test or the sim spends in one step; the threads loop).
const MIGRATION_BATCH: usize = 64;

/// Items looked at from the DRAM COLD tail for a demotion candidate.
const DEMOTE_TAIL_TRIES: usize = 5;

/// Synchronous demotions a promotion tries before giving up (each frees one chunk,
/// unless a concurrent allocation takes it first).
const ROOM_TRIES: usize = 4;

/// HOT + WARM tail pulls that may feed an empty DRAM COLD segment before a demotion
/// (an ACTIVE tail item is rescued to WARM's head rather than moved to COLD, so one
/// pull may move nothing into COLD).
const FEED_COLD_PULLS: usize = 8;

/// Passes over a moving DRAM page demoting its items before the rest are evicted (an
/// item changed in place during a pass, e.g. by `incr`, is skipped by that pass).
pub(crate) const PAGE_DEMOTE_PASSES: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Move-to-DRAM (promotion).
    ToDram,
    /// Move-to-slow (demotion).
    ToSlow,
}

/// How a migration takes the item's shard lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShardLocking {
    /// Wait for it (migration threads, which hold no other lock).
    Wait,
    /// Give up if it is busy (a client store, which may hold another shard).
    Try,
}

/// One Move-queue entry: the item as it was when queued.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MoveReq {
    addr: ItemAddr,
    cas: u64,
    key_hash: u32,
    /// Move-to-DRAM: 1/32-second ticks between the item's last two accesses when it
    /// was queued (promotion admission); 0 for Move-to-slow. Fills the entry's padding.
    reuse_gap_ticks: u32,
}

/// A bounded FIFO. The deque is allocated once at its full capacity, so pushing never
/// allocates (the read path may push).
struct MoveQueue {
    entries: Mutex<VecDeque<MoveReq>>,
    /// Mirror of the length, read without the lock (stats, the read path's pre-check).
    len: AtomicUsize,
}

impl MoveQueue {
    fn new(capacity: usize) -> MoveQueue {
        MoveQueue {
            entries: Mutex::new(VecDeque::with_capacity(capacity)),
            len: AtomicUsize::new(0),
        }
    }
}

/// The Move queues and the migration counters.
pub(crate) struct Migration {
    capacity: usize,
    to_dram: MoveQueue,
    to_slow: MoveQueue,
    pub promotions: AtomicU64,
    pub demotions: AtomicU64,
    pub promotions_failed: AtomicU64,
    /// Promotions refused by the admission rule (see `alloc_for_promotion`).
    pub promotions_skipped: AtomicU64,
    pub demotions_failed: AtomicU64,
    pub raced: AtomicU64,
    pub dropped: AtomicU64,
    /// Test builds only: the armed [`MigrationPause`], if any.
    #[cfg(feature = "test-hooks")]
    pause_before_relock: Mutex<Option<std::sync::Arc<pause::PausePoint>>>,
    /// Test builds only: every migration yields its thread at the pause point.
    #[cfg(feature = "test-hooks")]
    yield_before_relock: std::sync::atomic::AtomicBool,
}

/// What making room in DRAM by one synchronous demotion came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// An item moved to the slow tier; its chunk is free.
    Demoted,
    /// Nothing moved (no candidate, a busy shard, a race, or a full slow tier).
    NotDemoted,
    /// The promotion asking for room lost to the candidate's recency (admission).
    Refused,
}

/// What became of one migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Moved,
    /// A request changed, replaced or removed the item first (it wins).
    Raced,
    /// No chunk in the destination tier.
    NoSpace,
    /// The shard was busy (only with `ShardLocking::Try`).
    Busy,
    /// A promotion refused by the admission rule: the item stays in the slow tier.
    Skipped,
}

impl Migration {
    pub fn new(capacity: usize) -> Migration {
        let capacity = capacity.max(1);
        Migration {
            capacity,
            to_dram: MoveQueue::new(capacity),
            to_slow: MoveQueue::new(capacity),
            promotions: AtomicU64::new(0),
            demotions: AtomicU64::new(0),
            promotions_failed: AtomicU64::new(0),
            promotions_skipped: AtomicU64::new(0),
            demotions_failed: AtomicU64::new(0),
            raced: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            #[cfg(feature = "test-hooks")]
            pause_before_relock: Mutex::new(None),
            #[cfg(feature = "test-hooks")]
            yield_before_relock: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn queue(&self, direction: Direction) -> &MoveQueue {
        match direction {
            Direction::ToDram => &self.to_dram,
            Direction::ToSlow => &self.to_slow,
        }
    }

    pub fn queue_len(&self, direction: Direction) -> usize {
        self.queue(direction).len.load(Ordering::Relaxed)
    }

    /// Queues the item at `addr` for migration and marks it `QUEUED`. The caller holds
    /// the item's shard lock or its class lock, so the item cannot be freed meanwhile.
    /// With `wait == false` a busy queue lock is not waited for (the read path).
    /// `reuse_gap_ticks`: for Move-to-DRAM, the ticks between the item's last two
    /// accesses (the admission rule's measure of its recency).
    /// Returns whether the item was queued; a full queue counts a drop.
    pub fn offer(
        &self,
        direction: Direction,
        mem: &ItemMemory,
        addr: ItemAddr,
        wait: bool,
        reuse_gap_ticks: u64,
    ) -> bool {
        let queue = self.queue(direction);
        if queue.len.load(Ordering::Relaxed) >= self.capacity {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut entries = if wait {
            queue.entries.lock()
        } else {
            match queue.entries.try_lock() {
                Some(guard) => guard,
                None => return false,
            }
        };
        if entries.len() >= self.capacity {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let h = mem.header(addr);
        h.set(state::QUEUED);
        entries.push_back(MoveReq {
            addr,
            cas: h.cas.load(Ordering::Relaxed),
            key_hash: h.key_hash.load(Ordering::Relaxed),
            reuse_gap_ticks: u32::try_from(reuse_gap_ticks).unwrap_or(u32::MAX),
        });
        queue.len.store(entries.len(), Ordering::Relaxed);
        true
    }

    fn pop(&self, direction: Direction) -> Option<MoveReq> {
        let queue = self.queue(direction);
        if queue.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut entries = queue.entries.lock();
        let req = entries.pop_front();
        queue.len.store(entries.len(), Ordering::Relaxed);
        req
    }

    pub fn counts(&self) -> MigrationCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MigrationCounts {
            promotions: get(&self.promotions),
            demotions: get(&self.demotions),
            promotions_failed: get(&self.promotions_failed),
            promotions_skipped: get(&self.promotions_skipped),
            demotions_failed: get(&self.demotions_failed),
            migrations_raced: get(&self.raced),
            move_queue_dropped: get(&self.dropped),
            move_to_dram_queue_len: self.queue_len(Direction::ToDram) as u64,
            move_to_slow_queue_len: self.queue_len(Direction::ToSlow) as u64,
        }
    }

    pub fn reset_counters(&self) {
        for c in [
            &self.promotions,
            &self.demotions,
            &self.promotions_failed,
            &self.promotions_skipped,
            &self.demotions_failed,
            &self.raced,
            &self.dropped,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl Engine {
    /// Dual-LRU counters and queue lengths.
    pub fn migration_counts(&self) -> MigrationCounts {
        self.moves.counts()
    }

    /// One step of a migration thread: handles up to a batch of Move-to-slow entries
    /// (they make DRAM room), then up to a batch of Move-to-DRAM entries. Returns the
    /// entries handled (0: both queues were empty).
    pub fn migration_step(&self) -> usize {
        let mut handled = 0;
        for direction in [Direction::ToSlow, Direction::ToDram] {
            for _ in 0..MIGRATION_BATCH {
                let Some(req) = self.moves.pop(direction) else {
                    break;
                };
                handled += 1;
                self.migrate(req, direction, ShardLocking::Wait);
            }
        }
        handled
    }

    /// Whether the shard still maps `req.key_hash` to `req.addr`, the item there is
    /// linked, alive and carries the queued CAS. The caller holds the shard lock.
    fn still_queued_item(&self, table: &ShardGuard<'_>, req: &MoveReq, now_s: u32) -> bool {
        if !Index::contains(table, req.key_hash, req.addr) {
            return false;
        }
        let h = self.tier_of(req.addr).mem.header(req.addr);
        h.has(state::LINKED)
            && h.cas.load(Ordering::Relaxed) == req.cas
            && self.dead_reason(h, now_s).is_none()
    }

    fn lock_shard(&self, key_hash: u32, locking: ShardLocking) -> Option<ShardGuard<'_>> {
        let shard = self.index.shard(key_hash);
        match locking {
            ShardLocking::Wait => Some(shard.table.lock()),
            ShardLocking::Try => shard.table.try_lock(),
        }
    }

    /// Moves the queued item to the other tier (see the module comment). Returns
    /// whether it moved; every other outcome is counted.
    pub(crate) fn migrate(
        &self,
        req: MoveReq,
        direction: Direction,
        locking: ShardLocking,
    ) -> bool {
        let outcome = self.migrate_inner(req, direction, locking);
        let m = &self.moves;
        let counter = match (outcome, direction) {
            (Outcome::Moved, Direction::ToDram) => &m.promotions,
            (Outcome::Moved, Direction::ToSlow) => &m.demotions,
            (Outcome::Raced, _) => &m.raced,
            (Outcome::Skipped, _) => &m.promotions_skipped,
            (_, Direction::ToDram) => &m.promotions_failed,
            (_, Direction::ToSlow) => &m.demotions_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome == Outcome::Moved
    }

    fn migrate_inner(&self, req: MoveReq, direction: Direction, locking: ShardLocking) -> Outcome {
        let src_tier = self.tier_of(req.addr);
        let dst_tier = match direction {
            Direction::ToDram => self.dram(),
            Direction::ToSlow => match self.slow() {
                Some(t) => t,
                None => return Outcome::NoSpace,
            },
        };
        if src_tier.id == dst_tier.id {
            return Outcome::Raced;
        }
        let src = &src_tier.mem;
        // 1. Still the queued item? Its size decides the destination class.
        let (total_bytes, class_id) = {
            let Some(table) = self.lock_shard(req.key_hash, locking) else {
                src.header(req.addr).clear(state::QUEUED);
                return Outcome::Busy;
            };
            if !self.still_queued_item(&table, &req, self.clock.now_s()) {
                self.release(&table, &req);
                return Outcome::Raced;
            }
            let h = src.header(req.addr);
            if direction == Direction::ToDram && !h.has(state::PROMOTE) {
                // Not promoted (a stale entry): nothing to do.
                h.clear(state::QUEUED);
                return Outcome::Raced;
            }
            (h.total_bytes(), h.class())
        };
        // 2. A destination chunk, allocated with no lock held.
        let dst_addr = match direction {
            Direction::ToDram => {
                self.alloc_for_promotion(class_id, total_bytes, u64::from(req.reuse_gap_ticks))
            }
            Direction::ToSlow => self
                .alloc(dst_tier, class_id, total_bytes)
                .ok_or(Outcome::NoSpace),
        };
        let dst_addr = match dst_addr {
            Ok(addr) => addr,
            Err(Outcome::Skipped) => {
                // Not admitted: the item stays in the slow tier, served from there, and
                // leaves the Promote state; a later read while ACTIVE offers it again
                // with its new reuse gap.
                if let Some(table) = self.lock_shard(req.key_hash, locking) {
                    if Index::contains(&table, req.key_hash, req.addr) {
                        src.header(req.addr).clear(state::PROMOTE | state::QUEUED);
                    }
                }
                return Outcome::Skipped;
            }
            Err(outcome) => {
                self.clear_queued_if_same(&req, locking);
                if direction == Direction::ToDram {
                    // The automover gives this class a DRAM page (no lock is held here).
                    self.dram().classes[class_id].0.lock().dram_pressure += 1;
                }
                return outcome;
            }
        };
        // Test builds only: a test may hold this migration here (or have every
        // migration yield here) to run requests that only the re-check below can see.
        #[cfg(feature = "test-hooks")]
        self.moves.pause_point_before_relock(&req, direction);
        // 3. Re-check, copy, swap.
        let Some(mut table) = self.lock_shard(req.key_hash, locking) else {
            self.free_unlinked(dst_addr);
            src.header(req.addr).clear(state::QUEUED);
            return Outcome::Busy;
        };
        let now = self.clock.now_s();
        let src_h = src.header(req.addr);
        if !self.still_queued_item(&table, &req, now) || src_h.total_bytes() != total_bytes {
            self.release(&table, &req);
            drop(table);
            self.free_unlinked(dst_addr);
            return Outcome::Raced;
        }
        let capacity = if class_id == self.geometry.large {
            Geometry::large_run_pages(total_bytes) * SLAB_PAGE_SIZE_BYTES
        } else {
            self.geometry.chunk_bytes[class_id]
        };
        let dst = &dst_tier.mem;
        src.charge_read(req.addr, 0, total_bytes);
        // SAFETY: we hold the source item's shard lock (item.rs invariant 3), so its
        // key and value are stable; the destination chunk was allocated above for at
        // least `total_bytes` (same class geometry in both tiers) and is unpublished
        // (invariant 3 (a)). Source and destination are distinct chunks.
        unsafe {
            let key = src.key(req.addr);
            let value = src.value(req.addr);
            dst.write_item(dst_addr, capacity, key, &[value]);
        }
        let dst_h = dst.header(dst_addr);
        for (to, from) in [
            (&dst_h.client_flags, &src_h.client_flags),
            (&dst_h.exptime_rel_s, &src_h.exptime_rel_s),
            (&dst_h.last_access_s, &src_h.last_access_s),
            (&dst_h.key_hash, &src_h.key_hash),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        dst_h.cas.store(req.cas, Ordering::Relaxed);
        dst_h.next.store(NIL, Ordering::Relaxed);
        dst_h.prev.store(NIL, Ordering::Relaxed);
        dst_h.set(
            (src_h.state.load(Ordering::Relaxed) & state::CARRIED_BY_MIGRATION) | state::LINKED,
        );
        Index::replace(&mut table, req.key_hash, req.addr, dst_addr);
        {
            // Fogcached: promoted items enter DRAM's HOT head, demoted items the slow
            // tier's COLD head.
            let segment = match direction {
                Direction::ToDram => HOT,
                Direction::ToSlow => COLD,
            };
            let mut cs = dst_tier.classes[class_id].0.lock();
            cs.lru.link_head(dst, segment, dst_addr);
        }
        self.unlink_from_class(req.addr);
        drop(table);
        Outcome::Moved
    }

    /// After a failed allocation: lets the item be queued again.
    fn clear_queued_if_same(&self, req: &MoveReq, locking: ShardLocking) {
        if let Some(table) = self.lock_shard(req.key_hash, locking) {
            self.release(&table, req);
        }
    }

    /// Clears `QUEUED` on the item at `req.addr` if it is still indexed (possibly
    /// changed in place, e.g. by `incr`), so it can be queued again. Clearing it on an
    /// item queued by someone else would at worst queue it twice, which the checks of
    /// `migrate` make harmless. The caller holds the shard lock.
    fn release(&self, table: &ShardGuard<'_>, req: &MoveReq) {
        if Index::contains(table, req.key_hash, req.addr) {
            self.tier_of(req.addr)
                .mem
                .header(req.addr)
                .clear(state::QUEUED);
        }
    }

    /// A DRAM chunk for a promotion: a free one (always taken: DRAM never sits idle
    /// while hot items wait in the slow tier); else, if the promotion is admitted,
    /// demote the class's DRAM COLD tail (one item copy each) and take the chunk it
    /// freed, a few times; else give the promotion up (`NoSpace`, counted by the
    /// caller: the item stays in the slow tier and is still served). A promotion never
    /// evicts: the item it would push out of DRAM still has a place in the slow tier
    /// (only a full slow tier loses items).
    ///
    /// Admission (LIRS-like): with DRAM full, the item is promoted only if the gap
    /// between its last two accesses (`reuse_gap_ticks`) is shorter than the idle time
    /// of the DRAM COLD-tail item it would displace; otherwise the swap would likely be
    /// undone soon (`Skipped`, counted in `promotions_skipped`).
    fn alloc_for_promotion(
        &self,
        class_id: usize,
        total_bytes: usize,
        reuse_gap_ticks: u64,
    ) -> Result<ItemAddr, Outcome> {
        let dram = self.dram();
        if let Some(addr) = self.take_free(dram, class_id, total_bytes) {
            return Ok(addr);
        }
        for _ in 0..ROOM_TRIES {
            let room = self.make_dram_room(class_id, ShardLocking::Wait, Some(reuse_gap_ticks));
            // Even a failed demotion may have raced one that freed a chunk.
            if let Some(addr) = self.take_free(dram, class_id, total_bytes) {
                return Ok(addr);
            }
            match room {
                Room::Demoted => {}
                Room::NotDemoted => break,
                Room::Refused => return Err(Outcome::Skipped),
            }
        }
        Err(Outcome::NoSpace)
    }

    /// [`Engine::make_dram_room`] for a store (no admission rule). Returns whether an
    /// item moved.
    pub(crate) fn demote_cold_tail_now(&self, class_id: usize, locking: ShardLocking) -> bool {
        self.make_dram_room(class_id, locking, None) == Room::Demoted
    }

    /// Demotes one item from the DRAM COLD tail of `class_id` right now (a store that
    /// found DRAM full, or a promotion making room). With `admit_gap_ticks` (a
    /// promotion), the candidate is demoted only if it has been idle longer than that
    /// gap; otherwise the answer is `Room::Refused` and nothing moves.
    ///
    /// The candidate may already have a Move-to-slow entry (`QUEUED`): this is the same
    /// move, done now. The entry left in the queue is then stale and `migrate` drops it
    /// (the index no longer maps the key to that DRAM address, or, if the key came back
    /// to the same chunk, it is a live item whose demotion is merely early); a request
    /// that changed the item in between still wins by its CAS or address. If COLD is
    /// empty, HOT and WARM tails flow into it first (ACTIVE items are rescued to WARM
    /// as the maintainer would), so room is made by demoting, never by evicting.
    pub(crate) fn make_dram_room(
        &self,
        class_id: usize,
        locking: ShardLocking,
        admit_gap_ticks: Option<u64>,
    ) -> Room {
        let dram = self.dram();
        let req = {
            let mut cs = dram.classes[class_id].0.lock();
            let now = self.clock.now_s();
            for _ in 0..FEED_COLD_PULLS {
                if cs.lru.tail[COLD] != NIL {
                    break;
                }
                // As memcached's allocation does: let HOT and WARM flow into COLD.
                let moved = self.pull_tail(dram, &mut cs, HOT, 0, 0, Pull::Juggle, now)
                    + self.pull_tail(dram, &mut cs, WARM, 0, 0, Pull::Juggle, now);
                if moved == 0 {
                    break;
                }
            }
            let mut search = cs.lru.tail[COLD];
            let mut found = None;
            for _ in 0..DEMOTE_TAIL_TRIES {
                if search == NIL {
                    break;
                }
                let h = dram.mem.header(search);
                if h.has(state::LINKED) && self.dead_reason(h, now).is_none() {
                    if let Some(gap) = admit_gap_ticks {
                        let idle = self.ticks_at(now).saturating_sub(h.last_access_ticks());
                        if gap >= idle {
                            // DRAM's coldest item is at least as recent as the newcomer.
                            return Room::Refused;
                        }
                    }
                    h.set(state::QUEUED);
                    found = Some(MoveReq {
                        addr: search,
                        cas: h.cas.load(Ordering::Relaxed),
                        key_hash: h.key_hash.load(Ordering::Relaxed),
                        reuse_gap_ticks: 0,
                    });
                    break;
                }
                search = h.prev.load(Ordering::Relaxed);
            }
            // The caller found no free DRAM chunk for the class and needs one: tell the
            // automover (not for a refused promotion, which needs no room).
            cs.dram_pressure += 1;
            found
        };
        match req {
            Some(req) if self.migrate(req, Direction::ToSlow, locking) => Room::Demoted,
            _ => Room::NotDemoted,
        }
    }

    /// Whether a DRAM page being moved can hand its items to the slow tier instead of
    /// evicting them.
    pub(crate) fn page_moves_demote(&self, tier: &Tier) -> bool {
        tier.id == TierId::Dram
            && tier.page_count > 0
            && self.slow().is_some_and(|t| t.page_count > 0)
    }

    /// Before a DRAM page of class `src` is emptied by the slab mover: demotes every
    /// live item in it to the slow tier (one copy each), so a page move loses no item.
    /// The page is marked as moving first, so freed chunks (and the free ones already
    /// in it) stay off the free list; `evacuate_page` then finishes the move and evicts
    /// (and counts) only what could not be demoted. Bounded by the chunks of one page.
    /// The caller holds no lock (demotions wait for shard locks). Returns whether some
    /// item was looked at but did not move (another pass may take it).
    pub(crate) fn demote_page_items(&self, tier: &Tier, src: usize, page: usize) -> bool {
        let reqs: Vec<MoveReq> = {
            let mut cs = tier.classes[src].0.lock();
            if !cs.pages.contains(&(page as u32))
                || cs.moving_page.is_some_and(|p| p as usize != page)
            {
                return false;
            }
            let now = self.clock.now_s();
            let base = page * SLAB_PAGE_SIZE_BYTES;
            let chunks = if src == self.geometry.large {
                // A large item's run starts at its first page; nothing to reserve.
                1
            } else {
                cs.moving_page = Some(page as u32);
                cs.per_page
            };
            let mut reqs = Vec::with_capacity(chunks);
            for i in 0..chunks {
                let addr = tier.mem.addr_at(base + i * cs.chunk_bytes);
                let h = tier.mem.header(addr);
                let bits = h.state.load(Ordering::Relaxed);
                if bits & state::FREE != 0 && src != self.geometry.large {
                    cs.unlink_free(&tier.mem, addr);
                } else if bits & state::LINKED != 0 && self.dead_reason(h, now).is_none() {
                    // Even if already queued: a second entry for the same item is
                    // harmless (the address + CAS check of `migrate`).
                    h.set(state::QUEUED);
                    reqs.push(MoveReq {
                        addr,
                        cas: h.cas.load(Ordering::Relaxed),
                        key_hash: h.key_hash.load(Ordering::Relaxed),
                        reuse_gap_ticks: 0,
                    });
                }
            }
            reqs
        };
        let mut left_behind = false;
        for req in reqs {
            if !self.migrate(req, Direction::ToSlow, ShardLocking::Wait) {
                left_behind = true;
            }
        }
        left_behind
    }

    /// Whether DRAM is (nearly) out of room for `cs`'s class: no free page in the pool
    /// and under 5 % of the class's chunks free (seed 004: "DRAM has almost no free
    /// space"). The caller holds the class lock (the pool lock is a leaf).
    pub(crate) fn dram_needs_room(&self, tier: &Tier, cs: &crate::slab::ClassState) -> bool {
        let total_chunks = (cs.pages.len() * cs.per_page) as u64;
        cs.free_chunks * 20 <= total_chunks && tier.pool.lock().free_pages() == 0
    }

    /// Whether age-based demotion may run: DRAM holds more than the low-water share of
    /// its size (as seen at the maintainer's last pass). This is what keeps the age
    /// limit from draining DRAM (seed 001).
    pub(crate) fn dram_above_low_water(&self) -> bool {
        let dram = self.dram();
        let limit = (dram.page_count * SLAB_PAGE_SIZE_BYTES) as u64;
        let seen = dram.item_bytes_seen.load(Ordering::Relaxed);
        seen.saturating_mul(100) > limit.saturating_mul(u64::from(self.config.dram_low_water_pct))
    }

    /// Which tier a key's item is in now (tests, `me`-style debugging); `None` if absent.
    pub fn tier_of_key(&self, key: &[u8]) -> Option<TierId> {
        let key_hash = self.index.hash(key);
        let table = self.index.shard(key_hash).table.lock();
        Index::find(&table, |a| &self.tier_of(a).mem, key_hash, key).map(|a| self.tier_of(a).id)
    }
}

#[cfg(feature = "test-hooks")]
pub use pause::MigrationPause;

/// Test builds only (cargo feature `test-hooks`, which the engine's own tests turn on
/// through the engine's dev-dependency on itself; `cargo build -p server` never does):
/// one pause point in a migration, after the destination chunk is allocated and before
/// the item's shard is locked again for the re-check and the copy (between steps 2 and
/// 3 of the module comment). No lock is held there, so a test can run a request on the
/// key while the migration waits, and check that the re-check makes the request win;
/// or a stress test can have every migration yield its thread there, as a preemption
/// would, so that concurrent requests meet the re-check often rather than rarely.
#[cfg(feature = "test-hooks")]
mod pause {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use parking_lot::{Condvar, Mutex};

    use super::{Direction, Migration, MoveReq};
    use crate::api::TierId;
    use crate::engine::Engine;

    /// A paused migration goes on by itself after this long (a backstop for a test that
    /// neither releases nor drops its `MigrationPause`; `release` then reports it).
    const PAUSE_MAX: Duration = Duration::from_secs(60);

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Phase {
        Armed,
        Paused,
        Released,
        GaveUp,
    }

    pub(crate) struct PausePoint {
        key_hash: u32,
        direction: Direction,
        phase: Mutex<Phase>,
        changed: Condvar,
    }

    /// Holds the next migration of one key in one direction at the pause point (see the
    /// module). Dropping it releases the migration, or disarms the pause if no migration
    /// reached it, so a failing test never leaves a migration thread stuck.
    #[must_use = "dropping the pause releases the migration at once"]
    pub struct MigrationPause<'e> {
        moves: &'e Migration,
        point: Arc<PausePoint>,
    }

    impl Engine {
        /// Test builds only: arms a pause for the next migration of `key` to tier `to`
        /// (`TierId::Dram`: a promotion; `TierId::Slow`: a demotion), wherever it runs
        /// (a migration thread, a store making DRAM room, a page move). One at a time.
        pub fn pause_migration_before_relock(&self, key: &[u8], to: TierId) -> MigrationPause<'_> {
            let point = Arc::new(PausePoint {
                key_hash: self.index.hash(key),
                direction: match to {
                    TierId::Dram => Direction::ToDram,
                    TierId::Slow => Direction::ToSlow,
                },
                phase: Mutex::new(Phase::Armed),
                changed: Condvar::new(),
            });
            let mut armed = self.moves.pause_before_relock.lock();
            assert!(armed.is_none(), "one migration pause at a time");
            *armed = Some(Arc::clone(&point));
            MigrationPause {
                moves: &self.moves,
                point,
            }
        }
    }

    impl Engine {
        /// Test builds only: with `on`, every migration yields its thread at the pause
        /// point (what a preemption there does in production), which widens the window
        /// only the re-check covers from a few instructions to a scheduling slice.
        pub fn yield_migrations_before_relock(&self, on: bool) {
            self.moves.yield_before_relock.store(on, Ordering::Relaxed);
        }
    }

    impl MigrationPause<'_> {
        /// Waits until the migration is held at the pause point; false if none got there
        /// within `timeout`.
        pub fn wait_until_paused(&self, timeout: Duration) -> bool {
            let deadline = Instant::now() + timeout;
            let mut phase = self.point.phase.lock();
            while *phase == Phase::Armed {
                if self
                    .point
                    .changed
                    .wait_until(&mut phase, deadline)
                    .timed_out()
                {
                    break;
                }
            }
            *phase == Phase::Paused
        }

        /// Lets the migration go on (to its re-check). Returns whether it was still held
        /// here: false if it never arrived or gave up waiting.
        pub fn release(&self) -> bool {
            {
                let mut armed = self.moves.pause_before_relock.lock();
                if armed.as_ref().is_some_and(|p| Arc::ptr_eq(p, &self.point)) {
                    *armed = None;
                }
            }
            let mut phase = self.point.phase.lock();
            let was_paused = *phase == Phase::Paused;
            *phase = Phase::Released;
            self.point.changed.notify_all();
            was_paused
        }
    }

    impl Drop for MigrationPause<'_> {
        fn drop(&mut self) {
            self.release();
        }
    }

    impl Migration {
        /// The pause point itself: holds this migration if a test armed a pause for it.
        pub(crate) fn pause_point_before_relock(&self, req: &MoveReq, direction: Direction) {
            if self.yield_before_relock.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            let point = {
                let mut armed = self.pause_before_relock.lock();
                match armed.as_ref() {
                    Some(p) if p.key_hash == req.key_hash && p.direction == direction => {
                        armed.take()
                    }
                    _ => None,
                }
            };
            let Some(point) = point else {
                return;
            };
            let mut phase = point.phase.lock();
            if *phase != Phase::Armed {
                return;
            }
            *phase = Phase::Paused;
            point.changed.notify_all();
            let deadline = Instant::now() + PAUSE_MAX;
            while *phase == Phase::Paused {
                if point.changed.wait_until(&mut phase, deadline).timed_out() {
                    *phase = Phase::GaveUp;
                }
            }
        }
    }
}
