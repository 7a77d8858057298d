//! memcached's process-level start-up options on the real binary: `-d` (the command
//! returns when the server listens, or fails with the reason), `-P`, `-u`, `-r`, `-k`,
//! `-L`, the unix socket (`-s`, `-a`) and the port file named by
//! `MEMCACHED_PORT_FILENAME`. Each server is stopped by
//! the test (SIGTERM, then SIGKILL if it lingers).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::launcher::{parse_port_file, ListenPort, Transport};
use testkit::{fogcached_binary, skip, stat, ClosedPort, RawClient, ServerProcess};

const WAIT: Duration = Duration::from_secs(15);

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("fc-startup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server process by PID (a daemon is not our child), killed on drop.
struct Pid(i32);

impl Pid {
    fn alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.0)).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.0))
                .unwrap_or_default()
                .contains(") Z ")
    }

    /// SIGTERM, then waits (bounded) until it is gone.
    fn terminate(&self) -> bool {
        // SAFETY: kill(2) on a PID this test started.
        unsafe { libc::kill(self.0, libc::SIGTERM) };
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if !self.alive() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// A field of `/proc/<pid>/status`.
fn status_field(pid: u32, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

impl Drop for Pid {
    fn drop(&mut self) {
        if self.alive() && !self.terminate() {
            // SAFETY: kill(2) on a PID this test started.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

fn fogcached() -> Command {
    Command::new(fogcached_binary().unwrap())
}

fn accepting(port: u16) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Starts a foreground server with `args` (plus a data directory in `dir`) through the
/// launcher: on a port of its own, read from its port file.
fn start(dir: &Path, args: &[&str], env: &[(&str, &OsStr)]) -> ServerProcess {
    let data = dir.join("data");
    let mut all = vec!["--data-dir", data.to_str().unwrap()];
    all.extend_from_slice(args);
    ServerProcess::fogcached_with_env(&all, env).unwrap()
}

fn version_of(port: u16) -> String {
    let mut client = RawClient::connect(([127, 0, 0, 1], port).into()).unwrap();
    String::from_utf8(client.request(b"version\r\n", b"\r\n").unwrap()).unwrap()
}

fn stop(server: ServerProcess) {
    assert!(
        server.stop().unwrap().success(),
        "the server did not stop cleanly on SIGTERM"
    );
}

/// Waits (bounded) for the port file `path` and reads it.
fn wait_for_port_file(path: &Path) -> Vec<ListenPort> {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "no port file {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    parse_port_file(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `-d` returns 0 once the daemon listens; the daemon leads its own session, found its
/// relative data directory although it changed to `/`, wrote `-P`'s PID file, and
/// removes it at a clean stop.
#[test]
fn a_daemon_returns_once_it_listens_and_keeps_its_pid_file() {
    let dir = Scratch::new("daemon");
    let port_file = dir.0.join("ports");
    let output = fogcached()
        .current_dir(&dir.0)
        .args(["-d", "-P", "fc.pid", "-p", "0", "-l", "127.0.0.1"])
        .args(["--data-dir", "data", "--slow-size", "8m"])
        .env("MEMCACHED_PORT_FILENAME", &port_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fogcached -d: {} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // Written before the daemon reports that it listens: there when -d returns.
    let ports = parse_port_file(&std::fs::read_to_string(&port_file).unwrap()).unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    let port = ports[0].port;
    assert!(accepting(port), "the daemon listens when -d returns");
    let pid_text = std::fs::read_to_string(dir.0.join("fc.pid")).unwrap();
    let daemon = Pid(pid_text.trim().parse().unwrap());
    assert!(daemon.alive());
    assert!(version_of(port).starts_with("VERSION "));
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", daemon.0)).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    assert_eq!(
        fields[3],
        daemon.0.to_string(),
        "the daemon leads its session"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/cwd", daemon.0)).unwrap(),
        PathBuf::from("/")
    );
    assert!(dir.0.join("data").join("slow-tier.pool").is_file());
    assert!(daemon.terminate());
    assert!(
        !dir.0.join("fc.pid").exists(),
        "a clean stop removes the PID file"
    );
}

/// A daemon that cannot start says why, in the exit status and on stderr of the
/// command that started it.
#[test]
fn a_daemon_that_cannot_listen_fails_with_the_reason() {
    let dir = Scratch::new("daemon-fail");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let output = fogcached()
        .args([
            "-d",
            "-p",
            &port.to_string(),
            "-l",
            "127.0.0.1",
            "--slow-size",
            "0",
        ])
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(71), "{stderr}");
    assert!(stderr.contains("failed to listen"), "{stderr}");
}

/// The port file memcached writes for harnesses: one `TCP INET: <port>` line per socket,
/// naming the port the kernel picked for `-p 0`, which is this server's own (its `stats`
/// pid is the child's).
#[test]
fn the_port_file_names_the_listening_port() {
    let dir = Scratch::new("portfile");
    let port_file = dir.0.join("ports");
    let mut child = fogcached()
        .args([
            "-p",
            "0",
            "-l",
            "127.0.0.1",
            "--slow-size",
            "0",
            "--data-dir",
        ])
        .arg(dir.0.join("data"))
        .env("MEMCACHED_PORT_FILENAME", &port_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = Pid(child.id() as i32);
    // Written (whole, by a rename) once the server listens: a harness waits for the
    // file, as this does, and never probes a port.
    let ports = wait_for_port_file(&port_file);
    let text = std::fs::read_to_string(&port_file).unwrap();
    assert_eq!(
        ports,
        [ListenPort {
            transport: Transport::Tcp,
            ipv6: false,
            port: ports[0].port
        }],
        "{text:?}"
    );
    assert_eq!(text, format!("TCP INET: {}\n", ports[0].port));
    assert_ne!(ports[0].port, 0);
    let mut client = RawClient::connect(([127, 0, 0, 1], ports[0].port).into()).unwrap();
    let stats = client.stats("").unwrap();
    assert_eq!(stat(&stats, "pid"), Some(child.id().to_string().as_str()));
    assert!(pid.terminate(), "the server did not stop on SIGTERM");
    assert!(child.wait().unwrap().success());
}

/// `-u` as root: the server runs as that user (after opening its ports and pool) and
/// still serves.
#[test]
fn user_switch_drops_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip!(
            "user_switch_drops_root",
            "-u switches only when started as root"
        );
        return;
    }
    let dir = Scratch::new("user");
    let server = start(&dir.0, &["-u", "nobody", "--slow-size", "8m"], &[]);
    let pid = server.pid().unwrap();
    // The switch comes after the ports accept (they are opened as root): wait for it.
    let deadline = Instant::now() + WAIT;
    let mut uids = status_field(pid, "Uid");
    while uids.split_whitespace().any(|uid| uid == "0") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        uids = status_field(pid, "Uid");
    }
    assert!(
        uids.split_whitespace().all(|uid| uid == "65534"),
        "Uid: {uids}"
    );
    assert!(version_of(server.port()).starts_with("VERSION "));
    stop(server);
}

/// `-u` naming no user is refused with memcached's exit code.
#[test]
fn an_unknown_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip!(
            "an_unknown_user_is_refused",
            "-u is looked up only when started as root"
        );
        return;
    }
    let dir = Scratch::new("nouser");
    let output = fogcached()
        .args(["-p", "0", "-l", "127.0.0.1"])
        .args(["-u", "no-such-user-fc", "--slow-size", "0"])
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(67), "{stderr}");
    assert!(stderr.contains("no-such-user-fc"), "{stderr}");
}

