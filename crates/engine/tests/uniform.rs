//! The `uniform` policy (HMCached's HM-UNI baseline): keys are homed in DRAM "according
//! to the ratio of the DRAM size to the dataset size", never move, and a DRAM class
//! that is full sends its overflow to the slow tier instead of evicting.

mod common;
use common::*;
use engine::*;

const MIB: u64 = 1024 * 1024;
const VALUE_BYTES: usize = 1000;

fn uniform(dram_mib: u64, slow_mib: u64, share_ppm: Option<u32>) -> EngineConfig {
    EngineConfig {
        policy: PlacementPolicy::Uniform,
        memory_limit_bytes: dram_mib * MIB,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: (slow_mib * MIB) as usize,
            backing: tier::RegionBacking::Anonymous,
            cost: tier::CostModel::NONE,
        }),
        uniform_dram_share_ppm: share_ppm,
        ..EngineConfig::default()
    }
}

fn fill(e: &Engine, keys: u32) {
    for i in 0..keys {
        let key = format!("key:{i:06}");
        assert!(
            stored(set(e, key.as_bytes(), &[b'v'; VALUE_BYTES])),
            "set {key}"
        );
    }
}

fn dram_share(e: &Engine) -> f64 {
    let dram = stat(e, "tier_dram_items") as f64;
    dram / (dram + stat(e, "tier_slow_items") as f64)
}

/// With the share given, DRAM homes that share of the keys, whatever the slow tier's
/// size; without it, the share of DRAM's pages (here 4 of 68, about 6 %): an oversized
/// slow tier would make HM-UNI look worse than HMCached defined it.
#[test]
fn dram_homes_the_configured_share_of_keys() {
    const KEYS: u32 = 3000;
    let (e, _clock) = engine_with(uniform(8, 64, Some(250_000)));
    fill(&e, KEYS);
    let share = dram_share(&e);
    assert!((0.22..0.28).contains(&share), "DRAM share {share:.3}");
    assert_eq!(stat(&e, "evictions"), 0);

    let (by_pages, _clock) = engine_with(uniform(8, 64, None));
    fill(&by_pages, KEYS);
    let share = dram_share(&by_pages);
    let page_share = 8.0 / 72.0;
    assert!(
        (page_share * 0.7..page_share * 1.3).contains(&share),
        "DRAM share {share:.3}, pages {page_share:.3}"
    );
}

/// Keys homed in DRAM beyond what DRAM holds go to the slow tier: nothing is evicted
/// while the slow tier has room, and every key reads back.
#[test]
fn a_full_dram_sends_its_share_to_the_slow_tier_instead_of_evicting() {
    // Half of 12 000 keys of ~1 KiB is far more than 4 MiB of DRAM.
    const KEYS: u32 = 12_000;
    let (e, _clock) = engine_with(uniform(4, 64, Some(500_000)));
    fill(&e, KEYS);
    assert_eq!(stat(&e, "evictions"), 0);
    assert_eq!(
        stat(&e, "tier_dram_items") + stat(&e, "tier_slow_items"),
        u64::from(KEYS)
    );
    assert!(stat(&e, "tier_dram_items") > 0);
    for i in 0..KEYS {
        let key = format!("key:{i:06}");
        assert_eq!(
            value(&e, key.as_bytes()).map(|v| v.len()),
            Some(VALUE_BYTES),
            "{key}"
        );
    }
}

#[test]
fn a_share_outside_zero_to_one_is_refused() {
    for ppm in [0, PPM + 1] {
        let err = uniform(8, 64, Some(ppm)).validate().unwrap_err();
        assert!(
            err.to_string().contains("DRAM share must be in (0, 1]"),
            "{err}"
        );
    }
    assert!(uniform(8, 64, Some(PPM)).validate().is_ok());
}
