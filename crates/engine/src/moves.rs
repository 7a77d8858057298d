//! Moving items between tiers: the two bounded Move queues (Move-to-slow, Move-to-DRAM;
//! Fogcached, seed 000 section 4.3, seed 004 section 4.2) and [`Engine::move_item`], the
//! one way an item changes tier. Which items are queued, and whether a move is admitted
//! and where its destination chunk comes from, are the policy's decisions (`policy/`).
//!
//! A queue entry is `(address, CAS, key hash)`; the item stays linked in its LRU and
//! readable while it waits (its `QUEUED` bit keeps it from being queued twice). A full
//! queue refuses the entry and counts it: the migration threads shed work, never grow.
//! Entries for Move-to-DRAM name items the policy put in the Promote state.
//!
//! One move ([`Engine::move_item`]):
//! 1. under the key's shard lock, check the index still maps the key hash to the
//!    address and the item's CAS is the queued one; read its size and the policy's
//!    access byte; unlock;
//! 2. ask the policy where the move goes, with no lock held (it may refuse), and take
//!    the chunk there (`room.rs`: it may make room, e.g. by demoting another item
//!    first);
//! 3. lock the shard again and re-check as in 1 (a `set`, `delete`, `incr`, `append`,
//!    `touch`-with-expiry that ran in between changed the CAS or the address: the move
//!    gives up and frees its chunk, so the request wins); copy key, value and header;
//!    swap the index entry; link the copy where the policy says; unlink and free the
//!    source; unlock.
//!
//! So the only lock held during the copy is the key's shard lock: a client request on
//! that key waits at most for one item copy, and no LRU (class) lock is held during a
//! copy. Lock order stays shard -> class -> pool; on the client path (a store that
//! needs DRAM room, which may already hold its own shard lock) shards are only
//! `try_lock`ed.
//!
//! Who writes `QUEUED`. Between steps the mover holds no lock, so by the time it comes
//! back the item may be gone and its chunk reused, even by another class's items (a page
//! move): a write at the queued address is a write into whatever lives there now. So
//! the bit changes only here, in two places, and each says in its signature what keeps
//! the address the item's. The compiler holds the rest of the engine to that: the two
//! header writes that can change the bit (`HeaderWrite::set_queued`, `clear_marked`)
//! take a [`MarkRight`], which only this module can make, and `HeaderWrite::set`/`clear`
//! refuse it in debug builds.
//! - [`Queued::mark`] sets it, given an [`ItemLock`]: the item's shard guard (the item
//!   was found in it) or its class state (the item is on that class's list). Either
//!   lock keeps the chunk from being freed meanwhile. It also takes the header's write
//!   view (`item.rs`), whose charge pays for the mark's state write: the caller's own
//!   write of the header when it made one (a hit's edit, a relink), else a write of the
//!   state alone (`Migration::offer_charged`, a page move, a promotion's demotion).
//! - [`Engine::clear_state`] clears it (and `PROMOTE`), given an `index::Held`: the
//!   shard lock is held and the index still maps the key to that address, so it is the
//!   item, or at worst another live item of the same shard that reuses its chunk (whose
//!   mark, cleared, only lets it be queued twice: harmless, see `move_item`'s checks).
//!   The clear charges a write of the state.
//!
//! A mark is owned by a [`Queued`] (neither `Copy` nor `Clone`): a queue entry, or a page
//! move's or a promotion's synchronous demotion. A `Queued` is moved only with a
//! *waiting* shard lock, so every outcome of its move either frees the item (moved, or
//! gone when the mover looked) or clears the mark under the lock: no item stays marked
//! with nobody to clear it (it would never be queued or moved again). A move that may
//! only *try* the shard lock ([`Engine::demote_if_free`], a `two_level` store's
//! demotion) is a plain [`MoveReq`]: it never marks its item, so when the try fails it
//! has nothing to undo and writes nothing (issue 24: it used to clear `QUEUED` at the
//! address with no lock held, which could land in another item's value). Two such
//! demotions taking the same victim are made harmless by the address + CAS re-check, as
//! any duplicate entry is.
//!
//! Why not keep "queued" in the queues' own bookkeeping (a set of addresses beside the
//! deques) instead: the read path would pay a lock and a look-up where it now tests a bit
//! of a header it has loaded anyway, and so would each victim search under its class
//! lock; and that set would hold addresses that may already be another item's, so it
//! would need the same rule of who may add and remove them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::lock::{Mutex, Rank};
use crate::policy::engine_ops::EngineOps;

