//! Restart from a persistent slow-tier pool (`pool.rs`, `recovery.rs`): a clean stop
//! keeps every item that fits, a crash keeps every record that checks out and never a
//! torn or stale one, a pool of another geometry or with a damaged header starts cold
//! (or is refused, as configured), a file that is not a pool is refused untouched, and
//! damaged records are skipped — never misread.
//!
//! A "crash" here drops the engine without `stop_to_pool`: everything stored to the
//! shared file mapping is in the file (the page cache holds it, as after `kill -9`), and
//! nothing else is (DRAM, the index, the clean mark). Clocks are manual: the restarted
//! engine's clock is made at a later Unix time, as a real restart's would be.

mod common;
use common::*;
use engine::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MIB: u64 = 1024 * 1024;

/// A unique temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "fogcached-restart-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn pool(&self) -> PathBuf {
        self.0.join("slow-tier.pool")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pool_config(path: &Path, dram_mib: u64, slow_mib: u64) -> EngineConfig {
    EngineConfig {
        memory_limit_bytes: dram_mib * MIB,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: (slow_mib * MIB) as usize,
            backing: tier::RegionBacking::File {
                path: path.to_path_buf(),
            },
            cost: tier::CostModel::NONE,
        }),
        ..EngineConfig::default()
    }
}

/// An engine on the pool at `path`, its clock at Unix time `unix_s`.
fn open_at(config: EngineConfig, unix_s: u64) -> (Arc<Engine>, Arc<ManualClock>) {
    let clock = ManualClock::new(unix_s - 2);
    let engine = Engine::new(config, clock.clone()).expect("open the pool");
    (engine, clock)
}

/// A value that names its key and version, `len` bytes.
fn val_of(i: u32, version: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{}#{version}#", key(i)).into_bytes();
    let fill = (i as u8).wrapping_mul(31).wrapping_add(version as u8);
    while v.len() < len {
        v.push(b'a' + (v.len() as u8 ^ fill) % 26);
    }
    v.truncate(len);
    v
}

#[test]
fn a_clean_stop_keeps_every_item_in_both_tiers_and_cas_never_repeats() {
    clean_stop_keeps_every_item(PlacementPolicy::DualLru);
}

/// Under the hotspot policy DRAM's lists are its multi-queue: the items read most sit in
/// its highest queues, and they too are written down.
#[test]
fn a_clean_stop_under_the_hotspot_policy_keeps_its_hottest_items() {
    clean_stop_keeps_every_item(PlacementPolicy::Hotspot);
}

fn clean_stop_keeps_every_item(policy: PlacementPolicy) {
    let dir = TempDir::new("clean");
    let config = EngineConfig {
        policy,
        ..pool_config(&dir.pool(), 2, 64)
    };
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    assert!(e.recovery_report().formatted);
    // ~30 MiB over several classes, and every 1000th a large item (a run of pages).
    const KEYS: u32 = 5000;
    let len_of = |i: u32| {
        if i % 1000 == 999 {
            700_000
        } else {
            [100, 900, 3000, 20_000][(i % 4) as usize]
        }
    };
    let mut highest_cas = 0;
    for i in 0..KEYS {
        let len = len_of(i);
        let outcome = store(
            &e,
            StoreMode::Set,
            key(i).as_bytes(),
            &val_of(i, 1, len),
            i,
            0,
        );
        let StoreOutcome::Stored { cas } = outcome else {
            panic!("{}: {outcome:?}", key(i));
        };
        highest_cas = highest_cas.max(cas);
        if i % 64 == 0 {
            settle(&e);
        }
    }
    // Every item read 20 times: under the hotspot policy, DRAM's items move up to its
    // top queue.
    for _ in 0..20 {
        for i in 0..KEYS {
            assert!(get(&e, key(i).as_bytes()).is_some(), "{}", key(i));
        }
    }
    settle(&e);
    let dram_items = e.tier_usage(TierId::Dram).items;
    assert!(dram_items > 0 && e.tier_usage(TierId::Slow).items > 0);
    clock.advance_s(10);
    let stop = e.stop_to_pool().unwrap();
    assert!(stop.pool);
    assert_eq!(stop.no_room, 0, "{stop:?}");
    assert_eq!(stop.written_down, dram_items, "{stop:?}");
    let now = clock.now_unix_s();
    drop(e);

    let (e, _) = open_at(config, now + 60);
    let report = e.recovery_report();
    assert!(
        report.pool && !report.formatted && report.was_clean,
        "{report:?}"
    );
    assert_eq!(report.items_recovered, u64::from(KEYS), "{report:?}");
    assert_eq!(report.items_dropped_duplicate, 0);
    for i in 0..KEYS {
        let len = len_of(i);
        let got = get(&e, key(i).as_bytes()).unwrap_or_else(|| panic!("{} lost", key(i)));
        assert_eq!(got.value, val_of(i, 1, len), "{}", key(i));
        assert_eq!(got.flags, i, "{}", key(i));
    }
    // Recovered items start in the slow tier.
    assert_eq!(e.tier_usage(TierId::Dram).items, 0);
    // A CAS handed out after the restart is above every CAS of the first run.
    let StoreOutcome::Stored { cas } = set(&e, b"new", b"value") else {
        panic!("store after restart");
    };
    assert!(
        cas > highest_cas,
        "CAS {cas} after a restart, {highest_cas} before"
    );
}