/// `-r` raises the core limit, `-k` locks memory, `-L` advises huge pages for the DRAM
/// tier; none of them without its flag.
#[test]
fn core_limit_memory_lock_and_large_pages() {
    let dir = Scratch::new("limits");
    // 6 MiB of DRAM, reserved no further (`-k` keeps it at -m anyway): a mapping of
    // that exact size is the DRAM tier.
    let base = ["-m", "6", "--dram-max", "6", "--slow-size", "8m"];
    let server = start(&dir.0, &[&base[..], &["-r", "-k", "-L"]].concat(), &[]);
    let pid = server.pid().unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    let mut soft_hard = core.split_whitespace().skip(4);
    assert_eq!(
        soft_hard.next(),
        soft_hard.next(),
        "-r: soft limit raised to the hard one: {core}"
    );
    // The port accepts once bound, and `mlockall` follows the bind (as in memcached): on
    // a loaded machine the lock may still be faulting pages in when the port answers, so
    // wait for it (bounded) rather than read VmLck once.
    let locked_kb = || -> u64 {
        status_field(pid, "VmLck")
            .trim_end_matches(" kB")
            .parse()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while locked_kb() < 6 * 1024 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let locked_kb = locked_kb();
    assert!(locked_kb >= 6 * 1024, "-k: VmLck {locked_kb} kB");
    assert!(
        dram_mapping_flags(pid, 6 * 1024).contains(" hg"),
        "-L: MADV_HUGEPAGE"
    );
    stop(server);

    let server = start(&dir.0, &base, &[]);
    let pid = server.pid().unwrap();
    assert_eq!(status_field(pid, "VmLck"), "0 kB");
    assert!(!dram_mapping_flags(pid, 6 * 1024).contains(" hg"));
    stop(server);
}

/// The `VmFlags` of the process's mapping of exactly `size_kb` (the DRAM tier).
fn dram_mapping_flags(pid: u32, size_kb: u64) -> String {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut in_mapping = false;
    for line in smaps.lines() {
        if let Some(size) = line.strip_prefix("Size:") {
            in_mapping = size.trim() == format!("{size_kb} kB");
        } else if in_mapping {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return format!(" {}", flags.trim());
            }
        }
    }
    panic!("no mapping of {size_kb} kB in /proc/{pid}/smaps");
}

