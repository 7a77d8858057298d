//! The fog layer (`--upstream`) against real memcached as the cloud, 1 ms away through a
//! delaying proxy: read-through with flags, CAS and a capped TTL, single flight checked
//! from memcached's own `stats`, write-through and invalidate, what another edge sees,
//! timeouts and the circuit breaker.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use testkit::{stat, DelayProxy, RawClient, ServerProcess};

/// Half of the 1 ms between edge and cloud (the proxy delays each direction).
const ONE_WAY_DELAY: Duration = Duration::from_micros(500);

struct Cloud {
    memcached: ServerProcess,
    proxy: DelayProxy,
}

impl Cloud {
    fn start() -> anyhow::Result<Cloud> {
        let memcached = ServerProcess::memcached(&[])?;
        let proxy = DelayProxy::start(memcached.addr(), ONE_WAY_DELAY)?;
        Ok(Cloud { memcached, proxy })
    }

    /// The address edges are given: the proxy's.
    fn addr(&self) -> SocketAddr {
        self.proxy.addr()
    }

    fn client(&self) -> anyhow::Result<RawClient> {
        RawClient::connect(self.memcached.addr())
    }

    fn stat(&self, name: &str) -> u64 {
        let mut client = self.client().expect("connecting to memcached");
        stat_u64(&client.stats("").expect("memcached stats"), name)
    }
}

fn edge(cloud: SocketAddr, extra: &[&str]) -> anyhow::Result<ServerProcess> {
    let upstream = cloud.to_string();
    let mut args = vec!["--slow-size", "0", "-t", "2", "--upstream", &upstream];
    // The machine running the tests may be busy: a fetch is not to time out unless the
    // test is about timeouts.
    if !extra.contains(&"--upstream-timeout-ms") {
        args.extend_from_slice(&["--upstream-timeout-ms", "5000"]);
    }
    args.extend_from_slice(extra);
    ServerProcess::fogcached(&args)
}

fn stat_u64(stats: &[(String, String)], name: &str) -> u64 {
    stat(stats, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("stat {name} missing or not a number in {stats:?}"))
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The `t<ttl>` of an `mg ... t` reply.
fn ttl_of(reply: &str) -> i64 {
    reply
        .split_whitespace()
        .find_map(|token| token.strip_prefix('t'))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no t flag in {reply:?}"))
}

/// The CAS of a one-key `gets` reply.
/// Reads `key` through the edge until the cloud answers `hit`: the breaker's retry after
/// the cloud came back. Every answer before it must be a miss; at most 5 s.
fn read_until_the_cloud_is_back(
    client: &mut RawClient,
    key: &str,
    hit: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = text(client.request(format!("get {key}\r\n").as_bytes(), b"END\r\n")?);
        if reply == hit {
            return Ok(());
        }
        assert_eq!(reply, "END\r\n");
        assert!(Instant::now() < deadline, "the cloud was not tried again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn gets_cas(reply: &str) -> u64 {
    reply
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(4))
        .and_then(|cas| cas.parse().ok())
        .unwrap_or_else(|| panic!("no CAS in {reply:?}"))
}

#[test]
fn a_miss_at_the_edge_is_filled_from_the_cloud_once_with_flags_cas_and_ttl() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let mut origin = cloud.client()?;
    origin.request(b"set k 42 100 5\r\nhello\r\n", b"\r\n")?;
    let origin_cas = gets_cas(&text(origin.request(b"gets k\r\n", b"END\r\n")?));
    let edge = edge(cloud.addr(), &[])?;
    let mut client = RawClient::connect(edge.addr())?;

    let first = Instant::now();
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 42 5\r\nhello\r\nEND\r\n"
    );
    assert!(
        first.elapsed() >= Duration::from_millis(1),
        "a fill crosses the 1 ms to the cloud"
    );
    assert_eq!(cloud.stat("cmd_get"), 2, "the edge's one get (and ours)");
    // Now an edge hit: the cloud is not asked again.
    assert_eq!(
        text(client.request(b"gets k\r\n", b"END\r\n")?),
        format!("VALUE k 42 5 {origin_cas}\r\nhello\r\nEND\r\n"),
        "the edge copy carries the cloud's CAS"
    );
    let meta = text(client.request(b"mg k f t v\r\n", b"\r\nhello\r\n")?);
    assert!(meta.starts_with("VA 5 f42 t"), "{meta}");
    let ttl = ttl_of(&meta);
    assert!(
        (95..=100).contains(&ttl),
        "the cloud's remaining TTL: {meta}"
    );
    assert_eq!(cloud.stat("cmd_get"), 2);

    // A key the cloud does not have either: a miss, asked once per request.
    assert_eq!(
        text(client.request(b"get nowhere\r\n", b"END\r\n")?),
        "END\r\n"
    );
    let stats = client.stats("")?;
    assert_eq!(stat_u64(&stats, "upstream_cmd_get"), 2);
    assert_eq!(stat_u64(&stats, "upstream_get_hits"), 1);
    assert_eq!(stat_u64(&stats, "upstream_get_misses"), 1);
    assert_eq!(stat_u64(&stats, "upstream_fills"), 1);
    assert_eq!(stat_u64(&stats, "get_hits"), 2, "the edge's own hits");
    assert_eq!(stat_u64(&stats, "get_misses"), 2, "the edge's own misses");
    let detail = client.stats("upstreams")?;
    assert_eq!(stat(&detail, "upstream:0:protocol"), Some("meta"));
    assert_eq!(stat(&detail, "upstream:0:get_hits"), Some("1"));
    assert_eq!(stat(&detail, "upstream:0:latency_count"), Some("2"));
    let latencies: u64 = detail
        .iter()
        .filter(|(name, _)| name.starts_with("upstream_latency_le_"))
        .map(|(_, v)| v.parse::<u64>().unwrap_or(0))
        .sum();
    assert_eq!(latencies, 2, "every completed request is in the histogram");
    Ok(())
}

#[test]
fn the_edge_copy_lives_at_most_upstream_ttl_max() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let mut origin = cloud.client()?;
    origin.request(b"set forever 0 0 1\r\nx\r\n", b"\r\n")?;
    origin.request(b"set short 0 30 1\r\ny\r\n", b"\r\n")?;
    let edge = edge(cloud.addr(), &["--upstream-ttl-max", "100"])?;
    let mut client = RawClient::connect(edge.addr())?;
    client.request(b"get forever short\r\n", b"END\r\n")?;
    let forever = text(client.request(b"mg forever t\r\n", b"\r\n")?);
    assert!((98..=100).contains(&ttl_of(&forever)), "capped: {forever}");
    let short = text(client.request(b"mg short t\r\n", b"\r\n")?);
    assert!(
        (27..=30).contains(&ttl_of(&short)),
        "the cloud's own: {short}"
    );
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "upstream_ttl_max"), Some("100"));
    assert_eq!(
        stat(&settings, "upstream"),
        Some(cloud.addr().to_string().as_str())
    );
    Ok(())
}

#[test]
fn a_multi_get_answers_in_key_order_whatever_tier_or_cloud_each_key_came_from() -> anyhow::Result<()>
{
    let cloud = Cloud::start()?;
    let mut origin = cloud.client()?;
    origin.request(b"set b 2 0 2\r\nbb\r\n", b"\r\n")?;
    origin.request(b"set d 4 0 2\r\ndd\r\n", b"\r\n")?;
    origin.request(b"set a 1 0 2\r\naa\r\n", b"\r\n")?;
    origin.request(b"set c 3 0 2\r\ncc\r\n", b"\r\n")?;
    let edge = edge(cloud.addr(), &[])?;
    let mut client = RawClient::connect(edge.addr())?;
    // `a` and `c` only at the edge: filled, then deleted from the cloud behind its back.
    client.request(b"get a c\r\n", b"END\r\n")?;
    origin.request(b"delete a\r\n", b"\r\n")?;
    origin.request(b"delete c\r\n", b"\r\n")?;
    // Pipelined with a second request: its reply must come after the whole multi-get.
    client.send(b"get a b c d e\r\nget b\r\n")?;
    let reply = text(client.read_until(b"END\r\nVALUE b 2 2\r\nbb\r\nEND\r\n")?);
    assert_eq!(
        reply,
        "VALUE a 1 2\r\naa\r\nVALUE b 2 2\r\nbb\r\nVALUE c 3 2\r\ncc\r\nVALUE d 4 2\r\ndd\r\nEND\r\n\
         VALUE b 2 2\r\nbb\r\nEND\r\n"
    );
    Ok(())
}

