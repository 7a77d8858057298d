//! The hotspot policy's mechanisms, each on a scripted engine (seed 002 sections 3.2-3.4):
//! slow-tier metadata in DRAM (a hit writes nothing to the slow tier, a miss reads
//! nothing), promotion past the class threshold, the multi-queue DRAM victim, the slow
//! tier's CLOCK. The invariants every policy keeps are in `policy_invariants.rs` and
//! `policy_stress.rs`, which run this policy too.
//!
//! Items are `key_of(i)` (8 bytes) with 117-byte values: 56 + 8 + 117 = 181 bytes, class 4
//! (192-byte chunks, 5461 to a 1 MiB page), an item spans 3 lines.

mod common;
use common::*;
use engine::*;

const MIB: u64 = 1024 * 1024;
const VALUE_BYTES: usize = 117;
const ITEM_LINES: u64 = 3;
const CHUNKS_PER_PAGE: u32 = 1024 * 1024 / 192;

fn key_of(i: u32) -> String {
    format!("key:{i:04}")
}

fn val_of(i: u32) -> Vec<u8> {
    let mut v = format!("value of {i}:").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    v
}

fn slow_region(slow_mib: u64) -> Option<tier::RegionSpec> {
    Some(tier::RegionSpec {
        size_bytes: (slow_mib * MIB) as usize,
        backing: tier::RegionBacking::Anonymous,
        cost: tier::CostModel::NONE,
    })
}

fn hotspot(dram_mib: u64, slow_mib: u64) -> std::sync::Arc<Engine> {
    engine_with(EngineConfig {
        memory_limit_bytes: dram_mib * MIB,
        slow_tier: if slow_mib > 0 {
            slow_region(slow_mib)
        } else {
            None
        },
        policy: PlacementPolicy::Hotspot,
        slab_reassign: false,
        ..EngineConfig::default()
    })
    .0
}

fn slow_lines(e: &Engine, op: impl FnOnce()) -> (u64, u64) {
    let before = e.tier_usage(TierId::Slow);
    op();
    let after = e.tier_usage(TierId::Slow);
    (
        after.lines_read - before.lines_read,
        after.lines_written - before.lines_written,
    )
}

fn read(e: &Engine, i: u32) {
    assert_eq!(
        value(e, key_of(i).as_bytes()),
        Some(val_of(i)),
        "{}",
        key_of(i)
    );
}

/// HMCached's NVM-friendly index: the counter and the reference bit of a slow-tier item
/// live in its DRAM descriptor. A hit reads the item's lines and writes none of them —
/// except the first, which sets the fetched flag and the last-access time once (what
/// `mg h` and `mg l` report, as memcached does). Under Dual-LRU every hit writes a
/// header line (`accounting.rs`). A miss reads nothing of the slow tier.
#[test]
fn a_hit_on_a_slow_item_writes_nothing_to_the_slow_tier_after_its_first() {
    let e = hotspot(0, 4);
    assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    assert_eq!(e.tier_of_key(key_of(0).as_bytes()), Some(TierId::Slow));
    let first = slow_lines(&e, || read(&e, 0));
    assert_eq!(first, (ITEM_LINES, 1), "first hit");
    for hit in 2..=10 {
        let lines = slow_lines(&e, || read(&e, 0));
        assert_eq!(lines, (ITEM_LINES, 0), "hit {hit}");
    }
    let miss = slow_lines(&e, || assert_eq!(value(&e, b"key:9999"), None));
    assert_eq!(miss, (0, 0));
}

/// Fills DRAM's only page with items 0..CHUNKS_PER_PAGE, so the next new item of the
/// class is placed in the slow tier.
fn fill_dram(e: &Engine) -> u32 {
    for i in 0..CHUNKS_PER_PAGE {
        assert!(stored(set(e, key_of(i).as_bytes(), &val_of(i))));
        assert_eq!(
            e.tier_of_key(key_of(i).as_bytes()),
            Some(TierId::Dram),
            "{i}"
        );
    }
    CHUNKS_PER_PAGE
}

