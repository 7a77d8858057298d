//! DRAM-room helpers shared by the policies that move items between tiers (Dual-LRU,
//! two-level): how full DRAM is for a class, the victim at DRAM's COLD tail, and making
//! room by demoting it — never by evicting it while the slow tier has room.

use std::sync::atomic::Ordering;

use super::engine_ops::EngineOps;
use super::engine_ops::SlabTier;
use crate::config::SLAB_PAGE_SIZE_BYTES;
use crate::item::{header_bytes, state, Fresh, HeaderRead, NIL};
use crate::lru::{COLD, HOT, WARM};
use crate::moves::{Direction, MoveReq, Queued};
use crate::slab::ClassState;

use super::slru::{self, NoHooks};

/// Items looked at from the DRAM COLD tail for a demotion candidate.
const DEMOTE_TAIL_TRIES: usize = 5;

/// Synchronous demotions a move into DRAM tries before giving up (each frees one
/// chunk, unless a concurrent allocation takes it first).
pub(crate) const ROOM_TRIES: usize = 4;

/// HOT + WARM tail pulls that may feed an empty DRAM COLD segment before a demotion
/// (an ACTIVE tail item is rescued to WARM's head rather than moved to COLD, so one
/// pull may move nothing into COLD).
const FEED_COLD_PULLS: usize = 8;

/// The share of a class's DRAM chunks the maintainer keeps free (by demoting COLD
/// tails) for new items: 1 in 20, seed 004's "DRAM has almost no free space".
pub(crate) const RESERVE_DIVISOR: u64 = 20;

/// How a synchronous demotion takes its victim's shard lock, which decides what kind of
/// move it is (`moves.rs`, "Who writes `QUEUED`").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShardLocking {
    /// Wait for it (the caller holds no shard: a promotion making room): the victim is
    /// marked `QUEUED` for the move, as a queue entry would.
    Wait,
    /// Only try it (a client store, which may hold another shard): the victim is not
    /// marked, so a busy shard leaves nothing to undo.
    Try,
}

/// What making room in DRAM by one synchronous demotion came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// An item moved to the slow tier; its chunk is free.
    Demoted,
    /// Nothing moved (no candidate, a busy shard, a race, or a full slow tier).
    NotDemoted,
    /// The admission test refused the victim: it stays, and so does the newcomer.
    Refused,
}

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

/// Demotes the DRAM COLD-tail victim of `class_id` to the slow tier right now (a store
/// that found DRAM full, or a promotion making room), if `admit` accepts it (a
/// promotion's admission test against the item it would displace). The entry the victim
/// may already have in Move-to-slow becomes stale and `move_item` drops it.
pub(crate) fn make_dram_room(
    e: EngineOps<'_>,
    class_id: usize,
    locking: ShardLocking,
    admit: impl Fn(HeaderRead<'_>) -> bool,
) -> Room {
    make_dram_room_with(
        e,
        class_id,
        locking,
        |cs, now| dram_victim(e, cs, now),
        admit,
    )
}

/// [`make_dram_room`] with the policy's own choice of victim (`victim`, called under the
/// class lock; the victim's header comes back with its read paid for).
pub(crate) fn make_dram_room_with<'e>(
    e: EngineOps<'e>,
    class_id: usize,
    locking: ShardLocking,
    victim: impl Fn(&mut ClassState, u32) -> Option<HeaderRead<'e>>,
    admit: impl Fn(HeaderRead<'_>) -> bool,
) -> Room {
    /// The victim's move, decided under the class lock.
    enum Demotion {
        Marked(Queued),
        Tried(MoveReq),
    }
    let dram = e.dram();
    let demotion = {
        let mut cs = dram.classes[class_id].0.lock();
        let now = e.now_s();
        let victim = victim(&mut cs, now);
        if let Some(h) = victim {
            if !admit(h) {
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
        Some(Demotion::Marked(queued)) => e.move_item(queued, Direction::ToSlow),
        Some(Demotion::Tried(req)) => e.demote_if_free(req),
        None => false,
    };
    if demoted {
        Room::Demoted
    } else {
        Room::NotDemoted
    }
}

/// A DRAM chunk for an admitted move into DRAM: a free one, else make room by
/// demoting (a few times, with `admit` asked about each victim). `None` when DRAM
/// could not give one up; `Err(())` when `admit` refused.
pub(crate) fn dram_chunk_by_demoting(
    e: EngineOps<'_>,
    class_id: usize,
    total_bytes: usize,
    admit: impl Fn(HeaderRead<'_>) -> bool,
) -> Result<Option<Fresh<'_>>, ()> {
    dram_chunk_by_demoting_with(
        e,
        class_id,
        total_bytes,
        |cs, now| dram_victim(e, cs, now),
        admit,
    )
}

/// [`dram_chunk_by_demoting`] with the policy's own choice of victim.
pub(crate) fn dram_chunk_by_demoting_with<'e>(
    e: EngineOps<'e>,
    class_id: usize,
    total_bytes: usize,
    victim: impl Fn(&mut ClassState, u32) -> Option<HeaderRead<'e>>,
    admit: impl Fn(HeaderRead<'_>) -> bool,
) -> Result<Option<Fresh<'e>>, ()> {
    let dram = e.dram();
    if let Some(addr) = e.take_free(dram, class_id, total_bytes) {
        return Ok(Some(addr));
    }
    for _ in 0..ROOM_TRIES {
        let room = make_dram_room_with(e, class_id, ShardLocking::Wait, &victim, &admit);
        // Even a failed demotion may have raced one that freed a chunk.
        if let Some(addr) = e.take_free(dram, class_id, total_bytes) {
            return Ok(Some(addr));
        }
        match room {
            Room::Demoted => {}
            Room::NotDemoted => break,
            Room::Refused => return Err(()),
        }
    }
    Ok(None)
}

/// A store's chunk in a tiered engine whose DRAM is full: one synchronous demotion of
/// the class's DRAM COLD tail (shards only tried: the caller may hold one), then the
/// chunk it freed.
pub(crate) fn dram_chunk_for_store(
    e: EngineOps<'_>,
    class_id: usize,
    total_bytes: usize,
) -> Option<Fresh<'_>> {
    if make_dram_room(e, class_id, ShardLocking::Try, |_| true) == Room::Demoted {
        e.take_free(e.dram(), class_id, total_bytes)
    } else {
        None
    }
}

/// The destination of a demotion: a slow-tier chunk, evicting from the slow tier's own
/// COLD tail when it is full (the only place a tiered cache loses items).
pub(crate) fn slow_chunk(
    e: EngineOps<'_>,
    class_id: usize,
    total_bytes: usize,
) -> Option<Fresh<'_>> {
    e.slow()
        .and_then(|slow| e.alloc(slow, class_id, total_bytes))
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
