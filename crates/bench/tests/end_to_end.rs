//! End-to-end: the `fogbench` binary against real servers started on loopback.
//!
//! fogcached must have been built into the same target directory (`cargo build -p server`,
//! which `cargo test --workspace` does).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::ServerProcess;

/// A fogbench run that has not finished by then is a hang, not a slow machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs fogbench with `args` plus `--server` and `--json`, returns (exit code, report).
fn fogbench(server: &ServerProcess, args: &[&str]) -> (Option<i32>, Value) {
    let json_path = std::env::temp_dir().join(format!(
        "fogbench-test-{}-{}.json",
        std::process::id(),
        server.port()
    ));
    let server_arg = server.addr().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fogbench"))
        .arg("run")
        .args(["--server", &server_arg, "--quiet", "--json"])
        .arg(&json_path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawning fogbench");
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
    let text = std::fs::read_to_string(&json_path).expect("fogbench wrote no JSON report");
    let _ = std::fs::remove_file(&json_path);
    (
        status.code(),
        serde_json::from_str(&text).expect("the report is JSON"),
    )
}

fn count(report: &Value, phase: &str, field: &str) -> u64 {
    report[phase]["counts"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("{phase}.counts.{field} missing"))
}

fn assert_latency_fields(report: &Value, op: &str) {
    let latency = &report["run"]["latency"][op];
    for field in ["count", "p50_us", "p90_us", "p99_us", "p999_us", "max_us"] {
        assert!(
            latency[field].is_number(),
            "run.latency.{op}.{field} missing"
        );
    }
    assert!(
        latency["count"].as_u64().unwrap_or(0) > 0,
        "no {op} measured"
    );
    assert!(latency["p50_us"].as_f64() <= latency["max_us"].as_f64());
}

#[test]
fn closed_loop_with_verify_against_fogcached() {
    let server = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting fogcached");
    let (code, report) = fogbench(
        &server,
        &[
            "--duration-s",
            "1.5",
            "--connections",
            "256",
            "--threads",
            "4",
            "--keys",
            "2000",
            "--value-size",
            "16-2048",
            "--distribution",
            "zipf",
            "--load",
            "--verify",
        ],
    );
    server.stop().expect("stopping fogcached");

    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    assert_eq!(
        report["load"]["ops"], 2000,
        "the load phase sets every key once"
    );
    assert_eq!(count(&report, "load", "error_replies"), 0);
    assert!(report["run"]["ops"].as_u64().unwrap_or(0) > 0);
    assert_eq!(count(&report, "run", "verify_failures"), 0);
    assert_eq!(count(&report, "run", "error_replies"), 0);
    // Every key was loaded and nothing can be evicted at this size: every get hits.
    assert_eq!(count(&report, "run", "misses"), 0);
    assert!(count(&report, "run", "hits") > 0);
    assert_eq!(report["run"]["connection_failures"], 0);
    assert_eq!(report["config"]["connections"], 256);
    assert_eq!(report["config"]["mode"], "closed");
    for op in ["get", "set", "all"] {
        assert_latency_fields(&report, op);
    }
    let series = report["run"]["series"].as_array().expect("run.series");
    assert!(!series.is_empty());
    let sampled = series
        .iter()
        .filter_map(|second| second["server"]["curr_items"].as_u64())
        .collect::<Vec<_>>();
    assert!(
        sampled.contains(&2000),
        "the server's stats were polled: curr_items {sampled:?}"
    );
}

#[test]
fn open_loop_meta_against_memcached() {
    let server = ServerProcess::memcached(&[]).expect("starting memcached");
    let (code, report) = fogbench(
        &server,
        &[
            "--duration-s",
            "1",
            "--rate",
            "2000",
            "--connections",
            "64",
            "--threads",
            "2",
            "--protocol",
            "meta",
            "--keys",
            "10000",
            "--distribution",
            "hotset",
            "--hot-keys",
            "500",
            "--get-ratio",
            "0.5",
            "--ttl-s",
            "60",
            "--verify",
        ],
    );
    server.stop().expect("stopping memcached");

    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    assert_eq!(report["config"]["mode"], "open");
    assert_eq!(report["config"]["protocol"], "meta");
    assert!(report["run"]["ops"].as_u64().unwrap_or(0) > 0);
    assert_eq!(count(&report, "run", "verify_failures"), 0);
    assert_eq!(count(&report, "run", "error_replies"), 0);
    // Without a load phase some gets miss and, once set, some hit.
    assert!(count(&report, "run", "misses") > 0);
    assert!(count(&report, "run", "hits") > 0);
    for op in ["get", "set", "all"] {
        assert_latency_fields(&report, op);
    }
}

#[test]
fn unreachable_server_is_an_error_not_a_hang() {
    let port = testkit::free_port().expect("free port");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_fogbench"))
        .args(["run", "--quiet", "--duration-s", "1", "--server"])
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .expect("running fogbench");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("connecting to 127.0.0.1"));
    assert!(started.elapsed() < RUN_TIMEOUT);
}