#[test]
fn wall_clock_ttls_keep_their_meaning_across_a_restart() {
    let dir = TempDir::new("ttl");
    let config = pool_config(&dir.pool(), 1, 8);
    let start = 1_700_000_000;
    let (e, _) = open_at(config.clone(), start);
    // Relative and absolute exptimes, and no exptime.
    store(&e, StoreMode::Set, b"short", b"1", 0, 100);
    store(&e, StoreMode::Set, b"long", b"2", 0, 10_000);
    store(
        &e,
        StoreMode::Set,
        b"absolute",
        b"3",
        0,
        (start + 500) as i64,
    );
    store(&e, StoreMode::Set, b"forever", b"4", 0, 0);
    e.stop_to_pool().unwrap();
    drop(e);
    // Down for 200 s: `short` expired meanwhile, the others did not.
    let (e, clock) = open_at(config.clone(), start + 200);
    assert_eq!(value(&e, b"short"), None);
    assert_eq!(value(&e, b"long"), Some(b"2".to_vec()));
    assert_eq!(value(&e, b"absolute"), Some(b"3".to_vec()));
    assert_eq!(value(&e, b"forever"), Some(b"4".to_vec()));
    assert_eq!(e.recovery_report().items_dropped_dead, 1);
    clock.advance_s(400);
    assert_eq!(value(&e, b"absolute"), None, "expires at its Unix time");
    assert_eq!(value(&e, b"long"), Some(b"2".to_vec()));
}

#[test]
fn after_a_crash_every_record_that_checks_out_is_served_and_nothing_deleted_or_overwritten_comes_back(
) {
    let dir = TempDir::new("crash");
    // Slow tier only: every item is a record.
    let config = pool_config(&dir.pool(), 0, 16);
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    for i in 0..3000 {
        assert!(stored(set(&e, key(i).as_bytes(), &val_of(i, 1, 500))));
    }
    for i in (0..3000).step_by(3) {
        assert_eq!(
            e.delete(key(i).as_bytes(), &DeleteOptions::default()),
            DeleteOutcome::Deleted
        );
    }
    for i in (1..3000).step_by(3) {
        assert!(stored(set(&e, key(i).as_bytes(), &val_of(i, 2, 700))));
    }
    // Changed in place: an incr, a touch, a stale mark.
    assert!(stored(set(&e, b"counter", b"41")));
    assert!(matches!(
        e.arith(b"counter", &ArithOptions::new(true, 1)),
        ArithOutcome::Value { value: 42, .. }
    ));
    assert!(stored(store(&e, StoreMode::Set, b"touched", b"t", 0, 50)));
    assert_eq!(e.touch(b"touched", 5000), TouchOutcome::Touched);
    e.flush_all(0);
    assert!(stored(set(&e, b"after-flush", b"kept")));
    let now = clock.now_unix_s();
    drop(e); // A crash: no clean stop.

    let (e, _) = open_at(config, now + 10);
    let report = e.recovery_report();
    assert!(!report.was_clean, "{report:?}");
    // flush_all came before the crash: only what was stored after it is back.
    assert_eq!(value(&e, b"after-flush"), Some(b"kept".to_vec()));
    for i in 0..3000 {
        assert_eq!(value(&e, key(i).as_bytes()), None, "{} flushed", key(i));
    }
    assert_eq!(value(&e, b"counter"), None);
    assert_eq!(report.items_recovered, 1, "{report:?}");
}

