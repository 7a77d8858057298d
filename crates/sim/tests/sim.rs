//! The simulator's promises: the workload is a function of the seed, its key popularity
//! is zipfian, and on a small seeded run the engine's Dual-LRU moves the hits to DRAM
//! and cuts slow-tier reads against `--no-migration`. Every assertion counts; none
//! depends on timing.

use sim::rng::Rng;
use sim::workload::{key_name, Op, Workload};
use sim::zipf::Zipf;
use sim::{compare, run, SimConfig};

fn ops(w: &mut Workload, n: usize) -> Vec<Op> {
    (0..n).map(|_| w.next_op()).collect()
}

#[test]
fn the_workload_is_a_function_of_the_seed() {
    let mut a = Workload::new(10_000, 0.99, 0.1, 7).unwrap();
    let mut b = Workload::new(10_000, 0.99, 0.1, 7).unwrap();
    let mut c = Workload::new(10_000, 0.99, 0.1, 8).unwrap();
    let (oa, ob, oc) = (
        ops(&mut a, 20_000),
        ops(&mut b, 20_000),
        ops(&mut c, 20_000),
    );
    assert_eq!(oa, ob);
    assert_ne!(oa, oc);
    // Both kinds of request occur, in about the configured proportion.
    let updates = oa.iter().filter(|o| matches!(o, Op::Update(_))).count();
    assert!(
        (1_600..=2_400).contains(&updates),
        "{updates} updates of 20000"
    );
    // The scramble is a permutation: every rank has its own key.
    let mut keys: Vec<u32> = (1..=10_000).filter_map(|r| a.key_of_rank(r)).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 10_000);
    assert_eq!(a.key_of_rank(0), None);
    assert_eq!(a.key_of_rank(10_001), None);
}

#[test]
fn zipf_frequencies_match_theory_for_a_small_n() {
    const N: u64 = 20;
    const SAMPLES: u64 = 400_000;
    let zipf = Zipf::new(N, 0.99).unwrap();
    let mut rng = Rng::new(2024, 0);
    let mut counts = [0u64; N as usize];
    for _ in 0..SAMPLES {
        let k = zipf.sample(&mut rng);
        counts[(k - 1) as usize] += 1;
    }
    let mut chi2 = 0.0;
    for (i, &count) in counts.iter().enumerate() {
        let p = zipf.probability(i as u64 + 1);
        let expected = p * SAMPLES as f64;
        let sigma = (SAMPLES as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (count as f64 - expected).abs() <= 5.0 * sigma,
            "rank {}: {count} samples, expected {expected:.0} +- {sigma:.0}",
            i + 1
        );
        chi2 += (count as f64 - expected).powi(2) / expected;
    }
    // 99.9th percentile of chi-square with 19 degrees of freedom is 43.8.
    assert!(chi2 < 43.8, "chi-square {chi2:.1}");
    // The head is where zipf differs from uniform: rank 1 over rank 2 is 2^0.99.
    let head_ratio = counts[0] as f64 / counts[1] as f64;
    assert!((1.90..2.08).contains(&head_ratio), "{head_ratio}");
}

#[test]
fn scrambled_keys_keep_the_rank_frequencies() {
    let mut w = Workload::new(1_000, 0.99, 0.0, 5).unwrap();
    let zipf = Zipf::new(1_000, 0.99).unwrap();
    let hottest = w.key_of_rank(1).unwrap();
    let samples = 200_000;
    let hits = (0..samples)
        .filter(|_| w.next_op() == Op::Read(hottest))
        .count() as f64;
    let p = zipf.probability(1);
    let sigma = (samples as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (hits - p * samples as f64).abs() <= 5.0 * sigma,
        "{hits} reads of the hottest key, expected {:.0}",
        p * samples as f64
    );
    // The hottest key is not simply the first one loaded.
    let mut name = Vec::new();
    key_name(hottest, &mut name);
    assert_eq!(name.len(), sim::workload::KEY_BYTES);
}

