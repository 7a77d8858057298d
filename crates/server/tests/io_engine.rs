//! `--io-engine`: the epoll and io_uring event loops serve the same bytes over TCP and
//! the unix socket, under pipelining, many connections and values spanning many receive
//! buffers; the loop in use shows in `stats settings` and in the `-v` start-up log; a
//! name that is not a loop is refused. (The rest of the suite runs under each loop too:
//! `scripts/test.sh` runs the server's tests a second time with FOGCACHED_IO_ENGINE=epoll.)

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use server::worker::probe_io_uring;
use testkit::{
    fogcached_binary, fogcached_refusal, set_request, skip, stat, RawClient, ServerProcess,
};

const WAIT: Duration = Duration::from_secs(15);

/// The loops to test here: epoll always, io_uring where this kernel allows it (else a
/// counted skip naming the reason).
fn engines(test: &str) -> Vec<(&'static str, &'static str)> {
    let mut engines = vec![("epoll", "epoll")];
    match probe_io_uring() {
        Ok(_) => engines.push(("io-uring", "io_uring")),
        Err(reason) => skip!(test, "io_uring half: {reason}"),
    }
    engines
}

/// Deterministic value bytes for `key` of `len` bytes (no `\r\n` inside, so a reply is
/// easy to check byte for byte).
fn value_for(key: &str, len: usize) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    (0..len)
        .map(|i| b'a' + ((seed as usize + i * 7) % 26) as u8)
        .collect()
}

fn get_reply(hits: &[(&str, &[u8])]) -> Vec<u8> {
    let mut reply = Vec::new();
    for (key, value) in hits {
        reply.extend_from_slice(format!("VALUE {key} 0 {}\r\n", value.len()).as_bytes());
        reply.extend_from_slice(value);
        reply.extend_from_slice(b"\r\n");
    }
    reply.extend_from_slice(b"END\r\n");
    reply
}

#[test]
fn both_loops_serve_the_same_replies_and_report_themselves() {
    for (flag, name) in engines("both_loops_serve_the_same_replies_and_report_themselves") {
        let server =
            ServerProcess::fogcached(&["--io-engine", flag, "--slow-size", "0", "-t", "2"])
                .unwrap_or_else(|e| panic!("--io-engine {flag}: {e:#}"));
        let mut client = RawClient::connect(server.addr()).unwrap();
        let settings = client.stats("settings").unwrap();
        assert_eq!(
            stat(&settings, "io_engine"),
            Some(name),
            "--io-engine {flag}"
        );

        // Values from one byte to most of a megabyte: the large ones arrive in many
        // receive buffers and leave in partial sends.
        let sizes = [1usize, 100, 16 * 1024 - 40, 40 * 1024, 700 * 1024];
        for (i, len) in sizes.iter().enumerate() {
            let key = format!("{flag}:v{i}");
            let value = value_for(&key, *len);
            assert_eq!(
                client.request(&set_request(&key, &value), b"\r\n").unwrap(),
                b"STORED\r\n",
                "--io-engine {flag}: set of {len} bytes"
            );
            let reply = client
                .request(format!("get {key}\r\n").as_bytes(), b"END\r\n")
                .unwrap();
            assert!(
                reply == get_reply(&[(&key, &value)]),
                "--io-engine {flag}: get of {len} bytes returned {} bytes",
                reply.len()
            );
        }

        // 300 pipelined requests in one write: every reply, in order.
        let mut batch = Vec::new();
        let mut expected = Vec::new();
        for i in 0..100 {
            let key = format!("{flag}:p{i}");
            let value = value_for(&key, 10 + i * 37);
            batch.extend_from_slice(&set_request(&key, &value));
            expected.extend_from_slice(b"STORED\r\n");
            batch.extend_from_slice(format!("get {key} {flag}:missing\r\n").as_bytes());
            expected.extend_from_slice(&get_reply(&[(&key, &value)]));
            batch.extend_from_slice(format!("delete {flag}:missing\r\n").as_bytes());
            expected.extend_from_slice(b"NOT_FOUND\r\n");
        }
        client.send(&batch).unwrap();
        let reply = client.read_exact(expected.len()).unwrap();
        assert!(
            reply == expected,
            "--io-engine {flag}: pipelined replies differ"
        );

        // `quit` after a request: its reply still arrives, then the close.
        client.send(b"get nothing\r\nquit\r\n").unwrap();
        assert_eq!(client.read_until(b"END\r\n").unwrap(), b"END\r\n");
        assert!(
            client.is_closed_by_peer(),
            "--io-engine {flag}: quit closes"
        );
        server.stop().unwrap();
    }
}