#[test]
fn concurrent_misses_of_one_key_make_one_cloud_get() -> anyhow::Result<()> {
    const CLIENTS: usize = 24;
    let memcached = ServerProcess::memcached(&[])?;
    // A slower cloud widens the window in which the misses overlap.
    let proxy = DelayProxy::start(memcached.addr(), Duration::from_millis(100))?;
    let mut origin = RawClient::connect(memcached.addr())?;
    origin.request(b"set hot 7 0 3\r\nhot\r\n", b"\r\n")?;
    let before = stat_u64(&origin.stats("")?, "cmd_get");
    // Several upstream threads: the key's own takes every miss of it.
    let edge = edge(
        proxy.addr(),
        &["--upstream-timeout-ms", "5000", "--upstream-threads", "4"],
    )?;
    // Connect everyone first so that the gets leave together.
    let mut clients = (0..CLIENTS)
        .map(|_| RawClient::connect(edge.addr()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The edge's upstream connection is opened by the first miss; open it now.
    clients[0].request(b"get warmup\r\n", b"END\r\n")?;
    for client in &mut clients {
        client.send(b"get hot\r\n")?;
    }
    for client in &mut clients {
        assert_eq!(
            text(client.read_until(b"END\r\n")?),
            "VALUE hot 7 3\r\nhot\r\nEND\r\n"
        );
    }
    let after = stat_u64(&origin.stats("")?, "cmd_get");
    assert_eq!(
        after - before,
        2,
        "one cloud get for {CLIENTS} concurrent misses (plus the warm-up)"
    );
    let stats = clients[0].stats("")?;
    assert_eq!(stat_u64(&stats, "upstream_get_joined"), CLIENTS as u64 - 1);
    assert_eq!(stat_u64(&stats, "upstream_in_flight"), 0);
    Ok(())
}

#[test]
fn write_through_updates_the_cloud_first_then_the_edge() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let edge = edge(cloud.addr(), &["--upstream-ttl-max", "60"])?;
    let mut client = RawClient::connect(edge.addr())?;
    let mut origin = cloud.client()?;

    assert_eq!(
        text(client.request(b"set k 9 0 3\r\none\r\n", b"\r\n")?),
        "STORED\r\n"
    );
    assert_eq!(
        text(origin.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 9 3\r\none\r\nEND\r\n"
    );
    let gets_before = cloud.stat("cmd_get");
    // Served by the edge's copy, with the cloud's CAS: a `cas` through the edge works.
    let cas = gets_cas(&text(client.request(b"gets k\r\n", b"END\r\n")?));
    assert_eq!(
        cas,
        gets_cas(&text(origin.request(b"gets k\r\n", b"END\r\n")?))
    );
    assert_eq!(cloud.stat("cmd_get"), gets_before + 1, "only our own gets");
    let ttl = ttl_of(&text(client.request(b"mg k t\r\n", b"\r\n")?));
    assert!(
        (59..=60).contains(&ttl),
        "the edge copy's TTL is capped: {ttl}"
    );
    let cas_request = format!("cas k 9 0 3 {cas}\r\ntwo\r\n");
    assert_eq!(
        text(client.request(cas_request.as_bytes(), b"\r\n")?),
        "STORED\r\n"
    );
    assert_eq!(
        text(client.request(cas_request.as_bytes(), b"\r\n")?),
        "EXISTS\r\n"
    );
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 9 3\r\ntwo\r\nEND\r\n"
    );
    // The cloud's refusals reach the client, and the edge keeps no stale copy.
    assert_eq!(
        text(client.request(b"add k 0 0 1\r\nx\r\n", b"\r\n")?),
        "NOT_STORED\r\n"
    );
    assert_eq!(
        text(client.request(b"append k 0 0 2\r\n++\r\n", b"\r\n")?),
        "STORED\r\n"
    );
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 9 5\r\ntwo++\r\nEND\r\n",
        "an append removes the edge copy; the next read fetches the cloud's"
    );
    origin.request(b"set n 0 0 1\r\n5\r\n", b"\r\n")?;
    assert_eq!(text(client.request(b"incr n 10\r\n", b"\r\n")?), "15\r\n");
    assert_eq!(text(client.request(b"decr n 20\r\n", b"\r\n")?), "0\r\n");
    assert_eq!(
        text(client.request(b"incr none 1\r\n", b"\r\n")?),
        "NOT_FOUND\r\n"
    );
    assert_eq!(
        text(client.request(b"touch k 30\r\n", b"\r\n")?),
        "TOUCHED\r\n"
    );
    let origin_ttl = ttl_of(&text(origin.request(b"mg k t\r\n", b"\r\n")?));
    assert!(
        (29..=30).contains(&origin_ttl),
        "the touch reached the cloud"
    );
    assert_eq!(
        text(client.request(b"delete k\r\n", b"\r\n")?),
        "DELETED\r\n"
    );
    assert_eq!(text(origin.request(b"get k\r\n", b"END\r\n")?), "END\r\n");
    assert_eq!(text(client.request(b"get k\r\n", b"END\r\n")?), "END\r\n");
    assert_eq!(
        text(client.request(b"delete k\r\n", b"\r\n")?),
        "NOT_FOUND\r\n"
    );
    // noreply: nothing comes back, the write still happened (in order).
    client.send(b"set q 0 0 1 noreply\r\nq\r\n")?;
    assert_eq!(
        text(client.request(b"get q\r\n", b"END\r\n")?),
        "VALUE q 0 1\r\nq\r\nEND\r\n"
    );
    // Meta writes too.
    assert_eq!(
        text(client.request(b"ms m 2 F5 T0\r\nmm\r\n", b"\r\n")?),
        "HD\r\n"
    );
    assert_eq!(
        text(origin.request(b"mg m v f\r\n", b"\r\nmm\r\n")?),
        "VA 2 f5\r\nmm\r\n"
    );
    assert_eq!(
        text(client.request(b"md m q\r\nmn\r\n", b"MN\r\n")?),
        "MN\r\n"
    );
    assert_eq!(text(origin.request(b"mg m v\r\n", b"\r\n")?), "EN\r\n");
    let stats = client.stats("")?;
    assert!(stat_u64(&stats, "upstream_cmd_write") >= 12);
    Ok(())
}

#[test]
fn invalidate_mode_drops_the_edge_copy_and_the_next_read_fetches() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let edge = edge(cloud.addr(), &["--upstream-writes", "invalidate"])?;
    let mut client = RawClient::connect(edge.addr())?;
    assert_eq!(
        text(client.request(b"set k 1 0 2\r\nv1\r\n", b"\r\n")?),
        "STORED\r\n"
    );
    let cloud_gets = cloud.stat("get_hits");
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 1 2\r\nv1\r\nEND\r\n"
    );
    assert_eq!(
        cloud.stat("get_hits"),
        cloud_gets + 1,
        "the set left no edge copy: the get was filled from the cloud"
    );
    assert_eq!(
        text(client.request(b"set k 1 0 2\r\nv2\r\n", b"\r\n")?),
        "STORED\r\n"
    );
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 1 2\r\nv2\r\nEND\r\n"
    );
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "upstream_writes"), Some("invalidate"));
    Ok(())
}

