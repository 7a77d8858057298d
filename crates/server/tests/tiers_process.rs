//! The two memory tiers seen from the wire: the default run has both, a small DRAM tier
//! spills into the slow tier without losing an item, the tier counters in `stats` say
//! where hits were served from, and `--slow-cost` makes slow-tier accesses wait.

use anyhow::Context;
use std::time::{Duration, Instant};

use testkit::{stat, RawClient, ServerProcess};

fn stat_u64(stats: &[(String, String)], name: &str) -> u64 {
    stat(stats, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("stat {name} missing or not a number in {stats:?}"))
}

#[test]
fn default_run_has_a_dram_tier_and_a_slow_tier_in_a_pool_file() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(
        client.request(b"set k 0 0 5\r\nhello\r\n", b"\r\n")?,
        b"STORED\r\n"
    );
    let stats = client.stats("")?;
    assert_eq!(stat_u64(&stats, "tier_dram_limit_bytes"), 64 * 1024 * 1024);
    assert!(stat_u64(&stats, "tier_slow_limit_bytes") >= 1024 * 1024 * 1024 - 1024 * 1024);
    let settings = client.stats("settings")?;
    let backing = stat(&settings, "slow_backing")
        .unwrap_or_default()
        .to_owned();
    assert!(
        backing.contains("slow-tier.pool"),
        "the default slow tier is a pool file in the data dir: {backing}"
    );
    server.stop()?;
    Ok(())
}

/// Under every placement policy, over the wire.
#[test]
fn a_small_dram_tier_spills_to_the_slow_tier_and_serves_every_item() -> anyhow::Result<()> {
    for policy in ["dual-lru", "hotspot", "uniform", "two-level"] {
        spills_and_serves_every_item(policy).with_context(|| format!("--policy {policy}"))?;
    }
    Ok(())
}

fn spills_and_serves_every_item(policy: &str) -> anyhow::Result<()> {
    let server =
        ServerProcess::fogcached(&["--dram", "2", "--slow-size", "64m", "--policy", policy])?;
    let mut client = RawClient::connect(server.addr())?;
    let value = vec![b'v'; 1000];
    let keys = 6000; // about 6 MB of items: three times the DRAM tier
    for i in 0..keys {
        let mut request = format!("set key{i} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        assert_eq!(
            client.request(&request, b"\r\n")?,
            b"STORED\r\n",
            "set key{i}"
        );
    }
    for i in 0..keys {
        let reply = client.request(format!("get key{i}\r\n").as_bytes(), b"END\r\n")?;
        let header = format!("VALUE key{i} 0 {}\r\n", value.len());
        assert!(
            reply.starts_with(header.as_bytes()),
            "key{i} was lost: {:?}",
            String::from_utf8_lossy(&reply[..reply.len().min(80)])
        );
    }
    let stats = client.stats("")?;
    assert_eq!(
        stat_u64(&stats, "evictions"),
        0,
        "the slow tier had room for all"
    );
    assert!(
        stat_u64(&stats, "tier_slow_items") > 0,
        "items went to the slow tier"
    );
    assert!(
        stat_u64(&stats, "tier_dram_items") > 0,
        "DRAM still holds items"
    );
    assert!(
        stat_u64(&stats, "tier_dram_bytes") <= 2 * 1024 * 1024,
        "the DRAM cap holds"
    );
    assert_eq!(
        stat_u64(&stats, "tier_dram_get_hits") + stat_u64(&stats, "tier_slow_get_hits"),
        keys,
        "every hit is attributed to one tier"
    );
    assert!(
        stat_u64(&stats, "slow_lines_read") > 0,
        "slow-tier reads are counted"
    );
    server.stop()?;
    Ok(())
}

/// Emulated slow-tier latencies for the cost test: large enough that a batch's lower
/// bound is several times what the same batch takes without a cost model (a loopback
/// round trip and the first touch of the pool's pages: a few milliseconds in all).
const SLOW_READ_NS: u64 = 1_000_000;
const SLOW_WRITE_NS: u64 = 400_000;
/// Items stored, then read back once each, by the cost test.
const COSTED_KEYS: u64 = 100;
const COSTED_GETS: u64 = COSTED_KEYS;

/// What one cost-test run measured, and the server's `stats` after it.
struct SlowTierRun {
    sets_took: Duration,
    gets_took: Duration,
    stats: Vec<(String, String)>,
}

