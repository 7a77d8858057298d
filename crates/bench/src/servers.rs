//! Servers that `fogbench reproduce` starts and stops: fogcached in each configuration and
//! Debian's memcached (with or without extstore), each on a loopback port the kernel
//! picks, started by the `launcher` crate (testkit's too).
//!
//! Every started server is owned by a [`LaunchedServer`], whose `Drop` kills and reaps
//! the process, so that an experiment that fails half-way leaves nothing running.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

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
    server: launcher::Server,
    pub addr: SocketAddr,
    pub spec: ServerSpec,
}

/// How long a server may take to write its port file after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(20);

impl LaunchedServer {
    /// Starts `spec` on a loopback port the kernel picks (through the workspace's one
    /// launcher, which reads the port back from the server's port file: no other process
    /// can hold it, no probe can reach another server) and waits until it listens. The
    /// server's stdout and stderr go to `log_dir/<label>.stderr`.
    pub fn start(
        programs: &Programs,
        spec: &ServerSpec,
        label: &str,
        log_dir: &Path,
    ) -> anyhow::Result<LaunchedServer> {
        let mut launch = launcher::Launch::new(programs.path(spec.kind))?;
        launch
            .kind(match spec.kind {
                ServerKind::Fogcached => launcher::Kind::Fogcached,
                ServerKind::Memcached => launcher::Kind::Memcached,
            })
            .args(&spec.args)
            .output(launcher::Output::File {
                path: log_dir.join(format!("{label}.stderr")),
                append: false,
            })
            .startup_timeout(START_TIMEOUT);
        let server = launch
            .start()
            .with_context(|| format!("starting {label}: {}", spec.display()))?;
        Ok(LaunchedServer {
            addr: server.addr(),
            server,
            spec: spec.clone(),
        })
    }

    /// The server's process id (for its CPU time in `/proc`); 0 once it was reaped.
    pub fn pid(&self) -> u32 {
        self.server.pid().unwrap_or(0)
    }

    /// Every numeric field of `stats`.
    pub fn stats(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        fetch_stats(self.addr)
    }

    /// Stops the server. SIGKILL: the experiment's data directory is thrown away, so a
    /// clean stop (which would write DRAM down to the slow tier) would only cost time.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.server.kill();
        Ok(())
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
