//! HM-UNI, the "uniform" baseline of HMCached (seed 002 section 4.1): objects are stored
//! "in the DRAM and NVM uniformly according to the ratio of the DRAM size to the dataset
//! size" and never move. Each key's home tier is chosen by its hash, so every version of
//! a key lands in the same tier: DRAM homes `--uniform-dram-share` of the keys (by
//! default the share of DRAM's pages in both tiers). A key homed in DRAM whose class
//! has no free DRAM chunk goes to the slow tier rather than evicting (slab rounding
//! makes DRAM hold a little less than its share); inside each tier the segmented LRU of
//! memcached orders the items and a full slow tier evicts its own COLD tail.

use super::engine_ops::EngineOps;
use crate::api::TierId;
use crate::config::EngineConfig;
use crate::SLAB_PAGE_SIZE_BYTES;

use super::{NewItemPlan, Policy, Registered};

pub(crate) struct Uniform;

impl Uniform {
    /// Whether a key hashes into DRAM's share: `uniform_dram_share_ppm` of the hash
    /// space, or `dram_pages / all_pages` of it.
    fn homed_in_dram(e: EngineOps<'_>, key_hash: u32) -> bool {
        let (dram, slow) = (e.dram(), e.slow());
        debug_assert!(slow.is_some(), "a plan is asked for only with both tiers");
        let slow_pages = slow.map_or(0, |slow| slow.page_count);
        let (dram_part, all_parts) = match e.config().uniform_dram_share_ppm {
            Some(ppm) => (u64::from(ppm), u64::from(crate::config::PPM)),
            // The start-up sizes: DRAM's region may be reserved beyond `-m` for
            // `cache_memlimit` (`--dram-max`), and the baseline's split stays as it
            // started.
            None => {
                let dram_pages = (e.config().memory_limit_bytes / SLAB_PAGE_SIZE_BYTES as u64)
                    .min(dram.page_count as u64);
                (dram_pages, dram_pages + slow_pages as u64)
            }
        };
        ((u64::from(key_hash) * all_parts) >> 32) < dram_part
    }
}

impl Registered for Uniform {
    const MOVES_ITEMS: bool = false;

    fn new(_config: &EngineConfig) -> Uniform {
        Uniform
    }
}

impl Policy for Uniform {
    fn new_item_plan(&self, e: EngineOps<'_>, key_hash: u32) -> NewItemPlan {
        if Self::homed_in_dram(e, key_hash) {
            NewItemPlan::Home(TierId::Dram)
        } else {
            NewItemPlan::Home(TierId::Slow)
        }
    }
}
