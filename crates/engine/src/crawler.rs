//! The LRU crawler: walks every item of every class of every tier once per pass and
//! reclaims expired and flushed ones (memcached's `lru_crawler`), so memory held by dead
//! items that nobody reads comes back. Every header it looks at is charged as a read of
//! its tier.

use std::sync::atomic::Ordering;

use crate::engine::{Engine, Tier};
use crate::item::{header_bytes, state, ItemAddr, NIL};
use crate::lru::SEGMENTS;

/// Items the crawler checks under one class-lock hold.
const CRAWL_BATCH: usize = 64;

impl Engine {
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
                if !h.has(state::LINKED)
                    || tier.class_of(cursor) != class_id
                    || h.segment() != segment
                {
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
                mem.charge_header_read(cursor, header_bytes::ALL);
                if self.dead_reason(h, now).is_some()
                    && self.reclaim_dead(tier, &mut cs, cursor, true)
                {
                    reclaimed += 1;
                }
                cursor = prev;
            }
            if cursor == NIL {
                break;
            }
        }
        reclaimed
    }
}
