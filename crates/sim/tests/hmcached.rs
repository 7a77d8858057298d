//! The simulator's additions for HMCached's experiments (seed 002 section 4): value sizes
//! that vary per key (Uni-X-Y), the two-dataset phase change of section 4.6, and the
//! kernel-tiering page model run beside the engine's policies. Small seeded runs; every
//! assertion counts.

use sim::kernel_tiering::KernelTiering;
use sim::{run, Distribution, EngineOverrides, PhaseChange, PolicySetting, SimConfig, ValueSizes};

fn small() -> SimConfig {
    SimConfig {
        keys: 6_000,
        value_sizes: ValueSizes::Uniform { min: 1, max: 2048 },
        phase_change: None,
        dram_mib: 2,
        slow_mib: 40,
        ops: 200_000,
        windows: 4,
        distribution: Distribution::Zipf { theta: 0.99 },
        update_ratio: 0.05,
        seed: 42,
        ops_per_s: 20_000,
        ticks_per_s: 20,
        crawler_interval_s: 0,
        engine_overrides: EngineOverrides::default(),
        kernel: KernelTiering::default(),
        flash: None,
    }
}

#[test]
fn value_sizes_are_a_function_of_the_key_and_the_seed_within_their_bounds() {
    let uniform = ValueSizes::parse("1-8192").unwrap();
    assert_eq!(uniform, ValueSizes::Uniform { min: 1, max: 8192 });
    let sizes: Vec<usize> = (0..20_000).map(|id| uniform.size_of(id, 7)).collect();
    assert!(sizes.iter().all(|&s| (1..=8192).contains(&s)));
    assert_eq!(
        sizes,
        (0..20_000)
            .map(|id| uniform.size_of(id, 7))
            .collect::<Vec<_>>()
    );
    assert_ne!(
        sizes,
        (0..20_000)
            .map(|id| uniform.size_of(id, 8))
            .collect::<Vec<_>>()
    );
    // Uniform: mean about 4096, both ends reached.
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    assert!((3950.0..4250.0).contains(&mean), "{mean}");
    assert!(sizes.iter().any(|&s| s < 100) && sizes.iter().any(|&s| s > 8090));
    // Normal(4096, 1024), clamped to 1..=8192: about 68 % within one deviation.
    let normal = ValueSizes::parse("normal:4096:1024").unwrap();
    let sizes: Vec<usize> = (0..20_000).map(|id| normal.size_of(id, 7)).collect();
    let within = sizes
        .iter()
        .filter(|&&s| (3072..=5120).contains(&s))
        .count();
    assert!((13_000..14_300).contains(&within), "{within} of 20000");
    assert!(sizes.iter().all(|&s| (1..=8192).contains(&s)));
    assert_eq!(ValueSizes::parse("1000").unwrap(), ValueSizes::Fixed(1000));
    for bad in ["0", "9-3", "1-99999999", "normal:x:1", "big"] {
        assert!(ValueSizes::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn varied_value_sizes_are_stored_and_read_back_whole_under_every_policy() {
    let config = SimConfig {
        ops: 40_000,
        ..small()
    };
    for name in ["hotspot", "dual-lru", "uniform", "kernel-tiering"] {
        let r = run(&config, &PolicySetting::named(name).unwrap()).unwrap();
        assert_eq!(r.load.stored, config.keys, "{name}");
        // The read checks each value's length and first bytes.
        assert_eq!((r.wrong_values, r.failed_stores), (0, 0), "{name}");
        assert_eq!(
            r.total.dram_hits + r.total.slow_hits + r.total.misses,
            r.total.reads,
            "{name}"
        );
        // HM-UNI never moves an item: a key hashed to DRAM whose class has no DRAM page
        // (2 pages for some 30 classes here) is evicted there; the others keep every key.
        if name != "uniform" {
            assert_eq!(r.total.misses, 0, "{name}");
        }
    }
}

#[test]
fn the_kernel_tiering_model_counts_slow_lines_and_page_moves_consistently() {
    let config = small();
    let r = run(&config, &PolicySetting::named("kernel-tiering").unwrap()).unwrap();
    let k = r.kernel.expect("kernel-tiering reports its model");
    let t = &r.total;
    // The dataset is 3x the fast node: every page is first touched fast (kswapd keeps
    // room by demoting), most of them end up slow, and hot ones are promoted back.
    assert_eq!(k.fast_frames, 2 * 1024 * 1024 / 4096);
    assert_eq!(k.counters.allocated_fast, k.pages);
    assert!(
        r.load.demotions > k.pages / 2,
        "{} of {} pages",
        r.load.demotions,
        k.pages
    );
    assert!(t.promotions > 0 && t.demotions > 0, "{t:?}");
    assert!(t.hint_faults >= t.promotions, "{t:?}");
    // Every promotion read a page (64 lines) of the slow node, every slow hit at least
    // one line of it; every demotion wrote a page.
    assert!(
        t.slow_lines_read >= 64 * t.promotions + t.slow_hits,
        "{t:?}"
    );
    assert!(t.slow_lines_written >= 64 * t.demotions, "{t:?}");
    // Promotion moves the hits to DRAM: the last window serves more of them than the
    // first.
    let (first, last) = (r.windows[0].dram_hit_share(), r.windows[3].dram_hit_share());
    assert!(last > first, "first {first:.3}, last {last:.3}");
    // The model's items are counted by page: both tiers hold some.
    assert_eq!(r.items, config.keys);
    assert!(t.dram_items > 0 && t.slow_items > 0);
    // With a fast node as large as everything, nothing is slow and nothing moves.
    let roomy = SimConfig {
        dram_mib: 40,
        ..config.clone()
    };
    let r = run(&roomy, &PolicySetting::named("kernel-tiering").unwrap()).unwrap();
    assert_eq!(r.total.slow_lines_read + r.total.slow_lines_written, 0);
    assert_eq!((r.total.promotions, r.total.demotions), (0, 0));
    assert_eq!(r.total.dram_hit_share(), 1.0);
}

#[test]
fn a_promotion_rate_limit_slows_the_kernel_model_down() {
    let config = SimConfig {
        update_ratio: 0.0,
        ..small()
    };
    let unlimited = run(&config, &PolicySetting::named("kernel-tiering").unwrap()).unwrap();
    let limited_config = SimConfig {
        kernel: KernelTiering {
            promote_rate_limit_mbps: 1,
            ..KernelTiering::default()
        },
        ..config
    };
    let limited = run(
        &limited_config,
        &PolicySetting::named("kernel-tiering").unwrap(),
    )
    .unwrap();
    // 1 MB/s is 256 pages per simulated second; the run is 10 s plus the load's 0.3 s.
    let seconds = (limited.total.end_s + 1) as f64;
    assert!(
        limited.total.promotions as f64 <= 256.0 * seconds,
        "{} promotions in {seconds} s",
        limited.total.promotions
    );
    assert!(limited.total.promotions < unlimited.total.promotions);
    let k = limited.kernel.unwrap();
    assert!(k.counters.promotions_rate_limited > 0);
}

/// Section 4.6 in small: dataset A of 600-byte values, B of 6000-byte ones (two slab
/// classes apart), DRAM far smaller than either; phases A, B, A.
fn phase_change(engine_overrides: EngineOverrides) -> SimConfig {
    SimConfig {
        keys: 3_000,
        value_sizes: ValueSizes::Fixed(600),
        phase_change: Some(PhaseChange {
            keys: 3_000,
            value_sizes: ValueSizes::Fixed(6_000),
            phases: 3,
        }),
        dram_mib: 4,
        slow_mib: 40,
        ops: 300_000,
        windows: 6,
        update_ratio: 0.0,
        // More automover passes per phase: one per 5 000 requests.
        ops_per_s: 5_000,
        ticks_per_s: 5,
        engine_overrides,
        ..small()
    }
}

/// DRAM pages of the class whose chunks hold `bytes`-byte values, at the end of each
/// window.
fn pages_holding(run: &sim::RunReport, value_bytes: u64) -> Vec<u64> {
    run.windows
        .iter()
        .map(|w| {
            w.dram_pages_by_class
                .iter()
                .filter(|(chunk, _)| (value_bytes..value_bytes * 5 / 4 + 100).contains(chunk))
                .map(|(_, pages)| pages)
                .sum()
        })
        .collect()
}

#[test]
fn a_phase_change_alternates_the_datasets_and_reassignment_moves_dram_pages_to_the_new_one() {
    let hotspot = PolicySetting::named("hotspot").unwrap();
    let reassign = run(&phase_change(EngineOverrides::default()), &hotspot).unwrap();
    let calcific = run(
        &phase_change(EngineOverrides {
            benefit_reassign: Some(false),
            slab_automove: Some(0),
            ..EngineOverrides::default()
        }),
        &hotspot,
    )
    .unwrap();
    for r in [&reassign, &calcific] {
        let phases: Vec<u32> = r.windows.iter().map(|w| w.phase).collect();
        assert_eq!(phases, [1, 1, 2, 2, 3, 3]);
        assert_eq!(r.load.stored, 6_000);
        assert_eq!((r.wrong_values, r.total.misses), (0, 0));
    }
    let b_reassign = pages_holding(&reassign, 6_000);
    let a_reassign = pages_holding(&reassign, 600);
    // Phase 2 requests B: reassignment gives B's class DRAM pages it did not have at the
    // end of phase 1, taken from A's, and phase 3 gives them back.
    assert!(b_reassign[3] > b_reassign[1], "B's pages {b_reassign:?}");
    assert!(a_reassign[3] < a_reassign[1], "A's pages {a_reassign:?}");
    assert!(a_reassign[5] > a_reassign[3], "A's pages {a_reassign:?}");
    // Without any page moves the split made by the load stays.
    let b_calcific = pages_holding(&calcific, 6_000);
    assert!(
        b_calcific.windows(2).all(|w| w[0] == w[1]),
        "B's pages {b_calcific:?}"
    );
    // And in phase 2 the reassigning cache serves more of B's hits from DRAM.
    let share = |r: &sim::RunReport| r.windows[3].dram_hit_share();
    assert!(
        share(&reassign) > share(&calcific),
        "reassign {:.3}, calcific {:.3}",
        share(&reassign),
        share(&calcific)
    );
}
