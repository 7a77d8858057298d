//! End-to-end: fogbench spreading keys over two fogcached servers with ketama, checked
//! key by key with a raw client on each server.

use std::net::SocketAddr;

use bench::ketama::Ketama;
use serde_json::Value;
use testkit::{RawClient, ServerProcess};

#[path = "support/fogbench_run.rs"]
mod fogbench_run;

const KEYS: u64 = 600;
/// fogbench's connections, over both servers.
const CONNECTIONS: u64 = 8;

fn run_fogbench(servers: &[SocketAddr], protocol: &str, json: &std::path::Path) -> Value {
    let list = servers
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let child = fogbench_run::spawn(
        &list,
        json,
        &[
            "--protocol",
            protocol,
            "--keys",
            &KEYS.to_string(),
            "--load",
            "--verify",
            "--duration-s",
            "1.2",
            "--connections",
            &CONNECTIONS.to_string(),
            "--threads",
            "2",
            "--value-size",
            "10-300",
            "--get-ratio",
            "0.9",
        ],
    );
    let (code, report) = fogbench_run::finish(child, json);
    assert_eq!(code, Some(0), "fogbench failed: {report:#}");
    report
}

/// True if `server` holds `key` (a text get).
fn holds(client: &mut RawClient, key: &str) -> bool {
    let reply = client
        .request(format!("get {key}\r\n").as_bytes(), b"END\r\n")
        .expect("get");
    reply.starts_with(b"VALUE ")
}

fn check_placement(protocol: &str) {
    let a = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting fogcached a");
    let b = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting fogcached b");
    let servers = [a.addr(), b.addr()];
    let json = std::env::temp_dir().join(format!(
        "fogbench-ketama-{}-{}-{protocol}.json",
        std::process::id(),
        a.port()
    ));
    let report = run_fogbench(&servers, protocol, &json);

    let ring = Ketama::for_addrs(&servers);
    let mut clients = [
        RawClient::connect(a.addr()).expect("connecting a"),
        RawClient::connect(b.addr()).expect("connecting b"),
    ];
    let mut per_server = [0u64; 2];
    let mut misplaced = Vec::new();
    for id in 0..KEYS {
        let key = format!("fb:{id}");
        let owner = ring.server_for(key.as_bytes());
        let held = [holds(&mut clients[0], &key), holds(&mut clients[1], &key)];
        let expected = [owner == 0, owner == 1];
        if held != expected {
            misplaced.push((key, owner, held));
        } else {
            per_server[owner] += 1;
        }
    }
    // Each server's own count, once the run is over, is exactly its share of the keys.
    let final_items = clients.each_mut().map(|client| {
        let stats = client.stats("").expect("stats");
        testkit::stat(&stats, "curr_items")
            .and_then(|v| v.parse::<u64>().ok())
            .expect("curr_items")
    });
    drop(clients);
    a.stop().expect("stopping a");
    b.stop().expect("stopping b");

    assert!(
        misplaced.is_empty(),
        "keys not on exactly their ketama server (key, owner, held by [a, b]): {misplaced:?}"
    );
    assert_eq!(per_server[0] + per_server[1], KEYS);
    // Both servers got a fair part of the keys.
    assert!(
        per_server.iter().all(|&n| n > KEYS / 4),
        "unbalanced: {per_server:?}"
    );

    assert_eq!(report["load"]["ops"], KEYS);
    assert_eq!(report["run"]["counts"]["verify_failures"], 0);
    assert_eq!(report["run"]["counts"]["misses"], 0, "{report:#}");
    assert_eq!(report["run"]["connection_failures"], 0);
    let names: Vec<Value> = servers
        .iter()
        .map(|s| Value::String(s.to_string()))
        .collect();
    assert_eq!(report["config"]["servers"], Value::Array(names));
    // The stats series has each server's sample and their sum.
    let series = report["run"]["series"].as_array().expect("run.series");
    let row = series
        .iter()
        .find(|row| row["server"]["curr_items"].is_u64())
        .expect("a polled second");
    let a_items = row["servers"][servers[0].to_string()]["curr_items"]
        .as_u64()
        .expect("a's sample");
    let b_items = row["servers"][servers[1].to_string()]["curr_items"]
        .as_u64()
        .expect("b's sample");
    assert_eq!(row["server"]["curr_items"], a_items + b_items);
    assert_eq!(final_items, per_server);
    // A sample taken during the run may count an item a set in flight was relinking into
    // another slab class twice or not at all (`curr_items` sums the classes one lock at a
    // time): at most one per connection off, as the run's sets add no keys.
    for (sampled, held) in [(a_items, per_server[0]), (b_items, per_server[1])] {
        assert!(
            sampled.abs_diff(held) <= CONNECTIONS,
            "a polled second saw {sampled} items on a server that holds {held}"
        );
    }
}

#[test]
fn two_servers_hold_exactly_their_ketama_keys_text() {
    check_placement("text");
}

#[test]
fn two_servers_hold_exactly_their_ketama_keys_binary() {
    check_placement("binary");
}

#[test]
fn look_aside_fills_each_key_into_its_ketama_edge() {
    const LOOKASIDE_KEYS: u64 = 200;
    let a = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting edge a");
    let b = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting edge b");
    let origin = ServerProcess::fogcached(&["--slow-size", "0"]).expect("starting the origin");
    let edges = [a.addr(), b.addr()];
    let json = std::env::temp_dir().join(format!(
        "fogbench-ketama-lookaside-{}-{}.json",
        std::process::id(),
        a.port()
    ));
    let child = fogbench_run::spawn(
        &format!("{},{}", edges[0], edges[1]),
        &json,
        &[
            "--no-stats",
            "--verify",
            "--load",
            "--origin",
            &origin.addr().to_string(),
            "--origin-delay-us",
            "200",
            "--get-ratio",
            "1",
            "--keys",
            &LOOKASIDE_KEYS.to_string(),
            "--value-size",
            "10-200",
            "--duration-s",
            "1",
            "--connections",
            "4",
            "--threads",
            "2",
        ],
    );
    let (code, report) = fogbench_run::finish(child, &json);
    assert_eq!(code, Some(0), "fogbench failed: {report:#}");

    let ring = Ketama::for_addrs(&edges);
    let mut clients = [
        RawClient::connect(a.addr()).expect("connecting a"),
        RawClient::connect(b.addr()).expect("connecting b"),
    ];
    let mut filled = 0;
    let mut misplaced = Vec::new();
    for id in 0..LOOKASIDE_KEYS {
        let key = format!("fb:{id}");
        let owner = ring.server_for(key.as_bytes());
        let held = [holds(&mut clients[0], &key), holds(&mut clients[1], &key)];
        if held[1 - owner] {
            misplaced.push(key);
        }
        if held[owner] {
            filled += 1;
        }
    }
    drop(clients);
    a.stop().expect("stopping a");
    b.stop().expect("stopping b");
    origin.stop().expect("stopping the origin");

    assert!(
        misplaced.is_empty(),
        "filled into the wrong edge: {misplaced:?}"
    );
    let lookaside = &report["run"]["lookaside"];
    assert_eq!(lookaside["fill_failures"], 0, "{report:#}");
    assert_eq!(lookaside["origin_misses"], 0);
    assert_eq!(lookaside["edge_fills"], lookaside["origin_fetches"]);
    // Thousands of uniform gets over 200 keys miss each key once at least: every key
    // ends up in its edge.
    assert_eq!(filled, LOOKASIDE_KEYS, "{report:#}");
    assert_eq!(report["run"]["counts"]["verify_failures"], 0);
}
