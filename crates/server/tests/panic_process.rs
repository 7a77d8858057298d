//! A panic in any thread of `fogcached` ends the process, loudly (`server::crash`): for
//! each kind of thread the server runs, a test makes that thread panic and checks that
//! the process exits at once with SIGABRT (non-zero), that stderr names the thread and
//! the panic's message and place, and that a restart on the same pool file serves every
//! key that sat in the slow tier before the panic, as after `kill -9`.
//!
//! The panic comes from the test hook (`engine::fault`): a build with the cargo feature
//! `test-hooks` arms it when SIGUSR2 arrives, for the thread named by
//! FOGCACHED_TEST_PANIC_THREAD. The `fogcached` that cargo builds for these tests
//! (`CARGO_BIN_EXE_fogcached`) has the feature: the server's dev-dependency on itself
//! turns it on. The release binary (`FOGCACHED_BIN` in CI) does not, so these tests use
//! the test build always, and fail (never skip) if it lacks the hook.

#[path = "support/metadump.rs"]
mod metadump;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use testkit::{RawClient, ServerProcess};

/// The test build of the server, with the panic hook (see the module comment).
const HOOKED_BIN: &str = env!("CARGO_BIN_EXE_fogcached");
const PANIC_THREAD_ENV: &str = "FOGCACHED_TEST_PANIC_THREAD";
/// What the hooked binary prints at start when the variable is set.
const HOOK_ANNOUNCED: &str = "test build: SIGUSR2 makes thread";
/// What it prints once SIGUSR2 armed the panic.
const HOOK_ARMED: &str = "test build: panic armed for thread";
/// The first words of the panic hook's report (`server::crash::panic_report`).
const REPORT_START: &str = "fogcached: panic in thread '";
/// A bound on the exit after SIGUSR2, against a hang (the crawler, the slowest to reach
/// its panic point, is woken at once; a backtrace of a debug build takes a second or so).
const EXIT_WAIT: Duration = Duration::from_secs(60);

/// Items written before the panic: 3 000 of 1 000 bytes fill the 2 MiB DRAM tier, so
/// the rest sit in the slow tier.
const KEYS: usize = 3000;
const VALUE_BYTES: usize = 1000;

/// A unique data directory (the pool and the server's stderr), removed on drop.
struct DataDir(PathBuf);

