//! Every placement policy under concurrency (one suite, run once per policy by the
//! `policy_stress!` macro at the bottom): worker threads hammer overlapping keys with set,
//! get, delete, incr and append while, under the policies that move items, both Move
//! queues are busy (a one-page DRAM tier, a short Move-queue bound, the per-tier
//! maintainers and two migration threads running, and one more thread driving
//! maintainer passes and migrations; every migration yields its thread between
//! allocating its copy and re-checking the item, so requests race it there). The run is sized so that nothing is evicted (both tiers together
//! hold every key with room to spare, asserted), so every check is exact:
//!
//! - string keys: each is written (set, delete) by one owner thread and read by all.
//!   The owner's reads return exactly its last write; another thread's read returns a
//!   whole value (every 32-byte block names key, version and place, see `common`)
//!   written no earlier than the last write completed before the read began and no
//!   later than the last one begun before it ended, never older than what that thread
//!   read before, and never a miss unless a delete could explain it;
//! - counters: never set or deleted during the run, only incremented and read: every
//!   increment returns a distinct value (exactly base + 1 ..= base + n), never a miss;
//! - append keys: never set or deleted during the run: every append is present exactly
//!   once, in the order of its writer, and a thread always sees its own appends;
//! - every value read comes with the CAS of the write that made it (a copy carrying an
//!   older CAS would let a stale `cas` overwrite a newer value);
//! - at the end every key holds exactly its last value, and the tiers hold exactly one
//!   item per live key.

mod common;
use common::*;
use engine::*;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const MIB: usize = 1024 * 1024;
const THREADS: u32 = 4;
const OPS_PER_THREAD: u32 = 40_000;
/// String keys `s<i>`, owned by thread `i % THREADS`.
const STRING_KEYS: u32 = 1500;
/// A quarter of the string operations go to these keys: reads promote them while their
/// owners keep replacing and deleting them (the races the migration's re-check is
/// for), and readers copy them while they are replaced (a torn read).
const HOT_STRING_KEYS: u32 = 16;
/// A string value is this many blocks (768 to 864 bytes: one slab class, the one
/// that gets the DRAM page).
const STRING_BLOCKS_MIN: u32 = 24;
const STRING_BLOCKS_MAX: u32 = 27;
const COUNTER_KEYS: u32 = 32;
/// Counter `c<i>` starts at `(i + 1) * COUNTER_BASE_STEP`.
const COUNTER_BASE_STEP: u64 = 1_000_000_000;
/// Counters are padded with spaces (memcached's in-place `incr` format) to the size of
/// the string values, so they share their slab class and migrate with them; an `incr`
/// then changes the item in place (same address, new CAS).
const COUNTER_BYTES: usize = 850;
const APPEND_KEYS: u32 = 32;
/// Block key ids of append keys: `APPEND_KEY_ID_BASE + i` for `a<i>`.
const APPEND_KEY_ID_BASE: u32 = 1_000_000;
/// The value an append key starts with, in blocks.
const APPEND_BASE_BLOCKS: u32 = 8;
/// Marks an appended block's version, whose low bits are `(writer + 1) << 32 | seq`.
const APPEND: u64 = 1 << 63;

fn string_key(i: u32) -> String {
    format!("s{i}")
}

fn counter_key(i: u32) -> String {
    format!("c{i}")
}

fn append_key(i: u32) -> String {
    format!("a{i}")
}

fn counter_base(i: u32) -> u64 {
    u64::from(i + 1) * COUNTER_BASE_STEP
}

fn counter_value(n: u64) -> Vec<u8> {
    let mut v = n.to_string().into_bytes();
    v.resize(COUNTER_BYTES, b' ');
    v
}

fn parse_counter(key: &str, v: &[u8]) -> u64 {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{key}: torn counter {:?}", String::from_utf8_lossy(v)))
}