#[test]
fn another_edge_keeps_its_copy_until_the_ttl_cap_ends_it() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let reader = edge(cloud.addr(), &["--upstream-ttl-max", "1"])?;
    let writer = edge(cloud.addr(), &[])?;
    let mut at_reader = RawClient::connect(reader.addr())?;
    let mut at_writer = RawClient::connect(writer.addr())?;
    at_writer.request(b"set k 0 0 3\r\nold\r\n", b"\r\n")?;
    assert_eq!(
        text(at_reader.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 0 3\r\nold\r\nEND\r\n"
    );
    at_writer.request(b"set k 0 0 3\r\nnew\r\n", b"\r\n")?;
    assert_eq!(
        text(at_reader.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 0 3\r\nold\r\nEND\r\n",
        "the other edge's copy is stale until it expires (the documented consistency)"
    );
    // memcached's clock ticks in whole seconds: a 1 s TTL ends within 2 s.
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let reply = text(at_reader.request(b"get k\r\n", b"END\r\n")?);
        if reply == "VALUE k 0 3\r\nnew\r\nEND\r\n" {
            break;
        }
        assert_eq!(reply, "VALUE k 0 3\r\nold\r\nEND\r\n");
        assert!(Instant::now() < deadline, "the stale copy outlived the cap");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

#[test]
fn meta_and_binary_clients_read_through_too() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let mut origin = cloud.client()?;
    origin.request(b"set m 3 0 2\r\nmv\r\n", b"\r\n")?;
    origin.request(b"set b 4 0 2\r\nbv\r\n", b"\r\n")?;
    let edge = edge(cloud.addr(), &[])?;
    let mut meta = RawClient::connect(edge.addr())?;
    assert_eq!(
        text(meta.request(b"mg m v f k O1\r\n", b"\r\nmv\r\n")?),
        "VA 2 f3 km O1\r\nmv\r\n"
    );
    assert_eq!(
        text(meta.request(b"mg none v O2\r\n", b"\r\n")?),
        "EN O2\r\n"
    );
    assert_eq!(
        text(meta.request(b"mg none2 v q\r\nmn\r\n", b"MN\r\n")?),
        "MN\r\n"
    );

    let mut binary = RawClient::connect(edge.addr())?;
    // GETK of "b": header (magic, opcode 0x0c, key length 1, body 1, opaque 7) + key.
    let mut request = vec![0x80, 0x0c, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7];
    request.extend_from_slice(&[0; 8]);
    request.push(b'b');
    binary.send(&request)?;
    let header = binary.read_exact(24)?;
    assert_eq!(header[0], 0x81);
    assert_eq!(
        u16::from_be_bytes([header[6], header[7]]),
        0,
        "status: found"
    );
    let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let body = binary.read_exact(body_len)?;
    assert_eq!(&body[..4], &4u32.to_be_bytes(), "flags");
    assert_eq!(&body[4..], b"bbv", "key then value");
    Ok(())
}

#[test]
fn a_silent_cloud_times_out_reads_as_misses_and_writes_as_errors() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    cloud.client()?.request(b"set k 0 0 1\r\nv\r\n", b"\r\n")?;
    let edge = edge(
        cloud.addr(),
        &[
            "--upstream-timeout-ms",
            "150",
            "--upstream-breaker-failures",
            "100",
        ],
    )?;
    let mut client = RawClient::connect(edge.addr())?;
    // Connected and working, then the cloud stops answering.
    client.request(b"get warm\r\n", b"END\r\n")?;
    cloud.proxy.set_paused(true);
    let started = Instant::now();
    assert_eq!(text(client.request(b"get k\r\n", b"END\r\n")?), "END\r\n");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(140) && waited < Duration::from_secs(2),
        "a read waits for the timeout, then misses: {waited:?}"
    );
    assert_eq!(
        text(client.request(b"set k 0 0 1\r\nw\r\n", b"\r\n")?),
        "SERVER_ERROR upstream timeout\r\n"
    );
    let stats = client.stats("")?;
    assert!(stat_u64(&stats, "upstream_timeouts") >= 2, "{stats:?}");
    // Other connections are not held up meanwhile (the worker never blocks).
    let mut other = RawClient::connect(edge.addr())?;
    other.request(b"get k\r\n", b"END\r\n")?;
    cloud.proxy.set_paused(false);
    assert_eq!(
        text(other.request(b"version\r\n", b"\r\n")?)
            .split(' ')
            .next(),
        Some("VERSION")
    );
    Ok(())
}

#[test]
fn a_dead_cloud_opens_the_breaker_and_is_retried_after_it_comes_back() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    cloud.client()?.request(b"set k 0 0 1\r\nv\r\n", b"\r\n")?;
    let edge = edge(
        cloud.addr(),
        &[
            "--upstream-breaker-failures",
            "3",
            "--upstream-retry-ms",
            "300",
            // The keys below spread over the threads; they share the breaker.
            "--upstream-threads",
            "4",
        ],
    )?;
    let mut client = RawClient::connect(edge.addr())?;
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    let Cloud { memcached, proxy } = cloud;
    drop(memcached);
    proxy.cut_connections();
    // Misses, never errors, while it is down; the breaker opens after 3 failures.
    for i in 0..20 {
        let request = format!("get down{i}\r\n");
        assert_eq!(
            text(client.request(request.as_bytes(), b"END\r\n")?),
            "END\r\n"
        );
    }
    assert_eq!(
        text(client.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 0 1\r\nv\r\nEND\r\n",
        "the edge still serves what it holds"
    );
    let stats = client.stats("")?;
    assert_eq!(stat_u64(&stats, "upstream_breaker_opens"), 1, "{stats:?}");
    assert!(
        stat_u64(&stats, "upstream_breaker_rejects") >= 10,
        "{stats:?}"
    );
    assert!(stat_u64(&stats, "upstream_errors") >= 3, "{stats:?}");
    assert_eq!(
        stat(&client.stats("upstreams")?, "upstream:0:breaker"),
        Some("open")
    );
    // Back (a new memcached behind the same address), then retried after the breaker's
    // wait.
    let memcached = ServerProcess::memcached(&[])?;
    RawClient::connect(memcached.addr())?.request(b"set back 0 0 2\r\nok\r\n", b"\r\n")?;
    proxy.set_target(memcached.addr());
    read_until_the_cloud_is_back(&mut client, "back", "VALUE back 0 2\r\nok\r\nEND\r\n")?;
    assert_eq!(
        stat(&client.stats("upstreams")?, "upstream:0:breaker"),
        Some("closed")
    );
    Ok(())
}

#[test]
fn keys_spread_over_two_clouds_by_ketama() -> anyhow::Result<()> {
    let first = Cloud::start()?;
    let second = Cloud::start()?;
    let upstream = format!("{},{}", first.addr(), second.addr());
    let edge = ServerProcess::fogcached(&[
        "--slow-size",
        "0",
        "--upstream",
        &upstream,
        "--upstream-timeout-ms",
        "5000",
    ])?;
    let mut client = RawClient::connect(edge.addr())?;
    for i in 0..40 {
        let request = format!("set key{i} 0 0 1\r\n{}\r\n", i % 10);
        assert_eq!(
            text(client.request(request.as_bytes(), b"\r\n")?),
            "STORED\r\n"
        );
    }
    let on_first = first.stat("curr_items");
    let on_second = second.stat("curr_items");
    assert_eq!(on_first + on_second, 40, "every key in exactly one cloud");
    assert!(on_first >= 5 && on_second >= 5, "{on_first} / {on_second}");
    // The placement is libmemcached's/twemproxy's (the same ketama as fogbench's).
    let ketama = ketama::Ketama::new(&[first.addr().to_string(), second.addr().to_string()]);
    let expected_first = (0..40)
        .filter(|i| ketama.server_for(format!("key{i}").as_bytes()) == 0)
        .count() as u64;
    assert_eq!(on_first, expected_first);
    Ok(())
}

/// A cloud without meta commands: answers `mn` with `ERROR`, speaks `gets`, `set` and
/// `delete` (the text protocol of memcached before 1.6), as a thread per connection.
struct TextOnlyCloud {
    addr: SocketAddr,
    gets: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl TextOnlyCloud {
    fn start() -> anyhow::Result<TextOnlyCloud> {
        use std::collections::HashMap;
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        /// Key → (flags as sent, value, CAS).
        type Items = HashMap<String, (String, Vec<u8>, u64)>;
        let items: Arc<Mutex<Items>> = Arc::default();
        let gets = Arc::new(AtomicU64::new(0));
        items
            .lock()
            .expect("items")
            .insert("old".to_owned(), ("5".to_owned(), b"text".to_vec(), 77));
        let counter = Arc::clone(&gets);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let items = Arc::clone(&items);
                let gets = Arc::clone(&counter);
                std::thread::spawn(move || -> std::io::Result<()> {
                    let mut writer = stream.try_clone()?;
                    let mut reader = BufReader::new(stream);
                    let mut line = String::new();
                    while reader.read_line(&mut line)? > 0 {
                        let words: Vec<String> =
                            line.split_whitespace().map(str::to_owned).collect();
                        line.clear();
                        let reply = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                            ["gets", key] => {
                                gets.fetch_add(1, Ordering::SeqCst);
                                match items.lock().expect("items").get(key) {
                                    Some((flags, value, cas)) => {
                                        let mut reply = format!(
                                            "VALUE {key} {flags} {} {cas}\r\n",
                                            value.len()
                                        )
                                        .into_bytes();
                                        reply.extend_from_slice(value);
                                        reply.extend_from_slice(b"\r\nEND\r\n");
                                        reply
                                    }
                                    None => b"END\r\n".to_vec(),
                                }
                            }
                            ["set", key, flags, _exptime, len] => {
                                let len: usize = len.parse().unwrap_or(0);
                                let mut value = vec![0; len + 2];
                                reader.read_exact(&mut value)?;
                                value.truncate(len);
                                items
                                    .lock()
                                    .expect("items")
                                    .insert(key.to_owned(), (flags.to_owned(), value, 1));
                                b"STORED\r\n".to_vec()
                            }
                            ["delete", key] => match items.lock().expect("items").remove(key) {
                                Some(_) => b"DELETED\r\n".to_vec(),
                                None => b"NOT_FOUND\r\n".to_vec(),
                            },
                            _ => b"ERROR\r\n".to_vec(),
                        };
                        writer.write_all(&reply)?;
                    }
                    Ok(())
                });
            }
        });
        Ok(TextOnlyCloud { addr, gets })
    }
}

