//! HMCached's hotspot-aware policy (seed 002 sections 3.2-3.5).
//!
//! - **Access counters.** Every GET and SET counts one access in a decayed counter
//!   (`access.rs`: halved per idle period, reset after three, periods counted in
//!   requests). A DRAM item keeps its counter in its header; a slow-tier item keeps it
//!   in its index descriptor, in DRAM, with its CLOCK reference bit: a hit on a
//!   slow-tier item writes nothing to the slow tier except, as memcached does, the
//!   first-fetch flag once and the last-access time at most once a minute
//!   (`ITEM_UPDATE_INTERVAL`). A slow-tier counter has no timestamp next to it, so one
//!   idle for a multiple of eight periods reads as recent again; it can cause one early
//!   promotion of an item that was hot before, nothing else.
//! - **Promotion.** A slow-tier item whose counter exceeds its slab class's migration
//!   threshold is offered to Move-to-DRAM. The migration thread takes a free DRAM chunk
//!   or demotes DRAM's multi-queue victim to make one (HMCached admits every item past
//!   the threshold; the threshold is what keeps promotions worth their cost).
//! - **Threshold tuning** (Algorithm 1), per class, every [`TUNE_REQUESTS`] get hits of
//!   the class: while fewer items were promoted than half the class's free DRAM chunks,
//!   lower it (DRAM has room: use it); otherwise hill-climb on the benefit
//!   `(C_dreq - C_mig) / (C_dreq + C_nreq)`: repeat the last step if the benefit rose,
//!   reverse it if it fell.
//! - **Multi-queue replacement in DRAM.** A class's DRAM items sit in `--mq-queues` LRU
//!   lists; queue i holds counters in [2^i, 2^(i+1)) (0 and 1 in queue 0). A hit that
//!   moves the counter to another queue relinks the item there; otherwise it only marks
//!   the item ACTIVE (a second chance when it reaches its queue's tail, so a queue is
//!   LRU-like without a lock per hit). The victim is the first tail, from queue 0 up,
//!   that is neither ACTIVE nor due to move down a queue by decay (those are relinked
//!   on the way). The DRAM maintainer keeps a reserve of free chunks for new items by
//!   demoting victims, and moves decayed items down their queues.
//! - **CLOCK in the slow tier.** Slow-tier items are never relinked on a hit. When the
//!   slow tier must evict, a hand walks the class's list from the oldest item: an item
//!   whose reference bit is set (read since the hand last passed) gets its bit cleared
//!   and is passed over, the first one without it is evicted — or, bounded, the
//!   [`CLOCK_TRIES`]th item looked at.
//! - **Benefit-aware DRAM reassignment** (section 3.5). Every access that changes an
//!   item's counter tells its class's histogram of this period (atomics, no lock): an
//!   item's first access of a period enters it at the count it starts from (decayed from
//!   earlier periods), a rise to a new value counts once at that value, and a saturated
//!   counter adds nothing. At the end of a period, `reached[c]` is the number of the
//!   class's items whose counter was at least c this period, each item counted once, so
//!   the sum of the counters of its k hottest items — the benefit of holding them in
//!   DRAM (equation 2, times the chunk size) — comes from the histogram alone. The dynamic program of equations 3-4 then splits DRAM's pages
//!   among the classes for the largest total benefit, and the automover moves one page a
//!   step toward that split (items of a page leaving DRAM are demoted, never lost). This
//!   is what fixes slab calcification when the item-size mix changes.
//! - **`--policy hyperbolic`** (HMCached's HM-HC baseline) is this policy with hyperbolic
//!   caching (Blankstein et al.) in DRAM instead of the multi-queue: a DRAM item counts
//!   its accesses since it entered DRAM (in its header, saturating at 255) and its
//!   descriptor keeps the period it entered in; the victim is the item of lowest
//!   accesses / (periods in DRAM + 1) among [`HYPERBOLIC_SAMPLES`] chunks of the class
//!   sampled at random. Counters, thresholds and CLOCK are shared; DRAM pages move by the
//!   automover's rules, as the header's byte holds the count since entry, not the
//!   decayed counter the reassignment plan reads.
//! - **New items** take a free DRAM chunk, else go to the slow tier (as under Dual-LRU: a
//!   store never waits for a demotion; the maintainer's reserve takes new items).
//!   An overwrite keeps the key's counter and adds one.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::lock::{Mutex, Rank};

use crate::api::TierId;
use crate::config::{EngineConfig, SLAB_CLASSES_MAX};
use crate::engine::{Engine, Tier};
use crate::index::{Index, ShardGuard};
use crate::item::{header_bytes, state, Fresh, HeaderRead, HeaderWrite, NIL};
use crate::lru::COLD;
use crate::moves::Direction;
use crate::slab::ClassState;
use crate::stats::C;

use super::access::{CountStep, Periods, COUNT_MAX};
use super::tiering;
use super::{Candidate, Policy, Refusal};

/// Get hits of a class between two threshold adjustments (HMCached: 10^5).
pub(crate) const TUNE_REQUESTS: u64 = 100_000;
/// The threshold a class starts at: promoted after its fifth access in a period.
pub(crate) const THRESHOLD_INITIAL: u8 = 4;
/// memcached's `ITEM_UPDATE_INTERVAL`: a hit rewrites the last-access time at most
/// this often.
const ITEM_UPDATE_INTERVAL_S: u32 = 60;
/// Items a victim search looks at per queue before trying the next queue.
const VICTIM_TRIES: usize = 8;
/// DRAM chunks a hyperbolic victim search samples (the hyperbolic caching paper's 64
/// needs a larger cache to pay off; 16 keeps a demotion's cost near the multi-queue's).
pub(crate) const HYPERBOLIC_SAMPLES: usize = 16;
/// Items the slow tier's CLOCK hand looks at per eviction.
const CLOCK_TRIES: usize = 32;
/// Victim searches one DRAM allocation makes before it gives up: a search can come back
/// empty (every item it looked at was active) or with an item whose shard a request in
/// flight holds, and the next one starts from a changed tail.
const VICTIM_SEARCHES: usize = 5;
/// Items looked at per queue tail per maintainer pass for decay.
const DECAY_TRIES: usize = 16;
/// Demotions the DRAM maintainer queues per class per pass.
const DEMOTIONS_PER_PASS: usize = 64;
/// Counter values the reassignment histogram distinguishes (0..=COUNT_MAX).
const COUNT_VALUES: usize = COUNT_MAX as usize + 1;
/// The dynamic program splits DRAM in at most this many units of whole pages.
const DP_UNITS_MAX: usize = 256;

/// A class's histogram of one period: `reached[c]` items were accessed at least c times.
type Reached = [u32; COUNT_VALUES];

/// What the benefit-aware reassignment keeps between periods.
#[derive(Default)]
struct Reassignment {
    /// Per class, the histogram of the last complete period.
    last_period: Vec<Reached>,
    /// Bumped at every period end: the plan below is stale when it differs.
    generation: u64,
    /// The page split planned from `last_period`, per class, and its generation.
    target_pages: Vec<usize>,
    planned_generation: u64,
}

