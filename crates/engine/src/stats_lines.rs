//! Statistics output under memcached's names: `stats`, `stats items`, `stats slabs`,
//! `stats sizes`, the engine's lines of `stats settings`, and `stats reset`.

use std::sync::atomic::Ordering;

use crate::api::StatValue;
use crate::api::TierId;
use crate::config::SLAB_PAGE_SIZE_BYTES;
use crate::counters::{ClassStats, C, G};
use crate::engine::{Engine, SlabTier};
use crate::item::header_bytes;
use crate::lru::{COLD, HOT, WARM};
use crate::policy::Policy;

type Emit<'a> = &'a mut dyn FnMut(&str, StatValue);

fn yes_no(v: bool) -> StatValue {
    StatValue::Bool(v)
}

impl Engine {
    /// General statistics (`stats`), named as memcached names them.
    pub fn stats(&self, emit: Emit<'_>) {
        let c = &self.counters;
        let u = StatValue::U64;
        let get_hits = c.sum_classes(C::HitsToHot)
            + c.sum_classes(C::HitsToWarm)
            + c.sum_classes(C::HitsToCold);
        emit("cmd_get", u(c.get(G::CmdGet)));
        emit("cmd_set", u(c.sum_classes(C::CmdSet)));
        emit("cmd_flush", u(c.get(G::CmdFlush)));
        emit("cmd_touch", u(c.get(G::CmdTouch)));
        emit("get_hits", u(get_hits));
        emit("get_misses", u(c.get(G::GetMisses)));
        emit("get_expired", u(c.get(G::GetExpired)));
        emit("get_flushed", u(c.get(G::GetFlushed)));
        emit("delete_misses", u(c.get(G::DeleteMisses)));
        emit("delete_hits", u(c.sum_classes(C::DeleteHits)));
        emit("incr_misses", u(c.get(G::IncrMisses)));
        emit("incr_hits", u(c.sum_classes(C::IncrHits)));
        emit("decr_misses", u(c.get(G::DecrMisses)));
        emit("decr_hits", u(c.sum_classes(C::DecrHits)));
        emit("cas_misses", u(c.get(G::CasMisses)));
        emit("cas_hits", u(c.sum_classes(C::CasHits)));
        emit("cas_badval", u(c.sum_classes(C::CasBadval)));
        emit("touch_hits", u(c.sum_classes(C::TouchHits)));
        emit("touch_misses", u(c.get(G::TouchMisses)));
        emit("store_too_large", u(c.get(G::StoreTooLarge)));
        emit("store_no_memory", u(c.get(G::StoreNoMemory)));
        emit("limit_maxbytes", u(self.dram_limit_bytes()));
        let buckets = self.index.bucket_count().max(1);
        emit(
            "hash_power_level",
            u(u64::from(usize::BITS - 1 - buckets.leading_zeros())),
        );
        emit(
            "hash_bytes",
            u((buckets * std::mem::size_of::<u64>()) as u64),
        );
        emit("hash_is_expanding", u(0));
        // fogcached's own: what the index really takes in DRAM (memcached's
        // `hash_bytes` counts one pointer per bucket).
        emit("index_bytes", u(self.index.allocated_bytes() as u64));
        let r = &self.rare;
        emit(
            "slab_reassign_rescues",
            u(r.slab_reassign_rescues.load(Ordering::Relaxed)),
        );
        // memcached's chunked items (split over several chunks) have no counterpart: an
        // item larger than a slab chunk takes a run of whole pages here.
        emit("slab_reassign_chunk_rescues", u(0));
        emit(
            "slab_reassign_evictions_nomem",
            u(r.slab_reassign_evictions_nomem.load(Ordering::Relaxed)),
        );
        emit(
            "slab_reassign_inline_reclaim",
            u(r.slab_reassign_inline_reclaim.load(Ordering::Relaxed)),
        );
        emit(
            "slab_reassign_busy_items",
            u(r.slab_reassign_busy_items.load(Ordering::Relaxed)),
        );
        // memcached deletes an item a reader holds after its page move waited long
        // enough; a page move here never takes a locked item (it gives up and is tried
        // again), so there is nothing to count.
        emit("slab_reassign_busy_deletes", u(0));
        emit(
            "slab_reassign_running",
            u(u64::from(r.slab_reassign_running.load(Ordering::Relaxed))),
        );
        emit("slabs_moved", u(r.slabs_moved.load(Ordering::Relaxed)));
        emit(
            "lru_crawler_running",
            u(u64::from(r.lru_crawler_running.load(Ordering::Relaxed))),
        );
        emit(
            "lru_crawler_starts",
            u(r.lru_crawler_starts.load(Ordering::Relaxed)),
        );
        emit(
            "lru_maintainer_juggles",
            u(r.lru_maintainer_juggles.load(Ordering::Relaxed)),
        );
        emit("malloc_fails", u(0));
        let mut totals = ClassStats::default();
        let (mut bytes, mut items) = (0u64, 0u64);
        for tier in &self.tiers {
            for class in tier.classes.iter().skip(1) {
                let cs = class.0.lock();
                totals.accumulate(&cs.stats);
                bytes += cs.lru.total_bytes();
                items += cs.lru.items();
            }
        }
        let free_pages = self.dram().pool.lock().free_pages();
        emit("bytes", u(bytes));
        emit("curr_items", u(items));
        emit("total_items", u(c.get(G::TotalItems)));
        emit("slab_global_page_pool", u(free_pages as u64));
        emit("expired_unfetched", u(totals.expired_unfetched));
        emit("evicted_unfetched", u(totals.evicted_unfetched));
        emit("evicted_active", u(totals.evicted_active));
        emit("evictions", u(totals.evicted));
        emit("reclaimed", u(totals.reclaimed));
        emit("crawler_reclaimed", u(totals.crawler_reclaimed));
        emit("crawler_items_checked", u(totals.crawler_items_checked));
        emit("lrutail_reflocked", u(totals.lrutail_reflocked));
        emit("moves_to_cold", u(totals.moves_to_cold));
        emit("moves_to_warm", u(totals.moves_to_warm));
        emit("moves_within_lru", u(totals.moves_within_lru));
        emit("direct_reclaims", u(totals.direct_reclaims));
        emit("lru_bumps_dropped", u(0));
        self.tier_stats(emit);
    }

