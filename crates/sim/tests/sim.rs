//! The simulator's promises: the workload is a function of the seed, its key popularity
//! is zipfian or seed 000's hot set, and on a small seeded run the engine's Dual-LRU
//! moves the hits to DRAM and cuts slow-tier reads against `--no-migration`; the slow
//! lines written are the engine's counter. Every assertion counts; none depends on
//! timing.

use sim::workload::{key_name, Op, Workload};
use sim::{compare, run, Distribution, PolicySetting, SimConfig, ValueSizes};
use workload::Zipf;

const ZIPF: Distribution = Distribution::Zipf { theta: 0.99 };

fn ops(w: &mut Workload, n: usize) -> Vec<Op> {
    (0..n).map(|_| w.next_op()).collect()
}

/// 20 000 requests of `keys` keys from seed 7, again from seed 7, and from seed 8; and
/// the first workload, for its key ranks.
fn three_streams(
    keys: u64,
    distribution: &Distribution,
    update_ratio: f64,
) -> ([Vec<Op>; 3], Workload) {
    let workload = |seed| Workload::new(keys, distribution, update_ratio, seed).unwrap();
    let (mut a, mut b, mut c) = (workload(7), workload(7), workload(8));
    let streams = [
        ops(&mut a, 20_000),
        ops(&mut b, 20_000),
        ops(&mut c, 20_000),
    ];
    (streams, a)
}

#[test]
fn the_workload_is_a_function_of_the_seed() {
    let ([oa, ob, oc], a) = three_streams(10_000, &ZIPF, 0.1);
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
fn scrambled_keys_keep_the_rank_frequencies() {
    let mut w = Workload::new(1_000, &ZIPF, 0.0, 5).unwrap();
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
        value_sizes: ValueSizes::Fixed(1000),
        phase_change: None,
        dram_mib: 2,
        slow_mib: 10,
        ops: 200_000,
        windows: 20,
        distribution: ZIPF,
        update_ratio: 0.0,
        seed: 42,
        ops_per_s: 20_000,
        ticks_per_s: 20,
        crawler_interval_s: 0,
        engine_overrides: sim::EngineOverrides::default(),
        kernel: sim::kernel_tiering::KernelTiering::default(),
        flash: None,
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
    let dual_lru = PolicySetting::named("dual-lru").unwrap();
    let a = run(&config, &dual_lru).unwrap();
    let b = run(&config, &dual_lru).unwrap();
    assert_eq!(a, b);
    assert!(a.total.updates > 0);
    let other = run(&SimConfig { seed: 43, ..config }, &dual_lru).unwrap();
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
            value_sizes: ValueSizes::Fixed(0),
            ..small()
        },
        SimConfig {
            value_sizes: ValueSizes::Uniform { min: 10, max: 5 },
            ..small()
        },
        SimConfig {
            distribution: Distribution::Zipf { theta: -1.0 },
            ..small()
        },
        SimConfig {
            distribution: Distribution::HotSet {
                hot_first: 0,
                hot_keys: 0,
            },
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
        assert!(
            run(&config, &PolicySetting::named("dual-lru").unwrap()).is_err(),
            "{config:?}"
        );
    }
}

const HOT_SET: Distribution = Distribution::HotSet {
    hot_first: 4_000,
    hot_keys: 1_000,
};

#[test]
fn the_hot_set_workload_alternates_and_is_a_function_of_the_seed() {
    let ([oa, ob, oc], a) = three_streams(8_000, &HOT_SET, 0.0);
    assert_eq!(oa, ob);
    assert_ne!(oa, oc);
    let hot = |op: &Op| matches!(op, Op::Read(id) if (4_000..5_000).contains(id));
    // Every other request names a hot key; the others are uniform over all 8000 keys,
    // so 1/8 of them are hot too: 50% + 50% / 8 = 56.25% of the requests in all.
    assert!(oa.iter().skip(1).step_by(2).all(hot));
    let hot_share = oa.iter().filter(|op| hot(op)).count() as f64 / oa.len() as f64;
    assert!((0.55..0.575).contains(&hot_share), "{hot_share:.4}");
    // The uniform half reaches past the hot range on both sides.
    let uniform: Vec<u32> = oa
        .iter()
        .step_by(2)
        .map(|op| match op {
            Op::Read(id) | Op::Update(id) => *id,
        })
        .collect();
    assert!(uniform.iter().any(|&id| id < 400) && uniform.iter().any(|&id| id >= 7_600));
    assert_eq!(a.key_of_rank(1), None, "a hot set has no zipf ranks");
}

#[test]
fn migration_pulls_the_hot_set_into_dram() {
    // Seed 000 in small: the 1000 hot keys (about 1 MiB) fit the 2 MiB DRAM tier, and
    // they sit in the middle of the key space, away from the keys the load leaves in
    // DRAM.
    let config = SimConfig {
        keys: 8_000,
        distribution: HOT_SET,
        ..small()
    };
    let policies = PolicySetting::parse_list(&["dual-lru,no-migration"]).unwrap();
    let runs = sim::run_policies(&config, &policies).unwrap();
    let (dual_lru, frozen) = (&runs[0], &runs[1]);
    assert_eq!(
        (dual_lru.policy, frozen.policy),
        ("dual-lru", "no-migration")
    );
    assert!(dual_lru.migration_enabled && !frozen.migration_enabled);
    // A DRAM holding exactly the hot keys serves 50% + 50% / 8 of the reads; Dual-LRU
    // gets there in its steady state, no migration keeps the load-time placement.
    let steady = dual_lru.steady.dram_hit_share();
    assert!(steady > 0.55, "dual-lru steady state {steady:.3}");
    let frozen_share = frozen.steady.dram_hit_share();
    assert!(frozen_share < 0.2, "no-migration {frozen_share:.3}");
    assert!(dual_lru.steady.slow_lines_per_request() < frozen.steady.slow_lines_per_request());
    // Without churn: once the hot range is in DRAM, the uniform half of the reads (keys
    // as cold as DRAM's victims) is not promoted. The bound is 4 promotions per
    // 1 000 GETs; before admission applied to every promotion it was about 40.
    let churn = dual_lru.steady.promotions_per_1k_requests();
    assert!(
        churn <= 4.0,
        "dual-lru steady state: {churn:.2} promotions per 1 000 GETs"
    );
}

#[test]
fn slow_lines_written_count_the_demotion_copies() {
    let config = SimConfig {
        ops: 100_000,
        windows: 4,
        ..small()
    };
    let r = run(&config, &PolicySetting::named("dual-lru").unwrap()).unwrap();
    let t = &r.total;
    assert!(t.demotions > 500, "{} demotions", t.demotions);
    // Each demotion copies an item of 1062 bytes (header, key, value) into the slow
    // tier: at least 16 whole 64-byte lines written, whatever its alignment.
    assert!(
        t.slow_lines_written >= 16 * t.demotions,
        "{} lines written for {} demotions",
        t.slow_lines_written,
        t.demotions
    );
    let per_request = t.slow_lines_written as f64 / t.requests as f64;
    assert_eq!(t.slow_lines_written_per_request(), per_request);
    // The steady state is the sum of windows 3 and 4.
    let last_half: u64 = r.windows[2..].iter().map(|w| w.slow_lines_written).sum();
    assert_eq!(r.steady.slow_lines_written, last_half);
    assert_eq!(r.steady.requests, 50_000);
}
