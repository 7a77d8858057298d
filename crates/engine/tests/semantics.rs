//! Request semantics of the engine, as memcached 1.6 has them.

mod common;
use common::*;
use engine::*;

#[test]
fn set_get_replace_add_follow_memcached() {
    let (e, _) = engine();
    assert_eq!(get(&e, b"k"), None);
    assert!(stored(store(&e, StoreMode::Set, b"k", b"v1", 7, 0)));
    let g = get(&e, b"k").unwrap();
    assert_eq!((g.value.as_slice(), g.flags), (&b"v1"[..], 7));
    assert_eq!(
        store(&e, StoreMode::Add, b"k", b"v2", 0, 0),
        StoreOutcome::NotStored
    );
    assert_eq!(
        store(&e, StoreMode::Replace, b"missing", b"x", 0, 0),
        StoreOutcome::NotStored
    );
    assert!(stored(store(&e, StoreMode::Replace, b"k", b"v3", 1, 0)));
    assert_eq!(value(&e, b"k").unwrap(), b"v3");
    assert!(stored(store(&e, StoreMode::Add, b"new", b"n", 0, 0)));
    assert_eq!(value(&e, b"new").unwrap(), b"n");
}

#[test]
fn cas_is_unique_per_modification() {
    let (e, _) = engine();
    let StoreOutcome::Stored { cas: c1 } = set(&e, b"k", b"a") else {
        panic!()
    };
    let StoreOutcome::Stored { cas: c2 } = set(&e, b"k", b"b") else {
        panic!()
    };
    assert!(c2 > c1);
    assert_eq!(get(&e, b"k").unwrap().cas, c2);
    let mut o = StoreOptions::new(StoreMode::Set, 0, 0);
    o.compare_cas = Some(c1);
    assert_eq!(e.store(b"k", b"c", &o), StoreOutcome::Exists);
    o.compare_cas = Some(c2);
    assert!(stored(e.store(b"k", b"c", &o)));
    assert_eq!(e.store(b"nokey", b"c", &o), StoreOutcome::NotFound);
    assert_eq!(value(&e, b"k").unwrap(), b"c");
    assert_eq!(stat(&e, "cas_hits"), 1);
    assert_eq!(stat(&e, "cas_badval"), 1);
    assert_eq!(stat(&e, "cas_misses"), 1);
}

#[test]
fn cas_disabled_reports_zero() {
    let (e, _) = engine_with(EngineConfig {
        cas_enabled: false,
        ..EngineConfig::default()
    });
    assert_eq!(set(&e, b"k", b"a"), StoreOutcome::Stored { cas: 0 });
    assert_eq!(get(&e, b"k").unwrap().cas, 0);
}

#[test]
fn append_prepend_keep_flags_and_exptime() {
    let (e, clock) = engine();
    assert_eq!(
        store(&e, StoreMode::Append, b"k", b"x", 0, 0),
        StoreOutcome::NotStored
    );
    assert!(stored(store(&e, StoreMode::Set, b"k", b"mid", 5, 100)));
    assert!(stored(store(&e, StoreMode::Append, b"k", b"-end", 9, 0)));
    assert!(stored(store(&e, StoreMode::Prepend, b"k", b"start-", 9, 0)));
    let g = get(&e, b"k").unwrap();
    assert_eq!(g.value, b"start-mid-end");
    assert_eq!(g.flags, 5);
    clock.advance_s(101);
    assert_eq!(get(&e, b"k"), None, "append kept the original exptime");
}

#[test]
fn append_beyond_item_size_max_is_not_stored() {
    let (e, _) = engine_with(EngineConfig {
        item_size_max_bytes: 2048,
        slab_chunk_max_bytes: 1024,
        ..mb(8)
    });
    assert!(stored(set(&e, b"d", &[b'x'; 1000])));
    assert_eq!(
        store(&e, StoreMode::Append, b"d", &[b'y'; 1000], 0, 0),
        StoreOutcome::NotStored
    );
    assert_eq!(value(&e, b"d").unwrap(), vec![b'x'; 1000]);
}

