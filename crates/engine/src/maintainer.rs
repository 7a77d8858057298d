//! Background work: the LRU maintainer (memcached's `lru_maintainer_juggle` and
//! `lru_pull_tail`), the LRU crawler that reclaims expired and flushed items, and the
//! slab automover. Each has a step function that does one bounded pass (tests drive
//! them directly with a manual clock) and a named thread that calls it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::api::TierId;
use crate::engine::{Engine, Pull, Tier};
use crate::index::Index;
use crate::item::{state, ItemAddr, NIL};
use crate::lru::{COLD, HOT, SEGMENTS, WARM};
use crate::migrate::Direction;
use crate::slab::ClassState;

/// Items looked at from a tail per pull (memcached's `tries = 5`).
const PULL_TAIL_TRIES: usize = 5;
/// Juggle rounds per class per maintainer pass (memcached: 500).
const JUGGLE_ROUNDS_MAX: usize = 500;
/// Items the crawler checks under one class-lock hold.
const CRAWL_BATCH: usize = 64;
/// Steps of eviction history the automover looks at (memcached's window of 30 s).
const AUTOMOVE_WINDOW: usize = 30;
/// memcached's `slab_automove_ratio`.
const AUTOMOVE_AGE_RATIO: f64 = 0.8;

const MAINTAINER_SLEEP_MIN: Duration = Duration::from_millis(1);
const MAINTAINER_SLEEP_MAX: Duration = Duration::from_millis(1000);
/// A migration thread with empty queues backs off up to this; with work it only yields
/// briefly between batches.
const MIGRATION_SLEEP_MIN: Duration = Duration::from_micros(100);
const MIGRATION_SLEEP_MAX: Duration = Duration::from_millis(20);
const CRAWLER_INTERVAL: Duration = Duration::from_secs(5);
const AUTOMOVE_INTERVAL: Duration = Duration::from_secs(1);

/// "Needs memory" history per class, for the automover.
pub(crate) struct AutomoveState {
    /// Evictions + DRAM pressure per class at the last step.
    last_need: Vec<u64>,
    /// Evictions + DRAM pressure per class in each of the last `AUTOMOVE_WINDOW` steps.
    window: Vec<[u64; AUTOMOVE_WINDOW]>,
    cursor: usize,
    steps: usize,
}

impl AutomoveState {
    pub fn new(class_slots: usize) -> AutomoveState {
        AutomoveState {
            last_need: vec![0; class_slots],
            window: vec![[0; AUTOMOVE_WINDOW]; class_slots],
            cursor: 0,
            steps: 0,
        }
    }
}

/// What the automover sees of one DRAM class.
#[derive(Clone, Copy, Default)]
struct ClassInfo {
    /// Evictions + DRAM pressure so far (monotonic; deltas are used).
    need: u64,
    cold_age_s: u32,
    pages: usize,
    /// More than 2.5 pages of free chunks: a page goes back to the pool.
    spare_page: bool,
    /// At least a page's worth of free chunks: a cheap donor.
    free_page_worth: bool,
}

