//! The synchronous demotion of a `two_level` store (HM-TLC: a store into a full DRAM
//! demotes DRAM's LRU tail on the client's path, `tiering::dram_chunk_for_store`). That
//! store may already hold a shard lock, so its move only *tries* the victim's shard and
//! gives up when it is busy. By then the victim's chunk may have been freed, reused, or
//! its page handed to another slab class: a move that gives up must write nothing at the
//! victim's address. The tests drive that interleaving with the `test-hooks` pause point
//! (between the move's allocation and its re-check) and a test-held shard lock.

mod common;
use common::*;
use engine::*;

const MIB: u64 = 1024 * 1024;

/// Values of the class whose DRAM pages the store demotes from (52 984-byte chunks,
/// 19 to a page), and of the class their page goes to (103 496-byte chunks).
const SMALL_BYTES: usize = 50_000;
const LARGE_BYTES: usize = 100_000;
const LARGE_CHUNK_BYTES: usize = 103_496;

/// Two DRAM pages, both for the small class once full; a slow tier with room.
fn two_level() -> EngineConfig {
    EngineConfig {
        policy: PlacementPolicy::TwoLevel,
        memory_limit_bytes: 2 * MIB,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: (16 * MIB) as usize,
            backing: tier::RegionBacking::Anonymous,
            cost: tier::CostModel::NONE,
        }),
        ..EngineConfig::default()
    }
}

fn small(i: u32) -> String {
    format!("small:{i:03}")
}

fn large(i: u32) -> String {
    format!("large:{i:03}")
}

/// A value of `len` bytes that names its key, then dots (0x2e: the bit a `QUEUED` clear
/// would take from the byte it lands on is set in every one of them).
fn val_of(key: &str, len: usize) -> Vec<u8> {
    let mut v = format!("{key}#").into_bytes();
    v.resize(len, b'.');
    v
}

fn slab_stat(e: &Engine, name: &str) -> u64 {
    let mut found = None;
    e.stats_slabs(&mut |n, v| {
        if n == name {
            found = Some(v.to_string());
        }
    });
    found
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no slab stat {name}"))
}

/// The first byte at which `got` differs from `want`, for the failure message.
fn first_difference(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        Some(at) => format!("byte {at}: {:#04x} instead of {:#04x}", got[at], want[at]),
        None => format!("{} bytes instead of {}", got.len(), want.len()),
    }
}

