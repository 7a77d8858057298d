//! The LRU crawler: walks every item of every class of every tier once per pass and
//! reclaims expired and flushed ones (memcached's `lru_crawler`), so memory held by dead
//! items that nobody reads comes back. Every header it looks at is charged as a read of
//! its tier.
//!
//! Passes are scheduled as memcached's autocrawl schedules them: a pass is due at the
//! soonest expiry among linked items (kept in `Engine::crawl_due_s`, lowered by every
//! link, move, touch and delayed flush that sets an earlier one), and at least once an
//! hour. A cache whose items never expire is not crawled every few seconds for nothing:
//! each pass reads every header, which in the slow tier is a slow-tier read per item.
//!
//! Why an expiry is not missed: a pass first moves the due time to an hour ahead, then
//! lowers it to the soonest expiry of the live items it walks. An item linked (or
//! touched) after that first store lowers the due time itself; one linked before it is
//! already in its LRU when the walk starts, so the walk sees it — unless the walk of a
//! segment restarts from its tail because the item under its cursor moved away and its
//! budget runs out first: such an item waits for the hourly pass at most (its `get`
//! misses all the same; only its memory comes back later).
//!
//! Pace (memcached's knobs, set by `-o` or at run time): `lru_crawler tocrawl <n>` walks
//! at most `n` items of each segment per pass, from its tail, so an item further up is
//! reclaimed only once it reaches the last `n` (its expiry is not seen before);
//! `lru_crawler sleep <us>` pauses the crawler, no lock held, after every 1 000 items.
//! `lru_crawler disable` stops the passes (the thread stays, to be enabled again).
//!
//! For `watch sysevents`, each segment a pass walked gets memcached's `type=lru_crawler`
//! line: `low_mark` is the walked items with an expiry / 100 + 1, `next_reclaims` those
//! of them due within the hour, `since_run` the seconds since the previous pass ended,
//! `next_run` the seconds until the next is due, `elapsed` the walk's seconds.

use std::sync::atomic::Ordering;

use crate::config::CRAWLER_ITEMS_PER_SLEEP;
use crate::engine::{Engine, SlabTier};
use crate::events::{kind, CrawlerStatus, EventWhat};
use crate::item::{header_bytes, state, HeaderRead, ItemAddr, NIL};
use crate::lru::SEGMENTS;

/// Items the crawler checks under one class-lock hold.
const CRAWL_BATCH: usize = 64;

/// The longest time between two passes (memcached's `MAX_MAINTCRAWL_WAIT`, one hour):
/// a bound on how long a missed schedule could keep dead items' memory.
pub const CRAWL_INTERVAL_MAX_S: u32 = 60 * 60;

impl Engine {
    /// Runs a crawler pass if one is due (an item may have expired or been flushed, or
    /// an hour passed since the last one). Returns whether a pass ran. The background
    /// crawler thread calls this every few seconds.
    pub fn lru_crawler_tick(&self) -> bool {
        if self.now_s() < self.crawl_due_s.load(Ordering::Relaxed) {
            return false;
        }
        self.lru_crawler_step();
        true
    }

    /// Makes the crawler's next tick run a pass (`lru_crawler crawl`): within its
    /// interval, not at once, so a client cannot make the server walk every item in a
    /// loop.
    pub fn request_crawl(&self) {
        self.crawl_due_s.store(0, Ordering::Relaxed);
    }

    /// Lowers the crawler's due time to `exptime_rel_s` (an item's expiry, or a delayed
    /// flush, in the engine clock's seconds; 0 = never). Called after the item is in its
    /// LRU (see the module comment).
    #[inline]
    pub(crate) fn note_expiry(&self, exptime_rel_s: u32) {
        if exptime_rel_s != 0 {
            self.crawl_due_s.fetch_min(exptime_rel_s, Ordering::Relaxed);
        }
    }