#[test]
fn too_large_set_unlinks_old_value() {
    let (e, _) = engine();
    assert!(stored(set(&e, b"k", b"old")));
    assert!(!e.item_fits(1, 1024 * 1024));
    assert_eq!(
        set(&e, b"k", &vec![0u8; 1024 * 1024]),
        StoreOutcome::TooLarge
    );
    assert_eq!(get(&e, b"k"), None);
    assert!(stored(set(&e, b"a", b"old")));
    assert_eq!(
        store(&e, StoreMode::Add, b"a", &vec![0u8; 1024 * 1024], 0, 0),
        StoreOutcome::TooLarge
    );
    assert_eq!(value(&e, b"a").unwrap(), b"old");
    // A `cas` that can never fit leaves the old value (memcached unlinks only for set).
    let mut cas_opts = StoreOptions::new(StoreMode::Set, 0, 0);
    cas_opts.compare_cas = Some(1);
    assert_eq!(
        e.store(b"a", &vec![0u8; 1024 * 1024], &cas_opts),
        StoreOutcome::TooLarge
    );
    assert_eq!(value(&e, b"a").unwrap(), b"old");
    assert_eq!(stat(&e, "store_too_large"), 3);
    // Refused before the payload was read: counted, unlinked only when asked, and
    // never counted as a delete.
    e.refuse_too_large(b"a", false);
    assert_eq!(value(&e, b"a").unwrap(), b"old");
    e.refuse_too_large(b"a", true);
    assert_eq!(get(&e, b"a"), None);
    e.refuse_too_large(b"missing", true);
    assert_eq!(stat(&e, "store_too_large"), 6);
    assert_eq!(stat(&e, "delete_hits"), 0);
    assert_eq!(stat(&e, "delete_misses"), 0);
    assert!(stored(set(&e, b"u", b"v")));
    assert!(e.unlink_key(b"u"));
    assert!(!e.unlink_key(b"u"));
    assert_eq!(get(&e, b"u"), None);
    assert_eq!(stat(&e, "delete_hits"), 0);
}

#[test]
fn exptime_relative_absolute_and_negative() {
    let (e, clock) = engine();
    assert!(stored(store(&e, StoreMode::Set, b"rel", b"v", 0, 10)));
    let abs = START_UNIX_S as i64 + 2 + 20;
    assert!(stored(store(&e, StoreMode::Set, b"abs", b"v", 0, abs)));
    assert!(stored(store(
        &e,
        StoreMode::Set,
        b"past",
        b"v",
        0,
        START_UNIX_S as i64 - 5
    )));
    assert!(stored(store(&e, StoreMode::Set, b"neg", b"v", 0, -1)));
    assert!(stored(store(&e, StoreMode::Set, b"never", b"v", 0, 0)));
    assert_eq!(get(&e, b"past"), None);
    assert_eq!(get(&e, b"neg"), None);
    clock.advance_s(9);
    assert!(get(&e, b"rel").is_some());
    clock.advance_s(1);
    assert_eq!(get(&e, b"rel"), None);
    assert!(get(&e, b"abs").is_some());
    clock.advance_s(10);
    assert_eq!(get(&e, b"abs"), None);
    clock.advance_s(1_000_000);
    assert!(get(&e, b"never").is_some());
    assert_eq!(stat(&e, "get_expired"), 2);
}

#[test]
fn negative_exptime_checks_mode_then_removes() {
    let (e, _) = engine();
    assert!(stored(set(&e, b"e", b"1")));
    assert_eq!(
        store(&e, StoreMode::Add, b"e", b"2", 0, -1),
        StoreOutcome::NotStored
    );
    assert_eq!(
        store(&e, StoreMode::Replace, b"zz", b"2", 0, -1),
        StoreOutcome::NotStored
    );
    assert!(stored(store(&e, StoreMode::Set, b"e", b"3", 0, -1)));
    assert_eq!(get(&e, b"e"), None);
}