/// What the hill-climbing of one class remembers between adjustments.
#[derive(Default)]
struct Tuning {
    /// Counters at the last adjustment: DRAM hits, slow hits, migration accesses,
    /// promotions.
    dram_hits: u64,
    slow_hits: u64,
    migration_accesses: u64,
    promotions: u64,
    /// Benefit at the last adjustment, and whether that adjustment raised the threshold.
    benefit: Option<f64>,
    raised: bool,
}

struct Class {
    /// This period's histogram, in two halves: `started_at[c]`, items whose first access
    /// of the period found their counter at c; `rose_to[c]`, items whose counter rose to
    /// c in the period. Items at c or above: the started at c or above, and the risen to
    /// c (every rise to c + 1 started from c).
    started_at: [AtomicU32; COUNT_VALUES],
    rose_to: [AtomicU32; COUNT_VALUES],
    threshold: AtomicU8,
    /// Copies into or out of DRAM of the class's items (each an access of the slow
    /// tier caused by migration: C_mig), and promotions alone (C_N-to-D).
    migration_accesses: AtomicU64,
    promotions: AtomicU64,
    tuning: Mutex<Tuning>,
}

pub(crate) struct Hotspot {
    periods: Periods,
    queues: usize,
    classes: Box<[Class]>,
    benefit_reassign: bool,
    reassignment: Mutex<Reassignment>,
    /// HM-HC: hyperbolic caching replaces the multi-queue in DRAM.
    hyperbolic: bool,
    /// State of the sampling's xorshift generator.
    sample_state: AtomicU64,
}

/// The multi-queue queue of a counter: i for counts in [2^i, 2^(i+1)), 0 for 0 and 1.
pub(crate) fn queue_of(count: u8, queues: usize) -> usize {
    let log2 = if count < 2 {
        0
    } else {
        7 - count.leading_zeros() as usize
    };
    log2.min(queues - 1)
}

/// One step of Algorithm 1. `promotions` and `free_chunks` are this period's
/// C_N-to-D and the class's free DRAM chunks; `benefit` this period's, `last` the
/// previous one's and whether the previous step raised the threshold. Returns the new
/// threshold and whether this step raised it.
pub(crate) fn adjust_threshold(
    threshold: u8,
    promotions: u64,
    free_chunks: u64,
    benefit: f64,
    last: Option<(f64, bool)>,
) -> (u8, bool) {
    let lower = |t: u8| (t.saturating_sub(1), false);
    let raise = |t: u8| ((t + 1).min(COUNT_MAX - 1), true);
    if promotions < free_chunks / 2 {
        return lower(threshold);
    }
    match last {
        // No earlier benefit to compare with: try a step up (fewer, surer promotions).
        None => raise(threshold),
        Some((last_benefit, raised)) => {
            let repeat = benefit > last_benefit;
            if repeat == raised {
                raise(threshold)
            } else {
                lower(threshold)
            }
        }
    }
}

impl Hotspot {
    pub fn new(config: &EngineConfig) -> Hotspot {
        Hotspot {
            periods: Periods::new(config.access_period_requests),
            queues: config.mq_queues,
            benefit_reassign: config.benefit_reassign,
            hyperbolic: config.policy == crate::config::PlacementPolicy::Hyperbolic,
            sample_state: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
            reassignment: Mutex::with_default(Rank::HotspotReassignment),
            classes: (0..=SLAB_CLASSES_MAX)
                .map(|_| Class {
                    started_at: std::array::from_fn(|_| AtomicU32::new(0)),
                    rose_to: std::array::from_fn(|_| AtomicU32::new(0)),
                    threshold: AtomicU8::new(THRESHOLD_INITIAL),
                    migration_accesses: AtomicU64::new(0),
                    promotions: AtomicU64::new(0),
                    tuning: Mutex::with_default(Rank::HotspotTuning),
                })
                .collect(),
        }
    }