/// Starts a daemon with `args` (it returns once listening) and gives its PID.
fn start_daemon(dir: &Path, args: &[&str]) -> Pid {
    let pid_file = dir.join("fc.pid");
    let output = fogcached()
        .arg("-d")
        .arg("-P")
        .arg(&pid_file)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--slow-size", "8m"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fogcached -d {args:?}: {} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Pid(std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap())
}

/// Sends `request` on a unix-socket connection and reads until `terminator`.
fn unix_request(stream: &mut UnixStream, request: &[u8], terminator: &[u8]) -> String {
    stream.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply.ends_with(terminator) {
        let read = stream.read(&mut chunk).unwrap();
        assert!(
            read > 0,
            "the server closed after {:?}",
            String::from_utf8_lossy(&reply)
        );
        reply.extend_from_slice(&chunk[..read]);
    }
    String::from_utf8(reply).unwrap()
}

/// `-s` listens on a unix socket with `-a`'s permissions and, as memcached, on no TCP
/// port; every protocol works over it, `stats settings` names it, and a clean stop
/// removes the socket file.
#[test]
fn a_unix_socket_serves_every_protocol_and_replaces_tcp() {
    let dir = Scratch::new("unix");
    let socket = dir.0.join("fc.sock");
    // Held closed by the test: a server that tried to listen on it would fail to start.
    let closed = ClosedPort::new().unwrap();
    let port = closed.port();
    let daemon = start_daemon(
        &dir.0,
        &[
            "-s",
            socket.to_str().unwrap(),
            "-a",
            "760",
            "-p",
            &port.to_string(),
        ],
    );
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o760);
    assert!(!accepting(port), "-s disables TCP, as in memcached");
    drop(closed);

    let mut stream = UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        unix_request(&mut stream, b"set k 7 0 5\r\nhello\r\n", b"\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        unix_request(&mut stream, b"get k\r\n", b"END\r\n"),
        "VALUE k 7 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(
        unix_request(&mut stream, b"mg k v f\r\n", b"hello\r\n"),
        "VA 5 f7\r\nhello\r\n"
    );
    // Binary protocol (its own connection: the first byte picks the protocol): a GET of
    // "k" (magic 0x80, opcode 0x00, key length 1).
    let mut binary = UnixStream::connect(&socket).unwrap();
    binary
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut binary_get = vec![0x80, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 1];
    binary_get.extend_from_slice(&[0; 12]);
    binary_get.push(b'k');
    binary.write_all(&binary_get).unwrap();
    let mut header = [0u8; 24];
    binary.read_exact(&mut header).unwrap();
    assert_eq!(
        (header[0], header[6], header[7]),
        (0x81, 0, 0),
        "binary GET hit"
    );
    let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let mut body = vec![0u8; body_len];
    binary.read_exact(&mut body).unwrap();
    assert!(body.ends_with(b"hello"));

    let settings = unix_request(&mut stream, b"stats settings\r\n", b"END\r\n");
    assert!(
        settings.contains(&format!("STAT domain_socket {}\r\n", socket.display())),
        "{settings}"
    );
    assert!(settings.contains("STAT umask 760\r\n"), "{settings}");
    drop(stream);

    assert!(daemon.terminate());
    assert!(
        !socket.exists(),
        "a clean stop removes the unix socket file"
    );
}

/// A socket file left by a server that died is replaced; any other file at the path
/// is refused (exit 71, the reason on stderr) and left alone; a mask that is not octal
/// permission bits is a usage error.
#[test]
fn a_stale_unix_socket_is_replaced_and_other_files_are_never_removed() {
    let dir = Scratch::new("unix-stale");
    let socket = dir.0.join("fc.sock");
    // A socket file nobody listens on, as a killed server leaves it.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let daemon = start_daemon(&dir.0, &["-s", socket.to_str().unwrap()]);
    let mut stream = UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(unix_request(&mut stream, b"version\r\n", b"\r\n").starts_with("VERSION "));
    assert_eq!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700,
        "memcached's default mask"
    );
    drop(stream);
    assert!(daemon.terminate());

    let in_the_way = dir.0.join("not-a-socket");
    std::fs::write(&in_the_way, b"precious").unwrap();
    let output = fogcached()
        .arg("-s")
        .arg(&in_the_way)
        .args(["--slow-size", "8m"])
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(71), "{stderr}");
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(std::fs::read(&in_the_way).unwrap(), b"precious");

    for mask in ["800", "1777", "rw"] {
        let output = fogcached()
            .args(["-s", socket.to_str().unwrap(), "-a", mask])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "-a {mask}: {stderr}");
        assert!(stderr.contains("-a"), "-a {mask}: {stderr}");
    }
}
