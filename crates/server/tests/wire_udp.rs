//! UDP (`-U`) side by side with Debian's memcached 1.6.18: the same datagrams go to both
//! servers and every reply datagram is compared, header included (request id, sequence
//! number, datagram count, reserved), so that the framing, the splitting of replies over
//! datagrams of at most 1400 bytes and the bounds on what is answered cannot drift.
//!
//! The client is written from protocol.txt ("UDP protocol"): an 8-byte header of four
//! big-endian 16-bit fields before the text protocol. Both servers run one worker thread
//! (`-t 1`), which serves datagrams in the order they arrive, so after each request the
//! client sends a sentinel (`mn` under its own request id): every datagram before the
//! sentinel's `MN` belongs to the request, and a dropped request is one with none. The
//! replies stay small enough (a few dozen datagrams) for the client's socket buffer.
//! Both servers are started with `-U -1` (a port the kernel picks, as memcached's test
//! harness asks for one) and report it in their `MEMCACHED_PORT_FILENAME` file.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use testkit::{escape, stat, RawClient, ServerProcess};

/// How long a reply datagram may take before the test fails (not a timed assertion: a
/// bound on a wait that should end at once).
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The sentinel's request id; requests use ids below it.
const SENTINEL_ID: u16 = 0xfff0;

/// One reply datagram: its four header fields and its data.
#[derive(Clone, PartialEq, Eq)]
struct Datagram {
    request_id: u16,
    sequence: u16,
    total: u16,
    reserved: u16,
    data: Vec<u8>,
}

impl std::fmt::Debug for Datagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = if self.data.len() > 80 {
            format!(
                "{}... ({} bytes)",
                escape(&self.data[..80]),
                self.data.len()
            )
        } else {
            escape(&self.data)
        };
        write!(
            f,
            "[id {:#06x} seq {} of {} res {}] {shown}",
            self.request_id, self.sequence, self.total, self.reserved
        )
    }
}

/// `payload` behind a frame header of `request_id`, sequence `sequence` of `total`.
fn frame(request_id: u16, sequence: u16, total: u16, payload: &[u8]) -> Vec<u8> {
    let mut datagram = Vec::with_capacity(8 + payload.len());
    for field in [request_id, sequence, total, 0] {
        datagram.extend_from_slice(&field.to_be_bytes());
    }
    datagram.extend_from_slice(payload);
    datagram
}

/// A UDP client of one server.
struct UdpClient {
    socket: UdpSocket,
    server: SocketAddr,
}

impl UdpClient {
    fn new(server: SocketAddr) -> anyhow::Result<UdpClient> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        socket.set_read_timeout(Some(RECEIVE_TIMEOUT))?;
        Ok(UdpClient { socket, server })
    }

    fn send(&self, datagram: &[u8]) -> anyhow::Result<()> {
        self.socket.send_to(datagram, self.server)?;
        Ok(())
    }

    /// Sends `datagrams`, then the sentinel, and returns every datagram received before
    /// the sentinel's reply.
    fn exchange(&self, datagrams: &[Vec<u8>]) -> anyhow::Result<Vec<Datagram>> {
        for datagram in datagrams {
            self.send(datagram)?;
        }
        self.send(&frame(SENTINEL_ID, 0, 1, b"mn\r\n"))?;
        let mut received = Vec::new();
        let mut buffer = vec![0u8; 65536];
        loop {
            let (len, from) = self.socket.recv_from(&mut buffer).map_err(|e| {
                anyhow::anyhow!("no reply from {}: {e}; got {received:?}", self.server)
            })?;
            anyhow::ensure!(from == self.server, "a datagram from {from}");
            anyhow::ensure!(len >= 8, "a datagram of {len} bytes");
            let field = |at: usize| u16::from_be_bytes([buffer[at], buffer[at + 1]]);
            let datagram = Datagram {
                request_id: field(0),
                sequence: field(2),
                total: field(4),
                reserved: field(6),
                data: buffer[8..len].to_vec(),
            };
            if datagram.request_id == SENTINEL_ID && datagram.data == b"MN\r\n" {
                return Ok(received);
            }
            received.push(datagram);
        }
    }

    /// The next `count` datagrams, whatever they answer (for clients that cannot use the
    /// sentinel: several workers serve datagrams in any order).
    fn receive(&self, count: usize) -> anyhow::Result<Vec<Datagram>> {
        let mut received = Vec::new();
        let mut buffer = vec![0u8; 65536];
        while received.len() < count {
            let (len, _) = self
                .socket
                .recv_from(&mut buffer)
                .map_err(|e| anyhow::anyhow!("no reply: {e}; got {received:?}"))?;
            anyhow::ensure!(len >= 8, "a datagram of {len} bytes");
            let field = |at: usize| u16::from_be_bytes([buffer[at], buffer[at + 1]]);
            received.push(Datagram {
                request_id: field(0),
                sequence: field(2),
                total: field(4),
                reserved: field(6),
                data: buffer[8..len].to_vec(),
            });
        }
        Ok(received)
    }

    /// One request datagram (id `request_id`, sequence 0 of 1) and its reply datagrams.
    fn request(&self, request_id: u16, payload: &[u8]) -> anyhow::Result<Vec<Datagram>> {
        self.exchange(&[frame(request_id, 0, 1, payload)])
    }
}

