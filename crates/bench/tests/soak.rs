//! The short soak of CI: `fogbench --verify` loads every key and runs a zipfian get/set
//! mix against a fogcached whose DRAM tier is far smaller than the data, so items live
//! in both tiers and migrate all along; every value read must be the one written, no
//! request may fail, items must move between the tiers, and the server's resident
//! memory must be flat once the cache is full. The long soak is `scripts/soak.sh`
//! (DURATION=3600 and more); its figures are in docs/results/soak.md.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::{proc_status_kib, stat, RawClient, ServerProcess};

#[path = "support/fogbench_run.rs"]
mod fogbench_run;

/// The run phase: long enough for several maintainer and migration rounds after the
/// load, short enough for CI.
const RUN_S: u64 = 30;
/// Load plus run, with room for a loaded machine; beyond it the soak is hung.
const SOAK_TIMEOUT: Duration = Duration::from_secs(240);
/// Resident memory may grow this much from the first sample of the run phase's second
/// half to its end (allocator noise), beyond 5 %.
const RSS_SLACK_KIB: u64 = 8 * 1024;

fn stat_u64(stats: &[(String, String)], name: &str) -> u64 {
    stat(stats, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric stat {name}"))
}

#[test]
fn a_verified_mixed_load_over_migrating_tiers_loses_nothing_and_keeps_memory_flat() {
    let server = ServerProcess::fogcached(&["-t", "2", "--dram", "4", "--slow-size", "64m"])
        .expect("starting fogcached");
    let pid = server.pid().expect("the server's pid");
    let json_path = std::env::temp_dir().join(format!(
        "fogbench-soak-{}-{}.json",
        std::process::id(),
        server.port()
    ));

    // Resident memory, sampled every 250 ms with the time since the start.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(kib) = proc_status_kib(pid, "VmRSS") {
                    samples.push((started.elapsed(), kib));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            samples
        })
    };

    let child = fogbench_run::spawn(
        &server.addr().to_string(),
        &json_path,
        &[
            "--load",
            "--verify",
            "--keys",
            "20000",
            "--value-size",
            "64-4096",
            "--distribution",
            "zipf",
            "--get-ratio",
            "0.8",
            "--connections",
            "16",
            "--threads",
            "2",
            "--duration-s",
            &RUN_S.to_string(),
        ],
    );
    let (code, report) = fogbench_run::finish_within(child, &json_path, SOAK_TIMEOUT);
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().expect("the sampler");
    let run = &report["run"];
    let counts = &run["counts"];
    let count = |name: &str| counts[name].as_u64().unwrap_or(u64::MAX);

    let mut client = RawClient::connect(server.addr()).expect("connecting");
    let stats = client.stats("").expect("stats");
    let moved = stat_u64(&stats, "promotions") + stat_u64(&stats, "demotions");
    println!(
        "soak: {} ops ({} gets, {} hits), {} promotions, {} demotions, {} evictions, \
         dram items {}, slow items {}",
        run["ops"],
        count("gets"),
        count("hits"),
        stat_u64(&stats, "promotions"),
        stat_u64(&stats, "demotions"),
        stat_u64(&stats, "evictions"),
        stat_u64(&stats, "tier_dram_items"),
        stat_u64(&stats, "tier_slow_items"),
    );

    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    assert_eq!(count("verify_failures"), 0, "values read back wrong");
    assert_eq!(count("error_replies"), 0, "requests refused");
    assert_eq!(run["connection_failures"].as_u64(), Some(0));
    assert_eq!(run["unanswered"].as_u64(), Some(0));
    assert!(count("hits") > 0 && count("sets") > 0, "no mixed load ran");
    assert!(moved > 0, "no item moved between the tiers");
    assert!(stat_u64(&stats, "tier_dram_items") > 0 && stat_u64(&stats, "tier_slow_items") > 0);

    // Flat memory: the run phase's second half may not grow beyond noise. The load and
    // the first half fill the cache; the samples of the last RUN_S / 2 seconds follow.
    let end = samples.last().map(|&(t, _)| t).expect("no RSS sample");
    let half = end.saturating_sub(Duration::from_secs(RUN_S / 2));
    let second_half: Vec<u64> = samples
        .iter()
        .filter(|&&(t, _)| t >= half)
        .map(|&(_, kib)| kib)
        .collect();
    let first = second_half[0];
    let peak = second_half.iter().copied().max().unwrap_or(first);
    println!("soak: server RSS {first} KiB at mid-run, peak {peak} KiB after");
    assert!(
        peak <= first + first / 20 + RSS_SLACK_KIB,
        "server RSS grew from {first} KiB to {peak} KiB in the second half of the run"
    );
    let status = server.stop().expect("stopping the server");
    assert_eq!(status.code(), Some(0), "{status}");
}