    /// The per-tier and Dual-LRU lines of `stats` (fogcached's own names).
    fn tier_stats(&self, emit: Emit<'_>) {
        let u = StatValue::U64;
        for (which, name) in [(TierId::Dram, "dram"), (TierId::Slow, "slow")] {
            let t = self.tier_usage(which);
            emit(&format!("tier_{name}_items"), u(t.items));
            emit(&format!("tier_{name}_bytes"), u(t.item_bytes));
            emit(&format!("tier_{name}_limit_bytes"), u(t.limit_bytes));
            emit(&format!("tier_{name}_pages_in_use"), u(t.pages_in_use));
            emit(&format!("tier_{name}_get_hits"), u(t.get_hits));
            emit(&format!("{name}_bytes_read"), u(t.bytes_read));
            emit(&format!("{name}_bytes_written"), u(t.bytes_written));
            emit(&format!("{name}_lines_read"), u(t.lines_read));
            emit(&format!("{name}_lines_written"), u(t.lines_written));
            emit(&format!("{name}_emulated_wait_us"), u(t.emulated_wait_us));
        }
        let m = self.migration_counts();
        emit("promotions", u(m.promotions));
        emit("demotions", u(m.demotions));
        emit("promotions_failed", u(m.promotions_failed));
        emit("promotions_skipped", u(m.promotions_skipped));
        emit("demotions_failed", u(m.demotions_failed));
        emit("migrations_raced", u(m.migrations_raced));
        emit("move_to_dram_queue_len", u(m.move_to_dram_queue_len));
        emit("move_to_slow_queue_len", u(m.move_to_slow_queue_len));
        emit("move_queue_dropped", u(m.move_queue_dropped));
        emit(
            "slow_cost_model",
            StatValue::Text(self.slow_cost_model_name()),
        );
        let pool = self.recovery_report();
        if pool.pool {
            emit("pool_was_clean", u(u64::from(pool.was_clean)));
            emit("pool_formatted", u(u64::from(pool.formatted)));
            // Why this start formatted the pool (`none`: it was recovered), and which
            // settings changed when that is why: a cold start is visible without the
            // start-up log.
            emit(
                "pool_format_reason",
                StatValue::Text(pool.start.reason().to_string()),
            );
            emit(
                "pool_settings_changed",
                StatValue::Text(pool.start.settings_changed()),
            );
            emit("pool_items_recovered", u(pool.items_recovered));
            emit("pool_items_dropped_dead", u(pool.items_dropped_dead));
            emit(
                "pool_items_dropped_duplicate",
                u(pool.items_dropped_duplicate),
            );
            emit("pool_chunks_not_valid", u(pool.chunks_not_valid));
            emit("pool_pages_damaged", u(pool.pages_damaged));
            emit("pool_recovery_us", u(pool.elapsed_us));
        }
    }