/// A server started with `-U -1`, its UDP port read from its port file (the launcher's).
struct UdpServer {
    name: &'static str,
    server: ServerProcess,
    client: UdpClient,
}

impl UdpServer {
    fn start(name: &'static str, args: &[&str]) -> anyhow::Result<UdpServer> {
        let mut all = vec!["-U", "-1"];
        all.extend_from_slice(args);
        let server = match name {
            "memcached" => ServerProcess::memcached(&all)?,
            _ => ServerProcess::fogcached(&all)?,
        };
        let port = server
            .udp_ports()
            .first()
            .copied()
            .ok_or_else(|| anyhow::anyhow!("{name}'s port file names no UDP port"))?;
        let client = UdpClient::new(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
        Ok(UdpServer {
            name,
            server,
            client,
        })
    }
}

/// memcached and fogcached (`fogcached_args` added to its command line), one worker
/// thread each.
fn pair(fogcached_args: &[&str]) -> anyhow::Result<[UdpServer; 2]> {
    let memcached = UdpServer::start("memcached", &["-t", "1"])?;
    let mut args = vec!["-t", "1", "--slow-size", "0"];
    args.extend_from_slice(fogcached_args);
    let fogcached = UdpServer::start("fogcached", &args)?;
    Ok([memcached, fogcached])
}

/// Sends `datagrams` to both servers; fails unless their replies are the same datagrams.
fn same(
    servers: &[UdpServer; 2],
    what: &str,
    datagrams: &[Vec<u8>],
) -> anyhow::Result<Vec<Datagram>> {
    let memcached = servers[0].client.exchange(datagrams)?;
    let fogcached = servers[1].client.exchange(datagrams)?;
    anyhow::ensure!(
        memcached == fogcached,
        "{what}: the reply datagrams differ\n  memcached: {memcached:#?}\n  fogcached: {fogcached:#?}"
    );
    Ok(fogcached)
}

/// A value of `bytes` bytes that shows where a datagram boundary cut it.
fn value(bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| b'a' + (i % 26) as u8).collect()
}

fn set(key: &str, value: &[u8]) -> Vec<u8> {
    testkit::set_request(key, value)
}

/// Every reply datagram of a request carries its id and at most 1400 bytes, and the
/// datagrams of each response object are numbered 0..count.
fn check_framing(request_id: u16, datagrams: &[Datagram]) {
    let mut expected_sequence = 0u16;
    for datagram in datagrams {
        assert_eq!(datagram.request_id, request_id, "{datagram:?}");
        assert_eq!(datagram.reserved, 0, "{datagram:?}");
        assert!(datagram.data.len() + 8 <= 1400, "{datagram:?}");
        if datagram.total == 0 {
            assert!(
                datagram.data.is_empty() && datagram.sequence == 0,
                "{datagram:?}"
            );
            continue;
        }
        assert_eq!(datagram.sequence, expected_sequence, "{datagrams:?}");
        expected_sequence += 1;
        if expected_sequence == datagram.total {
            expected_sequence = 0;
        }
    }
    assert_eq!(expected_sequence, 0, "an object cut short: {datagrams:?}");
}

