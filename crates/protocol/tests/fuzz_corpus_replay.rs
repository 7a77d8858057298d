//! Replays the committed corpora of the parser fuzz targets (`fuzz/corpus/{text,meta,
//! binary}`) through the checks the targets make, as an ordinary test: CI checks every
//! input the fuzzer kept, and every crash it found (kept as `regressions/`), without
//! running the fuzzer.

#[path = "support/fuzz_protocol.rs"]
mod fuzz_protocol;

use std::path::PathBuf;

/// Runs `check` over every file of `fuzz/corpus/<target>` and `fuzz/regressions/<target>`;
/// returns how many there were.
fn replay(target: &str, check: fn(&[u8])) -> std::io::Result<usize> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
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

#[test]
fn the_text_parser_corpus_passes_its_checks() -> std::io::Result<()> {
    let replayed = replay("text", fuzz_protocol::text)?;
    assert!(replayed >= 20, "only {replayed} inputs in fuzz/corpus/text");
    Ok(())
}

#[test]
fn the_meta_parser_corpus_passes_its_checks() -> std::io::Result<()> {
    let replayed = replay("meta", fuzz_protocol::meta)?;
    assert!(replayed >= 20, "only {replayed} inputs in fuzz/corpus/meta");
    Ok(())
}

#[test]
fn the_binary_parser_corpus_passes_its_checks() -> std::io::Result<()> {
    let replayed = replay("binary", fuzz_protocol::binary)?;
    assert!(
        replayed >= 20,
        "only {replayed} inputs in fuzz/corpus/binary"
    );
    Ok(())
}
