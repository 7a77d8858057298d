//! memcached 1.6.18's command line on the real binary: every flag `memcached -h` lists
//! is in `fogcached --help`, and each is served, accepted with a warning, or refused
//! with its reason; `-b` reaches listen(2), `-o sock_cookie_id` the socket's mark, `-B`
//! binds the protocol, `-F` refuses `flush_all` and `-vv` logs requests, each side by
//! side with Debian's memcached where it has them.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use testkit::{fogcached_binary, run_bounded, skip, stat, RawClient, ServerProcess};

const MEMCACHED: &str = "/usr/bin/memcached";
const SS: &str = "/usr/bin/ss";

/// The flags of `memcached -h` (1.6.18), for a machine without memcached.
const MEMCACHED_SHORT_FLAGS: &str = "pUsaAldrumMckvhiVPfnLDtRCbBISFXWYeZoN";

/// Runs fogcached with `args` to its exit (bounded): for lines it must refuse, or
/// `--help`.
fn fogcached_run(args: &[&str]) -> testkit::ToolRun {
    let binary = fogcached_binary().expect("fogcached binary");
    let data_dir = std::env::temp_dir().join(format!("fc-flags-{}", std::process::id()));
    let run = run_bounded(
        Command::new(binary)
            .args(["-p", "0", "--slow-size", "0", "--data-dir"])
            .arg(&data_dir)
            .args(args),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("fogcached {args:?}: {e:#}"));
    let _ = std::fs::remove_dir_all(&data_dir);
    run
}

/// A started fogcached's start-up messages: it serves (answers `version`), then stops.
fn startup_warnings(args: &[&str]) -> String {
    let mut full = vec!["--slow-size", "0"];
    full.extend_from_slice(args);
    let server = ServerProcess::fogcached_capturing_stderr(&full)
        .unwrap_or_else(|e| panic!("fogcached {args:?} did not start: {e:#}"));
    let mut client = RawClient::connect(server.addr()).expect("connect");
    assert!(client
        .request(b"version\r\n", b"\r\n")
        .expect("version")
        .starts_with(b"VERSION "));
    server.stderr_text()
}

/// The short flags `memcached -h` lists (`-X, --long` or `-X <arg>` at a line's start).
fn memcached_short_flags() -> BTreeSet<char> {
    let Ok(run) = run_bounded(Command::new(MEMCACHED).arg("-h"), Duration::from_secs(10)) else {
        return MEMCACHED_SHORT_FLAGS.chars().collect();
    };
    run.output
        .lines()
        .filter_map(|line| {
            let mut chars = line.chars();
            (chars.next() == Some('-'))
                .then(|| chars.next())
                .flatten()
                .filter(|c| c.is_ascii_alphabetic())
                .filter(|_| matches!(chars.next(), Some(',' | ' ')))
        })
        .collect()
}

#[test]
fn every_memcached_flag_is_described_and_served_warned_or_refused() {
    let help = fogcached_run(&["--help"]);
    assert!(help.success, "{}", help.output);
    let flags = memcached_short_flags();
    assert!(flags.len() >= 37, "memcached -h parsed to {flags:?}");
    for flag in &flags {
        assert!(
            help.output.contains(&format!("-{flag}, "))
                || help.output.contains(&format!("-{flag} <")),
            "-{flag} (memcached's) is missing from fogcached --help"
        );
    }
    assert!(help.output.contains("-vv"), "-vv is not described");

    // Implemented: the server starts with them and says nothing about them.
    let quiet = startup_warnings(&[
        "-b",
        "64",
        "-B",
        "auto",
        "-F",
        "-o",
        "no_slab_automove,slab_sizes=100-200-300,lru_crawler_sleep=10,lru_crawler_tocrawl=5",
    ]);
    assert!(!quiet.contains("warning"), "{quiet}");

    // Accepted with a warning that says why ignoring them is harmless.
    let warned = startup_warnings(&[
        "-N",
        "2",
        "-o",
        "no_chunked_items,inline_ascii_resp,no_inline_ascii_resp,maxconns_fast,no_hashexpand",
    ]);
    for name in [
        "-N has no effect",
        "-o no_chunked_items has no effect",
        "-o inline_ascii_resp has no effect",
        "-o no_inline_ascii_resp has no effect",
        "-o maxconns_fast has no effect",
        "-o no_hashexpand has no effect",
    ] {
        assert!(
            warned.contains(&format!("fogcached: warning: {name}: ")),
            "no warning {name:?} in:\n{warned}"
        );
    }

    // Refused with the reason and what to use instead (exit 64, sysexits' EX_USAGE).
    for (args, reason) in [
        (&["-e", "/dev/shm/memcached.file"][..], "--slow-path"),
        (&["-o", "ext_path=/mnt/ssd/extstore:64g"], "--slow-size"),
        (
            &["-o", "no_maxconns_fast"],
            "rejects connections over -c at once",
        ),
        (&["-B", "udp"], "should be one of auto, binary, or ascii"),
        (
            &["-N", "0"],
            "Maximum number of NAPI IDs must be greater than 0",
        ),
        (&["-o", "frobnicate"], "Illegal suboption \"frobnicate\""),
    ] {
        let run = fogcached_run(args);
        assert_eq!(run.code, Some(64), "{args:?}: {}", run.output);
        assert!(run.output.contains(reason), "{args:?}: {}", run.output);
    }

    // -i prints a license and exits 0, as memcached's does.
    let license = fogcached_run(&["-i"]);
    assert_eq!(license.code, Some(0), "{}", license.output);
    assert!(license.output.contains("MIT"), "{}", license.output);
    if std::path::Path::new(MEMCACHED).exists() {
        let theirs = run_bounded(Command::new(MEMCACHED).arg("-i"), Duration::from_secs(10))
            .expect("memcached -i");
        assert_eq!(theirs.code, Some(0));
    }
}