#[test]
fn touch_and_gat() {
    let (e, clock) = engine();
    assert_eq!(e.touch(b"k", 10), TouchOutcome::NotFound);
    assert!(stored(store(&e, StoreMode::Set, b"k", b"v", 0, 5)));
    assert_eq!(e.touch(b"k", 100), TouchOutcome::Touched);
    clock.advance_s(50);
    let opts = ReadOptions {
        touch_exptime: Some(10),
        is_touch_command: true,
        ..Default::default()
    };
    let ttl = e.read(b"k", &opts, |v| v.ttl_remaining_s);
    assert!(matches!(ttl, ReadOutcome::Hit(Some(10))));
    clock.advance_s(10);
    assert_eq!(get(&e, b"k"), None);
    // gat with a negative time returns the item once, then it is gone (memcached).
    assert!(stored(set(&e, b"g", b"hi")));
    let opts = ReadOptions {
        touch_exptime: Some(-1),
        is_touch_command: true,
        ..Default::default()
    };
    assert!(matches!(e.read(b"g", &opts, |v| v.value.to_vec()), ReadOutcome::Hit(v) if v == b"hi"));
    assert_eq!(get(&e, b"g"), None);
    assert!(stored(set(&e, b"t", b"v")));
    assert_eq!(e.touch(b"t", -1), TouchOutcome::Touched);
    assert_eq!(get(&e, b"t"), None);
    assert_eq!(stat(&e, "cmd_touch"), 5);
    assert_eq!(stat(&e, "touch_hits"), 4);
    assert_eq!(stat(&e, "touch_misses"), 1);
    // memcached counts gat/gats and binary touch/gat as touches only, never as gets.
    let gat = ReadOptions {
        touch_exptime: Some(10),
        is_touch_command: true,
        ..Default::default()
    };
    e.reset_stats();
    assert!(stored(set(&e, b"h", b"v")));
    assert!(matches!(e.read(b"h", &gat, |_| ()), ReadOutcome::Hit(())));
    assert!(matches!(
        e.read(b"nope", &gat, |_| ()),
        ReadOutcome::Miss { .. }
    ));
    assert_eq!(stat(&e, "cmd_touch"), 2);
    assert_eq!(stat(&e, "touch_hits"), 1);
    assert_eq!(stat(&e, "touch_misses"), 1);
    assert_eq!(stat(&e, "cmd_get"), 0);
    assert_eq!(stat(&e, "get_hits"), 0);
    assert_eq!(stat(&e, "get_misses"), 0);
    // `mg T` counts a hit as a touch but a miss as a get miss (memcached 1.6.18).
    let mg_touch = ReadOptions {
        miss_counts_as_get: true,
        ..gat
    };
    assert!(matches!(
        e.read(b"h", &mg_touch, |_| ()),
        ReadOutcome::Hit(())
    ));
    assert!(matches!(
        e.read(b"nope", &mg_touch, |_| ()),
        ReadOutcome::Miss { .. }
    ));
    assert_eq!(stat(&e, "cmd_touch"), 3);
    assert_eq!(stat(&e, "touch_hits"), 2);
    assert_eq!(stat(&e, "touch_misses"), 1);
    assert_eq!(stat(&e, "cmd_get"), 1);
    assert_eq!(stat(&e, "get_misses"), 1);
}