/// A `two_level` store finds DRAM full and demotes the LRU tail item, trying its shard.
/// Held after its allocation, the demotion meets this: the victim is deleted, its page
/// goes to a class of larger chunks (so the victim's old header lies inside the value of
/// a new item), and the victim's shard is locked by someone else when the demotion comes
/// back, so its try fails. The new item's value must be exactly what was stored.
#[test]
fn a_store_demotion_that_finds_its_shard_busy_writes_nothing_where_its_victim_was() {
    let (e, _clock) = engine_with(two_level());
    let small_class = e.slab_class_for(small(0).len(), SMALL_BYTES);
    let large_class = e.slab_class_for(large(0).len(), LARGE_BYTES);
    let per_page = SLAB_PAGE_SIZE_BYTES as u32 / 52_984;
    // Fill both DRAM pages with small items, in address order.
    for i in 0..2 * per_page {
        let k = small(i);
        assert!(
            stored(set(&e, k.as_bytes(), &val_of(&k, SMALL_BYTES))),
            "{k}"
        );
        assert_eq!(e.tier_of_key(k.as_bytes()), Some(TierId::Dram), "{k}");
    }
    let chunk_bytes = slab_stat(&e, &format!("{small_class}:chunk_size")) as usize;
    assert_eq!(chunk_bytes, 52_984);
    assert_eq!(slab_stat(&e, &format!("{small_class}:total_pages")), 2);
    // The oldest item is the first page's first chunk; replace it by a newer one in the
    // same chunk, so the LRU tail (the victim) is the second chunk: at byte `chunk_bytes`
    // of its page, where a larger class's first chunk has value bytes.
    assert_eq!(
        e.delete(small(0).as_bytes(), &DeleteOptions::default()),
        DeleteOutcome::Deleted
    );
    let newest = small(999);
    assert!(stored(set(
        &e,
        newest.as_bytes(),
        &val_of(&newest, SMALL_BYTES)
    )));
    assert_eq!(e.tier_of_key(newest.as_bytes()), Some(TierId::Dram));
    let victim = small(1);
    // The victim's header state field (bytes 20..22 of its chunk) lies inside the value
    // of the large item that takes the first chunk of the page.
    assert!(chunk_bytes + 22 < LARGE_CHUNK_BYTES && chunk_bytes > 56 + large(0).len());
    let before = e.migration_counts();
    let large_items = (SLAB_PAGE_SIZE_BYTES / LARGE_CHUNK_BYTES) as u32;
    let trigger = small(500);
    std::thread::scope(|scope| {
        let pause = e.pause_migration_before_relock(victim.as_bytes(), TierId::Slow);
        let store =
            scope.spawn(|| stored(set(&e, trigger.as_bytes(), &val_of(&trigger, SMALL_BYTES))));
        assert!(
            pause.wait_until_paused(std::time::Duration::from_secs(10)),
            "the store never demoted {victim} (the DRAM LRU tail) synchronously"
        );
        // While the demotion waits: the victim goes, and its page goes to the large
        // class (its other items are demoted first), whose items fill it.
        assert_eq!(
            e.delete(victim.as_bytes(), &DeleteOptions::default()),
            DeleteOutcome::Deleted
        );
        assert_eq!(
            e.slabs_reassign(small_class as i32, large_class as i32),
            Ok(())
        );
        for i in 0..large_items {
            let k = large(i);
            assert!(
                stored(set(&e, k.as_bytes(), &val_of(&k, LARGE_BYTES))),
                "{k}"
            );
            assert_eq!(e.tier_of_key(k.as_bytes()), Some(TierId::Dram), "{k}");
        }
        let large_chunk = slab_stat(&e, &format!("{large_class}:chunk_size")) as usize;
        assert_eq!(large_chunk, LARGE_CHUNK_BYTES);
        // The victim's shard is busy when the demotion comes back for its re-check.
        let hold = e.hold_shard_of(victim.as_bytes());
        assert!(
            pause.release(),
            "the demotion gave up waiting before the release"
        );
        let mut waited = 0;
        while e.migration_counts().demotions_failed == before.demotions_failed {
            waited += 1;
            assert!(
                waited < 10_000,
                "the demotion never came back from its pause"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(hold);
        assert!(store.join().expect("the store panicked"), "{trigger}");
    });
    let m = e.migration_counts();
    assert_eq!(
        m.demotions_failed - before.demotions_failed,
        1,
        "the held demotion found its shard busy: {m:?}"
    );
    for i in 0..large_items {
        let k = large(i);
        let want = val_of(&k, LARGE_BYTES);
        let got = value(&e, k.as_bytes()).unwrap_or_else(|| panic!("{k} is gone"));
        assert!(
            got == want,
            "{k}, stored on the victim's old page, was changed: {}",
            first_difference(&got, &want)
        );
    }
    assert_eq!(value(&e, victim.as_bytes()), None, "{victim} came back");
}

/// A store's demotion that found its victim's shard busy leaves the victim as it was:
/// still in DRAM, and movable. (Had the demotion marked it `QUEUED` and left it so, the
/// DRAM maintainer would look past it forever and it could never be demoted.)
#[test]
fn a_store_demotion_that_finds_its_shard_busy_leaves_its_victim_movable() {
    const RESIDENCY_S: u32 = 10;
    let (e, clock) = engine_with(EngineConfig {
        dram_residency_max_s: RESIDENCY_S,
        dram_low_water_pct: 0,
        ..two_level()
    });
    let per_page = SLAB_PAGE_SIZE_BYTES as u32 / 52_984;
    for i in 0..2 * per_page {
        let k = small(i);
        assert!(
            stored(set(&e, k.as_bytes(), &val_of(&k, SMALL_BYTES))),
            "{k}"
        );
        assert_eq!(e.tier_of_key(k.as_bytes()), Some(TierId::Dram), "{k}");
    }
    let victim = small(0);
    let before = e.migration_counts();
    let trigger = small(500);
    std::thread::scope(|scope| {
        let pause = e.pause_migration_before_relock(victim.as_bytes(), TierId::Slow);
        let store =
            scope.spawn(|| stored(set(&e, trigger.as_bytes(), &val_of(&trigger, SMALL_BYTES))));
        assert!(
            pause.wait_until_paused(std::time::Duration::from_secs(10)),
            "the store never demoted {victim} (the DRAM LRU tail) synchronously"
        );
        let hold = e.hold_shard_of(victim.as_bytes());
        assert!(
            pause.release(),
            "the demotion gave up waiting before the release"
        );
        let mut waited = 0;
        while e.migration_counts().demotions_failed == before.demotions_failed {
            waited += 1;
            assert!(
                waited < 10_000,
                "the demotion never came back from its pause"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(hold);
        assert!(store.join().expect("the store panicked"), "{trigger}");
    });
    assert_eq!(e.tier_of_key(victim.as_bytes()), Some(TierId::Dram));
    // Idle past the residency limit: the maintainer demotes DRAM's idle items.
    clock.advance_s(RESIDENCY_S + 1);
    for _ in 0..100 {
        let work = e.lru_maintainer_tier_step(0) + e.migration_step();
        if work == 0 {
            break;
        }
    }
    assert_eq!(
        e.tier_of_key(victim.as_bytes()),
        Some(TierId::Slow),
        "the maintainer never demoted {victim}: {:?}",
        e.migration_counts()
    );
    assert_eq!(
        value(&e, victim.as_bytes()),
        Some(val_of(&victim, SMALL_BYTES))
    );
}