#[test]
fn a_cloud_without_meta_commands_is_read_with_gets_and_its_copies_live_the_cap(
) -> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let cloud = TextOnlyCloud::start()?;
    let edge = edge(cloud.addr, &["--upstream-ttl-max", "20"])?;
    let mut client = RawClient::connect(edge.addr())?;
    assert_eq!(
        text(client.request(b"gets old\r\n", b"END\r\n")?),
        "VALUE old 5 4 77\r\ntext\r\nEND\r\n",
        "flags and CAS from the text cloud's gets"
    );
    let ttl = ttl_of(&text(client.request(b"mg old t\r\n", b"\r\n")?));
    assert!(
        (19..=20).contains(&ttl),
        "the TTL cap, the cloud not saying: {ttl}"
    );
    assert_eq!(
        stat(&client.stats("upstreams")?, "upstream:0:protocol"),
        Some("text")
    );
    // A text write: the cloud reports no CAS, so the edge drops its copy and the next
    // read fetches the cloud's value (with the cloud's CAS).
    assert_eq!(
        text(client.request(b"set old 6 0 3\r\nnew\r\n", b"\r\n")?),
        "STORED\r\n"
    );
    let gets_before = cloud.gets.load(Ordering::SeqCst);
    assert_eq!(
        text(client.request(b"gets old\r\n", b"END\r\n")?),
        "VALUE old 6 3 1\r\nnew\r\nEND\r\n"
    );
    assert_eq!(cloud.gets.load(Ordering::SeqCst), gets_before + 1);
    assert_eq!(
        text(client.request(b"delete old\r\n", b"\r\n")?),
        "DELETED\r\n"
    );
    assert_eq!(text(client.request(b"get old\r\n", b"END\r\n")?), "END\r\n");
    // What the text protocol cannot say is refused, not half done.
    assert_eq!(
        text(client.request(b"md old C5\r\n", b"\r\n")?),
        "SERVER_ERROR not supported by the upstream\r\n"
    );
    Ok(())
}

#[test]
fn a_multi_get_fetches_all_its_missing_keys_in_one_round_trip() -> anyhow::Result<()> {
    const KEYS: usize = 12;
    let memcached = ServerProcess::memcached(&[])?;
    let proxy = DelayProxy::start(memcached.addr(), ONE_WAY_DELAY)?;
    let mut origin = RawClient::connect(memcached.addr())?;
    for i in 0..KEYS {
        let request = format!("set m{i} {i} 0 2\r\nv{}\r\n", i % 10);
        origin.request(request.as_bytes(), b"\r\n")?;
    }
    // Several upstream threads: the keys split among them, fetched at the same time.
    let edge = edge(
        proxy.addr(),
        &["--upstream-timeout-ms", "5000", "--upstream-threads", "4"],
    )?;
    let mut client = RawClient::connect(edge.addr())?;
    client.request(b"get warmup\r\n", b"END\r\n")?;
    // One key already at the edge, one nowhere, one asked twice.
    client.request(b"get m3\r\n", b"END\r\n")?;
    let gets_before = stat_u64(&origin.stats("")?, "cmd_get");
    let keys: Vec<String> = (0..KEYS).map(|i| format!("m{i}")).collect();
    let request = format!("get {} nowhere m0\r\n", keys.join(" "));
    // The cloud holds its answers: every missing key must be asked of it at once, not
    // one after the other's answer.
    proxy.set_paused(true);
    client.send(request.as_bytes())?;
    let mut observer = RawClient::connect(edge.addr())?;
    let missing = KEYS as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut in_flight = 0;
    while in_flight < missing && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        in_flight = stat_u64(&observer.stats("")?, "upstream_in_flight");
    }
    proxy.set_paused(false);
    assert_eq!(
        in_flight, missing,
        "upstream requests in flight at once: the missing keys were fetched one after another"
    );
    let reply = text(client.read_until(b"END\r\n")?);
    let mut expected: String = (0..KEYS)
        .map(|i| format!("VALUE m{i} {i} 2\r\nv{}\r\n", i % 10))
        .collect();
    expected.push_str("VALUE m0 0 2\r\nv0\r\nEND\r\n");
    assert_eq!(reply, expected);
    assert_eq!(
        stat_u64(&origin.stats("")?, "cmd_get") - gets_before,
        KEYS as u64,
        "one cloud get per missing key: {} keys and `nowhere`, not m3",
        KEYS - 1
    );
    let stats = client.stats("")?;
    assert_eq!(
        stat_u64(&stats, "get_hits"),
        1,
        "m3, filled before the multi-get"
    );
    assert_eq!(
        stat_u64(&stats, "get_misses"),
        3 + KEYS as u64,
        "warmup and m3 before; then the 11 other keys, nowhere and m0 again: each once"
    );
    Ok(())
}

/// A meta cloud whose reads take `read_delay` (the value is the one it had when the read
/// arrived) while its writes answer at once: a read can be overtaken by a write.
fn slow_read_meta_cloud(read_delay: Duration) -> anyhow::Result<SocketAddr> {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let items: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
    items
        .lock()
        .expect("items")
        .insert("k".to_owned(), b"v1".to_vec());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let items = Arc::clone(&items);
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line)? > 0 {
                    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                    line.clear();
                    let reply = match words.first().map(String::as_str) {
                        Some("mn") => b"MN\r\n".to_vec(),
                        Some("mg") => {
                            let value = items.lock().expect("items").get(&words[1]).cloned();
                            std::thread::sleep(read_delay);
                            match value {
                                Some(value) => {
                                    let mut reply =
                                        format!("VA {} f0 t-1 c1\r\n", value.len()).into_bytes();
                                    reply.extend_from_slice(&value);
                                    reply.extend_from_slice(b"\r\n");
                                    reply
                                }
                                None => b"EN\r\n".to_vec(),
                            }
                        }
                        Some("ms") => {
                            let len: usize = words[2].parse().unwrap_or(0);
                            let mut value = vec![0; len + 2];
                            reader.read_exact(&mut value)?;
                            value.truncate(len);
                            items.lock().expect("items").insert(words[1].clone(), value);
                            b"HD c2\r\n".to_vec()
                        }
                        _ => b"ERROR\r\n".to_vec(),
                    };
                    writer.write_all(&reply)?;
                }
                Ok(())
            });
        }
    });
    Ok(addr)
}

/// Two clients whose reads of two missing keys, sent at once, make an edge with
/// `--upstream-conns 2` and one upstream thread open both connections of its pool (the
/// first one busy); returns the two clients once both connections are open and idle.
fn open_both_pool_connections(edge: &ServerProcess) -> anyhow::Result<(RawClient, RawClient)> {
    let mut a = RawClient::connect(edge.addr())?;
    let mut b = RawClient::connect(edge.addr())?;
    a.send(b"get warm1\r\n")?;
    b.send(b"get warm2\r\n")?;
    a.read_until(b"END\r\n")?;
    b.read_until(b"END\r\n")?;
    assert_eq!(
        stat(&a.stats("upstreams")?, "upstream:0:connections"),
        Some("2"),
        "both connections of the pool open, idle"
    );
    Ok((a, b))
}

#[test]
fn a_read_overtaken_by_a_write_is_answered_but_not_kept_at_the_edge() -> anyhow::Result<()> {
    let cloud = slow_read_meta_cloud(Duration::from_millis(300))?;
    let edge = edge(
        cloud,
        &[
            "--upstream-writes",
            "invalidate",
            "--upstream-conns",
            "2",
            // One upstream thread, so that the warm-up keys and `k` share its pool.
            "--upstream-threads",
            "1",
            "--upstream-timeout-ms",
            "3000",
        ],
    )?;
    let (mut reader, mut writer) = open_both_pool_connections(&edge)?;
    // The read leaves first; the write overtakes it on the other connection.
    reader.send(b"get k\r\n")?;
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        text(writer.request(b"set k 0 0 2\r\nv2\r\n", b"\r\n")?),
        "STORED\r\n"
    );
    assert_eq!(
        text(reader.read_until(b"END\r\n")?),
        "VALUE k 0 2\r\nv1\r\nEND\r\n",
        "the read saw the value before the write: a fine answer to a concurrent read"
    );
    assert_eq!(
        text(reader.request(b"get k\r\n", b"END\r\n")?),
        "VALUE k 0 2\r\nv2\r\nEND\r\n",
        "but the edge did not keep it"
    );
    assert_eq!(stat_u64(&reader.stats("")?, "upstream_fills_skipped"), 1);
    Ok(())
}

/// A binary request: header, extras, key, value.
fn binary_request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&0x1234u32.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// Sends a binary request; returns (status, cas, value) of its response.
fn binary_call(client: &mut RawClient, request: &[u8]) -> anyhow::Result<(u16, u64, Vec<u8>)> {
    client.send(request)?;
    let header = client.read_exact(24)?;
    assert_eq!(header[0], 0x81, "a response");
    assert_eq!(
        &header[12..16],
        &0x1234u32.to_be_bytes(),
        "the opaque echoed"
    );
    let status = u16::from_be_bytes([header[6], header[7]]);
    let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let extras_len = usize::from(header[4]);
    let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let mut cas_bytes = [0u8; 8];
    cas_bytes.copy_from_slice(&header[16..24]);
    let body = client.read_exact(body_len)?;
    Ok((
        status,
        u64::from_be_bytes(cas_bytes),
        body[extras_len + key_len..].to_vec(),
    ))
}

