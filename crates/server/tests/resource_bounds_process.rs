//! Resource bounds of the real binary: what a client can make the server hold.
//!
//! - Resident memory stays within the configured tiers plus a bounded overhead under a
//!   storm of random-size sets over many connections; the overhead per connection and
//!   per item is measured (and printed; the figures are in docs/testing.md).
//! - A connection holds at most one request's worth of input (`-I` + 64 KiB), however
//!   much of an unfinished request it is sent, and gives it back when done.
//! - `-o idle_timeout` closes connections that sent nothing for that long, in the middle
//!   of a request too, and leaves active ones alone.
//!
//! Resident memory is read from /proc/<pid>/status (VmRSS: anonymous memory, plus the
//! pages of the slow tier's pool file that are mapped in).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use testkit::{proc_status_kib, stat, RawClient, ServerProcess};

const MIB: u64 = 1024 * 1024;
const KIB: u64 = 1024;

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    Ok(proc_status_kib(pid, "VmRSS")? * KIB)
}

fn stat_u64(client: &mut RawClient, name: &str) -> anyhow::Result<u64> {
    let stats = client.stats("")?;
    stat(&stats, name)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no numeric stat {name}"))
}

/// Waits (bounded) until `curr_connections` is `n` (a closed connection is counted out
/// by its worker shortly after).
fn wait_for_connections(client: &mut RawClient, n: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = stat_u64(client, "curr_connections")?;
        if now == n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "curr_connections stayed {now}, not {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A deterministic generator (xorshift) for value sizes.
struct Sizes(u64);

impl Sizes {
    fn next(&mut self, max: u64) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (1 + self.0 % max) as usize
    }
}

/// The documented overhead bounds (docs/testing.md, "Resource bounds"): what the server
/// may hold beyond its tiers. An idle connection: its 16 KiB input buffer, its output
/// buffer's first 16 KiB, its registry entry and socket; the bound leaves room for the
/// allocator's rounding.
const IDLE_CONNECTION_BYTES_MAX: u64 = 64 * KIB;
/// Per item beyond its slab chunk: its index descriptor (8 bytes at 72-90 % load, 8.9
/// to 11.1 bytes per item) and the index's growth by doubling (twice that while a shard
/// is rebuilt).
const ITEM_OVERHEAD_BYTES_MAX: u64 = 32;
/// The process itself: code, thread stacks, the allocator's arenas, the index's first
/// tables (`-o hashpower`), the accounting stripes.
const PROCESS_BASE_BYTES_MAX: u64 = 64 * MIB;

#[test]
fn a_storm_of_random_size_sets_keeps_memory_within_the_tiers_and_a_bounded_overhead(
) -> anyhow::Result<()> {
    const DRAM_MIB: u64 = 16;
    const SLOW_MIB: u64 = 48;
    const CONNECTIONS: usize = 64;
    const SETS_PER_CONNECTION: usize = 150;
    const VALUE_MAX_BYTES: u64 = 64 * 1024;
    const WORKERS: u64 = 4;
    // The io_uring loop's provided receive buffers (128 x 16 KiB per worker,
    // `worker/uring.rs`): allocated at start, faulted in once traffic uses them.
    const LOOP_BUFFERS_PER_WORKER_BYTES: u64 = 128 * 16 * 1024;
    let server = ServerProcess::fogcached(&[
        "-t",
        &WORKERS.to_string(),
        "--dram",
        &DRAM_MIB.to_string(),
        "--slow-size",
        &format!("{SLOW_MIB}m"),
    ])?;
    let pid = server.pid().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let mut observer = RawClient::connect(server.addr())?;
    let base = rss_bytes(pid)?;
    assert!(
        base <= PROCESS_BASE_BYTES_MAX,
        "an idle server is already {} MiB resident",
        base / MIB
    );

    // The storm: every connection pipelines sets of random sizes (1 byte to 64 KiB)
    // over the same 4000 keys, far more than both tiers hold, from 8 threads.
    let addr = server.addr();
    let mut handles = Vec::new();
    for thread in 0..8u64 {
        handles.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let mut sizes = Sizes(0x9e37_79b9 ^ (thread << 32 | 1));
            let mut clients = (0..CONNECTIONS / 8)
                .map(|_| RawClient::connect(addr))
                .collect::<anyhow::Result<Vec<_>>>()?;
            for round in 0..SETS_PER_CONNECTION / 10 {
                for client in clients.iter_mut() {
                    let mut batch = Vec::new();
                    for _ in 0..10 {
                        let key = sizes.next(4000);
                        let len = sizes.next(VALUE_MAX_BYTES);
                        batch.extend_from_slice(
                            format!("set k{key} {round} 0 {len}\r\n").as_bytes(),
                        );
                        batch.resize(batch.len() + len, b'a' + (key % 26) as u8);
                        batch.extend_from_slice(b"\r\n");
                    }
                    client.send(&batch)?;
                    let replies = client.read_exact(10 * b"STORED\r\n".len())?;
                    anyhow::ensure!(
                        replies == b"STORED\r\n".repeat(10),
                        "a set of the storm was refused: {}",
                        testkit::escape(&replies)
                    );
                }
            }
            Ok(())
        }));
    }
    let mut peak = base;
    while handles.iter().any(|h| !h.is_finished()) {
        peak = peak.max(rss_bytes(pid)?);
        std::thread::sleep(Duration::from_millis(20));
    }
    for handle in handles {
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("a storm thread panicked"))??;
    }
    let hwm = proc_status_kib(pid, "VmHWM")? * KIB;
    let items = stat_u64(&mut observer, "curr_items")?;
    let index_bytes = stat_u64(&mut observer, "index_bytes")?;
    let evictions = stat_u64(&mut observer, "evictions")?;
    let tiers = (DRAM_MIB + SLOW_MIB) * MIB;
    // While the storm ran, each connection held at most one request's input (64 KiB
    // values: the buffer's doubling stops at 128 KiB) and its replies.
    let storm_connection_bytes = 256 * KIB;
    let bound = base
        + tiers
        + WORKERS * LOOP_BUFFERS_PER_WORKER_BYTES
        + CONNECTIONS as u64 * storm_connection_bytes
        + items * ITEM_OVERHEAD_BYTES_MAX;
    println!(
        "storm: {CONNECTIONS} connections x {SETS_PER_CONNECTION} sets; {items} items, \
         {evictions} evictions, index {index_bytes} bytes; RSS {} KiB idle, peak \
         {} KiB sampled, {} KiB VmHWM; tiers {} KiB; overhead over tiers at the peak {} KiB \
         ({} bytes per item and connection share)",
        base / KIB,
        peak / KIB,
        hwm / KIB,
        tiers / KIB,
        hwm.saturating_sub(base + tiers) / KIB,
        hwm.saturating_sub(base + tiers) / (items + 1).max(1),
    );
    assert!(evictions > 0, "the storm never filled the cache");
    assert!(
        hwm <= bound,
        "peak RSS {} KiB beyond the bound {} KiB (idle {} KiB + tiers {} KiB + \
         connections + items)",
        hwm / KIB,
        bound / KIB,
        base / KIB,
        tiers / KIB
    );
    Ok(())
}

