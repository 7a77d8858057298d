//! memcached's segmented LRU inside one tier (seed 004 section 2.1, its six rules): new
//! items enter HOT; the first read sets FETCHED, the second ACTIVE; the maintainer moves
//! HOT's tail to WARM if ACTIVE, else to COLD; keeps an ACTIVE WARM tail in WARM, moves
//! an inactive one to COLD; moves an ACTIVE COLD tail to WARM; and an allocation that
//! finds no free chunk evicts COLD's tail. Moving clears ACTIVE. HOT and WARM are capped
//! by `hot_lru_pct`/`warm_lru_pct` of the class's bytes and by their tail's age against
//! COLD's (`hot_max_factor`, `warm_max_factor`).
//!
//! Every policy here keeps these rules in each tier; what happens at a tail beyond them
//! (a promotion offer, a demotion) comes through [`TailHooks`].
//!
//! Accounting: every header looked at from a tail is charged as a read of its tier (the
//! `HeaderRead` view handed to the hooks and to eviction is that read's); every move
//! charges the item's own header write (links and state) and, in `lru.rs`, its
//! neighbours'.

use super::engine_ops::EngineOps;
use super::engine_ops::SlabTier;
use super::{EvictionSearch, EvictionStep};
use crate::item::{header_bytes, state, HeaderEdit, HeaderRead, NIL};
use crate::lru::{COLD, HOT, WARM};
use crate::slab::ClassState;

/// Items looked at from a tail per pull (memcached's `tries = 5`).
const PULL_TAIL_TRIES: usize = 5;
/// Juggle rounds per class per maintainer pass (memcached: 500).
const JUGGLE_ROUNDS_MAX: usize = 500;

/// What a policy adds at the segment tails during a maintainer pass. The caller holds
/// the class lock; an implementation that moves the item charges what it writes.
pub(crate) trait TailHooks {
    /// A live item at a HOT or WARM tail, before the segment rules. Returns whether the
    /// hook moved it (the pull then stops, as after a move).
    fn at_hot_or_warm_tail(
        &self,
        _e: EngineOps<'_>,
        _tier: &SlabTier,
        _cs: &mut ClassState,
        _item: HeaderRead<'_>,
        _now_s: u32,
    ) -> bool {
        false
    }

    /// A live, not ACTIVE, not queued item at the COLD tail. Returns whether the hook
    /// took it (e.g. queued it for demotion).
    fn at_cold_tail(
        &self,
        _e: EngineOps<'_>,
        _tier: &SlabTier,
        _cs: &mut ClassState,
        _item: HeaderRead<'_>,
        _now_s: u32,
    ) -> bool {
        false
    }
}

/// No additions: memcached's rules alone.
pub(crate) struct NoHooks;
impl TailHooks for NoHooks {}

/// Moves the item `item` (its header, which the caller paid to read) to the head of
/// `segment` and charges the item's header write. A caller that rewrites other state
/// bits in the same move charges `header_bytes::LINKS` itself and calls `Lru::move_to`
/// with the write view.
pub(crate) fn move_to(tier: &SlabTier, cs: &mut ClassState, item: HeaderRead<'_>, segment: usize) {
    let h = item.charge_write(header_bytes::LINKS);
    cs.lru.move_to(&tier.mem, h, segment);
}

/// What memcached's `do_item_bump` did to an item on a read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bump {
    /// FETCHED or ACTIVE was set (the header's state changed).
    pub flags_changed: bool,
    /// The item moved from COLD to WARM (its links changed; charged by the caller).
    pub moved_to_warm: bool,
}

/// A read of an item under memcached's rules, its last-access time included: the time
/// written if it changed, then [`hit`] (the item may move to WARM).
#[inline(always)]
pub(crate) fn touch_hit(tier: &SlabTier, edit: &mut HeaderEdit<'_>, now_s: u32) {
    touch(edit, now_s);
    hit(tier, edit, true);
}

/// The last-access time of a read, written only if it changed.
#[inline(always)]
pub(crate) fn touch(edit: &mut HeaderEdit<'_>, now_s: u32) {
    if edit.read().last_access_s() != now_s {
        edit.write().set_last_access_s(now_s);
    }
}

/// A read of an item under memcached's rules ([`bump_with`]), the caller's edit of the
/// header widened to links, state and access word (one header update) when the item
/// was relinked to WARM.
#[inline(always)]
pub(crate) fn hit(tier: &SlabTier, edit: &mut HeaderEdit<'_>, may_move: bool) {
    if bump_with(tier, edit, may_move).moved_to_warm {
        edit.widen(header_bytes::LINKS.start..header_bytes::ACCESS.end);
    }
}

