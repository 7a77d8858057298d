//! Dual-LRU under concurrency: worker threads hammer overlapping keys with set, get,
//! delete, append and incr while both Move queues are busy (a DRAM tier of one page, a
//! short Move-queue bound, the per-tier maintainers and migration threads running, and
//! one more thread driving migrations). Every operation is stamped with a logical
//! start and end time, and a checker verifies afterwards that every value read was
//! written by the latest or a concurrent operation on that key: never torn, never
//! another key's, never an overwritten or deleted value (a resurrection), and that no
//! item was lost.

mod common;
use common::*;
use engine::*;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const MIB: usize = 1024 * 1024;
const STRING_KEYS: u32 = 1500;
const COUNTER_KEYS: u32 = 100;
const THREADS: u64 = 4;
const OPS_PER_THREAD: u32 = 15_000;
const PAD_BYTES: usize = 1000;
/// Counter values are `base + increments`, bases are multiples of this.
const COUNTER_BASE_STEP: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A set that stored value `tag`.
    Set(u64),
    /// A set that failed to allocate: memcached removes the old value.
    FailedSet,
    Delete,
    Append(u64),
    Incr,
    /// A read and what it saw (the base tag, or `None` for a miss).
    Get(Option<u64>),
}

#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    start: u64,
    end: u64,
    /// For reads of counters: the increments seen; for string reads: appends seen.
    extra: u64,
}

fn string_value(tag: u64) -> Vec<u8> {
    let mut v = format!("S{tag}|").into_bytes();
    v.resize(PAD_BYTES, b'.');
    v
}

/// Parses `S<tag>|....[A<tag>|]*`; panics on anything else (torn or foreign bytes).
fn parse_string(key: &str, v: &[u8]) -> (u64, Vec<u64>) {
    let text = std::str::from_utf8(v).unwrap_or_else(|_| panic!("{key}: not utf-8"));
    let rest = text
        .strip_prefix('S')
        .unwrap_or_else(|| panic!("{key}: torn value {text:.40}"));
    let (tag, rest) = rest.split_once('|').expect("base tag");
    let tag: u64 = tag.parse().expect("base tag digits");
    assert!(
        rest.len() >= PAD_BYTES - format!("S{tag}|").len(),
        "{key}: short value"
    );
    let (pad, appends) = rest.split_at(PAD_BYTES - format!("S{tag}|").len());
    assert!(pad.bytes().all(|b| b == b'.'), "{key}: torn padding");
    let appends = appends
        .split_terminator('|')
        .map(|a| {
            a.strip_prefix('A')
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{key}: torn append {a}"))
        })
        .collect();
    (tag, appends)
}

/// Whether a write of `w` was overwritten or removed before `read_start`: some other
/// successful set/delete on the key began after `w` ended and ended before the read began.
fn superseded(ops: &[Op], w: &Op, read_start: u64) -> bool {
    ops.iter().any(|o| {
        matches!(o.kind, Kind::Set(_) | Kind::FailedSet | Kind::Delete)
            && o.start > w.end
            && o.end < read_start
    })
}

