//! Which tier each live item sits in, seen from outside: `lru_crawler metadump all`
//! lists every live item once, a slow-tier one with ` tier=slow` after memcached's
//! fields (`dispatch/admin.rs`). Shared by the crash tests (`restart_process.rs`,
//! `panic_process.rs`), which record before a crash what a restart must bring back.

#![allow(dead_code)]

use testkit::RawClient;

/// The keys of a metadump, split by tier.
#[derive(Debug, Default)]
pub struct Tiers {
    pub slow: Vec<String>,
    pub dram: Vec<String>,
}

/// `lru_crawler metadump all`, split by tier. Keys are as the dump prints them
/// (URL-encoded: the crash tests' keys need no encoding).
pub fn keys_by_tier(client: &mut RawClient) -> anyhow::Result<Tiers> {
    let dump = client.request(b"lru_crawler metadump all\r\n", b"END\r\n")?;
    let text = String::from_utf8_lossy(&dump);
    let mut tiers = Tiers::default();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line == "END" {
            break;
        }
        let key = line
            .split(' ')
            .find_map(|field| field.strip_prefix("key="))
            .ok_or_else(|| anyhow::anyhow!("metadump line without a key: {line}"))?
            .to_owned();
        if line.split(' ').any(|field| field == "tier=slow") {
            tiers.slow.push(key);
        } else {
            tiers.dram.push(key);
        }
    }
    Ok(tiers)
}
