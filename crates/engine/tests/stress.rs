//! Concurrency: several threads on overlapping keys with the background threads
//! running. Values carry a self-checking pattern, so a torn or foreign value is caught.

mod common;
use common::*;
use engine::*;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const KEYS: u32 = 30_000;

/// A value for `key_id`: blocks of (key_id, seq) as 8 bytes each.
fn make_value(key_id: u32, seq: u32, blocks: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(blocks * 8);
    for _ in 0..blocks {
        v.extend_from_slice(&key_id.to_le_bytes());
        v.extend_from_slice(&seq.to_le_bytes());
    }
    v
}

fn check_value(key_id: u32, v: &[u8]) {
    assert_eq!(v.len() % 8, 0, "torn length for key {key_id}");
    for block in v.chunks(8) {
        let owner = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        assert_eq!(owner, key_id, "key {key_id} returned another key's bytes");
    }
}

#[test]
fn concurrent_mixed_operations_keep_values_whole_and_memory_bounded() {
    let clock = SystemClock::new();
    let engine = Engine::new(mb(24), clock).unwrap();
    engine.start_background();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let e = Arc::clone(&engine);
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for seq in 0..40_000u32 {
                    let key_id = rng.gen_range(0..KEYS);
                    let key = format!("key:{key_id}");
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let blocks = rng.gen_range(1..300);
                            match set(&e, key.as_bytes(), &make_value(key_id, seq, blocks)) {
                                StoreOutcome::Stored { .. } => {}
                                // Possible when every page is busy at once; counted below.
                                StoreOutcome::OutOfMemory => {}
                                other => panic!("{other:?}"),
                            }
                        }
                        4..=6 => {
                            let _ = e.read(key.as_bytes(), &ReadOptions::default(), |v| {
                                check_value(key_id, v.value)
                            });
                        }
                        7 => {
                            let _ = store(
                                &e,
                                StoreMode::Append,
                                key.as_bytes(),
                                &make_value(key_id, seq, 1),
                                0,
                                0,
                            );
                        }
                        8 => {
                            let _ = e.delete(key.as_bytes(), &DeleteOptions::default());
                        }
                        _ => {
                            let n = format!("num:{}", key_id % 16);
                            if let ArithOutcome::NotFound =
                                e.arith(n.as_bytes(), &ArithOptions::new(true, 1))
                            {
                                let _ = store(&e, StoreMode::Add, n.as_bytes(), b"0", 0, 0);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    engine.stop_background();
    assert!(engine.pages_in_use() <= 24);
    let mut found = 0;
    for key_id in 0..KEYS {
        if let Some(v) = value(&engine, format!("key:{key_id}").as_bytes()) {
            check_value(key_id, &v);
            found += 1;
        }
    }
    let nums = (0..16)
        .filter(|i| get(&engine, format!("num:{i}").as_bytes()).is_some())
        .count();
    assert_eq!(stat(&engine, "curr_items"), found + nums as u64);
    assert!(found > 0);
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
