//! Starts a server process (fogcached, Debian's memcached) on a loopback port the kernel
//! picks, and learns that port from the server itself. The one launcher of the workspace:
//! testkit (every test's servers) and fogbench (`fogbench reproduce`) both start their
//! servers here; it links neither the engine nor any test code, so fogbench can ship it.
//!
//! Why not "find a free port, then start the server on it": between the probe that saw
//! the port free and the server's bind, anything else on the machine (another test, a
//! benchmark, another engineer's server) can take it. The server then fails to start, or
//! worse, a readiness probe reaches the other process and the test talks to a server
//! that is not its own. Here the server binds port 0 (memcached spells it `-p -1`: its
//! `-p 0` turns TCP off), so the kernel hands it a port nobody holds, and the server
//! writes that port to the file `MEMCACHED_PORT_FILENAME` names, once it listens, by a
//! rename (a reader never sees half of it). That file is the readiness signal: nothing
//! connects anywhere to find out, so nothing can reach the wrong server.
//!
//! A program that must be told its port in advance (a proxy named in a configuration
//! file, a server restarted on the port a proxy names) gets a [`PortReservation`]
//! instead; a port that must refuse connections, a [`ClosedPort`].

use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

/// The environment variable memcached (and fogcached) write their bound ports to.
pub const PORT_FILE_ENV: &str = "MEMCACHED_PORT_FILENAME";
/// How long a server may take, by default, from its start to its port file.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How much of a server's output an error quotes (its last bytes).
const OUTPUT_TAIL_BYTES: usize = 16 * 1024;
/// How often the start-up wait looks for the port file.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long an error waits for the output of a server that exited to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(1);
/// Scratch directory names tried before giving up (a stale one of an earlier process
/// with the same pid is skipped).
const SCRATCH_ATTEMPTS: u32 = 1000;

/// Which command-line dialect a program speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fogcached,
    /// Debian's memcached: `-p -1` for a kernel-picked port, and `-u root` when run as
    /// root (it refuses root otherwise).
    Memcached,
}

impl Kind {
    /// By the program's file name: `memcached` is memcached, anything else fogcached.
    pub fn of(program: &Path) -> Kind {
        if program.file_name().is_some_and(|name| name == "memcached") {
            Kind::Memcached
        } else {
            Kind::Fogcached
        }
    }

    /// The `-p` value that binds a port the kernel picks.
    fn any_port(self) -> &'static str {
        match self {
            Kind::Fogcached => "0",
            // memcached's `-p 0` disables TCP; -1 binds port 0 (memcached.c).
            Kind::Memcached => "-1",
        }
    }
}

/// Where a started server's stdout and stderr go.
#[derive(Debug, Clone)]
pub enum Output {
    /// stdout dropped; stderr copied to this process's stderr as it comes (a test's
    /// output shows it), its last bytes kept for error messages.
    Inherit,
    /// Both into `path`: truncated first, or appended to.
    File { path: PathBuf, append: bool },
}

/// A server to start: the program, its arguments and environment. The launcher adds
/// `-p <port> -l 127.0.0.1 -U 0` (and memcached's `-u root` when root) before the
/// caller's arguments, so the first port the server lists is that loopback one; more
/// `-l` entries may follow (each is listed, in order, in [`Server::ports`]).
pub struct Launch {
    program: PathBuf,
    kind: Kind,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    output: Output,
    startup_timeout: Duration,
    /// A reserved port instead of one the kernel picks.
    port: Option<u16>,
    scratch: Scratch,
}

impl Launch {
    /// A launch of `program`, with a scratch directory of its own (for the port file and
    /// whatever else the caller puts there: [`Launch::scratch_dir`]), removed with the
    /// [`Server`].
    pub fn new(program: impl AsRef<Path>) -> anyhow::Result<Launch> {
        let program = program.as_ref().to_owned();
        Ok(Launch {
            kind: Kind::of(&program),
            program,
            args: Vec::new(),
            env: Vec::new(),
            output: Output::Inherit,
            startup_timeout: STARTUP_TIMEOUT,
            port: None,
            scratch: Scratch::new()?,
        })
    }

