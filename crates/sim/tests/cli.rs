//! The `fogsim` command line: policy lists, the seed 000 preset, and complete JSON/CSV.
//! Each run is small (a debug build) and bounded in time.

mod common;
use common::{fogsim, temp_path};

/// A run small enough for a debug build: 4000 keys, 4000 requests.
const SMALL: &[&str] = &[
    "--keys",
    "4000",
    "--dram-mib",
    "2",
    "--slow-mib",
    "8",
    "--ops",
    "4000",
];

/// The rows of a text table whose first cell is `label`.
fn rows<'a>(output: &'a str, label: &str) -> Vec<&'a str> {
    output
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(label))
        .collect()
}

#[test]
fn policies_run_in_order_with_a_table_each_and_a_comparison() {
    let mut args = SMALL.to_vec();
    args.extend([
        "--windows",
        "2",
        "--policy",
        "no-migration",
        "--policy",
        "dual-lru",
    ]);
    let (ok, out) = fogsim(&args);
    assert!(ok, "{out}");
    let tables: Vec<&str> = out.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(
        tables,
        [
            "== no-migration ==",
            "== dual-lru ==",
            "== comparison, whole run (windows 1-2) ==",
            "== comparison, steady state (windows 2-2) ==",
        ],
        "{out}"
    );
    // One comparison row per policy and scope.
    assert_eq!(rows(&out, "dual-lru").len(), 2, "{out}");
    assert_eq!(rows(&out, "no-migration").len(), 2, "{out}");
    // The comma list and --policy-compare are the same runs in the same order.
    let mut compare = SMALL.to_vec();
    compare.extend(["--windows", "2", "--policy-compare"]);
    let mut listed = SMALL.to_vec();
    listed.extend(["--windows", "2", "--policy", "dual-lru,no-migration"]);
    let (ok_compare, out_compare) = fogsim(&compare);
    let (ok_listed, out_listed) = fogsim(&listed);
    assert!(ok_compare && ok_listed);
    assert_eq!(out_compare, out_listed);
    assert!(out_compare.find("== dual-lru ==") < out_compare.find("== no-migration =="));
}

#[test]
fn an_unknown_policy_is_refused_with_the_known_names() {
    let mut args = SMALL.to_vec();
    args.extend(["--policy", "dual-lru,lirs"]);
    let (ok, out) = fogsim(&args);
    assert!(!ok);
    // The engine's registry, then the simulator's own settings.
    let known = format!(
        "unknown policy \"lirs\" (known: {}, no-migration, kernel-tiering)",
        engine::PlacementPolicy::NAMES.join(", ")
    );
    assert!(out.contains(&known), "{out}");
}

#[test]
fn the_seed_000_preset_sets_fogbench_s_latency_experiment() {
    let json_path = temp_path("preset.json");
    let json_arg = json_path.to_str().unwrap();
    let (ok, out) = fogsim(&[
        "--preset",
        "fogcached-latency",
        "--ops",
        "2000",
        "--windows",
        "1",
        "--json",
        json_arg,
    ]);
    assert!(ok, "{out}");
    let json = std::fs::read_to_string(&json_path).unwrap();
    std::fs::remove_file(&json_path).unwrap();
    for field in [
        "\"keys\":100000,",
        "\"value_bytes\":1024,",
        "\"dram_mib\":17,",
        "\"slow_mib\":125,",
        "\"distribution\":\"hotset\",\"hot_first\":50000,\"hot_keys\":5000,",
    ] {
        assert!(json.contains(field), "{field} missing from {json}");
    }
    assert!(
        out.contains("every other request from keys [50000, 55000)"),
        "{out}"
    );
    // An option given with the preset wins over it.
    let (ok, out) = fogsim(&[
        "--preset",
        "fogcached-latency",
        "--keys",
        "20000",
        "--dram-mib",
        "4",
        "--ops",
        "1000",
        "--windows",
        "1",
    ]);
    assert!(ok, "{out}");
    assert!(
        out.starts_with("fogsim: 20000 keys x 1024 B values, DRAM 4 MiB, slow 125 MiB"),
        "{out}"
    );
    assert!(
        out.contains("every other request from keys [10000, 15000)"),
        "{out}"
    );
}

#[test]
fn json_and_csv_hold_every_window_the_steady_state_and_the_totals() {
    let (json_path, csv_path) = (temp_path("all.json"), temp_path("all.csv"));
    let mut args = SMALL.to_vec();
    args.extend([
        "--windows",
        "4",
        "--policy-compare",
        "--json",
        json_path.to_str().unwrap(),
        "--csv",
        csv_path.to_str().unwrap(),
    ]);
    let (ok, out) = fogsim(&args);
    assert!(ok, "{out}");
    let json = std::fs::read_to_string(&json_path).unwrap();
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    std::fs::remove_file(&json_path).unwrap();
    std::fs::remove_file(&csv_path).unwrap();
    let metrics = [
        "slow_lines_per_request",
        "slow_lines_written_per_request",
        "dram_hit_share",
        "promotions_per_1k_requests",
        "demotions_per_1k_requests",
        "promotions_skipped_per_1k_requests",
        "evictions",
        "misses",
    ];
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    // Per run: 4 windows, the steady state and the total, each with every metric.
    let json_windows: Vec<&str> = json.split("{\"window\":").skip(1).collect();
    assert_eq!(json_windows.len(), 2 * 6, "{json}");
    for metric in metrics {
        assert!(header.contains(&metric), "{metric} not in {header:?}");
        for w in &json_windows {
            assert!(w.contains(&format!("\"{metric}\":")), "{metric} not in {w}");
        }
    }
    // 2 policies x (4 windows + steady + all), every row as wide as the header.
    let body: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(body.len(), 12, "{csv}");
    assert!(body.iter().all(|l| l.split(',').count() == header.len()));
    let scopes: Vec<&str> = body.iter().map(|l| l.split(',').nth(1).unwrap()).collect();
    assert_eq!(
        &scopes[..6],
        ["window", "window", "window", "window", "steady", "all"]
    );
    assert!(json.contains("\"steady_first_window\":3"), "{json}");
}
