//! Sealing and invalidating the records of a persistent pool (the rules are in
//! `pool.rs`): a slow-tier item of a pool becomes a valid record when its checksum is
//! written, after everything it covers, and stops being one when the checksum is zeroed,
//! before the item changes in place or its chunk is freed.

use std::sync::atomic::Ordering;

use crate::config::Durability;
use crate::engine::{Engine, SlabTier};
use crate::index::Held;
use crate::item::{header_bytes, HeaderRead, HeaderWrite, Written, ITEM_HEADER_BYTES};
use crate::pool::record_checksum;

impl Engine {
    /// Seals the written item `item` as a record of its tier's pool, about to be
    /// published: computes the checksum over the header fields, key and value, and
    /// writes it last. Nothing is charged: the item's write paid for the whole item.
    /// Nothing happens outside a pool.
    #[inline]
    pub(crate) fn seal(&self, item: &Written<'_>) {
        let tier = self.tier_of(item.addr());
        // Inlined to here: most items are in no pool (DRAM), and the call cost more
        // than this test.
        if let Some(pool) = &tier.pool_file {
            self.seal_in(tier, pool, item.view().header(), item.key_and_value());
        }
    }

    /// [`Engine::seal`] of an item of a pool's tier: `h` its header's write view, which
    /// the caller paid for, and `key_value` its key and value, read through a view the
    /// caller paid for.
    #[inline(never)]
    fn seal_in(
        &self,
        tier: &SlabTier,
        pool: &crate::pool::Pool,
        h: HeaderWrite<'_>,
        key_value: &[u8],
    ) {
        let checksum = record_checksum(pool.generation(), h.read(), key_value);
        let synced = tier.mem.region().map_mode() == &tier::MapMode::SharedSync;
        if synced {
            // DAX: the record's lines reach persistence before the checksum that vouches
            // for them.
            let _ = h.persist(0, ITEM_HEADER_BYTES + key_value.len());
        }
        h.set_checksum(checksum, Ordering::Release);
        if synced {
            let _ = h.persist(header_bytes::CHECKSUM.start, 8);
        }
    }

    /// Zeroes the checksum of the item `h` if it is a sealed record: before it changes
    /// in place (the caller seals it again after) or its chunk is freed. `h`: its header,
    /// which the operation paid to read; the write is charged beyond the lines of
    /// `already` (header bytes the operation has charged). Returns whether a record was
    /// invalidated.
    #[inline]
    pub(crate) fn unseal(
        &self,
        tier: &SlabTier,
        h: HeaderRead<'_>,
        already: std::ops::Range<usize>,
    ) -> bool {
        // Inlined to here, as `seal`.
        tier.pool_file.is_some() && self.unseal_in(tier, h, already)
    }

    /// [`Engine::unseal`] of an item of a pool's tier.
    #[inline(never)]
    fn unseal_in(
        &self,
        tier: &SlabTier,
        h: HeaderRead<'_>,
        already: std::ops::Range<usize>,
    ) -> bool {
        if h.checksum(Ordering::Relaxed) == 0 {
            return false;
        }
        let h = h.charge_write_except(header_bytes::CHECKSUM, already);
        h.set_checksum(0, Ordering::Release);
        match tier.mem.region().map_mode() {
            tier::MapMode::SharedSync => {
                let _ = h.persist(header_bytes::CHECKSUM.start, 8);
            }
            tier::MapMode::SharedFallback { .. } if self.durability() == Durability::Power => {
                self.pending_flush.changes.fetch_add(1, Ordering::Release);
            }
            _ => {}
        }
        true
    }

    /// Seals again an item changed in place (`touch`, `incr`, `md I`), which the caller
    /// unsealed before the change (`h`: its header, `item`: the proof to read it): the
    /// checksum covers the key and value, which are read back from the tier for it
    /// (charged), then written (charged beyond the header's `TOUCH` lines the caller
    /// charged).
    pub(crate) fn reseal(&self, h: HeaderRead<'_>, item: &Held<'_>) {
        let tier = self.tier_of(h.addr());
        let Some(pool) = &tier.pool_file else {
            return;
        };
        let whole = h.read_rest();
        let w = h.charge_write_except(header_bytes::CHECKSUM, header_bytes::TOUCH);
        self.seal_in(tier, pool, w, whole.key_and_value(item));
    }

    /// Makes the pool's record invalidations so far persistent (`--slow-durability
    /// power` on a plain file: one `msync`; nothing pending, or another mode: nothing to
    /// do). The server calls it before answering a batch of requests, so that no request
    /// is answered before the invalidations it caused (or followed) are on the file.
    pub fn make_durable(&self) -> Result<(), tier::TierError> {
        let pending = &self.pending_flush;
        let wanted = pending.changes.load(Ordering::Acquire);
        if pending.durable.load(Ordering::Acquire) >= wanted {
            return Ok(());
        }
        let _flushing = pending.flushing.lock();
        // A flush that ran while we waited may have covered us.
        if pending.durable.load(Ordering::Acquire) >= wanted {
            return Ok(());
        }
        let covers = pending.changes.load(Ordering::Acquire);
        if let Some(slow) = self.slow() {
            slow.mem.region().flush()?;
        }
        pending.durable.fetch_max(covers, Ordering::AcqRel);
        Ok(())
    }

    /// Whether the slow tier's pool is mapped `MAP_SYNC`, which only DAX (persistent or
    /// CXL memory mapped directly) accepts: its accesses are memory accesses, not the
    /// page cache's.
    pub fn slow_tier_on_dax(&self) -> bool {
        self.slow()
            .is_some_and(|slow| slow.mem.region().map_mode() == &tier::MapMode::SharedSync)
    }

    /// The durability mode in force for the slow tier's pool (`Auto` resolved by its map
    /// mode); `Crash` without a pool.
    pub fn durability(&self) -> Durability {
        match self.slow() {
            Some(slow) if slow.pool_file.is_some() => self
                .config
                .slow_durability
                .effective(slow.mem.region().map_mode() == &tier::MapMode::SharedSync),
            _ => Durability::Crash,
        }
    }

    /// A mark of the record invalidations made so far: replies generated now may be sent
    /// once [`Engine::is_durable`] says the mark is on the pool file.
    pub fn durability_mark(&self) -> u64 {
        self.pending_flush.changes.load(Ordering::Acquire)
    }

    /// Whether every invalidation up to `mark` is on the pool file (always, without
    /// `--slow-durability power` on a plain file: nothing is ever counted then).
    pub fn is_durable(&self, mark: u64) -> bool {
        self.pending_flush.durable.load(Ordering::Acquire) >= mark
    }
}