#[test]
fn binary_and_meta_writes_go_to_the_cloud_with_memcached_statuses() -> anyhow::Result<()> {
    const SET: u8 = 0x01;
    const ADD: u8 = 0x02;
    const REPLACE: u8 = 0x03;
    const DELETE: u8 = 0x04;
    const INCREMENT: u8 = 0x05;
    const GET: u8 = 0x00;
    const TOUCH: u8 = 0x1c;
    let cloud = Cloud::start()?;
    let mut origin = cloud.client()?;
    let edge = edge(cloud.addr(), &[])?;
    let mut client = RawClient::connect(edge.addr())?;
    let store_extras = |flags: u32, exptime: u32| {
        let mut extras = flags.to_be_bytes().to_vec();
        extras.extend_from_slice(&exptime.to_be_bytes());
        extras
    };

    let (status, cas, _) = binary_call(
        &mut client,
        &binary_request(SET, &store_extras(3, 0), b"k", b"value", 0),
    )?;
    assert_eq!(status, 0);
    let origin_cas = gets_cas(&text(origin.request(b"gets k\r\n", b"END\r\n")?));
    assert_eq!(cas, origin_cas, "the cloud's CAS, from its meta reply");
    let (status, get_cas, value) =
        binary_call(&mut client, &binary_request(GET, &[], b"k", b"", 0))?;
    assert_eq!(
        (status, get_cas, &value[..]),
        (0, origin_cas, &b"value"[..])
    );
    // memcached's statuses for refusals, from the cloud's answers.
    let add = binary_request(ADD, &store_extras(0, 0), b"k", b"x", 0);
    assert_eq!(binary_call(&mut client, &add)?.0, 0x02, "add: key exists");
    let replace = binary_request(REPLACE, &store_extras(0, 0), b"none", b"x", 0);
    assert_eq!(
        binary_call(&mut client, &replace)?.0,
        0x01,
        "replace: not found"
    );
    let stale = binary_request(SET, &store_extras(0, 0), b"k", b"x", origin_cas + 100);
    assert_eq!(
        binary_call(&mut client, &stale)?.0,
        0x02,
        "a stale CAS: exists"
    );
    // A counter created with its initial value, then incremented, in the cloud.
    let mut incr_extras = 5u64.to_be_bytes().to_vec();
    incr_extras.extend_from_slice(&10u64.to_be_bytes());
    incr_extras.extend_from_slice(&0u32.to_be_bytes());
    let incr = binary_request(INCREMENT, &incr_extras, b"n", b"", 0);
    let (status, _, value) = binary_call(&mut client, &incr)?;
    assert_eq!((status, &value[..]), (0, &10u64.to_be_bytes()[..]));
    let (status, _, value) = binary_call(&mut client, &incr)?;
    assert_eq!((status, &value[..]), (0, &15u64.to_be_bytes()[..]));
    assert_eq!(
        text(origin.request(b"get n\r\n", b"END\r\n")?),
        "VALUE n 0 2\r\n15\r\nEND\r\n"
    );
    // The protocol is a connection's: meta on another one.
    let mut text_client = RawClient::connect(edge.addr())?;
    assert_eq!(
        text(text_client.request(b"ma n D2 v\r\n", b"\r\n17\r\n")?),
        "VA 2\r\n17\r\n",
        "meta arithmetic through the edge"
    );
    let touch = binary_request(TOUCH, &100u32.to_be_bytes(), b"k", b"", 0);
    let (status, _, _) = binary_call(&mut client, &touch)?;
    assert_eq!(status, 0);
    let ttl = ttl_of(&text(origin.request(b"mg k t\r\n", b"\r\n")?));
    assert!(
        (99..=100).contains(&ttl),
        "the touch reached the cloud: {ttl}"
    );
    let delete = binary_request(DELETE, &[], b"k", b"", 0);
    assert_eq!(binary_call(&mut client, &delete)?.0, 0);
    assert_eq!(
        binary_call(&mut client, &delete)?.0,
        0x01,
        "deleted already"
    );
    assert_eq!(text(origin.request(b"get k\r\n", b"END\r\n")?), "END\r\n");
    // A `gat` that misses at the edge touches the cloud's item too.
    origin.request(b"set g 0 0 1\r\ng\r\n", b"\r\n")?;
    assert_eq!(
        text(text_client.request(b"gat 200 g\r\n", b"END\r\n")?),
        "VALUE g 0 1\r\ng\r\nEND\r\n"
    );
    let ttl = ttl_of(&text(origin.request(b"mg g t\r\n", b"\r\n")?));
    assert!(
        (199..=200).contains(&ttl),
        "the gat reached the cloud: {ttl}"
    );
    Ok(())
}

#[test]
fn a_cloud_value_larger_than_the_edge_allows_is_a_miss_and_the_connection_goes_on(
) -> anyhow::Result<()> {
    let memcached = ServerProcess::memcached(&["-I", "4m"])?;
    let mut origin = RawClient::connect(memcached.addr())?;
    let big = vec![b'b'; 2 * 1024 * 1024];
    let mut set = b"set big 0 0 2097152\r\n".to_vec();
    set.extend_from_slice(&big);
    set.extend_from_slice(b"\r\n");
    assert_eq!(text(origin.request(&set, b"\r\n")?), "STORED\r\n");
    origin.request(b"set small 0 0 1\r\ns\r\n", b"\r\n")?;
    // One upstream thread: both keys on its one connection.
    let edge = edge(memcached.addr(), &["-I", "1m", "--upstream-threads", "1"])?;
    let mut client = RawClient::connect(edge.addr())?;
    // Pipelined: the small value after the big one still comes through.
    client.send(b"get big\r\nget small\r\n")?;
    assert_eq!(
        text(client.read_until(b"END\r\nVALUE small 0 1\r\ns\r\nEND\r\n")?),
        "END\r\nVALUE small 0 1\r\ns\r\nEND\r\n"
    );
    let detail = client.stats("upstreams")?;
    assert_eq!(stat(&detail, "upstream:0:errors"), Some("1"), "{detail:?}");
    assert_eq!(
        stat(&detail, "upstream:0:connects"),
        Some("1"),
        "the connection survived the skipped value"
    );
    Ok(())
}

#[test]
fn an_edge_refuses_itself_as_its_upstream() -> anyhow::Result<()> {
    // The server must be told its own port before it starts (to name it as its upstream):
    // a reserved one, which no other process can take meanwhile.
    let reservation = testkit::PortReservation::new()?;
    let port = reservation.port().to_string();
    let data_dir = std::env::temp_dir().join(format!("fog-self-{}-{port}", std::process::id()));
    let mut command = std::process::Command::new(testkit::fogcached_binary()?);
    command
        .args([
            "-p",
            &port,
            "-l",
            "127.0.0.1",
            "--slow-size",
            "0",
            "--data-dir",
        ])
        .arg(&data_dir)
        .args(["--upstream", &format!("127.0.0.1:{port}")]);
    let run = testkit::run_bounded(&mut command, Duration::from_secs(20))?;
    let _ = std::fs::remove_dir_all(&data_dir);
    assert!(!run.success, "it started: {}", run.output);
    assert!(
        run.output.contains("is this server itself"),
        "{}",
        run.output
    );
    Ok(())
}

#[test]
fn a_read_through_multi_get_past_the_output_mark_streams_every_value_in_order() -> anyhow::Result<()>
{
    const KEYS: usize = 6;
    const VALUE_BYTES: usize = 1_000_000;
    let cloud = Cloud::start()?;
    let mut origin = cloud.client()?;
    let value = |i: usize| vec![b'a' + i as u8; VALUE_BYTES];
    for i in 0..KEYS {
        let mut set = format!("set big{i} {i} 0 {VALUE_BYTES}\r\n").into_bytes();
        set.extend_from_slice(&value(i));
        set.extend_from_slice(b"\r\n");
        assert_eq!(text(origin.request(&set, b"\r\n")?), "STORED\r\n");
    }
    let edge = edge(cloud.addr(), &["-m", "64"])?;
    let mut client = RawClient::connect(edge.addr())?;
    // 6 MB of values, all from the cloud: past the 4 MiB output mark, so the request
    // stops there and resumes after the socket drained.
    let keys: Vec<String> = (0..KEYS).map(|i| format!("big{i}")).collect();
    client.send(format!("get {}\r\n", keys.join(" ")).as_bytes())?;
    let reply = client.read_until(b"END\r\n")?;
    let mut expected = Vec::new();
    for i in 0..KEYS {
        expected.extend_from_slice(format!("VALUE big{i} {i} {VALUE_BYTES}\r\n").as_bytes());
        expected.extend_from_slice(&value(i));
        expected.extend_from_slice(b"\r\n");
    }
    expected.extend_from_slice(b"END\r\n");
    assert!(
        reply == expected,
        "{} bytes, not the 6 values in order",
        reply.len()
    );
    let stats = client.stats("")?;
    assert_eq!(
        stat_u64(&stats, "upstream_cmd_get"),
        KEYS as u64,
        "each fetched once"
    );
    Ok(())
}

