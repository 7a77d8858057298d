//! HM-TLC, the "two-level cache" baseline of HMCached (seed 002 section 5): DRAM is a
//! cache in front of the slow tier. Every access to a slow-tier item pulls it into DRAM
//! (no admission test), DRAM's LRU tail is demoted to make room, and new items are
//! written to DRAM (demoting its tail synchronously when it is full). Inside each tier
//! the segmented LRU of memcached orders the items.

use super::engine_ops::EngineOps;
use super::engine_ops::SlabTier;
use crate::api::TierId;
use crate::config::EngineConfig;
use crate::index::ShardGuard;
use crate::item::{header_bytes, state, Fresh, HeaderRead};
use crate::moves::Direction;
use crate::slab::ClassState;

use super::dual_lru::Hooks as DualLruHooks;
use super::slru;
use super::tiering;
use super::{Candidate, Policy, Refusal, Registered};

pub(crate) struct TwoLevel;

impl Registered for TwoLevel {
    const MOVES_ITEMS: bool = true;

    fn new(_config: &EngineConfig) -> TwoLevel {
        TwoLevel
    }
}

impl Policy for TwoLevel {
    fn alloc_new_item<'e>(
        &self,
        e: EngineOps<'e>,
        _key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'e>> {
        super::alloc_in_tiers(e, class_id, total_bytes, |dram, slow| {
            if let Some(addr) = e.take_free(dram, class_id, total_bytes) {
                return Some(addr);
            }
            if e.migrating() {
                if let Some(addr) = tiering::dram_chunk_for_store(e, class_id, total_bytes) {
                    return Some(addr);
                }
            }
            e.alloc(slow, class_id, total_bytes)
                .or_else(|| e.alloc(dram, class_id, total_bytes))
        })
    }

    fn on_access(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        item: HeaderRead<'_>,
        _class_id: usize,
        now_s: u32,
        table: &mut ShardGuard<'_>,
        _key_hash: u32,
    ) -> bool {
        let h = item;
        // The hit's header writes, charged once when the edit ends (see `DualLru`).
        let mut edit = h.edit(header_bytes::ACCESS);
        slru::touch(&mut edit, now_s);
        if tier.id == TierId::Slow && e.migrating() {
            // Every access pulls the item into DRAM.
            if !h.has(state::QUEUED) {
                let w = edit.write();
                w.set(state::PROMOTE);
                e.offer_move(Direction::ToDram, w, false, &*table);
            }
        } else {
            slru::hit(tier, &mut edit, true);
        }
        edit.finish()
    }

    fn destination<'e>(
        &self,
        e: EngineOps<'e>,
        direction: Direction,
        class_id: usize,
        total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Fresh<'e>, Refusal> {
        match direction {
            Direction::ToSlow => {
                tiering::slow_chunk(e, class_id, total_bytes).ok_or(Refusal::NoSpace)
            }
            Direction::ToDram => {
                match tiering::dram_chunk_by_demoting(e, class_id, total_bytes, |_| true) {
                    Ok(Some(addr)) => Ok(addr),
                    _ => Err(Refusal::NoSpace),
                }
            }
        }
    }

    fn maintain_class(&self, e: EngineOps<'_>, tier: &SlabTier, class_id: usize) -> usize {
        // The same tail rules as Dual-LRU: re-offer Promote items the read could not
        // queue, keep DRAM's reserve by demoting its COLD tail.
        slru::juggle_class(e, tier, class_id, &DualLruHooks)
    }

    fn class_need(&self, _tier: &SlabTier, cs: &ClassState) -> u64 {
        cs.stats.evicted + cs.dram_pressure
    }
}
