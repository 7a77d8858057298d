//! `fogbench reproduce all --quick` on a tiny configuration (runs of two seconds, few
//! connections) against real fogcached and Debian memcached: every experiment must
//! produce a complete report directory in which every configuration ran cleanly.
//!
//! fogcached must have been built into the same target directory, and Debian's
//! `memcached` must be installed (the project's test command installs it).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// Four experiments, twenty-six servers; a run past this is a hang, not a slow machine.
const REPRODUCE_TIMEOUT: Duration = Duration::from_secs(900);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The labels of a report's configurations table, in order.
fn configuration_labels(report: &str) -> Vec<String> {
    let table = report
        .split("## Configurations")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("REPORT.md has a Configurations section");
    table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect()
}

fn assert_plot(dir: &Path, stem: &str, report: &str) {
    let svg = dir.join(format!("{stem}.svg"));
    let text = read(&svg);
    assert!(
        text.trim_end().ends_with("</svg>"),
        "{} is cut short",
        svg.display()
    );
    assert!(
        report.contains(&format!("({stem}.svg)")),
        "REPORT.md does not show {stem}.svg"
    );
}

/// Checks one experiment's directory; returns its raw results (all runs).
fn check_experiment(dir: &Path, expected_labels: &[&str], raw_files: &[&str], plots: &[&str]) {
    let report = read(&dir.join("REPORT.md"));
    for section in [
        "## How this report was made",
        "## Configurations",
        "## Plots",
        "## Integrity",
        "## Raw data",
    ] {
        assert!(
            report.contains(section),
            "{}: no {section:?}",
            dir.display()
        );
    }
    assert!(
        report.contains("## Compared with the paper"),
        "{}: no comparison with the paper",
        dir.display()
    );
    assert!(report.contains("- Command: `"), "the command is quoted");
    assert!(report.contains("- Machine: "), "the machine is described");
    assert_eq!(configuration_labels(&report), expected_labels);
    assert!(
        !report.contains("did not run"),
        "a configuration failed:\n{report}"
    );
    assert!(
        report.contains("no verify failures, no error replies and no lost connections"),
        "integrity problems:\n{report}"
    );
    for stem in plots {
        assert_plot(dir, stem, &report);
    }
    for raw in raw_files {
        let path = dir.join("raw").join(format!("{raw}.json"));
        let results: Value = serde_json::from_str(&read(&path)).expect("raw results are JSON");
        let results = results.as_array().expect("raw results are a list");
        let labels: Vec<&str> = results.iter().filter_map(|r| r["label"].as_str()).collect();
        assert_eq!(labels, expected_labels, "{}", path.display());
        for result in results {
            let label = &result["label"];
            assert!(result["error"].is_null(), "{label}: {}", result["error"]);
            let gets = result["report"]["run"]["counts"]["gets"]
                .as_u64()
                .unwrap_or(0);
            assert!(gets > 0, "{label}: the run phase issued no gets");
            let buckets = result["report"]["run"]["latency"]["get"]["buckets"]
                .as_array()
                .map_or(0, Vec::len);
            assert!(buckets > 0, "{label}: no latency distribution");
            assert!(
                result["final_stats"]["curr_items"].as_u64().unwrap_or(0) > 0,
                "{label}: the server held no items at the end"
            );
            // fogcached reports its tiers; the time series carries them every second.
            if result["command"]
                .as_str()
                .is_some_and(|c| c.starts_with("fogcached"))
            {
                assert!(
                    result["final_stats"]["tier_dram_limit_bytes"].is_u64(),
                    "{label}"
                );
                let series = result["report"]["run"]["series"]
                    .as_array()
                    .expect("series");
                assert!(
                    series
                        .iter()
                        .any(|s| s["server"]["tier_dram_items"].is_u64()),
                    "{label}: no server stats in the time series"
                );
            }
        }
    }
}