#[test]
fn after_a_crash_deleted_and_overwritten_keys_never_come_back_with_an_older_value() {
    let dir = TempDir::new("crash-overwrite");
    let config = pool_config(&dir.pool(), 0, 16);
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    for i in 0..3000 {
        assert!(stored(set(&e, key(i).as_bytes(), &val_of(i, 1, 500))));
    }
    for i in (0..3000).step_by(3) {
        e.delete(key(i).as_bytes(), &DeleteOptions::default());
    }
    for i in (1..3000).step_by(3) {
        assert!(stored(set(&e, key(i).as_bytes(), &val_of(i, 2, 700))));
    }
    assert!(stored(set(&e, b"counter", b"41")));
    e.arith(b"counter", &ArithOptions::new(true, 1));
    assert!(stored(store(&e, StoreMode::Set, b"touched", b"t", 0, 50)));
    assert_eq!(e.touch(b"touched", 5000), TouchOutcome::Touched);
    let now = clock.now_unix_s();
    drop(e);

    let (e, clock) = open_at(config, now + 100);
    for i in 0..3000 {
        let want = match i % 3 {
            0 => None,
            1 => Some(val_of(i, 2, 700)),
            _ => Some(val_of(i, 1, 500)),
        };
        assert_eq!(value(&e, key(i).as_bytes()), want, "{}", key(i));
    }
    assert_eq!(value(&e, b"counter"), Some(b"42".to_vec()));
    // The touch's new expiry survived (the old one, 50 s, has passed).
    assert_eq!(value(&e, b"touched"), Some(b"t".to_vec()));
    clock.advance_s(6000);
    assert_eq!(value(&e, b"touched"), None);
    assert_eq!(e.recovery_report().items_recovered, 2002);
}

/// Flips one byte in the value of some records, in the file: those records are skipped
/// (their checksum fails), never served; the rest are served.
#[test]
fn damaged_records_are_skipped_never_served() {
    let dir = TempDir::new("flip");
    let config = pool_config(&dir.pool(), 0, 4);
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    for i in 0..1000 {
        assert!(stored(set(&e, key(i).as_bytes(), &val_of(i, 1, 300))));
    }
    e.stop_to_pool().unwrap();
    let now = clock.now_unix_s();
    drop(e);
    // Damage: every 64 KiB of the pages, one byte.
    let mut bytes = std::fs::read(dir.pool()).unwrap();
    let header = bytes.len() - 4 * MIB as usize;
    let mut flipped = 0;
    for offset in (header + 1000..bytes.len()).step_by(64 * 1024) {
        bytes[offset] ^= 0x20;
        flipped += 1;
    }
    std::fs::write(dir.pool(), &bytes).unwrap();

    let (e, _) = open_at(config, now + 1);
    let report = e.recovery_report();
    let mut served = 0;
    for i in 0..1000 {
        if let Some(v) = value(&e, key(i).as_bytes()) {
            assert_eq!(v, val_of(i, 1, 300), "{} served damaged", key(i));
            served += 1;
        }
    }
    assert_eq!(served, report.items_recovered);
    assert!(
        served >= 1000 - flipped && served < 1000,
        "{served} served after {flipped} flips; {report:?}"
    );
}

