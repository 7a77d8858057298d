//! `--io-uring-recv`: the io_uring loop's multishot receive (one receive stays armed per
//! connection, Linux 6.0) and its single-shot one serve the same bytes. What multishot
//! adds is checked where it can go wrong: bytes that arrive while a connection does not
//! want input (its replies backed up) are kept, not lost, and do not grow the server
//! without bound; a slot whose connection closed with a multishot receive armed is
//! reused only after that receive's final completion, while other clients keep getting
//! their own replies; `stats settings` and the `-v` start-up log say which receive runs.
//! Each test also runs the epoll loop as the reference.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use server::worker::{probe_io_uring, probe_multishot_recv};
use testkit::{
    fogcached_refusal, proc_status_kib, reset_on_close, set_request, skip, stat, RawClient,
    ServerProcess,
};

const WAIT: Duration = Duration::from_secs(20);

/// The loops to test: (flags, what `stats settings` shows as `io_engine`,
/// `io_uring_recv`). Epoll always; io_uring single-shot where the kernel allows io_uring;
/// multishot where it has it too (else a counted skip naming the reason).
fn loops(test: &str) -> Vec<(Vec<&'static str>, &'static str, &'static str)> {
    let mut loops = vec![(vec!["--io-engine", "epoll"], "epoll", "none")];
    if let Err(reason) = probe_io_uring() {
        skip!(test, "io_uring halves: {reason}");
        return loops;
    }
    loops.push((
        vec!["--io-engine", "io-uring", "--io-uring-recv", "single"],
        "io_uring",
        "single",
    ));
    match probe_multishot_recv() {
        Ok(()) => loops.push((
            vec!["--io-engine", "io-uring", "--io-uring-recv", "multishot"],
            "io_uring",
            "multishot",
        )),
        Err(reason) => skip!(test, "multishot half: {reason}"),
    }
    loops
}

/// Deterministic value bytes of `len` for key number `k` (no `\r\n` inside).
fn value_for(k: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((k * 7 + i * 3) % 26) as u8)
        .collect()
}

fn value_reply(key: &str, value: &[u8]) -> Vec<u8> {
    let mut reply = format!("VALUE {key} 0 {}\r\n", value.len()).into_bytes();
    reply.extend_from_slice(value);
    reply.extend_from_slice(b"\r\n");
    reply
}

/// Keys the pipelining client asks for, and their values' sizes (replies of ~0.3-2 KiB,
/// so that the output passes the 4 MiB high-water mark after a few thousand requests).
const KEYS: usize = 64;
fn value_len(k: usize) -> usize {
    300 + (k * 211) % 1700
}

/// Request `i` of the pipelining client and its reply: mostly single gets, every fifth a
/// two-key get, every thirteenth a miss.
fn pipelined(i: usize) -> (Vec<u8>, Vec<u8>) {
    let k = i % KEYS;
    if i.is_multiple_of(13) {
        return (format!("get none{i}\r\n").into_bytes(), b"END\r\n".to_vec());
    }
    if i.is_multiple_of(5) {
        let other = (i * 7 + 3) % KEYS;
        let mut reply = value_reply(&format!("k{k}"), &value_for(k, value_len(k)));
        reply.extend_from_slice(&value_reply(
            &format!("k{other}"),
            &value_for(other, value_len(other)),
        ));
        reply.extend_from_slice(b"END\r\n");
        return (format!("get k{k} k{other}\r\n").into_bytes(), reply);
    }
    let mut reply = value_reply(&format!("k{k}"), &value_for(k, value_len(k)));
    reply.extend_from_slice(b"END\r\n");
    (format!("get k{k}\r\n").into_bytes(), reply)
}

/// How long the client's writes must stay blocked to count as "the server stopped
/// reading".
const WRITES_BLOCKED_FOR: Duration = Duration::from_secs(1);
/// Bound on the server's resident memory growth while the client does not read: the
/// output high-water mark (4 MiB), the input a multishot receive may deliver past its
/// cancel (about 4 MiB), the other reply buffer, and allocator slack, with room to spare.
const RSS_GROWTH_MAX_KIB: u64 = 48 * 1024;

