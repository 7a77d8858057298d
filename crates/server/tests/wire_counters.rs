//! Counters memcached keeps that operators graph, fogcached against Debian's memcached
//! 1.6.18 side by side: `reclaimed` (a store that reuses the memory of an expired or
//! flushed item), the page mover's `slab_reassign_*` (a page move that keeps live
//! items counts them as rescues), and `stats reset` clearing `stats detail`'s counts.
//! What the wire cannot force (a busy item, a page whose free chunks are taken inline)
//! is driven in the engine's tests (`lru.rs`, `expiry_reuse.rs`).

#[path = "support/wire_pair.rs"]
mod wire_pair;

use std::time::Duration;

use testkit::{stat, RawClient};
use wire_pair::{pause, Pair, FOGCACHED, MEMCACHED};

/// One number of `stats`.
fn counter(client: &mut RawClient, name: &str) -> anyhow::Result<u64> {
    let stats = client.stats("")?;
    stat(&stats, name)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {name} in stats"))
}

/// Without an LRU maintainer (and no crawler, so nothing else reclaims), each store
/// first reclaims the dead items at its class's tail, up to the first live one and five
/// at most: memcached's unsegmented LRU (`do_item_alloc_pull`). The same requests give
/// the same `reclaimed` on both servers, store by store.
#[test]
fn reclaimed_counts_the_dead_items_a_store_reuses() -> anyhow::Result<()> {
    let off = ["-o", "no_lru_crawler,no_lru_maintainer"];
    let mut pair = Pair::start(&off, &off)?;
    let mut sets = Vec::new();
    for i in 0..8 {
        sets.extend_from_slice(format!("set r{i} 0 1 3\r\nabc\r\n").as_bytes());
    }
    pair.same(&sets)?;
    // Past their one-second TTL on both clocks.
    pause(Duration::from_millis(2500));
    let mut seen = [Vec::new(), Vec::new()];
    for request in [
        &b"set q0 0 0 3\r\nabc\r\n"[..],
        b"set q1 0 0 3\r\nabc\r\n",
        b"set q2 0 0 3\r\nabc\r\n",
        // Flushed items are reclaimed as expired ones are.
        b"flush_all\r\nset z 0 0 3\r\nabc\r\n",
    ] {
        pair.same(request)?;
        for (side, seen) in seen.iter_mut().enumerate() {
            seen.push(counter(&mut pair.sides[side].client, "reclaimed")?);
        }
    }
    // memcached 1.6.18's counts (checked, so the expectation stays true), and fogcached's.
    assert_eq!(seen[MEMCACHED], [5, 8, 8, 11], "memcached");
    assert_eq!(seen[FOGCACHED], seen[MEMCACHED], "fogcached");
    pair.stop()
}

/// Stores `count` items of 900 bytes (three slab pages' worth), deletes every other one
/// and moves a page of their class to the global pool with `slabs reassign`, waiting for
/// memcached's background mover. Returns the class.
fn fill_and_move_a_page(client: &mut RawClient, count: usize) -> anyhow::Result<String> {
    let value = vec![b'x'; 900];
    let mut sets = Vec::new();
    for i in 0..count {
        sets.extend_from_slice(format!("set k{i} 0 0 900 noreply\r\n").as_bytes());
        sets.extend_from_slice(&value);
        sets.extend_from_slice(b"\r\n");
    }
    for i in (0..count).step_by(2) {
        sets.extend_from_slice(format!("delete k{i} noreply\r\n").as_bytes());
    }
    sets.extend_from_slice(b"mn\r\n");
    client.request(&sets, b"MN\r\n")?;
    let slabs = client.stats("slabs")?;
    let class = slabs
        .iter()
        .find(|(name, value)| name.ends_with(":total_pages") && value.parse() == Ok(3u32))
        .and_then(|(name, _)| name.split(':').next())
        .ok_or_else(|| anyhow::anyhow!("no class with three pages: {slabs:?}"))?
        .to_owned();
    // Bounded: memcached answers BUSY while its mover is still busy with an earlier move.
    for _ in 0..100 {
        let reply = client.request(format!("slabs reassign {class} 0\r\n").as_bytes(), b"\r\n")?;
        if reply == b"OK\r\n" {
            break;
        }
        anyhow::ensure!(reply.starts_with(b"BUSY"), "slabs reassign: {reply:?}");
        pause(Duration::from_millis(50));
    }
    // memcached moves the page in its rebalancer thread: wait for it to finish (bounded).
    for _ in 0..200 {
        let stats = client.stats("")?;
        if stat(&stats, "slabs_moved") == Some("1")
            && stat(&stats, "slab_reassign_running") == Some("0")
        {
            return Ok(class);
        }
        pause(Duration::from_millis(50));
    }
    anyhow::bail!("the page move did not finish")
}

