//! End-to-end: the `fogbench` binary against real servers started on loopback.
//!
//! fogcached must have been built into the same target directory (`cargo build -p server`,
//! which `cargo test --workspace` does).

use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use testkit::ServerProcess;

#[path = "support/fogbench_run.rs"]
mod fogbench_run;

use fogbench_run::RUN_TIMEOUT;

/// Runs fogbench with `args` plus `--server` and `--json`, returns (exit code, report).
fn fogbench(server: &ServerProcess, args: &[&str]) -> (Option<i32>, Value) {
    let json_path = std::env::temp_dir().join(format!(
        "fogbench-test-{}-{}.json",
        std::process::id(),
        server.port()
    ));
    let child = fogbench_run::spawn(&server.addr().to_string(), &json_path, args);
    fogbench_run::finish(child, &json_path)
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
    // Nothing listens there, and nothing can while the test holds it.
    let closed = testkit::ClosedPort::new().expect("a closed port");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_fogbench"))
        .args(["run", "--quiet", "--duration-s", "1", "--server"])
        .arg(closed.addr().to_string())
        .output()
        .expect("running fogbench");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("connecting to 127.0.0.1"));
    assert!(started.elapsed() < RUN_TIMEOUT);
}

fn curr_items(server: &ServerProcess) -> u64 {
    let mut client = testkit::RawClient::connect(server.addr()).expect("connecting for stats");
    let stats = client.stats("").expect("stats");
    testkit::stat(&stats, "curr_items")
        .and_then(|v| v.parse().ok())
        .expect("curr_items in stats")
}

fn lookaside_u64(report: &Value, field: &str) -> u64 {
    report["run"]["lookaside"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("run.lookaside.{field} missing in {report:#}"))
}

#[test]
fn look_aside_fills_the_edge_from_the_delayed_origin() {
    const KEYS: u64 = 100;
    const DELAY_US: u64 = 2000;
    let edge = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting the edge");
    let origin = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting the origin");
    let origin_arg = origin.addr().to_string();
    let delay_arg = DELAY_US.to_string();
    let keys_arg = KEYS.to_string();
    let common = [
        "--origin",
        &origin_arg,
        "--origin-delay-us",
        &delay_arg,
        "--keys",
        &keys_arg,
        "--get-ratio",
        "1",
        "--value-size",
        "16-512",
        "--verify",
        "--no-stats",
    ];

    // First pass: the load phase fills the origin only; the edge starts cold.
    let mut first_args = common.to_vec();
    first_args.extend([
        "--load",
        "--duration-s",
        "1",
        "--connections",
        "4",
        "--threads",
        "2",
    ]);
    let (first_code, first) = fogbench(&edge, &first_args);
    let origin_items = curr_items(&origin);
    let edge_items = curr_items(&edge);

    // Second pass over the same keys, one connection so that every edge miss would be
    // counted exactly once.
    let mut second_args = common.to_vec();
    second_args.extend([
        "--duration-s",
        "0.5",
        "--connections",
        "1",
        "--threads",
        "1",
    ]);
    let (second_code, second) = fogbench(&edge, &second_args);
    edge.stop().expect("stopping the edge");
    origin.stop().expect("stopping the origin");

    assert_eq!(first_code, Some(0), "first pass failed: {first:#}");
    assert_eq!(first["load"]["ops"], KEYS, "the origin is preloaded");
    assert_eq!(first["config"]["origin_delay_us"], DELAY_US);
    assert_eq!(first["run"]["lookaside"]["origin_delay_us"], DELAY_US);
    assert_eq!(count(&first, "run", "verify_failures"), 0);
    assert_eq!(count(&first, "run", "error_replies"), 0);
    // The cold edge misses, every miss is fetched from the origin (which has every key)
    // and each fetch fills the edge.
    let fetches = lookaside_u64(&first, "origin_fetches");
    assert!(fetches > 0, "no origin fetches: {first:#}");
    assert_eq!(lookaside_u64(&first, "edge_misses"), fetches);
    assert_eq!(lookaside_u64(&first, "origin_hits"), fetches);
    assert_eq!(lookaside_u64(&first, "origin_misses"), 0);
    assert_eq!(lookaside_u64(&first, "edge_fills"), fetches);
    assert_eq!(lookaside_u64(&first, "fill_failures"), 0);
    assert_eq!(origin_items, KEYS);
    // Thousands of uniform gets over 100 keys request every key (a key left out has
    // probability below 1e-10 at 3000 gets), so the fills cover the key space.
    assert_eq!(
        edge_items, KEYS,
        "the first pass filled every key into the edge"
    );
    assert!(fetches >= KEYS, "each key missed at the edge at least once");
    // Latency seen for a miss includes the client-side origin delay: its smallest value
    // (the 0th percentile) is at least the delay; edge hits do not wait for it.
    let via_origin = &first["run"]["lookaside"]["origin_served_latency"];
    assert_eq!(via_origin["count"], fetches);
    let fastest_us = via_origin["distribution"][0][1].as_f64().expect("p0");
    assert!(
        fastest_us >= DELAY_US as f64,
        "a miss served via the origin took {fastest_us} us < the {DELAY_US} us delay"
    );
    assert_eq!(
        first["run"]["lookaside"]["edge_hit_latency"]["count"],
        lookaside_u64(&first, "edge_hits")
    );

    assert_eq!(second_code, Some(0), "second pass failed: {second:#}");
    assert!(lookaside_u64(&second, "edge_hits") > 0);
    assert_eq!(lookaside_u64(&second, "edge_misses"), 0, "{second:#}");
    assert_eq!(lookaside_u64(&second, "origin_fetches"), 0);
    assert_eq!(second["run"]["lookaside"]["edge_hit_ratio"], 1.0);
    assert_eq!(count(&second, "run", "verify_failures"), 0);
}

