//! HM-UNI, the "uniform" baseline of HMCached (seed 002 section 4.1): objects are stored
//! "in the DRAM and NVM uniformly according to the ratio of the DRAM size to the dataset
//! size" and never move. Each key's home tier is chosen by its hash, so every version of
//! a key lands in the same tier: DRAM homes `--uniform-dram-share` of the keys (by
//! default the share of DRAM's pages in both tiers). A key homed in DRAM whose class
//! has no free DRAM chunk goes to the slow tier rather than evicting (slab rounding
//! makes DRAM hold a little less than its share); inside each tier the segmented LRU of
//! memcached orders the items and a full slow tier evicts its own COLD tail.

use crate::api::TierId;
use crate::engine::{Engine, Tier};
use crate::index::ShardGuard;
use crate::item::{header_bytes, Fresh, HeaderRead};
use crate::moves::Direction;
use crate::slab::ClassState;
use crate::SLAB_PAGE_SIZE_BYTES;

use super::slru::{self, NoHooks};
use super::{Candidate, Policy, Refusal};

pub(crate) struct Uniform;

impl Uniform {
    /// Whether a key hashes into DRAM's share: `uniform_dram_share_ppm` of the hash
    /// space, or `dram_pages / all_pages` of it.
    fn homed_in_dram(e: &Engine, dram: &Tier, slow: &Tier, key_hash: u32) -> bool {
        let (dram_part, all_parts) = match e.config.uniform_dram_share_ppm {
            Some(ppm) => (u64::from(ppm), u64::from(crate::config::PPM)),
            // The start-up sizes: DRAM's region may be reserved beyond `-m` for
            // `cache_memlimit` (`--dram-max`), and the baseline's split stays as it
            // started.
            None => {
                let dram_pages = (e.config.memory_limit_bytes / SLAB_PAGE_SIZE_BYTES as u64)
                    .min(dram.page_count as u64);
                (dram_pages, dram_pages + slow.page_count as u64)
            }
        };
        ((u64::from(key_hash) * all_parts) >> 32) < dram_part
    }
}

impl Policy for Uniform {
    fn alloc_new_item<'e>(
        &self,
        e: &'e Engine,
        key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'e>> {
        super::alloc_in_tiers(e, class_id, total_bytes, |dram, slow| {
            if Self::homed_in_dram(e, dram, slow, key_hash) {
                // A full DRAM class sends its overflow to the slow tier; DRAM evicts only
                // when the slow tier cannot take it either.
                e.take_free(dram, class_id, total_bytes)
                    .or_else(|| e.take_free(slow, class_id, total_bytes))
                    .or_else(|| e.alloc(dram, class_id, total_bytes))
            } else {
                e.alloc(slow, class_id, total_bytes)
                    .or_else(|| e.alloc(dram, class_id, total_bytes))
            }
        })
    }

    fn on_access(
        &self,
        _e: &Engine,
        tier: &Tier,
        item: HeaderRead<'_>,
        _class_id: usize,
        now_s: u32,
        _table: &mut ShardGuard<'_>,
        _key_hash: u32,
    ) -> bool {
        // The hit's header writes, charged once when the edit ends (see `DualLru`).
        let mut edit = item.edit(header_bytes::ACCESS);
        slru::touch_hit(tier, &mut edit, now_s);
        edit.finish()
    }

    fn make_room(&self, e: &Engine, tier: &Tier, cs: &mut ClassState, now_s: u32) -> usize {
        slru::evict_cold_tail(e, tier, cs, now_s)
    }

    fn destination<'e>(
        &self,
        _e: &'e Engine,
        _direction: Direction,
        _class_id: usize,
        _total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Fresh<'e>, Refusal> {
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
