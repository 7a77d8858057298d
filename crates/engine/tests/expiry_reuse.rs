//! Expired items' memory is reused before a class takes fresh pages (memcached's LRU
//! maintainer reclaims expired items at the tails first): a cache of short-lived items
//! stays the size of its live items instead of growing to its limit. No background
//! thread runs here: the allocation path itself reclaims.

use engine::{Engine, EngineConfig, ManualClock, StoreMode, StoreOptions, StoreOutcome, TierId};

const BATCH: usize = 2000;
const TTL_S: i64 = 2;
const SECONDS: usize = 40;

/// Stores a batch of short-lived 1000-byte items every second for `SECONDS` and
/// returns the most pages each tier held at any second.
fn run(config: EngineConfig) -> (u64, u64, Engine) {
    let clock = ManualClock::new(1_700_000_000);
    let engine = Engine::new(config, clock.clone()).expect("engine");
    let value = vec![b'v'; 1000];
    let (mut dram_max, mut slow_max) = (0, 0);
    for second in 0..SECONDS {
        for i in 0..BATCH {
            let key = format!("s{second}:{i}");
            let stored = engine.store(
                key.as_bytes(),
                &value,
                &StoreOptions::new(StoreMode::Set, 0, TTL_S),
            );
            assert!(
                matches!(stored, StoreOutcome::Stored { .. }),
                "{key}: {stored:?}"
            );
        }
        dram_max = dram_max.max(engine.tier_usage(TierId::Dram).pages_in_use);
        slow_max = slow_max.max(engine.tier_usage(TierId::Slow).pages_in_use);
        clock.advance_s(1);
    }
    let engine = std::sync::Arc::try_unwrap(engine).ok().expect("one owner");
    (dram_max, slow_max, engine)
}

fn stat(engine: &Engine, name: &str) -> u64 {
    let mut found = None;
    engine.stats(&mut |key, value| {
        if key == name {
            found = value.to_string().parse().ok();
        }
    });
    found.unwrap_or_else(|| panic!("no stat {name}"))
}

#[test]
fn a_dram_cache_of_short_lived_items_does_not_grow() {
    let (dram_pages, _, engine) = run(EngineConfig {
        memory_limit_bytes: 256 << 20,
        ..EngineConfig::default()
    });
    // At most three batches are alive (stored at t-2 < t-1 < t); one batch of 2000
    // 1000-byte items fills under three 1 MiB pages. Without reuse: 40 batches, ~90.
    assert!(dram_pages <= 10, "DRAM grew to {dram_pages} pages");
    assert_eq!(stat(&engine, "evictions"), 0);
    assert!(stat(&engine, "reclaimed") > (SECONDS as u64 - 5) * BATCH as u64);
}

#[test]
fn a_tiered_cache_of_short_lived_items_grows_neither_tier() {
    let (dram_pages, slow_pages, engine) = run(EngineConfig {
        memory_limit_bytes: 4 << 20,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: 256 << 20,
            backing: tier::RegionBacking::Anonymous,
            cost: tier::CostModel::NONE,
        }),
        ..EngineConfig::default()
    });
    assert!(dram_pages <= 4, "DRAM: {dram_pages} pages");
    assert!(slow_pages <= 10, "the slow tier grew to {slow_pages} pages");
    assert_eq!(stat(&engine, "evictions"), 0);
}

/// Without the LRU maintainer (`-o no_lru_maintainer`) nothing walks the tails in the
/// background, so every store first reclaims the dead items at the tail of its class's
/// lists, up to the first live one and five at most, as memcached's unsegmented LRU does
/// (`do_item_alloc_pull`): the same counts memcached 1.6.18 shows for the same requests
/// (`wire_counters.rs` runs them against it). With the maintainer on, a store with free
/// chunks at hand reclaims nothing: the maintainer's pulls do.
#[test]
fn without_the_lru_maintainer_a_store_reclaims_the_dead_items_at_the_tail_first() {
    for (lru_maintainer, expected) in [(false, [5, 8, 8, 11]), (true, [0, 0, 0, 0])] {
        let clock = ManualClock::new(1_700_000_000);
        let engine = Engine::new(
            EngineConfig {
                lru_maintainer,
                lru_crawler: false,
                ..EngineConfig::default()
            },
            clock.clone(),
        )
        .expect("engine");
        let store = |key: &str, exptime_s: i64| {
            let stored = engine.store(
                key.as_bytes(),
                b"abc",
                &StoreOptions::new(StoreMode::Set, 0, exptime_s),
            );
            assert!(matches!(stored, StoreOutcome::Stored { .. }), "{key}");
        };
        for i in 0..8 {
            store(&format!("r{i}"), 1);
        }
        clock.advance_s(2);
        let mut seen = Vec::new();
        for i in 0..3 {
            store(&format!("q{i}"), 0);
            seen.push(stat(&engine, "reclaimed"));
        }
        // Flushed items are as dead as expired ones.
        engine.flush_all(0);
        clock.advance_s(1);
        store("z", 0);
        seen.push(stat(&engine, "reclaimed"));
        assert_eq!(seen, expected, "lru_maintainer {lru_maintainer}");
    }
}
