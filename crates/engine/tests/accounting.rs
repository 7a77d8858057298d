//! Honest slow-tier accounting: for scripted operations, the 64-byte lines charged to
//! the slow tier are exactly those a device would see. The model (ARCHITECTURE.md,
//! "Accounting"): a read or write of any bytes of a line counts that line once per
//! operation; an item's own header is charged once per operation that rewrites it; a
//! neighbour whose link changes costs one line written.
//!
//! Items here are `key_of(i)` (7 bytes) with 118-byte values: 56 + 7 + 118 = 181 bytes in
//! the 192-byte class, whose chunks start on 64-byte boundaries (192 = 3 x 64), so an
//! item spans exactly 3 lines, its header 1, and its key ends in the first line.

mod common;
use common::*;
use engine::*;

const MIB: u64 = 1024 * 1024;
const VALUE_BYTES: usize = 118;
/// Lines an item of this test spans: ceil(181 / 64).
const ITEM_LINES: u64 = 3;

fn key_of(i: u32) -> String {
    format!("key:{i:03}")
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

/// A slow-tier-only engine (`--dram 0`): every item lives in the slow tier.
fn slow_only() -> std::sync::Arc<Engine> {
    engine_with(EngineConfig {
        memory_limit_bytes: 0,
        slow_tier: slow_region(4),
        ..EngineConfig::default()
    })
    .0
}

/// Slow-tier lines (read, written) charged while `op` runs.
fn slow_lines(e: &Engine, op: impl FnOnce()) -> (u64, u64) {
    let before = e.tier_usage(TierId::Slow);
    op();
    let after = e.tier_usage(TierId::Slow);
    (
        after.lines_read - before.lines_read,
        after.lines_written - before.lines_written,
    )
}

#[test]
fn the_test_items_span_three_lines_in_a_line_aligned_class() {
    let e = slow_only();
    assert_eq!(e.slab_class_for(key_of(0).len(), VALUE_BYTES), 4);
    assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    let mut slabs = std::collections::BTreeMap::new();
    e.stats_slabs(&mut |k, v| {
        slabs.insert(k.to_string(), v.to_string());
    });
    assert_eq!(slabs["slow:4:chunk_size"], "192");
}

/// A get of a slow-tier item: the index probe reads header and key (line 0), the value
/// continues into lines 1 and 2; the hit rewrites the header's access word (last access,
/// flags, access count), one line. Nothing else: no LRU move in HOT, no neighbour.
#[test]
fn a_hit_on_a_slow_item_reads_its_lines_and_writes_one_header_line() {
    let e = slow_only();
    assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    for read in 1..=3 {
        let lines = slow_lines(&e, || {
            assert_eq!(value(&e, key_of(0).as_bytes()), Some(val_of(0)));
        });
        assert_eq!(lines, (ITEM_LINES, 1), "read {read}");
    }
    // A miss reads nothing of the slow tier (the index is in DRAM).
    let lines = slow_lines(&e, || assert_eq!(value(&e, b"absent"), None));
    assert_eq!(lines, (0, 0));
}

/// Unlinking B from between its slow-tier neighbours (C before it, A after it in HOT):
/// B's header (links, state) is rewritten, C's `next` and A's `prev` change, and B goes
/// on the free list in front of the free head, whose `prev` changes. The delete's index
/// probe reads B's first line.
#[test]
fn an_unlink_between_slow_neighbours_writes_the_item_and_each_neighbour_once() {
    let e = slow_only();
    for i in 0..3 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    let lines = slow_lines(&e, || {
        assert_eq!(
            e.delete(key_of(1).as_bytes(), &DeleteOptions::default()),
            DeleteOutcome::Deleted
        );
    });
    assert_eq!(lines, (1, 4));
    assert_eq!(value(&e, key_of(0).as_bytes()), Some(val_of(0)));
    assert_eq!(value(&e, key_of(2).as_bytes()), Some(val_of(2)));
}

/// Linking a new item D at the head of HOT, in front of C: the chunk comes off the free
/// list (its links are read; the next free chunk's `prev` changes), D's three lines are
/// written, and C's `prev` changes.
#[test]
fn a_link_in_front_of_a_slow_neighbour_writes_the_item_and_the_neighbours_once() {
    let e = slow_only();
    for i in 0..3 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
    }
    let lines = slow_lines(&e, || {
        assert!(stored(set(&e, key_of(3).as_bytes(), &val_of(3))));
    });
    assert_eq!(lines, (1, ITEM_LINES + 1 + 1));
}

/// A tiered engine whose DRAM items leave for the slow tier one second after their last
/// access (age-based demotion with no low-water mark), so the test decides when.
fn tiered() -> (std::sync::Arc<Engine>, std::sync::Arc<ManualClock>) {
    engine_with(EngineConfig {
        memory_limit_bytes: MIB,
        slow_tier: slow_region(4),
        dram_residency_max_s: 1,
        dram_low_water_pct: 0,
        promotion_margin: 0,
        ..EngineConfig::default()
    })
}

/// Runs the DRAM maintainer until `k`'s demotion is queued, then nothing else.
fn queue_demotion(e: &Engine, clock: &ManualClock, k: &str) {
    clock.advance_s(3);
    for _ in 0..10 {
        e.lru_maintainer_tier_step(0);
        if e.migration_counts().move_to_slow_queue_len > 0 {
            return;
        }
    }
    panic!("{k} was never queued for demotion");
}