/// A meta cloud that answers `mg <key>` with the value `value-of-<key>` after the delay
/// `delays` gives the key (none for the others), one connection at a time per thread:
/// the replies of a connection come in request order, as memcached's do, so a slow
/// reply holds up the ones pipelined behind it.
fn meta_cloud_with_delays(delays: &[(&'static str, Duration)]) -> anyhow::Result<SocketAddr> {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let delays = delays.to_vec();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let delays = delays.clone();
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line)? > 0 {
                    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                    line.clear();
                    let reply = match (words.first().map(String::as_str), words.get(1)) {
                        (Some("mn"), _) => b"MN\r\n".to_vec(),
                        (Some("mg"), Some(key)) => {
                            if let Some((_, delay)) = delays.iter().find(|(k, _)| k == key) {
                                std::thread::sleep(*delay);
                            }
                            let value = format!("value-of-{key}");
                            format!("VA {} f0 t-1 c1\r\n{value}\r\n", value.len()).into_bytes()
                        }
                        _ => b"ERROR\r\n".to_vec(),
                    };
                    writer.write_all(&reply)?;
                }
                Ok(())
            });
        }
    });
    Ok(addr)
}

/// `get <key>` through the edge; the value, or `None` for a miss.
fn get_value(client: &mut RawClient, key: &str) -> anyhow::Result<Option<String>> {
    let reply = text(client.request(format!("get {key}\r\n").as_bytes(), b"END\r\n")?);
    Ok(reply
        .lines()
        .nth(1)
        .filter(|_| reply != "END\r\n")
        .map(str::to_owned))
}

#[test]
fn one_late_reply_costs_only_its_own_request() -> anyhow::Result<()> {
    // One connection, pipelined: `slow` is answered after 2.6 s, past the 2 s timeout;
    // the requests behind it wait for it and are answered (within their own 2 s).
    let cloud = meta_cloud_with_delays(&[("slow", Duration::from_millis(2600))])?;
    let edge = edge(
        cloud,
        &[
            "--upstream-conns",
            "1",
            "--upstream-threads",
            "1",
            "--upstream-timeout-ms",
            "2000",
        ],
    )?;
    let mut first = RawClient::connect(edge.addr())?;
    assert_eq!(
        get_value(&mut first, "warm")?.as_deref(),
        Some("value-of-warm")
    );
    let started = Instant::now();
    first.send(b"get slow\r\n")?;
    std::thread::sleep(Duration::from_millis(1000));
    // Pipelined behind `slow` on the one connection.
    let mut behind = (0..4)
        .map(|_| RawClient::connect(edge.addr()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (i, client) in behind.iter_mut().enumerate() {
        client.send(format!("get behind{i}\r\n").as_bytes())?;
    }
    assert_eq!(
        text(first.read_until(b"END\r\n")?),
        "END\r\n",
        "the late read is a miss"
    );
    let timed_out_after = started.elapsed();
    // After the timeout: the connection waits for the late reply, so this one waits in
    // the edge for it rather than behind it, and is answered too.
    let mut after = RawClient::connect(edge.addr())?;
    after.send(b"get after\r\n")?;
    for (i, client) in behind.iter_mut().enumerate() {
        let value = format!("value-of-behind{i}");
        let expected = format!("VALUE behind{i} 0 {}\r\n{value}\r\nEND\r\n", value.len());
        assert_eq!(
            text(client.read_until(b"END\r\n")?),
            expected,
            "a request pipelined behind the late one (timed out after {timed_out_after:?})"
        );
    }
    assert_eq!(
        text(after.read_until(b"END\r\n")?),
        "VALUE after 0 14\r\nvalue-of-after\r\nEND\r\n"
    );
    let stats = first.stats("")?;
    assert_eq!(stat_u64(&stats, "upstream_timeouts"), 1, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_errors"), 0, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_late_replies"), 1, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_stuck_closes"), 0, "{stats:?}");
    let detail = first.stats("upstreams")?;
    assert_eq!(
        stat(&detail, "upstream:0:connects"),
        Some("1"),
        "the connection was kept: {detail:?}"
    );
    // The late value was dropped, not kept: the next read asks again.
    assert_eq!(get_value(&mut first, "slow")?, None, "timed out again");
    Ok(())
}

#[test]
fn a_connection_whose_reply_never_comes_is_closed_and_replaced() -> anyhow::Result<()> {
    let cloud = meta_cloud_with_delays(&[("hang", Duration::from_secs(60))])?;
    let edge = edge(
        cloud,
        &[
            "--upstream-conns",
            "1",
            "--upstream-threads",
            "1",
            "--upstream-timeout-ms",
            "1000",
            "--upstream-breaker-failures",
            "100",
        ],
    )?;
    let mut client = RawClient::connect(edge.addr())?;
    assert_eq!(
        get_value(&mut client, "warm")?.as_deref(),
        Some("value-of-warm")
    );
    assert_eq!(get_value(&mut client, "hang")?, None, "timed out");
    // Submitted half a timeout after the abandonment: it waits in the edge until the
    // connection counts as stuck (no reply for a whole timeout after the abandonment),
    // then goes out on a new one.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        get_value(&mut client, "next")?.as_deref(),
        Some("value-of-next")
    );
    let stats = client.stats("")?;
    assert_eq!(stat_u64(&stats, "upstream_stuck_closes"), 1, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_timeouts"), 1, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_errors"), 0, "{stats:?}");
    assert_eq!(
        stat(&client.stats("upstreams")?, "upstream:0:connects"),
        Some("2")
    );
    Ok(())
}

