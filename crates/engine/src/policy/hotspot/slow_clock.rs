//! The hotspot policy's slow-tier eviction: CLOCK over the class's list, the reference
//! bit kept in the index descriptor (so a slow-tier hit writes nothing to the slow tier).

use super::super::engine_ops::EngineOps;
use super::super::engine_ops::SlabTier;
use crate::item::{header_bytes, state, NIL};
use crate::slab::ClassState;

use super::super::{EvictionSearch, EvictionStep};
use super::Hotspot;

/// Items the slow tier's CLOCK hand looks at per eviction.
const CLOCK_TRIES: usize = 32;

impl Hotspot {
    /// The slow tier's CLOCK, one step of an eviction search
    /// ([`super::super::Policy::eviction_step`]): from the hand, pass over referenced
    /// items (clearing their bit) and give up the first unreferenced one. A victim whose
    /// shard was busy is passed over: the hand has moved past it. The caller holds the
    /// class lock.
    pub(super) fn clock_eviction_step<'t>(
        &self,
        e: EngineOps<'t>,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        now_s: u32,
        search: &mut EvictionSearch<'t>,
    ) -> EvictionStep<'t> {
        search.busy = None;
        let mem = &tier.mem;
        // `tries`: the attempts made so far.
        while search.tries < CLOCK_TRIES {
            search.tries += 1;
            let attempt = search.tries;
            let mut addr = cs.lru.hand;
            if addr == NIL {
                // Wrapped (or never started): the oldest item of the first non-empty list.
                addr = (0..crate::lru::SEGMENTS)
                    .rev()
                    .map(|segment| cs.lru.tail[segment])
                    .find(|&t| t != NIL)
                    .unwrap_or(NIL);
                if addr == NIL {
                    return EvictionStep::Done(0);
                }
            }
            let h = mem.read_header(addr, header_bytes::ALL);
            cs.lru.hand = h.prev();
            if e.dead_reason(h, now_s).is_some() {
                if e.reclaim_dead(tier, cs, h, false) {
                    return EvictionStep::Done(1);
                }
                continue;
            }
            if h.has(state::QUEUED) {
                continue;
            }
            if !e.config().evictions_enabled {
                return EvictionStep::Done(0);
            }
            let cleared = e.try_policy_bits(h.key_hash(), addr, |_, referenced| {
                std::mem::replace(referenced, false)
            });
            let Ok(referenced) = cleared else {
                cs.stats.lrutail_reflocked += 1;
                continue;
            };
            let referenced = referenced.unwrap_or(false);
            // Bounded: after CLOCK_TRIES - 1 referenced items the hand evicts the next
            // one anyway, so a store never fails because every item was just read.
            if !referenced || attempt == CLOCK_TRIES {
                return EvictionStep::Evict(h);
            }
        }
        EvictionStep::Done(0)
    }
}