    /// An access moved the counter of an item of `class_id` by `step`: at most two
    /// relaxed adds, none for a saturated counter that stays.
    fn record_reached(&self, class_id: usize, step: CountStep) {
        let Some(class) = self.classes.get(class_id) else {
            return;
        };
        if step.first_in_period {
            class.started_at[usize::from(step.before)].fetch_add(1, Ordering::Relaxed);
        }
        if step.after > step.before {
            class.rose_to[usize::from(step.after)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// End of a period: this period's histograms become the last complete one.
    fn close_period(&self) {
        let snapshot: Vec<Reached> = self
            .classes
            .iter()
            .map(|c| {
                let started: [u32; COUNT_VALUES] =
                    std::array::from_fn(|v| c.started_at[v].swap(0, Ordering::Relaxed));
                let rose: [u32; COUNT_VALUES] =
                    std::array::from_fn(|v| c.rose_to[v].swap(0, Ordering::Relaxed));
                let mut reached = [0u32; COUNT_VALUES];
                let mut started_at_or_above = 0u32;
                for v in (0..COUNT_VALUES).rev() {
                    started_at_or_above = started_at_or_above.saturating_add(started[v]);
                    reached[v] = started_at_or_above.saturating_add(rose[v]);
                }
                reached
            })
            .collect();
        let mut r = self.reassignment.lock();
        r.last_period = snapshot;
        r.generation += 1;
    }

    fn threshold(&self, class_id: usize) -> u8 {
        self.classes
            .get(class_id)
            .map_or(THRESHOLD_INITIAL, |c| c.threshold.load(Ordering::Relaxed))
    }

    /// The count of a slow-tier item whose descriptor byte is `byte` (its descriptor keeps
    /// no timestamp: the period bits are trusted, so `now_s` stands for its last access).
    fn slow_count(&self, byte: u8, now_s: u32) -> u8 {
        self.periods.decayed(byte, now_s)
    }

    /// The DRAM victim of `cs`'s class under the multi-queue: from queue 0 up, the first
    /// tail item that is live, not queued for a move, not ACTIVE and not due to move
    /// down a queue. ACTIVE items get a second chance at their queue's head; decayed
    /// ones move down; dead ones met on the way are reclaimed (the caller finds their
    /// chunks free). Charges what it reads (DRAM); the victim's header comes back as the
    /// view of that read. The caller holds the class lock.
    fn dram_victim<'e>(
        &self,
        e: &'e Engine,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        if self.hyperbolic {
            return self.hyperbolic_victim(e, cs, now_s);
        }
        let dram = e.dram();
        let mut fallback = None;
        for queue in 0..self.queues {
            let mut search = cs.lru.tail[queue];
            // Items already queued for demotion wait at the tail until the migration
            // thread moves them: they are passed over without using up a try (bounded
            // by the move queue's capacity), or a burst of demotions would reach into
            // the next queue up.
            let mut tries = VICTIM_TRIES;
            let mut queued_passed = 0;
            while tries > 0 && queued_passed <= e.config.move_queue_max {
                if search == NIL {
                    break;
                }
                let h = dram.mem.read_header(search, header_bytes::ALL);
                let prev = h.prev();
                if !h.has(state::LINKED) {
                    search = prev;
                    continue;
                }
                if e.dead_reason(h, now_s).is_some() {
                    // Expired or flushed: its chunk is room already, no demotion needed.
                    e.reclaim_dead(dram, cs, h, false);
                    search = prev;
                    continue;
                }
                if h.has(state::QUEUED) {
                    // Already on its way out (the demotion the maintainer queued): the
                    // same move, done now, if nothing better is found.
                    fallback.get_or_insert(h);
                    queued_passed += 1;
                    search = prev;
                    continue;
                }
                tries -= 1;
                let due = queue_of(self.periods.count_of(h), self.queues);
                if h.has(state::ACTIVE) || due < queue {
                    let w = h.charge_write(header_bytes::LINKS);
                    w.clear(state::ACTIVE);
                    cs.lru.move_to(&dram.mem, w, due.min(queue));
                    search = prev;
                    continue;
                }
                return Some(h);
            }
        }
        fallback
    }

    /// Evicts the first item, from the tail of the lowest non-empty DRAM queue, whose
    /// shard is free and that is not on its way out; false when a few tries found none.
    /// The caller holds the class lock.
    fn evict_lowest_tail(&self, e: &Engine, tier: &Tier, cs: &mut ClassState, now_s: u32) -> bool {
        let Some(mut addr) = cs.lru.tail.iter().copied().find(|&t| t != NIL) else {
            return false;
        };
        for _ in 0..VICTIM_TRIES {
            if addr == NIL {
                return false;
            }
            let h = tier.mem.read_header(addr, header_bytes::ALL);
            let prev = h.prev();
            if !h.has(state::QUEUED) && e.evict_item(tier, cs, h, now_s) {
                return true;
            }
            addr = prev;
        }
        false
    }

    /// Moves items whose counters decayed below their queue down to the queue they
    /// belong in (from each queue's tail, a few per pass). The caller holds the lock.
    fn decay_queues(&self, e: &Engine, cs: &mut ClassState) {
        if self.hyperbolic {
            return;
        }
        let dram = e.dram();
        for queue in 1..self.queues {
            let mut search = cs.lru.tail[queue];
            for _ in 0..DECAY_TRIES {
                if search == NIL {
                    break;
                }
                let h = dram.mem.read_header(search, header_bytes::ALL);
                let prev = h.prev();
                let due = queue_of(self.periods.count_of(h), self.queues);
                if due >= queue {
                    // The tail is still hot enough for its queue: so is most of the rest.
                    break;
                }
                super::slru::move_to(dram, cs, h, due);
                search = prev;
            }
        }
    }

    /// Algorithm 1 for one class, when it has served [`TUNE_REQUESTS`] get hits since
    /// its last adjustment (called by the DRAM maintainer).
    fn tune(&self, e: &Engine, class_id: usize) {
        let Some(class) = self.classes.get(class_id) else {
            return;
        };
        let mut t = class.tuning.lock();
        let dram_hits = e.counters.get_class(class_id, C::DramHits);
        let slow_hits = e.counters.get_class(class_id, C::SlowHits);
        if dram_hits < t.dram_hits || slow_hits < t.slow_hits {
            // `stats reset` zeroed the counters: start the period again.
            t.dram_hits = dram_hits;
            t.slow_hits = slow_hits;
            return;
        }
        let c_dreq = dram_hits - t.dram_hits;
        let c_nreq = slow_hits - t.slow_hits;
        if c_dreq + c_nreq < TUNE_REQUESTS {
            return;
        }
        let migration_accesses = class.migration_accesses.load(Ordering::Relaxed);
        let promotions = class.promotions.load(Ordering::Relaxed);
        debug_assert!(migration_accesses >= t.migration_accesses && promotions >= t.promotions);
        let c_mig = migration_accesses - t.migration_accesses;
        let c_n_to_d = promotions - t.promotions;
        let benefit = (c_dreq as f64 - c_mig as f64) / (c_dreq + c_nreq) as f64;
        let dram = e.dram();
        let free_chunks = {
            let cs = dram.classes[class_id].0.lock();
            let free_pages = dram.pool.lock().free_pages() as u64;
            cs.free_chunks + free_pages * cs.per_page as u64
        };
        let last = t.benefit.map(|b| (b, t.raised));
        let (threshold, raised) = adjust_threshold(
            class.threshold.load(Ordering::Relaxed),
            c_n_to_d,
            free_chunks,
            benefit,
            last,
        );
        class.threshold.store(threshold, Ordering::Relaxed);
        *t = Tuning {
            dram_hits,
            slow_hits,
            migration_accesses,
            promotions,
            benefit: Some(benefit),
            raised,
        };
    }

    /// The slow tier's CLOCK: from the hand, pass over referenced items (clearing their
    /// bit) and evict the first unreferenced one. Returns the items removed. The caller
    /// holds the class lock.
    fn clock_evict(&self, e: &Engine, tier: &Tier, cs: &mut ClassState, now_s: u32) -> usize {
        let mem = &tier.mem;
        for attempt in 1..=CLOCK_TRIES {
            let mut addr = cs.lru.hand;
            if addr == NIL {
                // Wrapped (or never started): the oldest item of the first non-empty list.
                addr = (0..crate::lru::SEGMENTS)
                    .rev()
                    .map(|segment| cs.lru.tail[segment])
                    .find(|&t| t != NIL)
                    .unwrap_or(NIL);
                if addr == NIL {
                    return 0;
                }
            }
            let h = mem.read_header(addr, header_bytes::ALL);
            cs.lru.hand = h.prev();
            if e.dead_reason(h, now_s).is_some() {
                if e.reclaim_dead(tier, cs, h, false) {
                    return 1;
                }
                continue;
            }
            if h.has(state::QUEUED) {
                continue;
            }
            if !e.config.evictions_enabled {
                return 0;
            }
            let key_hash = h.key_hash();
            let referenced = {
                let Some(mut table) = e.index.shard(key_hash).table.try_lock() else {
                    cs.stats.lrutail_reflocked += 1;
                    continue;
                };
                Index::with_policy_bits(&mut table, key_hash, addr, |_, referenced| {
                    std::mem::replace(referenced, false)
                })
                .unwrap_or(false)
            };
            // Bounded: after CLOCK_TRIES - 1 referenced items the hand evicts the next
            // one anyway, so a store never fails because every item was just read.
            if (!referenced || attempt == CLOCK_TRIES) && e.evict_item(tier, cs, h, now_s) {
                return 1;
            }
        }
        0
    }

    /// The page split of DRAM that maximises the benefit of the last complete period,
    /// per class (the large class, whose items span pages, keeps what it has).
    fn plan_split(&self, e: &Engine, last_period: &[Reached], current: &[usize]) -> Vec<usize> {
        let geometry = &e.geometry;
        let large = geometry.large;
        let classes: Vec<usize> = (1..large).collect();
        let pages_total: usize =
            classes.iter().map(|&c| current[c]).sum::<usize>() + e.dram().pool.lock().free_pages();
        let unit = pages_total.div_ceil(DP_UNITS_MAX).max(1);
        let units = pages_total / unit;
        let benefit = |class_id: usize, units_given: usize| -> f64 {
            let Some(reached) = last_period.get(class_id) else {
                return 0.0;
            };
            let per_page = geometry.chunks_per_page(class_id) as u64;
            let mut room = (units_given * unit) as u64 * per_page;
            let mut sum = 0u64;
            for value in (1..COUNT_VALUES).rev() {
                if room == 0 {
                    break;
                }
                let above = reached.get(value + 1).copied().unwrap_or(0);
                let exactly = u64::from(reached[value].saturating_sub(above));
                let taken = exactly.min(room);
                sum += taken * value as u64;
                room -= taken;
            }
            sum as f64 * geometry.chunk_bytes[class_id] as f64
        };
        let split = benefit_split(classes.len(), units, |i, u| benefit(classes[i], u));
        let mut target = current.to_vec();
        for (i, &class_id) in classes.iter().enumerate() {
            target[class_id] = split[i] * unit;
        }
        target
    }

    /// A DRAM item's access count as the counters see it.
    fn dram_count(&self, h: HeaderRead<'_>) -> u8 {
        if self.hyperbolic {
            h.access().min(COUNT_MAX)
        } else {
            self.periods.count_of(h)
        }
    }

    /// The period number a hyperbolic DRAM item's descriptor records it entered in.
    fn entry_period(&self) -> u8 {
        self.periods.current() as u8
    }

    fn next_random(&self) -> u64 {
        // xorshift64: a data race between two threads only repeats a sample.
        let mut x = self.sample_state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.sample_state.store(x, Ordering::Relaxed);
        x
    }

    /// HM-HC's DRAM victim: among chunks of the class sampled at random, the live item
    /// with the fewest accesses per period spent in DRAM. Dead items met are reclaimed.
    /// The caller holds the class lock (shards are only tried).
    fn hyperbolic_victim<'e>(
        &self,
        e: &'e Engine,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        let dram = e.dram();
        let now_period = self.entry_period();
        let large = cs.id == e.geometry.large;
        let mut best: Option<(HeaderRead<'e>, u64, u64)> = None;
        for _ in 0..HYPERBOLIC_SAMPLES {
            if cs.pages.is_empty() {
                return None;
            }
            let random = self.next_random();
            let page = cs.pages[(random % cs.pages.len() as u64) as usize] as usize;
            let chunk = if large || cs.per_page == 0 {
                0
            } else {
                ((random >> 32) % cs.per_page as u64) as usize
            };
            let addr = dram
                .mem
                .addr_at(page * crate::config::SLAB_PAGE_SIZE_BYTES + chunk * cs.chunk_bytes);
            let h = dram.mem.read_header(addr, header_bytes::ALL);
            if !h.has(state::LINKED) || h.has(state::QUEUED) {
                continue;
            }
            if e.dead_reason(h, now_s).is_some() {
                e.reclaim_dead(dram, cs, h, false);
                continue;
            }
            let key_hash = h.key_hash();
            let Some(mut table) = e.index.shard(key_hash).table.try_lock() else {
                continue;
            };
            let Some(entered) = Index::with_policy_bits(&mut table, key_hash, addr, |b, _| *b)
            else {
                continue;
            };
            let periods_in_dram = u64::from(now_period.wrapping_sub(entered)) + 1;
            let accesses = u64::from(h.access());
            // accesses / periods_in_dram, compared without division.
            let lower = best.is_none_or(|(_, best_accesses, best_periods)| {
                accesses * best_periods < best_accesses * periods_in_dram
            });
            if lower {
                best = Some((h, accesses, periods_in_dram));
            }
        }
        best.map(|(h, _, _)| h)
    }

    fn count_migration(&self, class_id: usize, direction: Direction) {
        if let Some(class) = self.classes.get(class_id) {
            class.migration_accesses.fetch_add(1, Ordering::Relaxed);
            if direction == Direction::ToDram {
                class.promotions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A hit on a DRAM item under the multi-queue (the common GET): the counter and the
    /// access time, the queue the counter now belongs in (relinked there if the class
    /// lock is free: the maintainer's victim search fixes it otherwise), ACTIVE and
    /// FETCHED, the reassignment histogram, and the header write charged once. Returns
    /// whether the header's access word changed.
    ///
    /// Inlined into the read path (`Engine::read`): out of line, the call, its argument
    /// set-up and its saved registers cost ~30 instructions a hit. One load of the state word serves the queue, ACTIVE and FETCHED
    /// checks (a relink changes only the queue bits). Hyperbolic DRAM and slow-tier
    /// items take [`Hotspot::other_access`].
    #[inline(always)]
    fn dram_hit(&self, tier: &Tier, h: HeaderRead<'_>, class_id: usize, now_s: u32) -> bool {
        // The hit's header writes, charged once (the access word) when the edit ends.
        let mut edit = h.edit(header_bytes::ACCESS);
        // The step's `after` is the count now (reading it back would decay the byte
        // twice more, ~50 instructions a hit).
        let (_, step) = self.periods.record_step(&mut edit, now_s);
        let bits = h.state();
        let segment = usize::from((bits & state::SEG_MASK) >> state::SEG_SHIFT);
        let due = queue_of(step.after, self.queues);
        let mut set = 0;
        if due != segment {
            self.relink_hit(tier, h, class_id, due);
        } else if bits & state::ACTIVE == 0 {
            set |= state::ACTIVE;
        }
        if bits & state::FETCHED == 0 {
            set |= state::FETCHED;
        }
        if set != 0 {
            edit.write().set(set);
        }
        self.record_reached(class_id, step);
        edit.finish()
    }

    /// A hit moved a DRAM item's counter to queue `due`: relinks it there if the class
    /// lock is free (out of line: most hits stay in their queue), charging the links.
    #[inline(never)]
    fn relink_hit(&self, tier: &Tier, h: HeaderRead<'_>, class_id: usize, due: usize) {
        if let Some(mut cs) = tier.classes[class_id].0.try_lock() {
            if h.has(state::LINKED) {
                super::slru::move_to(tier, &mut cs, h, due);
            }
        }
    }

    /// A hit on a hyperbolic DRAM item (its count since it entered DRAM, which does not
    /// feed the reassignment) or on a slow-tier item (its counter and reference bit in
    /// the index descriptor). Returns whether it charged a write of the header's access
    /// word.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn other_access(
        &self,
        e: &Engine,
        tier: &Tier,
        h: HeaderRead<'_>,
        class_id: usize,
        now_s: u32,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
    ) -> bool {
        let addr = h.addr();
        // The hit's header writes, charged once (the access word) when the edit ends.
        let mut edit = h.edit(header_bytes::ACCESS);
        if tier.id == TierId::Dram {
            debug_assert!(self.hyperbolic, "a multi-queue DRAM hit takes dram_hit");
            let w = edit.write();
            w.set_access(h.access().saturating_add(1));
            w.set_last_access_s(now_s);
            w.set(state::FETCHED);
            return edit.finish();
        }
        // A slow-tier item: the counter and the reference bit live in DRAM.
        let step = Index::with_policy_bits(table, key_hash, addr, |byte, referenced| {
            // No timestamp in the descriptor: the period bits are trusted.
            let (accessed, step) = self.periods.accessed_step(*byte, now_s);
            *byte = accessed;
            *referenced = true;
            step
        });
        let count = step.map_or(0, |s| s.after);
        if !h.has(state::FETCHED) {
            let w = edit.write();
            w.set(state::FETCHED);
            w.set_last_access_s(now_s);
        } else if now_s.saturating_sub(h.last_access_s()) >= ITEM_UPDATE_INTERVAL_S {
            edit.write().set_last_access_s(now_s);
        }
        if let Some(step) = step {
            self.record_reached(class_id, step);
        }
        if e.migrating() && !h.has(state::QUEUED) && count > self.threshold(class_id) {
            let w = edit.write();
            w.set(state::PROMOTE);
            e.moves.offer(Direction::ToDram, w, false, &*table);
        }
        edit.finish()
    }
}

impl Policy for Hotspot {
    fn alloc_new_item<'e>(
        &self,
        e: &'e Engine,
        _key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'e>> {
        let dram = e.dram();
        let Some(slow) = e.slow() else {
            return e.alloc(dram, class_id, total_bytes);
        };
        if dram.page_count == 0 {
            return e.alloc(slow, class_id, total_bytes);
        }
        e.take_free(dram, class_id, total_bytes)
            .or_else(|| e.alloc(slow, class_id, total_bytes))
            .or_else(|| e.alloc(dram, class_id, total_bytes))
    }

    fn new_item_access(&self, _now_s: u32) -> u8 {
        self.periods.fresh()
    }

    fn on_link(
        &self,
        e: &Engine,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        tier: &Tier,
        item: HeaderWrite<'_>,
        old: Option<HeaderRead<'_>>,
    ) -> usize {
        let addr = item.addr();
        // A SET is an access: an overwrite carries the key's counter on.
        let first_access = |before: u8| CountStep {
            first_in_period: true,
            before,
            after: before.saturating_add(1).min(COUNT_MAX),
        };
        let step = match old {
            Some(h) if e.tier_of(h.addr()).id == TierId::Dram => {
                if self.hyperbolic {
                    first_access(self.dram_count(h))
                } else {
                    self.periods.accessed_step(h.access(), h.last_access_s()).1
                }
            }
            // The descriptor (kept by the index's `replace`) holds a slow item's counter.
            Some(_) => Index::with_policy_bits(table, key_hash, addr, |byte, _| {
                // Read only here: an overwrite of a DRAM item (the common one) needs no
                // clock, and reading it cost a call.
                self.periods.accessed_step(*byte, e.now_s()).1
            })
            .unwrap_or(first_access(0)),
            None => first_access(0),
        };
        let count = step.after;
        self.record_reached(tier.class_of(addr), step);
        let byte = self.periods.with_count(count);
        match tier.id {
            TierId::Dram if self.hyperbolic => {
                item.set_access(count);
                let entered = self.entry_period();
                Index::with_policy_bits(table, key_hash, addr, |b, referenced| {
                    *b = entered;
                    *referenced = false;
                });
                0
            }
            TierId::Dram => {
                item.set_access(byte);
                Index::with_policy_bits(table, key_hash, addr, |b, referenced| {
                    *b = 0;
                    *referenced = false;
                });
                queue_of(count, self.queues)
            }
            TierId::Slow => {
                // The SET counts in the counter, not in the reference bit: the hand
                // reaches new items last anyway, and a burst of stores must not make
                // every item look referenced.
                Index::with_policy_bits(table, key_hash, addr, |b, referenced| {
                    *b = byte;
                    *referenced = false;
                });
                COLD
            }
        }
    }

    #[inline(always)]
    fn on_access(
        &self,
        e: &Engine,
        tier: &Tier,
        item: HeaderRead<'_>,
        class_id: usize,
        now_s: u32,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
    ) -> bool {
        if tier.id == TierId::Dram && !self.hyperbolic {
            return self.dram_hit(tier, item, class_id, now_s);
        }
        self.other_access(e, tier, item, class_id, now_s, table, key_hash)
    }

    fn make_room(&self, e: &Engine, tier: &Tier, cs: &mut ClassState, now_s: u32) -> usize {
        match tier.id {
            TierId::Slow => self.clock_evict(e, tier, cs, now_s),
            TierId::Dram => {
                if !e.config.evictions_enabled {
                    return 0;
                }
                // The victim search reclaims dead items it passes: that is room too.
                let free_before = cs.free_chunks;
                for _ in 0..VICTIM_SEARCHES {
                    // None: every item looked at was active or belonged to a lower
                    // queue, and was moved there (its ACTIVE bit cleared): the next
                    // search starts from a different tail.
                    if let Some(h) = self.dram_victim(e, cs, now_s) {
                        if e.evict_item(tier, cs, h, now_s) {
                            return 1;
                        }
                        // Its shard is locked by a request in flight (a hot key's, most
                        // likely): as memcached passes over a tail item in use, bump it
                        // to its queue's head so that the next search finds another.
                        // (Hyperbolic sampling draws another by itself.)
                        if !self.hyperbolic {
                            let count = self.periods.count_of(h);
                            super::slru::move_to(tier, cs, h, queue_of(count, self.queues));
                        }
                    }
                    if cs.free_chunks > free_before {
                        return 1;
                    }
                }
                // Bounded, as the slow tier's CLOCK is: when every item the searches saw
                // was just read, the oldest of the lowest queue goes anyway, so a store
                // never fails because everything is hot.
                usize::from(self.evict_lowest_tail(e, tier, cs, now_s))
            }
        }
    }

    fn destination<'e>(
        &self,
        e: &'e Engine,
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
                let victim = |cs: &mut ClassState, now_s: u32| self.dram_victim(e, cs, now_s);
                match tiering::dram_chunk_by_demoting_with(e, class_id, total_bytes, victim, |_| {
                    true
                }) {
                    Ok(Some(addr)) => Ok(addr),
                    Ok(None) | Err(()) => Err(Refusal::NoSpace),
                }
            }
        }
    }

    fn after_move(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        direction: Direction,
        dst_tier: &Tier,
        h: HeaderWrite<'_>,
        now_s: u32,
    ) -> usize {
        let dst_addr = h.addr();
        let class_id = dst_tier.class_of(dst_addr);
        self.count_migration(class_id, direction);
        match direction {
            Direction::ToDram => {
                // The counter moves from the descriptor into the DRAM header.
                // The access that made the item hot was just now; the slow copy's time
                // may be a minute old (written at most once a minute), and a counter
                // read against it would look idle.
                h.set_last_access_s(now_s);
                let entered = self.entry_period();
                let hyperbolic = self.hyperbolic;
                let byte = Index::with_policy_bits(table, key_hash, dst_addr, |b, referenced| {
                    *referenced = false;
                    let counter = *b;
                    *b = if hyperbolic { entered } else { 0 };
                    counter
                })
                .unwrap_or(0);
                if self.hyperbolic {
                    h.set_access(self.slow_count(byte, now_s));
                    return 0;
                }
                h.set_access(byte);
                queue_of(self.periods.count_of(h.read()), self.queues)
            }
            Direction::ToSlow => {
                // ... and back: the copy's header holds the DRAM counter.
                let byte = if self.hyperbolic {
                    self.periods.with_count(h.access().min(COUNT_MAX))
                } else {
                    h.access()
                };
                Index::with_policy_bits(table, key_hash, dst_addr, |b, referenced| {
                    *b = byte;
                    *referenced = false;
                });
                COLD
            }
        }
    }

    fn migrates(&self) -> bool {
        true
    }

    fn begin_pass(&self, e: &Engine, tier: &Tier) {
        if tier.id == TierId::Dram && self.periods.advance(e) > 0 {
            self.close_period();
        }
    }

    fn maintain_class(&self, e: &Engine, tier: &Tier, class_id: usize) -> usize {
        if tier.id != TierId::Dram {
            // The slow tier has nothing to maintain: CLOCK works at eviction time.
            return 0;
        }
        self.tune(e, class_id);
        let now_s = e.now_s();
        let mut cs = tier.classes[class_id].0.lock();
        self.decay_queues(e, &mut cs);
        if !e.migrating() {
            return 0;
        }
        // Demotions already waiting free their chunks soon: only the rest of the reserve
        // is queued now, so passes that run before the migration thread do not demote
        // the same shortfall twice.
        let pending = e.moves.queue_len(Direction::ToSlow);
        let reserve = (cs.pages.len() * cs.per_page) as u64 / tiering::RESERVE_DIVISOR + 1;
        let wanted = reserve
            .saturating_sub(cs.free_chunks)
            .saturating_sub(pending as u64)
            .min(DEMOTIONS_PER_PASS as u64);
        let mut queued = 0;
        while queued < wanted && tiering::dram_needs_room(tier, &cs) {
            let Some(victim) = self.dram_victim(e, &mut cs, now_s) else {
                break;
            };
            if victim.has(state::QUEUED)
                || !e.moves.offer_charged(Direction::ToSlow, victim, true, &*cs)
            {
                break;
            }
            queued += 1;
        }
        usize::from(queued > 0)
    }

    fn class_need(&self, _tier: &Tier, cs: &ClassState) -> u64 {
        cs.stats.evicted + cs.dram_pressure
    }

    fn migration_threshold(&self, class_id: usize) -> Option<u8> {
        Some(self.threshold(class_id))
    }

    fn plan_page_move(&self, e: &Engine) -> Option<Option<(usize, usize)>> {
        // HM-HC's DRAM counts accesses since an item entered DRAM, not HMCached's decayed
        // counter the plan needs (one byte holds one or the other): its pages move by
        // the automover's rules.
        if !self.benefit_reassign || self.hyperbolic || e.slow().is_none() {
            return None;
        }
        let dram = e.dram();
        if dram.pool.lock().free_pages() > 0 {
            // DRAM has free pages: classes take them as they need them.
            return Some(None);
        }
        let current: Vec<usize> = (0..=e.geometry.large)
            .map(|c| dram.classes[c].0.lock().pages.len())
            .collect();
        let mut r = self.reassignment.lock();
        if r.generation == 0 {
            return Some(None);
        }
        if r.planned_generation != r.generation {
            r.target_pages = self.plan_split(e, &r.last_period, &current);
            r.planned_generation = r.generation;
        }
        let target = &r.target_pages;
        let gap = |c: usize| target.get(c).map_or(0, |&t| t as i64 - current[c] as i64);
        let dst = (1..e.geometry.large).max_by_key(|&c| gap(c))?;
        let src = (1..e.geometry.large).min_by_key(|&c| gap(c))?;
        Some((gap(dst) > 0 && gap(src) < 0 && current[src] > 0).then_some((src, dst)))
    }
}