use crate::api::MigrationCounts;
use crate::engine::Engine;
use crate::events::{kind, EventWhat, ItemFacts};
use crate::index::{Held, Index, ShardEntry, ShardGuard};
use crate::item::{
    header_bytes, state, HeaderRead, HeaderWrite, ItemAccess, ItemAddr, ItemMemory, NIL,
};
use crate::policy::{Candidate, Policy, Refusal};
use crate::slab::ClassState;

/// Entries a migration step takes from each queue before returning (bounds the time a
/// test or the sim spends in one step; the threads loop).
pub(crate) const MIGRATION_BATCH: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Move-to-DRAM (promotion).
    ToDram,
    /// Move-to-slow (demotion).
    ToSlow,
}

/// The item a move is for, as it was when the move was decided.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MoveReq {
    pub addr: ItemAddr,
    pub cas: u64,
    pub key_hash: u32,
}

impl MoveReq {
    /// The entry for the item `h` (its header, which the caller paid to read) as it is
    /// now.
    pub fn of(h: HeaderRead<'_>) -> MoveReq {
        MoveReq {
            addr: h.addr(),
            cas: h.cas(),
            key_hash: h.key_hash(),
        }
    }
}

/// A lock that keeps an item's chunk from being freed while its `QUEUED` bit is set: its
/// shard's (`ShardGuard`: the caller found the item in that shard) or its class's
/// (`ClassState`: the item is on that class's list). Implemented for those two only.
pub(crate) trait ItemLock: sealed::Sealed {
    /// Debug builds: whether the item whose header `h` is (read by the caller, who paid
    /// for it) is where this lock pins it.
    fn pins(&self, h: HeaderRead<'_>) -> bool;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::index::ShardGuard<'_> {}
    impl Sealed for crate::index::ShardEntry<'_, '_> {}
    impl Sealed for crate::slab::ClassState {}
}

impl ItemLock for ShardGuard<'_> {
    fn pins(&self, h: HeaderRead<'_>) -> bool {
        Index::contains(self, h.key_hash(), h.addr())
    }
}

impl ItemLock for ShardEntry<'_, '_> {
    fn pins(&self, h: HeaderRead<'_>) -> bool {
        self.holds(h.key_hash(), h.addr())
    }
}

impl ItemLock for ClassState {
    fn pins(&self, h: HeaderRead<'_>) -> bool {
        // Not `LINKED`: an unlink clears that under the shard lock before it waits for
        // the class lock to take the item off the list, which is what pins it here.
        !h.has(state::FREE) && self.pages.contains(&(ItemMemory::page_of(h.addr()) as u32))
    }
}

/// The right to write `QUEUED` ([`HeaderWrite::set_queued`], `clear_marked`): made only
/// in this module (its field is private), so the two places the module comment names
/// are the only writers of the bit the compiler lets through.
pub(crate) struct MarkRight(());

/// A move that owns its item's `QUEUED` mark (see the module comment): made only by
/// [`Queued::mark`], moved only by [`Engine::move_item`], which waits for the shard lock
/// so that every outcome can clear the mark under it. Neither `Copy` nor `Clone`.
#[derive(Debug)]
#[must_use = "a Queued owns its item's QUEUED mark: move it, or the item stays marked"]
pub(crate) struct Queued {
    req: MoveReq,
}

impl Queued {
    /// Marks the item whose header `h` is `QUEUED` and takes the mark. `lock` is the lock
    /// the caller holds that keeps the chunk the item's; `h` is the header's write view,
    /// whose charge paid for the mark's state write (with whatever else the caller wrote
    /// to the header).
    pub fn mark(h: HeaderWrite<'_>, lock: &impl ItemLock) -> Queued {
        debug_assert!(
            lock.pins(h.read()),
            "marking {:#x}, which the lock does not pin",
            h.addr()
        );
        h.set_queued(MarkRight(()));
        Queued {
            req: MoveReq::of(h.read()),
        }
    }
}