/// (a) A client pipelines small requests with large replies and reads nothing: the
/// server must stop reading (the client's writes stay blocked, the server's `bytes_read`
/// stops growing, its memory stays bounded) although a multishot receive would go on
/// delivering; then, once the client reads, every reply must arrive, in order, none lost
/// (the bytes a multishot receive delivered while the connection did not want input are
/// kept), and the connection goes on serving.
#[test]
fn a_client_that_does_not_read_stays_bounded_and_then_gets_every_reply_in_order() {
    const TEST: &str =
        "a_client_that_does_not_read_stays_bounded_and_then_gets_every_reply_in_order";
    for (flags, _, recv) in loops(TEST) {
        let mut args = flags.clone();
        args.extend(["--slow-size", "0", "-m", "64", "-t", "1"]);
        let server = ServerProcess::fogcached(&args).unwrap_or_else(|e| panic!("{flags:?}: {e:#}"));
        let pid = server.pid().expect("pid");
        let mut other = RawClient::connect(server.addr()).unwrap();
        for k in 0..KEYS {
            let request = set_request(&format!("k{k}"), &value_for(k, value_len(k)));
            assert_eq!(other.request(&request, b"\r\n").unwrap(), b"STORED\r\n");
        }
        let bytes_read = |client: &mut RawClient| -> u64 {
            let stats = client.stats("").unwrap();
            stat(&stats, "bytes_read").unwrap().parse().unwrap()
        };
        let rss_before_kib = proc_status_kib(pid, "VmRSS").unwrap();

        let mut stream = TcpStream::connect(server.addr()).unwrap();
        stream.set_nonblocking(true).unwrap();
        // The requests go out in chunks of whole requests; `sent` counts the requests
        // whose bytes all left.
        let mut requests = 0usize;
        let mut chunk: Vec<u8> = Vec::new();
        let mut chunk_sent = 0usize;
        let mut chunk_requests = 0usize;
        let mut sent = 0usize;
        let mut rss_peak_kib = rss_before_kib;
        let mut blocked_since: Option<Instant> = None;
        let started = Instant::now();
        loop {
            rss_peak_kib = rss_peak_kib.max(proc_status_kib(pid, "VmRSS").unwrap());
            if blocked_since.is_some_and(|since| since.elapsed() >= WRITES_BLOCKED_FOR) {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "{flags:?}: the client's writes never stayed blocked ({sent} requests \
                 sent): the server kept reading requests it cannot answer"
            );
            if chunk_sent == chunk.len() {
                sent += chunk_requests;
                chunk.clear();
                chunk_sent = 0;
                chunk_requests = 0;
                while chunk.len() < 16 * 1024 {
                    chunk.extend_from_slice(&pipelined(requests).0);
                    requests += 1;
                    chunk_requests += 1;
                }
            }
            match stream.write(&chunk[chunk_sent..]) {
                Ok(written) => {
                    chunk_sent += written;
                    blocked_since = None;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    blocked_since.get_or_insert_with(Instant::now);
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{flags:?}: writing after {sent} requests: {e}"),
            }
        }
        // The server no longer reads this connection: its byte count stands still.
        let read_then = bytes_read(&mut other);
        std::thread::sleep(Duration::from_millis(300));
        let read_later = bytes_read(&mut other);
        // `other`'s own `stats` request is all that may have been read meanwhile.
        assert!(
            read_later - read_then <= 16,
            "{flags:?}: the server read {} bytes more from a client whose replies are \
             backed up",
            read_later - read_then
        );
        let rss_after_kib = proc_status_kib(pid, "VmRSS").unwrap();
        rss_peak_kib = rss_peak_kib.max(rss_after_kib);
        println!(
            "{flags:?}: {sent}+ requests pipelined; server RSS {rss_before_kib} KiB before, \
             peak sampled {rss_peak_kib} KiB"
        );
        assert!(
            rss_peak_kib <= rss_before_kib + RSS_GROWTH_MAX_KIB,
            "{flags:?}: server RSS grew from {rss_before_kib} KiB to {rss_peak_kib} KiB for a \
             client that does not read"
        );
        // The server still serves others.
        assert_eq!(
            other.request(b"get k1\r\n", b"END\r\n").unwrap()[..8].to_vec(),
            b"VALUE k1".to_vec()
        );

        // Now the client reads, on a thread, while this one sends the rest of its chunk:
        // every reply, in order.
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut reader = stream.try_clone().unwrap();
        let total = requests;
        let check = std::thread::spawn(move || -> Result<(), String> {
            let mut buffer = vec![0u8; 256 * 1024];
            let mut have: Vec<u8> = Vec::new();
            let mut next = 0usize;
            while next < total {
                let n = reader
                    .read(&mut buffer)
                    .map_err(|e| format!("reading reply {next} of {total}: {e}"))?;
                if n == 0 {
                    return Err(format!("closed before reply {next} of {total}"));
                }
                have.extend_from_slice(&buffer[..n]);
                let mut at = 0;
                while next < total {
                    let expected = pipelined(next).1;
                    if have.len() - at < expected.len() {
                        break;
                    }
                    if have[at..at + expected.len()] != expected[..] {
                        return Err(format!(
                            "reply {next} of {total} differs: {:?}",
                            String::from_utf8_lossy(
                                &have[at..at + expected.len().min(have.len() - at).min(120)]
                            )
                        ));
                    }
                    at += expected.len();
                    next += 1;
                }
                have.drain(..at);
            }
            if !have.is_empty() {
                return Err(format!("{} bytes after the last reply", have.len()));
            }
            Ok(())
        });
        stream.set_write_timeout(Some(WAIT)).unwrap();
        stream.write_all(&chunk[chunk_sent..]).unwrap();
        check
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{flags:?} ({recv}): {e}"));
        // And the connection goes on.
        let mut client = RawClient::connect(server.addr()).unwrap();
        drop(client.stats("settings").unwrap());
        stream.write_all(b"version\r\n").unwrap();
        let mut line = [0u8; 8];
        stream.read_exact(&mut line).unwrap();
        assert_eq!(&line, b"VERSION ");
        server.stop().unwrap();
    }
}

/// (b) Connections keep opening and closing with data in flight both ways (pipelined
/// requests unanswered, replies unread, half a request, a reset) while other clients
/// keep getting exactly their own replies: a closed connection's slot, whose multishot
/// receive is still armed when it closes, must not be reused before that receive's
/// final completion (a completion reaching the slot's next connection would hand it
/// another client's bytes), and every buffer must go back to the ring (the server is
/// the debug build here, whose accounting asserts fail loudly). Afterwards the server's
/// connection count is back where it was.
#[test]
fn connections_closing_with_data_in_flight_leave_the_others_their_own_replies() {
    const TEST: &str = "connections_closing_with_data_in_flight_leave_the_others_their_own_replies";
    const STEADY: usize = 4;
    const ROUNDS: usize = 150;
    const CHURNERS: usize = 4;
    const CHURNS: usize = 120;
    for (flags, _, _) in loops(TEST) {
        let mut args = flags.clone();
        args.extend(["--slow-size", "0", "-t", "2", "-c", "4096"]);
        let server = ServerProcess::fogcached(&args).unwrap_or_else(|e| panic!("{flags:?}: {e:#}"));
        let addr = server.addr();
        let mut admin = RawClient::connect(addr).unwrap();
        let big = value_for(99, 200_000);
        assert_eq!(
            admin.request(&set_request("big", &big), b"\r\n").unwrap(),
            b"STORED\r\n"
        );
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churners: Vec<_> = (0..CHURNERS)
            .map(|c| {
                let stop = std::sync::Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut churns = 0;
                    while churns < CHURNS || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let Ok(mut stream) = TcpStream::connect(addr) else {
                            continue;
                        };
                        let mut burst = Vec::new();
                        for i in 0..(churns % 7 + 1) * 40 {
                            burst.extend_from_slice(match i % 3 {
                                0 => b"get big\r\n".as_slice(),
                                1 => b"get missing\r\n".as_slice(),
                                _ => b"version\r\n".as_slice(),
                            });
                        }
                        if churns % 2 == 0 {
                            // Half a request, then gone.
                            burst.extend_from_slice(b"set half 0 0 100\r\nonly part");
                        }
                        let _ = stream.write_all(&burst);
                        if churns % 3 == 0 {
                            // Read a little of the replies first.
                            let mut some = [0u8; 4096];
                            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                            let _ = stream.read(&mut some);
                        }
                        if churns % 4 == 1 {
                            let _ = reset_on_close(&stream);
                            drop(stream);
                        } else {
                            drop(stream);
                        }
                        churns += 1;
                        let _ = c;
                    }
                    churns
                })
            })
            .collect();
        let steady: Vec<_> = (0..STEADY)
            .map(|c| {
                std::thread::spawn(move || {
                    let mut client = RawClient::connect(addr).unwrap();
                    client.set_read_timeout(WAIT).unwrap();
                    for round in 0..ROUNDS {
                        let key = format!("s{c}:{round}");
                        let value =
                            value_for(c * 1000 + round, 20 + (c * 997 + round * 311) % 20_000);
                        let mut batch = set_request(&key, &value);
                        batch.extend_from_slice(format!("get {key}\r\nversion\r\n").as_bytes());
                        client.send(&batch).unwrap();
                        let mut expected = b"STORED\r\n".to_vec();
                        expected.extend_from_slice(&value_reply(&key, &value));
                        expected.extend_from_slice(b"END\r\n");
                        let reply = client.read_exact(expected.len()).unwrap();
                        assert!(
                            reply == expected,
                            "steady client {c} round {round}: wrong replies"
                        );
                        let version = client.read_until(b"\r\n").unwrap();
                        assert!(
                            version.starts_with(b"VERSION "),
                            "steady client {c} round {round}"
                        );
                    }
                })
            })
            .collect();
        for client in steady {
            client
                .join()
                .unwrap_or_else(|_| panic!("{flags:?}: a steady client got wrong replies"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let churned: usize = churners.into_iter().map(|c| c.join().unwrap()).sum();
        // Every churned connection is closed: only `admin` is left.
        let deadline = Instant::now() + WAIT;
        loop {
            let stats = admin.stats("").unwrap();
            let current = stat(&stats, "curr_connections").unwrap().to_owned();
            if current == "1" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{flags:?}: {current} connections still open after {churned} churned ones closed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            admin.request(b"get big\r\n", b"END\r\n").unwrap(),
            [value_reply("big", &big), b"END\r\n".to_vec()].concat()
        );
        let status = server.stop().unwrap();
        assert!(
            status.success(),
            "{flags:?}: the server stopped with {status}"
        );
    }
}

/// (c) `stats settings` shows the receive in use as `io_uring_recv` (`none` under epoll),
/// `auto` takes multishot exactly when the kernel has it, `-v` says so at start-up, and
/// a mode that does not exist is refused with the valid ones.
#[test]
fn stats_settings_and_the_start_up_log_show_the_receive() {
    const TEST: &str = "stats_settings_and_the_start_up_log_show_the_receive";
    for (flags, engine, recv) in loops(TEST) {
        let mut args = flags.clone();
        args.extend(["--slow-size", "0"]);
        let server = ServerProcess::fogcached(&args).unwrap();
        let mut client = RawClient::connect(server.addr()).unwrap();
        let settings = client.stats("settings").unwrap();
        assert_eq!(stat(&settings, "io_engine"), Some(engine), "{flags:?}");
        assert_eq!(stat(&settings, "io_uring_recv"), Some(recv), "{flags:?}");
        server.stop().unwrap();
    }
    if probe_io_uring().is_ok() {
        let expected = if probe_multishot_recv().is_ok() {
            "multishot"
        } else {
            "single"
        };
        let server = ServerProcess::fogcached_capturing_stderr(&[
            "--io-engine",
            "io-uring",
            "--io-uring-recv",
            "auto",
            "--slow-size",
            "0",
            "-v",
        ])
        .unwrap();
        let mut client = RawClient::connect(server.addr()).unwrap();
        let settings = client.stats("settings").unwrap();
        assert_eq!(stat(&settings, "io_uring_recv"), Some(expected));
        let log = server.stderr_text();
        let line = format!("fogcached: io_uring receive {expected}");
        assert!(
            log.lines().any(|l| l == line),
            "-v never said {line:?}: {log}"
        );
        server.stop().unwrap();
    }
    let run = |args: &[&str], env: Option<&str>| {
        let run = fogcached_refusal(args, ("FOGCACHED_IO_URING_RECV", env)).unwrap();
        (run.code, run.output)
    };
    let (code, stderr) = run(&["--io-uring-recv", "twice"], None);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("unknown --io-uring-recv \"twice\" (valid: auto, multishot, single)"),
        "{stderr}"
    );
    let (code, stderr) = run(&[], Some("often"));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("FOGCACHED_IO_URING_RECV=\"often\""),
        "{stderr}"
    );
}
