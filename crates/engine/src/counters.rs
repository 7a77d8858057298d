//! Striped statistics counters: each thread adds to its own cache-line-padded stripe,
//! and a `stats` request sums the stripes. No counter is a shared hot spot.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::config::SLAB_CLASSES_MAX;

/// Number of stripes; threads are spread over them round-robin.
const STRIPES: usize = 16;

/// Engine-wide counters updated on the request path.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum G {
    CmdGet,
    CmdTouch,
    CmdFlush,
    GetMisses,
    GetExpired,
    GetFlushed,
    DeleteMisses,
    IncrMisses,
    DecrMisses,
    CasMisses,
    TouchMisses,
    StoreTooLarge,
    StoreNoMemory,
    TotalItems,
    /// Get hits served from each tier.
    DramGetHits,
    SlowGetHits,
}
const G_COUNT: usize = 16;

/// Per-slab-class counters updated on the request path.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum C {
    HitsToHot,
    HitsToWarm,
    HitsToCold,
    CmdSet,
    DeleteHits,
    IncrHits,
    DecrHits,
    CasHits,
    CasBadval,
    TouchHits,
    /// Get hits served from each tier (the hotspot policy's C_dreq and C_nreq).
    DramHits,
    SlowHits,
}
pub(crate) const C_COUNT: usize = 12;

/// Counter slots per class: one more than the classes memcached allows, for the
/// engine's class of large items.
const CLASS_SLOTS: usize = SLAB_CLASSES_MAX + 1;

#[repr(align(128))]
struct Stripe {
    global: [AtomicU64; G_COUNT],
    class: [[AtomicU64; C_COUNT]; CLASS_SLOTS],
}

pub(crate) struct Counters {
    /// A fixed count, so that a thread's stripe is found with a mask, not a division by
    /// a slice's length on each of a GET hit's counters (measured:
    /// docs/results/engine-hot-path-figures.md).
    stripes: Box<[Stripe; STRIPES]>,
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn my_stripe() -> usize {
    STRIPE.with(|s| {
        let mut v = s.get();
        if v == usize::MAX {
            v = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
            s.set(v);
        }
        v
    })
}

impl Counters {
    pub fn new() -> Counters {
        let stripes: Box<[Stripe]> = (0..STRIPES)
            .map(|_| Stripe {
                global: std::array::from_fn(|_| AtomicU64::new(0)),
                class: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            })
            .collect();
        let Ok(stripes) = stripes.try_into() else {
            unreachable!("STRIPES stripes were made");
        };
        Counters { stripes }
    }

    #[inline]
    fn stripe(&self) -> &Stripe {
        const { assert!(STRIPES.is_power_of_two()) };
        &self.stripes[my_stripe() & (STRIPES - 1)]
    }

    #[inline]
    pub fn add(&self, counter: G, n: u64) {
        self.stripe().global[counter as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// A GET hit's four counters (`cmd_get`, the tier's hits, and the class's tier and
    /// segment hits), with one look-up of the thread's stripe instead of four.
    #[inline]
    pub fn add_get_hit(&self, tier_hits: G, class_id: usize, class_tier_hits: C, segment_hits: C) {
        let stripe = self.stripe();
        stripe.global[G::CmdGet as usize].fetch_add(1, Ordering::Relaxed);
        stripe.global[tier_hits as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(slot) = stripe.class.get(class_id) {
            slot[class_tier_hits as usize].fetch_add(1, Ordering::Relaxed);
            slot[segment_hits as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn add_class(&self, class_id: usize, counter: C, n: u64) {
        if let Some(slot) = self.stripe().class.get(class_id) {
            slot[counter as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(&self, counter: G) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.global[counter as usize].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    pub fn get_class(&self, class_id: usize, counter: C) -> u64 {
        self.stripes
            .iter()
            .filter_map(|s| s.class.get(class_id))
            .map(|slot| slot[counter as usize].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    /// Sum of one class counter over all classes.
    pub fn sum_classes(&self, counter: C) -> u64 {
        (0..CLASS_SLOTS)
            .map(|c| self.get_class(c, counter))
            .fold(0u64, u64::wrapping_add)
    }

    /// `stats reset`. Counters incremented concurrently may survive; memcached's reset
    /// is not atomic either.
    pub fn reset(&self) {
        for stripe in self.stripes.iter() {
            for g in &stripe.global {
                g.store(0, Ordering::Relaxed);
            }
            for class in &stripe.class {
                for c in class {
                    c.store(0, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Per-class counters updated under the class lock (eviction, LRU moves, crawler).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct ClassStats {
    pub evicted: u64,
    pub evicted_nonzero: u64,
    pub evicted_time_s: u32,
    pub outofmemory: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub evicted_active: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
    pub lrutail_reflocked: u64,
    pub moves_to_cold: u64,
    pub moves_to_warm: u64,
    pub moves_within_lru: u64,
    pub direct_reclaims: u64,
}

impl ClassStats {
    pub fn accumulate(&mut self, other: &ClassStats) {
        self.evicted += other.evicted;
        self.evicted_nonzero += other.evicted_nonzero;
        self.evicted_time_s = self.evicted_time_s.max(other.evicted_time_s);
        self.outofmemory += other.outofmemory;
        self.reclaimed += other.reclaimed;
        self.expired_unfetched += other.expired_unfetched;
        self.evicted_unfetched += other.evicted_unfetched;
        self.evicted_active += other.evicted_active;
        self.crawler_reclaimed += other.crawler_reclaimed;
        self.crawler_items_checked += other.crawler_items_checked;
        self.lrutail_reflocked += other.lrutail_reflocked;
        self.moves_to_cold += other.moves_to_cold;
        self.moves_to_warm += other.moves_to_warm;
        self.moves_within_lru += other.moves_within_lru;
        self.direct_reclaims += other.direct_reclaims;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_counters_sum_across_threads_and_reset() {
        let counters = std::sync::Arc::new(Counters::new());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = counters.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(G::CmdGet, 1);
                        c.add_class(3, C::HitsToHot, 2);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(counters.get(G::CmdGet), 4000);
        assert_eq!(counters.get_class(3, C::HitsToHot), 8000);
        assert_eq!(counters.sum_classes(C::HitsToHot), 8000);
        counters.reset();
        assert_eq!(counters.get(G::CmdGet), 0);
    }
}
