//! `memcaslap --verify` (Debian's libmemcached-tools) against fogcached for 10 s: a 9:1
//! get/set load from 2 threads and 16 connections, values of 1 B to 100 KB (so the 64 MB
//! default memory fills and items are evicted), where 10 % of the gets compare the value
//! with what was set. Every verified value must be the one stored, and the tool must see
//! no error reply.
//!
//! What memcaslap reports and what it means:
//! - `verify_failed` counts gets that returned a value other than the one set: must be 0.
//! - `verify_misses` counts verified gets that found nothing. Not an error: the cache is
//!   full and evicts, and memcaslap also gets keys it has not set yet (real memcached
//!   shows thousands of these on the same run).
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
use testkit::{run_bounded, ServerProcess};

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
const RUN_TIME: &str = "10s";
/// Upper bound for the whole run: the load itself takes 10 s.
const TOOL_RUN_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn external_tool_memcaslap_verify_finds_no_errors_on_fogcached() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let workload = WorkloadFile::create()?;
    let port = server.port();
    let run = run_bounded(
        Command::new("memcaslap").args([
            "--servers",
            &format!("127.0.0.1:{port}"),
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
    let shown = excerpt(&run.output);
    println!("memcaslap --verify against fogcached:\n{shown}");
    // The output is printed above (and shown by the test harness on failure).
    assert!(run.success, "memcaslap exited with failure");
    assert_eq!(
        report.counter("verify_failed"),
        Some(0),
        "values differ from the ones set"
    );
    assert!(
        report.error_count == 0,
        "memcaslap saw {} error replies, first ones: {:?}",
        report.error_count,
        report.error_lines
    );
    // A run that did nothing (e.g. every connection refused) must not pass.
    for counter in ["cmd_get", "cmd_set"] {
        assert!(
            report.counter(counter).is_some_and(|n| n > 0),
            "memcaslap reports no {counter}"
        );
    }
    // Each verified get either matched or missed; misses are reads of evicted or not yet
    // set keys, which must not be all of them.
    let verified_gets = report.counter("cmd_get").unwrap_or(0) / 10;
    let verify_misses = report.counter("verify_misses").unwrap_or(u64::MAX);
    assert!(
        verify_misses < verified_gets,
        "every verified get missed: nothing was actually checked"
    );

    // The server survived the load and still answers.
    let mut client = testkit::RawClient::connect(server.addr())?;
    assert_eq!(
        client.request(b"version\r\n", b"\r\n")?.get(..8),
        Some(&b"VERSION "[..])
    );
    server.stop().context("stopping fogcached")?;
    Ok(())
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
