//! What the tests that run the `fogsim` binary share: running it, bounded, and where to
//! put the files it writes.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use testkit::run_bounded;

/// Far above what these runs take; only a hang reaches it.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `fogsim` with `args`: whether it exited 0, and all it printed.
pub fn fogsim(args: &[&str]) -> (bool, String) {
    let run = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_fogsim")).args(args),
        RUN_TIMEOUT,
    )
    .unwrap();
    (run.success, run.output)
}

/// A path under the temp dir for a file a run writes, unique to the process and `name`.
pub fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fogsim-test-{}-{name}", std::process::id()))
}
