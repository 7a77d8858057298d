//! The two memory tiers seen from the wire: the default run has both, a small DRAM tier
//! spills into the slow tier without losing an item, and the tier counters in `stats`
//! say where hits were served from.

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

#[test]
fn a_small_dram_tier_spills_to_the_slow_tier_and_serves_every_item() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["--dram", "2", "--slow-size", "64m"])?;
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