/// A run small enough for a debug build: 2 MiB of DRAM, a dataset of 4x that.
fn small() -> SimConfig {
    SimConfig {
        keys: SimConfig::keys_for_dram_ratio(2, 1000, 4),
        value_bytes: 1000,
        dram_mib: 2,
        slow_mib: 10,
        ops: 200_000,
        windows: 20,
        theta: 0.99,
        update_ratio: 0.0,
        seed: 42,
        ops_per_s: 20_000,
        ticks_per_s: 20,
        crawler_interval_s: 0,
    }
}

#[test]
fn migration_moves_the_hits_to_dram_and_cuts_slow_tier_reads() {
    let config = small();
    let c = compare(&config).unwrap();
    let (with, without) = (&c.with_migration, &c.without_migration);
    for r in [with, without] {
        assert_eq!(r.windows.len(), 20);
        assert_eq!(r.total.requests, 200_000);
        assert_eq!(r.load.stored, config.keys);
        assert!(
            (3.9..4.1).contains(&r.load.dataset_to_dram_ratio),
            "{}",
            r.load.dataset_to_dram_ratio
        );
        // The slow tier holds the whole dataset: every read hits, with the right value.
        assert_eq!(r.total.misses, 0);
        assert_eq!(r.total.dram_hits + r.total.slow_hits, 200_000);
        assert_eq!((r.wrong_values, r.failed_stores), (0, 0));
    }
    // With migration, the DRAM share of hits rises from the first window to the last.
    let first = with.first().unwrap().dram_hit_share();
    let last = with.last().unwrap().dram_hit_share();
    assert!(last > first + 0.10, "first {first:.3}, last {last:.3}");
    assert!(with.total.promotions > 0 && with.total.demotions > 0);
    // Without it placement is frozen after the load: no moves, a flat, low DRAM share.
    assert_eq!((without.total.promotions, without.total.demotions), (0, 0));
    let frozen = without.total.dram_hit_share();
    assert!(frozen < 0.35, "{frozen:.3}");
    assert!(last > 2.0 * frozen, "last {last:.3}, without {frozen:.3}");
    // And slow-tier lines read per request fall against no migration.
    let lines_with = with.total.slow_lines_per_request();
    let lines_without = without.total.slow_lines_per_request();
    assert!(
        lines_with < 0.5 * lines_without,
        "{lines_with:.3} with migration, {lines_without:.3} without"
    );
    assert!(
        with.last().unwrap().slow_lines_per_request()
            < without.last().unwrap().slow_lines_per_request()
    );
}

#[test]
fn a_seeded_run_is_reproducible() {
    let config = SimConfig {
        ops: 50_000,
        windows: 5,
        update_ratio: 0.05,
        ..small()
    };
    let a = run(&config, true).unwrap();
    let b = run(&config, true).unwrap();
    assert_eq!(a, b);
    assert!(a.total.updates > 0);
    let other = run(&SimConfig { seed: 43, ..config }, true).unwrap();
    assert_ne!(a.windows, other.windows);
}

#[test]
fn bad_settings_are_errors_not_panics() {
    for config in [
        SimConfig { keys: 0, ..small() },
        SimConfig {
            windows: 0,
            ..small()
        },
        SimConfig {
            value_bytes: 4,
            ..small()
        },
        SimConfig {
            theta: -1.0,
            ..small()
        },
        SimConfig {
            update_ratio: 1.5,
            ..small()
        },
        SimConfig {
            ticks_per_s: 0,
            ..small()
        },
        SimConfig {
            slow_mib: 0,
            ..small()
        },
    ] {
        assert!(run(&config, true).is_err(), "{config:?}");
    }
}

#[test]
fn head_probability_sums_the_top_ranks() {
    let zipf = Zipf::new(100, 0.99).unwrap();
    let top3: f64 = (1..=3).map(|k| zipf.probability(k)).sum();
    assert!((zipf.head_probability(3) - top3).abs() < 1e-12);
    assert!((zipf.head_probability(100) - 1.0).abs() < 1e-12);
    assert!((zipf.head_probability(1_000) - 1.0).abs() < 1e-12);
    assert_eq!(zipf.head_probability(0), 0.0);
}