    /// One pass of the LRU crawler: checks every item once (bounded by the item counts
    /// at the start, and by `lru_crawler tocrawl` per segment) and reclaims expired and
    /// flushed ones. Returns items reclaimed.
    pub fn lru_crawler_step(&self) -> u64 {
        self.rare.lru_crawler_starts.fetch_add(1, Ordering::Relaxed);
        self.rare.lru_crawler_running.store(true, Ordering::Relaxed);
        let pass_start_s = self.now_s();
        self.crawl_due_s.store(
            pass_start_s.saturating_add(CRAWL_INTERVAL_MAX_S),
            Ordering::Relaxed,
        );
        let since_run_s = pass_start_s.saturating_sub(self.crawl_ended_s.load(Ordering::Relaxed));
        let mut pace = Pace {
            sleep_us: self.tuning.crawler_sleep_us(),
            tocrawl: u64::from(self.tuning.crawler_tocrawl()),
            since_sleep: 0,
        };
        let mut reclaimed = 0;
        let mut walked = Vec::new();
        for tier in &self.tiers {
            for class_id in 1..=self.geometry.large {
                for segment in 0..SEGMENTS {
                    let started_s = self.now_s();
                    let walk = self.crawl_segment(tier, class_id, segment, &mut pace);
                    reclaimed += walk.reclaimed;
                    if walk.examined > 0 && self.events.wants(kind::SYSTEM) {
                        walked.push((tier.id, class_id, segment, started_s, walk));
                    }
                }
            }
        }
        let end_s = self.now_s();
        self.crawl_ended_s.store(end_s, Ordering::Relaxed);
        self.rare
            .lru_crawler_running
            .store(false, Ordering::Relaxed);
        // The lines are recorded once the pass is over, when its next due time is known.
        let next_run_s = self
            .crawl_due_s
            .load(Ordering::Relaxed)
            .saturating_sub(end_s);
        for (tier, class_id, segment, started_s, walk) in walked {
            let status = CrawlerStatus {
                tier,
                class_id: class_id as u8,
                segment: segment as u8,
                low_mark: walk.expiring / 100 + 1,
                next_reclaims: walk.expiring_within_hour,
                since_run_s,
                next_run_s,
                elapsed_s: walk.ended_s.saturating_sub(started_s),
                examined: walk.examined,
                reclaimed: walk.reclaimed,
            };
            self.events
                .record(kind::SYSTEM, b"", EventWhat::CrawlerStatus(status));
        }
        reclaimed
    }

    fn crawl_segment(
        &self,
        tier: &SlabTier,
        class_id: usize,
        segment: usize,
        pace: &mut Pace,
    ) -> Walk {
        let mem = &tier.mem;
        let mut budget = tier.classes[class_id].0.lock().lru.count[segment];
        if pace.tocrawl > 0 {
            budget = budget.min(pace.tocrawl);
        }
        let mut cursor: ItemAddr = NIL;
        // The cursor's header, when the re-check below paid to read it: the walk's read
        // of that item.
        let mut cursor_read: Option<HeaderRead<'_>> = None;
        let mut started = false;
        let mut walk = Walk::default();
        let mut soonest_expiry_s = u32::MAX;
        while budget > 0 {
            if pace.sleep_us > 0 && pace.since_sleep >= CRAWLER_ITEMS_PER_SLEEP {
                // No lock is held here: the pause slows only the crawler.
                pace.since_sleep = 0;
                std::thread::sleep(std::time::Duration::from_micros(u64::from(pace.sleep_us)));
            }
            let now = self.now_s();
            let mut cs = tier.classes[class_id].0.lock();
            if !started {
                cursor = cs.lru.tail[segment];
                started = true;
            } else if cursor != NIL {
                // The cursor may have moved or been freed while the lock was released:
                // continue only if it is still in this class and segment.
                let h = mem.read_header(cursor, header_bytes::ALL);
                if !h.has(state::LINKED)
                    || tier.class_of(cursor) != class_id
                    || h.segment() != segment
                {
                    cursor = cs.lru.tail[segment];
                } else {
                    cursor_read = Some(h);
                }
            }
            let mut batch = CRAWL_BATCH;
            while batch > 0 && budget > 0 && cursor != NIL {
                batch -= 1;
                budget -= 1;
                walk.examined += 1;
                pace.since_sleep += 1;
                let h = match cursor_read.take() {
                    Some(h) if h.addr() == cursor => h,
                    _ => mem.read_header(cursor, header_bytes::ALL),
                };
                let prev = h.prev();
                cs.stats.crawler_items_checked += 1;
                if self.dead_reason(h, now).is_some() {
                    if self.reclaim_dead(tier, &mut cs, h, true) {
                        walk.reclaimed += 1;
                    } else {
                        // Busy now: the next tick's pass tries again.
                        soonest_expiry_s = soonest_expiry_s.min(now.max(1));
                    }
                } else {
                    let exptime_s = h.exptime_rel_s();
                    if exptime_s != 0 {
                        soonest_expiry_s = soonest_expiry_s.min(exptime_s);
                        walk.expiring += 1;
                        if exptime_s <= now.saturating_add(CRAWL_INTERVAL_MAX_S) {
                            walk.expiring_within_hour += 1;
                        }
                    }
                }
                cursor = prev;
            }
            if cursor == NIL {
                break;
            }
        }
        self.note_expiry(if soonest_expiry_s == u32::MAX {
            0
        } else {
            soonest_expiry_s
        });
        walk.ended_s = self.now_s();
        walk
    }
}

/// The crawler's pace over one pass (`lru_crawler sleep`, `lru_crawler tocrawl`).
struct Pace {
    sleep_us: u32,
    /// Items per segment at most; 0 = all.
    tocrawl: u64,
    /// Items walked since the last pause.
    since_sleep: u64,
}

