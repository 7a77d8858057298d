//! Settings an operator changes at start-up or while the server runs, side by side with
//! Debian's memcached 1.6.18: `cache_memlimit` raising and lowering the item memory, and
//! `-o no_modern` with the `lru_crawler enable|disable` switches it makes meaningful.
//! Each request goes to both servers and the replies are compared byte for byte
//! (`support/wire_pair.rs`); the settings they change are compared by value.

#[path = "support/wire_pair.rs"]
mod wire_pair;

use std::time::{Duration, Instant};

use testkit::{stat, RawClient, ServerProcess};
use wire_pair::Pair;

/// Values of 100 KB: one slab class on both servers, a few items per 1 MiB page.
const VALUE_BYTES: usize = 100 * 1024;
/// 15 MB of them: more than `-m 8` holds, less than 64 MB.
const VALUES: usize = 150;

/// Stores `VALUES` values under `<prefix><i>` on both servers (`noreply`, then `mn`).
fn fill(pair: &mut Pair, prefix: &str) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for i in 0..VALUES {
        batch
            .extend_from_slice(format!("set {prefix}{i} 0 0 {VALUE_BYTES} noreply\r\n").as_bytes());
        batch.extend(std::iter::repeat_n(b'v', VALUE_BYTES));
        batch.extend_from_slice(b"\r\n");
    }
    batch.extend_from_slice(b"mn\r\n");
    for side in &mut pair.sides {
        side.client.send(&batch)?;
        side.client.read_until(b"MN\r\n")?;
    }
    Ok(())
}