fn raw_request(server: &ServerProcess, request: &[u8], terminator: &[u8]) -> Vec<u8> {
    let mut client = testkit::RawClient::connect(server.addr()).expect("connecting");
    client.request(request, terminator).expect("raw request")
}

#[test]
fn binary_protocol_with_verify_against_fogcached() {
    let server = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting fogcached");
    let binary_run = |extra: &[&str]| {
        let mut args = vec![
            "--protocol",
            "binary",
            "--connections",
            "32",
            "--threads",
            "2",
            "--keys",
            "500",
            "--value-size",
            "1-4000",
            "--verify",
        ];
        args.extend_from_slice(extra);
        fogbench(&server, &args)
    };
    let (code, report) = binary_run(&["--load", "--duration-s", "1", "--get-ratio", "0.8"]);
    // Every key exists now; one is overwritten (in the text protocol) with a value
    // fogbench did not write, which a verified binary get must catch.
    let stored = raw_request(&server, b"set fb:7 0 0 5\r\nwrong\r\n", b"\r\n");
    let (bad_code, bad) = binary_run(&["--duration-s", "0.5", "--get-ratio", "1"]);
    server.stop().expect("stopping fogcached");

    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    assert_eq!(report["config"]["protocol"], "binary");
    assert_eq!(report["load"]["ops"], 500);
    assert_eq!(count(&report, "load", "error_replies"), 0);
    assert_eq!(count(&report, "run", "verify_failures"), 0);
    assert_eq!(count(&report, "run", "error_replies"), 0);
    assert_eq!(count(&report, "run", "misses"), 0);
    assert!(count(&report, "run", "hits") > 0);
    assert!(count(&report, "run", "sets") > 0);
    assert_eq!(report["run"]["connection_failures"], 0);
    for op in ["get", "set", "all"] {
        assert_latency_fields(&report, op);
    }

    assert_eq!(stored, b"STORED\r\n");
    assert_eq!(bad_code, Some(2), "a verify failure fails the run: {bad:#}");
    assert!(count(&bad, "run", "verify_failures") > 0, "{bad:#}");
    // Only the overwritten key fails: every other hit checks out.
    assert!(count(&bad, "run", "verify_failures") < count(&bad, "run", "hits"));
    assert_eq!(bad["run"]["connection_failures"], 0);
}

#[test]
fn binary_protocol_open_loop_against_memcached() {
    let server = ServerProcess::memcached(&[]).expect("starting memcached");
    let (code, report) = fogbench(
        &server,
        &[
            "--protocol",
            "binary",
            "--duration-s",
            "1",
            "--rate",
            "2000",
            "--connections",
            "16",
            "--threads",
            "2",
            "--keys",
            "1000",
            "--value-size",
            "100-2000",
            "--get-ratio",
            "0.5",
            "--ttl-s",
            "60",
            "--verify",
        ],
    );
    // The items fogbench wrote in binary read back in text as the values it writes.
    let mut probe_request = b"get".to_vec();
    for id in 0..50 {
        probe_request.extend_from_slice(format!(" fb:{id}").as_bytes());
    }
    probe_request.extend_from_slice(b"\r\n");
    let probe = raw_request(&server, &probe_request, b"END\r\n");
    server.stop().expect("stopping memcached");

    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    assert_eq!(report["config"]["protocol"], "binary");
    assert_eq!(report["config"]["mode"], "open");
    assert_eq!(count(&report, "run", "verify_failures"), 0);
    assert_eq!(count(&report, "run", "error_replies"), 0);
    assert_eq!(count(&report, "run", "not_stored"), 0);
    // No load phase: some gets miss (status 1) and, once set, some hit.
    assert!(count(&report, "run", "misses") > 0);
    assert!(count(&report, "run", "hits") > 0);
    assert_eq!(report["run"]["connection_failures"], 0);
    let values = text_values(&probe);
    assert!(!values.is_empty(), "none of 50 keys was set");
    for (id, value) in &values {
        assert!(
            bench::workload::check_value(*id, value),
            "fb:{id} holds {:?}",
            String::from_utf8_lossy(value)
        );
    }
    for op in ["get", "set", "all"] {
        assert_latency_fields(&report, op);
    }
}

/// The (key id, value) pairs of a text multi-get reply for keys `fb:<id>`.
fn text_values(reply: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut values = Vec::new();
    let mut rest = reply;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let line = String::from_utf8_lossy(&rest[..line_end]).into_owned();
        rest = &rest[line_end + 2..];
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.first() != Some(&"VALUE") {
            break;
        }
        let id: u64 = fields[1]
            .strip_prefix("fb:")
            .and_then(|id| id.parse().ok())
            .expect("a fogbench key");
        let len: usize = fields[3].parse().expect("a value length");
        values.push((id, rest[..len].to_vec()));
        rest = &rest[len + 2..];
    }
    values
}
