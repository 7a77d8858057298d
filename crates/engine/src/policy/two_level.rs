//! HM-TLC, the "two-level cache" baseline of HMCached (seed 002 section 5): DRAM is a
//! cache in front of the slow tier. Every access to a slow-tier item pulls it into DRAM
//! (no admission test), DRAM's LRU tail is demoted to make room, and new items are
//! written to DRAM (demoting its tail synchronously when it is full). Inside each tier
//! the segmented LRU of memcached orders the items.

use super::engine_ops::EngineOps;
use super::engine_ops::SlabTier;
use crate::api::TierId;
use crate::config::EngineConfig;
use crate::index::ShardEntry;
use crate::item::{header_bytes, state, HeaderRead};
use crate::moves::Direction;
use crate::slab::ClassState;

use super::dual_lru::Hooks as DualLruHooks;
use super::slru;
use super::{Candidate, Destination, NewItemPlan, Policy, Refusal, Registered};

pub(crate) struct TwoLevel;

impl Registered for TwoLevel {
    const MOVES_ITEMS: bool = true;

    fn new(_config: &EngineConfig) -> TwoLevel {
        TwoLevel
    }
}

impl Policy for TwoLevel {
    fn new_item_plan(&self, e: EngineOps<'_>, _key_hash: u32) -> NewItemPlan {
        // Every new item goes to DRAM, making room by demoting while items move.
        if e.migrating() {
            NewItemPlan::DramByDemoting
        } else {
            NewItemPlan::DramIfFree
        }
    }

    fn on_access(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        item: HeaderRead<'_>,
        _class_id: usize,
        now_s: u32,
        entry: &mut ShardEntry<'_, '_>,
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
                e.offer_move(Direction::ToDram, w, false, &*entry);
            }
        } else {
            slru::hit(tier, &mut edit, true);
        }
        edit.finish()
    }

    fn destination<'e>(
        &self,
        _e: EngineOps<'e>,
        direction: Direction,
        _class_id: usize,
        _total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Destination<'e>, Refusal> {
        // Every promotion is admitted: DRAM's victim goes.
        Ok(Destination::admitting_all(direction))
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
