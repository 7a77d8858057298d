//! Concurrency on one tier: several threads on overlapping keys with the background
//! threads running and more data than memory, so items are evicted all along. Values
//! are self-checking (every 32-byte block names its key, version and place, see
//! `common`), so a torn, foreign, cut or mixed value is caught; appends must appear in
//! the order each thread made them; counters must count every increment exactly.

mod common;
use common::*;
use engine::*;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const KEYS: u32 = 30_000;
const HOT_KEYS: u32 = 32;
const THREADS: u64 = 4;
const OPS_PER_THREAD: u32 = 100_000;
/// A set writes 1 to this many blocks (up to ~2.4 KB: 30 000 keys are more than the
/// 24 MiB of memory).
const SET_BLOCKS_MAX: u32 = 75;
const COUNTERS: u32 = 16;
/// A counter reads `epoch * EPOCH_STEP + increments`: each creation of a counter (an
/// `add` after a miss, at the start or after an eviction) takes a new epoch, so every
/// increment's result names the copy of the counter it was applied to.
const EPOCH_STEP: u64 = 1_000_000_000;
/// Marks the version of an appended write.
const APPEND: u64 = 1 << 63;

/// A write's version: unique over the run, naming the thread that made it and when.
fn version(thread: u64, seq: u32) -> u64 {
    (thread + 1) << 32 | u64::from(seq)
}

fn writer_of(version: u64) -> u64 {
    ((version & !APPEND) >> 32) - 1
}

