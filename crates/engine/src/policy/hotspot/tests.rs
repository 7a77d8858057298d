//! The hotspot policy's unit tests (its mechanisms, and stores under pressure).

use super::reassignment::benefit_split;
use super::thresholds::{adjust_threshold, TUNE_REQUESTS};
use super::*;
use crate::engine::Engine;

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
    let split = h.plan_split(
        crate::policy::engine_ops::EngineOps::new(&e),
        &last_period,
        &current,
    );
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