/// The running background threads.
pub(crate) struct Background {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Engine {
    /// memcached's `lru_pull_tail`: looks at up to five items from the tail of
    /// `segment`, reclaims dead ones, and moves (or, with `Pull::Evict` on COLD, evicts)
    /// the first live one. Returns how many items were removed or moved. The caller
    /// holds the class lock; shards are only `try_lock`ed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pull_tail(
        &self,
        tier: &Tier,
        cs: &mut ClassState,
        segment: usize,
        total_bytes: u64,
        max_age_s: u32,
        mode: Pull,
        now_s: u32,
    ) -> usize {
        let mem = &tier.mem;
        let mut removed = 0;
        let mut search = cs.lru.tail[segment];
        let mut tries = PULL_TAIL_TRIES;
        while tries > 0 && search != NIL {
            tries -= 1;
            let h = mem.header(search);
            let prev = h.prev.load(Ordering::Relaxed);
            if self.dead_reason(h, now_s).is_some() {
                let key_hash = h.key_hash.load(Ordering::Relaxed);
                match self.index.shard(key_hash).table.try_lock() {
                    Some(mut table) => {
                        Index::remove(&mut table, key_hash, search);
                        h.clear(state::LINKED);
                        cs.stats.reclaimed += 1;
                        if !h.has(state::FETCHED) {
                            cs.stats.expired_unfetched += 1;
                        }
                        cs.lru.unlink(mem, search);
                        self.free_chunk(tier, cs, search);
                        removed += 1;
                    }
                    None => cs.stats.lrutail_reflocked += 1,
                }
                search = prev;
                continue;
            }
            match segment {
                HOT | WARM => {
                    if mode == Pull::Juggle
                        && tier.id == TierId::Slow
                        && h.has(state::PROMOTE)
                        && !h.has(state::QUEUED)
                        && self.migrating()
                    {
                        // Fogcached: a Promote item at the slow tier's HOT or WARM tail
                        // enters the Move-to-DRAM queue. It stays readable in WARM
                        // until the migration thread copies it.
                        // Its reuse gap is unknown here (the read that set Promote
                        // could not queue it): the time since that read stands in.
                        let idle_ticks = self.ticks_at(now_s).saturating_sub(h.last_access_ticks());
                        self.moves
                            .offer(Direction::ToDram, mem, search, true, idle_ticks);
                        h.clear(state::ACTIVE);
                        cs.stats.moves_to_warm += 1;
                        cs.lru.move_to(mem, search, WARM);
                        removed += 1;
                        break;
                    }
                    let pct = if segment == HOT {
                        self.config.hot_lru_pct
                    } else {
                        self.config.warm_lru_pct
                    };
                    let limit = total_bytes * u64::from(pct) / 100;
                    let age = now_s.saturating_sub(h.last_access_s.load(Ordering::Relaxed));
                    if h.has(state::ACTIVE) {
                        // Active items are rescued: HOT flows to WARM, WARM stays WARM.
                        h.clear(state::ACTIVE);
                        if segment == WARM {
                            cs.stats.moves_within_lru += 1;
                        } else {
                            cs.stats.moves_to_warm += 1;
                        }
                        cs.lru.move_to(mem, search, WARM);
                        removed += 1;
                    } else if cs.lru.bytes[segment] > limit || age > max_age_s {
                        cs.stats.moves_to_cold += 1;
                        cs.lru.move_to(mem, search, COLD);
                        removed += 1;
                    }
                    break;
                }
                _ => {
                    if mode == Pull::Evict {
                        if !self.config.evictions_enabled {
                            break;
                        }
                        let key_hash = h.key_hash.load(Ordering::Relaxed);
                        let Some(mut table) = self.index.shard(key_hash).table.try_lock() else {
                            cs.stats.lrutail_reflocked += 1;
                            search = prev;
                            continue;
                        };
                        Index::remove(&mut table, key_hash, search);
                        h.clear(state::LINKED);
                        cs.stats.evicted += 1;
                        cs.stats.evicted_time_s =
                            now_s.saturating_sub(h.last_access_s.load(Ordering::Relaxed));
                        if h.exptime_rel_s.load(Ordering::Relaxed) != 0 {
                            cs.stats.evicted_nonzero += 1;
                        }
                        if !h.has(state::FETCHED) {
                            cs.stats.evicted_unfetched += 1;
                        }
                        if h.has(state::ACTIVE) {
                            cs.stats.evicted_active += 1;
                        }
                        cs.lru.unlink(mem, search);
                        self.free_chunk(tier, cs, search);
                        removed += 1;
                    } else if h.has(state::QUEUED) {
                        // Already on its way to the slow tier: look past it.
                        search = prev;
                        continue;
                    } else if h.has(state::ACTIVE) {
                        h.clear(state::ACTIVE);
                        cs.stats.moves_to_warm += 1;
                        cs.lru.move_to(mem, search, WARM);
                        removed += 1;
                    } else if tier.id == TierId::Dram
                        && self.migrating()
                        && self.wants_demotion(tier, cs, h, now_s)
                        && self.moves.offer(Direction::ToSlow, mem, search, true, 0)
                    {
                        // Fogcached: the DRAM COLD tail leaves for the slow tier
                        // (Move-to-slow) instead of being evicted.
                        removed += 1;
                    }
                    break;
                }
            }
        }
        removed
    }

    /// Whether the DRAM COLD tail item `h` should be demoted: DRAM is nearly out of
    /// room for its class, or it was not accessed for `dram_residency_max_s` while DRAM
    /// is above its low-water mark (so the age limit never drains DRAM, seed 001).
    fn wants_demotion(
        &self,
        tier: &Tier,
        cs: &ClassState,
        h: &crate::item::ItemHeader,
        now_s: u32,
    ) -> bool {
        if self.dram_needs_room(tier, cs) {
            return true;
        }
        let limit_s = self.config.dram_residency_max_s;
        limit_s > 0
            && now_s.saturating_sub(h.last_access_s.load(Ordering::Relaxed)) > limit_s
            && self.dram_above_low_water()
    }