    fn slow_cost_model_name(&self) -> String {
        match self.slow() {
            Some(t) => t.mem.region().cost_model().name(),
            None => "none".to_string(),
        }
    }

    /// `stats items`: one block per class holding items: DRAM classes as memcached
    /// names them (`items:N:...`), then the slow tier's under `slow:items:N:...`.
    /// Request-path hit counters (`hits_to_*`) are per class over both tiers and are
    /// reported in the DRAM block only.
    pub fn stats_items(&self, emit: Emit<'_>) {
        for tier in &self.tiers {
            self.stats_items_tier(tier, emit);
        }
    }

    fn stats_items_tier(&self, tier: &SlabTier, emit: Emit<'_>) {
        let now = self.now_s();
        let prefix = match tier.id {
            TierId::Dram => "items",
            TierId::Slow => "slow:items",
        };
        let dram = tier.id == TierId::Dram;
        for class_id in 1..=self.geometry.large {
            let cs = tier.classes[class_id].0.lock();
            if cs.lru.items() == 0 {
                continue;
            }
            let s = cs.stats;
            let c = &self.counters;
            let hits = |counter: C| {
                if dram {
                    c.get_class(class_id, counter)
                } else {
                    0
                }
            };
            let mut e = |name: &str, v: u64| {
                emit(&format!("{prefix}:{class_id}:{name}"), StatValue::U64(v))
            };
            e("number", cs.lru.items());
            e("number_hot", cs.lru.count[HOT]);
            e("number_warm", cs.lru.count[WARM]);
            e("number_cold", cs.lru.count[COLD]);
            // Each age reads the segment's tail item's access time: a header read of its
            // tier (the access word), charged.
            let age_s = |segment: usize| {
                let tail = cs.lru.tail_header(&tier.mem, segment, header_bytes::ACCESS);
                u64::from(crate::lru::age_s(tail, now))
            };
            e("age_hot", age_s(HOT));
            e("age_warm", age_s(WARM));
            e("age", age_s(COLD));
            e("mem_requested", cs.lru.total_bytes());
            e("evicted", s.evicted);
            e("evicted_nonzero", s.evicted_nonzero);
            e("evicted_time", u64::from(s.evicted_time_s));
            e("outofmemory", s.outofmemory);
            e("tailrepairs", 0);
            e("reclaimed", s.reclaimed);
            e("expired_unfetched", s.expired_unfetched);
            e("evicted_unfetched", s.evicted_unfetched);
            e("evicted_active", s.evicted_active);
            e("crawler_reclaimed", s.crawler_reclaimed);
            e("crawler_items_checked", s.crawler_items_checked);
            e("lrutail_reflocked", s.lrutail_reflocked);
            e("moves_to_cold", s.moves_to_cold);
            e("moves_to_warm", s.moves_to_warm);
            e("moves_within_lru", s.moves_within_lru);
            e("direct_reclaims", s.direct_reclaims);
            e("hits_to_hot", hits(C::HitsToHot));
            e("hits_to_warm", hits(C::HitsToWarm));
            e("hits_to_cold", hits(C::HitsToCold));
            e("hits_to_temp", 0);
        }
    }

    /// `stats slabs`: one block per class owning pages, then the totals; DRAM as
    /// memcached names it, then the slow tier under `slow:N:...`, `slow_active_slabs`,
    /// `slow_total_malloced`. Request counters are per class over both tiers and are
    /// reported in the DRAM block only.
    pub fn stats_slabs(&self, emit: Emit<'_>) {
        for tier in &self.tiers {
            self.stats_slabs_tier(tier, emit);
        }
    }