/// A string key's operations are numbered 1, 2, ... by its owner; `started` and `done`
/// publish the latest as `n << 1 | 1` for a set of version n, `n << 1` for a delete.
fn op_code(n: u64, is_set: bool) -> u64 {
    n << 1 | u64::from(is_set)
}

/// An append: (writer thread, its sequence number on the key).
type AppendId = (u32, u64);

/// The writes of an append key's value: its base, then for each writer the number of
/// its appends found (each exactly once, in order), and the last append, which names
/// the write whose CAS the value carries.
struct Appended {
    per_writer: [u64; THREADS as usize],
    last: Option<AppendId>,
}

/// A string key's last set as its owner knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StringWrite {
    version: u64,
    blocks: u32,
    cas: u64,
}

impl StringWrite {
    fn bytes_and_cas(&self, i: u32) -> (Vec<u8>, u64) {
        (write_bytes(i, self.version, self.blocks), self.cas)
    }
}

fn parse_appended(i: u32, v: &[u8]) -> Result<Appended, String> {
    let key = append_key(i);
    let runs = parse_runs(APPEND_KEY_ID_BASE + i, v)?;
    let (base, appends) = runs
        .split_first()
        .ok_or_else(|| format!("{key}: empty value"))?;
    if *base
        != (Run {
            version: 0,
            blocks: APPEND_BASE_BLOCKS,
        })
    {
        return Err(format!("{key}: starts with {base:?}, not its base"));
    }
    let mut found = Appended {
        per_writer: [0; THREADS as usize],
        last: None,
    };
    for a in appends {
        let writer = ((a.version & !APPEND) >> 32).wrapping_sub(1);
        let seq = a.version & 0xFFFF_FFFF;
        if a.version & APPEND == 0 || a.blocks != 1 || writer >= u64::from(THREADS) {
            return Err(format!("{key}: not an append: {a:?}"));
        }
        let count = &mut found.per_writer[writer as usize];
        if seq != *count {
            return Err(format!(
                "{key}: thread {writer}'s append {seq} where its append {} belongs \
                 (lost, repeated or out of order)",
                *count
            ));
        }
        *count += 1;
        found.last = Some((writer as u32, seq));
    }
    Ok(found)
}

#[test]
fn the_append_checker_catches_lost_repeated_reordered_and_torn_appends() {
    let a = 3;
    let key_id = APPEND_KEY_ID_BASE + a;
    let base = write_bytes(key_id, 0, APPEND_BASE_BLOCKS);
    let append = |writer: u64, seq: u64| write_bytes(key_id, APPEND | (writer + 1) << 32 | seq, 1);
    let value = |parts: &[(u64, u64)]| {
        let mut v = base.clone();
        for &(writer, seq) in parts {
            v.extend_from_slice(&append(writer, seq));
        }
        v
    };
    let good = value(&[(0, 0), (2, 0), (0, 1), (2, 1), (0, 2)]);
    let found = parse_appended(a, &good).expect("a whole value");
    assert_eq!(found.per_writer, [3, 0, 2, 0]);
    assert_eq!(found.last, Some((0, 2)));
    for (bad, why) in [
        (value(&[(0, 0), (0, 2)]), "an append lost"),
        (value(&[(0, 0), (0, 0)]), "an append applied twice"),
        (value(&[(0, 1), (0, 0)]), "appends out of order"),
        (value(&[(0, 1)]), "the first append lost"),
        (value(&[(7, 0)]), "a writer that does not exist"),
        (
            write_bytes(key_id, 0, APPEND_BASE_BLOCKS + 1),
            "a longer base",
        ),
        (
            write_bytes(key_id + 1, 0, APPEND_BASE_BLOCKS),
            "another key's value",
        ),
    ] {
        assert!(parse_appended(a, &bad).is_err(), "{why}");
    }
    // A read that copied one version's start and a later version's rest.
    let later = value(&[(0, 0), (2, 0), (1, 0), (0, 1), (2, 1), (0, 2)]);
    for cut in 1..good.len() {
        let mut torn = good[..cut].to_vec();
        torn.extend_from_slice(&later[cut..]);
        if torn != later {
            assert!(parse_appended(a, &torn).is_err(), "torn at byte {cut}");
        }
    }
}