/// The backlog a listening socket has, as `ss -ltn` shows it (its Send-Q column).
fn listen_backlog(port: u16) -> Option<(u32, String)> {
    let run = run_bounded(
        Command::new(SS).args(["-Hltne", &format!("sport = :{port}")]),
        Duration::from_secs(10),
    )
    .ok()?;
    let line = run.output.lines().next()?.to_owned();
    let backlog = line.split_whitespace().nth(2)?.parse().ok()?;
    Some((backlog, line))
}

#[test]
fn the_backlog_reaches_listen_and_sock_cookie_id_marks_the_socket() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-b", "77", "-o", "sock_cookie_id=7"])?;
    let mut client = RawClient::connect(server.addr())?;
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "tcp_backlog"), Some("77"));
    let default = ServerProcess::fogcached(&[])?;
    let settings = RawClient::connect(default.addr())?.stats("settings")?;
    assert_eq!(stat(&settings, "tcp_backlog"), Some("1024"));
    if !std::path::Path::new(SS).exists() {
        skip!(
            "the_backlog_reaches_listen_and_sock_cookie_id_marks_the_socket",
            "no ss (Debian package iproute2): the kernel's view of the socket is unchecked"
        );
        return Ok(());
    }
    let (backlog, line) = listen_backlog(server.port()).expect("ss lists the port");
    assert_eq!(backlog, 77, "{line}");
    let (backlog, _) = listen_backlog(default.port()).expect("ss lists the port");
    assert_eq!(backlog, 1024);
    // SO_MARK needs CAP_NET_ADMIN, and ss shows the mark only to root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(line.contains("fwmark:0x7"), "{line}");
    }
    // memcached passes -b to listen(2) the same way.
    if let Ok(memcached) = ServerProcess::memcached(&["-b", "77"]) {
        let (backlog, line) = listen_backlog(memcached.port()).expect("ss lists the port");
        assert_eq!(backlog, 77, "{line}");
    }
    Ok(())
}

/// A binary `get` of `foo`.
fn binary_get_foo() -> Vec<u8> {
    let mut request = vec![0x80, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 3];
    request.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0]);
    request.extend_from_slice(b"foo");
    request
}

/// A binary request without key or body (`version` 0x0b, `flush` 0x08, `flushq` 0x18).
fn binary_request(opcode: u8, opaque: u8) -> Vec<u8> {
    let mut request = vec![0x80, opcode, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, opaque];
    request.extend_from_slice(&[0; 8]);
    request
}

/// What `-B ascii` and `-B binary` do with the other protocol, on `server`.
fn bound_replies(
    ascii: &ServerProcess,
    binary: &ServerProcess,
) -> anyhow::Result<(Vec<u8>, bool, Vec<u8>)> {
    // -B ascii: a binary request is a line of bytes like any other; it ends in ERROR at
    // the next newline, and the connection goes on.
    let mut client = RawClient::connect(ascii.addr())?;
    let mut request = binary_get_foo();
    request.extend_from_slice(b"\nversion\r\n");
    client.send(&request)?;
    let mut ascii_reply = client.read_until(b"ERROR\r\n")?;
    ascii_reply.extend(client.read_until(b"\r\n")?);
    // -B binary: a text command fails the magic byte and the connection closes unanswered.
    let mut client = RawClient::connect(binary.addr())?;
    client.send(b"get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")?;
    let closed = client.is_closed_by_peer();
    let mut client = RawClient::connect(binary.addr())?;
    client.send(&binary_request(0x0b, 1))?;
    let version = client.read_exact(24)?;
    Ok((ascii_reply, closed, version))
}

