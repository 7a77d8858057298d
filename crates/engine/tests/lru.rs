//! Segmented LRU rules (seed 004 section 2.1, memcached's lru_pull_tail), eviction,
//! the crawler and slab page moves, driven through the step functions with a manual
//! clock.

mod common;
use common::*;
use engine::*;

fn items(e: &Engine, class: u8, field: &str) -> u64 {
    let m = stats_of(|emit| e.stats_items(emit));
    m.get(&format!("items:{class}:{field}"))
        .map_or(0, |v| v.parse().unwrap())
}

fn read_n(e: &Engine, key: &[u8], n: usize) {
    for _ in 0..n {
        assert!(get(e, key).is_some());
    }
}

#[test]
fn hot_tail_moves_to_warm_if_active_else_to_cold() {
    let (e, _) = engine();
    for k in b'a'..=b'j' {
        assert!(stored(set(&e, &[k], b"v")));
    }
    let class = e.slab_class_for(1, 1);
    assert_eq!(
        items(&e, class, "number_hot"),
        10,
        "rule 1: new items enter HOT"
    );
    read_n(&e, b"a", 2); // FETCHED, then ACTIVE
    assert!(e.lru_maintainer_step() > 0);
    // Rule 2: the ACTIVE HOT tail went to WARM; rule 3: the others left HOT for COLD
    // until HOT holds hot_lru_pct (20 %) of the class's bytes.
    assert_eq!(items(&e, class, "number_warm"), 1);
    assert_eq!(items(&e, class, "number_hot"), 2);
    assert_eq!(items(&e, class, "number_cold"), 7);
    assert_eq!(items(&e, class, "moves_to_warm"), 1);
    assert_eq!(items(&e, class, "moves_to_cold"), 7);
    // Rule 6: a COLD item read twice becomes ACTIVE and goes to WARM.
    read_n(&e, b"b", 2);
    assert_eq!(items(&e, class, "number_warm"), 2);
    assert_eq!(items(&e, class, "moves_to_warm"), 2);
    assert_eq!(items(&e, class, "hits_to_cold"), 2);
    // Rule 4: an ACTIVE WARM tail is moved to the WARM head.
    read_n(&e, b"a", 1);
    e.lru_maintainer_step();
    assert_eq!(items(&e, class, "moves_within_lru"), 1);
    assert_eq!(items(&e, class, "number_warm"), 2);
    assert_eq!(items(&e, class, "hits_to_warm"), 1);
}

#[test]
fn warm_tail_not_active_goes_to_cold_over_its_share() {
    let config = EngineConfig {
        warm_lru_pct: 10,
        ..EngineConfig::default()
    };
    let (e, _) = engine_with(config);
    for k in b'a'..=b'j' {
        assert!(stored(set(&e, &[k], b"v")));
    }
    let class = e.slab_class_for(1, 1);
    read_n(&e, b"a", 2);
    read_n(&e, b"b", 2);
    e.lru_maintainer_step();
    // Both ACTIVE items reached WARM; WARM may hold 10 % = one item, so rule 5 sent
    // the inactive WARM tail on to COLD.
    assert_eq!(items(&e, class, "number_warm"), 1);
    assert_eq!(items(&e, class, "moves_to_warm"), 2);
    assert_eq!(items(&e, class, "number_hot"), 2);
    assert_eq!(items(&e, class, "number_cold"), 7);
}

#[test]
fn hot_items_older_than_cold_age_times_factor_move_on() {
    let (e, clock) = engine();
    let class = e.slab_class_for(1, 1);
    for k in b'a'..=b'j' {
        assert!(stored(set(&e, &[k], b"v")));
    }
    e.lru_maintainer_step();
    assert_eq!(items(&e, class, "number_hot"), 2);
    clock.advance_s(100);
    // COLD tail is 100 s old: HOT items older than 0.2 x 100 s move to COLD even
    // though HOT is within its share.
    e.lru_maintainer_step();
    assert_eq!(items(&e, class, "number_hot"), 0);
    assert_eq!(items(&e, class, "number_cold"), 10);
    assert_eq!(items(&e, class, "age"), 100);
}