    /// memcached's `lru_maintainer_juggle` for one class: rounds of HOT, WARM and COLD
    /// tail pulls until nothing moves. Returns the rounds that moved something.
    fn juggle_class(&self, tier: &Tier, class_id: usize) -> usize {
        let now = self.clock.now_s();
        let (hot_age, warm_age, total_bytes) = {
            let cs = tier.classes[class_id].0.lock();
            if cs.lru.items() == 0 {
                return 0;
            }
            let cold_age = cs.lru.tail_age_s(&tier.mem, COLD, now);
            (
                (f64::from(cold_age) * self.config.hot_max_factor) as u32,
                (f64::from(cold_age) * self.config.warm_max_factor) as u32,
                cs.lru.total_bytes(),
            )
        };
        let mut rounds = 0;
        for _ in 0..JUGGLE_ROUNDS_MAX {
            let mut cs = tier.classes[class_id].0.lock();
            let mut moved =
                self.pull_tail(tier, &mut cs, HOT, total_bytes, hot_age, Pull::Juggle, now);
            moved += self.pull_tail(
                tier,
                &mut cs,
                WARM,
                total_bytes,
                warm_age,
                Pull::Juggle,
                now,
            );
            moved += self.pull_tail(tier, &mut cs, COLD, 0, 0, Pull::Juggle, now);
            if moved == 0 {
                break;
            }
            rounds += 1;
        }
        rounds
    }

    /// One pass of the LRU maintainer over every class of every tier. Returns the
    /// rounds that moved items (0 when the LRUs are settled).
    pub fn lru_maintainer_step(&self) -> usize {
        (0..self.tiers.len())
            .map(|t| self.lru_maintainer_tier_step(t))
            .sum()
    }

    /// One pass of tier `tier_index`'s own maintainer (0: DRAM, 1: slow tier) over its
    /// classes: the segmented-LRU rules, plus feeding the Move queues (DRAM COLD tails
    /// to Move-to-slow; slow HOT/WARM Promote tails to Move-to-DRAM).
    pub fn lru_maintainer_tier_step(&self, tier_index: usize) -> usize {
        let Some(tier) = self.tiers.get(tier_index) else {
            return 0;
        };
        // The occupancy the low-water check of age-based demotion uses.
        let item_bytes: u64 = tier
            .classes
            .iter()
            .skip(1)
            .map(|c| c.0.lock().lru.total_bytes())
            .sum();
        tier.item_bytes_seen.store(item_bytes, Ordering::Relaxed);
        let mut rounds = 0;
        for class_id in 1..=self.geometry.large {
            rounds += self.juggle_class(tier, class_id);
        }
        self.rare
            .lru_maintainer_juggles
            .fetch_add(1, Ordering::Relaxed);
        rounds
    }

    /// One pass of the LRU crawler: checks every item once (bounded by the item counts
    /// at the start) and reclaims expired and flushed ones. Returns items reclaimed.
    pub fn lru_crawler_step(&self) -> u64 {
        self.rare.lru_crawler_starts.fetch_add(1, Ordering::Relaxed);
        self.rare.lru_crawler_running.store(true, Ordering::Relaxed);
        let mut reclaimed = 0;
        for tier in &self.tiers {
            for class_id in 1..=self.geometry.large {
                for segment in 0..SEGMENTS {
                    reclaimed += self.crawl_segment(tier, class_id, segment);
                }
            }
        }
        self.rare
            .lru_crawler_running
            .store(false, Ordering::Relaxed);
        reclaimed
    }