/// A slow-tier item is offered to DRAM once its counter exceeds the class's threshold
/// (4 to start with): the SET counts one access, the fourth read makes five. The
/// promotion takes DRAM room by demoting the multi-queue victim: the oldest item of
/// queue 0, never one read often enough to sit in a higher queue.
#[test]
fn a_slow_item_is_promoted_when_its_count_passes_the_threshold_displacing_the_coldest() {
    let e = hotspot(1, 4);
    let n = fill_dram(&e);
    // Item 0, the oldest, is read into queue 1 (count 3): it must not be the victim.
    read(&e, 0);
    read(&e, 0);
    let newcomer = n;
    assert!(stored(set(
        &e,
        key_of(newcomer).as_bytes(),
        &val_of(newcomer)
    )));
    assert_eq!(
        e.tier_of_key(key_of(newcomer).as_bytes()),
        Some(TierId::Slow)
    );
    for reads in 1..=3 {
        read(&e, newcomer);
        assert_eq!(
            e.migration_counts().move_to_dram_queue_len,
            0,
            "offered after {reads} reads (count {})",
            reads + 1
        );
    }
    read(&e, newcomer);
    assert_eq!(e.migration_counts().move_to_dram_queue_len, 1);
    assert_eq!(e.migration_step(), 1);
    assert_eq!(
        e.tier_of_key(key_of(newcomer).as_bytes()),
        Some(TierId::Dram)
    );
    let m = e.migration_counts();
    assert_eq!((m.promotions, m.demotions), (1, 1), "{m:?}");
    assert_eq!(e.tier_of_key(key_of(0).as_bytes()), Some(TierId::Dram));
    assert_eq!(e.tier_of_key(key_of(1).as_bytes()), Some(TierId::Slow));
    for i in [0, 1, newcomer] {
        read(&e, i);
    }
    // `stats reset` clears the migration counters with the others.
    e.reset_stats();
    let m = e.migration_counts();
    assert_eq!((m.promotions, m.demotions), (0, 0), "{m:?}");
}

/// Multi-queue replacement in a DRAM-only engine: items read often sit in higher
/// queues, and evictions take the tails of queue 0 first, oldest first, whatever the
/// age of the items above.
#[test]
fn the_multi_queue_evicts_from_the_lowest_queue_first() {
    let e = hotspot(1, 0);
    let n = fill_dram(&e);
    // The 100 oldest items are read five times: count 6, queue 2.
    for i in 0..100 {
        for _ in 0..5 {
            read(&e, i);
        }
    }
    for i in n..n + 200 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    assert_eq!(stat(&e, "evictions"), 200);
    for i in 0..100 {
        assert!(
            e.tier_of_key(key_of(i).as_bytes()).is_some(),
            "hot {i} evicted"
        );
    }
    for i in 100..300 {
        assert_eq!(e.tier_of_key(key_of(i).as_bytes()), None, "{i} kept");
    }
    for i in 300..n + 200 {
        assert!(e.tier_of_key(key_of(i).as_bytes()).is_some(), "{i} evicted");
    }
}

/// CLOCK in a slow-tier-only engine: the hand starts at the oldest item; items read
/// since it last passed (reference bit set in their descriptor) are passed over, their
/// bit cleared; the first unreferenced ones are evicted. No slow-tier item is relinked
/// on a hit, so the hand's order is the store order.
#[test]
fn the_slow_clock_passes_over_referenced_items_and_evicts_the_next() {
    let e = hotspot(0, 1);
    for i in 0..CHUNKS_PER_PAGE {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    for i in 0..10 {
        read(&e, i);
    }
    let n = CHUNKS_PER_PAGE;
    for i in n..n + 20 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    assert_eq!(stat(&e, "evictions"), 20);
    for i in 0..10 {
        assert!(
            e.tier_of_key(key_of(i).as_bytes()).is_some(),
            "read {i} evicted"
        );
    }
    for i in 10..30 {
        assert_eq!(e.tier_of_key(key_of(i).as_bytes()), None, "{i} kept");
    }
    // The hand passed 0..9 and cleared their bits: unread since, they go next, in order.
    for i in n + 20..n + 30 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    for i in 0..10 {
        assert!(
            e.tier_of_key(key_of(i).as_bytes()).is_some(),
            "{i} evicted before the hand came round"
        );
    }
    for i in 30..40 {
        assert_eq!(e.tier_of_key(key_of(i).as_bytes()), None, "{i} kept");
    }
}

/// Bounded CLOCK: when every item was read since the hand last passed, a store still
/// succeeds (the hand evicts after passing over a bounded number).
#[test]
fn a_store_succeeds_when_every_slow_item_is_referenced() {
    let e = hotspot(0, 1);
    for i in 0..CHUNKS_PER_PAGE {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    for i in 0..CHUNKS_PER_PAGE {
        read(&e, i);
    }
    let n = CHUNKS_PER_PAGE;
    for i in n..n + 100 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))), "{i}");
        read(&e, i);
    }
    assert_eq!(stat(&e, "evictions"), 100);
}