#[test]
fn many_connections_at_once_each_get_their_own_replies() {
    const CONNECTIONS: usize = 24;
    const ROUNDS: usize = 40;
    for (flag, _) in engines("many_connections_at_once_each_get_their_own_replies") {
        let server =
            ServerProcess::fogcached(&["--io-engine", flag, "--slow-size", "0", "-t", "2"])
                .unwrap_or_else(|e| panic!("--io-engine {flag}: {e:#}"));
        let addr = server.addr();
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                std::thread::spawn(move || {
                    let mut client = RawClient::connect(addr).unwrap();
                    client.set_read_timeout(WAIT).unwrap();
                    for round in 0..ROUNDS {
                        // Each round pipelines a set and two gets of this connection's
                        // keys, with a size that differs per connection and round.
                        let key = format!("c{c}:r{round}");
                        let value = value_for(&key, 50 + (c * 997 + round * 311) % 30_000);
                        let mut batch = set_request(&key, &value);
                        batch.extend_from_slice(
                            format!("get {key}\r\nget {key} c{c}:none\r\n").as_bytes(),
                        );
                        client.send(&batch).unwrap();
                        let mut expected = b"STORED\r\n".to_vec();
                        expected.extend_from_slice(&get_reply(&[(&key, &value)]));
                        expected.extend_from_slice(&get_reply(&[(&key, &value)]));
                        let reply = client.read_exact(expected.len()).unwrap();
                        assert!(
                            reply == expected,
                            "connection {c} round {round}: wrong replies"
                        );
                    }
                })
            })
            .collect();
        for client in clients {
            client
                .join()
                .unwrap_or_else(|_| panic!("--io-engine {flag}: a client failed"));
        }
        let mut client = RawClient::connect(addr).unwrap();
        let stats = client.stats("").unwrap();
        assert_eq!(
            stat(&stats, "cmd_set"),
            Some(&*(CONNECTIONS * ROUNDS).to_string())
        );
        assert_eq!(
            stat(&stats, "get_hits"),
            Some(&*(2 * CONNECTIONS * ROUNDS).to_string())
        );
        server.stop().unwrap();
    }
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `-s` with each loop, and `-v` naming the loop at start-up.
#[test]
fn the_unix_socket_works_with_each_loop_and_the_start_up_log_names_it() {
    for (flag, name) in
        engines("the_unix_socket_works_with_each_loop_and_the_start_up_log_names_it")
    {
        let dir = Scratch(
            std::env::temp_dir().join(format!("fc-io-engine-{flag}-{}", std::process::id())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        let socket = dir.0.join("fc.sock");
        let mut child = Command::new(fogcached_binary().unwrap())
            .args(["--io-engine", flag, "--slow-size", "0", "-v", "-s"])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The log line comes before the server listens; read it on a thread so a server
        // that never prints it cannot hang the test.
        let stderr = child.stderr.take().unwrap();
        let (lines_sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines_sender.send(line).is_err() {
                    break;
                }
            }
        });
        let wanted = format!("fogcached: I/O engine {name}");
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        while !seen.contains(&wanted) {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!("--io-engine {flag} -v never said {wanted:?}; it said {seen:?}");
                }
            }
        }
        let mut stream = loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => break stream,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    let _ = child.kill();
                    panic!("--io-engine {flag}: unix socket never accepted: {e}");
                }
            }
        };
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let value = value_for("u", 50_000);
        let mut request = set_request("u", &value);
        request.extend_from_slice(b"get u\r\n");
        stream.write_all(&request).unwrap();
        let mut expected = b"STORED\r\n".to_vec();
        expected.extend_from_slice(&get_reply(&[("u", &value)]));
        let mut reply = vec![0u8; expected.len()];
        stream.read_exact(&mut reply).unwrap();
        assert!(
            reply == expected,
            "--io-engine {flag}: unix socket replies differ"
        );
        // SAFETY: kill(2) on the child this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + WAIT;
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "--io-engine {flag}: no clean stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn auto_chooses_io_uring_exactly_when_the_kernel_allows_it() {
    let server = ServerProcess::fogcached(&["--io-engine", "auto", "--slow-size", "0"]).unwrap();
    let mut client = RawClient::connect(server.addr()).unwrap();
    let settings = client.stats("settings").unwrap();
    let expected = if probe_io_uring().is_ok() {
        "io_uring"
    } else {
        "epoll"
    };
    assert_eq!(stat(&settings, "io_engine"), Some(expected));
    server.stop().unwrap();
}