    fn stats_slabs_tier(&self, tier: &SlabTier, emit: Emit<'_>) {
        let (prefix, totals_prefix) = match tier.id {
            TierId::Dram => ("", ""),
            TierId::Slow => ("slow:", "slow_"),
        };
        let dram = tier.id == TierId::Dram;
        let mut active = 0u64;
        for class_id in 1..=self.geometry.large {
            let cs = tier.classes[class_id].0.lock();
            if cs.pages.is_empty() {
                continue;
            }
            active += 1;
            let c = &self.counters;
            let class_counter = |counter: C| {
                if dram {
                    c.get_class(class_id, counter)
                } else {
                    0
                }
            };
            let large = class_id == self.geometry.large;
            let total_pages: u64 = if large {
                cs.pages
                    .iter()
                    .map(|&p| u64::from(tier.page_used[p as usize].load(Ordering::Relaxed)))
                    .sum()
            } else {
                cs.pages.len() as u64
            };
            let total_chunks = (cs.pages.len() * cs.per_page) as u64;
            let used = if large {
                cs.lru.items()
            } else {
                cs.used_chunks()
            };
            let mut e =
                |name: &str, v: u64| emit(&format!("{prefix}{class_id}:{name}"), StatValue::U64(v));
            e("chunk_size", cs.chunk_bytes as u64);
            e("chunks_per_page", cs.per_page as u64);
            e("total_pages", total_pages);
            e("total_chunks", total_chunks);
            e("used_chunks", used);
            e("free_chunks", cs.free_chunks);
            e("free_chunks_end", 0);
            e(
                "get_hits",
                class_counter(C::HitsToHot)
                    + class_counter(C::HitsToWarm)
                    + class_counter(C::HitsToCold),
            );
            e("cmd_set", class_counter(C::CmdSet));
            e("delete_hits", class_counter(C::DeleteHits));
            e("incr_hits", class_counter(C::IncrHits));
            e("decr_hits", class_counter(C::DecrHits));
            e("cas_hits", class_counter(C::CasHits));
            e("cas_badval", class_counter(C::CasBadval));
            e("touch_hits", class_counter(C::TouchHits));
            if dram {
                if let Some(threshold) = self.policy.migration_threshold(class_id) {
                    e("migration_threshold", u64::from(threshold));
                }
            }
        }
        let pages = tier.pool.lock().pages_in_use() as u64;
        emit(
            &format!("{totals_prefix}active_slabs"),
            StatValue::U64(active),
        );
        emit(
            &format!("{totals_prefix}total_malloced"),
            StatValue::U64(pages * SLAB_PAGE_SIZE_BYTES as u64),
        );
    }

