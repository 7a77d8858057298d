//! `memccapable` (Debian's libmemcached-tools) against fogcached: every one of its ASCII and
//! binary protocol checks must pass.
//!
//! The tool prints one line per check, `ascii set                 [pass]`, and
//! `All tests passed` at the end. Debian's build (libmemcached 1.1.4) runs 27 ASCII and
//! 27 binary checks; the same harness runs against Debian's memcached 1.6 as a baseline,
//! so a change of the tool's output is told apart from a fogcached regression.
//!
//! The test names start with `external_tool_` so that `scripts/test.sh` can run them in a
//! step of their own, with the tool output shown.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use testkit::{run_bounded, ServerProcess, ToolRun};

/// Checks memccapable runs against a conforming server (27 ASCII + 27 binary).
const EXPECTED_CHECKS: usize = 54;
/// memccapable's own per-I/O timeout, in seconds (its `-t`).
const TOOL_IO_TIMEOUT_S: &str = "5";
/// Upper bound for the whole run; a conforming server needs about a second.
const TOOL_RUN_TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn external_tool_memccapable_passes_every_check_on_fogcached() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let run = run_memccapable(server.port(), &[])?;
    println!("memccapable against fogcached:\n{}", run.output);
    // A failing check is re-run alone with -v, which names the assertion that failed.
    for (name, verdict) in check_lines(&run.output) {
        if verdict != "pass" {
            let detail = run_memccapable(server.port(), &["-v", "-T", name])?;
            println!("memccapable -v -T {name:?}:\n{}", detail.output);
        }
    }
    assert_all_checks_pass(&run);
    server.stop().context("stopping fogcached")?;
    Ok(())
}

/// The baseline: the same harness against Debian's memcached 1.6 must pass too, otherwise
/// the tool (not fogcached) changed.
#[test]
fn external_tool_memccapable_passes_every_check_on_memcached() -> anyhow::Result<()> {
    let server = ServerProcess::memcached(&[])?;
    let run = run_memccapable(server.port(), &[])?;
    assert_all_checks_pass(&run);
    Ok(())
}

/// One check line of memccapable's output, e.g. ("binary getq", "pass").
fn check_lines(output: &str) -> Vec<(&str, &str)> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim_end();
            let verdict = line.strip_suffix(']')?;
            let open = verdict.rfind('[')?;
            let name = verdict[..open].trim();
            if !(name.starts_with("ascii ") || name.starts_with("binary ")) {
                return None;
            }
            Some((name, &verdict[open + 1..]))
        })
        .collect()
}

fn assert_all_checks_pass(run: &ToolRun) {
    let checks = check_lines(&run.output);
    let failed: Vec<String> = checks
        .iter()
        .filter(|(_, verdict)| *verdict != "pass")
        .map(|(name, verdict)| format!("{name}: {verdict}"))
        .collect();
    assert!(
        failed.is_empty(),
        "memccapable checks not passing: {failed:?}\nfull output:\n{}",
        run.output
    );
    assert_eq!(
        checks.len(),
        EXPECTED_CHECKS,
        "memccapable ran {} checks, expected {EXPECTED_CHECKS}\nfull output:\n{}",
        checks.len(),
        run.output
    );
    assert!(
        run.output.contains("All tests passed"),
        "memccapable did not report success\nfull output:\n{}",
        run.output
    );
    assert!(
        run.success,
        "memccapable exited with failure\nfull output:\n{}",
        run.output
    );
}

fn run_memccapable(port: u16, extra_args: &[&str]) -> anyhow::Result<ToolRun> {
    let port = port.to_string();
    // memccapable prints a check's name to stdout and "[FAIL]" to stderr. Unbuffered
    // stdout (stdbuf, coreutils) and both streams on one pipe keep each verdict on its
    // check's line.
    run_bounded(
        Command::new("sh")
            .args([
                "-c",
                "exec stdbuf -o0 memccapable \"$@\" 2>&1",
                "memccapable",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                TOOL_IO_TIMEOUT_S,
            ])
            .args(extra_args),
        TOOL_RUN_TIMEOUT,
    )
    .context("running memccapable (Debian package libmemcached-tools; scripts/test.sh installs it)")
}

#[test]
fn check_lines_parses_pass_and_fail() {
    let output = "ascii version                           [pass]\n\
                  binary getq                             [FAIL]\n\
                  some other line\n\
                  All tests passed\n";
    assert_eq!(
        check_lines(output),
        vec![("ascii version", "pass"), ("binary getq", "FAIL")]
    );
}