impl DataDir {
    fn new(tag: &str) -> DataDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("fogcached-panic-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        DataDir(dir)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What makes the armed thread reach its panic point.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Poke {
    /// Nothing: the thread wakes by itself (a timeout, or the hook's own wake-up).
    Nothing,
    /// A new connection (the listener accepts it).
    Connect,
    /// A request on a new connection (a worker serves it).
    Request,
    /// A GET miss, which the fog layer sends upstream (an upstream loop sends it).
    UpstreamMiss,
}

fn value_of(key: &str) -> Vec<u8> {
    let mut v = format!("{key}:").into_bytes();
    v.resize(VALUE_BYTES, b'a' + (key.len() % 26) as u8);
    v
}

/// Whether a thread named `name` is `target` or one of the numbered set `target-<n>`.
fn is_thread(target: &str, name: &str) -> bool {
    name == target
        || name
            .strip_prefix(target)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Makes the thread `thread` of a server started with `extra` panic once items sit in
/// the slow tier, and checks the exit, the report on stderr, and the restart.
fn a_panic_ends_the_process(thread: &str, extra: &[&str], poke: Poke) -> anyhow::Result<()> {
    let dir = DataDir::new(thread);
    let log = dir.0.join("stderr.log");
    let pool_dir = dir.0.join("data");
    let pool_arg = pool_dir.to_str().expect("UTF-8").to_owned();
    let base = [
        "--data-dir",
        pool_arg.as_str(),
        "--slow-size",
        "64m",
        "--dram",
        "2",
        "-t",
        "2",
    ];
    // The fog layer's upstream: a plain server (the release one in CI is fine here).
    let cloud = match poke {
        Poke::UpstreamMiss => Some(ServerProcess::fogcached(&["--slow-size", "0"])?),
        _ => None,
    };
    let upstream_arg = cloud.as_ref().map(|c| c.addr().to_string());
    let mut args: Vec<&str> = base.to_vec();
    args.extend_from_slice(extra);
    if let Some(addr) = &upstream_arg {
        args.extend_from_slice(&["--upstream", addr]);
    }
    let server = ServerProcess::start_logging(
        HOOKED_BIN,
        &args,
        &[(PANIC_THREAD_ENV, std::ffi::OsStr::new(thread))],
        Some(&log),
    )?;
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        stderr().contains(HOOK_ANNOUNCED),
        "{HOOKED_BIN} has no test hook (it must be the build of `cargo test -p server`, \
         whose dev-dependency turns on the feature test-hooks); it printed: {}",
        stderr()
    );

    // Items in both tiers; which of them sit in the slow tier is what a restart must
    // bring back (DRAM is lost with the process, as after `kill -9`).
    let mut client = RawClient::connect(server.addr())?;
    for i in 0..KEYS {
        let key = format!("p{i}");
        client.set_value(&key, &value_of(&key))?;
    }
    let tiers = metadump::keys_by_tier(&mut client)?;
    assert!(
        tiers.slow.len() >= 100,
        "only {} of {KEYS} items sit in the slow tier",
        tiers.slow.len()
    );
    let slow: HashMap<String, Vec<u8>> = tiers
        .slow
        .iter()
        .map(|key| (key.clone(), value_of(key)))
        .collect();
    drop(client);

    server.signal(libc::SIGUSR2)?;
    // Poked only once the panic is armed (the signal thread says so; it may have
    // panicked already, or the thread may be gone: a failed poke is no failure).
    for _ in 0..EXIT_WAIT.as_millis() / 10 {
        let text = stderr();
        if text.contains(HOOK_ARMED) || text.contains(REPORT_START) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match poke {
        Poke::Nothing => {}
        Poke::Connect => {
            let _ = std::net::TcpStream::connect(server.addr());
        }
        Poke::Request => {
            if let Ok(mut client) = RawClient::connect(server.addr()) {
                let _ = client.request(b"version\r\n", b"\r\n");
            }
        }
        Poke::UpstreamMiss => {
            if let Ok(mut client) = RawClient::connect(server.addr()) {
                let _ = client.request(b"get never-set\r\n", b"END\r\n");
            }
        }
    }
    let status = server.wait(EXIT_WAIT)?;
    assert!(!status.success(), "{thread}: exited with {status}");
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "{thread}: {status}; stderr: {}",
        stderr()
    );
    let text = stderr();
    let report = text
        .lines()
        .find(|line| line.starts_with(REPORT_START))
        .unwrap_or_else(|| panic!("{thread}: no panic report on stderr: {text}"));
    let named = report
        .strip_prefix(REPORT_START)
        .and_then(|rest| rest.split_once("': "));
    let Some((name, rest)) = named else {
        panic!("{thread}: malformed report: {report}");
    };
    assert!(
        is_thread(thread, name),
        "{thread}: the report names {name}: {report}"
    );
    assert!(
        rest.starts_with("injected panic (test hook), at crates/"),
        "{thread}: message and place: {report}"
    );
    assert!(text.contains("stack backtrace:"), "{thread}: {text}");

    // A restart on the same pool: a crash's recovery, every slow-tier item served.
    let server = ServerProcess::start(HOOKED_BIN, &base)?;
    let mut client = RawClient::connect(server.addr())?;
    let stats = client.stats("")?;
    assert_eq!(
        testkit::stat(&stats, "pool_was_clean"),
        Some("0"),
        "{thread}"
    );
    for (key, value) in &slow {
        assert_eq!(
            client.get_value(key)?.as_deref(),
            Some(&value[..]),
            "{thread}: {key}, in the slow tier before the panic, after the restart"
        );
    }
    server.stop()?;
    drop(cloud);
    Ok(())
}

#[test]
fn a_panic_in_the_signal_thread_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-signals", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_the_listener_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-listener", &[], Poke::Connect)
}

#[test]
fn a_panic_in_a_worker_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-worker", &[], Poke::Request)
}

#[test]
fn a_panic_in_an_upstream_loop_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-upstream", &[], Poke::UpstreamMiss)
}

#[test]
fn a_panic_in_the_logger_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-logger", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_the_metrics_endpoint_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process(
        "fc-metrics",
        &["--metrics-listen", "127.0.0.1:0"],
        Poke::Nothing,
    )
}

#[test]
fn a_panic_in_the_clock_thread_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-clock", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_the_dram_lru_maintainer_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-maint-dram", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_the_slow_lru_maintainer_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-maint-slow", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_a_migration_thread_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-migrate", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_the_lru_crawler_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-lru-crawler", &[], Poke::Nothing)
}

#[test]
fn a_panic_in_the_slab_automover_aborts_and_a_restart_recovers() -> anyhow::Result<()> {
    a_panic_ends_the_process("fc-slab-rebal", &[], Poke::Nothing)
}