/// How many of `<prefix>0..VALUES` each server still holds (one multi-get each).
fn held(pair: &mut Pair, prefix: &str) -> anyhow::Result<[usize; 2]> {
    let mut request = b"get".to_vec();
    for i in 0..VALUES {
        request.extend_from_slice(format!(" {prefix}{i}").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let mut counts = [0; 2];
    for (side, count) in pair.sides.iter_mut().zip(&mut counts) {
        side.client.set_read_timeout(Duration::from_secs(30))?;
        let reply = side.client.request(&request, b"END\r\n")?;
        *count = reply
            .windows(6)
            .filter(|window| window == b"VALUE ")
            .count();
    }
    Ok(counts)
}

/// One value of `stats <group>` on each server.
fn stat_pair(pair: &mut Pair, group: &str, name: &str) -> anyhow::Result<[String; 2]> {
    let mut values: [String; 2] = Default::default();
    for (side, value) in pair.sides.iter_mut().zip(&mut values) {
        let stats = side.client.stats(group)?;
        *value = stat(&stats, name)
            .ok_or_else(|| anyhow::anyhow!("{}: no {name} in stats {group}", side.name))?
            .to_owned();
    }
    Ok(values)
}

/// memcached's `-m` is a limit it can raise to anything at run time: `cache_memlimit`
/// from 8 to 64 MB answers `OK`, `stats` and `stats settings` show the new size, and the
/// cache then holds what 8 MB could not (150 values of 100 KB, all read back, where
/// before the raise both servers evicted). Lowering it again keeps the items (neither
/// server gives memory back), and the refusals are memcached's.
#[test]
fn cache_memlimit_raises_and_lowers_the_item_memory_as_memcached_s() -> anyhow::Result<()> {
    let mut pair = Pair::start(&["-m", "8"], &["-m", "8", "--slow-size", "0"])?;
    fill(&mut pair, "before")?;
    let evictions = stat_pair(&mut pair, "", "evictions")?;
    for (side, count) in ["memcached", "fogcached"].iter().zip(&evictions) {
        assert!(
            count.parse::<u64>()? > 0,
            "{side}: 15 MB in 8 MB evicted nothing"
        );
    }

    let reply = pair.same(b"cache_memlimit 64\r\n")?;
    assert_eq!(reply, b"OK\r\n");
    let bytes_64m = (64u64 << 20).to_string();
    assert_eq!(
        stat_pair(&mut pair, "settings", "maxbytes")?,
        [bytes_64m.clone(), bytes_64m.clone()]
    );
    assert_eq!(
        stat_pair(&mut pair, "", "limit_maxbytes")?,
        [bytes_64m.clone(), bytes_64m]
    );
    fill(&mut pair, "after")?;
    assert_eq!(
        held(&mut pair, "after")?,
        [VALUES, VALUES],
        "after the raise to 64 MB"
    );

    // Lowering keeps what is stored; new stores then evict.
    pair.same(b"cache_memlimit 8\r\n")?;
    assert_eq!(
        held(&mut pair, "after")?,
        [VALUES, VALUES],
        "after lowering to 8 MB"
    );
    let bytes_8m = (8u64 << 20).to_string();
    assert_eq!(
        stat_pair(&mut pair, "settings", "maxbytes")?,
        [bytes_8m.clone(), bytes_8m]
    );

    pair.all_same(&[
        b"cache_memlimit 7\r\n",
        b"cache_memlimit 1000000001\r\n",
        b"cache_memlimit 9 noreply\r\n",
        b"cache_memlimit x\r\n",
    ])?;
    pair.stop()
}

/// The case: `-m 3` raised to 8.
#[test]
fn cache_memlimit_from_3_to_8_megabytes_is_ok() -> anyhow::Result<()> {
    let mut pair = Pair::start(&["-m", "3"], &["-m", "3", "--slow-size", "0"])?;
    assert_eq!(pair.same(b"cache_memlimit 8\r\n")?, b"OK\r\n");
    let bytes = (8u64 << 20).to_string();
    assert_eq!(
        stat_pair(&mut pair, "settings", "maxbytes")?,
        [bytes.clone(), bytes]
    );
    pair.stop()
}

/// What `cache_memlimit` means with two tiers: memcached's one `-m` is the DRAM tier,
/// which grows up to the machine's memory unless `--dram-max` says otherwise; the slow
/// tier keeps its size. `-k` (every mapping locked) keeps the ceiling at `-m`, and a
/// server without a DRAM tier (`-m 0`) has none to grow.
#[test]
fn cache_memlimit_grows_the_dram_tier_and_leaves_the_slow_tier() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-m", "8", "--slow-size", "32m"])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(
        client.request(b"cache_memlimit 24\r\n", b"\r\n")?,
        b"OK\r\n"
    );
    let stats = client.stats("")?;
    assert_eq!(stat(&stats, "tier_dram_limit_bytes"), Some("25165824"));
    assert_eq!(stat(&stats, "tier_slow_limit_bytes"), Some("33554432"));
    let settings = client.stats("settings")?;
    let reserve: u64 = stat(&settings, "dram_max").unwrap_or("0").parse()?;
    assert!(reserve >= 24 << 20, "dram_max {reserve}");
    server.stop()?;

    let locked = ServerProcess::fogcached(&["-m", "8", "-k", "--slow-size", "0"])?;
    let mut client = RawClient::connect(locked.addr())?;
    assert_eq!(
        stat(&client.stats("settings")?, "dram_max"),
        Some("8388608")
    );
    assert_eq!(
        client.request(b"cache_memlimit 16\r\n", b"\r\n")?,
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    );
    locked.stop()?;

    let slow_only = ServerProcess::fogcached(&["-m", "0", "--slow-size", "32m"])?;
    let mut client = RawClient::connect(slow_only.addr())?;
    assert_eq!(
        client.request(b"cache_memlimit 16\r\n", b"\r\n")?,
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    );
    slow_only.stop()?;
    Ok(())
}

/// The `stats settings` lines `-o no_modern` changes in memcached 1.6.18 that fogcached
/// has (memcached also changes `maxconns_fast` and `hash_algorithm`, which fogcached
/// does not offer; README's compatibility table says so).
const NO_MODERN_SETTINGS: &[(&str, &str)] = &[
    ("lru_crawler", "no"),
    ("lru_maintainer_thread", "no"),
    ("lru_segmented", "no"),
    ("slab_reassign", "no"),
    ("slab_automove", "0"),
    ("slab_chunk_max", "1048576"),
];