/// Whether a move owns its item's `QUEUED` mark, which decides how it takes the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// A [`Queued`]: waits for the shard lock (its caller holds no shard), so each
    /// outcome clears the mark under it or finds the item gone.
    Marked,
    /// A plain [`MoveReq`]: only tries the shard (its caller may hold another) and
    /// writes none of the item's state bits, whatever the outcome.
    Unmarked,
}

/// A bounded FIFO. The deque is allocated once at its full capacity, so pushing never
/// allocates (the read path may push).
struct MoveQueue {
    entries: Mutex<VecDeque<Queued>>,
    /// Mirror of the length, read without the lock (stats, the read path's pre-check).
    len: AtomicUsize,
}

impl MoveQueue {
    fn new(capacity: usize) -> MoveQueue {
        MoveQueue {
            entries: Mutex::new(Rank::MoveQueue, VecDeque::with_capacity(capacity)),
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
    /// Promotions refused by the policy's admission rule.
    pub promotions_skipped: AtomicU64,
    pub demotions_failed: AtomicU64,
    pub raced: AtomicU64,
    pub dropped: AtomicU64,
    /// Test builds only: the armed [`crate::MigrationPause`], if any.
    #[cfg(feature = "test-hooks")]
    pub(crate) pause_before_relock: Mutex<Option<std::sync::Arc<crate::pause::PausePoint>>>,
    /// Test builds only: every move yields its thread at the pause point.
    #[cfg(feature = "test-hooks")]
    pub(crate) yield_before_relock: std::sync::atomic::AtomicBool,
}

/// What became of one move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Moved,
    /// A request changed, replaced or removed the item first (it wins).
    Raced,
    /// No chunk in the destination tier.
    NoSpace,
    /// The shard was busy (only a move that tries it: [`Engine::demote_if_free`]).
    Busy,
    /// A promotion refused by the policy's admission rule: the item stays put.
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
            pause_before_relock: Mutex::new(Rank::PauseArm, None),
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

    /// Queues the item `item` for a move and marks it `QUEUED` ([`Queued::mark`]: `lock`
    /// is the caller's lock on the item's shard or class, so the item cannot be freed
    /// meanwhile); the caller paid for the state write with whatever else it wrote to the
    /// header (`item`). With `wait == false` a busy queue lock is not waited for (the
    /// read path). Returns whether the item was queued; a full queue counts a drop.
    pub fn offer(
        &self,
        direction: Direction,
        item: HeaderWrite<'_>,
        wait: bool,
        lock: &impl ItemLock,
    ) -> bool {
        self.offer_marking(direction, wait, || item, lock)
    }

    /// [`Migration::offer`] of an item whose header the caller only read (a maintainer's
    /// scan): the `QUEUED` mark's state write is charged here, if the item is queued.
    pub fn offer_charged(
        &self,
        direction: Direction,
        item: HeaderRead<'_>,
        wait: bool,
        lock: &impl ItemLock,
    ) -> bool {
        self.offer_marking(
            direction,
            wait,
            || item.charge_write(header_bytes::STATE),
            lock,
        )
    }

    fn offer_marking<'m>(
        &self,
        direction: Direction,
        wait: bool,
        mark: impl FnOnce() -> HeaderWrite<'m>,
        lock: &impl ItemLock,
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
        entries.push_back(Queued::mark(mark(), lock));
        queue.len.store(entries.len(), Ordering::Relaxed);
        true
    }

