//! The flash model in whole runs: fed by the engine's own evictions, it never serves a
//! value stored over since it went down, every eviction reaches it, and without
//! `--flash-size` (or with 0) fogsim writes exactly what it wrote before the model
//! existed. Small seeded runs; every assertion counts, none depends on timing.

use sim::flash::{FlashConfig, Recache};
use sim::{run, Distribution, PolicySetting, SimConfig, ValueSizes};
mod common;
use common::{fogsim, temp_path};

/// DRAM 2 MiB, no slow tier, a dataset of ~8x DRAM, a flash of 8 MiB in 256 KiB
/// segments: the flash fills and reclaims within the run.
fn small_with_flash(update_ratio: f64, recache: Recache) -> SimConfig {
    let mut flash = FlashConfig::new(8 << 20);
    flash.segment_bytes = 256 << 10;
    flash.recache = recache;
    SimConfig {
        keys: SimConfig::keys_for_dram_ratio(2, 1000, 8),
        value_sizes: ValueSizes::Fixed(1000),
        phase_change: None,
        dram_mib: 2,
        slow_mib: 0,
        ops: 100_000,
        windows: 4,
        distribution: Distribution::Zipf { theta: 0.99 },
        update_ratio,
        seed: 42,
        ops_per_s: 20_000,
        ticks_per_s: 20,
        crawler_interval_s: 0,
        engine_overrides: sim::EngineOverrides::default(),
        kernel: sim::kernel_tiering::KernelTiering::default(),
        flash: Some(flash),
    }
}

#[test]
fn keys_stored_over_after_they_went_to_flash_are_never_served_stale() {
    let dual_lru = PolicySetting::named("dual-lru").unwrap();
    for recache in [Recache::Always, Recache::Never] {
        // A third of the requests store over a key: many of them are on flash.
        let report = run(&small_with_flash(0.3, recache), &dual_lru).unwrap();
        let flash = report.flash.as_ref().unwrap();
        let c = &flash.counters;
        assert_eq!(
            c.stale_hits, 0,
            "{recache:?}: flash served a stored-over value"
        );
        assert_eq!(report.wrong_values, 0);
        assert!(c.invalidations > 1_000, "{c:?}");
        assert!(report.total.flash.hits > 1_000, "{c:?}");
        assert!(c.segments_reclaimed > 0, "{c:?}");
        // The model saw every eviction the engine made.
        assert_eq!(flash.events_dropped, 0);
        assert_eq!(
            c.admitted_items + c.clean_evictions + c.not_admitted + c.too_large,
            report.load.evictions + report.total.evictions,
            "{c:?}"
        );
    }
}

#[test]
fn an_item_copied_up_and_evicted_again_costs_no_device_write() {
    let report = run(
        &small_with_flash(0.0, Recache::Always),
        &PolicySetting::named("dual-lru").unwrap(),
    )
    .unwrap();
    let c = &report.flash.as_ref().unwrap().counters;
    // GET-only: after the load every eviction is of an item copied up from flash whose
    // copy is still there, or of one whose segment was reclaimed meanwhile.
    assert!(c.copy_ups > 10_000, "{c:?}");
    assert!(c.clean_evictions > c.copy_ups / 2, "{c:?}");
    assert!(
        c.admitted_items < report.load.keys + c.copy_ups / 2,
        "{c:?}"
    );
}

const SMALL: &[&str] = &[
    "--keys",
    "4000",
    "--dram-mib",
    "2",
    "--slow-mib",
    "8",
    "--ops",
    "4000",
    "--windows",
    "2",
    "--update-ratio",
    "0.1",
    "--policy",
    "dual-lru,hotspot",
];

#[test]
fn flash_size_0_writes_exactly_what_a_run_without_it_writes() {
    let (plain_json, zero_json) = (temp_path("plain.json"), temp_path("zero.json"));
    let mut plain = SMALL.to_vec();
    plain.extend(["--json", plain_json.to_str().unwrap()]);
    let mut zero = SMALL.to_vec();
    zero.extend(["--flash-size", "0", "--json", zero_json.to_str().unwrap()]);
    let (ok_plain, out_plain) = fogsim(&plain);
    let (ok_zero, out_zero) = fogsim(&zero);
    let json_plain = std::fs::read_to_string(&plain_json).unwrap();
    let json_zero = std::fs::read_to_string(&zero_json).unwrap();
    std::fs::remove_file(&plain_json).unwrap();
    std::fs::remove_file(&zero_json).unwrap();
    assert!(ok_plain && ok_zero, "{out_plain}\n{out_zero}");
    assert_eq!(out_plain, out_zero);
    assert_eq!(json_plain, json_zero);
    // Nothing of the flash model shows: the output is the one from before it existed.
    assert!(!out_plain.to_lowercase().contains("flash"), "{out_plain}");
    assert!(!json_plain.contains("flash"), "{json_plain}");
    // --flash-* options without a flash tier are a mistake, said so.
    let mut stray = SMALL.to_vec();
    stray.extend(["--flash-reclaim", "fifo"]);
    let (ok, out) = fogsim(&stray);
    assert!(!ok);
    assert!(out.contains("--flash-* options need --flash-size"), "{out}");
}

#[test]
fn a_flash_run_reports_its_tier_and_may_have_no_slow_tier() {
    let json_path = temp_path("flash.json");
    let (ok, out) = fogsim(&[
        "--keys",
        "16000",
        "--dram-mib",
        "2",
        "--slow-mib",
        "0",
        "--flash-size",
        "8M",
        "--flash-segment-bytes",
        "256K",
        "--flash-reclaim",
        "least-live",
        "--ops",
        "20000",
        "--windows",
        "2",
        "--json",
        json_path.to_str().unwrap(),
    ]);
    let json = std::fs::read_to_string(&json_path).unwrap();
    std::fs::remove_file(&json_path).unwrap();
    assert!(ok, "{out}");
    assert!(out.contains("; flash 8 MiB in 32 segments of 256 KiB, reclaim least-live"));
    assert!(out.contains("B per flash item"), "{out}");
    for field in [
        "\"flash\":{\"size_bytes\":8388608,\"segment_bytes\":262144,\"segments\":32,\"reclaim\":\"least-live\"",
        "\"flash_hits\":",
        "\"hit_ratio_with_flash\":",
        "\"flash_write_amplification\":",
        "\"flash_read_bytes_per_get\":",
        "\"dram_bytes_per_item\":",
        "\"tag_collisions\":",
    ] {
        assert!(json.contains(field), "{field} missing from {json}");
    }
    // Without flash, a slow tier is still required.
    let (ok, out) = fogsim(&["--keys", "1000", "--slow-mib", "0", "--ops", "100"]);
    assert!(!ok);
    assert!(out.contains("--slow-mib must be at least 1"), "{out}");
}