#[test]
fn memory_limit_is_exact_and_eviction_takes_the_cold_tail() {
    let (e, clock) = engine_with(mb(4));
    let value = vec![b'x'; 1000];
    let key = |i: u32| format!("key:{i}").into_bytes();
    for i in 0..20_000u32 {
        assert!(stored(set(&e, &key(i), &value)), "store {i}");
        if i % 50 == 0 {
            // Keep one item busy: it must be rescued to WARM, never evicted.
            read_n(&e, b"key:0", 2);
            e.lru_maintainer_step();
            clock.advance_s(1);
        }
        assert!(e.pages_in_use() <= 4);
    }
    let s = stats(&e);
    assert!(stat(&e, "evictions") > 15_000, "{s:?}");
    assert_eq!(stat(&e, "store_no_memory"), 0);
    assert!(
        value_of_key(&e, b"key:0"),
        "the frequently read item survived"
    );
    assert!(value_of_key(&e, b"key:19999"), "the newest item is present");
    assert!(
        !value_of_key(&e, b"key:1"),
        "an old unread item was evicted"
    );
    let slabs = stats_of(|emit| e.stats_slabs(emit));
    assert_eq!(slabs["total_malloced"], (4u64 << 20).to_string());
    assert!(stat(&e, "evicted_unfetched") > 0);
}

fn value_of_key(e: &Engine, key: &[u8]) -> bool {
    get(e, key).is_some()
}

