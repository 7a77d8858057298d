//! The `fogcached` binary end to end: start-up, command line refusals, pipelining,
//! the connection limit, hostile input, memory bounds, and clean shutdown on signals.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use server::session::SERVER_VERSION;
use testkit::{fogcached_binary, proc_status_kib, stat, RawClient, ServerProcess};

fn version_reply() -> Vec<u8> {
    format!("VERSION {SERVER_VERSION}\r\n").into_bytes()
}

/// The resident memory of a process now.
fn vm_rss_kib(pid: u32) -> anyhow::Result<u64> {
    proc_status_kib(pid, "VmRSS")
}

#[test]
fn starts_on_a_free_port_and_answers_version() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(client.request(b"version\r\n", b"\r\n")?, version_reply());
    Ok(())
}

#[test]
fn pipelined_requests_in_one_write_are_answered_in_order() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-t", "2"])?;
    let mut client = RawClient::connect(server.addr())?;
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for i in 0..500 {
        requests.extend_from_slice(
            format!("set key{i} 0 0 {}\r\nvalue{i}\r\n", 5 + i.to_string().len()).as_bytes(),
        );
        expected.extend_from_slice(b"STORED\r\n");
    }
    for i in 0..500 {
        requests.extend_from_slice(format!("get key{i}\r\n").as_bytes());
        expected.extend_from_slice(
            format!(
                "VALUE key{i} 0 {}\r\nvalue{i}\r\nEND\r\n",
                5 + i.to_string().len()
            )
            .as_bytes(),
        );
    }
    requests.extend_from_slice(b"version\r\n");
    expected.extend_from_slice(&version_reply());
    client.send(&requests)?;
    let reply = client.read_exact(expected.len())?;
    assert_eq!(testkit::escape(&reply), testkit::escape(&expected));
    // More requests arrived at once than one turn allows, so the connection yielded.
    assert_ne!(stat(&client.stats("")?, "conn_yields"), Some("0"));
    Ok(())
}

#[test]
fn connection_over_the_limit_gets_memcacheds_error() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-c", "3"])?;
    // The launcher never connects (it reads the port file), so this is the only
    // connection; checked (bounded wait) so that exactly three slots are free.
    let mut first = RawClient::connect(server.addr())?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while stat(&first.stats("")?, "curr_connections") != Some("1") {
        assert!(Instant::now() < deadline, "another connection was counted");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut clients = vec![first];
    for _ in 0..2 {
        let mut client = RawClient::connect(server.addr())?;
        assert_eq!(client.request(b"version\r\n", b"\r\n")?, version_reply());
        clients.push(client);
    }
    let mut extra = RawClient::connect(server.addr())?;
    assert_eq!(
        extra.read_until(b"\r\n")?,
        b"ERROR Too many open connections\r\n"
    );
    assert!(extra.is_closed_by_peer());
    let stats = clients[0].stats("")?;
    assert_eq!(stat(&stats, "rejected_connections"), Some("1"));
    assert_eq!(stat(&stats, "curr_connections"), Some("3"));
    assert_eq!(stat(&stats, "max_connections"), Some("3"));
    Ok(())
}

#[test]
fn sigterm_stops_the_server_with_status_zero() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let addr = server.addr();
    // An open, idle connection must not hold the shutdown up.
    let mut client = RawClient::connect(addr)?;
    assert_eq!(client.request(b"version\r\n", b"\r\n")?, version_reply());
    let status = server.stop()?;
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(client.is_closed_by_peer());
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
    Ok(())
}

#[test]
fn sigint_stops_the_server_with_status_zero() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    server.signal(libc::SIGINT)?;
    let status = server.wait(Duration::from_secs(10))?;
    assert_eq!(status.code(), Some(0), "{status}");
    Ok(())
}

#[test]
fn shutdown_command_stops_the_server_when_enabled() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-A"])?;
    let mut client = RawClient::connect(server.addr())?;
    client.send(b"shutdown\r\n")?;
    let status = server.wait(Duration::from_secs(10))?;
    assert_eq!(status.code(), Some(0), "{status}");
    Ok(())
}