    /// Overrides the dialect [`Kind::of`] guessed from the file name.
    pub fn kind(&mut self, kind: Kind) -> &mut Launch {
        self.kind = kind;
        self
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Launch {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    pub fn env(&mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Launch {
        self.env
            .push((name.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Starts the server without `name` in its environment.
    pub fn env_remove(&mut self, name: impl AsRef<OsStr>) -> &mut Launch {
        self.env.push((name.as_ref().to_owned(), None));
        self
    }

    pub fn output(&mut self, output: Output) -> &mut Launch {
        self.output = output;
        self
    }

    /// How long [`Launch::start`] waits for the port file ([`STARTUP_TIMEOUT`] unless
    /// set; a server under valgrind needs longer).
    pub fn startup_timeout(&mut self, timeout: Duration) -> &mut Launch {
        self.startup_timeout = timeout;
        self
    }

    /// Listens on `reservation`'s port instead of one the kernel picks (for a program
    /// that must know the port before the server starts). Keep the reservation for as
    /// long as the port must stay this server's.
    pub fn on_port(&mut self, reservation: &PortReservation) -> &mut Launch {
        self.port = Some(reservation.port());
        self
    }

    /// A directory of this launch's own, removed when the [`Server`] is dropped.
    pub fn scratch_dir(&self) -> &Path {
        &self.scratch.0
    }

    /// Starts the server and waits (at most the start-up timeout) until its port file
    /// names the ports it listens on. Errors say what the server printed when it exited
    /// or never wrote the file.
    pub fn start(self) -> anyhow::Result<Server> {
        let port_file = self.scratch.0.join("ports");
        let port = self.port.map(|port| port.to_string());
        let mut command = Command::new(&self.program);
        command.args([
            "-p",
            port.as_deref().unwrap_or(self.kind.any_port()),
            "-l",
            "127.0.0.1",
            "-U",
            "0",
        ]);
        if self.kind == Kind::Memcached && is_root() {
            // memcached refuses to run as root unless told which user to be.
            command.args(["-u", "root"]);
        }
        command.args(&self.args);
        for (name, value) in &self.env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command.env(PORT_FILE_ENV, &port_file).stdin(Stdio::null());
        let stderr_pipe = match &self.output {
            Output::Inherit => {
                command.stdout(Stdio::null()).stderr(Stdio::piped());
                true
            }
            Output::File { path, append } => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(*append)
                    .truncate(!*append)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                command
                    .stdout(Stdio::from(file.try_clone()?))
                    .stderr(Stdio::from(file));
                false
            }
        };
        let output_start = match &self.output {
            Output::File { path, .. } => std::fs::metadata(path).map_or(0, |m| m.len()),
            Output::Inherit => 0,
        };
        let program = self.program.display().to_string();
        let mut child = command
            .spawn()
            .with_context(|| format!("spawning {program}"))?;
        let printed = match child.stderr.take() {
            Some(pipe) if stderr_pipe => Printed::Tee(Tee::spawn(pipe)),
            _ => match &self.output {
                Output::File { path, .. } => Printed::File {
                    path: path.clone(),
                    from: output_start,
                },
                Output::Inherit => Printed::Nothing,
            },
        };
        let mut server = Server {
            child: Some(child),
            ports: Vec::new(),
            printed,
            program,
            scratch: self.scratch,
        };
        server.ports = server.wait_for_port_file(&port_file, self.startup_timeout)?;
        Ok(server)
    }
}

/// A started server, killed (SIGKILL) and reaped on drop, its scratch directory removed.
pub struct Server {
    child: Option<Child>,
    ports: Vec<ListenPort>,
    printed: Printed,
    program: String,
    scratch: Scratch,
}

impl Server {
    fn wait_for_port_file(
        &mut self,
        port_file: &Path,
        timeout: Duration,
    ) -> anyhow::Result<Vec<ListenPort>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                bail!(
                    "{} exited during start-up ({status}) before it listened; it printed:\n{}",
                    self.program,
                    self.printed.text_after_exit()
                );
            }
            match std::fs::read_to_string(port_file) {
                Ok(text) => {
                    return parse_port_file(&text).with_context(|| {
                        format!("{}'s port file {}", self.program, port_file.display())
                    })
                }
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(error).with_context(|| format!("reading {}", port_file.display()))
                }
            }
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "{} did not write its port file within {timeout:?} (it does once it \
                     listens); it printed:\n{}",
                    self.program,
                    self.printed.text_after_exit()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The first TCP port the server listens on (the launcher's `-l 127.0.0.1`); 0 when
    /// it listens on none (a unix socket, `-s`).
    pub fn port(&self) -> u16 {
        self.tcp_ports().next().unwrap_or(0)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port()))
    }

    /// Every socket the server listed, in its order (the order of the `-l` entries).
    pub fn ports(&self) -> &[ListenPort] {
        &self.ports
    }

    /// The TCP ports among [`Server::ports`], in order.
    pub fn tcp_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports
            .iter()
            .filter(|listen| listen.transport == Transport::Tcp)
            .map(|listen| listen.port)
    }

    /// The UDP ports among [`Server::ports`] (`-U`), in order.
    pub fn udp_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports
            .iter()
            .filter(|listen| listen.transport == Transport::Udp)
            .map(|listen| listen.port)
    }