#[test]
fn incr_decr_follow_memcached() {
    let (e, _) = engine();
    assert_eq!(
        e.arith(b"n", &ArithOptions::new(true, 1)),
        ArithOutcome::NotFound
    );
    assert!(stored(set(&e, b"n", b"18446744073709551615")));
    assert!(matches!(
        e.arith(b"n", &ArithOptions::new(true, 2)),
        ArithOutcome::Value { value: 1, .. }
    ));
    // The shorter result is written in place, padded with spaces.
    assert_eq!(value(&e, b"n").unwrap(), b"1                   ");
    assert!(matches!(
        e.arith(b"n", &ArithOptions::new(false, 5)),
        ArithOutcome::Value { value: 0, .. }
    ));
    assert!(stored(set(&e, b"c", b"5  ")));
    assert!(matches!(
        e.arith(b"c", &ArithOptions::new(true, 1)),
        ArithOutcome::Value { value: 6, .. }
    ));
    assert_eq!(value(&e, b"c").unwrap(), b"6  ");
    assert!(matches!(
        e.arith(b"c", &ArithOptions::new(true, 1000)),
        ArithOutcome::Value { value: 1006, .. }
    ));
    assert_eq!(value(&e, b"c").unwrap(), b"1006");
    assert!(stored(set(&e, b"d", b"100")));
    assert!(matches!(
        e.arith(b"d", &ArithOptions::new(false, 1)),
        ArithOutcome::Value { value: 99, .. }
    ));
    assert_eq!(value(&e, b"d").unwrap(), b"99 ");
    assert!(stored(set(&e, b"x", b"12a")));
    assert_eq!(
        e.arith(b"x", &ArithOptions::new(true, 1)),
        ArithOutcome::NonNumeric
    );
    assert!(stored(set(&e, b"empty", b"")));
    assert_eq!(
        e.arith(b"empty", &ArithOptions::new(true, 1)),
        ArithOutcome::NonNumeric
    );
    let ArithOutcome::Value { cas: c1, .. } = e.arith(b"c", &ArithOptions::new(true, 1)) else {
        panic!()
    };
    assert_eq!(get(&e, b"c").unwrap().cas, c1);
    assert_eq!(stat(&e, "incr_hits"), 4);
    assert_eq!(stat(&e, "incr_misses"), 1);
    assert_eq!(stat(&e, "decr_hits"), 2);
}

#[test]
fn arith_vivify_and_cas() {
    let (e, _) = engine();
    let mut o = ArithOptions::new(true, 5);
    o.vivify = Some((10, 0));
    assert!(matches!(
        e.arith(b"v", &o),
        ArithOutcome::Value { value: 10, .. }
    ));
    assert_eq!(value(&e, b"v").unwrap(), b"10");
    let mut o = ArithOptions::new(true, 1);
    o.compare_cas = Some(999_999);
    assert_eq!(e.arith(b"v", &o), ArithOutcome::Exists);
}

#[test]
fn delete_and_cas_delete() {
    let (e, _) = engine();
    assert_eq!(
        e.delete(b"k", &DeleteOptions::default()),
        DeleteOutcome::NotFound
    );
    let StoreOutcome::Stored { cas } = set(&e, b"k", b"v") else {
        panic!()
    };
    let bad = DeleteOptions {
        compare_cas: Some(cas + 1),
        ..Default::default()
    };
    assert_eq!(e.delete(b"k", &bad), DeleteOutcome::Exists);
    let good = DeleteOptions {
        compare_cas: Some(cas),
        ..Default::default()
    };
    assert_eq!(e.delete(b"k", &good), DeleteOutcome::Deleted);
    assert_eq!(get(&e, b"k"), None);
    assert_eq!(stat(&e, "delete_hits"), 1);
    assert_eq!(stat(&e, "delete_misses"), 1);
}

