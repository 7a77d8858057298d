//! Runtime mechanics (pipelining, back-pressure, limits, swallow, yields, shutdown)
//! driven through a toy line protocol, so that they are tested independently of the
//! memcached dispatchers. Unit tests of the crate (not integration tests) because the
//! toy takes the dispatchers' place through a seam that exists only in them
//! (`connection::Dispatchers`): production connections call the dispatchers directly.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cli::Config;
use crate::connection::Dispatchers;
use crate::runtime::Server;
use crate::session::{Session, Step};
use crate::stats_reply::{self, StatsGroup};
use testkit::RawClient;

/// The toy protocol, one request per `\n`-terminated line:
/// `echo X` -> `X\r\n`; `big N [padding]` -> N bytes of `x` then `\r\n`; `skip N` -> discard the
/// next N bytes; `stats GROUP` -> `STAT ...` lines and `END`; `quit`; `shutdown`.
fn toy(session: &mut Session<'_>, input: &[u8]) -> Step {
    let Some(end) = input.iter().position(|b| *b == b'\n') else {
        return Step::NeedMore;
    };
    let line = input[..end].strip_suffix(b"\r").unwrap_or(&input[..end]);
    let consumed = end + 1;
    let (verb, arg) = match line.iter().position(|b| *b == b' ') {
        Some(at) => (&line[..at], &line[at + 1..]),
        None => (line, &b""[..]),
    };
    // The number is the first word; anything after it is padding.
    let number = || {
        let word = arg.split(|b| *b == b' ').next().unwrap_or(b"");
        std::str::from_utf8(word)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0)
    };
    match verb {
        b"echo" => {
            session.out.extend_from_slice(arg);
            session.out.extend_from_slice(b"\r\n");
        }
        b"big" => {
            let n = number();
            session.out.resize(session.out.len() + n, b'x');
            session.out.extend_from_slice(b"\r\n");
        }
        b"skip" => {
            return Step::Swallow {
                consumed,
                bytes: number(),
            }
        }
        b"stats" => {
            let group = StatsGroup::from_name(arg).unwrap_or(StatsGroup::General);
            let mut lines = Vec::new();
            stats_reply::collect(session, group, &mut |name, value| {
                lines.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes())
            });
            session.out.extend_from_slice(&lines);
            session.out.extend_from_slice(b"END\r\n");
        }
        b"quit" => return Step::Close,
        b"shutdown" => return Step::Shutdown,
        _ => session.out.extend_from_slice(b"ERROR\r\n"),
    }
    Step::Consumed(consumed)
}

fn start(adjust: impl FnOnce(&mut Config)) -> anyhow::Result<(Server, SocketAddr)> {
    let mut config = Config {
        tcp_port: 0,
        worker_threads: 2,
        ..Config::default()
    };
    adjust(&mut config);
    let server = Server::start_with(config, Dispatchers { toy: Some(toy) })?;
    let addr = server.local_addrs()[0];
    Ok((server, addr))
}

fn stat(client: &mut RawClient, group: &str, name: &str) -> anyhow::Result<String> {
    let stats = client.stats(group)?;
    testkit::stat(&stats, name)
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no stat {name}"))
}

#[test]
fn pipelined_requests_in_one_write_get_every_reply_in_order() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for i in 0..2000 {
        requests.extend_from_slice(format!("echo {i}\r\n").as_bytes());
        expected.extend_from_slice(format!("{i}\r\n").as_bytes());
    }
    client.send(&requests)?;
    assert_eq!(client.read_exact(expected.len())?, expected);
    // 2000 requests in one write exceed the 20 per turn, so the connection yielded.
    assert_ne!(stat(&mut client, "", "conn_yields")?, "0");
    server.stop();
    Ok(())
}

#[test]
fn request_split_across_writes_is_reassembled() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    client.send(b"ec")?;
    std::thread::sleep(Duration::from_millis(50));
    client.send(b"ho split\r")?;
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        client.request(b"\necho next\r\n", b"next\r\n")?,
        b"split\r\nnext\r\n"
    );
    server.stop();
    Ok(())
}

#[test]
fn swallow_discards_payload_without_buffering_it() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    // 3 MiB swallowed: more than the input buffer may grow to (1 MiB item + headroom).
    let mut request = b"skip 3145728\r\n".to_vec();
    request.resize(request.len() + 3 * 1024 * 1024, b'z');
    request.extend_from_slice(b"echo after\r\n");
    client.send(&request)?;
    assert_eq!(client.read_until(b"\r\n")?, b"after\r\n");
    server.stop();
    Ok(())
}

#[test]
fn line_without_newline_beyond_the_buffer_limit_closes() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    let junk = vec![b'a'; 4 * 1024 * 1024];
    // The server may close while we are still sending; that is the point.
    let _ = client.send(&junk);
    assert!(client.is_closed_by_peer());
    // The server is fine afterwards.
    let mut other = RawClient::connect(addr)?;
    assert_eq!(other.request(b"echo ok\r\n", b"\r\n")?, b"ok\r\n");
    server.stop();
    Ok(())
}

#[test]
fn quit_closes_after_earlier_replies_are_sent() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    client.send(b"echo one\r\necho two\r\nquit\r\necho never\r\n")?;
    assert_eq!(client.read_exact(10)?, b"one\r\ntwo\r\n");
    assert!(client.is_closed_by_peer());
    server.stop();
    Ok(())
}