fn run_expecting_refusal(args: &[&str]) -> anyhow::Result<(i32, String)> {
    let output = Command::new(fogcached_binary()?)
        .args(["-p", "0"])
        .args(args)
        .output()?;
    let code = output.status.code().unwrap_or(-1);
    Ok((code, String::from_utf8_lossy(&output.stderr).into_owned()))
}

#[test]
fn unknown_extended_option_is_refused_by_name() -> anyhow::Result<()> {
    let (code, stderr) = run_expecting_refusal(&["-o", "modern,no_such_knob=1"])?;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("no_such_knob"), "{stderr}");
    Ok(())
}

/// memcached refuses UDP beside authentication (a datagram carries none), with these
/// words and exit status 64.
#[test]
fn udp_with_authentication_is_refused_as_memcached_refuses_it() -> anyhow::Result<()> {
    let (code, stderr) = run_expecting_refusal(&["-U", "11211", "-Y", "/nonexistent-authfile"])?;
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.contains("Cannot use UDP with ascii authentication enabled (-U 0 to disable)"),
        "{stderr}"
    );
    let (code, stderr) = run_expecting_refusal(&["-U", "11211", "-S"])?;
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.contains("ERROR: Cannot enable UDP while using binary SASL authentication."),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn invalid_engine_setting_is_refused() -> anyhow::Result<()> {
    let (code, stderr) = run_expecting_refusal(&["-o", "hot_lru_pct=70,warm_lru_pct=20"])?;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("hot_lru_pct"), "{stderr}");
    Ok(())
}

#[test]
fn huge_line_without_newline_closes_the_connection() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let mut client = RawClient::connect(server.addr())?;
    // Slowloris: a "command" that never ends. memcached closes at 2048 bytes (8 KiB for
    // get/gets); the runtime's buffer limit is the backstop for anything else.
    let _ = client.send(&vec![b'x'; 3 * 1024 * 1024]);
    assert!(client.is_closed_by_peer());
    // A `get` line may be longer than 2048 bytes, but not without bound.
    let mut get_like = RawClient::connect(server.addr())?;
    let mut line = b"get ".to_vec();
    line.resize(3 * 1024 * 1024, b'k');
    let _ = get_like.send(&line);
    assert!(get_like.is_closed_by_peer());
    let mut fresh = RawClient::connect(server.addr())?;
    assert_eq!(fresh.request(b"version\r\n", b"\r\n")?, version_reply());
    Ok(())
}

/// Bound on how much the server's resident memory may grow while one client pipelines
/// requests without reading: the output high-water mark (4 MiB) plus one reply being
/// built plus socket and allocator slack, with room to spare.
const PIPELINING_RSS_GROWTH_MAX_KIB: u64 = 64 * 1024;
/// The value the pipelining client asks for, over and over.
const PIPELINED_VALUE_BYTES: usize = 512 * 1024;
/// How long the client's writes must stay blocked to count as "the server stopped
/// reading" (a server that still reads, however slowly, opens the window again).
const WRITES_BLOCKED_FOR: Duration = Duration::from_secs(1);
/// Replies the client must have asked for before the test judges: an unbounded server
/// would have had to buffer this much, far past the RSS bound.
const REQUESTED_REPLY_BYTES_MIN: u64 = 4 * 1024 * 1024 * 1024;
/// Upper bound for the pipelining phase.
const PIPELINING_TIMEOUT: Duration = Duration::from_secs(30);