/// The dynamic program of HMCached's equations 3-4: `units` of DRAM split among
/// `classes` to maximise the sum of `benefit(class, units_given)`. Returns the units per
/// class. O(classes x units^2).
pub(crate) fn benefit_split(
    classes: usize,
    units: usize,
    benefit: impl Fn(usize, usize) -> f64,
) -> Vec<usize> {
    // best[u]: the largest benefit of the classes so far with u units; choice[i][u]: the
    // units class i takes in that optimum.
    let mut best = vec![0.0f64; units + 1];
    let mut choice = vec![vec![0usize; units + 1]; classes];
    for (i, class_choice) in choice.iter_mut().enumerate() {
        let gains: Vec<f64> = (0..=units).map(|u| benefit(i, u)).collect();
        let mut next = vec![f64::MIN; units + 1];
        for u in 0..=units {
            for (given, gain) in gains.iter().enumerate().take(u + 1) {
                let total = best[u - given] + gain;
                if total > next[u] {
                    next[u] = total;
                    class_choice[u] = given;
                }
            }
        }
        best = next;
    }
    let mut split = vec![0; classes];
    let mut left = units;
    for i in (0..classes).rev() {
        split[i] = choice[i][left];
        left -= split[i];
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reassignment histogram counts each item once per value it held in the period:
    /// an item rising from 0 to the saturated count and read on at saturation is one
    /// item at every value (not one more per read at saturation); an item whose first
    /// access of the period starts from a decayed count is counted at every value up
    /// to it. A period's end hands the histogram over and starts afresh.
    #[test]
    fn every_counter_value_reaches_the_histogram_of_the_period() {
        let hotspot = Hotspot::new(&EngineConfig::default());
        let step = |first_in_period, before, after| CountStep {
            first_in_period,
            before,
            after,
        };
        // Item A: new this period, read until its counter saturates, then read on.
        hotspot.record_reached(4, step(true, 0, 1));
        for count in 1..COUNT_MAX {
            hotspot.record_reached(4, step(false, count, count + 1));
        }
        for _ in 0..10 {
            hotspot.record_reached(4, step(false, COUNT_MAX, COUNT_MAX));
        }
        // Item B: its first access of the period finds its counter decayed to 6.
        hotspot.record_reached(4, step(true, 6, 7));
        hotspot.close_period();
        let r = hotspot.reassignment.lock();
        assert_eq!(r.generation, 1);
        let reached = &r.last_period[4];
        assert_eq!(reached[usize::from(COUNT_MAX)], 1, "A alone, once");
        assert!(reached[8..usize::from(COUNT_MAX)].iter().all(|&n| n == 1));
        assert!(reached[1..=7].iter().all(|&n| n == 2), "{reached:?}");
        assert!(
            reached.windows(2).all(|w| w[0] >= w[1]),
            "monotone: {reached:?}"
        );
        drop(r);
        hotspot.close_period();
        assert!(hotspot.reassignment.lock().last_period[4]
            .iter()
            .all(|&n| n == 0));
    }

    fn hotspot_of(e: &Engine) -> &Hotspot {
        match &e.policy {
            super::super::AnyPolicy::Hotspot(h) => h,
            _ => panic!("not the hotspot policy"),
        }
    }

    /// A DRAM-only store does not fail because the chosen victim's shard is locked by a
    /// request in flight: the next candidate is evicted instead (found as `SERVER_ERROR
    /// out of memory storing object` under 16 connections of 4 KiB sets with `--dram 8`).
    #[test]
    fn a_store_evicts_past_a_victim_whose_shard_is_locked() {
        use crate::api::{StoreMode, StoreOptions, StoreOutcome};
        let e = Engine::new(
            EngineConfig {
                memory_limit_bytes: 1024 * 1024,
                slow_tier: None,
                policy: crate::config::PlacementPolicy::Hotspot,
                slab_reassign: false,
                ..EngineConfig::default()
            },
            crate::clock::ManualClock::new(1_700_000_000),
        )
        .unwrap();
        let value = [b'v'; 117];
        let key = |i: u32| format!("key:{i:04}");
        let store = |i: u32| {
            e.store(
                key(i).as_bytes(),
                &value,
                &StoreOptions::new(StoreMode::Set, 0, 0),
            )
        };
        let class_id = e.geometry.class_for(56 + 8 + 117);
        let per_page = e.geometry.chunks_per_page(class_id) as u32;
        for i in 0..per_page {
            assert!(matches!(store(i), StoreOutcome::Stored { .. }), "{i}");
        }
        // Item 0 is the oldest of the lowest queue: the first victim. Hold its shard as
        // a GET of it would, and store a key of another shard.
        let victim_shard = e.index.shard_index(e.index.hash(key(0).as_bytes()));
        let fresh = (per_page..per_page + 1_000)
            .find(|&i| e.index.shard_index(e.index.hash(key(i).as_bytes())) != victim_shard)
            .unwrap();
        // Held by another thread: one thread blocking on a second shard is a lock-order
        // violation (`lock.rs`).
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let outcome = std::thread::scope(|s| {
            // Owned here, so a panicking store drops it and the holder lets go.
            let done_tx = done_tx;
            let e = &e;
            s.spawn(move || {
                let _held = e.index.shard_at(victim_shard).table.lock();
                held_tx.send(()).unwrap();
                let _ = done_rx.recv();
            });
            held_rx.recv().unwrap();
            let outcome = store(fresh);
            done_tx.send(()).unwrap();
            outcome
        });
        assert!(
            matches!(outcome, StoreOutcome::Stored { .. }),
            "{outcome:?}"
        );
        assert_eq!(
            e.tier_of_key(key(0).as_bytes()),
            Some(crate::TierId::Dram),
            "victim kept"
        );
    }

    /// A DRAM-only store succeeds when every item was read twice (all ACTIVE, so every
    /// victim search comes back empty): the oldest goes anyway, as the slow tier's
    /// bounded CLOCK does.
    #[test]
    fn a_store_evicts_when_every_dram_item_is_active() {
        use crate::api::{ReadOptions, StoreMode, StoreOptions, StoreOutcome};
        let e = Engine::new(
            EngineConfig {
                memory_limit_bytes: 1024 * 1024,
                slow_tier: None,
                policy: crate::config::PlacementPolicy::Hotspot,
                slab_reassign: false,
                ..EngineConfig::default()
            },
            crate::clock::ManualClock::new(1_700_000_000),
        )
        .unwrap();
        let value = [b'v'; 117];
        let key = |i: u32| format!("key:{i:04}");
        let store = |i: u32| {
            e.store(
                key(i).as_bytes(),
                &value,
                &StoreOptions::new(StoreMode::Set, 0, 0),
            )
        };
        let class_id = e.geometry.class_for(56 + 8 + 117);
        let per_page = e.geometry.chunks_per_page(class_id) as u32;
        for i in 0..per_page {
            assert!(matches!(store(i), StoreOutcome::Stored { .. }), "{i}");
        }
        for _ in 0..2 {
            for i in 0..per_page {
                e.read(key(i).as_bytes(), &ReadOptions::default(), |_| ());
            }
        }
        for i in per_page..per_page + 100 {
            let outcome = store(i);
            assert!(
                matches!(outcome, StoreOutcome::Stored { .. }),
                "{i}: {outcome:?}"
            );
        }
    }

    /// Algorithm 1 at work in an engine, one class: while DRAM has room and nothing is
    /// promoted the threshold comes down; once DRAM is full and every hit comes from the
    /// slow tier, the benefit fell after that step down, so the next step goes up.
    #[test]
    fn the_class_threshold_comes_down_with_room_and_back_up_when_the_benefit_falls() {
        use crate::api::{ReadOptions, StoreMode, StoreOptions};
        let e = Engine::new(
            EngineConfig {
                memory_limit_bytes: 1024 * 1024,
                slow_tier: Some(tier::RegionSpec {
                    size_bytes: 8 * 1024 * 1024,
                    backing: tier::RegionBacking::Anonymous,
                    cost: tier::CostModel::NONE,
                }),
                policy: crate::config::PlacementPolicy::Hotspot,
                migration_enabled: false,
                slab_reassign: false,
                ..EngineConfig::default()
            },
            crate::clock::ManualClock::new(1_700_000_000),
        )
        .unwrap();
        let value = [b'v'; 117];
        let key = |i: u32| format!("key:{i:04}");
        let set = |i: u32| {
            let outcome = e.store(
                key(i).as_bytes(),
                &value,
                &StoreOptions::new(StoreMode::Set, 0, 0),
            );
            assert!(
                matches!(outcome, crate::api::StoreOutcome::Stored { .. }),
                "{outcome:?}"
            );
        };
        let get = |i: u32| {
            let hit = e.read(key(i).as_bytes(), &ReadOptions::default(), |_| ());
            assert!(
                matches!(hit, crate::api::ReadOutcome::Hit(())),
                "{}",
                key(i)
            );
        };
        let class_id = e.geometry.class_for(56 + 8 + 117);
        let threshold = || hotspot_of(&e).threshold(class_id);
        assert_eq!(threshold(), THRESHOLD_INITIAL);
        for i in 0..100 {
            set(i);
        }
        for n in 0..TUNE_REQUESTS as u32 / 2 {
            get(n % 100);
        }
        e.lru_maintainer_tier_step(0);
        assert_eq!(
            threshold(),
            THRESHOLD_INITIAL,
            "tuned after half its requests"
        );
        for n in 0..TUNE_REQUESTS as u32 / 2 {
            get(n % 100);
        }
        e.lru_maintainer_tier_step(0);
        assert_eq!(threshold(), THRESHOLD_INITIAL - 1, "DRAM had room: lowered");
        let mut shown = None;
        e.stats_slabs(&mut |name, value| {
            if name == format!("{class_id}:migration_threshold") {
                shown = Some(value.to_string());
            }
        });
        assert_eq!(
            shown,
            Some((THRESHOLD_INITIAL - 1).to_string()),
            "stats slabs"
        );
        // Fill DRAM's only page, then read only slow-tier items.
        let per_page = e.geometry.chunks_per_page(class_id) as u32;
        for i in 100..per_page + 2_000 {
            set(i);
        }
        for n in 0..TUNE_REQUESTS as u32 {
            get(per_page + n % 2_000);
        }
        e.lru_maintainer_tier_step(0);
        assert_eq!(
            threshold(),
            THRESHOLD_INITIAL,
            "the benefit fell after a step down"
        );
    }

    /// The dynamic program's input: a class's benefit of m pages is the sum of the
    /// counters of its hottest m x chunks-per-page items, times its chunk size. Two
    /// classes of the same chunks per page: one whose 2 pages' worth of items were read
    /// 8 times each, one whose items were read once; 3 pages go 2 and 1.
    #[test]
    fn the_split_follows_each_classs_hottest_items() {
        let e = Engine::new(
            EngineConfig {
                memory_limit_bytes: 3 * 1024 * 1024,
                slow_tier: Some(tier::RegionSpec {
                    size_bytes: 8 * 1024 * 1024,
                    backing: tier::RegionBacking::Anonymous,
                    cost: tier::CostModel::NONE,
                }),
                policy: crate::config::PlacementPolicy::Hotspot,
                ..EngineConfig::default()
            },
            crate::clock::ManualClock::new(1_700_000_000),
        )
        .unwrap();
        let h = hotspot_of(&e);
        let (small, large) = (10, 20);
        let per_page = |c: usize| e.geometry.chunks_per_page(c) as u32;
        let mut last_period = vec![[0u32; COUNT_VALUES]; e.geometry.large + 1];
        // Class `large`: two pages' worth of items read 8 times, the rest once.
        for reached in &mut last_period[large][1..=8] {
            *reached = 2 * per_page(large);
        }
        last_period[large][1] = 10 * per_page(large);
        // Class `small`: ten pages' worth read twice.
        last_period[small][1] = 10 * per_page(small);
        last_period[small][2] = 10 * per_page(small);
        // DRAM's three pages are all free: the split is of those.
        let current = vec![0usize; e.geometry.large + 1];
        let split = h.plan_split(&e, &last_period, &current);
        // Benefit of a page: large 8 x chunk bytes per item, small 2 x: the large class
        // takes two pages (all its hot items), the small one the third.
        assert_eq!(
            (split[small], split[large]),
            (1, 2),
            "{:?}",
            &split[1..e.geometry.large]
        );
        assert_eq!(split.iter().sum::<usize>(), 3);
    }

    #[test]
    fn queue_i_holds_counts_from_two_to_the_i() {
        let expected = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 2),
            (7, 2),
            (8, 3),
            (15, 3),
            (16, 4),
            (31, 4),
        ];
        for (count, queue) in expected {
            assert_eq!(queue_of(count, 5), queue, "count {count}");
        }
        // Fewer queues: the top one takes everything above.
        assert_eq!(queue_of(31, 3), 2);
        assert_eq!(queue_of(3, 3), 1);
        assert_eq!(queue_of(31, 1), 0);
    }

    #[test]
    fn the_benefit_split_gives_pages_to_the_classes_that_gain_most() {
        // Class 0 gains 10 a unit for its first 3 units, then nothing; class 1 gains 4 a
        // unit without end; class 2 gains 7 for its first unit only.
        let gain = |class: usize, units: usize| -> f64 {
            match class {
                0 => 10.0 * units.min(3) as f64,
                1 => 4.0 * units as f64,
                _ => 7.0 * units.min(1) as f64,
            }
        };
        assert_eq!(benefit_split(3, 6, gain), vec![3, 2, 1]);
        assert_eq!(benefit_split(3, 4, gain), vec![3, 0, 1]);
        assert_eq!(benefit_split(3, 2, gain), vec![2, 0, 0]);
        assert_eq!(benefit_split(3, 0, gain), vec![0, 0, 0]);
        assert_eq!(benefit_split(3, 6, gain).iter().sum::<usize>(), 6);
    }

    #[test]
    fn algorithm_1_lowers_with_spare_dram_and_hill_climbs_otherwise() {
        // Fewer promotions than half the free chunks: lower.
        assert_eq!(
            adjust_threshold(4, 10, 100, 0.5, Some((0.9, true))),
            (3, false)
        );
        // No spare DRAM, no earlier benefit: a first step up.
        assert_eq!(adjust_threshold(4, 10, 0, 0.5, None), (5, true));
        // The benefit rose: repeat the last step (up, then down).
        assert_eq!(
            adjust_threshold(4, 10, 0, 0.6, Some((0.5, true))),
            (5, true)
        );
        assert_eq!(
            adjust_threshold(4, 10, 0, 0.6, Some((0.5, false))),
            (3, false)
        );
        // It fell: reverse it.
        assert_eq!(
            adjust_threshold(4, 10, 0, 0.4, Some((0.5, true))),
            (3, false)
        );
        assert_eq!(
            adjust_threshold(4, 10, 0, 0.4, Some((0.5, false))),
            (5, true)
        );
        // The spare-room test is promotions < free / 2, strictly: at 50 of 100 free, or
        // at 60, the hill-climbing decides.
        assert_eq!(
            adjust_threshold(4, 50, 100, 0.6, Some((0.5, true))),
            (5, true)
        );
        assert_eq!(
            adjust_threshold(4, 60, 100, 0.6, Some((0.5, true))),
            (5, true)
        );
        assert_eq!(
            adjust_threshold(4, 49, 100, 0.6, Some((0.5, true))),
            (3, false)
        );
        // An unchanged benefit counts as no better: the last step is reversed.
        assert_eq!(
            adjust_threshold(4, 10, 0, 0.5, Some((0.5, true))),
            (3, false)
        );
        // Bounded: never below 0, never at or above the counter's ceiling.
        assert_eq!(adjust_threshold(0, 0, 100, 0.0, None).0, 0);
        assert_eq!(
            adjust_threshold(COUNT_MAX - 1, 10, 0, 0.5, None).0,
            COUNT_MAX - 1
        );
    }
}