#[test]
fn idle_connections_and_items_cost_what_the_documentation_says() -> anyhow::Result<()> {
    let server =
        ServerProcess::fogcached(&["-t", "2", "-c", "4096", "--slow-size", "0", "-m", "256"])?;
    let pid = server.pid().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let mut observer = RawClient::connect(server.addr())?;
    wait_for_connections(&mut observer, 1)?;

    // Per connection: 1000 connections that each sent a request.
    const CONNECTIONS: u64 = 1000;
    let before = rss_bytes(pid)?;
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut client = RawClient::connect(server.addr())?;
        assert!(client
            .request(b"version\r\n", b"\r\n")?
            .starts_with(b"VERSION"));
        clients.push(client);
    }
    let after = rss_bytes(pid)?;
    let per_connection = after.saturating_sub(before) / CONNECTIONS;
    println!(
        "{CONNECTIONS} idle connections: RSS {} -> {} KiB, {per_connection} bytes each",
        before / KIB,
        after / KIB
    );
    assert!(
        per_connection <= IDLE_CONNECTION_BYTES_MAX,
        "{per_connection} bytes of RSS per idle connection"
    );
    drop(clients);
    wait_for_connections(&mut observer, 1)?;

    // Per item: 200 000 items of 32-byte values, everything beyond their slab pages.
    const ITEMS: u64 = 200_000;
    let before = rss_bytes(pid)?;
    let free_pages_before = stat_u64(&mut observer, "slab_global_page_pool")?;
    let mut batch = Vec::new();
    for i in 0..ITEMS {
        batch.extend_from_slice(format!("set item{i:08} 0 0 32 noreply\r\n").as_bytes());
        batch.extend_from_slice(&[b'i'; 32]);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 1 << 20 {
            observer.send(&batch)?;
            batch.clear();
        }
    }
    batch.extend_from_slice(b"mn\r\n");
    observer.send(&batch)?;
    assert_eq!(observer.read_until(b"MN\r\n")?, b"MN\r\n");
    assert_eq!(stat_u64(&mut observer, "curr_items")?, ITEMS);
    let after = rss_bytes(pid)?;
    let slab_bytes = (free_pages_before - stat_u64(&mut observer, "slab_global_page_pool")?) * MIB;
    let index_bytes = stat_u64(&mut observer, "index_bytes")?;
    let per_item = after.saturating_sub(before + slab_bytes) / ITEMS;
    println!(
        "{ITEMS} items: RSS {} -> {} KiB, slab pages {} KiB, index {index_bytes} bytes; \
         {per_item} bytes per item beyond its chunk",
        before / KIB,
        after / KIB,
        slab_bytes / KIB
    );
    assert!(
        per_item <= ITEM_OVERHEAD_BYTES_MAX,
        "{per_item} bytes of RSS per item beyond the slab pages"
    );
    // The index is sized ahead (`-o hashpower`), so part of it is in the idle RSS: its
    // own account is the per-item figure that holds for any number of items.
    assert!(
        index_bytes <= ITEMS * 16,
        "the index takes {} bytes per item",
        index_bytes / ITEMS
    );
    Ok(())
}