    fn crawl_segment(&self, tier: &Tier, class_id: usize, segment: usize) -> u64 {
        let mem = &tier.mem;
        let mut budget = tier.classes[class_id].0.lock().lru.count[segment];
        let mut cursor: ItemAddr = NIL;
        let mut started = false;
        let mut reclaimed = 0;
        while budget > 0 {
            let now = self.clock.now_s();
            let mut cs = tier.classes[class_id].0.lock();
            if !started {
                cursor = cs.lru.tail[segment];
                started = true;
            } else if cursor != NIL {
                // The cursor may have moved or been freed while the lock was released:
                // continue only if it is still in this class and segment.
                let h = mem.header(cursor);
                if !h.has(state::LINKED) || h.class() != class_id || h.segment() != segment {
                    cursor = cs.lru.tail[segment];
                }
            }
            let mut batch = CRAWL_BATCH;
            while batch > 0 && budget > 0 && cursor != NIL {
                batch -= 1;
                budget -= 1;
                let h = mem.header(cursor);
                let prev = h.prev.load(Ordering::Relaxed);
                cs.stats.crawler_items_checked += 1;
                if self.dead_reason(h, now).is_some() {
                    let key_hash = h.key_hash.load(Ordering::Relaxed);
                    if let Some(mut table) = self.index.shard(key_hash).table.try_lock() {
                        Index::remove(&mut table, key_hash, cursor);
                        h.clear(state::LINKED);
                        cs.stats.crawler_reclaimed += 1;
                        if !h.has(state::FETCHED) {
                            cs.stats.expired_unfetched += 1;
                        }
                        cs.lru.unlink(mem, cursor);
                        self.free_chunk(tier, &mut cs, cursor);
                        reclaimed += 1;
                    }
                }
                cursor = prev;
            }
            if cursor == NIL {
                break;
            }
        }
        reclaimed
    }

    /// One step of the slab automover (call once per second). Returns whether a page
    /// was moved (at most one per step). Rules (memcached's `slab_automove=1`,
    /// simplified):
    /// - a class with more than 2.5 pages of free chunks gives its emptiest page back
    ///   to the pool;
    /// - over a window of steps, if some class needed memory and its COLD tail is
    ///   younger than `0.8 x` the oldest COLD tail of a class with at least two pages,
    ///   the oldest class gives a page to the needy one. Mode 2 acts on a window of one.
    ///
    /// "Needed memory" is an eviction; with a slow tier also DRAM pressure (a promotion
    /// that found no DRAM chunk, a demotion an allocation forced), because a full DRAM
    /// demotes instead of evicting and would otherwise keep its pages with the classes
    /// of old value sizes forever. With a slow tier a donor may give its last page (its
    /// items are demoted, not lost), and a donor with a page's worth of free chunks is
    /// preferred over the oldest tail, without the age test.
    pub fn slab_automove_step(&self) -> bool {
        let mode = self.slab_automove.load(Ordering::Relaxed);
        if mode == 0 || !self.config.slab_reassign {
            return false;
        }
        let tier = self.dram();
        let tiered = self.page_moves_demote(tier);
        let now = self.clock.now_s();
        let large = self.geometry.large;
        let mut info = Vec::with_capacity(large + 1);
        info.push(ClassInfo::default());
        for class_id in 1..=large {
            let cs = tier.classes[class_id].0.lock();
            let spare = class_id != large
                && cs.pages.len() > 1
                && cs.free_chunks as f64 > cs.per_page as f64 * 2.5;
            info.push(ClassInfo {
                need: cs.stats.evicted + cs.dram_pressure,
                cold_age_s: cs.lru.tail_age_s(&tier.mem, COLD, now),
                pages: cs.pages.len(),
                spare_page: spare,
                free_page_worth: class_id != large
                    && cs.per_page > 0
                    && cs.free_chunks >= cs.per_page as u64,
            });
        }
        if let Some(class_id) = (1..=large).find(|&c| info[c].spare_page) {
            return self.move_page(tier, class_id, 0);
        }
        let window = if mode == 2 { 1 } else { AUTOMOVE_WINDOW };
        // A donor keeps one page in DRAM-only mode (memcached); with a slow tier its
        // items are demoted, so it may give its last one.
        let donor_pages_min = if tiered { 1 } else { 2 };
        let (youngest, oldest, spare_donor) = {
            let mut am = self.automove.lock();
            am.steps += 1;
            am.cursor = (am.cursor + 1) % AUTOMOVE_WINDOW;
            let cursor = am.cursor;
            for (class_id, c) in info.iter().enumerate().skip(1) {
                let delta = c.need.saturating_sub(am.last_need[class_id]);
                am.last_need[class_id] = c.need;
                am.window[class_id][cursor] = delta;
            }
            if am.steps < window {
                return false;
            }
            let need_in_window = |class_id: usize| -> u64 {
                (0..window)
                    .map(|back| {
                        am.window[class_id][(cursor + AUTOMOVE_WINDOW - back) % AUTOMOVE_WINDOW]
                    })
                    .sum()
            };
            let youngest = (1..=large)
                .filter(|&c| need_in_window(c) > 0)
                .min_by_key(|&c| info[c].cold_age_s);
            let donors = || {
                (1..=large).filter(|&c| info[c].pages >= donor_pages_min && need_in_window(c) == 0)
            };
            let oldest = donors().max_by_key(|&c| info[c].cold_age_s);
            let spare_donor = if tiered {
                donors()
                    .filter(|&c| info[c].free_page_worth)
                    .max_by_key(|&c| info[c].cold_age_s)
            } else {
                None
            };
            (youngest, oldest, spare_donor)
        };
        let Some(dst) = youngest else {
            return false;
        };
        let src = match spare_donor.filter(|&c| c != dst) {
            Some(src) => src,
            None => {
                let Some(src) = oldest else {
                    return false;
                };
                let ratio = if mode == 2 { 1.0 } else { AUTOMOVE_AGE_RATIO };
                if src == dst
                    || f64::from(info[dst].cold_age_s) >= f64::from(info[src].cold_age_s) * ratio
                {
                    return false;
                }
                src
            }
        };
        let moved = self.move_page(tier, src, dst);
        if moved {
            // Start a new window so one burst of need moves one page per window.
            let mut am = self.automove.lock();
            am.window[dst] = [0; AUTOMOVE_WINDOW];
        }
        moved
    }