/// The requests of protocol.txt's UDP section and their framing: a get, a set, a
/// multi-get whose reply spans several datagrams (sequence numbers and counts), misses
/// among hits (memcached sends one response object per key), `noreply`, meta commands,
/// the `-R` flush, `quit`. Each request has its own id, which every reply echoes.
fn gets_sets_and_multi_gets_are_memcached_s_datagrams(
    fogcached_args: &[&str],
) -> anyhow::Result<()> {
    let servers = pair(fogcached_args)?;
    let big = value(3000);
    let huge = value(20_000);
    let mut set_big = set("big", &big);
    set_big.extend_from_slice(&set("huge", &huge));
    let twenty_one_sets: Vec<u8> = (0..21).flat_map(|i| set(&format!("s{i}"), b"x")).collect();
    let mut flush_then_get = twenty_one_sets.clone();
    flush_then_get.extend_from_slice(b"get nokey1 nokey2\r\n");
    let script: Vec<(&str, Vec<u8>)> = vec![
        ("get miss", b"get a\r\n".to_vec()),
        ("set", set("a", b"x")),
        ("get hit", b"get a\r\n".to_vec()),
        ("multi-get, misses among hits", b"get zz a b a\r\n".to_vec()),
        ("set values of 3 000 and 20 000 bytes", set_big),
        ("get of a value over 3 datagrams", b"get big\r\n".to_vec()),
        (
            "multi-get over many datagrams",
            b"get nokey1 huge nokey2 big a nokey3\r\n".to_vec(),
        ),
        ("noreply, then a get", b"set q 0 0 1 noreply\r\nx\r\nget no1 q\r\n".to_vec()),
        (
            "several commands in one datagram",
            b"incr nokey 1\r\nset n 0 0 1\r\n5\r\nincr n 2\r\ndecr n 1\r\ntouch n 100\r\ndelete q\r\nget n q\r\n"
                .to_vec(),
        ),
        (
            "meta commands",
            b"ms m 2 T0\r\nhi\r\nmg m v f\r\nmg nokey v q\r\nmd m q\r\nmg m v\r\nma nokey\r\nmn\r\nmg big s v\r\n"
                .to_vec(),
        ),
        ("the -R flush: 21 sets, then a multi-get of misses", flush_then_get),
        ("20 sets, then a multi-get of misses", {
            let mut request: Vec<u8> = (0..20).flat_map(|i| set(&format!("t{i}"), b"x")).collect();
            request.extend_from_slice(b"get nokey1 nokey2\r\n");
            request
        }),
        ("quit ends the datagram", b"get a\r\nquit\r\nget a\r\n".to_vec()),
        ("an unknown command, then a get", b"bogus\r\nget a\r\n".to_vec()),
        ("a bare newline", b"\n".to_vec()),
        ("flush_all with a delay", b"flush_all 1000\r\nverbosity 0\r\n".to_vec()),
    ];
    for (index, (what, payload)) in script.iter().enumerate() {
        let request_id = 0x1200 + index as u16;
        let replies = same(&servers, what, &[frame(request_id, 0, 1, payload)])?;
        check_framing(request_id, &replies);
    }

    // The reply to `get big` spelled out: three datagrams, numbered 0 to 2 of 3, full
    // ones of 1400 bytes, whose data make the reply.
    let replies = servers[1].client.request(0x0abc, b"get big\r\n")?;
    let mut expected = b"VALUE big 0 3000\r\n".to_vec();
    expected.extend_from_slice(&big);
    expected.extend_from_slice(b"\r\nEND\r\n");
    let headers: Vec<(u16, u16, u16, usize)> = replies
        .iter()
        .map(|d| (d.request_id, d.sequence, d.total, d.data.len() + 8))
        .collect();
    assert_eq!(
        headers,
        [
            (0x0abc, 0, 3, 1400),
            (0x0abc, 1, 3, 1400),
            (0x0abc, 2, 3, expected.len() - 2 * 1392 + 8)
        ]
    );
    let joined: Vec<u8> = replies.iter().flat_map(|d| d.data.clone()).collect();
    assert_eq!(joined, expected);
    Ok(())
}