    /// The process id, while the process has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The launch's scratch directory (removed on drop).
    pub fn scratch_dir(&self) -> &Path {
        &self.scratch.0
    }

    /// What the server printed so far, its last [`OUTPUT_TAIL_BYTES`] (nothing when its
    /// output went elsewhere).
    pub fn printed(&self) -> String {
        self.printed.text()
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the server.
    pub fn signal(&self, signal: i32) -> anyhow::Result<()> {
        let pid = self.pid().ok_or_else(|| anyhow!("server is not running"))?;
        let pid = libc::pid_t::try_from(pid).context("pid out of range")?;
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child,
        // not reaped yet (we hold its Child), so it cannot have been recycled.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error()).context("kill");
        }
        Ok(())
    }

    /// The exit status if the server has exited (it is then reaped: no pid any more).
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            bail!("server already reaped");
        };
        let status = child.try_wait().context("polling the server")?;
        if status.is_some() {
            self.child = None;
        }
        Ok(status)
    }

    /// Waits at most `timeout` for the server to exit: its status, or `None` if it still
    /// runs.
    pub fn wait_timeout(&mut self, timeout: Duration) -> anyhow::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// SIGKILL and reap (nothing if it already exited).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One line of a port file: `TCP INET: 11211`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenPort {
    pub transport: Transport,
    pub ipv6: bool,
    pub port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// Parses memcached's port file: one `<TCP|UDP> <INET|INET6>: <port>` line per socket.
pub fn parse_port_file(text: &str) -> anyhow::Result<Vec<ListenPort>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let parsed = (|| {
                let (kind, port) = line.split_once(':')?;
                let (transport, family) = kind.trim().split_once(' ')?;
                let transport = match transport {
                    "TCP" => Transport::Tcp,
                    "UDP" => Transport::Udp,
                    _ => return None,
                };
                let ipv6 = match family.trim() {
                    "INET" => false,
                    "INET6" => true,
                    _ => return None,
                };
                let port = port.trim().parse().ok()?;
                Some(ListenPort {
                    transport,
                    ipv6,
                    port,
                })
            })();
            parsed.ok_or_else(|| anyhow!("unexpected port file line {line:?}"))
        })
        .collect()
}

/// True when this process runs as root (memcached then needs `-u`).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A loopback TCP port held for a program that must be told its port before it starts
/// (a proxy's configuration file names it; a server restarted on the port a proxy knows).
///
/// It is a socket bound to `127.0.0.1:<port>` with `SO_REUSEADDR` that never listens.
/// While it lives, Linux hands the port to nobody else: not to a bind of port 0, not as a
/// client's ephemeral port, not to a bind without `SO_REUSEADDR`. Yet a server that sets
/// `SO_REUSEADDR` (memcached, fogcached, nutcracker and Go's listeners all do) can bind
/// and listen on it: sockets that all set it may share a port while at most one listens.
/// So the port cannot be taken between the reservation and the server's bind, nor
/// between a kill and a restart. The one gap left: another program given this very port
/// number explicitly, with `SO_REUSEADDR`, could bind it too.
pub struct PortReservation {
    _socket: OwnedFd,
    port: u16,
}

impl PortReservation {
    pub fn new() -> std::io::Result<PortReservation> {
        let (socket, port) = bound_socket(true)?;
        Ok(PortReservation {
            _socket: socket,
            port,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }
}

/// A loopback TCP port where nothing listens, and nothing can while this lives: a socket
/// bound without `SO_REUSEADDR` that never listens, so connecting is refused (for tests
/// of an unreachable server).
pub struct ClosedPort {
    _socket: OwnedFd,
    port: u16,
}

impl ClosedPort {
    pub fn new() -> std::io::Result<ClosedPort> {
        let (socket, port) = bound_socket(false)?;
        Ok(ClosedPort {
            _socket: socket,
            port,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }
}

/// A TCP socket bound to `127.0.0.1:0` (the kernel picks the port), not listening.
fn bound_socket(reuse_addr: bool) -> std::io::Result<(OwnedFd, u16)> {
    let last_error = std::io::Error::last_os_error;
    // SAFETY: socket(2) has no memory-safety preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: `fd` is a descriptor socket(2) just returned, owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    if reuse_addr {
        let one: libc::c_int = 1;
        // SAFETY: a live socket and a pointer to a live c_int of the length passed.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(last_error());
        }
    }
    let mut addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a live socket and a pointer to a live sockaddr_in of the length passed.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&addr as *const libc::sockaddr_in).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(last_error());
    }
    // SAFETY: getsockname writes at most `len` bytes into the live sockaddr_in.
    let rc = unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(last_error());
    }
    Ok((socket, u16::from_be(addr.sin_port)))
}