#[test]
fn a_name_that_is_not_a_loop_is_refused_with_the_valid_ones() {
    let run = |args: &[&str], env: Option<&str>| {
        let run = fogcached_refusal(args, ("FOGCACHED_IO_ENGINE", env)).unwrap();
        (run.code, run.output)
    };
    let (code, stderr) = run(&["--io-engine", "kqueue"], None);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("unknown --io-engine \"kqueue\" (valid: auto, io-uring, epoll)"),
        "{stderr}"
    );
    let (code, stderr) = run(&[], Some("poll"));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("FOGCACHED_IO_ENGINE=\"poll\""), "{stderr}");
}

/// Installs, in the calling thread only, the seccomp filter container runtimes use to
/// forbid io_uring (Docker's default profile does): `io_uring_setup` fails with `EPERM`,
/// every other system call is allowed. Processes this thread starts inherit it.
#[cfg(target_arch = "x86_64")]
fn forbid_io_uring_in_this_thread() -> std::io::Result<()> {
    /// `AUDIT_ARCH_X86_64`: the `arch` a seccomp filter sees for 64-bit x86 calls.
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    /// Offsets in `struct seccomp_data`.
    const NR_OFFSET: u32 = 0;
    const ARCH_OFFSET: u32 = 4;
    let statement = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump_if_equal = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load_word = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut filter = [
        statement(load_word, ARCH_OFFSET),
        // Another architecture's calls (none here) are let through untouched.
        jump_if_equal(AUDIT_ARCH_X86_64, 1, 0),
        statement(ret, libc::SECCOMP_RET_ALLOW),
        statement(load_word, NR_OFFSET),
        jump_if_equal(libc::SYS_io_uring_setup as u32, 0, 1),
        statement(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        statement(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl(2) with plain integer arguments; no_new_privs is what lets an
    // unprivileged thread install a filter.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `program` points at `filter`, both alive for the call; the kernel copies
    // the program.
    let installed = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
        )
    };
    if installed != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Where a container forbids io_uring, `auto` (the default) runs epoll and serves as
/// usual, while an explicit `--io-engine io-uring` refuses to start and says why.
#[test]
fn auto_falls_back_to_epoll_where_io_uring_is_forbidden() {
    const TEST: &str = "auto_falls_back_to_epoll_where_io_uring_is_forbidden";
    #[cfg(not(target_arch = "x86_64"))]
    {
        skip!(TEST, "the seccomp filter here is written for x86_64 only");
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // A thread of its own: the filter stays with it and the servers it starts.
        let checked = std::thread::spawn(|| {
            if let Err(e) = forbid_io_uring_in_this_thread() {
                skip!(TEST, "cannot install a seccomp filter here: {e}");
                return;
            }
            // The filter is in force: the server's own probe now fails.
            let reason = probe_io_uring().expect_err("io_uring_setup still allowed");
            assert!(reason.contains("io_uring_setup failed"), "{reason}");

            let server = ServerProcess::fogcached(&["--slow-size", "0"]).unwrap();
            let mut client = RawClient::connect(server.addr()).unwrap();
            let settings = client.stats("settings").unwrap();
            assert_eq!(stat(&settings, "io_engine"), Some("epoll"));
            let value = value_for("forbidden", 40_000);
            let mut request = set_request("forbidden", &value);
            request.extend_from_slice(b"get forbidden\r\n");
            client.send(&request).unwrap();
            let mut expected = b"STORED\r\n".to_vec();
            expected.extend_from_slice(&get_reply(&[("forbidden", &value)]));
            assert!(client.read_exact(expected.len()).unwrap() == expected);
            server.stop().unwrap();

            let refused = Command::new(fogcached_binary().unwrap())
                .args([
                    "--io-engine",
                    "io-uring",
                    "--slow-size",
                    "0",
                    "-l",
                    "127.0.0.1",
                ])
                .args(["-p", "0"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert!(
                !refused.status.success(),
                "started without io_uring: {stderr}"
            );
            assert!(
                stderr.contains("--io-engine io-uring: io_uring_setup failed"),
                "{stderr}"
            );
        });
        checked.join().expect("the check under the filter failed");
    }
}

/// This kernel's version as (major, minor), from /proc/sys/kernel/osrelease.
fn kernel_version() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The rings run the kernel's completion work deferred, inside the worker's own wait,
/// where the kernel has it (Linux 6.1), and cooperatively when
/// FOGCACHED_IO_URING_TASKRUN=cooperative asks (the set-up of Linux 5.19 to 6.0, which the
/// test suite also runs whole); `-v` says which, and both serve. An unknown value is named
/// and the server runs epoll.
#[test]
fn the_rings_task_work_is_deferred_where_the_kernel_has_it_and_cooperative_on_request() {
    const TEST: &str =
        "the_rings_task_work_is_deferred_where_the_kernel_has_it_and_cooperative_on_request";
    if let Err(reason) = probe_io_uring() {
        skip!(TEST, "io_uring: {reason}");
        return;
    }
    let binary = fogcached_binary().unwrap();
    let binary = binary.to_str().unwrap();
    let log_dir = std::env::temp_dir().join(format!("fogcached-taskrun-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).unwrap();
    let deferred_expected = kernel_version().is_some_and(|version| version >= (6, 1));
    for (asked, expected) in [
        (
            "auto",
            if deferred_expected {
                Some("deferred")
            } else {
                None
            },
        ),
        ("cooperative", Some("cooperative")),
    ] {
        let log = log_dir.join(format!("{asked}.log"));
        let value = std::ffi::OsString::from(asked);
        let server = ServerProcess::start_logging(
            binary,
            &["--io-engine", "io-uring", "--slow-size", "0", "-v"],
            &[("FOGCACHED_IO_URING_TASKRUN", value.as_os_str())],
            Some(&log),
        )
        .unwrap();
        let mut client = RawClient::connect(server.addr()).unwrap();
        let value = value_for(asked, 70_000);
        let mut request = set_request(asked, &value);
        request.extend_from_slice(format!("get {asked}\r\n").as_bytes());
        client.send(&request).unwrap();
        let mut reply = b"STORED\r\n".to_vec();
        reply.extend_from_slice(&get_reply(&[(asked, &value)]));
        assert!(client.read_exact(reply.len()).unwrap() == reply, "{asked}");
        server.stop().unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let said = text
            .lines()
            .find_map(|line| line.strip_prefix("fogcached: io_uring task work "))
            .unwrap_or_else(|| panic!("{asked}: -v never named the task work: {text}"));
        match expected {
            Some(expected) => assert_eq!(said, expected, "{asked}"),
            None => assert!(["deferred", "cooperative"].contains(&said), "{said}"),
        }
    }
    // It serves (under epoll), its reason said before it listens: stopped once it does.
    let log = log_dir.join("lazily.log");
    let mut launch =
        testkit::launch(binary, &["-v", "--io-engine", "auto", "--slow-size", "0"]).unwrap();
    launch
        .env_remove("FOGCACHED_IO_ENGINE")
        .env("FOGCACHED_IO_URING_TASKRUN", "lazily")
        .output(testkit::launcher::Output::File {
            path: log.clone(),
            append: false,
        });
    ServerProcess::launched(launch).unwrap().stop().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("unknown FOGCACHED_IO_URING_TASKRUN=\"lazily\" (valid: auto, cooperative)")
            && stderr.contains("the workers run epoll"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&log_dir);
}