#[test]
fn gets_sets_and_multi_gets_are_memcached_s_datagrams_under_io_uring() -> anyhow::Result<()> {
    gets_sets_and_multi_gets_are_memcached_s_datagrams(&[])
}

#[test]
fn gets_sets_and_multi_gets_are_memcached_s_datagrams_under_epoll() -> anyhow::Result<()> {
    gets_sets_and_multi_gets_are_memcached_s_datagrams(&["--io-engine", "epoll"])
}

/// A datagram memcached does not read as a request gets no reply from either server:
/// 8 bytes or fewer, a datagram count other than 1, and so a request sent in two
/// datagrams (neither half is stored). The sequence number and the reserved field are
/// not looked at.
#[test]
fn malformed_and_two_datagram_requests_are_dropped_as_memcached_drops_them() -> anyhow::Result<()> {
    let servers = pair(&[])?;
    let dropped: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("4 bytes", vec![b"vers".to_vec()]),
        ("a header alone", vec![frame(1, 0, 1, b"")]),
        ("a count of 0", vec![frame(2, 0, 0, b"get a\r\n")]),
        (
            "a set in two datagrams, 0 and 1 of 2",
            vec![
                frame(3, 0, 2, b"set split 0 0 5\r\nab"),
                frame(3, 1, 2, b"cde\r\n"),
            ],
        ),
        (
            "a count of 2 on a whole request",
            vec![frame(4, 0, 2, b"get a\r\n")],
        ),
    ];
    for (what, datagrams) in &dropped {
        let replies = same(&servers, what, datagrams)?;
        assert!(replies.is_empty(), "{what}: {replies:?}");
    }
    same(
        &servers,
        "nothing was stored",
        &[frame(5, 0, 1, b"get split\r\n")],
    )?;
    let mut odd_headers = frame(6, 5, 1, b"get split\r\n");
    same(&servers, "sequence 5 of 1", &[odd_headers.clone()])?;
    odd_headers[6] = 0xff;
    odd_headers[7] = 0xff;
    let replies = same(&servers, "reserved 0xffff", &[odd_headers])?;
    check_framing(6, &replies);
    Ok(())
}