/// How long `COSTED_KEYS` sets and then `COSTED_GETS` gets (each batch pipelined on one
/// connection, so one worker serves it request after request) take against a
/// slow-tier-only fogcached with the cost model `slow_cost`.
fn time_slow_tier_sets_and_gets(slow_cost: &str) -> anyhow::Result<SlowTierRun> {
    let server = ServerProcess::fogcached(&["--dram", "0", "--slow-cost", slow_cost])?;
    let mut client = RawClient::connect(server.addr())?;
    let mut sets = Vec::new();
    let mut sets_reply = Vec::new();
    for i in 0..COSTED_KEYS {
        sets.extend_from_slice(format!("set cost{i} 0 0 6\r\nvalue{}\r\n", i % 10).as_bytes());
        sets_reply.extend_from_slice(b"STORED\r\n");
    }
    let mut gets = Vec::new();
    let mut gets_reply = Vec::new();
    for get in 0..COSTED_GETS {
        let i = get % COSTED_KEYS;
        gets.extend_from_slice(format!("get cost{i}\r\n").as_bytes());
        gets_reply.extend_from_slice(
            format!("VALUE cost{i} 0 6\r\nvalue{}\r\nEND\r\n", i % 10).as_bytes(),
        );
    }
    let started = Instant::now();
    client.send(&sets)?;
    let reply = client.read_exact(sets_reply.len())?;
    let sets_took = started.elapsed();
    assert_eq!(testkit::escape(&reply), testkit::escape(&sets_reply));
    let started = Instant::now();
    client.send(&gets)?;
    let reply = client.read_exact(gets_reply.len())?;
    let gets_took = started.elapsed();
    assert_eq!(testkit::escape(&reply), testkit::escape(&gets_reply));
    let stats = client.stats("")?;
    server.stop()?;
    Ok(SlowTierRun {
        sets_took,
        gets_took,
        stats,
    })
}

/// `--slow-cost` slows slow-tier accesses in a running server: with every item in the
/// slow tier (`--dram 0`), each set writes it and each get reads it, so a batch takes at
/// least count x latency. Only that lower bound is asserted (a busy machine makes the
/// batches slower, never faster); the run without a cost model is printed beside it.
#[test]
fn slow_cost_makes_slow_tier_gets_and_sets_wait() -> anyhow::Result<()> {
    let costed = format!("read_ns={SLOW_READ_NS},write_ns={SLOW_WRITE_NS}");
    let with_cost = time_slow_tier_sets_and_gets(&costed)?;
    let without = time_slow_tier_sets_and_gets("none")?;
    println!(
        "{COSTED_KEYS} sets: {:?} with {costed}, {:?} without ({:.1}x); \
         {COSTED_GETS} gets: {:?} with, {:?} without ({:.1}x)",
        with_cost.sets_took,
        without.sets_took,
        with_cost.sets_took.as_secs_f64() / without.sets_took.as_secs_f64(),
        with_cost.gets_took,
        without.gets_took,
        with_cost.gets_took.as_secs_f64() / without.gets_took.as_secs_f64()
    );
    for (run, model) in [(&with_cost, costed.as_str()), (&without, "none")] {
        // An explicit model is reported in full (`read_ns=..,write_ns=..,read_gbps=0,..`).
        let reported = stat(&run.stats, "slow_cost_model").unwrap_or_default();
        assert!(
            reported.starts_with(model),
            "the server runs {reported:?}, not the cost model it was given ({model})"
        );
        // Every get was served from the slow tier, so every one was charged.
        assert_eq!(stat_u64(&run.stats, "tier_slow_get_hits"), COSTED_GETS);
        assert_eq!(stat_u64(&run.stats, "tier_dram_get_hits"), 0);
    }
    assert!(
        with_cost.sets_took >= Duration::from_nanos(COSTED_KEYS * SLOW_WRITE_NS),
        "{COSTED_KEYS} slow-tier sets at {SLOW_WRITE_NS} ns a write took only {:?}",
        with_cost.sets_took
    );
    assert!(
        with_cost.gets_took >= Duration::from_nanos(COSTED_GETS * SLOW_READ_NS),
        "{COSTED_GETS} slow-tier gets at {SLOW_READ_NS} ns a read took only {:?}",
        with_cost.gets_took
    );
    Ok(())
}