#[test]
fn no_evictions_mode_reports_out_of_memory() {
    let (e, _) = engine_with(EngineConfig {
        evictions_enabled: false,
        ..mb(1)
    });
    let value = vec![b'x'; 1000];
    let mut oom = 0;
    for i in 0..2000u32 {
        match set(&e, format!("k{i}").as_bytes(), &value) {
            StoreOutcome::Stored { .. } => {}
            StoreOutcome::OutOfMemory => oom += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(oom > 0);
    assert_eq!(stat(&e, "evictions"), 0);
    assert_eq!(stat(&e, "store_no_memory"), oom);
    assert!(get(&e, b"k0").is_some(), "nothing was evicted");
}

#[test]
fn crawler_reclaims_expired_and_flushed_items() {
    let (e, clock) = engine();
    for i in 0..100 {
        assert!(stored(store(
            &e,
            StoreMode::Set,
            format!("t{i}").as_bytes(),
            b"v",
            0,
            10
        )));
        assert!(stored(set(&e, format!("p{i}").as_bytes(), b"v")));
    }
    clock.advance_s(11);
    assert_eq!(e.lru_crawler_step(), 100);
    assert_eq!(stat(&e, "curr_items"), 100);
    assert_eq!(stat(&e, "crawler_reclaimed"), 100);
    assert_eq!(stat(&e, "expired_unfetched"), 100);
    assert!(stat(&e, "crawler_items_checked") >= 200);
    assert_eq!(stat(&e, "lru_crawler_starts"), 1);
    e.flush_all(0);
    assert_eq!(e.lru_crawler_step(), 100);
    assert_eq!(stat(&e, "curr_items"), 0);
    assert_eq!(e.pages_in_use(), 1, "pages stay with their class");
}

/// The crawler is scheduled as memcached's autocrawl is: a pass runs when an item may
/// have expired or been flushed (its soonest expiry, including a `touch` or `gat` that
/// shortened one, and a delayed `flush_all`), and once an hour otherwise — not every few
/// seconds over a cache whose items never expire, where each pass would read every
/// header (in the slow tier, a slow-tier read per item) for nothing.
#[test]
fn crawler_passes_run_when_an_item_may_be_dead_and_hourly() {
    let (e, clock) = engine();
    for i in 0..100 {
        assert!(stored(set(&e, format!("p{i}").as_bytes(), b"v")));
    }
    assert!(
        e.lru_crawler_tick(),
        "the first tick crawls: expiries are not known yet"
    );
    clock.advance_s(600);
    assert!(!e.lru_crawler_tick(), "nothing can expire: no pass");
    assert_eq!(stat(&e, "lru_crawler_starts"), 1);

    assert!(stored(store(&e, StoreMode::Set, b"t", b"v", 0, 30)));
    assert!(stored(store(&e, StoreMode::Set, b"w", b"v", 0, 100)));
    clock.advance_s(29);
    assert!(!e.lru_crawler_tick(), "no pass before the soonest expiry");
    clock.advance_s(2);
    assert!(e.lru_crawler_tick(), "a pass once an item expired");
    assert_eq!(stat(&e, "crawler_reclaimed"), 1);
    // That pass found `w` alive: the next one is due at its expiry.
    clock.advance_s(68);
    assert!(!e.lru_crawler_tick());
    clock.advance_s(2);
    assert!(
        e.lru_crawler_tick(),
        "a pass at the expiry the last pass found"
    );
    assert_eq!(stat(&e, "crawler_reclaimed"), 2);

    assert!(stored(store(&e, StoreMode::Set, b"u", b"v", 0, 1000)));
    assert_eq!(e.touch(b"u", 5), TouchOutcome::Touched);
    clock.advance_s(6);
    assert!(e.lru_crawler_tick(), "touch shortened the expiry: a pass");
    assert_eq!(stat(&e, "crawler_reclaimed"), 3);

    assert!(stored(store(&e, StoreMode::Set, b"g", b"v", 0, 1000)));
    let gat = ReadOptions {
        touch_exptime: Some(5),
        ..ReadOptions::default()
    };
    assert!(matches!(e.read(b"g", &gat, |_| ()), ReadOutcome::Hit(())));
    clock.advance_s(6);
    assert!(e.lru_crawler_tick(), "gat shortened the expiry: a pass");
    assert_eq!(stat(&e, "crawler_reclaimed"), 4);

    e.flush_all(20);
    clock.advance_s(19);
    assert!(
        !e.lru_crawler_tick(),
        "no pass before a delayed flush takes effect"
    );
    clock.advance_s(2);
    assert!(e.lru_crawler_tick(), "a pass once the flush took effect");
    assert_eq!(stat(&e, "curr_items"), 0);

    assert!(stored(set(&e, b"q", b"v")));
    clock.advance_s(3599);
    assert!(!e.lru_crawler_tick());
    clock.advance_s(1);
    assert!(e.lru_crawler_tick(), "a pass at least once an hour");
    assert_eq!(stat(&e, "lru_crawler_starts"), 7);
}

#[test]
fn slab_automove_rescues_a_calcified_workload() {
    let (e, clock) = engine_with(mb(10));
    // `watch sysevents` sees each of the automover's decisions.
    e.events().set_wanted(engine::events::kind::SYSTEM);
    let small = vec![b's'; 500];
    for i in 0..40_000u32 {
        assert!(stored(set(&e, format!("small:{i}").as_bytes(), &small)));
    }
    e.lru_maintainer_step();
    assert_eq!(e.pages_in_use(), 10);
    let large = vec![b'L'; 50_000];
    let large_keys = 100u32;
    let mut round = 0u32;
    let present = |e: &Engine| {
        (0..large_keys)
            .filter(|i| get(e, format!("large:{i}").as_bytes()).is_some())
            .count()
    };
    for _step in 0..80 {
        clock.advance_s(1);
        for _ in 0..50 {
            let k = format!("large:{}", round % large_keys);
            assert!(stored(set(&e, k.as_bytes(), &large)), "large store");
            round += 1;
        }
        e.lru_maintainer_step();
        e.slab_automove_step();
    }
    for i in 0..large_keys {
        assert!(stored(set(&e, format!("large:{i}").as_bytes(), &large)));
    }
    let kept = present(&e);
    assert!(
        kept >= 90,
        "only {kept} of {large_keys} large values fit: memory calcified"
    );
    assert!(stat(&e, "slabs_moved") >= 5);
    assert!(e.pages_in_use() <= 10);
    let mut events = Vec::new();
    e.events().drain(&mut events, usize::MAX);
    let large_class = e.slab_class_for(5, 50_000) as u32;
    let moves_to_large = events
        .iter()
        .filter(
            |ev| matches!(ev.what, engine::EventWhat::SlabMove { dst, .. } if dst == large_class),
        )
        .count();
    assert!(moves_to_large >= 5, "{events:?}");
}

#[test]
fn slabs_reassign_moves_a_page_and_reports_errors() {
    let (e, _) = engine_with(mb(8));
    let small = vec![b's'; 500];
    for i in 0..6000u32 {
        assert!(stored(set(&e, format!("s{i}").as_bytes(), &small)));
    }
    let src = e.slab_class_for(5, 500) as i32;
    let dst = e.slab_class_for(5, 5000) as i32;
    let pages = |e: &Engine, c: i32| {
        stats_of(|emit| e.stats_slabs(emit))
            .get(&format!("{c}:total_pages"))
            .map_or(0, |v| v.parse::<u64>().unwrap())
    };
    let before = pages(&e, src);
    assert!(before >= 3);
    assert_eq!(e.slabs_reassign(src, src), Err(ReassignError::Same));
    // memcached checks SAME before the class range.
    assert_eq!(e.slabs_reassign(99, 99), Err(ReassignError::Same));
    assert_eq!(e.slabs_reassign(src, 99), Err(ReassignError::BadClass));
    assert_eq!(e.slabs_reassign(-2, dst), Err(ReassignError::BadClass));
    assert_eq!(e.slabs_reassign(src, -1), Err(ReassignError::BadClass));
    assert_eq!(e.slabs_reassign(dst, src), Err(ReassignError::NoSpare));
    assert_eq!(e.slabs_reassign(0, src), Err(ReassignError::NoSpare));
    assert_eq!(e.slabs_reassign(src, dst), Ok(()));
    assert_eq!(pages(&e, src), before - 1);
    assert_eq!(pages(&e, dst), 1);
    assert!(stat(&e, "slabs_moved") == 1);
    assert!(e.pages_in_use() <= 8);
    let (off, _) = engine_with(EngineConfig {
        slab_reassign: false,
        ..mb(8)
    });
    assert_eq!(off.slabs_reassign(1, 2), Err(ReassignError::Disabled));
    // -1 picks a class with a spare page; with none, memcached answers BADCLASS.
    let (fresh, _) = engine_with(mb(8));
    assert!(stored(set(&fresh, b"one", b"v")));
    assert_eq!(fresh.slabs_reassign(-1, 0), Err(ReassignError::BadClass));
    assert_eq!(e.slabs_reassign(-1, 0), Ok(()));
    assert_eq!(pages(&e, src), before - 2);
    assert!(e.set_slab_automove(3).is_err());
    assert!(e.set_slab_automove(2).is_ok());
}

#[test]
fn empty_class_takes_a_page_from_another_class_within_the_limit() {
    let (e, _) = engine_with(mb(2));
    let small = vec![b's'; 100];
    for i in 0..30_000u32 {
        assert!(stored(set(&e, format!("s{i}").as_bytes(), &small)));
    }
    assert_eq!(e.pages_in_use(), 2);
    let big = vec![b'b'; 300_000];
    assert!(stored(set(&e, b"big", &big)));
    assert_eq!(value(&e, b"big").unwrap(), big);
    assert_eq!(e.pages_in_use(), 2);
}

/// A page move keeps the live items of the page it empties when their class has free
/// chunks elsewhere (memcached's rescue, `slab_reassign_rescues`); the free chunks of
/// that page met on the way leave the free list (`slab_reassign_inline_reclaim`); an item
/// whose shard is busy keeps the page (`slab_reassign_busy_items`, the move gives up);
/// and with no free chunk outside the page the item is evicted
/// (`slab_reassign_evictions_nomem`).
#[test]
fn a_page_move_rescues_live_items_and_counts_what_it_could_not() {
    let payload = vec![b'v'; 900];
    let fill = |e: &Engine| -> i32 {
        let class = e.slab_class_for(4, payload.len());
        assert!(stored(set(e, b"k000", &payload)));
        let per_page: u64 = stats_of(|emit| e.stats_slabs(emit))
            .get(&format!("{class}:chunks_per_page"))
            .map_or(0, |v| v.parse().unwrap());
        // One full page, then one item on a second page (its first chunk: a page's
        // chunks are handed out upwards).
        assert!(per_page > 1);
        for i in 1..per_page {
            assert!(stored(set(e, format!("k{i:03}").as_bytes(), &payload)));
        }
        assert!(stored(set(e, b"last", &payload)));
        class as i32
    };

    // A free chunk on the full page: the item on the emptiest page moves there.
    let (e, _) = engine_with(mb(8));
    let class = fill(&e);
    assert_eq!(
        e.delete(b"k000", &DeleteOptions::default()),
        DeleteOutcome::Deleted
    );
    {
        let _busy = e.hold_shard_of(b"last");
        assert_eq!(e.slabs_reassign(class, 0), Err(ReassignError::Busy));
    }
    assert!(stat(&e, "slab_reassign_busy_items") > 0);
    assert_eq!(stat(&e, "slab_reassign_rescues"), 0);
    assert_eq!(e.slabs_reassign(class, 0), Ok(()));
    assert_eq!(stat(&e, "slab_reassign_rescues"), 1);
    assert_eq!(stat(&e, "slab_reassign_evictions_nomem"), 0);
    assert_eq!(stat(&e, "slabs_moved"), 1);
    assert_eq!(value(&e, b"last"), Some(payload.clone()));
    assert_eq!(stat(&e, "curr_items"), stat(&e, "total_items") - 1);

    // No free chunk outside the page: the page's own free chunks come off the free list
    // one by one, then the item is evicted.
    let (e, _) = engine_with(mb(8));
    let class = fill(&e);
    assert_eq!(e.slabs_reassign(class, 0), Ok(()));
    let per_page = stat(&e, "total_items") - 1;
    assert_eq!(stat(&e, "slab_reassign_inline_reclaim"), per_page - 1);
    assert_eq!(stat(&e, "slab_reassign_rescues"), 0);
    assert_eq!(stat(&e, "slab_reassign_evictions_nomem"), 1);
    assert_eq!(value(&e, b"last"), None);
    e.reset_stats();
    for name in [
        "slab_reassign_rescues",
        "slab_reassign_inline_reclaim",
        "slab_reassign_evictions_nomem",
    ] {
        assert_eq!(stat(&e, name), 0, "stats reset clears {name}");
    }
}