#[test]
fn a_bound_protocol_refuses_the_other_as_memcached_does() -> anyhow::Result<()> {
    let ascii = ServerProcess::fogcached(&["-B", "ascii"])?;
    let binary = ServerProcess::fogcached(&["-B", "binary"])?;
    let (ascii_reply, closed, version) = bound_replies(&ascii, &binary)?;
    let text = String::from_utf8_lossy(&ascii_reply).into_owned();
    assert!(text.starts_with("ERROR\r\nVERSION "), "{text:?}");
    assert!(closed, "-B binary answered a text command");
    assert_eq!(&version[..2], &[0x81, 0x0b], "a binary version is served");
    let settings = RawClient::connect(ascii.addr())?.stats("settings")?;
    assert_eq!(stat(&settings, "binding_protocol"), Some("ascii"));
    // (A text `stats` cannot reach the binary-bound server.)
    let Ok(memcached_ascii) = ServerProcess::memcached(&["-B", "ascii"]) else {
        skip!(
            "a_bound_protocol_refuses_the_other_as_memcached_does",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let memcached_binary = ServerProcess::memcached(&["-B", "binary"])?;
    let (their_ascii, their_closed, their_version) =
        bound_replies(&memcached_ascii, &memcached_binary)?;
    assert!(String::from_utf8_lossy(&their_ascii).starts_with("ERROR\r\nVERSION "));
    assert_eq!(closed, their_closed);
    assert_eq!(&version[..2], &their_version[..2]);
    Ok(())
}

/// `-F`'s text and binary replies, `cmd_flush` after them, and whether `foo` survived.
fn refused_flushes(server: &ServerProcess) -> anyhow::Result<(String, Vec<u8>, String, bool)> {
    let mut client = RawClient::connect(server.addr())?;
    client.request(b"set foo 0 0 1\r\nx\r\n", b"\r\n")?;
    client.send(b"flush_all\r\nflush_all 10\r\nflush_all noreply\r\nflush_all x\r\nflush_all 1 2 3\r\nmn\r\n")?;
    let text = String::from_utf8_lossy(&client.read_until(b"MN\r\n")?).into_owned();
    let mut binary = RawClient::connect(server.addr())?;
    let mut requests = binary_request(0x08, 1);
    requests.extend(binary_request(0x18, 2));
    requests.extend(binary_request(0x0a, 3));
    binary.send(&requests)?;
    // Two "Auth failure." responses (24 + 13 bytes each), then the noop's header.
    let replies = binary.read_exact(2 * 37 + 24)?;
    let flushes = stat(&client.stats("")?, "cmd_flush")
        .unwrap_or("")
        .to_owned();
    let kept = client
        .request(b"get foo\r\n", b"END\r\n")?
        .starts_with(b"VALUE foo");
    Ok((text, replies, flushes, kept))
}

#[test]
fn disabled_flush_all_is_refused_as_memcached_refuses_it() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-F"])?;
    let (text, replies, flushes, kept) = refused_flushes(&server)?;
    assert_eq!(
        text,
        "CLIENT_ERROR flush_all not allowed\r\nCLIENT_ERROR flush_all not allowed\r\n\
         CLIENT_ERROR flush_all not allowed\r\nERROR\r\nMN\r\n"
    );
    // Status 0x20 (authentication error) with memcached's text, even for FLUSHQ.
    for (response, opaque) in [(&replies[..37], 1u8), (&replies[37..74], 2)] {
        assert_eq!(
            &response[..2],
            &[0x81, if opaque == 1 { 0x08 } else { 0x18 }]
        );
        assert_eq!(&response[6..8], &[0x00, 0x20], "{response:?}");
        assert_eq!(response[15], opaque);
        assert_eq!(&response[24..], b"Auth failure.");
    }
    assert_eq!(&replies[74..76], &[0x81, 0x0a]);
    assert_eq!(
        flushes, "4",
        "the text flush_all commands are counted, as memcached's"
    );
    assert!(kept, "a refused flush_all removed an item");
    let settings = RawClient::connect(server.addr())?.stats("settings")?;
    assert_eq!(stat(&settings, "flush_enabled"), Some("no"));

    let Ok(memcached) = ServerProcess::memcached(&["-F"]) else {
        skip!(
            "disabled_flush_all_is_refused_as_memcached_refuses_it",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let theirs = refused_flushes(&memcached)?;
    assert_eq!(text, theirs.0);
    assert_eq!(replies, theirs.1);
    assert_eq!(flushes, theirs.2);
    assert_eq!(kept, theirs.3);
    Ok(())
}

/// The requests of the `-vv` comparison: no `noreply` (memcached logs what it
/// suppresses, fogcached cannot), no `stats` values.
const LOGGED_SCRIPT: &[u8] = b"set foo 0 0 3\r\nbar\r\nget foo nokey\r\ngets foo\r\n\
    delete nokey\r\nincr foo 1\r\nmg foo v\r\nmn\r\nms k 2\r\nhi\r\nstats detail on\r\n\
    bogus\r\nstats\r\nmn\r\n";

/// The `-vv` lines of the connection whose requests start with `set foo`, from that
/// line on, with its descriptor number replaced by `N`.
fn logged_lines(stderr: &str) -> Vec<String> {
    let start = stderr
        .lines()
        .position(|l| l.ends_with(" set foo 0 0 3") && l.starts_with('<'))
        .unwrap_or_else(|| panic!("no request logged in:\n{stderr}"));
    let first = stderr.lines().nth(start).unwrap_or("");
    let fd = first
        .trim_start_matches('<')
        .split(' ')
        .next()
        .unwrap_or("");
    stderr
        .lines()
        .skip(start)
        .filter_map(|line| {
            let rest = line
                .strip_prefix(&format!("<{fd} "))
                .map(|r| format!("<N {r}"))
                .or_else(|| {
                    line.strip_prefix(&format!(">{fd} "))
                        .map(|r| format!(">N {r}"))
                })?;
            Some(rest)
        })
        .filter(|l| !l.contains("VERSION") && !l.contains("connection closed"))
        .collect()
}

fn run_logged(server: &ServerProcess) -> anyhow::Result<Vec<String>> {
    let mut client = RawClient::connect(server.addr())?;
    client.send(LOGGED_SCRIPT)?;
    client.read_until(b"END\r\nMN\r\n")?;
    client.request(b"version\r\n", b"\r\n")?;
    // The log is written before the replies are sent; the version's line is the last.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !server.stderr_text().contains(" version\n") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(logged_lines(&server.stderr_text()))
}

#[test]
fn very_verbose_logs_requests_as_memcached_and_never_credentials() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached_capturing_stderr(&["-vv"])?;
    let ours = run_logged(&server)?;
    for line in [
        "<N get foo nokey",
        ">N sending key foo",
        ">N END",
        "<N mg foo v",
        ">N MN",
        ">N CLIENT_ERROR cannot increment or decrement non-numeric value",
    ] {
        assert!(
            ours.iter().any(|l| l == line),
            "{line:?} not logged: {ours:#?}"
        );
    }
    assert!(
        !ours.iter().any(|l| l.starts_with(">N STAT")),
        "stats values are not logged: {ours:#?}"
    );

    // -v logs no request.
    let quiet = ServerProcess::fogcached_capturing_stderr(&["-v"])?;
    let mut client = RawClient::connect(quiet.addr())?;
    client.request(b"get foo\r\n", b"END\r\n")?;
    assert!(
        !quiet.stderr_text().contains(" get foo"),
        "{}",
        quiet.stderr_text()
    );

    // A client's credentials (-Y) never reach the log, nor anything it sends before
    // it authenticated.
    let dir = std::env::temp_dir().join(format!("fc-vv-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let users = dir.join("users");
    std::fs::write(&users, "alice:s3cr3t-pw\n")?;
    let users_arg = users.to_str().unwrap_or_default().to_owned();
    let guarded = ServerProcess::fogcached_capturing_stderr(&["-vv", "-Y", &users_arg])?;
    let mut client = RawClient::connect(guarded.addr())?;
    assert_eq!(
        client.request(b"alice s3cr3t-pw\r\n", b"\r\n")?,
        b"CLIENT_ERROR unauthenticated\r\n"
    );
    let mut client = RawClient::connect(guarded.addr())?;
    assert_eq!(
        client.request(b"set a 0 0 15\r\nalice s3cr3t-pw\r\n", b"\r\n")?,
        b"STORED\r\n"
    );
    assert_eq!(client.request(b"get after\r\n", b"\r\n")?, b"END\r\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !guarded.stderr_text().contains(" get after") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            guarded.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = guarded.stderr_text();
    assert!(!log.contains("s3cr3t"), "a password was logged:\n{log}");
    assert!(log.contains(">"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);

    let Ok(memcached) = ServerProcess::memcached_capturing_stderr(&["-vv"]) else {
        skip!(
            "very_verbose_logs_requests_as_memcached_and_never_credentials",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let theirs = run_logged(&memcached)?;
    assert_eq!(ours, theirs);
    Ok(())
}
