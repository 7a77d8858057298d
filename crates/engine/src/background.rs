//! The background threads: one LRU maintainer per tier (Fogcached: a large slow tier
//! never slows the scanning of DRAM's LRUs), the migration threads, the LRU crawler and
//! the slab automover. Each loops over a bounded step function that tests and the
//! simulator call directly. Their names, as `top -H` shows them: `fc-maint-dram`,
//! `fc-maint-slow`, `fc-migrate`, `fc-lru-crawler`, `fc-slab-rebal`. A panic in any of
//! them ends the `fogcached` process (its panic hook aborts): a stopped maintainer or
//! migration thread must not leave a server answering on.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::Engine;
use crate::policy::engine_ops::EngineOps;
use crate::policy::Policy;

const MAINTAINER_SLEEP_MIN: Duration = Duration::from_millis(1);
const MAINTAINER_SLEEP_MAX: Duration = Duration::from_millis(1000);
/// A migration thread that found a full batch goes on at once; one that found less
/// sleeps this long, so that entries arriving at a trickle are handled a batch per
/// wake-up: waking for one or two entries cost more in context switches than the moves
/// themselves (measured: docs/results/engine-hot-path-figures.md).
/// Nothing waits for a queued move: the queues are bounded (`move_queue_max`, and a
/// full queue drops offers), and a store that finds no DRAM chunk goes to the slow tier.
const MIGRATION_SLEEP_MIN: Duration = Duration::from_millis(1);
/// A migration thread with empty queues backs off up to this.
const MIGRATION_SLEEP_MAX: Duration = Duration::from_millis(20);
/// How often the crawler thread asks whether a pass is due (`Engine::lru_crawler_tick`).
const CRAWLER_INTERVAL: Duration = Duration::from_secs(5);
const AUTOMOVE_INTERVAL: Duration = Duration::from_secs(1);

/// The running background threads.
pub(crate) struct Background {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Engine {
    /// One pass of the LRU maintainer over every class of every tier. Returns the
    /// rounds that moved items (0 when the LRUs are settled).
    pub fn lru_maintainer_step(&self) -> usize {
        (0..self.tiers.len())
            .map(|t| self.lru_maintainer_tier_step(t))
            .sum()
    }

    /// One pass of tier `tier_index`'s own maintainer (0: DRAM, 1: slow tier) over its
    /// classes: whatever the policy does there (for Dual-LRU, memcached's segmented-LRU
    /// rules plus feeding the Move queues).
    pub fn lru_maintainer_tier_step(&self, tier_index: usize) -> usize {
        let Some(tier) = self.tiers.get(tier_index) else {
            return 0;
        };
        // Occupancy snapshots the policies read between passes.
        let (mut items, mut item_bytes) = (0u64, 0u64);
        for class in tier.classes.iter().skip(1) {
            let cs = class.0.lock();
            items += cs.lru.items();
            item_bytes += cs.lru.total_bytes();
        }
        tier.items_seen.store(items, Ordering::Relaxed);
        tier.item_bytes_seen.store(item_bytes, Ordering::Relaxed);
        self.policy.begin_pass(EngineOps::new(self), tier);
        let mut rounds = 0;
        for class_id in 1..=self.geometry.large {
            rounds += self
                .policy
                .maintain_class(EngineOps::new(self), tier, class_id);
        }
        self.rare
            .lru_maintainer_juggles
            .fetch_add(1, Ordering::Relaxed);
        rounds
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
                // Linux shows a thread's first 15 bytes (`top -H`, `/proc/*/task/*/comm`).
                let name = if tier_index == 0 {
                    "fc-maint-dram"
                } else {
                    "fc-maint-slow"
                };
                handles.extend(spawn(
                    name,
                    Box::new(move || {
                        let mut sleep = MAINTAINER_SLEEP_MIN;
                        while !stop.load(Ordering::Relaxed) {
                            crate::fault::panic_point();
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
                            crate::fault::panic_point();
                            let handled = engine.migration_step();
                            if handled >= crate::moves::MIGRATION_BATCH {
                                // A queue had a batch or more: keep going.
                                std::thread::yield_now();
                                continue;
                            }
                            sleep = if handled > 0 {
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
        // Started even with `-o no_lru_crawler`, so that `lru_crawler enable` can turn
        // it on at run time; while disabled it only wakes to look at the flag.
        {
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
                        crate::fault::panic_point();
                        if engine.lru_crawler_enabled() {
                            engine.lru_crawler_tick();
                        }
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
                        crate::fault::panic_point();
                        engine.slab_automove_step();
                    }
                }),
            ));
        }
        *bg = Some(Background { stop, handles });
    }

    /// Test builds only: wakes every background thread, so that each reaches its panic
    /// point (`fault.rs`) now rather than after its sleep (the crawler's is 5 s).
    #[cfg(feature = "test-hooks")]
    pub fn wake_background(&self) {
        if let Some(bg) = self.background.lock().as_ref() {
            for handle in &bg.handles {
                handle.thread().unpark();
            }
        }
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