/// A client that pipelines `get big` (a 512 KiB reply each) without ever reading: the
/// server must stop parsing (and so reading) once its output backs up, so that its
/// memory stays bounded however long the client goes on, and it must keep serving
/// others meanwhile. The server's RSS is sampled all along (and its peak, VmHWM, read at
/// the end), while the client writes until its writes stay blocked.
#[test]
fn client_pipelining_without_reading_does_not_grow_server_memory() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-m", "64"])?;
    let pid = server.pid().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let mut other = RawClient::connect(server.addr())?;
    let mut set = format!("set big 0 0 {PIPELINED_VALUE_BYTES}\r\n").into_bytes();
    set.resize(set.len() + PIPELINED_VALUE_BYTES, b'v');
    set.extend_from_slice(b"\r\n");
    assert_eq!(other.request(&set, b"\r\n")?, b"STORED\r\n");
    assert_eq!(
        other.request(b"set small 0 0 2\r\nok\r\n", b"\r\n")?,
        b"STORED\r\n"
    );
    let rss_before_kib = vm_rss_kib(pid)?;
    let hwm_before_kib = proc_status_kib(pid, "VmHWM")?;

    let mut stream = TcpStream::connect(server.addr())?;
    stream.set_nonblocking(true)?;
    let request = b"get big\r\n";
    let chunk: Vec<u8> = request.repeat(64 * 1024 / request.len());
    let mut chunk_sent = 0usize;
    let mut sent_bytes = 0u64;
    let mut rss_peak_kib = rss_before_kib;
    let mut blocked_since: Option<Instant> = None;
    let started = Instant::now();
    loop {
        rss_peak_kib = rss_peak_kib.max(vm_rss_kib(pid)?);
        if rss_peak_kib > rss_before_kib + PIPELINING_RSS_GROWTH_MAX_KIB {
            break; // Judged below; no need to let the server grow further.
        }
        let requested_reply_bytes =
            sent_bytes / request.len() as u64 * PIPELINED_VALUE_BYTES as u64;
        if blocked_since.is_some_and(|since| since.elapsed() >= WRITES_BLOCKED_FOR)
            && requested_reply_bytes >= REQUESTED_REPLY_BYTES_MIN
        {
            break;
        }
        if started.elapsed() >= PIPELINING_TIMEOUT {
            break;
        }
        match stream.write(&chunk[chunk_sent..]) {
            Ok(written) => {
                sent_bytes += written as u64;
                chunk_sent = (chunk_sent + written) % chunk.len();
                blocked_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                blocked_since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let hwm_after_kib = proc_status_kib(pid, "VmHWM")?;
    let requests_sent = sent_bytes / request.len() as u64;
    println!(
        "{requests_sent} gets pipelined ({} MiB of replies asked for) in {:?}; server RSS \
         {rss_before_kib} KiB before, peak sampled {rss_peak_kib} KiB, VmHWM \
         {hwm_before_kib} -> {hwm_after_kib} KiB",
        (requests_sent * PIPELINED_VALUE_BYTES as u64) >> 20,
        started.elapsed()
    );
    assert!(
        rss_peak_kib <= rss_before_kib + PIPELINING_RSS_GROWTH_MAX_KIB,
        "server RSS grew from {rss_before_kib} KiB to {rss_peak_kib} KiB for a client \
         that does not read"
    );
    // The peak between samples too.
    assert!(
        hwm_after_kib <= hwm_before_kib.max(rss_before_kib) + PIPELINING_RSS_GROWTH_MAX_KIB,
        "server peak RSS went from {hwm_before_kib} KiB to {hwm_after_kib} KiB"
    );
    assert!(
        blocked_since.is_some_and(|since| since.elapsed() >= WRITES_BLOCKED_FOR),
        "the client's writes never stayed blocked for {WRITES_BLOCKED_FOR:?} within \
         {PIPELINING_TIMEOUT:?}: the server kept reading requests it cannot answer \
         ({requests_sent} sent)"
    );
    assert!(
        requests_sent * PIPELINED_VALUE_BYTES as u64 >= REQUESTED_REPLY_BYTES_MIN,
        "only {requests_sent} requests were sent: not enough to tell a bounded server"
    );
    // The server is still serving others meanwhile.
    assert_eq!(other.request(b"version\r\n", b"\r\n")?, version_reply());
    assert_eq!(
        other.request(b"get small\r\n", b"END\r\n")?,
        b"VALUE small 0 2\r\nok\r\nEND\r\n"
    );
    // And the client that did not read gets whole, correct replies once it does.
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let header = format!("VALUE big 0 {PIPELINED_VALUE_BYTES}\r\n");
    let mut reply = vec![0u8; header.len() + PIPELINED_VALUE_BYTES + b"\r\nEND\r\n".len()];
    stream.read_exact(&mut reply)?;
    assert_eq!(&reply[..header.len()], header.as_bytes());
    assert!(reply[header.len()..header.len() + PIPELINED_VALUE_BYTES]
        .iter()
        .all(|b| *b == b'v'));
    assert_eq!(
        &reply[header.len() + PIPELINED_VALUE_BYTES..],
        b"\r\nEND\r\n"
    );
    Ok(())
}