#[test]
fn connection_limit_rejects_with_memcacheds_error() -> anyhow::Result<()> {
    let (server, addr) = start(|c| c.max_connections = 2)?;
    let mut first = RawClient::connect(addr)?;
    let mut second = RawClient::connect(addr)?;
    assert_eq!(first.request(b"echo 1\r\n", b"\r\n")?, b"1\r\n");
    assert_eq!(second.request(b"echo 2\r\n", b"\r\n")?, b"2\r\n");
    let mut third = RawClient::connect(addr)?;
    assert_eq!(
        third.read_until(b"\r\n")?,
        b"ERROR Too many open connections\r\n"
    );
    assert!(third.is_closed_by_peer());
    assert_eq!(stat(&mut first, "", "rejected_connections")?, "1");
    assert_eq!(stat(&mut first, "", "curr_connections")?, "2");
    // Closing one makes room again.
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().curr_connections.load(Ordering::Relaxed) > 1 {
        assert!(
            Instant::now() < deadline,
            "closed connection not counted down"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut fourth = RawClient::connect(addr)?;
    assert_eq!(fourth.request(b"echo 4\r\n", b"\r\n")?, b"4\r\n");
    server.stop();
    Ok(())
}

#[test]
fn client_that_does_not_read_cannot_make_output_grow_without_bound() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nonblocking(true)?;
    // 10000 requests of 4 KiB, each asking for a 16 KiB reply: 40 MiB of input, more
    // than the socket buffers hold, and 160 MiB of output if it were all buffered.
    const REPLY_BYTES: usize = 16 * 1024;
    let mut request = format!("big {REPLY_BYTES} ").into_bytes();
    request.resize(4096 - 2, b'p');
    request.extend_from_slice(b"\r\n");
    let total_requests = 10_000;
    let mut sent_requests = 0;
    let mut partial = 0usize;
    let deadline = Instant::now() + Duration::from_secs(10);
    // Send until the server stops reading (its socket buffer and ours are full).
    let mut stalled_rounds = 0;
    while sent_requests < total_requests && stalled_rounds < 50 && Instant::now() < deadline {
        match stream.write(&request[partial..]) {
            Ok(n) => {
                partial += n;
                if partial == request.len() {
                    partial = 0;
                    sent_requests += 1;
                }
                stalled_rounds = 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                stalled_rounds += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
    assert!(
        sent_requests < total_requests,
        "server kept reading requests while its replies were not being read"
    );
    // Now read everything back: every reply for every complete request arrives.
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    // A request cut short by the stall stays incomplete: it gets no reply.
    let expected_bytes = sent_requests * (REPLY_BYTES + 2);
    let mut received = 0usize;
    let mut buffer = vec![0u8; 1 << 20];
    while received < expected_bytes {
        let n = stream.read(&mut buffer)?;
        assert!(n > 0, "closed after {received} of {expected_bytes} bytes");
        received += n;
    }
    assert_eq!(received, expected_bytes);
    server.stop();
    Ok(())
}

#[test]
fn stats_report_connections_bytes_and_reset() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    let conns = client.stats("conns")?;
    let own_state = conns
        .iter()
        .filter(|(name, _)| name.ends_with(":state"))
        .map(|(_, value)| value.as_str())
        .collect::<Vec<_>>();
    assert!(own_state.contains(&"conn_listening"), "{conns:?}");
    assert!(own_state.contains(&"conn_parse_cmd"), "{conns:?}");
    let local = client.stream().local_addr()?;
    assert!(
        conns
            .iter()
            .any(|(n, v)| n.ends_with(":addr") && *v == format!("tcp:{local}")),
        "{conns:?}"
    );
    let general = client.stats("")?;
    assert_ne!(testkit::stat(&general, "bytes_read"), Some("0"));
    assert_eq!(testkit::stat(&general, "total_connections"), Some("1"));
    assert_eq!(testkit::stat(&general, "threads"), Some("2"));
    let settings = client.stats("settings")?;
    assert_eq!(testkit::stat(&settings, "maxconns"), Some("1024"));
    assert_eq!(
        testkit::stat(&settings, "tcpport"),
        Some(addr.port().to_string().as_str())
    );
    server.stop();
    Ok(())
}

#[test]
fn idle_timeout_closes_idle_connections() -> anyhow::Result<()> {
    let (server, addr) = start(|c| c.idle_timeout_s = 1)?;
    let mut client = RawClient::connect(addr)?;
    assert_eq!(client.request(b"echo hi\r\n", b"\r\n")?, b"hi\r\n");
    // Bounded wait: idle for over a second, swept once a second.
    assert!(client.is_closed_by_peer());
    let mut other = RawClient::connect(addr)?;
    assert_ne!(stat(&mut other, "", "idle_kicks")?, "0");
    server.stop();
    Ok(())
}

#[test]
fn shutdown_step_stops_the_server() -> anyhow::Result<()> {
    let (server, addr) = start(|_| {})?;
    let mut client = RawClient::connect(addr)?;
    client.send(b"echo bye\r\nshutdown\r\n")?;
    assert_eq!(client.read_until(b"\r\n")?, b"bye\r\n");
    // wait() returns once the shutdown request is seen; bounded by the test harness.
    let (done_sender, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        server.wait();
        let _ = done_sender.send(());
    });
    assert!(
        done.recv_timeout(Duration::from_secs(10)).is_ok(),
        "server did not stop"
    );
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
    Ok(())
}