    /// `stats sizes`: while the histogram is off (memcached's default; `stats
    /// sizes_enable`, `-o track_sizes`) `sizes_status disabled`; while it is on, the
    /// number of live items of each size, in memcached's 32-byte buckets (`STAT <size>
    /// <items>`, the size rounded up to a multiple of 32, empty buckets left out).
    ///
    /// memcached keeps the histogram up to date on every store and unlink; fogcached
    /// counts it here instead, walking every item of both tiers once (a listing, as
    /// `lru_crawler metadump` walks them), so that a cache that never asks pays nothing
    /// on its request path. Sizes are fogcached's item sizes (header, key and value).
    pub fn stats_sizes(&self, emit: Emit<'_>) {
        if !self.size_histogram_enabled() {
            emit("sizes_status", StatValue::Text("disabled".to_string()));
            return;
        }
        let mut buckets: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        let mut cursor = crate::dump::DUMP_CURSOR_START;
        loop {
            let next = self.dump_items(cursor, &mut |item| {
                *buckets.entry(item.total_bytes.div_ceil(32)).or_default() += 1;
                true
            });
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        for (bucket, items) in buckets {
            emit(&(u64::from(bucket) * 32).to_string(), StatValue::U64(items));
        }
    }

    /// The engine's lines of `stats settings`.
    pub fn stats_settings(&self, emit: Emit<'_>) {
        let cfg = &self.config;
        let u = StatValue::U64;
        let f2 = |v: f64| StatValue::Text(format!("{v:.2}"));
        emit("maxbytes", u(self.dram_limit_bytes()));
        emit("oldest", u(0));
        emit(
            "evictions",
            StatValue::Text(if cfg.evictions_enabled { "on" } else { "off" }.to_string()),
        );
        emit("growth_factor", f2(cfg.growth_factor));
        emit("chunk_size", u(cfg.chunk_size_min_bytes as u64));
        emit("cas_enabled", yes_no(cfg.cas_enabled));
        emit("item_size_max", u(cfg.item_size_max_bytes as u64));
        emit("hashpower_init", u(u64::from(cfg.hashpower_initial)));
        emit("slab_reassign", yes_no(cfg.slab_reassign));
        emit(
            "slab_automove",
            u(u64::from(self.slab_automove.load(Ordering::Relaxed))),
        );
        emit("slab_automove_ratio", f2(0.8));
        emit("slab_automove_window", u(30));
        emit("slab_chunk_max", u(cfg.slab_chunk_max_bytes as u64));
        emit("lru_crawler", yes_no(self.lru_crawler_enabled()));
        let (sleep_us, tocrawl) = self.lru_crawler_pace();
        emit("lru_crawler_sleep", u(u64::from(sleep_us)));
        emit("lru_crawler_tocrawl", u(u64::from(tocrawl)));
        emit("tail_repair_time", u(0));
        emit("lru_maintainer_thread", yes_no(cfg.lru_maintainer));
        // memcached turns the segmented LRU off with its maintainer (`no_lru_maintainer`,
        // `no_modern`); here the segments stay, but without a maintainer nothing moves
        // items between them by age or share: only an allocation pulls a tail.
        emit("lru_segmented", yes_no(cfg.lru_maintainer));
        let tune = self.lru_tuning();
        emit("hot_lru_pct", u(u64::from(tune.hot_lru_pct)));
        emit("warm_lru_pct", u(u64::from(tune.warm_lru_pct)));
        emit("hot_max_factor", f2(tune.hot_max_factor));
        emit("warm_max_factor", f2(tune.warm_max_factor));
        emit("temp_lru", yes_no(false));
        emit("temporary_ttl", u(61));
        emit("track_sizes", yes_no(self.size_histogram_enabled()));
        emit("hash_algorithm", StatValue::Text("foldhash".to_string()));
        emit("slab_page_size", u(SLAB_PAGE_SIZE_BYTES as u64));
        let text = |v: String| StatValue::Text(v);
        emit("policy", text(cfg.policy.name().to_string()));
        emit("dram_size", u(self.dram_limit_bytes()));
        emit("dram_max", u(self.dram_max_bytes()));
        let (slow_size, slow_backing) = match self.slow() {
            Some(t) => (
                (t.page_count * SLAB_PAGE_SIZE_BYTES) as u64,
                t.mem.region().describe(),
            ),
            None => (0, "none".to_string()),
        };
        emit("slow_size", u(slow_size));
        emit("slow_backing", text(slow_backing));
        emit("slow_cost", text(self.slow_cost_model_name()));
        emit("migration", yes_no(cfg.migration_enabled));
        emit(
            "dram_residency_max_s",
            u(u64::from(cfg.dram_residency_max_s)),
        );
        emit("dram_low_water_pct", u(u64::from(cfg.dram_low_water_pct)));
        emit("move_queue_max", u(cfg.move_queue_max as u64));
        emit("migration_threads", u(cfg.migration_threads as u64));
        emit("access_period_requests", u(cfg.access_period_requests));
        emit("promotion_margin", u(u64::from(cfg.promotion_margin)));
        emit("mq_queues", u(cfg.mq_queues as u64));
        emit("benefit_reassign", yes_no(cfg.benefit_reassign));
        // 0: the share of DRAM's pages (the setting's default).
        emit(
            "uniform_dram_share_ppm",
            u(u64::from(cfg.uniform_dram_share_ppm.unwrap_or(0))),
        );
        let persistent = self.slow().is_some_and(|t| t.pool_file.is_some());
        emit("slow_pool", yes_no(persistent));
        emit(
            "slow_pool_mismatch",
            text(cfg.slow_pool_mismatch.name().to_string()),
        );
        emit("slow_pool_reset", yes_no(cfg.slow_pool_reset));
        emit(
            "slow_durability",
            StatValue::Text(if persistent {
                self.durability().name().to_string()
            } else {
                "none".to_string()
            }),
        );
    }

    /// `stats reset`: clears the request counters and the per-class LRU counters.
    pub fn reset_stats(&self) {
        self.counters.reset();
        for tier in &self.tiers {
            for class in tier.classes.iter() {
                class.0.lock().stats = ClassStats::default();
            }
        }
        self.moves.reset_counters();
        let r = &self.rare;
        for c in [
            &r.lru_maintainer_juggles,
            &r.lru_crawler_starts,
            &r.slabs_moved,
            &r.slab_reassign_evictions_nomem,
            &r.slab_reassign_busy_items,
            &r.slab_reassign_rescues,
            &r.slab_reassign_inline_reclaim,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}
