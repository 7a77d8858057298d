//! HM-UNI, the "uniform" baseline of HMCached (seed 002 section 5): new items are spread
//! over the two tiers in proportion to their sizes and never move. Each key's tier is
//! chosen by its hash, so every version of a key lands in the same tier and the share
//! of keys per tier matches the share of pages. Inside each tier the segmented LRU of
//! memcached orders the items and a full tier evicts its own COLD tail.

use crate::api::TierId;
use crate::engine::{Engine, Tier};
use crate::index::ShardGuard;
use crate::item::{header_bytes, Fresh, ItemAddr};
use crate::moves::Direction;
use crate::slab::ClassState;

use super::slru::{self, NoHooks};
use super::{Candidate, Policy, Refusal};

pub(crate) struct Uniform;

impl Uniform {
    /// The tier a key hashes to: DRAM for a `dram_pages / all_pages` share of hashes.
    fn tier_for(e: &Engine, key_hash: u32) -> (&Tier, Option<&Tier>) {
        let dram = e.dram();
        let Some(slow) = e.slow() else {
            return (dram, None);
        };
        let all_pages = (dram.page_count + slow.page_count) as u64;
        let point = (u64::from(key_hash) * all_pages) >> 32;
        if point < dram.page_count as u64 {
            (dram, Some(slow))
        } else {
            (slow, Some(dram))
        }
    }
}

impl Policy for Uniform {
    fn alloc_new_item(
        &self,
        e: &Engine,
        key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh> {
        let (home, other) = Self::tier_for(e, key_hash);
        if home.page_count > 0 {
            return e.alloc(home, class_id, total_bytes);
        }
        other.and_then(|t| e.alloc(t, class_id, total_bytes))
    }

    fn on_access(
        &self,
        _e: &Engine,
        tier: &Tier,
        addr: ItemAddr,
        now_s: u32,
        _table: &mut ShardGuard<'_>,
        _key_hash: u32,
    ) -> bool {
        let h = tier.mem.header(addr);
        let mut dirty = false;
        if h.last_access_s.load(std::sync::atomic::Ordering::Relaxed) != now_s {
            h.touch_last_access(now_s);
            dirty = true;
        }
        let bump = slru::bump(tier, addr, h);
        if bump.moved_to_warm {
            tier.mem
                .charge_header_write(addr, header_bytes::LINKS.start..header_bytes::ACCESS.end);
            return true;
        }
        dirty |= bump.flags_changed;
        if dirty {
            tier.mem.charge_header_write(addr, header_bytes::ACCESS);
        }
        dirty
    }

    fn make_room(&self, e: &Engine, tier: &Tier, cs: &mut ClassState, now_s: u32) -> usize {
        slru::evict_cold_tail(e, tier, cs, now_s)
    }

    fn destination(
        &self,
        _e: &Engine,
        _direction: Direction,
        _class_id: usize,
        _total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Fresh, Refusal> {
        // Nothing is ever queued under this policy.
        Err(Refusal::NotAdmitted)
    }

    fn migrates(&self) -> bool {
        false
    }

    fn maintain_class(&self, e: &Engine, tier: &Tier, class_id: usize) -> usize {
        slru::juggle_class(e, tier, class_id, &NoHooks)
    }

    fn segment_for_new_item(&self, _tier: TierId) -> usize {
        crate::lru::HOT
    }
}
