//! Carrying out a placement policy's choices of where a chunk comes from: a new item's
//! chunk by the policy's [`NewItemPlan`], a move's destination by its [`Destination`],
//! and room made in DRAM by demoting the victims the policy's order picks. The policy
//! decides (which tier first, whether a promotion is admitted, which item is DRAM's
//! victim); the engine allocates, evicts and moves, here. A policy never allocates with
//! eviction or moves an item itself: those operations call the policy (`make_room`,
//! `destination`), and the engine, not the policy, is the one to call them, so no call
//! goes engine → policy → engine → policy.

use crate::api::TierId;
use crate::engine::{Engine, SlabTier};
use crate::item::{header_bytes, Fresh};
use crate::moves::{Direction, MoveReq, Queued};
use crate::policy::engine_ops::EngineOps;
use crate::policy::{Destination, EvictionSearch, EvictionStep, NewItemPlan, Policy, Refusal};
use crate::slab::ClassState;

/// Steps of one search for room a policy may take (`Policy::eviction_step`): each
/// policy bounds its own search well below this (memcached's five tail items, the
/// CLOCK hand's 32); this catches one that does not.
const EVICTION_STEPS_MAX: usize = 64;

/// Synchronous demotions a move into DRAM tries before giving up (each frees one chunk,
/// unless a concurrent allocation takes it first).
const ROOM_TRIES: usize = 4;

/// How a synchronous demotion takes its victim's shard lock, which decides what kind of
/// move it is (`moves.rs`, "Who writes `QUEUED`").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShardLocking {
    /// Wait for it (the caller holds no shard: a promotion making room): the victim is
    /// marked `QUEUED` for the move, as a queue entry would.
    Wait,
    /// Only try it (a client store, which may hold another shard): the victim is not
    /// marked, so a busy shard leaves nothing to undo.
    Try,
}

/// What making room in DRAM by one synchronous demotion came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Room {
    /// An item moved to the slow tier; its chunk is free.
    Demoted,
    /// Nothing moved (no candidate, a busy shard, a race, or a full slow tier).
    NotDemoted,
    /// The policy did not admit the promotion over the victim: it stays, and so does
    /// the newcomer.
    Refused,
}

/// Whom a demotion makes room for: a promotion, admitted over each victim by the
/// policy (`score`: the candidate's, in the policy's own terms), or a client store
/// (every victim goes).
#[derive(Clone, Copy, Debug)]
enum RoomFor {
    Promotion { score: u8 },
    Store,
}