/// A directory of one launch's own under the temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir();
        for _ in 0..SCRATCH_ATTEMPTS {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("fogcached-launch-{}-{n}", std::process::id()));
            // create_dir, not create_dir_all: a directory that exists (left by an
            // earlier process that had this pid) is someone else's.
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Scratch(dir)),
                Err(error) if error.kind() == ErrorKind::AlreadyExists => continue,
                Err(error) => {
                    return Err(error).with_context(|| format!("creating {}", dir.display()))
                }
            }
        }
        bail!(
            "no free scratch directory name under {} after {SCRATCH_ATTEMPTS} tries",
            base.display()
        )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a server's output can be read back from, for errors and [`Server::printed`].
enum Printed {
    Tee(Tee),
    /// The caller's file, from the offset where this server's output began.
    File {
        path: PathBuf,
        from: u64,
    },
    Nothing,
}

impl Printed {
    fn text(&self) -> String {
        match self {
            Printed::Tee(tee) => tee.text(),
            Printed::File { path, from } => read_tail(path, *from).unwrap_or_default(),
            Printed::Nothing => String::new(),
        }
    }

    /// [`Printed::text`] once the process exited: waits (bounded) until the copying
    /// thread has read everything.
    fn text_after_exit(&self) -> String {
        if let Printed::Tee(tee) = self {
            tee.drain(DRAIN_WAIT);
        }
        self.text()
    }
}

/// Copies a server's stderr to ours, keeping its last bytes.
struct Tee {
    kept: Arc<Mutex<Vec<u8>>>,
    thread: JoinHandle<()>,
}

impl Tee {
    fn spawn(mut pipe: impl Read + Send + 'static) -> Tee {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&kept);
        let thread = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                let n = match pipe.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(n) => n,
                    Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return,
                };
                // Our stderr gone is no reason to stop draining the server's.
                let _ = std::io::stderr().write_all(&chunk[..n]);
                if let Ok(mut kept) = sink.lock() {
                    kept.extend_from_slice(&chunk[..n]);
                    if kept.len() > 2 * OUTPUT_TAIL_BYTES {
                        let excess = kept.len() - OUTPUT_TAIL_BYTES;
                        kept.drain(..excess);
                    }
                }
            }
        });
        Tee { kept, thread }
    }

    fn drain(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn text(&self) -> String {
        let kept = self
            .kept
            .lock()
            .map(|kept| kept.clone())
            .unwrap_or_default();
        let start = kept.len().saturating_sub(OUTPUT_TAIL_BYTES);
        String::from_utf8_lossy(&kept[start..]).into_owned()
    }
}

/// The last [`OUTPUT_TAIL_BYTES`] of `path` past offset `from`.
fn read_tail(path: &Path, from: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = from.max(len.saturating_sub(OUTPUT_TAIL_BYTES as u64));
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn port_files_of_memcached_and_fogcached_parse() {
        let ports = parse_port_file("TCP INET: 11211\nTCP INET6: 11212\nUDP INET: 9\n").unwrap();
        assert_eq!(
            ports,
            [
                ListenPort {
                    transport: Transport::Tcp,
                    ipv6: false,
                    port: 11211
                },
                ListenPort {
                    transport: Transport::Tcp,
                    ipv6: true,
                    port: 11212
                },
                ListenPort {
                    transport: Transport::Udp,
                    ipv6: false,
                    port: 9
                },
            ]
        );
        assert_eq!(parse_port_file("").unwrap(), []);
        assert!(parse_port_file("TCP INET: x\n").is_err());
        assert!(parse_port_file("SCTP INET: 1\n").is_err());
    }

    /// A reserved port is refused to a bind without SO_REUSEADDR and never handed out
    /// for port 0, yet a server that sets SO_REUSEADDR (std's listener does) listens on
    /// it.
    #[test]
    fn a_reserved_port_is_kept_for_the_server_it_is_meant_for() {
        let reservation = PortReservation::new().unwrap();
        let err = bind_plain(reservation.port()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AddrInUse);
        let server = TcpListener::bind(reservation.addr()).unwrap();
        let client = TcpStream::connect(reservation.addr()).unwrap();
        let (accepted, _) = server.accept().unwrap();
        assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
    }

    #[test]
    fn a_closed_port_refuses_connections_and_binds() {
        let closed = ClosedPort::new().unwrap();
        let err = TcpStream::connect(closed.addr()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
        let err = TcpListener::bind(closed.addr()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AddrInUse);
    }

    /// Binds `127.0.0.1:port` without SO_REUSEADDR.
    fn bind_plain(port: u16) -> std::io::Result<OwnedFd> {
        // SAFETY: as in `bound_socket`.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0);
        // SAFETY: a descriptor just returned, owned by nobody else.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: a live socket and a live sockaddr_in of the length passed.
        let rc = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(socket)
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}