/// What one worker thread did, for the checks after the run.
#[derive(Default)]
struct WorkerLog {
    /// (string key, version, CAS) of every set.
    sets: Vec<(u32, u64, u64)>,
    /// (string key, version, CAS) of every hit.
    string_reads: Vec<(u32, u64, u64)>,
    /// (counter, value, CAS) of every increment.
    increments: Vec<(u32, u64, u64)>,
    /// (counter, value, CAS) of every read.
    counter_reads: Vec<(u32, u64, u64)>,
    /// (append key, seq, CAS) of every append of this thread.
    appends: Vec<(u32, u64, u64)>,
    /// (append key, last append (writer, seq) or none, CAS) of every read.
    append_reads: Vec<(u32, Option<AppendId>, u64)>,
    /// The owner's last set of each of its string keys (none: deleted).
    final_strings: HashMap<u32, Option<StringWrite>>,
}

/// The shared view of each string key's writes, published by its owner.
struct Published {
    started: Vec<AtomicU64>,
    done: Vec<AtomicU64>,
}

fn worker(e: &Engine, t: u32, published: &Published) -> WorkerLog {
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(t));
    let mut log = WorkerLog::default();
    // This thread's model of its own keys, (last op number, last set if not deleted
    // since): the initial sets of the setup are op 1, version 1.
    let mut mine: HashMap<u32, (u64, Option<StringWrite>)> = HashMap::new();
    // Highest version / value / append count this thread has seen per key.
    let mut seen_version = vec![0u64; STRING_KEYS as usize];
    let mut seen_counter = vec![0u64; COUNTER_KEYS as usize];
    let mut seen_appends = vec![[0u64; THREADS as usize]; APPEND_KEYS as usize];
    let mut my_next_append = vec![0u64; APPEND_KEYS as usize];
    for i in (t..STRING_KEYS).step_by(THREADS as usize) {
        let got = get(e, string_key(i).as_bytes()).expect("initial value");
        let blocks = (got.value.len() / BLOCK_BYTES) as u32;
        let initial = StringWrite {
            version: 1,
            blocks,
            cas: got.cas,
        };
        mine.insert(i, (1, Some(initial)));
    }
    let pick_string = |rng: &mut rand::rngs::StdRng| {
        if rng.gen_bool(0.25) {
            rng.gen_range(0..HOT_STRING_KEYS)
        } else {
            rng.gen_range(0..STRING_KEYS)
        }
    };
    for _ in 0..OPS_PER_THREAD {
        match rng.gen_range(0..100) {
            // Strings: writes by the owner.
            0..=24 => {
                let picked = pick_string(&mut rng);
                let i = picked - picked % THREADS + t;
                if i >= STRING_KEYS {
                    continue;
                }
                let key = string_key(i);
                let (n, model) = mine.get_mut(&i).expect("owned key");
                *n += 1;
                let is_set = rng.gen_range(0..100) < 80;
                published.started[i as usize].store(op_code(*n, is_set), Ordering::SeqCst);
                if is_set {
                    let blocks = rng.gen_range(STRING_BLOCKS_MIN..=STRING_BLOCKS_MAX);
                    let cas = match set(e, key.as_bytes(), &write_bytes(i, *n, blocks)) {
                        StoreOutcome::Stored { cas } => cas,
                        other => panic!("set {key}: {other:?} (both tiers have room)"),
                    };
                    *model = Some(StringWrite {
                        version: *n,
                        blocks,
                        cas,
                    });
                    log.sets.push((i, *n, cas));
                } else {
                    let want = if model.is_some() {
                        DeleteOutcome::Deleted
                    } else {
                        DeleteOutcome::NotFound
                    };
                    let got = e.delete(key.as_bytes(), &DeleteOptions::default());
                    assert_eq!(got, want, "delete {key}");
                    *model = None;
                }
                published.done[i as usize].store(op_code(*n, is_set), Ordering::SeqCst);
            }
            // Strings: reads by anyone.
            25..=59 => {
                let i = pick_string(&mut rng);
                let key = string_key(i);
                let done_before = published.done[i as usize].load(Ordering::SeqCst);
                let got = get(e, key.as_bytes());
                let started_after = published.started[i as usize].load(Ordering::SeqCst);
                if let Some((_, model)) = mine.get(&i) {
                    // Its owner: exactly its last write.
                    let want = model.map(|w| w.bytes_and_cas(i));
                    let got = got.map(|g| (g.value, g.cas));
                    if got != want {
                        let shown = got.as_ref().map(|(v, cas)| (parse_runs(i, v), cas));
                        panic!("{key}: the owner read {shown:?}, its last write was {model:?}");
                    }
                    continue;
                }
                match got {
                    Some(g) => {
                        let runs = parse_runs(i, &g.value)
                            .unwrap_or_else(|why| panic!("read {key}: {why}"));
                        let [run] = runs[..] else {
                            panic!("read {key}: several writes in one value: {runs:?}");
                        };
                        let v = run.version;
                        assert!(
                            done_before >> 1 <= v && v <= started_after >> 1,
                            "read {key}: version {v}, but the last write done before the \
                             read was {} and the last begun before its end {}",
                            done_before >> 1,
                            started_after >> 1
                        );
                        assert!(
                            v >= seen_version[i as usize],
                            "read {key}: version {v} after this thread read version {}",
                            seen_version[i as usize]
                        );
                        seen_version[i as usize] = v;
                        log.string_reads.push((i, v, g.cas));
                    }
                    None => assert!(
                        done_before & 1 == 0 || started_after != done_before,
                        "read {key}: a miss, but its last write ({}) was a set and no \
                         other write began",
                        done_before >> 1
                    ),
                }
            }
            // Counters: only increments and reads.
            60..=79 => {
                let c = rng.gen_range(0..COUNTER_KEYS);
                let key = counter_key(c);
                let seen = &mut seen_counter[c as usize];
                if rng.gen_bool(0.6) {
                    match e.arith(key.as_bytes(), &ArithOptions::new(true, 1)) {
                        ArithOutcome::Value { value, cas, .. } => {
                            assert!(value > *seen, "{key}: incr returned {value} after {seen}");
                            *seen = value;
                            log.increments.push((c, value, cas));
                        }
                        other => panic!("incr {key}: {other:?} (counters are never removed)"),
                    }
                } else {
                    let got = get(e, key.as_bytes())
                        .unwrap_or_else(|| panic!("{key}: lost (counters are never removed)"));
                    let value = parse_counter(&key, &got.value);
                    assert!(value >= *seen, "{key}: read {value} after {seen}");
                    *seen = value;
                    log.counter_reads.push((c, value, got.cas));
                }
            }
            // Append keys: only appends and reads.
            _ => {
                let a = rng.gen_range(0..APPEND_KEYS);
                let key = append_key(a);
                if rng.gen_bool(0.5) {
                    let seq = my_next_append[a as usize];
                    let version = APPEND | u64::from(t + 1) << 32 | seq;
                    let part = write_bytes(APPEND_KEY_ID_BASE + a, version, 1);
                    match store(e, StoreMode::Append, key.as_bytes(), &part, 0, 0) {
                        StoreOutcome::Stored { cas } => log.appends.push((a, seq, cas)),
                        other => panic!("append {key}: {other:?} (never removed)"),
                    }
                    my_next_append[a as usize] += 1;
                } else {
                    let got = get(e, key.as_bytes())
                        .unwrap_or_else(|| panic!("{key}: lost (never removed)"));
                    let found = parse_appended(a, &got.value)
                        .unwrap_or_else(|why| panic!("read {key}: {why}"));
                    let seen = &mut seen_appends[a as usize];
                    for (w, (&count, seen)) in found.per_writer.iter().zip(seen).enumerate() {
                        assert!(
                            count >= *seen,
                            "read {key}: {count} appends of thread {w} after {seen}"
                        );
                        *seen = count;
                    }
                    assert_eq!(
                        found.per_writer[t as usize], my_next_append[a as usize],
                        "read {key}: this thread's own appends"
                    );
                    log.append_reads.push((a, found.last, got.cas));
                }
            }
        }
    }
    log.final_strings = mine.into_iter().map(|(i, (_, m))| (i, m)).collect();
    log
}