impl Engine {
    /// Room in `cs`'s class of `tier`, which an allocation found full (the caller holds
    /// the class lock): the live items the policy's eviction order gives up, one step
    /// at a time ([`Policy::eviction_step`]), evicted here until one goes (its shard
    /// free) or the policy's search ends. Returns nonzero when the allocation should
    /// look for a chunk again (an item evicted, or room or order changed on the way).
    pub(crate) fn make_room<'t>(
        &'t self,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        now_s: u32,
    ) -> usize {
        let mut search = EvictionSearch::new();
        for _ in 0..EVICTION_STEPS_MAX {
            match self
                .policy
                .eviction_step(EngineOps::new(self), tier, cs, now_s, &mut search)
            {
                EvictionStep::Evict(victim) => {
                    if self.evict_item(tier, cs, victim, now_s) {
                        return search.removed + 1;
                    }
                    search.busy = Some(victim);
                }
                EvictionStep::Done(removed) => return removed,
            }
        }
        debug_assert!(
            false,
            "a policy's eviction search took {EVICTION_STEPS_MAX} steps"
        );
        search.removed
    }

    /// The chunk for a new item of `total_bytes` in `class_id` (a store): the one tier
    /// there is, or where the policy's plan puts it. The caller may hold a shard lock,
    /// so shards are only tried. Always inlined (into the store path): the plan of a
    /// policy that always makes the same one then folds into a branch.
    #[inline(always)]
    pub(crate) fn alloc_new_item(
        &self,
        key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'_>> {
        let dram = self.dram();
        let slow = match self.slow() {
            None => return self.alloc(dram, class_id, total_bytes),
            Some(slow) if dram.page_count == 0 => return self.alloc(slow, class_id, total_bytes),
            Some(slow) => slow,
        };
        match self.policy.new_item_plan(EngineOps::new(self), key_hash) {
            NewItemPlan::DramIfFree => self
                .take_free(dram, class_id, total_bytes)
                .or_else(|| self.alloc(slow, class_id, total_bytes))
                .or_else(|| self.alloc(dram, class_id, total_bytes)),
            NewItemPlan::DramByDemoting => self
                .take_free(dram, class_id, total_bytes)
                .or_else(|| self.dram_chunk_for_store(class_id, total_bytes))
                .or_else(|| self.alloc(slow, class_id, total_bytes))
                .or_else(|| self.alloc(dram, class_id, total_bytes)),
            NewItemPlan::Home(TierId::Dram) => self
                .take_free(dram, class_id, total_bytes)
                .or_else(|| self.take_free(slow, class_id, total_bytes))
                .or_else(|| self.alloc(dram, class_id, total_bytes)),
            NewItemPlan::Home(TierId::Slow) => self
                .alloc(slow, class_id, total_bytes)
                .or_else(|| self.alloc(dram, class_id, total_bytes)),
        }
    }

    /// The chunk a move's [`Destination`] names, or why there is none. No lock is held.
    pub(crate) fn destination_chunk<'e>(
        &'e self,
        destination: Destination<'e>,
        class_id: usize,
        total_bytes: usize,
    ) -> Result<Fresh<'e>, Refusal> {
        match destination {
            Destination::Chunk(chunk) => Ok(chunk),
            Destination::SlowTier => self
                .slow()
                .and_then(|slow| self.alloc(slow, class_id, total_bytes))
                .ok_or(Refusal::NoSpace),
            Destination::DramByDemoting { score } => {
                let dram = self.dram();
                if let Some(chunk) = self.take_free(dram, class_id, total_bytes) {
                    return Ok(chunk);
                }
                for _ in 0..ROOM_TRIES {
                    let room = self.make_dram_room(
                        class_id,
                        ShardLocking::Wait,
                        RoomFor::Promotion { score },
                    );
                    // Even a failed demotion may have raced one that freed a chunk.
                    if let Some(chunk) = self.take_free(dram, class_id, total_bytes) {
                        return Ok(chunk);
                    }
                    match room {
                        Room::Demoted => {}
                        Room::NotDemoted => break,
                        Room::Refused => return Err(Refusal::NotAdmitted),
                    }
                }
                Err(Refusal::NoSpace)
            }
        }
    }

    /// A store's chunk in a tiered engine whose DRAM is full: one synchronous demotion of
    /// the class's DRAM victim (shards only tried: the caller may hold one), then the
    /// chunk it freed.
    fn dram_chunk_for_store(&self, class_id: usize, total_bytes: usize) -> Option<Fresh<'_>> {
        if self.make_dram_room(class_id, ShardLocking::Try, RoomFor::Store) == Room::Demoted {
            self.take_free(self.dram(), class_id, total_bytes)
        } else {
            None
        }
    }

    /// Demotes the DRAM victim of `class_id` the policy's order picks
    /// ([`Policy::demotion_victim`]) to the slow tier right now, if the policy admits
    /// the promotion the room is for over it. The entry the victim may already have in
    /// Move-to-slow becomes stale and `move_item` drops it.
    fn make_dram_room(&self, class_id: usize, locking: ShardLocking, room_for: RoomFor) -> Room {
        /// The victim's move, decided under the class lock.
        enum Demotion {
            Marked(Queued),
            Tried(MoveReq),
        }
        let dram: &SlabTier = self.dram();
        let demotion = {
            let mut cs = dram.classes[class_id].0.lock();
            let now = self.now_s();
            let victim = self
                .policy
                .demotion_victim(EngineOps::new(self), &mut cs, now);
            if let (Some(h), RoomFor::Promotion { score }) = (victim, room_for) {
                if !self.policy.admits_promotion(score, h) {
                    return Room::Refused;
                }
            }
            // The caller found no free DRAM chunk for the class and needs one: tell the
            // automover (not for a refused promotion, which needs no room).
            cs.dram_pressure += 1;
            victim.map(|h| match locking {
                // The queue mark is a write of the victim's state.
                ShardLocking::Wait => {
                    Demotion::Marked(Queued::mark(h.charge_write(header_bytes::STATE), &*cs))
                }
                // Not marked, so nothing written: nothing to charge.
                ShardLocking::Try => Demotion::Tried(MoveReq::of(h)),
            })
        };
        let demoted = match demotion {
            Some(Demotion::Marked(queued)) => self.move_item(queued, Direction::ToSlow),
            Some(Demotion::Tried(req)) => self.demote_if_free(req),
            None => false,
        };
        if demoted {
            Room::Demoted
        } else {
            Room::NotDemoted
        }
    }
}
