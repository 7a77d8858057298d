//! systemd readiness (`Type=notify`) on the real binary: with `$NOTIFY_SOCKET` set,
//! fogcached sends `READY=1` once its port accepts connections, and `STOPPING=1` when it
//! is told to stop, as sd_notify(3) would (a datagram to the socket; no libsystemd).
//! Also checks that `packaging/fogcached.service` starts the binary the way the test
//! does.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use testkit::fogcached_binary;
use testkit::launcher::parse_port_file;

/// A scratch directory and a server process, both removed on drop.
struct Started {
    child: Child,
    dir: PathBuf,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn datagram(socket: &UnixDatagram) -> anyhow::Result<String> {
    let mut buffer = [0u8; 4096];
    let n = socket.recv(&mut buffer)?;
    Ok(String::from_utf8_lossy(&buffer[..n]).into_owned())
}

fn check_notifications(abstract_socket: bool) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "fc-notify-{}-{abstract_socket}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (socket, notify_socket) = if abstract_socket {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("fc-notify-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        (UnixDatagram::bind_addr(&addr)?, format!("@{name}"))
    } else {
        let path = dir.join("notify.sock");
        (UnixDatagram::bind(&path)?, path.display().to_string())
    };
    socket.set_read_timeout(Some(Duration::from_secs(20)))?;
    let port_file = dir.join("ports");
    let child = Command::new(fogcached_binary()?)
        .args(["-p", "0", "-l", "127.0.0.1", "--data-dir"])
        .arg(dir.join("data"))
        .env("NOTIFY_SOCKET", &notify_socket)
        .env("MEMCACHED_PORT_FILENAME", &port_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let started = Started {
        child,
        dir: dir.clone(),
    };
    let ready = datagram(&socket)?;
    // The port accepts at the moment READY=1 arrives (and its port file, written before
    // READY=1, names it): nothing is retried here.
    let ports = parse_port_file(&std::fs::read_to_string(&port_file)?)?;
    anyhow::ensure!(ports.len() == 1, "port file: {ports:?}");
    let addr = SocketAddr::from(([127, 0, 0, 1], ports[0].port));
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok(),
        "READY=1 came before the port accepted"
    );
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(
        ready.contains(&format!("MAINPID={}", started.child.id())),
        "{ready:?}"
    );
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(started.child.id() as i32, libc::SIGTERM) };
    let stopping = datagram(&socket)?;
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    Ok(())
}

#[test]
fn ready_is_sent_once_the_port_accepts_and_stopping_at_a_stop() -> anyhow::Result<()> {
    check_notifications(false)
}

#[test]
fn an_abstract_notify_socket_works_too() -> anyhow::Result<()> {
    check_notifications(true)
}

/// The shipped unit is a `Type=notify` service that starts the binary with memcached's
/// flags and without `-d` (systemd supervises the process itself).
#[test]
fn the_shipped_unit_is_type_notify() -> anyhow::Result<()> {
    let unit = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/fogcached.service"),
    )?;
    let setting = |name: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(setting("Type"), "notify");
    let exec = setting("ExecStart");
    assert!(exec.starts_with("/usr/bin/fogcached "), "{exec}");
    assert!(!exec.split(' ').any(|a| a == "-d"), "{exec}");
    assert_eq!(setting("NotifyAccess"), "main");
    // A reload re-reads the TLS certificates (SIGHUP, as `refresh_certs`).
    assert_eq!(setting("ExecReload"), "/bin/kill -HUP $MAINPID");
    // /run/fogcached for -s sockets and -P pid files: the rest of /run is read-only
    // under ProtectSystem=strict.
    assert_eq!(setting("RuntimeDirectory"), "fogcached");
    assert_eq!(setting("ProtectSystem"), "strict");
    // The documentation it names is one the install steps put there.
    let documentation = setting("Documentation");
    let doc_file = documentation
        .split(' ')
        .find_map(|uri| uri.strip_prefix("file:"))
        .unwrap_or_else(|| panic!("no file: documentation in {documentation:?}"));
    let operations = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )?;
    assert!(
        operations.contains(&format!("docs/operations.md {doc_file}")),
        "docs/operations.md's install steps do not install {doc_file}"
    );

    // systemd's own checker, on a copy that points at the binary under test.
    const ANALYZE: &str = "/usr/bin/systemd-analyze";
    if !std::path::Path::new(ANALYZE).exists() {
        testkit::skip!(
            "the_shipped_unit_is_type_notify",
            "systemd-analyze is not installed"
        );
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("fc-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let copy = dir.join("fogcached.service");
    let binary = fogcached_binary()?;
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/fogcached", &binary.display().to_string()),
    )?;
    let run = testkit::run_bounded(
        Command::new(ANALYZE).arg("verify").arg(&copy),
        Duration::from_secs(60),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.success && run.output.trim().is_empty(),
        "{}",
        run.output
    );
    Ok(())
}
