//! Replays the committed corpora of the parser fuzz targets (`fuzz/corpus/{text,meta,
//! binary}`) through the checks the targets make, as an ordinary test: CI checks every
//! input the fuzzer kept, and every crash it found (kept as `regressions/`), without
//! running the fuzzer. The replayer is testkit's, shared with the server's targets.

#[path = "support/fuzz_protocol.rs"]
mod fuzz_protocol;

use testkit::replay_fuzz_corpus as replay;

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