#[test]
fn concurrent_operations_during_migrations_read_only_latest_or_concurrent_values() {
    let engine = Engine::new(
        EngineConfig {
            memory_limit_bytes: MIB as u64,
            slow_tier: Some(tier::RegionSpec {
                size_bytes: 32 * MIB,
                backing: tier::RegionBacking::Anonymous,
                cost: tier::CostModel::NONE,
            }),
            move_queue_max: 32,
            migration_threads: 2,
            dram_residency_max_s: 1,
            ..EngineConfig::default()
        },
        SystemClock::new(),
    )
    .unwrap();
    engine.start_background();
    let tick = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (e, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                e.lru_maintainer_step();
                e.migration_step();
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (e, tick) = (Arc::clone(&engine), Arc::clone(&tick));
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut log: Vec<(String, Op)> = Vec::with_capacity(OPS_PER_THREAD as usize);
                for seq in 0..OPS_PER_THREAD {
                    let tag = (t + 1) * 10_000_000 + u64::from(seq);
                    let counter = rng.gen_bool(0.2);
                    let key = if counter {
                        format!("c{}", rng.gen_range(0..COUNTER_KEYS))
                    } else {
                        // Skewed: a quarter of the accesses go to 60 keys, so some get
                        // promoted while the rest is demoted.
                        let i = if rng.gen_bool(0.25) {
                            rng.gen_range(0..60)
                        } else {
                            rng.gen_range(0..STRING_KEYS)
                        };
                        format!("s{i}")
                    };
                    let k = key.as_bytes();
                    let roll = rng.gen_range(0..100);
                    let start = tick.fetch_add(1, Ordering::SeqCst);
                    let (kind, extra) = if counter {
                        match roll {
                            0..=39 => {
                                let seen = value(&e, k).map(|v| {
                                    let n: u64 = std::str::from_utf8(&v)
                                        .ok()
                                        .and_then(|s| s.trim_end().parse().ok())
                                        .unwrap_or_else(|| panic!("{key}: torn counter"));
                                    n
                                });
                                match seen {
                                    Some(n) => (
                                        Kind::Get(Some(n / COUNTER_BASE_STEP)),
                                        n % COUNTER_BASE_STEP,
                                    ),
                                    None => (Kind::Get(None), 0),
                                }
                            }
                            40..=69 => {
                                match e.arith(k, &ArithOptions::new(true, 1)) {
                                    ArithOutcome::Value { .. } | ArithOutcome::NotFound => {}
                                    other => panic!("{key}: incr {other:?}"),
                                }
                                (Kind::Incr, 0)
                            }
                            70..=94 => {
                                let n = tag * COUNTER_BASE_STEP;
                                match set(&e, k, n.to_string().as_bytes()) {
                                    StoreOutcome::Stored { .. } => (Kind::Set(tag), 0),
                                    _ => (Kind::FailedSet, 0),
                                }
                            }
                            _ => match e.delete(k, &DeleteOptions::default()) {
                                DeleteOutcome::Deleted => (Kind::Delete, 0),
                                _ => (Kind::Get(None), u64::MAX),
                            },
                        }
                    } else {
                        match roll {
                            0..=44 => match value(&e, k) {
                                Some(v) => {
                                    let (base, appends) = parse_string(&key, &v);
                                    (Kind::Get(Some(base)), appends.len() as u64)
                                }
                                None => (Kind::Get(None), 0),
                            },
                            45..=79 => match set(&e, k, &string_value(tag)) {
                                StoreOutcome::Stored { .. } => (Kind::Set(tag), 0),
                                _ => (Kind::FailedSet, 0),
                            },
                            80..=89 => match e.delete(k, &DeleteOptions::default()) {
                                DeleteOutcome::Deleted => (Kind::Delete, 0),
                                _ => (Kind::Get(None), u64::MAX),
                            },
                            _ => {
                                let suffix = format!("A{tag}|");
                                match store(&e, StoreMode::Append, k, suffix.as_bytes(), 0, 0) {
                                    StoreOutcome::Stored { .. } => (Kind::Append(tag), 0),
                                    // Missing key, or an append that would not fit.
                                    _ => (Kind::Get(None), u64::MAX),
                                }
                            }
                        }
                    };
                    let end = tick.fetch_add(1, Ordering::SeqCst);
                    log.push((
                        key,
                        Op {
                            kind,
                            start,
                            end,
                            extra,
                        },
                    ));
                }
                log
            })
        })
        .collect();
    let mut by_key: HashMap<String, Vec<Op>> = HashMap::new();
    for w in workers {
        for (key, op) in w.join().unwrap() {
            by_key.entry(key).or_default().push(op);
        }
    }
    stop.store(true, Ordering::Relaxed);
    driver.join().unwrap();
    engine.stop_background();
    for _ in 0..100 {
        if engine.migration_step() == 0 && engine.lru_maintainer_step() == 0 {
            break;
        }
    }
    let m = engine.migration_counts();
    assert!(
        m.promotions > 0 && m.demotions > 0,
        "both queues were busy: {m:?}"
    );
    // The slow tier is large enough that nothing should be evicted; if something was
    // (a class ran out of pages), a miss at the end is not a lost item.
    let evictions = stat(&engine, "evictions");

    // A final read of every key, after everything.
    let final_tick = tick.fetch_add(1, Ordering::SeqCst);
    for i in 0..STRING_KEYS {
        let key = format!("s{i}");
        let seen = value(&engine, key.as_bytes()).map(|v| parse_string(&key, &v));
        let op = Op {
            kind: Kind::Get(seen.as_ref().map(|s| s.0)),
            start: final_tick,
            end: final_tick,
            extra: seen.map_or(0, |s| s.1.len() as u64),
        };
        by_key.entry(key).or_default().push(op);
    }

    let mut reads_checked = 0u64;
    for (key, ops) in &by_key {
        let counter = key.starts_with('c');
        for r in ops {
            let Kind::Get(Some(base)) = r.kind else {
                if r.kind == Kind::Get(None) && r.start == final_tick && !counter {
                    // A miss at the end: the latest write must be a removal.
                    let lost = ops.iter().any(|w| {
                        matches!(w.kind, Kind::Set(_) | Kind::Append(_))
                            && !superseded(ops, w, r.start)
                    }) && !ops.iter().any(|d| {
                        matches!(d.kind, Kind::Delete | Kind::FailedSet)
                            && !superseded(ops, d, r.start)
                    });
                    assert!(!lost || evictions > 0, "{key}: item lost");
                }
                continue;
            };
            reads_checked += 1;
            let w = ops
                .iter()
                .find(|w| w.kind == Kind::Set(base))
                .unwrap_or_else(|| panic!("{key}: value {base} was never written to it"));
            assert!(w.start < r.end, "{key}: read a value before it was written");
            assert!(
                !superseded(ops, w, r.start),
                "{key}: read an overwritten or deleted value {base} (resurrected)"
            );
            // Updates on top of the base: at most those that began before the read ended
            // and had not ended before the base began.
            let possible = ops
                .iter()
                .filter(|u| {
                    matches!(u.kind, Kind::Incr | Kind::Append(_))
                        && u.end > w.start
                        && u.start < r.end
                })
                .count() as u64;
            assert!(
                r.extra <= possible,
                "{key}: {} updates seen on {base}, only {possible} possible",
                r.extra
            );
        }
    }
    assert!(reads_checked > 10_000, "{reads_checked}");
}