/// What the walk of one segment saw.
#[derive(Default)]
struct Walk {
    examined: u64,
    reclaimed: u64,
    /// Live items with an expiry, and those of them due within the hour.
    expiring: u64,
    expiring_within_hour: u64,
    ended_s: u32,
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::CRAWL_INTERVAL_MAX_S;
    use crate::api::{StoreMode, StoreOptions, StoreOutcome};
    use crate::clock::ManualClock;
    use crate::config::EngineConfig;
    use crate::index::Index;
    use crate::item::header_bytes;
    use crate::moves::{Direction, Queued};
    use crate::Engine;

    /// A pass that walks neither tier's LRU while an item is between them must still
    /// learn its expiry: the move itself lowers the due time.
    #[test]
    fn a_moved_item_keeps_its_expiry_in_the_crawl_schedule() {
        let clock = ManualClock::new(1_700_000_000);
        let config = EngineConfig {
            memory_limit_bytes: 1 << 20,
            slow_tier: Some(tier::RegionSpec {
                size_bytes: 4 << 20,
                backing: tier::RegionBacking::Anonymous,
                cost: tier::CostModel::NONE,
            }),
            ..EngineConfig::default()
        };
        let e = Engine::new(config, clock).unwrap();
        let stored = e.store(b"x", b"v", &StoreOptions::new(StoreMode::Set, 0, 100));
        assert!(matches!(stored, StoreOutcome::Stored { .. }));
        let key_hash = e.index.hash(b"x");
        let (addr, queued) = {
            let mut table = e.index.shard(key_hash).table.lock();
            let addr = Index::find(&mut table, |a| e.mem_of(a), key_hash, b"x")
                .unwrap()
                .addr();
            let h = e.dram().mem.write_header(addr, header_bytes::STATE);
            (addr, Queued::mark(h, &table))
        };
        let header = e.dram().mem.read_header(addr, header_bytes::ALL);
        let expiry_s = header.exptime_rel_s();
        assert!(expiry_s > 0);
        // As if a pass had just started and missed the item.
        e.crawl_due_s.store(u32::MAX, Ordering::Relaxed);
        assert!(e.move_item(queued, Direction::ToSlow));
        assert_eq!(e.crawl_due_s.load(Ordering::Relaxed), expiry_s);
    }

    /// A dead item the pass could not reclaim (its shard was busy) is retried at the
    /// next tick, not an hour later.
    #[test]
    fn a_dead_item_left_behind_makes_the_next_tick_crawl() {
        let clock = ManualClock::new(1_700_000_000);
        let e = Engine::new(EngineConfig::default(), clock.clone()).unwrap();
        let stored = e.store(b"x", b"v", &StoreOptions::new(StoreMode::Set, 0, 10));
        assert!(matches!(stored, StoreOutcome::Stored { .. }));
        clock.advance_s(11);
        let key_hash = e.index.hash(b"x");
        let busy = e.index.shard(key_hash).table.lock();
        let reclaimed = std::thread::scope(|s| s.spawn(|| e.lru_crawler_step()).join().unwrap());
        drop(busy);
        assert_eq!(reclaimed, 0, "the shard was busy");
        assert!(
            e.crawl_due_s.load(Ordering::Relaxed) <= e.now_s(),
            "the next tick crawls again"
        );
        assert_eq!(e.lru_crawler_step(), 1);
    }

    /// `lru_crawler tocrawl 3`: a pass walks three items of each segment, from the
    /// tail; 0 walks them all. Each walked segment gets a `sysevents` line.
    #[test]
    fn tocrawl_bounds_a_pass_and_each_walked_segment_is_reported() {
        use crate::events::{kind, CrawlerStatus, EventWhat};
        let clock = ManualClock::new(1_700_000_000);
        let e = Engine::new(EngineConfig::default(), clock.clone()).unwrap();
        for i in 0..10 {
            let key = format!("k{i}");
            let stored = e.store(
                key.as_bytes(),
                b"v",
                &StoreOptions::new(StoreMode::Set, 0, 10),
            );
            assert!(matches!(stored, StoreOutcome::Stored { .. }));
        }
        clock.advance_s(11);
        e.set_lru_crawler_tocrawl(3);
        e.events().set_wanted(kind::SYSTEM);
        assert_eq!(e.lru_crawler_step(), 3);
        let mut events = Vec::new();
        e.events().drain(&mut events, usize::MAX);
        let statuses: Vec<CrawlerStatus> = events
            .iter()
            .filter_map(|ev| match ev.what {
                EventWhat::CrawlerStatus(status) => Some(status),
                _ => None,
            })
            .collect();
        assert_eq!(statuses.len(), 1, "{events:?}");
        assert_eq!((statuses[0].examined, statuses[0].reclaimed), (3, 3));
        assert_eq!(statuses[0].next_run_s, CRAWL_INTERVAL_MAX_S);
        e.set_lru_crawler_tocrawl(0);
        assert_eq!(e.lru_crawler_step(), 7);
    }
}