/// Runs of the check before its precondition (migrations actually raced the requests)
/// is declared unmet. On a loaded machine a run's threads may be scheduled so that, for
/// example, no item reaches the hotspot policy's threshold within a period; such a run
/// checked correctly but proved little, and is made again. A failed correctness check is
/// never retried.
const RUNS_FOR_THE_PRECONDITION: usize = 3;

/// The whole check under `policy` (see the module comment).
fn concurrent_operations_during_migrations_lose_nothing_and_read_only_whole_latest_values(
    policy: PlacementPolicy,
) {
    let mut unmet = Vec::new();
    for _ in 0..RUNS_FOR_THE_PRECONDITION {
        match run_and_check(policy) {
            Ok(()) => return,
            Err(why) => unmet.push(why),
        }
    }
    panic!("the runs never kept both Move queues busy with requests racing migrations: {unmet:#?}");
}

/// One run: `Err` (with the run's migration counts) when migrations did not race the
/// requests; panics on any correctness failure.
fn run_and_check(policy: PlacementPolicy) -> Result<(), String> {
    let engine = Engine::new(
        EngineConfig {
            policy,
            // One DRAM page keeps both Move queues busy. A policy that never moves items
            // (HM-UNI, random) keeps its hashed share of every class the growing append
            // values pass through in DRAM: it needs a page per class to lose nothing.
            memory_limit_bytes: if !policy.moves_items() {
                16 * MIB as u64
            } else {
                MIB as u64
            },
            slow_tier: Some(tier::RegionSpec {
                size_bytes: 64 * MIB,
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
    // Strings and counters share one slab class (the one that gets the DRAM page).
    let class = |key: &str, len: usize| engine.slab_class_for(key.len(), len);
    let string_bytes = |blocks: u32| blocks as usize * BLOCK_BYTES;
    let string_class = class("s0", string_bytes(STRING_BLOCKS_MIN));
    assert_eq!(
        class(
            &string_key(STRING_KEYS - 1),
            string_bytes(STRING_BLOCKS_MAX)
        ),
        string_class
    );
    assert_eq!(class(&counter_key(0), COUNTER_BYTES), string_class);
    // Every key exists before the workers start (version 1 of each string).
    let mut initial_cas: HashMap<String, u64> = HashMap::new();
    let mut stored_cas = |key: String, v: &[u8]| match set(&engine, key.as_bytes(), v) {
        StoreOutcome::Stored { cas } => {
            initial_cas.insert(key, cas);
        }
        other => panic!("initial set {key}: {other:?}"),
    };
    for i in 0..STRING_KEYS {
        stored_cas(string_key(i), &write_bytes(i, 1, STRING_BLOCKS_MAX));
    }
    for c in 0..COUNTER_KEYS {
        stored_cas(counter_key(c), &counter_value(counter_base(c)));
    }
    for a in 0..APPEND_KEYS {
        stored_cas(
            append_key(a),
            &write_bytes(APPEND_KEY_ID_BASE + a, 0, APPEND_BASE_BLOCKS),
        );
    }
    let published = Published {
        started: (0..STRING_KEYS)
            .map(|_| AtomicU64::new(op_code(1, true)))
            .collect(),
        done: (0..STRING_KEYS)
            .map(|_| AtomicU64::new(op_code(1, true)))
            .collect(),
    };
    // Every migration yields between allocating its copy and re-locking the item's
    // shard (the engine's `test-hooks`): requests racing a migration then meet its
    // re-check a thousand times a run instead of a few.
    engine.yield_migrations_before_relock(true);
    engine.start_background();
    let stop = AtomicBool::new(false);
    let results: Vec<std::thread::Result<WorkerLog>> = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                engine.lru_maintainer_step();
                engine.migration_step();
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (e, published) = (&engine, &published);
                s.spawn(move || worker(e, t, published))
            })
            .collect();
        let results = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Relaxed);
        results
    });
    engine.stop_background();
    for _ in 0..100 {
        if engine.migration_step() == 0 && engine.lru_maintainer_step() == 0 {
            break;
        }
    }
    let m = engine.migration_counts();
    println!(
        "{m:?}; evictions {}; slab_reassign_evictions_nomem {}",
        stat(&engine, "evictions"),
        stat(&engine, "slab_reassign_evictions_nomem")
    );
    // Preconditions of the exact checks (checked first, so that a worker's "lost"
    // below is never an eviction): the run is sized so that nothing is evicted, and
    // it kept both Move queues busy, with requests racing the migrations.
    assert_eq!(
        stat(&engine, "evictions"),
        0,
        "sized to evict nothing: {m:?}"
    );
    assert_eq!(stat(&engine, "slab_reassign_evictions_nomem"), 0, "{m:?}");
    if !policy.moves_items() {
        // HM-UNI and random never move an item: both tiers hold items, no queue was
        // used.
        assert_eq!((m.promotions, m.demotions), (0, 0), "{m:?}");
        assert!(
            engine.tier_usage(TierId::Dram).items > 0 && engine.tier_usage(TierId::Slow).items > 0,
            "both tiers hold items"
        );
    } else {
        // A promotion that found no DRAM chunk still went through the Move-to-DRAM
        // queue and `move_item` up to the destination: under the hotspot policies the
        // benefit-aware reassignment may give the one DRAM page to the append keys'
        // classes for a whole run, and then every promotion of a string fails there.
    }
    // Whether migrations raced the requests is decided after every correctness check
    // below (a run that proved little must still not hide a wrong value).
    let raced = !policy.moves_items()
        || (m.promotions + m.promotions_failed > 0 && m.demotions > 0 && m.migrations_raced > 0);
    // Now a worker's failed check, if any.
    let logs: Vec<WorkerLog> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect();

    // Strings: every value read carried the CAS of the set that wrote it, and each key
    // holds exactly its owner's last write.
    let mut set_cas: HashMap<(u32, u64), u64> = HashMap::new();
    for i in 0..STRING_KEYS {
        set_cas.insert((i, 1), initial_cas[&string_key(i)]);
    }
    for log in &logs {
        set_cas.extend(log.sets.iter().map(|&(i, v, cas)| ((i, v), cas)));
    }
    for &(i, v, cas) in logs.iter().flat_map(|l| &l.string_reads) {
        assert_eq!(
            Some(&cas),
            set_cas.get(&(i, v)),
            "s{i} version {v} read with another CAS"
        );
    }
    let mut live = 0u64;
    for (&i, last) in logs.iter().flat_map(|l| &l.final_strings) {
        let key = string_key(i);
        let got = get(&engine, key.as_bytes()).map(|g| (g.value, g.cas));
        let want = last.map(|w| w.bytes_and_cas(i));
        if got != want {
            let shown = got.as_ref().map(|(v, cas)| (parse_runs(i, v), cas));
            panic!("{key}: holds {shown:?} at the end, its last write was {last:?}");
        }
        live += u64::from(want.is_some());
    }

    // Counters: the increments of each returned exactly base + 1 ..= base + n, and it
    // holds base + n with the CAS of that increment; every read matched an increment.
    let mut increments_of: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    for &(c, value, cas) in logs.iter().flat_map(|l| &l.increments) {
        increments_of.entry(c).or_default().push((value, cas));
    }
    let mut value_cas: HashMap<(u32, u64), u64> = HashMap::new();
    for c in 0..COUNTER_KEYS {
        let key = counter_key(c);
        let base = counter_base(c);
        let mut incs = increments_of.remove(&c).unwrap_or_default();
        incs.sort_unstable();
        if let Some((k, &(value, _))) = (1..).zip(incs.iter()).find(|&(k, r)| r.0 != base + k) {
            panic!(
                "{key}: of {} increments, the {k}th smallest returned {value}, not {} \
                 (an increment lost or applied twice)",
                incs.len(),
                base + k
            );
        }
        value_cas.insert((c, base), initial_cas[&key]);
        value_cas.extend(incs.iter().map(|&(value, cas)| ((c, value), cas)));
        let want_value = base + incs.len() as u64;
        let got = get(&engine, key.as_bytes()).unwrap_or_else(|| panic!("{key}: lost"));
        assert_eq!(
            (parse_counter(&key, &got.value), got.cas),
            (want_value, value_cas[&(c, want_value)]),
            "{key} at the end"
        );
    }
    for &(c, value, cas) in logs.iter().flat_map(|l| &l.counter_reads) {
        assert_eq!(
            Some(&cas),
            value_cas.get(&(c, value)),
            "c{c} read {value} with another CAS"
        );
    }

    // Append keys: each holds every append exactly once, in its writer's order, with
    // the CAS of the last one; every read carried the CAS of the last append it showed.
    let mut append_cas: HashMap<(u32, u32, u64), u64> = HashMap::new();
    let mut appended = vec![[0u64; THREADS as usize]; APPEND_KEYS as usize];
    for (t, log) in logs.iter().enumerate() {
        for &(a, seq, cas) in &log.appends {
            append_cas.insert((a, t as u32, seq), cas);
            appended[a as usize][t] += 1;
        }
    }
    let cas_of = |a: u32, last: Option<AppendId>| match last {
        None => initial_cas.get(&append_key(a)).copied(),
        Some((w, seq)) => append_cas.get(&(a, w, seq)).copied(),
    };
    for a in 0..APPEND_KEYS {
        let key = append_key(a);
        let got = get(&engine, key.as_bytes()).unwrap_or_else(|| panic!("{key}: lost"));
        let found = parse_appended(a, &got.value).unwrap_or_else(|why| panic!("{why}"));
        assert_eq!(found.per_writer, appended[a as usize], "{key}: appends");
        assert_eq!(
            Some(got.cas),
            cas_of(a, found.last),
            "{key}: CAS at the end"
        );
    }
    for &(a, last, cas) in logs.iter().flat_map(|l| &l.append_reads) {
        assert_eq!(Some(cas), cas_of(a, last), "a{a} read with another CAS");
    }

    // One item per live key in the two tiers together: no copy left behind by a
    // migration, none lost.
    let want_items = live + u64::from(COUNTER_KEYS + APPEND_KEYS);
    let dram = engine.tier_usage(TierId::Dram);
    let slow = engine.tier_usage(TierId::Slow);
    assert_eq!(dram.items + slow.items, want_items, "{dram:?} {slow:?}");
    assert_eq!(stat(&engine, "curr_items"), want_items);
    let reads: usize = logs
        .iter()
        .map(|l| l.string_reads.len() + l.counter_reads.len() + l.append_reads.len())
        .sum();
    assert!(reads > 10_000, "{reads} reads checked");
    if raced {
        Ok(())
    } else {
        Err(format!("{m:?}"))
    }
}

/// The suite, once per policy of the registry (`engine::for_each_policy!`, below).
macro_rules! policy_stress {
    ($($module:ident => $policy:expr),* $(,)?) => {$(
        mod $module {
            #[test]
            fn concurrent_operations_during_migrations_lose_nothing_and_read_only_whole_latest_values(
            ) {
                super::concurrent_operations_during_migrations_lose_nothing_and_read_only_whole_latest_values(
                    $policy,
                );
            }
        }
    )*};
}

engine::for_each_policy!(policy_stress);
