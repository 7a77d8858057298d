//! The policy seam's other side: every engine operation a placement policy may use, in
//! one place, each with its lock contract. A policy is handed an [`EngineOps`], never
//! the [`Engine`]: it cannot reach the index, the allocator, the Move queues or the
//! counters except through these. (They are views of the engine, passed by value: a
//! pointer, so a call through the seam costs what a call on `&Engine` cost.)
//!
//! None of these operations calls the policy back: the seam runs one way (checked in
//! debug builds, `policy::one_way`). What would call back is the engine's alone:
//! allocating with eviction (`Engine::alloc`, which asks `Policy::eviction_step`),
//! moving an item (`Engine::move_item`, which asks `Policy::destination`) and making
//! DRAM room by demotion (`room.rs`). A policy asks for them by what it returns
//! (`NewItemPlan`, `Destination`, `EvictionStep`), or queues a move for the migration
//! thread (`offer_move`).
//!
//! Locks, in the order `lock.rs` ranks them: a shard's table, then a class of either
//! tier, then the tier's page pool (a leaf). "Tries" means the operation only
//! `try_lock`s and gives up on a busy lock, so it may be called holding a lock of the
//! same rank.

use crate::config::EngineConfig;
use crate::counters::{C, G};
use crate::engine::{Dead, Engine};

/// The tier a policy works in, named here so that a policy names the engine only
/// through this file.
pub(crate) use crate::engine::SlabTier;
use crate::index::Index;
use crate::item::{Fresh, HeaderRead, HeaderWrite, ItemAddr};
use crate::moves::{Direction, ItemLock};
use crate::slab::{ClassState, Geometry};

/// A shard whose lock a try found taken (by a request in flight, most likely).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardBusy;

/// The engine as a policy sees it.
#[derive(Clone, Copy)]
pub(crate) struct EngineOps<'e> {
    engine: &'e Engine,
}

impl<'e> EngineOps<'e> {
    /// The engine's side of the seam: the engine hands its policy this.
    #[inline(always)]
    pub(crate) fn new(engine: &'e Engine) -> EngineOps<'e> {
        EngineOps { engine }
    }

    // ----- what the engine is (no lock) ----------------------------------------------

    /// The DRAM tier (always present; it may have no pages).
    #[inline(always)]
    pub fn dram(self) -> &'e SlabTier {
        self.engine.dram()
    }

    /// The slow tier, if the engine has one.
    #[inline(always)]
    pub fn slow(self) -> Option<&'e SlabTier> {
        self.engine.slow()
    }

    /// The tier an item's address is in.
    #[inline(always)]
    pub fn tier_of(self, addr: ItemAddr) -> &'e SlabTier {
        self.engine.tier_of(addr)
    }

    /// The configuration the engine started with.
    #[inline(always)]
    pub fn config(self) -> &'e EngineConfig {
        &self.engine.config
    }

    /// The slab classes' sizes (fixed at start).
    #[inline(always)]
    pub fn geometry(self) -> &'e Geometry {
        &self.engine.geometry
    }

    /// The run-time LRU settings (`lru_tune`: atomics, no lock).
    #[inline(always)]
    pub fn lru_tuning(self) -> &'e crate::tuning::RuntimeSettings {
        &self.engine.tuning
    }

    /// Whether items move between tiers now (both tiers, the policy moves items,
    /// `--no-migration` off).
    #[inline(always)]
    pub fn migrating(self) -> bool {
        self.engine.migrating()
    }

    /// The engine's clock, in seconds since it started.
    #[inline(always)]
    pub fn now_s(self) -> u32 {
        self.engine.now_s()
    }

    /// Why the item `h` is dead at `now_s` (expired or flushed), if it is. Reads only
    /// the header the caller read.
    #[inline(always)]
    pub fn dead_reason(self, h: HeaderRead<'_>, now_s: u32) -> Option<Dead> {
        self.engine.dead_reason(h, now_s)
    }

    /// A global counter (`stats`), summed over the stripes (no lock).
    #[inline]
    pub fn counter(self, counter: G) -> u64 {
        self.engine.counters.get(counter)
    }

    /// A per-class counter (`stats slabs`), summed over the stripes (no lock).
    #[inline]
    pub fn class_counter(self, class_id: usize, counter: C) -> u64 {
        self.engine.counters.get_class(class_id, counter)
    }

    // ----- chunks --------------------------------------------------------------------

    /// A free chunk (or a free page) of `cs`'s class in `tier`, evicting nothing. The
    /// caller holds `cs`, the class's lock (the pool lock is a leaf).
    #[inline]
    pub fn take_chunk(
        self,
        tier: &'e SlabTier,
        cs: &mut ClassState,
        total_bytes: usize,
    ) -> Option<Fresh<'e>> {
        self.engine.take_chunk(tier, cs, total_bytes)
    }

    // ----- items ---------------------------------------------------------------------

    /// The policy byte and reference bit of the descriptor of the item at `addr` of
    /// `key_hash` (`Index::with_policy_bits`), if its shard lock is free when tried
    /// (never waits: the caller may hold a class lock or another shard). `Err(Busy)`
    /// when the shard is locked, `Ok(None)` when the shard holds no such item.
    #[inline]
    pub fn try_policy_bits<R>(
        self,
        key_hash: u32,
        addr: ItemAddr,
        update: impl FnOnce(&mut u8, &mut bool) -> R,
    ) -> Result<Option<R>, ShardBusy> {
        let mut table = self
            .engine
            .index
            .shard(key_hash)
            .table
            .try_lock()
            .ok_or(ShardBusy)?;
        Ok(Index::with_policy_bits(&mut table, key_hash, addr, update))
    }

    /// Unlinks and frees the dead item `h` of `cs`'s class (the caller holds the class
    /// lock; the item's shard is only tried). Returns whether it was freed.
    #[inline]
    pub fn reclaim_dead(
        self,
        tier: &SlabTier,
        cs: &mut ClassState,
        h: HeaderRead<'_>,
        by_crawler: bool,
    ) -> bool {
        self.engine.reclaim_dead(tier, cs, h, by_crawler)
    }

    // ----- moves between tiers -------------------------------------------------------

    /// Queues the item for a move and marks it `QUEUED`; `lock` is the caller's lock on
    /// the item's shard or class (so it cannot be freed meanwhile), and `item` the
    /// header write that pays for the state bit. With `wait == false` a busy queue lock
    /// is not waited for (the read path). Returns whether the item was queued.
    #[inline]
    pub fn offer_move(
        self,
        direction: Direction,
        item: HeaderWrite<'_>,
        wait: bool,
        lock: &impl ItemLock,
    ) -> bool {
        self.engine.moves.offer(direction, item, wait, lock)
    }

    /// [`EngineOps::offer_move`] of an item whose header the caller only read (the
    /// state write is charged here).
    #[inline]
    pub fn offer_move_charged(
        self,
        direction: Direction,
        item: HeaderRead<'_>,
        wait: bool,
        lock: &impl ItemLock,
    ) -> bool {
        self.engine.moves.offer_charged(direction, item, wait, lock)
    }

    /// Moves waiting in a Move queue (a relaxed read, no lock).
    #[inline]
    pub fn move_queue_len(self, direction: Direction) -> usize {
        self.engine.moves.queue_len(direction)
    }
}
