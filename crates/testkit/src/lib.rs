//! Test support: start `fogcached` (or Debian's `memcached`) on a loopback port the
//! kernel picks (through [`launcher`], shared with fogbench) and talk raw bytes to it.
//!
//! Every wait here is bounded so that a broken server fails a test instead of hanging it.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

/// The delaying proxy of the fog-layer tests (its own crate: fogbench uses it too).
pub use delay_proxy::DelayProxy;
/// The launcher every test server starts through (its own crate: fogbench uses it too).
pub use launcher;
pub use launcher::{ClosedPort, Launch, PortReservation};

mod fuzz_corpus;
mod scratch_dir;
pub use fuzz_corpus::{fuzz_dir, replay_fuzz_corpus};
pub use scratch_dir::ScratchDir;

/// How long `stop` waits after SIGTERM before falling back to SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default read timeout of a [`RawClient`].
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A reply larger than this is a bug in the server or the test, not something to buffer.
const REPLY_MAX_BYTES: usize = 256 * 1024 * 1024;

/// A server process on a loopback port of its own, killed on drop.
///
/// Started by [`launcher::Launch`]: on a port the kernel picks, read back from the
/// server's port file, so no other process can hold the port and every client of the
/// test reaches this server. fogcached gets a `--data-dir` of its own (two servers
/// cannot share a slow-tier pool: the second is refused) unless the test names one; it
/// is removed on drop with the launch's scratch directory.
pub struct ServerProcess {
    server: launcher::Server,
    /// The file the server's stderr goes to when captured (in the scratch directory).
    stderr_file: Option<PathBuf>,
}

/// Where a started server's stdout and stderr go.
#[derive(Clone, Copy)]
enum ServerOutput<'a> {
    /// stdout dropped, stderr the test's own.
    Inherit,
    /// Both into a file of the server's ([`ServerProcess::stderr_text`]), removed on drop.
    Captured,
    /// Both appended to the caller's file, which is kept.
    AppendTo(&'a Path),
}

/// A [`Launch`] of `binary` with `extra_args`, and for fogcached a data directory of its
/// own unless `extra_args` names one: for tests that need more than the `start*`
/// functions (a reserved port, a variable removed from the environment), started with
/// [`ServerProcess::launched`].
pub fn launch(binary: impl AsRef<Path>, extra_args: &[&str]) -> anyhow::Result<Launch> {
    let binary = binary.as_ref();
    let mut launch = Launch::new(binary)?;
    let is_fogcached = binary.file_name().is_some_and(|n| n == "fogcached");
    if is_fogcached && !extra_args.contains(&"--data-dir") {
        let data_dir = launch.scratch_dir().join("data");
        launch.arg("--data-dir").arg(data_dir);
    }
    launch.args(extra_args);
    Ok(launch)
}

/// [`launch`] of the fogcached under test ([`fogcached_binary`]).
pub fn fogcached_launch(extra_args: &[&str]) -> anyhow::Result<Launch> {
    launch(fogcached_binary()?, extra_args)
}

impl ServerProcess {
    /// Starts `binary` with `-p <a port the kernel picks> -l 127.0.0.1 -U 0` plus
    /// `extra_args`, and waits (bounded) until its port file says it listens.
    pub fn start(binary: &str, extra_args: &[&str]) -> anyhow::Result<ServerProcess> {
        Self::start_with_env(binary, extra_args, &[])
    }