#[test]
fn meta_stale_and_win_tokens() {
    let (e, _) = engine();
    let StoreOutcome::Stored { cas } = set(&e, b"f", b"1") else {
        panic!()
    };
    let inv = DeleteOptions {
        invalidate: true,
        ..Default::default()
    };
    assert_eq!(e.delete(b"f", &inv), DeleteOutcome::Deleted);
    // A plain read (get, me) sees the item stale but does not take the token.
    let plain = e.read(b"f", &ReadOptions::default(), |v| {
        (v.stale, v.win, v.win_token_already_sent)
    });
    assert!(matches!(plain, ReadOutcome::Hit((true, false, false))));
    let claim = ReadOptions {
        claim_recache_token: true,
        ..Default::default()
    };
    let flags = |e: &Engine| match e.read(b"f", &claim, |v| {
        (v.stale, v.win, v.win_token_already_sent, v.cas)
    }) {
        ReadOutcome::Hit(x) => x,
        _ => panic!("miss"),
    };
    let (stale, win, z, new_cas) = flags(&e);
    assert!(stale && win && !z);
    assert_eq!(new_cas, cas + 1, "md I bumps the CAS");
    let (stale, win, z, _) = flags(&e);
    assert!(stale && !win && z);
    // ms I with an older CAS stores but keeps the item stale, and keeps the token
    // already handed out (memcached's do_store_item): the next reader sees Z, not W.
    let mut o = StoreOptions::new(StoreMode::Set, 0, 0);
    o.compare_cas = Some(cas);
    o.invalidate = true;
    assert!(stored(e.store(b"f", b"2", &o)));
    let (stale, win, z, _) = flags(&e);
    assert!(stale && !win && z);
    // ... and the old item's expiry, whatever the request's (it does not raise the TTL).
    let StoreOutcome::Stored { cas: g_cas } = store(&e, StoreMode::Set, b"g", b"1", 0, 100) else {
        panic!()
    };
    assert!(stored(store(&e, StoreMode::Set, b"g", b"2", 0, 100)));
    let mut o = StoreOptions::new(StoreMode::Set, 0, 5000);
    o.compare_cas = Some(g_cas);
    o.invalidate = true;
    assert!(stored(e.store(b"g", b"3", &o)));
    assert!(matches!(
        e.read(b"g", &ReadOptions::default(), |v| (
            v.stale,
            v.ttl_remaining_s
        )),
        ReadOutcome::Hit((true, Some(100)))
    ));
    // recache: the first reader below the TTL threshold wins.
    assert!(stored(store(&e, StoreMode::Set, b"r", b"x", 0, 30)));
    let no_claim = ReadOptions {
        recache_below_s: Some(60),
        ..Default::default()
    };
    assert!(matches!(
        e.read(b"r", &no_claim, |v| v.win),
        ReadOutcome::Hit(false)
    ));
    let opts = ReadOptions {
        recache_below_s: Some(60),
        claim_recache_token: true,
        ..Default::default()
    };
    let r = |e: &Engine| match e.read(b"r", &opts, |v| (v.win, v.win_token_already_sent)) {
        ReadOutcome::Hit(x) => x,
        _ => panic!(),
    };
    assert_eq!(r(&e), (true, false));
    assert_eq!(r(&e), (false, true));
}