    /// Starts the background threads (LRU maintainer, crawler, slab automover).
    pub fn start_background(self: &Arc<Self>) {
        let mut bg = self.background.lock();
        if bg.is_some() {
            return;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut handles = Vec::new();
        let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(body)
                .ok()
        };
        if self.config.lru_maintainer {
            // One maintainer per tier (Fogcached): a large slow tier never slows the
            // scanning of DRAM's LRUs.
            for tier_index in 0..self.tiers.len() {
                let engine = Arc::clone(self);
                let stop = Arc::clone(&stop);
                let name = if tier_index == 0 {
                    "fc-lru-maint"
                } else {
                    "fc-lru-maint-slow"
                };
                handles.extend(spawn(
                    name,
                    Box::new(move || {
                        let mut sleep = MAINTAINER_SLEEP_MIN;
                        while !stop.load(Ordering::Relaxed) {
                            let did = engine.lru_maintainer_tier_step(tier_index);
                            sleep = if did > 0 {
                                (sleep / 2).max(MAINTAINER_SLEEP_MIN)
                            } else {
                                (sleep * 2).min(MAINTAINER_SLEEP_MAX)
                            };
                            std::thread::park_timeout(sleep);
                        }
                    }),
                ));
            }
        }
        if self.migrating() {
            for _ in 0..self.config.migration_threads {
                let engine = Arc::clone(self);
                let stop = Arc::clone(&stop);
                handles.extend(spawn(
                    "fc-migrate",
                    Box::new(move || {
                        let mut sleep = MIGRATION_SLEEP_MIN;
                        while !stop.load(Ordering::Relaxed) {
                            sleep = if engine.migration_step() > 0 {
                                MIGRATION_SLEEP_MIN
                            } else {
                                (sleep * 2).min(MIGRATION_SLEEP_MAX)
                            };
                            std::thread::park_timeout(sleep);
                        }
                    }),
                ));
            }
        }
        if self.config.lru_crawler {
            let engine = Arc::clone(self);
            let stop = Arc::clone(&stop);
            handles.extend(spawn(
                "fc-lru-crawler",
                Box::new(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(CRAWLER_INTERVAL);
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        engine.lru_crawler_step();
                    }
                }),
            ));
        }
        if self.config.slab_reassign {
            let engine = Arc::clone(self);
            let stop = Arc::clone(&stop);
            handles.extend(spawn(
                "fc-slab-rebal",
                Box::new(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(AUTOMOVE_INTERVAL);
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        engine.slab_automove_step();
                    }
                }),
            ));
        }
        *bg = Some(Background { stop, handles });
    }

    /// Stops the background threads and waits for them.
    pub fn stop_background(&self) {
        let Some(bg) = self.background.lock().take() else {
            return;
        };
        bg.stop.store(true, Ordering::Relaxed);
        for handle in &bg.handles {
            handle.thread().unpark();
        }
        for handle in bg.handles {
            let _ = handle.join();
        }
    }
}