    /// [`ServerProcess::start`] with extra environment variables for the server
    /// (e.g. `MEMCACHED_SASL_PWDB`), so tests need not change their own environment.
    pub fn start_with_env(
        binary: &str,
        extra_args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> anyhow::Result<ServerProcess> {
        Self::start_with(binary, extra_args, env, ServerOutput::Inherit)
    }

    /// [`ServerProcess::start`] with the server's stderr kept in a file, read with
    /// [`ServerProcess::stderr_text`] (e.g. the `-vv` log, start-up warnings).
    pub fn start_capturing_stderr(
        binary: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<ServerProcess> {
        Self::start_with(binary, extra_args, &[], ServerOutput::Captured)
    }

    /// [`ServerProcess::fogcached`] with its stderr captured.
    pub fn fogcached_capturing_stderr(extra_args: &[&str]) -> anyhow::Result<ServerProcess> {
        let binary = fogcached_binary()?;
        let binary = binary
            .to_str()
            .ok_or_else(|| anyhow!("fogcached path is not UTF-8: {}", binary.display()))?
            .to_owned();
        Self::start_capturing_stderr(&binary, extra_args)
    }

    /// [`ServerProcess::memcached`] with its stderr captured.
    pub fn memcached_capturing_stderr(extra_args: &[&str]) -> anyhow::Result<ServerProcess> {
        const MEMCACHED: &str = "/usr/bin/memcached";
        if !Path::new(MEMCACHED).exists() {
            bail!("{MEMCACHED} is not installed");
        }
        Self::start_capturing_stderr(MEMCACHED, extra_args)
    }

    /// What the server wrote to stderr so far, if it was started capturing it (else
    /// empty).
    pub fn stderr_text(&self) -> String {
        self.stderr_file
            .as_ref()
            .and_then(|path| std::fs::read(path).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// [`ServerProcess::start_with_env`] with the server's stdout and stderr appended to
    /// the file `log` (the caller's, kept), for tests that read what the server printed.
    pub fn start_logging(
        binary: &str,
        extra_args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
        log: Option<&Path>,
    ) -> anyhow::Result<ServerProcess> {
        let output = log.map_or(ServerOutput::Inherit, ServerOutput::AppendTo);
        Self::start_with(binary, extra_args, env, output)
    }

    fn start_with(
        binary: &str,
        extra_args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
        output: ServerOutput<'_>,
    ) -> anyhow::Result<ServerProcess> {
        let mut launch = launch(binary, extra_args)?;
        for (name, value) in env {
            launch.env(name, value);
        }
        let stderr_file =
            matches!(output, ServerOutput::Captured).then(|| launch.scratch_dir().join("stderr"));
        match (output, &stderr_file) {
            (ServerOutput::Captured, Some(path)) => {
                launch.output(launcher::Output::File {
                    path: path.clone(),
                    append: false,
                });
            }
            (ServerOutput::AppendTo(path), _) => {
                launch.output(launcher::Output::File {
                    path: path.to_owned(),
                    append: true,
                });
            }
            _ => {}
        }
        let server = launch
            .start()
            .with_context(|| format!("starting {binary} {extra_args:?}"))?;
        Ok(ServerProcess {
            server,
            stderr_file,
        })
    }

    /// Starts what `launch` describes (see [`launch`]), its stderr the test's own.
    pub fn launched(launch: Launch) -> anyhow::Result<ServerProcess> {
        Ok(ServerProcess {
            server: launch.start()?,
            stderr_file: None,
        })
    }

    /// Starts fogcached: `$FOGCACHED_BIN`, else `target/{debug,release}/fogcached` next
    /// to the running test executable.
    pub fn fogcached(extra_args: &[&str]) -> anyhow::Result<ServerProcess> {
        Self::fogcached_with_env(extra_args, &[])
    }

    /// [`ServerProcess::fogcached`] with extra environment variables.
    pub fn fogcached_with_env(
        extra_args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> anyhow::Result<ServerProcess> {
        let binary = fogcached_binary()?;
        let binary = binary
            .to_str()
            .ok_or_else(|| anyhow!("fogcached path is not UTF-8: {}", binary.display()))?
            .to_owned();
        Self::start_with_env(&binary, extra_args, env)
    }

    /// Starts Debian's memcached (`/usr/bin/memcached`); Err if it is not installed.
    pub fn memcached(extra_args: &[&str]) -> anyhow::Result<ServerProcess> {
        Self::memcached_with_env(extra_args, &[])
    }

    /// [`ServerProcess::memcached`] with extra environment variables.
    pub fn memcached_with_env(
        extra_args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> anyhow::Result<ServerProcess> {
        const MEMCACHED: &str = "/usr/bin/memcached";
        if !Path::new(MEMCACHED).exists() {
            bail!("{MEMCACHED} is not installed");
        }
        Self::start_with_env(MEMCACHED, extra_args, env)
    }

    /// The port of the launcher's `-l 127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Every TCP port the server listens on, in the order of its `-l` entries (the
    /// launcher's `127.0.0.1` first).
    pub fn tcp_ports(&self) -> Vec<u16> {
        self.server.tcp_ports().collect()
    }

    /// The UDP ports its port file lists (`-U`).
    pub fn udp_ports(&self) -> Vec<u16> {
        self.server.udp_ports().collect()
    }

    /// The server's process id (for `/proc/<pid>/status` checks), if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    /// Sends `signal` (e.g. `libc::SIGINT`) to the server process.
    pub fn signal(&self, signal: i32) -> anyhow::Result<()> {
        self.server.signal(signal)
    }

    /// Waits (bounded) for the server to exit on its own, e.g. after `shutdown`.
    pub fn wait(mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        match self.server.wait_timeout(timeout)? {
            Some(status) => Ok(status),
            None => {
                self.server.kill();
                bail!("server did not exit within {timeout:?}")
            }
        }
    }

    /// SIGTERM, wait (bounded), SIGKILL fallback. Returns the exit status; a SIGKILL
    /// fallback is an error since the server failed to shut down cleanly.
    pub fn stop(mut self) -> anyhow::Result<ExitStatus> {
        self.signal(libc::SIGTERM)?;
        match self.server.wait_timeout(STOP_TIMEOUT)? {
            Some(status) => Ok(status),
            None => {
                self.server.kill();
                bail!("server ignored SIGTERM for {STOP_TIMEOUT:?}; killed")
            }
        }
    }
}

/// The text protocol's `set` of `key` to `value` (flags 0, no expiry), as bytes to send.
pub fn set_request(key: &str, value: &[u8]) -> Vec<u8> {
    let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n");
    request
}

/// Sets SO_LINGER to 0 on `stream`, so that closing it sends a reset, not a FIN (a client
/// that vanishes mid-conversation).
pub fn reset_on_close(stream: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on an open socket with a pointer to a live, correctly sized
    // `linger`.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, `RssAnon`, ...), in KiB.
pub fn proc_status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no {field} in /proc/{pid}/status"))
}

/// How long [`fogcached_refusal`] lets the server run before it kills it (a server that
/// does not refuse to start would otherwise serve on).
const REFUSAL_WAIT: Duration = Duration::from_secs(10);

/// fogcached started with `args` (and `--slow-size 0 -p 0`), the environment variable
/// `env.0` set to `env.1` (or removed when `None`), run until it exits, at most
/// [`REFUSAL_WAIT`]: its exit code (`None` when it had to be killed) and what it printed.
/// For start-up refusals of a bad flag or environment value.
pub fn fogcached_refusal(args: &[&str], env: (&str, Option<&str>)) -> anyhow::Result<ToolRun> {
    let mut command = Command::new(fogcached_binary()?);
    command.args(args).args(["--slow-size", "0", "-p", "0"]);
    match env {
        (name, Some(value)) => command.env(name, value),
        (name, None) => command.env_remove(name),
    };
    run_bounded(&mut command, REFUSAL_WAIT)
}

/// Locates the fogcached binary for tests.
pub fn fogcached_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("FOGCACHED_BIN") {
        return Ok(PathBuf::from(path));
    }
    // Test executables live in target/<profile>/deps/; the binary in target/<profile>/.
    let exe = std::env::current_exe().context("current_exe")?;
    let mut candidates = Vec::new();
    if let Some(deps) = exe.parent() {
        if let Some(profile_dir) = deps.parent() {
            candidates.push(profile_dir.join("fogcached"));
            if let Some(target) = profile_dir.parent() {
                candidates.push(target.join("debug").join("fogcached"));
                candidates.push(target.join("release").join("fogcached"));
            }
        }
    }
    candidates
        .into_iter()
        .find(|path| path.is_file())
        .ok_or_else(|| {
            anyhow!(
                "fogcached binary not found near {}; set FOGCACHED_BIN",
                exe.display()
            )
        })
}

/// A blocking raw-bytes client with read timeouts (default 5 s).
pub struct RawClient {
    stream: TcpStream,
    /// Bytes received beyond the last returned reply (pipelined replies).
    pending: Vec<u8>,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> anyhow::Result<RawClient> {
        let stream = TcpStream::connect_timeout(&addr, READ_TIMEOUT)
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        stream.set_write_timeout(Some(READ_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(RawClient {
            stream,
            pending: Vec::new(),
        })
    }

    /// Changes the read timeout (e.g. shorter for tests expecting silence).
    pub fn set_read_timeout(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.stream.set_read_timeout(Some(timeout))?;
        Ok(())
    }

    /// The underlying socket, for tests needing shutdown(2) or non-blocking tricks.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes).context("sending")?;
        Ok(())
    }

    /// Reads until the accumulated reply ends with `terminator` (e.g. b"END\r\n").
    /// Bytes after the terminator stay buffered for the next read.
    pub fn read_until(&mut self, terminator: &[u8]) -> anyhow::Result<Vec<u8>> {
        if terminator.is_empty() {
            bail!("empty terminator");
        }
        let mut searched_from: usize = 0;
        loop {
            let window_start = searched_from.saturating_sub(terminator.len() - 1);
            if let Some(at) = find(&self.pending[window_start..], terminator) {
                let end = window_start + at + terminator.len();
                let rest = self.pending.split_off(end);
                return Ok(std::mem::replace(&mut self.pending, rest));
            }
            searched_from = self.pending.len();
            if self.pending.len() > REPLY_MAX_BYTES {
                bail!(
                    "reply over {REPLY_MAX_BYTES} bytes without {:?}",
                    escape(terminator)
                );
            }
            if self.fill()? == 0 {
                bail!(
                    "connection closed before {:?}; got {:?}",
                    escape(terminator),
                    escape(&self.pending)
                );
            }
        }
    }

    /// Reads exactly n bytes.
    pub fn read_exact(&mut self, n: usize) -> anyhow::Result<Vec<u8>> {
        while self.pending.len() < n {
            if self.fill()? == 0 {
                bail!(
                    "connection closed after {} of {n} bytes; got {:?}",
                    self.pending.len(),
                    escape(&self.pending)
                );
            }
        }
        let rest = self.pending.split_off(n);
        Ok(std::mem::replace(&mut self.pending, rest))
    }

    /// `set key 0 0 <len>` with `value`, which must be `STORED`.
    pub fn set_value(&mut self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        let reply = self.request(&set_request(key, value), b"\r\n")?;
        anyhow::ensure!(reply == b"STORED\r\n", "set {key}: {}", escape(&reply));
        Ok(())
    }

    /// `get key`: the value, or `None` for a miss.
    pub fn get_value(&mut self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.send(format!("get {key}\r\n").as_bytes())?;
        let line = self.read_until(b"\r\n")?;
        if line == b"END\r\n" {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&line).to_string();
        let len: usize = text
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("get {key}: {text}"))?;
        let mut data = self.read_exact(len + 2)?;
        data.truncate(len);
        let end = self.read_until(b"\r\n")?;
        anyhow::ensure!(end == b"END\r\n", "get {key}: no END but {}", escape(&end));
        Ok(Some(data))
    }

    /// send + read one reply ending with `terminator` (b"\r\n" for a one-line reply).
    pub fn request(&mut self, bytes: &[u8], terminator: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.send(bytes)?;
        self.read_until(terminator)
    }

    /// True if the server closed the connection (read returns 0 or a reset) within the
    /// read timeout. Any bytes received first are kept for later reads.
    pub fn is_closed_by_peer(&mut self) -> bool {
        let deadline = Instant::now() + READ_TIMEOUT.max(Duration::from_secs(1));
        loop {
            match self.fill() {
                Ok(0) => return true,
                Ok(_) => {
                    if self.pending.len() > REPLY_MAX_BYTES || Instant::now() >= deadline {
                        return false;
                    }
                }
                Err(error) => {
                    return error.downcast_ref::<std::io::Error>().is_some_and(|e| {
                        matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)
                    });
                }
            }
        }
    }

    /// `stats [group]` parsed into (name, value) pairs, in the server's order.
    pub fn stats(&mut self, group: &str) -> anyhow::Result<Vec<(String, String)>> {
        let command = if group.is_empty() {
            "stats\r\n".to_owned()
        } else {
            format!("stats {group}\r\n")
        };
        let reply = self.request(command.as_bytes(), b"END\r\n")?;
        let text = String::from_utf8(reply).context("stats reply is not UTF-8")?;
        let mut pairs = Vec::new();
        for line in text.split("\r\n") {
            if line.is_empty() || line == "END" {
                continue;
            }
            let rest = line
                .strip_prefix("STAT ")
                .ok_or_else(|| anyhow!("unexpected stats line {line:?}"))?;
            let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
            pairs.push((name.to_owned(), value.to_owned()));
        }
        Ok(pairs)
    }

    /// Reads once into `pending`; Ok(0) on end of stream. A timeout is an error.
    fn fill(&mut self) -> anyhow::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.pending.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "reading (have {:?})",
                        escape(&self.pending[self.pending.len().saturating_sub(200)..])
                    )))
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Printable form of bytes for error messages.
pub fn escape(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Looks up `name` in parsed `stats` output.
pub fn stat<'a>(stats: &'a [(String, String)], name: &str) -> Option<&'a str> {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The environment variable naming the file that [`report_skip`] appends its lines to;
/// `scripts/test.sh` sets it and lists the lines under its summary.
pub const SKIP_LOG_ENV: &str = "FOGCACHED_SKIP_LOG";

/// Says that a test did not check (all of) what it is for, and why: prints
/// `SKIP <test>: <reason>` on stderr and appends the same line to the file
/// `$FOGCACHED_SKIP_LOG` names, so that a skip is counted in the CI summary instead of
/// passing silently (the test harness hides a passing test's stderr). Use it through
/// [`skip!`](crate::skip), which names the test by its module path.
///
/// A skip is for a precondition this machine lacks (no DAX mount, no NUMA node), never
/// for a failure: a problem the test can see must fail it.
pub fn report_skip(test: &str, reason: &str) {
    // One line per skip, whatever the reason holds.
    let reason = reason.replace(['\r', '\n'], " ");
    let line = format!("SKIP {test}: {reason}\n");
    eprint!("{line}");
    let Some(path) = std::env::var_os(SKIP_LOG_ENV) else {
        return;
    };
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        // One write of a short line with O_APPEND: lines from tests running in parallel
        // processes do not interleave.
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(error) = appended {
        // The skip is still on stderr; losing it from the summary must not pass quietly.
        panic!(
            "cannot append the skip to {} (${SKIP_LOG_ENV}): {error}",
            Path::new(&path).display()
        );
    }
}

/// `skip!("test_name", "reason {}", args)`: [`report_skip`] with the test named
/// `<module path>::test_name`.
#[macro_export]
macro_rules! skip {
    ($test:expr, $($reason:tt)+) => {
        $crate::report_skip(
            &format!("{}::{}", module_path!(), $test),
            &format!($($reason)+),
        )
    };
}

/// What an external tool (`memccapable`, `memcaslap`, ...) did: its exit status and all
/// it printed.
pub struct ToolRun {
    pub success: bool,
    /// The exit code; `None` when it was killed (by a signal, or at the timeout).
    pub code: Option<i32>,
    /// stdout followed by stderr.
    pub output: String,
}

/// Runs `command` to completion, killing it after `timeout`; captures all its output.
pub fn run_bounded(command: &mut Command, timeout: Duration) -> anyhow::Result<ToolRun> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {command:?}"))?;
    // Readers on their own threads, so a chatty tool never blocks on a full pipe.
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let stdout_reader = std::thread::spawn(move || read_all(stdout));
    let stderr_reader = std::thread::spawn(move || read_all(stderr));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut output = stdout_reader.join().unwrap_or_default();
    output.push_str(&stderr_reader.join().unwrap_or_default());
    match status {
        Some(status) => Ok(ToolRun {
            success: status.success(),
            code: status.code(),
            output,
        }),
        None => bail!("{command:?} did not finish within {timeout:?}; output so far:\n{output}"),
    }
}

fn read_all(mut pipe: impl Read) -> String {
    let mut bytes = Vec::new();
    // A read error just truncates the captured output; the exit status still decides.
    let _ = pipe.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_appended_to_the_skip_log() -> anyhow::Result<()> {
        let log = std::env::temp_dir().join(format!("testkit-skips-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        // The only test in this crate that touches the variable, so no other thread
        // reads it meanwhile.
        let previous = std::env::var_os(SKIP_LOG_ENV);
        std::env::set_var(SKIP_LOG_ENV, &log);
        report_skip("a::b", "no node0\nhere");
        crate::skip!("c", "reason {}", 2);
        match previous {
            Some(value) => std::env::set_var(SKIP_LOG_ENV, value),
            None => std::env::remove_var(SKIP_LOG_ENV),
        }
        let written = std::fs::read_to_string(&log)?;
        std::fs::remove_file(&log)?;
        assert_eq!(
            written,
            "SKIP a::b: no node0 here\nSKIP testkit::tests::c: reason 2\n"
        );
        Ok(())
    }

    #[test]
    fn read_until_keeps_pipelined_rest() -> anyhow::Result<()> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let server = std::thread::spawn(move || -> std::io::Result<()> {
            let (mut s, _) = listener.accept()?;
            s.write_all(b"STORED\r\nEND\r\nSTAT a 1\r\nSTAT b x y\r\nEND\r\n")?;
            Ok(())
        });
        let mut client = RawClient::connect(addr)?;
        assert_eq!(client.read_until(b"\r\n")?, b"STORED\r\n");
        assert_eq!(client.read_exact(5)?, b"END\r\n");
        let reply = client.read_until(b"END\r\n")?;
        assert_eq!(reply, b"STAT a 1\r\nSTAT b x y\r\nEND\r\n");
        assert!(client.is_closed_by_peer());
        server
            .join()
            .map_err(|_| anyhow!("server thread panicked"))??;
        Ok(())
    }
}