/// A page move keeps the live items of the page it empties when their class has free
/// chunks elsewhere: memcached copies them there and counts `slab_reassign_rescues`
/// (fogcached before issue 27 evicted them without a slow tier, and demoted them
/// uncounted with one). The numbers differ legitimately: memcached empties its class's
/// first page, fogcached the emptiest; both rescue every live item of that page, evict
/// none, and keep every live item.
#[test]
fn a_page_move_rescues_live_items_and_counts_them() -> anyhow::Result<()> {
    const ITEMS: usize = 2500;
    for fogcached_args in [&[][..], &["--slow-size", "0"][..]] {
        let mut pair = Pair::start(&[], fogcached_args)?;
        for side in [MEMCACHED, FOGCACHED] {
            let name = pair.sides[side].name;
            let client = &mut pair.sides[side].client;
            let class = fill_and_move_a_page(client, ITEMS)?;
            let stats = client.stats("")?;
            let number = |name: &str| stat(&stats, name).and_then(|v| v.parse::<u64>().ok());
            for name in [
                "slab_reassign_rescues",
                "slab_reassign_chunk_rescues",
                "slab_reassign_evictions_nomem",
                "slab_reassign_inline_reclaim",
                "slab_reassign_busy_items",
                "slab_reassign_busy_deletes",
                "slab_reassign_running",
                "slabs_moved",
            ] {
                assert!(number(name).is_some(), "{name}: stats has no {name}");
            }
            let rescues = number("slab_reassign_rescues").unwrap_or(0);
            assert!(rescues > 0, "{name} {fogcached_args:?}: no rescue");
            assert_eq!(
                number("slab_reassign_evictions_nomem"),
                Some(0),
                "{name} {fogcached_args:?}"
            );
            assert_eq!(number("evictions"), Some(0), "{name} {fogcached_args:?}");
            let slabs = client.stats("slabs")?;
            assert_eq!(
                stat(&slabs, &format!("{class}:total_pages")),
                Some("2"),
                "{name}"
            );
            // Every live item is still there, with its value.
            let mut get = b"get".to_vec();
            for i in (1..ITEMS).step_by(2) {
                get.extend_from_slice(format!(" k{i}").as_bytes());
            }
            get.extend_from_slice(b"\r\n");
            let reply = client.request(&get, b"END\r\n")?;
            let hits = reply.windows(6).filter(|w| w == b"VALUE ").count();
            assert_eq!(hits, ITEMS / 2, "{name} {fogcached_args:?}: items lost");
            eprintln!("{name} {fogcached_args:?}: {rescues} rescues");
        }
        pair.stop()?;
    }
    Ok(())
}

/// `stats reset` forgets `stats detail`'s per-prefix counts too, as memcached's
/// `stats_reset` does (`stats_prefix_clear`); collection stays on.
#[test]
fn stats_reset_clears_the_per_prefix_counts() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    for (request, memcached) in [
        (&b"stats detail on\r\n"[..], &b"OK\r\n"[..]),
        (
            b"set a:1 0 0 1\r\nx\r\nget a:1\r\ndelete b:1\r\n",
            b"STORED\r\nVALUE a:1 0 1\r\nx\r\nEND\r\nNOT_FOUND\r\n",
        ),
        (b"stats reset\r\n", b"RESET\r\n"),
        (b"stats detail dump\r\n", b"END\r\n"),
        (b"get a:1\r\n", b"VALUE a:1 0 1\r\nx\r\nEND\r\n"),
        (
            b"stats detail dump\r\n",
            b"PREFIX a get 1 hit 1 set 0 del 0\r\nEND\r\n",
        ),
    ] {
        let [m, f] = pair.replies([request, request])?;
        assert_eq!(testkit::escape(&m), testkit::escape(memcached), "memcached");
        assert_eq!(testkit::escape(&f), testkit::escape(memcached), "fogcached");
    }
    pair.stop()
}

/// `incr_misses` and `decr_misses` count the requests that found nothing and changed
/// nothing: memcached counts no miss for an `ma` that creates its item (`N`), only for one
/// that answers `NF`. (fogcached used to count one miss for `ma N`'s creation, and its
/// meta dispatcher, which tries the update before it creates, a second.)
#[test]
fn arithmetic_misses_count_as_memcached_counts_them() -> anyhow::Result<()> {
    let mut pair = Pair::start(&[], &[])?;
    let mut seen = [Vec::new(), Vec::new()];
    for request in [
        &b"incr none 1\r\n"[..],
        b"decr none 1\r\n",
        // Created, with `J`'s initial value: no miss.
        b"ma made N0 J5\r\n",
        b"ma made2 MD N0\r\n",
        // Found: an update, no miss.
        b"ma made\r\n",
        // Not found and not created: a miss each.
        b"ma none\r\n",
        b"ma none MD\r\n",
    ] {
        pair.same(request)?;
        for (side, seen) in seen.iter_mut().enumerate() {
            let client = &mut pair.sides[side].client;
            seen.push((
                counter(client, "incr_misses")?,
                counter(client, "decr_misses")?,
            ));
        }
    }
    // memcached 1.6.18's counts (checked, so the expectation stays true), and fogcached's.
    assert_eq!(
        seen[MEMCACHED],
        [(1, 0), (1, 1), (1, 1), (1, 1), (1, 1), (2, 1), (2, 2)],
        "memcached"
    );
    assert_eq!(seen[FOGCACHED], seen[MEMCACHED], "fogcached");
    pair.stop()
}
