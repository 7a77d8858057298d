//! The `fogbench run` binary as a child process of a test: started with `--server`,
//! `--quiet` and `--json`, waited for within a bound, its JSON report read back. Shared by
//! the tests that drive fogbench against real servers (`end_to_end.rs`, `fog_layer.rs`,
//! `ketama_placement.rs`, `soak.rs`).

// Each test binary that includes this uses only some of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A fogbench run that has not finished by then is a hang, not a slow machine.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts `fogbench run --server <server> --quiet --json <json> <args...>`.
pub fn spawn(server: &str, json: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fogbench"))
        .arg("run")
        .args(["--server", server, "--quiet", "--json"])
        .arg(json)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawning fogbench")
}

/// Waits for `child` (killed, and the test failed, past [`RUN_TIMEOUT`]), then reads and
/// removes the report it wrote to `json`: (exit code, report).
pub fn finish(child: Child, json: &Path) -> (Option<i32>, Value) {
    finish_within(child, json, RUN_TIMEOUT)
}

/// [`finish`] for a run that may take up to `timeout`.
pub fn finish_within(mut child: Child, json: &Path, timeout: Duration) -> (Option<i32>, Value) {
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for fogbench") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fogbench did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(json).expect("fogbench wrote no JSON report");
    let _ = std::fs::remove_file(json);
    (
        status.code(),
        serde_json::from_str(&text).expect("the report is JSON"),
    )
}