#[test]
fn meta_vivify_on_miss() {
    let (e, _) = engine();
    let opts = ReadOptions {
        vivify_exptime: Some(30),
        ..Default::default()
    };
    assert!(matches!(
        e.read(b"v", &opts, |_| ()),
        ReadOutcome::Miss { vivified: true }
    ));
    match e.read(b"v", &opts, |v| (v.value.len(), v.win_token_already_sent)) {
        ReadOutcome::Hit((0, true)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn delete_remove_value_only_keeps_item() {
    let (e, _) = engine();
    assert!(stored(store(&e, StoreMode::Set, b"k", b"value", 3, 0)));
    let o = DeleteOptions {
        remove_value_only: true,
        ..Default::default()
    };
    assert_eq!(e.delete(b"k", &o), DeleteOutcome::Deleted);
    let g = get(&e, b"k").unwrap();
    assert_eq!((g.value.len(), g.flags), (0, 0));
}

#[test]
fn flush_all_now_and_delayed() {
    let (e, clock) = engine();
    let StoreOutcome::Stored { cas: before } = set(&e, b"a", b"1") else {
        panic!("not stored")
    };
    e.flush_all(0);
    assert_eq!(get(&e, b"a"), None);
    let after = set(&e, b"b", b"2");
    // An immediate flush takes one CAS value, as memcached's `get_cas_id` does.
    assert_eq!(after, StoreOutcome::Stored { cas: before + 2 });
    assert!(stored(after), "a store right after the flush survives it");
    assert_eq!(value(&e, b"b").unwrap(), b"2");
    e.flush_all(10);
    // A delayed flush takes none.
    assert_eq!(
        set(&e, b"b", b"2"),
        StoreOutcome::Stored { cas: before + 3 }
    );
    clock.advance_s(9);
    assert_eq!(value(&e, b"b").unwrap(), b"2");
    clock.advance_s(1);
    assert_eq!(get(&e, b"b"), None);
    assert!(stored(set(&e, b"c", b"3")));
    assert_eq!(value(&e, b"c").unwrap(), b"3");
    assert_eq!(stat(&e, "cmd_flush"), 2);
    assert_eq!(stat(&e, "get_flushed"), 2);
}

#[test]
fn read_statistics_and_view() {
    let (e, clock) = engine();
    assert!(stored(set(&e, b"k", b"v")));
    clock.advance_s(3);
    let first = e.read(b"k", &ReadOptions::default(), |v| {
        (
            v.fetched_before,
            v.last_access_ago_s,
            v.total_size_bytes,
            v.tier,
        )
    });
    assert!(matches!(
        first,
        ReadOutcome::Hit((false, 3, 58, TierId::Dram))
    ));
    let second = e.read(b"k", &ReadOptions::default(), |v| v.fetched_before);
    assert!(matches!(second, ReadOutcome::Hit(true)));
    let _ = get(&e, b"nope");
    let quiet = ReadOptions {
        no_stats: true,
        ..Default::default()
    };
    let _ = e.read(b"k", &quiet, |_| ());
    assert_eq!(stat(&e, "cmd_get"), 3);
    assert_eq!(stat(&e, "get_hits"), 2);
    assert_eq!(stat(&e, "get_misses"), 1);
    assert_eq!(stat(&e, "curr_items"), 1);
    assert_eq!(stat(&e, "total_items"), 1);
    assert_eq!(stat(&e, "bytes"), 58);
    e.reset_stats();
    assert_eq!(stat(&e, "cmd_get"), 0);
    assert_eq!(stat(&e, "curr_items"), 1);
}

#[test]
fn large_items_are_stored_beyond_the_largest_chunk() {
    let (e, _) = engine_with(mb(8));
    let big: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
    assert!(stored(set(&e, b"big", &big)));
    assert_eq!(value(&e, b"big").unwrap(), big);
    assert!(stored(store(&e, StoreMode::Append, b"big", b"tail", 0, 0)));
    assert_eq!(value(&e, b"big").unwrap().len(), 900_004);
    // -I 4m: a 3 MB item takes a run of three pages.
    let (e, _) = engine_with(EngineConfig {
        item_size_max_bytes: 4 << 20,
        ..mb(16)
    });
    let huge: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    assert!(stored(set(&e, b"huge", &huge)));
    assert_eq!(value(&e, b"huge").unwrap(), huge);
    assert_eq!(
        e.delete(b"huge", &DeleteOptions::default()),
        DeleteOutcome::Deleted
    );
    assert_eq!(e.pages_in_use(), 0, "large runs go back to the pool");
}

#[test]
fn stats_groups_use_memcached_names() {
    let (e, _) = engine();
    assert!(stored(set(&e, b"k", b"v")));
    let general = stats(&e);
    for name in [
        "curr_items",
        "total_items",
        "bytes",
        "evictions",
        "reclaimed",
        "store_too_large",
        "store_no_memory",
        "lru_crawler_starts",
        "direct_reclaims",
        "crawler_items_checked",
        "crawler_reclaimed",
        "moves_to_cold",
        "moves_to_warm",
        "moves_within_lru",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "cas_badval",
        "get_hits",
        "get_misses",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "touch_hits",
        "touch_misses",
        "limit_maxbytes",
        "hash_power_level",
        "hash_bytes",
        "hash_is_expanding",
        "slabs_moved",
        "lru_maintainer_juggles",
        "expired_unfetched",
        "evicted_unfetched",
        "evicted_active",
        "get_expired",
        "get_flushed",
    ] {
        assert!(general.contains_key(name), "missing {name}");
    }
    let items = stats_of(|emit| e.stats_items(emit));
    assert_eq!(items["items:1:number"], "1");
    assert_eq!(items["items:1:number_hot"], "1");
    assert!(items.contains_key("items:1:hits_to_temp"));
    let slabs = stats_of(|emit| e.stats_slabs(emit));
    assert_eq!(slabs["1:chunk_size"], "96");
    assert_eq!(slabs["1:chunks_per_page"], "10922");
    assert_eq!(slabs["1:used_chunks"], "1");
    assert_eq!(slabs["1:cmd_set"], "1");
    assert_eq!(slabs["active_slabs"], "1");
    assert_eq!(slabs["total_malloced"], "1048576");
    let sizes = stats_of(|emit| e.stats_sizes(emit));
    assert_eq!(sizes["sizes_status"], "disabled");
    let settings = stats_of(|emit| e.stats_settings(emit));
    assert_eq!(settings["growth_factor"], "1.25");
    assert_eq!(settings["hot_lru_pct"], "20");
    assert_eq!(settings["evictions"], "on");
    assert_eq!(settings["cas_enabled"], "yes");
    assert_eq!(settings["policy"], "dual-lru");
    assert_eq!(settings["mq_queues"], "5");
    assert_eq!(settings["benefit_reassign"], "yes");
}

/// A key of the longest length memcached allows (250 bytes) is stored, found and
/// deleted like any other, in either tier.
#[test]
fn keys_of_250_bytes_work_in_both_tiers() {
    let (e, _clock) = engine_with(EngineConfig {
        memory_limit_bytes: 0,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: 4 * 1024 * 1024,
            backing: tier::RegionBacking::Anonymous,
            cost: tier::CostModel::NONE,
        }),
        ..EngineConfig::default()
    });
    let (d, _clock) = engine();
    for engine in [&e, &d] {
        let key = vec![b'k'; KEY_LENGTH_MAX_BYTES];
        assert!(stored(set(engine, &key, b"long-keyed value")));
        assert_eq!(value(engine, &key), Some(b"long-keyed value".to_vec()));
        assert_eq!(
            engine.delete(&key, &DeleteOptions::default()),
            DeleteOutcome::Deleted
        );
        assert_eq!(value(engine, &key), None);
    }
}

/// meta `b`: an item remembers that its key came base64-encoded (memcached's
/// ITEM_KEY_BINARY), so `mg k` echoes it encoded whatever the reader sends; a whole store
/// without `b` forgets it, an append and a growing increment keep it.
#[test]
fn an_item_remembers_a_base64_key_until_a_plain_store_replaces_it() {
    let (e, _) = engine();
    let key_binary =
        |e: &Engine, key: &[u8]| match e.read(key, &ReadOptions::default(), |v| v.key_binary) {
            ReadOutcome::Hit(b) => b,
            ReadOutcome::Miss { .. } => panic!("miss"),
        };
    let mut o = StoreOptions::new(StoreMode::Set, 0, 0);
    o.key_binary = true;
    assert!(stored(e.store(b"k", b"9", &o)));
    assert!(key_binary(&e, b"k"));
    assert!(stored(store(&e, StoreMode::Append, b"k", b"9", 0, 0)));
    assert!(key_binary(&e, b"k"), "an append keeps it");
    // 99 -> 100 needs a longer item: a new one, which keeps it too.
    assert!(matches!(
        e.arith(b"k", &ArithOptions::new(true, 1)),
        ArithOutcome::Value { value: 100, .. }
    ));
    assert!(key_binary(&e, b"k"), "a growing increment keeps it");
    assert!(stored(set(&e, b"k", b"x")));
    assert!(!key_binary(&e, b"k"), "a plain set forgets it");
    let mut vivify = ArithOptions::new(true, 1);
    vivify.vivify = Some((5, 0));
    vivify.key_binary = true;
    assert!(matches!(
        e.arith(b"n", &vivify),
        ArithOutcome::Value { value: 5, .. }
    ));
    assert!(key_binary(&e, b"n"), "ma b N creates it so");
}