/// `reproduce hmcached`: every configuration measured in every round, ratios to
/// DRAM-only, and the hotspot policy reading less of the slow tier than HM-UNI.
fn check_hmcached(dir: &Path) {
    let report = read(&dir.join("REPORT.md"));
    for section in [
        "## How this report was made",
        "## Configurations",
        "## Throughput relative to DRAM-only",
        "## Slow-tier latency sweep",
        "## Plots",
        "## Compared with the paper",
        "## Integrity",
        "## Raw data",
    ] {
        assert!(report.contains(section), "hmcached: no {section:?}");
    }
    assert!(
        report.contains("Load average"),
        "the load average is stated"
    );
    assert!(
        report.contains("`--slow-cost hmcached`"),
        "the paper's cost by default"
    );
    assert_eq!(
        configuration_labels(&report),
        [
            "dram-only",
            "hotspot",
            "hyperbolic",
            "dual-lru",
            "two-level",
            "uniform",
            "hotspot-x1",
            "dual-lru-x1",
            "hotspot-x4",
            "dual-lru-x4",
        ]
    );
    assert!(!report.contains("did not run"), "{report}");
    assert!(
        report.contains("no verify failures, no error replies and no lost connections"),
        "integrity problems:\n{report}"
    );
    for stem in [
        "throughput-ratio",
        "slow-lines-per-request",
        "latency-sweep",
    ] {
        assert_plot(dir, stem, &report);
    }
    let lines_per_request = |arm: &Value| {
        let sum = |field: &str| -> u64 {
            arm["rounds"]
                .as_array()
                .expect("rounds")
                .iter()
                .map(|r| r["stats_delta"][field].as_u64().unwrap_or(0))
                .sum()
        };
        (sum("slow_lines_read") + sum("slow_lines_written")) as f64
            / (sum("cmd_get") + sum("cmd_set")).max(1) as f64
    };
    for raw in ["uni-3-2k-95-5", "latency-sweep"] {
        let arms: Value = serde_json::from_str(&read(&dir.join("raw").join(format!("{raw}.json"))))
            .expect("raw results are JSON");
        let arms = arms.as_array().expect("a list of configurations");
        for arm in arms {
            let label = &arm["label"];
            assert!(arm["error"].is_null(), "{label}: {}", arm["error"]);
            let rounds = arm["rounds"].as_array().expect("rounds");
            assert_eq!(rounds.len(), 2, "{label}: two rounds at quick scale");
            for round in rounds {
                assert!(round["ops_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{label}");
                assert!(round["gets"].as_u64().unwrap_or(0) > 0, "{label}");
                assert_eq!(round["problems"].as_u64(), Some(0), "{label}");
                assert!(
                    round["server_cpu_s"].as_f64().is_some_and(|s| s >= 0.0),
                    "{label}: the server's CPU time is measured"
                );
            }
        }
        if raw == "uni-3-2k-95-5" {
            let find = |label: &str| {
                arms.iter()
                    .find(|a| a["label"] == label)
                    .unwrap_or_else(|| panic!("no {label}"))
            };
            // DRAM-only touches no slow tier; hotspot moves the hot items to DRAM and so
            // reads and writes less of it per request than HM-UNI, which never moves one.
            assert_eq!(lines_per_request(find("dram-only")), 0.0);
            let (hotspot, uniform) = (
                lines_per_request(find("hotspot")),
                lines_per_request(find("uniform")),
            );
            assert!(
                hotspot > 0.0 && hotspot < 0.8 * uniform,
                "hotspot {hotspot:.2} slow lines per request, uniform {uniform:.2}"
            );
        }
    }
}

#[test]
fn reproduce_quick_writes_a_complete_report_for_every_experiment() {
    let out = std::env::temp_dir().join(format!("fogbench-reproduce-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let fogcached = testkit::fogcached_binary().expect("fogcached is built");
    let mut command = Command::new(env!("CARGO_BIN_EXE_fogbench"));
    command
        .args([
            "reproduce",
            "all",
            "--quick",
            // Two seconds: at least one per-second stats sample in every run.
            "--duration-s",
            "2",
            "--connections",
            "16",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--fogcached")
        .arg(&fogcached);
    let run = testkit::run_bounded(&mut command, REPRODUCE_TIMEOUT).expect("running fogbench");
    assert!(run.success, "fogbench reproduce failed:\n{}", run.output);

    let six = [
        "memcached-dram",
        "dram-only",
        "slow-only",
        "hybrid-nomig",
        "hybrid",
        "memcached-extstore",
    ];
    // fogcached-latency adds extstore reading every value from its file.
    let mut seven = six.to_vec();
    seven.push("memcached-extstore-file-reads");
    check_experiment(
        &out.join("fogcached-latency"),
        &seven,
        &["results"],
        &[
            "latency-distribution",
            "latency-distribution-open-loop",
            "dram-hit-share",
        ],
    );
    // That row exists so that extstore's latency is one of file reads: under 1 % of its
    // GETs miss, where the 1:7 row misses most of them, and most hits read the file.
    let latency: Value =
        serde_json::from_str(&read(&out.join("fogcached-latency/raw/results.json"))).expect("JSON");
    let miss_pct = |label: &str| {
        let result = latency
            .as_array()
            .expect("list")
            .iter()
            .find(|r| r["label"] == label)
            .unwrap_or_else(|| panic!("no {label} in results.json"));
        let counts = &result["report"]["run"]["counts"];
        let hits = counts["hits"].as_u64().expect("hits");
        let misses = counts["misses"].as_u64().expect("misses");
        misses as f64 * 100.0 / (hits + misses) as f64
    };
    let (one_to_seven, file_reads) = (
        miss_pct("memcached-extstore"),
        miss_pct("memcached-extstore-file-reads"),
    );
    assert!(
        file_reads < 1.0 && file_reads < one_to_seven,
        "extstore reading from its file missed {file_reads:.2} % of GETs (1:7: {one_to_seven:.2} %)"
    );
    let report = read(&out.join("fogcached-latency/REPORT.md"));
    assert!(
        report.contains("`memcached-extstore-file-reads`** is memcached with extstore"),
        "REPORT.md does not say how the extstore row was set up"
    );
    assert!(
        report.contains("so its latencies are those of file reads"),
        "most of the extstore row's hits should read the file:\n{report}"
    );
    check_experiment(
        &out.join("ycsb"),
        &six,
        &["read-write", "read-only"],
        &[
            "dram-hit-share",
            "promotions",
            "latency-distribution-read-write",
        ],
    );
    check_experiment(
        &out.join("edge-cloud"),
        &[
            "edge-memcached",
            "edge-dram",
            "edge-hybrid",
            "rt-dram",
            "rt-hybrid",
        ],
        &["results"],
        &["dram-occupancy", "edge-hit-ratio", "client-latency"],
    );
    // Look-aside: the edges were filled from the origin, and hit afterwards.
    let edge: Value =
        serde_json::from_str(&read(&out.join("edge-cloud/raw/results.json"))).expect("JSON");
    for result in edge.as_array().expect("list") {
        let label = result["label"].as_str().unwrap_or("");
        if label.starts_with("rt-") {
            // Read-through: the edge filled itself from the origin and hit afterwards;
            // the client saw a miss only where a fetch failed (a timeout on a busy
            // machine), never an error.
            let stats = &result["final_stats"];
            let count = |name: &str| stats[name].as_u64().unwrap_or(0);
            assert!(count("upstream_fills") > 0, "{label}: {stats}");
            assert!(count("get_hits") > 0, "{label}: {stats}");
            let misses = result["report"]["run"]["counts"]["misses"]
                .as_u64()
                .unwrap_or(0);
            assert!(
                misses == 0 || count("upstream_timeouts") + count("upstream_errors") > 0,
                "{label}: {misses} misses with every fetch answered: {stats}"
            );
            continue;
        }
        let lookaside = &result["report"]["run"]["lookaside"];
        assert!(
            lookaside["edge_fills"].as_u64().unwrap_or(0) > 0,
            "{lookaside}"
        );
        assert!(
            lookaside["edge_hits"].as_u64().unwrap_or(0) > 0,
            "{lookaside}"
        );
    }
    check_hmcached(&out.join("hmcached"));
    let index = read(&out.join("README.md"));
    for name in ["fogcached-latency", "ycsb", "edge-cloud", "hmcached"] {
        assert!(
            index.contains(&format!("({name}/REPORT.md)")),
            "index lacks {name}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