/// A pool written with another geometry starts cold by default: formatted, its items
/// gone, the report naming each setting with its old and new value. Under
/// `--slow-pool-mismatch refuse` it is refused with the same words and left byte for byte
/// as it was (even a larger `--slow-size` does not extend it), so that the old settings
/// still recover it; `--slow-pool-reset` formats even a matching pool.
#[test]
fn a_pool_of_another_geometry_starts_cold_or_is_refused_as_configured() {
    let dir = TempDir::new("geometry");
    let config = pool_config(&dir.pool(), 1, 8);
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    assert_eq!(e.recovery_report().start, PoolStart::New);
    set(&e, b"k", b"v");
    e.stop_to_pool().unwrap();
    let now = clock.now_unix_s();
    drop(e);
    let refuse = |c: &EngineConfig| EngineConfig {
        slow_pool_mismatch: PoolMismatch::Refuse,
        ..c.clone()
    };
    let pristine = std::fs::read(dir.pool()).unwrap();
    let other = EngineConfig {
        growth_factor: 1.5,
        ..config.clone()
    };
    let bigger = pool_config(&dir.pool(), 1, 16);
    for (changed, words) in [
        (&other, "growth_factor (-f) was 1.25, now 1.5"),
        (&bigger, "slow_size (--slow-size) was 8388608, now 16777216"),
    ] {
        let text = Engine::new(refuse(changed), ManualClock::new(now))
            .err()
            .expect("refused")
            .to_string();
        assert!(text.contains("was written with other settings"), "{text}");
        assert!(text.contains(words), "{text}");
        assert!(text.contains("--slow-pool-mismatch reset"), "{text}");
        assert!(
            std::fs::read(dir.pool()).unwrap() == pristine,
            "a refused open changed the pool ({words})"
        );
    }
    // The refused opens changed nothing: the pool still recovers.
    let (e, _) = open_at(refuse(&config), now + 1);
    assert_eq!(e.recovery_report().start, PoolStart::Recovered);
    assert_eq!(value(&e, b"k"), Some(b"v".to_vec()));
    e.stop_to_pool().unwrap();
    drop(e);
    // By default: a cold start, saying why.
    let (e, _) = open_at(other.clone(), now + 2);
    let report = e.recovery_report();
    assert!(report.formatted);
    assert_eq!(
        report.start,
        PoolStart::Mismatch(Mismatch::Settings(vec![SettingChange {
            name: "growth_factor",
            flag: "-f",
            pool: "1.25".into(),
            now: "1.5".into(),
        }]))
    );
    assert_eq!(report.start.reason(), "settings_changed");
    assert_eq!(report.start.settings_changed(), "growth_factor");
    assert_eq!(value(&e, b"k"), None);
    set(&e, b"k2", b"v2");
    e.stop_to_pool().unwrap();
    drop(e);
    // Formatted with the new settings: they recover it.
    let (e, _) = open_at(other.clone(), now + 3);
    assert_eq!(e.recovery_report().start, PoolStart::Recovered);
    assert_eq!(value(&e, b"k2"), Some(b"v2".to_vec()));
    drop(e);
    let (e, _) = open_at(
        EngineConfig {
            slow_pool_reset: true,
            ..refuse(&other)
        },
        now + 4,
    );
    assert_eq!(e.recovery_report().start, PoolStart::ResetRequested);
    assert_eq!(value(&e, b"k2"), None);
}