#[test]
fn a_healthy_cloud_under_concurrent_load_gives_no_errors_and_a_pause_only_timeouts(
) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const CLIENTS: usize = 16;
    const KEYS_PER_CLIENT: usize = 300;
    /// More than a client reads in the second phase.
    const PAUSE_KEYS_PER_CLIENT: usize = 2000;
    const TIMEOUT_MS: u64 = 1000;
    let cloud = Cloud::start()?;
    let timeout = TIMEOUT_MS.to_string();
    // The breaker is kept out: the pause below is to look like a hiccup, not a death.
    let edge = edge(
        cloud.addr(),
        &[
            "--upstream-timeout-ms",
            &timeout,
            "--upstream-breaker-failures",
            "1000",
            "--upstream-threads",
            "2",
        ],
    )?;
    let key = |client: usize, i: usize| format!("c{client}k{i}");
    let pause_key = |client: usize, i: usize| format!("p{client}k{i}");
    {
        let mut origin = cloud.client()?;
        let mut batch = Vec::new();
        for client in 0..CLIENTS {
            let keys = (0..KEYS_PER_CLIENT).map(|i| key(client, i));
            for key in keys.chain((0..PAUSE_KEYS_PER_CLIENT).map(|i| pause_key(client, i))) {
                let set = format!("set {key} 0 0 {}\r\n{key}\r\n", key.len());
                batch.extend_from_slice(set.as_bytes());
            }
        }
        batch.extend_from_slice(b"mn\r\n");
        origin.request(&batch, b"MN\r\n")?;
    }
    // 1. Healthy, 1 ms away: every read of a key the edge lacks is filled, none fails.
    let readers: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let addr = edge.addr();
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut connection = RawClient::connect(addr)?;
                for i in 0..KEYS_PER_CLIENT {
                    let key = key(client, i);
                    anyhow::ensure!(
                        get_value(&mut connection, &key)?.as_deref() == Some(key.as_str()),
                        "{key} not filled"
                    );
                }
                Ok(())
            })
        })
        .collect();
    for reader in readers {
        reader.join().expect("a reader panicked")?;
    }
    let mut client = RawClient::connect(edge.addr())?;
    let stats = client.stats("")?;
    assert_eq!(
        stat_u64(&stats, "upstream_get_hits"),
        (CLIENTS * KEYS_PER_CLIENT) as u64
    );
    assert_eq!(stat_u64(&stats, "upstream_timeouts"), 0, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_errors"), 0, "{stats:?}");

    // 2. The same load while the cloud pauses for 1.5 timeouts: what was in flight at
    // the start of the pause times out (a miss each); nothing fails otherwise, and
    // everything asked later is answered once the cloud answers again.
    let stop = Arc::new(AtomicBool::new(false));
    let misses = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let addr = edge.addr();
            let stop = Arc::clone(&stop);
            let misses = Arc::clone(&misses);
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut connection = RawClient::connect(addr)?;
                // Keys the edge lacks, each once: every read goes to the cloud, none
                // joins another's.
                for i in 0..PAUSE_KEYS_PER_CLIENT {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = pause_key(client, i);
                    match get_value(&mut connection, &key)? {
                        Some(value) => anyhow::ensure!(value == key, "{key}: {value}"),
                        None => {
                            misses.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    cloud.proxy.set_paused(true);
    std::thread::sleep(Duration::from_millis(TIMEOUT_MS * 3 / 2));
    cloud.proxy.set_paused(false);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().expect("a reader panicked")?;
    }
    let stats = client.stats("")?;
    let timeouts = stat_u64(&stats, "upstream_timeouts");
    assert!(timeouts > 0, "the pause timed nothing out: {stats:?}");
    assert_eq!(
        misses.load(Ordering::SeqCst),
        timeouts,
        "every miss the clients saw is one request that timed out"
    );
    assert_eq!(stat_u64(&stats, "upstream_errors"), 0, "{stats:?}");
    assert_eq!(stat_u64(&stats, "upstream_stuck_closes"), 0, "{stats:?}");
    assert_eq!(
        stat_u64(&stats, "upstream_late_replies"),
        timeouts,
        "each timed-out request's reply came late and was dropped"
    );
    Ok(())
}

#[test]
fn prepend_and_replace_go_to_the_cloud_and_the_edge_keeps_no_stale_copy_in_both_modes(
) -> anyhow::Result<()> {
    for mode in ["through", "invalidate"] {
        let cloud = Cloud::start()?;
        let edge = edge(cloud.addr(), &["--upstream-writes", mode])?;
        let mut client = RawClient::connect(edge.addr())?;
        let mut origin = cloud.client()?;
        assert_eq!(
            text(client.request(b"set k 5 0 2\r\nv1\r\n", b"\r\n")?),
            "STORED\r\n"
        );
        assert_eq!(
            text(client.request(b"get k\r\n", b"END\r\n")?),
            "VALUE k 5 2\r\nv1\r\nEND\r\n"
        );
        // replace: the cloud's value and flags; with `through` the edge keeps the new
        // value (served without asking the cloud), with `invalidate` it fetches it.
        assert_eq!(
            text(client.request(b"replace k 6 0 2\r\nv2\r\n", b"\r\n")?),
            "STORED\r\n",
            "{mode}"
        );
        assert_eq!(
            text(origin.request(b"get k\r\n", b"END\r\n")?),
            "VALUE k 6 2\r\nv2\r\nEND\r\n",
            "{mode}: the cloud has the replaced value"
        );
        let gets = cloud.stat("cmd_get");
        assert_eq!(
            text(client.request(b"get k\r\n", b"END\r\n")?),
            "VALUE k 6 2\r\nv2\r\nEND\r\n",
            "{mode}"
        );
        let fetched = cloud.stat("cmd_get") - gets;
        assert_eq!(
            fetched,
            u64::from(mode == "invalidate"),
            "{mode}: a replaced value is kept at the edge only in through mode"
        );
        // prepend: the edge cannot know the result; the next read fetches it (both
        // modes), never the edge's old copy.
        assert_eq!(
            text(client.request(b"prepend k 0 0 3\r\npre\r\n", b"\r\n")?),
            "STORED\r\n",
            "{mode}"
        );
        let gets = cloud.stat("cmd_get");
        assert_eq!(
            text(client.request(b"get k\r\n", b"END\r\n")?),
            "VALUE k 6 5\r\nprev2\r\nEND\r\n",
            "{mode}: the prepended value, not the edge's old copy"
        );
        assert_eq!(cloud.stat("cmd_get") - gets, 1, "{mode}: fetched");
        // The cloud's refusals reach the client and leave nothing at the edge.
        assert_eq!(
            text(client.request(b"replace none 0 0 1\r\nx\r\n", b"\r\n")?),
            "NOT_STORED\r\n",
            "{mode}"
        );
        assert_eq!(
            text(client.request(b"prepend none 0 0 1\r\nx\r\n", b"\r\n")?),
            "NOT_STORED\r\n",
            "{mode}"
        );
        assert_eq!(
            text(client.request(b"get none\r\n", b"END\r\n")?),
            "END\r\n",
            "{mode}"
        );
        // noreply: nothing comes back; the write still reached the cloud in order.
        client.send(b"prepend k 0 0 1 noreply\r\n>\r\n")?;
        client.send(b"replace k 7 0 1 noreply\r\nr\r\n")?;
        assert_eq!(
            text(client.request(b"get k\r\n", b"END\r\n")?),
            "VALUE k 7 1\r\nr\r\nEND\r\n",
            "{mode}"
        );
        assert_eq!(
            text(origin.request(b"get k\r\n", b"END\r\n")?),
            "VALUE k 7 1\r\nr\r\nEND\r\n",
            "{mode}"
        );
    }
    Ok(())
}

#[test]
fn writes_while_the_cloud_is_down_get_errors_and_leave_no_stale_edge_copy() -> anyhow::Result<()> {
    let cloud = Cloud::start()?;
    let edge = edge(
        cloud.addr(),
        &[
            "--upstream-breaker-failures",
            "3",
            "--upstream-retry-ms",
            "200",
        ],
    )?;
    let mut client = RawClient::connect(edge.addr())?;
    for key in ["s", "a", "p", "d", "n", "m", "b"] {
        let value = if key == "n" { "5" } else { "old" };
        let request = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(
            text(client.request(request.as_bytes(), b"\r\n")?),
            "STORED\r\n"
        );
    }
    // Write-through left an edge copy of each.
    assert_eq!(
        text(client.request(b"get s\r\n", b"END\r\n")?),
        "VALUE s 0 3\r\nold\r\nEND\r\n"
    );
    let Cloud { memcached, proxy } = cloud;
    drop(memcached);
    proxy.cut_connections();
    // Every write fails with memcached's SERVER_ERROR (binary: temporary failure).
    for request in [
        &b"set s 0 0 3\r\nnew\r\n"[..],
        b"append a 0 0 1\r\n+\r\n",
        b"prepend p 0 0 1\r\n+\r\n",
        b"delete d\r\n",
        b"incr n 1\r\n",
        b"ms m 3\r\nnew\r\n",
    ] {
        let reply = text(client.request(request, b"\r\n")?);
        assert!(
            reply.starts_with("SERVER_ERROR upstream"),
            "{}: {reply}",
            testkit::escape(request)
        );
    }
    // (A connection speaks one protocol, as with memcached.)
    let mut binary = RawClient::connect(edge.addr())?;
    let set = binary_request(0x01, &[0; 8], b"b", b"new", 0);
    let (status, _, _) = binary_call(&mut binary, &set)?;
    assert_eq!(status, 0x86, "binary set: temporary failure");
    // None of the edge copies is served any more: the write may have happened, so the
    // edge does not answer with the value from before it (the cloud is down: misses).
    for key in ["s", "a", "p", "d", "n", "m", "b"] {
        assert_eq!(
            text(client.request(format!("get {key}\r\n").as_bytes(), b"END\r\n")?),
            "END\r\n",
            "{key}: the edge served its copy from before a failed write"
        );
    }
    // Back (empty, then written directly): the edge reads the cloud's values.
    let memcached = ServerProcess::memcached(&[])?;
    RawClient::connect(memcached.addr())?.request(b"set s 0 0 5\r\nfresh\r\n", b"\r\n")?;
    proxy.set_target(memcached.addr());
    read_until_the_cloud_is_back(&mut client, "s", "VALUE s 0 5\r\nfresh\r\nEND\r\n")?;
    assert_eq!(
        text(client.request(b"set s 0 0 3\r\nnew\r\n", b"\r\n")?),
        "STORED\r\n",
        "writes go through again"
    );
    Ok(())
}

/// What [`timed_write_cloud`] does with an `ms` of a given value.
#[derive(Clone, Copy, Debug)]
enum WriteTiming {
    /// Applied at once; its reply leaves after the delay (held up on the way back), and
    /// the replies after it on its connection wait for it, as memcached's would.
    ReplyAfter(Duration),
    /// Applied after the delay, then the connection dies without a reply: the edge
    /// cannot know whether it happened.
    ApplyAfterThenDie(Duration),
}

/// A meta cloud with one item table (`mg`, `ms` in set mode, `md`), a thread per
/// connection, replies in request order; `mg warm*` takes 200 ms (so that two
/// concurrent reads open both connections of an edge's pool) and an `ms` of a value
/// listed in `timings` is answered as it says. Each write gets the next CAS.
/// Returns its address and the number of `ms`/`md` it has received.
fn timed_write_cloud(
    timings: &[(&'static str, WriteTiming)],
) -> anyhow::Result<(SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU64>)> {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    /// Key → (value, CAS); the last CAS given.
    type Items = (HashMap<String, (Vec<u8>, u64)>, u64);
    let items: Arc<Mutex<Items>> = Arc::default();
    let received = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&received);
    let timings = timings.to_vec();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let items = Arc::clone(&items);
            let timings = timings.clone();
            let received = Arc::clone(&counter);
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line)? > 0 {
                    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                    line.clear();
                    if matches!(words.first().map(String::as_str), Some("ms" | "md")) {
                        received.fetch_add(1, Ordering::SeqCst);
                    }
                    let reply = match (words.first().map(String::as_str), words.get(1)) {
                        (Some("mn"), _) => b"MN\r\n".to_vec(),
                        (Some("mg"), Some(key)) => {
                            if key.starts_with("warm") {
                                std::thread::sleep(Duration::from_millis(200));
                            }
                            match items.lock().expect("items").0.get(key) {
                                Some((value, cas)) => {
                                    let mut reply = format!("VA {} f0 t-1 c{cas}\r\n", value.len())
                                        .into_bytes();
                                    reply.extend_from_slice(value);
                                    reply.extend_from_slice(b"\r\n");
                                    reply
                                }
                                None => b"EN\r\n".to_vec(),
                            }
                        }
                        (Some("ms"), Some(key)) => {
                            let len: usize = words.get(2).and_then(|l| l.parse().ok()).unwrap_or(0);
                            let mut value = vec![0; len + 2];
                            reader.read_exact(&mut value)?;
                            value.truncate(len);
                            let timing = timings
                                .iter()
                                .find(|(v, _)| v.as_bytes() == value)
                                .map(|(_, timing)| *timing);
                            let apply = |value: Vec<u8>| {
                                let mut items = items.lock().expect("items");
                                items.1 += 1;
                                let cas = items.1;
                                items.0.insert(key.clone(), (value, cas));
                                cas
                            };
                            match timing {
                                Some(WriteTiming::ApplyAfterThenDie(delay)) => {
                                    std::thread::sleep(delay);
                                    apply(value);
                                    return Ok(());
                                }
                                Some(WriteTiming::ReplyAfter(delay)) => {
                                    let cas = apply(value);
                                    std::thread::sleep(delay);
                                    format!("HD c{cas}\r\n").into_bytes()
                                }
                                None => format!("HD c{}\r\n", apply(value)).into_bytes(),
                            }
                        }
                        (Some("md"), Some(key)) => {
                            match items.lock().expect("items").0.remove(key) {
                                Some(_) => b"HD\r\n".to_vec(),
                                None => b"NF\r\n".to_vec(),
                            }
                        }
                        _ => b"ERROR\r\n".to_vec(),
                    };
                    writer.write_all(&reply)?;
                }
                Ok(())
            });
        }
    });
    Ok((addr, received))
}