/// A demotion into the slow tier, in front of an item already in its COLD segment: the
/// chunk comes off the slow free list (one header line read, the next free chunk's
/// `prev` written), the item's three lines are written, and the COLD head's `prev`
/// changes. A promotion back: the slow copy's header is read by the first check, the
/// whole item by the copy; its header is rewritten as it is unlinked from COLD (where
/// the reads left it: the slow tier has room, so its LRU order is kept lazily), which
/// rewrites its COLD neighbour's `prev`, and it goes on the free list in front of the
/// free head (one `prev`).
#[test]
fn a_demotion_and_a_promotion_charge_the_slow_tier_exactly() {
    let (e, clock) = tiered();
    // W is demoted first, so the slow tier's page for the class is split already and
    // its COLD segment holds W.
    assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    queue_demotion(&e, &clock, &key_of(0));
    assert_eq!(e.migration_step(), 1);
    assert_eq!(e.tier_of_key(key_of(0).as_bytes()), Some(TierId::Slow));
    assert!(stored(set(&e, key_of(1).as_bytes(), &val_of(1))));
    queue_demotion(&e, &clock, &key_of(1));
    let lines = slow_lines(&e, || assert_eq!(e.migration_step(), 1));
    assert_eq!(e.tier_of_key(key_of(1).as_bytes()), Some(TierId::Slow));
    assert_eq!(lines, (1, 1 + ITEM_LINES + 1), "demotion");
    // Read to the Promote state: FETCHED, ACTIVE (left in COLD: the slow tier has
    // room, so it is not moved to WARM, which would clear ACTIVE), then Promote, queued
    // for DRAM.
    for _ in 0..3 {
        assert_eq!(value(&e, key_of(1).as_bytes()), Some(val_of(1)));
    }
    assert_eq!(e.migration_counts().move_to_dram_queue_len, 1);
    let lines = slow_lines(&e, || assert_eq!(e.migration_step(), 1));
    assert_eq!(e.tier_of_key(key_of(1).as_bytes()), Some(TierId::Dram));
    assert_eq!(lines, (1 + ITEM_LINES, 1 + 1 + 1), "promotion");
    assert_eq!(value(&e, key_of(0).as_bytes()), Some(val_of(0)));
    assert_eq!(value(&e, key_of(1).as_bytes()), Some(val_of(1)));
}

/// The first item of a class in the slow tier splits a fresh page: every chunk header
/// (5461 chunks of 192 bytes in 1 MiB) is written once, as one burst; then the chunk
/// comes off the free list (its header read, the next chunk's `prev` written) and the
/// item's three lines are written, with no LRU neighbour yet.
#[test]
fn a_fresh_slow_page_is_formatted_with_one_line_per_chunk_header() {
    let e = slow_only();
    let chunks_per_page = 1024 * 1024 / 192;
    let lines = slow_lines(&e, || {
        assert!(stored(set(&e, key_of(0).as_bytes(), &val_of(0))));
    });
    assert_eq!(lines, (1, chunks_per_page + 1 + ITEM_LINES));
}

/// `stats` says how long the emulated slow-tier cost made the server wait, so a reader of
/// a benchmark can tell the emulation's share of the server's time: a hit on a slow item
/// waits one access latency for its header and key and one more for the rest of the
/// item (1 KB: more than one line), and DRAM never waits.
#[test]
fn the_emulated_slow_tier_wait_is_reported() {
    let (e, _) = engine_with(EngineConfig {
        memory_limit_bytes: 0,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: (4 * MIB) as usize,
            backing: tier::RegionBacking::Anonymous,
            cost: tier::CostModel::parse("read_ns=50000,write_ns=1").unwrap(),
        }),
        ..EngineConfig::default()
    });
    assert!(stored(set(&e, key_of(0).as_bytes(), &[b'v'; 1024])));
    let before = stat(&e, "slow_emulated_wait_us");
    assert_eq!(value(&e, key_of(0).as_bytes()).map(|v| v.len()), Some(1024));
    let waited_us = stat(&e, "slow_emulated_wait_us") - before;
    assert!(
        (100..110).contains(&waited_us),
        "two 50 us read latencies (and a 1 ns header write), got {waited_us} us"
    );
    assert_eq!(stat(&e, "dram_emulated_wait_us"), 0);
}

/// A crawler pass reads each slow-tier header it checks (one line: the chunks are
/// line-aligned) and writes nothing when every item is alive.
#[test]
fn a_crawler_pass_reads_one_header_line_per_slow_item_checked() {
    const ITEMS: u32 = 20;
    let (e, clock) = engine_with(EngineConfig {
        memory_limit_bytes: 0,
        slow_tier: slow_region(4),
        ..EngineConfig::default()
    });
    for i in 0..ITEMS {
        // A TTL makes a pass due; none of them expires before it runs.
        assert!(stored(store(
            &e,
            StoreMode::Set,
            key_of(i).as_bytes(),
            &val_of(i),
            0,
            3600
        )));
    }
    clock.advance_s(1);
    let checked_before = stat(&e, "crawler_items_checked");
    let lines = slow_lines(&e, || {
        assert_eq!(e.lru_crawler_step(), 0, "nothing is dead");
    });
    let checked = stat(&e, "crawler_items_checked") - checked_before;
    assert_eq!(checked, u64::from(ITEMS));
    assert_eq!(lines, (checked, 0));
}

/// Dual-LRU keeps the slow tier's LRU order lazily: while the slow tier has room, its
/// maintainer's pass touches none of its lines (each juggle would read a header and
/// rewrite neighbours' links for an order nobody needs until the tier fills).
#[test]
fn the_slow_maintainer_reads_nothing_while_the_slow_tier_has_room() {
    let e = slow_only();
    for i in 0..50 {
        assert!(stored(set(&e, key_of(i).as_bytes(), &val_of(i))));
        assert_eq!(value(&e, key_of(i).as_bytes()), Some(val_of(i)));
    }
    let lines = slow_lines(&e, || {
        e.lru_maintainer_tier_step(1);
    });
    assert_eq!(lines, (0, 0));
}