/// A file without the pool's magic is refused, whatever the flags, and left as it was.
/// A pool of ours with another format version or a damaged geometry block starts cold
/// saying so, or is refused (untouched) under `--slow-pool-mismatch refuse`. One whose
/// format was interrupted (the magic, version 0) is formatted again either way: it held
/// nothing yet.
#[test]
fn a_foreign_file_is_refused_and_a_damaged_pool_starts_cold_or_is_refused() {
    let dir = TempDir::new("header");
    let config = pool_config(&dir.pool(), 1, 4);
    let (e, _) = open_at(config.clone(), 1_700_000_000);
    set(&e, b"k", b"v");
    drop(e);
    let pristine = std::fs::read(dir.pool()).unwrap();
    let refuse = EngineConfig {
        slow_pool_mismatch: PoolMismatch::Refuse,
        ..config.clone()
    };
    let reset = EngineConfig {
        slow_pool_reset: true,
        ..config.clone()
    };
    let damage = |offset: usize, set_to: Option<u8>| {
        let mut bytes = pristine.clone();
        bytes[offset] = set_to.unwrap_or(bytes[offset] ^ 0x01);
        std::fs::write(dir.pool(), &bytes).unwrap();
        bytes
    };
    let refused = |config: &EngineConfig, what: &str| {
        Engine::new(config.clone(), ManualClock::new(1_700_000_100))
            .err()
            .unwrap_or_else(|| panic!("a pool with a damaged {what} was opened"))
            .to_string()
    };
    // The magic: not ours, whatever the flags.
    let bytes = damage(0, None);
    for c in [&config, &refuse, &reset] {
        let text = refused(c, "magic");
        assert!(text.contains("is not a fogcached pool"), "{text}");
        assert!(std::fs::read(dir.pool()).unwrap() == bytes, "changed");
    }
    for (what, offset, set_to, reason) in [
        ("version", 8, Some(9), "format_version"),
        ("geometry", 100, None, "header_damaged"),
    ] {
        let bytes = damage(offset, set_to);
        let text = refused(&refuse, what);
        assert!(
            text.contains(if what == "version" {
                "was written by pool format version"
            } else {
                "has a damaged header"
            }),
            "{what}: {text}"
        );
        assert!(
            text.contains("--slow-pool-mismatch reset"),
            "{what}: {text}"
        );
        assert!(
            std::fs::read(dir.pool()).unwrap() == bytes,
            "{what}: changed"
        );
        let (e, _) = open_at(config.clone(), 1_700_000_200);
        let report = e.recovery_report();
        assert_eq!(report.start.reason(), reason, "{what}");
        assert_eq!(value(&e, b"k"), None, "{what}");
        drop(e);
    }
    // An interrupted format: the magic with version 0.
    damage(8, Some(0));
    let (e, _) = open_at(refuse, 1_700_000_300);
    assert_eq!(e.recovery_report().start, PoolStart::FormatInterrupted);
}

#[test]
fn a_pool_that_a_crash_left_with_a_record_twice_keeps_the_newer() {
    // The window the ordering cannot close without a flush between two stores: a new
    // record sealed and the old one still valid. Made here by copying a record back.
    let dir = TempDir::new("duplicate");
    let config = pool_config(&dir.pool(), 0, 4);
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    assert!(stored(set(&e, b"dup", &val_of(1, 1, 300))));
    e.stop_to_pool().unwrap();
    let first_file = std::fs::read(dir.pool()).unwrap();
    let now = clock.now_unix_s();
    drop(e);
    let (e, clock) = open_at(config.clone(), now + 1);
    assert!(stored(set(&e, b"dup", &val_of(1, 2, 300))));
    e.stop_to_pool().unwrap();
    let now = clock.now_unix_s();
    drop(e);
    // Put the first record's bytes back over its (now invalidated) chunk.
    let mut bytes = std::fs::read(dir.pool()).unwrap();
    let header = bytes.len() - 4 * MIB as usize;
    for (i, (old, new)) in first_file[header..]
        .iter()
        .zip(bytes[header..].iter_mut())
        .enumerate()
    {
        if i < 384 {
            *new = *old;
        }
    }
    std::fs::write(dir.pool(), &bytes).unwrap();
    let (e, _) = open_at(config, now + 1);
    assert_eq!(value(&e, b"dup"), Some(val_of(1, 2, 300)));
    assert_eq!(e.recovery_report().items_dropped_duplicate, 1);
}