/// `-o no_modern` turns the LRU crawler and maintainer off (and slab reassignment), and
/// `lru_crawler enable|disable` then starts and stops the crawler at run time, with
/// memcached's replies: the crawler's commands refused while it is off, `enable` once
/// `OK` and then `ERROR failed to start lru crawler thread`, `disable` always `OK`.
/// memcached has no run-time switch for the maintainer: `lru mode`, which needs it,
/// answers `ERROR` on both.
#[test]
fn no_modern_turns_the_crawler_and_maintainer_off_and_lru_crawler_switches_it() -> anyhow::Result<()>
{
    let mut pair = Pair::start(
        &["-o", "no_modern"],
        &["-o", "no_modern", "--slow-size", "0"],
    )?;
    for (name, expected) in NO_MODERN_SETTINGS {
        let values = stat_pair(&mut pair, "settings", name)?;
        assert_eq!(values, [*expected, *expected], "stats settings {name}");
    }
    pair.all_same(&[
        b"lru_crawler crawl all\r\n",
        b"lru_crawler metadump all\r\n",
        b"lru mode segmented\r\n",
        b"lru mode flat\r\n",
        b"slabs reassign 1 2\r\n",
        b"lru_crawler disable\r\n",
    ])?;
    assert_eq!(pair.same(b"lru_crawler enable\r\n")?, b"OK\r\n");
    assert_eq!(
        stat_pair(&mut pair, "settings", "lru_crawler")?,
        ["yes", "yes"]
    );
    assert_eq!(
        pair.same(b"lru_crawler enable\r\n")?,
        b"ERROR failed to start lru crawler thread\r\n"
    );
    assert_eq!(pair.same(b"lru_crawler disable\r\n")?, b"OK\r\n");
    // memcached's crawler thread clears the setting as it exits, just after the `OK`.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let values = stat_pair(&mut pair, "settings", "lru_crawler")?;
        if values == ["no", "no"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "lru_crawler after disable: {values:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    pair.stop()?;

    // A suboption after it wins, as in memcached.
    let mut pair = Pair::start(
        &["-o", "no_modern,lru_crawler,lru_maintainer"],
        &[
            "-o",
            "no_modern,lru_crawler,lru_maintainer",
            "--slow-size",
            "0",
        ],
    )?;
    for name in ["lru_crawler", "lru_maintainer_thread", "lru_segmented"] {
        assert_eq!(
            stat_pair(&mut pair, "settings", name)?,
            ["yes", "yes"],
            "{name}"
        );
    }
    pair.stop()
}

/// With a slow tier, `-o no_modern` keeps the LRU maintainers (they move items between
/// the tiers), says so at start-up, and turns the rest off as without one.
#[test]
fn no_modern_with_a_slow_tier_keeps_the_maintainers_and_says_so() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached_capturing_stderr(&[
        "-m",
        "8",
        "--slow-size",
        "32m",
        "-o",
        "no_modern",
    ])?;
    let mut client = RawClient::connect(server.addr())?;
    let settings = client.stats("settings")?;
    for (name, expected) in [
        ("lru_crawler", "no"),
        ("lru_maintainer_thread", "yes"),
        ("lru_segmented", "yes"),
        ("slab_reassign", "no"),
    ] {
        assert_eq!(stat(&settings, name), Some(expected), "{name}");
    }
    // The maintainers run: their passes are counted (bounded wait, one pass a second
    // at least).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let juggles: u64 = stat(&client.stats("")?, "lru_maintainer_juggles")
            .unwrap_or("0")
            .parse()?;
        if juggles > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no maintainer pass in 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stderr = server.stderr_text();
    assert!(
        stderr.contains("-o no_modern: the LRU maintainers keep running"),
        "{stderr}"
    );
    server.stop()?;
    Ok(())
}