/// The hand never names a freed chunk: deleting the item under it moves it on. Here the
/// hand stops at item 11 after an eviction; 11 is deleted, a new item A takes its chunk,
/// and the next eviction must take 12, the next item in the hand's order — not A.
#[test]
fn deleting_the_item_under_the_clock_hand_moves_the_hand_on() {
    let e = hotspot(0, 1);
    for i in 0..CHUNKS_PER_PAGE {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    for i in 0..10 {
        read(&e, i);
    }
    let n = CHUNKS_PER_PAGE;
    assert!(stored(set(&e, key_of(n).as_bytes(), &val_of(n))));
    assert_eq!(e.tier_of_key(key_of(10).as_bytes()), None);
    assert_eq!(
        e.delete(key_of(11).as_bytes(), &DeleteOptions::default()),
        DeleteOutcome::Deleted
    );
    let a = n + 1;
    assert!(stored(set(&e, key_of(a).as_bytes(), &val_of(a))));
    assert_eq!(stat(&e, "evictions"), 1, "A took the deleted item's chunk");
    let b = n + 2;
    assert!(stored(set(&e, key_of(b).as_bytes(), &val_of(b))));
    assert_eq!(stat(&e, "evictions"), 2);
    assert_eq!(e.tier_of_key(key_of(12).as_bytes()), None, "12 kept");
    for i in [a, b, 13] {
        read(&e, i);
    }
}

/// DRAM pages of `class_id` (from `stats slabs`).
fn dram_pages(e: &Engine, class_id: u8) -> u64 {
    let mut pages = 0;
    e.stats_slabs(&mut |k, v| {
        if k == format!("{class_id}:total_pages") {
            pages = v.to_string().parse().unwrap();
        }
    });
    pages
}

/// Benefit-aware DRAM reassignment (section 3.5): DRAM's four pages all belong to the
/// small items' class when the large items, stored later, turn out to be the hot ones.
/// Benefit per page: 500 small items read 5 times fill a fraction of one page; 2 000
/// large items read 20 times fill three. The dynamic program's split is one page for
/// the small class and three for the large, and the automover gets there one page a
/// step, its small items demoted (none lost). (The automover's own rules would wait a
/// 30-step window before the first move.)
#[test]
fn dram_pages_move_to_the_class_whose_items_gain_most() {
    let (e, _clock) = engine_with(EngineConfig {
        memory_limit_bytes: 4 * MIB,
        slow_tier: slow_region(32),
        policy: PlacementPolicy::Hotspot,
        access_period_requests: 20_000,
        ..EngineConfig::default()
    });
    let small_count = 4 * CHUNKS_PER_PAGE;
    for i in 0..small_count {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    let large_key = |i: u32| format!("large:{i:05}");
    let large_val = |i: u32| {
        let mut v = format!("large value {i}:").into_bytes();
        v.resize(900, b'+');
        v
    };
    let large_class = e.slab_class_for(11, 900);
    let small_class = e.slab_class_for(8, VALUE_BYTES);
    for i in 0..2000 {
        assert!(stored(set(&e, large_key(i).as_bytes(), &large_val(i))));
    }
    assert_eq!(dram_pages(&e, small_class), 4);
    assert_eq!(dram_pages(&e, large_class), 0);
    for _round in 0..3 {
        for _ in 0..20 {
            for i in 0..2000 {
                assert_eq!(value(&e, large_key(i).as_bytes()), Some(large_val(i)));
            }
        }
        for _ in 0..5 {
            for i in 0..500 {
                read(&e, i);
            }
        }
        e.lru_maintainer_tier_step(0);
        for _ in 0..10 {
            e.slab_automove_step();
            while e.migration_step() > 0 {}
        }
    }
    assert_eq!(
        (dram_pages(&e, small_class), dram_pages(&e, large_class)),
        (1, 3)
    );
    for i in 0..small_count {
        read(&e, i);
    }
}

/// HM-HC (`--policy hyperbolic`): DRAM's victim is the sampled item with the fewest
/// accesses per period in DRAM. Half the items of a full DRAM page were read three
/// times, the other half never: every eviction takes an unread item (a sample of 16
/// misses all of them with odds of 1 in 65 536).
#[test]
fn hyperbolic_evicts_the_items_with_the_fewest_accesses_for_their_time() {
    let (e, _clock) = engine_with(EngineConfig {
        memory_limit_bytes: MIB,
        policy: PlacementPolicy::Hyperbolic,
        slab_reassign: false,
        ..EngineConfig::default()
    });
    let n = fill_dram(&e);
    for i in (0..n).step_by(2) {
        for _ in 0..3 {
            read(&e, i);
        }
    }
    for i in n..n + 100 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    assert_eq!(stat(&e, "evictions"), 100);
    for i in (0..n).step_by(2) {
        assert!(
            e.tier_of_key(key_of(i).as_bytes()).is_some(),
            "read item {i} evicted"
        );
    }
}

/// A promoted item keeps its counter in DRAM, whenever its slow copy's last-access time
/// was last written (at most once a minute): here the slow copy says second 30, the
/// promotion happens at second 89 after periods began at second 89, and the item must
/// still count as hot (in a queue above 0) once in DRAM, not as idle since second 30.
#[test]
fn a_promoted_item_keeps_its_count_whatever_its_slow_copys_access_time() {
    let (e, clock) = engine_with(EngineConfig {
        memory_limit_bytes: MIB,
        slow_tier: slow_region(4),
        policy: PlacementPolicy::Hotspot,
        access_period_requests: 10,
        slab_reassign: false,
        ..EngineConfig::default()
    });
    let n = fill_dram(&e);
    let hot = n;
    for i in n..n + 41 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
        assert_eq!(e.tier_of_key(key_of(i).as_bytes()), Some(TierId::Slow));
    }
    clock.advance_s(30);
    read(&e, hot); // first fetch: the slow copy's access time is second 30
    clock.advance_s(59); // not rewritten by the reads below: less than a minute later
    for _ in 0..29 {
        read(&e, hot);
    }
    assert_eq!(e.migration_counts().move_to_dram_queue_len, 1);
    // Periods begin at second 89 (40 requests of other slow-tier keys, read once each,
    // and a maintainer pass).
    for i in n + 1..n + 41 {
        read(&e, i);
    }
    e.lru_maintainer_tier_step(0);
    // The pass also queued demotions to restore DRAM's reserve of free chunks.
    while e.migration_step() > 0 {}
    assert_eq!(e.migration_counts().promotions, 1);
    assert_eq!(e.tier_of_key(key_of(hot).as_bytes()), Some(TierId::Dram));
    let mut items = std::collections::BTreeMap::new();
    e.stats_items(&mut |k, v| {
        items.insert(k.to_string(), v.to_string());
    });
    let class = e.slab_class_for(8, VALUE_BYTES);
    // The only DRAM item of the class above queue 0 ("hot" in memcached's names).
    let count = |name: &str| -> u64 { items[&format!("items:{class}:{name}")].parse().unwrap() };
    assert_eq!(count("number") - count("number_hot"), 1, "{items:?}");
}

/// DRAM items per multi-queue queue of the test class (queues 0-2: `number_hot`,
/// `number_warm`, `number_cold` in memcached's names), and all of them.
fn queue_counts(e: &Engine) -> (u64, u64, u64, u64) {
    let mut items = std::collections::BTreeMap::new();
    e.stats_items(&mut |k, v| {
        items.insert(k.to_string(), v.to_string());
    });
    let class = e.slab_class_for(8, VALUE_BYTES);
    let n = |name: &str| -> u64 {
        items
            .get(&format!("items:{class}:{name}"))
            .map_or(0, |v| v.parse().unwrap())
    };
    (
        n("number_hot"),
        n("number_warm"),
        n("number_cold"),
        n("number"),
    )
}

/// Decay moves items down the queues: ten items read into queue 2 (count 7) are back in
/// queue 0 once five periods passed without a read of them (counts reset after three
/// idle periods), by the DRAM maintainer's pass alone.
#[test]
fn decayed_items_move_down_the_queues() {
    let (e, _clock) = engine_with(EngineConfig {
        memory_limit_bytes: MIB,
        policy: PlacementPolicy::Hotspot,
        access_period_requests: 100,
        slab_reassign: false,
        ..EngineConfig::default()
    });
    for i in 0..100 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    for i in 0..10 {
        for _ in 0..6 {
            read(&e, i);
        }
    }
    assert_eq!(queue_counts(&e), (90, 0, 10, 100));
    e.lru_maintainer_tier_step(0); // period 1 begins (160 requests)
    for i in 100..500 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    e.lru_maintainer_tier_step(0); // four more periods (400 requests)
    assert_eq!(queue_counts(&e), (500, 0, 0, 500));
}

/// A SET is an access: overwriting a DRAM item carries its counter on (five reads and
/// the store make 7, queue 2), it does not start again at one.
#[test]
fn an_overwrite_keeps_the_items_counter() {
    let (e, _clock) = engine_with(EngineConfig {
        memory_limit_bytes: MIB,
        policy: PlacementPolicy::Hotspot,
        slab_reassign: false,
        ..EngineConfig::default()
    });
    assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    for _ in 0..5 {
        read(&e, 0);
    }
    assert_eq!(queue_counts(&e), (0, 0, 1, 1));
    assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    assert_eq!(queue_counts(&e), (0, 0, 1, 1));
}

/// `-M`: with evictions off, a full DRAM-only cache refuses the store (out of memory)
/// and keeps every item, under the hotspot policy too.
#[test]
fn with_evictions_off_a_full_cache_refuses_stores_and_keeps_its_items() {
    let (e, _clock) = engine_with(EngineConfig {
        memory_limit_bytes: MIB,
        policy: PlacementPolicy::Hotspot,
        evictions_enabled: false,
        slab_reassign: false,
        ..EngineConfig::default()
    });
    let n = fill_dram(&e);
    assert_eq!(
        set(&e, key_of(n).as_bytes(), &val_of(n)),
        StoreOutcome::OutOfMemory
    );
    assert_eq!(stat(&e, "evictions"), 0);
    for i in 0..n {
        read(&e, i);
    }
}

/// The DRAM maintainer keeps a reserve of free chunks for new items by demoting the
/// multi-queue's victims (one in twenty of the class's chunks), so a store after it
/// lands in DRAM again; the demoted items are the coldest and all still served.
#[test]
fn the_dram_maintainer_keeps_a_reserve_by_demoting_the_coldest() {
    let e = hotspot(1, 8);
    let n = fill_dram(&e);
    for i in n / 2..n {
        read(&e, i);
    }
    for _ in 0..20 {
        e.lru_maintainer_tier_step(0);
        while e.migration_step() > 0 {}
    }
    let demoted = e.migration_counts().demotions;
    assert!(demoted >= u64::from(n) / 20, "{demoted} demoted of {n}");
    for i in n / 2..n {
        assert_eq!(
            e.tier_of_key(key_of(i).as_bytes()),
            Some(TierId::Dram),
            "read item {i} demoted"
        );
    }
    assert!(stored(set(&e, key_of(n).as_bytes(), &val_of(n))));
    assert_eq!(e.tier_of_key(key_of(n).as_bytes()), Some(TierId::Dram));
    for i in 0..=n {
        read(&e, i);
    }
}
