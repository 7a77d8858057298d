//! The one replayer of the committed fuzz corpora: every input a fuzz target kept
//! (`fuzz/corpus/<target>`) and every crash it found (`fuzz/regressions/<target>`) run
//! through that target's checks as an ordinary test, so CI checks them without running
//! the fuzzer. The protocol crate replays its parser targets with it, the server crate
//! its own.

use std::path::PathBuf;

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Runs `check` over every file of `fuzz/corpus/<target>` and `fuzz/regressions/<target>`,
/// naming the file that fails; returns how many there were (a missing corpus replays
/// none: the callers assert a count).
pub fn replay_fuzz_corpus(target: &str, check: fn(&[u8])) -> std::io::Result<usize> {
    let fuzz = fuzz_dir();
    let mut replayed = 0;
    // The corpus, and the inputs that once failed (kept apart: `cargo fuzz cmin` may drop
    // them from the corpus when they add no coverage).
    for dir in [
        fuzz.join("corpus").join(target),
        fuzz.join("regressions").join(target),
    ] {
        if !dir.exists() {
            // A target without regressions; a missing corpus fails the callers' count.
            continue;
        }
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let input = std::fs::read(&path)?;
            let outcome = std::panic::catch_unwind(|| check(&input));
            assert!(outcome.is_ok(), "{} fails its checks", path.display());
            replayed += 1;
        }
    }
    Ok(replayed)
}