    fn pop(&self, direction: Direction) -> Option<Queued> {
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
    /// Migration counters and queue lengths.
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
                let Some(queued) = self.moves.pop(direction) else {
                    break;
                };
                handled += 1;
                self.move_item(queued, direction);
            }
        }
        handled
    }

    /// The item the move is for, if the shard still maps `req.key_hash` to `req.addr`
    /// and the item there is linked, alive and carries the request's CAS; with the proof
    /// to read it. The caller holds the shard lock; `h` is the item's header, which the
    /// move paid to read (its first check).
    fn current_item<'g>(
        &self,
        table: &'g mut ShardGuard<'_>,
        req: &MoveReq,
        h: HeaderRead<'_>,
        now_s: u32,
    ) -> Option<Held<'g>> {
        let item = Index::held(table, req.key_hash, req.addr)?;
        let current =
            h.has(state::LINKED) && h.cas() == req.cas && self.dead_reason(h, now_s).is_none();
        current.then_some(item)
    }

    /// The shard lock of a move: waited for by the owner of a mark, only tried otherwise.
    fn lock_shard(&self, key_hash: u32, claim: Claim) -> Option<ShardGuard<'_>> {
        let shard = self.index.shard(key_hash);
        match claim {
            Claim::Marked => Some(shard.table.lock()),
            Claim::Unmarked => shard.table.try_lock(),
        }
    }

    /// Moves the item of a [`Queued`] to the other tier (see the module comment), waiting
    /// for its shard lock. Returns whether it moved; every other outcome is counted, and
    /// leaves the item (if it is still indexed) without the mark.
    pub(crate) fn move_item(&self, queued: Queued, direction: Direction) -> bool {
        self.move_counted(queued.req, direction, Claim::Marked)
    }

    /// Demotes the item `req` names to the slow tier if its shard lock is free when
    /// tried (the caller may hold another shard: a client store making DRAM room). The
    /// item is not marked, and no outcome writes to it but the move itself.
    pub(crate) fn demote_if_free(&self, req: MoveReq) -> bool {
        self.move_counted(req, Direction::ToSlow, Claim::Unmarked)
    }

    fn move_counted(&self, req: MoveReq, direction: Direction, claim: Claim) -> bool {
        let outcome = self.move_item_inner(req, direction, claim);
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

    fn move_item_inner(&self, req: MoveReq, direction: Direction, claim: Claim) -> Outcome {
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
        // 1. Still the item? Its size decides the destination class. The header's read
        // is the move's first check; step 3 re-checks the same header under this view
        // (the copy then reads the whole item).
        let (total_bytes, class_id, candidate, src_h) = {
            let Some(mut table) = self.lock_shard(req.key_hash, claim) else {
                // Nothing written: an unmarked move has nothing to undo.
                return Outcome::Busy;
            };
            let h = src.read_header(req.addr, header_bytes::ALL);
            let Some(item) = self.current_item(&mut table, &req, h, self.now_s()) else {
                self.release(&mut table, &req, claim, state::QUEUED);
                return Outcome::Raced;
            };
            if direction == Direction::ToDram && !h.has(state::PROMOTE) {
                // Not promoted (a stale entry): nothing to do.
                if claim == Claim::Marked {
                    self.clear_state(&item, state::QUEUED);
                }
                return Outcome::Raced;
            }
            (
                h.total_bytes(),
                src_tier.class_of(req.addr),
                Candidate {
                    access: h.access(),
                    last_access_s: h.last_access_s(),
                },
                h,
            )
        };
        // 2. A destination chunk, allocated with no lock held.
        let destination = self.policy.destination(
            EngineOps::new(self),
            direction,
            class_id,
            total_bytes,
            candidate,
        );
        let dst_chunk = match destination
            .and_then(|destination| self.destination_chunk(destination, class_id, total_bytes))
        {
            Ok(chunk) => chunk,
            Err(Refusal::NotAdmitted) => {
                // The item stays where it is, served from there, and leaves the
                // Promote state; a later access may offer it again.
                self.release_relocked(&req, claim, state::PROMOTE | state::QUEUED);
                return Outcome::Skipped;
            }
            Err(Refusal::NoSpace) => {
                // The automover was told of the class's need when no DRAM room was
                // found (`room.rs`, `make_dram_room`): counting it here again
                // would count one failed promotion twice.
                self.release_relocked(&req, claim, state::QUEUED);
                return Outcome::NoSpace;
            }
        };
        // Test builds only: a test may hold this move here (or have every move yield
        // here) to run requests that only the re-check below can see.
        #[cfg(feature = "test-hooks")]
        self.moves.pause_point_before_relock(&req, direction);
        // 3. Re-check, copy, swap.
        let Some(mut table) = self.lock_shard(req.key_hash, claim) else {
            // The item may be gone and its chunk another's by now: nothing is written
            // at its address (an unmarked move has no mark to clear).
            self.free_unwritten(dst_chunk);
            return Outcome::Busy;
        };
        let now = self.now_s();
        let src_item = self
            .current_item(&mut table, &req, src_h, now)
            .filter(|_| src_h.total_bytes() == total_bytes);
        let Some(src_item) = src_item else {
            self.release(&mut table, &req, claim, state::QUEUED);
            drop(table);
            self.free_unwritten(dst_chunk);
            return Outcome::Raced;
        };
        let capacity = self.chunk_capacity(class_id, total_bytes);
        let dst = &dst_tier.mem;
        // The copy reads the whole item (charged once) and writes it (charged by the
        // write). The destination was allocated for at least `total_bytes` (the same
        // class geometry in both tiers).
        let src_whole = src.read_item(req.addr);
        let (key, value) = src_whole.key_and_value_parts(&src_item);
        let copy = dst_chunk.write_item(capacity, key, &[value]);
        let dst_addr = copy.addr();
        let dst_h = copy.view();
        dst_h.set_client_flags(src_h.client_flags());
        dst_h.set_exptime_rel_s(src_h.exptime_rel_s());
        dst_h.set_last_access_s(src_h.last_access_s());
        dst_h.set_key_hash(src_h.key_hash());
        dst_h.set_access(src_h.access());
        dst_h.set_cas(req.cas);
        dst_h.set_next(NIL);
        dst_h.set_prev(NIL);
        dst_h.set((src_h.state() & state::CARRIED_BY_MIGRATION) | state::LINKED);
        // A persistent pool: the demoted copy becomes a valid record before it is
        // published; a promoted item's slow record is invalidated when its chunk is freed
        // below.
        self.seal(&copy);
        let replaced = Index::replace(&mut table, req.key_hash, req.addr, copy);
        debug_assert!(replaced, "the queued item left its shard under its lock");
        {
            let segment = self.policy.after_move(
                &mut ShardEntry::new(&mut table, req.key_hash),
                direction,
                dst_tier,
                dst_h.header(),
                now,
            );
            let mut cs = dst_tier.classes[class_id].0.lock();
            cs.lru.link_head(dst, segment, dst_h.header());
        }
        self.note_expiry(dst_h.exptime_rel_s());
        if self.events.wants(kind::MIGRATIONS) {
            // The copy's key was written above (and charged with it); a probe for the
            // proof, on this watched path only.
            let copy = Index::held(&mut table, req.key_hash, dst_addr);
            let key = copy.as_ref().map_or(&[][..], |copy| dst_h.key(copy));
            let what = EventWhat::Moved {
                item: ItemFacts {
                    tier: dst_tier.id,
                    class_id: class_id as u8,
                    value_bytes: dst_h.value_len(),
                },
                from: src_tier.id,
                idle_s: now.saturating_sub(dst_h.last_access_s()),
            };
            self.events.record(kind::MIGRATIONS, key, what);
        }
        self.unlink_from_class(req.addr);
        drop(table);
        Outcome::Moved
    }

    /// Clears state bits (`QUEUED`, `PROMOTE`) of the item `item` proves the caller holds
    /// (its shard locked, the index re-checked), charging the state write. With
    /// `HeaderWrite::clear` refusing `QUEUED`, this is the one way a mark goes, and it
    /// cannot be called with a bare address.
    fn clear_state(&self, item: &Held<'_>, bits: u16) {
        let addr = item.item_addr();
        self.mem_of(addr)
            .write_header(addr, header_bytes::STATE)
            .clear_marked(bits, MarkRight(()));
    }

    /// Clears `bits` on the item at `req.addr` if it is still indexed (possibly changed
    /// in place, e.g. by `incr`), so it can be queued again, when the move owns its
    /// mark; an unmarked move writes nothing. Clearing it on an item queued by someone
    /// else as well would at worst queue it twice, which the checks of `move_item` make
    /// harmless. The caller holds the shard lock.
    fn release(&self, table: &mut ShardGuard<'_>, req: &MoveReq, claim: Claim, bits: u16) {
        if claim == Claim::Unmarked {
            return;
        }
        if let Some(item) = Index::held(table, req.key_hash, req.addr) {
            self.clear_state(&item, bits);
        }
    }

    /// [`Engine::release`] from step 2, where no lock is held: a marked move waits for
    /// the shard again; an unmarked one has nothing to release.
    fn release_relocked(&self, req: &MoveReq, claim: Claim, bits: u16) {
        if claim == Claim::Marked {
            let mut table = self.index.shard(req.key_hash).table.lock();
            self.release(&mut table, req, claim, bits);
        }
    }
}