/// A write in one of the three protocols, sent now and answered later.
enum Write {
    /// Text or meta: a one-line reply.
    Line(&'static [u8]),
    Binary(Vec<u8>),
}

impl Write {
    fn send(&self, client: &mut RawClient) -> anyhow::Result<()> {
        match self {
            Write::Line(request) => client.send(request),
            Write::Binary(request) => client.send(request),
        }
    }

    /// The reply: its line, or `binary status 0x..`.
    fn reply(&self, client: &mut RawClient) -> anyhow::Result<String> {
        match self {
            Write::Line(_) => Ok(text(client.read_until(b"\r\n")?)),
            Write::Binary(_) => {
                let header = client.read_exact(24)?;
                let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
                client.read_exact(body_len as usize)?;
                Ok(format!(
                    "binary status {:#x}",
                    u16::from_be_bytes([header[6], header[7]])
                ))
            }
        }
    }
}

/// What [`race_two_writes`] saw: the two writes' replies, the value the edge serves for
/// `k` and whether it asked the cloud for it, and the cloud's value.
struct RaceOutcome {
    first_reply: String,
    second_reply: String,
    at_edge: Option<String>,
    fetched: bool,
    in_cloud: Option<String>,
}

/// Two writes of key `k` from two clients, the second sent once the cloud has received
/// the first, through an edge with a pool of two connections in one upstream thread to
/// a [`timed_write_cloud`]. Returns the writes' replies, then the value the edge serves
/// for `k` (and whether it asked the cloud for it) and the cloud's.
fn race_two_writes(
    timings: &[(&'static str, WriteTiming)],
    first: &Write,
    second: &Write,
) -> anyhow::Result<RaceOutcome> {
    let (cloud, received) = timed_write_cloud(timings)?;
    let edge = edge(
        cloud,
        &[
            "--upstream-conns",
            "2",
            "--upstream-threads",
            "1",
            "--upstream-timeout-ms",
            "3000",
            "--upstream-breaker-failures",
            "100",
        ],
    )?;
    let (mut a, _b) = open_both_pool_connections(&edge)?;
    // New connections: a connection speaks one protocol.
    let mut first_client = RawClient::connect(edge.addr())?;
    let mut second_client = RawClient::connect(edge.addr())?;
    first.send(&mut first_client)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while received.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first write never reached the cloud"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    second.send(&mut second_client)?;
    let first_reply = first.reply(&mut first_client)?;
    let second_reply = second.reply(&mut second_client)?;
    let asked = stat_u64(&a.stats("")?, "upstream_cmd_get");
    let at_edge = get_value(&mut a, "k")?;
    let fetched = stat_u64(&a.stats("")?, "upstream_cmd_get") > asked;
    let mut direct = RawClient::connect(cloud)?;
    let reply = text(direct.request(b"mg k v\r\n", b"\r\n")?);
    let in_cloud = if reply == "EN\r\n" {
        None
    } else {
        Some(text(direct.read_until(b"\r\n")?).trim_end().to_owned())
    };
    Ok(RaceOutcome {
        first_reply,
        second_reply,
        at_edge,
        fetched,
        in_cloud,
    })
}

#[test]
fn two_writes_of_one_key_whose_replies_cross_leave_the_edge_with_the_clouds_value(
) -> anyhow::Result<()> {
    let store_extras = [0u8; 8];
    // The first write's reply is held up 500 ms after the cloud applied it; the second
    // is applied after it and answered at once. The edge must end with the second.
    let RaceOutcome {
        first_reply: first,
        second_reply: second,
        at_edge,
        fetched,
        in_cloud,
    } = race_two_writes(
        &[("v1", WriteTiming::ReplyAfter(Duration::from_millis(500)))],
        &Write::Line(b"set k 0 0 2\r\nv1\r\n"),
        &Write::Line(b"ms k 2 T0\r\nv2\r\n"),
    )?;
    assert_eq!((&first[..], &second[..]), ("STORED\r\n", "HD\r\n"));
    assert_eq!(
        in_cloud.as_deref(),
        Some("v2"),
        "the cloud applied v1, then v2"
    );
    assert_eq!(
        at_edge, in_cloud,
        "set then set: the edge serves an older value"
    );
    assert!(!fetched, "write-through: the edge kept the written value");

    // A set held up the same way, then a delete: nothing is left anywhere.
    let RaceOutcome {
        first_reply: first,
        second_reply: second,
        at_edge,
        in_cloud,
        ..
    } = race_two_writes(
        &[("v1", WriteTiming::ReplyAfter(Duration::from_millis(500)))],
        &Write::Binary(binary_request(0x01, &store_extras, b"k", b"v1", 0)),
        &Write::Line(b"md k\r\n"),
    )?;
    assert_eq!((&first[..], &second[..]), ("binary status 0x0", "HD\r\n"));
    assert_eq!(in_cloud, None, "the cloud applied the set, then the delete");
    assert_eq!(
        at_edge, in_cloud,
        "set then delete: the edge resurrects the set"
    );

    // The first write's connection dies once the cloud applied it, 300 ms after it came
    // (the edge cannot know it happened); the second, sent meanwhile, is applied at once
    // if it goes out on the other connection, its reply coming after the loss. The edge
    // may keep no copy or the cloud's, never a value the cloud overwrote.
    let RaceOutcome {
        first_reply: first,
        second_reply: second,
        at_edge,
        in_cloud,
        ..
    } = race_two_writes(
        &[
            (
                "v1",
                WriteTiming::ApplyAfterThenDie(Duration::from_millis(300)),
            ),
            ("v2", WriteTiming::ReplyAfter(Duration::from_millis(600))),
        ],
        &Write::Line(b"set k 0 0 2\r\nv1\r\n"),
        &Write::Line(b"set k 0 0 2\r\nv2\r\n"),
    )?;
    assert!(
        first.starts_with("SERVER_ERROR upstream"),
        "the write on the dead connection failed: {first}"
    );
    assert_eq!(
        at_edge, in_cloud,
        "a lost write, then a late success ({second}): the edge serves the success"
    );
    Ok(())
}