/// A pool file cut short (a copy interrupted, a full disk): opened again, it is extended
/// with zeroes, and only the records left whole are served; the rest are gone, never
/// misread.
#[test]
fn a_truncated_pool_serves_only_the_records_left_whole() {
    let dir = TempDir::new("truncated");
    let config = pool_config(&dir.pool(), 0, 8);
    let (e, clock) = open_at(config.clone(), 1_700_000_000);
    for i in 0..6000 {
        assert!(stored(set(&e, key(i).as_bytes(), &val_of(i, 1, 900))));
    }
    e.stop_to_pool().unwrap();
    let now = clock.now_unix_s();
    drop(e);
    let len = std::fs::metadata(dir.pool()).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.pool())
        .unwrap();
    // Half the pages gone, and the cut in the middle of a record.
    file.set_len(len - 4 * MIB - 500).unwrap();
    drop(file);
    let (e, _) = open_at(config, now + 1);
    let report = e.recovery_report();
    let mut served = 0;
    for i in 0..6000 {
        if let Some(v) = value(&e, key(i).as_bytes()) {
            assert_eq!(v, val_of(i, 1, 900), "{}", key(i));
            served += 1;
        }
    }
    assert_eq!(served, report.items_recovered);
    assert!(
        served > 1000 && served < 6000,
        "{served} served; {report:?}"
    );
}

/// A pool made at a Unix time later than this start's (the wall clock went back between
/// two runs: a bad RTC at boot, an NTP step) cannot have its records' expiry times read.
/// Like a changed flag, that must not keep the cache down: the start is cold and says
/// why, unless `--slow-pool-mismatch refuse` asks for a refusal, which leaves the pool as
/// it was (so a start with the clock fixed recovers it).
#[test]
fn a_pool_from_a_later_clock_starts_cold_or_is_refused_as_configured() {
    let dir = TempDir::new("clock-back");
    let config = pool_config(&dir.pool(), 1, 4);
    let made_unix_s = 1_700_000_000;
    let (e, _) = open_at(config.clone(), made_unix_s);
    set(&e, b"k", b"v");
    e.stop_to_pool().unwrap();
    drop(e);
    let pristine = std::fs::read(dir.pool()).unwrap();
    let refuse = EngineConfig {
        slow_pool_mismatch: PoolMismatch::Refuse,
        ..config.clone()
    };
    let an_hour_earlier = made_unix_s - 3600;
    let text = Engine::new(refuse.clone(), ManualClock::new(an_hour_earlier))
        .err()
        .expect("refused")
        .to_string();
    assert!(text.contains("the wall clock went back"), "{text}");
    assert!(text.contains("--slow-pool-mismatch reset"), "{text}");
    assert!(
        std::fs::read(dir.pool()).unwrap() == pristine,
        "a refused open changed the pool"
    );
    // The clock fixed, the pool recovers: the refusal changed nothing.
    let (e, _) = open_at(refuse, made_unix_s + 10);
    assert_eq!(e.recovery_report().start, PoolStart::Recovered);
    assert_eq!(value(&e, b"k"), Some(b"v".to_vec()));
    e.stop_to_pool().unwrap();
    drop(e);
    // By default: a cold start that says why, and a pool that serves again.
    let (e, _) = open_at(config.clone(), an_hour_earlier);
    let report = e.recovery_report();
    assert!(report.formatted);
    assert_eq!(report.start.reason(), "clock_went_back");
    assert!(
        matches!(
            report.start,
            PoolStart::Mismatch(Mismatch::ClockWentBack { pool_zero_unix_s, .. })
                if pool_zero_unix_s > an_hour_earlier
        ),
        "{:?}",
        report.start
    );
    assert_eq!(value(&e, b"k"), None);
    set(&e, b"k2", b"v2");
    e.stop_to_pool().unwrap();
    drop(e);
    let (e, _) = open_at(config, an_hour_earlier + 5);
    assert_eq!(e.recovery_report().start, PoolStart::Recovered);
    assert_eq!(value(&e, b"k2"), Some(b"v2".to_vec()));
}
