//! `memcaslap --verify` (Debian's libmemcached-tools) against fogcached and, as the
//! baseline, Debian's memcached, the same workload for 8 s each: a 9:1 get/set load from
//! 2 threads and 16 connections, values of 1 B to 100 KB, where 10 % of the gets compare
//! the value with what was set. Both servers have room for everything the run sets, so a
//! server that keeps its items answers (nearly) every get with a hit.
//!
//! What is checked, on both servers:
//! - memcaslap only gets keys it has set (and saw `STORED` for), so `get_misses` in the
//!   server's own `stats` after the run, over its `cmd_get`, must stay under 1 %, and
//!   fogcached's ratio must be no worse than memcached's plus a small margin. A server
//!   that drops or loses items shows here.
//! - `verify_failed` counts gets that returned a value other than the one set: must be 0.
//! - A line starting with `<` is printed for every `ERROR`, `CLIENT_ERROR`,
//!   `SERVER_ERROR`, `NOT_STORED` or `EXISTS` reply: there must be none.
//!
//! Not used, because they fail against real memcached 1.6 too: `--binary` (verify_failed
//! on most gets) and `--overwrite` with `--verify` (verify_failed on overwritten keys).
//!
//! The test name starts with `external_tool_` so that `scripts/test.sh` runs it in a step
//! of its own, with the tool output shown.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use testkit::{run_bounded, stat, RawClient, ServerProcess};

/// memcaslap's `--cfg_cmd` file: key sizes, value sizes (bytes) and the command mix
/// (type 0 = set, 1 = get). Passing it also keeps a `~/.memaslap.cnf` from changing the
/// run.
const WORKLOAD: &str = "\
key
16 100 1
value
1 1000 0.8
1001 10000 0.15
10001 100000 0.05
cmd
0 0.1
1 0.9
";
/// Per server. At the ~40-60 k operations a second seen here the run sets 150-250 MB of
/// values, well inside both servers' memory (below), so nothing needs to be evicted.
const RUN_TIME: &str = "8s";
/// Upper bound for one run: the load itself takes 8 s.
const TOOL_RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// fogcached's defaults: a 64 MB DRAM tier over a 1 GiB slow tier.
const FOGCACHED_ARGS: &[&str] = &[];
/// memcached with 1 GiB, the room fogcached's slow tier gives.
const MEMCACHED_ARGS: &[&str] = &["-m", "1024"];
/// get_misses / cmd_get a server that keeps what it stores stays below (both servers
/// show 0 on this workload).
const MISS_RATIO_MAX: f64 = 0.01;
/// How much fogcached's miss ratio may exceed memcached's.
const MISS_RATIO_MARGIN: f64 = 0.002;

#[test]
fn external_tool_memcaslap_verify_keeps_every_item_on_fogcached_as_memcached_does(
) -> anyhow::Result<()> {
    let workload = WorkloadFile::create()?;
    let memcached = ServerProcess::memcached(MEMCACHED_ARGS)?;
    let baseline = run_and_check("memcached", &memcached, &workload)?;
    drop(memcached);
    let fogcached = ServerProcess::fogcached(FOGCACHED_ARGS)?;
    let ours = run_and_check("fogcached", &fogcached, &workload)?;
    println!(
        "get_misses / cmd_get: fogcached {} / {} = {:.5}, memcached {} / {} = {:.5}",
        ours.get_misses,
        ours.cmd_get,
        ours.miss_ratio(),
        baseline.get_misses,
        baseline.cmd_get,
        baseline.miss_ratio()
    );
    // The workload itself must be one that keeps every item: checked on the reference.
    assert!(
        baseline.miss_ratio() < MISS_RATIO_MAX,
        "memcached misses {:.3} of its gets: the workload does not fit its memory",
        baseline.miss_ratio()
    );
    assert!(
        ours.miss_ratio() < MISS_RATIO_MAX,
        "fogcached misses {:.3} of its gets ({} of {}, {} evictions) on a workload that \
         fits its memory: items are lost",
        ours.miss_ratio(),
        ours.get_misses,
        ours.cmd_get,
        ours.evictions
    );
    assert!(
        ours.miss_ratio() <= baseline.miss_ratio() + MISS_RATIO_MARGIN,
        "fogcached misses {:.5} of its gets, memcached {:.5}",
        ours.miss_ratio(),
        baseline.miss_ratio()
    );
    // The server survived the load and still answers.
    let mut client = RawClient::connect(fogcached.addr())?;
    assert_eq!(
        client.request(b"version\r\n", b"\r\n")?.get(..8),
        Some(&b"VERSION "[..])
    );
    fogcached.stop().context("stopping fogcached")?;
    Ok(())
}

/// What a server's own `stats` said after a run.
struct ServerGets {
    cmd_get: u64,
    get_misses: u64,
    evictions: u64,
}

impl ServerGets {
    fn miss_ratio(&self) -> f64 {
        self.get_misses as f64 / self.cmd_get.max(1) as f64
    }
}