/// Checks a value of key `key_id`: whole writes of this key, a set first, then one-block
/// appends, each thread's appends in the order that thread made them.
fn check_value(key_id: u32, v: &[u8]) -> Result<(), String> {
    let runs = parse_runs(key_id, v)?;
    let (set, appends) = runs
        .split_first()
        .ok_or_else(|| format!("key {key_id}: empty value"))?;
    if set.version & APPEND != 0 {
        return Err(format!("key {key_id}: starts with an append ({set:?})"));
    }
    let mut last_seq_of: HashMap<u64, u64> = HashMap::new();
    for a in appends {
        if a.version & APPEND == 0 || a.blocks != 1 {
            return Err(format!(
                "key {key_id}: a second set inside the value ({a:?})"
            ));
        }
        let seq = a.version & 0xFFFF_FFFF;
        if let Some(previous) = last_seq_of.insert(writer_of(a.version), seq) {
            if previous >= seq {
                return Err(format!(
                    "key {key_id}: thread {}'s appends out of order ({previous} then {seq})",
                    writer_of(a.version)
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn the_value_checker_catches_torn_foreign_cut_and_reordered_values() {
    let a = write_bytes(7, version(0, 1), 40);
    let b = write_bytes(7, version(1, 2), 40);
    let short = write_bytes(7, version(2, 3), 30);
    assert_eq!(check_value(7, &a), Ok(()));
    // A read that copied the start of one version and the rest of another, cut at any
    // byte (a cut inside the first bytes, which both versions share, is simply `b`).
    for (first, second) in [(&a, &b), (&b, &a), (&a, &short), (&short, &a)] {
        for cut in 1..first.len().min(second.len()) {
            let mut torn = first[..cut].to_vec();
            torn.extend_from_slice(&second[cut..]);
            if torn != *first && torn != *second {
                assert!(check_value(7, &torn).is_err(), "torn at byte {cut}");
            }
        }
    }
    assert!(check_value(8, &a).is_err(), "another key's value");
    for len in 0..a.len() {
        assert!(check_value(7, &a[..len]).is_err(), "cut to {len} bytes");
    }
    let mut stretched = a.clone();
    stretched.extend_from_slice(&[0; BLOCK_BYTES]);
    assert!(check_value(7, &stretched).is_err(), "zero block appended");
    let append = |thread, seq| write_bytes(7, APPEND | version(thread, seq), 1);
    let mut appended = a.clone();
    for part in [append(0, 5), append(1, 2), append(0, 9)] {
        appended.extend_from_slice(&part);
    }
    assert_eq!(check_value(7, &appended), Ok(()));
    let mut reordered = a.clone();
    for part in [append(0, 9), append(1, 2), append(0, 5)] {
        reordered.extend_from_slice(&part);
    }
    assert!(check_value(7, &reordered).is_err(), "appends out of order");
    let mut twice = a.clone();
    twice.extend_from_slice(&append(0, 5));
    twice.extend_from_slice(&append(0, 5));
    assert!(check_value(7, &twice).is_err(), "an append applied twice");
    let mut two_sets = a.clone();
    two_sets.extend_from_slice(&b);
    assert!(check_value(7, &two_sets).is_err(), "two sets in one value");
}

#[test]
fn concurrent_mixed_operations_keep_values_whole_and_counters_exact() {
    let clock = SystemClock::new();
    let engine = Engine::new(mb(24), clock).unwrap();
    engine.start_background();
    let next_epoch = Arc::new(AtomicU64::new(1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let e = Arc::clone(&engine);
            let next_epoch = Arc::clone(&next_epoch);
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                // (counter, value) of every successful increment.
                let mut increments: Vec<(u32, u64)> = Vec::new();
                for seq in 0..OPS_PER_THREAD {
                    // Half of the operations on a few hot keys: threads meet on
                    // the same items (a read while its item is replaced and its chunk
                    // reused) instead of spreading over the whole key space.
                    let key_id = if rng.gen_bool(0.5) {
                        rng.gen_range(0..HOT_KEYS)
                    } else {
                        rng.gen_range(0..KEYS)
                    };
                    let key = format!("key:{key_id}");
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let blocks = rng.gen_range(1..=SET_BLOCKS_MAX);
                            let v = write_bytes(key_id, version(t, seq), blocks);
                            match set(&e, key.as_bytes(), &v) {
                                StoreOutcome::Stored { .. } => {}
                                // Possible when every page is busy at once; counted below.
                                StoreOutcome::OutOfMemory => {}
                                other => panic!("{other:?}"),
                            }
                        }
                        4..=6 => {
                            // Copied out under the shard lock, checked after.
                            if let Some(v) = value(&e, key.as_bytes()) {
                                if let Err(why) = check_value(key_id, &v) {
                                    panic!("read {key}: {why}");
                                }
                            }
                        }
                        7 => {
                            let part = write_bytes(key_id, APPEND | version(t, seq), 1);
                            let _ = store(&e, StoreMode::Append, key.as_bytes(), &part, 0, 0);
                        }
                        8 => {
                            let _ = e.delete(key.as_bytes(), &DeleteOptions::default());
                        }
                        _ => {
                            let counter = key_id % COUNTERS;
                            let n = format!("num:{counter}");
                            match e.arith(n.as_bytes(), &ArithOptions::new(true, 1)) {
                                ArithOutcome::Value { value, .. } => {
                                    increments.push((counter, value))
                                }
                                ArithOutcome::NotFound => {
                                    let epoch = next_epoch.fetch_add(1, Ordering::Relaxed);
                                    let start = (epoch * EPOCH_STEP).to_string();
                                    let _ = store(
                                        &e,
                                        StoreMode::Add,
                                        n.as_bytes(),
                                        start.as_bytes(),
                                        0,
                                        0,
                                    );
                                }
                                other => panic!("incr {n}: {other:?}"),
                            }
                        }
                    }
                }
                increments
            })
        })
        .collect();
    let mut increments: HashMap<(u32, u64), Vec<u64>> = HashMap::new();
    for t in threads {
        for (counter, value) in t.join().unwrap() {
            let (epoch, count) = (value / EPOCH_STEP, value % EPOCH_STEP);
            increments.entry((counter, epoch)).or_default().push(count);
        }
    }
    engine.stop_background();

    let mut found = 0u64;
    let mut item_bytes = 0u64;
    let item_size = |key: &str, v: &[u8]| (56 + key.len() + v.len()) as u64;
    for key_id in 0..KEYS {
        let key = format!("key:{key_id}");
        if let Some(v) = value(&engine, key.as_bytes()) {
            if let Err(why) = check_value(key_id, &v) {
                panic!("final read {key}: {why}");
            }
            found += 1;
            item_bytes += item_size(&key, &v);
        }
    }
    assert!(found > 0);
    // Increments of one copy of a counter are serialized by its lock: they returned
    // exactly 1, 2, ..., n, each once (a lost or doubled increment breaks this).
    for ((counter, epoch), counts) in &mut increments {
        counts.sort_unstable();
        if let Some((i, &count)) = (1..).zip(counts.iter()).find(|&(i, &c)| c != i) {
            panic!(
                "num:{counter} epoch {epoch}: of {} increments, the {i}th smallest \
                 returned {count} (an increment lost or applied twice)",
                counts.len()
            );
        }
    }
    let mut counters_found = 0u64;
    for counter in 0..COUNTERS {
        let n = format!("num:{counter}");
        let Some(v) = value(&engine, n.as_bytes()) else {
            continue;
        };
        counters_found += 1;
        item_bytes += item_size(&n, &v);
        let value: u64 = std::str::from_utf8(&v)
            .ok()
            .and_then(|s| s.trim_end().parse().ok())
            .unwrap_or_else(|| panic!("{n}: not a number"));
        let (epoch, count) = (value / EPOCH_STEP, value % EPOCH_STEP);
        let applied = increments.get(&(counter, epoch)).map_or(0, |c| c.len()) as u64;
        assert_eq!(count, applied, "{n}: epoch {epoch}");
    }
    assert!(counters_found > 0);
    // The counts match what is readable: no item is linked but unreachable, or counted
    // twice, and the byte count is the sum of the live items.
    assert_eq!(stat(&engine, "curr_items"), found + counters_found);
    assert_eq!(stat(&engine, "bytes"), item_bytes);
    // The data set is larger than memory: the bound was reached and items evicted.
    assert!(stat(&engine, "evictions") > 0);
    let sets = stat(&engine, "cmd_set");
    let oom = stat(&engine, "store_no_memory");
    assert!(oom * 200 < sets, "{oom} of {sets} stores ran out of memory");
}

#[test]
fn concurrent_incr_counts_every_increment() {
    let (engine, _) = engine();
    assert!(stored(set(&engine, b"ctr", b"0")));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let e = Arc::clone(&engine);
            std::thread::spawn(move || {
                for _ in 0..5000 {
                    assert!(matches!(
                        e.arith(b"ctr", &ArithOptions::new(true, 1)),
                        ArithOutcome::Value { .. }
                    ));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(value(&engine, b"ctr").unwrap(), b"20000");
}