#[test]
fn an_unfinished_request_holds_at_most_one_requests_input_per_connection() -> anyhow::Result<()> {
    const CONNECTIONS: u64 = 32;
    let server = ServerProcess::fogcached(&["-t", "2", "-I", "1m"])?;
    let pid = server.pid().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let mut observer = RawClient::connect(server.addr())?;
    let before = rss_bytes(pid)?;
    // Each connection sends a 1 MiB get line without its newline, then a value that
    // never ends: the input buffer may grow to one request (-I + 64 KiB), no further.
    let keys: Vec<u8> = b"get "
        .iter()
        .copied()
        .chain(b"key ".repeat(250_000))
        .collect();
    let mut streams = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(server.addr())?;
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        let mut value = b"set big 0 0 1048000\r\n".to_vec();
        value.resize(value.len() + 1_000_000, b'v');
        stream.write_all(&value)?;
        streams.push(stream);
    }
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(server.addr())?;
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        match stream.write_all(&keys) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e.into()),
        }
        streams.push(stream);
    }
    std::thread::sleep(Duration::from_millis(500));
    let held = rss_bytes(pid)?.saturating_sub(before);
    let per_connection = held / (2 * CONNECTIONS);
    println!(
        "{} connections with an unfinished 1 MB request: {} KiB more RSS, {per_connection} \
         bytes each",
        2 * CONNECTIONS,
        held / KIB
    );
    // One request: the 1 MiB item bound plus 64 KiB of framing, rounded up to the
    // buffer's power-of-two growth (2 MiB).
    assert!(
        per_connection <= 2 * MIB + 64 * KIB,
        "{per_connection} bytes held per connection"
    );
    // The server still answers, and a get line longer than 1 MiB closes its connection.
    assert!(observer
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION"));
    let mut too_long = TcpStream::connect(server.addr())?;
    too_long.set_read_timeout(Some(Duration::from_secs(5)))?;
    too_long.set_write_timeout(Some(Duration::from_secs(5)))?;
    let _ = too_long.write_all(&b"key ".repeat(300_000));
    let mut reply = Vec::new();
    let closed = match too_long.read_to_end(&mut reply) {
        Ok(_) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
    };
    assert!(
        closed,
        "a line beyond every limit did not close its connection"
    );
    // When the clients leave, their buffers go back.
    drop(streams);
    wait_for_connections(&mut observer, 1)?;
    let after = rss_bytes(pid)?;
    println!(
        "after they left: RSS {} KiB (was {} KiB before they came)",
        after / KIB,
        before / KIB
    );
    assert!(
        after <= before + 16 * MIB,
        "{} KiB still held after the connections closed",
        (after - before) / KIB
    );
    Ok(())
}

#[test]
fn idle_timeout_closes_silent_connections_and_spares_active_ones() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-o", "idle_timeout=2"])?;
    let mut settings = RawClient::connect(server.addr())?;
    assert_eq!(
        stat(&settings.stats("settings")?, "idle_timeout"),
        Some("2")
    );
    drop(settings);
    let mut idle = RawClient::connect(server.addr())?;
    assert!(idle
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION"));
    // Silent in the middle of a value: the slot is not held forever either.
    let mut half = RawClient::connect(server.addr())?;
    half.send(b"set k 0 0 100\r\nonly part of it")?;
    let mut active = RawClient::connect(server.addr())?;
    let started = Instant::now();
    let mut idle_closed_after = None;
    let mut half_closed_after = None;
    idle.set_read_timeout(Duration::from_millis(100))?;
    half.set_read_timeout(Duration::from_millis(100))?;
    while started.elapsed() < Duration::from_secs(8) {
        // The active client sends a request every 200 ms and must be answered each time.
        assert!(
            active
                .request(b"version\r\n", b"\r\n")?
                .starts_with(b"VERSION"),
            "the active connection was cut"
        );
        if idle_closed_after.is_none() && idle.is_closed_by_peer() {
            idle_closed_after = Some(started.elapsed());
        }
        if half_closed_after.is_none() && half.is_closed_by_peer() {
            half_closed_after = Some(started.elapsed());
        }
        if idle_closed_after.is_some() && half_closed_after.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let idle_after = idle_closed_after.expect("the idle connection was never closed");
    let half_after = half_closed_after.expect("the connection silent mid-value was never closed");
    println!("idle closed after {idle_after:?}, mid-value after {half_after:?}");
    assert!(
        idle_after >= Duration::from_secs(1),
        "closed too early: {idle_after:?}"
    );
    assert!(
        half_after >= Duration::from_secs(1),
        "closed too early: {half_after:?}"
    );
    assert!(stat_u64(&mut active, "idle_kicks")? >= 2);
    Ok(())
}
