//! The fog layer under load: fogbench `--verify` reads through a fogcached edge whose
//! cloud (memcached, 1 ms away through a delaying proxy) is killed and restarted in the
//! middle of the run. No value may be wrong; misses are allowed while the cloud is down;
//! error replies are not.
//!
//! fogcached must have been built into the same target directory (`cargo build -p server`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{stat, DelayProxy, RawClient, ServerProcess};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const KEYS: &str = "50000";
const VALUE_SIZE: &str = "32-256";

fn fogbench(server: &str, json: &std::path::Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fogbench"))
        .arg("run")
        .args(["--server", server, "--quiet", "--no-stats", "--json"])
        .arg(json)
        .args(["--keys", KEYS, "--value-size", VALUE_SIZE])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawning fogbench")
}

fn finish(mut child: Child, json: &std::path::Path) -> (Option<i32>, Value) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for fogbench") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fogbench did not finish within {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(json).expect("fogbench wrote no JSON report");
    let _ = std::fs::remove_file(json);
    (status.code(), serde_json::from_str(&text).expect("JSON"))
}

/// Sets every key once in `server` with fogbench's value pattern (what `--verify` checks).
fn load(server: &ServerProcess, name: &str) {
    let json = std::env::temp_dir().join(format!("fog-layer-{}-{name}.json", std::process::id()));
    let child = fogbench(
        &server.addr().to_string(),
        &json,
        &[
            "--load",
            "--duration-s",
            "0.1",
            "--get-ratio",
            "1",
            "--connections",
            "4",
            "--threads",
            "1",
        ],
    );
    let (code, report) = finish(child, &json);
    assert_eq!(code, Some(0), "loading {name}: {report:#}");
}

fn count(report: &Value, field: &str) -> u64 {
    report["run"]["counts"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("run.counts.{field} missing"))
}

fn edge_stat(edge: &ServerProcess, name: &str) -> u64 {
    let stats = RawClient::connect(edge.addr())
        .and_then(|mut c| c.stats(""))
        .expect("edge stats");
    stat(&stats, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn a_cloud_killed_and_restarted_under_load_costs_misses_never_errors_or_wrong_values() {
    let cloud = ServerProcess::memcached(&[]).expect("starting memcached");
    let proxy = DelayProxy::start(cloud.addr(), Duration::from_micros(500)).expect("proxy");
    load(&cloud, "cloud");
    let upstream = proxy.addr().to_string();
    let edge = ServerProcess::fogcached(&[
        "--slow-size",
        "0",
        "-t",
        "2",
        "--upstream",
        &upstream,
        "--upstream-timeout-ms",
        "300",
        "--upstream-breaker-failures",
        "3",
        "--upstream-retry-ms",
        "200",
    ])
    .expect("starting the edge");

    let json = std::env::temp_dir().join(format!("fog-layer-{}-run.json", std::process::id()));
    let run = fogbench(
        &edge.addr().to_string(),
        &json,
        &[
            "--duration-s",
            "7",
            "--get-ratio",
            "1",
            "--distribution",
            "uniform",
            "--connections",
            "16",
            "--threads",
            "2",
            "--verify",
        ],
    );
    std::thread::sleep(Duration::from_millis(1500));
    drop(cloud);
    proxy.cut_connections();
    std::thread::sleep(Duration::from_millis(1500));
    let fetched_while_down = edge_stat(&edge, "upstream_get_hits");
    let cloud = ServerProcess::memcached(&[]).expect("restarting memcached");
    proxy.set_target(cloud.addr());
    load(&cloud, "restarted cloud");
    let (code, report) = finish(run, &json);
    let fetched_at_end = edge_stat(&edge, "upstream_get_hits");

    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    assert_eq!(count(&report, "verify_failures"), 0, "a wrong value");
    assert_eq!(count(&report, "error_replies"), 0, "an error reply");
    assert_eq!(report["run"]["connection_failures"], 0);
    assert!(count(&report, "misses") > 0, "the cloud was down for 1.5 s");
    assert!(count(&report, "hits") > 0);
    assert!(
        edge_stat(&edge, "upstream_breaker_opens") >= 1,
        "the breaker opened"
    );
    assert!(
        fetched_at_end > fetched_while_down,
        "the restarted cloud filled the edge again ({fetched_while_down} -> {fetched_at_end})"
    );
}
