//! Servers that `fogbench reproduce` starts and stops: fogcached in each configuration and
//! Debian's memcached (with or without extstore), each on a free loopback port.
//!
//! Every started server is owned by a [`LaunchedServer`], whose `Drop` kills and reaps
//! the process, so that an experiment that fails half-way leaves nothing running.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Which program a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    Fogcached,
    Memcached,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Fogcached => "fogcached",
            ServerKind::Memcached => "memcached",
        }
    }
}

/// Where the programs are.
#[derive(Debug, Clone)]
pub struct Programs {
    pub fogcached: PathBuf,
    pub memcached: PathBuf,
}

impl Programs {
    /// `fogcached`: the explicit path, else the one next to this executable (cargo puts
    /// both binaries in `target/<profile>/`), else `fogcached` on `PATH`. `memcached`:
    /// the explicit path, else `/usr/bin/memcached`, else `memcached` on `PATH`.
    pub fn locate(
        fogcached: Option<PathBuf>,
        memcached: Option<PathBuf>,
    ) -> anyhow::Result<Programs> {
        let fogcached = match fogcached {
            Some(path) => path,
            None => {
                let sibling = std::env::current_exe()
                    .ok()
                    .and_then(|exe| exe.parent().map(|dir| dir.join("fogcached")))
                    .filter(|path| path.is_file());
                match sibling {
                    Some(path) => path,
                    None => find_on_path("fogcached").context(
                        "no fogcached next to fogbench nor on PATH; build it \
                         (cargo build --release -p server) or pass --fogcached PATH",
                    )?,
                }
            }
        };
        let memcached = match memcached {
            Some(path) => path,
            None if Path::new("/usr/bin/memcached").is_file() => {
                PathBuf::from("/usr/bin/memcached")
            }
            None => find_on_path("memcached").context(
                "memcached is not installed (Debian: apt-get install memcached); \
                 or pass --memcached PATH",
            )?,
        };
        for path in [&fogcached, &memcached] {
            if !path.is_file() {
                bail!("{} is not a file", path.display());
            }
        }
        Ok(Programs {
            fogcached,
            memcached,
        })
    }

    pub fn path(&self, kind: ServerKind) -> &Path {
        match kind {
            ServerKind::Fogcached => &self.fogcached,
            ServerKind::Memcached => &self.memcached,
        }
    }

    /// The first line `-V` / `--version` prints, for the report.
    pub fn version(&self, kind: ServerKind) -> String {
        let flag = match kind {
            ServerKind::Fogcached => "--version",
            ServerKind::Memcached => "-V",
        };
        Command::new(self.path(kind))
            .arg(flag)
            .stdin(Stdio::null())
            .output()
            .ok()
            .and_then(|out| {
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .next()
                    .map(str::to_owned)
            })
            .filter(|line| !line.is_empty())
            .unwrap_or_else(|| format!("{} (version unknown)", kind.name()))
    }
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

/// How to start one server; the port and listen address are added at launch.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub kind: ServerKind,
    pub args: Vec<String>,
}

impl ServerSpec {
    pub fn new(kind: ServerKind, args: &[&str]) -> ServerSpec {
        ServerSpec {
            kind,
            args: args.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// The command line as a reader of the report would type it (port left out).
    pub fn display(&self) -> String {
        let mut line = String::from(self.kind.name());
        for arg in &self.args {
            line.push(' ');
            line.push_str(arg);
        }
        line
    }
}

/// A running server, killed and reaped when dropped.
pub struct LaunchedServer {
    child: Child,
    pub addr: SocketAddr,
    pub spec: ServerSpec,
    stderr_path: PathBuf,
}

/// How long a server may take to answer `version` after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Port races (another process takes the port between probe and bind) are retried.
const START_ATTEMPTS: usize = 5;

impl LaunchedServer {
    /// Starts `spec` on a free loopback port and waits until it answers `version`.
    /// The server's stderr goes to `log_dir/<label>.stderr`.
    pub fn start(
        programs: &Programs,
        spec: &ServerSpec,
        label: &str,
        log_dir: &Path,
    ) -> anyhow::Result<LaunchedServer> {
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(programs, spec, label, log_dir) {
                Ok(server) => return Ok(server),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no start attempt was made")))
            .with_context(|| format!("starting {label}: {}", spec.display()))
    }

    fn start_once(
        programs: &Programs,
        spec: &ServerSpec,
        label: &str,
        log_dir: &Path,
    ) -> anyhow::Result<LaunchedServer> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let stderr_path = log_dir.join(format!("{label}.stderr"));
        let stderr = std::fs::File::create(&stderr_path)
            .with_context(|| format!("creating {}", stderr_path.display()))?;
        let mut command = Command::new(programs.path(spec.kind));
        command
            .args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
            .args(&spec.args);
        if spec.kind == ServerKind::Memcached && running_as_root() {
            // memcached refuses to run as root unless it is told which user to be.
            command.args(["-u", "root"]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("spawning {}", programs.path(spec.kind).display()))?;
        let mut server = LaunchedServer {
            child,
            addr,
            spec: spec.clone(),
            stderr_path,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().context("polling the server")? {
                let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
                bail!("exited at start ({status}): {}", log.trim());
            }
            if let Ok(version) = self.version() {
                if version.starts_with("VERSION ") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("did not answer `version` within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn version(&self) -> anyhow::Result<String> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(b"version\r\n")?;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 256];
        while !reply.ends_with(b"\r\n") && reply.len() < 4096 {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&chunk[..n]);
        }
        Ok(String::from_utf8_lossy(&reply).trim().to_owned())
    }

    /// The server's process id (for its CPU time in `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every numeric field of `stats`.
    pub fn stats(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        fetch_stats(self.addr)
    }

    /// Asks the server to stop, then kills it if it has not within a few seconds.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.terminate();
        Ok(())
    }

    fn terminate(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SIGKILL: the experiment's data directory is thrown away, so a clean stop
        // (which would write DRAM down to the slow tier) would only cost time.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LaunchedServer {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// One `stats` round trip on a fresh connection: every `STAT name <integer>` line.
pub fn fetch_stats(addr: SocketAddr) -> anyhow::Result<BTreeMap<String, u64>> {
    const STATS_MAX_BYTES: usize = 1024 * 1024;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr} for stats"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"stats\r\n")?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut chunk).context("reading stats")?;
        if n == 0 {
            bail!("{addr} closed the connection during stats");
        }
        reply.extend_from_slice(&chunk[..n]);
        if reply.len() > STATS_MAX_BYTES {
            bail!("stats reply of {addr} larger than {STATS_MAX_BYTES} bytes");
        }
    }
    let mut stats = BTreeMap::new();
    for line in String::from_utf8_lossy(&reply).lines() {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("STAT") {
            continue;
        }
        if let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            if let Ok(value) = value.parse::<u64>() {
                stats.insert(name.to_owned(), value);
            }
        }
    }
    Ok(stats)
}

fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("probing for a free port")?;
    Ok(listener.local_addr()?.port())
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("Uid:"))
                .and_then(|line| line.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}