/// memcached's `do_item_bump`: the first read sets FETCHED, the second ACTIVE; an item
/// turning ACTIVE in COLD is moved to WARM (if the class lock is free) only if `may_move`. The writes go
/// through the caller's edit of the header, which charges them once (widened to the
/// links when the caller sees `moved_to_warm`). A
/// policy that keeps a tier's LRU order lazily passes `false`: the item stays in COLD
/// with ACTIVE set (as in memcached when its asynchronous bump queue is full), and the
/// maintainer's COLD pull rescues it to WARM once the order matters.
/// Always inlined into each policy's hit, so that the hit's edit is not passed by
/// reference to a call (measured: docs/results/engine-hot-path-figures.md).
#[inline(always)]
pub(crate) fn bump_with(tier: &SlabTier, edit: &mut HeaderEdit<'_>, may_move: bool) -> Bump {
    let mut bump = Bump::default();
    let h = edit.read();
    if h.has(state::ACTIVE) {
        return bump;
    }
    if !h.has(state::FETCHED) {
        edit.write().set(state::FETCHED);
        bump.flags_changed = true;
        return bump;
    }
    edit.write().set(state::ACTIVE);
    bump.flags_changed = true;
    if may_move && h.segment() == COLD {
        if let Some(mut cs) = tier.classes[tier.class_of(h.addr())].0.try_lock() {
            if h.has(state::LINKED) && h.segment() == COLD {
                let w = edit.write();
                w.clear(state::ACTIVE);
                cs.lru.move_to(&tier.mem, w, WARM);
                cs.stats.moves_to_warm += 1;
                bump.moved_to_warm = true;
            }
        }
    }
    bump
}

/// memcached's `lru_pull_tail` for juggling: looks at up to five items from the tail
/// of `segment`, reclaims dead ones, and moves the first live one by the rules (or
/// hands it to `hooks`). Returns how many items were removed or moved. The caller
/// holds the class lock; shards are only `try_lock`ed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pull_tail(
    e: EngineOps<'_>,
    tier: &SlabTier,
    cs: &mut ClassState,
    segment: usize,
    total_bytes: u64,
    max_age_s: u32,
    now_s: u32,
    hooks: &impl TailHooks,
) -> usize {
    pull_tail_from(
        e,
        tier,
        cs,
        segment,
        total_bytes,
        max_age_s,
        now_s,
        hooks,
        None,
    )
}

/// [`pull_tail`], when the caller's pass paid to read the segment's tail header already
/// (`tail_read`: used if that item is still the tail, so the pass reads it once).
#[allow(clippy::too_many_arguments)]
fn pull_tail_from(
    e: EngineOps<'_>,
    tier: &SlabTier,
    cs: &mut ClassState,
    segment: usize,
    total_bytes: u64,
    max_age_s: u32,
    now_s: u32,
    hooks: &impl TailHooks,
    mut tail_read: Option<HeaderRead<'_>>,
) -> usize {
    let mem = &tier.mem;
    let mut removed = 0;
    let mut search = cs.lru.tail[segment];
    let mut tries = PULL_TAIL_TRIES;
    while tries > 0 && search != NIL {
        tries -= 1;
        let h = match tail_read.take() {
            Some(h) if h.addr() == search => h,
            _ => mem.read_header(search, header_bytes::ALL),
        };
        let prev = h.prev();
        if e.dead_reason(h, now_s).is_some() {
            if e.reclaim_dead(tier, cs, h, false) {
                removed += 1;
            }
            search = prev;
            continue;
        }
        match segment {
            HOT | WARM => {
                if hooks.at_hot_or_warm_tail(e, tier, cs, h, now_s) {
                    removed += 1;
                    break;
                }
                let pct = if segment == HOT {
                    e.lru_tuning().hot_lru_pct()
                } else {
                    e.lru_tuning().warm_lru_pct()
                };
                let limit = total_bytes * u64::from(pct) / 100;
                let age = now_s.saturating_sub(h.last_access_s());
                if h.has(state::ACTIVE) {
                    // Active items are rescued: HOT flows to WARM, WARM stays WARM.
                    let w = h.charge_write(header_bytes::LINKS);
                    w.clear(state::ACTIVE);
                    if segment == WARM {
                        cs.stats.moves_within_lru += 1;
                    } else {
                        cs.stats.moves_to_warm += 1;
                    }
                    cs.lru.move_to(mem, w, WARM);
                    removed += 1;
                } else if cs.lru.bytes[segment] > limit || age > max_age_s {
                    cs.stats.moves_to_cold += 1;
                    move_to(tier, cs, h, COLD);
                    removed += 1;
                }
                break;
            }
            _ => {
                if h.has(state::QUEUED) {
                    // Already waiting in a Move queue: look past it.
                    search = prev;
                    continue;
                }
                if h.has(state::ACTIVE) {
                    let w = h.charge_write(header_bytes::LINKS);
                    w.clear(state::ACTIVE);
                    cs.stats.moves_to_warm += 1;
                    cs.lru.move_to(mem, w, WARM);
                    removed += 1;
                } else if hooks.at_cold_tail(e, tier, cs, h, now_s) {
                    removed += 1;
                }
                break;
            }
        }
    }
    removed
}