/// Where fogcached answers otherwise over UDP, on purpose (README's compatibility
/// table): what it does not serve is answered `ERROR` (never more than memcached's
/// reply), a binary request is dropped, and nothing of a datagram carries over to the
/// next one (a value cut short, a refused value's rest). memcached is asked only the
/// requests that leave its UDP connection as it was.
#[test]
fn what_fogcached_does_not_serve_over_udp_is_answered_error_or_dropped() -> anyhow::Result<()> {
    let servers = pair(&[])?;
    let error = |request_id| {
        vec![Datagram {
            request_id,
            sequence: 0,
            total: 1,
            reserved: 0,
            data: b"ERROR\r\n".to_vec(),
        }]
    };
    // `stats`: memcached's answer is thousands of bytes (the amplification of the 2018
    // attacks on memcached's UDP port); fogcached's lists are longer still.
    for (index, request) in [&b"stats\r\n"[..], b"stats settings\r\n"]
        .iter()
        .enumerate()
    {
        let request_id = 0x2000 + index as u16;
        let fogcached = servers[1].client.request(request_id, request)?;
        assert_eq!(fogcached, error(request_id), "{}", escape(request));
        let memcached = servers[0].client.request(request_id, request)?;
        let bytes = |d: &[Datagram]| d.iter().map(|d| d.data.len() + 8).sum::<usize>();
        assert!(
            bytes(&fogcached) <= bytes(&memcached),
            "{}: {fogcached:?} is larger than memcached's {memcached:?}",
            escape(request)
        );
    }
    let fogcached = &servers[1].client;
    for (index, request) in [
        &b"stats detail dump\r\n"[..],
        b"stats cachedump 1 0\r\n",
        b"watch\r\n",
        b"lru_crawler metadump all\r\n",
        b"lru_crawler disable\r\n",
        b"cache_memlimit 100\r\n",
        b"slabs reassign 1 2\r\n",
        b"shutdown\r\n",
    ]
    .iter()
    .enumerate()
    {
        let request_id = 0x2100 + index as u16;
        assert_eq!(
            fogcached.request(request_id, request)?,
            error(request_id),
            "{}",
            escape(request)
        );
    }
    // A binary request (memcached answers it; fogcached serves the text protocol).
    let mut binary_version = vec![0x80, 0x0b];
    binary_version.resize(24, 0);
    assert_eq!(fogcached.request(0x2200, &binary_version)?, []);
    // A value cut short by the end of its datagram: dropped, and the next datagram is
    // served as a request of its own (memcached would read it as the rest of the value).
    assert_eq!(fogcached.request(0x2201, b"set cut 0 0 10\r\nabc")?, []);
    let mut next = fogcached.request(0x2202, b"get cut\r\n")?;
    assert_eq!(next.pop().map(|d| d.data), Some(b"END\r\n".to_vec()));
    // A value too large for the cache: refused at once, its bytes in this datagram
    // skipped, the next datagram served (memcached answers only after swallowing the
    // declared length, from the datagrams that follow).
    let replies = fogcached.request(0x2203, b"set big 0 0 2000000\r\nxyz\r\nget a\r\n")?;
    assert_eq!(
        replies.iter().map(|d| d.data.clone()).collect::<Vec<_>>(),
        [b"SERVER_ERROR object too large for cache\r\n".to_vec()]
    );
    let replies = fogcached.request(0x2204, b"version\r\n")?;
    assert!(
        replies[0].data.starts_with(b"VERSION 1.6.21-fogcached"),
        "{replies:?}"
    );
    Ok(())
}