/// Runs memcaslap against `server`, checks what must hold on any conforming server (no
/// error reply, no wrong value, work actually done) and returns the server's get counts.
fn run_and_check(
    name: &str,
    server: &ServerProcess,
    workload: &WorkloadFile,
) -> anyhow::Result<ServerGets> {
    let run = run_bounded(
        Command::new("memcaslap").args([
            "--servers",
            &format!("127.0.0.1:{}", server.port()),
            "--cfg_cmd",
            workload.path_str()?,
            "--time",
            RUN_TIME,
            "--verify",
            "0.1",
            "--threads",
            "2",
            "--concurrency",
            "16",
        ]),
        TOOL_RUN_TIMEOUT,
    )
    .context(
        "running memcaslap (Debian package libmemcached-tools; scripts/test.sh installs it)",
    )?;
    let report = Report::parse(&run.output);
    // memcaslap prints a line per error reply, possibly millions: show a bounded excerpt.
    println!(
        "memcaslap --verify against {name}:\n{}",
        excerpt(&run.output)
    );
    assert!(run.success, "memcaslap against {name} exited with failure");
    assert_eq!(
        report.counter("verify_failed"),
        Some(0),
        "{name} returned values that differ from the ones set"
    );
    assert!(
        report.error_count == 0,
        "memcaslap saw {} error replies from {name}, first ones: {:?}",
        report.error_count,
        report.error_lines
    );
    // A run that did nothing (e.g. every connection refused) must not pass.
    for counter in ["cmd_get", "cmd_set"] {
        assert!(
            report.counter(counter).is_some_and(|n| n > 0),
            "memcaslap reports no {counter} against {name}"
        );
    }
    // Values were actually compared: not every verified get missed.
    let verified_gets = report.counter("cmd_get").unwrap_or(0) / 10;
    let verify_misses = report.counter("verify_misses").unwrap_or(u64::MAX);
    assert!(
        verify_misses < verified_gets,
        "every verified get against {name} missed: nothing was actually checked"
    );
    let stats = RawClient::connect(server.addr())?.stats("")?;
    let counter = |field: &str| -> anyhow::Result<u64> {
        stat(&stats, field)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{name} stats has no number {field}"))
    };
    let gets = ServerGets {
        cmd_get: counter("cmd_get")?,
        get_misses: counter("get_misses")?,
        evictions: counter("evictions")?,
    };
    println!(
        "{name} stats: cmd_get {} get_misses {} evictions {}; memcaslap get_misses {:?}",
        gets.cmd_get,
        gets.get_misses,
        gets.evictions,
        report.counter("get_misses")
    );
    // The server counted the tool's gets (its own counters are what is judged).
    assert!(
        gets.cmd_get >= report.counter("cmd_get").unwrap_or(0) / 2,
        "{name} counted {} gets, memcaslap sent {:?}",
        gets.cmd_get,
        report.counter("cmd_get")
    );
    Ok(gets)
}

/// Lines of the tool's output shown at each end of an excerpt.
const EXCERPT_LINES: usize = 40;

/// The first and last `EXCERPT_LINES` lines of `output`, with a count of those left out.
fn excerpt(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    if lines.len() <= 2 * EXCERPT_LINES {
        return output.to_owned();
    }
    format!(
        "{}\n[... {} lines left out ...]\n{}",
        lines[..EXCERPT_LINES].join("\n"),
        lines.len() - 2 * EXCERPT_LINES,
        lines[lines.len() - EXCERPT_LINES..].join("\n")
    )
}

/// Error lines kept verbatim in a [`Report`]; the rest are only counted.
const ERROR_LINES_KEPT: usize = 10;

/// memcaslap's final counters (`name: value` lines) and its error lines.
struct Report {
    counters: Vec<(String, u64)>,
    error_count: usize,
    /// The first `ERROR_LINES_KEPT` error lines.
    error_lines: Vec<String>,
}

impl Report {
    fn parse(output: &str) -> Report {
        let mut counters = Vec::new();
        let mut error_count = 0;
        let mut error_lines = Vec::new();
        for line in output.lines() {
            if line.starts_with('<') {
                error_count += 1;
                if error_lines.len() < ERROR_LINES_KEPT {
                    error_lines.push(line.to_owned());
                }
            } else if let Some((name, value)) = line.split_once(": ") {
                if let Ok(value) = value.trim().parse::<u64>() {
                    counters.push((name.trim().to_owned(), value));
                }
            }
        }
        Report {
            counters,
            error_count,
            error_lines,
        }
    }

    fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// The workload file in the system temp dir, removed on drop.
struct WorkloadFile {
    path: PathBuf,
}

impl WorkloadFile {
    fn create() -> anyhow::Result<WorkloadFile> {
        let path =
            std::env::temp_dir().join(format!("fogcached-memcaslap-{}.cnf", std::process::id()));
        std::fs::write(&path, WORKLOAD).with_context(|| format!("writing {}", path.display()))?;
        Ok(WorkloadFile { path })
    }

    fn path_str(&self) -> anyhow::Result<&str> {
        self.path.to_str().context("temp dir path is not UTF-8")
    }
}

impl Drop for WorkloadFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn report_parses_counters_and_error_lines() {
    let output =
        "servers: 127.0.0.1:1\ncmd_get: 10\nverify_failed: 0\n<12 SERVER_ERROR out of memory\n\
                  Run time: 10.0s Ops: 11 TPS: 1 Net_rate: 0.0M/s\n";
    let report = Report::parse(output);
    assert_eq!(report.counter("cmd_get"), Some(10));
    assert_eq!(report.counter("verify_failed"), Some(0));
    assert_eq!(report.counter("servers"), None);
    assert_eq!(report.error_count, 1);
    assert_eq!(report.error_lines, vec!["<12 SERVER_ERROR out of memory"]);
}