/// memcached's `lru_maintainer_juggle` for one class: rounds of HOT, WARM and COLD tail
/// pulls until nothing moves. Returns the rounds that moved something.
pub(crate) fn juggle_class(
    e: EngineOps<'_>,
    tier: &SlabTier,
    class_id: usize,
    hooks: &impl TailHooks,
) -> usize {
    let now = e.now_s();
    // COLD's tail is read for its age here, and again by the first round's COLD pull:
    // one read of the pass, charged here and handed to that pull.
    let (hot_age, warm_age, total_bytes, mut cold_tail) = {
        let cs = tier.classes[class_id].0.lock();
        if cs.lru.items() == 0 {
            return 0;
        }
        let cold_tail = cs.lru.tail_header(&tier.mem, COLD, header_bytes::ALL);
        let cold_age = crate::lru::age_s(cold_tail, now);
        (
            (f64::from(cold_age) * e.lru_tuning().hot_max_factor()) as u32,
            (f64::from(cold_age) * e.lru_tuning().warm_max_factor()) as u32,
            cs.lru.total_bytes(),
            cold_tail,
        )
    };
    let mut rounds = 0;
    for _ in 0..JUGGLE_ROUNDS_MAX {
        let mut cs = tier.classes[class_id].0.lock();
        let mut moved = pull_tail(e, tier, &mut cs, HOT, total_bytes, hot_age, now, hooks);
        moved += pull_tail(e, tier, &mut cs, WARM, total_bytes, warm_age, now, hooks);
        let cold = cold_tail.take();
        moved += pull_tail_from(e, tier, &mut cs, COLD, 0, 0, now, hooks, cold);
        if moved == 0 {
            break;
        }
        rounds += 1;
    }
    rounds
}

/// memcached's allocation-time pull (`do_item_alloc_pull`), one step at a time
/// ([`super::Policy::eviction_step`]): the first live item from the COLD tail whose
/// shard is free is evicted (dead ones on the way are reclaimed); a live item whose
/// shard is busy is passed over for the one before it. If COLD had nothing to give, HOT
/// and then WARM flow into COLD for the next attempt. The caller holds the class lock.
pub(crate) fn cold_tail_eviction_step<'t>(
    e: EngineOps<'t>,
    tier: &'t SlabTier,
    cs: &mut ClassState,
    now_s: u32,
    search: &mut EvictionSearch<'t>,
) -> EvictionStep<'t> {
    if !search.started {
        search.started = true;
        search.cursor = cs.lru.tail[COLD];
        search.tries = PULL_TAIL_TRIES;
    }
    // A busy victim: the search goes on from the item before it (`cursor`).
    search.busy = None;
    let mem = &tier.mem;
    while search.tries > 0 && search.cursor != NIL {
        search.tries -= 1;
        let h = mem.read_header(search.cursor, header_bytes::ALL);
        search.cursor = h.prev();
        if e.dead_reason(h, now_s).is_some() {
            if e.reclaim_dead(tier, cs, h, false) {
                search.removed += 1;
            }
        } else if !e.config().evictions_enabled {
            // `-M`: nothing live may be evicted.
            break;
        } else {
            return EvictionStep::Evict(h);
        }
    }
    if search.removed > 0 {
        return EvictionStep::Done(search.removed);
    }
    EvictionStep::Done(
        pull_tail(e, tier, cs, HOT, 0, 0, now_s, &NoHooks)
            + pull_tail(e, tier, cs, WARM, 0, 0, now_s, &NoHooks),
    )
}