/// memcached's own test harness starts a server with `-l 127.0.0.1 -p <port> -U <port>`:
/// fogcached starts from that line, says so at `-v`, serves the port, reports it in
/// `stats settings`, and lists a UDP connection per worker thread in `stats conns` (and
/// counts them in `curr_connections`) as memcached does.
#[test]
fn memcached_s_harness_line_with_l_and_u_starts_and_serves_udp() -> anyhow::Result<()> {
    // A UDP port free a moment ago (another process could take it meanwhile; the start
    // would then fail, not the check).
    let udp_port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    let port_arg = udp_port.to_string();
    // testkit's line is `-p <port> -l 127.0.0.1 -U 0`; the harness's -U comes last.
    let server = ServerProcess::fogcached_capturing_stderr(&[
        "-U",
        &port_arg,
        "-t",
        "2",
        "--slow-size",
        "0",
        "-v",
    ])?;
    let client = UdpClient::new(SocketAddr::from((Ipv4Addr::LOCALHOST, udp_port)))?;
    // Two workers serve datagrams in any order: no sentinel, the two replies expected.
    client.send(&frame(7, 0, 1, b"set k 0 0 1\r\nv\r\nget k\r\n"))?;
    let replies = client.receive(2)?;
    let data: Vec<Vec<u8>> = replies.iter().map(|d| d.data.clone()).collect();
    assert_eq!(
        data,
        [
            b"STORED\r\n".to_vec(),
            b"VALUE k 0 1\r\nv\r\nEND\r\n".to_vec()
        ]
    );
    let mut tcp = RawClient::connect(server.addr())?;
    assert_eq!(
        tcp.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    // Datagrams count in `bytes_read` and `bytes_written`, headers included (memcached
    // adds what recvfrom and sendmsg return).
    let request = frame(8, 0, 1, b"get k\r\n");
    let before = tcp.stats("")?;
    client.send(&request)?;
    let replies = client.receive(1)?;
    let after = tcp.stats("")?;
    let counter = |stats: &[(String, String)], name: &str| -> u64 {
        stat(stats, name).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    // The second `stats` line was read before its reply was made.
    assert_eq!(
        counter(&after, "bytes_read") - counter(&before, "bytes_read"),
        (request.len() + b"stats\r\n".len()) as u64
    );
    let replied: usize = replies.iter().map(|d| d.data.len() + 8).sum();
    assert!(counter(&after, "bytes_written") - counter(&before, "bytes_written") >= replied as u64);
    let settings = tcp.stats("settings")?;
    assert_eq!(stat(&settings, "udpport"), Some(port_arg.as_str()));
    assert_eq!(stat(&settings, "num_threads_per_udp"), Some("2"));
    // Idle, both ports are `conn_read`. The port that served the datagram goes back to it
    // only after its reply left (as memcached's does), so this client may ask first.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let udp_conns = udp_conn_names(&tcp.stats("conns")?);
        assert_eq!(udp_conns.len(), 2, "{udp_conns:?}");
        for (addr, _) in &udp_conns {
            assert_eq!(addr, &format!("udp:127.0.0.1:{udp_port}"));
        }
        if udp_conns.iter().all(|(_, state)| state == "conn_read") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "UDP ports not back to conn_read: {udp_conns:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Two UDP connections and this TCP one (once the server saw testkit's start-up probe
    // close).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let current = tcp.stats("")?;
        if stat(&current, "curr_connections") == Some("3") {
            break;
        }
        assert!(Instant::now() < deadline, "{current:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stderr = server.stderr_text();
    assert!(
        stderr.contains(&format!("listening on udp 127.0.0.1:{udp_port}")),
        "{stderr}"
    );
    server.stop()?;

    // memcached lists its UDP connections under the same names.
    let memcached = ServerProcess::memcached(&["-t", "2", "-U", &port_arg])?;
    let mut tcp = RawClient::connect(memcached.addr())?;
    let theirs = udp_conn_names(&tcp.stats("conns")?);
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    for (addr, state) in &theirs {
        assert_eq!(addr, &format!("udp:127.0.0.1:{udp_port}"));
        assert_eq!(state, "conn_read");
    }
    assert_eq!(
        stat(&tcp.stats("settings")?, "udpport"),
        Some(port_arg.as_str())
    );
    Ok(())
}

/// (addr, state) of each connection `stats conns` marks `UDP`.
fn udp_conn_names(conns: &[(String, String)]) -> Vec<(String, String)> {
    let fds: Vec<&str> = conns
        .iter()
        .filter(|(name, value)| name.ends_with(":UDP") && value == "UDP")
        .filter_map(|(name, _)| name.split(':').next())
        .collect();
    fds.iter()
        .map(|fd| {
            let field = |suffix: &str| {
                stat(conns, &format!("{fd}:{suffix}"))
                    .unwrap_or("")
                    .to_owned()
            };
            (field("addr"), field("state"))
        })
        .collect()
}

/// Every worker serves the datagrams it reads: 200 requests from 4 clients at once over
/// 4 workers, each answered with its own value under its own id.
#[test]
fn every_worker_answers_the_datagrams_it_reads() -> anyhow::Result<()> {
    let server = UdpServer::start("fogcached", &["-t", "4", "--slow-size", "0"])?;
    let addr = server.client.server;
    let threads: Vec<_> = (0..4u16)
        .map(|client| {
            std::thread::spawn(move || -> anyhow::Result<()> {
                let udp = UdpClient::new(addr)?;
                for i in 0..50u16 {
                    let request_id = client * 100 + i;
                    let key = format!("c{client}k{i}");
                    let mut request = set(&key, key.as_bytes());
                    request.extend_from_slice(format!("get {key}\r\n").as_bytes());
                    udp.send(&frame(request_id, 0, 1, &request))?;
                    let replies = udp.receive(2)?;
                    let expected = format!("VALUE {key} 0 {}\r\n{key}\r\nEND\r\n", key.len());
                    let data: Vec<Vec<u8>> = replies.iter().map(|d| d.data.clone()).collect();
                    anyhow::ensure!(
                        data == [b"STORED\r\n".to_vec(), expected.into_bytes()]
                            && replies.iter().all(|d| d.request_id == request_id),
                        "request {request_id}: {replies:?}"
                    );
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    let name = server.name;
    server.server.stop().map_err(|e| e.context(name))?;
    Ok(())
}
