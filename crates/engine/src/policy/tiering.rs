//! What the policies that move items between tiers (Dual-LRU, two-level, hotspot) ask
//! of DRAM and the slow tier: how full DRAM is for a class, how full the slow tier is,
//! whether a DRAM COLD tail should leave, and the victim at DRAM's COLD tail that a
//! demotion making room takes (the demotion itself is the engine's, `room.rs`).

use std::sync::atomic::Ordering;

use super::engine_ops::EngineOps;
use super::engine_ops::SlabTier;
use crate::config::SLAB_PAGE_SIZE_BYTES;
use crate::item::{header_bytes, state, HeaderRead, NIL};
use crate::lru::{COLD, HOT, WARM};
use crate::slab::ClassState;

use super::slru::{self, NoHooks};

/// Items looked at from the DRAM COLD tail for a demotion candidate.
const DEMOTE_TAIL_TRIES: usize = 5;

/// HOT + WARM tail pulls that may feed an empty DRAM COLD segment before a demotion
/// (an ACTIVE tail item is rescued to WARM's head rather than moved to COLD, so one
/// pull may move nothing into COLD).
const FEED_COLD_PULLS: usize = 8;

/// The share of a class's DRAM chunks the maintainer keeps free (by demoting COLD
/// tails) for new items: 1 in 20, seed 004's "DRAM has almost no free space".
pub(crate) const RESERVE_DIVISOR: u64 = 20;

/// Whether DRAM is (nearly) out of room for `cs`'s class: no free page in the pool and
/// at most the reserve of free chunks. The caller holds the class lock (the pool lock
/// is a leaf).
pub(crate) fn dram_needs_room(tier: &SlabTier, cs: &ClassState) -> bool {
    let total_chunks = (cs.pages.len() * cs.per_page) as u64;
    cs.free_chunks * RESERVE_DIVISOR <= total_chunks && tier.pool.lock().free_pages() == 0
}

/// Whether DRAM has room for `cs`'s class well beyond the reserve kept for new items: a
/// free page, or more than twice the reserve in free chunks. The gap between this and
/// [`dram_needs_room`] matters: were they one threshold, every chunk a demotion freed to
/// restore the reserve would count as spare room, be taken by the next promotion without
/// an admission test, and cause the next demotion — churn. The caller holds the class
/// lock.
pub(crate) fn dram_has_spare(tier: &SlabTier, cs: &ClassState) -> bool {
    let total_chunks = (cs.pages.len() * cs.per_page) as u64;
    cs.free_chunks * RESERVE_DIVISOR > 2 * total_chunks || tier.pool.lock().free_pages() > 0
}

/// Whether the slow tier has room to spare: at least one page in 20 of it free in its
/// pool. While it has, nothing will be evicted from it soon, and the order of its LRUs
/// serves nobody; keeping that order would cost a slow-tier header read and neighbour
/// link writes per move.
pub(crate) fn slow_has_room(tier: &SlabTier) -> bool {
    debug_assert!(tier.id == crate::api::TierId::Slow);
    let pool = tier.pool.lock();
    let free_pages = pool.free_pages() as u64;
    free_pages > 0 && free_pages * RESERVE_DIVISOR >= pool.limit_pages() as u64
}

/// Whether DRAM holds more than the low-water share of its size (as seen at the
/// maintainer's last pass). Age-based demotion runs only then, so it never drains
/// DRAM (seed 001).
pub(crate) fn dram_above_low_water(e: EngineOps<'_>) -> bool {
    let dram = e.dram();
    let limit = (dram.limit_pages() * SLAB_PAGE_SIZE_BYTES) as u64;
    let seen = dram.item_bytes_seen.load(Ordering::Relaxed);
    seen.saturating_mul(100) > limit.saturating_mul(u64::from(e.config().dram_low_water_pct))
}

/// The live item a demotion from DRAM's `cs` class would take: the first live one from
/// the COLD tail (even if already queued: the same move done now). If COLD is empty,
/// HOT and WARM tails flow into it first, as memcached's allocation does (ACTIVE items
/// are rescued to WARM); if every item was just used and COLD stays empty, the WARM
/// tail, then the HOT tail, is the least recently used choice. Charges the headers it
/// looks at (the victim's comes back as the view of that read). The caller holds the
/// class lock.
pub(crate) fn dram_victim<'e>(
    e: EngineOps<'e>,
    cs: &mut ClassState,
    now_s: u32,
) -> Option<HeaderRead<'e>> {
    let dram = e.dram();
    for _ in 0..FEED_COLD_PULLS {
        if cs.lru.tail[COLD] != NIL {
            break;
        }
        let moved = slru::pull_tail(e, dram, cs, HOT, 0, 0, now_s, &NoHooks)
            + slru::pull_tail(e, dram, cs, WARM, 0, 0, now_s, &NoHooks);
        if moved == 0 {
            break;
        }
    }
    for segment in [COLD, WARM, HOT] {
        let mut search = cs.lru.tail[segment];
        for _ in 0..DEMOTE_TAIL_TRIES {
            if search == NIL {
                break;
            }
            let h = dram.mem.read_header(search, header_bytes::ALL);
            if h.has(state::LINKED) && e.dead_reason(h, now_s).is_none() {
                return Some(h);
            }
            search = h.prev();
        }
    }
    None
}

/// Whether the item at a DRAM COLD tail should leave for the slow tier: DRAM is (nearly)
/// out of room for its class, or (with an age limit) it was not accessed for
/// `dram_residency_max_s` while DRAM is above its low-water mark, so the age limit never
/// drains DRAM (seed 001).
pub(crate) fn wants_demotion(
    e: EngineOps<'_>,
    tier: &SlabTier,
    cs: &ClassState,
    h: HeaderRead<'_>,
    now_s: u32,
) -> bool {
    if dram_needs_room(tier, cs) {
        return true;
    }
    let limit_s = e.config().dram_residency_max_s;
    limit_s > 0 && now_s.saturating_sub(h.last_access_s()) > limit_s && dram_above_low_water(e)
}
